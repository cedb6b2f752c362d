//! Health checks: the pure rise/fall state machine ([`CheckState`]), and the
//! loop that probes one backend on its schedule ([`check_loop`]), generic over
//! the [`Prober`] so tests drive it under `tokio::time::pause()` with a fake.
//!
//! A new backend starts up but unconfirmed: its first probe runs at once and
//! a failure takes it down straight away (rise/fall apply from then on). So a
//! pool change never refuses connections while new backends warm up, and a
//! dead new backend is out after one probe timeout at most.

use crate::probe::Prober;
use crate::state::Backend;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// Consecutive results against the current state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckState {
    pub up: bool,
    /// A probe has answered since the backend appeared.
    pub confirmed: bool,
    ok_run: u32,
    fail_run: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    WentUp,
    WentDown,
}

impl Default for CheckState {
    fn default() -> Self {
        CheckState {
            up: true,
            confirmed: false,
            ok_run: 0,
            fail_run: 0,
        }
    }
}

impl CheckState {
    /// Records one probe result; returns the state change it caused, if any.
    pub fn observe(&mut self, ok: bool, rise: u32, fall: u32) -> Option<Transition> {
        let first = !self.confirmed;
        self.confirmed = true;
        if ok {
            self.ok_run = self.ok_run.saturating_add(1);
            self.fail_run = 0;
            if !self.up && self.ok_run >= rise {
                self.up = true;
                return Some(Transition::WentUp);
            }
        } else {
            self.fail_run = self.fail_run.saturating_add(1);
            self.ok_run = 0;
            if self.up && (first || self.fail_run >= fall) {
                self.up = false;
                return Some(Transition::WentDown);
            }
        }
        None
    }

    /// When to probe next: `fast` while the state is changing (results
    /// against the current state have begun), `interval` when settled.
    pub fn next_delay(&self, interval: Duration, fast: Duration) -> Duration {
        let changing = (self.up && self.fail_run > 0) || (!self.up && self.ok_run > 0);
        if changing {
            fast
        } else {
            interval
        }
    }
}

/// Probes `backend` until `stop` is cancelled, publishing state changes to
/// it (with the reason, logged). A refused connect on the data path wakes
/// the loop early (`Backend::kick`).
pub async fn check_loop<P: Prober>(
    frontend: Arc<str>,
    backend: Arc<Backend>,
    prober: Arc<P>,
    stop: CancellationToken,
) {
    let mut st = CheckState::default();
    loop {
        let check = backend.check();
        let addr = SocketAddr::new(backend.addr.ip(), check.port.unwrap_or(backend.addr.port()));
        // A slot first (a bounded number of probes in flight): waiting for
        // one is not the backend's fault and not part of its timeout.
        let slot = match prober.slots() {
            Some(s) => tokio::select! {
                _ = stop.cancelled() => return,
                p = s.acquire() => p.ok(),
            },
            None => None,
        };
        let t0 = Instant::now();
        let result = tokio::select! {
            _ = stop.cancelled() => return,
            r = tokio::time::timeout(check.timeout, prober.probe(addr, &check)) => match r {
                Ok(r) => r,
                Err(_) => Err(format!("no answer within {:?}", check.timeout)),
            },
        };
        drop(slot);
        backend.record_probe(t0.elapsed(), result.is_ok());
        let was_confirmed = st.confirmed;
        match st.observe(result.is_ok(), check.rise, check.fall) {
            Some(Transition::WentUp) => {
                info!(frontend = %frontend, backend = %backend.name, addr = %backend.addr, rise = check.rise, "backend UP: {} consecutive probes passed", check.rise);
                backend.set_health(true, format!("{} consecutive probes passed", check.rise));
            }
            Some(Transition::WentDown) => {
                let reason = result.as_ref().err().cloned().unwrap_or_default();
                let why = if was_confirmed {
                    format!("{} consecutive probes failed, last: {reason}", check.fall)
                } else {
                    format!("first probe failed: {reason}")
                };
                warn!(frontend = %frontend, backend = %backend.name, addr = %backend.addr, "backend DOWN: {why}");
                backend.set_health(false, why);
            }
            None if !was_confirmed => {
                info!(frontend = %frontend, backend = %backend.name, addr = %backend.addr, "backend UP: first probe passed");
                backend.set_health(true, "first probe passed".into());
            }
            None => {}
        }
        let delay = st.next_delay(check.interval, check.fast_interval);
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
            // A refused connect says more than a timer: probe now, at most
            // as often as the fast interval allows.
            _ = backend.kick.notified() => {
                let since = t0.elapsed();
                if since < check.fast_interval {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(check.fast_interval - since) => {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(st: &mut CheckState, results: &[bool]) -> Vec<Option<Transition>> {
        results.iter().map(|ok| st.observe(*ok, 2, 3)).collect()
    }

    #[test]
    fn new_backend_is_up_and_first_failure_takes_it_down() {
        let mut st = CheckState::default();
        assert!(st.up);
        assert_eq!(run(&mut st, &[false]), [Some(Transition::WentDown)]);
        let mut st = CheckState::default();
        assert_eq!(
            run(&mut st, &[true, false, false, false]),
            [None, None, None, Some(Transition::WentDown)]
        );
    }

    #[test]
    fn rise_and_fall_count_consecutive_results() {
        let mut st = CheckState::default();
        run(&mut st, &[true]);
        // fall = 3: two failures and a success reset the count.
        assert_eq!(run(&mut st, &[false, false, true, false, false]), [None; 5]);
        assert_eq!(run(&mut st, &[false]), [Some(Transition::WentDown)]);
        // rise = 2
        assert_eq!(run(&mut st, &[true, false, true]), [None; 3]);
        assert_eq!(run(&mut st, &[true]), [Some(Transition::WentUp)]);
    }

    #[test]
    fn a_flapping_backend_does_not_thrash() {
        // Alternating results never reach rise 2 or fall 3 consecutively.
        let mut st = CheckState::default();
        run(&mut st, &[true]);
        let flaps: Vec<bool> = (0..100).map(|i| i % 2 == 0).collect();
        assert!(run(&mut st, &flaps).iter().all(Option::is_none));
        assert!(st.up);
        // Two bad for one good, once down: it stays down.
        let mut st = CheckState::default();
        run(&mut st, &[false]);
        let mostly_bad: Vec<bool> = (0..99).map(|i| i % 3 == 0).collect();
        assert!(run(&mut st, &mostly_bad).iter().all(Option::is_none));
        assert!(!st.up);
    }

    #[test]
    fn probes_come_fast_only_while_changing() {
        let (i, f) = (Duration::from_secs(5), Duration::from_secs(1));
        let mut st = CheckState::default();
        st.observe(true, 2, 3);
        assert_eq!(st.next_delay(i, f), i);
        st.observe(false, 2, 3);
        assert_eq!(st.next_delay(i, f), f);
        st.observe(false, 2, 3);
        st.observe(false, 2, 3);
        assert!(!st.up);
        assert_eq!(st.next_delay(i, f), i);
        st.observe(true, 2, 3);
        assert_eq!(st.next_delay(i, f), f);
    }
}
