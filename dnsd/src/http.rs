//! The small HTTP listener: `/metrics` (Prometheus text) and `/healthz`
//! (200 with the served serials once zones are loaded). Every route is in
//! [`route`]. Connections follow [`runtime::http1`] (head deadline 10 s,
//! refused framings); those closed on a bad or slow client are counted as
//! `dnsd_http_connections_closed_total{reason}`.

use crate::Live;
use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use std::convert::Infallible;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The metrics listener's caps: a scraper, not a crowd.
pub const HTTP_CONNECTIONS: runtime::conns::ConnLimits = runtime::conns::ConnLimits {
    max: 64,
    per_source: 16,
};

pub async fn serve(
    l: TcpListener,
    live: Arc<Live>,
    stop: CancellationToken,
    limits: runtime::http1::Limits,
) {
    let conns = runtime::conns::Conns::new(HTTP_CONNECTIONS);
    while let Some((stream, peer)) = runtime::net::accept(&l, &stop, "dnsd HTTP").await {
        // Over a cap: closed at once and counted.
        let held = match conns.take(peer.ip().to_canonical()) {
            Ok(h) => h,
            Err(why) => {
                let result = match why {
                    runtime::conns::Refused::Full => "http_max_connections",
                    runtime::conns::Refused::Source => "http_per_source",
                };
                live.metrics
                    .tcp_refused
                    .get_or_create(&crate::metrics::Outcome { result })
                    .inc();
                drop(stream);
                continue;
            }
        };
        let live = Arc::clone(&live);
        let stop = stop.clone();
        tokio::spawn(async move {
            let _held = held;
            let l = Arc::clone(&live);
            let svc = service_fn(move |req| {
                let live = Arc::clone(&l);
                async move { Ok::<_, Infallible>(route(&live, &req)) }
            });
            let why =
                runtime::http1::serve(stream, svc, &limits, stop.cancelled(), stop.cancelled())
                    .await;
            if let Some(why) = why {
                tracing::debug!(%peer, reason = why.as_str(), "HTTP connection closed");
                live.metrics
                    .http_closed
                    .get_or_create(&crate::metrics::Reason {
                        reason: why.as_str(),
                    })
                    .inc();
            }
        });
    }
}

pub fn route<B>(live: &Live, req: &Request<B>) -> Response<Full<Bytes>> {
    let text = |status: StatusCode, ctype: &'static str, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static(ctype),
        );
        r
    };
    if req.method() != hyper::Method::GET && req.method() != hyper::Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET only\n".into(),
        );
    }
    match req.uri().path() {
        "/metrics" => text(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            live.metrics.encode(),
        ),
        "/healthz" => {
            let c = live.catalog.load();
            let zones: Vec<String> = c
                .zones
                .iter()
                .map(|z| format!("{} {}", z.origin, z.serial()))
                .collect();
            text(
                StatusCode::OK,
                "text/plain",
                format!("ok\n{}\n", zones.join("\n")),
            )
        }
        _ => text(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}
