//! Group membership: every live process of a group, each under a key of
//! its own held by its lease.
//!
//! A member puts `members/<group>/<lease id>` (value: who it is) with an
//! etcd lease of `ttl` that it keeps alive; the key goes when the lease
//! expires (the process died or lost etcd) or is revoked (it stopped). Each
//! member watches the group and knows every live member, itself included,
//! so all of them derive the same answer from the same list (who serves
//! which client).

use crate::elect::identity;
use crate::{Change, Etcd};
use etcd_client::{GetOptions, PutOptions};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The group as one member sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Membership {
    /// This member's key (its lease id, hexadecimal); `None` while it is
    /// not a member (etcd unreachable, lease lost).
    pub me: Option<String>,
    /// Every live member's key, sorted (this one's included).
    pub members: Vec<String>,
}

impl Etcd {
    /// Joins `group` until `stop` (leaving it then: the lease revoked, so
    /// the others see it gone at once). The receiver follows the group.
    /// After a lost lease the member joins again with a new key (every
    /// second while etcd cannot be reached).
    pub fn membership(
        &self,
        group: &str,
        ttl: Duration,
        stop: CancellationToken,
    ) -> watch::Receiver<Membership> {
        let (tx, rx) = watch::channel(Membership::default());
        let (etcd, dir) = (self.clone(), format!("members/{group}/"));
        self.spawn(async move {
            loop {
                let lost = CancellationToken::new();
                match join(&etcd, &dir, ttl, &lost).await {
                    Ok((lease, me)) => {
                        tracing::info!(group = %dir, member = %me, "joined");
                        follow(&etcd, &dir, &me, &tx, &lost, &stop).await;
                        lost.cancel();
                        let _ = tx.send(Membership::default());
                        if stop.is_cancelled() {
                            let _ = etcd
                                .run("revoke lease", move |mut c| async move {
                                    c.lease_revoke(lease).await
                                })
                                .await;
                            return;
                        }
                        tracing::warn!(group = %dir, member = %me, "membership lost; joining again");
                    }
                    Err(e) => {
                        tracing::warn!(group = %dir, error = %e, "membership: etcd unreachable; trying again in 1 s")
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = stop.cancelled() => return,
                }
            }
        });
        rx
    }
}

/// A lease kept alive (until `lost`) and this member's key put with it.
async fn join(
    etcd: &Etcd,
    dir: &str,
    ttl: Duration,
    lost: &CancellationToken,
) -> Result<(i64, String), crate::Error> {
    let lease = etcd.kept_lease(ttl, lost).await?;
    let me = format!("{lease:016x}");
    let key = etcd.key(&format!("{dir}{me}"));
    let who = identity();
    let put = etcd
        .run("join", move |mut c| async move {
            c.put(key, who, Some(PutOptions::new().with_lease(lease)))
                .await
        })
        .await;
    if let Err(e) = put {
        lost.cancel();
        return Err(e);
    }
    Ok((lease, me))
}

/// Sends the group's members on every change until the lease is lost or
/// `stop`. A list that does not hold this member (its key gone) ends it.
async fn follow(
    etcd: &Etcd,
    dir: &str,
    me: &str,
    tx: &watch::Sender<Membership>,
    lost: &CancellationToken,
    stop: &CancellationToken,
) {
    let mut changes = etcd.watch(dir);
    loop {
        let change = tokio::select! {
            c = changes.recv() => c,
            _ = lost.cancelled() => return,
            _ = stop.cancelled() => return,
        };
        if change.is_none() {
            return;
        }
        // Every change (Resync included): read the group again.
        let _: Option<Change> = change;
        let prefix = etcd.key(dir);
        let listed = etcd
            .run("members", move |mut c| async move {
                c.get(
                    prefix,
                    Some(GetOptions::new().with_prefix().with_keys_only()),
                )
                .await
            })
            .await;
        let Ok(r) = listed else {
            continue; // the watch says when to read again; the lease when to stop
        };
        let mut members: Vec<String> = r
            .kvs()
            .iter()
            .map(|kv| {
                let k = etcd.rel(kv.key());
                k.strip_prefix(dir).unwrap_or(&k).to_string()
            })
            .collect();
        members.sort();
        if !members.iter().any(|m| m == me) {
            tracing::warn!(group = %dir, member = %me, "this member's key is gone");
            return;
        }
        let now = Membership {
            me: Some(me.to_string()),
            members,
        };
        tx.send_if_modified(|m| std::mem::replace(m, now.clone()) != now);
    }
}
