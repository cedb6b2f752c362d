//! The HTTP(S) listeners: accept (within the connection caps), a TLS
//! handshake for HTTPS, then [`crate::fast_get`] for plain HTTP or hyper
//! (with the limits and checks of [`runtime::http1`]); connections closed
//! on a bad or slow client are counted
//! (`bootd_http_connections_closed_total{reason}`).

use crate::{conns, fast_get, http, metrics, App};
use bytes::{Buf, Bytes};
use hyper::service::service_fn;
use runtime::http1::Closed;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
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
                    fast_get::serve(stream, peer, app, shutdown, conn_stop, &held).await
                });
            }
            Some(acceptor) => {
                tracker.spawn(async move {
                    let held = held;
                    let limit = app.http_limits.handshake_timeout;
                    let deadline = tokio::time::Instant::now() + limit;
                    // Until its first byte, the connection may be evicted.
                    held.set_idle(true);
                    tokio::select! {
                        _ = stream.readable() => held.set_idle(false),
                        _ = held.evicted() => return count_closed(&app, Some(Closed::Evicted)),
                        _ = tokio::time::sleep_until(deadline) => {}
                    }
                    let accept = tokio::time::timeout_at(deadline, acceptor.accept(stream));
                    let why = match accept.await {
                        Ok(Ok(s)) => return serve_conn(s, peer, app, shutdown, conn_stop).await,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            Closed::HandshakeFailed
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            Closed::HandshakeTimeout
                        }
                    };
                    count_closed(&app, Some(why));
                });
            }
        }
    }
}

/// One connection served by hyper (behind [`runtime::http1::Guard`]):
/// every HTTPS connection, and plain-HTTP ones [`fast_get`] hands over.
pub(crate) async fn serve_conn<I>(
    io: I,
    peer: SocketAddr,
    app: Arc<App>,
    shutdown: CancellationToken,
    conn_stop: CancellationToken,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = app.http_limits;
    let a = Arc::clone(&app);
    let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let a = Arc::clone(&a);
        async move {
            // The agent's reports: the one route with a request body.
            let path = req.uri().path();
            if req.method() == hyper::Method::POST
                && (path.starts_with("/inventory/") || path == "/discover/inventory")
            {
                return Ok::<_, std::convert::Infallible>(http::post_report(a, req, peer).await);
            }
            http::handle(a, req, peer).await
        }
    });
    let why = runtime::http1::serve(
        io,
        svc,
        &limits,
        shutdown.cancelled(),
        conn_stop.cancelled(),
    )
    .await;
    if let Some(why) = why {
        tracing::debug!(%peer, reason = why.as_str(), "HTTP connection closed");
    }
    count_closed(&app, why);
}

/// Counts a connection closed on a bad or slow client.
pub(crate) fn count_closed(app: &App, why: Option<Closed>) {
    if let Some(why) = why {
        app.metrics
            .http_closed
            .get_or_create(&metrics::Reason {
                reason: why.as_str(),
            })
            .inc();
    }
}

/// A connection handed to hyper: the bytes already read come first.
pub(crate) struct Prefixed {
    pub(crate) prefix: Bytes,
    pub(crate) io: TcpStream,
}

impl AsyncRead for Prefixed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(out.remaining());
            out.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, out)
    }
}

impl AsyncWrite for Prefixed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
