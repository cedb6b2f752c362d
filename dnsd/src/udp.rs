//! UDP: one blocking thread per SO_REUSEPORT socket. Each turn receives a
//! batch with `recvmmsg` (waiting for the first datagram only), answers
//! every datagram from one catalog snapshot into per-slot buffers that are
//! reused for the life of the thread, applies response rate limiting, and
//! sends the batch with `sendmmsg`. No allocation per query; the iovec
//! arrays are rebuilt per batch. Counts go to the shared metrics every
//! 250 ms (and when idle), not per batch.
//!
//! Queries for names outside the zones (with upstreams configured) are
//! handed to [`forward_loop`], which answers from a tokio task.

use crate::core::{Action, Transport};
use crate::forward::Forwarder;
use crate::rrl::{Limit, Rrl, Verdict};
use crate::Live;
use nix::sys::socket::{recvmmsg, sendmmsg, MsgFlags, MultiHeaders, SockaddrLike, SockaddrStorage};
use std::io::{IoSlice, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

const BATCH: usize = 64;
/// Counts reach the shared metrics at most this often (and when idle).
const FLUSH_EVERY: Duration = Duration::from_millis(250);
/// Larger datagrams are not queries dnsd answers (and are cut off).
const MAX_QUERY: usize = 4096;

/// A query handed to the forwarder.
#[derive(Debug)]
pub struct Forwarded {
    pub query: Vec<u8>,
    pub peer: SocketAddr,
    pub reply: Arc<std::net::UdpSocket>,
}

pub struct Worker {
    pub sock: std::net::UdpSocket,
    pub live: Arc<Live>,
    pub stop: CancellationToken,
    pub forward: tokio::sync::mpsc::Sender<Forwarded>,
    /// The same socket (a blocking duplicate), for the forwarder's replies.
    pub reply: Arc<std::net::UdpSocket>,
    pub limit: Limit,
}

fn ip_of(a: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::new(IpAddr::V4(v4.ip()), v4.port()));
    }
    a.as_sockaddr_in6()
        .map(|v6| SocketAddr::new(IpAddr::V6(v6.ip()), v6.port()))
}

impl Worker {
    pub fn run(self) {
        // The timeout only bounds how long a stop request waits.
        if let Err(e) = self.sock.set_read_timeout(Some(Duration::from_millis(200))) {
            warn!(error = %e, "UDP socket timeout not set");
        }
        let fd = self.sock.as_raw_fd();
        let mut bufs = vec![[0u8; MAX_QUERY]; BATCH];
        let mut outs: Vec<Vec<u8>> = (0..BATCH)
            .map(|_| Vec::with_capacity(crate::core::MAX_UDP as usize))
            .collect();
        let mut rhdr = MultiHeaders::<SockaddrStorage>::preallocate(BATCH, None);
        let mut shdr = MultiHeaders::<SockaddrStorage>::preallocate(BATCH, None);
        let mut got: [(usize, Option<SockaddrStorage>); BATCH] = [(0, None); BATCH];
        let mut send: Vec<usize> = Vec::with_capacity(BATCH);
        let mut addrs: Vec<Option<SockaddrStorage>> = Vec::with_capacity(BATCH);
        let mut rrl = Rrl::new(self.limit);
        let m = &self.live.metrics;
        let mut counts = crate::metrics::Local::default();
        let mut flushed = Instant::now();
        while !self.stop.is_cancelled() {
            let n = {
                let mut iovs: Vec<[IoSliceMut<'_>; 1]> = bufs
                    .iter_mut()
                    .map(|b| [IoSliceMut::new(&mut b[..])])
                    .collect();
                match recvmmsg(
                    fd,
                    &mut rhdr,
                    iovs.iter_mut(),
                    MsgFlags::MSG_WAITFORONE,
                    None,
                ) {
                    Ok(res) => {
                        let mut n = 0;
                        for r in res {
                            let truncated = r.flags.contains(MsgFlags::MSG_TRUNC);
                            got[n] = (if truncated { 0 } else { r.bytes }, r.address);
                            n += 1;
                        }
                        n
                    }
                    Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => 0,
                    Err(e) => {
                        warn!(error = %e, "UDP receive failed");
                        std::thread::sleep(Duration::from_millis(10));
                        0
                    }
                }
            };
            if n == 0 {
                counts.flush(m);
                continue;
            }
            let catalog = self.live.catalog.load();
            let now = Instant::now();
            send.clear();
            addrs.clear();
            for i in 0..n {
                let (len, addr) = got[i];
                let Some(peer) = addr.as_ref().and_then(ip_of) else {
                    continue;
                };
                if len == 0 {
                    counts.dropped += 1;
                    continue;
                }
                let pkt = &bufs[i][..len];
                match catalog.answer(pkt, Transport::Udp, peer.ip(), &mut outs[i]) {
                    Action::Reply { rcode, truncated } => {
                        match rrl.check(peer.ip(), now) {
                            Verdict::Send => {}
                            Verdict::Slip => {
                                crate::codec::truncate_to_question(&mut outs[i]);
                                counts.rrl_slipped += 1;
                            }
                            Verdict::Drop => {
                                counts.rrl_dropped += 1;
                                continue;
                            }
                        }
                        counts.answered(rcode, truncated);
                        send.push(i);
                        addrs.push(addr);
                    }
                    Action::Drop => counts.dropped += 1,
                    Action::Forward => {
                        let f = Forwarded {
                            query: pkt.to_vec(),
                            peer,
                            reply: Arc::clone(&self.reply),
                        };
                        if self.forward.try_send(f).is_err() {
                            counts.dropped += 1;
                        }
                    }
                    // answer() only asks for transfers over TCP
                    Action::Transfer { .. } => counts.dropped += 1,
                }
            }
            drop(catalog);
            let mut from = 0;
            while from < send.len() {
                let slices: Vec<[IoSlice<'_>; 1]> = send[from..]
                    .iter()
                    .map(|&i| [IoSlice::new(&outs[i])])
                    .collect();
                match sendmmsg(
                    fd,
                    &mut shdr,
                    slices.iter(),
                    &addrs[from..],
                    [],
                    MsgFlags::empty(),
                ) {
                    Ok(res) => {
                        let sent = res.count();
                        if sent == 0 {
                            break;
                        }
                        from += sent;
                    }
                    Err(nix::errno::Errno::EINTR) => {}
                    Err(e) => {
                        // One bad destination must not stop the rest.
                        debug!(error = %e, to = ?addrs[from].as_ref().map(|a| a.family()), "UDP send failed");
                        counts.send_errors += 1;
                        from += 1;
                    }
                }
            }
            if now.duration_since(flushed) >= FLUSH_EVERY {
                counts.flush(m);
                flushed = now;
            }
        }
        counts.flush(m);
    }
}

/// Answers forwarded queries: one task each, replies sent from the socket
/// the query came in on.
pub async fn forward_loop(
    mut rx: tokio::sync::mpsc::Receiver<Forwarded>,
    fwd: Arc<Forwarder>,
    live: Arc<Live>,
    stop: CancellationToken,
) {
    loop {
        let f = tokio::select! {
            _ = stop.cancelled() => return,
            f = rx.recv() => match f { Some(f) => f, None => return },
        };
        let (fwd, live) = (Arc::clone(&fwd), Arc::clone(&live));
        tokio::spawn(async move {
            let out = fwd.forward(&f.query, false, f.peer.ip()).await;
            live.metrics
                .forwarded
                .get_or_create(&crate::metrics::Outcome {
                    result: if out.is_some() { "ok" } else { "failed" },
                })
                .inc();
            let reply = out.unwrap_or_else(|| crate::codec::servfail(&f.query));
            if !reply.is_empty() {
                // A blocking socket: one datagram, off the runtime's threads.
                let _ = tokio::task::spawn_blocking(move || f.reply.send_to(&reply, f.peer)).await;
            }
        });
    }
}
