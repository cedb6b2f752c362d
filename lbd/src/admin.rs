//! The admin HTTP listener. Every route is in [`route`]:
//!
//! | route | what |
//! |---|---|
//! | `GET /healthz` | `ok` |
//! | `GET /metrics` | Prometheus text |
//! | `GET /status` | frontends, backends, states and reasons, clients' first connections (JSON) |
//! | `POST /bootstrap/complete` | drain the bootstrap node and remove it from api and machine-config |
//!
//! Connections follow [`runtime::http1`] (head deadline 10 s, refused
//! framings); those closed on a bad or slow client are counted as
//! `lbd_admin_connections_closed_total{reason}`.
//!
//! No authentication: bind it to loopback or a management network
//! (`lb.adminListen`, default 127.0.0.1:8404). The one action that changes
//! anything, `POST /bootstrap/complete`, is refused to browsers (a request
//! with `Origin` or `Sec-Fetch-Site` other than `none`/`same-origin`), so a
//! web page open on the host cannot trigger it; lbd's own CLI and the
//! controller send neither.

use crate::state::BootstrapPhase;
use crate::status::{BackendStatus, ClientStatus, FrontendStatus, Status};
use crate::Lbd;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::net::TcpListener;
use tracing::{debug, info, warn};

/// The admin listener's caps: a scraper and an operator's CLI, not a crowd.
pub const ADMIN_CONNECTIONS: runtime::conns::ConnLimits = runtime::conns::ConnLimits {
    max: 64,
    per_source: 16,
};

pub async fn serve(listener: TcpListener, lbd: Arc<Lbd>, limits: runtime::http1::Limits) {
    let app = Arc::clone(&lbd.app);
    let conns = runtime::conns::Conns::new(ADMIN_CONNECTIONS);
    while let Some((stream, peer)) =
        runtime::net::accept(&listener, &app.shutdown, "lbd admin").await
    {
        // Over a cap: closed at once and counted.
        let Ok(held) = conns.take(peer.ip().to_canonical()) else {
            app.admin_refused.fetch_add(1, Relaxed);
            drop(stream);
            continue;
        };
        let lbd = Arc::clone(&lbd);
        let shutdown = app.shutdown.clone();
        app.tracker.spawn(async move {
            let _held = held;
            let l = Arc::clone(&lbd);
            let svc = service_fn(move |req| {
                let lbd = Arc::clone(&l);
                async move { Ok::<_, std::convert::Infallible>(route(&lbd, req, peer).await) }
            });
            let stop = shutdown.cancelled();
            let why = runtime::http1::serve(stream, svc, &limits, stop, shutdown.cancelled()).await;
            if let Some(why) = why {
                debug!(%peer, reason = why.as_str(), "admin connection closed");
                lbd.app.admin_closed[why.index()].fetch_add(1, Relaxed);
            }
        });
    }
}

fn reply(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(body.into()))
        .unwrap_or_default()
}

fn json(status: StatusCode, v: serde_json::Value) -> Response<Full<Bytes>> {
    let mut body = serde_json::to_vec_pretty(&v).unwrap_or_default();
    body.push(b'\n');
    reply(status, "application/json", body)
}

/// A request a browser made: it names its origin (`Origin`), or says it
/// was not typed by the user on this origin (`Sec-Fetch-Site`).
fn from_browser(h: &http::HeaderMap) -> bool {
    h.contains_key(http::header::ORIGIN)
        || h.get("sec-fetch-site")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v != "none" && v != "same-origin")
}

pub async fn route(
    lbd: &Arc<Lbd>,
    req: Request<Incoming>,
    peer: std::net::SocketAddr,
) -> Response<Full<Bytes>> {
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/healthz") => reply(StatusCode::OK, "text/plain", "ok\n"),
        (&Method::GET, "/metrics") => reply(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            crate::metrics::encode(&lbd.app),
        ),
        (&Method::GET, "/status") => json(
            StatusCode::OK,
            serde_json::to_value(status(lbd)).unwrap_or_default(),
        ),
        (&Method::POST, "/bootstrap/complete") if from_browser(req.headers()) => {
            warn!(%peer, "bootstrap completion refused: a browser's cross-site request");
            json(
                StatusCode::FORBIDDEN,
                serde_json::json!({"error": "refused to a browser: run `lbd bootstrap-complete` on the host, or complete bootstrap through the controller"}),
            )
        }
        (&Method::POST, "/bootstrap/complete") => {
            info!(%peer, "bootstrap completion requested over the admin API");
            match lbd.complete_bootstrap("admin API").await {
                Ok(BootstrapPhase::None) => json(
                    StatusCode::CONFLICT,
                    serde_json::json!({"error": "no bootstrap node in this configuration"}),
                ),
                Ok(phase) => json(StatusCode::OK, serde_json::json!({"bootstrap": phase})),
                Err(e) => json(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    serde_json::json!({"error": e.to_string()}),
                ),
            }
        }
        (_, "/healthz" | "/metrics" | "/status" | "/bootstrap/complete") => reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "method not allowed\n",
        ),
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "not found\n"),
    }
}

/// What `/status` and `lbd status` show.
pub fn status(lbd: &Lbd) -> Status {
    let app = &lbd.app;
    let now_ms = crate::state::unix_ms(runtime::clock::now());
    let frontends = app
        .frontends
        .load()
        .iter()
        .map(|f| {
            let mut all: Vec<_> = f.pool.load().iter().cloned().collect();
            all.extend(
                f.draining
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .iter()
                    .cloned(),
            );
            let backends = all
                .iter()
                .map(|b| BackendStatus {
                    name: b.name.to_string(),
                    addr: b.addr,
                    role: b.role.as_str().to_string(),
                    state: b.state_name().to_string(),
                    reason: b.reason(),
                    active: b.active.load(Relaxed),
                    connections: b.total.load(Relaxed),
                    connect_failures: b.connect_failures.load(Relaxed),
                    unanswered_failures: b.unanswered_failures.load(Relaxed),
                    bytes_to: b.bytes_to.load(Relaxed),
                    bytes_from: b.bytes_from.load(Relaxed),
                    check_latency_ms: b.check_latency().as_secs_f64() * 1e3,
                    up_since_ms: b
                        .up_since()
                        .map(|t| now_ms.saturating_sub(t.elapsed().as_millis() as u64)),
                })
                .collect();
            let mut clients: Vec<_> = f
                .clients
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .map(|(ip, ms)| (*ip, *ms))
                .collect();
            clients.sort();
            FrontendStatus {
                name: f.name.to_string(),
                listen: f.local,
                balance: format!("{:?}", f.balance()),
                backends,
                clients: clients
                    .into_iter()
                    .map(|(ip, first_ms)| ClientStatus { ip, first_ms })
                    .collect(),
            }
        })
        .collect();
    Status {
        bootstrap: app.bootstrap_phase(),
        connections: app.conns.load(Relaxed),
        frontends,
    }
}
