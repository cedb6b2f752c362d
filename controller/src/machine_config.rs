//! Following a node past its Ignition: whether it reached the machine-config
//! server. openshift-install's `master.ign` and `worker.ign` are pointers
//! that merge `https://api-int.<domain>:22623/config/<role>`; lbd's
//! machine-config frontend sees the node's connection, and the timeline's
//! `machine_config` event makes `MachineConfigServed` True
//! ([`crate::events`]). This module says the opposite, clearly and once:
//! a node whose role config merges from the machine-config server, that
//! fetched its Ignition `host.api.machineConfigWithin` ago while lbd's
//! status was being read, and from which lbd has seen nothing, gets
//! `MachineConfigServed: False, NotReached` with what to check (most often
//! its resolver does not know api-int). A later connection makes it True.
//!
//! Nothing is said while lbd's status is not read (no `lb.adminListen`,
//! lbd down): no connection seen would then mean nothing.

use crate::conditions::{cond, IGNITION_SERVED};
use crate::Controller;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tracing::warn;

pub const MACHINE_CONFIG_SERVED: &str = "MachineConfigServed";

/// How often the nodes are looked at.
const EVERY: Duration = Duration::from_secs(5);
/// lbd's status older than this: not being read now.
const LBD_FRESH_MS: i64 = 30_000;

/// Whether a role config gets its machine config from the machine-config
/// server: it merges (or is replaced by) a source on port 22623 under
/// `/config/`, as openshift-install's pointers do.
pub fn expects_machine_config(role_config: &Value) -> bool {
    let cfg = &role_config["ignition"]["config"];
    let merge = cfg["merge"].as_array().into_iter().flatten();
    merge
        .chain(std::iter::once(&cfg["replace"]))
        .filter_map(|s| s["source"].as_str())
        .any(is_machine_config_url)
}

fn is_machine_config_url(source: &str) -> bool {
    let Some(rest) = source.strip_prefix("https://") else {
        return false;
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    authority.ends_with(":22623") && path.starts_with("config/")
}

/// Whether a node that fetched its Ignition at `ignition_at` is overdue at
/// `now` (all ms since the epoch): `within` has passed, and lbd's status was
/// read after the fetch and recently.
pub fn overdue(now: i64, ignition_at: i64, within: Duration, lbd_read_at: Option<i64>) -> bool {
    let Some(read) = lbd_read_at else {
        return false;
    };
    let within = i64::try_from(within.as_millis()).unwrap_or(i64::MAX);
    read >= ignition_at && now - read <= LBD_FRESH_MS && now - ignition_at >= within
}

/// The condition's message: what was not seen, and what to check.
pub fn not_reached_message(site: &site::Site, node: &site::Node, within: Duration) -> String {
    let domain = site.cluster.domain();
    let addrs: Vec<String> = node.ips().map(|a| a.to_string()).collect();
    let resolvers = bootd::render::resolvers(site, node);
    let resolver = if resolvers.is_empty() {
        "its network names no dnsServers, so nothing here points it at dnsd".to_string()
    } else {
        let list: Vec<String> = resolvers.iter().map(ToString::to_string).collect();
        format!(
            "it is given the resolvers {} (networks[].dnsServers)",
            list.join(", ")
        )
    };
    format!(
        "fetched its Ignition over {}s ago, and nothing from its addresses ({}) has reached \
         lbd's machine-config frontend (22623) since: it could not merge \
         https://api-int.{domain}:22623/config/{}. Most often its resolver does not know \
         api-int.{domain}: {resolver}; on a cloud, its platform's DHCP must name them \
         (docs/platforms.md, \"Names on every platform\"). Else lbd's machine-config pool \
         has no serving backend (the bootstrap node or the masters)",
        within.as_secs(),
        addrs.join(", "),
        node.role,
    )
}

/// Looks at every node every few seconds while this appliance runs the loops.
pub async fn follow(ctl: Arc<Controller>) {
    loop {
        tokio::select! {
            _ = ctl.shutdown.cancelled() => return,
            _ = tokio::time::sleep(EVERY) => {}
        }
        if ctl.acting().is_some() {
            sweep(&ctl, crate::store::now_ms());
        }
    }
}

/// Sets `MachineConfigServed: False` on each overdue node that has none.
pub fn sweep(ctl: &Controller, now: i64) {
    let lbd_read_at = ctl.app.timeline.lbd_read_at();
    if lbd_read_at.is_none() {
        return;
    }
    let within = ctl.machine_config_within();
    let snap = ctl.app.live.load();
    let site = &snap.site;
    for node in &site.nodes {
        let Some(role) = site.ignition.roles.get(&node.role) else {
            continue;
        };
        if !expects_machine_config(role.config.expose()) {
            continue;
        }
        let Ok(conds) = ctl.store.conditions(&node.name) else {
            continue;
        };
        if conds.iter().any(|c| c.kind == MACHINE_CONFIG_SERVED) {
            continue;
        }
        let Some(ignition) = conds
            .iter()
            .find(|c| c.kind == IGNITION_SERVED && c.status == "True")
        else {
            continue;
        };
        if !overdue(now, ignition.at, within, lbd_read_at) {
            continue;
        }
        let msg = not_reached_message(site, node, within);
        warn!(node = %node.name, "machine config not reached after its Ignition");
        let c = cond(MACHINE_CONFIG_SERVED, "False", "NotReached", &msg);
        if let Err(e) = ctl.store.set_condition(&node.name, &c) {
            tracing::error!(error = %e, "condition not stored");
            continue;
        }
        ctl.note(&node.name, crate::events::MACHINE_CONFIG, msg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn openshift_pointers_expect_the_machine_config_server() {
        let pointer = json!({"ignition": {"version": "3.2.0", "config": {"merge": [
            {"source": "https://api-int.ocp.example.com:22623/config/worker"}]}}});
        assert!(expects_machine_config(&pointer));
        let replace = json!({"ignition": {"config": {"replace":
            {"source": "https://api-int.ocp.example.com:22623/config/master"}}}});
        assert!(expects_machine_config(&replace));
        // The bootstrap config is whole; other merges are not the MCS.
        assert!(!expects_machine_config(
            &json!({"ignition": {"version": "3.2.0"}, "storage": {}})
        ));
        for other in [
            "http://api-int.x:22623/config/worker",
            "https://api-int.x:22623/other",
            "https://api-int.x:2262/config/worker",
            "https://example.com/config/x",
        ] {
            let c = json!({"ignition": {"config": {"merge": [{"source": other}]}}});
            assert!(!expects_machine_config(&c), "{other}");
        }
    }

    #[test]
    fn overdue_only_while_lbd_is_read_and_after_the_wait() {
        let within = Duration::from_secs(60);
        let fetched = 1_000_000;
        let later = fetched + 61_000;
        assert!(overdue(later, fetched, within, Some(later - 1_000)));
        assert!(!overdue(later, fetched, within, None), "lbd never read");
        assert!(
            !overdue(later, fetched, within, Some(fetched - 1)),
            "lbd last read before the fetch"
        );
        assert!(
            !overdue(later, fetched, within, Some(later - 31_000)),
            "lbd's status is stale"
        );
        assert!(!overdue(
            fetched + 59_000,
            fetched,
            within,
            Some(fetched + 59_000)
        ));
    }

    #[test]
    fn the_message_names_the_node_s_resolvers() {
        let site = site::load(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab/site.yaml"),
        )
        .unwrap();
        let node = site.node("worker-0").unwrap();
        let m = not_reached_message(&site, node, Duration::from_secs(1200));
        assert!(m.contains("api-int.lab.example.test"), "{m}");
        assert!(m.contains("the resolvers 10.77.0.1"), "{m}");
        assert!(m.contains("/config/worker"), "{m}");
        assert!(m.contains(&node.ip().to_string()), "{m}");
    }
}
