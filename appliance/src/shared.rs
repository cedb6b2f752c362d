//! bootd's shared state ([`bootd::shared::Shared`]) on the site's etcd
//! (`host.store.etcd`), under the site's prefix:
//!
//! | key | value |
//! |---|---|
//! | `bootd/secrets/token-key` | the token key (32 bytes) |
//! | `bootd/secrets/site-ca` | the site CA's key and certificate (PEM) |
//! | `bootd/spent/<expiry>/<nonce>` | a spent token (empty), removed once expired |
//! | `dhcp/leases/<ip>` | the address's lease or decline record (JSON, as in the lease file) |
//! | `election/dhcp` | the elected DHCP server |
//!
//! A lease is written with a compare on the revision of its address's key
//! as this appliance last read or wrote it: if another appliance wrote the
//! address since, its record is read; it is taken over only when it is the
//! same client's, released or expired, else the commit is refused (the ACK
//! withheld) and the other client's lease returned.
//!
//! The connection is made at the first use, in `bootd::prepare`, after
//! root was dropped: its runtime's threads are born unprivileged.

use bootd::shared::{DhcpRole, Lease};
use etcd::{Compare, CompareOp, Transaction, TxnOp, TxnOpResponse};
use std::collections::HashMap;
use std::io;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::sync::OnceLock;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Spends between two removals of expired spent tokens.
const PRUNE_EVERY: u64 = 1024;

#[derive(Debug)]
pub struct EtcdShared {
    config: etcd::Config,
    lease_ttl: Duration,
    conn: OnceLock<etcd::Etcd>,
    spends: AtomicU64,
    /// Each address's key revision as this appliance last read or wrote it.
    revs: Mutex<HashMap<Ipv4Addr, i64>>,
}

/// Attempts of a lease's compare-and-swap.
const CAS_ATTEMPTS: usize = 8;

impl EtcdShared {
    pub fn new(config: etcd::Config, lease_ttl: Duration) -> EtcdShared {
        EtcdShared {
            config,
            lease_ttl,
            conn: OnceLock::new(),
            spends: AtomicU64::new(0),
            revs: Mutex::new(HashMap::new()),
        }
    }

    fn lease_key(ip: Ipv4Addr) -> String {
        format!("dhcp/leases/{ip}")
    }

    fn etcd(&self) -> io::Result<&etcd::Etcd> {
        if let Some(c) = self.conn.get() {
            return Ok(c);
        }
        let c = etcd::Etcd::connect(&self.config).map_err(io::Error::other)?;
        Ok(self.conn.get_or_init(|| c))
    }

    /// The spent tokens in etcd: (expiry, nonce).
    pub fn spent(&self) -> io::Result<Vec<(u64, String)>> {
        let etcd = self.etcd()?;
        Ok(etcd
            .list("bootd/spent/")
            .map_err(io::Error::other)?
            .into_iter()
            .filter_map(|v| {
                let rest = v.key.strip_prefix("bootd/spent/")?;
                let (e, n) = rest.split_once('/')?;
                Some((e.parse().ok()?, n.to_string()))
            })
            .collect())
    }

    fn prune(&self, etcd: &etcd::Etcd) {
        let from = etcd.key("bootd/spent/");
        let to = etcd.key(&format!("bootd/spent/{:020}", runtime::clock::unix_secs()));
        let r = etcd.block("remove expired spent tokens", move |mut c| async move {
            c.delete(from, Some(etcd::DeleteOptions::new().with_range(to)))
                .await
        });
        if let Err(e) = r {
            tracing::warn!(error = %e, "expired spent tokens not removed from etcd");
        }
    }
}

impl bootd::shared::Shared for EtcdShared {
    fn agree(&self, name: &str, offer: &[u8]) -> io::Result<Vec<u8>> {
        let etcd = self.etcd()?;
        let key = etcd.key(&format!("bootd/secrets/{name}"));
        let t = Transaction::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), offer.to_vec(), None)])
            .or_else([TxnOp::get(key.clone(), None)]);
        let r = etcd
            .txn(&format!("agree on {name}"), t)
            .map_err(io::Error::other)?;
        if r.succeeded() {
            tracing::info!(name, "shared state: this appliance's {name} is the site's");
            return Ok(offer.to_vec());
        }
        for op in r.op_responses() {
            if let TxnOpResponse::Get(g) = op {
                if let Some(kv) = g.kvs().first() {
                    return Ok(kv.value().to_vec());
                }
            }
        }
        Err(io::Error::other(format!("{key}: present, then absent")))
    }

    fn spend(&self, nonce: &str, expiry: u64) -> io::Result<bool> {
        let etcd = self.etcd()?;
        let key = etcd.key(&format!("bootd/spent/{expiry:020}/{nonce}"));
        let t = Transaction::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, Vec::new(), None)]);
        let fresh = etcd
            .txn("spend a token", t)
            .map_err(io::Error::other)?
            .succeeded();
        if self.spends.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1 {
            self.prune(etcd);
        }
        Ok(fresh)
    }

    fn leases(&self) -> io::Result<Vec<Lease>> {
        let etcd = self.etcd()?;
        let values = etcd.list("dhcp/leases/").map_err(io::Error::other)?;
        let mut revs = self.revs.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::with_capacity(values.len());
        for v in values {
            let l: Lease = serde_json::from_slice(&v.value).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{}: not a lease record bootd writes ({e})",
                        etcd.key(&v.key)
                    ),
                )
            })?;
            revs.insert(l.ip, v.mod_revision);
            out.push(l);
        }
        Ok(out)
    }

    fn commit_lease(&self, lease: &Lease) -> io::Result<Option<Lease>> {
        let etcd = self.etcd()?;
        let key = etcd.key(&Self::lease_key(lease.ip));
        let value = serde_json::to_vec(lease).map_err(io::Error::other)?;
        for _ in 0..CAS_ATTEMPTS {
            let rev = *self
                .revs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&lease.ip)
                .unwrap_or(&0);
            let t = Transaction::new()
                .when([Compare::mod_revision(key.clone(), CompareOp::Equal, rev)])
                .and_then([TxnOp::put(key.clone(), value.clone(), None)])
                .or_else([TxnOp::get(key.clone(), None)]);
            let r = etcd.txn("commit a lease", t).map_err(io::Error::other)?;
            if r.succeeded() {
                let at = r.header().map(|h| h.revision()).unwrap_or(0);
                self.revs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(lease.ip, at);
                return Ok(None);
            }
            // Written by another appliance since: whose is it now?
            let current = r.op_responses().into_iter().find_map(|op| match op {
                TxnOpResponse::Get(g) => g
                    .kvs()
                    .first()
                    .map(|kv| (kv.value().to_vec(), kv.mod_revision())),
                _ => None,
            });
            let (other, other_rev) = match current {
                // A record bootd did not write is not overwritten: said.
                Some((bytes, rev)) => (
                    Some(serde_json::from_slice::<Lease>(&bytes).map_err(|e| {
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("{key}: not a lease record bootd writes ({e}): restore it, or delete it"),
                        )
                    })?),
                    rev,
                ),
                None => (None, 0),
            };
            let now = runtime::clock::unix_secs();
            let ours = match &other {
                None => true,
                Some(o) => {
                    o.mac == lease.mac
                        || o.state == bootd::dhcp::leases::LeaseState::Released
                        || o.expires <= now
                }
            };
            if !ours {
                self.revs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(lease.ip, other_rev);
                return Ok(other);
            }
            self.revs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(lease.ip, other_rev);
        }
        Err(io::Error::other(format!(
            "{key}: changed by another appliance {CAS_ATTEMPTS} times in a row"
        )))
    }

    fn dhcp_role(&self, stop: CancellationToken) -> tokio::sync::watch::Receiver<DhcpRole> {
        let (tx, rx) = tokio::sync::watch::channel(DhcpRole::Standby);
        let etcd = match self.etcd() {
            Ok(e) => e.clone(),
            Err(e) => {
                tracing::error!(error = %e, "etcd: no connection; this appliance answers the site's nodes only");
                let _ = tx.send(DhcpRole::ReservedOnly);
                return rx;
            }
        };
        let ttl = self.lease_ttl;
        // Elected or not (the campaign), and whether etcd answers (a read
        // every second): the role is their product.
        let mut elected = etcd.elect("dhcp", ttl, stop.clone());
        let (up_tx, mut up) = tokio::sync::watch::channel(true);
        tokio::spawn(probe(etcd, up_tx, stop.clone()));
        tokio::spawn(async move {
            loop {
                let role = match (*elected.borrow_and_update(), *up.borrow_and_update()) {
                    (true, _) => DhcpRole::Serve,
                    (false, true) => DhcpRole::Standby,
                    (false, false) => DhcpRole::ReservedOnly,
                };
                tx.send_if_modified(|r| std::mem::replace(r, role) != role);
                tokio::select! {
                    r = elected.changed() => if r.is_err() { return },
                    r = up.changed() => if r.is_err() { return },
                    _ = stop.cancelled() => return,
                }
            }
        });
        rx
    }
}

/// Whether etcd answers a read (with a leader), every second.
async fn probe(etcd: etcd::Etcd, up: tokio::sync::watch::Sender<bool>, stop: CancellationToken) {
    loop {
        let key = etcd.key("dhcp/probe");
        let ok = etcd
            .run("probe", move |mut c| async move { c.get(key, None).await })
            .await
            .is_ok();
        up.send_if_modified(|u| std::mem::replace(u, ok) != ok);
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.cancelled() => return,
        }
    }
}
