//! Watching keys: a stream of which keys changed, that survives etcd
//! restarts and lost connections.

use crate::Etcd;
use etcd_client::{EventType, GetOptions, WatchOptions};
use std::time::Duration;
use tokio::sync::mpsc;

/// What a watch reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// This key (relative to the prefix) was written or deleted.
    Key(String),
    /// Changes may have been missed (the watch started or was re-made
    /// after a lost connection): read everything again.
    Resync,
}

/// What a watch of values ([`Etcd::watch_puts`]) reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Put {
    /// This key (relative to the prefix) was written with this value.
    Value(String, Vec<u8>),
    /// Changes may have been missed: what follows (until the next
    /// `Reset`) is everything under the prefix, then the changes.
    Reset,
}

/// A watched key-value: its key (full), value, and whether it was written
/// (`false`: deleted).
struct Seen<'a> {
    key: &'a [u8],
    value: &'a [u8],
    put: bool,
}

impl Etcd {
    /// Changes under `rel` (a prefix) from now on. Starts with
    /// [`Change::Resync`]; after a lost watch, re-made within a second or
    /// two, `Resync` again. Ends when the receiver is dropped.
    pub fn watch(&self, rel: &str) -> mpsc::Receiver<Change> {
        self.watching(rel, None, Change::Resync, |etcd, s| {
            Some(Change::Key(etcd.rel(s.key)))
        })
    }

    /// The values written under `rel` (a prefix): at the start (and after
    /// a lost watch) [`Put::Reset`] and every value stored, in key order,
    /// read `page` keys at a time; then each value as it is written.
    /// Deletions are not reported. Ends when the receiver is dropped.
    pub fn watch_puts(&self, rel: &str, page: i64) -> mpsc::Receiver<Put> {
        self.watching(rel, Some(page), Put::Reset, |etcd, s| {
            s.put.then(|| Put::Value(etcd.rel(s.key), s.value.to_vec()))
        })
    }

    /// The watch loop: `resync` at each (re)start; with `page`, everything
    /// stored is read first and the watch starts after it.
    fn watching<T: Send + Clone + 'static>(
        &self,
        rel: &str,
        page: Option<i64>,
        resync: T,
        map: impl Fn(&Etcd, Seen<'_>) -> Option<T> + Send + Sync + 'static,
    ) -> mpsc::Receiver<T> {
        let (tx, rx) = mpsc::channel(1024);
        let etcd = self.clone();
        let key = self.key(rel);
        self.spawn(async move {
            loop {
                if tx.send(resync.clone()).await.is_err() {
                    return;
                }
                let mut c = etcd.client();
                let mut opts = WatchOptions::new().with_prefix();
                // Nothing is read before the prefix is known to be the site's.
                let mut ready = etcd.gate(&c).await;
                if let (true, Some(page)) = (ready, page) {
                    // Everything stored, then the changes after it.
                    match etcd.send_all(&key, page, &tx, &map).await {
                        Some(rev) => opts = opts.with_start_revision(rev + 1),
                        None => ready = false,
                    }
                }
                if let (true, Ok(mut stream)) = (ready, c.watch(key.clone(), Some(opts)).await) {
                    loop {
                        let msg = tokio::select! {
                            m = stream.message() => m,
                            _ = tx.closed() => return,
                        };
                        let Ok(Some(resp)) = msg else { break };
                        if resp.canceled() {
                            break;
                        }
                        for ev in resp.events() {
                            let Some(kv) = ev.kv() else { continue };
                            let seen = Seen {
                                key: kv.key(),
                                value: kv.value(),
                                put: ev.event_type() == EventType::Put,
                            };
                            if let Some(t) = map(&etcd, seen) {
                                if tx.send(t).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                }
                // The watch ended or was not made: a member gone may be why.
                etcd.check_members();
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = tx.closed() => return,
                }
            }
        });
        rx
    }

    /// Sends every value under `key` (a full prefix), `page` at a time,
    /// through `map` as if each were written now; the revision read at
    /// (`None`: etcd could not be read, or the receiver is gone).
    async fn send_all<T>(
        &self,
        key: &str,
        page: i64,
        tx: &mpsc::Sender<T>,
        map: &(impl Fn(&Etcd, Seen<'_>) -> Option<T> + Send + Sync),
    ) -> Option<i64> {
        let end = prefix_end(key.as_bytes());
        let mut from = key.as_bytes().to_vec();
        let mut rev = 0;
        loop {
            let mut opts = GetOptions::new()
                .with_range(end.clone())
                .with_limit(page.max(1));
            if rev > 0 {
                opts = opts.with_revision(rev);
            }
            let r = self.client().get(from.clone(), Some(opts)).await.ok()?;
            if rev == 0 {
                rev = r.header()?.revision();
            }
            for kv in r.kvs() {
                let seen = Seen {
                    key: kv.key(),
                    value: kv.value(),
                    put: true,
                };
                if let Some(t) = map(self, seen) {
                    tx.send(t).await.ok()?;
                }
            }
            match r.kvs().last() {
                Some(last) if r.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => return Some(rev),
            }
        }
    }
}

/// The first key after every key starting with `prefix`.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}
