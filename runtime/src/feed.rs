//! The site feed: the validated site of a process, loaded once per change
//! and handed to every daemon in it (bootd, the controller, dnsd and lbd
//! in the all-in-one binary), so nobody parses again what another part
//! already validated. The controller publishes the site it validated for
//! an API write the same way, without a round trip through the disk (the
//! node overlay file stays the durable record, and what other processes
//! read).
//!
//! Invariant: a published site passed `site::load`; a reload that does
//! not validate is published as a refusal that keeps the previous site, so
//! each daemon still counts and logs it.

use crate::reload::{self, Fingerprint, Triggers};
use site::Site;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// What the feed carries.
#[derive(Debug, Clone)]
pub struct Published {
    /// The site every daemon serves.
    pub site: Arc<Site>,
    /// Counts publications (new sites and refusals); 0 is the first site.
    pub generation: u64,
    /// The last reload was refused, for this reason; `site` is the one
    /// before it.
    pub refused: Option<Arc<str>>,
    /// The publication answers a forced reload (SIGHUP).
    pub forced: bool,
}

/// The sending side; clones share one feed.
#[derive(Debug, Clone)]
pub struct SiteFeed {
    tx: Arc<watch::Sender<Published>>,
    /// The site files' times when the first site was read.
    since: Arc<Fingerprint>,
    /// The site files' times when a site was last published from outside
    /// the reload loop: the loop takes them as its comparison point, so the
    /// overlay file an API write just wrote is not parsed again.
    published: Arc<Mutex<Option<Fingerprint>>>,
}

impl SiteFeed {
    pub fn new(site: Site) -> SiteFeed {
        SiteFeed::from_arc(Arc::new(site))
    }

    pub fn from_arc(site: Arc<Site>) -> SiteFeed {
        let since = Arc::new(reload::fingerprint(&site.watched_files()));
        let (tx, _) = watch::channel(Published {
            site,
            generation: 0,
            refused: None,
            forced: false,
        });
        SiteFeed {
            tx: Arc::new(tx),
            since,
            published: Default::default(),
        }
    }

    /// Every publication from now on (the current one is marked seen).
    pub fn subscribe(&self) -> watch::Receiver<Published> {
        let mut rx = self.tx.subscribe();
        rx.mark_unchanged();
        rx
    }

    /// The site being served.
    pub fn current(&self) -> Arc<Site> {
        Arc::clone(&self.tx.borrow().site)
    }

    /// Publishes a site validated elsewhere (the controller's API writes).
    pub fn publish(&self, site: Arc<Site>) {
        self.send(Ok(site), false);
        let now = reload::fingerprint(&self.files());
        *self.published.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
    }

    fn send(&self, r: Result<Arc<Site>, String>, forced: bool) {
        self.tx.send_modify(|p| {
            p.generation += 1;
            p.forced = forced;
            match r {
                Ok(site) => {
                    p.site = site;
                    p.refused = None;
                }
                Err(why) => p.refused = Some(why.into()),
            }
        });
    }

    /// The files a change of which is a new site: the site file and every
    /// file it names (role Ignition configs, the node overlay, catalog
    /// streams).
    pub fn files(&self) -> Vec<PathBuf> {
        self.current().watched_files()
    }

    /// Re-reads the site whenever `triggers` say so, until `shutdown`, and
    /// publishes what it read (a site, or the refusal of one).
    pub async fn watch(self, triggers: Triggers, shutdown: CancellationToken) {
        let feed = self.clone();
        let since = self.since.to_vec();
        let published = Arc::clone(&self.published);
        let baseline = move || published.lock().unwrap_or_else(|p| p.into_inner()).take();
        reload::watch_since(
            since,
            baseline,
            triggers,
            shutdown,
            move || self.files(),
            move |forced| {
                let feed = feed.clone();
                async move {
                    let path = feed.current().source.clone();
                    match tokio::task::spawn_blocking(move || site::load(&path)).await {
                        Ok(Ok(site)) => {
                            tracing::info!(nodes = site.nodes.len(), forced, "site loaded");
                            feed.send(Ok(Arc::new(site)), forced);
                        }
                        Ok(Err(e)) => feed.send(Err(e.to_string()), forced),
                        Err(e) => tracing::error!(error = %e, "site load task failed"),
                    }
                }
            },
        )
        .await
    }
}

/// Calls `apply` with each publication on `rx`, in order (a publication
/// made while `apply` runs is seen once, the newest), until `shutdown` or
/// until the feed is gone.
pub async fn follow<F, Fut>(
    mut rx: watch::Receiver<Published>,
    shutdown: CancellationToken,
    mut apply: F,
) where
    F: FnMut(Published) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            r = rx.changed() => if r.is_err() { return },
        }
        let p = rx.borrow_and_update().clone();
        apply(p).await;
    }
}
