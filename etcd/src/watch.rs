//! Watching keys: a stream of which keys changed, that survives etcd
//! restarts and lost connections.

use crate::Etcd;
use etcd_client::WatchOptions;
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

impl Etcd {
    /// Changes under `rel` (a prefix) from now on. Starts with
    /// [`Change::Resync`]; after a lost watch, re-made within a second or
    /// two, `Resync` again. Ends when the receiver is dropped.
    pub fn watch(&self, rel: &str) -> mpsc::Receiver<Change> {
        let (tx, rx) = mpsc::channel(1024);
        let etcd = self.clone();
        let key = self.key(rel);
        self.spawn(async move {
            loop {
                if tx.send(Change::Resync).await.is_err() {
                    return;
                }
                let mut c = etcd.client();
                let opts = WatchOptions::new().with_prefix();
                if let Ok(mut stream) = c.watch(key.clone(), Some(opts)).await {
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
                            if let Some(kv) = ev.kv() {
                                if tx.send(Change::Key(etcd.rel(kv.key()))).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = tx.closed() => return,
                }
            }
        });
        rx
    }
}
