//! Prometheus metrics (text exposition at `/metrics`). Labels carry route
//! names, status codes and denial reasons: never node secrets or tokens.
//!
//! One registry, one `/metrics` output: the parts built on bootd (the
//! controller) add their own metrics to it with [`Metrics::attach`], under
//! the same `bootd_` prefix; bootd names none of them.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// `bootd_node_phase_seconds{phase}`.
pub type PhaseSeconds = Family<PhaseLabel, Histogram, fn() -> Histogram>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteStatus {
    pub route: &'static str,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabel {
    pub route: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Reason {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Outcome {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Kind {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    pub phase: &'static str,
}

/// Boot phases last from about 10 ms (a DHCP exchange) to many minutes
/// (a master waiting for its API): 10 ms · 2^k up to ~22 min.
fn phase_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 18))
}

pub struct Metrics {
    registry: Mutex<Registered>,
    /// Per-node boot phase durations (`bootd_node_phase_seconds{phase}`).
    pub phase_seconds: PhaseSeconds,
    pub timeline_dropped: Counter,
    pub tftp: std::sync::Arc<tftp::TftpMetrics>,
    /// Admission gates (`bootd_admission_*`).
    pub gates: std::sync::Arc<crate::gate::GateMetrics>,
    /// DHCPv4 and DHCPv6 (`bootd_dhcp_*`, `bootd_dhcp6_*`).
    pub dhcp: std::sync::Arc<dhcp::Metrics>,
    pub requests: Family<RouteStatus, Counter>,
    pub bytes: Family<RouteLabel, Counter>,
    /// `bytes{route="images"}`, looked up once: it is counted per piece sent.
    pub image_bytes: Counter,
    pub denials: Family<Reason, Counter>,
    /// HTTP(S) connections closed at accept, over a cap (`max_connections`, `per_source`).
    pub http_refused: Family<Reason, Counter>,
    /// HTTP(S) connections closed on a bad or slow client
    /// ([`runtime::http1::Closed`]: refused framings, heads too large or
    /// late, bodies not sent, TLS handshakes).
    pub http_closed: Family<Reason, Counter>,
    pub reloads: Family<Outcome, Counter>,
    /// Discovery reports not kept (`not_its_lease`, `conflict`, `no_mac`, `store`).
    pub discovery_refused: Family<Reason, Counter>,
    /// Machines discovered and not yet adopted.
    pub discovered: prometheus_client::metrics::gauge::Gauge,
    /// Discovered keys (UUIDs) that more than one reporter claims.
    pub discovered_conflicts: prometheus_client::metrics::gauge::Gauge,
    /// Ignition served from another address than the node's, on a token.
    pub ignition_other_address: Counter,
    /// Status page and timeline requests refused (not from `host.statusFrom`).
    pub status_refused: Counter,
    /// The system clock minus the appliance's (`runtime::clock`), set at each scrape.
    pub clock_step: prometheus_client::metrics::gauge::Gauge<f64, std::sync::atomic::AtomicU64>,
    /// The process's live heap bytes (`runtime::heap`), set at each scrape;
    /// registered only when the binary counts them.
    heap_bytes: Option<prometheus_client::metrics::gauge::Gauge>,
}

/// The registry, and what was attached to it (once per type).
struct Registered {
    registry: Registry,
    attached: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("bootd");
        let requests = Family::<RouteStatus, Counter>::default();
        let bytes = Family::<RouteLabel, Counter>::default();
        let denials = Family::<Reason, Counter>::default();
        let reloads = Family::<Outcome, Counter>::default();
        let tftp = std::sync::Arc::new(tftp::TftpMetrics::default());
        tftp.register(&mut registry);
        let gates = std::sync::Arc::new(crate::gate::GateMetrics::default());
        gates.register(&mut registry);
        let dhcp = std::sync::Arc::new(dhcp::Metrics::default());
        dhcp.register(&mut registry);
        registry.register(
            "http_requests",
            "HTTP requests by route and status",
            requests.clone(),
        );
        registry.register(
            "http_response_bytes",
            "Response body bytes sent, by route",
            bytes.clone(),
        );
        registry.register(
            "ignition_denials",
            "Refused requests for a node's boot script, Ignition, metadata or userdata, by reason (unknown_node, revoked, not_from_node, token_invalid, token_expired, token_reused)",
            denials.clone(),
        );
        let http_refused = Family::<Reason, Counter>::default();
        registry.register(
            "http_connections_refused",
            "HTTP(S) connections closed at accept because a cap was reached (max_connections, per_source)",
            http_refused.clone(),
        );
        let http_closed = Family::<Reason, Counter>::default();
        registry.register(
            "http_connections_closed",
            "HTTP(S) connections closed on a bad or slow client, by reason (content_length_and_transfer_encoding, duplicate_content_length, head_too_large, bad_head, head_timeout, idle_timeout, body_unread, tls_handshake_timeout, tls_handshake_failed)",
            http_closed.clone(),
        );
        registry.register(
            "site_reloads",
            "Site reloads by result (ok, error)",
            reloads.clone(),
        );
        let discovery_refused = Family::<Reason, Counter>::default();
        registry.register(
            "discovery_refused",
            "Discovery reports not kept (not_its_lease, rate, no_mac, store)",
            discovery_refused.clone(),
        );
        let discovered = prometheus_client::metrics::gauge::Gauge::default();
        registry.register(
            "discovered_machines",
            "Machines with unknown MACs that reported themselves and are not adopted yet",
            discovered.clone(),
        );
        let discovered_conflicts = prometheus_client::metrics::gauge::Gauge::default();
        registry.register(
            "discovered_conflicts",
            "Discovered keys (UUIDs) that reporters with other MACs claim: adopt by MAC",
            discovered_conflicts.clone(),
        );
        let ignition_other_address = Counter::default();
        registry.register(
            "ignition_other_address",
            "Ignition configs served from another address than the node's, on a token",
            ignition_other_address.clone(),
        );
        let status_refused = Counter::default();
        registry.register(
            "status_refused",
            "Status page and timeline requests refused: not from host.statusFrom",
            status_refused.clone(),
        );
        let clock_step =
            prometheus_client::metrics::gauge::Gauge::<f64, std::sync::atomic::AtomicU64>::default(
            );
        registry.register(
            "clock_step_seconds",
            "The system clock minus the clock leases, tokens and the timeline use (read at start, \
             advanced monotonically): non-zero after the system clock was stepped",
            clock_step.clone(),
        );
        let heap_bytes = runtime::heap::allocated().map(|_| {
            let gauge = prometheus_client::metrics::gauge::Gauge::default();
            registry.register(
                "process_heap_bytes",
                "Bytes the process holds allocated on its heap (live allocations, not resident \
                 pages): what grows when something is kept that should not be",
                gauge.clone(),
            );
            gauge
        });
        let phase_seconds =
            Family::<PhaseLabel, Histogram, fn() -> Histogram>::new_with_constructor(
                phase_histogram as fn() -> Histogram,
            );
        let timeline_dropped = Counter::default();
        registry.register(
            "node_phase_seconds",
            "Time nodes spent in each boot phase (start to the next phase's start)",
            phase_seconds.clone(),
        );
        registry.register(
            "timeline_events_dropped",
            "Timeline events dropped because the recorder's queue was full",
            timeline_dropped.clone(),
        );
        let image_bytes = bytes.get_or_create(&RouteLabel { route: "images" }).clone();
        Metrics {
            registry: Mutex::new(Registered {
                registry,
                attached: HashMap::new(),
            }),
            phase_seconds,
            timeline_dropped,
            tftp,
            gates,
            dhcp,
            requests,
            bytes,
            image_bytes,
            denials,
            http_refused,
            http_closed,
            reloads,
            discovery_refused,
            discovered,
            discovered_conflicts,
            ignition_other_address,
            status_refused,
            clock_step,
            heap_bytes,
        }
    }
}

impl Metrics {
    /// The metrics of a part built on bootd, `T` (the controller's), in the
    /// same registry: `register` adds them the first time `T` is asked for;
    /// later calls return that same value, so a part started again on the
    /// same [`crate::App`] never lists its metrics twice.
    pub fn attach<T: Any + Send + Sync>(
        &self,
        register: impl FnOnce(&mut Registry) -> T,
    ) -> Arc<T> {
        let mut r = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        let r = &mut *r;
        let any = match r.attached.get(&TypeId::of::<T>()) {
            Some(a) => Arc::clone(a),
            None => {
                let a: Arc<dyn Any + Send + Sync> = Arc::new(register(&mut r.registry));
                r.attached.insert(TypeId::of::<T>(), Arc::clone(&a));
                a
            }
        };
        any.downcast::<T>()
            .unwrap_or_else(|_| unreachable!("stored under its own TypeId"))
    }

    pub fn encode(&self) -> String {
        self.clock_step.set(runtime::clock::system_offset());
        if let (Some(gauge), Some(bytes)) = (&self.heap_bytes, runtime::heap::allocated()) {
            gauge.set(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
        let mut s = String::new();
        // Encoding into a String cannot fail.
        let r = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        let _ = prometheus_client::encoding::text::encode(&mut s, &r.registry);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_attached_is_in_the_same_output_once() {
        struct Extra(Counter);
        let m = Metrics::default();
        let register = |r: &mut Registry| {
            let c = Counter::default();
            r.register("extra", "An attached counter", c.clone());
            Extra(c)
        };
        let a = m.attach(register);
        let b = m.attach(register);
        a.0.inc();
        assert_eq!(b.0.get(), 1, "the same value both times");
        let text = m.encode();
        assert_eq!(text.matches("# HELP bootd_extra ").count(), 1, "{text}");
        assert!(text.contains("bootd_extra_total 1"), "{text}");
        assert!(text.contains("# HELP bootd_http_requests "), "{text}");
    }
}
