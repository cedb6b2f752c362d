//! Socket helpers every daemon's data path shares (feature `daemon`).

use std::io;
use tokio::io::Interest;
use tokio::net::TcpStream;

/// A listener that could not be bound: which one (the site key and the
/// address, e.g. "dns.listen 10.0.0.1:53 (UDP)"), and why. dnsd's and
/// lbd's `Sockets::bind` return it.
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
pub struct BindError {
    pub what: String,
    #[source]
    pub source: io::Error,
}

/// The accept queue a listener asks for. The kernel caps it at
/// `net.core.somaxconn` (4 096 by default since Linux 5.4); tokio's `bind`
/// asks for 1 024, which a rack powering on overflows: the SYNs beyond it
/// are dropped and the machines send them again a second later.
pub const LISTEN_BACKLOG: u32 = 4096;

/// A TCP listener on `addr` as tokio's `TcpListener::bind` makes it
/// (`SO_REUSEADDR`, dual-stack on `[::]` where the host allows), with an
/// accept queue of [`LISTEN_BACKLOG`].
pub fn listen_tcp(addr: std::net::SocketAddr) -> io::Result<tokio::net::TcpListener> {
    let socket = match addr {
        std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// One `recv` into `buf` once `stream` is readable; `Ok(0)` is EOF.
///
/// A short read took all the socket had, so it also marks the socket not
/// readable: the next call waits for epoll instead of spending a `recv` on
/// learning EAGAIN (HAProxy treats short reads the same way). Request and
/// response traffic (bootd's plain HTTP, lbd's relay) saves one syscall per
/// message. The mark is made by tokio's `try_io` with the readiness it saw
/// *before* the `recv`: tokio clears readiness only if no new event arrived
/// since, so data that lands after the `recv` still wakes the next call.
pub async fn read_some(stream: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        stream.readable().await?;
        if let Some(n) = try_read_some(stream, buf)? {
            return Ok(n);
        }
    }
}

/// [`read_some`]'s `recv`, once `stream` was found readable: `None` when
/// it had nothing after all (wait for readiness again). Not async, so a
/// caller can read into a buffer on its stack and keep only the bytes
/// (bootd's connections waiting for a response hold no read buffer).
pub fn try_read_some(stream: &TcpStream, buf: &mut [u8]) -> io::Result<Option<usize>> {
    let cap = buf.len();
    let mut got = 0;
    let r = stream.try_io(Interest::READABLE, || {
        let (n, _) = rustix::net::recv(stream, &mut *buf, rustix::net::RecvFlags::empty())?;
        got = n;
        if n > 0 && n < cap {
            Err(io::ErrorKind::WouldBlock.into())
        } else {
            Ok(n)
        }
    });
    match r {
        Ok(n) => Ok(Some(n)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock && got > 0 => Ok(Some(got)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

/// The next connection on `listener`, or `None` once `stop` is cancelled:
/// the accept loop every listener of every daemon shares. An accept error
/// (EMFILE and friends: the pending connection stays in the backlog, so
/// retrying at once would spin) is logged and retried after 100 ms.
pub async fn accept(
    listener: &tokio::net::TcpListener,
    stop: &tokio_util::sync::CancellationToken,
    what: &str,
) -> Option<(TcpStream, std::net::SocketAddr)> {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return None,
            r = listener.accept() => match r {
                Ok(x) => return Some(x),
                Err(e) => {
                    tracing::warn!(error = %e, listener = what, "accept failed; backing off 100 ms");
                    tokio::select! {
                        _ = stop.cancelled() => return None,
                        _ = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
                    }
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// The listener's accept queue holds LISTEN_BACKLOG connections (the
    /// kernel's cap allowing): 2 000 connections made while nothing
    /// accepts all complete their handshake (tokio's bind: 1 024 + 1).
    #[tokio::test]
    async fn a_listener_queues_more_than_tokios_default() {
        let cap: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        if cap < 2048 {
            eprintln!("skipped: net.core.somaxconn {cap} < 2048");
            return;
        }
        let l = listen_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = l.local_addr().unwrap();
        let mut held = Vec::new();
        for i in 0..2000 {
            let c =
                tokio::time::timeout(std::time::Duration::from_secs(2), TcpStream::connect(addr))
                    .await;
            match c {
                Ok(Ok(s)) => held.push(s),
                other => panic!("connection {i} not completed with nothing accepting: {other:?}"),
            }
        }
        // Each is in the queue, accepted in turn.
        for _ in 0..2000 {
            l.accept().await.unwrap();
        }
    }

    /// Short reads, data arriving after one, a full buffer, then EOF: every
    /// byte arrives and nothing waits forever.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn short_reads_lose_no_wakeup() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let writer = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            for i in 0..2000u32 {
                s.write_all(&i.to_be_bytes()).await.unwrap();
                if i % 7 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            s.write_all(&[7u8; 10_000]).await.unwrap();
        });
        let c = TcpStream::connect(addr).await.unwrap();
        let mut buf = [0u8; 4096];
        let mut got = Vec::new();
        loop {
            let n =
                tokio::time::timeout(std::time::Duration::from_secs(10), read_some(&c, &mut buf))
                    .await
                    .expect("no lost wakeup")
                    .unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        writer.await.unwrap();
        assert_eq!(got.len(), 8000 + 10_000);
        for (i, w) in got[..8000].chunks(4).enumerate() {
            assert_eq!(u32::from_be_bytes(w.try_into().unwrap()), i as u32);
        }
    }
}
