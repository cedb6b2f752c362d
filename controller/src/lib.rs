//! The controller API: nodes created through HTTPS, machines made for them
//! by cloud providers, and each node followed until it is Ready.
//!
//! Modules:
//! - [`auth`]: bearer tokens (file or systemd credential), constant-time.
//! - [`events`]: which timeline events the controller keeps, and the conditions they make.
//! - [`reconcile`]: one loop per node: find-or-create the machine (intent
//!   first), poll it, follow its boot, delete it; bounded jittered retries.
//! - [`client`]: the `bootd nodes …` / `bootd cluster …` command-line client.
//!
//! Every route is in [`route`]. Only `/healthz` is served without a token.
//! The API speaks JSON; errors are `{"error": "..."}` with a safe message
//! (the detail goes to the log).
//!
//! Invariants: the store is the truth for API nodes and the overlay file is
//! its export; creates and deletes are serialized by one async mutex (so 100
//! concurrent creates of one node make one row, one reconcile loop, one
//! machine); there is at most one reconcile loop per node.

pub mod auth;
pub mod client;
pub mod events;
pub mod providers;
pub mod reconcile;
pub mod store;

use crate::providers::{Provider, ProviderSpec};
use crate::store::{NodeRow, Store};
use bootd::http::Body;
use bootd::state::Snapshot;
use bootd::App;
use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::{TokioIo, TokioTimer};
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
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            poll: Duration::from_secs(5),
            backoff_base: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(60),
            request_timeout: Duration::from_secs(30),
            deadline: None,
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
    pub macs: Vec<String>,
    pub ip: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_disk: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel_args: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipxe_binary: Option<String>,
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
    let spec = serde_json::from_value::<NodeSpec>(Value::Object(v))
        .map_err(|e| format!("not a node: {e}"))?;
    Ok((spec, provider))
}

/// The controller: store, providers, reconcile loops.
pub struct Controller {
    pub app: Arc<App>,
    pub store: Store,
    pub site_path: PathBuf,
    pub api: site::Api,
    pub tuning: Tuning,
    /// Configured providers, or why one cannot be used (unreadable key).
    providers: HashMap<&'static str, providers::Configured>,
    /// Serializes creates, deletes and overlay writes.
    writes: tokio::sync::Mutex<()>,
    /// One entry per running reconcile loop; its notify wakes it.
    loops: std::sync::Mutex<HashMap<String, Arc<Notify>>>,
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
    serve(ctl, listener, server_config, shutdown, tracker.clone()).await;
    tracker.close();
    if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
        warn!(
            ?grace,
            "controller tasks still running after the grace period"
        );
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
        let store = Store::open(&app.state_dir)?;
        let setup = providers::Setup {
            http: providers::Http::new(tuning.request_timeout),
            state_dir: &app.state_dir,
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
            providers: map,
            writes: tokio::sync::Mutex::new(()),
            loops: Default::default(),
            tracker,
            shutdown,
        });
        ctl.tracker.spawn(reconcile::follow_timeline(
            Arc::clone(&ctl),
            app.timeline.subscribe(),
        ));
        let rows = ctl.store.nodes()?;
        if !rows.is_empty() {
            // The overlay may lag the store after a crash between the two writes.
            if let Err(e) = ctl.export_overlay_now(&rows) {
                error!(error = %e, "node overlay not re-exported on start");
            }
        }
        for r in rows {
            ctl.ensure_loop(&r.name);
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

    /// Starts the node's reconcile loop unless it runs; wakes it if it does.
    pub fn ensure_loop(self: &Arc<Self>, name: &str) {
        let mut loops = self.loops.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = loops.get(name) {
            n.notify_one();
            return;
        }
        let wake = Arc::new(Notify::new());
        loops.insert(name.to_string(), Arc::clone(&wake));
        self.tracker.spawn(reconcile::node_loop(
            Arc::clone(self),
            name.to_string(),
            wake,
        ));
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
        if let Some(n) = self
            .loops
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
        {
            n.notify_one();
        }
    }

    pub(crate) fn loop_ended(&self, name: &str) {
        self.loops
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
    }

    /// The overlay text for `rows` (those not being deleted).
    fn overlay_text(rows: &[NodeRow]) -> String {
        let nodes: Vec<&Value> = rows
            .iter()
            .filter(|r| !r.deleting)
            .map(|r| &r.spec)
            .collect();
        let mut text = String::from(
            "# Nodes added through bootd's API (docs/api.md). Written by bootd; do not edit.\n",
        );
        text.push_str(&serde_yaml_ng::to_string(&json!({ "nodes": nodes })).unwrap_or_default());
        text
    }

    /// Validates the overlay for `rows` with the site exactly as every daemon
    /// will load it; on success writes it atomically and serves the new site.
    fn export_overlay_now(&self, rows: &[NodeRow]) -> Result<(), String> {
        let text = Self::overlay_text(rows);
        let site = site::load_with_overlay(&self.site_path, &text).map_err(|e| e.to_string())?;
        self.write_and_serve(&text, site)
    }

    /// Writes the overlay `text`, which `site` was validated with, and
    /// serves that site: no parse of its own.
    fn write_and_serve(&self, text: &str, site: site::Site) -> Result<(), String> {
        bootd::state::write_atomic(&site.overlay.path, text.as_bytes(), 0o644)
            .map_err(|e| format!("{}: {e}", site.overlay.path.display()))?;
        // Served by bootd before the API answers, then published for the
        // other daemons of the process (they need not parse it again).
        let site = Arc::new(site);
        bootd::serve_site(&self.app, Arc::clone(&site));
        self.app.feed.publish(site);
        Ok(())
    }

    /// bootstrap-complete is also written to `<host.stateDir>/bootstrap-complete.json`,
    /// a record for operators and scripts; lbd keeps its own marker (its
    /// admin API's completion) and does not read this file.
    fn bootstrap_file(&self) -> PathBuf {
        self.app
            .live
            .load()
            .site
            .host
            .state_dir
            .join("bootstrap-complete.json")
    }
}

/// Serves the API on `listener` (TLS with the site CA) until `shutdown`.
pub async fn serve(
    ctl: Arc<Controller>,
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    warn!(error = %e, "API accept failed; backing off 100 ms");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let (ctl, acceptor, shutdown) = (Arc::clone(&ctl), acceptor.clone(), shutdown.clone());
        tracker.spawn(async move {
            let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream))
                .await
            {
                Ok(Ok(s)) => s,
                _ => return tracing::debug!(%peer, "API TLS handshake failed or timed out"),
            };
            let svc = hyper::service::service_fn(move |req| handle(Arc::clone(&ctl), req, peer));
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(30))
                .serve_connection(TokioIo::new(tls), svc);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
                }
            }
        });
    }
}

async fn handle(
    ctl: Arc<Controller>,
    req: Request<hyper::body::Incoming>,
    peer: SocketAddr,
) -> Result<Response<Body>, std::convert::Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let (route_name, resp) = route(&ctl, req).await;
    let status = resp.status().as_u16();
    ctl.app
        .metrics
        .api_requests
        .get_or_create(&bootd::metrics::RouteStatus {
            route: route_name,
            status,
        })
        .inc();
    info!(%method, path = %path.escape_debug(), %peer, status, route = route_name, "API request");
    Ok(resp)
}

fn reply(status: StatusCode, v: &Value) -> Response<Body> {
    let mut body = serde_json::to_vec_pretty(v).unwrap_or_default();
    body.push(b'\n');
    let mut r = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn err(status: StatusCode, msg: impl Into<String>) -> Response<Body> {
    reply(status, &json!({ "error": msg.into() }))
}

fn unauthorized() -> Response<Body> {
    let mut r = err(StatusCode::UNAUTHORIZED, "unauthorized");
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

fn internal(e: impl std::fmt::Display) -> Response<Body> {
    error!(error = %e, "API request failed");
    err(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal error; see bootd's log",
    )
}

/// Largest request body accepted.
const MAX_REQUEST: usize = 64 * 1024;

/// Every route of the API, in one place.
pub async fn route(
    ctl: &Arc<Controller>,
    req: Request<hyper::body::Incoming>,
) -> (&'static str, Response<Body>) {
    let path = req.uri().path().to_string();
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    if segs.as_slice() == ["healthz"] {
        return ("healthz", reply(StatusCode::OK, &json!({ "status": "ok" })));
    }
    let caller = match auth::authenticate(req.headers(), &ctl.api.tokens) {
        Ok(c) => c,
        Err(r) => {
            ctl.app
                .metrics
                .api_denials
                .get_or_create(&bootd::metrics::Reason { reason: r.as_str() })
                .inc();
            warn!(path = %path.escape_debug(), reason = r.as_str(), "API request refused");
            return ("unauthorized", unauthorized());
        }
    };
    let method = req.method().clone();
    match (&method, segs.as_slice()) {
        (&Method::GET, ["v1", "nodes"]) => ("nodes", list_nodes(ctl, caller)),
        (&Method::POST, ["v1", "nodes"]) => ("nodes", create_node(ctl, caller, req).await),
        (&Method::GET, ["v1", "nodes", name]) => ("node", get_node(ctl, caller, name)),
        (&Method::DELETE, ["v1", "nodes", name]) => ("node", delete_node(ctl, caller, name).await),
        (&Method::GET, ["v1", "nodes", name, "events"]) => {
            ("events", node_events(ctl, caller, name))
        }
        (&Method::GET, ["v1", "nodes", name, "timeline"]) => {
            ("timeline", node_timeline(ctl, caller, name))
        }
        (&Method::GET, ["v1", "cluster"]) => ("cluster", cluster(ctl, caller)),
        (&Method::POST, ["v1", "cluster", "bootstrap-complete"]) => {
            ("cluster", bootstrap_complete(ctl, caller))
        }
        (
            _,
            ["v1", "nodes"]
            | ["v1", "nodes", _]
            | ["v1", "nodes", _, "events"]
            | ["v1", "nodes", _, "timeline"]
            | ["v1", "cluster"]
            | ["v1", "cluster", "bootstrap-complete"],
        ) => (
            "other",
            err(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
        ),
        _ => ("other", err(StatusCode::NOT_FOUND, "no such route")),
    }
}

pub use bootd::timeline::rfc3339;

/// The status of one node (site or API), as the API shows it.
fn node_view(
    ctl: &Controller,
    snap: &Snapshot,
    name: &str,
) -> Result<Option<Value>, store::StoreError> {
    let (row, stored) = ctl.store.node_and_conditions(name)?;
    let site_node = snap.site.node(name);
    if row.is_none() && site_node.is_none() {
        return Ok(None);
    }
    let conds = reconcile::conditions_view(row.as_ref(), stored);
    let ready = conds
        .iter()
        .any(|c| c.kind == "Ready" && c.status == "True");
    let (phase, message) = match &row {
        Some(r) => (r.phase.clone(), r.message.clone()),
        None if ready => ("Ready".to_string(), String::new()),
        None => {
            let booted = conds
                .iter()
                .any(|c| c.kind == reconcile::NETWORK_BOOTED && c.status == "True");
            let msg = conds
                .iter()
                .find(|c| c.status != "True")
                .map(|c| c.message.clone())
                .unwrap_or_default();
            (if booted { "Booting" } else { "Waiting" }.to_string(), msg)
        }
    };
    let machine = ctl.store.resource(name)?.map(|m| {
        json!({ "provider": m.provider, "id": m.external_id, "state": m.state, "addresses": m.addresses, "updatedAt": rfc3339(m.updated_at) })
    });
    let spec = match (&row, site_node) {
        (Some(r), _) => r.spec.clone(),
        (None, Some(n)) => json!({
            "name": n.name, "role": n.role, "macs": n.macs.iter().map(|m| m.to_string()).collect::<Vec<_>>(),
            "ip": n.ip.to_string(), "arch": n.arch.as_str(), "image": n.image,
        }),
        (None, None) => Value::Null,
    };
    Ok(Some(json!({
        "name": name,
        "origin": if row.is_some() { "api" } else { "site" },
        "spec": spec,
        "provider": row.as_ref().map(|r| r.provider.clone()).unwrap_or(Value::Null),
        "phase": phase,
        "message": message,
        "createdAt": row.as_ref().map(|r| json!(rfc3339(r.created_at))).unwrap_or(Value::Null),
        "machine": machine,
        "conditions": conds.iter().map(|c| json!({
            "type": c.kind, "status": c.status, "reason": c.reason, "message": c.message, "lastTransitionTime": rfc3339(c.at),
        })).collect::<Vec<_>>(),
    })))
}

fn list_nodes(ctl: &Arc<Controller>, _: auth::Caller) -> Response<Body> {
    let snap = ctl.app.live.load_full();
    let rows = match ctl.store.nodes() {
        Ok(r) => r,
        Err(e) => return internal(e),
    };
    let mut names: Vec<String> = snap.site.nodes.iter().map(|n| n.name.clone()).collect();
    names.extend(
        rows.into_iter()
            .map(|r| r.name)
            .filter(|n| snap.site.node(n).is_none()),
    );
    let mut out = Vec::new();
    for n in &names {
        match node_view(ctl, &snap, n) {
            Ok(Some(v)) => out.push(v),
            Ok(None) => {}
            Err(e) => return internal(e),
        }
    }
    reply(StatusCode::OK, &json!({ "nodes": out }))
}

fn get_node(ctl: &Arc<Controller>, _: auth::Caller, name: &str) -> Response<Body> {
    let snap = ctl.app.live.load_full();
    match node_view(ctl, &snap, name) {
        Ok(Some(v)) => reply(StatusCode::OK, &v),
        Ok(None) => err(StatusCode::NOT_FOUND, "no such node"),
        Err(e) => internal(e),
    }
}

fn node_events(ctl: &Arc<Controller>, _: auth::Caller, name: &str) -> Response<Body> {
    let snap = ctl.app.live.load_full();
    match ctl.store.node(name) {
        Ok(None) if snap.site.node(name).is_none() => {
            return err(StatusCode::NOT_FOUND, "no such node")
        }
        Err(e) => return internal(e),
        _ => {}
    }
    match ctl.store.events(name) {
        Ok(ev) => {
            let list: Vec<Value> = ev
                .iter()
                .map(|e| json!({ "time": rfc3339(e.at), "kind": e.kind, "message": e.message }))
                .collect();
            reply(StatusCode::OK, &json!({ "node": name, "events": list }))
        }
        Err(e) => internal(e),
    }
}

/// The boot timeline (bootd::timeline) of a node, or of an unknown client
/// by its key (`mac 52:54:…`, `ip 10.…`, percent-encoded in the path).
fn node_timeline(ctl: &Arc<Controller>, _: auth::Caller, name: &str) -> Response<Body> {
    let snap = ctl.app.live.load_full();
    let name = percent_encoding::percent_decode_str(name).decode_utf8_lossy();
    match bootd::status::timeline_json(&ctl.app, &snap, &name) {
        Some(v) => reply(StatusCode::OK, &v),
        None => err(StatusCode::NOT_FOUND, "no such node"),
    }
}

async fn create_node(
    ctl: &Arc<Controller>,
    _: auth::Caller,
    req: Request<hyper::body::Incoming>,
) -> Response<Body> {
    let body = match Limited::new(req.into_body(), MAX_REQUEST).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return err(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body larger than {MAX_REQUEST} bytes or cut short"),
            )
        }
    };
    let (spec, provider) = match parse_create(&body) {
        Ok(x) => x,
        Err(e) => return err(StatusCode::BAD_REQUEST, e),
    };
    let mut problems: Vec<String> = provider
        .as_ref()
        .and_then(|p| p.check().ok())
        .unwrap_or_default();
    if let Some(p) = &provider {
        if let Err(e) = ctl.provider(p.name()) {
            problems.push(e);
        }
    }
    if !problems.is_empty() {
        return reply(
            StatusCode::UNPROCESSABLE_ENTITY,
            &json!({ "error": "invalid node", "problems": problems }),
        );
    }
    let provider_json = provider
        .as_ref()
        .map(|p| serde_json::to_value(p).unwrap_or(Value::Null))
        .unwrap_or(Value::Null);
    let spec_json = serde_json::to_value(&spec).unwrap_or(Value::Null);

    let _w = ctl.writes.lock().await;
    let snap = ctl.app.live.load_full();
    match ctl.store.node(&spec.name) {
        Ok(Some(existing)) => {
            // The same request again (a retry, or one of many concurrent ones): same answer.
            if existing.spec == spec_json
                && existing.provider == provider_json
                && !existing.deleting
            {
                return match node_view(ctl, &snap, &spec.name) {
                    Ok(Some(v)) => reply(StatusCode::OK, &v),
                    Ok(None) => err(StatusCode::NOT_FOUND, "no such node"),
                    Err(e) => internal(e),
                };
            }
            let why = if existing.deleting {
                "is being deleted"
            } else {
                "exists with a different spec"
            };
            return err(StatusCode::CONFLICT, format!("node {:?} {why}", spec.name));
        }
        Ok(None) => {}
        Err(e) => return internal(e),
    }
    if snap.site.node(&spec.name).is_some() {
        return err(
            StatusCode::CONFLICT,
            format!(
                "node {:?} is defined in the site file; it cannot be created through the API",
                spec.name
            ),
        );
    }
    let mut rows = match ctl.store.nodes() {
        Ok(r) => r,
        Err(e) => return internal(e),
    };
    let now = store::now_ms();
    let row = NodeRow {
        name: spec.name.clone(),
        spec: spec_json,
        provider: provider_json,
        created_at: now,
        deleting: false,
        phase: "Pending".into(),
        message: String::new(),
        updated_at: now,
    };
    rows.push(row.clone());
    // Validate exactly as every daemon will load it, before anything is stored.
    let text = Controller::overlay_text(&rows);
    let candidate = match site::load_with_overlay(&ctl.site_path, &text) {
        Ok(s) => s,
        Err(e) => {
            let problems: Vec<String> = e
                .problems
                .iter()
                .map(|p| {
                    if p.key.is_empty() {
                        p.reason.clone()
                    } else {
                        format!("{}: {}", p.key, p.reason)
                    }
                })
                .collect();
            return reply(
                StatusCode::UNPROCESSABLE_ENTITY,
                &json!({ "error": "invalid node", "problems": problems }),
            );
        }
    };
    if let (Some(p), Some(node)) = (&provider, candidate.node(&spec.name)) {
        // A provider's user data limit: refuse now, not after the machine is half made.
        let snap2 = Snapshot {
            site: Arc::new(candidate.clone()),
            revoked: snap.revoked.clone(),
        };
        let pointer = bootd::http::pointer_for(&ctl.app, &snap2, node).to_string();
        if let Err(e) = (p.registration.check_userdata)(&pointer) {
            return reply(
                StatusCode::UNPROCESSABLE_ENTITY,
                &json!({ "error": "invalid node", "problems": [e] }),
            );
        }
    }
    match ctl.store.insert_node(&row) {
        Ok(true) => {}
        Ok(false) => return err(StatusCode::CONFLICT, format!("node {:?} exists", spec.name)),
        Err(e) => return internal(e),
    }
    // The candidate is the site with exactly these rows: served as validated.
    if let Err(e) = ctl.write_and_serve(&text, candidate) {
        // Stored: the loop and the next start retry the export.
        error!(node = %spec.name, error = %e, "node stored but the overlay was not written");
    }
    ctl.note(&spec.name, events::API, "created through the API");
    info!(node = %spec.name, provider = %row.provider.as_object().and_then(|o| o.keys().next().cloned()).unwrap_or_else(|| "none".into()), "node created");
    ctl.ensure_loop(&spec.name);
    let snap = ctl.app.live.load_full();
    match node_view(ctl, &snap, &spec.name) {
        Ok(Some(v)) => reply(StatusCode::CREATED, &v),
        Ok(None) => err(StatusCode::NOT_FOUND, "no such node"),
        Err(e) => internal(e),
    }
}

async fn delete_node(ctl: &Arc<Controller>, _: auth::Caller, name: &str) -> Response<Body> {
    let _w = ctl.writes.lock().await;
    let snap = ctl.app.live.load_full();
    let row = match ctl.store.node(name) {
        Ok(Some(r)) => r,
        Ok(None) if snap.site.node(name).is_some() => {
            return err(
                StatusCode::CONFLICT,
                format!("node {name:?} is defined in the site file; remove it there"),
            );
        }
        Ok(None) => return err(StatusCode::NOT_FOUND, "no such node"),
        Err(e) => return internal(e),
    };
    if !row.deleting {
        if let Err(e) = ctl.store.mark_deleting(name) {
            return internal(e);
        }
        match ctl.store.nodes() {
            Ok(rows) => {
                if let Err(e) = ctl.export_overlay_now(&rows) {
                    error!(node = %name, error = %e, "node marked for deletion but the overlay was not written");
                }
            }
            Err(e) => return internal(e),
        }
        ctl.note(name, events::API, "deletion requested through the API");
        info!(node = %name, "node deletion requested");
    }
    ctl.ensure_loop(name);
    reply(
        StatusCode::ACCEPTED,
        &json!({ "name": name, "phase": "Deleting" }),
    )
}

fn cluster(ctl: &Arc<Controller>, _: auth::Caller) -> Response<Body> {
    let snap = ctl.app.live.load();
    match ctl.store.cluster("bootstrapComplete") {
        Ok(b) => reply(
            StatusCode::OK,
            &json!({
                "name": snap.site.cluster.name,
                "domain": snap.site.cluster.domain(),
                "bootstrapComplete": { "complete": b.is_some(), "time": b.map(|(_, at)| json!(rfc3339(at))).unwrap_or(Value::Null) },
            }),
        ),
        Err(e) => internal(e),
    }
}

fn bootstrap_complete(ctl: &Arc<Controller>, _: auth::Caller) -> Response<Body> {
    let at = match ctl.store.set_cluster_once("bootstrapComplete", "true") {
        Ok(at) => at,
        Err(e) => return internal(e),
    };
    let body = json!({ "complete": true, "time": rfc3339(at) });
    let path = ctl.bootstrap_file();
    if let Err(e) = bootd::state::write_atomic(&path, format!("{body}\n").as_bytes(), 0o644) {
        error!(path = %path.display(), error = %e, "bootstrap-complete not written to its file");
    }
    info!("cluster bootstrap recorded as complete");
    reply(StatusCode::OK, &body)
}
