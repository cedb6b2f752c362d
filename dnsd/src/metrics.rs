//! Prometheus metrics (text exposition at `/metrics`). UDP workers count
//! in plain integers ([`Local`]) and add them to the shared counters once
//! per batch, so the hot path touches no shared cache line per query.

use crate::core::Catalog;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Answered {
    pub transport: &'static str,
    pub rcode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Outcome {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Reason {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ZoneLabel {
    pub zone: String,
}

pub struct Metrics {
    registry: Registry,
    pub responses: Family<Answered, Counter>,
    pub truncated: Counter,
    pub dropped: Family<Outcome, Counter>,
    pub rrl: Family<Outcome, Counter>,
    pub reloads: Family<Outcome, Counter>,
    pub notifies: Family<Outcome, Counter>,
    pub transfers: Family<Outcome, Counter>,
    pub forwarded: Family<Outcome, Counter>,
    /// TCP connections closed at accept, over a cap (max_connections, per_source).
    pub tcp_refused: Family<Outcome, Counter>,
    /// HTTP connections closed on a bad or slow client ([`runtime::http1::Closed`]).
    pub http_closed: Family<Reason, Counter>,
    pub serial: Family<ZoneLabel, Gauge>,
    pub tcp_connections: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("dnsd");
        let m = Metrics {
            responses: Family::default(),
            truncated: Counter::default(),
            dropped: Family::default(),
            rrl: Family::default(),
            reloads: Family::default(),
            notifies: Family::default(),
            transfers: Family::default(),
            forwarded: Family::default(),
            tcp_refused: Family::default(),
            http_closed: Family::default(),
            serial: Family::default(),
            tcp_connections: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register(
            "responses",
            "Responses sent, by transport and RCODE",
            m.responses.clone(),
        );
        registry.register(
            "truncated_responses",
            "UDP responses sent with TC set",
            m.truncated.clone(),
        );
        registry.register(
            "dropped",
            "Requests not answered, by reason (malformed, send_error, forward_queue)",
            m.dropped.clone(),
        );
        registry.register(
            "rrl",
            "Responses rate-limited, by result (slipped, dropped)",
            m.rrl.clone(),
        );
        registry.register(
            "reloads",
            "Zone reloads by result (ok, error)",
            m.reloads.clone(),
        );
        registry.register(
            "notifies",
            "NOTIFY messages by result (acked, unanswered)",
            m.notifies.clone(),
        );
        registry.register(
            "transfers",
            "Zone transfers by result (axfr, ixfr_current, refused)",
            m.transfers.clone(),
        );
        registry.register(
            "forwarded",
            "Queries forwarded to upstream resolvers, by result (ok, failed)",
            m.forwarded.clone(),
        );
        registry.register(
            "tcp_refused",
            "TCP connections closed at accept because a cap was reached: DNS over TCP (max_connections, per_source), the HTTP metrics listener (http_max_connections, http_per_source)",
            m.tcp_refused.clone(),
        );
        registry.register(
            "http_connections_closed",
            "HTTP (metrics listener) connections closed on a bad or slow client, by reason (content_length_and_transfer_encoding, duplicate_content_length, head_too_large, bad_head, head_timeout, idle_timeout, body_unread)",
            m.http_closed.clone(),
        );
        registry.register(
            "zone_serial",
            "The SOA serial being served, per zone",
            m.serial.clone(),
        );
        registry.register(
            "tcp_connections",
            "Open TCP connections",
            m.tcp_connections.clone(),
        );
        Metrics { registry, ..m }
    }
}

pub fn rcode_name(rcode: u8) -> &'static str {
    match rcode {
        0 => "NOERROR",
        1 => "FORMERR",
        2 => "SERVFAIL",
        3 => "NXDOMAIN",
        4 => "NOTIMP",
        5 => "REFUSED",
        9 => "NOTAUTH",
        16 => "BADVERS",
        _ => "other",
    }
}

impl Metrics {
    pub fn encode(&self) -> String {
        let mut s = String::new();
        // Encoding into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut s, &self.registry);
        s
    }
    /// Records the serials of a newly served catalog.
    pub fn observe(&self, c: &Catalog) {
        for z in &c.zones {
            self.serial
                .get_or_create(&ZoneLabel {
                    zone: z.origin.to_string(),
                })
                .set(i64::from(z.serial()));
        }
    }
    pub fn answered(&self, transport: &'static str, rcode: u8) {
        self.responses
            .get_or_create(&Answered {
                transport,
                rcode: rcode_name(rcode),
            })
            .inc();
    }
}

/// A UDP worker's counts since its last flush.
#[derive(Debug, Default)]
pub struct Local {
    pub by_rcode: [u64; 17],
    pub truncated: u64,
    pub dropped: u64,
    pub send_errors: u64,
    pub rrl_slipped: u64,
    pub rrl_dropped: u64,
}

impl Local {
    pub fn answered(&mut self, rcode: u8, truncated: bool) {
        self.by_rcode[usize::from(rcode.min(16))] += 1;
        self.truncated += u64::from(truncated);
    }
    pub fn flush(&mut self, m: &Metrics) {
        for (rcode, n) in self.by_rcode.iter_mut().enumerate() {
            if *n > 0 {
                m.responses
                    .get_or_create(&Answered {
                        transport: "udp",
                        rcode: rcode_name(rcode as u8),
                    })
                    .inc_by(*n);
                *n = 0;
            }
        }
        let add = |f: &Family<Outcome, Counter>, result: &'static str, n: &mut u64| {
            if *n > 0 {
                f.get_or_create(&Outcome { result }).inc_by(*n);
                *n = 0;
            }
        };
        add(&m.dropped, "malformed", &mut self.dropped);
        add(&m.dropped, "send_error", &mut self.send_errors);
        add(&m.rrl, "slipped", &mut self.rrl_slipped);
        add(&m.rrl, "dropped", &mut self.rrl_dropped);
        if self.truncated > 0 {
            m.truncated.inc_by(self.truncated);
            self.truncated = 0;
        }
    }
}
