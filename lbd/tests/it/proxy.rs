//! The data path and health checks with a standalone configuration and
//! real backends on loopback.

use crate::harness::*;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn local() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

async fn web(backends: &[&Backend], extra: &str) -> (Lb, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let addrs: Vec<_> = backends.iter().map(|b| b.addr).collect();
    let p = write(dir.path(), "lb.yaml", &web_service(&addrs, extra));
    let lb = Lb::start(lbd::Source::Standalone(p), None).await;
    // Every backend confirmed up by its first probe.
    for b in backends {
        wait_for(Duration::from_secs(3), || {
            lb.backend("web", b.addr)
                .is_some_and(|x| x.healthy() && x.check_latency() > Duration::ZERO)
        })
        .await;
    }
    (lb, dir)
}

#[tokio::test]
async fn round_robin_spreads_over_backends() {
    let (a, b) = (
        Backend::start("a", local()).await,
        Backend::start("b", local()).await,
    );
    let (lb, _d) = web(&[&a, &b], "").await;
    let mut got = Vec::new();
    for _ in 0..10 {
        got.push(get(lb.addr("web")).await.unwrap());
    }
    assert_eq!(got.iter().filter(|n| *n == "a").count(), 5, "{got:?}");
    assert_eq!(got.iter().filter(|n| *n == "b").count(), 5, "{got:?}");
}

/// A backend killed (and taken out by its health check): its turns go to
/// the survivors evenly, not to its neighbour in the list.
#[tokio::test]
async fn round_robin_spreads_a_dead_backends_turns_evenly() {
    let (a, b, c) = (
        Backend::start("a", local()).await,
        Backend::start("b", local()).await,
        Backend::start("c", local()).await,
    );
    let (lb, _d) = web(&[&a, &b, &c], "").await;
    a.kill();
    wait_for(Duration::from_secs(3), || {
        !lb.backend("web", a.addr).unwrap().healthy()
    })
    .await;
    let mut got = Vec::new();
    for _ in 0..60 {
        got.push(get(lb.addr("web")).await.unwrap());
    }
    let count = |n: &str| got.iter().filter(|x| *x == n).count();
    assert_eq!((count("a"), count("b"), count("c")), (0, 30, 30), "{got:?}");
}

#[tokio::test]
async fn least_conn_avoids_the_busy_backend() {
    let (a, b) = (
        Backend::start("a", local()).await,
        Backend::start("b", local()).await,
    );
    let (lb, _d) = web(&[&a, &b], "balance: leastConn\n").await;
    // Three long-lived connections: they spread 2/1 at least; then every new
    // connection goes to the one with fewer.
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(lb.addr("web")).await.unwrap();
        get_on(&mut s, false).await.unwrap();
        held.push(s);
    }
    let (ba, bb) = (
        lb.backend("web", a.addr).unwrap(),
        lb.backend("web", b.addr).unwrap(),
    );
    let (na, nb) = (ba.active.load(Relaxed), bb.active.load(Relaxed));
    assert_eq!(na + nb, 3);
    let idle = if na < nb { "a" } else { "b" };
    let mut s = TcpStream::connect(lb.addr("web")).await.unwrap();
    assert_eq!(get_on(&mut s, false).await.unwrap(), idle);
}

#[tokio::test]
async fn failover_within_fall_times_interval_and_no_client_error_after() {
    let (a, b) = (
        Backend::start("a", local()).await,
        Backend::start("b", local()).await,
    );
    let (lb, _d) = web(&[&a, &b], "").await;
    // interval 200ms, fall 3: out within fall x interval = 600 ms.
    a.healthy.store(false, Relaxed);
    let ba = lb.backend("web", a.addr).unwrap();
    let took = wait_for(Duration::from_secs(3), || !ba.healthy()).await;
    assert!(
        took <= Duration::from_millis(600 + 100),
        "detection took {took:?}"
    );
    assert!(
        ba.reason().contains("3 consecutive probes failed"),
        "{}",
        ba.reason()
    );
    let hits = a.hits.load(Relaxed);
    for _ in 0..50 {
        assert_eq!(get(lb.addr("web")).await.unwrap(), "b");
    }
    assert_eq!(a.hits.load(Relaxed), hits);
    // And back: rise 2.
    a.healthy.store(true, Relaxed);
    wait_for(Duration::from_secs(3), || ba.healthy()).await;
    let names: Vec<_> = futures_all(lb.addr("web"), 10).await;
    assert!(names.iter().any(|n| n == "a"), "{names:?}");
}

async fn futures_all(addr: SocketAddr, n: usize) -> Vec<String> {
    let mut v = Vec::new();
    for _ in 0..n {
        v.push(get(addr).await.unwrap());
    }
    v
}

#[tokio::test]
async fn killed_backend_refusals_are_redispatched_before_detection() {
    let (a, b) = (
        Backend::start("a", local()).await,
        Backend::start("b", local()).await,
    );
    let (lb, _d) = web(&[&a, &b], "").await;
    a.kill();
    // Before any check has noticed: every request still succeeds.
    for _ in 0..20 {
        assert_eq!(get(lb.addr("web")).await.unwrap(), "b");
    }
    let ba = lb.backend("web", a.addr).unwrap();
    assert!(ba.connect_failures.load(Relaxed) >= 1);
    // The refused connect woke the checker: down quickly.
    wait_for(Duration::from_secs(2), || !ba.healthy()).await;
}

#[tokio::test]
async fn a_flapping_backend_does_not_thrash() {
    let (a, b) = (
        Backend::start("a", local()).await,
        Backend::start("b", local()).await,
    );
    let (lb, _d) = web(&[&a, &b], "").await;
    a.flap.store(true, Relaxed);
    let ba = lb.backend("web", a.addr).unwrap();
    let p0 = a.probes.load(Relaxed);
    let t0 = Instant::now();
    let mut changes = 0;
    let mut last = ba.healthy();
    while t0.elapsed() < Duration::from_millis(2500) {
        if ba.healthy() != last {
            changes += 1;
            last = ba.healthy();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let probes = a.probes.load(Relaxed) - p0;
    assert!(probes >= 8, "only {probes} probes");
    assert_eq!(
        changes, 0,
        "state changed {changes} times over {probes} alternating probes"
    );
}

#[tokio::test]
async fn with_every_backend_down_connections_are_refused_at_once() {
    let (a, b) = (
        Backend::start("a", local()).await,
        Backend::start("b", local()).await,
    );
    let (lb, _d) = web(&[&a, &b], "").await;
    a.healthy.store(false, Relaxed);
    b.healthy.store(false, Relaxed);
    let (ba, bb) = (
        lb.backend("web", a.addr).unwrap(),
        lb.backend("web", b.addr).unwrap(),
    );
    wait_for(Duration::from_secs(3), || !ba.healthy() && !bb.healthy()).await;
    for _ in 0..5 {
        let t0 = Instant::now();
        let r = get(lb.addr("web")).await;
        assert!(r.is_err(), "got {r:?}");
        assert!(
            t0.elapsed() < Duration::from_millis(200),
            "refusal took {:?}",
            t0.elapsed()
        );
    }
    let fe = lb.lbd.app.frontend("web").unwrap();
    assert!(fe.refused_no_backend.load(Relaxed) >= 5);
    // One comes back: served again.
    a.healthy.store(true, Relaxed);
    wait_for(Duration::from_secs(3), || ba.healthy()).await;
    assert_eq!(get(lb.addr("web")).await.unwrap(), "a");
}

/// A backend on loopback that hands every connection to `each`, in a task
/// of its own.
async fn backend_with<F, Fut>(each: F) -> SocketAddr
where
    F: Fn(TcpStream) -> Fut + Copy + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(each(s));
        }
    });
    addr
}

/// A backend that reads each connection until EOF, then hands it and the
/// bytes read to `then`.
async fn after_eof<F, Fut>(then: F) -> SocketAddr
where
    F: Fn(TcpStream, Vec<u8>) -> Fut + Copy + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    backend_with(move |mut s| async move {
        let mut all = Vec::new();
        if s.read_to_end(&mut all).await.is_ok() {
            then(s, all).await;
        }
    })
    .await
}

/// lbd with one plain TCP service, `raw`, over `backends` (TCP-connect
/// checks), `extra` at the top of its configuration.
async fn raw(backends: &[SocketAddr], extra: &str) -> (Lb, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let list: Vec<String> = backends.iter().map(|a| format!("\"{a}\"")).collect();
    let text = format!(
        "{extra}services:\n  - name: raw\n    listen: 127.0.0.1:2\n    backends: [{}]\n",
        list.join(", ")
    );
    let lb = Lb::start(
        lbd::Source::Standalone(write(dir.path(), "lb.yaml", &text)),
        None,
    )
    .await;
    (lb, dir)
}

/// Answers with the byte count and a hash of what it read, then echoes it
/// all back, then closes.
async fn counting_backend() -> SocketAddr {
    after_eof(|mut s, all| async move {
        let _ = s
            .write_all(format!("{} {:x}", all.len(), fnv(&all)).as_bytes())
            .await;
        let _ = s.write_all(&all).await;
    })
    .await
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf29ce484222325u64, |h, x| {
        (h ^ u64::from(*x)).wrapping_mul(0x100000001b3)
    })
}

#[tokio::test]
async fn half_close_is_propagated_both_ways_small_and_bulk() {
    let back = counting_backend().await;
    let (lb, _d) = raw(&[back], "").await;
    // Small (buffered path) and 8 MiB (switches to splice).
    for size in [100usize, 8 << 20] {
        let data: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
        let mut s = TcpStream::connect(lb.addr("raw")).await.unwrap();
        let (mut r, mut w) = s.split();
        let send = async {
            w.write_all(&data).await.unwrap();
            // Half-close: the backend only answers after seeing our FIN.
            w.shutdown().await.unwrap();
        };
        let mut got = Vec::new();
        let recv = async {
            tokio::time::timeout(Duration::from_secs(20), r.read_to_end(&mut got))
                .await
                .unwrap()
                .unwrap()
        };
        tokio::join!(send, recv);
        let header = format!("{} {:x}", size, fnv(&data));
        assert!(
            got.starts_with(header.as_bytes()),
            "size {size}: got {:?}",
            String::from_utf8_lossy(&got[..got.len().min(60)])
        );
        assert!(
            got[header.len()..] == data[..],
            "size {size}: echoed bytes differ"
        );
    }
    let b = lb.backend("raw", back).unwrap();
    assert!(b.bytes_to.load(Relaxed) >= (8 << 20) + 100);
    assert!(b.bytes_from.load(Relaxed) >= (8 << 20) + 100);
}

/// Closes (with a reset if `rst`) without answering: a server that died
/// with the request in hand.
async fn dying_backend(rst: bool) -> SocketAddr {
    if rst {
        after_eof(|s, _| async move {
            let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
        })
        .await
    } else {
        after_eof(|_, _| async {}).await
    }
}

/// Sends `data` and FIN through `addr`, returns everything read back.
async fn exchange(addr: SocketAddr, data: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(data).await.unwrap();
    s.shutdown().await.unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got))
        .await
        .expect("no end");
    got
}

#[tokio::test]
async fn a_backend_dying_before_answering_is_replaced_and_the_request_replayed() {
    let good = counting_backend().await;
    for rst in [true, false] {
        let dying = dying_backend(rst).await;
        // None: the default, which replays only on the TLS site frontends,
        // never on a service (its protocol is unknown: maybe not idempotent).
        for (retry, size, replayed) in [
            (Some(true), 3000, true),
            (Some(true), 20 << 10, false),
            (Some(false), 100, false),
            (None, 100, false),
        ] {
            let limits = match retry {
                Some(r) => format!("limits: {{ retryUnanswered: {r} }}\n"),
                None => String::new(),
            };
            let (lb, _d) = raw(&[dying, good], &limits).await;
            let data: Vec<u8> = (0..size).map(|i| (i * 13 % 251) as u8).collect();
            let header = format!("{} {:x}", size, fnv(&data));
            let mut answered = 0;
            for _ in 0..6 {
                let got = exchange(lb.addr("raw"), &data).await;
                if got.starts_with(header.as_bytes()) && got[header.len()..] == data[..] {
                    answered += 1;
                } else {
                    assert!(
                        got.is_empty(),
                        "rst {rst} retry {retry:?} size {size}: a wrong answer {:?}",
                        String::from_utf8_lossy(&got[..got.len().min(60)])
                    );
                }
            }
            // Round robin: half the connections go to the dying backend first.
            let failures = lb
                .backend("raw", dying)
                .unwrap()
                .unanswered_failures
                .load(Relaxed);
            if replayed {
                assert_eq!(
                    answered, 6,
                    "rst {rst}: every request answered (by the good backend)"
                );
                // (A retry takes a round-robin turn too, so it can be all six.)
                assert!(
                    failures >= 3,
                    "rst {rst}: {failures}: at least three went to the dying backend first"
                );
            } else {
                assert_eq!(
                    answered, 3,
                    "rst {rst} retry {retry:?} size {size}: only the good backend's answers"
                );
                assert_eq!(failures, 0);
            }
        }
    }
}

/// Closes (with a reset if `rst`) every connection 30 ms after accepting
/// it: a backend killed between lbd's connect and the client's first bytes.
/// (Not at once: a health probe seeing that would take it out of the pool.)
async fn closing_soon(rst: bool) -> SocketAddr {
    backend_with(move |s| async move {
        tokio::time::sleep(Duration::from_millis(30)).await;
        if rst {
            let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
        }
    })
    .await
}

#[tokio::test]
async fn a_backend_failing_before_the_client_speaks_is_replaced() {
    let good = counting_backend().await;
    for rst in [true, false] {
        let gone = closing_soon(rst).await;
        // Set: a service replays nothing by default.
        let (lb, _d) = raw(&[gone, good], "limits: { retryUnanswered: true }\n").await;
        for _ in 0..4 {
            let mut s = TcpStream::connect(lb.addr("raw")).await.unwrap();
            // The first backend has failed before the client says anything.
            tokio::time::sleep(Duration::from_millis(100)).await;
            s.write_all(b"hello").await.unwrap();
            s.shutdown().await.unwrap();
            let mut got = Vec::new();
            tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got))
                .await
                .expect("no end")
                .unwrap();
            assert!(
                got.starts_with(format!("5 {:x}", fnv(b"hello")).as_bytes()),
                "rst {rst}: {:?}",
                String::from_utf8_lossy(&got)
            );
        }
        let b = lb.backend("raw", gone).unwrap();
        assert!(
            b.unanswered_failures.load(Relaxed) >= 2,
            "rst {rst}: {} unanswered, {} connections, {} connect failures",
            b.unanswered_failures.load(Relaxed),
            b.total.load(Relaxed),
            b.connect_failures.load(Relaxed)
        );
    }
}

#[tokio::test]
async fn idle_connections_are_closed() {
    let a = Backend::start("a", local()).await;
    let (lb, _d) = web(&[&a], "limits: { idleTimeout: 300ms }\n").await;
    let mut s = TcpStream::connect(lb.addr("web")).await.unwrap();
    get_on(&mut s, false).await.unwrap();
    let t0 = Instant::now();
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(3), s.read(&mut buf))
        .await
        .expect("not closed")
        .unwrap_or(0);
    assert_eq!(n, 0);
    let t = t0.elapsed();
    assert!(
        t >= Duration::from_millis(250) && t < Duration::from_millis(1500),
        "closed after {t:?}"
    );
}

#[tokio::test]
async fn per_source_limit_refuses_at_once_and_frees_on_close() {
    let a = Backend::start("a", local()).await;
    let (lb, _d) = web(&[&a], "limits: { maxConns: 100, maxConnsPerSource: 2 }\n").await;
    let mut one = TcpStream::connect(lb.addr("web")).await.unwrap();
    let mut two = TcpStream::connect(lb.addr("web")).await.unwrap();
    get_on(&mut one, false).await.unwrap();
    get_on(&mut two, false).await.unwrap();
    let t0 = Instant::now();
    assert!(get(lb.addr("web")).await.is_err());
    assert!(t0.elapsed() < Duration::from_millis(200));
    drop(one);
    wait_for(Duration::from_secs(2), || {
        lb.lbd.app.conns.load(Relaxed) == 1
    })
    .await;
    assert_eq!(get(lb.addr("web")).await.unwrap(), "a");
    assert_eq!(
        lb.lbd
            .app
            .frontend("web")
            .unwrap()
            .refused_limit
            .load(Relaxed),
        1
    );
}

#[tokio::test]
async fn pool_change_under_continuous_load_fails_no_request() {
    let (a, b, c) = (
        Backend::start("a", local()).await,
        Backend::start("b", local()).await,
        Backend::start("c", local()).await,
    );
    let (lb, _d) = web(&[&a, &b], "").await;
    let addr = lb.addr("web");
    // A long-lived keep-alive connection on each of a and b.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let who = get_on(&mut s, false).await.unwrap();
        held.push((s, who));
    }
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut load = Vec::new();
    for _ in 0..4 {
        let (ok, failed, stop) = (ok.clone(), failed.clone(), stop.clone());
        load.push(tokio::spawn(async move {
            // Bounded: at most 20 000 requests or until stopped.
            for _ in 0..20_000 {
                if stop.load(Relaxed) {
                    break;
                }
                match get(addr).await {
                    Ok(_) => ok.fetch_add(1, Relaxed),
                    Err(e) => {
                        eprintln!("request failed: {e}");
                        failed.fetch_add(1, Relaxed)
                    }
                };
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // a leaves, c joins, and the algorithm changes: three changes at once.
    lb.rewrite(&web_service(&[b.addr, c.addr], "balance: leastConn\n"))
        .await;
    assert_eq!(lb.lbd.app.metrics.reloads_ok.load(Relaxed), 1);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let a_hits = a.hits.load(Relaxed);
    // The held connections still work, including the one on a (draining).
    for (s, who) in held.iter_mut() {
        assert_eq!(&get_on(s, false).await.unwrap(), who);
    }
    assert_eq!(
        a.hits.load(Relaxed),
        a_hits + held.iter().filter(|(_, w)| w == "a").count() as u64
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Relaxed);
    for l in load {
        l.await.unwrap();
    }
    assert_eq!(
        failed.load(Relaxed),
        0,
        "{} requests failed of {}",
        failed.load(Relaxed),
        ok.load(Relaxed)
    );
    assert!(ok.load(Relaxed) > 100, "only {} requests", ok.load(Relaxed));
    assert!(c.hits.load(Relaxed) > 0, "the new backend got nothing");
    // a drained: once its held connection closes, it is gone.
    held.clear();
    wait_for(Duration::from_secs(3), || {
        lb.backend("web", a.addr).is_none()
    })
    .await;
}

/// The admin listener holds at most 16 connections from one address: the
/// rest are closed at accept and counted; it answers again once they go.
#[tokio::test]
async fn the_admin_listener_caps_idle_connections() {
    let a = Backend::start("a", local()).await;
    let (lb, _d) = web(&[&a], "").await;
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(TcpStream::connect(lb.admin.unwrap()).await.unwrap());
    }
    let mut closed = 0;
    for c in held.iter_mut() {
        let mut buf = [0u8; 1];
        if let Ok(Ok(0)) = tokio::time::timeout(Duration::from_millis(100), c.read(&mut buf)).await
        {
            closed += 1;
        }
    }
    assert_eq!(closed, 4);
    drop(held);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (st, m) = lb.admin("GET", "/metrics").await;
    assert_eq!(st, 200);
    assert!(m.contains("lbd_admin_connections_refused_total 4"), "{m}");
}

#[tokio::test]
async fn a_bad_reload_keeps_the_old_configuration() {
    let a = Backend::start("a", local()).await;
    let (lb, _d) = web(&[&a], "").await;
    lb.rewrite(
        "services:\n  - name: web\n    listen: nonsense\n    backends: []\n    colour: blue\n",
    )
    .await;
    assert_eq!(lb.lbd.app.metrics.reloads_failed.load(Relaxed), 1);
    assert_eq!(get(lb.addr("web")).await.unwrap(), "a");
    // A valid file that cannot be bound (a port taken) is refused as a whole too.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let text = format!(
        "{}  - name: other\n    listen: \"{}\"\n    backends: [\"{}\"]\n",
        web_service(&[a.addr], ""),
        taken.local_addr().unwrap(),
        a.addr
    );
    lb.rewrite(&text).await;
    assert_eq!(lb.lbd.app.metrics.reloads_failed.load(Relaxed), 2);
    assert!(lb.lbd.app.frontend("other").is_none());
    assert_eq!(get(lb.addr("web")).await.unwrap(), "a");
}

#[tokio::test]
async fn metrics_and_status_show_every_backend() {
    let (a, b) = (
        Backend::start("a", local()).await,
        Backend::start("b", local()).await,
    );
    let (lb, _d) = web(&[&a, &b], "").await;
    b.healthy.store(false, Relaxed);
    let bb = lb.backend("web", b.addr).unwrap();
    wait_for(Duration::from_secs(3), || !bb.healthy()).await;
    get(lb.addr("web")).await.unwrap();
    let (st, m) = lb.admin("GET", "/metrics").await;
    assert_eq!(st, 200);
    let la = format!(
        "frontend=\"web\",backend=\"{0}\",addr=\"{0}\",role=\"service\"",
        a.addr
    );
    let lbk = format!(
        "frontend=\"web\",backend=\"{0}\",addr=\"{0}\",role=\"service\"",
        b.addr
    );
    for want in [
        format!("lbd_backend_up{{{la}}} 1"),
        format!("lbd_backend_up{{{lbk}}} 0"),
        format!("lbd_backend_connections_total{{{la}}} 1"),
        format!("lbd_backend_active_connections{{{la}}} 0"),
        "lbd_backend_bytes_total{".to_string(),
        "lbd_backend_check_latency_microseconds{".to_string(),
        "lbd_frontend_refused_total{frontend=\"web\",reason=\"no_backend\"} 0".to_string(),
    ] {
        assert!(m.contains(&want), "missing {want:?} in\n{m}");
    }
    let (st, s) = lb.admin("GET", "/status").await;
    assert_eq!(st, 200);
    // The shared type reads what lbd sends (bootd's timeline does).
    let typed: lbd::status::Status = serde_json::from_str(&s).unwrap();
    assert_eq!(typed.frontends[0].backends.len(), 2);
    let v: serde_json::Value = serde_json::from_str(&s).unwrap();
    let backends = v["frontends"][0]["backends"].as_array().unwrap();
    assert_eq!(backends.len(), 2);
    assert_eq!(backends[1]["state"], "down");
    assert!(
        backends[1]["reason"].as_str().unwrap().contains("HTTP 503"),
        "{s}"
    );
    assert_eq!(lb.admin("POST", "/bootstrap/complete").await.0, 409);
    assert_eq!(lb.admin("GET", "/nope").await.0, 404);
}
