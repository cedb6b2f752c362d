//! The live state: frontends with their pools of backends, the limits and
//! the bootstrap lifecycle. Data only: [`crate::apply`] makes a plan live
//! (and starts the loops that serve it), below which nothing here reaches.
//!
//! Invariants:
//! - A backend in a pool gets new connections only while healthy; a backend
//!   taken out of a pool (reload, bootstrap completion) is draining: it gets
//!   none, its open connections go on until they end or the drain deadline.
//! - A frontend whose name and listen address survive a reload keeps its
//!   listener: no connection is refused across a reload.
//! - `apply` binds every new listener before changing anything, so a plan
//!   that cannot be served leaves the old one in place.
//! - The std mutexes here guard short, non-async sections (no await inside).

use crate::plan::{BackendPlan, FrontendPlan, Role};
use crate::probe::NetProber;
use arc_swap::ArcSwap;
use site::{Balance, Check, LbLimits};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub(crate) use runtime::sync::lock;

/// One backend of one frontend, with its counters.
#[derive(Debug)]
pub struct Backend {
    pub name: String,
    pub addr: SocketAddr,
    pub role: Role,
    pub(crate) check: ArcSwap<Check>,
    healthy: AtomicBool,
    pub(crate) draining: AtomicBool,
    pub active: AtomicU64,
    pub total: AtomicU64,
    pub connect_failures: AtomicU64,
    /// Connections the backend reset or closed before answering (then sent
    /// to another; `limits.retryUnanswered`).
    pub unanswered_failures: AtomicU64,
    /// Bytes from clients to this backend, and back.
    pub bytes_to: AtomicU64,
    pub bytes_from: AtomicU64,
    check_latency_us: AtomicU64,
    pub check_failures: AtomicU64,
    up_since: Mutex<Option<Instant>>,
    pub(crate) reason: Mutex<String>,
    /// Probe now: the data path saw a refused connect.
    pub kick: Notify,
    /// Cancelled at the drain deadline, or when the shutdown grace is over
    /// (a child of `App::conn_stop`): the backend's relays end. One token, so
    /// a relay waits on one thing besides its sockets.
    pub close_now: CancellationToken,
    pub stop_checks: CancellationToken,
}

impl Backend {
    /// `shutdown` stops its checks; `conn_stop` ends its relays.
    pub fn new(
        plan: &BackendPlan,
        check: Check,
        shutdown: &CancellationToken,
        conn_stop: &CancellationToken,
    ) -> Backend {
        Backend {
            name: plan.name.clone(),
            addr: plan.addr,
            role: plan.role,
            check: ArcSwap::from_pointee(check),
            healthy: AtomicBool::new(true),
            draining: AtomicBool::new(false),
            active: AtomicU64::new(0),
            total: AtomicU64::new(0),
            connect_failures: AtomicU64::new(0),
            unanswered_failures: AtomicU64::new(0),
            bytes_to: AtomicU64::new(0),
            bytes_from: AtomicU64::new(0),
            check_latency_us: AtomicU64::new(0),
            check_failures: AtomicU64::new(0),
            up_since: Mutex::new(None),
            reason: Mutex::new("new: first probe pending".into()),
            kick: Notify::new(),
            close_now: conn_stop.child_token(),
            stop_checks: shutdown.child_token(),
        }
    }
    pub fn check(&self) -> Arc<Check> {
        self.check.load_full()
    }
    pub fn healthy(&self) -> bool {
        self.healthy.load(Relaxed)
    }
    pub fn draining(&self) -> bool {
        self.draining.load(Relaxed)
    }
    /// May get a new connection.
    pub fn eligible(&self) -> bool {
        self.healthy() && !self.draining()
    }
    pub fn set_health(&self, up: bool, reason: String) {
        self.healthy.store(up, Relaxed);
        *lock(&self.up_since) = up.then(Instant::now);
        *lock(&self.reason) = reason;
    }
    pub fn record_probe(&self, latency: Duration, ok: bool) {
        self.check_latency_us
            .store(latency.as_micros().min(u64::MAX as u128) as u64, Relaxed);
        if !ok {
            self.check_failures.fetch_add(1, Relaxed);
        }
    }
    pub fn check_latency(&self) -> Duration {
        Duration::from_micros(self.check_latency_us.load(Relaxed))
    }
    /// Since when the backend has been up, by its checks (`None`: down or never probed).
    pub fn up_since(&self) -> Option<Instant> {
        *lock(&self.up_since)
    }
    pub fn reason(&self) -> String {
        lock(&self.reason).clone()
    }
    pub fn state_name(&self) -> &'static str {
        match (self.draining(), self.healthy()) {
            (true, _) => "draining",
            (false, true) => "up",
            (false, false) => "down",
        }
    }
}

/// One listener and its pool.
#[derive(Debug)]
pub struct Frontend {
    pub name: Arc<str>,
    /// The configured address (what a reload compares).
    pub listen: SocketAddr,
    /// The bound address (differs when tests bind port 0).
    pub local: SocketAddr,
    pub(crate) balance: Mutex<Balance>,
    pub pool: ArcSwap<Vec<Arc<Backend>>>,
    pub draining: Mutex<Vec<Arc<Backend>>>,
    rr: AtomicUsize,
    /// Stops the accept loop (frontend removed or moved).
    pub stop: CancellationToken,
    pub accepted: AtomicU64,
    pub refused_no_backend: AtomicU64,
    pub refused_limit: AtomicU64,
    /// Client addresses and when each first connected (unix ms), for
    /// bootd's boot timeline (admin `/status`); at most [`CLIENTS_SEEN`].
    pub clients: Mutex<HashMap<IpAddr, u64>>,
}

/// Client addresses remembered per frontend: a cluster's nodes, with room
/// to spare; beyond it new addresses are not recorded.
pub const CLIENTS_SEEN: usize = 4096;

impl Frontend {
    /// A new frontend for `plan`, listening on `local`, with an empty pool.
    pub fn new(plan: &FrontendPlan, local: SocketAddr, stop: CancellationToken) -> Frontend {
        Frontend {
            name: plan.name.as_str().into(),
            listen: plan.listen,
            local,
            balance: Mutex::new(plan.balance),
            pool: ArcSwap::from_pointee(Vec::new()),
            draining: Mutex::new(Vec::new()),
            rr: AtomicUsize::new(0),
            stop,
            accepted: AtomicU64::new(0),
            refused_no_backend: AtomicU64::new(0),
            refused_limit: AtomicU64::new(0),
            clients: Mutex::new(HashMap::new()),
        }
    }

    /// Notes a client's first connection (one map lookup per accepted connection).
    pub fn note_client(&self, ip: IpAddr) {
        let mut m = lock(&self.clients);
        if m.len() < CLIENTS_SEEN && !m.contains_key(&ip) {
            m.insert(ip, unix_ms(runtime::clock::now()));
        }
    }
    pub fn balance(&self) -> Balance {
        *lock(&self.balance)
    }
    /// The next rotation start for [`crate::balance::pick`].
    pub fn next_start(&self) -> usize {
        self.rr.fetch_add(1, Relaxed)
    }
}

/// Unix milliseconds of a wall-clock time.
pub fn unix_ms(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Where the bootstrap node stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BootstrapPhase {
    /// The site has no bootstrap node (or lbd runs standalone).
    None,
    Serving,
    Draining,
    Removed,
}

/// Counters that are not per backend (`/metrics` reads them).
#[derive(Debug, Default)]
pub struct Metrics {
    pub reloads_ok: AtomicU64,
    pub reloads_failed: AtomicU64,
}

/// Shared by the accept loops, checkers, admin API and reloads.
#[derive(Debug)]
pub struct App {
    pub frontends: ArcSwap<Vec<Arc<Frontend>>>,
    pub limits: ArcSwap<LbLimits>,
    pub drain_timeout: ArcSwap<Duration>,
    /// Open client connections, all frontends.
    pub conns: AtomicU64,
    pub per_source: Mutex<HashMap<IpAddr, u32>>,
    pub accept_errors: AtomicU64,
    /// Admin connections closed at accept: over the listener's caps.
    pub admin_refused: AtomicU64,
    /// Admin connections closed on a bad or slow client, by
    /// [`runtime::http1::Closed::index`].
    pub admin_closed: [AtomicU64; runtime::http1::Closed::ALL.len()],
    pub bootstrap_done: AtomicBool,
    pub prober: Arc<NetProber>,
    pub tracker: TaskTracker,
    /// Stops accepting and checking (SIGTERM).
    pub shutdown: CancellationToken,
    /// Ends every relay (the grace period after shutdown is over).
    pub conn_stop: CancellationToken,
    pub metrics: Metrics,
    /// Serializes plan changes (reloads, bootstrap completion).
    pub(crate) apply_lock: tokio::sync::Mutex<()>,
}

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("frontend {name}: cannot listen on {addr}: {source}")]
    Bind {
        name: String,
        addr: SocketAddr,
        source: std::io::Error,
    },
}

impl App {
    pub fn new(limits: LbLimits, drain_timeout: Duration, shutdown: CancellationToken) -> App {
        App {
            frontends: ArcSwap::from_pointee(Vec::new()),
            limits: ArcSwap::from_pointee(limits),
            drain_timeout: ArcSwap::from_pointee(drain_timeout),
            conns: AtomicU64::new(0),
            per_source: Mutex::new(HashMap::new()),
            accept_errors: AtomicU64::new(0),
            admin_refused: AtomicU64::new(0),
            admin_closed: Default::default(),
            bootstrap_done: AtomicBool::new(false),
            prober: Arc::new(NetProber::default()),
            tracker: TaskTracker::new(),
            shutdown,
            conn_stop: CancellationToken::new(),
            metrics: Metrics::default(),
            apply_lock: tokio::sync::Mutex::new(()),
        }
    }

    pub fn frontend(&self, name: &str) -> Option<Arc<Frontend>> {
        self.frontends
            .load()
            .iter()
            .find(|f| &*f.name == name)
            .cloned()
    }

    pub fn bootstrap_phase(&self) -> BootstrapPhase {
        let fes = self.frontends.load();
        let serving = fes
            .iter()
            .any(|f| f.pool.load().iter().any(|b| b.role == Role::Bootstrap));
        let draining = fes
            .iter()
            .any(|f| lock(&f.draining).iter().any(|b| b.role == Role::Bootstrap));
        match (serving, draining, self.bootstrap_done.load(Relaxed)) {
            (true, _, _) => BootstrapPhase::Serving,
            (false, true, _) => BootstrapPhase::Draining,
            (false, false, true) => BootstrapPhase::Removed,
            (false, false, false) => BootstrapPhase::None,
        }
    }

    /// Counts a new client connection against the limits; `None`: refused.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<ConnGuard> {
        let limits = self.limits.load();
        if self.conns.fetch_add(1, Relaxed) >= u64::from(limits.max_conns) {
            self.conns.fetch_sub(1, Relaxed);
            return None;
        }
        let mut per = lock(&self.per_source);
        let n = per.entry(peer).or_insert(0);
        if *n >= limits.max_conns_per_source {
            drop(per);
            self.conns.fetch_sub(1, Relaxed);
            return None;
        }
        *n += 1;
        Some(ConnGuard {
            app: Arc::clone(self),
            peer,
        })
    }
}

/// One admitted client connection; releases its limit slots on drop.
#[derive(Debug)]
pub struct ConnGuard {
    app: Arc<App>,
    peer: IpAddr,
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.app.conns.fetch_sub(1, Relaxed);
        let mut per = lock(&self.app.per_source);
        if let Some(n) = per.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                per.remove(&self.peer);
            }
        }
    }
}

/// A listening socket with SO_REUSEADDR (a restarted lbd rebinds at once).
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    sock.set_reuse_address(true)?;
    // IP_FREEBIND: a VIP that keepalived has not (yet) moved to this host
    // binds all the same, and is served from the moment it arrives, with
    // no rebind (HAProxy's `freebind`).
    if addr.is_ipv4() {
        sock.set_freebind_v4(true)?;
    } else {
        sock.set_freebind_v6(true)?;
    }
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    sock.listen(runtime::net::LISTEN_BACKLOG as i32)?;
    TcpListener::from_std(sock.into())
}

/// Whether the bootstrap may be completed automatically: every master
/// (`up_since` of each master backend on api and machine-config) has been
/// up for `hold`. No masters: never.
pub fn bootstrap_due(masters: &[Option<Instant>], now: Instant, hold: Duration) -> bool {
    !masters.is_empty()
        && masters
            .iter()
            .all(|m| m.is_some_and(|t| now.saturating_duration_since(t) >= hold))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_is_due_when_every_master_has_been_up_long_enough() {
        let now = Instant::now() + Duration::from_secs(1000);
        let hold = Duration::from_secs(600);
        let long = Some(now - Duration::from_secs(700));
        let short = Some(now - Duration::from_secs(10));
        assert!(bootstrap_due(&[long, long, long], now, hold));
        assert!(!bootstrap_due(&[long, short, long], now, hold));
        assert!(!bootstrap_due(&[long, None, long], now, hold));
        assert!(!bootstrap_due(&[], now, hold));
    }
}
