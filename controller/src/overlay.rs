//! The node overlay (`<stateDir>/nodes.yaml`): the API's nodes as every
//! daemon serves them, each with its provider's facts and its epoch,
//! written and served by the controller at each change; and the nodes it
//! leaves out for want of their address (`bootd::awaited`).

use crate::store::NodeRow;
use crate::{facts, Controller};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

impl Controller {
    /// The overlay for `rows` (those not being deleted): each node as
    /// served (its provider's facts applied), with its provider's
    /// `fetchFrom` (`host.api.fetchFrom`) where the node gives none; a node
    /// still waiting for its provider's address or MACs is left out.
    pub(crate) fn overlay_text(&self, rows: &[NodeRow], facts: &HashMap<String, Value>) -> String {
        let snap = self.app.live.load();
        let by_provider = snap.site.host.api.as_ref().map(|a| &a.fetch_from);
        // Every node's reinstall time in one read: this runs at every change
        // of any node, on every appliance (a read per node made an export
        // of N nodes N round trips to etcd).
        let reinstalled = self.reinstalls();
        let epoch = |r: &NodeRow| epoch_from(r, reinstalled.get(&r.name).copied());
        let nodes: Vec<Value> = rows
            .iter()
            // A node being released stays served until its disks are wiped.
            .filter(|r| !r.deleting || self.app.inventories.releasing(&r.name))
            .filter_map(|r| {
                let f = facts.get(&r.name).and_then(facts::Facts::from_json);
                let mut v = facts::effective(&r.spec, f.as_ref())?;
                let provider = r.provider.as_object().and_then(|o| o.keys().next());
                let default = provider.and_then(|p| by_provider.and_then(|m| m.get(p.as_str())));
                if let (Some(d), Some(o)) = (default, v.as_object_mut()) {
                    o.entry("fetchFrom")
                        .or_insert_with(|| Value::String(d.as_str().into()));
                }
                if let Some(o) = v.as_object_mut() {
                    o.insert("epoch".into(), Value::from(epoch(r)));
                }
                Some(v)
            })
            .collect();
        let mut text = String::from(
            "# Nodes added through bootd's API (docs/api.md). Written by bootd; do not edit.\n",
        );
        text.push_str(&serde_yaml_ng::to_string(&json!({ "nodes": nodes })).unwrap_or_default());
        text
    }

    /// An API node's epoch (`site::Node::epoch`): when it was made, or
    /// last reinstalled through the API, in ms. A delete and re-create, or
    /// a reinstall, voids every token issued to it before.
    pub(crate) fn epoch_of(&self, row: &NodeRow) -> u64 {
        let reinstalled = self
            .store
            .cluster(&epoch_key(&row.name))
            .ok()
            .flatten()
            .and_then(|(v, _)| v.parse::<i64>().ok());
        epoch_from(row, reinstalled)
    }

    /// Each node's last reinstall through the API (ms), as [`epoch_key`]s hold.
    fn reinstalls(&self) -> HashMap<String, i64> {
        self.store
            .clusters()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(k, v, _)| {
                let node = k.strip_prefix(EPOCH_PREFIX)?;
                Some((node.to_string(), v.parse().ok()?))
            })
            .collect()
    }

    /// Validates the overlay for `rows` with the site exactly as every daemon
    /// will load it; on success writes it atomically and serves the new site.
    pub(crate) fn export_overlay_now(&self, rows: &[NodeRow]) -> Result<(), String> {
        let facts = self.store.all_facts().map_err(|e| e.to_string())?;
        let text = self.overlay_text(rows, &facts);
        let site = site::load_with_overlay(&self.site_path, &text).map_err(|e| e.to_string())?;
        self.write_and_serve(&text, site, rows)
    }

    /// Writes the overlay `text`, which `site` was validated with, and
    /// serves that site: no parse of its own.
    ///
    /// Then tells bootd which of `rows` that site leaves out
    /// ([`Controller::note_awaited`]): after serving it, so that a node
    /// whose address just arrived is never neither served nor awaited.
    pub(crate) fn write_and_serve(
        &self,
        text: &str,
        site: site::Site,
        rows: &[NodeRow],
    ) -> Result<(), String> {
        bootd::state::write_atomic(&site.overlay.path, text.as_bytes(), 0o644)
            .map_err(|e| format!("{}: {e}", site.overlay.path.display()))?;
        // Served by bootd before the API answers, then published for the
        // other daemons of the process (they need not parse it again).
        let site = Arc::new(site);
        bootd::serve_site(&self.app, Arc::clone(&site));
        self.note_awaited(rows, &site);
        self.app.feed.publish(site);
        Ok(())
    }

    /// Tells bootd which API nodes `site` (the one served) leaves out for
    /// want of the address or MACs their provider has yet to report
    /// (`bootd::awaited`): their Ignition is answered "not yet" rather than
    /// "unknown", on a token of their epoch.
    pub(crate) fn note_awaited(&self, rows: &[NodeRow], site: &site::Site) {
        let waiting: Vec<&NodeRow> = rows
            .iter()
            .filter(|r| !r.deleting && site.node(&r.name).is_none())
            .collect();
        let reinstalled = if waiting.is_empty() {
            HashMap::new()
        } else {
            self.reinstalls()
        };
        self.app.awaited.set(
            waiting
                .into_iter()
                .map(|r| {
                    (
                        r.name.clone(),
                        epoch_from(r, reinstalled.get(&r.name).copied()),
                    )
                })
                .collect(),
        );
    }
}

/// The cluster key of `node`'s last reinstall through the API (its epoch).
const EPOCH_PREFIX: &str = "epoch/";

pub(crate) fn epoch_key(node: &str) -> String {
    format!("{EPOCH_PREFIX}{node}")
}

/// [`Controller::epoch_of`] with the node's last reinstall known.
fn epoch_from(row: &NodeRow, reinstalled: Option<i64>) -> u64 {
    u64::try_from(row.created_at.max(reinstalled.unwrap_or(0))).unwrap_or(0)
}
