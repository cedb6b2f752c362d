//! Which site a prefix belongs to: the site's identity, stored under the
//! prefix (`site-identity`) by the first appliance that uses it, and
//! compared by every connection that names one ([`Config::site`]) before
//! its first request under the prefix.
//!
//! An appliance of another site whose prefix is the same (the default
//! prefix names the cluster only) is stopped there: it reads no token key
//! or CA, joins no election, writes nothing. The check guards against a
//! mistake, not an attacker: whoever can write the prefix can write the
//! identity too (etcd's RBAC is what keeps sites apart, docs/ha.md).
//!
//! The record is a few `name: value` lines, readable with `etcdctl get`:
//!
//! ```text
//! id: lab.example.test
//! cluster: lab.example.test
//! by: appliance-a pid 812
//! ```
//!
//! Only `id` is compared; the rest says, in the refusal, whose it is.

use crate::Config;
use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse};

/// The key, relative to the prefix.
pub const KEY: &str = "site-identity";

/// What a site calls itself under its prefix (the site's
/// `host.store.etcd.siteId`, by default its cluster's domain).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteIdentity {
    /// Compared: two appliances with the same `id` are of one site.
    pub id: String,
    /// The cluster's domain (`<name>.<baseDomain>`), for people.
    pub cluster: String,
}

/// The prefix holds another site's identity (or a value that is not one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtherSite {
    pub prefix: String,
    /// What is stored: the record, or the raw value when it is not one.
    pub found: Found,
    pub expected: SiteIdentity,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Site {
        identity: SiteIdentity,
        /// Which appliance stored it (host name and PID).
        by: String,
    },
    /// Not a record bootd writes.
    Foreign(String),
}

impl std::fmt::Display for OtherSite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (p, e) = (&self.prefix, &self.expected);
        match &self.found {
            Found::Site { identity, by } => write!(
                f,
                "the etcd prefix {p} belongs to another site: it holds the site identity {:?} \
                 (cluster {}, stored by {by}), and this site's is {:?} (cluster {}; \
                 host.store.etcd.siteId, by default the cluster's domain)",
                identity.id, identity.cluster, e.id, e.cluster
            )?,
            Found::Foreign(v) => write!(
                f,
                "the etcd prefix {p} holds {p}{KEY} = {v:?}, which is not a site identity bootd \
                 writes; this site's is {:?} (cluster {})",
                e.id, e.cluster
            )?,
        }
        let same = match &self.found {
            Found::Site { identity, .. } => format!(
                ", or, if both are the same site, write siteId: {:?} under host.store.etcd in \
                 this site file (every appliance of a site runs the same one)",
                identity.id
            ),
            Found::Foreign(_) => String::new(),
        };
        write!(
            f,
            ". Nothing else under it was read, and nothing was written: no token key, CA, \
             node or election. Give this site a prefix of its own (host.store.etcd.prefix){same}; if \
             the prefix's site no longer exists, delete its keys first \
             (etcdctl del --prefix {p})"
        )
    }
}

impl std::error::Error for OtherSite {}

/// The stored form of `me`, written by `by`.
pub fn record(me: &SiteIdentity, by: &str) -> String {
    let line = |s: &str| s.replace(['\n', '\r'], " ");
    format!(
        "id: {}\ncluster: {}\nby: {}\n",
        line(&me.id),
        line(&me.cluster),
        line(by)
    )
}

/// A stored record read back; `None` when it is not one.
pub fn parse(value: &[u8]) -> Option<(SiteIdentity, String)> {
    let text = std::str::from_utf8(value).ok()?;
    let (mut id, mut cluster, mut by) = (None, None, None);
    for line in text.lines() {
        match line.split_once(": ")? {
            ("id", v) => id = Some(v),
            ("cluster", v) => cluster = Some(v),
            ("by", v) => by = Some(v),
            _ => {}
        }
    }
    let identity = SiteIdentity {
        id: id.filter(|i| !i.is_empty())?.to_string(),
        cluster: cluster?.to_string(),
    };
    Some((identity, by.unwrap_or_default().to_string()))
}

/// Why the check did not pass.
pub(crate) enum Refused {
    Etcd(etcd_client::Error),
    OtherSite(Box<OtherSite>),
}

impl From<etcd_client::Error> for Refused {
    fn from(e: etcd_client::Error) -> Refused {
        Refused::Etcd(e)
    }
}

/// The check, done once per connection: the first request under the
/// prefix waits for it; one that cannot reach etcd leaves it to the next.
#[derive(Debug)]
pub(crate) struct Gate {
    prefix: String,
    site: Option<SiteIdentity>,
    passed: tokio::sync::OnceCell<()>,
}

impl Gate {
    pub(crate) fn new(config: &Config) -> Gate {
        Gate {
            prefix: config.prefix.clone(),
            site: config.site.clone(),
            passed: tokio::sync::OnceCell::new(),
        }
    }

    pub(crate) async fn pass(&self, client: &Client) -> Result<(), Refused> {
        let Some(me) = &self.site else {
            return Ok(());
        };
        self.passed
            .get_or_try_init(|| claim(client.clone(), &self.prefix, me))
            .await
            .map(|_| ())
    }
}

/// Stores `me` under `prefix` when no identity is there, else compares.
async fn claim(mut client: Client, prefix: &str, me: &SiteIdentity) -> Result<(), Refused> {
    let key = format!("{prefix}{KEY}");
    let t = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then([
            TxnOp::put(key.clone(), record(me, &crate::identity()), None),
            TxnOp::get(
                prefix,
                Some(GetOptions::new().with_prefix().with_count_only()),
            ),
        ])
        .or_else([TxnOp::get(key.clone(), None)]);
    let r = client.txn(t).await?;
    let mut got = None;
    for op in r.op_responses() {
        if let TxnOpResponse::Get(g) = op {
            got = Some(g);
        }
    }
    if r.succeeded() {
        let before = got.map(|g| (g.count() - 1).max(0)).unwrap_or(0);
        tracing::info!(
            prefix,
            site = %me.id,
            keys_before = before,
            "etcd: the prefix had no site identity: this site's stored (checked at every start)"
        );
        return Ok(());
    }
    let value = got
        .and_then(|g| g.kvs().first().map(|kv| kv.value().to_vec()))
        .unwrap_or_default();
    let found = match parse(&value) {
        Some((identity, _)) if identity.id == me.id => {
            tracing::debug!(prefix, site = %me.id, "etcd: the prefix is this site's");
            return Ok(());
        }
        Some((identity, by)) => Found::Site { identity, by },
        None => Found::Foreign(String::from_utf8_lossy(&value).chars().take(200).collect()),
    };
    Err(Refused::OtherSite(Box::new(OtherSite {
        prefix: prefix.to_string(),
        found,
        expected: me.clone(),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> SiteIdentity {
        SiteIdentity {
            id: "dc1-lab".into(),
            cluster: "lab.example.test".into(),
        }
    }

    /// The stored shape (what `etcdctl get` shows), and read back.
    #[test]
    fn a_record_is_three_lines_and_reads_back() {
        let r = record(&me(), "appliance-a pid 812");
        assert_eq!(
            r,
            "id: dc1-lab\ncluster: lab.example.test\nby: appliance-a pid 812\n"
        );
        assert_eq!(
            parse(r.as_bytes()),
            Some((me(), "appliance-a pid 812".into()))
        );
        assert_eq!(parse(b"hello"), None);
        assert_eq!(parse(b"cluster: x\n"), None, "no id");
    }

    #[test]
    fn the_refusal_names_the_prefix_both_identities_and_what_to_do() {
        let e = OtherSite {
            prefix: "/bare-metal-boot/lab/".into(),
            found: Found::Site {
                identity: SiteIdentity {
                    id: "lab.example.test".into(),
                    cluster: "lab.example.test".into(),
                },
                by: "appliance-a pid 812".into(),
            },
            expected: SiteIdentity {
                id: "lab.other.test".into(),
                cluster: "lab.other.test".into(),
            },
        }
        .to_string();
        for part in [
            "the etcd prefix /bare-metal-boot/lab/ belongs to another site",
            "\"lab.example.test\"",
            "appliance-a pid 812",
            "this site's is \"lab.other.test\"",
            "host.store.etcd.prefix",
            "siteId: \"lab.example.test\"",
            "etcdctl del --prefix /bare-metal-boot/lab/",
        ] {
            assert!(e.contains(part), "{part}: {e}");
        }
    }
}
