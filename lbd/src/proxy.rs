//! The data path: accept (with limits and EMFILE backoff), pick a backend,
//! connect (a refused or timed-out connect is retried on another backend, as
//! HAProxy's `option redispatch`), then [`relay`](crate::relay). With
//! `limits.retryUnanswered`, a backend that resets or closes before its first
//! byte is replaced too, and the client's bytes so far (at most 16 KiB) are
//! sent again.
//!
//! A connection that cannot be served (no backend up, every backend refused,
//! a limit reached) is reset at once: the client sees an error straight
//! away instead of hanging.

use crate::balance::{pick, Candidate};
use crate::relay::{
    relay, replay, until_answered, Buffers, Counters, First, RelayError, Unanswered,
};
use crate::state::{App, Backend, ConnGuard, Frontend};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, warn};

const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Accepts until the frontend is stopped (reload, shutdown).
pub async fn accept_loop(listener: TcpListener, fe: Arc<Frontend>, app: Arc<App>) {
    let mut backoff = Duration::ZERO;
    loop {
        let (stream, peer) = tokio::select! {
            _ = fe.stop.cancelled() => return,
            r = listener.accept() => match r {
                Ok(x) => {
                    backoff = Duration::ZERO;
                    x
                }
                Err(e) => {
                    app.accept_errors.fetch_add(1, Relaxed);
                    if out_of_resources(&e) {
                        // The pending connection stays in the backlog: retrying
                        // at once would spin. Wait for descriptors to free up.
                        backoff = (backoff * 2).clamp(BACKOFF_MIN, BACKOFF_MAX);
                        warn!(frontend = %fe.name, error = %e, ?backoff, "accept failed: out of resources; backing off");
                        tokio::select! {
                            _ = fe.stop.cancelled() => return,
                            _ = tokio::time::sleep(backoff) => {}
                        }
                    } else {
                        debug!(frontend = %fe.name, error = %e, "accept failed");
                    }
                    continue;
                }
            },
        };
        fe.accepted.fetch_add(1, Relaxed);
        let Some(guard) = app.admit(peer.ip()) else {
            fe.refused_limit.fetch_add(1, Relaxed);
            debug!(frontend = %fe.name, %peer, "connection limit reached: refused");
            reset(stream);
            continue;
        };
        fe.note_client(peer.ip());
        app.tracker.spawn(serve(
            stream,
            peer,
            Arc::clone(&fe),
            Arc::clone(&app),
            guard,
        ));
    }
}

fn out_of_resources(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(code) if [rustix::io::Errno::MFILE, rustix::io::Errno::NFILE, rustix::io::Errno::NOBUFS, rustix::io::Errno::NOMEM].iter().any(|x| x.raw_os_error() == code))
}

/// Closes with RST: the client learns at once that nobody will answer.
fn reset(stream: TcpStream) {
    let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
}

/// `client` has TCP_NODELAY from its listener (see [`crate::state::App::apply`]).
async fn serve(
    mut client: TcpStream,
    peer: SocketAddr,
    fe: Arc<Frontend>,
    app: Arc<App>,
    _guard: ConnGuard,
) {
    let limits = app.limits.load_full();
    let mut tried = Vec::new();
    let Some((mut server, mut backend)) =
        connect_some(&fe, limits.connect_timeout, &mut tried).await
    else {
        reset(client);
        return;
    };
    let mut bufs = Buffers::new();
    let mut unanswered = limits
        .retries_unanswered(&fe.name)
        .then(Unanswered::default);
    let r = loop {
        backend.total.fetch_add(1, Relaxed);
        backend.active.fetch_add(1, Relaxed);
        let counters = Counters {
            to_backend: &backend.bytes_to,
            from_backend: &backend.bytes_from,
        };
        if let Some(u) = unanswered.as_mut() {
            let first = tokio::select! {
                biased;
                r = until_answered(&client, &server, &mut bufs, u, limits.idle_timeout, counters) => r,
                e = cut_off(&backend) => Err(e),
            };
            match first {
                Ok(First::Relay) => {}
                Err(e) => break Err(e),
                Ok(First::BackendFailed(e)) => {
                    backend.active.fetch_sub(1, Relaxed);
                    backend.unanswered_failures.fetch_add(1, Relaxed);
                    backend.kick.notify_one();
                    debug!(frontend = %fe.name, %peer, backend = %backend.name, error = %e, sent = u.len, "backend failed before answering: sending the client's bytes to another");
                    tried.push(backend.addr);
                    let Some((s, b)) = connect_some(&fe, limits.connect_timeout, &mut tried).await
                    else {
                        reset(client);
                        return;
                    };
                    (server, backend) = (s, b);
                    // A failed write shows again as the new backend failing
                    // before answering, on the next turn.
                    let _ = replay(&server, &bufs, u).await;
                    continue;
                }
            }
        }
        break tokio::select! {
            biased;
            r = relay(&mut client, &mut server, limits.idle_timeout, counters, bufs) => r,
            e = cut_off(&backend) => Err(e),
        };
    };
    backend.active.fetch_sub(1, Relaxed);
    if let Err(e) = r {
        debug!(frontend = %fe.name, %peer, backend = %backend.name, error = %e, "connection ended");
    }
}

/// Resolves when the backend's connections must end (drain deadline,
/// shutdown).
async fn cut_off(backend: &Backend) -> RelayError {
    backend.close_now.cancelled().await;
    RelayError::Io(io::Error::other("drain deadline reached or shutting down"))
}

/// Connects to a healthy backend not in `tried`, trying each at most once.
async fn connect_some(
    fe: &Frontend,
    timeout: Duration,
    tried: &mut Vec<SocketAddr>,
) -> Option<(TcpStream, Arc<Backend>)> {
    loop {
        let backend = {
            let pool = fe.pool.load();
            let view: Vec<Candidate> = pool
                .iter()
                .map(|b| Candidate {
                    eligible: b.eligible() && !tried.contains(&b.addr),
                    active: b.active.load(Relaxed),
                })
                .collect();
            match pick(&view, fe.balance(), fe.next_start()) {
                Some(i) => Arc::clone(&pool[i]),
                None => {
                    if tried.is_empty() {
                        fe.refused_no_backend.fetch_add(1, Relaxed);
                        debug!(frontend = %fe.name, "no backend up: connection refused");
                    } else {
                        warn!(frontend = %fe.name, tried = tried.len(), "every backend failed to connect: connection refused");
                    }
                    return None;
                }
            }
        };
        let err = match tokio::time::timeout(timeout, TcpStream::connect(backend.addr)).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Some((s, backend));
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no connection within {timeout:?}"),
        };
        backend.connect_failures.fetch_add(1, Relaxed);
        backend.kick.notify_one();
        debug!(frontend = %fe.name, backend = %backend.name, error = %err, "connect failed; trying another backend");
        tried.push(backend.addr);
    }
}
