//! The timeline's lbd phases, read from lbd's admin `GET /status`
//! (`lb.adminListen` in the site): a node's first connection through the
//! `machine-config` frontend (22623) and its backend turning up in the
//! `api` frontend (6443).
//!
//! bootd polls; lbd knows nothing of bootd. lbd's status carries its own
//! wall-clock times (`clients[].firstMs`, `backends[].upSinceMs`), so the
//! poll interval delays the timeline but does not change its times. See
//! docs/design-notes.md for why this rather than lbd pushing events.

use bootd::timeline::{Phase, Raw, Subject};
use bootd::App;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use lbd::status::Status;
use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::debug;

/// Where lbd's status comes from.
#[derive(Debug, Clone)]
pub enum LbSource {
    /// lbd in this process (the all-in-one binary): read as a value.
    InProcess(Arc<lbd::Lbd>),
    /// lbd in another process: its admin `GET /status` at the site's
    /// `lb.adminListen`, when it has one.
    Admin,
}

/// Largest status document read.
const MAX_STATUS: usize = 4 << 20;

/// What one status adds to the timeline. `seen` remembers what was
/// already recorded (by kind, address and lbd's time).
pub fn events_from_status(status: &Status, seen: &mut HashSet<(Phase, IpAddr, i64)>) -> Vec<Raw> {
    let mut out = Vec::new();
    for fe in &status.frontends {
        if site::site_frontend(&fe.name) == "machine-config" {
            for c in &fe.clients {
                let ms = c.first_ms as i64;
                if seen.insert((Phase::MachineConfig, c.ip, ms)) {
                    let d = format!(
                        "first connection through lbd's machine-config frontend ({})",
                        fe.listen
                    );
                    out.push(
                        Raw::new(
                            Subject::ip(c.ip),
                            Phase::MachineConfig,
                            "first_connection",
                            d,
                        )
                        .at(ms * 1000),
                    );
                }
            }
        }
        if site::site_frontend(&fe.name) == "api" {
            for b in fe.backends.iter().filter(|b| b.state == "up") {
                let Some(ms) = b.up_since_ms.map(|m| m as i64) else {
                    continue;
                };
                if seen.insert((Phase::Api, b.addr.ip(), ms)) {
                    let d = format!("API backend {} up in lbd's checks: {}", b.addr, b.reason);
                    out.push(
                        Raw::new(Subject::ip(b.addr.ip()), Phase::Api, "backend_up", d)
                            .at(ms * 1000),
                    );
                }
            }
        }
    }
    out
}

/// lbd took the bootstrap node out of its pools (its `autoCompleteAfter`,
/// its CLI or its admin API): one event per bootstrap node of the site,
/// which the controller takes as bootstrap complete.
pub fn bootstrap_events(status: &Status, site: &site::Site) -> Vec<Raw> {
    use lbd::state::BootstrapPhase::{Draining, Removed};
    if !matches!(status.bootstrap, Draining | Removed) {
        return Vec::new();
    }
    site.nodes
        .iter()
        .filter(|n| n.is_bootstrap())
        .map(|n| {
            Raw::new(
                Subject::node(&n.name),
                Phase::Api,
                bootd::timeline::BOOTSTRAP_REMOVED,
                "lbd took the bootstrap node out of api and machine-config",
            )
        })
        .collect()
}

async fn fetch(addr: SocketAddr) -> Result<Status, String> {
    let stream = tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| e.to_string())?;
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
    let driver = tokio::spawn(conn);
    let req = http::Request::get("/status")
        .header(http::header::HOST, addr.to_string())
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let result = async {
        let resp = tokio::time::timeout(Duration::from_secs(5), send.send_request(req))
            .await
            .map_err(|_| "timed out".to_string())?;
        let resp = resp.map_err(|e| e.to_string())?;
        if !resp.status().is_success() {
            return Err(format!("HTTP {}", resp.status()));
        }
        let body = Limited::new(resp.into_body(), MAX_STATUS)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        serde_json::from_slice(&body).map_err(|e| e.to_string())
    }
    .await;
    driver.abort();
    result
}

/// Reads lbd's status every `every` until `shutdown` and records what it
/// adds to bootd's timeline; with [`LbSource::Admin`], does nothing while
/// the site has no `lb.adminListen`.
pub async fn watch(app: Arc<App>, source: LbSource, every: Duration, shutdown: CancellationToken) {
    let mut seen = HashSet::new();
    let mut bootstrap_told = false;
    let mut last_error = String::new();
    loop {
        let status = match &source {
            LbSource::InProcess(lbd) => Some(Ok(lbd::admin::status(lbd))),
            LbSource::Admin => match app.live.load().site.lb.admin_listen {
                Some(a) => {
                    let ip = if a.ip().is_unspecified() {
                        IpAddr::from([127, 0, 0, 1])
                    } else {
                        a.ip()
                    };
                    let addr = SocketAddr::new(ip, a.port());
                    Some(fetch(addr).await.map_err(|e| format!("{addr}: {e}")))
                }
                None => None,
            },
        };
        match status {
            Some(Ok(s)) => {
                app.timeline.lbd_read();
                if seen.len() > 100_000 {
                    seen.clear();
                }
                for raw in events_from_status(&s, &mut seen) {
                    app.timeline.record(raw);
                }
                if !bootstrap_told {
                    let site = Arc::clone(&app.live.load().site);
                    let raws = bootstrap_events(&s, &site);
                    bootstrap_told = !raws.is_empty();
                    for raw in raws {
                        app.timeline.record(raw);
                    }
                }
                last_error.clear();
            }
            Some(Err(e)) if e != last_error => {
                debug!(error = %e, "lbd status not read (lbd not running?)");
                last_error = e;
            }
            _ => {}
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lbd::status::{BackendStatus, ClientStatus, FrontendStatus};

    fn backend(addr: &str, state: &str, up_since_ms: Option<u64>, reason: &str) -> BackendStatus {
        BackendStatus {
            name: addr.into(),
            addr: addr.parse().unwrap(),
            role: "master".into(),
            state: state.into(),
            reason: reason.into(),
            active: 0,
            connections: 0,
            connect_failures: 0,
            unanswered_failures: 0,
            bytes_to: 0,
            bytes_from: 0,
            check_latency_ms: 0.0,
            up_since_ms,
        }
    }

    fn frontend(
        name: &str,
        listen: &str,
        backends: Vec<BackendStatus>,
        clients: Vec<ClientStatus>,
    ) -> FrontendStatus {
        FrontendStatus {
            name: name.into(),
            listen: listen.parse().unwrap(),
            balance: "RoundRobin".into(),
            backends,
            clients,
        }
    }

    #[test]
    fn first_connections_and_backends_up_once_each() {
        let status = Status {
            bootstrap: lbd::state::BootstrapPhase::None,
            connections: 0,
            frontends: vec![
                frontend(
                    "api",
                    "10.77.0.1:6443",
                    vec![
                        backend(
                            "10.77.0.10:6443",
                            "up",
                            Some(1_700_000_000_123),
                            "HTTPS /readyz 200",
                        ),
                        backend("10.77.0.11:6443", "down", None, "refused"),
                    ],
                    vec![],
                ),
                frontend(
                    "machine-config",
                    "10.77.0.1:22623",
                    vec![],
                    vec![ClientStatus {
                        ip: "10.77.0.11".parse().unwrap(),
                        first_ms: 1_700_000_000_456,
                    }],
                ),
                frontend(
                    "ingress-http",
                    "10.77.0.1:80",
                    vec![],
                    vec![ClientStatus {
                        ip: "10.77.0.20".parse().unwrap(),
                        first_ms: 1,
                    }],
                ),
            ],
        };
        let mut seen = HashSet::new();
        let ev = events_from_status(&status, &mut seen);
        let got: Vec<(Phase, String, i64)> = ev
            .iter()
            .map(|r| (r.phase, r.subject.ip.unwrap().to_string(), r.at_us))
            .collect();
        assert_eq!(
            got,
            [
                (Phase::Api, "10.77.0.10".to_string(), 1_700_000_000_123_000),
                (
                    Phase::MachineConfig,
                    "10.77.0.11".to_string(),
                    1_700_000_000_456_000
                ),
            ]
        );
        assert!(
            events_from_status(&status, &mut seen).is_empty(),
            "the next poll adds nothing"
        );
    }
}
