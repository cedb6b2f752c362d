//! Bootstrap teardown: once the control plane is up, the bootstrap node
//! leaves by itself.
//!
//! The controller owns the fact "bootstrap is complete" (the store's
//! `bootstrapComplete`, set once, with what said so: the API, the CLI after
//! `openshift-install wait-for bootstrap-complete`, lbd's
//! `autoCompleteAfter` seen on the timeline, or the cluster's own
//! `kube-system/bootstrap` ConfigMap read by [`crate::cluster`]). Everything else follows from
//! it, in this order, each step recorded as a cluster condition:
//!
//! 1. `BootstrapIgnitionRevoked`: every bootstrap node is added to bootd's
//!    revoked list (`<stateDir>/revoked.json`) and served at once: its
//!    Ignition is refused from now on, whatever token is shown;
//! 2. `BootstrapDrained`: lbd is told through its admin interface
//!    (`POST /bootstrap/complete` at `lb.adminListen`) and watched
//!    (`GET /status`) until the bootstrap backend is removed from `api` and
//!    `machine-config`; lbd keeps its own marker so a restarted lbd stays
//!    drained;
//! 3. `BootstrapMachineDeleted`: every bootstrap node made through the API
//!    is deleted as `DELETE /v1/nodes/{name}` would (the node's delete
//!    intent, its provider's delete, the node gone from the overlay); only
//!    after the drain, so no connection is cut by a machine going away.
//!
//! Each step looks before it acts and its outcome is stored before the next
//! starts, so a second bootstrap-complete changes nothing and a crash in
//! the middle resumes where it stopped (the delete resumes through the
//! node's own loop, which never sends a provider a second delete for a
//! machine it already saw going).

use crate::reconcile::backoff;
use crate::store::Condition;
use crate::Controller;
use bytes::Bytes;
use http::Method;
use http_body_util::Full;
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tracing::{info, warn};

/// The store's cluster fact: when bootstrap was complete, and who said so.
pub const BOOTSTRAP_COMPLETE: &str = "bootstrapComplete";
pub const REVOKED: &str = "BootstrapIgnitionRevoked";
pub const DRAINED: &str = "BootstrapDrained";
pub const DELETED: &str = "BootstrapMachineDeleted";
/// The steps, in order.
pub const STEPS: [&str; 3] = [REVOKED, DRAINED, DELETED];

fn key(step: &str) -> String {
    format!("teardown.{step}")
}

/// What a step left: done (or nothing to do), or try again later.
enum Outcome {
    Done(Condition),
    Later(Condition),
}

fn cond(kind: &str, status: &str, reason: &str, message: impl Into<String>) -> Condition {
    crate::reconcile::cond(kind, status, reason, &message.into())
}

/// The teardown conditions as stored (a step not reached yet is absent).
pub fn conditions(ctl: &Controller) -> Vec<Condition> {
    STEPS
        .iter()
        .filter_map(|s| {
            let (v, at) = ctl.store.cluster(&key(s)).ok().flatten()?;
            let v: Value = serde_json::from_str(&v).ok()?;
            Some(Condition {
                kind: s.to_string(),
                status: v["status"].as_str().unwrap_or("Unknown").into(),
                reason: v["reason"].as_str().unwrap_or_default().into(),
                message: v["message"].as_str().unwrap_or_default().into(),
                at,
            })
        })
        .collect()
}

fn store(ctl: &Controller, c: &Condition) {
    let v = json!({ "status": c.status, "reason": c.reason, "message": c.message }).to_string();
    if let Err(e) = ctl.store.set_cluster(&key(&c.kind), &v) {
        warn!(error = %e, step = %c.kind, "teardown step not stored");
    }
}

/// A step is finished when it is stored with an outcome that needs no retry.
fn finished(ctl: &Controller, step: &str) -> bool {
    conditions(ctl)
        .iter()
        .any(|c| c.kind == step && (c.status == "True" || c.reason == "NoAdminListen"))
}

/// Runs the teardown whenever bootstrap is complete and a step is not
/// finished; woken by [`Controller::complete_bootstrap`].
pub async fn run(
    ctl: Arc<Controller>,
    wake: Arc<Notify>,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut attempt = 0u32;
    loop {
        let mut retry = false;
        if let Ok(Some(_)) = ctl.store.cluster(BOOTSTRAP_COMPLETE) {
            for step in STEPS {
                if finished(&ctl, step) {
                    continue;
                }
                let out = match step {
                    REVOKED => revoke(&ctl),
                    DRAINED => drain(&ctl).await,
                    _ => delete(&ctl).await,
                };
                match out {
                    Outcome::Done(c) => {
                        info!(step, reason = %c.reason, "bootstrap teardown: {}", c.message);
                        store(&ctl, &c);
                        attempt = 0;
                    }
                    Outcome::Later(c) => {
                        store(&ctl, &c);
                        retry = true;
                        break;
                    }
                }
            }
        }
        let delay = if retry {
            attempt = attempt.saturating_add(1);
            Some(backoff(
                attempt.min(8),
                ctl.tuning.backoff_base.max(ctl.tuning.poll / 2),
                ctl.tuning.backoff_cap,
            ))
        } else {
            None
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = wake.notified() => {}
            _ = async { match delay { Some(d) => tokio::time::sleep(d).await, None => std::future::pending().await } } => {}
        }
    }
}

fn bootstrap_nodes(ctl: &Controller) -> Vec<String> {
    ctl.app
        .live
        .load()
        .site
        .nodes
        .iter()
        .filter(|n| n.is_bootstrap())
        .map(|n| n.name.clone())
        .collect()
}

/// On an appliance that does not lead (several appliances on one etcd):
/// once bootstrap is complete, the bootstrap node's Ignition is refused
/// here too (the elected appliance's teardown revokes it in its own state
/// directory only). Idempotent.
pub(crate) fn revoke_here(ctl: &Controller) {
    if !matches!(ctl.store.cluster(BOOTSTRAP_COMPLETE), Ok(Some(_))) {
        return;
    }
    let already = ctl.app.live.load().revoked.clone();
    if bootstrap_nodes(ctl).iter().all(|n| already.contains(n)) {
        return;
    }
    match revoke(ctl) {
        Outcome::Done(c) => {
            tracing::info!(reason = %c.reason, "bootstrap complete (shared): {}", c.message)
        }
        Outcome::Later(c) => {
            tracing::error!(reason = %c.reason, "bootstrap complete (shared), but: {}", c.message)
        }
    }
}

fn revoke(ctl: &Controller) -> Outcome {
    let names = bootstrap_nodes(ctl);
    if names.is_empty() {
        return Outcome::Done(cond(
            REVOKED,
            "True",
            "NoBootstrapNode",
            "the site has no bootstrap node",
        ));
    }
    for n in &names {
        if let Err(e) = bootd::state::set_revoked(&ctl.app.state_dir, n, true) {
            return Outcome::Later(cond(
                REVOKED,
                "False",
                "StateDirError",
                format!("cannot write the revoked-node list: {e}"),
            ));
        }
    }
    bootd::reload_revoked(&ctl.app);
    Outcome::Done(cond(
        REVOKED,
        "True",
        "Revoked",
        format!("Ignition of {} refused from now on", names.join(", ")),
    ))
}

/// lbd's admin address as the site gives it (an unspecified address is
/// reached on loopback).
fn admin_addr(ctl: &Controller) -> Option<SocketAddr> {
    let a = ctl.app.live.load().site.lb.admin_listen?;
    let ip = if a.ip().is_unspecified() {
        IpAddr::from([127, 0, 0, 1])
    } else {
        a.ip()
    };
    Some(SocketAddr::new(ip, a.port()))
}

async fn lbd_call(
    ctl: &Controller,
    method: Method,
    addr: SocketAddr,
    path: &str,
) -> Result<(u16, Value), String> {
    let req = http::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    let http = crate::providers::Http::new(ctl.tuning.request_timeout);
    let reply = http
        .send(req, "lbd admin")
        .await
        .map_err(|e| e.to_string())?;
    let v = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    Ok((reply.status.as_u16(), v))
}

async fn drain(ctl: &Controller) -> Outcome {
    let Some(addr) = admin_addr(ctl) else {
        // Nothing to call: say so, and do not hold the rest up (lbd's
        // health checks drop a backend whose machine is gone).
        return Outcome::Done(cond(
            DRAINED,
            "Unknown",
            "NoAdminListen",
            "the site has no lb.adminListen: run `lbd bootstrap-complete` where lbd runs",
        ));
    };
    let unreachable = |e: String| {
        Outcome::Later(cond(
            DRAINED,
            "False",
            "LbdUnreachable",
            format!("lbd's admin interface at {addr}: {e}; retrying"),
        ))
    };
    let phase = match lbd_call(ctl, Method::POST, addr, "/bootstrap/complete").await {
        Ok((200, v)) => v["bootstrap"].as_str().unwrap_or_default().to_string(),
        Ok((409, _)) => {
            return Outcome::Done(cond(
                DRAINED,
                "True",
                "NoBootstrapBackend",
                "lbd has no bootstrap backend",
            ))
        }
        Ok((st, v)) => {
            return unreachable(format!("HTTP {st} {}", v["error"].as_str().unwrap_or("")))
        }
        Err(e) => return unreachable(e),
    };
    let phase = if phase == "removed" {
        phase
    } else {
        match lbd_call(ctl, Method::GET, addr, "/status").await {
            Ok((200, v)) => v["bootstrap"].as_str().unwrap_or_default().to_string(),
            Ok((st, _)) => return unreachable(format!("status: HTTP {st}")),
            Err(e) => return unreachable(e),
        }
    };
    if phase == "removed" {
        Outcome::Done(cond(
            DRAINED,
            "True",
            "Removed",
            format!("lbd at {addr} drained the bootstrap backend out of api and machine-config"),
        ))
    } else {
        Outcome::Later(cond(
            DRAINED,
            "False",
            "Draining",
            format!("lbd at {addr} is draining the bootstrap backend ({phase})"),
        ))
    }
}

async fn delete(ctl: &Arc<Controller>) -> Outcome {
    let rows = match ctl.store.nodes() {
        Ok(r) => r,
        Err(e) => return Outcome::Later(cond(DELETED, "False", "StoreError", e.to_string())),
    };
    let site = ctl.app.live.load().site.clone();
    let api_bootstrap: Vec<_> = rows
        .iter()
        .filter(|r| r.spec["role"].as_str() == Some(site::ROLE_BOOTSTRAP))
        .collect();
    let site_only: Vec<String> = site
        .nodes
        .iter()
        .filter(|n| n.is_bootstrap() && !rows.iter().any(|r| r.name == n.name))
        .map(|n| n.name.clone())
        .collect();
    let mut going = Vec::new();
    for r in &api_bootstrap {
        if let Err(e) = ctl.begin_delete(&r.name, "bootstrap complete").await {
            return Outcome::Later(cond(DELETED, "False", "StoreError", e.to_string()));
        }
        going.push(r.name.clone());
    }
    if !going.is_empty() {
        return Outcome::Later(cond(
            DELETED,
            "False",
            "Deleting",
            format!("deleting {} and its machine", going.join(", ")),
        ));
    }
    if site_only.is_empty() {
        return Outcome::Done(cond(
            DELETED,
            "True",
            "Deleted",
            "no bootstrap node made through the API is left",
        ));
    }
    // A site-file node's machine is not the controller's to delete.
    Outcome::Done(cond(
        DELETED,
        "True",
        "NotManaged",
        format!(
            "{} defined in the site file, not made by the controller: power the machine off and remove it from the site",
            site_only.join(", ")
        ),
    ))
}

/// Every step finished, for tests and `GET /v1/cluster`.
pub fn done(ctl: &Controller) -> bool {
    STEPS.iter().all(|s| finished(ctl, s))
}

/// Waits for a teardown step's outcome to be stored; for the API's reply.
pub async fn settle(ctl: &Controller, within: Duration) {
    let end = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < end && !finished(ctl, REVOKED) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
