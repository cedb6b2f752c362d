//! The NMState subset a node's `networkConfig` takes (the shape of
//! install-config's `platform.baremetal.hosts[].networkConfig`): Ethernet,
//! bond and VLAN interfaces, static or DHCP addressing per family, routes
//! in the main table, resolvers. Stage one ([`NetworkConfig`], as written,
//! kebab-case keys as NMState spells them) and stage two ([`resolve`]:
//! every problem with its key path, or the [`NodeNetwork`]).
//! Anything NMState has beyond this is refused by name, never ignored.

use crate::model::netconf::*;
use crate::Mac;
use ipnet::IpNet;
use std::net::IpAddr;

mod wire;
pub use wire::*;

/// The bonding options NetworkManager's `[bond]` section and the kernel
/// take (Documentation/networking/bonding.rst); others are refused.
pub const BOND_OPTIONS: &[&str] = &[
    "ad_actor_sys_prio",
    "ad_actor_system",
    "ad_select",
    "ad_user_port_key",
    "all_slaves_active",
    "arp_all_targets",
    "arp_interval",
    "arp_ip_target",
    "arp_validate",
    "downdelay",
    "fail_over_mac",
    "lacp_rate",
    "lp_interval",
    "miimon",
    "min_links",
    "num_grat_arp",
    "num_unsol_na",
    "packets_per_slave",
    "peer_notif_delay",
    "primary",
    "primary_reselect",
    "resend_igmp",
    "tlb_dynamic_lb",
    "updelay",
    "use_carrier",
    "xmit_hash_policy",
];

/// An interface name the kernel takes: 1-15 bytes, no `/`, space or `:`.
pub fn iface_name_ok(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 15
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// The VLAN id a VLAN interface's name carries, as dracut reads it:
/// `<base>.<id>` or `vlan<id>` (leading zeros allowed).
pub fn vlan_id_in_name(name: &str) -> Option<u16> {
    let digits = match name.rsplit_once('.') {
        Some((_, d)) => d,
        None => name.strip_prefix("vlan")?,
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A search domain: dot-separated labels of letters, digits and '-'.
fn search_domain_ok(s: &str) -> bool {
    s.len() <= 253
        && s.trim_end_matches('.').split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// Problems, each a key path below the caller's prefix and a reason.
pub type Problems = Vec<(String, String)>;

/// Stage two: `w` checked, every problem reported with its key below
/// `key` (e.g. `nodes[3].networkConfig`).
pub fn resolve(key: &str, w: &NetworkConfig) -> Result<NodeNetwork, Problems> {
    let mut p: Problems = Vec::new();
    let k = |s: &str| format!("{key}.{s}");
    let mut interfaces: Vec<Interface> = Vec::new();
    if w.interfaces.is_empty() {
        p.push((k("interfaces"), "at least one interface".into()));
    }
    for (i, wi) in w.interfaces.iter().enumerate() {
        let ik = |s: &str| k(&format!("interfaces[{i}].{s}"));
        let name = match wi.name.as_deref() {
            Some(n) if iface_name_ok(n) => n.to_string(),
            Some(n) => {
                p.push((
                    ik("name"),
                    format!(
                        "{n:?} is not an interface name (1-15 of letters, digits, '-', '_', '.')"
                    ),
                ));
                continue;
            }
            None => {
                p.push((ik("name"), "required".into()));
                continue;
            }
        };
        if interfaces.iter().any(|x| x.name == name) {
            p.push((ik("name"), format!("{name:?} is declared twice")));
            continue;
        }
        match wi.state.as_deref() {
            None | Some("up") => {}
            Some(s) => p.push((ik("state"), format!("{s:?}: only up is supported (an interface to bring down or remove is left out)"))),
        }
        let mac = wi
            .mac_address
            .as_deref()
            .and_then(|m| match m.parse::<Mac>() {
                Ok(m) => Some(m),
                Err(e) => {
                    p.push((ik("mac-address"), e.to_string()));
                    None
                }
            });
        if let Some(m) = wi.mtu {
            if !(68..=65535).contains(&m) {
                p.push((ik("mtu"), format!("{m}: 68-65535")));
            }
        }
        let kind = match wi.kind.as_deref() {
            Some("ethernet") => {
                if wi.link_aggregation.is_some() || wi.vlan.is_some() {
                    p.push((
                        ik("type"),
                        "ethernet takes neither link-aggregation nor vlan".into(),
                    ));
                }
                InterfaceKind::Ethernet
            }
            Some("bond") => match bond(&ik, wi, &mut p) {
                Some(b) => b,
                None => continue,
            },
            Some("vlan") => match vlan(&ik, wi, &mut p) {
                Some(v) => {
                    if let InterfaceKind::Vlan { base, id } = &v {
                        if vlan_id_in_name(&name) != Some(*id) {
                            p.push((ik("name"), format!(
                                "{name:?} does not end in its VLAN id {id}: name it {base}.{id} or vlan{id} \
                                 (dracut and NetworkManager's initrd generator read the id from the name)"
                            )));
                        }
                    }
                    v
                }
                None => continue,
            },
            Some(t) => {
                p.push((
                    ik("type"),
                    format!("{t:?} is not supported: ethernet, bond or vlan"),
                ));
                continue;
            }
            None => {
                p.push((ik("type"), "required: ethernet, bond or vlan".into()));
                continue;
            }
        };
        if mac.is_some() && !matches!(kind, InterfaceKind::Ethernet) {
            p.push((
                ik("mac-address"),
                "only an ethernet interface is matched by its MAC".into(),
            ));
        }
        let ipv4 = ip(&ik("ipv4"), wi.ipv4.as_ref(), true, &mut p);
        let ipv6 = ip(&ik("ipv6"), wi.ipv6.as_ref(), false, &mut p);
        interfaces.push(Interface {
            name,
            kind,
            mtu: wi.mtu,
            mac,
            ipv4,
            ipv6,
            controller: None,
        });
    }
    // Bond ports: declared Ethernet interfaces, or implicit ones; each in
    // one bond, with no addresses of its own.
    let mut implicit: Vec<Interface> = Vec::new();
    for (bi, b) in interfaces.clone().iter().enumerate() {
        let InterfaceKind::Bond { ports, .. } = &b.kind else {
            continue;
        };
        let wi = w
            .interfaces
            .iter()
            .position(|x| x.name.as_deref() == Some(&b.name))
            .unwrap_or(bi);
        let pk = format!("{key}.interfaces[{wi}].link-aggregation.port");
        for port in ports {
            if let Some(x) = interfaces.iter_mut().find(|x| &x.name == port) {
                if !matches!(x.kind, InterfaceKind::Ethernet) {
                    p.push((
                        pk.clone(),
                        format!(
                            "{port:?} is a {}: a bond's ports are ethernet interfaces",
                            x.kind.nm_type()
                        ),
                    ));
                } else if let Some(other) = &x.controller {
                    p.push((
                        pk.clone(),
                        format!("{port:?} is already a port of {other:?}"),
                    ));
                } else if x.ipv4.enabled || x.ipv6.enabled {
                    p.push((pk.clone(), format!("{port:?} has addresses of its own: a bond's port has none (set ipv4/ipv6 enabled: false)")));
                } else {
                    x.controller = Some(b.name.clone());
                }
            } else if let Some(x) = implicit.iter().find(|x| &x.name == port) {
                p.push((
                    pk.clone(),
                    format!(
                        "{port:?} is already a port of {:?}",
                        x.controller.as_deref().unwrap_or("")
                    ),
                ));
            } else {
                // Its MTU is the bond's: the kernel sets a port's.
                implicit.push(Interface {
                    name: port.clone(),
                    kind: InterfaceKind::Ethernet,
                    mtu: None,
                    mac: None,
                    ipv4: IpConfig::disabled(),
                    ipv6: IpConfig::disabled(),
                    controller: Some(b.name.clone()),
                });
            }
        }
    }
    // Implicit ports go first: a bond's ports come before it.
    let mut all = implicit;
    all.extend(interfaces);
    for (i, x) in all.iter().enumerate() {
        if let InterfaceKind::Vlan { base, .. } = &x.kind {
            let wi = w
                .interfaces
                .iter()
                .position(|y| y.name.as_deref() == Some(&x.name))
                .unwrap_or(i);
            let vk = format!("{key}.interfaces[{wi}].vlan.base-iface");
            match all.iter().find(|y| &y.name == base) {
                None => p.push((vk, format!("{base:?} is not an interface of this config (declare it, or name a bond's port)"))),
                Some(y) if y.controller.is_some() => p.push((vk, format!("{base:?} is a port of bond {:?}: put the VLAN on the bond", y.controller.as_deref().unwrap_or("")))),
                Some(y) if matches!(y.kind, InterfaceKind::Vlan { .. }) => p.push((vk, format!("{base:?} is a VLAN: stacked VLANs are not supported"))),
                Some(_) => {}
            }
        }
    }
    let mut dns = Vec::new();
    let mut search = Vec::new();
    if let Some(c) = w.dns_resolver.as_ref().and_then(|d| d.config.as_ref()) {
        for (j, s) in c.server.iter().enumerate() {
            match s.parse::<IpAddr>() {
                Ok(a) => dns.push(a),
                Err(_) => p.push((
                    k(&format!("dns-resolver.config.server[{j}]")),
                    format!("{s:?} is not an IP address"),
                )),
            }
        }
        for (j, s) in c.search.iter().enumerate() {
            if search_domain_ok(s) {
                search.push(s.clone());
            } else {
                p.push((
                    k(&format!("dns-resolver.config.search[{j}]")),
                    format!("{s:?} is not a domain name"),
                ));
            }
        }
    }
    let mut routes = Vec::new();
    for (j, r) in w.routes.iter().flat_map(|r| r.config.iter()).enumerate() {
        let rk = |s: &str| k(&format!("routes.config[{j}].{s}"));
        let dest = match r.destination.as_deref().map(|d| d.parse::<IpNet>()) {
            Some(Ok(d)) => Some(d.trunc()),
            Some(Err(_)) => {
                p.push((
                    rk("destination"),
                    format!(
                        "{:?} is not a CIDR (0.0.0.0/0 for the default route)",
                        r.destination.as_deref().unwrap_or("")
                    ),
                ));
                None
            }
            None => {
                p.push((rk("destination"), "required".into()));
                None
            }
        };
        let hop = match r.next_hop_address.as_deref().map(|d| d.parse::<IpAddr>()) {
            Some(Ok(a)) => Some(a),
            Some(Err(_)) => {
                p.push((
                    rk("next-hop-address"),
                    format!(
                        "{:?} is not an IP address",
                        r.next_hop_address.as_deref().unwrap_or("")
                    ),
                ));
                None
            }
            None => {
                p.push((
                    rk("next-hop-address"),
                    "required (routes through a gateway)".into(),
                ));
                None
            }
        };
        let iface = match r.next_hop_interface.as_deref() {
            Some(n) => match all.iter().find(|x| x.name == n) {
                Some(x) if x.controller.is_some() => {
                    p.push((
                        rk("next-hop-interface"),
                        format!("{n:?} is a bond's port: route through the bond"),
                    ));
                    None
                }
                Some(_) => Some(n.to_string()),
                None => {
                    p.push((
                        rk("next-hop-interface"),
                        format!("{n:?} is not an interface of this config"),
                    ));
                    None
                }
            },
            None => {
                p.push((rk("next-hop-interface"), "required".into()));
                None
            }
        };
        if let Some(t) = r.table_id {
            if t != 254 {
                p.push((
                    rk("table-id"),
                    format!("{t}: only the main table (254) is supported"),
                ));
            }
        }
        if let (Some(d), Some(h)) = (dest, hop) {
            if d.addr().is_ipv4() != h.is_ipv4() {
                p.push((
                    rk("next-hop-address"),
                    format!("{h} is not of {d}'s family"),
                ));
                continue;
            }
        }
        if let (Some(destination), Some(next_hop), Some(interface)) = (dest, hop, iface) {
            let x = all
                .iter()
                .find(|x| x.name == interface)
                .expect("checked above");
            if !NodeNetwork::family(x, next_hop.is_ipv4()).enabled {
                p.push((
                    rk("next-hop-interface"),
                    format!(
                        "{interface:?} has {} disabled",
                        if next_hop.is_ipv4() { "ipv4" } else { "ipv6" }
                    ),
                ));
                continue;
            }
            routes.push(Route {
                destination,
                next_hop,
                interface,
                metric: r.metric,
            });
        }
    }
    if p.is_empty() {
        Ok(NodeNetwork {
            interfaces: all,
            dns,
            search,
            routes,
        })
    } else {
        Err(p)
    }
}

fn bond(ik: &dyn Fn(&str) -> String, wi: &NmInterface, p: &mut Problems) -> Option<InterfaceKind> {
    if wi.vlan.is_some() {
        p.push((ik("vlan"), "a bond takes link-aggregation, not vlan".into()));
    }
    let Some(la) = &wi.link_aggregation else {
        p.push((
            ik("link-aggregation"),
            "required for a bond (mode and port)".into(),
        ));
        return None;
    };
    let mode = match la.mode.as_deref() {
        Some(m) => match BondMode::parse(m) {
            Some(m) => Some(m),
            None => {
                let all: Vec<&str> = BondMode::ALL.iter().map(|m| m.as_str()).collect();
                p.push((
                    ik("link-aggregation.mode"),
                    format!("{m:?}: want one of {}", all.join(", ")),
                ));
                None
            }
        },
        None => {
            p.push((
                ik("link-aggregation.mode"),
                "required (e.g. 802.3ad, active-backup)".into(),
            ));
            None
        }
    };
    let ports = match (&la.port, &la.slaves) {
        (Some(_), Some(_)) => {
            p.push((
                ik("link-aggregation.slaves"),
                "give port (or the older slaves), not both".into(),
            ));
            Vec::new()
        }
        (Some(v), None) | (None, Some(v)) => v.clone(),
        (None, None) => Vec::new(),
    };
    let pkey = if la.slaves.is_some() {
        "slaves"
    } else {
        "port"
    };
    if ports.is_empty() {
        p.push((
            ik(&format!("link-aggregation.{pkey}")),
            "at least one port".into(),
        ));
    }
    for (j, n) in ports.iter().enumerate() {
        if !iface_name_ok(n) {
            p.push((
                ik(&format!("link-aggregation.{pkey}[{j}]")),
                format!("{n:?} is not an interface name"),
            ));
        } else if ports[..j].contains(n) {
            p.push((
                ik(&format!("link-aggregation.{pkey}[{j}]")),
                format!("{n:?} listed twice"),
            ));
        }
    }
    let mut options = Vec::new();
    for (name, v) in &la.options {
        let ok = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_graphic() && b != b',' && b != b'=' && b != b':')
        };
        let value = match v {
            serde_yaml_ng::Value::String(s) => s.clone(),
            serde_yaml_ng::Value::Number(n) => n.to_string(),
            serde_yaml_ng::Value::Bool(b) => u8::from(*b).to_string(),
            _ => String::new(),
        };
        if !BOND_OPTIONS.contains(&name.as_str()) {
            p.push((ik(&format!("link-aggregation.options.{name}")), "not a bonding option (miimon, lacp_rate, xmit_hash_policy, updelay, downdelay, primary, …; docs/site.md lists them)".into()));
        } else if name == "arp_ip_target"
            && value
                .split(',')
                .all(|t| t.parse::<std::net::Ipv4Addr>().is_ok())
        {
            options.push((name.clone(), value));
        } else if !ok(&value) {
            p.push((
                ik(&format!("link-aggregation.options.{name}")),
                format!("{value:?}: one value, no spaces, ',', '=' or ':'"),
            ));
        } else {
            options.push((name.clone(), value));
        }
    }
    Some(InterfaceKind::Bond {
        mode: mode?,
        options,
        ports,
    })
}

fn vlan(ik: &dyn Fn(&str) -> String, wi: &NmInterface, p: &mut Problems) -> Option<InterfaceKind> {
    if wi.link_aggregation.is_some() {
        p.push((
            ik("link-aggregation"),
            "a vlan takes vlan, not link-aggregation".into(),
        ));
    }
    let Some(v) = &wi.vlan else {
        p.push((ik("vlan"), "required for a vlan (base-iface and id)".into()));
        return None;
    };
    let base = match v.base_iface.as_deref() {
        Some(b) if iface_name_ok(b) => Some(b.to_string()),
        Some(b) => {
            p.push((
                ik("vlan.base-iface"),
                format!("{b:?} is not an interface name"),
            ));
            None
        }
        None => {
            p.push((ik("vlan.base-iface"), "required".into()));
            None
        }
    };
    let id = match v.id {
        Some(id @ 1..=4094) => Some(id as u16),
        Some(id) => {
            p.push((ik("vlan.id"), format!("{id}: 1-4094")));
            None
        }
        None => {
            p.push((ik("vlan.id"), "required (1-4094)".into()));
            None
        }
    };
    Some(InterfaceKind::Vlan {
        base: base?,
        id: id?,
    })
}

fn ip(key: &str, w: Option<&NmIp>, v4: bool, p: &mut Problems) -> IpConfig {
    let Some(w) = w else {
        return IpConfig::disabled();
    };
    let enabled = w.enabled.unwrap_or(true);
    if !enabled {
        if w.dhcp == Some(true) || !w.address.is_empty() {
            p.push((
                key.to_string(),
                "enabled: false with dhcp or addresses".into(),
            ));
        }
        return IpConfig::disabled();
    }
    if v4 && w.autoconf.is_some() {
        p.push((format!("{key}.autoconf"), "IPv6 only".into()));
    }
    // IPv6 router advertisements come with DHCPv6 in NetworkManager's
    // `auto`; one without the other is not expressible there.
    if !v4 && w.autoconf.is_some() && w.autoconf != w.dhcp {
        p.push((
            format!("{key}.autoconf"),
            "autoconf and dhcp go together (both true: NetworkManager's auto, both false: static)"
                .into(),
        ));
    }
    let mut addresses: Vec<IpNet> = Vec::new();
    for (j, a) in w.address.iter().enumerate() {
        let ak = format!("{key}.address[{j}]");
        let addr = match a.ip.as_deref().map(|s| s.parse::<IpAddr>()) {
            Some(Ok(x)) if x.is_ipv4() == v4 => x,
            Some(Ok(x)) => {
                p.push((
                    format!("{ak}.ip"),
                    format!("{x} is not an {} address", if v4 { "IPv4" } else { "IPv6" }),
                ));
                continue;
            }
            Some(Err(_)) => {
                p.push((
                    format!("{ak}.ip"),
                    format!("{:?} is not an IP address", a.ip.as_deref().unwrap_or("")),
                ));
                continue;
            }
            None => {
                p.push((format!("{ak}.ip"), "required".into()));
                continue;
            }
        };
        let max = if v4 { 32 } else { 128 };
        match a.prefix_length {
            Some(l) if (1..=max).contains(&l) => match IpNet::new(addr, l) {
                Ok(n) if addresses.contains(&n) => p.push((ak, format!("{n} listed twice"))),
                Ok(n) => addresses.push(n),
                Err(e) => p.push((format!("{ak}.prefix-length"), e.to_string())),
            },
            Some(l) => p.push((format!("{ak}.prefix-length"), format!("{l}: 1-{max}"))),
            None => p.push((format!("{ak}.prefix-length"), "required".into())),
        }
    }
    let dhcp = w.dhcp.unwrap_or(false);
    if !dhcp && addresses.is_empty() {
        p.push((
            key.to_string(),
            "enabled with neither dhcp nor an address: give one, or enabled: false".into(),
        ));
    }
    IpConfig {
        enabled: true,
        dhcp,
        addresses,
    }
}
