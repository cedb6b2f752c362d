//! lbd's status as one typed value: what the admin API's `GET /status`
//! sends (JSON, camelCase; `lbd/tests/golden/status.json` pins the shape),
//! what `lbd status` prints, and what the all-in-one binary reads in
//! process for the boot timeline (bootd in another process reads the same
//! type from the JSON). Wall-clock milliseconds, so a reader's timeline
//! keeps lbd's own times.

use crate::state::BootstrapPhase;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub bootstrap: BootstrapPhase,
    /// Open client connections, all frontends.
    pub connections: u64,
    pub frontends: Vec<FrontendStatus>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FrontendStatus {
    /// `api`, `machine-config`, `ingress-http`, `ingress-https`, or a service's name.
    pub name: String,
    pub listen: SocketAddr,
    pub balance: String,
    /// The pool, then the backends still draining.
    pub backends: Vec<BackendStatus>,
    /// Each client address's first connection.
    pub clients: Vec<ClientStatus>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendStatus {
    pub name: String,
    pub addr: SocketAddr,
    /// `bootstrap`, `master`, `worker` or `service`.
    pub role: String,
    /// `up`, `down`, `draining`.
    pub state: String,
    pub reason: String,
    pub active: u64,
    pub connections: u64,
    pub connect_failures: u64,
    pub unanswered_failures: u64,
    pub bytes_to: u64,
    pub bytes_from: u64,
    pub check_latency_ms: f64,
    /// When the checks last turned it up (unix ms); `None` while down.
    pub up_since_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientStatus {
    pub ip: IpAddr,
    /// Its first connection (unix ms).
    pub first_ms: u64,
}

/// Whether `/status` (`body`) shows a backend up in every frontend that
/// listens on `vip` (or on every address); why not, when not.
pub fn ready(body: &str, vip: std::net::IpAddr) -> Result<(), String> {
    let st: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("/status is not JSON: {e}"))?;
    let mut on_vip = 0;
    for f in st["frontends"].as_array().into_iter().flatten() {
        let listen: Option<SocketAddr> = f["listen"].as_str().and_then(|s| s.parse().ok());
        let Some(listen) = listen else { continue };
        if listen.ip() != vip && !listen.ip().is_unspecified() {
            continue;
        }
        on_vip += 1;
        let up = f["backends"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["state"] == "up")
            .count();
        if up == 0 {
            return Err(format!(
                "frontend {} ({listen}) has no backend up",
                f["name"].as_str().unwrap_or("?")
            ));
        }
    }
    if on_vip == 0 {
        return Err(format!("no frontend listens on {vip}"));
    }
    Ok(())
}

#[cfg(test)]
mod ready_tests {
    use super::ready;

    const STATUS: &str = r#"{"frontends": [
        {"name": "api", "listen": "10.0.0.5:6443", "backends": [{"state": "down"}, {"state": "up"}]},
        {"name": "mc", "listen": "10.0.0.5:22623", "backends": [{"state": "draining"}, {"state": "down"}]},
        {"name": "http", "listen": "10.0.0.6:80", "backends": [{"state": "up"}]},
        {"name": "any", "listen": "0.0.0.0:9999", "backends": [{"state": "up"}]}
    ]}"#;

    #[test]
    fn every_frontend_on_the_vip_needs_a_backend_up() {
        assert_eq!(ready(STATUS, "10.0.0.6".parse().unwrap()), Ok(()));
        assert_eq!(
            ready(STATUS, "10.0.0.5".parse().unwrap()),
            Err("frontend mc (10.0.0.5:22623) has no backend up".into())
        );
        // A wildcard frontend is on every address; none on this one is wrong.
        assert_eq!(ready(STATUS, "10.0.0.7".parse().unwrap()), Ok(()));
        let only = r#"{"frontends": [{"name": "a", "listen": "10.0.0.5:1", "backends": []}]}"#;
        assert_eq!(
            ready(only, "10.0.0.7".parse().unwrap()),
            Err("no frontend listens on 10.0.0.7".into())
        );
        assert!(ready("<html>", "10.0.0.7".parse().unwrap())
            .unwrap_err()
            .contains("not JSON"));
    }
}
