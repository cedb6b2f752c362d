//! lbd: the L4 TCP load balancer of the appliance, for the cluster's API
//! (6443), machine-config server (22623) and ingress (80, 443), derived from
//! the site; or for any `listen → backends` services from a standalone file.
//!
//! Modules:
//! - [`plan`]: pure: the site (or lbd file) → frontends and their backends.
//! - [`health`]: pure rise/fall state machine and the per-backend check loop.
//! - [`probe`]: TCP, HTTP and HTTPS (rustls) probes.
//! - [`balance`]: pure: round robin and least connections.
//! - [`state`]: the live frontends and pools; hitless `apply`, draining,
//!   connection limits, the bootstrap phase.
//! - [`proxy`]: accept (EMFILE backoff), connect with redispatch.
//! - [`relay`]: the byte pump: half-close, idle timeout, splice(2).
//! - [`admin`]: the admin HTTP routes (metrics, status, bootstrap completion).
//! - [`metrics`]: Prometheus exposition from the live state.
//!
//! Shape: `main` parses flags, loads the site, binds sockets and calls
//! [`run`]; tests call [`start`] on loopback port 0 and inspect the returned
//! [`Lbd`].
//!
//! Invariants: a reload or a bootstrap completion goes through
//! [`state::App::apply`] (one at a time); a configuration that fails to load
//! or to bind leaves the running one untouched; established connections are
//! never cut by a pool change, only by the drain deadline of a backend that
//! left its pool.

pub mod admin;
pub mod apply;
pub mod balance;
pub mod health;
pub mod keepalived;
pub mod metrics;
pub mod plan;
pub mod probe;
pub mod proxy;
pub mod relay;
pub mod state;
pub mod status;

use plan::FrontendPlan;
use site::{Lb, Site, SiteError};
use state::{App, ApplyError, BootstrapPhase};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

/// The file a bootstrap completion is remembered in (under the state
/// directory), so a restarted lbd does not put the bootstrap node back.
pub const BOOTSTRAP_MARKER: &str = "bootstrap-complete";

/// Where the configuration comes from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A site file: frontends derived from vips, nodes and `lb:`.
    Site(PathBuf),
    /// A standalone lbd file (`services`).
    Standalone(PathBuf),
    /// The site of the process's feed (the all-in-one binary): lbd follows
    /// each published site and parses nothing itself.
    Feed(runtime::SiteFeed),
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub enum Loaded {
    Site(Arc<Site>),
    Standalone(Lb),
}

impl Loaded {
    pub fn load(source: &Source) -> Result<Loaded, SiteError> {
        match source {
            Source::Site(p) => site::load(p).map(|s| Loaded::Site(Arc::new(s))),
            Source::Standalone(p) => site::load_lb(p).map(Loaded::Standalone),
            Source::Feed(f) => Ok(Loaded::Site(f.current())),
        }
    }
    pub fn lb(&self) -> &Lb {
        match self {
            Loaded::Site(s) => &s.lb,
            Loaded::Standalone(l) => l,
        }
    }
    pub fn plan(&self, bootstrap_done: bool) -> Vec<FrontendPlan> {
        match self {
            Loaded::Site(s) => plan::from_site(s, bootstrap_done),
            Loaded::Standalone(l) => plan::from_lb(l),
        }
    }
    /// Files whose change triggers a reload: the site's own list (or the
    /// lbd file), and every check CA.
    pub fn watched_files(&self, source: &Source) -> Vec<PathBuf> {
        let mut v = match (self, source) {
            (Loaded::Site(s), _) => s.watched_files(),
            (Loaded::Standalone(_), Source::Standalone(p) | Source::Site(p)) => vec![p.clone()],
            (Loaded::Standalone(_), Source::Feed(_)) => vec![],
        };
        for f in &self.lb().frontends {
            if let site::CheckKind::Https { ca: Some(ca), .. } = &f.check.kind {
                v.push(ca.clone());
            }
        }
        v
    }
}

#[derive(Debug)]
pub struct Config {
    pub source: Source,
    pub loaded: Loaded,
    /// Where the bootstrap completion is remembered; `None`: not remembered.
    pub state_dir: Option<PathBuf>,
    /// Notified on SIGHUP (by `main`) or by tests: re-read the configuration now.
    pub reload: Arc<Notify>,
    /// Notified (all waiters) when a reload asked for through `reload` has
    /// finished, applied or refused (`main` then tells systemd READY=1).
    pub reloaded: Arc<Notify>,
    /// How often the configuration files are checked for changes; `None`: never.
    pub poll: Option<Duration>,
    /// How long open connections get after shutdown.
    pub grace: Duration,
    /// The admin listener's head deadline (10 s, also the idle keep-alive
    /// limit) and head size (100 headers, 32 KiB).
    pub admin_http: runtime::http1::Limits,
}

impl Config {
    pub fn new(source: Source, loaded: Loaded) -> Config {
        Config {
            source,
            loaded,
            state_dir: None,
            reload: Arc::new(Notify::new()),
            reloaded: Arc::new(Notify::new()),
            poll: Some(Duration::from_secs(2)),
            grace: Duration::from_secs(10),
            admin_http: runtime::http1::Limits::new(Duration::from_secs(10)),
        }
    }
}

/// Pre-bound sockets: frontends by name (others are bound by lbd itself).
#[derive(Debug, Default)]
pub struct Sockets {
    pub frontends: HashMap<String, TcpListener>,
    pub admin: Option<TcpListener>,
}

pub use runtime::net::BindError;

impl Sockets {
    /// Binds every frontend of `loaded`'s plan and `lb.adminListen`
    /// ([`state::bind`]: IP_FREEBIND, so a VIP not here yet binds).
    /// Inside the runtime.
    pub fn bind(loaded: &Loaded) -> Result<Sockets, BindError> {
        let fail = |what: String| move |source| BindError { what, source };
        let mut s = Sockets::default();
        for f in &loaded.plan(false) {
            let l = state::bind(f.listen)
                .map_err(fail(format!("lb frontend {} {}", f.name, f.listen)))?;
            s.frontends.insert(f.name.clone(), l);
        }
        if let Some(a) = loaded.lb().admin_listen {
            s.admin = Some(state::bind(a).map_err(fail(format!("lb.adminListen {a}")))?);
        }
        Ok(s)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error("state directory {0}: {1}")]
    StateDir(PathBuf, std::io::Error),
}

/// The running daemon.
#[derive(Debug)]
pub struct Lbd {
    pub app: Arc<App>,
    source: Source,
    loaded: Mutex<Loaded>,
    state_dir: Option<PathBuf>,
    grace: Duration,
}

impl Lbd {
    /// The configuration being served (a copy: the site holds the role
    /// Ignition configs, so periodic readers use [`Lbd::with_loaded`]).
    pub fn loaded(&self) -> Loaded {
        self.with_loaded(Loaded::clone)
    }

    pub fn with_loaded<T>(&self, f: impl FnOnce(&Loaded) -> T) -> T {
        f(&self.loaded.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Drains the bootstrap node and removes it from its frontends; the
    /// same whether asked over the admin API, by `lbd bootstrap-complete`
    /// or automatically. Idempotent.
    pub async fn complete_bootstrap(&self, why: &str) -> Result<BootstrapPhase, Error> {
        let loaded = self.loaded();
        let has_bootstrap =
            matches!(&loaded, Loaded::Site(s) if s.nodes.iter().any(|n| n.is_bootstrap()));
        if !has_bootstrap {
            return Ok(BootstrapPhase::None);
        }
        if !self.app.bootstrap_done.swap(true, Relaxed) {
            info!("bootstrap complete ({why}): draining the bootstrap node out of api and machine-config");
            if let Some(dir) = &self.state_dir {
                let marker = dir.join(BOOTSTRAP_MARKER);
                let text = format!("bootstrap completed ({why}) at {:?}\n", SystemTime::now());
                if let Err(e) =
                    std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&marker, text))
                {
                    warn!(error = %e, path = %marker.display(), "cannot remember the bootstrap completion; a restart would serve the bootstrap node again");
                }
            }
            self.app
                .apply(
                    &loaded.plan(true),
                    &mut HashMap::new(),
                    &format!("bootstrap complete: {why}"),
                )
                .await?;
        }
        Ok(self.app.bootstrap_phase())
    }

    /// Waits for shutdown, then gives open connections the grace period.
    pub async fn wait(&self) {
        let app = &self.app;
        app.shutdown.cancelled().await;
        app.tracker.close();
        if tokio::time::timeout(self.grace, app.tracker.wait())
            .await
            .is_err()
        {
            warn!(grace = ?self.grace, open = app.conns.load(Relaxed), "connections still open after the grace period; closing them");
            app.conn_stop.cancel();
            app.tracker.wait().await;
        }
        info!("lbd stopped");
    }
}

/// Serves until `shutdown` is cancelled and open connections have had their grace.
pub async fn run(
    config: Config,
    sockets: Sockets,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let lbd = start(config, sockets, shutdown).await?;
    lbd.wait().await;
    Ok(())
}

/// Starts serving and returns at once.
pub async fn start(
    config: Config,
    mut sockets: Sockets,
    shutdown: CancellationToken,
) -> Result<Arc<Lbd>, Error> {
    let lb = config.loaded.lb().clone();
    let app = Arc::new(App::new(
        lb.limits.clone(),
        lb.bootstrap.drain_timeout,
        shutdown.clone(),
    ));
    if let Some(dir) = &config.state_dir {
        if dir.join(BOOTSTRAP_MARKER).exists() {
            info!(path = %dir.join(BOOTSTRAP_MARKER).display(), "bootstrap was completed earlier: the bootstrap node stays out");
            app.bootstrap_done.store(true, Relaxed);
        }
    }
    app.apply(
        &config.loaded.plan(app.bootstrap_done.load(Relaxed)),
        &mut sockets.frontends,
        "configuration loaded",
    )
    .await?;
    let lbd = Arc::new(Lbd {
        app: Arc::clone(&app),
        source: config.source.clone(),
        loaded: Mutex::new(config.loaded),
        state_dir: config.state_dir,
        grace: config.grace,
    });
    if let Some(l) = sockets.admin {
        info!(addr = %l.local_addr().map(|a| a.to_string()).unwrap_or_default(), "admin HTTP listening");
        app.tracker
            .spawn(admin::serve(l, Arc::clone(&lbd), config.admin_http));
    }
    match &config.source {
        Source::Feed(feed) => {
            let lbd2 = Arc::clone(&lbd);
            app.tracker.spawn(runtime::feed::follow(
                feed.subscribe(),
                app.shutdown.clone(),
                move |p| {
                    let lbd = Arc::clone(&lbd2);
                    async move {
                        match p.refused {
                            Some(why) => refused(&lbd.app, &why),
                            None => apply_loaded(&lbd, Loaded::Site(p.site), p.forced).await,
                        }
                    }
                },
            ));
        }
        _ => {
            let triggers = runtime::Triggers {
                reload: config.reload,
                reloaded: config.reloaded,
                poll: config.poll,
            };
            let files = {
                let lbd = Arc::clone(&lbd);
                move || lbd.with_loaded(|l| l.watched_files(&lbd.source))
            };
            let lbd2 = Arc::clone(&lbd);
            app.tracker.spawn(runtime::reload::watch(
                triggers,
                app.shutdown.clone(),
                files,
                move |forced| {
                    let lbd = Arc::clone(&lbd2);
                    async move {
                        let source = lbd.source.clone();
                        match tokio::task::spawn_blocking(move || Loaded::load(&source)).await {
                            Ok(Ok(l)) => apply_loaded(&lbd, l, forced).await,
                            Ok(Err(e)) => refused(&lbd.app, &e.to_string()),
                            Err(e) => error!(error = %e, "reload task failed"),
                        }
                    }
                },
            ));
        }
    }
    app.tracker.spawn(auto_bootstrap(Arc::clone(&lbd)));
    Ok(lbd)
}

fn refused(app: &App, why: &str) {
    app.metrics.reloads_failed.fetch_add(1, Relaxed);
    error!("reload refused, the previous configuration keeps serving:\n{why}");
}

/// Applies a reloaded configuration; a plan that cannot be bound keeps the
/// old one serving.
async fn apply_loaded(lbd: &Lbd, loaded: Loaded, forced: bool) {
    let app = &lbd.app;
    let lb = loaded.lb();
    app.limits.store(Arc::new(lb.limits.clone()));
    app.drain_timeout
        .store(Arc::new(lb.bootstrap.drain_timeout));
    match app
        .apply(
            &loaded.plan(app.bootstrap_done.load(Relaxed)),
            &mut HashMap::new(),
            "reload",
        )
        .await
    {
        Ok(()) => {
            app.metrics.reloads_ok.fetch_add(1, Relaxed);
            info!(
                frontends = lb.frontends.len(),
                forced, "configuration reloaded"
            );
            *lbd.loaded.lock().unwrap_or_else(|p| p.into_inner()) = loaded;
        }
        Err(e) => {
            let old = lbd.with_loaded(|l| l.lb().clone());
            app.limits.store(Arc::new(old.limits));
            app.drain_timeout
                .store(Arc::new(old.bootstrap.drain_timeout));
            refused(app, &e.to_string());
        }
    }
}

/// Completes the bootstrap by itself once every master has been up on api
/// and machine-config for `lb.bootstrap.autoCompleteAfter`.
async fn auto_bootstrap(lbd: Arc<Lbd>) {
    let app = Arc::clone(&lbd.app);
    loop {
        tokio::select! {
            _ = app.shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        if app.bootstrap_done.load(Relaxed) {
            return;
        }
        let Some(hold) = lbd.with_loaded(|l| l.lb().bootstrap.auto_complete_after) else {
            continue;
        };
        let masters: Vec<_> = ["api", "machine-config", "api-v6", "machine-config-v6"]
            .iter()
            .filter_map(|n| app.frontend(n))
            .flat_map(|f| {
                f.pool
                    .load()
                    .iter()
                    .filter(|b| b.role == plan::Role::Master)
                    .map(|b| b.up_since())
                    .collect::<Vec<_>>()
            })
            .collect();
        if state::bootstrap_due(&masters, tokio::time::Instant::now(), hold) {
            let why = format!("automatic: every master up for {hold:?}");
            if let Err(e) = lbd.complete_bootstrap(&why).await {
                error!(error = %e, "automatic bootstrap completion failed");
            }
        }
    }
}
