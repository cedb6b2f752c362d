//! DNS over TCP (RFC 7766): length-prefixed messages, pipelined (requests
//! are read and answered in order while more arrive; responses are flushed
//! when no further request is already buffered), an idle timeout (also for
//! writes: a client that reads no answers is closed), caps on concurrent
//! connections in all and per source address, and zone transfers.

use crate::core::{Action, Transport};
use crate::forward::Forwarder;
use crate::metrics::Outcome;
use crate::Live;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

pub struct Tcp {
    pub live: Arc<Live>,
    pub forwarder: Arc<Forwarder>,
    pub idle: Duration,
    pub conns: Arc<runtime::conns::Conns>,
}

impl Tcp {
    pub async fn accept_loop(self, l: TcpListener, stop: CancellationToken, tracker: TaskTracker) {
        let this = Arc::new(self);
        while let Some((stream, peer)) = runtime::net::accept(&l, &stop, "DNS over TCP").await {
            // Over a cap (all, or this source's): close at once (the client
            // retries or uses UDP).
            let permit = match this.conns.take(peer.ip().to_canonical()) {
                Ok(p) => p,
                Err(why) => {
                    this.live
                        .metrics
                        .tcp_refused
                        .get_or_create(&Outcome {
                            result: why.as_str(),
                        })
                        .inc();
                    debug!(%peer, reason = why.as_str(), "TCP connection refused: over its cap");
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let (this, stop) = (Arc::clone(&this), stop.clone());
            tracker.spawn(async move {
                this.live.metrics.tcp_connections.inc();
                if let Err(e) = this.serve(stream, peer, stop).await {
                    debug!(%peer, error = %e, "TCP connection ended with an error");
                }
                this.live.metrics.tcp_connections.dec();
                drop(permit);
            });
        }
    }

    async fn serve(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        stop: CancellationToken,
    ) -> std::io::Result<()> {
        let (r, w) = stream.into_split();
        let mut r = BufReader::with_capacity(16 * 1024, r);
        let mut w = BufWriter::with_capacity(16 * 1024, w);
        let mut msg = vec![0u8; 65535];
        let mut out = Vec::with_capacity(4096);
        loop {
            let len = tokio::select! {
                _ = stop.cancelled() => return Ok(()),
                l = tokio::time::timeout(self.idle, r.read_u16()) => match l {
                    Err(_) => return Ok(()), // idle
                    Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                    Ok(l) => l? as usize,
                },
            };
            // A started message must arrive within the idle timeout too.
            match tokio::time::timeout(self.idle, r.read_exact(&mut msg[..len])).await {
                Ok(res) => {
                    res?;
                }
                Err(_) => return Ok(()),
            }
            let q = &msg[..len];
            let catalog = self.live.catalog.load_full();
            match catalog.answer(q, Transport::Tcp, peer.ip(), &mut out) {
                Action::Reply { rcode, .. } => {
                    self.live.metrics.answered("tcp", rcode);
                    in_time(self.idle, write_msg(&mut w, &out)).await?;
                    if rcode == crate::codec::RCODE_REFUSED {
                        self.note_refused_transfer(q, peer);
                    }
                }
                Action::Drop => return Ok(()),
                Action::Transfer { zone, ixfr_serial } => {
                    let z = &catalog.zones[zone];
                    let msgs = crate::xfr::transfer(z, q, ixfr_serial);
                    let kind = if ixfr_serial.is_some() && msgs.len() == 1 {
                        "ixfr_current"
                    } else {
                        "axfr"
                    };
                    self.live
                        .metrics
                        .transfers
                        .get_or_create(&Outcome { result: kind })
                        .inc();
                    info!(%peer, zone = %z.origin, serial = z.serial(), kind, messages = msgs.len(), "zone transfer");
                    for m in msgs {
                        in_time(self.idle, write_msg(&mut w, &m)).await?;
                    }
                }
                Action::Forward => {
                    let resp = self.forwarder.forward(q, true, peer.ip()).await;
                    self.live
                        .metrics
                        .forwarded
                        .get_or_create(&Outcome {
                            result: if resp.is_some() { "ok" } else { "failed" },
                        })
                        .inc();
                    let resp = resp.unwrap_or_else(|| crate::codec::servfail(q));
                    in_time(self.idle, write_msg(&mut w, &resp)).await?;
                }
            }
            // Pipelining: answer everything already received before flushing.
            if r.buffer().len() < 2 {
                in_time(self.idle, w.flush()).await?;
            }
        }
    }

    fn note_refused_transfer(&self, q: &[u8], peer: SocketAddr) {
        let mut lower = [0u8; crate::codec::MAX_NAME];
        if let Ok(req) = crate::codec::parse(q, &mut lower) {
            if matches!(req.qtype, crate::codec::TYPE_AXFR | crate::codec::TYPE_IXFR) {
                self.live
                    .metrics
                    .transfers
                    .get_or_create(&Outcome { result: "refused" })
                    .inc();
                warn!(%peer, "zone transfer refused (not in dns.allowTransfer)");
            }
        }
    }
}

async fn write_msg<W: AsyncWriteExt + Unpin>(w: &mut W, m: &[u8]) -> std::io::Result<()> {
    w.write_all(&(m.len() as u16).to_be_bytes()).await?;
    w.write_all(m).await
}

/// `f` within `limit`: a client that does not read its answers (its
/// window stays shut) gives up its connection instead of holding it.
async fn in_time<T>(
    limit: Duration,
    f: impl std::future::Future<Output = std::io::Result<T>>,
) -> std::io::Result<T> {
    tokio::time::timeout(limit, f)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "the client read nothing"))?
}
