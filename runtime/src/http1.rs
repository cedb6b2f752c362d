//! The HTTP/1.1 connection rules every listener shares (bootd's HTTP(S),
//! the controller API, lbd's admin listener, dnsd's metrics listener):
//! hyper set up with one set of [`Limits`], and a [`Guard`] in front of
//! hyper that refuses the framings hyper would quietly repair.
//!
//! hyper takes a request with both `Content-Length` and
//! `Transfer-Encoding` by dropping the length, and several equal
//! `Content-Length` headers as one; a proxy in front may have framed the
//! same bytes the other way (request smuggling). The [`Guard`] reads every
//! request head before hyper does, and such a head never reaches hyper: the
//! requests before it are answered, then the client gets a 400 and the
//! connection is closed. To find the next head it follows the framing of
//! each body (lengths and chunks); where it cannot tell (a head or chunk it
//! cannot parse), it steps aside and hyper's own checks answer.
//!
//! Every connection ends with an outcome ([`serve`] returns it) that the
//! listener counts: refused framings, heads too large or not parsable (400
//! and 431 hyper answered itself), heads or idle connections over the head
//! deadline, bodies never received.

use bytes::{Buf, BytesMut};
use hyper::body::{Body, Incoming};
use hyper::service::HttpService;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The limits of one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// A request head must be complete this long after the connection
    /// opened or the previous response went out (an idle keep-alive
    /// connection is closed after it too).
    pub head_timeout: Duration,
    /// A TLS handshake must be done this long after accept.
    pub handshake_timeout: Duration,
    /// Headers in one request head; more: 431.
    pub max_headers: usize,
    /// Bytes in one request head; more: 431.
    pub max_head: usize,
}

impl Limits {
    /// `head_timeout`, a 10 s TLS handshake, 100 headers, 32 KiB of head.
    pub const fn new(head_timeout: Duration) -> Limits {
        Limits {
            head_timeout,
            handshake_timeout: Duration::from_secs(10),
            max_headers: 100,
            max_head: 32 * 1024,
        }
    }

    /// hyper's server side with these limits. Half-close is allowed: a
    /// client that ends its side after its request still gets the answer,
    /// and the [`Guard`]'s end-of-input before a refused head lets the
    /// answers to the requests before it go out.
    pub fn builder(&self) -> hyper::server::conn::http1::Builder {
        let mut b = hyper::server::conn::http1::Builder::new();
        b.timer(TokioTimer::new())
            .keep_alive(true)
            .half_close(true)
            .header_read_timeout(self.head_timeout)
            .max_headers(self.max_headers)
            .max_header_size(self.max_head);
        b
    }
}

/// Why a connection was closed on a bad or slow client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// `Content-Length` and `Transfer-Encoding` in one request: 400.
    LengthAndChunked,
    /// More than one `Content-Length` (or a list in one): 400.
    DuplicateLength,
    /// A head over [`Limits::max_head`] or [`Limits::max_headers`]: 431.
    HeadTooLarge,
    /// A head that does not parse: 400.
    BadHead,
    /// Part of a head came, the rest not within [`Limits::head_timeout`].
    HeadTimeout,
    /// Nothing came within [`Limits::head_timeout`] (a new or idle keep-alive connection).
    IdleTimeout,
    /// The connection ended before the request body had come in full; no
    /// route of these listeners waits for a body it does not read.
    BodyUnread,
    /// No TLS handshake within [`Limits::handshake_timeout`].
    HandshakeTimeout,
    /// The TLS handshake failed.
    HandshakeFailed,
    /// Idle, and its slot given to a newcomer on a full listener
    /// ([`crate::conns::Held::evicted`]).
    Evicted,
}

impl Closed {
    pub const ALL: [Closed; 10] = [
        Closed::LengthAndChunked,
        Closed::DuplicateLength,
        Closed::HeadTooLarge,
        Closed::BadHead,
        Closed::HeadTimeout,
        Closed::IdleTimeout,
        Closed::BodyUnread,
        Closed::HandshakeTimeout,
        Closed::HandshakeFailed,
        Closed::Evicted,
    ];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Closed::LengthAndChunked => "content_length_and_transfer_encoding",
            Closed::DuplicateLength => "duplicate_content_length",
            Closed::HeadTooLarge => "head_too_large",
            Closed::BadHead => "bad_head",
            Closed::HeadTimeout => "head_timeout",
            Closed::IdleTimeout => "idle_timeout",
            Closed::BodyUnread => "body_unread",
            Closed::HandshakeTimeout => "tls_handshake_timeout",
            Closed::HandshakeFailed => "tls_handshake_failed",
            Closed::Evicted => "evicted_idle",
        }
    }

    /// Its position in [`Closed::ALL`] (for counters kept in arrays).
    pub fn index(self) -> usize {
        Closed::ALL.iter().position(|c| *c == self).unwrap_or(0)
    }
}

/// What the [`Guard`] saw, read after hyper is done with the connection.
#[derive(Debug, Default)]
pub struct Probe {
    /// 0: nothing; 1 + [`Closed::index`]: a refused head.
    refused: AtomicU8,
    /// [`Phase`] as a number.
    phase: AtomicU8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Phase {
    /// Between requests: nothing of a head yet.
    Idle = 0,
    /// Part of a head.
    Head = 1,
    /// Inside a request body.
    Body = 2,
    /// The guard stepped aside: hyper alone knows.
    Unknown = 3,
}

impl Probe {
    fn refused(&self) -> Option<Closed> {
        match self.refused.load(Relaxed) {
            0 => None,
            n => Closed::ALL.get(n as usize - 1).copied(),
        }
    }
    fn phase(&self) -> u8 {
        self.phase.load(Relaxed)
    }
}

/// Where the guard is in the request stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Head,
    Body(u64),
    ChunkSize,
    ChunkData(u64),
    ChunkEnd,
    Trailers,
    /// Not followed any more: everything goes to hyper as it comes.
    Through,
    /// A refused head: hyper reads end-of-input from here on.
    Refused,
}

/// The longest chunk-size or trailer line followed.
const MAX_LINE: usize = 4096;

/// Reads request heads before hyper does (see the module doc). Writes go
/// straight through; the 400 for a refused head is written when hyper,
/// done with the requests before it, shuts the connection down.
#[derive(Debug)]
pub struct Guard<I> {
    io: I,
    /// Read from `io`, not yet given to hyper; the first `ready` bytes may be.
    buf: BytesMut,
    ready: usize,
    framing: Framing,
    max_headers: usize,
    max_head: usize,
    probe: Arc<Probe>,
    /// The 400 still to write, once refused.
    answer: &'static [u8],
}

/// The answer to a refused head.
const REFUSED: &[u8] = b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: 53\r\nconnection: close\r\n\r\nbad request framing (Content-Length, Transfer-Encoding)";

impl<I> Guard<I> {
    pub fn new(io: I, limits: &Limits) -> (Guard<I>, Arc<Probe>) {
        let probe = Arc::new(Probe::default());
        let g = Guard {
            io,
            buf: BytesMut::new(),
            ready: 0,
            framing: Framing::Head,
            max_headers: limits.max_headers,
            max_head: limits.max_head,
            probe: Arc::clone(&probe),
            answer: &[],
        };
        (g, probe)
    }

    /// Follows the framing over the bytes not yet cleared; returns whether
    /// anything changed.
    fn scan(&mut self) -> bool {
        let before = (self.ready, self.framing);
        while self.ready < self.buf.len() {
            let rest = &self.buf[self.ready..];
            let (used, next) = match self.framing {
                Framing::Head => match head(rest, self.max_headers, self.max_head) {
                    Head::Partial => break,
                    Head::Next(len, next) => (len, next),
                    Head::Refused(why) => {
                        self.framing = Framing::Refused;
                        self.probe.refused.store(why.index() as u8 + 1, Relaxed);
                        self.buf.truncate(self.ready);
                        self.answer = REFUSED;
                        break;
                    }
                },
                Framing::Body(n) | Framing::ChunkData(n) => {
                    let k = n.min(rest.len() as u64);
                    let next = match (self.framing, n - k) {
                        (Framing::Body(_), 0) => Framing::Head,
                        (Framing::Body(_), left) => Framing::Body(left),
                        (_, 0) => Framing::ChunkEnd,
                        (_, left) => Framing::ChunkData(left),
                    };
                    (k as usize, next)
                }
                Framing::ChunkSize | Framing::ChunkEnd | Framing::Trailers => {
                    let Some(end) = rest.iter().take(MAX_LINE).position(|&b| b == b'\n') else {
                        if rest.len() >= MAX_LINE {
                            self.framing = Framing::Through;
                        }
                        break;
                    };
                    let line = rest[..end].strip_suffix(b"\r").unwrap_or(&rest[..end]);
                    let next = match self.framing {
                        Framing::ChunkSize => match chunk_size(line) {
                            Some(0) => Framing::Trailers,
                            Some(n) => Framing::ChunkData(n),
                            None => Framing::Through,
                        },
                        Framing::ChunkEnd if line.is_empty() => Framing::ChunkSize,
                        Framing::Trailers if line.is_empty() => Framing::Head,
                        Framing::Trailers => Framing::Trailers,
                        _ => Framing::Through,
                    };
                    (end + 1, next)
                }
                Framing::Through => (rest.len(), Framing::Through),
                Framing::Refused => break,
            };
            self.ready += used;
            self.framing = next;
        }
        let phase = match self.framing {
            Framing::Head if self.ready < self.buf.len() => Phase::Head,
            Framing::Head | Framing::Refused => Phase::Idle,
            Framing::Through => Phase::Unknown,
            _ => Phase::Body,
        };
        self.probe.phase.store(phase as u8, Relaxed);
        before != (self.ready, self.framing)
    }
}

/// What the head at the start of `rest` is.
enum Head {
    Partial,
    /// Its length and the framing after it.
    Next(usize, Framing),
    Refused(Closed),
}

fn head(rest: &[u8], max_headers: usize, max_head: usize) -> Head {
    let mut headers = vec![httparse::EMPTY_HEADER; max_headers];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(rest) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if rest.len() <= max_head => return Head::Partial,
        // Too big, too many headers, not HTTP: hyper answers 400 or 431.
        _ => return Head::Next(rest.len(), Framing::Through),
    };
    let (mut lengths, mut length, mut chunked, mut te) = (0, None, false, false);
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            lengths += 1 + h.value.iter().filter(|&&b| b == b',').count();
            length = std::str::from_utf8(h.value.trim_ascii())
                .ok()
                .and_then(|v| v.parse::<u64>().ok());
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            te = true;
            // As hyper: the last coding of the last such header decides.
            chunked = h
                .value
                .rsplit(|&b| b == b',')
                .next()
                .is_some_and(|c| c.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        }
    }
    let refused = if te && lengths > 0 {
        Some(Closed::LengthAndChunked)
    } else if lengths > 1 {
        Some(Closed::DuplicateLength)
    } else {
        None
    };
    if let Some(why) = refused {
        return Head::Refused(why);
    }
    let next = match (te, length) {
        (true, _) if chunked && req.version == Some(1) => Framing::ChunkSize,
        // hyper refuses these (400): nothing to follow.
        (true, _) => Framing::Through,
        (false, Some(0)) => Framing::Head,
        (false, Some(n)) => Framing::Body(n),
        (false, None) if lengths == 1 => Framing::Through,
        (false, None) => Framing::Head,
    };
    Head::Next(len, next)
}

/// A chunk-size line's size (extensions after `;` ignored).
fn chunk_size(line: &[u8]) -> Option<u64> {
    let hex = line.split(|&b| b == b';').next()?.trim_ascii();
    if hex.is_empty() || hex.len() > 15 {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
}

impl<I: AsyncRead + Unpin> AsyncRead for Guard<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.ready > 0 {
                let n = this.ready.min(out.remaining());
                out.put_slice(&this.buf[..n]);
                this.buf.advance(n);
                this.ready -= n;
                return Poll::Ready(Ok(()));
            }
            if this.framing == Framing::Refused {
                return Poll::Ready(Ok(()));
            }
            if this.framing == Framing::Through && this.buf.is_empty() {
                return Pin::new(&mut this.io).poll_read(cx, out);
            }
            // Read more behind what is held.
            let mut scratch = [0u8; 8192];
            let mut rb = ReadBuf::new(&mut scratch);
            ready!(Pin::new(&mut this.io).poll_read(cx, &mut rb))?;
            let got = rb.filled().len();
            this.buf.extend_from_slice(rb.filled());
            if got == 0 {
                // End of input: hyper gets what is held (a partial head
                // is then hyper's to answer), then the end.
                this.ready = this.buf.len();
                this.framing = Framing::Through;
                if this.ready == 0 {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            this.scan();
        }
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Guard<I> {
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
        let this = &mut *self;
        while !this.answer.is_empty() {
            let n = ready!(Pin::new(&mut this.io).poll_write(cx, this.answer))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            this.answer = &this.answer[n..];
        }
        ready!(Pin::new(&mut this.io).poll_flush(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

/// Why the connection was closed, from hyper's result and the guard's probe.
pub fn outcome(r: &Result<(), hyper::Error>, probe: &Probe) -> Option<Closed> {
    if let Some(why) = probe.refused() {
        return Some(why);
    }
    let phase = probe.phase();
    match r {
        Err(e) if e.is_timeout() && phase == Phase::Idle as u8 => Some(Closed::IdleTimeout),
        Err(e) if e.is_timeout() => Some(Closed::HeadTimeout),
        Err(e) if e.is_parse_too_large() => Some(Closed::HeadTooLarge),
        Err(e) if e.is_parse() => Some(Closed::BadHead),
        _ if phase == Phase::Body as u8 => Some(Closed::BodyUnread),
        _ => None,
    }
}

/// Serves one connection with hyper behind a [`Guard`] until it ends: on
/// `drain`, hyper finishes the request in progress and closes; on `stop`
/// (which should follow `drain`) the connection is dropped. Returns why a
/// bad or slow client's connection was closed, for the listener to count.
pub async fn serve<I, S, B>(
    io: I,
    svc: S,
    limits: &Limits,
    drain: impl Future<Output = ()>,
    stop: impl Future<Output = ()>,
) -> Option<Closed>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (guard, probe) = Guard::new(io, limits);
    let conn = limits.builder().serve_connection(TokioIo::new(guard), svc);
    let mut conn = std::pin::pin!(conn);
    let r = tokio::select! {
        r = conn.as_mut() => r,
        _ = drain => {
            conn.as_mut().graceful_shutdown();
            tokio::select! {
                r = conn.as_mut() => r,
                _ = stop => return None,
            }
        }
    };
    if let Err(e) = &r {
        tracing::debug!(error = %e, "HTTP connection ended with an error");
    }
    outcome(&r, &probe)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// What the guard passes on for `input`, and its probe.
    async fn through(input: &[u8]) -> (Vec<u8>, Option<Closed>, u8) {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        client.write_all(input).await.unwrap();
        client.shutdown().await.unwrap();
        let (mut g, probe) = Guard::new(server, &Limits::new(Duration::from_secs(1)));
        let mut out = Vec::new();
        g.read_to_end(&mut out).await.unwrap();
        (out, probe.refused(), probe.phase())
    }

    #[tokio::test]
    async fn framings_are_followed_and_smuggling_is_cut_off() {
        let good = b"POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n0\r\nT: 1\r\n\r\nGET /c HTTP/1.1\r\n\r\n";
        assert_eq!(
            through(good).await,
            (good.to_vec(), None, Phase::Idle as u8)
        );
        for (bad, why) in [
            (
                &b"POST /x HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"[..],
                Closed::LengthAndChunked,
            ),
            (
                b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\ncontent-length: 3\r\n\r\n",
                Closed::LengthAndChunked,
            ),
            (
                b"POST /x HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
                Closed::DuplicateLength,
            ),
            (
                b"POST /x HTTP/1.1\r\nContent-Length: 3, 4\r\n\r\nabc",
                Closed::DuplicateLength,
            ),
        ] {
            // After a good pipelined request: that one passes, the bad one not.
            let first = b"GET /a HTTP/1.1\r\n\r\n";
            let input = [&first[..], bad].concat();
            assert_eq!(
                through(&input).await,
                (first.to_vec(), Some(why), Phase::Idle as u8)
            );
        }
        // A body cut short leaves the guard inside it.
        let (_, refused, phase) =
            through(b"POST /a HTTP/1.1\r\nContent-Length: 50\r\n\r\nhello").await;
        assert_eq!((refused, phase), (None, Phase::Body as u8));
        // What it cannot parse goes to hyper as it is.
        let odd = b"GET /a HTTP/1.1\r\nBad Header: x\r\n\r\nGET /b HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(through(odd).await.0, odd.to_vec());
    }
}
