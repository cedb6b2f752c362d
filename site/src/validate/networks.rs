//! Stage two for `networks[]`: each network's subnets (one per family), gateways and pools.

use super::*;

/// Why `net` cannot be a link's subnet: multicast, or IPv6 link-local
/// (every link has fe80::/64 already; DHCPv6 hands out global or ULA
/// addresses).
fn not_a_link(net: &IpNet) -> Option<&'static str> {
    match net.addr() {
        a if a.is_multicast() => Some("is multicast: give the link's unicast subnet"),
        IpAddr::V6(a) if a.segments()[0] & 0xffc0 == 0xfe80 => Some(
            "is link-local: every link has fe80::/64 already; give its global or ULA (fd00::/8) prefix",
        ),
        _ => None,
    }
}

/// No DHCP pool holds an address something else answers on: the subnet's
/// gateway, its DNS servers, the DHCP servers' own addresses or a VIP. The
/// pool would give it to a client. Nodes' reserved addresses in a pool are
/// fine: the pool skips them.
pub(super) fn pools_hold_no_service(
    cx: &mut Cx,
    w: &[wire::Network],
    networks: &[Network],
    host: Option<&Host>,
    vips: Option<&Vips>,
) {
    let mut services: Vec<(String, IpAddr)> = Vec::new();
    if let Some(h) = host {
        if let Some(d) = &h.dhcp {
            services.push((
                "host.dhcp.serverAddress".into(),
                IpAddr::V4(d.server_address),
            ));
        }
        if let Some(d) = &h.dhcp6 {
            services.push((
                "host.dhcp6.serverAddress".into(),
                IpAddr::V6(d.server_address),
            ));
        }
    }
    if let Some(v) = vips {
        let named = [
            ("vips.api", Some(v.api)),
            ("vips.ingress", Some(v.ingress)),
            ("vips.api", v.api_v6),
            ("vips.ingress", v.ingress_v6),
            ("vips.boot", v.boot),
        ];
        services.extend(
            named
                .into_iter()
                .filter_map(|(k, a)| Some((k.to_string(), a?))),
        );
    }
    for (i, wn) in w.iter().enumerate() {
        let name = wn.name.clone().unwrap_or_else(|| format!("net{i}"));
        let Some(n) = networks.iter().find(|n| n.name == name) else {
            continue;
        };
        let mut here = services.clone();
        here.extend(
            n.dns_servers
                .iter()
                .map(|a| (format!("networks[{i}].dnsServers"), *a)),
        );
        for s in &n.subnets {
            let Some((start, end)) = s.pool else { continue };
            here.extend(s.gateway.map(|g| (format!("networks[{i}].gateway"), g)));
            for (what, a) in &here {
                if (start..=end).contains(a) {
                    cx.err(
                        format!("networks[{i}].pool"),
                        format!(
                            "{start}-{end} holds {a} ({what}): a client could be given it; \
                             start the pool after it or end it before"
                        ),
                    );
                }
            }
        }
    }
}

pub(super) fn networks(
    cx: &mut Cx,
    w: &[wire::Network],
    ic: Option<&InstallConfig>,
) -> Vec<Network> {
    let mut out = Vec::new();
    for (i, n) in w.iter().enumerate() {
        let k = |f: &str| format!("networks[{i}].{f}");
        let Some(written) = n.subnet.as_ref() else {
            cx.err(k("subnet"), "required (CIDR, e.g. 10.0.0.0/24 or fd00:10::/64; a list of one of each for dual stack)");
            continue;
        };
        let listed = |f: &str, is_list: bool, j: usize| {
            if is_list {
                format!("networks[{i}].{f}[{j}]")
            } else {
                k(f)
            }
        };
        let mut subnets: Vec<Subnet> = Vec::new();
        let mut bad = false;
        for (j, s) in written.items().into_iter().enumerate() {
            let key = listed("subnet", written.is_list(), j);
            match s.parse::<IpNet>() {
                Ok(net) if net.trunc() != net => {
                    cx.err(
                        key,
                        format!("{s:?} has host bits set; did you mean {}?", net.trunc()),
                    );
                    bad = true;
                }
                Ok(net) if net.prefix_len() == 0 => {
                    cx.err(
                        key,
                        format!("{s:?} is every address: give the link's prefix"),
                    );
                    bad = true;
                }
                Ok(net) if not_a_link(&net).is_some() => {
                    cx.err(
                        key,
                        format!("{net} {}", not_a_link(&net).unwrap_or_default()),
                    );
                    bad = true;
                }
                Ok(net)
                    if subnets
                        .iter()
                        .any(|o| o.net.addr().is_ipv4() == net.addr().is_ipv4()) =>
                {
                    cx.err(
                        key,
                        format!("a second IPv{} subnet ({net}): a network has at most one subnet per family", if net.addr().is_ipv4() { 4 } else { 6 }),
                    );
                    bad = true;
                }
                Ok(net) => subnets.push(Subnet {
                    net,
                    gateway: None,
                    pool: None,
                }),
                Err(_) => {
                    cx.err(key, format!("{s:?} is not a CIDR"));
                    bad = true;
                }
            }
        }
        if subnets.is_empty() {
            if !bad {
                cx.err(k("subnet"), "an empty list: give at least one CIDR");
            }
            continue;
        }
        subnets.sort_by_key(|s| s.net.addr().is_ipv6());
        let nets: Vec<IpNet> = subnets.iter().map(|s| s.net).collect();
        // The subnet of `a`'s family, or a problem naming the key.
        let inside = |cx: &mut Cx, key: String, s: &str| -> Option<(usize, IpAddr)> {
            let a = parse_ip(cx, &key, s)?;
            match nets.iter().position(|n| n.contains(&a)) {
                Some(p) => Some((p, a)),
                None => {
                    let text = nets
                        .iter()
                        .map(|n| n.to_string())
                        .collect::<Vec<_>>()
                        .join(", ");
                    cx.err(key, format!("{a} is outside subnet {text}"));
                    None
                }
            }
        };
        if let Some(g) = &n.gateway {
            for (j, s) in g.items().into_iter().enumerate() {
                let key = listed("gateway", g.is_list(), j);
                if let Some((p, a)) = inside(cx, key.clone(), s) {
                    if subnets[p].gateway.is_some() {
                        cx.err(
                            key,
                            format!("a second gateway in {}: one per family", subnets[p].net),
                        );
                    } else {
                        subnets[p].gateway = Some(a);
                    }
                }
            }
        }
        if let Some(pools) = &n.pool {
            for (j, p) in pools.items().into_iter().enumerate() {
                let pk = listed("pool", pools.is_list(), j);
                let start = p
                    .start
                    .as_deref()
                    .and_then(|s| inside(cx, format!("{pk}.start"), s));
                let end = p
                    .end
                    .as_deref()
                    .and_then(|s| inside(cx, format!("{pk}.end"), s));
                if p.start.is_none() || p.end.is_none() {
                    cx.err(pk.clone(), "needs both start and end");
                }
                match (start, end) {
                    (Some((x, a)), Some((y, b))) if x != y => cx.err(
                        pk,
                        format!("start {a} and end {b} are in different subnets"),
                    ),
                    (Some((_, a)), Some((_, b))) if a > b => {
                        cx.err(pk, format!("start {a} is after end {b}"))
                    }
                    (Some((x, a)), Some((_, b))) if subnets[x].pool.is_some() => cx.err(
                        pk,
                        format!(
                            "a second pool in {} ({a}-{b}): one per family",
                            subnets[x].net
                        ),
                    ),
                    (Some((x, a)), Some((_, b))) => subnets[x].pool = Some((a, b)),
                    _ => {}
                }
            }
        }
        let dns_servers = n
            .dns_servers
            .iter()
            .enumerate()
            .filter_map(|(j, s)| parse_ip(cx, &k(&format!("dnsServers[{j}]")), s))
            .collect();
        out.push(Network {
            name: n.name.clone().unwrap_or_else(|| format!("net{i}")),
            subnets,
            dns_servers,
        });
    }
    if let Some(ic) = ic {
        if w.is_empty() {
            for (i, m) in ic.machine_networks.iter().enumerate() {
                out.push(Network {
                    name: format!("machine{i}"),
                    subnets: vec![Subnet {
                        net: *m,
                        gateway: None,
                        pool: None,
                    }],
                    dns_servers: vec![],
                });
            }
        } else {
            for m in &ic.machine_networks {
                if !out.iter().any(|n| n.subnets.iter().any(|s| s.net == *m)) {
                    cx.err(
                        "networks",
                        format!("no subnet equals machineNetwork {m} of {}; list it here or fix the install-config", ic.path.display()),
                    );
                }
            }
        }
    }
    out
}
