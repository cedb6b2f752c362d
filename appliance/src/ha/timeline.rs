//! Node timelines on etcd: each appliance's events of site nodes under
//! `timeline/<node>/<appliance>/<lease>-<n>` (one key per event, its JSON),
//! written with a lease of [`KEPT`] that is not kept alive, so etcd deletes
//! them a day later; a new lease is taken every [`NEW_LEASE_EVERY`]. The
//! others' events are read from a watch of `timeline/`.

use super::EtcdShared;
use bootd::ha::Others;
use etcd::{PutOptions, Transaction, TxnOp};
use std::io;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How long shared timeline events are kept (at least this less
/// [`NEW_LEASE_EVERY`]).
pub const KEPT: Duration = Duration::from_secs(24 * 3600);
/// Events are written with one lease for this long, then the next.
pub const NEW_LEASE_EVERY: Duration = Duration::from_secs(3600);

/// The lease events are written with now, and how many were written with it.
#[derive(Debug, Default)]
pub(super) struct Writing {
    lease: Option<(i64, Instant, u64)>,
}

/// The default name of an appliance: its host name.
pub fn host_name() -> String {
    let h = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    match h.trim() {
        "" => "appliance".to_string(),
        h => h.to_string(),
    }
}

/// Whether `name` may name an appliance: 1-63 of `A-Z a-z 0-9 . _ -`
/// (it is part of etcd keys and shown on status pages).
pub fn valid_name(name: &str) -> Result<String, String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(name.to_string())
    } else {
        Err(format!(
            "{name:?}: an appliance name is 1-63 letters, digits, '.', '_' or '-'"
        ))
    }
}

impl EtcdShared {
    pub(super) fn timeline_share(&self, events: &[(String, Vec<u8>)]) -> io::Result<()> {
        let etcd = self.etcd()?;
        let (lease, first) = {
            let mut w = self.writing.lock().unwrap_or_else(|p| p.into_inner());
            let stale = w
                .lease
                .is_none_or(|(_, at, _)| at.elapsed() >= NEW_LEASE_EVERY);
            if stale {
                let id = etcd.grant(KEPT).map_err(io::Error::other)?;
                w.lease = Some((id, Instant::now(), 0));
            }
            let (id, at, n) = w.lease.expect("set above");
            w.lease = Some((id, at, n + events.len() as u64));
            (id, n)
        };
        let ops: Vec<TxnOp> = events
            .iter()
            .enumerate()
            .map(|(i, (node, json))| {
                let key = etcd.key(&format!(
                    "timeline/{node}/{}/{lease:016x}-{:08x}",
                    self.name,
                    first + i as u64
                ));
                TxnOp::put(key, json.clone(), Some(PutOptions::new().with_lease(lease)))
            })
            .collect();
        let r = etcd.txn("share timeline events", Transaction::new().and_then(ops));
        if r.is_err() {
            // The lease may be gone (etcd restored): a new one next time.
            self.writing.lock().unwrap_or_else(|p| p.into_inner()).lease = None;
        }
        r.map(|_| ()).map_err(io::Error::other)
    }

    pub(super) fn timeline_others(
        &self,
        stop: CancellationToken,
    ) -> Option<tokio::sync::mpsc::Receiver<Others>> {
        let etcd = self.etcd().ok()?.clone();
        let me = self.name.clone();
        let (tx, rx) = tokio::sync::mpsc::channel(4096);
        let mut puts = etcd.watch_puts("timeline/", 1000);
        tokio::spawn(async move {
            loop {
                let p = tokio::select! {
                    p = puts.recv() => p,
                    _ = stop.cancelled() => return,
                };
                let o = match p {
                    None => return,
                    Some(etcd::Put::Reset) => Others::Reset,
                    Some(etcd::Put::Value(key, json)) => match parse_key(&key) {
                        Some((node, by)) if by != me => Others::Event {
                            node: node.to_string(),
                            by: by.to_string(),
                            json,
                        },
                        _ => continue,
                    },
                };
                if tx.send(o).await.is_err() {
                    return;
                }
            }
        });
        Some(rx)
    }
}

/// `timeline/<node>/<appliance>/<id>` → (node, appliance).
fn parse_key(key: &str) -> Option<(&str, &str)> {
    let mut parts = key.strip_prefix("timeline/")?.split('/');
    let (node, by, _id) = (parts.next()?, parts.next()?, parts.next()?);
    Some((node, by))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_names() {
        assert_eq!(
            parse_key("timeline/master-0/A/00000000000abc12-00000001"),
            Some(("master-0", "A"))
        );
        assert_eq!(parse_key("timeline/master-0/A"), None);
        assert_eq!(parse_key("dhcp/leases/10.0.0.1"), None);
        assert!(valid_name("appliance-a.rack1").is_ok());
        for bad in ["", "a/b", "a b", &"x".repeat(64)] {
            assert!(valid_name(bad).is_err(), "{bad:?}");
        }
    }
}
