//! The HTTP(S) listeners: accept (within the connection caps), a TLS
//! handshake for HTTPS, then [`crate::plain`] for plain HTTP or hyper.

use crate::{conns, http, metrics, plain, App};
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub(crate) async fn accept_loop(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    conns: Arc<conns::Conns>,
    app: Arc<App>,
    shutdown: CancellationToken,
    conn_stop: CancellationToken,
    tracker: TaskTracker,
) {
    while let Some((stream, peer)) = runtime::net::accept(&listener, &shutdown, "HTTP").await {
        let held = match conns.take(peer.ip().to_canonical()) {
            Ok(h) => h,
            Err(why) => {
                app.metrics
                    .http_refused
                    .get_or_create(&metrics::Reason {
                        reason: why.as_str(),
                    })
                    .inc();
                tracing::debug!(%peer, reason = why.as_str(), "HTTP connection refused: over its cap");
                // Closed with a reset: nothing is queued for it.
                let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
                drop(stream);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let app = Arc::clone(&app);
        let (shutdown, conn_stop) = (shutdown.clone(), conn_stop.clone());
        match tls.clone() {
            None => {
                tracker.spawn(async move {
                    let _held = held;
                    plain::serve(stream, peer, app, shutdown, conn_stop).await
                });
            }
            Some(acceptor) => {
                tracker.spawn(async move {
                    let _held = held;
                    match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream))
                        .await
                    {
                        Ok(Ok(s)) => serve_conn(s, peer, app, shutdown, conn_stop).await,
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        }
    }
}

/// One connection served by hyper: every HTTPS connection, and plain-HTTP
/// ones [`plain`] hands over.
pub(crate) async fn serve_conn<I>(
    io: I,
    peer: SocketAddr,
    app: Arc<App>,
    shutdown: CancellationToken,
    conn_stop: CancellationToken,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let svc = service_fn(move |req| http::handle(Arc::clone(&app), req, peer));
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .keep_alive(true)
        .header_read_timeout(Duration::from_secs(30))
        .serve_connection(TokioIo::new(io), svc);
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => { if let Err(e) = r { tracing::debug!(%peer, error = %e, "connection ended with an error"); } return; }
        _ = shutdown.cancelled() => conn.as_mut().graceful_shutdown(),
    }
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = conn_stop.cancelled() => {}
    }
}
