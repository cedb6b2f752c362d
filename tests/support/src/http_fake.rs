//! The accept loop every HTTP fake in the tests runs: HTTP/1.1 on a fresh
//! port of 127.0.0.1, over TLS when given a server configuration, one task
//! per connection, each request handed to the fake's own handler. The fake
//! keeps only what it answers.

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

/// A fake's reply to one request.
pub type Reply = Response<Full<Bytes>>;

/// Serves whatever `body` makes at the time of each request (a stand-in
/// for a status endpoint: lbd's admin `GET /status`), on 127.0.0.1.
pub async fn serve_body<F>(body: F) -> SocketAddr
where
    F: Fn() -> Vec<u8> + Send + Sync + 'static,
{
    let body = Arc::new(body);
    serve(None, move |_req| {
        let bytes = Bytes::from(body());
        async move { Some(Response::new(Full::new(bytes))) }
    })
    .await
}

/// Serves `handle` on 127.0.0.1 (a port of the kernel's choosing), over TLS
/// when `tls` is given, for as long as the runtime runs; returns the
/// address. A request `handle` answers `None` to has its connection dropped
/// unanswered (as by a BMC that crashes mid-request).
pub async fn serve<F, Fut>(tls: Option<Arc<rustls::ServerConfig>>, handle: F) -> SocketAddr
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Option<Reply>> + Send + 'static,
{
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            let handle = handle.clone();
            let tls = tls.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let reply = handle(req);
                    async move { reply.await.ok_or_else(|| std::io::Error::other("dropped")) }
                });
                let b = hyper::server::conn::http1::Builder::new();
                match tls {
                    Some(cfg) => {
                        if let Ok(s) = tokio_rustls::TlsAcceptor::from(cfg).accept(s).await {
                            let _ = b
                                .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                                .await;
                        }
                    }
                    None => {
                        let _ = b
                            .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                            .await;
                    }
                }
            });
        }
    });
    addr
}
