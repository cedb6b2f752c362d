//! The controller's metrics, in bootd's one `/metrics` output (attached to
//! bootd's registry, [`bootd::metrics::Metrics::attach`]): the API's
//! requests, refusals, writes by token and closed connections, failed
//! provider calls, and
//! the cluster side's kubelet CSRs (approved, left pending by reason) and
//! failed cluster API calls.
//! Listed once the controller has started (a site with `host.api`).

use bootd::metrics::{Kind, Reason, RouteStatus};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;

/// A write's caller (the token's name, never its value) and how it ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenOutcome {
    pub token: String,
    /// `ok` (2xx), `forbidden` (403), `refused` (other 4xx), `failed` (5xx).
    pub outcome: &'static str,
}

#[derive(Debug)]
pub struct Metrics {
    /// `bootd_api_requests_total{route,status}`.
    pub requests: Family<RouteStatus, Counter>,
    /// `bootd_api_denials_total{reason}`.
    pub denials: Family<Reason, Counter>,
    /// `bootd_api_writes_total{token,outcome}`: every POST, PUT, PATCH and
    /// DELETE of an authenticated caller (the audit log's lines, counted).
    pub writes: Family<TokenOutcome, Counter>,
    /// `bootd_api_connections_closed_total{reason}`: closed on a bad or slow
    /// client ([`runtime::http1::Closed`]).
    pub closed: Family<Reason, Counter>,
    /// `bootd_provider_errors_total{kind}`.
    pub provider_errors: Family<Kind, Counter>,
    /// `bootd_csr_pending{reason}`: kubelet CSRs left for a person at the
    /// last look, by reason (`crate::cluster::csr::Reason`).
    pub csr_pending: Family<Reason, Gauge>,
    /// `bootd_csr_approved_total{kind}`: kubelet CSRs approved (`client`,
    /// `serving`).
    pub csr_approved: Family<Kind, Counter>,
    /// `bootd_cluster_api_errors_total{kind}`: failed calls to the
    /// cluster's API (`transient`, `permanent`).
    pub cluster_errors: Family<Kind, Counter>,
}

impl Metrics {
    /// The controller's metrics in `app`'s registry (added the first time).
    pub fn of(app: &bootd::App) -> Arc<Metrics> {
        app.metrics.attach(register)
    }
}

fn register(registry: &mut Registry) -> Metrics {
    let m = Metrics {
        requests: Family::default(),
        denials: Family::default(),
        writes: Family::default(),
        closed: Family::default(),
        provider_errors: Family::default(),
        csr_pending: Family::default(),
        csr_approved: Family::default(),
        cluster_errors: Family::default(),
    };
    registry.register(
        "api_connections_closed",
        "Controller API connections closed on a bad or slow client, by reason (as bootd_http_connections_closed_total)",
        m.closed.clone(),
    );
    registry.register(
        "api_requests",
        "Controller API requests by route and status",
        m.requests.clone(),
    );
    registry.register(
        "api_denials",
        "Controller API requests refused (missing, wrong, tokens_unavailable, tokens_invalid; scope: a token without the route's scope, 403) and connections closed at accept over a cap (max_connections, per_source)",
        m.denials.clone(),
    );
    registry.register(
        "api_writes",
        "Controller API writes (POST, PUT, PATCH, DELETE) by the caller's token name and outcome (ok, forbidden, refused, failed)",
        m.writes.clone(),
    );
    registry.register(
        "provider_errors",
        "Failed provider calls (transient, permanent)",
        m.provider_errors.clone(),
    );
    registry.register(
        "csr_pending",
        "Kubelet CSRs the controller left pending for a person at its last look, by reason",
        m.csr_pending.clone(),
    );
    registry.register(
        "csr_approved",
        "Kubelet CSRs the controller approved (client, serving)",
        m.csr_approved.clone(),
    );
    registry.register(
        "cluster_api_errors",
        "Failed calls to the cluster's API (transient, permanent)",
        m.cluster_errors.clone(),
    );
    m
}
