//! The cluster side: with `host.api.kubeconfig`, the appliance that runs
//! the reconcile loops follows the cluster being installed.
//!
//! - [`kube`]: the cluster API client (CSRs, the `bootstrap` ConfigMap).
//! - [`csr`]: which kubelet CSRs are approved, a pure decision.
//!
//! Every `Tuning::cluster_poll`, [`run`]:
//! 1. until bootstrap is complete, reads the `kube-system/bootstrap`
//!    ConfigMap; `data.status: complete` is bootstrap complete, said by
//!    `cluster` ([`Controller::complete_bootstrap`], which starts the
//!    teardown);
//! 2. lists the CSRs, approves those [`csr::decide`] approves, and shows
//!    the rest that look like a kubelet's: the node's `CSRPending`
//!    condition, `bootd_csr_pending{reason}`, and `csrs` in
//!    `GET /v1/cluster`;
//! 3. sets a node's `Joined` once its kubelet's client and serving CSRs
//!    are approved (by anyone) or issued; it stays set.
//!
//! Whether a node's Ignition went to the node itself comes from its
//! conditions, which the timeline makes (`crate::follow`): `IgnitionServed`
//! True (bootd served it) and never `IgnitionFromOtherAddress` (bootd
//! records that whenever it serves the Ignition to an address that is not
//! one of the node's, on a token or with `fetchFrom: anyAddress`).
//!
//! Invariants: a CSR is never denied; the kubeconfig's key or token is
//! never in a log line, an error, a metric or a reply.

pub mod csr;
pub mod kube;

use crate::conditions::{cond, CSR_PENDING, IGNITION_SERVED, JOINED};
use crate::store::Condition;
use crate::{events, teardown, Controller};
use csr::{Csr, Decision, Ignition, NodeFacts, Reason};
use kube::{Approval, Kube};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// Who said bootstrap is complete, when the cluster's ConfigMap said it.
pub const BY_CLUSTER: &str = "cluster";
/// The cluster fact `GET /v1/cluster` shows as `csrs`.
pub const CSRS_FACT: &str = "csrs";
/// The condition of a node whose Ignition went elsewhere (`crate::events`).
const FROM_OTHER_ADDRESS: &str = "IgnitionFromOtherAddress";

/// What one look at the cluster left.
#[derive(Default)]
struct State {
    /// The kubeconfig the client was made from, and the client.
    client: Option<(site::Kubeconfig, Kube)>,
    /// The last failure, logged once until it changes.
    error: Option<String>,
    /// Nodes whose `CSRPending` is True.
    pending_nodes: BTreeSet<String>,
}

/// Follows the cluster while `stop` is not cancelled (the term this
/// appliance runs the loops in). Without a kubeconfig it only looks, each
/// poll, whether a reload gave one.
pub async fn run(ctl: Arc<Controller>, stop: CancellationToken) {
    let mut st = State::default();
    // CSRPending set in an earlier term is cleared once nothing is pending.
    if let Ok(rows) = ctl.store.nodes() {
        let site = ctl.app.live.load().site.clone();
        let names = site
            .nodes
            .iter()
            .map(|n| n.name.clone())
            .chain(rows.into_iter().map(|r| r.name));
        for n in names {
            if is_true(&ctl, &n, CSR_PENDING) {
                st.pending_nodes.insert(n);
            }
        }
    }
    loop {
        let kc = kubeconfig(&ctl);
        match kc {
            None => st.client = None,
            Some(kc) => {
                if st.client.as_ref().map(|(k, _)| k) != Some(&kc) {
                    st.client = match Kube::new(&kc, ctl.tuning.request_timeout) {
                        Ok(k) => Some((kc, k)),
                        Err(e) => {
                            let e = format!("{}: {e}", kc.path.display());
                            failed(&ctl, &mut st, e, "permanent");
                            None
                        }
                    };
                }
                if let Some((_, kube)) = &st.client {
                    match look(&ctl, kube, &mut st.pending_nodes).await {
                        Ok(()) => {
                            if st.error.take().is_some() {
                                info!("cluster API reachable again");
                            }
                        }
                        Err(e) => {
                            let kind = if e.is_transient() {
                                "transient"
                            } else {
                                "permanent"
                            };
                            failed(&ctl, &mut st, e.to_string(), kind);
                        }
                    }
                }
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(ctl.tuning.cluster_poll) => {}
        }
    }
}

fn failed(ctl: &Controller, st: &mut State, e: String, kind: &'static str) {
    ctl.metrics
        .cluster_errors
        .get_or_create(&bootd::metrics::Kind { kind })
        .inc();
    if st.error.as_deref() != Some(e.as_str()) {
        warn!(error = %e, "cluster API: kubelet CSRs and bootstrap completion not looked at; retrying");
        let mut view = stored_view(ctl);
        view["error"] = json!(e);
        store_view(ctl, &view);
        st.error = Some(e);
    }
}

fn is_true(ctl: &Controller, node: &str, kind: &str) -> bool {
    ctl.store
        .conditions(node)
        .map(|cs| cs.iter().any(|c| c.kind == kind && c.status == "True"))
        .unwrap_or(false)
}

/// One look: the bootstrap ConfigMap, then the CSRs.
async fn look(
    ctl: &Arc<Controller>,
    kube: &Kube,
    pending_nodes: &mut BTreeSet<String>,
) -> crate::providers::Result<()> {
    if matches!(ctl.store.cluster(teardown::BOOTSTRAP_COMPLETE), Ok(None)) {
        if let Some(status) = kube.bootstrap_status().await? {
            if status == "complete" {
                info!("the cluster's bootstrap ConfigMap says complete");
                if let Err(e) = ctl.complete_bootstrap(BY_CLUSTER) {
                    warn!(error = %e, "bootstrap completion from the cluster not stored");
                }
            }
        }
    }
    let items = kube.list_csrs().await?;
    let snap = ctl.app.live.load_full();
    let site = &snap.site;
    let domain = site.cluster.domain();
    let facts = |name: &str| node_facts(ctl, site, name);
    let mut csrs: Vec<Csr> = items.iter().filter_map(Csr::parse).collect();
    let mut pending: BTreeMap<Option<String>, Vec<(Reason, String)>> = BTreeMap::new();
    let mut counts: BTreeMap<Reason, i64> = BTreeMap::new();
    let mut first_error = None;
    for (item, c) in items.iter().zip(csrs.iter_mut()) {
        match csr::decide(c, &domain, facts) {
            Decision::Ignore => {}
            Decision::Approve { node, kind } => {
                let msg = format!(
                    "approved by bare-metal-boot: {node} was booted by this appliance, which served its Ignition to the node's own address"
                );
                match kube
                    .approve(item, &msg, &k8s_time(crate::store::now_ms()))
                    .await
                {
                    Ok(Approval::Approved) => {
                        c.state = csr::State::Approved;
                        ctl.metrics
                            .csr_approved
                            .get_or_create(&bootd::metrics::Kind {
                                kind: kind.as_str(),
                            })
                            .inc();
                        info!(node = %node, csr = %c.name, kind = kind.as_str(), "kubelet CSR approved");
                        ctl.note(
                            &node,
                            events::CLUSTER,
                            format!("kubelet {} CSR {} approved", kind.as_str(), c.name),
                        );
                    }
                    Ok(Approval::Conflict) | Ok(Approval::Gone) => {}
                    // The others are still looked at; the error ends the look.
                    Err(e) => first_error = first_error.or(Some(e)),
                }
            }
            Decision::Pending {
                node,
                reason,
                message,
            } => {
                *counts.entry(reason).or_default() += 1;
                pending.entry(node).or_default().push((
                    reason,
                    format!("{} ({}): {message}", c.name, short_signer(&c.signer)),
                ));
            }
        }
    }
    for r in Reason::ALL {
        ctl.metrics
            .csr_pending
            .get_or_create(&bootd::metrics::Reason { reason: r.as_str() })
            .set(counts.get(&r).copied().unwrap_or(0));
    }
    show_pending(ctl, &pending, pending_nodes);
    set_joined(ctl, &csrs, &domain);
    let view = json!({
        "pending": pending.iter().flat_map(|(node, l)| l.iter().map(move |(r, m)| json!({
            "node": node, "reason": r.as_str(), "message": m,
        }))).collect::<Vec<_>>(),
        "error": first_error.as_ref().map(|e| e.to_string()),
    });
    store_view(ctl, &view);
    first_error.map_or(Ok(()), Err)
}

/// What the appliance knows of site node `name` for [`csr::decide`].
fn node_facts(ctl: &Controller, site: &site::Site, name: &str) -> Option<NodeFacts> {
    let n = site.node(name)?;
    let mut addresses: Vec<IpAddr> = n
        .ip4
        .map(IpAddr::V4)
        .into_iter()
        .chain(n.ip6.map(IpAddr::V6))
        .collect();
    addresses.extend(n.addresses.iter().flatten().map(|a| a.to_canonical()));
    let conds = ctl.store.conditions(name).unwrap_or_default();
    let is = |k: &str| conds.iter().find(|c| c.kind == k && c.status == "True");
    let ignition = match (is(IGNITION_SERVED), is(FROM_OTHER_ADDRESS)) {
        (_, Some(other)) => Ignition::FromOther(other.message.clone()),
        (Some(_), None) => Ignition::FromNode,
        (None, None) => Ignition::NotServed,
    };
    Some(NodeFacts {
        name: n.name.clone(),
        addresses,
        ignition,
    })
}

/// `CSRPending` on every node with CSRs left for a person (the first one's
/// reason; every one in the message), cleared where none is left.
fn show_pending(
    ctl: &Controller,
    pending: &BTreeMap<Option<String>, Vec<(Reason, String)>>,
    pending_nodes: &mut BTreeSet<String>,
) {
    let mut now = BTreeSet::new();
    for (node, list) in pending {
        let Some(node) = node else {
            for (r, m) in list {
                tracing::debug!(
                    reason = r.as_str(),
                    "kubelet CSR naming no node of this site left pending: {m}"
                );
            }
            continue;
        };
        now.insert(node.clone());
        let words: Vec<&str> = list.iter().map(|(_, m)| m.as_str()).collect();
        let c = cond(
            CSR_PENDING,
            "True",
            list[0].0.as_str(),
            &format!(
                "left for a person, never denied: {}; if it is right: oc adm certificate approve <name>",
                words.join("; ")
            ),
        );
        set_if_changed(ctl, node, c);
    }
    for gone in pending_nodes.difference(&now) {
        let c = cond(
            CSR_PENDING,
            "False",
            "NonePending",
            "no kubelet CSR of the node is left pending",
        );
        set_if_changed(ctl, gone, c);
    }
    *pending_nodes = now;
}

/// `Joined` on every site node whose kubelet has both certificates.
fn set_joined(ctl: &Controller, csrs: &[Csr], domain: &str) {
    let named: BTreeSet<&str> = csrs
        .iter()
        .filter_map(|c| c.claimed().map(|n| csr::node_name(n, domain)))
        .collect();
    let site = ctl.app.live.load();
    for node in named.into_iter().filter(|n| site.site.node(n).is_some()) {
        if is_true(ctl, node, JOINED) {
            continue;
        }
        let c = match csr::joined(csrs, node, domain) {
            (true, true) => cond(
                JOINED,
                "True",
                "CertificatesApproved",
                "the kubelet's client and serving CSRs are approved",
            ),
            (true, false) => cond(
                JOINED,
                "False",
                "WaitingForServingCSR",
                "the kubelet's client CSR is approved; its serving CSR is not yet",
            ),
            _ => cond(
                JOINED,
                "False",
                "WaitingForClientCSR",
                "the kubelet's client CSR is not approved yet",
            ),
        };
        if c.status == "True" {
            info!(
                node,
                "node joined: its kubelet's client and serving CSRs are approved"
            );
            ctl.note(node, events::CLUSTER, "Joined");
            // The last phase of its boot timeline (status page, API, metrics).
            ctl.app.timeline.record(bootd::timeline::Raw::new(
                bootd::timeline::Subject::node(node),
                bootd::timeline::Phase::Joined,
                "joined",
                "the kubelet's client and serving certificates approved",
            ));
        }
        set_if_changed(ctl, node, c);
    }
}

/// Sets `c` unless the node has it already (same status, reason, message).
fn set_if_changed(ctl: &Controller, node: &str, c: Condition) {
    let same = ctl.store.conditions(node).is_ok_and(|cs| {
        cs.iter().any(|x| {
            x.kind == c.kind
                && x.status == c.status
                && x.reason == c.reason
                && x.message == c.message
        })
    });
    if !same {
        if let Err(e) = ctl.store.set_condition(node, &c) {
            warn!(node, error = %e, condition = %c.kind, "condition not stored");
        }
    }
}

fn short_signer(s: &str) -> &str {
    match s {
        csr::CLIENT_SIGNER => "kubelet client",
        csr::SERVING_SIGNER => "kubelet serving",
        other => other,
    }
}

/// `csrs` in `GET /v1/cluster`: whether the cluster is followed
/// (`host.api.kubeconfig`), the kubelet CSRs left for a person at the last
/// look (`node`, `reason`, `message`), and the last error reaching it.
/// The served site's `host.api.kubeconfig`: the cluster is followed while
/// it has one.
fn kubeconfig(ctl: &Controller) -> Option<site::Kubeconfig> {
    ctl.app
        .live
        .load()
        .site
        .host
        .api
        .as_ref()
        .and_then(|a| a.kubeconfig.clone())
}

pub fn view(ctl: &Controller) -> Value {
    let mut v = stored_view(ctl);
    v["followed"] = json!(kubeconfig(ctl).is_some());
    v
}

fn stored_view(ctl: &Controller) -> Value {
    ctl.store
        .cluster(CSRS_FACT)
        .ok()
        .flatten()
        .and_then(|(v, _)| serde_json::from_str(&v).ok())
        .unwrap_or_else(|| json!({ "pending": [], "error": null }))
}

/// The `csrs` cluster fact, written only when it changes.
fn store_view(ctl: &Controller, view: &Value) {
    if &stored_view(ctl) != view {
        if let Err(e) = ctl.store.set_cluster(CSRS_FACT, &view.to_string()) {
            warn!(error = %e, "the cluster's CSR view not stored");
        }
    }
}

/// Kubernetes' time format (RFC 3339, whole seconds, UTC).
fn k8s_time(ms: i64) -> String {
    let s = crate::rfc3339(ms);
    format!("{}Z", s.get(..19).unwrap_or(&s))
}
