//! The reload loop every daemon runs: on SIGHUP (a [`Triggers::reload`]
//! notification) or when a watched file's modification time changes, do
//! one step (re-read, validate, apply or refuse). Written once; the site
//! feed, bootd's revoked-node list, dnsd's master files and lbd's own file
//! use it.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// What starts a reload.
#[derive(Debug, Clone)]
pub struct Triggers {
    /// Notified on SIGHUP (by the signal loop) or by tests: reload now.
    pub reload: Arc<Notify>,
    /// Notified (all waiters) when a reload asked for through `reload` has
    /// finished, applied or refused (the signal loop then tells systemd
    /// READY=1).
    pub reloaded: Arc<Notify>,
    /// How often the watched files are looked at; `None`: only on `reload`.
    pub poll: Option<Duration>,
}

impl Triggers {
    pub fn new(poll: Option<Duration>) -> Triggers {
        Triggers {
            reload: Arc::new(Notify::new()),
            reloaded: Arc::new(Notify::new()),
            poll,
        }
    }
}

/// Modification times of `files` (`None` for a file that cannot be read).
pub fn fingerprint(files: &[PathBuf]) -> Fingerprint {
    files
        .iter()
        .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .collect()
}

/// Runs `step(forced)` whenever `reload` is notified (`forced`) or one of
/// `files()` changed, until `shutdown`. `files` is asked again after each
/// step, since a reload may change what is watched; a step that failed is
/// not retried until a file changes again or a reload is asked for.
pub async fn watch<F, S, Fut>(triggers: Triggers, shutdown: CancellationToken, files: F, step: S)
where
    F: Fn() -> Vec<PathBuf>,
    S: FnMut(bool) -> Fut,
    Fut: Future<Output = ()>,
{
    let since = fingerprint(&files());
    watch_since(since, || None, triggers, shutdown, files, step).await
}

/// The files' modification times.
pub type Fingerprint = Vec<Option<SystemTime>>;

/// As [`watch`], comparing first with `since` (the files' times when what
/// is being served was read, so a change made before the loop starts is not
/// missed); `baseline` may replace the comparison point before each look
/// (what was served meanwhile without this loop: the site feed's API
/// writes).
pub async fn watch_since<B, F, S, Fut>(
    since: Fingerprint,
    baseline: B,
    triggers: Triggers,
    shutdown: CancellationToken,
    files: F,
    mut step: S,
) where
    B: Fn() -> Option<Fingerprint>,
    F: Fn() -> Vec<PathBuf>,
    S: FnMut(bool) -> Fut,
    Fut: Future<Output = ()>,
{
    /// Tells `reloaded`'s waiters when a forced step ends, however it ends.
    struct Done(Arc<Notify>);
    impl Drop for Done {
        fn drop(&mut self) {
            self.0.notify_waiters();
        }
    }
    let mut last = since;
    loop {
        let forced = tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = triggers.reload.notified() => true,
            _ = async { match triggers.poll { Some(p) => tokio::time::sleep(p).await, None => std::future::pending().await } } => false,
        };
        let _done = forced.then(|| Done(Arc::clone(&triggers.reloaded)));
        if let Some(b) = baseline() {
            last = b;
        }
        let now = fingerprint(&files());
        tracing::trace!(?now, ?last, forced, "watched files checked");
        if !forced && now == last {
            continue;
        }
        step(forced).await;
        // The files' times after the step, so applying it is not seen as a change.
        last = fingerprint(&files());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(start_paused = true)]
    async fn steps_on_reload_and_on_change_only() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a");
        std::fs::write(&f, "1").unwrap();
        let t = Triggers::new(Some(Duration::from_millis(100)));
        let steps = Arc::new(AtomicUsize::new(0));
        let stop = CancellationToken::new();
        let task = {
            let (t, stop, steps, f) = (t.clone(), stop.clone(), Arc::clone(&steps), f.clone());
            tokio::spawn(watch(
                t,
                stop,
                move || vec![f.clone()],
                move |_| {
                    steps.fetch_add(1, Ordering::SeqCst);
                    async {}
                },
            ))
        };
        tokio::time::sleep(Duration::from_millis(350)).await;
        assert_eq!(steps.load(Ordering::SeqCst), 0, "nothing changed");
        let done = t.reloaded.notified();
        t.reload.notify_one();
        done.await;
        assert_eq!(steps.load(Ordering::SeqCst), 1, "a forced reload steps");
        // A change of modification time (set explicitly: the clock is paused).
        let later = SystemTime::now() + Duration::from_secs(10);
        std::fs::File::options()
            .write(true)
            .open(&f)
            .unwrap()
            .set_modified(later)
            .unwrap();
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(steps.load(Ordering::SeqCst), 2, "a changed file steps once");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(steps.load(Ordering::SeqCst), 2);
        stop.cancel();
        task.await.unwrap();
    }
}
