//! bootd's shared state ([`bootd::shared::Shared`]) on the site's etcd
//! (`host.store.etcd`), under the site's prefix:
//!
//! | key | value |
//! |---|---|
//! | `bootd/secrets/token-key` | the token key (32 bytes) |
//! | `bootd/secrets/site-ca` | the site CA's key and certificate (PEM) |
//! | `bootd/spent/<expiry>/<nonce>` | a spent token (empty), removed once expired |
//!
//! The connection is made at the first use, in `bootd::prepare`, after
//! root was dropped: its runtime's threads are born unprivileged.

use etcd::{Compare, CompareOp, Transaction, TxnOp, TxnOpResponse};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Spends between two removals of expired spent tokens.
const PRUNE_EVERY: u64 = 1024;

#[derive(Debug)]
pub struct EtcdShared {
    config: etcd::Config,
    conn: OnceLock<etcd::Etcd>,
    spends: AtomicU64,
}

impl EtcdShared {
    pub fn new(config: etcd::Config) -> EtcdShared {
        EtcdShared {
            config,
            conn: OnceLock::new(),
            spends: AtomicU64::new(0),
        }
    }

    fn etcd(&self) -> io::Result<&etcd::Etcd> {
        if let Some(c) = self.conn.get() {
            return Ok(c);
        }
        let c = etcd::Etcd::connect(&self.config).map_err(io::Error::other)?;
        Ok(self.conn.get_or_init(|| c))
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
}
