//! bootd: the network-boot server of the appliance.
//!
//! Serves, over HTTP and HTTPS, everything a machine needs after its
//! firmware: the iPXE entry script and per-node scripts, GRUB configs,
//! per-node Ignition, OS images (with ranges), Equinix-style metadata and
//! userdata; plus `/healthz` and `/metrics`. Everything is derived from the
//! site description ([`site::Site`]), reloaded live.
//!
//! Also the provisioning network's DHCP servers (the `dhcp` crate) and TFTP
//! server (the `tftp` crate) for firmware that cannot speak HTTP.
//!
//! Modules:
//! - DHCPv4 and DHCPv6 are the `dhcp` crate, which reaches bootd only
//!   through a `dhcp::Context` (`dhcp_servers`: the live site, each exchange
//!   into the [`timeline`], the counters), the lease tables in [`App`]
//!   and, with several appliances, [`Config::shared_leases`].
//! - TFTP is the `tftp` crate (read-only, windowsize), confined to its
//!   root through [`files::open_beneath`]; `tftp_resolver` (`tftp_files`) maps names to
//!   generated files (GRUB configs, the iPXE entry script) or the root.
//! - [`render`]: pure renderers (iPXE, GRUB, Ignition, metadata), golden-tested.
//! - [`token`]: who may fetch a node's secrets (source address or HMAC token).
//! - [`conns`]: per-listener and per-source connection caps.
//! - [`files`]: confined opens (`openat2` RESOLVE_BENEATH), ranges, streaming.
//! - [`http`]: the routes, listed in one function; [`body`]: their body type.
//! - [`fast_get`]: the plain-HTTP fast path (GET/HEAD served by `sendfile`;
//!   anything else handed to hyper).
//! - [`ha`]: what appliances sharing one etcd agree on, as an interface.
//! - [`installed`]: which nodes installed (a later network boot boots their disk).
//! - [`media`]: per-node bootable ISOs for BMC virtual media (grub-mkrescue).
//! - [`discovery`]: machines with unknown MACs that reported themselves.
//! - [`tls`]: the site CA and serving certificate (rcgen, rustls).
//! - [`state`]: the live snapshot (swapped atomically) and state-dir files.
//! - [`metrics`]: Prometheus counters.
//! - [`timeline`]: the per-node boot timeline (DHCP, TFTP, HTTP, lbd), joined by MAC/IP.
//! - [`status`]: the status page (server-rendered HTML) and the timeline JSON.
//! - [`gate`]: admission limits (`host.admission`): image responses and
//!   provider creates wait their turn in bounded queues.
//!
//! Shape: the executables (the `appliance` package) parse flags, load the
//! site, bind sockets and call [`run`]; tests call the same [`run`] on
//! loopback port 0. bootd knows nothing of the controller, dnsd, lbd or the
//! image catalog: the controller builds on [`App`] and the timeline's feed,
//! and the image cache check comes in through [`Config::check_images`].

pub mod awaited;
pub mod body;
mod dhcp_servers;
mod listen;
mod tftp_files;
pub(crate) use listen::{count_closed, serve_conn, Prefixed};
pub use runtime::conns;
use tftp_files::{tftp_observer, tftp_resolver};
pub mod discovery;
pub mod fast_get;
pub mod files;
pub mod gate;
pub mod ha;
pub mod http;
pub mod installed;
pub mod inventory;
pub mod media;
pub mod metrics;
pub mod plan;
pub mod render;
pub mod spent;
pub mod state;
pub mod status;
pub mod timeline;
pub mod tls;
pub mod token;

use site::Site;
use state::{Live, Snapshot};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

/// Shared by every request.
#[derive(Debug)]
pub struct App {
    pub live: Arc<Live>,
    pub key: token::TokenKey,
    pub tls: Option<tls::Tls>,
    pub metrics: metrics::Metrics,
    pub state_dir: PathBuf,
    /// The site feed bootd follows ([`Config::feed`]); the controller
    /// publishes the sites of its API writes into it.
    pub feed: runtime::SiteFeed,
    /// DHCP leases (empty when bootd serves no DHCP); a node's lease address
    /// counts as its own for Ignition access.
    pub leases: Arc<std::sync::Mutex<dhcp::v4::leases::Table>>,
    /// DHCPv6 bindings (empty when bootd serves no DHCPv6); counted like
    /// `leases` for Ignition access.
    pub leases6: Arc<std::sync::Mutex<dhcp::v6::leases::Table>>,
    /// The per-node boot timeline: the one record of what nodes do (status
    /// page, API, phase metrics; the controller subscribes to it).
    pub timeline: Arc<timeline::Recorder>,
    /// The nodes that installed (fetched their Ignition).
    pub installed: installed::Installed,
    /// What each node's machine reported (inspection, wipe), and which
    /// nodes are being released.
    pub inventories: inventory::Inventories,
    /// The inspection agents' SHA-256, for their Ignition configs.
    pub agent_sums: http::AgentSums,
    /// Machines with unknown MACs that reported themselves (`discovery:`).
    pub discovered: discovery::Discovered,
    /// Per-node ISOs for BMC virtual media, built on request.
    pub media: media::Media,
    /// A big file's send is given up when the client takes nothing for this long.
    pub write_stall: Duration,
    /// Head deadline, TLS handshake deadline and head size of the HTTP(S) listeners.
    pub http_limits: runtime::http1::Limits,
    /// Tokens spent on an Ignition fetch (`ignition.singleUseTokens`).
    pub spent: spent::Spent,
    /// Admission limits (`host.admission`): image transfers, provider creates.
    pub admission: gate::Admission,
    /// API nodes whose machine's address the provider has not said yet
    /// (the controller keeps it): their Ignition is "not yet", not "unknown".
    pub awaited: awaited::Awaited,
}

/// See [`Config::check_images`]: `Err` says what is missing or corrupt.
pub type ImageCheck = Arc<dyn Fn(&Site) -> Result<(), String> + Send + Sync>;

pub struct Config {
    pub site: Site,
    /// Where bootd gets each new site from: a feed made from `site` by
    /// [`Config::new`], which bootd re-reads itself (`watch_site`), or one
    /// the executable shares with the other daemons of the process.
    pub feed: runtime::SiteFeed,
    /// Whether bootd runs the feed's reload loop (on `reload` and when the
    /// site's files change); `false` when another part of the process does.
    pub watch_site: bool,
    /// Overrides `host.stateDir` (tests, the lab).
    pub state_dir: Option<PathBuf>,
    /// Notified on SIGHUP (by `main`) or by tests: re-read the site now.
    pub reload: Arc<Notify>,
    /// Notified (all waiters) when a reload asked for through `reload` has
    /// finished, applied or refused (`main` then tells systemd READY=1).
    pub reloaded: Arc<Notify>,
    /// How often the site file (and the files it names) are checked for
    /// changes; `None` turns polling off.
    pub poll: Option<Duration>,
    /// How long open connections get to finish after shutdown.
    pub grace: Duration,
    /// Where DHCP replies go (tests move them off 67/68).
    pub dhcp_ports: dhcp::v4::server::Ports,
    /// Checks that the image files the site names are there (the image
    /// catalog's cache check, passed in by the executables); run before
    /// serving and before each reload is applied.
    pub check_images: Option<ImageCheck>,
    /// Connection caps of each HTTP(S) listener, fixed; `None` (the
    /// default): the site's `host.admission.httpConnections`, live.
    pub conn_limits: Option<conns::ConnLimits>,
    /// See [`App::write_stall`].
    pub write_stall: Duration,
    /// See [`App::http_limits`]: a head within 30 s, a TLS handshake
    /// within 10 s, 100 headers and 32 KiB of head at most.
    pub http_limits: runtime::http1::Limits,
    /// The store shared with other appliances (`host.store: etcd`): the
    /// token key, the site CA and spent tokens are agreed through it.
    pub shared: Option<Arc<dyn ha::Shared>>,
    /// The same store as DHCPv4 uses it: leases committed before their
    /// ACK, who answers.
    pub shared_leases: Option<Arc<dyn dhcp::v4::ha::SharedLeases>>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("site", &self.site.source)
            .field("state_dir", &self.state_dir)
            .field("poll", &self.poll)
            .field("grace", &self.grace)
            .field("dhcp_ports", &self.dhcp_ports)
            .field("check_images", &self.check_images.is_some())
            .finish_non_exhaustive()
    }
}

impl Config {
    pub fn new(site: Site) -> Config {
        Config {
            feed: runtime::SiteFeed::new(site.clone()),
            watch_site: true,
            site,
            state_dir: None,
            reload: Arc::new(Notify::new()),
            reloaded: Arc::new(Notify::new()),
            poll: Some(Duration::from_secs(2)),
            grace: Duration::from_secs(5),
            dhcp_ports: Default::default(),
            check_images: None,
            conn_limits: None,
            write_stall: Duration::from_secs(60),
            http_limits: runtime::http1::Limits::new(fast_get::HEAD_TIMEOUT),
            shared: None,
            shared_leases: None,
        }
    }
    pub fn state_dir(&self) -> PathBuf {
        self.state_dir
            .clone()
            .unwrap_or_else(|| self.site.host.state_dir.clone())
    }
}

#[derive(Debug)]
pub struct Sockets {
    pub http: TcpListener,
    pub https: Option<TcpListener>,
    /// DHCP on port 67 (server or proxyDHCP), see [`dhcp::v4::server::bind`].
    pub dhcp: Option<tokio::net::UdpSocket>,
    /// proxyDHCP's boot-server port 4011.
    pub dhcp_proxy: Option<tokio::net::UdpSocket>,
    /// DHCPv6 on port 547 (`host.dhcp6`).
    pub dhcp6: Option<tokio::net::UdpSocket>,
    /// TFTP on port 69.
    pub tftp: Option<tokio::net::UdpSocket>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("state directory {0}: {1}")]
    StateDir(PathBuf, std::io::Error),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// A `catalog:` image set is not in the cache, or a cached file is corrupt.
    #[error("{0}")]
    Images(String),
    /// A socket the site asks for could not be bound; `what` names the site key.
    #[error("{what} {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
}

impl Sockets {
    /// Only the HTTP (and HTTPS) listeners: no DHCP, DHCPv6 or TFTP.
    pub fn http_only(http: TcpListener, https: Option<TcpListener>) -> Sockets {
        Sockets {
            http,
            https,
            dhcp: None,
            dhcp_proxy: None,
            dhcp6: None,
            tftp: None,
        }
    }

    /// Binds every socket the site asks for (before privileges are dropped,
    /// and before READY is sent to systemd).
    pub async fn bind(site: &Site) -> Result<Sockets, Error> {
        let tcp = |what: &'static str, addr: std::net::SocketAddr| async move {
            runtime::net::listen_tcp(addr).map_err(|source| Error::Bind { what, addr, source })
        };
        let http = tcp("host.http.listen", site.host.http.listen).await?;
        let https = match &site.host.https {
            Some(h) => Some(tcp("host.https.listen", h.listen).await?),
            None => None,
        };
        let (mut dhcp, mut dhcp_proxy) = (None, None);
        if let Some(d) = &site.host.dhcp {
            let bind = |what, addr| {
                let socket = dhcp::v4::server::bind(addr, d.interface.as_deref());
                socket.map_err(|source| Error::Bind { what, addr, source })
            };
            dhcp = Some(bind("host.dhcp.listen", d.listen)?);
            if d.mode == site::DhcpMode::Proxy {
                dhcp_proxy = Some(bind(
                    "host.dhcp (proxyDHCP port 4011)",
                    std::net::SocketAddr::new(d.listen.ip(), 4011),
                )?);
            }
        }
        let dhcp6 = match &site.host.dhcp6 {
            Some(d) => Some(
                dhcp::v6::server::bind(d.listen, &d.interface).map_err(|source| Error::Bind {
                    what: "host.dhcp6.listen",
                    addr: d.listen,
                    source,
                })?,
            ),
            None => None,
        };
        let tftp = match &site.host.tftp {
            Some(t) => Some(
                tokio::net::UdpSocket::bind(t.listen)
                    .await
                    .map_err(|source| Error::Bind {
                        what: "host.tftp.listen",
                        addr: t.listen,
                        source,
                    })?,
            ),
            None => None,
        };
        Ok(Sockets {
            http,
            https,
            dhcp,
            dhcp_proxy,
            dhcp6,
            tftp,
        })
    }
}

/// Everything `run` prepares before serving; tests use it to reach the
/// token key and CA without scraping files.
pub fn prepare(config: &Config, want_tls: bool) -> Result<Arc<App>, Error> {
    if let Some(check) = &config.check_images {
        check(&config.site).map_err(Error::Images)?;
    }
    let state_dir = config.state_dir();
    std::fs::create_dir_all(&state_dir).map_err(|e| Error::StateDir(state_dir.clone(), e))?;
    if let Some(shared) = &config.shared {
        token::TokenKey::agree(shared.as_ref(), &state_dir)
            .map_err(|e| Error::StateDir(state_dir.clone(), e))?;
        if want_tls {
            tls::agree_ca(shared.as_ref(), &state_dir)?;
        }
    }
    let key = token::TokenKey::load_or_create(&state_dir)
        .map_err(|e| Error::StateDir(state_dir.clone(), e))?;
    let revoked =
        state::load_revoked(&state_dir).map_err(|e| Error::StateDir(state_dir.clone(), e))?;
    let tls = if want_tls {
        let host = &config.site.host;
        let mut hosts: Vec<String> = host
            .http
            .urls
            .iter()
            .chain(host.https.iter().flat_map(|h| h.urls.iter()))
            .chain(host.api.as_ref().and_then(|a| a.url.as_ref()))
            .map(|u| site::url_host(u).to_string())
            .collect();
        hosts.dedup();
        Some(tls::load_or_create(&state_dir, &hosts)?)
    } else {
        None
    };
    let live = state::new_live(Snapshot {
        site: config.feed.current(),
        revoked,
    });
    let metrics = metrics::Metrics::default();
    let timeline = Arc::new(timeline::Recorder::new(
        timeline::CAPACITY,
        metrics.timeline_dropped.clone(),
    ));
    let installed = installed::Installed::open(&state_dir)
        .map_err(|e| Error::StateDir(state_dir.clone(), e))?;
    let discovered = discovery::Discovered::open(&state_dir)
        .map_err(|e| Error::StateDir(state_dir.clone(), e))?;
    let inventories = inventory::Inventories::open(&state_dir)
        .map_err(|e| Error::StateDir(state_dir.clone(), e))?;
    metrics.discovered.set(discovered.len() as i64);
    let spent = spent::Spent::open(&state_dir)
        .map_err(|e| Error::StateDir(state_dir.clone(), e))?
        .with_shared(config.shared.clone());
    let admission = gate::Admission::new(&live.load().site, Arc::clone(&metrics.gates));
    Ok(Arc::new(App {
        admission,
        awaited: Default::default(),
        write_stall: config.write_stall,
        http_limits: config.http_limits,
        spent,
        media: media::Media::new(&state_dir),
        installed,
        inventories,
        agent_sums: Default::default(),
        discovered,
        live,
        key,
        tls,
        metrics,
        state_dir,
        feed: config.feed.clone(),
        leases: Default::default(),
        leases6: Default::default(),
        timeline,
    }))
}

/// Serves until `shutdown` is cancelled, then gives open connections
/// `config.grace` to finish.
pub async fn run(
    config: Config,
    sockets: Sockets,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let app = prepare(
        &config,
        sockets.https.is_some() || config.site.host.api.is_some(),
    )?;
    run_app(app, config, sockets, shutdown).await
}

pub async fn run_app(
    app: Arc<App>,
    config: Config,
    sockets: Sockets,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let tracker = TaskTracker::new();
    let conn_stop = CancellationToken::new();
    if config.watch_site {
        let triggers = runtime::Triggers {
            reload: config.reload.clone(),
            reloaded: config.reloaded.clone(),
            poll: config.poll,
        };
        tracker.spawn(app.feed.clone().watch(triggers, shutdown.clone()));
    }
    {
        let (app, check) = (Arc::clone(&app), config.check_images.clone());
        tracker.spawn(runtime::feed::follow(
            app.feed.subscribe(),
            shutdown.clone(),
            move |p| {
                let (app, check) = (Arc::clone(&app), check.clone());
                async move { apply_published(&app, p, check).await }
            },
        ));
    }
    {
        // The revoked-node list changes apart from the site (`bootd revoke`).
        let app = Arc::clone(&app);
        let files = vec![app.state_dir.join(state::REVOKED_FILE)];
        let triggers = runtime::Triggers::new(config.poll);
        tracker.spawn(runtime::reload::watch(
            triggers,
            shutdown.clone(),
            move || files.clone(),
            move |_| {
                let app = Arc::clone(&app);
                async move { reload_revoked(&app) }
            },
        ));
    }
    if let Some(rx) = app.timeline.take_receiver() {
        let (recorder, live, phase_seconds) = (
            Arc::clone(&app.timeline),
            Arc::clone(&app.live),
            app.metrics.phase_seconds.clone(),
        );
        tracker.spawn(timeline::writer(
            recorder,
            live,
            phase_seconds,
            rx,
            shutdown.clone(),
        ));
    }
    // Several appliances: each shares its nodes' events and shows the others'.
    if let Some(shared) = &config.shared {
        timeline::ha::start(&app, shared, &tracker, &shutdown);
    }
    // Kept image files are closed once stale even when no request comes, so a
    // deleted image's space is freed.
    let stop = shutdown.clone();
    tracker.spawn(async move {
        while tokio::time::timeout(files::OPEN_TTL, stop.cancelled())
            .await
            .is_err()
        {
            files::close_expired();
        }
    });
    let listener_conns = || {
        let site_limits = gate::conn_limits(&app.live.load().site.host.admission);
        let c = conns::Conns::new(config.conn_limits.unwrap_or(site_limits));
        if config.conn_limits.is_none() {
            app.admission.follow_conns(Arc::clone(&c));
        }
        c
    };
    info!(addr = %local(&sockets.http), "HTTP listening");
    tracker.spawn(listen::accept_loop(
        sockets.http,
        None,
        listener_conns(),
        Arc::clone(&app),
        shutdown.clone(),
        conn_stop.clone(),
        tracker.clone(),
    ));
    if let (Some(l), Some(tls)) = (sockets.https, &app.tls) {
        info!(addr = %local(&l), "HTTPS listening");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(&tls.server_config));
        tracker.spawn(listen::accept_loop(
            l,
            Some(acceptor),
            listener_conns(),
            Arc::clone(&app),
            shutdown.clone(),
            conn_stop.clone(),
            tracker.clone(),
        ));
    }
    dhcp_servers::start(
        &app,
        &config,
        [sockets.dhcp, sockets.dhcp_proxy, sockets.dhcp6],
        &tracker,
        &shutdown,
    )?;
    if let Some(sock) = sockets.tftp {
        info!(addr = %sock.local_addr().map(|a| a.to_string()).unwrap_or_default(), "TFTP listening");
        let resolver = tftp_resolver(Arc::clone(&app));
        let metrics = Arc::clone(&app.metrics.tftp);
        let shutdown = shutdown.clone();
        let app = Arc::clone(&app);
        tracker.spawn(async move {
            // Read at start: the transfer threads and the queue are sized once.
            let a = app.live.load().site.host.admission.clone();
            let config = tftp::TftpConfig {
                observer: Some(tftp_observer(Arc::clone(&app))),
                max_transfers: a.tftp_transfers,
                max_queued: a.tftp_queue,
                max_per_source: a.tftp_per_source,
                queue_wait: a.queue_wait,
                ..Default::default()
            };
            if let Err(e) = tftp::run(config, sock, resolver, metrics, shutdown).await {
                error!(error = %e, "TFTP server stopped");
            }
        });
    }
    shutdown.cancelled().await;
    tracker.close();
    // Connections get the grace period to finish their responses; then
    // whatever is left (idle keep-alives from firmware) is dropped.
    if tokio::time::timeout(config.grace, tracker.wait())
        .await
        .is_err()
    {
        warn!(grace = ?config.grace, "connections still open after the grace period; closing them");
        conn_stop.cancel();
        tracker.wait().await;
    }
    info!("bootd stopped");
    Ok(())
}

fn local(l: &TcpListener) -> String {
    l.local_addr().map(|a| a.to_string()).unwrap_or_default()
}

/// Serves `site` at once (keeping the revoked-node list): the controller
/// calls it for the site of an API write before answering, then publishes
/// the same site on the feed for the other daemons.
pub fn serve_site(app: &App, site: Arc<Site>) {
    app.admission.apply(&site);
    app.live.rcu(|cur| Snapshot {
        site: Arc::clone(&site),
        revoked: cur.revoked.clone(),
    });
}

/// Applies one publication of the site feed. A refused reload, a site
/// whose cached images are missing or corrupt, or an unreadable revoked
/// list keeps the previous site serving.
async fn apply_published(app: &App, p: runtime::Published, check: Option<ImageCheck>) {
    let refused = |why: &str| {
        app.metrics
            .reloads
            .get_or_create(&metrics::Outcome { result: "error" })
            .inc();
        error!("site reload refused, the previous site keeps serving:\n{why}");
    };
    if let Some(why) = &p.refused {
        return refused(why);
    }
    // Already served (the controller's API write serves it before publishing).
    if Arc::ptr_eq(&app.live.load().site, &p.site) && !p.forced {
        return;
    }
    let site = Arc::clone(&p.site);
    let state_dir = app.state_dir.clone();
    // Cheap unless a cached file changed (then it is hashed again).
    let checked = tokio::task::spawn_blocking(move || {
        let images = check.map(|c| c(&site)).unwrap_or(Ok(()));
        (images, state::load_revoked(&state_dir))
    })
    .await;
    match checked {
        Ok((Ok(()), Ok(revoked))) => {
            let nodes = p.site.nodes.len();
            let tftp = |a: &site::Admission| (a.tftp_transfers, a.tftp_queue, a.tftp_per_source);
            if tftp(&app.live.load().site.host.admission) != tftp(&p.site.host.admission) {
                warn!("host.admission's TFTP limits changed: they apply when bootd restarts");
            }
            app.admission.apply(&p.site);
            app.live.store(Arc::new(Snapshot {
                site: p.site,
                revoked,
            }));
            app.metrics
                .reloads
                .get_or_create(&metrics::Outcome { result: "ok" })
                .inc();
            info!(nodes, forced = p.forced, "site reloaded");
        }
        Ok((Err(e), _)) => refused(&e),
        Ok((_, Err(e))) => refused(&format!("revoked-node list unreadable: {e}")),
        Err(e) => error!(error = %e, "site reload task failed"),
    }
}

/// Re-reads the revoked-node list; an unreadable one keeps the previous.
pub fn reload_revoked(app: &App) {
    match state::load_revoked(&app.state_dir) {
        Ok(revoked) => {
            app.live.rcu(|cur| Snapshot {
                site: Arc::clone(&cur.site),
                revoked: revoked.clone(),
            });
            app.metrics
                .reloads
                .get_or_create(&metrics::Outcome { result: "ok" })
                .inc();
            info!("revoked-node list reloaded");
        }
        Err(e) => {
            app.metrics
                .reloads
                .get_or_create(&metrics::Outcome { result: "error" })
                .inc();
            error!(error = %e, "revoked-node list unreadable; the previous state keeps serving");
        }
    }
}
