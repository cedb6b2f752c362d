//! Spent tokens: with `ignition.singleUseTokens` (the default), a token
//! grants one Ignition fetch. The first fetch that carries it spends it;
//! presented again from another address than the node's, it is refused
//! (and the node gets an `IgnitionTokenReused` condition).
//!
//! Each spend is appended to `<stateDir>/spent-tokens` (`<expiry> <nonce>`,
//! one per line) and synced before the Ignition is sent, so a restart
//! does not make a spent token good again. Nonces are not secret (the tag
//! is); lines are dropped once their token expired, when the file is
//! opened and whenever it holds more than twice its live lines plus 1024.
//! A corrupt file is refused at start (bootd says which line), never
//! emptied: that would make spent tokens good again.
//!
//! Spends of different tokens run at once: no lock is held across the
//! shared store's round trip or the sync, which is a group commit (one
//! `fdatasync` for every line appended before it began).

use crate::token::Verified;
use runtime::sync::lock;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub const FILE: &str = "spent-tokens";

#[derive(Debug)]
pub enum SpendError {
    /// Spent before.
    Reused,
    /// The spend could not be recorded: the token is not honoured.
    Io(io::Error),
}

pub struct Spent {
    path: PathBuf,
    inner: Mutex<Inner>,
    /// The file lines are appended to, and how many were.
    log: Mutex<Log>,
    /// How many appended lines are known synced (group commit: one
    /// `fdatasync` covers every line written before it began).
    synced: Mutex<u64>,
    /// Other appliances' spends (`host.store: etcd`): asked before this
    /// file, so a token spent on any appliance is refused on all.
    shared: Option<std::sync::Arc<dyn crate::ha::Shared>>,
}

struct Inner {
    /// Nonce → expiry (unix seconds).
    live: HashMap<String, u64>,
    /// Spends under way (the shared store asked, the line not yet synced):
    /// a second fetch with the same token meanwhile is refused.
    pending: HashMap<String, u64>,
    lines: usize,
    since_prune: usize,
}

struct Log {
    file: Arc<File>,
    written: u64,
}

impl std::fmt::Debug for Spent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spent").field("path", &self.path).finish()
    }
}

fn now_secs() -> u64 {
    runtime::clock::unix_secs()
}

/// The lines of the file that still count at `now`. A last line without
/// its newline is a write a crash cut short: dropped (its fetch was never
/// answered). Any other line that does not parse is corruption: refused,
/// with its number, because dropping it would make a spent token good again.
fn parse(text: &str, now: u64) -> Result<HashMap<String, u64>, String> {
    let complete = text.ends_with('\n');
    let lines: Vec<&str> = text.lines().collect();
    let mut live = HashMap::new();
    for (i, l) in lines.iter().enumerate() {
        let parsed = l.split_once(' ').and_then(|(e, n)| {
            let e: u64 = e.parse().ok()?;
            (!n.is_empty() && !n.contains(' ')).then_some((n, e))
        });
        match parsed {
            Some((n, e)) if e > now => {
                live.insert(n.to_string(), e);
            }
            Some(_) => {}
            None if i + 1 == lines.len() && !complete => {
                tracing::warn!(
                    line = i + 1,
                    "spent-token file: a torn last line (a write cut short) dropped"
                );
            }
            None => return Err(format!("line {}: not `<expiry> <nonce>`", i + 1)),
        }
    }
    Ok(live)
}

fn render<'a>(spends: impl Iterator<Item = (&'a String, &'a u64)>) -> String {
    let mut s = String::new();
    for (n, e) in spends {
        s.push_str(&format!("{e} {n}\n"));
    }
    s
}

impl Spent {
    /// Reads the file (dropping expired lines) and opens it for appending.
    pub fn open(state_dir: &Path) -> io::Result<Spent> {
        let path = state_dir.join(FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
        };
        let live = parse(&text, now_secs()).map_err(|why| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: {why}: the file is corrupt. Moving it aside starts over, but every token \
                     it records as spent works again until it expires (ignition.tokenTtl)",
                    path.display()
                ),
            )
        })?;
        crate::state::write_private(&path, render(live.iter()).as_bytes())?;
        let file = OpenOptions::new().append(true).open(&path)?;
        let lines = live.len();
        Ok(Spent {
            path,
            shared: None,
            inner: Mutex::new(Inner {
                live,
                pending: HashMap::new(),
                lines,
                since_prune: 0,
            }),
            log: Mutex::new(Log {
                file: Arc::new(file),
                written: 0,
            }),
            synced: Mutex::new(0),
        })
    }

    /// Spends also in the store shared with other appliances.
    pub fn with_shared(mut self, shared: Option<std::sync::Arc<dyn crate::ha::Shared>>) -> Spent {
        self.shared = shared;
        self
    }

    /// Spends `t`: `Err(Reused)` when it was spent before (here, or on
    /// another appliance of a shared store). Durable before it returns `Ok`.
    pub fn spend(&self, t: &Verified) -> Result<(), SpendError> {
        self.spend_at(t, now_secs())
    }

    /// [`Spent::spend`] at `now` (unix seconds), which decides what expired.
    ///
    /// No lock is held across the shared store's round trip or the sync:
    /// spends of different tokens go on at once (each a transaction of its
    /// own in the shared store; one `fdatasync` for every line written
    /// before it), and the same token spent twice at once is refused the
    /// second time while the first is under way.
    pub fn spend_at(&self, t: &Verified, now: u64) -> Result<(), SpendError> {
        {
            let mut g = lock(&self.inner);
            if g.live.contains_key(&t.nonce) || g.pending.contains_key(&t.nonce) {
                return Err(SpendError::Reused);
            }
            g.pending.insert(t.nonce.clone(), t.expiry);
        }
        let recorded = self.record(t);
        let mut g = lock(&self.inner);
        g.pending.remove(&t.nonce);
        recorded?;
        g.live.insert(t.nonce.clone(), t.expiry);
        g.lines += 1;
        g.since_prune += 1;
        if g.since_prune < 1024 {
            return Ok(());
        }
        g.since_prune = 0;
        g.live.retain(|_, e| *e > now);
        if g.lines > 2 * (g.live.len() + g.pending.len()) + 1024 {
            // Every line written holds a live or pending spend: the new
            // file (synced before it replaces the old) holds them all. A
            // failed rewrite leaves the old file, which still holds every
            // spend.
            let mut log = lock(&self.log);
            let text = render(g.live.iter().chain(g.pending.iter()));
            let rewritten = crate::state::write_private(&self.path, text.as_bytes())
                .and_then(|()| OpenOptions::new().append(true).open(&self.path));
            match rewritten {
                Ok(f) => {
                    log.file = Arc::new(f);
                    g.lines = g.live.len() + g.pending.len();
                }
                Err(e) => {
                    tracing::warn!(path = %self.path.display(), error = %e, "spent-token file not compacted")
                }
            }
        }
        Ok(())
    }

    /// The spend in the shared store (when there is one), then its line,
    /// synced.
    fn record(&self, t: &Verified) -> Result<(), SpendError> {
        if let Some(shared) = &self.shared {
            // Committed to the shared store (a quorum) before this file.
            if !shared.spend(&t.nonce, t.expiry).map_err(SpendError::Io)? {
                return Err(SpendError::Reused);
            }
        }
        let line = format!("{} {}\n", t.expiry, t.nonce);
        let mine = {
            let mut log = lock(&self.log);
            (&*log.file)
                .write_all(line.as_bytes())
                .map_err(SpendError::Io)?;
            log.written += 1;
            log.written
        };
        let mut synced = lock(&self.synced);
        if *synced >= mine {
            return Ok(());
        }
        let (file, upto) = {
            let log = lock(&self.log);
            (Arc::clone(&log.file), log.written)
        };
        file.sync_data().map_err(SpendError::Io)?;
        *synced = upto;
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .live
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::Scope;

    fn v(nonce: &str, expiry: u64) -> Verified {
        Verified {
            scope: Scope::Script,
            expiry,
            nonce: nonce.into(),
        }
    }

    #[test]
    fn a_token_is_spent_once_and_stays_spent_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let later = now_secs() + 3600;
        let s = Spent::open(dir.path()).unwrap();
        s.spend(&v("AAAAAAAAAAAAAAAA", later)).unwrap();
        assert!(matches!(
            s.spend(&v("AAAAAAAAAAAAAAAA", later)),
            Err(SpendError::Reused)
        ));
        s.spend(&v("BBBBBBBBBBBBBBBB", later)).unwrap();
        drop(s);
        // A torn last line (a crash mid-write) and an expired line are dropped.
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.path().join(FILE))
            .unwrap();
        f.write_all(b"12 CCCCCCCCCCCCCCCC\n999").unwrap();
        drop(f);
        let s = Spent::open(dir.path()).unwrap();
        assert_eq!(s.len(), 2);
        assert!(matches!(
            s.spend(&v("BBBBBBBBBBBBBBBB", later)),
            Err(SpendError::Reused)
        ));
        s.spend(&v("CCCCCCCCCCCCCCCC", later)).unwrap();
        let text = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
    }

    #[test]
    fn a_corrupt_file_is_refused_naming_the_line_not_emptied() {
        let dir = tempfile::tempdir().unwrap();
        let later = now_secs() + 3600;
        let path = dir.path().join(FILE);
        std::fs::write(
            &path,
            format!("{later} AAAAAAAAAAAAAAAA\ngarbage\n{later} BBBBBBBBBBBBBBBB\n"),
        )
        .unwrap();
        let e = Spent::open(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("spent-tokens: line 2: not `<expiry> <nonce>`"),
            "{e}"
        );
        assert!(e.contains("works again until it expires"), "{e}");
        // Left as it was.
        assert!(std::fs::read_to_string(&path).unwrap().contains("garbage"));
    }

    /// A shared store whose every spend takes 50 ms (an etcd round trip
    /// under load), remembering the most spends it had under way at once.
    #[derive(Debug, Default)]
    struct SlowStore {
        spent: Mutex<std::collections::HashSet<String>>,
        now: std::sync::atomic::AtomicUsize,
        most: std::sync::atomic::AtomicUsize,
    }

    impl crate::ha::Shared for SlowStore {
        fn agree(&self, _: &str, offer: &[u8]) -> io::Result<Vec<u8>> {
            Ok(offer.to_vec())
        }
        fn spend(&self, nonce: &str, _: u64) -> io::Result<bool> {
            use std::sync::atomic::Ordering::SeqCst;
            let n = self.now.fetch_add(1, SeqCst) + 1;
            self.most.fetch_max(n, SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(50));
            self.now.fetch_sub(1, SeqCst);
            Ok(lock(&self.spent).insert(nonce.to_string()))
        }
    }

    /// Before, the spend held one lock across the shared store's round
    /// trip and the sync: every Ignition fetch of an appliance waited for
    /// the one before it (at most 1 spend under way).
    #[test]
    fn spends_of_different_tokens_go_on_at_once_and_one_token_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SlowStore::default());
        let s = Arc::new(
            Spent::open(dir.path())
                .unwrap()
                .with_shared(Some(Arc::clone(&store) as Arc<dyn crate::ha::Shared>)),
        );
        let later = now_secs() + 3600;
        let spend_all = |nonces: Vec<String>| {
            let threads: Vec<_> = nonces
                .into_iter()
                .map(|n| {
                    let s = Arc::clone(&s);
                    std::thread::spawn(move || s.spend(&v(&n, later)))
                })
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().unwrap())
                .collect::<Vec<_>>()
        };
        let r = spend_all((0..16).map(|i| format!("{i:016}")).collect());
        assert!(r.iter().all(Result::is_ok));
        let most = store.most.load(std::sync::atomic::Ordering::SeqCst);
        assert!(most > 1, "at most {most} spend under way at once");
        // The same token from 8 fetches at once: spent once, 7 refused.
        let r = spend_all(vec!["SAME000000000000".to_string(); 8]);
        assert_eq!(r.iter().filter(|x| x.is_ok()).count(), 1);
        assert_eq!(
            r.iter()
                .filter(|x| matches!(x, Err(SpendError::Reused)))
                .count(),
            7
        );
        // Every spend is on disk: a restart refuses them all.
        drop(s);
        let s = Spent::open(dir.path()).unwrap();
        assert_eq!(s.len(), 17);
    }

    #[test]
    fn the_file_is_compacted_as_tokens_expire() {
        let dir = tempfile::tempdir().unwrap();
        let s = Spent::open(dir.path()).unwrap();
        let (soon, later) = (now_secs() + 100, now_secs() + 3600);
        for i in 0..3000 {
            s.spend(&v(&format!("{i:016}"), soon)).unwrap();
        }
        for i in 0..100 {
            s.spend_at(&v(&format!("x{i:015}"), later), soon + 1)
                .unwrap();
        }
        // Pruned and rewritten at the 3072nd spend: the 100 live ones remain.
        let lines = std::fs::read_to_string(dir.path().join(FILE))
            .unwrap()
            .lines()
            .count();
        assert_eq!(lines, 100);
        assert_eq!(s.len(), 100);
        assert!(matches!(
            s.spend(&v("x000000000000007", later)),
            Err(SpendError::Reused)
        ));
    }
}
