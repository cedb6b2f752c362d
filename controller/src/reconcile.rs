//! One reconcile loop per API node, and the event writer.
//!
//! A loop reads the node's row and does one step:
//! - not deleting, no machine yet: record a `create` intent (committed
//!   before any provider call), look for a machine made earlier (by tag or
//!   name: after a crash the provider may have made one whose reply never
//!   arrived), create one only if there is none, store its id, close the intent;
//! - a machine: poll it until active, learning its addresses; then follow
//!   the node's boot until Ready: a network-booted node (`BootKind:
//!   Network`) is Ready once NetworkBooted and IgnitionServed, an
//!   image-booted one (`BootKind: Image`: the provider boots an OS image
//!   with the pointer config as user data) once IgnitionServed;
//! - deleting: find the machine (stored id, or by tag/name), delete it
//!   (intent first), poll until it is gone, then drop the node.
//!
//! Transient provider errors are retried with exponential backoff and full
//! jitter, waiting at least what `Retry-After` asks; permanent ones, and
//! running past the deadline, fail the node with a message that names the
//! provider, the operation and the status (never a secret).

pub use crate::conditions::{
    boot_kind_condition, cond, conditions_view, BOOT_KIND, IGNITION_SERVED, NETWORK_BOOTED,
    PROVISIONED, READY,
};
use crate::providers::{BootKind, MachineState, NodeRequest, ProviderError, ProviderSpec};
use crate::store::{now_ms, Condition, NodeRow, Resource, StoreError};
use crate::{events, Controller};
use bootd::state::Snapshot;
use rand::Rng;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tracing::{error, info, warn};

mod ready;
use ready::{boot_step, finish, past_deadline};
mod release;
use release::release_step;

/// What a step leaves the loop to do.
#[derive(Debug)]
enum Next {
    /// Look again after the poll interval (or when woken).
    Poll,
    /// Nothing to do until woken (Ready, Failed).
    Idle,
    /// A transient failure: retry after a backoff.
    Retry(ProviderError),
    /// The node is gone: the loop ends.
    Gone,
}

/// Full-jitter exponential backoff: uniform in [d/2, d], d = base·2^attempt ≤ cap.
pub fn backoff(attempt: u32, base: Duration, cap: Duration) -> Duration {
    let d = base.saturating_mul(1u32 << attempt.min(16)).min(cap);
    let lo = d / 2;
    lo + (d - lo).mul_f64(rand::thread_rng().gen::<f64>())
}

pub async fn node_loop(
    ctl: Arc<Controller>,
    name: String,
    wake: Arc<Notify>,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut attempt: u32 = 0;
    loop {
        if stop.is_cancelled() {
            break;
        }
        let next = match ctl.store.node(&name) {
            Ok(Some(row)) => match step(&ctl, &row).await {
                Ok(n) => n,
                Err(e) => {
                    error!(node = %name, error = %e, "controller store error; retrying");
                    Next::Retry(ProviderError::transient("controller store error"))
                }
            },
            Ok(None) => Next::Gone,
            Err(e) => {
                error!(node = %name, error = %e, "controller store error; retrying");
                Next::Retry(ProviderError::transient("controller store error"))
            }
        };
        match next {
            Next::Gone => break,
            Next::Poll | Next::Idle => {
                attempt = 0;
                let poll = matches!(next, Next::Poll);
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = wake.notified() => {}
                    _ = async { if poll { tokio::time::sleep(ctl.tuning.poll).await } else { std::future::pending().await } } => {}
                }
            }
            Next::Retry(e) => {
                let mut delay = backoff(attempt, ctl.tuning.backoff_base, ctl.tuning.backoff_cap);
                if let ProviderError::Transient {
                    retry_after: Some(ra),
                    ..
                } = &e
                {
                    delay = delay.max(*ra);
                }
                attempt = attempt.saturating_add(1);
                let row = ctl.store.node(&name).ok().flatten();
                let left = row
                    .as_ref()
                    .map(|r| deadline_left(&ctl, r))
                    .unwrap_or_default();
                if row.as_ref().is_some_and(|r| !r.deleting) && delay > left {
                    fail(&ctl, &name, &format!("gave up before the deadline: {e}"));
                    continue;
                }
                let msg = format!(
                    "retrying in {:.1}s (attempt {attempt}): {e}",
                    delay.as_secs_f64()
                );
                warn!(node = %name, error = %e, delay = ?delay, attempt, "provider step failed; retrying");
                let _ = ctl.store.set_phase(
                    &name,
                    row.as_ref().map(|r| r.phase.as_str()).unwrap_or("Pending"),
                    &msg,
                );
                // Only the end of the term cuts a backoff short: Retry-After is honoured.
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
    ctl.loop_ended(&name, &wake);
}

fn deadline_left(ctl: &Controller, row: &NodeRow) -> Duration {
    let end = row.created_at + ctl.deadline().as_millis() as i64;
    Duration::from_millis((end - now_ms()).max(0) as u64)
}

fn fail(ctl: &Controller, name: &str, msg: &str) {
    fail_with(ctl, name, msg, None);
}

/// [`fail`], with one more condition (the one that failed) written in the
/// same transaction.
fn fail_with(ctl: &Controller, name: &str, msg: &str, also: Option<Condition>) {
    warn!(node = %name, reason = %msg, "node failed");
    let conds: Vec<Condition> = also
        .into_iter()
        .chain([cond(READY, "False", "Failed", msg)])
        .collect();
    let _ = ctl
        .store
        .set_phase_and_conditions(name, "Failed", msg, &conds);
    ctl.note(name, events::API, format!("failed: {msg}"));
}

fn provider_spec(row: &NodeRow) -> Result<Option<ProviderSpec>, String> {
    if row.provider.is_null() {
        return Ok(None);
    }
    serde_json::from_value(row.provider.clone())
        .map(Some)
        .map_err(|e| format!("stored provider spec unreadable: {e}"))
}

/// Whether the node's provider boots its machine from virtual media.
fn boots_media(row: &NodeRow) -> bool {
    matches!(provider_spec(row), Ok(Some(p)) if (p.registration.boot_kind)(&p.spec) == BootKind::Media)
}

/// What the provider is asked for: the node's script URL and its userdata
/// (an Ignition pointer config with the site CA and a token). A node whose
/// provider assigns its address or MACs is asked for without them. `None`:
/// the node should be served and is not (the overlay was not written).
fn node_request(ctl: &Controller, snap: &Snapshot, row: &NodeRow) -> Option<NodeRequest> {
    let name = row.name.as_str();
    let firmware = snap
        .site
        .node(name)
        .map(|n| n.firmware)
        .or_else(|| {
            row.spec["firmware"]
                .as_str()
                .and_then(site::Firmware::parse)
        })
        .unwrap_or(site::Firmware::Auto);
    let (ip, macs) = match snap.site.node(name) {
        Some(node) => (
            node.ip4.unwrap_or(std::net::Ipv4Addr::UNSPECIFIED),
            node.macs.iter().map(|m| m.to_string()).collect(),
        ),
        None => {
            let facts = ctl.store.all_facts().ok()?;
            let f = facts.get(name).and_then(crate::facts::Facts::from_json);
            if crate::facts::effective(&row.spec, f.as_ref()).is_some() {
                return None;
            }
            let ip = row.spec["ip"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED);
            let macs = row.spec["macs"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|m| m.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            (ip, macs)
        }
    };
    // No request yet: the URLs it is given are of the family it can reach
    // (site::Listen::base_url, as bootd's, and pointer_for's below).
    let http = snap.site.host.http.base_url(None, snap.site.node(name));
    // Its tokens are of its epoch, served or not yet (its address unknown):
    // they open its Ignition once it is served.
    let epoch = snap
        .site
        .node(name)
        .map_or_else(|| ctl.epoch_of(row), |n| n.epoch);
    Some(NodeRequest {
        name: name.to_string(),
        cluster: snap.site.cluster.name.clone(),
        ip,
        macs,
        // With a provider token: the machine's iPXE fetches it before its
        // provider has said which address it has.
        ipxe_url: format!(
            "{}/ipxe/{}.ipxe?token={}",
            http,
            name,
            ctl.app.key.issue(
                &bootd::token::subject(name, epoch),
                bootd::token::Scope::Provider,
                runtime::clock::now(),
                snap.site.ignition.token_ttl
            )
        ),
        firmware,
        uefi_http_url: snap
            .site
            .host
            .dhcp
            .as_ref()
            .map(|d| format!("{http}/boot/{}", d.boot_files.uefi_x86_64))
            .unwrap_or_default(),
        userdata: site::Secret(
            bootd::http::pointer_in_epoch(
                &ctl.app,
                snap,
                name,
                epoch,
                bootd::token::Scope::Provider,
                None,
            )
            .to_string(),
        ),
        // Minted only for a node that boots virtual media: a media token
        // opens the node's ISO (and builds it).
        media_url: site::Secret(if boots_media(row) {
            bootd::http::media_url_for(&ctl.app, snap, name)
        } else {
            String::new()
        }),
        intent: String::new(),
        inspects_first: snap.site.node(name).is_some_and(|n| {
            bootd::plan::plan(&snap.site, n, None, None) == bootd::plan::Plan::Inspect
                && ctl.app.inventories.get(name).is_none()
        }),
        media_step: snap
            .site
            .node(name)
            .map(|n| {
                let inv = ctl.app.inventories.get(name);
                bootd::plan::plan(
                    &snap.site,
                    n,
                    inv.as_deref().map(|r| &r.inventory),
                    ctl.app.inventories.release(name),
                )
                .step()
            })
            .unwrap_or_default(),
    })
}

async fn step(ctl: &Arc<Controller>, row: &NodeRow) -> Result<Next, StoreError> {
    let name = row.name.as_str();
    let spec = match provider_spec(row) {
        Ok(s) => s,
        Err(e) => {
            fail(ctl, name, &e);
            return Ok(Next::Idle);
        }
    };
    if row.deleting {
        return delete_step(ctl, row, spec.as_ref()).await;
    }
    if row.phase == "Failed" || row.phase == "Ready" {
        return Ok(Next::Idle);
    }
    let Some(spec) = spec else {
        return boot_step(
            ctl,
            row,
            cond(
                PROVISIONED,
                "True",
                "NoProvider",
                "no provider: the machine is brought up by other means",
            ),
            BootKind::Network,
        );
    };
    let kind = (spec.registration.boot_kind)(&spec.spec);
    ctl.app.timeline.set_boot(name, kind != BootKind::Network);
    let provider = match ctl.provider(spec.name()) {
        Ok(p) => p,
        Err(e) => {
            fail(ctl, name, &e);
            return Ok(Next::Idle);
        }
    };
    let snap = ctl.app.live.load_full();
    let Some(req) = node_request(ctl, &snap, row) else {
        // Not in the served site yet (the overlay write failed): export again.
        let _w = ctl.writing().await;
        let rows = ctl.store.nodes()?;
        if let Err(e) = ctl.export_overlay_now(&rows) {
            fail(
                ctl,
                name,
                &format!("the node overlay cannot be written: {e}"),
            );
            return Ok(Next::Idle);
        }
        return Ok(Next::Poll);
    };
    let machine = match ctl.store.resource(name)? {
        None => {
            ctl.store.set_phase(
                name,
                "Provisioning",
                &format!("looking for an existing {} machine", provider.name()),
            )?;
            // The intent is committed before the provider hears anything.
            let intent = match ctl
                .store
                .open_intents(name)?
                .into_iter()
                .find(|i| i.op == "create")
            {
                Some(i) => i,
                None => ctl.store.begin_intent(name, "create", provider.name())?,
            };
            // The intent names this create: idempotency tokens derive from it.
            let req = NodeRequest {
                intent: format!("{}-{}", intent.id, intent.created_at),
                ..req.clone()
            };
            // At most `host.admission.provisions` creates per provider at
            // once: the rest wait their turn here, intent recorded.
            let gate = ctl.app.admission.provisions(&snap.site, provider.name());
            let _pass = match gate.try_enter() {
                Some(p) => p,
                None => {
                    let l = gate.limits();
                    ctl.store.set_phase(
                        name,
                        "Provisioning",
                        &format!(
                            "waiting for a provisioning place at {} ({} at once)",
                            provider.name(),
                            l.limit
                        ),
                    )?;
                    match gate.enter().await {
                        Ok(p) => p,
                        Err(_) => return Ok(Next::Poll),
                    }
                }
            };
            let (m, how) = match provider.find(&req).await {
                Ok(Some(m)) => (m, "adopted"),
                Ok(None) => {
                    ctl.store.set_phase(
                        name,
                        "Provisioning",
                        &format!("creating the {} machine", provider.name()),
                    )?;
                    match provider.create(&req, &spec.spec).await {
                        Ok(m) => (m, "created"),
                        Err(e) => return Ok(provider_failed(ctl, name, e)),
                    }
                }
                Err(e) => return Ok(provider_failed(ctl, name, e)),
            };
            ctl.store
                .put_resource(name, &resource(provider.name(), &m))?;
            ctl.store
                .finish_intent(intent.id, &format!("{how} {}", m.id))?;
            ctl.note(
                name,
                events::PROVIDER,
                format!("{} machine {} {how}", provider.name(), m.id),
            );
            info!(node = %name, provider = provider.name(), id = %m.id, how, "machine recorded");
            m
        }
        Some(res) => match async {
            next_media(provider.as_ref(), kind, &res.external_id, &req).await?;
            provider.get(&res.external_id).await
        }
        .await
        {
            Ok(Some(m)) => m,
            Ok(None) => {
                warn!(node = %name, id = %res.external_id, "the machine is gone at the provider; a new one will be made");
                ctl.note(
                    name,
                    events::PROVIDER,
                    format!("machine {} disappeared", res.external_id),
                );
                ctl.store.drop_resource(name)?;
                return Ok(Next::Poll);
            }
            Err(e) => return Ok(provider_failed(ctl, name, e)),
        },
    };
    let mut res = resource(provider.name(), &machine);
    res.updated_at = now_ms();
    ctl.store.put_resource(name, &res)?;
    // What the provider says of the machine is recorded once it runs, and
    // before that when it already knows the MACs (a BMC's machine, read
    // before its power-on, so DHCP knows it at its first DISCOVER).
    let early = matches!(
        machine.state,
        MachineState::Pending(_) | MachineState::Prepared
    ) && !machine.macs.is_empty();
    if machine.state == MachineState::Active || early {
        let site = Arc::clone(&ctl.app.live.load().site);
        let f = crate::facts::Facts::of_machine(provider.name(), &machine, &site);
        crate::facts::record(ctl, name, &f).await?;
    }
    match &machine.state {
        MachineState::Active => {
            let msg = format!(
                "{} machine {} active; addresses {}",
                provider.name(),
                machine.id,
                machine.addresses.join(", ")
            );
            let was = ctl
                .store
                .conditions(name)?
                .into_iter()
                .any(|c| c.kind == PROVISIONED && c.status == "True");
            if !was {
                ctl.note(name, events::PROVIDER, msg.clone());
            }
            if let Some(next) = finish(ctl, name, provider.as_ref(), &machine.id).await? {
                return Ok(next);
            }
            boot_step(
                ctl,
                row,
                cond(PROVISIONED, "True", "MachineActive", &msg),
                kind,
            )
        }
        MachineState::Prepared => {
            // Started only once its MACs are recorded and belong to no other node.
            let conflict = ctl
                .store
                .conditions(name)?
                .into_iter()
                .find(|c| c.kind == crate::facts::ADDRESSES_RECORDED && c.status == "False");
            if let Some(c) = conflict {
                fail_with(
                    ctl,
                    name,
                    &format!("not started: {}", c.message),
                    Some(cond(PROVISIONED, "False", "Conflict", &c.message)),
                );
                return Ok(Next::Idle);
            }
            // Asked again: the facts just recorded may have put the node
            // in the served site, and what its boot does now (inspect
            // first, which ISO) is read from there.
            let snap = ctl.app.live.load_full();
            let req = match node_request(ctl, &snap, row) {
                Some(r) if snap.site.node(name).is_some() => r,
                _ => return Ok(Next::Poll),
            };
            if let Err(e) = provider.start(&machine.id, &req).await {
                return Ok(provider_failed(ctl, name, e));
            }
            ctl.note(
                name,
                events::PROVIDER,
                format!("{} machine {} started", provider.name(), machine.id),
            );
            Ok(Next::Poll)
        }
        MachineState::Pending(_) | MachineState::Deleting => {
            let msg = format!("machine {} is {}", machine.id, machine.state_str());
            ctl.store.set_phase_and_conditions(
                name,
                "Provisioning",
                &msg,
                &[cond(PROVISIONED, "False", "MachineNotActive", &msg)],
            )?;
            Ok(past_deadline(ctl, row, kind).unwrap_or(Next::Poll))
        }
        MachineState::Failed(why) => {
            fail_with(
                ctl,
                name,
                &format!("{} machine {}: {why}", provider.name(), machine.id),
                Some(cond(PROVISIONED, "False", "MachineFailed", why)),
            );
            Ok(Next::Idle)
        }
    }
}

/// A node booting virtual media: the ISO of its next step, once its live
/// system powered off after the last
/// ([`crate::providers::Provider::next_media`]).
async fn next_media(
    provider: &dyn crate::providers::Provider,
    kind: BootKind,
    id: &str,
    req: &NodeRequest,
) -> Result<(), ProviderError> {
    if kind != BootKind::Media {
        return Ok(());
    }
    provider.next_media(id, req).await
}

fn resource(provider: &str, m: &crate::providers::Machine) -> Resource {
    Resource {
        provider: provider.into(),
        external_id: m.id.clone(),
        state: m.state_str(),
        addresses: m.addresses.clone(),
        updated_at: now_ms(),
    }
}

fn provider_failed(ctl: &Controller, name: &str, e: ProviderError) -> Next {
    ctl.metrics
        .provider_errors
        .get_or_create(&bootd::metrics::Kind {
            kind: if e.is_transient() {
                "transient"
            } else {
                "permanent"
            },
        })
        .inc();
    if e.is_transient() {
        return Next::Retry(e);
    }
    fail(ctl, name, &e.to_string());
    Next::Idle
}

async fn delete_step(
    ctl: &Arc<Controller>,
    row: &NodeRow,
    spec: Option<&ProviderSpec>,
) -> Result<Next, StoreError> {
    let name = row.name.as_str();
    let Some(spec) = spec else {
        ctl.store.remove_node(name)?;
        info!(node = %name, "node removed");
        return Ok(Next::Gone);
    };
    let provider = match ctl.provider(spec.name()) {
        Ok(p) => p,
        Err(e) => {
            // Cannot reach the provider: keep the node (and its machine's record), say why.
            ctl.store
                .set_phase(name, "Deleting", &format!("cannot delete the machine: {e}"))?;
            return Ok(Next::Idle);
        }
    };
    let res = ctl.store.resource(name)?;
    let id = match &res {
        Some(r) => Some(r.external_id.clone()),
        None => {
            // A create may have reached the provider before a crash: look.
            let snap = ctl.app.live.load_full();
            let req = node_request(ctl, &snap, row)
                .unwrap_or_else(|| NodeRequest::bare(name, &snap.site.cluster.name));
            match provider.find(&req).await {
                Ok(m) => m.map(|m| m.id),
                Err(e) => return Ok(retry_delete(ctl, name, e)),
            }
        }
    };
    let Some(id) = id else {
        ctl.store.remove_node(name)?;
        info!(node = %name, "node removed (no machine existed)");
        return Ok(Next::Gone);
    };
    if let Some(since) = ctl.app.inventories.releasing_since(name) {
        if let Some(next) = release_step(ctl, row, provider.as_ref(), &id, since).await? {
            return Ok(next);
        }
    }
    let open = ctl
        .store
        .open_intents(name)?
        .into_iter()
        .find(|i| i.op == "delete");
    if let Some(intent) = &open {
        // A delete was begun before a crash: it may have reached the
        // provider. Look before sending another.
        match provider.get(&id).await {
            Ok(None) => {
                ctl.store.remove_node(name)?;
                info!(node = %name, id = %id, "machine gone; node removed");
                return Ok(Next::Gone);
            }
            Ok(Some(m)) if m.state == MachineState::Deleting => {
                ctl.store
                    .finish_intent(intent.id, &format!("delete of {id} found under way"))?;
                mark_deleting(ctl, name, provider.name(), &id)?;
            }
            Ok(Some(_)) => {}
            Err(e) => return Ok(retry_delete(ctl, name, e)),
        }
    }
    let res = ctl.store.resource(name)?;
    if res.as_ref().map(|r| r.state.as_str()) != Some("deleting") {
        let intent = match open {
            Some(i) => i,
            None => ctl.store.begin_intent(name, "delete", provider.name())?,
        };
        if let Err(e) = provider.delete(&id).await {
            return Ok(retry_delete(ctl, name, e));
        }
        ctl.store
            .finish_intent(intent.id, &format!("delete of {id} accepted"))?;
        mark_deleting(ctl, name, provider.name(), &id)?;
    }
    match provider.get(&id).await {
        Ok(None) => {
            ctl.store.remove_node(name)?;
            info!(node = %name, id = %id, "machine gone; node removed");
            Ok(Next::Gone)
        }
        Ok(Some(_)) => Ok(Next::Poll),
        Err(e) => Ok(retry_delete(ctl, name, e)),
    }
}

/// Records that the provider is deleting the node's machine `id`.
fn mark_deleting(ctl: &Controller, name: &str, provider: &str, id: &str) -> Result<(), StoreError> {
    ctl.store.put_resource(
        name,
        &Resource {
            provider: provider.into(),
            external_id: id.to_string(),
            state: "deleting".into(),
            addresses: vec![],
            updated_at: now_ms(),
        },
    )?;
    ctl.store.set_phase(
        name,
        "Deleting",
        &format!("waiting for machine {id} to go away"),
    )
}

/// Deletes never give up on their own: a machine must not be orphaned. A
/// permanent error is shown and retried at the backoff cap.
fn retry_delete(ctl: &Controller, name: &str, e: ProviderError) -> Next {
    let _ = ctl
        .store
        .set_phase(name, "Deleting", &format!("delete failed: {e}"));
    match e {
        ProviderError::Transient { .. } => Next::Retry(e),
        ProviderError::Permanent { what } => Next::Retry(ProviderError::Transient {
            what,
            retry_after: Some(ctl.tuning.backoff_cap),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_bounded_and_jittered() {
        let base = Duration::from_millis(100);
        let cap = Duration::from_secs(2);
        for attempt in 0..40 {
            let d = backoff(attempt, base, cap);
            let full = base.saturating_mul(1u32 << attempt.min(16)).min(cap);
            assert!(
                d >= full / 2 && d <= full,
                "attempt {attempt}: {d:?} not in [{:?}, {full:?}]",
                full / 2
            );
        }
        let samples: std::collections::BTreeSet<_> =
            (0..20).map(|_| backoff(5, base, cap)).collect();
        assert!(samples.len() > 1, "jitter");
    }
}
