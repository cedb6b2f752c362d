//! Prometheus metrics, read from the live state at each scrape (a collector
//! over the current frontends), so backends removed by a reload disappear
//! from `/metrics` with them. Labels: frontend, backend (node name or
//! address), addr.

use crate::state::{App, BootstrapPhase, Frontend};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

pub use crate::state::Metrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabels {
    frontend: String,
    backend: String,
    addr: String,
    role: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirLabels {
    frontend: String,
    backend: String,
    addr: String,
    role: &'static str,
    direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FrontendLabels {
    frontend: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    frontend: String,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Debug)]
struct Scrape {
    frontends: Arc<Vec<Arc<Frontend>>>,
    conns: u64,
    accept_errors: u64,
    admin_refused: u64,
    admin_closed: Vec<u64>,
    reloads: [u64; 2],
    bootstrap: BootstrapPhase,
}

/// The text exposition of every metric.
pub fn encode(app: &App) -> String {
    let mut registry = Registry::with_prefix("lbd");
    registry.register_collector(Box::new(Scrape {
        frontends: app.frontends.load_full(),
        conns: app.conns.load(Relaxed),
        accept_errors: app.accept_errors.load(Relaxed),
        admin_refused: app.admin_refused.load(Relaxed),
        admin_closed: app.admin_closed.iter().map(|c| c.load(Relaxed)).collect(),
        reloads: [
            app.metrics.reloads_ok.load(Relaxed),
            app.metrics.reloads_failed.load(Relaxed),
        ],
        bootstrap: app.bootstrap_phase(),
    }));
    let mut s = String::new();
    // Encoding into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut s, &registry);
    s
}

impl Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // Every backend a frontend knows: in its pool, or draining.
        let all: Vec<(Arc<str>, Arc<crate::state::Backend>)> = self
            .frontends
            .iter()
            .flat_map(|f| {
                let mut v: Vec<_> = f.pool.load().iter().cloned().collect();
                v.extend(
                    f.draining
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .iter()
                        .cloned(),
                );
                v.into_iter().map(move |b| (Arc::clone(&f.name), b))
            })
            .collect();
        let labels = |f: &Arc<str>, b: &crate::state::Backend| BackendLabels {
            frontend: f.to_string(),
            backend: b.name.clone(),
            addr: b.addr.to_string(),
            role: b.role.as_str(),
        };
        type Value = fn(&crate::state::Backend) -> i64;
        let gauges: [(&str, &str, Value); 4] = [
            (
                "backend_up",
                "1 when the backend passes its health checks",
                |b| b.healthy() as i64,
            ),
            (
                "backend_draining",
                "1 while the backend drains (no new connections)",
                |b| b.draining() as i64,
            ),
            (
                "backend_active_connections",
                "Open connections to the backend",
                |b| b.active.load(Relaxed) as i64,
            ),
            (
                "backend_check_latency_microseconds",
                "Duration of the last health probe",
                |b| b.check_latency().as_micros() as i64,
            ),
        ];
        for (name, help, value) in gauges {
            let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (f, b) in &all {
                ConstGauge::new(value(b)).encode(m.encode_family(&labels(f, b))?)?;
            }
        }
        type Count = fn(&crate::state::Backend) -> u64;
        let counters: [(&str, &str, Count); 4] = [
            (
                "backend_connections",
                "Connections relayed to the backend",
                |b| b.total.load(Relaxed),
            ),
            (
                "backend_connect_failures",
                "Connects to the backend that failed (then retried on another)",
                |b| b.connect_failures.load(Relaxed),
            ),
            (
                "backend_unanswered_failures",
                "Connections the backend reset or closed before answering (then sent to another)",
                |b| b.unanswered_failures.load(Relaxed),
            ),
            ("backend_check_failures", "Failed health probes", |b| {
                b.check_failures.load(Relaxed)
            }),
        ];
        for (name, help, value) in counters {
            let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (f, b) in &all {
                ConstCounter::new(value(b)).encode(m.encode_family(&labels(f, b))?)?;
            }
        }
        let mut m = enc.encode_descriptor(
            "backend_bytes",
            "Bytes relayed (to: client to backend; from: backend to client)",
            None,
            MetricType::Counter,
        )?;
        for (f, b) in &all {
            for (direction, v) in [("to", &b.bytes_to), ("from", &b.bytes_from)] {
                let l = labels(f, b);
                let l = DirLabels {
                    frontend: l.frontend,
                    backend: l.backend,
                    addr: l.addr,
                    role: l.role,
                    direction,
                };
                ConstCounter::new(v.load(Relaxed)).encode(m.encode_family(&l)?)?;
            }
        }
        let mut m = enc.encode_descriptor(
            "frontend_accepted",
            "Connections accepted",
            None,
            MetricType::Counter,
        )?;
        for f in self.frontends.iter() {
            ConstCounter::new(f.accepted.load(Relaxed)).encode(m.encode_family(
                &FrontendLabels {
                    frontend: f.name.to_string(),
                },
            )?)?;
        }
        let mut m = enc.encode_descriptor(
            "frontend_refused",
            "Connections reset at once, by reason",
            None,
            MetricType::Counter,
        )?;
        for f in self.frontends.iter() {
            for (reason, v) in [
                ("no_backend", &f.refused_no_backend),
                ("limit", &f.refused_limit),
            ] {
                ConstCounter::new(v.load(Relaxed)).encode(m.encode_family(&ReasonLabels {
                    frontend: f.name.to_string(),
                    reason,
                })?)?;
            }
        }
        ConstGauge::new(self.conns as i64).encode(enc.encode_descriptor(
            "connections",
            "Open client connections",
            None,
            MetricType::Gauge,
        )?)?;
        ConstCounter::new(self.accept_errors).encode(enc.encode_descriptor(
            "accept_errors",
            "Failed accepts (EMFILE and the like back off)",
            None,
            MetricType::Counter,
        )?)?;
        ConstCounter::new(self.admin_refused).encode(enc.encode_descriptor(
            "admin_connections_refused",
            "Admin connections closed at accept over a cap (64, 16 per source)",
            None,
            MetricType::Counter,
        )?)?;
        let mut m = enc.encode_descriptor(
            "admin_connections_closed",
            "Admin connections closed on a bad or slow client, by reason (content_length_and_transfer_encoding, duplicate_content_length, head_too_large, bad_head, head_timeout, idle_timeout, body_unread)",
            None,
            MetricType::Counter,
        )?;
        for (why, n) in runtime::http1::Closed::ALL.iter().zip(&self.admin_closed) {
            if *n > 0 {
                ConstCounter::new(*n).encode(m.encode_family(&ReasonLabel {
                    reason: why.as_str(),
                })?)?;
            }
        }
        let mut m = enc.encode_descriptor(
            "reloads",
            "Configuration reloads by result",
            None,
            MetricType::Counter,
        )?;
        for (result, v) in [("ok", self.reloads[0]), ("error", self.reloads[1])] {
            ConstCounter::new(v).encode(m.encode_family(&ResultLabels { result })?)?;
        }
        let phase = match self.bootstrap {
            BootstrapPhase::None => -1,
            BootstrapPhase::Serving => 0,
            BootstrapPhase::Draining => 1,
            BootstrapPhase::Removed => 2,
        };
        ConstGauge::new(phase).encode(enc.encode_descriptor(
            "bootstrap_phase",
            "Bootstrap node: -1 none, 0 serving, 1 draining, 2 removed",
            None,
            MetricType::Gauge,
        )?)?;
        Ok(())
    }
}
