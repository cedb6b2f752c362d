//! The appliance's clock: calendar time that a step of the system clock
//! does not move.
//!
//! Lease expiries, token expiries, spent tokens, the controller's deadlines
//! and the boot timeline need "now" as a calendar time: they are written to
//! disk and handed to other hosts. Read from the system clock, an NTP step
//! or an operator's `date -s` would move all of them at once: a step forward
//! expires every lease and token, a step backward extends them all by the
//! size of the step.
//!
//! So every daemon reads the system clock once, when it starts ([`start`]),
//! and from then on advances that reading by `CLOCK_BOOTTIME`: monotonic
//! (never stepped), and, unlike `CLOCK_MONOTONIC`, counting the time the
//! host spent suspended, so a suspended bastion VM does not come back with
//! every lease extended by its nap. NTP's slewing (frequency correction)
//! applies to `CLOCK_BOOTTIME` as to the system clock, so the two agree to
//! within the drift NTP corrects.
//!
//! [`watch`] compares the two every few seconds and logs a warning when the
//! system clock has been stepped away from this one (each new step once), and
//! [`system_offset`] gives the difference for a metric. A restart takes the
//! system clock again: that is how a corrected clock is adopted. What the
//! restart does to stored expiries is then what it does in any DHCP server
//! (Kea, ISC dhcpd, dnsmasq without `HAVE_BROKEN_RTC`): they are read
//! against the new time.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

struct Anchor {
    wall: SystemTime,
    boot: Duration,
}

static ANCHOR: OnceLock<Anchor> = OnceLock::new();

fn boottime() -> Duration {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

fn anchor() -> &'static Anchor {
    ANCHOR.get_or_init(|| Anchor {
        wall: SystemTime::now(),
        boot: boottime(),
    })
}

/// Reads the system clock for the rest of this process's life. Called when
/// a daemon builds its runtime; later calls do nothing.
pub fn start() {
    anchor();
}

/// Now: the system clock at [`start`], advanced by the monotonic clock.
pub fn now() -> SystemTime {
    let a = anchor();
    a.wall + boottime().saturating_sub(a.boot)
}

/// [`now`] in whole seconds since the Unix epoch.
pub fn unix_secs() -> u64 {
    since_epoch().as_secs()
}

/// [`now`] in milliseconds since the Unix epoch.
pub fn unix_ms() -> i64 {
    since_epoch().as_millis() as i64
}

/// [`now`] in microseconds since the Unix epoch.
pub fn unix_us() -> i64 {
    since_epoch().as_micros() as i64
}

fn since_epoch() -> Duration {
    now().duration_since(UNIX_EPOCH).unwrap_or_default()
}

/// The system clock minus this clock, in milliseconds: positive when the
/// system clock has been stepped forward since [`start`], negative when
/// backward.
pub fn system_offset_ms() -> i64 {
    let sys = SystemTime::now();
    let ours = now();
    match sys.duration_since(ours) {
        Ok(d) => d.as_millis() as i64,
        Err(e) => -(e.duration().as_millis() as i64),
    }
}

/// [`system_offset_ms`] in seconds, for a gauge.
pub fn system_offset() -> f64 {
    system_offset_ms() as f64 / 1000.0
}

/// A step this large is reported; smaller differences are NTP's slewing
/// and timer granularity.
pub const STEP_REPORTED: Duration = Duration::from_secs(2);

/// How often [`watch`] looks.
pub const WATCH_EVERY: Duration = Duration::from_secs(5);

static REPORTED: AtomicI64 = AtomicI64::new(0);

/// `Some(offset)` when the offset has moved by [`STEP_REPORTED`] or more
/// since the last report (the first report is against 0).
fn new_step(offset_ms: i64) -> Option<i64> {
    let last = REPORTED.load(Ordering::Relaxed);
    if (offset_ms - last).unsigned_abs() >= STEP_REPORTED.as_millis() as u64 {
        REPORTED.store(offset_ms, Ordering::Relaxed);
        Some(offset_ms)
    } else {
        None
    }
}

/// Logs each step of the system clock once. Runs until its runtime stops.
pub async fn watch() {
    let mut tick = tokio::time::interval(WATCH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Some(ms) = new_step(system_offset_ms()) {
            tracing::warn!(
                system_minus_appliance_s = ms as f64 / 1000.0,
                "the system clock was stepped; leases, tokens, deadlines and the timeline \
                 keep this process's clock (the system clock at start, advanced monotonically) \
                 until it restarts"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advances_with_the_monotonic_clock() {
        start();
        let a = now();
        std::thread::sleep(Duration::from_millis(20));
        let b = now();
        let d = b.duration_since(a).unwrap();
        assert!(
            d >= Duration::from_millis(20) && d < Duration::from_secs(5),
            "{d:?}"
        );
        // Without a step, the system clock and this one agree.
        assert!(system_offset_ms().abs() < 1000, "{}", system_offset_ms());
        assert!(unix_secs() > 1_700_000_000);
    }

    #[test]
    fn each_step_is_reported_once() {
        assert_eq!(new_step(500), None, "slewing is not a step");
        assert_eq!(new_step(-86_400_000), Some(-86_400_000));
        assert_eq!(new_step(-86_399_000), None, "the same step again");
        assert_eq!(
            new_step(3_000),
            Some(3_000),
            "a step back to near the truth"
        );
        assert_eq!(new_step(0), Some(0));
    }
}
