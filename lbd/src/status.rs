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
