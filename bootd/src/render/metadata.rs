//! Equinix-Metal-style metadata (`GET /metadata`) for the requesting node,
//! so tools written for Packet's metadata service work against bootd.

use super::fqdn;
use serde_json::{json, Value};
use site::{Node, Site};

pub fn metadata(site: &Site, node: &Node) -> Value {
    let net = &site.networks[node.network];
    let addresses: Vec<Value> = node
        .ips()
        .map(|ip| {
            let sub = net.subnet_of(ip);
            let (netmask, network, cidr) = match sub.map(|s| s.net) {
                Some(ipnet::IpNet::V4(n)) => (
                    n.netmask().to_string(),
                    n.network().to_string(),
                    n.prefix_len(),
                ),
                Some(ipnet::IpNet::V6(n)) => (
                    n.netmask().to_string(),
                    n.network().to_string(),
                    n.prefix_len(),
                ),
                None => (String::new(), String::new(), 0),
            };
            json!({
                "address_family": if ip.is_ipv4() { 4 } else { 6 },
                "public": false,
                "management": true,
                "address": ip.to_string(),
                "netmask": netmask,
                "network": network,
                "cidr": cidr,
                "gateway": sub.and_then(|s| s.gateway).map(|g| g.to_string()),
            })
        })
        .collect();
    let interfaces: Vec<Value> = node
        .macs
        .iter()
        .enumerate()
        .map(|(i, m)| json!({ "name": format!("eth{i}"), "mac": m.to_string() }))
        .collect();
    json!({
        "id": node.name,
        "hostname": fqdn(site, node),
        "class": node.arch.as_str(),
        "tags": [format!("role:{}", node.role), format!("cluster:{}", site.cluster.domain())],
        "ssh_keys": site.ssh_keys,
        "network": {
            "interfaces": interfaces,
            "addresses": addresses,
            "dns": net.dns_servers.iter().map(|d| d.to_string()).collect::<Vec<_>>(),
        },
    })
}
