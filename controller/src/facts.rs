//! Provider facts: what a provider says of a node's machine once it is up
//! (its id, its MACs, its addresses), recorded on the node so that DHCP
//! reservations, dnsd's records, lbd's pools and the Ignition source check
//! follow the machine that really exists.
//!
//! A node made through the API may leave `ip` and `macs` out when its
//! provider assigns them; such a node is not in the served site (nothing
//! can be reserved, resolved or balanced for it) until the provider has
//! said. Where both are given, the provider's word wins: it is what the
//! machine has. The address taken as the node's `ip` is the first the
//! provider reports inside one of the site's networks; the others are kept
//! as the node's `addresses` (public ones, for example).
//!
//! The node with its facts is validated like every site node before it is
//! served: an address or MAC another node holds is a condition on the node
//! (`AddressesRecorded: False, Conflict`), never a silent overwrite.

use crate::providers::Machine;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::net::{IpAddr, Ipv4Addr};

pub const ADDRESSES_RECORDED: &str = "AddressesRecorded";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Facts {
    pub provider: String,
    /// The provider's id of the machine.
    pub id: String,
    /// The node's address, inside a site network; `None`: the provider gave none there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<Ipv4Addr>,
    /// Lower-case, in the provider's order.
    #[serde(default)]
    pub macs: Vec<String>,
    /// Every address the provider reports.
    #[serde(default)]
    pub addresses: Vec<String>,
}

impl Facts {
    pub fn of_machine(provider: &str, m: &Machine, site: &site::Site) -> Facts {
        let ip = m
            .addresses
            .iter()
            .filter_map(|a| a.parse::<Ipv4Addr>().ok())
            .find(|a| site.networks.iter().any(|n| n.contains(IpAddr::V4(*a))));
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
            macs,
            addresses: m.addresses.clone(),
        }
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
            self.ip
                .map(|i| i.to_string())
                .unwrap_or_else(|| "none in the site's networks".into()),
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
    let _w = ctl.writes.lock().await;
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
            if let Err(e) = ctl.write_and_serve(&text, site) {
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
            tracing::info!(node = %name, ip = ?f.ip, macs = ?f.macs, "provider facts recorded");
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
        if let Some(ip) = f.ip {
            o.insert("ip".into(), Value::String(ip.to_string()));
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
    }
    let has_ip = o
        .get("ip")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty());
    let has_mac = o
        .get("macs")
        .and_then(Value::as_array)
        .is_some_and(|m| !m.is_empty());
    (has_ip && has_mac).then_some(v)
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
            || served.iter().any(|n| n["ip"] == ip)
            || site
                .vips
                .apis()
                .chain(site.vips.ingresses())
                .any(|v| v.to_string() == ip)
    };
    if o.get("ip")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        let free = site
            .networks
            .iter()
            .filter_map(|n| match n.v4().map(|s| s.net) {
                Some(ipnet::IpNet::V4(n)) => Some(n),
                _ => None,
            })
            .flat_map(|n| n.hosts().take(4096))
            .map(|a| a.to_string())
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

    #[test]
    fn the_provider_s_word_fills_in_and_wins() {
        let f = Facts {
            provider: "equinix".into(),
            id: "d-1".into(),
            ip: Some("10.77.0.40".parse().unwrap()),
            macs: vec!["b4:96:91:00:00:01".into()],
            addresses: vec!["147.75.1.9".into(), "10.77.0.40".into()],
        };
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
}
