//! The controller API: nodes created through HTTPS, machines made for them
//! by cloud providers, and each node followed until it is Ready.
//!
//! Modules:
//! - [`auth`]: bearer tokens with a name and scopes (file, systemd
//!   credential or environment variable), compared in constant time.
//! - [`events`]: which timeline events the controller keeps, and the conditions they make.
//! - [`facts`]: what a provider says of a node's machine (MACs, addresses),
//!   recorded on the node and served to every daemon.
//! - [`follow`]: follows bootd's timeline feed into stored events and conditions.
//! - [`metrics`]: the API's and the providers' counters, in bootd's `/metrics`.
//! - `api`: the HTTP side (every route in `api::route`, the handlers).
//! - [`reconcile`]: one loop per node: find-or-create the machine (intent
//!   first), poll it, follow its boot, delete it; bounded jittered retries.
//! - [`teardown`]: once bootstrap is complete, the bootstrap node's
//!   Ignition revoked, lbd drained, its machine deleted; resumable.
//! - [`cluster`]: with `host.api.kubeconfig`, the cluster being installed:
//!   kubelet CSRs of the nodes this appliance booted approved (the rules a
//!   pure function), `Joined` and `CSRPending`, bootstrap completion read
//!   from the cluster.
//! - [`client`]: the `bootd nodes …` / `bootd cluster …` command-line client.
//!
//! Every route is in `api::route`. Only `/healthz` is served without a token;
//! every other route needs a scope (`api::access::needed`), and every write
//! is an `audit:` log line with the token's name.
//! The API speaks JSON; errors are `{"error": "..."}` with a safe message
//! (the detail goes to the log).
//!
//! Invariants: the store is the truth for API nodes and the overlay file is
//! its export; creates and deletes are serialized by one async mutex (so 100
//! concurrent creates of one node make one row, one reconcile loop, one
//! machine); there is at most one reconcile loop per node.

mod addresses;
pub mod auth;
pub mod client;
pub mod cluster;
pub mod conditions;
pub mod events;
pub mod facts;
pub mod fence;
pub mod follow;
mod leader;
mod overlay;
pub(crate) use overlay::epoch_key;
pub mod machine_config;
pub mod metrics;
pub mod providers;
pub mod reconcile;
pub mod store;
pub mod teardown;
mod term;

use crate::providers::{Provider, ProviderSpec};
use crate::store::{NodeRow, Store};
use bootd::http::Body;
use bootd::state::Snapshot;
use bootd::App;

use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};
mod api;
use api::serve;

/// Timings of the reconcile loops (tests shorten them).
#[derive(Debug, Clone)]
pub struct Tuning {
    /// How often a machine being created, or a node booting, is looked at.
    pub poll: Duration,
    /// First retry delay; doubles per attempt up to `backoff_cap`, with jitter.
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    /// Timeout of one provider HTTP exchange.
    pub request_timeout: Duration,
    /// Overrides `host.api.deadline`.
    pub deadline: Option<Duration>,
    /// Overrides `host.api.machineConfigWithin`.
    pub machine_config_within: Option<Duration>,
    /// How long a request body may take to arrive (then 408).
    pub body_timeout: Duration,
    /// Connections the API holds at once, and from one address.
    pub connections: runtime::conns::ConnLimits,
    /// The API's head deadline (30 s, also the idle keep-alive limit), TLS
    /// handshake deadline (10 s) and head size (100 headers, 32 KiB).
    pub http: runtime::http1::Limits,
    /// How often the cluster's CSRs and bootstrap ConfigMap are looked at
    /// (with `host.api.kubeconfig`).
    pub cluster_poll: Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            poll: Duration::from_secs(5),
            backoff_base: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(60),
            request_timeout: Duration::from_secs(30),
            deadline: None,
            machine_config_within: None,
            body_timeout: Duration::from_secs(30),
            // Operators and their tools (which may fire a hundred creates
            // at once), not machines; far inside the descriptor budget.
            connections: runtime::conns::ConnLimits {
                max: 1024,
                per_source: 256,
            },
            http: runtime::http1::Limits::new(Duration::from_secs(30)),
            cluster_poll: Duration::from_secs(10),
        }
    }
}

/// A node as the API takes it: the site's node keys (docs/site.md), plus
/// the provider that makes its machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeSpec {
    pub name: String,
    pub role: String,
    /// May be left out where the provider assigns them ([`facts`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub macs: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ip: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_disk: Option<String>,
    /// Metal3's root-device hints (docs/site.md), validated in the overlay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_device_hints: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel_args: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipxe_binary: Option<String>,
    /// `nodeAddress` or `anyAddress`; none: its provider's
    /// (`host.api.fetchFrom`), else `nodeAddress`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetch_from: Option<String>,
    /// One interface's static addressing, or the NMState subset
    /// (docs/site.md, `network` and `networkConfig`): carried into the
    /// node overlay as written and validated there, as the site's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_config: Option<Value>,
    /// The switch port (option 82) that names the machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay: Option<Value>,
}

/// The body of `POST /v1/nodes`: a [`NodeSpec`] plus an optional
/// `provider`; unknown keys are refused.
pub fn parse_create(body: &[u8]) -> Result<(NodeSpec, Option<ProviderSpec>), String> {
    let mut v: serde_json::Map<String, Value> =
        serde_json::from_slice(body).map_err(|e| format!("not a JSON object: {e}"))?;
    let provider = match v.remove("provider") {
        None | Some(Value::Null) => None,
        Some(p) => {
            Some(serde_json::from_value::<ProviderSpec>(p).map_err(|e| format!("provider: {e}"))?)
        }
    };
    if let Some(p) = &provider {
        // A spec that does not parse is a malformed request, as before any check.
        p.check().map_err(|e| format!("provider: {e}"))?;
    }
    // With the key the problem is at (`kernelArgs: invalid type: …`).
    let spec: NodeSpec = serde_path_to_error::deserialize(Value::Object(v)).map_err(|e| {
        let at = e.path().to_string();
        if at == "." {
            format!("not a node: {}", e.inner())
        } else {
            format!("not a node: {at}: {}", e.inner())
        }
    })?;
    Ok((spec, provider))
}

/// The writes lock, held ([`Controller::writing`]).
pub(crate) struct Writing<'a> {
    gen: Arc<std::sync::atomic::AtomicU64>,
    _held: tokio::sync::MutexGuard<'a, ()>,
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        // Before the lock itself is let go (fields drop after this).
        self.gen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The controller: store, providers, reconcile loops.
pub struct Controller {
    pub app: Arc<App>,
    pub store: Store,
    pub site_path: PathBuf,
    pub api: site::Api,
    pub tuning: Tuning,
    pub metrics: Arc<metrics::Metrics>,
    /// Configured providers, or why one cannot be used (unreadable key).
    providers: HashMap<&'static str, providers::Configured>,
    /// Serializes creates, deletes and overlay writes.
    writes: tokio::sync::Mutex<()>,
    /// Bumped as each holder of `writes` lets it go: a reader that did not
    /// hold it sees whether a write ended since it began ([`Controller::writing`]).
    write_gen: Arc<std::sync::atomic::AtomicU64>,
    /// One entry per running reconcile loop: its notify wakes it, the
    /// term it runs in stops it.
    loops: std::sync::Mutex<HashMap<String, (Arc<Notify>, CancellationToken)>>,
    /// While this appliance runs the reconcile loops (always on SQLite;
    /// while elected on etcd): cancelled when it stops.
    term: std::sync::Mutex<Option<CancellationToken>>,
    /// When the current term may act (`fence::wait` after it began).
    acts_from: std::sync::Mutex<tokio::time::Instant>,
    /// Wakes the bootstrap teardown.
    teardown: Arc<Notify>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("site_path", &self.site_path)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("the site has no host.api, or bootd has no TLS (the API is served with the site CA)")]
    NotConfigured,
    #[error("host.api.listen {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Binds `host.api.listen` (before privileges are dropped and READY is
/// sent); `None` when the site has no API.
pub async fn bind(site: &site::Site) -> Result<Option<TcpListener>, ApiError> {
    match &site.host.api {
        Some(a) => TcpListener::bind(a.listen)
            .await
            .map(Some)
            .map_err(|source| ApiError::Bind {
                addr: a.listen,
                source,
            }),
        None => Ok(None),
    }
}

/// Runs the controller beside bootd (whose [`App`] it builds on: the live
/// site, the state directory, the CA, the token key and the timeline it
/// follows) and serves its API on `listener` until `shutdown`; then gives
/// open requests and loops `grace` to finish.
pub async fn run(
    app: Arc<App>,
    tuning: Tuning,
    listener: TcpListener,
    shutdown: CancellationToken,
    grace: Duration,
) -> Result<(), ApiError> {
    let api = app.live.load().site.host.api.clone();
    let (Some(api), Some(tls)) = (api, app.tls.as_ref()) else {
        return Err(ApiError::NotConfigured);
    };
    let server_config = Arc::clone(&tls.server_config);
    let tracker = TaskTracker::new();
    let ctl = Controller::start(
        Arc::clone(&app),
        api,
        tuning,
        tracker.clone(),
        shutdown.clone(),
    )?;
    info!(addr = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), "controller API listening (HTTPS)");
    serve(
        Arc::clone(&ctl),
        listener,
        server_config,
        shutdown,
        tracker.clone(),
    )
    .await;
    tracker.close();
    if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
        warn!(
            ?grace,
            "controller tasks still running after the grace period"
        );
    }
    // Sessions left open would hold places on the BMCs until they time out.
    let close = async {
        for p in ctl.providers.values().flatten() {
            p.close().await;
        }
    };
    if tokio::time::timeout(grace, close).await.is_err() {
        warn!("providers' sessions not all closed within the grace period");
    }
    Ok(())
}

impl Controller {
    /// Opens the store (in bootd's state directory), reads the provider keys,
    /// re-exports the overlay from the store, and starts a reconcile loop for
    /// every stored node, plus the event writer.
    pub fn start(
        app: Arc<App>,
        api: site::Api,
        tuning: Tuning,
        tracker: TaskTracker,
        shutdown: CancellationToken,
    ) -> Result<Arc<Controller>, ApiError> {
        let choice = app.live.load().site.host.store.clone();
        let store = Store::open(&app.state_dir, &choice)?;
        let bmc = api.redfish.is_some() || api.ipmi.is_some();
        let setup = providers::Setup {
            http: providers::Http::new(tuning.request_timeout),
            state_dir: &app.state_dir,
            // Looked for (and the old place warned about) only when a BMC
            // provider will read from it.
            bmc_files: match &api.bmc_files {
                Some(d) => d.clone(),
                None if bmc => runtime::paths::bmc_files(),
                None => PathBuf::from(runtime::paths::BMC_FILES),
            },
        };
        let map = providers::configure_all(&api, &setup);
        for (name, p) in &map {
            if let Err(e) = p {
                error!(provider = name, error = %e, "provider key unreadable: nodes on this provider will fail");
            }
        }
        let site_path = app.live.load().site.source.clone();
        let ctl = Arc::new(Controller {
            app: Arc::clone(&app),
            store,
            site_path,
            api,
            tuning,
            metrics: metrics::Metrics::of(&app),
            providers: map,
            writes: tokio::sync::Mutex::new(()),
            write_gen: Default::default(),
            loops: Default::default(),
            term: Default::default(),
            acts_from: std::sync::Mutex::new(tokio::time::Instant::now()),
            teardown: Arc::new(Notify::new()),
            tracker,
            shutdown,
        });
        ctl.tracker.spawn(follow::follow_timeline(
            Arc::clone(&ctl),
            app.timeline.subscribe(),
        ));
        ctl.tracker.spawn(machine_config::follow(Arc::clone(&ctl)));
        let rows = ctl.store.nodes()?;
        if !rows.is_empty() {
            // The overlay may lag the store after a crash between the two writes.
            if let Err(e) = ctl.export_overlay_now(&rows) {
                error!(error = %e, "node overlay not re-exported on start");
            }
        }
        match ctl.store.shared() {
            // The one appliance runs the loops from now on.
            None => ctl.begin_term(),
            // Every appliance follows the shared nodes into its overlay;
            // the elected one runs the loops.
            Some(etcd) => {
                ctl.tracker
                    .spawn(leader::follow(Arc::clone(&ctl), etcd.clone()));
                ctl.tracker.spawn(leader::lead(Arc::clone(&ctl), etcd));
            }
        }
        Ok(ctl)
    }

    pub fn provider(&self, name: &str) -> Result<Arc<dyn Provider>, String> {
        match self.providers.get(name) {
            Some(Ok(p)) => Ok(Arc::clone(p)),
            Some(Err(e)) => Err(format!("provider {name} unavailable: {e}")),
            None => Err(format!(
                "provider {name} is not configured (host.api.{name})"
            )),
        }
    }

    pub fn deadline(&self) -> Duration {
        self.tuning.deadline.unwrap_or(self.api.deadline)
    }

    pub fn machine_config_within(&self) -> Duration {
        self.tuning
            .machine_config_within
            .unwrap_or(self.api.machine_config_within)
    }

    /// Stores one thing the controller did for a node (API call, provider
    /// action) in the node's event log.
    pub fn note(&self, node: &str, kind: &str, message: impl Into<String>) {
        let e = store::Event {
            at: store::now_ms(),
            kind: kind.to_string(),
            message: message.into(),
        };
        if let Err(err) = self.store.add_events(&[(node.to_string(), e)]) {
            error!(error = %err, node, "event not stored");
        }
    }

    pub fn wake(&self, name: &str) {
        if let Some((n, _)) = self
            .loops
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
        {
            n.notify_one();
        }
    }

    /// The loop woken by `wake` ended (a loop of a later term may have
    /// taken its place: that one stays).
    pub(crate) fn loop_ended(&self, name: &str, wake: &Arc<Notify>) {
        let mut loops = self.loops.lock().unwrap_or_else(|p| p.into_inner());
        if loops.get(name).is_some_and(|(n, _)| Arc::ptr_eq(n, wake)) {
            loops.remove(name);
        }
    }

    /// Records that bootstrap is complete (the first time, and who said so,
    /// are kept) and starts the teardown; returns when it was recorded.
    /// `<host.stateDir>/bootstrap-complete.json` is an export of the fact
    /// for operators and scripts; nothing reads it back.
    pub fn complete_bootstrap(&self, by: &str) -> Result<i64, store::StoreError> {
        let first = self.store.cluster(teardown::BOOTSTRAP_COMPLETE)?.is_none();
        let at = self
            .store
            .set_cluster_once(teardown::BOOTSTRAP_COMPLETE, by)?;
        if first {
            info!(by, "cluster bootstrap recorded as complete");
            let body = json!({ "complete": true, "time": rfc3339(at), "by": by });
            let path = self.app.state_dir.join("bootstrap-complete.json");
            if let Err(e) = bootd::state::write_atomic(&path, format!("{body}\n").as_bytes(), 0o644)
            {
                error!(path = %path.display(), error = %e, "bootstrap-complete not exported to its file");
            }
        }
        self.teardown.notify_one();
        Ok(at)
    }

    /// Holds the writes lock (creates, deletes, overlay writes); the
    /// generation moves on when it is let go, after everything written.
    pub(crate) async fn writing(&self) -> Writing<'_> {
        Writing {
            gen: Arc::clone(&self.write_gen),
            _held: self.writes.lock().await,
        }
    }

    /// How many holders of the writes lock have let it go.
    pub(crate) fn write_gen(&self) -> u64 {
        self.write_gen.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Starts deleting an API node (its machine, then the node): marks it,
    /// serves the site without it, wakes its loop. Idempotent.
    pub async fn begin_delete(
        self: &Arc<Self>,
        name: &str,
        why: &str,
    ) -> Result<(), store::StoreError> {
        let _w = self.writing().await;
        match self.store.node(name)? {
            Some(row) => self.delete_locked(&row, why, false),
            None => Ok(()),
        }
    }

    /// Whether node `name` (served) installs to disk with an inspection
    /// agent for its architecture: the agent can wipe its disks.
    pub(crate) fn wipes_before_install(&self, name: &str) -> bool {
        let snap = self.app.live.load();
        snap.site.node(name).is_some_and(|n| {
            n.disk_hints().is_some() && snap.site.inspection.agent(n.arch).is_some()
        })
    }

    /// Whether deleting `row` first wipes its machine's disks: a machine
    /// that outlives its node (behind a BMC), installed to disk, whose
    /// architecture has an inspection agent.
    fn wipes_on_release(&self, row: &NodeRow) -> bool {
        let bmc = row
            .provider
            .as_object()
            .and_then(|o| o.keys().next())
            .is_some_and(|p| p == "redfish" || p == "ipmi");
        bmc && self.wipes_before_install(&row.name)
    }

    /// [`Controller::begin_delete`], with the writes lock held.
    /// `keep_disks`: power the machine off without wiping its disks.
    fn delete_locked(
        self: &Arc<Self>,
        row: &NodeRow,
        why: &str,
        keep_disks: bool,
    ) -> Result<(), store::StoreError> {
        if !row.deleting {
            // The wipe is an intent: marked before the deletion is.
            if !keep_disks && self.wipes_on_release(row) {
                self.app
                    .inventories
                    .set_releasing(&row.name, Some(store::now_ms()))?;
                self.note(
                    &row.name,
                    events::API,
                    "its disks are wiped before its machine is powered off (--keep-disks skips that)",
                );
            }
            self.store.mark_deleting(&row.name)?;
            let rows = self.store.nodes()?;
            if let Err(e) = self.export_overlay_now(&rows) {
                error!(node = %row.name, error = %e, "node marked for deletion but the overlay was not written");
            }
            self.note(&row.name, events::API, format!("deletion {why}"));
            info!(node = %row.name, why, "node deletion requested");
            // A node of this name created later is another machine: it installs.
            if let Err(e) = self.app.installed.clear(&row.name) {
                error!(node = %row.name, error = %e, "the node's install mark was not cleared");
            }
        }
        self.ensure_loop(&row.name);
        Ok(())
    }
}

/// A refused site's problems as API clients and conditions show them:
/// `key: reason` (the reason alone when it names no key).
pub(crate) fn problems(e: &site::SiteError) -> Vec<String> {
    e.problems
        .iter()
        .map(|p| {
            if p.key.is_empty() {
                p.reason.clone()
            } else {
                format!("{}: {}", p.key, p.reason)
            }
        })
        .collect()
}

/// Largest request body accepted.
pub(crate) const MAX_REQUEST: usize = 64 * 1024;

pub use bootd::timeline::rfc3339;
