//! `discovered.json`, written by one thread of its own: a report changes
//! memory and asks for a write; the thread writes the whole list
//! (atomically, fsynced) at most every [`PAUSE`], however many reports
//! changed it in between. So reports never wait on the disk, and a flood of
//! them costs a few writes a second, not two fsyncs each on the workers
//! that serve scripts and Ignition.
//!
//! A crash forgets at most the last [`PAUSE`] of reports: machines report
//! again at every retry. What must not be forgotten (an adopted machine's
//! removal, a reported inventory) waits for its write ([`Writer::durable`]).

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The least time between two writes.
pub const PAUSE: Duration = Duration::from_millis(100);

static FAILED: runtime::logging::Throttle = runtime::logging::Throttle::new(1);

#[derive(Debug, Default)]
struct Writes {
    /// Changes asked for, and the last written (each a generation).
    wanted: u64,
    written: u64,
    /// Why the last write failed, until one succeeds.
    error: Option<String>,
    stop: bool,
}

#[derive(Debug)]
struct Shared {
    writes: Mutex<Writes>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Writes> {
        runtime::sync::lock(&self.writes)
    }
}

/// The writing thread; stopped (after a last write) when dropped.
#[derive(Debug)]
pub struct Writer {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    /// Starts the thread; `snapshot` gives the bytes to write, read after
    /// the generation it writes was asked for.
    pub fn start(
        path: PathBuf,
        snapshot: impl Fn() -> Vec<u8> + Send + 'static,
    ) -> std::io::Result<Writer> {
        let shared = Arc::new(Shared {
            writes: Mutex::new(Writes::default()),
            wake: Condvar::new(),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("discovered-writer".into())
            .spawn(move || loop {
                let generation = {
                    let mut w = s.lock();
                    while w.wanted == w.written && !w.stop {
                        w = s.wake.wait(w).unwrap_or_else(|p| p.into_inner());
                    }
                    if w.wanted == w.written {
                        return;
                    }
                    w.wanted
                };
                let result = crate::state::write_atomic(&path, &snapshot(), 0o644);
                {
                    let mut w = s.lock();
                    w.written = generation;
                    w.error = result.err().map(|e| e.to_string());
                    if let Some(e) = &w.error {
                        if let Some(left_out) = FAILED.allow() {
                            tracing::warn!(path = %path.display(), error = %e, suppressed = left_out, "discovered machines not written (kept in memory; written again at the next change)");
                        }
                    }
                    s.wake.notify_all();
                }
                std::thread::sleep(PAUSE);
            })?;
        Ok(Writer {
            shared,
            thread: Some(thread),
        })
    }

    /// Asks for a write of what memory holds now; its generation.
    pub fn changed(&self) -> u64 {
        let mut w = self.shared.lock();
        w.wanted += 1;
        self.shared.wake.notify_all();
        w.wanted
    }

    /// Waits until generation `g` (or a later one) is on disk.
    pub fn durable(&self, g: u64) -> Result<(), String> {
        let mut w = self.shared.lock();
        while w.written < g {
            w = self.shared.wake.wait(w).unwrap_or_else(|p| p.into_inner());
        }
        match &w.error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn many_changes_make_few_writes_and_the_last_is_on_disk() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("list.json");
        let value = Arc::new(AtomicU64::new(0));
        let writes = Arc::new(AtomicU64::new(0));
        let (v, n) = (Arc::clone(&value), Arc::clone(&writes));
        let w = Writer::start(path.clone(), move || {
            n.fetch_add(1, Ordering::SeqCst);
            v.load(Ordering::SeqCst).to_string().into_bytes()
        })
        .unwrap();
        let t = std::time::Instant::now();
        let mut g = 0;
        for i in 1..=10_000 {
            value.store(i, Ordering::SeqCst);
            g = w.changed();
        }
        assert!(t.elapsed() < Duration::from_secs(1), "changes never wait");
        w.durable(g).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "10000");
        assert!(
            writes.load(Ordering::SeqCst) < 100,
            "{} writes for 10 000 changes",
            writes.load(Ordering::SeqCst)
        );
        // A change made just before the drop is written by it.
        value.store(7, Ordering::SeqCst);
        w.changed();
        drop(w);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "7");
    }

    #[test]
    fn a_failed_write_is_reported_to_whoever_waits_for_it() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("file"), b"").unwrap();
        let w = Writer::start(d.path().join("file/list.json"), Vec::new).unwrap();
        let g = w.changed();
        assert!(w.durable(g).is_err());
    }
}
