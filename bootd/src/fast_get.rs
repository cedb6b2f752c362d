//! Plain-HTTP connections: bootd's own HTTP/1.1 request loop for what
//! network boot asks (GET and HEAD without a body), with files and single
//! ranges sent by `sendfile(2)` (over 1 MiB from a blocking thread) and
//! small responses written with their headers in one `write`; anything
//! else hands the connection, with the bytes already read, to hyper
//! ([`crate::listen::serve_conn`]) for the rest of its life.
//!
//! Why not hyper for everything: per request hyper builds and encodes a
//! response and polls its body into the socket, so a file's bytes are read
//! into memory and copied out again. For the files and scripts iPXE
//! fetches, that made bootd spend twice nginx's CPU per request
//! (docs/performance.md). Routing, headers, metrics and the boot timeline
//! are unchanged: requests go through [`http::handle`] as before, and only
//! the response's bytes are written here. The one exception is a GET of a
//! whole image ([`Head::Image`]), which [`http::image_whole`] answers
//! without building a request or a response, with the same bytes, counts
//! and timeline events (design-notes, "File serving").
//!
//! What is handed to hyper: methods other than GET and HEAD (answered 405
//! by the same router), HTTP/1.0, request bodies (`Content-Length` other
//! than 0, `Transfer-Encoding`), `Expect`, `Upgrade`, heads that do not
//! parse or exceed [`MAX_HEAD`] (hyper answers 400 or 431), more than one
//! `Content-Length` (refused by [`runtime::http1::Guard`]).

use crate::files::Sendfile;
use crate::http;
use crate::App;
use bytes::{Buf, BytesMut};
use http_body_util::BodyExt;
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Method, Request, StatusCode};
use std::io::{self, Write as _};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A request head larger than this goes to hyper (which refuses it).
pub const MAX_HEAD: usize = 16 * 1024;
/// Headers parsed per request; more goes to hyper.
const MAX_HEADERS: usize = 48;
/// How long a connection may take by default to send a request head, from
/// its start or the previous response ([`crate::App::http_limits`]; hyper's
/// `header_read_timeout` for the connections it serves).
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// A response whose body is at most this long and ready at once goes out
/// in the same `write` as its headers.
const COALESCE: usize = 64 * 1024;

/// One parsed request head.
// Returned once per request and taken apart at once: boxing the request
// would add an allocation per request for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Head {
    /// A request this loop serves; `len` bytes of the buffer were its head.
    Simple {
        req: Request<()>,
        len: usize,
        close: bool,
    },
    /// A GET below `/images/` without range or condition, which
    /// [`http::image_whole`] may answer without a [`Request`]; `path` is
    /// where the path is in the buffer.
    Image {
        path: std::ops::Range<usize>,
        len: usize,
        close: bool,
    },
    /// The head is not complete yet.
    Partial,
    /// Something for hyper.
    Other,
}

/// Parses the request head at the start of `buf`. Pure: no I/O.
pub fn parse(buf: &[u8]) -> Head {
    parse_with(buf, true)
}

/// Headers that make an image request one for [`http::image`] (which
/// answers ranges and conditions), not for [`http::image_whole`].
const NOT_WHOLE: [&str; 6] = [
    "range",
    "if-range",
    "if-none-match",
    "if-modified-since",
    "if-match",
    "if-unmodified-since",
];

/// [`parse`] without [`Head::Image`]: the request for the general path.
pub fn parse_general(buf: &[u8]) -> Head {
    parse_with(buf, false)
}

/// [`parse`]; `image` allows [`Head::Image`].
fn parse_with(buf: &[u8], image: bool) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut r = httparse::Request::new(&mut headers);
    let len = match r.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Head::Partial,
        Err(_) => return Head::Other,
    };
    let method = match r.method {
        Some("GET") => Method::GET,
        Some("HEAD") => Method::HEAD,
        _ => return Head::Other,
    };
    if r.version != Some(1) {
        return Head::Other;
    }
    let mut close = false;
    let Some(path) = r.path else {
        return Head::Other;
    };
    // No URI parsing for the shortcut: `http::image_whole` takes only paths
    // of plain characters and leaves the rest to the general path.
    let mut whole = image && method == Method::GET && path.starts_with("/images/");
    let mut length = false;
    for h in r.headers.iter() {
        let name = h.name;
        if name.eq_ignore_ascii_case("content-length") {
            // A second one is refused by the guard in front of hyper.
            if h.value.trim_ascii() != b"0" || std::mem::replace(&mut length, true) {
                return Head::Other;
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding")
            || name.eq_ignore_ascii_case("expect")
            || name.eq_ignore_ascii_case("upgrade")
        {
            return Head::Other;
        } else if name.eq_ignore_ascii_case("connection") {
            close |= h
                .value
                .split(|&c| c == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"));
        } else if whole && NOT_WHOLE.iter().any(|n| name.eq_ignore_ascii_case(n)) {
            whole = false;
        }
        // What `HeaderValue` refuses (httparse has checked the name).
        if h.value
            .iter()
            .any(|&b| (b < b' ' && b != b'\t') || b == 0x7f)
        {
            return Head::Other;
        }
    }
    if whole {
        let start = path.as_ptr() as usize - buf.as_ptr() as usize;
        return Head::Image {
            path: start..start + path.len(),
            len,
            close,
        };
    }
    let Ok(uri) = path.parse::<hyper::Uri>() else {
        return Head::Other;
    };
    // Origin form only ("/path?query"); hyper handles the rest.
    if uri.scheme().is_some() || !uri.path().starts_with('/') {
        return Head::Other;
    }
    let mut req = Request::new(());
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    let headers = req.headers_mut();
    headers.reserve(r.headers.len());
    for h in r.headers.iter() {
        let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(h.name.as_bytes()),
            HeaderValue::from_bytes(h.value),
        ) else {
            return Head::Other;
        };
        headers.append(n, v);
    }
    Head::Simple { req, len, close }
}

/// Serves one plain-HTTP connection until the client closes it, a request
/// needs hyper (then hyper serves the rest), or shutdown.
pub async fn serve(
    mut stream: TcpStream,
    peer: SocketAddr,
    app: Arc<App>,
    shutdown: CancellationToken,
    conn_stop: CancellationToken,
    held: &runtime::conns::Held,
) {
    // What was read and not yet answered: a request head, a few hundred
    // bytes. Reads go through a buffer on the stack ([`read_into`]), so a
    // connection waiting for its response (for a place through the image
    // gate: thousands at once in a storm) holds only what it sent.
    let mut buf = BytesMut::new();
    // One timer and one registration per token for the connection's life,
    // not one per request: the timer is re-armed only when it fires.
    let mut head_started = Instant::now();
    let head_timeout = app.http_limits.head_timeout;
    let timer = tokio::time::sleep(head_timeout);
    let (stopping, stopped, evicted) = (
        shutdown.clone().cancelled_owned(),
        conn_stop.clone().cancelled_owned(),
        held.evicted(),
    );
    tokio::pin!(timer, stopping, stopped, evicted);
    let mut head = Vec::with_capacity(256);
    loop {
        let (next, close) = loop {
            if !buf.is_empty() {
                let mut parsed = parse(&buf);
                if let Head::Image { path, len, close } = &parsed {
                    // Nothing is counted for a connection that is stopping
                    // (as the general path's `respond` is never polled then).
                    if conn_stop.is_cancelled() {
                        return;
                    }
                    head.clear();
                    // The path came out of a `&str`.
                    let path = std::str::from_utf8(&buf[path.clone()]).unwrap_or("");
                    match http::image_whole(&app, path, peer, &mut head) {
                        Some(sf) => {
                            let close = *close;
                            buf.advance(*len);
                            break (Next::Whole(sf), close);
                        }
                        None => parsed = parse_general(&buf),
                    }
                }
                match parsed {
                    Head::Simple { req, len, close } => {
                        buf.advance(len);
                        break (Next::Request(req), close);
                    }
                    Head::Partial if buf.len() < MAX_HEAD => {}
                    Head::Image { .. } | Head::Partial | Head::Other => {
                        let io = crate::Prefixed {
                            prefix: buf.freeze(),
                            io: stream,
                        };
                        return crate::serve_conn(io, peer, app, shutdown, conn_stop).await;
                    }
                }
            }
            // Nothing of a request yet: a full listener may take the slot.
            let idle = buf.is_empty();
            if idle {
                held.set_idle(true);
            }
            let read = tokio::select! {
                biased;
                // Idle between requests: shutdown closes the connection.
                _ = &mut stopping, if idle => return,
                _ = &mut evicted, if idle => {
                    return crate::count_closed(&app, Some(runtime::http1::Closed::Evicted));
                }
                r = stream.readable() => r.and_then(|()| read_into(&stream, &mut buf)),
                _ = &mut timer => {
                    if head_started.elapsed() >= head_timeout {
                        tracing::debug!(%peer, "no request head within {head_timeout:?}; closing");
                        let why = match buf.is_empty() {
                            true => runtime::http1::Closed::IdleTimeout,
                            false => runtime::http1::Closed::HeadTimeout,
                        };
                        return crate::count_closed(&app, Some(why));
                    }
                    timer.as_mut().reset(head_started + head_timeout);
                    continue;
                }
            };
            let read = match read {
                // Readable, yet nothing to read after all: wait again.
                Ok(None) => continue,
                Ok(Some(n)) => Ok(n),
                Err(e) => Err(e),
            };
            if idle {
                held.set_idle(false);
            }
            if let Ok(0) | Err(_) = read {
                return;
            }
        };
        let close = close || shutdown.is_cancelled();
        let done = match next {
            Next::Request(req) => {
                let head_only = req.method() == Method::HEAD;
                tokio::select! {
                    biased;
                    _ = &mut stopped => return,
                    r = respond(&mut stream, &app, req, peer, head_only, close, &mut head) => r,
                }
            }
            Next::Whole(sf) => {
                end_head(&mut head, close);
                tokio::select! {
                    biased;
                    _ = &mut stopped => return,
                    r = async {
                        send_more(&stream, &head).await?;
                        sendfile(&stream, &sf, app.write_stall).await?;
                        Ok(!close)
                    } => r,
                }
            }
        };
        match done {
            Ok(true) if !close => head_started = Instant::now(),
            Ok(_) => {
                let _ = stream.shutdown().await;
                return;
            }
            Err(e) => {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
                return;
            }
        }
    }
}

/// One `recv` (as [`runtime::net::read_some`] makes it) into a buffer on
/// the stack, its bytes appended to `buf`; `None` when the socket had
/// nothing after all.
fn read_into(stream: &TcpStream, buf: &mut BytesMut) -> io::Result<Option<usize>> {
    let mut rx = [0u8; 4096];
    let got = runtime::net::try_read_some(stream, &mut rx)?;
    if let Some(n) = got {
        buf.extend_from_slice(&rx[..n]);
    }
    Ok(got)
}

/// Routes one request and writes the response. `Ok(false)`: the response
/// was delimited by closing the connection.
async fn respond(
    stream: &mut TcpStream,
    app: &Arc<App>,
    req: Request<()>,
    peer: SocketAddr,
    head_only: bool,
    close: bool,
    head: &mut Vec<u8>,
) -> io::Result<bool> {
    let resp = match http::handle(Arc::clone(app), req, peer).await {
        Ok(r) => r,
        Err(never) => match never {},
    };
    let (parts, mut body) = resp.into_parts();
    let status = parts.status;
    let bodiless = head_only
        || status == StatusCode::NOT_MODIFIED
        || status == StatusCode::NO_CONTENT
        || status.is_informational();
    let mut length = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    head.clear();
    let reason = status.canonical_reason().unwrap_or("");
    let _ = write!(head, "HTTP/1.1 {} {reason}\r\n", status.as_u16());
    for (k, v) in &parts.headers {
        head.extend_from_slice(k.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(v.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if length.is_none() && status != StatusCode::NOT_MODIFIED && status != StatusCode::NO_CONTENT {
        if let Some(n) = http_body::Body::size_hint(&body).exact() {
            let _ = write!(head, "content-length: {n}\r\n");
            length = Some(n);
        }
    }
    // Without a length, the end of the body is the end of the connection.
    let close = close || (length.is_none() && !bodiless);
    end_head(head, close);

    if bodiless {
        stream.write_all(head).await?;
        return Ok(!close);
    }
    if let Some(sf) = parts.extensions.get::<Sendfile>() {
        if length == Some(sf.len) {
            drop(body);
            send_more(stream, head).await?;
            sendfile(stream, sf, app.write_stall).await?;
            return Ok(!close);
        }
    }
    // Small, ready bodies (scripts, Ignition, metrics) go in one write
    // with the headers; anything else frame by frame as the body yields.
    // (The connection's head buffer is reused, body and all, by the next response.)
    let mut head_sent = false;
    while let Some(frame) = body.frame().await {
        let frame = frame?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if head_sent {
            stream.write_all(&data).await?;
        } else if data.len() <= COALESCE {
            head.extend_from_slice(&data);
            stream.write_all(head).await?;
        } else {
            stream.write_all(head).await?;
            stream.write_all(&data).await?;
        }
        head_sent = true;
    }
    if !head_sent {
        stream.write_all(head).await?;
    }
    // A big coalesced body is not kept for the connection's idle life.
    if head.capacity() > 8 * 1024 {
        *head = Vec::with_capacity(256);
    }
    Ok(!close)
}

/// What the loop answers next.
enum Next {
    Request(Request<()>),
    /// A whole image, its head written by [`http::image_whole`].
    Whole(crate::files::Sendfile),
}

/// The end of every response head: `Date`, `Connection: close` when the
/// connection ends after it, the blank line.
fn end_head(head: &mut Vec<u8>, close: bool) {
    head.extend_from_slice(b"date: ");
    crate::files::write_http_date(head, SystemTime::now());
    head.extend_from_slice(if close {
        b"\r\nconnection: close\r\n\r\n"
    } else {
        b"\r\n\r\n"
    });
}

/// Writes `buf` with `MSG_MORE`: the kernel holds it for the file that
/// follows, so headers and the start of the body share segments.
async fn send_more(stream: &TcpStream, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        stream.writable().await?;
        match stream.try_io(Interest::WRITABLE, || {
            Ok(rustix::net::send(
                stream,
                buf,
                rustix::net::SendFlags::MORE,
            )?)
        }) {
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `sendfile(2)` the range into the socket, reporting progress as the body
/// would have: on the runtime thread up to
/// [`crate::files::SENDFILE_INLINE_MAX`], else from a blocking thread.
async fn sendfile(stream: &TcpStream, sf: &Sendfile, stall: Duration) -> io::Result<()> {
    if sf.len > crate::files::SENDFILE_INLINE_MAX {
        return sendfile_blocking(stream, sf, stall).await;
    }
    let (mut offset, mut left) = (sf.offset, sf.len);
    while left > 0 {
        stream.writable().await?;
        let r = stream.try_io(Interest::WRITABLE, || {
            Ok(rustix::fs::sendfile(
                stream,
                &*sf.file,
                Some(&mut offset),
                left as usize,
            )?)
        });
        match r {
            Ok(0) => return Err(shrank()),
            Ok(n) => {
                left -= n as u64;
                if let Some(f) = &sf.on_bytes {
                    f(n as u64);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn shrank() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "file shrank while it was sent",
    )
}

/// How long the sending thread sleeps in `poll` before looking whether
/// the connection was dropped (shutdown, drain).
const STOP_POLL: Duration = Duration::from_millis(100);

/// Big ranges sent at once from blocking threads; more wait (without a
/// thread) for a slot, so slow readers cannot take the blocking pool that
/// TFTP transfers and file opens need.
pub const MAX_BLOCKING_SENDS: usize = 128;
static BLOCKING_SENDS: tokio::sync::Semaphore =
    tokio::sync::Semaphore::const_new(MAX_BLOCKING_SENDS);

/// A big range from a blocking-pool thread with its own duplicate of the
/// socket (so the descriptor stays valid whatever happens to the
/// connection's task): `sendfile` as much as the socket takes, `poll` for
/// room, again. Dropping the returned future (the connection stopped)
/// makes the thread stop within [`STOP_POLL`]. A client that takes no byte
/// for `stall` is given up on.
async fn sendfile_blocking(stream: &TcpStream, sf: &Sendfile, stall: Duration) -> io::Result<()> {
    let _slot = BLOCKING_SENDS
        .acquire()
        .await
        .map_err(|_| io::Error::other("closed"))?;
    let sock = rustix::io::dup(stream)?;
    let stopped = CancellationToken::new();
    let _stop_on_drop = stopped.clone().drop_guard();
    let sf = sf.clone();
    let job = tokio::task::spawn_blocking(move || -> io::Result<()> {
        let (mut offset, mut left) = (sf.offset, sf.len);
        let timeout = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: STOP_POLL.as_nanos() as _,
        };
        let mut progress = std::time::Instant::now();
        while left > 0 {
            if stopped.is_cancelled() {
                return Err(io::Error::other("connection stopped"));
            }
            if progress.elapsed() > stall {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the client took nothing for {stall:?}"),
                ));
            }
            // At most 4 MiB a call, so progress reports come often enough.
            match rustix::fs::sendfile(
                &sock,
                &*sf.file,
                Some(&mut offset),
                left.min(4 << 20) as usize,
            ) {
                Ok(0) => return Err(shrank()),
                Ok(n) => {
                    left -= n as u64;
                    progress = std::time::Instant::now();
                    if let Some(f) = &sf.on_bytes {
                        f(n as u64);
                    }
                }
                Err(rustix::io::Errno::AGAIN) => {
                    let mut fds = [rustix::event::PollFd::new(
                        &sock,
                        rustix::event::PollFlags::OUT,
                    )];
                    match rustix::event::poll(&mut fds, Some(&timeout)) {
                        Ok(_) | Err(rustix::io::Errno::INTR) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    });
    job.await.map_err(io::Error::other)?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn simple(b: &[u8]) -> (Request<()>, usize, bool) {
        match parse(b) {
            Head::Simple { req, len, close } => (req, len, close),
            other => panic!("{other:?} for {:?}", String::from_utf8_lossy(b)),
        }
    }

    #[test]
    fn a_boot_request_is_simple() {
        let b = b"GET /ipxe/k?x=1 HTTP/1.1\r\nHost: a\r\nUser-Agent: iPXE/1.21\r\n\r\nGET /next";
        let (req, len, close) = simple(b);
        assert_eq!(
            (
                req.method(),
                req.uri().path(),
                req.uri().query(),
                len,
                close
            ),
            (&Method::GET, "/ipxe/k", Some("x=1"), 60, false)
        );
        assert_eq!(req.headers()["user-agent"], "iPXE/1.21");
        let (req, _, close) = simple(
            b"HEAD / HTTP/1.1\r\nConnection: keep-alive, Close\r\nContent-Length: 0\r\n\r\n",
        );
        assert_eq!((req.method(), close), (&Method::HEAD, true));
    }

    #[test]
    fn an_image_get_without_range_or_condition_is_whole() {
        let b = b"GET /images/k?x=1 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nGET /next";
        match parse(b) {
            Head::Image { path, len, close } => {
                assert_eq!((&b[path], len, close), (&b"/images/k?x=1"[..], 58, true))
            }
            other => panic!("{other:?}"),
        }
        // With a range or a condition, or as HEAD, or asked not to: a request for the general path.
        for b in [
            &b"GET /images/k HTTP/1.1\r\nRange: bytes=0-1\r\n\r\n"[..],
            b"GET /images/k HTTP/1.1\r\nif-none-match: \"a\"\r\n\r\n",
            b"GET /images/k HTTP/1.1\r\nIf-Modified-Since: x\r\n\r\n",
            b"GET /images/k HTTP/1.1\r\nIf-Range: x\r\n\r\n",
            b"HEAD /images/k HTTP/1.1\r\n\r\n",
            b"GET /imagesk HTTP/1.1\r\n\r\n",
        ] {
            simple(b);
        }
        // Other headers do not matter.
        assert!(matches!(
            parse(b"GET /images/k HTTP/1.1\r\nX: y\r\nAccept: */*\r\n\r\n"),
            Head::Image { .. }
        ));
        assert!(matches!(
            parse_general(b"GET /images/k HTTP/1.1\r\n\r\n"),
            Head::Simple { .. }
        ));
        // A value `HeaderValue` refuses goes to hyper on either path.
        assert!(matches!(
            parse(b"GET /images/k HTTP/1.1\r\nX: a\x01b\r\n\r\n"),
            Head::Other
        ));
    }

    #[test]
    fn partial_heads_wait() {
        assert!(matches!(
            parse(b"GET /boot.ipxe HTTP/1.1\r\nHost: a\r\n"),
            Head::Partial
        ));
        assert!(matches!(parse(b"GE"), Head::Partial));
    }

    #[test]
    fn everything_else_goes_to_hyper() {
        for b in [
            &b"POST /x HTTP/1.1\r\nContent-Length: 1\r\n\r\nx"[..],
            b"PUT /x HTTP/1.1\r\n\r\n",
            b"GET /x HTTP/1.0\r\n\r\n",
            b"GET /x HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
            b"GET /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET /x HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
            b"GET /x HTTP/1.1\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET /x HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
            b"GET /x HTTP/1.1\r\nUpgrade: h2c\r\n\r\n",
            b"GET http://a/x HTTP/1.1\r\n\r\n",
            b"GET * HTTP/1.1\r\n\r\n",
            b"GET /x HTTP/1.1\r\nBad Header: 1\r\n\r\n",
            b"\x16\x03\x01\x02\x00",
        ] {
            assert!(
                matches!(parse(b), Head::Other),
                "{:?}",
                String::from_utf8_lossy(b)
            );
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let seed = b"GET /images/a%2e%2e/b?token=x HTTP/1.1\r\nHost: h\r\nRange: bytes=0-1\r\n\r\n";
        for i in 0..seed.len() {
            for v in [0u8, b'\r', b'\n', b' ', b':', 0xff] {
                let mut b = seed.to_vec();
                b[i] = v;
                let _ = parse(&b);
                let _ = parse(&b[..i]);
            }
        }
    }
}
