//! A waiting request's record of its client: whether the client still
//! asks, so a turn is not spent on one that gave up.
//!
//! Under a rack-sized storm the queue is long and a client's patience is
//! short (a PXE ROM sends its request a few times, seconds apart, then
//! gives its boot up). Served in turn, a request whose client is gone holds
//! a slot for the retries of its first packet (seconds) and delays every
//! request behind it, so more clients give up: the queue feeds on itself.
//! A client that sent its request again has shown how often it asks; once
//! it has been silent for [`SILENT_GAPS`] of its longest gap (and at least
//! [`MIN_SILENCE`]), it is taken to have given up. A client that never
//! sent its request again is not judged: it is served in turn.

use std::time::{Duration, Instant};

/// Silence past this many of the client's longest gap between sends
/// (a client that backs off doubles its gap: three covers the next).
pub(super) const SILENT_GAPS: u32 = 3;
/// Never judged gone sooner than this after its last send.
pub(super) const MIN_SILENCE: Duration = Duration::from_secs(2);

/// When a waiting request's client last sent it, and its longest gap.
#[derive(Debug, Clone, Copy)]
pub(super) struct Heard {
    last: Instant,
    /// The longest time between two of its sends (none: sent once).
    gap: Option<Duration>,
}

impl Heard {
    pub(super) fn new(now: Instant) -> Heard {
        Heard {
            last: now,
            gap: None,
        }
    }

    /// The client sent its request again.
    pub(super) fn again(&mut self, now: Instant) {
        let gap = now.saturating_duration_since(self.last);
        self.gap = Some(self.gap.map_or(gap, |g| g.max(gap)));
        self.last = now;
    }

    /// How long the client has been silent, if that says it gave up.
    pub(super) fn gone(&self, now: Instant) -> Option<Duration> {
        let gap = self.gap?;
        let silent = now.saturating_duration_since(self.last);
        (silent > (gap * SILENT_GAPS).max(MIN_SILENCE)).then_some(silent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: f64) -> Duration {
        Duration::from_secs_f64(x)
    }

    #[test]
    fn a_client_that_asked_once_is_never_judged() {
        let t = Instant::now();
        assert_eq!(Heard::new(t).gone(t + s(3600.0)), None);
    }

    #[test]
    fn silence_past_three_gaps_and_the_minimum_is_giving_up() {
        let t = Instant::now();
        let mut h = Heard::new(t);
        // A storm client: every 2 s.
        h.again(t + s(2.0));
        h.again(t + s(4.0));
        assert_eq!(h.gone(t + s(9.9)), None, "5.9 s: under 3 x 2 s");
        assert_eq!(h.gone(t + s(10.5)), Some(s(6.5)));
        // Quick sends: the minimum holds.
        let mut q = Heard::new(t);
        q.again(t + s(0.1));
        assert_eq!(q.gone(t + s(2.0)), None);
        assert_eq!(q.gone(t + s(2.2)), Some(s(2.1)));
    }

    #[test]
    fn a_client_that_backs_off_is_still_waiting_at_its_next_gap() {
        // 1, 2, 4 s apart: the next comes 8 s after the last.
        let t = Instant::now();
        let mut h = Heard::new(t);
        for at in [1.0, 3.0, 7.0] {
            h.again(t + s(at));
        }
        assert_eq!(h.gone(t + s(15.0)), None);
        assert_eq!(h.gone(t + s(19.5)), Some(s(12.5)));
    }
}
