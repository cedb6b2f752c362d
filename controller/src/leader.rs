//! Several appliances on one etcd (`host.store.etcd`): every one serves
//! the API and follows the shared nodes into the overlay it serves; one at
//! a time, elected, runs the reconcile loops and the bootstrap teardown.
//!
//! - [`lead`]: campaigns for the election `controller`; while elected, the
//!   loops run here ([`Controller::begin_term`]); when the leadership
//!   lapses (etcd lease not renewed for 2/3 of `leaseTtl`) they stop at
//!   their next wait (their provider calls are fenced: module `fence`),
//!   and the next appliance elected, once the old one's calls in flight
//!   have ended, resumes each node from the store (its open intents
//!   first), as after a restart.
//! - [`follow`]: watches the controller's keys; a node written by any
//!   appliance is exported into this appliance's overlay (so it boots from
//!   every appliance), and, while elected, gets its loop or wakes it.

use crate::Controller;
use etcd::{Change, Etcd};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tracing::{error, info, warn};

/// The election's name (under `<prefix>election/`).
pub(crate) const ELECTION: &str = "controller";

pub(crate) use etcd::identity;

fn lease_ttl(ctl: &Controller) -> Duration {
    match &ctl.app.live.load().site.host.store {
        site::Store::Etcd(e) => e.lease_ttl,
        site::Store::Sqlite => Duration::from_secs(10),
    }
}

/// Runs the loops here while this appliance holds the election (etcd
/// resigns it on shutdown, so the next appliance takes over at once).
pub(crate) async fn lead(ctl: Arc<Controller>, etcd: Etcd) {
    let me = identity();
    let mut held = etcd.elect(ELECTION, lease_ttl(&ctl), ctl.shutdown.clone());
    loop {
        let now = *held.borrow_and_update();
        if now && ctl.acting().is_none() {
            info!(appliance = %me, "controller leadership taken: the reconcile loops run here");
            ctl.begin_term();
        } else if !now && ctl.acting().is_some() {
            warn!(appliance = %me, "controller leadership lost: the reconcile loops stop here");
            ctl.end_term();
        }
        if held.changed().await.is_err() {
            ctl.end_term();
            return;
        }
    }
}

/// Follows the controller's keys written by any appliance: nodes and their
/// provider facts into the overlay; nodes and cluster facts into the
/// loops and the teardown while elected.
pub(crate) async fn follow(ctl: Arc<Controller>, etcd: Etcd) {
    let mut changes = etcd.watch("controller/");
    let mut seen = Seen::new();
    loop {
        let first = tokio::select! {
            c = changes.recv() => c,
            _ = ctl.shutdown.cancelled() => return,
        };
        let Some(first) = first else { return };
        // A burst (a create writes several keys) is read once.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut batch = vec![first];
        while let Ok(c) = changes.try_recv() {
            batch.push(c);
        }
        let resync = batch.contains(&Change::Resync);
        let key = |p: &str| {
            batch
                .iter()
                .any(|c| matches!(c, Change::Key(k) if k.starts_with(p)))
        };
        let nodes = key("controller/nodes/") || key("controller/facts/");
        let cluster = key("controller/cluster/");
        if resync || nodes {
            apply_nodes(&ctl, &mut seen).await;
        }
        if resync || cluster {
            ctl.teardown.notify_one();
            crate::teardown::revoke_here(&ctl);
        }
    }
}

/// What [`follow`] last saw of each node: its deletion mark and spec.
type Seen = HashMap<String, (bool, String)>;

/// Exports the overlay when the shared nodes changed it; while elected,
/// starts the loop of a node new to this appliance and wakes the loop of a
/// node whose spec or deletion mark another appliance changed. (Not on
/// every write: the loops' own writes of phases would wake them again.)
///
/// The shared nodes and facts are read, and the overlay made and checked,
/// without the writes lock, so that API writes do not wait on these etcd
/// reads; the lock is taken for the overlay's write only, and when a write
/// ended meanwhile (its own export may be newer) the nodes are read again
/// under it.
async fn apply_nodes(ctl: &Arc<Controller>, seen: &mut Seen) {
    let began = ctl.write_gen();
    let read = || -> Result<(Vec<crate::store::NodeRow>, HashMap<String, serde_json::Value>), String> {
        let rows = ctl.store.nodes().map_err(|e| e.to_string())?;
        let facts = ctl.store.all_facts().map_err(|e| e.to_string())?;
        Ok((rows, facts))
    };
    let (rows, facts) = match read() {
        Ok(r) => r,
        Err(e) => {
            error!(error = %e, "controller store: shared nodes not read");
            return;
        }
    };
    let text = ctl.overlay_text(&rows, &facts);
    let path = ctl.app.live.load().site.overlay.path.clone();
    if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
        let site = site::load_with_overlay(&ctl.site_path, &text);
        let _w = ctl.writing().await;
        let exported = if ctl.write_gen() == began {
            site.map_err(|e| e.to_string())
                .and_then(|site| ctl.write_and_serve(&text, site, &rows))
        } else {
            // A write ended since the read: read again, under the lock.
            read().and_then(|(rows, _)| ctl.export_overlay_now(&rows))
        };
        match exported {
            Ok(()) => info!(nodes = rows.len(), "overlay follows the shared nodes"),
            Err(e) => error!(error = %e, "shared nodes not exported to the overlay"),
        }
    } else {
        // The same overlay: a node new here may still wait for its address.
        ctl.note_awaited(&rows, &ctl.app.live.load().site);
    }
    let acting = ctl.acting().is_some();
    let mut now = Seen::new();
    for r in &rows {
        let mark = (r.deleting, r.spec.to_string());
        if acting && seen.get(&r.name) != Some(&mark) {
            ctl.ensure_loop(&r.name);
        }
        now.insert(r.name.clone(), mark);
    }
    *seen = now;
}
