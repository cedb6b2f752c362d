//! The request loop and the transfers.
//!
//! The request socket only parses, refuses or hands off: each accepted RRQ
//! gets its own socket (an ephemeral port on the address the request came
//! to, connected to the client), so a slow client never holds up another
//! one, and the kernel keeps other senders out of a transfer.
//!
//! A transfer runs on a blocking thread of tokio's pool (at most
//! `max_transfers` of them), in blocking `send`/`recv` with `SO_RCVTIMEO`,
//! as tftpd-hpa's process per transfer does. A lock-step transfer is one
//! round trip per block, so its speed is the per-block latency: a thread
//! asleep in `recv` is woken by the ACK directly, where a task needs
//! epoll, a waker and the scheduler (measured: 0.88x tftpd-hpa as a task,
//! docs/performance.md). The thread checks its cancellation token at
//! least every [`CANCEL_POLL`]: transfers are cancelled at shutdown without
//! grace (a boot client just asks again) and when the same client port
//! sends a new RRQ.

use super::metrics::{Outcome, TftpMetrics};
use super::packet::{self, ErrorCode, Escaped, Negotiated, Packet, ParseError};
use super::source::{ReadAhead, Resolved, Source};
use super::udp::{self, Datagram, Listener};
use super::window::{Step, Window};
use super::Resolver;
use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, info_span, warn, Instrument};

mod config;
mod queue;
mod slot;
mod throttle;
use config::UNPROVEN_RETRIES;
pub use config::{Observer, Report, TftpConfig, QUEUE_WAIT};
use slot::{Slot, SlotGuard};

use config::{CANCEL_POLL, RECV_BUF};

struct Shared {
    config: TftpConfig,
    resolver: Resolver,
    metrics: Arc<TftpMetrics>,
    listener: Listener,
    /// Running transfers by client address. A std mutex: it is held for one
    /// map operation, never across an await.
    transfers: Mutex<HashMap<SocketAddr, Slot>>,
    /// One permit per transfer that may run (`max_transfers`); fair, so a
    /// new request queues behind those waiting.
    slots: Arc<tokio::sync::Semaphore>,
    /// Clients whose request waits for a slot, and when they sent it (a
    /// retransmission of it is dropped: the waiting request answers it).
    waiting: Mutex<HashMap<SocketAddr, queue::Heard>>,
    /// Requests dropped on a full queue, logged one line a second at most
    /// (a rack beyond the queue sends thousands).
    full_logged: throttle::Throttle,
    shutdown: CancellationToken,
}

/// Serves TFTP on `socket` (bound to port 69, or port 0 in tests; to one
/// address, or the wildcard with answers from the address each request
/// came to) until `shutdown` is cancelled, then stops every transfer.
/// Fails only if the socket cannot be set up.
pub async fn run(
    config: TftpConfig,
    socket: tokio::net::UdpSocket,
    resolver: Resolver,
    metrics: Arc<TftpMetrics>,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let listener = Listener::new(socket)?;
    info!(addr = %listener.local_addr()?, max_blksize = config.max_blksize, max_windowsize = config.max_windowsize,
        max_transfers = config.max_transfers, "tftp listening");
    let slots = Arc::new(tokio::sync::Semaphore::new(config.max_transfers.max(1)));
    let shared = Arc::new(Shared {
        config,
        resolver,
        metrics,
        listener,
        transfers: Mutex::new(HashMap::new()),
        slots,
        waiting: Mutex::new(Default::default()),
        full_logged: throttle::Throttle::default(),
        shutdown: shutdown.clone(),
    });
    let tracker = TaskTracker::new();
    let mut buf = vec![0u8; RECV_BUF];
    let mut cmsg = udp::cmsg_buffer();
    let mut next_id = 0u64;
    loop {
        let received = tokio::select! {
            _ = shutdown.cancelled() => break,
            r = shared.listener.recv(&mut buf, &mut cmsg) => r,
        };
        match received {
            Ok(d) => {
                next_id += 1;
                on_datagram(&shared, &tracker, &buf[..d.len], d, next_id).await;
            }
            Err(e) => {
                // Not expected on an unconnected UDP socket; don't spin.
                warn!(error = %e, "tftp receive");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    tracker.close();
    tracker.wait().await;
    info!("tftp stopped");
    Ok(())
}

async fn on_datagram(
    shared: &Arc<Shared>,
    tracker: &TaskTracker,
    bytes: &[u8],
    d: Datagram,
    id: u64,
) {
    let m = &shared.metrics;
    let peer = d.peer;
    let req = match packet::parse(bytes) {
        Ok(Packet::Rrq(r)) => r,
        Ok(Packet::Wrq(r)) => {
            m.request(Outcome::WriteRefused);
            warn!(%peer, file = %Escaped(r.filename), reason = "write request to a read-only server", "tftp request refused");
            refuse(
                shared,
                d,
                ErrorCode::AccessViolation,
                "access violation: read-only server",
            )
            .await;
            return;
        }
        Ok(other) => {
            // DATA, ACK, ERROR or OACK belong on a transfer's port. Never
            // answered: replying to an ERROR could start a loop.
            m.malformed.inc();
            warn!(%peer, reason = "not a request", packet = kind(&other), "tftp datagram dropped");
            return;
        }
        Err(e @ (ParseError::TooShort | ParseError::UnknownOpcode(_))) => {
            // Not even a request header: nothing tells us this is a TFTP
            // client, so no answer.
            m.malformed.inc();
            warn!(%peer, reason = %e, "tftp datagram dropped");
            return;
        }
        Err(e) => {
            m.malformed.inc();
            m.request(Outcome::Malformed);
            warn!(%peer, reason = %e, "tftp request refused");
            refuse(
                shared,
                d,
                ErrorCode::IllegalOperation,
                "illegal operation: malformed request",
            )
            .await;
            return;
        }
    };
    let name = req.filename.strip_prefix('/').unwrap_or(req.filename);
    let neg = packet::negotiate(
        &req.options,
        packet::Limits {
            max_blksize: shared.config.max_blksize,
            max_windowsize: shared.config.max_windowsize,
            max_timeout: shared.config.max_timeout,
        },
    );

    let waiting = shared
        .waiting
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_mut(&peer)
        .map(|h| h.again(Instant::now()))
        .is_some();
    if waiting {
        // A retransmission of a request that waits its turn.
        m.queued_again.inc();
        return;
    }
    let permit = match Arc::clone(&shared.slots).try_acquire_owned() {
        Ok(p) => p,
        Err(_) => {
            let queued = {
                let mut w = shared
                    .waiting
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                w.len() < shared.config.max_queued
                    && w.insert(peer, queue::Heard::new(Instant::now())).is_none()
            };
            if !queued {
                // Not answered: a PXE ROM gives its boot up on an error,
                // but sends its request again after its timeout, when
                // the queue may have room.
                m.busy.inc();
                m.request(Outcome::Busy);
                if let Some(dropped) = shared.full_logged.note() {
                    warn!(%peer, file = %Escaped(name), reason = "busy", max_transfers = shared.config.max_transfers, max_queued = shared.config.max_queued, dropped, "tftp request dropped: every transfer slot taken and the queue full (the client asks again after its timeout; at most one line a second, `dropped` since the last)");
                }
                return;
            }
            m.queued.inc();
            m.waiting.inc();
            let (shared2, tracker2, name) = (Arc::clone(shared), tracker.clone(), name.to_owned());
            tracker.spawn(async move {
                let got = tokio::select! {
                    _ = shared2.shutdown.cancelled() => None,
                    r = tokio::time::timeout(shared2.config.queue_wait, Arc::clone(&shared2.slots).acquire_owned()) => r.ok().and_then(Result::ok),
                };
                let heard = shared2
                    .waiting
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&peer);
                shared2.metrics.waiting.dec();
                let gone = heard.and_then(|h| h.gone(Instant::now()));
                match got {
                    Some(_) if gone.is_some() => {
                        // Its turn goes to the next: serving a client that
                        // gave up would hold the slot for its retries.
                        shared2.metrics.queue_abandoned.inc();
                        debug!(%peer, file = %Escaped(&name), silent_for = ?gone, "tftp request skipped: its client stopped sending it while it waited");
                    }
                    Some(permit) => accept(&shared2, &tracker2, &name, neg, d, id, permit).await,
                    None => {
                        shared2.metrics.queue_expired.inc();
                        debug!(%peer, file = %Escaped(&name), "tftp request waited too long for a slot: dropped");
                    }
                }
            });
            return;
        }
    };
    accept(shared, tracker, name, neg, d, id, permit).await;
}

/// Starts the transfer of `name` to `d.peer`, holding `permit` (a slot)
/// until it ends.
async fn accept(
    shared: &Arc<Shared>,
    tracker: &TaskTracker,
    name: &str,
    neg: Negotiated,
    d: Datagram,
    id: u64,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    let m = &shared.metrics;
    let peer = d.peer;
    let cancel = shared.shutdown.child_token();
    let busy = {
        let mut map = shared
            .transfers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(old) = map.remove(&peer) {
            // The client gave up on it (EDK2 after its tsize probe, SLOF
            // after an error): its old TID must fall silent.
            old.cancel.cancel();
        }
        let from_source = map.keys().filter(|p| p.ip() == peer.ip()).count();
        let busy = from_source >= shared.config.max_per_source;
        if !busy {
            map.insert(
                peer,
                Slot {
                    id,
                    cancel: cancel.clone(),
                },
            );
        }
        busy
    };
    if busy {
        m.busy.inc();
        m.request(Outcome::Busy);
        warn!(%peer, file = %Escaped(name), reason = "busy", max_per_source = shared.config.max_per_source, "tftp request refused");
        refuse(shared, d, ErrorCode::NotDefined, "server busy, try again").await;
        return;
    }
    m.transfers_active.inc();
    let slot = SlotGuard {
        shared: Arc::clone(shared),
        peer,
        id,
        _permit: permit,
    };

    let sock = match udp::transfer_socket(d.local, peer) {
        Ok(s) => s,
        Err(e) => {
            m.request(Outcome::Error);
            warn!(%peer, file = %Escaped(name), local = %d.local, error = %e, "tftp transfer socket");
            refuse(shared, d, ErrorCode::NotDefined, "server error, try again").await;
            return;
        }
    };
    let span = info_span!("tftp", %peer, file = %Escaped(name));
    let t = Transfer {
        name: name.to_owned(),
        peer,
        neg,
        sock,
        cancel,
        _slot: slot,
    };
    tracker.spawn(transfer(Arc::clone(shared), t).instrument(span));
}

fn kind(p: &Packet<'_>) -> &'static str {
    match p {
        Packet::Rrq(_) => "RRQ",
        Packet::Wrq(_) => "WRQ",
        Packet::Data { .. } => "DATA",
        Packet::Ack { .. } => "ACK",
        Packet::Error { .. } => "ERROR",
        Packet::Oack { .. } => "OACK",
    }
}

/// An ERROR for a request that gets no transfer, from the request socket.
async fn refuse(shared: &Shared, d: Datagram, code: ErrorCode, message: &str) {
    if let Err(e) = shared
        .listener
        .send(&packet::error(code, message), d.peer, d.local)
        .await
    {
        debug!(peer = %d.peer, error = %e, "tftp error reply");
    }
}

struct Transfer {
    name: String,
    peer: SocketAddr,
    neg: Negotiated,
    sock: UdpSocket,
    cancel: CancellationToken,
    _slot: SlotGuard,
}

#[derive(Debug, thiserror::Error)]
enum End {
    #[error("file not found")]
    NotFound,
    #[error("refused by the resolver")]
    Denied,
    #[error("client sent ERROR {code}: {message:?}")]
    ClientAbort { code: u16, message: String },
    #[error("no ACK after {0} retransmissions")]
    Timeout(u32),
    #[error("cancelled")]
    Cancelled,
    #[error("reading the file: {0}")]
    Read(io::Error),
    #[error("socket: {0}")]
    Socket(#[from] io::Error),
}

struct Done {
    bytes: u64,
    retransmits: u64,
}

async fn transfer(shared: Arc<Shared>, t: Transfer) {
    let started = Instant::now();
    let (blksize, windowsize) = (t.neg.block_size(), t.neg.window_size());
    let result = {
        let (shared, cancel, span) = (
            Arc::clone(&shared),
            t.cancel.clone(),
            tracing::Span::current(),
        );
        let (name, peer, neg) = (t.name.clone(), t.peer, t.neg);
        let sock = t.sock;
        tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let mut io = TransferIo::new(sock, cancel)?;
            serve(&shared, &mut io, &name, peer, neg)
        })
        .await
        .unwrap_or_else(|e| {
            Err(End::Socket(io::Error::other(format!(
                "transfer thread: {e}"
            ))))
        })
    };
    let took = started.elapsed();
    let ms = took.as_millis() as u64;
    if let Some(obs) = &shared.config.observer {
        let outcome = match &result {
            Ok(_) => Outcome::Ok,
            Err(End::NotFound) => Outcome::NotFound,
            Err(End::Denied) => Outcome::Denied,
            Err(End::ClientAbort { .. }) => Outcome::ClientAbort,
            Err(End::Timeout(_)) => Outcome::Timeout,
            Err(End::Cancelled) if shared.shutdown.is_cancelled() => Outcome::Shutdown,
            Err(End::Cancelled) => Outcome::Replaced,
            Err(End::Read(_) | End::Socket(_)) => Outcome::Error,
        };
        let report = Report {
            peer: t.peer,
            file: &t.name,
            outcome,
            bytes: result.as_ref().ok().map(|d| d.bytes),
            took,
            reason: result.as_ref().err().map(|e| e.to_string()),
        };
        (obs.0)(&report);
    }
    let outcome = match result {
        Ok(done) => {
            info!(
                bytes = done.bytes,
                blksize,
                windowsize,
                retransmits = done.retransmits,
                ms,
                "tftp transfer complete"
            );
            Outcome::Ok
        }
        // GRUB probes a dozen names per boot that do not exist: a miss is
        // routine, not a warning.
        Err(e @ End::NotFound) => {
            info!(reason = %e, "tftp request refused");
            Outcome::NotFound
        }
        Err(e @ End::Denied) => {
            warn!(reason = %e, "tftp request refused");
            Outcome::Denied
        }
        // EDK2 aborts after its tsize probe on every boot.
        Err(e @ End::ClientAbort { .. }) => {
            info!(reason = %e, ms, "tftp transfer aborted by the client");
            Outcome::ClientAbort
        }
        Err(e @ End::Timeout(_)) => {
            warn!(reason = %e, blksize, windowsize, ms, "tftp transfer failed");
            Outcome::Timeout
        }
        Err(End::Cancelled) if shared.shutdown.is_cancelled() => {
            debug!(ms, "tftp transfer stopped by shutdown");
            Outcome::Shutdown
        }
        Err(End::Cancelled) => {
            info!(
                ms,
                "tftp transfer replaced by a new request from the same port"
            );
            Outcome::Replaced
        }
        Err(e @ (End::Read(_) | End::Socket(_))) => {
            warn!(reason = %e, ms, "tftp transfer failed");
            Outcome::Error
        }
    };
    shared.metrics.request(outcome);
}

/// What the client sent to a transfer's socket.
enum Incoming {
    Ack(u16),
    Error { code: u16, message: String },
    Other,
}

/// A transfer's blocking socket, with its retransmission deadline and the
/// token that cancels it.
struct TransferIo {
    sock: UdpSocket,
    cancel: CancellationToken,
    /// `SO_RCVTIMEO` as last set: changed only when a wait is shorter than
    /// [`CANCEL_POLL`], so the per-block path makes no extra syscall.
    rcvtimeo: Duration,
}

impl TransferIo {
    fn new(sock: UdpSocket, cancel: CancellationToken) -> Result<TransferIo, End> {
        sock.set_read_timeout(Some(CANCEL_POLL))?;
        Ok(TransferIo {
            sock,
            cancel,
            rcvtimeo: CANCEL_POLL,
        })
    }

    fn send(&self, buf: &[u8]) -> Result<(), End> {
        if self.cancel.is_cancelled() {
            return Err(End::Cancelled);
        }
        self.sock.send(buf)?;
        Ok(())
    }

    /// The client's next packet, or `None` once `deadline` passed.
    fn recv_until(&mut self, rx: &mut [u8], deadline: Instant) -> Result<Option<Incoming>, End> {
        let n = loop {
            if self.cancel.is_cancelled() {
                return Err(End::Cancelled);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let wait = left.min(CANCEL_POLL).max(Duration::from_millis(1));
            // Only a wait shorter than the usual one changes the socket:
            // after that, the usual one is set back for the next wait.
            if wait < CANCEL_POLL || self.rcvtimeo != CANCEL_POLL {
                self.sock.set_read_timeout(Some(wait))?;
                self.rcvtimeo = wait;
            }
            match self.sock.recv(rx) {
                Ok(n) => break n,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(e.into()),
            }
        };
        Ok(Some(match packet::parse(&rx[..n]) {
            Ok(Packet::Ack { block }) => Incoming::Ack(block),
            Ok(Packet::Error { code, message }) => Incoming::Error {
                code,
                message: message.into_owned(),
            },
            // Anything else from the client is ignored rather than ending the
            // transfer: the retransmission deadline still bounds it.
            _ => Incoming::Other,
        }))
    }
}

fn serve(
    shared: &Shared,
    io: &mut TransferIo,
    name: &str,
    peer: SocketAddr,
    neg: Negotiated,
) -> Result<Done, End> {
    let config = &shared.config;
    let m = &shared.metrics;
    let resolved = if name.is_empty() {
        Resolved::NotFound
    } else {
        (shared.resolver)(name, peer)
    };
    let source = match resolved {
        Resolved::File(f) => Source::file(f).map_err(End::Read)?,
        Resolved::Bytes(b) => Source::Bytes(b),
        Resolved::NotFound => {
            let _ = io.send(&packet::error(ErrorCode::FileNotFound, "file not found"));
            return Err(End::NotFound);
        }
        Resolved::Denied => {
            let _ = io.send(&packet::error(
                ErrorCode::AccessViolation,
                "access violation",
            ));
            return Err(End::Denied);
        }
    };
    let len = source.len();
    let (blksize, windowsize) = (neg.block_size(), neg.window_size());
    let timeout = neg
        .timeout
        .map_or(config.default_timeout, |s| Duration::from_secs(s.into()));
    // ACKs are 4 bytes; an ERROR's text beyond this is not needed.
    let mut rx = [0u8; 516];

    if neg.needs_oack() {
        let mut oack = Vec::with_capacity(64);
        neg.encode_oack(len, &mut oack);
        let mut tries = 0;
        'send: loop {
            io.send(&oack)?;
            let deadline = Instant::now() + timeout;
            loop {
                match io.recv_until(&mut rx, deadline)? {
                    Some(Incoming::Ack(0)) => break 'send,
                    Some(Incoming::Error { code, message }) => {
                        return Err(End::ClientAbort { code, message })
                    }
                    // No DATA went out yet: any other block is one never sent.
                    Some(Incoming::Ack(_)) => m.ignored_ack("not_sent"),
                    Some(_) => {}
                    // Not acknowledged yet: the address may be forged.
                    None if tries >= UNPROVEN_RETRIES.min(config.retries) => {
                        return Err(End::Timeout(tries))
                    }
                    None => {
                        tries += 1;
                        continue 'send;
                    }
                }
            }
        }
    }

    let mut window = Window::new(len, blksize, windowsize);
    // One buffer for the whole transfer: header, then the block read in
    // place behind it.
    let mut tx = vec![0u8; 4 + usize::from(blksize)];
    let mut ahead = ReadAhead::new();
    let mut range = window.resend();
    let mut highest_sent = 0u64;
    let mut retransmits = 0u64;
    let mut tries = 0;
    // A client that acknowledged the OACK, or any block, has shown that it
    // receives at its address; before that, the address may be forged
    // (the request was one UDP packet): two retransmissions at most, so a
    // 20-byte request cannot be reflected as kilobytes of retries.
    let mut proven = neg.needs_oack();
    loop {
        let mut payload = 0u64;
        for block in range.clone() {
            let (offset, n) = Window::span(block, blksize, len);
            tx[..4].copy_from_slice(&packet::data_header(Window::wire(block)));
            ahead
                .read(&source, offset, &mut tx[4..4 + n])
                .map_err(End::Read)?;
            io.send(&tx[..4 + n])?;
            payload += n as u64;
        }
        let resent = highest_sent
            .min(*range.end())
            .saturating_sub(*range.start() - 1);
        highest_sent = highest_sent.max(*range.end());
        m.bytes_sent.inc_by(payload);
        if resent > 0 {
            retransmits += resent;
            m.retransmits.inc_by(resent);
        }
        let deadline = Instant::now() + timeout;
        range = loop {
            match io.recv_until(&mut rx, deadline)? {
                Some(Incoming::Ack(block)) => match window.on_ack(block) {
                    Step::Done => {
                        return Ok(Done {
                            bytes: len,
                            retransmits,
                        })
                    }
                    Step::Send(next) => {
                        proven = true;
                        tries = 0;
                        break next;
                    }
                    Step::Ignore => {
                        proven = true;
                        m.ignored_ack("duplicate");
                    }
                    // Proves nothing about the client's address.
                    Step::NotSent => {
                        m.ignored_ack("not_sent");
                        debug!(block, "ACK for a block never sent; ignored");
                    }
                },
                Some(Incoming::Error { code, message }) => {
                    return Err(End::ClientAbort { code, message })
                }
                Some(Incoming::Other) => {}
                None if tries == config.retries
                    || (!proven && tries >= UNPROVEN_RETRIES.min(config.retries)) =>
                {
                    return Err(End::Timeout(tries))
                }
                None => {
                    tries += 1;
                    break window.resend();
                }
            }
        };
    }
}
