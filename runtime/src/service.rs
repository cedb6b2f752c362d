//! The systemd service protocol (sd_notify), the same for every daemon:
//! `READY=1` once the config is validated and the sockets are bound,
//! `RELOADING=1` + `MONOTONIC_USEC` when a SIGHUP reload starts and
//! `READY=1` when it has finished (applied or refused), `STOPPING=1` on
//! SIGTERM, and `WATCHDOG=1` at half the unit's `WatchdogSec`. Outside
//! systemd (`NOTIFY_SOCKET` unset) every call is a no-op.

use sd_notify::NotifyState;
use std::time::Duration;

fn send(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(false, states) {
        tracing::warn!(error = %e, "sd_notify failed");
    }
}

/// Startup finished: config validated, sockets bound. `status` is shown
/// by `systemctl status`.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// A reload starts (systemd 253+ requires the monotonic timestamp with it).
pub fn reloading() {
    send(&[
        NotifyState::Reloading,
        NotifyState::monotonic_usec_now().unwrap_or(NotifyState::MonotonicUsec(0)),
    ]);
}

/// A reload finished (applied or refused; the status line says which).
pub fn reloaded(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

pub fn stopping() {
    send(&[
        NotifyState::Stopping,
        NotifyState::Status("stopping: draining connections"),
    ]);
}

/// How often to send [`watchdog`]: half the unit's `WatchdogSec`, or
/// `None` when the watchdog is off.
pub fn watchdog_interval() -> Option<Duration> {
    let mut usec = 0u64;
    sd_notify::watchdog_enabled(false, &mut usec).then(|| Duration::from_micros(usec / 2))
}

pub fn watchdog() {
    send(&[NotifyState::Watchdog]);
}

/// The signal loop every daemon runs (with the `daemon` feature):
/// SIGHUP → `RELOADING=1`, notify every `reload`, wait (at most 60 s in
/// all) for every `reloaded` (one per daemon in the process), then
/// `READY=1`; SIGTERM or SIGINT → `STOPPING=1` and cancel `shutdown`.
/// The handlers are installed when this is called, before the returned
/// future runs: call it before `READY=1`, so a SIGHUP that systemd sends
/// right after READY never meets the default action (termination). The
/// future returns when shutdown starts. Pass no `reloaded` for a daemon that
/// cannot tell when its reload finished (then READY=1 follows the
/// notification at once).
pub fn signals(
    shutdown: tokio_util::sync::CancellationToken,
    reloads: Vec<std::sync::Arc<tokio::sync::Notify>>,
    reloaded: Vec<std::sync::Arc<tokio::sync::Notify>>,
) -> std::io::Result<impl std::future::Future<Output = std::io::Result<()>> + Send + 'static> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = signal(SignalKind::hangup())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        loop {
            tokio::select! {
                _ = hup.recv() => {
                    tracing::info!("SIGHUP: re-reading the configuration");
                    reloading();
                    // Registered before the reloads are asked for, so a reload
                    // that finishes at once is not missed.
                    let mut done: Vec<_> = reloaded.iter().map(|n| Box::pin(n.notified())).collect();
                    done.iter_mut().for_each(|d| {
                        d.as_mut().enable();
                    });
                    reloads.iter().for_each(|r| r.notify_one());
                    let status = if done.is_empty() {
                        "reload requested"
                    } else {
                        let all = async {
                            for d in done {
                                d.await;
                            }
                        };
                        match tokio::time::timeout(Duration::from_secs(60), all).await {
                            Ok(()) => "reload finished (see the log for applied or refused)",
                            Err(_) => "reload still running after 60 s",
                        }
                    };
                    self::reloaded(status);
                }
                _ = term.recv() => { tracing::info!("SIGTERM: draining"); stopping(); shutdown.cancel(); return Ok(()); }
                _ = int.recv() => { tracing::info!("SIGINT: draining"); stopping(); shutdown.cancel(); return Ok(()); }
            }
        }
    })
}

/// The tail every daemon's main shares, once its sockets are bound: the
/// signal handlers first ([`signals`]; READY=1 invites a SIGHUP), then
/// `READY=1` with `status`, the watchdog ([`spawn_watchdog`]), and `daemon`
/// until it returns (after `shutdown`, which SIGTERM/SIGINT cancel); then
/// the signal loop and the watchdog stop. `Err` only when the handlers
/// cannot be installed (`daemon` is then dropped, never run).
pub async fn serve_until_stopped<T>(
    shutdown: tokio_util::sync::CancellationToken,
    reloads: Vec<std::sync::Arc<tokio::sync::Notify>>,
    reloaded: Vec<std::sync::Arc<tokio::sync::Notify>>,
    status: &str,
    daemon: impl std::future::Future<Output = T>,
) -> std::io::Result<T> {
    let signals = tokio::spawn(signals(shutdown, reloads, reloaded)?);
    ready(status);
    let watchdog = spawn_watchdog();
    let r = daemon.await;
    signals.abort();
    if let Some(w) = watchdog {
        w.abort();
    }
    Ok(r)
}

/// Sends `WATCHDOG=1` from the async runtime at half the unit's
/// `WatchdogSec` (so a wedged runtime is noticed); `None` when the
/// watchdog is off. Abort the handle at exit.
pub fn spawn_watchdog() -> Option<tokio::task::JoinHandle<()>> {
    watchdog_interval().map(|every| {
        tokio::spawn(async move {
            loop {
                watchdog();
                tokio::time::sleep(every).await;
            }
        })
    })
}

/// The daemons' tokio runtime, with `threads` workers (default: the CPUs
/// this process may run on, as `available_parallelism` reports them for a
/// cgroup or `taskset` limit). One worker means a current-thread runtime:
/// a multi-thread one would have a single worker anyway and pay for
/// cross-thread wakeups and work-stealing bookkeeping on every idle period.
///
/// Building it also starts the process's [`clock`](crate::clock) (the system
/// clock is read here, once) and its watch for steps of the system clock.
pub fn runtime(threads: Option<usize>) -> std::io::Result<tokio::runtime::Runtime> {
    crate::clock::start();
    let rt = build(threads)?;
    rt.spawn(crate::clock::watch());
    Ok(rt)
}

fn build(threads: Option<usize>) -> std::io::Result<tokio::runtime::Runtime> {
    let n = threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    if n <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build()
    }
}
