//! The check loop's schedule under `tokio::time::pause()`, with a fake
//! prober: exact detection times without sockets or sleeps.

use lbd::health::check_loop;
use lbd::plan::{BackendPlan, Role};
use lbd::probe::Prober;
use lbd::state::Backend;
use site::{Check, CheckKind};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Healthy until `fail_from`, then failing until `ok_from` (if set); records
/// when each probe ran.
struct Fake {
    start: Instant,
    fail_from: Duration,
    ok_from: Option<Duration>,
    /// Each probe takes this long.
    takes: Duration,
    seen: Mutex<Vec<Duration>>,
}

impl Prober for Fake {
    async fn probe(&self, _: SocketAddr, _: &Check) -> Result<(), String> {
        let t = self.start.elapsed();
        self.seen.lock().unwrap().push(t);
        tokio::time::sleep(self.takes).await;
        let failing = t >= self.fail_from && self.ok_from.is_none_or(|o| t < o);
        if failing {
            Err("HTTP 503".into())
        } else {
            Ok(())
        }
    }
}

fn check() -> Check {
    Check {
        kind: CheckKind::Tcp,
        port: None,
        interval: Duration::from_secs(5),
        fast_interval: Duration::from_secs(1),
        timeout: Duration::from_secs(2),
        rise: 2,
        fall: 3,
    }
}

fn backend(stop: &CancellationToken) -> Arc<Backend> {
    let plan = BackendPlan {
        name: "m0".into(),
        addr: "127.0.0.1:6443".parse().unwrap(),
        role: Role::Master,
    };
    Arc::new(Backend::new(
        &plan,
        check(),
        stop,
        &CancellationToken::new(),
    ))
}

/// Advances paused time in small steps until `cond`; returns the elapsed time.
async fn until(start: Instant, limit: Duration, cond: impl Fn() -> bool) -> Duration {
    while !cond() {
        assert!(start.elapsed() < limit, "not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}

#[tokio::test(start_paused = true)]
async fn default_timings_take_a_failed_api_server_out_well_within_30_s() {
    let start = Instant::now();
    let stop = CancellationToken::new();
    let b = backend(&stop);
    // Starts failing at 12 s: probes ran at 0, 5, 10; the next at 15 fails,
    // then 2 more at the fast interval (1 s): down at 17 s, i.e. 5 s after.
    let fake = Arc::new(Fake {
        start,
        fail_from: Duration::from_secs(12),
        ok_from: None,
        takes: Duration::ZERO,
        seen: Mutex::default(),
    });
    tokio::spawn(check_loop(
        "api".into(),
        Arc::clone(&b),
        Arc::clone(&fake),
        stop.clone(),
    ));
    until(start, Duration::from_secs(60), || !b.healthy()).await;
    assert_eq!(
        start.elapsed().as_secs(),
        17,
        "probes at {:?}",
        fake.seen.lock().unwrap()
    );
    assert!(
        b.reason()
            .contains("3 consecutive probes failed, last: HTTP 503"),
        "{}",
        b.reason()
    );
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn worst_case_with_probes_timing_out_is_interval_plus_fall_timeouts() {
    let start = Instant::now();
    let stop = CancellationToken::new();
    let b = backend(&stop);
    // Fails right after the probe at 0 s; every failing probe hangs past the
    // 2 s timeout: 5 + (2 + 1) x 2 + 2 = 13 s after the failure began.
    let fake = Arc::new(Fake {
        start,
        fail_from: Duration::from_millis(1),
        ok_from: None,
        takes: Duration::ZERO,
        seen: Mutex::default(),
    });
    let slow = Arc::new(Slow(fake));
    tokio::spawn(check_loop(
        "api".into(),
        Arc::clone(&b),
        Arc::clone(&slow),
        stop.clone(),
    ));
    let t = until(start, Duration::from_secs(60), || !b.healthy()).await;
    assert_eq!(t.as_secs(), 13);
    assert!(t < Duration::from_secs(30));
    assert!(b.reason().contains("no answer within 2s"), "{}", b.reason());
    stop.cancel();
}

/// Passes while the fake passes; hangs (until the check's timeout) while it fails.
struct Slow(Arc<Fake>);

impl Prober for Slow {
    async fn probe(&self, a: SocketAddr, c: &Check) -> Result<(), String> {
        let r = self.0.probe(a, c).await;
        if r.is_err() {
            std::future::pending::<()>().await;
        }
        r
    }
}

#[tokio::test(start_paused = true)]
async fn recovery_needs_rise_probes_at_the_fast_interval() {
    let start = Instant::now();
    let stop = CancellationToken::new();
    let b = backend(&stop);
    let fake = Arc::new(Fake {
        start,
        fail_from: Duration::ZERO,
        ok_from: Some(Duration::from_secs(21)),
        takes: Duration::from_millis(100),
        seen: Mutex::default(),
    });
    tokio::spawn(check_loop(
        "api".into(),
        Arc::clone(&b),
        Arc::clone(&fake),
        stop.clone(),
    ));
    // The first probe (t=0) fails: down at once (a new backend is not trusted).
    until(start, Duration::from_secs(5), || !b.healthy()).await;
    assert!(start.elapsed() < Duration::from_millis(200));
    // Down: probes every 5 s (0.1 s each): 5.1, 10.2, 15.3, 20.4 fail; 25.5
    // passes; one fast interval later (26.6) the second pass: up.
    let t = until(start, Duration::from_secs(60), || b.healthy()).await;
    assert_eq!(
        t.as_millis() / 100,
        267,
        "up at {t:?}, probes at {:?}",
        fake.seen.lock().unwrap()
    );
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_refused_connect_brings_the_next_probe_forward() {
    let start = Instant::now();
    let stop = CancellationToken::new();
    let b = backend(&stop);
    let fake = Arc::new(Fake {
        start,
        fail_from: Duration::from_secs(1),
        ok_from: None,
        takes: Duration::ZERO,
        seen: Mutex::default(),
    });
    tokio::spawn(check_loop(
        "api".into(),
        Arc::clone(&b),
        Arc::clone(&fake),
        stop.clone(),
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;
    b.kick.notify_one();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let seen = fake.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        seen[1].as_secs(),
        2,
        "the kick did not bring the probe forward: {seen:?}"
    );
    // Down at 2 + 1 + 1 = 4 s instead of 5 + 1 + 1 = 7 s.
    let t = until(start, Duration::from_secs(60), || !b.healthy()).await;
    assert_eq!(t.as_secs(), 4);
    stop.cancel();
}

/// A prober whose slots are all taken: the check waits for one without
/// the wait counting against the backend (no "no answer within" while it
/// waits), and probes as soon as a slot frees.
struct Bounded {
    inner: Arc<Fake>,
    slots: tokio::sync::Semaphore,
}

impl Prober for Bounded {
    fn slots(&self) -> Option<&tokio::sync::Semaphore> {
        Some(&self.slots)
    }
    async fn probe(&self, a: SocketAddr, c: &Check) -> Result<(), String> {
        self.inner.probe(a, c).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_probe_waits_for_a_slot_and_the_wait_is_not_the_backends_fault() {
    let start = Instant::now();
    let stop = CancellationToken::new();
    let b = backend(&stop);
    let fake = Arc::new(Fake {
        start,
        fail_from: Duration::from_secs(3600),
        ok_from: None,
        takes: Duration::ZERO,
        seen: Mutex::default(),
    });
    let p = Arc::new(Bounded {
        inner: Arc::clone(&fake),
        slots: tokio::sync::Semaphore::new(0),
    });
    tokio::spawn(check_loop(
        "api".into(),
        Arc::clone(&b),
        Arc::clone(&p),
        stop.clone(),
    ));
    // No slot for 10 s (five times the 2 s timeout): no probe, no verdict.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(fake.seen.lock().unwrap().is_empty());
    assert!(!b.reason().contains("no answer"), "{}", b.reason());
    p.slots.add_permits(1);
    until(start, Duration::from_secs(20), || {
        !fake.seen.lock().unwrap().is_empty()
    })
    .await;
    assert_eq!(fake.seen.lock().unwrap()[0].as_secs(), 10);
    until(start, Duration::from_secs(20), || {
        b.reason().contains("first probe passed")
    })
    .await;
    assert!(b.healthy());
    // The slot came back after the probe: the next one runs on schedule.
    until(start, Duration::from_secs(30), || {
        fake.seen.lock().unwrap().len() >= 2
    })
    .await;
    assert_eq!(p.slots.available_permits(), 1);
    stop.cancel();
}
