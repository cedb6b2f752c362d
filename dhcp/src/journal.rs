//! A lease file: JSON records, one per line, appended and `fdatasync`ed
//! before the reply they back is sent; records arriving while a sync is in
//! progress are written together and share the next sync (group commit).
//! The file is compacted (rewritten with one record per lease, atomically)
//! when it opens and when it has grown well past its records. DHCPv4's and
//! DHCPv6's lease tables both keep theirs this way.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::io::{self, BufRead, Write};
use std::path::PathBuf;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, error, warn};

/// A lease table as its file holds it.
pub trait Records: Clone + Send + 'static {
    type Rec: Serialize + Clone + Send + 'static;
    fn apply(&mut self, r: Self::Rec);
    /// How many records a compacted file holds.
    fn count(&self) -> usize;
    /// The compacted file's content.
    fn render(&self) -> io::Result<Vec<u8>>;
    /// Forgets records that no longer matter at `now` (Unix seconds), so
    /// that the next compaction leaves them out. Called about once a
    /// [`SWEEP_EVERY`]; the default keeps everything.
    fn sweep(&mut self, _now: u64) {}
}

/// The table a lease file's content `r` holds, and how many lines were
/// unreadable.
pub fn recover<T>(r: impl BufRead) -> io::Result<(T, usize)>
where
    T: Records + Default,
    T::Rec: DeserializeOwned,
{
    let mut t = T::default();
    let mut bad = 0;
    for line in r.split(b'\n') {
        let line = line?;
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice::<T::Rec>(&line) {
            Ok(l) => t.apply(l),
            Err(_) => bad += 1,
        }
    }
    Ok((t, bad))
}

/// How often the writer offers its table a [`Records::sweep`].
pub const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Records that are durable together: one request's.
type Pending<R> = (Vec<R>, oneshot::Sender<io::Result<()>>);

/// A queued batch: resolves once it is on disk.
pub type Durable = oneshot::Receiver<io::Result<()>>;

/// The writer thread's handle.
pub struct Journal<T: Records> {
    tx: mpsc::Sender<Pending<T::Rec>>,
}

impl<T: Records> Clone for Journal<T> {
    fn clone(&self) -> Self {
        Journal {
            tx: self.tx.clone(),
        }
    }
}

impl<T: Records> std::fmt::Debug for Journal<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Journal")
    }
}

impl<T: Records> Journal<T> {
    /// Compacts `path` to `table` (what was read from it) and starts the
    /// writer on it.
    pub fn start(path: PathBuf, table: T, thread: &str) -> io::Result<Journal<T>> {
        runtime::fs::write_atomic(&path, &table.render()?, 0o640)?;
        let file = std::fs::OpenOptions::new().append(true).open(&path)?;
        let (tx, rx) = mpsc::channel::<Pending<T::Rec>>(4096);
        let log = Log {
            lines: table.count(),
            table,
            file,
            path,
        };
        std::thread::Builder::new()
            .name(thread.into())
            .spawn(move || writer(log, rx))?;
        Ok(Journal { tx })
    }

    /// Resolves once `rec` is on disk (fdatasync'ed).
    pub async fn commit(&self, rec: T::Rec) -> io::Result<()> {
        let wait = self.enqueue(vec![rec]).await?;
        settled(wait).await
    }

    /// Queues `recs`, to be written in the order `enqueue` is called (a
    /// caller that updates its table and enqueues in one sequence keeps the
    /// file in the table's order). Waits only while the queue is full.
    pub async fn enqueue(&self, recs: Vec<T::Rec>) -> io::Result<Durable> {
        let (done, wait) = oneshot::channel();
        self.tx
            .send((recs, done))
            .await
            .map_err(|_| io::Error::other("lease writer stopped"))?;
        Ok(wait)
    }
}

/// What a queued batch came to.
pub async fn settled(wait: Durable) -> io::Result<()> {
    wait.await
        .map_err(|_| io::Error::other("lease writer stopped"))?
}

/// The lease file as the writer keeps it: the records it holds (a copy of
/// the table, from the same records) and how many lines it has, so that it
/// can be compacted while bootd runs.
struct Log<T> {
    file: std::fs::File,
    path: PathBuf,
    table: T,
    lines: usize,
}

/// The file grows by a line per commit (every renewal); once it holds this
/// many lines beyond two per lease, it is rewritten with one per lease.
pub(crate) const COMPACT_SLACK: usize = 4096;

/// Appends `buf` and syncs it. After a failed or short write the file is
/// cut back to where it was, so that a half-written record cannot swallow
/// the next one (its line would be unreadable at the next start).
pub fn append(file: &mut (impl Write + Truncate), buf: &[u8]) -> io::Result<()> {
    let before = file.size()?;
    let res = file.write_all(buf).and_then(|()| file.sync());
    if res.is_err() {
        if let Err(e) = file.truncate(before) {
            error!(error = %e, "lease file could not be cut back after a failed write");
        }
    }
    res
}

/// What [`append`] needs of a file besides writing (a trait so that the
/// failure paths can be tested without a full disk).
pub trait Truncate {
    fn size(&mut self) -> io::Result<u64>;
    fn truncate(&mut self, len: u64) -> io::Result<()>;
    fn sync(&mut self) -> io::Result<()>;
}

impl Truncate for std::fs::File {
    fn size(&mut self) -> io::Result<u64> {
        self.metadata().map(|m| m.len())
    }
    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.set_len(len)?;
        self.sync_data()
    }
    fn sync(&mut self) -> io::Result<()> {
        self.sync_data()
    }
}

/// Group commit: take everything queued, write it, one fdatasync, answer
/// all; compact the file when it has grown well past one line per lease.
fn writer<T: Records>(mut log: Log<T>, mut rx: mpsc::Receiver<Pending<T::Rec>>) {
    let mut batch: Vec<Pending<T::Rec>> = Vec::new();
    let mut buf = Vec::new();
    let mut swept = std::time::Instant::now();
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
            if batch.len() >= 1024 {
                break;
            }
        }
        buf.clear();
        for l in batch.iter().flat_map(|(recs, _)| recs) {
            if serde_json::to_writer(&mut buf, l).is_ok() {
                buf.push(b'\n');
            }
        }
        let res = append(&mut log.file, &buf);
        match &res {
            Err(e) => {
                error!(file = %log.path.display(), error = %e, "lease write failed; the replies waiting on it are not sent");
            }
            Ok(()) => {
                for l in batch.iter().flat_map(|(recs, _)| recs) {
                    log.table.apply(l.clone());
                    log.lines += 1;
                }
                if swept.elapsed() >= SWEEP_EVERY {
                    log.table.sweep(runtime::clock::unix_secs());
                    swept = std::time::Instant::now();
                }
                let records = log.table.count();
                // Past twice its records (and the slack): each compaction
                // rewrites the file, so the cost per commit stays constant
                // however many leases there are.
                if log.lines > 2 * records + COMPACT_SLACK {
                    let compacted = log.table.render().and_then(|b| {
                        runtime::fs::write_atomic(&log.path, &b, 0o640)?;
                        std::fs::OpenOptions::new().append(true).open(&log.path)
                    });
                    match compacted {
                        Ok(f) => {
                            debug!(file = %log.path.display(), lines = log.lines, records, "lease file compacted");
                            log.file = f;
                            log.lines = records;
                        }
                        Err(e) => {
                            // The old file (and its handle) are still whole:
                            // go on appending, and try again later.
                            warn!(file = %log.path.display(), error = %e, "lease file compaction failed");
                            log.lines = records;
                        }
                    }
                }
            }
        }
        for (_, done) in batch.drain(..) {
            let _ = done.send(
                res.as_ref()
                    .map(|_| ())
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", log.path.display()))),
            );
        }
    }
}
