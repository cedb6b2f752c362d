//! Node addresses as the API shows and assigns them.

use serde_json::Value;

/// A node's `ip` as the site writes it: one address, or a list of one per family.
pub(crate) fn ip_json(n: &site::Node) -> Value {
    let v: Vec<Value> = n.ips().map(|a| Value::String(a.to_string())).collect();
    match v.as_slice() {
        [one] => one.clone(),
        _ => Value::Array(v),
    }
}

/// The first address of the network holding `near` (else of the first
/// network with a pool) that no node, VIP, gateway, DNS server, this host
/// or the dynamic pool uses.
pub(crate) fn free_address(
    site: &site::Site,
    near: Option<std::net::IpAddr>,
) -> Option<std::net::Ipv4Addr> {
    let net = site
        .networks
        .iter()
        .find(|n| near.is_some_and(|a| n.contains(a)))
        .or_else(|| {
            site.networks
                .iter()
                .find(|n| n.v4().is_some_and(|s| s.pool.is_some()))
        })?;
    let sub = net.v4()?;
    let ipnet::IpNet::V4(v4) = sub.net else {
        return None;
    };
    let mut used: Vec<std::net::IpAddr> = site.nodes.iter().flat_map(|n| n.ips()).collect();
    used.extend(site.vips.apis().chain(site.vips.ingresses()));
    used.extend(sub.gateway);
    used.extend(net.dns_servers.iter().copied());
    if let Some(d) = &site.host.dhcp {
        used.push(std::net::IpAddr::V4(d.server_address));
    }
    v4.hosts().find(|h| {
        let a = std::net::IpAddr::V4(*h);
        let in_pool = sub.pool.is_some_and(|(s, e)| a >= s && a <= e);
        !in_pool && !used.contains(&a)
    })
}
