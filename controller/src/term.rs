//! Terms: while this appliance runs the reconcile loops (always on SQLite;
//! while elected on etcd), one loop per node and the bootstrap teardown and
//! cluster loops run in the term, fenced (module `fence`), and stop with it.

use crate::{cluster, fence, leader, reconcile, store, teardown, Controller};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

impl Controller {
    /// Starts the node's reconcile loop unless it runs; wakes it if it
    /// does. Nothing while this appliance does not run the loops (another
    /// is elected).
    pub fn ensure_loop(self: &Arc<Self>, name: &str) {
        let Some(term) = self.acting() else { return };
        let mut loops = self.loops.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((n, t)) = loops.get(name) {
            if !t.is_cancelled() {
                n.notify_one();
                return;
            }
        }
        let wake = Arc::new(Notify::new());
        loops.insert(name.to_string(), (Arc::clone(&wake), term.clone()));
        self.spawn_in_term(
            term.clone(),
            reconcile::node_loop(Arc::clone(self), name.to_string(), wake, term),
        );
    }

    /// Runs `work` as part of `term` (fenced: nothing reaches a provider
    /// after the term ends), once the term may act.
    fn spawn_in_term(
        &self,
        term: CancellationToken,
        work: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let from = *self.acts_from.lock().unwrap_or_else(|p| p.into_inner());
        self.tracker.spawn(fence::within(term.clone(), async move {
            tokio::select! {
                _ = tokio::time::sleep_until(from) => work.await,
                _ = term.cancelled() => {}
            }
        }));
    }

    /// How long a new term waits before acting (module `fence`): records
    /// this term in the store, and reads the one before it.
    fn fence_wait(&self) -> Duration {
        if self.store.shared().is_none() {
            return Duration::ZERO;
        }
        let me = leader::identity();
        let previous = match self.store.cluster(fence::KEY) {
            Ok(v) => v.and_then(|(v, _)| serde_json::from_str::<fence::Record>(&v).ok()),
            // Not knowing who led before: wait, as after another appliance.
            Err(e) => {
                warn!(error = %e, "the previous controller term not read: waiting as after another appliance's");
                Some(fence::Record {
                    holder: String::new(),
                    began: 0,
                })
            }
        };
        let record = fence::Record {
            holder: me.clone(),
            began: store::now_ms(),
        };
        if let Err(e) = self.store.set_cluster(
            fence::KEY,
            &serde_json::to_string(&record).unwrap_or_default(),
        ) {
            warn!(error = %e, "this controller term not recorded");
        }
        fence::wait(previous.as_ref(), &me, self.tuning.request_timeout)
    }

    /// The current term's token while this appliance runs the loops.
    pub(crate) fn acting(&self) -> Option<CancellationToken> {
        self.term
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .filter(|t| !t.is_cancelled())
    }

    /// Starts running the loops here: one per stored node, and the
    /// bootstrap teardown (resuming what an earlier term left).
    pub(crate) fn begin_term(self: &Arc<Self>) {
        let term = self.shutdown.child_token();
        let wait = self.fence_wait();
        if !wait.is_zero() {
            info!(
                wait_s = wait.as_secs(),
                "controller term after another appliance's: acting once its provider calls in flight have ended (fencing)"
            );
        }
        *self.acts_from.lock().unwrap_or_else(|p| p.into_inner()) =
            tokio::time::Instant::now() + wait;
        *self.term.lock().unwrap_or_else(|p| p.into_inner()) = Some(term.clone());
        match self.store.nodes() {
            Ok(rows) => {
                for r in rows {
                    self.ensure_loop(&r.name);
                }
            }
            Err(e) => {
                error!(error = %e, "controller store: nodes not read; their loops start when they change")
            }
        }
        self.spawn_in_term(
            term.clone(),
            teardown::run(Arc::clone(self), Arc::clone(&self.teardown), term.clone()),
        );
        self.spawn_in_term(term.clone(), cluster::run(Arc::clone(self), term));
    }

    /// Stops running the loops here (each stops at its next wait).
    pub(crate) fn end_term(&self) {
        if let Some(t) = self.term.lock().unwrap_or_else(|p| p.into_inner()).take() {
            t.cancel();
        }
    }
}
