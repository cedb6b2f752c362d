//! Serving files from a root directory: confined opens, byte ranges,
//! validators, and a streaming body with bounded memory.
//!
//! Confinement is by construction: `openat2(RESOLVE_BENEATH)` from a handle
//! on the root, so `..`, absolute paths and symlinks that point outside
//! fail in the kernel, whatever their spelling. The HTTP layer decodes
//! percent-escapes before calling [`open_beneath`].
//!
//! Where `openat2` is missing (`ENOSYS`: a seccomp filter that predates it,
//! as in systemd-nspawn 252 or older container runtimes' default profiles),
//! the same confinement is had by walking the path one component at a time
//! with `openat(O_NOFOLLOW)`: `..` is refused and no symlink is followed at
//! all, not even one that stays inside (stricter than `RESOLVE_BENEATH`).

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use rustix::fs::{Mode, OFlags, ResolveFlags};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;
use tokio::task::JoinHandle;

/// Bytes read per step; one step in flight per response, so a response
/// holds at most this much memory whatever the file size.
pub const CHUNK: usize = 512 * 1024;

/// At most this many ranges in one request; more are answered with the
/// whole file (as nginx's `max_ranges` does), not with a huge multipart.
pub const MAX_RANGES: usize = 16;

/// Opens `rel` (already percent-decoded) below `root`, refusing anything that
/// would resolve outside it. Only regular files are returned.
pub fn open_beneath(root: &Path, rel: &str) -> io::Result<File> {
    open_beneath_with(root, rel, ResolveFlags::empty()).map(|(f, _)| f)
}

/// [`open_beneath`] that never waits for the disk: it fails with
/// `WouldBlock` unless every path component is in the kernel's caches
/// (`RESOLVE_CACHED`, Linux 5.12+), so it may run on the async runtime's
/// threads; the caller falls back to [`open_beneath_stat`] on the blocking
/// pool. Returns the file's metadata too (one `statx`, needed anyway to
/// refuse what is not a regular file).
pub fn open_beneath_cached(root: &Path, rel: &str) -> io::Result<(File, std::fs::Metadata)> {
    open_beneath_with(root, rel, ResolveFlags::CACHED)
}

/// How long an image file stays open for the requests after the one that
/// opened it (nginx's `open_file_cache valid=`): within it, a file that is
/// replaced (renamed over), removed, moved away or made unreadable is still
/// served from the old open file; one that is changed in place is seen at
/// once (its metadata is read per request). With the root directory's own
/// reuse ([`ROOT_TTL`]), a replaced root is seen within twice this.
pub const OPEN_TTL: std::time::Duration = std::time::Duration::from_secs(1);
/// Files kept open at once.
const OPEN_KEPT: usize = 32;

struct OpenFile {
    root: std::path::PathBuf,
    rel: String,
    file: Arc<File>,
    opened: std::time::Instant,
}

impl OpenFile {
    fn fresh(&self, now: std::time::Instant) -> bool {
        now.duration_since(self.opened) < OPEN_TTL
    }

    fn is(&self, root: &Path, rel: &str) -> bool {
        self.rel == rel && self.root == root
    }
}

/// Files opened by [`open_beneath_shared`].
static OPEN: std::sync::Mutex<Vec<OpenFile>> = std::sync::Mutex::new(Vec::new());

/// [`open_beneath_cached`] for readers that give every read its offset
/// (`pread`, `sendfile` with an offset): a file opened less than
/// [`OPEN_TTL`] ago is handed out again, saving the `openat2` and the
/// `close` of each request for the same kernel or initramfs. Its metadata
/// is read afresh every time.
pub fn open_beneath_shared(root: &Path, rel: &str) -> io::Result<(Arc<File>, std::fs::Metadata)> {
    open_beneath_shared_at(root, rel, std::time::Instant::now())
}

/// Closes the kept files older than [`OPEN_TTL`] (bootd calls it every
/// [`OPEN_TTL`]; requests do too).
pub fn close_expired() {
    close_expired_at(std::time::Instant::now());
}

fn close_expired_at(now: std::time::Instant) {
    OPEN.lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|o| o.fresh(now));
}

fn open_beneath_shared_at(
    root: &Path,
    rel: &str,
    now: std::time::Instant,
) -> io::Result<(Arc<File>, std::fs::Metadata)> {
    let kept = {
        let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
        // Oldest first: one look says whether any has expired.
        if open.first().is_some_and(|o| !o.fresh(now)) {
            open.retain(|o| o.fresh(now));
        }
        open.iter()
            .find(|o| o.is(root, rel) && o.fresh(now))
            .map(|o| Arc::clone(&o.file))
    };
    if let Some(file) = kept {
        let md = file.metadata()?;
        if md.is_file() {
            return Ok((file, md));
        }
    }
    let (file, md) = open_beneath_cached(root, rel)?;
    let file = Arc::new(file);
    let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
    open.retain(|o| o.fresh(now) && !o.is(root, rel));
    if open.len() >= OPEN_KEPT {
        open.remove(0);
    }
    open.push(OpenFile {
        root: root.to_path_buf(),
        rel: rel.to_owned(),
        file: Arc::clone(&file),
        opened: now,
    });
    Ok((file, md))
}

/// [`open_beneath`] with the file's metadata.
pub fn open_beneath_stat(root: &Path, rel: &str) -> io::Result<(File, std::fs::Metadata)> {
    open_beneath_with(root, rel, ResolveFlags::empty())
}

fn open_beneath_with(
    root: &Path,
    rel: &str,
    extra: ResolveFlags,
) -> io::Result<(File, std::fs::Metadata)> {
    if rel.contains('\0') {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"));
    }
    let rel = rel.trim_start_matches('/');
    let rel = if rel.is_empty() { "." } else { rel };
    let dir = root_dir(root, extra)?;
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd = match rustix::fs::openat2(
        &*dir,
        rel,
        flags,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS | extra,
    ) {
        // The walk may wait for the disk: not on the async threads.
        Err(rustix::io::Errno::NOSYS) if extra.contains(ResolveFlags::CACHED) => {
            return Err(io::ErrorKind::WouldBlock.into())
        }
        Err(rustix::io::Errno::NOSYS) => walk_beneath(&dir, rel, flags)?,
        r => r?,
    };
    let f = File::from(fd);
    let md = f.metadata()?;
    if !md.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "not a regular file",
        ));
    }
    Ok((f, md))
}

/// `rel` below `dir` without `openat2`: one `openat(O_NOFOLLOW)` per
/// component, directories as `O_PATH`; `..` refused, no symlink followed.
fn walk_beneath(
    dir: &rustix::fd::OwnedFd,
    rel: &str,
    flags: OFlags,
) -> io::Result<rustix::fd::OwnedFd> {
    use rustix::fd::AsFd;
    let parts: Vec<&str> = rel
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if parts.contains(&"..") {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "`..` in the path",
        ));
    }
    let Some((last, dirs)) = parts.split_last() else {
        return Ok(rustix::fs::openat(dir, ".", flags, Mode::empty())?);
    };
    let mut at: Option<rustix::fd::OwnedFd> = None;
    for d in dirs {
        let base = at.as_ref().map_or(dir.as_fd(), |f| f.as_fd());
        let next = rustix::fs::openat(
            base,
            *d,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        at = Some(next);
    }
    let base = at.as_ref().map_or(dir.as_fd(), |f| f.as_fd());
    Ok(rustix::fs::openat(
        base,
        *last,
        flags | OFlags::NOFOLLOW,
        Mode::empty(),
    )?)
}

/// How long an opened root directory is reused. Within it, a root that is
/// replaced (renamed away and created anew) still resolves in the old
/// directory; after it, the path is opened again.
const ROOT_TTL: std::time::Duration = std::time::Duration::from_secs(1);
/// Roots kept open at once (bootd has two or three: images, TFTP, ...).
const ROOTS_KEPT: usize = 16;

/// Open roots, by path: opening the root for every request was an
/// `openat2` and a `close` per file served.
static ROOTS: std::sync::Mutex<
    Vec<(
        std::path::PathBuf,
        Arc<rustix::fd::OwnedFd>,
        std::time::Instant,
    )>,
> = std::sync::Mutex::new(Vec::new());

fn root_dir(root: &Path, extra: ResolveFlags) -> io::Result<Arc<rustix::fd::OwnedFd>> {
    let now = std::time::Instant::now();
    {
        let roots = ROOTS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, fd, _)) = roots
            .iter()
            .find(|(p, _, at)| p == root && now.duration_since(*at) < ROOT_TTL)
        {
            return Ok(Arc::clone(fd));
        }
    }
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let fd = Arc::new(
        match rustix::fs::openat2(rustix::fs::CWD, root, flags, Mode::empty(), extra) {
            // The root is the operator's path: opened as given.
            Err(rustix::io::Errno::NOSYS) => {
                rustix::fs::openat(rustix::fs::CWD, root, flags, Mode::empty())?
            }
            r => r?,
        },
    );
    let mut roots = ROOTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    roots.retain(|(p, _, _)| p != root);
    if roots.len() >= ROOTS_KEPT {
        roots.remove(0);
    }
    roots.push((root.to_path_buf(), Arc::clone(&fd), now));
    Ok(fd)
}

/// A strong validator from size and modification time (nginx's form).
pub fn etag(len: u64, mtime: SystemTime) -> String {
    let mut v = Vec::with_capacity(24);
    write_etag(&mut v, len, mtime);
    String::from_utf8(v).unwrap_or_default()
}

/// Appends [`etag`] to `buf`.
pub fn write_etag(buf: &mut Vec<u8>, len: u64, mtime: SystemTime) {
    fn hex(buf: &mut Vec<u8>, n: u64) {
        let digits = (64 - n.leading_zeros()).div_ceil(4).max(1);
        for i in (0..digits).rev() {
            buf.push(b"0123456789abcdef"[(n >> (i * 4) & 0xf) as usize]);
        }
    }
    buf.push(b'"');
    hex(buf, epoch_secs(mtime));
    buf.push(b'-');
    hex(buf, len);
    buf.push(b'"');
}

/// Seconds since 1970; times before it count as 1970.
fn epoch_secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `t` as an HTTP date (IMF-fixdate, RFC 9110); times before 1970 as 1970,
/// after 9999 as 9999's last second.
pub fn http_date(t: SystemTime) -> String {
    let mut v = Vec::with_capacity(29);
    write_http_date(&mut v, t);
    String::from_utf8(v).unwrap_or_default()
}

/// Appends [`http_date`] to `buf`. A response carries two dates (now and
/// the file's modification time) that repeat from one response to the
/// next, and formatting one costs more than the rest of a header: the
/// last two are kept per thread.
pub fn write_http_date(buf: &mut Vec<u8>, t: SystemTime) {
    use std::cell::RefCell;
    thread_local! {
        static DATES: RefCell<[(u64, [u8; 29]); 2]> = const { RefCell::new([(u64::MAX, [0; 29]); 2]) };
    }
    // httpdate cannot format years after 9999.
    let secs = epoch_secs(t).min(253_402_300_799);
    DATES.with(|d| {
        let mut d = d.borrow_mut();
        if let Some((_, s)) = d.iter().find(|(k, _)| *k == secs) {
            buf.extend_from_slice(s);
            return;
        }
        let s =
            httpdate::fmt_http_date(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs));
        buf.extend_from_slice(s.as_bytes());
        // IMF-fixdate is 29 bytes for years 1970-9999.
        if let Ok(b) = <[u8; 29]>::try_from(s.as_bytes()) {
            d[1] = d[0];
            d[0] = (secs, b);
        }
    });
}

/// What a `Range` header asks of a file of `len` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ranges {
    /// No usable Range: send the whole file (200).
    Full,
    /// Inclusive byte ranges, all within the file (206).
    Some(Vec<(u64, u64)>),
    /// Syntactically fine but nothing inside the file (416).
    Unsatisfiable,
}

/// RFC 9110 §14: `bytes=0-99`, `bytes=100-`, `bytes=-100`, comma lists.
/// A malformed header is ignored (whole file), as the RFC allows.
pub fn parse_range(header: &str, len: u64) -> Ranges {
    let Some(spec) = header.trim().strip_prefix("bytes=") else {
        return Ranges::Full;
    };
    let mut out = Vec::new();
    let mut parts = 0;
    for part in spec.split(',') {
        parts += 1;
        if parts > MAX_RANGES {
            return Ranges::Full;
        }
        let part = part.trim();
        let Some((a, b)) = part.split_once('-') else {
            return Ranges::Full;
        };
        let num = |s: &str| -> Option<u64> {
            if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
                None
            } else {
                s.parse().ok()
            }
        };
        let range = match (a.is_empty(), b.is_empty()) {
            (true, true) => return Ranges::Full,
            // Suffix: the last n bytes.
            (true, false) => match num(b) {
                Some(0) => None,
                Some(n) if len > 0 => Some((len.saturating_sub(n), len - 1)),
                Some(_) => None,
                None => return Ranges::Full,
            },
            (false, _) => {
                let Some(start) = num(a) else {
                    return Ranges::Full;
                };
                let end = if b.is_empty() {
                    len.saturating_sub(1)
                } else {
                    match num(b) {
                        Some(e) if e >= start => e.min(len.saturating_sub(1)),
                        _ => return Ranges::Full,
                    }
                };
                (start < len).then_some((start, end))
            }
        };
        if let Some(r) = range {
            out.push(r);
        }
    }
    if out.is_empty() {
        return Ranges::Unsatisfiable;
    }
    // Refuse amplification: overlapping ranges adding up to more than the
    // file twice over get the plain file instead.
    let total: u64 = out.iter().map(|(s, e)| e - s + 1).sum();
    if out.len() > 1 && total > len.saturating_mul(2) {
        return Ranges::Full;
    }
    Ranges::Some(out)
}

/// One piece of a response body: literal bytes, or a span of the file.
#[derive(Debug, Clone)]
pub enum Part {
    Bytes(Bytes),
    File { offset: u64, len: u64 },
}

/// Builds the parts of a `multipart/byteranges` body and its total length.
pub fn multipart(
    ranges: &[(u64, u64)],
    file_len: u64,
    content_type: &str,
    boundary: &str,
) -> (Vec<Part>, u64) {
    let mut parts = Vec::new();
    for (s, e) in ranges {
        let head = format!("\r\n--{boundary}\r\nContent-Type: {content_type}\r\nContent-Range: bytes {s}-{e}/{file_len}\r\n\r\n");
        parts.push(Part::Bytes(Bytes::from(head)));
        parts.push(Part::File {
            offset: *s,
            len: e - s + 1,
        });
    }
    parts.push(Part::Bytes(Bytes::from(format!("\r\n--{boundary}--\r\n"))));
    let total = parts
        .iter()
        .map(|p| match p {
            Part::Bytes(b) => b.len() as u64,
            Part::File { len, .. } => *len,
        })
        .sum();
    (parts, total)
}

/// Called with the byte count of every piece of a body sent (metrics, the
/// boot timeline).
pub type OnBytes = Arc<dyn Fn(u64) + Send + Sync>;

/// Over plain HTTP ([`crate::fast_get`]), a file or single range up to this
/// size goes out with `sendfile(2)` on the runtime thread; a larger one
/// with `sendfile(2)` from a blocking-pool thread, so that waiting for the
/// disk never stalls the runtime (and one such thread per big download is
/// cheap next to copying every byte through user space).
pub const SENDFILE_INLINE_MAX: u64 = 1024 * 1024;

/// A response extension offering the one file range behind a 200 or 206
/// response's [`FileBody`] to a connection that can `sendfile(2)` it instead
/// of polling the body (plain HTTP; see [`crate::fast_get`]). Whoever sends the
/// file reports the bytes through `on_bytes`, as the body would have.
#[derive(Clone)]
pub struct Sendfile {
    pub file: Arc<File>,
    pub offset: u64,
    pub len: u64,
    pub on_bytes: Option<OnBytes>,
}

/// A body that streams parts of a file, one [`CHUNK`] read at a time on the
/// blocking pool; nothing is read before the client wants it.
pub struct FileBody {
    file: Arc<File>,
    parts: std::collections::VecDeque<Part>,
    remaining: u64,
    pending: Option<JoinHandle<io::Result<Bytes>>>,
    /// Called with the byte count of every frame sent (for metrics).
    on_bytes: Option<OnBytes>,
    /// The last chunk handed to hyper. Once hyper has written and dropped
    /// it, its (already initialised) buffer is reused for the next read:
    /// one allocation per response instead of one zeroed buffer per chunk.
    spent: Option<Bytes>,
}

impl FileBody {
    pub fn new(file: Arc<File>, parts: Vec<Part>, on_bytes: Option<OnBytes>) -> FileBody {
        let remaining = parts
            .iter()
            .map(|p| match p {
                Part::Bytes(b) => b.len() as u64,
                Part::File { len, .. } => *len,
            })
            .sum();
        FileBody {
            file,
            parts: parts.into(),
            remaining,
            pending: None,
            on_bytes,
            spent: None,
        }
    }
}

impl Body for FileBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = &mut *self;
        loop {
            if let Some(h) = this.pending.as_mut() {
                let res = match Pin::new(h).poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(r) => r,
                };
                this.pending = None;
                let bytes = match res {
                    Ok(Ok(b)) => b,
                    Ok(Err(e)) => return Poll::Ready(Some(Err(e))),
                    Err(e) => return Poll::Ready(Some(Err(io::Error::other(e)))),
                };
                return Poll::Ready(Some(Ok(this.emit(bytes))));
            }
            match this.parts.pop_front() {
                None => return Poll::Ready(None),
                Some(Part::Bytes(b)) => return Poll::Ready(Some(Ok(this.emit(b)))),
                Some(Part::File { len: 0, .. }) => continue,
                Some(Part::File { offset, len }) => {
                    let n = len.min(CHUNK as u64);
                    if len > n {
                        this.parts.push_front(Part::File {
                            offset: offset + n,
                            len: len - n,
                        });
                    }
                    let n = n as usize;
                    let mut buf = this.buffer(n);
                    // Page-cache hits are read right here (RWF_NOWAIT); only
                    // what would wait for the disk goes to the blocking pool.
                    let done = match read_nowait(&this.file, offset, &mut buf) {
                        Ok(d) => d,
                        Err(e) => return Poll::Ready(Some(Err(e))),
                    };
                    if done == n {
                        let b = buf.freeze();
                        this.spent = Some(b.clone());
                        return Poll::Ready(Some(Ok(this.emit(b))));
                    }
                    let file = Arc::clone(&this.file);
                    this.pending = Some(tokio::task::spawn_blocking(move || {
                        fill_at(&file, offset, buf, done)
                    }));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0 && self.pending.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

impl FileBody {
    /// An initialised buffer of `n` bytes: the spent chunk if hyper is done
    /// with it, else a fresh zeroed one.
    fn buffer(&mut self, n: usize) -> BytesMut {
        match self.spent.take().map(Bytes::try_into_mut) {
            Some(Ok(mut m)) if m.capacity() >= n => {
                m.resize(n, 0);
                m
            }
            _ => BytesMut::zeroed(n),
        }
    }

    fn emit(&mut self, b: Bytes) -> Frame<Bytes> {
        let n = b.len() as u64;
        self.remaining = self.remaining.saturating_sub(n);
        if let Some(f) = &self.on_bytes {
            f(n);
        }
        Frame::data(b)
    }
}

use std::future::Future;

/// Reads into `buf` from `offset` with `RWF_NOWAIT`: stops at the first
/// byte that is not in the page cache. Returns how many bytes were read.
fn read_nowait(file: &File, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        let mut iov = [io::IoSliceMut::new(&mut buf[done..])];
        match rustix::io::preadv2(
            file,
            &mut iov,
            offset + done as u64,
            rustix::io::ReadWriteFlags::NOWAIT,
        ) {
            Ok(0) => return Err(shrank()),
            Ok(k) => done += k,
            Err(rustix::io::Errno::INTR) => {}
            // Not cached, or a filesystem without RWF_NOWAIT.
            Err(rustix::io::Errno::AGAIN | rustix::io::Errno::OPNOTSUPP) => break,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(done)
}

/// Fills `buf[done..]` from `offset + done`, waiting for the disk (blocking
/// pool only).
fn fill_at(file: &File, offset: u64, mut buf: BytesMut, mut done: usize) -> io::Result<Bytes> {
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => return Err(shrank()),
            Ok(k) => done += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(buf.freeze())
}

/// The file shrank under us: the promised length can't be kept.
fn shrank() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "file shrank while being served",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The walk used where `openat2` is missing confines as strictly: the
    /// file below the root, nothing through `..`, no symlink at all.
    #[test]
    fn the_walk_without_openat2_stays_beneath_and_follows_no_symlink() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        std::fs::create_dir_all(root.join("lab/sub")).unwrap();
        std::fs::write(root.join("lab/sub/kernel"), b"k").unwrap();
        std::fs::write(t.path().join("secret"), b"s").unwrap();
        std::os::unix::fs::symlink("../../secret", root.join("lab/out")).unwrap();
        std::os::unix::fs::symlink("sub/kernel", root.join("lab/in")).unwrap();
        std::os::unix::fs::symlink(t.path(), root.join("up")).unwrap();
        let dir = rustix::fs::openat(
            rustix::fs::CWD,
            &root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        let flags = OFlags::RDONLY | OFlags::CLOEXEC;
        let f = File::from(walk_beneath(&dir, "lab//./sub/kernel", flags).unwrap());
        let mut got = String::new();
        std::io::Read::read_to_string(&mut &f, &mut got).unwrap();
        assert_eq!(got, "k");
        for bad in ["lab/../../secret", "..", "lab/out", "lab/in", "up/secret"] {
            assert!(walk_beneath(&dir, bad, flags).is_err(), "{bad} was opened");
        }
        assert!(walk_beneath(&dir, "lab/missing", flags).is_err());
    }

    /// The kept files are one table for the process: its tests take turns.
    static SHARED: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn shared_files_are_reused_within_their_ttl_and_their_metadata_is_fresh() {
        let _turn = SHARED.lock().unwrap_or_else(|p| p.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        std::fs::write(&path, b"one").unwrap();
        let t0 = std::time::Instant::now();
        let (a, md) = open_beneath_shared_at(dir.path(), "k", t0).unwrap();
        assert_eq!(md.len(), 3);
        // Changed in place: the same open file, the new length.
        std::fs::write(&path, b"three").unwrap();
        let (b, md) = open_beneath_shared_at(dir.path(), "k", t0 + OPEN_TTL / 2).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(md.len(), 5);
        // Replaced by a rename: the old inode until the TTL is over, then the new file.
        std::fs::write(dir.path().join("k.new"), b"replaced!").unwrap();
        std::fs::rename(dir.path().join("k.new"), &path).unwrap();
        let (c, md) = open_beneath_shared_at(dir.path(), "k", t0 + OPEN_TTL / 2).unwrap();
        assert!(Arc::ptr_eq(&a, &c));
        assert_eq!(md.len(), 5);
        let (d, md) = open_beneath_shared_at(dir.path(), "k", t0 + OPEN_TTL).unwrap();
        assert!(!Arc::ptr_eq(&a, &d));
        assert_eq!(md.len(), 9);
        // Removed: nothing is served once the TTL is over, and escapes are refused as before.
        std::fs::remove_file(&path).unwrap();
        assert!(open_beneath_shared_at(dir.path(), "k", t0 + OPEN_TTL * 3).is_err());
        assert!(open_beneath_shared_at(dir.path(), "../k", t0).is_err());
    }

    #[test]
    fn shared_files_are_kept_per_root_and_closed_when_stale() {
        let _turn = SHARED.lock().unwrap_or_else(|p| p.into_inner());
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(a.path().join("k"), b"a").unwrap();
        std::fs::write(b.path().join("k"), b"bb").unwrap();
        let t0 = std::time::Instant::now();
        let (fa, md) = open_beneath_shared_at(a.path(), "k", t0).unwrap();
        assert_eq!(md.len(), 1);
        let (fb, md) = open_beneath_shared_at(b.path(), "k", t0).unwrap();
        assert_eq!(md.len(), 2);
        assert!(!Arc::ptr_eq(&fa, &fb));
        let kept = |root: &Path| {
            OPEN.lock()
                .unwrap()
                .iter()
                .filter(|o| o.root == root)
                .count()
        };
        assert_eq!((kept(a.path()), kept(b.path())), (1, 1));
        close_expired_at(t0 + OPEN_TTL);
        assert_eq!((kept(a.path()), kept(b.path())), (0, 0));
    }

    #[test]
    fn validators_and_dates() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(784_111_777);
        assert_eq!(etag(0, SystemTime::UNIX_EPOCH), "\"0-0\"");
        assert_eq!(
            etag(1_048_576, t),
            format!("\"{:x}-{:x}\"", 784_111_777u64, 1_048_576u64)
        );
        assert_eq!(
            etag(u64::MAX, t),
            format!("\"{:x}-{:x}\"", 784_111_777u64, u64::MAX)
        );
        // Two dates alternate (now, a file's mtime): both stay right.
        for _ in 0..3 {
            assert_eq!(http_date(t), "Sun, 06 Nov 1994 08:49:37 GMT");
            assert_eq!(
                http_date(SystemTime::UNIX_EPOCH),
                "Thu, 01 Jan 1970 00:00:00 GMT"
            );
        }
        assert_eq!(
            http_date(SystemTime::UNIX_EPOCH - std::time::Duration::from_secs(5)),
            "Thu, 01 Jan 1970 00:00:00 GMT"
        );
        let far = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(400_000_000_000);
        assert_eq!(http_date(far), "Fri, 31 Dec 9999 23:59:59 GMT");
    }

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-99", 1000), Ranges::Some(vec![(0, 99)]));
        assert_eq!(
            parse_range("bytes=900-", 1000),
            Ranges::Some(vec![(900, 999)])
        );
        assert_eq!(
            parse_range("bytes=-100", 1000),
            Ranges::Some(vec![(900, 999)])
        );
        assert_eq!(
            parse_range("bytes=-5000", 1000),
            Ranges::Some(vec![(0, 999)])
        );
        assert_eq!(
            parse_range("bytes=990-2000", 1000),
            Ranges::Some(vec![(990, 999)])
        );
        assert_eq!(
            parse_range("bytes=0-0,-1", 1000),
            Ranges::Some(vec![(0, 0), (999, 999)])
        );
        assert_eq!(parse_range("bytes=1000-", 1000), Ranges::Unsatisfiable);
        assert_eq!(parse_range("bytes=-0", 1000), Ranges::Unsatisfiable);
        assert_eq!(parse_range("bytes=5-1", 1000), Ranges::Full);
        assert_eq!(parse_range("items=0-1", 1000), Ranges::Full);
        assert_eq!(parse_range("bytes=a-b", 1000), Ranges::Full);
        assert_eq!(parse_range("bytes=+1-2", 1000), Ranges::Full);
        let many = (0..17)
            .map(|i| format!("{i}-{i}"))
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(parse_range(&format!("bytes={many}"), 1000), Ranges::Full);
        // Amplification: the same whole file three times.
        assert_eq!(parse_range("bytes=0-,0-,0-", 1000), Ranges::Full);
        // Beyond 4 GiB.
        let big = 5u64 << 30;
        assert_eq!(
            parse_range("bytes=4294967296-", big),
            Ranges::Some(vec![(1 << 32, big - 1)])
        );
    }

    #[test]
    fn confinement() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/ok"), b"ok").unwrap();
        std::fs::write(dir.path().join("secret"), b"no").unwrap();
        std::os::unix::fs::symlink("../secret", root.join("out")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("abs")).unwrap();
        std::os::unix::fs::symlink("sub/ok", root.join("in")).unwrap();
        assert!(open_beneath(&root, "sub/ok").is_ok());
        assert!(open_beneath(&root, "/sub/ok").is_ok());
        assert!(
            open_beneath(&root, "in").is_ok(),
            "a symlink inside the root is fine"
        );
        for bad in [
            "../secret",
            "sub/../../secret",
            "out",
            "abs",
            "sub",
            "",
            "/",
            "nope",
        ] {
            assert!(open_beneath(&root, bad).is_err(), "{bad} must not open");
        }
    }

    /// A root that is replaced (renamed away, made anew) is served from the
    /// new directory once the kept one is older than `ROOT_TTL`.
    #[test]
    fn a_replaced_root_is_opened_again() {
        use std::io::Read;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("f"), b"old").unwrap();
        let read = || {
            let mut s = String::new();
            open_beneath(&root, "f")
                .unwrap()
                .read_to_string(&mut s)
                .unwrap();
            s
        };
        assert_eq!(read(), "old");
        std::fs::rename(&root, dir.path().join("gone")).unwrap();
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("f"), b"new").unwrap();
        std::thread::sleep(ROOT_TTL + std::time::Duration::from_millis(50));
        assert_eq!(read(), "new");
    }
}
