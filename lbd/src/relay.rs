//! Moves bytes between a client and a backend, both directions at once, in
//! one task.
//!
//! - Half-close: when one side ends its sending (FIN), the other side's
//!   socket is shut down for writing once everything before it is delivered;
//!   the opposite direction goes on until it ends too.
//! - Zero copy where it pays: a direction starts with a 16 KiB buffer
//!   (request/response traffic: one `read` and one `write`, as HAProxy
//!   does; a short read is taken to have drained the socket, so no `recv`
//!   is spent learning EAGAIN); when a read fills the whole buffer the direction is carrying
//!   bulk data and switches to `splice(2)` through a pipe (Linux), so the
//!   bytes never enter user space.
//! - Idle timeout: no byte in either direction for `idle` ends both. The
//!   timer is re-armed lazily (once per idle period), not per read.
//!
//! - Replay: [`until_answered`] runs first and keeps what the client sends
//!   (in the up buffer, no extra copy) until the backend's first byte, so a
//!   backend that dies before answering can be replaced (see `proxy`).
//!
//! Cancel-safe: dropping the future closes nothing by itself; the caller owns
//! the sockets.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::time::Instant;

const BUF: usize = 16 * 1024;
#[cfg(target_os = "linux")]
const PIPE: usize = 256 * 1024;

/// Why a relay ended other than by both sides closing.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("idle for {0:?}")]
    Idle(Duration),
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Byte counters for the two directions.
#[derive(Debug, Clone, Copy)]
pub struct Counters<'a> {
    pub to_backend: &'a AtomicU64,
    pub from_backend: &'a AtomicU64,
}

/// The two 16 KiB buffers a connection uses: client → backend (which also
/// keeps what the client sent before the backend's first byte, for
/// [`until_answered`]) and back.
pub struct Buffers {
    up: Pooled,
    down: Pooled,
}

impl Buffers {
    pub fn new() -> Buffers {
        Buffers {
            up: Pooled::take(),
            down: Pooled::take(),
        }
    }
}

impl Default for Buffers {
    fn default() -> Self {
        Buffers::new()
    }
}

/// Buffers given back when a connection ends, for the next one: a new
/// connection then costs no allocation (and no zeroing), and the allocator
/// does not give memory back to the kernel and ask for it again with every
/// few connections (`brk` was 1 syscall in 6 per connection under a
/// connection-per-request load).
static POOL: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());
/// 4 MiB at most kept for reuse.
const POOL_MAX: usize = 256;

/// A [`BUF`]-byte buffer that goes back to [`POOL`] when dropped.
struct Pooled(Vec<u8>);

impl Pooled {
    fn take() -> Pooled {
        let v = POOL.lock().unwrap_or_else(|p| p.into_inner()).pop();
        Pooled(v.unwrap_or_else(|| vec![0u8; BUF]))
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
        if pool.len() < POOL_MAX {
            pool.push(std::mem::take(&mut self.0));
        }
    }
}

impl std::ops::Deref for Pooled {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl std::ops::DerefMut for Pooled {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

/// What the client sent before the backend answered.
#[derive(Debug, Default)]
pub struct Unanswered {
    /// Bytes at the start of `Buffers::up`, already sent to the backend.
    pub len: usize,
    /// The client has ended its sending (FIN), and the backend was told.
    pub client_eof: bool,
}

/// How the first exchange ended.
#[derive(Debug)]
pub enum First {
    /// The backend sent its first bytes (already passed on), or the client
    /// filled the whole buffer: [`relay`] takes over.
    Relay,
    /// The backend reset or closed before sending anything, having been sent
    /// `Unanswered::len` bytes (maybe none: a backend killed between the
    /// connect and the client's first bytes): they may go to another backend.
    BackendFailed(io::Error),
}

/// Passes the client's bytes to the backend, keeping them, until the
/// backend's first byte; see [`First`]. Errors are the client's (or the idle
/// timeout).
pub async fn until_answered(
    client: &TcpStream,
    backend: &TcpStream,
    bufs: &mut Buffers,
    u: &mut Unanswered,
    idle: Duration,
    counters: Counters<'_>,
) -> Result<First, RelayError> {
    let mut deadline = Instant::now() + idle;
    loop {
        let Buffers { up, down } = &mut *bufs;
        let reading_client = !u.client_eof && u.len < up.len();
        tokio::select! {
            biased;
            r = runtime::net::read_some(backend, down) => match r {
                Ok(0) => return Ok(First::BackendFailed(io::Error::new(io::ErrorKind::UnexpectedEof, "backend closed before answering"))),
                Ok(n) => {
                    write_all(client, &down[..n]).await?;
                    counters.from_backend.fetch_add(n as u64, Relaxed);
                    return Ok(First::Relay);
                }
                Err(e) => return Ok(First::BackendFailed(e)),
            },
            r = runtime::net::read_some(client, &mut up[u.len..]), if reading_client => {
                let n = r?;
                if n == 0 {
                    u.client_eof = true;
                    if let Err(e) = rustix::net::shutdown(backend, rustix::net::Shutdown::Write) {
                        return Ok(First::BackendFailed(e.into()));
                    }
                } else {
                    if let Err(e) = write_all(backend, &up[u.len..u.len + n]).await {
                        u.len += n;
                        return Ok(First::BackendFailed(e));
                    }
                    u.len += n;
                    counters.to_backend.fetch_add(n as u64, Relaxed);
                    if u.len == up.len() {
                        // More than can be replayed: from here on, a plain relay.
                        return Ok(First::Relay);
                    }
                }
                deadline = Instant::now() + idle;
            },
            _ = tokio::time::sleep_until(deadline) => return Err(RelayError::Idle(idle)),
        }
    }
}

/// Sends the kept bytes of `u` to a new backend (and its FIN, if the client
/// sent one).
pub async fn replay(backend: &TcpStream, bufs: &Buffers, u: &Unanswered) -> io::Result<()> {
    write_all(backend, &bufs.up[..u.len]).await?;
    if u.client_eof {
        rustix::net::shutdown(backend, rustix::net::Shutdown::Write)?;
    }
    Ok(())
}

async fn write_all(s: &TcpStream, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        s.writable().await?;
        match s.try_write(data) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Relays until both directions have ended, one fails, or `idle` passes with
/// no traffic.
pub async fn relay(
    client: &mut TcpStream,
    backend: &mut TcpStream,
    idle: Duration,
    counters: Counters<'_>,
    bufs: Buffers,
) -> Result<(), RelayError> {
    let start = Instant::now();
    let last = AtomicU64::new(0);
    let (cr, cw) = client.split();
    let (br, bw) = backend.split();
    let ended = AtomicBool::new(false);
    let up = pump(cr, bw, counters.to_backend, &last, start, bufs.up, &ended);
    let down = pump(
        br,
        cw,
        counters.from_backend,
        &last,
        start,
        bufs.down,
        &ended,
    );
    let both = async { tokio::try_join!(up, down) };
    tokio::pin!(both);
    let mut deadline = start + idle;
    loop {
        tokio::select! {
            biased;
            r = &mut both => return r.map(|_| ()).map_err(RelayError::from),
            _ = tokio::time::sleep_until(deadline) => {
                let seen = start + Duration::from_millis(last.load(Relaxed));
                if seen + idle <= Instant::now() {
                    return Err(RelayError::Idle(idle));
                }
                deadline = seen + idle;
            }
        }
    }
}

/// One direction: `src` until its EOF, then shuts `dst` down for writing,
/// unless the other direction has ended already (`ended`): then both
/// sockets are about to be closed, and `close` sends that FIN anyway
/// (nothing is left unread on `dst` to turn it into a reset), so one
/// syscall per connection is saved.
async fn pump(
    src: ReadHalf<'_>,
    mut dst: WriteHalf<'_>,
    bytes: &AtomicU64,
    last: &AtomicU64,
    start: Instant,
    mut buf: Pooled,
    ended: &AtomicBool,
) -> io::Result<()> {
    loop {
        let n = runtime::net::read_some(src.as_ref(), &mut buf).await?;
        if n == 0 {
            return finish(&mut dst, ended).await;
        }
        dst.write_all(&buf[..n]).await?;
        bytes.fetch_add(n as u64, Relaxed);
        last.store(start.elapsed().as_millis() as u64, Relaxed);
        #[cfg(target_os = "linux")]
        if n == BUF {
            drop(buf);
            splice::pump(src.as_ref(), dst.as_ref(), bytes, last, start).await?;
            return finish(&mut dst, ended).await;
        }
    }
}

async fn finish(dst: &mut WriteHalf<'_>, ended: &AtomicBool) -> io::Result<()> {
    if ended.swap(true, Relaxed) {
        return Ok(());
    }
    dst.shutdown().await
}

#[cfg(target_os = "linux")]
mod splice {
    use super::PIPE;
    use rustix::pipe::{pipe_with, splice, PipeFlags, SpliceFlags};
    use std::io;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use tokio::io::Interest;
    use tokio::net::TcpStream;
    use tokio::time::Instant;

    /// `src` → pipe → `dst` until `src`'s EOF. Readiness is cleared only by a
    /// real EAGAIN: a short splice may stop at the pipe's capacity, and
    /// clearing then would wait forever on an edge that already passed.
    pub(super) async fn pump(
        src: &TcpStream,
        dst: &TcpStream,
        bytes: &AtomicU64,
        last: &AtomicU64,
        start: Instant,
    ) -> io::Result<()> {
        let (pr, pw) = pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC)?;
        // A bigger pipe moves more per syscall; the default (64 KiB) is fine too.
        let cap = rustix::pipe::fcntl_setpipe_size(&pw, PIPE).unwrap_or(64 * 1024);
        let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
        loop {
            let n = loop {
                src.readable().await?;
                match src.try_io(Interest::READABLE, || {
                    Ok(splice(src, None, &pw, None, cap, flags)?)
                }) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(e),
                }
            };
            if n == 0 {
                return Ok(());
            }
            let mut left = n;
            while left > 0 {
                dst.writable().await?;
                match dst.try_io(Interest::WRITABLE, || {
                    Ok(splice(&pr, None, dst, None, left, flags)?)
                }) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(k) => left -= k,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(e),
                }
            }
            bytes.fetch_add(n as u64, Relaxed);
            last.store(start.elapsed().as_millis() as u64, Relaxed);
        }
    }
}
