//! bootd's shared state ([`bootd::ha::Shared`], and DHCPv4's:
//! `dhcp::v4::ha::SharedLeases`) on the site's etcd
//! (`host.store.etcd`), under the site's prefix:
//!
//! | key | value |
//! |---|---|
//! | `site-identity` | which site the prefix belongs to (etcd::claim), checked before any other key |
//! | `bootd/secrets/token-key` | the token key (32 bytes) |
//! | `bootd/secrets/site-ca` | the site CA's key and certificate (PEM) |
//! | `bootd/spent/<expiry>/<nonce>` | a spent token (empty), removed once expired |
//! | `dhcp/leases/<ip>` | the address's lease or decline record (JSON, as in the lease file) |
//! | `dhcp/clients/<mac>` | the address the client was last granted |
//! | `election/dhcp`, `election/dhcp-on-<segment>` | the elected DHCP server for relayed requests, and for a segment's broadcasts (`hotStandby`) |
//! | `members/dhcp/<lease id>`, `members/dhcp-on-<segment>/<lease id>` | each live appliance answering them (`loadBalancing`) |
//! | `timeline/<node>/<appliance>/<lease>-<n>` | an event of the node's boot the appliance saw (JSON; deleted by etcd a day later) |
//!
//! DHCP: see [`dhcp`]; timelines: [`timeline`].
//!
//! The connection is made at the first use, in `bootd::prepare`, after
//! root was dropped: its runtime's threads are born unprivileged. Its
//! first request checks the site's identity under the prefix
//! (`site-identity`, etcd::claim): an appliance of another site stops
//! there, before the token key is read.

mod dhcp;
pub mod timeline;

use etcd::{Compare, CompareOp, Transaction, TxnOp, TxnOpResponse};
use std::collections::HashMap;
use std::io;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::sync::{Arc, Mutex, RwLock};
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
    /// The revisions of the DHCP keys as this appliance last saw them.
    revs: Arc<Revs>,
    /// `host.dhcp.ha`.
    ha: site::DhcpHa,
    /// `loadBalancing`: the live appliances answering DHCP, per group
    /// (`dhcp`: relayed requests; `dhcp-on-<segment>`: a segment's).
    members: Arc<RwLock<HashMap<String, etcd::Membership>>>,
    /// This appliance's name ([`EtcdShared::named`]; default its host name).
    name: String,
    /// The lease timeline events are written with.
    writing: Mutex<timeline::Writing>,
    /// Whether etcd answers (a read every second), one probe for every
    /// DHCP scope: they all stop granting in the same instant when the
    /// store goes (ha/dhcp.rs).
    store_up: OnceLock<tokio::sync::watch::Receiver<bool>>,
}

/// Each DHCP key's revision as this appliance last wrote it (or read and
/// judged free to take, never one merely read: ha/dhcp.rs): a
/// write compares with it.
#[derive(Debug, Default)]
struct Revs {
    /// `dhcp/leases/<ip>`
    addr: Mutex<HashMap<Ipv4Addr, i64>>,
    /// `dhcp/clients/<mac>`
    client: Mutex<HashMap<String, i64>>,
}

impl EtcdShared {
    pub fn new(config: etcd::Config, lease_ttl: Duration, ha: site::DhcpHa) -> EtcdShared {
        EtcdShared {
            config,
            lease_ttl,
            conn: OnceLock::new(),
            spends: AtomicU64::new(0),
            revs: Arc::default(),
            ha,
            members: Arc::default(),
            name: timeline::host_name(),
            writing: Mutex::default(),
            store_up: OnceLock::new(),
        }
    }

    /// Goes by `name` among the appliances (see [`timeline::valid_name`]).
    pub fn named(mut self, name: &str) -> EtcdShared {
        self.name = name.to_string();
        self
    }

    /// The connection, once the prefix is known to be the site's
    /// (`site-identity`, etcd::claim): another site's stops the start
    /// (`InvalidData`: not waited for, unlike an unreachable etcd).
    fn etcd(&self) -> io::Result<&etcd::Etcd> {
        if let Some(c) = self.conn.get() {
            return Ok(c);
        }
        let c = etcd::Etcd::connect(&self.config).map_err(io::Error::other)?;
        if let Err(e) = c.check_site() {
            let kind = match e.other_site() {
                Some(_) => io::ErrorKind::InvalidData,
                None => io::ErrorKind::Other,
            };
            return Err(io::Error::new(kind, e));
        }
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

/// The spend's transaction: `true` when `key` was absent, or holds
/// `attempt` (this spend's earlier try committed, its answer lost).
fn spend_once(etcd: &etcd::Etcd, key: &str, attempt: &[u8]) -> Result<bool, etcd::Error> {
    let t = Transaction::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then([TxnOp::put(key, attempt.to_vec(), None)])
        .or_else([TxnOp::get(key, None)]);
    let r = etcd.txn("spend a token", t)?;
    if r.succeeded() {
        return Ok(true);
    }
    Ok(r.op_responses().into_iter().any(|op| {
        matches!(op, TxnOpResponse::Get(g) if g.kvs().first().is_some_and(|kv| kv.value() == attempt))
    }))
}

impl bootd::ha::Shared for EtcdShared {
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

    /// One transaction: the key made if absent, holding this spend's own
    /// name (this appliance's and a random number). When etcd does not
    /// answer in time (a leader lost: a proposal forwarded to the dead
    /// leader waits out the deadline), it is sent again, for up to
    /// `timeout` + 2 s in all: a spend that reached etcd the first time
    /// finds its own name in the key and is fresh, one of another fetch
    /// finds another's and is refused. So the fetches of an etcd election's
    /// window have their spends recorded too (bench/storm
    /// `bootd-ha-etcd-kill`).
    fn spend(&self, nonce: &str, expiry: u64) -> io::Result<bool> {
        let etcd = self.etcd()?;
        let key = etcd.key(&format!("bootd/spent/{expiry:020}/{nonce}"));
        let attempt = format!("{} {:016x}", self.name, rand::random::<u64>()).into_bytes();
        let until = std::time::Instant::now() + self.config.timeout + Duration::from_secs(2);
        let fresh = loop {
            match spend_once(etcd, &key, &attempt) {
                Ok(fresh) => break fresh,
                Err(e)
                    if e.unavailable()
                        && std::time::Instant::now() + Duration::from_millis(200) < until =>
                {
                    tracing::debug!(error = %e, "token spend not answered: sent again");
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => return Err(io::Error::other(e)),
            }
        };
        if self.spends.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1 {
            self.prune(etcd);
        }
        Ok(fresh)
    }

    fn name(&self) -> Option<&str> {
        Some(&self.name)
    }

    fn share_events(&self, events: &[(String, Vec<u8>)]) -> io::Result<()> {
        self.timeline_share(events)
    }

    fn others_events(
        &self,
        stop: CancellationToken,
    ) -> Option<tokio::sync::mpsc::Receiver<bootd::ha::Others>> {
        self.timeline_others(stop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bootd::ha::Shared;

    /// A spend's transaction sent again after its answer was lost finds
    /// its own name and is fresh; another spend of the same token is not.
    #[test]
    fn a_spend_sent_again_knows_its_own_first_try() {
        let server = etcd::testing::Server::start();
        let e = etcd::Etcd::connect(&server.config("/spend/")).unwrap();
        let key = e.key("bootd/spent/00000000009999999999/n1");
        assert!(spend_once(&e, &key, b"a0 01").unwrap(), "absent: fresh");
        assert!(
            spend_once(&e, &key, b"a0 01").unwrap(),
            "its own earlier try"
        );
        assert!(!spend_once(&e, &key, b"a1 02").unwrap(), "another's: spent");
        assert_eq!(
            e.get("bootd/spent/00000000009999999999/n1")
                .unwrap()
                .unwrap()
                .value,
            b"a0 01"
        );
    }

    /// etcd down when the spend is sent, back 1 s later: the spend is sent
    /// again until it is recorded (within `timeout` + 2 s), once.
    #[test]
    fn a_spend_waits_out_a_short_outage() {
        let mut server = etcd::testing::Server::start();
        let shared = EtcdShared::new(
            server.config("/outage/"),
            Duration::from_secs(10),
            site::DhcpHa::HotStandby,
        );
        assert!(shared.spend("n1", u64::MAX / 2).unwrap());
        assert!(!shared.spend("n1", u64::MAX / 2).unwrap(), "single use");
        server.kill();
        let shared = Arc::new(shared);
        let s = Arc::clone(&shared);
        let t0 = std::time::Instant::now();
        let spending = std::thread::spawn(move || s.spend("n2", u64::MAX / 2));
        std::thread::sleep(Duration::from_secs(1));
        server.restart();
        let fresh = spending.join().unwrap();
        assert!(fresh.unwrap(), "recorded once etcd answered");
        assert!(t0.elapsed() < Duration::from_secs(6), "{:?}", t0.elapsed());
        assert!(!shared.spend("n2", u64::MAX / 2).unwrap(), "and spent");
    }
}
