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
    send(&[NotifyState::Reloading, NotifyState::monotonic_usec_now().unwrap_or(NotifyState::MonotonicUsec(0))]);
}

/// A reload finished (applied or refused; the status line says which).
pub fn reloaded(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("stopping: draining connections")]);
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
