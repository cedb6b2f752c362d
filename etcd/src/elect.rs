//! Leader election on etcd's election API: one holder of a name at a time.
//!
//! A candidate holds an etcd lease (`ttl`) it keeps alive every `ttl/3`,
//! and campaigns with it. Leadership ends when the holder resigns, when its
//! lease expires (the process died or lost etcd: etcd deletes its election
//! key, and the next candidate is elected), or when the holder itself has
//! not renewed its lease for `2/3 ttl`: it then stops acting
//! ([`Leadership::lost`]) before etcd can have elected another. Work the
//! old holder started before that (a provider call in flight) can outlast
//! it: the controller fences its calls (`controller::fence`).

use crate::{Error, Etcd};
use etcd_client::{LeaderKey, ResignOptions};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Who this process is, as a candidate: its host name and PID.
pub fn identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{} pid {}", host.trim(), std::process::id())
}

/// Held leadership of one name.
#[derive(Debug)]
pub struct Leadership {
    lost: CancellationToken,
    etcd: Etcd,
    lease: i64,
    key: Option<LeaderKey>,
}

impl Leadership {
    /// Cancelled when leadership ends (lease lost, resigned, dropped).
    pub fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Gives leadership up now: the next candidate is elected at once,
    /// not after the lease's time to live.
    pub async fn resign(mut self) {
        self.lost.cancel();
        if let Some(key) = self.key.take() {
            let _ = self
                .etcd
                .run("resign", move |mut c| async move {
                    c.resign(Some(ResignOptions::new().with_leader(key))).await
                })
                .await;
        }
        let lease = self.lease;
        let _ = self
            .etcd
            .run("revoke lease", move |mut c| async move {
                c.lease_revoke(lease).await
            })
            .await;
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        self.lost.cancel();
    }
}

impl Etcd {
    /// Campaigns for `name` (under the prefix's `election/`) with `value`
    /// (who this is) until elected; `None` when `stop` is cancelled first.
    /// Errors only when no lease can be had (etcd unreachable): the caller
    /// tries again later.
    pub async fn campaign(
        &self,
        name: &str,
        value: &str,
        ttl: Duration,
        stop: &CancellationToken,
    ) -> Result<Option<Leadership>, Error> {
        let lost = CancellationToken::new();
        let lease = self.kept_lease(ttl, &lost).await?;
        let key = self.key(&format!("election/{name}"));
        let value = value.to_string();
        loop {
            let (k, v) = (key.clone(), value.clone());
            let attempt = self.run("campaign", move |mut c| async move {
                c.campaign(k, v, lease).await
            });
            tokio::select! {
                r = attempt => match r {
                    Ok(r) => {
                        return Ok(Some(Leadership {
                            lost,
                            etcd: self.clone(),
                            lease,
                            key: r.leader().cloned(),
                        }))
                    }
                    // The request's deadline passed while another leads:
                    // campaign again with the same lease (the same key).
                    Err(e) if e.unavailable() && !lost.is_cancelled() => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(e) => {
                        lost.cancel();
                        return Err(e);
                    }
                },
                _ = lost.cancelled() => {
                    return Err(self.error("campaign", etcd_client::Error::LeaseKeepAliveError(
                        "the lease expired while campaigning".into(),
                    )));
                }
                _ = stop.cancelled() => {
                    lost.cancel();
                    let _ = self.run("revoke lease", move |mut c| async move { c.lease_revoke(lease).await }).await;
                    return Ok(None);
                }
            }
        }
    }

    /// Holds `name` whenever it can, until `stop`: campaigns, keeps it
    /// while the lease lives, campaigns again after a lapse (every second
    /// while etcd cannot be reached), and resigns on `stop` so the next
    /// candidate is elected at once. The receiver says whether this
    /// process holds it now.
    pub fn elect(
        &self,
        name: &str,
        ttl: Duration,
        stop: CancellationToken,
    ) -> watch::Receiver<bool> {
        let (tx, rx) = watch::channel(false);
        let (etcd, name) = (self.clone(), name.to_string());
        self.spawn(async move {
            let me = identity();
            loop {
                match etcd.campaign(&name, &me, ttl, &stop).await {
                    Ok(Some(held)) => {
                        tracing::info!(election = %name, appliance = %me, "elected");
                        let _ = tx.send(true);
                        let lost = held.lost();
                        tokio::select! {
                            _ = lost.cancelled() => {
                                tracing::warn!(election = %name, appliance = %me, "leadership lost");
                                let _ = tx.send(false);
                            }
                            _ = stop.cancelled() => {
                                let _ = tx.send(false);
                                held.resign().await;
                                tracing::info!(election = %name, appliance = %me, "leadership resigned");
                                return;
                            }
                        }
                    }
                    Ok(None) => return,
                    Err(e) if e.other_site().is_some() => {
                        tracing::error!(election = %name, error = %e, "election: not joined");
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(election = %name, error = %e, "election: etcd unreachable; campaigning again in 1 s");
                        tokio::select! {
                            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                            _ = stop.cancelled() => return,
                        }
                    }
                }
            }
        });
        rx
    }

    /// The value of `name`'s current leader, if any.
    pub async fn leader(&self, name: &str) -> Result<Option<String>, Error> {
        let key = self.key(&format!("election/{name}"));
        match self
            .run("leader", move |mut c| async move { c.leader(key).await })
            .await
        {
            Ok(r) => Ok(r
                .kv()
                .map(|kv| String::from_utf8_lossy(kv.value()).into_owned())),
            // etcd answers "election: no leader" as an error.
            Err(e) if e.to_string().contains("no leader") => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl Etcd {
    /// A lease of `ttl` (at least 2 s), renewed until `lost`, which is
    /// cancelled when a renewal fails for good ([`keep_alive`]).
    pub(crate) async fn kept_lease(
        &self,
        ttl: Duration,
        lost: &CancellationToken,
    ) -> Result<i64, Error> {
        let secs = ttl.as_secs().max(2) as i64;
        let lease = self
            .run("lease grant", move |mut c| async move {
                c.lease_grant(secs, None).await
            })
            .await?
            .id();
        self.spawn(keep_alive(
            self.clone(),
            lease,
            Duration::from_secs(secs as u64),
            lost.clone(),
        ));
        Ok(lease)
    }
}

/// Renews `lease` every `ttl/3` until `lost`; cancels `lost` when etcd says
/// the lease is gone or no renewal succeeded for `2/3 ttl`.
pub(crate) async fn keep_alive(etcd: Etcd, lease: i64, ttl: Duration, lost: CancellationToken) {
    let mut last_ok = Instant::now();
    let mut stream = None;
    loop {
        tokio::select! {
            _ = lost.cancelled() => return,
            _ = tokio::time::sleep(ttl / 3) => {}
        }
        if stream.is_none() {
            let mut c = etcd.client();
            stream = tokio::time::timeout(ttl / 3, c.lease_keep_alive(lease))
                .await
                .ok()
                .and_then(Result::ok);
        }
        let renewed = match stream.as_mut() {
            Some((keeper, answers)) => {
                let once = async {
                    keeper.keep_alive().await?;
                    answers.message().await
                };
                match tokio::time::timeout(ttl / 3, once).await {
                    Ok(Ok(Some(r))) if r.ttl() > 0 => Some(true),
                    Ok(Ok(Some(_))) => Some(false), // etcd: no such lease
                    _ => None,
                }
            }
            None => None,
        };
        match renewed {
            Some(true) => last_ok = Instant::now(),
            Some(false) => {
                tracing::warn!(lease, "etcd lease expired: leadership lost");
                lost.cancel();
                return;
            }
            None => {
                stream = None;
                // A renewal sent to a member that is gone: take it out of
                // the balancer before the next one.
                etcd.check_members();
                if last_ok.elapsed() >= ttl * 2 / 3 {
                    tracing::warn!(
                        lease,
                        "etcd lease not renewed for 2/3 of its time to live: leadership given up"
                    );
                    lost.cancel();
                    return;
                }
            }
        }
    }
}
