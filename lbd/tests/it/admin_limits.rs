//! The admin listener against clients that break the rules: request
//! smuggling framings, too many headers, bodies that never come, heads
//! that stop halfway, connections that send nothing. Raw sockets send what
//! an attacker sends; the next good request is served.

use crate::harness::*;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// Writes `bytes`, then reads until lbd closes (at most 10 s).
async fn raw(lb: &Lb, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(lb.admin.unwrap()).await.unwrap();
    testkit::net::exchange(&mut s, bytes).await
}

fn statuses(text: &str) -> Vec<u16> {
    text.split("HTTP/1.1 ")
        .skip(1)
        .filter_map(|r| r.get(..3)?.parse().ok())
        .collect()
}

/// Waits (at most 5 s) for the count of `reason` to be `want`: a
/// connection is counted just after it was closed.
async fn counted(lb: &Lb, reason: &str, want: u64) {
    let t = Instant::now();
    while closed(lb, reason).await != want && t.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(closed(lb, reason).await, want, "{reason}");
}

async fn closed(lb: &Lb, reason: &str) -> u64 {
    let (_, m) = lb.admin("GET", "/metrics").await;
    let series = format!("lbd_admin_connections_closed_total{{reason=\"{reason}\"}} ");
    m.lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_refuses_bad_framings_and_slow_clients() {
    let a = Backend::start("a", "127.0.0.1:0".parse().unwrap()).await;
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "lb.yaml", &web_service(&[a.addr], ""));
    let source = lbd::Source::Standalone(p.clone());
    let loaded = lbd::Loaded::load(&source).unwrap();
    let default = lbd::Config::new(source, loaded).admin_http;
    assert_eq!(default.head_timeout, Duration::from_secs(10));
    let lb = Lb::start_tuned(lbd::Source::Standalone(p), None, |c| {
        c.admin_http.head_timeout = Duration::from_secs(1)
    })
    .await;
    let good = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    for (bad, reason) in [
        ("POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "content_length_and_transfer_encoding"),
        ("GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n", "duplicate_content_length"),
        ("POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 9\r\n\r\nab", "duplicate_content_length"),
    ] {
        let before = closed(&lb, reason).await;
        let text = raw(&lb, format!("{good}{bad}").as_bytes()).await;
        assert_eq!(statuses(&text), [200, 400], "{text}");
        counted(&lb, reason, before + 1).await;
    }
    // Too many headers, too large a head: hyper's 431, counted.
    let many: String = (0..150).map(|i| format!("X-H{i}: v\r\n")).collect();
    let text = raw(
        &lb,
        format!("GET /healthz HTTP/1.1\r\n{many}\r\n").as_bytes(),
    )
    .await;
    assert_eq!(statuses(&text), [431], "{text}");
    let big = format!(
        "GET /healthz HTTP/1.1\r\nX: {}\r\n\r\n",
        "a".repeat(40 << 10)
    );
    assert_eq!(statuses(&raw(&lb, big.as_bytes()).await), [431]);
    counted(&lb, "head_too_large", 2).await;
    // A body that stops: answered at once (no route reads a body), closed, counted.
    let t = Instant::now();
    let text = raw(
        &lb,
        b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nab",
    )
    .await;
    assert_eq!(statuses(&text), [405], "{text}");
    assert!(
        t.elapsed() < Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
    counted(&lb, "body_unread", 1).await;
    // A head that stops halfway, and nothing at all: closed at the head
    // deadline (1 s here), counted apart.
    for (partial, reason) in [
        (&b"GET /healthz HTTP/1.1\r\nHo"[..], "head_timeout"),
        (b"", "idle_timeout"),
    ] {
        let t = Instant::now();
        assert_eq!(raw(&lb, partial).await, "");
        let d = t.elapsed();
        assert!(
            d >= Duration::from_millis(900) && d < Duration::from_secs(5),
            "{d:?}"
        );
        counted(&lb, reason, 1).await;
    }
    assert_eq!(lb.admin("GET", "/healthz").await, (200, "ok\n".to_string()));
}
