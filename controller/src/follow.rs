//! The controller's side of the one record of node events: it follows
//! bootd's timeline feed, stores the events it shows
//! (`GET /v1/nodes/{name}/events`) and makes their conditions True
//! (NetworkBooted, IgnitionServed), waking the node's reconcile loop. lbd
//! taking the bootstrap node out of its pools is bootstrap complete.

use crate::events;
use crate::store::{Condition, Event};
use crate::Controller;
use bootd::timeline::NodeEvent;
use std::sync::Arc;
use tokio::sync::broadcast;
use tracing::{error, warn};

/// Follows the timeline: stores the events the controller keeps and makes
/// their conditions True. A lag (more events than the feed holds arrived
/// while this task was busy) is caught up from the timeline itself.
pub async fn follow_timeline(ctl: Arc<Controller>, mut rx: broadcast::Receiver<Arc<NodeEvent>>) {
    catch_up(&ctl);
    loop {
        let first = tokio::select! {
            _ = ctl.shutdown.cancelled() => return,
            r = rx.recv() => r,
        };
        let mut batch = Vec::new();
        let mut lagged = false;
        let mut take = |r: Result<Arc<NodeEvent>, broadcast::error::RecvError>,
                        batch: &mut Vec<(String, Event)>| match r {
            Ok(ev) => {
                if ev.phase == bootd::timeline::Phase::Api
                    && ev.what == bootd::timeline::BOOTSTRAP_REMOVED
                {
                    if let Err(e) = ctl.complete_bootstrap("lbd") {
                        error!(error = %e, "bootstrap completion from lbd not stored");
                    }
                }
                if let Some(event) = events::event_of(&ev) {
                    batch.push((ev.node.clone(), event));
                }
                true
            }
            Err(broadcast::error::RecvError::Lagged(n)) => {
                warn!(
                    missed = n,
                    "controller fell behind the timeline; catching up from it"
                );
                lagged = true;
                true
            }
            Err(broadcast::error::RecvError::Closed) => false,
        };
        if !take(first, &mut batch) {
            return;
        }
        while batch.len() < 256 {
            match rx.try_recv() {
                Ok(ev) => take(Ok(ev), &mut batch),
                Err(broadcast::error::TryRecvError::Lagged(n)) => {
                    take(Err(broadcast::error::RecvError::Lagged(n)), &mut batch)
                }
                Err(_) => break,
            };
        }
        apply(&ctl, &batch);
        if lagged {
            catch_up(&ctl);
        }
    }
}

/// Stores `batch` and makes each event's condition True where it is not.
fn apply(ctl: &Controller, batch: &[(String, Event)]) {
    if batch.is_empty() {
        return;
    }
    if let Err(e) = ctl.store.add_events(batch) {
        error!(error = %e, events = batch.len(), "events not stored");
    }
    for (node, e) in batch {
        for gone in events::clears(&e.kind) {
            let was_true = ctl
                .store
                .conditions(node)
                .map(|cs| cs.iter().any(|x| x.kind == *gone && x.status == "True"))
                .unwrap_or(false);
            if was_true {
                let c = Condition {
                    kind: (*gone).into(),
                    status: "False".into(),
                    reason: "DiskChosen".into(),
                    message: e.message.clone(),
                    at: e.at,
                };
                if let Err(err) = ctl.store.set_condition(node, &c) {
                    error!(error = %err, "condition not stored");
                }
            }
        }
        if let Some((kind, reason)) = events::condition_of(&e.kind) {
            let c = Condition {
                kind: kind.into(),
                status: "True".into(),
                reason: reason.into(),
                message: e.message.clone(),
                at: e.at,
            };
            let had = ctl
                .store
                .conditions(node)
                .map(|cs| cs.iter().any(|x| x.kind == kind && x.status == "True"))
                .unwrap_or(false);
            if !had {
                if let Err(err) = ctl.store.set_condition(node, &c) {
                    error!(error = %err, "condition not stored");
                }
                ctl.wake(node);
            }
        }
    }
}

/// Reads the timeline of every node (the site's and the API's) and applies
/// what its conditions do not show yet (after a lag, and on start: what a
/// node did before the controller subscribed, an Ignition fetched from
/// another address among it, is not lost).
fn catch_up(ctl: &Controller) {
    let Ok(rows) = ctl.store.nodes() else { return };
    let mut names: Vec<String> = rows.into_iter().map(|r| r.name).collect();
    for n in &ctl.app.live.load().site.nodes {
        if !names.contains(&n.name) {
            names.push(n.name.clone());
        }
    }
    for name in names {
        let Some(track) = ctl.app.timeline.track(&name) else {
            continue;
        };
        let have: Vec<String> = ctl
            .store
            .conditions(&name)
            .map(|cs| {
                cs.into_iter()
                    .filter(|c| c.status == "True")
                    .map(|c| c.kind)
                    .collect()
            })
            .unwrap_or_default();
        let mut missing = Vec::new();
        for e in track.events.iter() {
            let ev = NodeEvent {
                node: name.clone(),
                at_us: e.at_us,
                phase: e.phase,
                what: e.what.clone(),
                error: e.error,
                detail: e.detail.clone(),
            };
            let Some(event) = events::event_of(&ev) else {
                continue;
            };
            let Some((cond, _)) = events::condition_of(&event.kind) else {
                continue;
            };
            if !have.iter().any(|h| h == cond)
                && !missing.iter().any(|(_, m): &(String, Event)| {
                    events::condition_of(&m.kind).map(|c| c.0) == Some(cond)
                })
            {
                missing.push((name.clone(), event));
            }
        }
        apply(ctl, &missing);
    }
}
