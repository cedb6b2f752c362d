//! The timeline's lbd phases, read from lbd's admin `GET /status`
//! (`lb.adminListen` in the site): a node's first connection through the
//! `machine-config` frontend (22623) and its backend turning up in the
//! `api` frontend (6443).
//!
//! bootd polls; lbd knows nothing of bootd. lbd's status carries its own
//! wall-clock times (`clients[].firstMs`, `backends[].upSinceMs`), so the
//! poll interval delays the timeline but does not change its times. See
//! docs/design-notes.md for why this rather than lbd pushing events.

use crate::timeline::{Phase, Raw, Subject};
use crate::App;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use serde_json::Value;
use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::debug;

/// Largest status document read.
const MAX_STATUS: usize = 4 << 20;

/// What one status document adds to the timeline. `seen` remembers what was
/// already recorded (by kind, address and lbd's time).
pub fn events_from_status(status: &Value, seen: &mut HashSet<(Phase, IpAddr, i64)>) -> Vec<Raw> {
    let mut out = Vec::new();
    for fe in status["frontends"].as_array().into_iter().flatten() {
        let name = fe["name"].as_str().unwrap_or("");
        let listen = fe["listen"].as_str().unwrap_or("");
        if name == "machine-config" {
            for c in fe["clients"].as_array().into_iter().flatten() {
                let (Some(ip), Some(ms)) = (c["ip"].as_str().and_then(|s| s.parse::<IpAddr>().ok()), c["firstMs"].as_i64()) else {
                    continue;
                };
                if seen.insert((Phase::MachineConfig, ip, ms)) {
                    let d = format!("first connection through lbd's machine-config frontend ({listen})");
                    out.push(Raw::new(Subject::ip(ip), Phase::MachineConfig, "first_connection", d).at(ms * 1000));
                }
            }
        }
        if name == "api" {
            for b in fe["backends"].as_array().into_iter().flatten() {
                if b["state"].as_str() != Some("up") {
                    continue;
                }
                let addr = b["addr"].as_str().and_then(|s| s.parse::<SocketAddr>().ok());
                let (Some(addr), Some(ms)) = (addr, b["upSinceMs"].as_i64()) else { continue };
                if seen.insert((Phase::Api, addr.ip(), ms)) {
                    let reason = b["reason"].as_str().unwrap_or("");
                    let d = format!("API backend {addr} up in lbd's checks: {reason}");
                    out.push(Raw::new(Subject::ip(addr.ip()), Phase::Api, "backend_up", d).at(ms * 1000));
                }
            }
        }
    }
    out
}

async fn fetch(addr: SocketAddr) -> Result<Value, String> {
    let stream = tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| e.to_string())?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
    let driver = tokio::spawn(conn);
    let req = http::Request::get("/status")
        .header(http::header::HOST, addr.to_string())
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let result = async {
        let resp = tokio::time::timeout(Duration::from_secs(5), send.send_request(req)).await.map_err(|_| "timed out".to_string())?;
        let resp = resp.map_err(|e| e.to_string())?;
        if !resp.status().is_success() {
            return Err(format!("HTTP {}", resp.status()));
        }
        let body = Limited::new(resp.into_body(), MAX_STATUS).collect().await.map_err(|e| e.to_string())?.to_bytes();
        serde_json::from_slice(&body).map_err(|e| e.to_string())
    }
    .await;
    driver.abort();
    result
}

/// Polls lbd's status every `every` until `shutdown`; does nothing when
/// the site has no `lb.adminListen`.
pub async fn watch(app: Arc<App>, every: Duration, shutdown: CancellationToken) {
    let mut seen = HashSet::new();
    let mut last_error = String::new();
    loop {
        let admin = app.live.load().site.lb.admin_listen.map(|a| {
            let ip = if a.ip().is_unspecified() { IpAddr::from([127, 0, 0, 1]) } else { a.ip() };
            SocketAddr::new(ip, a.port())
        });
        if let Some(addr) = admin {
            match fetch(addr).await {
                Ok(v) => {
                    if seen.len() > 100_000 {
                        seen.clear();
                    }
                    for raw in events_from_status(&v, &mut seen) {
                        app.timeline.record(raw);
                    }
                    last_error.clear();
                }
                Err(e) if e != last_error => {
                    debug!(%addr, error = %e, "lbd status not read (lbd not running?)");
                    last_error = e;
                }
                Err(_) => {}
            }
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

    #[test]
    fn first_connections_and_backends_up_once_each() {
        let status = serde_json::json!({
            "frontends": [
                {"name": "api", "listen": "10.77.0.1:6443", "backends": [
                    {"addr": "10.77.0.10:6443", "state": "up", "upSinceMs": 1_700_000_000_123i64, "reason": "HTTPS /readyz 200"},
                    {"addr": "10.77.0.11:6443", "state": "down", "reason": "refused"},
                ]},
                {"name": "machine-config", "listen": "10.77.0.1:22623", "backends": [], "clients": [
                    {"ip": "10.77.0.11", "firstMs": 1_700_000_000_456i64},
                ]},
                {"name": "ingress-http", "listen": "10.77.0.1:80", "clients": [{"ip": "10.77.0.20", "firstMs": 1}]},
            ]
        });
        let mut seen = HashSet::new();
        let ev = events_from_status(&status, &mut seen);
        let got: Vec<(Phase, String, i64)> = ev.iter().map(|r| (r.phase, r.subject.ip.unwrap().to_string(), r.at_us)).collect();
        assert_eq!(
            got,
            [
                (Phase::Api, "10.77.0.10".to_string(), 1_700_000_000_123_000),
                (Phase::MachineConfig, "10.77.0.11".to_string(), 1_700_000_000_456_000),
            ]
        );
        assert!(events_from_status(&status, &mut seen).is_empty(), "the next poll adds nothing");
    }
}
