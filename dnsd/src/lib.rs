//! dnsd: authoritative DNS for the cluster, derived from the site (or,
//! standalone, from RFC 1035 master files).
//!
//! Serves `<cluster>.<baseDomain>` (or the base domain), the reverse zones
//! of the site's subnets, NOTIFY and AXFR/IXFR to secondaries, forwards
//! other names to upstream resolvers when configured, and reloads live.
//!
//! Modules:
//! - [`codec`]: the DNS packet codec: strict, allocation-free parsing of a
//!   request (RFC 9267), and the few replies built without the catalog.
//! - [`zone`]: zone data from the site or master files; master-file output.
//! - [`core`]: the pure core: a [`core::Catalog`] of precompiled answers and
//!   `Catalog::answer(request) -> response`.
//! - [`udp`]: blocking worker threads on SO_REUSEPORT sockets,
//!   recvmmsg/sendmmsg batches, response rate limiting ([`rrl`]).
//! - [`tcp`]: RFC 7766 connections (pipelining, idle timeout), transfers.
//! - [`xfr`]: AXFR/IXFR responses and NOTIFY.
//! - [`forward`]: relaying queries for other names to upstream resolvers.
//! - [`http`]: `/metrics` and `/healthz`; [`metrics`]: the counters.
//! - [`text`]: dig-like dumps for golden files and tests.
//! - [`ha`]: zone serials agreed by appliances sharing one etcd.
//!
//! Invariants: every response is computed from one catalog snapshot
//! (loaded once per UDP batch or TCP message; a reload swaps whole
//! catalogs); a site or zone file with any problem never replaces the
//! serving catalog; a zone's serial only increases, and only when its
//! content changed.
//!
//! Shape: `main` parses flags, loads the configuration, binds sockets and
//! calls [`run`]; tests call the same [`run`] on loopback.

pub mod codec;
pub mod core;
pub mod forward;
pub mod ha;
pub mod http;
pub mod metrics;
pub mod rrl;
pub mod tcp;
pub mod text;
pub mod udp;
pub mod xfr;
pub mod zone;

use crate::core::{Catalog, Options};
use arc_swap::ArcSwap;
use site::dns::Dns;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

/// Where the zones come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// Derived from the site; `dns:` settings come from it too.
    Site(PathBuf),
    /// Master files `(path, origin)`, with settings given on the command line.
    Files {
        files: Vec<(PathBuf, Option<String>)>,
        dns: Box<Dns>,
    },
    /// The site of the process's feed (the all-in-one binary): dnsd follows
    /// each published site and parses nothing itself.
    Feed(runtime::SiteFeed),
}

#[derive(Debug)]
pub struct Config {
    pub source: Source,
    /// Notified on SIGHUP (by `main`) or by tests: reload now.
    pub reload: Arc<Notify>,
    /// Notified (all waiters) when a reload asked for through `reload` has
    /// finished, applied or refused (main tells systemd `READY=1` then).
    pub reloaded: Arc<Notify>,
    /// How often the source files are checked for changes; `None`: never.
    pub poll: Option<Duration>,
    /// How long TCP connections get to finish after shutdown.
    pub grace: Duration,
    /// A TCP connection with no request for this long is closed (RFC 7766 §6.2.3).
    pub tcp_idle: Duration,
    /// At most this many TCP connections at once.
    pub tcp_max: usize,
    /// At most this many TCP connections from one address.
    pub tcp_per_source: usize,
    /// The HTTP (metrics) listener's head deadline (10 s, also the idle
    /// keep-alive limit) and head size (100 headers, 32 KiB).
    pub http: runtime::http1::Limits,
}

impl Config {
    pub fn new(source: Source) -> Config {
        Config {
            source,
            reload: Arc::new(Notify::new()),
            reloaded: Arc::new(Notify::new()),
            poll: Some(Duration::from_secs(2)),
            grace: Duration::from_secs(5),
            tcp_idle: Duration::from_secs(10),
            tcp_max: 512,
            tcp_per_source: 32,
            http: runtime::http1::Limits::new(Duration::from_secs(10)),
        }
    }
}

/// Bound sockets. UDP sockets are plain std sockets, served by blocking
/// threads (one per socket; bind several with SO_REUSEPORT, see [`bind_udp`]).
#[derive(Debug)]
pub struct Sockets {
    pub udp: Vec<std::net::UdpSocket>,
    pub tcp: Vec<tokio::net::TcpListener>,
    pub http: Option<tokio::net::TcpListener>,
}

pub use runtime::net::BindError;

impl Sockets {
    /// Binds what `dns` asks for: on each `dns.listen` address
    /// `udp_threads` UDP sockets ([`bind_udp`]) and a TCP listener
    /// ([`bind_tcp`]), and the `dns.http` listener. Inside the runtime.
    pub async fn bind(dns: &Dns, udp_threads: usize) -> Result<Sockets, BindError> {
        let fail = |what: String| move |source| BindError { what, source };
        let mut s = Sockets {
            udp: Vec::new(),
            tcp: Vec::new(),
            http: None,
        };
        for a in &dns.listen {
            s.udp
                .extend(bind_udp(*a, udp_threads).map_err(fail(format!("dns.listen {a} (UDP)")))?);
            s.tcp.push(
                bind_tcp(*a)
                    .and_then(tokio::net::TcpListener::from_std)
                    .map_err(fail(format!("dns.listen {a} (TCP)")))?,
            );
        }
        if let Some(h) = dns.http {
            s.http = Some(
                tokio::net::TcpListener::bind(h)
                    .await
                    .map_err(fail(format!("dns.http {h}")))?,
            );
        }
        Ok(s)
    }
}

/// IP_FREEBIND on a listener: an address this host does not have binds
/// all the same and is served once it arrives. One site lists every
/// appliance's DNS address (`dns.listen`); each serves those it has.
fn freebind(s: &socket2::Socket, addr: SocketAddr) -> std::io::Result<()> {
    if addr.is_ipv6() {
        s.set_freebind_v6(true)
    } else {
        s.set_freebind_v4(true)
    }
}

/// `n` UDP sockets on `addr`, bound with IP_FREEBIND. Several share the
/// address with SO_REUSEPORT (the kernel spreads clients over them); one
/// socket does not set it.
///
/// SO_REUSEPORT also lets another process of the same user share the port
/// when the kernel picks that process an ephemeral port: dig sets it,
/// binds port 0 and connects, and a dig whose port happens to equal the
/// server's then receives its own query ("query response not set"). So a
/// single socket never sets it, and port 0 with several sockets picks one
/// free port *below* the kernel's ephemeral range, where no automatic
/// choice lands. A configured port inside that range with several sockets
/// keeps the (small) risk; `dns.listen` is port 53 in practice.
pub fn bind_udp(addr: SocketAddr, n: usize) -> std::io::Result<Vec<std::net::UdpSocket>> {
    let n = n.max(1);
    if n == 1 || addr.port() != 0 {
        return bind_udp_group(addr, n);
    }
    let low = ephemeral_low();
    let span = u32::from(low.saturating_sub(1024).max(1));
    let start: u32 = rand::random::<u32>() % span;
    let mut last = None;
    for k in 0..512u32 {
        let port = 1024 + ((start + k * 7919) % span) as u16;
        match bind_udp_group(SocketAddr::new(addr.ip(), port), n) {
            Ok(v) => return Ok(v),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::from(std::io::ErrorKind::AddrInUse)))
}

/// The first port of the kernel's ephemeral range (32768 when unreadable).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .filter(|&p: &u16| p > 1024)
        .unwrap_or(32768)
}

fn bind_udp_group(addr: SocketAddr, n: usize) -> std::io::Result<Vec<std::net::UdpSocket>> {
    use socket2::{Domain, Protocol, Socket, Type};
    let mut out: Vec<std::net::UdpSocket> = Vec::new();
    let mut addr = addr;
    for _ in 0..n {
        let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        if n > 1 {
            s.set_reuse_port(true)?;
        }
        if addr.is_ipv6() {
            s.set_only_v6(true)?;
        }
        // Room for bursts while a worker is busy (dnsperf keeps hundreds in flight).
        let _ = s.set_recv_buffer_size(4 << 20);
        freebind(&s, addr)?;
        s.bind(&addr.into())?;
        let s: std::net::UdpSocket = s.into();
        addr = s.local_addr()?;
        out.push(s);
    }
    Ok(out)
}

/// A TCP listener on `addr`, bound with IP_FREEBIND.
pub fn bind_tcp(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    freebind(&s, addr)?;
    s.bind(&addr.into())?;
    s.listen(runtime::net::LISTEN_BACKLOG as i32)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Site(#[from] site::SiteError),
    #[error(transparent)]
    Zone(#[from] zone::ZoneError),
    #[error(transparent)]
    Build(#[from] core::BuildError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// What one load produced.
#[derive(Debug)]
pub struct Loaded {
    pub catalog: Catalog,
    pub dns: Dns,
    /// The files to watch for changes.
    pub watched: Vec<PathBuf>,
    /// The etcd of several appliances (`host.store.etcd`): zone serials
    /// are agreed through it (`shared`). Read at start only.
    pub shared: Option<etcd::Config>,
}

/// The policy of a site's `dns:` section a snapshot carries.
impl From<&Dns> for Options {
    fn from(dns: &Dns) -> Options {
        Options {
            allow_transfer: dns.allow_transfer.clone(),
            forward: !dns.upstreams.is_empty(),
            allow_forward: dns.allow_forward.clone(),
        }
    }
}

fn now_serial() -> u32 {
    runtime::clock::unix_secs() as u32
}

/// Loads and compiles the zones. For a site, each zone's serial is the
/// previous one when its content is unchanged, else the larger of the
/// previous + 1 and the current Unix time (so it also increases across
/// restarts). Master files keep their own serials.
pub fn load(source: &Source, prev: Option<&Catalog>) -> Result<Loaded, Error> {
    match source {
        Source::Site(path) => load_site(&site::load(path)?, prev),
        Source::Feed(feed) => load_site(&feed.current(), prev),
        Source::Files { files, dns } => {
            let zones = zone::from_files(files)?;
            Ok(Loaded {
                catalog: Catalog::build(zones, Options::from(&**dns))?,
                dns: (**dns).clone(),
                watched: files.iter().map(|(p, _)| p.clone()).collect(),
                shared: None,
            })
        }
    }
}

/// [`load`] for a site already validated.
pub fn load_site(site: &site::Site, prev: Option<&Catalog>) -> Result<Loaded, Error> {
    {
        {
            let mut zones = zone::from_site(site, 0)?;
            let now = now_serial();
            for z in &mut zones {
                let old = prev.and_then(|c| c.zones.iter().find(|o| o.origin == z.origin));
                let serial = match old {
                    Some(o) if o.same_content(z) => o.serial(),
                    Some(o) => now.max(o.serial().wrapping_add(1)),
                    None => now,
                };
                z.set_serial(serial);
            }
            Ok(Loaded {
                catalog: Catalog::build(zones, Options::from(&site.dns))?,
                dns: site.dns.clone(),
                watched: site.watched_files(),
                shared: match &site.host.store {
                    site::Store::Etcd(e) => Some(etcd::Config::from_site(e)),
                    site::Store::Sqlite => None,
                },
            })
        }
    }
}

/// The serving state, shared by every transport.
#[derive(Debug)]
pub struct Live {
    pub catalog: ArcSwap<Catalog>,
    pub metrics: metrics::Metrics,
}

/// Serves until `shutdown` is cancelled.
pub async fn run(
    config: Config,
    sockets: Sockets,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let loaded = tokio::task::block_in_place(|| load(&config.source, None))?;
    run_loaded(config, loaded, sockets, shutdown).await
}

/// As [`run`], with the first load already done (main reports its errors
/// before binding; tests inspect it).
pub async fn run_loaded(
    config: Config,
    loaded: Loaded,
    sockets: Sockets,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    // Connected here, after root was dropped: its runtime's threads are
    // born unprivileged.
    let shared = loaded
        .shared
        .as_ref()
        .and_then(|c| match etcd::Etcd::connect(c) {
            Ok(e) => Some(e),
            Err(e) => {
                warn!(error = %e, "etcd: zone serials are this appliance's alone");
                None
            }
        });
    let loaded = match &shared {
        Some(e) => tokio::task::block_in_place(|| ha::agree(e, loaded)),
        None => loaded,
    };
    let Loaded {
        catalog,
        dns,
        watched,
        ..
    } = loaded;
    if dns.nameservers.is_empty() && matches!(config.source, Source::Site(_) | Source::Feed(_)) {
        return Err(Error::Zone(zone::ZoneError::NoNameserver));
    }
    let live = Arc::new(Live {
        catalog: ArcSwap::from_pointee(catalog),
        metrics: metrics::Metrics::default(),
    });
    live.metrics.observe(&live.catalog.load());
    let tracker = TaskTracker::new();
    let forwarder = Arc::new(forward::Forwarder::new(
        dns.upstreams.clone(),
        dns.rate_limit,
    ));
    let (fwd_tx, fwd_rx) = tokio::sync::mpsc::channel::<udp::Forwarded>(1024);
    tracker.spawn(udp::forward_loop(
        fwd_rx,
        Arc::clone(&forwarder),
        Arc::clone(&live),
        shutdown.clone(),
    ));
    let mut threads = Vec::new();
    let limit = rrl::Limit {
        per_second: dns.rate_limit,
        slip: dns.slip,
    };
    for (i, sock) in sockets.udp.into_iter().enumerate() {
        info!(addr = %sock.local_addr().map(|a| a.to_string()).unwrap_or_default(), worker = i, "UDP listening");
        // A duplicate of the socket for the forwarder's replies. It shares
        // the file status flags, so it stays blocking like the worker's
        // (O_NONBLOCK on it would make the worker's recvmmsg spin).
        let reply = Arc::new(sock.try_clone()?);
        let w = udp::Worker {
            sock,
            live: Arc::clone(&live),
            stop: shutdown.clone(),
            forward: fwd_tx.clone(),
            reply,
            limit,
        };
        threads.push(
            std::thread::Builder::new()
                .name(format!("dnsd-udp-{i}"))
                .spawn(move || w.run())?,
        );
    }
    drop(fwd_tx);
    let conns = runtime::conns::Conns::new(runtime::conns::ConnLimits {
        max: config.tcp_max,
        per_source: config.tcp_per_source,
    });
    for l in sockets.tcp {
        info!(addr = %l.local_addr().map(|a| a.to_string()).unwrap_or_default(), "TCP listening");
        let t = tcp::Tcp {
            live: Arc::clone(&live),
            forwarder: Arc::clone(&forwarder),
            idle: config.tcp_idle,
            conns: Arc::clone(&conns),
        };
        tracker.spawn(t.accept_loop(l, shutdown.clone(), tracker.clone()));
    }
    if let Some(l) = sockets.http {
        info!(addr = %l.local_addr().map(|a| a.to_string()).unwrap_or_default(), "HTTP (metrics, health) listening");
        let limits = config.http;
        tracker.spawn(http::serve(l, Arc::clone(&live), shutdown.clone(), limits));
    }
    // Secondaries may hold an older version: tell them at start, too.
    for z in &live.catalog.load().zones {
        let (z, targets, live) = (z.clone(), dns.notify.clone(), Arc::clone(&live));
        if !targets.is_empty() {
            tracker.spawn(async move { xfr::notify(&z, &targets, &live.metrics).await });
        }
    }
    let state = Arc::new(Mutex::new(Served { dns, watched }));
    match &config.source {
        Source::Feed(feed) => {
            let (live, state) = (Arc::clone(&live), Arc::clone(&state));
            tracker.spawn(runtime::feed::follow(
                feed.subscribe(),
                shutdown.clone(),
                move |p| {
                    let (live, state) = (Arc::clone(&live), Arc::clone(&state));
                    let shared = shared.clone();
                    async move {
                        match p.refused {
                            Some(why) => refused(&live, &why),
                            None => {
                                let prev = live.catalog.load_full();
                                match tokio::task::spawn_blocking(move || {
                                    load_site(&p.site, Some(&prev)).map(|l| match &shared {
                                        Some(e) => ha::agree(e, l),
                                        None => l,
                                    })
                                })
                                .await
                                {
                                    Ok(r) => applied(&live, &state, r, p.forced),
                                    Err(e) => error!(error = %e, "reload task failed"),
                                }
                            }
                        }
                    }
                },
            ));
        }
        source => {
            let triggers = runtime::Triggers {
                reload: config.reload.clone(),
                reloaded: config.reloaded.clone(),
                poll: config.poll,
            };
            let files = {
                let state = Arc::clone(&state);
                move || {
                    state
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .watched
                        .clone()
                }
            };
            let (live, state, source) = (Arc::clone(&live), Arc::clone(&state), source.clone());
            tracker.spawn(runtime::reload::watch(
                triggers,
                shutdown.clone(),
                files,
                move |forced| {
                    let (live, state, source) =
                        (Arc::clone(&live), Arc::clone(&state), source.clone());
                    let shared = shared.clone();
                    async move {
                        let prev = live.catalog.load_full();
                        match tokio::task::spawn_blocking(move || {
                            load(&source, Some(&prev)).map(|l| match &shared {
                                Some(e) => ha::agree(e, l),
                                None => l,
                            })
                        })
                        .await
                        {
                            Ok(r) => applied(&live, &state, r, forced),
                            Err(e) => error!(error = %e, "reload task failed"),
                        }
                    }
                },
            ));
        }
    }
    shutdown.cancelled().await;
    tracker.close();
    if tokio::time::timeout(config.grace, tracker.wait())
        .await
        .is_err()
    {
        warn!(grace = ?config.grace, "connections still open after the grace period");
    }
    for t in threads {
        let _ = tokio::task::spawn_blocking(move || t.join()).await;
    }
    info!("dnsd stopped");
    Ok(())
}

/// What the reload steps keep between reloads.
#[derive(Debug)]
struct Served {
    dns: Dns,
    watched: Vec<PathBuf>,
}

fn refused(live: &Live, why: &str) {
    live.metrics
        .reloads
        .get_or_create(&metrics::Outcome { result: "error" })
        .inc();
    error!("reload refused, the previous zones keep serving:\n{why}");
}

/// Swaps in a reloaded catalog and sends NOTIFY for the zones whose serial
/// changed; a failed load keeps the old catalog serving.
fn applied(live: &Arc<Live>, state: &Mutex<Served>, r: Result<Loaded, Error>, forced: bool) {
    let l = match r {
        Ok(l) => l,
        Err(e) => return refused(live, &e.to_string()),
    };
    let prev = live.catalog.load_full();
    let changed: Vec<usize> = l
        .catalog
        .zones
        .iter()
        .enumerate()
        .filter(|(_, z)| {
            prev.zones
                .iter()
                .find(|o| o.origin == z.origin)
                .is_none_or(|o| o.serial() != z.serial())
        })
        .map(|(i, _)| i)
        .collect();
    let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
    if l.dns.listen != state.dns.listen || l.dns.http != state.dns.http {
        warn!("dns.listen or dns.http changed: restart dnsd to rebind; the zones are reloaded");
    }
    let catalog = Arc::new(l.catalog);
    live.catalog.store(Arc::clone(&catalog));
    live.metrics.observe(&catalog);
    live.metrics
        .reloads
        .get_or_create(&metrics::Outcome { result: "ok" })
        .inc();
    for &i in &changed {
        let z = &catalog.zones[i];
        info!(zone = %z.origin, serial = z.serial(), forced, "zone reloaded");
    }
    if !l.dns.notify.is_empty() {
        for &i in &changed {
            let targets = l.dns.notify.clone();
            let z = catalog.zones[i].clone();
            let live = Arc::clone(live);
            tokio::spawn(async move { xfr::notify(&z, &targets, &live.metrics).await });
        }
    }
    *state = Served {
        dns: l.dns,
        watched: l.watched,
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reuse_port(s: &std::net::UdpSocket) -> bool {
        socket2::SockRef::from(s).reuse_port().unwrap()
    }

    /// A dig whose kernel-chosen port equals a SO_REUSEPORT server's port
    /// shares it and reads its own query: one socket does not set the
    /// option, and several on port 0 sit below the ephemeral range.
    #[test]
    fn no_client_can_be_given_the_servers_port() {
        let one = bind_udp("127.0.0.1:0".parse().unwrap(), 1).unwrap();
        assert_eq!(one.len(), 1);
        assert!(!reuse_port(&one[0]));
        let low = ephemeral_low();
        for _ in 0..20 {
            let two = bind_udp("127.0.0.1:0".parse().unwrap(), 2).unwrap();
            let port = two[0].local_addr().unwrap().port();
            assert_eq!(two[1].local_addr().unwrap().port(), port);
            assert!((1024..low).contains(&port), "{port} below {low}");
            assert!(two.iter().all(reuse_port));
            // A client socket with SO_REUSEPORT binding port 0 never lands on it.
            let c =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
            c.set_reuse_port(true).unwrap();
            c.bind(&"0.0.0.0:0".parse::<SocketAddr>().unwrap().into())
                .unwrap();
            let got = c.local_addr().unwrap().as_socket().unwrap().port();
            assert!(got >= low, "{got}");
        }
    }
}
