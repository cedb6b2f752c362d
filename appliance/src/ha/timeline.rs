//! Node timelines on etcd: each write of an appliance's events of site
//! nodes (up to `bootd::timeline::ha::BATCH`, every half second at most) is
//! one key, `timeline/_batch/<appliance>/<lease>-<n>`, holding one line per
//! event (`<node>\t<event JSON>`), written with a lease of [`KEPT`] that is
//! not kept alive, so etcd deletes it a day later; a new lease is taken
//! every [`NEW_LEASE_EVERY`]. The others' events are read from a watch of
//! `timeline/`. (One key per event, `timeline/<node>/<appliance>/<id>`, as
//! earlier appliances write them, is read too.) A key per write rather than
//! per event: a rack booting writes some thirty events per machine, and
//! each key is a revision, an index entry and a watch event on every etcd
//! member and every appliance.

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
        let key = etcd.key(&format!("{BATCHES}{}/{lease:016x}-{first:08x}", self.name));
        let put = TxnOp::put(
            key,
            encode(events),
            Some(PutOptions::new().with_lease(lease)),
        );
        let r = etcd.txn("share timeline events", Transaction::new().and_then([put]));
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
                let os: Vec<Others> = match p {
                    None => return,
                    Some(etcd::Put::Reset) => vec![Others::Reset],
                    Some(etcd::Put::Value(key, value)) => match batch_of(&key) {
                        Some(by) if by != me => decode(&value)
                            .into_iter()
                            .map(|(node, json)| Others::Event {
                                node,
                                by: by.to_string(),
                                json,
                            })
                            .collect(),
                        Some(_) => continue,
                        None => match parse_key(&key) {
                            Some((node, by)) if by != me => vec![Others::Event {
                                node: node.to_string(),
                                by: by.to_string(),
                                json: value,
                            }],
                            _ => continue,
                        },
                    },
                };
                for o in os {
                    if tx.send(o).await.is_err() {
                        return;
                    }
                }
            }
        });
        Some(rx)
    }
}

/// Where the batches are (`_` is in no node name: a DNS label).
const BATCHES: &str = "timeline/_batch/";

/// A batch's value: `<node>\t<event JSON>` lines (compact JSON holds no
/// newline; a node's name, no tab).
fn encode(events: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut v = Vec::with_capacity(events.iter().map(|(n, j)| n.len() + j.len() + 2).sum());
    for (node, json) in events {
        v.extend_from_slice(node.as_bytes());
        v.push(b'\t');
        v.extend_from_slice(json);
        v.push(b'\n');
    }
    v
}

/// A batch's events; a line without a tab is skipped.
fn decode(value: &[u8]) -> Vec<(String, Vec<u8>)> {
    value
        .split(|b| *b == b'\n')
        .filter_map(|line| {
            let tab = line.iter().position(|b| *b == b'\t')?;
            let node = std::str::from_utf8(&line[..tab]).ok()?;
            Some((node.to_string(), line[tab + 1..].to_vec()))
        })
        .collect()
}

/// `timeline/_batch/<appliance>/<id>` → appliance.
fn batch_of(key: &str) -> Option<&str> {
    let mut parts = key.strip_prefix(BATCHES)?.split('/');
    let (by, _id) = (parts.next()?, parts.next()?);
    Some(by)
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
    fn a_batch_holds_its_events_in_order() {
        let events = vec![
            (
                "master-0".to_string(),
                br#"{"phase":"dhcp","detail":"a\tb"}"#.to_vec(),
            ),
            ("worker-1".to_string(), br#"{"phase":"ignition"}"#.to_vec()),
        ];
        assert_eq!(decode(&encode(&events)), events);
        assert_eq!(decode(b"no tab here\n"), vec![]);
    }

    #[test]
    fn keys_and_names() {
        assert_eq!(
            parse_key("timeline/master-0/A/00000000000abc12-00000001"),
            Some(("master-0", "A"))
        );
        assert_eq!(parse_key("timeline/master-0/A"), None);
        assert_eq!(
            batch_of("timeline/_batch/A/00000000000abc12-00000001"),
            Some("A")
        );
        assert_eq!(
            batch_of("timeline/master-0/A/00000000000abc12-00000001"),
            None
        );
        assert_eq!(parse_key("dhcp/leases/10.0.0.1"), None);
        assert!(valid_name("appliance-a.rack1").is_ok());
        for bad in ["", "a/b", "a b", &"x".repeat(64)] {
            assert!(valid_name(bad).is_err(), "{bad:?}");
        }
    }
}
