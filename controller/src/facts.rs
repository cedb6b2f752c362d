//! Provider facts: what a provider says of a node's machine once it is up
//! (its id, its MACs, its addresses), recorded on the node so that DHCP
//! reservations, dnsd's records, lbd's pools and the Ignition source check
//! follow the machine that really exists.
//!
//! A node made through the API may leave `ip` and `macs` out when its
//! provider assigns them; such a node is not in the served site (nothing
//! can be reserved, resolved or balanced for it) until the provider has
//! said. Where both are given, the provider's word wins: it is what the
//! machine has. The addresses taken as the node's `ip` are, per family, the
//! first the provider reports inside one of the site's networks (both in
//! one network: a node is on one link); all of them are kept as the node's
//! `addresses` (public ones, for example).
//!
//! The node with its facts is validated like every site node before it is
//! served: an address or MAC another node holds is a condition on the node
//! (`AddressesRecorded: False, Conflict`), never a silent overwrite.

use crate::providers::Machine;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub const ADDRESSES_RECORDED: &str = "AddressesRecorded";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Facts {
    pub provider: String,
    /// The provider's id of the machine.
    pub id: String,
    /// The node's IPv4 address, inside a site network; `None`: the provider gave none there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<Ipv4Addr>,
    /// The node's IPv6 address, in the same site network as `ip` when it has both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip6: Option<Ipv6Addr>,
    /// Lower-case, in the provider's order.
    #[serde(default)]
    pub macs: Vec<String>,
    /// Every address the provider reports.
    #[serde(default)]
    pub addresses: Vec<String>,
    /// The host network the provider documents (NMState), for a node
    /// whose spec gives none ([`effective`]).
    #[serde(
        default,
        rename = "networkConfig",
        skip_serializing_if = "Option::is_none"
    )]
    pub network_config: Option<Value>,
}

impl Facts {
    pub fn of_machine(provider: &str, m: &Machine, site: &site::Site) -> Facts {
        let parsed: Vec<IpAddr> = m.addresses.iter().filter_map(|a| a.parse().ok()).collect();
        let network_of = |a: IpAddr| site.networks.iter().position(|n| n.contains(a));
        let ip = parsed.iter().find_map(|a| match a {
            IpAddr::V4(v4) => network_of(*a).map(|n| (*v4, n)),
            IpAddr::V6(_) => None,
        });
        let ip6 = parsed.iter().find_map(|a| match a {
            IpAddr::V6(v6) => match (network_of(*a), ip) {
                (Some(n), Some((_, n4))) if n != n4 => None,
                (Some(_), _) => Some(*v6),
                (None, _) => None,
            },
            IpAddr::V4(_) => None,
        });
        let ip = ip.map(|(a, _)| a);
        let mut macs: Vec<String> = Vec::new();
        for mac in &m.macs {
            let mac = mac.to_ascii_lowercase();
            if mac.parse::<site::Mac>().is_ok() && !macs.contains(&mac) {
                macs.push(mac);
            }
        }
        Facts {
            provider: provider.into(),
            id: m.id.clone(),
            ip,
            ip6,
            macs,
            addresses: m.addresses.clone(),
            network_config: m.network_config.clone(),
        }
    }

    /// The node's addresses inside the site's networks, IPv4 first.
    pub fn ips(&self) -> Vec<IpAddr> {
        self.ip
            .map(IpAddr::V4)
            .into_iter()
            .chain(self.ip6.map(IpAddr::V6))
            .collect()
    }

    pub fn from_json(v: &Value) -> Option<Facts> {
        serde_json::from_value(v.clone()).ok()
    }

    /// What the node's view and events say of them.
    pub fn describe(&self) -> String {
        format!(
            "{} machine {}: ip {}, MACs {}",
            self.provider,
            self.id,
            match self.ips().as_slice() {
                [] => "none in the site's networks".to_string(),
                ips => ips
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(" and "),
            },
            if self.macs.is_empty() {
                "none".into()
            } else {
                self.macs.join(", ")
            }
        )
    }
}

/// Records `f` on the node `name` when it differs from what is recorded:
/// validated with the whole site first, then stored, served to every
/// daemon of the process (and written to the overlay for the others), and
/// put on the node's timeline. A conflict is the node's `AddressesRecorded`
/// condition, and nothing changes.
pub async fn record(
    ctl: &crate::Controller,
    name: &str,
    f: &Facts,
) -> Result<(), crate::store::StoreError> {
    use crate::store::{now_ms, Condition};
    let _w = ctl.writing().await;
    let mut all = ctl.store.all_facts()?;
    if all.get(name).and_then(Facts::from_json).as_ref() == Some(f) {
        return Ok(());
    }
    all.insert(
        name.to_string(),
        serde_json::to_value(f).unwrap_or(Value::Null),
    );
    let rows = ctl.store.nodes()?;
    let text = ctl.overlay_text(&rows, &all);
    let cond = |status: &str, reason: &str, message: String| Condition {
        kind: ADDRESSES_RECORDED.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        at: now_ms(),
    };
    match site::load_with_overlay(&ctl.site_path, &text) {
        Ok(site) => {
            ctl.store.put_facts(name, &all[name])?;
            let what = f.describe();
            if let Err(e) = ctl.write_and_serve(&text, site, &rows) {
                tracing::error!(node = %name, error = %e, "provider facts recorded but the overlay was not written");
            }
            ctl.store
                .set_condition(name, &cond("True", "Recorded", what.clone()))?;
            ctl.note(name, crate::events::PROVIDER, format!("recorded: {what}"));
            ctl.app.timeline.record(bootd::timeline::Raw::new(
                bootd::timeline::Subject::node(name),
                bootd::timeline::Phase::Machine,
                "addresses",
                what,
            ));
            tracing::info!(node = %name, ip = ?f.ip, ip6 = ?f.ip6, macs = ?f.macs, "provider facts recorded");
        }
        Err(e) => {
            let problems = crate::problems(&e);
            let msg = format!(
                "{} conflicts with the site; not recorded: {}",
                f.describe(),
                problems.join("; ")
            );
            let had = ctl
                .store
                .conditions(name)?
                .into_iter()
                .any(|c| c.kind == ADDRESSES_RECORDED && c.message == msg);
            if !had {
                tracing::warn!(node = %name, reason = %msg, "provider facts refused");
                ctl.store
                    .set_condition(name, &cond("False", "Conflict", msg.clone()))?;
                ctl.note(name, crate::events::PROVIDER, msg);
            }
        }
    }
    Ok(())
}

/// The node as served: its spec with the provider's `ip` and `macs` where
/// it gave them; `None` while it still lacks either (not served yet).
pub fn effective(spec: &Value, facts: Option<&Facts>) -> Option<Value> {
    let mut v = spec.clone();
    let o = v.as_object_mut()?;
    if let Some(f) = facts {
        // One address, or one per family (the site's dual-stack `ip`).
        match f.ips().as_slice() {
            [] => {}
            [one] => {
                o.insert("ip".into(), Value::String(one.to_string()));
            }
            both => {
                o.insert(
                    "ip".into(),
                    serde_json::json!(both.iter().map(ToString::to_string).collect::<Vec<_>>()),
                );
            }
        }
        if !f.macs.is_empty() {
            o.insert("macs".into(), serde_json::json!(f.macs));
        }
        // Every address it reported (those that parse): its scripts and
        // Ignition go to these, and its provider token works only from them.
        let addrs: Vec<String> = f
            .addresses
            .iter()
            .filter_map(|a| a.parse::<IpAddr>().ok())
            .map(|a| a.to_string())
            .collect();
        o.insert("addresses".into(), serde_json::json!(addrs));
        // The provider's host network, unless the operator wrote one; only
        // when it holds the node's address (bootd serves it there).
        if let Some(nc) = &f.network_config {
            let statics = site::nmstate::NetworkConfig::static_ips_of(nc);
            let holds = f
                .ips()
                .iter()
                .any(|a| statics.iter().any(|s| s.parse::<IpAddr>().ok() == Some(*a)));
            if holds && !o.contains_key("network") && !o.contains_key("networkConfig") {
                o.insert("networkConfig".into(), nc.clone());
            }
        }
    }
    let has_ip = o.get("ip").is_some_and(|ip| !ips_of(ip).is_empty());
    let has_mac = o
        .get("macs")
        .and_then(Value::as_array)
        .is_some_and(|m| !m.is_empty());
    (has_ip && has_mac).then_some(v)
}

/// The addresses in a node's `ip` (one, or a list of one per family).
fn ips_of(ip: &Value) -> Vec<&str> {
    match ip {
        Value::String(s) if !s.is_empty() => vec![s.as_str()],
        Value::Array(a) => a
            .iter()
            .filter_map(Value::as_str)
            .filter(|s| !s.is_empty())
            .collect(),
        _ => Vec::new(),
    }
}

/// `spec` with stand-ins for an `ip` and `macs` its provider will assign,
/// to validate everything else about it as the site would: an address of
/// the site's first network and a locally administered MAC that no node,
/// VIP or API node holds.
pub fn stand_ins(
    site: &site::Site,
    rows: &[crate::store::NodeRow],
    facts: &std::collections::HashMap<String, Value>,
    spec: &Value,
) -> Value {
    let mut v = spec.clone();
    let Some(o) = v.as_object_mut() else { return v };
    let served: Vec<Value> = rows
        .iter()
        .filter_map(|r| {
            effective(
                &r.spec,
                facts.get(&r.name).and_then(Facts::from_json).as_ref(),
            )
        })
        .collect();
    let taken_ip = |ip: &str| {
        site.nodes
            .iter()
            .any(|n| n.ips().any(|a| a.to_string() == ip))
            || served.iter().any(|n| ips_of(&n["ip"]).contains(&ip))
            || site
                .vips
                .apis()
                .chain(site.vips.ingresses())
                .any(|v| v.to_string() == ip)
    };
    if o.get("ip").is_none_or(|ip| ips_of(ip).is_empty()) {
        // An IPv4 address where a network has IPv4, else an IPv6 one (an
        // IPv6-only site): the first free of the first such network.
        let v4 = site
            .networks
            .iter()
            .filter_map(|n| match n.v4().map(|s| s.net) {
                Some(ipnet::IpNet::V4(n)) => Some(n),
                _ => None,
            });
        let v6 = site
            .networks
            .iter()
            .filter_map(|n| match n.v6().map(|s| s.net) {
                Some(ipnet::IpNet::V6(n)) => Some(n),
                _ => None,
            });
        let free = v4
            .flat_map(|n| n.hosts().take(4096).map(|a| a.to_string()))
            .chain(v6.flat_map(|n| n.hosts().skip(1).take(4096).map(|a| a.to_string())))
            .find(|a| !taken_ip(a));
        if let Some(a) = free {
            o.insert("ip".into(), Value::String(a));
        }
    }
    if o.get("macs")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        let taken_mac = |m: &str| {
            let mac: site::Mac = m.parse().expect("a MAC");
            site.node_by_mac(&mac).is_some()
                || served.iter().any(|n| {
                    n["macs"]
                        .as_array()
                        .is_some_and(|a| a.iter().any(|x| x == m))
                })
        };
        let free = (1u32..=0xffff)
            .map(|i| format!("02:bd:00:00:{:02x}:{:02x}", i >> 8, i & 0xff))
            .find(|m| !taken_mac(m));
        if let Some(m) = free {
            o.insert("macs".into(), serde_json::json!([m]));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The provider's host network goes into the node when it holds the
    /// node's address and the spec has none of its own.
    #[test]
    fn the_provider_s_network_config_fills_in_only_where_it_fits() {
        let nc = json!({"interfaces": [{"name": "bond0", "type": "bond",
            "ipv4": {"enabled": true, "address": [{"ip": "10.77.0.40", "prefix-length": 31}]}}]});
        let f = Facts {
            addresses: vec!["10.77.0.40".into()],
            network_config: Some(nc.clone()),
            ..equinix_facts()
        };
        let spec = json!({"name": "w", "role": "worker"});
        assert_eq!(effective(&spec, Some(&f)).unwrap()["networkConfig"], nc);
        let own = json!({"name": "w", "role": "worker", "network": {"interface": "eno1"}});
        assert!(effective(&own, Some(&f))
            .unwrap()
            .get("networkConfig")
            .is_none());
        let elsewhere = Facts {
            ip: Some("10.77.0.41".parse().unwrap()),
            ..f
        };
        assert!(effective(&spec, Some(&elsewhere))
            .unwrap()
            .get("networkConfig")
            .is_none());
    }

    /// An Equinix device's facts: its private address in the lab network.
    fn equinix_facts() -> Facts {
        Facts {
            provider: "equinix".into(),
            id: "d-1".into(),
            ip: Some("10.77.0.40".parse().unwrap()),
            ip6: None,
            macs: vec!["b4:96:91:00:00:01".into()],
            addresses: vec!["147.75.1.9".into(), "10.77.0.40".into()],
            network_config: None,
        }
    }

    #[test]
    fn the_provider_s_word_fills_in_and_wins() {
        let f = equinix_facts();
        let bare = json!({"name": "w", "role": "worker"});
        assert_eq!(
            effective(&bare, None),
            None,
            "not served before the provider says"
        );
        let v = effective(&bare, Some(&f)).unwrap();
        assert_eq!(v["ip"], "10.77.0.40");
        assert_eq!(v["macs"], json!(["b4:96:91:00:00:01"]));
        let typed = json!({"name": "w", "role": "worker", "ip": "10.77.0.9", "macs": ["52:54:00:00:00:09"]});
        assert_eq!(effective(&typed, None).unwrap(), typed);
        assert_eq!(effective(&typed, Some(&f)).unwrap()["ip"], "10.77.0.40");
        let no_ip = Facts {
            ip: None,
            ..f.clone()
        };
        assert_eq!(effective(&typed, Some(&no_ip)).unwrap()["ip"], "10.77.0.9");
        assert_eq!(effective(&bare, Some(&no_ip)), None);
    }

    #[test]
    fn the_node_s_ip_is_the_first_address_inside_a_site_network() {
        let site = site::load(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab/site.yaml"),
        )
        .unwrap();
        let m = Machine {
            network_config: None,
            id: "x".into(),
            state: crate::providers::MachineState::Active,
            addresses: vec!["147.75.1.2".into(), "fd00::1".into(), "10.77.0.50".into()],
            macs: vec![
                "B4:96:91:AA:BB:CC".into(),
                "b4:96:91:aa:bb:cc".into(),
                "junk".into(),
            ],
        };
        let f = Facts::of_machine("equinix", &m, &site);
        assert_eq!(f.ip, Some("10.77.0.50".parse().unwrap()));
        assert_eq!(f.macs, vec!["b4:96:91:aa:bb:cc".to_string()]);
        assert!(f.describe().contains("ip 10.77.0.50"));
    }

    fn example(name: &str) -> site::Site {
        site::load(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join(format!("../examples/{name}/site.yaml")),
        )
        .unwrap()
    }

    fn machine(addresses: &[&str]) -> Machine {
        Machine {
            network_config: None,
            id: "x".into(),
            state: crate::providers::MachineState::Active,
            addresses: addresses.iter().map(|a| a.to_string()).collect(),
            macs: vec!["b4:96:91:aa:bb:cc".into()],
        }
    }

    #[test]
    fn both_families_are_recorded_and_served_as_one_node() {
        let site = example("lab-dual");
        // A public IPv6 address outside the site comes first; it stays one of
        // the node's addresses, not its ip.
        let f = Facts::of_machine(
            "equinix",
            &machine(&["2001:db8::5", "147.75.1.2", "fd00:77::50", "10.77.0.50"]),
            &site,
        );
        assert_eq!(f.ip, Some("10.77.0.50".parse().unwrap()));
        assert_eq!(f.ip6, Some("fd00:77::50".parse().unwrap()));
        assert!(
            f.describe().contains("ip 10.77.0.50 and fd00:77::50"),
            "{}",
            f.describe()
        );
        let v = effective(&json!({"name": "w", "role": "worker"}), Some(&f)).unwrap();
        assert_eq!(v["ip"], json!(["10.77.0.50", "fd00:77::50"]));
        // The served node is a valid dual-stack site node.
        let mut overlay = serde_json::Map::new();
        overlay.insert("nodes".into(), json!([v]));
        let text = serde_json::to_string(&Value::Object(overlay)).unwrap();
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab-dual/site.yaml");
        let served = site::load_with_overlay(&dir, &text).unwrap();
        let n = served.node("w").unwrap();
        assert_eq!(n.ip4, Some("10.77.0.50".parse().unwrap()));
        assert_eq!(n.ip6, Some("fd00:77::50".parse().unwrap()));
    }

    #[test]
    fn an_ipv6_only_machine_is_served() {
        let site = example("lab-v6");
        let f = Facts::of_machine("alibaba", &machine(&["fd00:77::51", "2001:db8::9"]), &site);
        assert_eq!((f.ip, f.ip6), (None, Some("fd00:77::51".parse().unwrap())));
        let v = effective(&json!({"name": "w", "role": "worker"}), Some(&f)).unwrap();
        assert_eq!(v["ip"], "fd00:77::51");
        // Before the provider has said, the stand-in is an IPv6 address of
        // the site's network (the only family it has).
        let s = stand_ins(
            &site,
            &[],
            &Default::default(),
            &json!({"name": "w", "role": "worker"}),
        );
        let ip: IpAddr = s["ip"].as_str().unwrap().parse().unwrap();
        assert!(ip.is_ipv6() && site.networks[0].contains(ip), "{ip}");
    }

    #[test]
    fn an_ipv6_address_on_another_network_than_the_ipv4_one_is_not_the_node_s() {
        let mut site = example("lab-dual");
        let mut other = site.networks[0].clone();
        other.subnets.retain(|s| s.net.addr().is_ipv6());
        other.subnets[0].net = "fd00:99::/64".parse().unwrap();
        other.subnets[0].gateway = None;
        other.subnets[0].pool = None;
        site.networks.push(other);
        let f = Facts::of_machine("equinix", &machine(&["10.77.0.50", "fd00:99::50"]), &site);
        assert_eq!((f.ip, f.ip6), (Some("10.77.0.50".parse().unwrap()), None));
    }
}
