//! The HTTP(S) listeners against clients that break the rules: request
//! smuggling framings, slow and oversized heads, bodies that never come,
//! TLS handshakes that never finish. Raw sockets send what an attacker
//! sends; curl checks that the next good request is served.

use crate::harness::{curl, Bootd};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use testkit::net::exchange;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The value of one series of `/metrics` (0 when absent).
pub fn metric(text: &str, series: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn closed(b: &Bootd, reason: &str) -> u64 {
    metric(
        &b.app.metrics.encode(),
        &format!("bootd_http_connections_closed_total{{reason=\"{reason}\"}}"),
    )
}

/// Waits (at most 5 s) for the count of `reason` to be `want`: a
/// connection hyper served is counted just after it was closed.
async fn counted(b: &Bootd, reason: &str, want: u64) {
    let t = Instant::now();
    while closed(b, reason) != want && t.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(closed(b, reason), want, "{reason}");
}

async fn raw(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    exchange(&mut s, bytes).await
}

/// A TLS connection to bootd's HTTPS listener, trusting the site CA.
async fn tls(b: &Bootd) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let ca = &b.app.tls.as_ref().unwrap().ca_pem;
    testkit::net::tls_client(ca, b.https, "127.0.0.1").await
}

/// The statuses of the responses in `text`, in order.
fn statuses(text: &str) -> Vec<u16> {
    text.split("HTTP/1.1 ")
        .skip(1)
        .filter_map(|r| r.get(..3)?.parse().ok())
        .collect()
}

fn healthz_by_curl(b: &Bootd) {
    let out = curl(&[&format!("http://{}/healthz", b.http)]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n", "{out:?}");
}

/// `Content-Length` with `Transfer-Encoding`, and more than one
/// `Content-Length`: the requests before are answered, the bad one gets a
/// 400, the connection is closed, it is counted, and the next connection
/// is served. On plain HTTP (bootd's own loop first) and on HTTPS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smuggling_framings_are_refused_counted_and_closed() {
    let b = Bootd::start().await;
    let good = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    let cases = [
        ("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", "content_length_and_transfer_encoding"),
        ("GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n0\r\n\r\n", "content_length_and_transfer_encoding"),
        ("GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n", "duplicate_content_length"),
        ("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 7\r\n\r\nabcdefg", "duplicate_content_length"),
        ("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 3\r\n\r\nabc", "duplicate_content_length"),
    ];
    for (i, (bad, reason)) in cases.iter().enumerate() {
        let before = closed(&b, reason);
        let input = format!("{good}{bad}");
        let text = raw(b.http, input.as_bytes()).await;
        assert_eq!(statuses(&text), [200, 400], "case {i}: {text}");
        assert!(text.contains("bad request framing"), "{text}");
        counted(&b, reason, before + 1).await;
        // Over TLS, the same.
        let mut s = tls(&b).await;
        let text = exchange(&mut s, input.as_bytes()).await;
        assert_eq!(statuses(&text), [200, 400], "case {i} over TLS: {text}");
        counted(&b, reason, before + 2).await;
        healthz_by_curl(&b);
    }
    // A chunked body and a sized one, correctly framed, then a pipelined
    // GET: all answered (the guard follows the framing), nothing counted.
    let ok = "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\nPOST /y HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let text = raw(b.http, ok.as_bytes()).await;
    assert_eq!(statuses(&text), [405, 405, 200], "{text}");
    let m = b.app.metrics.encode();
    assert_eq!(
        metric(
            &m,
            "bootd_http_connections_closed_total{reason=\"body_unread\"}"
        ),
        0,
        "{m}"
    );
    b.stop().await;
}

/// A head that stops halfway is closed at the head deadline (1 s here,
/// 30 s by default) and counted, on bootd's own loop, on a connection
/// hyper serves, and over TLS; a connection that sends nothing is closed
/// at the same deadline and counted apart; a TLS handshake that never
/// finishes is closed at its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_heads_and_handshakes_are_closed_at_their_deadlines() {
    assert_eq!(
        bootd::Config::new(site_for_defaults())
            .http_limits
            .head_timeout,
        Duration::from_secs(30)
    );
    let b = Bootd::start_config(
        |t| t,
        None,
        |c| {
            c.http_limits.head_timeout = Duration::from_secs(1);
            c.http_limits.handshake_timeout = Duration::from_secs(1);
        },
    )
    .await;
    let http = b.http;
    let stalled = |partial: &'static [u8]| async move {
        let t = Instant::now();
        let text = raw(http, partial).await;
        (t.elapsed(), text)
    };
    let in_time = |d: Duration| d >= Duration::from_millis(900) && d < Duration::from_secs(5);
    // bootd's own loop.
    let (d, text) = stalled(b"GET /healthz HTTP/1.1\r\nHost: x\r\nUser-Ag").await;
    assert!(in_time(d) && text.is_empty(), "{d:?} {text:?}");
    counted(&b, "head_timeout", 1).await;
    // hyper, after a request bootd's loop handed over.
    let (d, text) = stalled(
        b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nxGET /healthz HTTP/1.1\r\nHo",
    )
    .await;
    assert!(in_time(d) && statuses(&text) == [405], "{d:?} {text:?}");
    counted(&b, "head_timeout", 2).await;
    // hyper over TLS.
    let mut s = tls(&b).await;
    let t = Instant::now();
    let text = exchange(&mut s, b"GET /healthz HTTP/1.1\r\nHo").await;
    assert!(in_time(t.elapsed()) && text.is_empty(), "{text:?}");
    counted(&b, "head_timeout", 3).await;
    // Nothing at all: closed at the same deadline, counted as idle.
    let (d, text) = stalled(b"").await;
    assert!(in_time(d) && text.is_empty(), "{d:?} {text:?}");
    counted(&b, "idle_timeout", 1).await;
    // A TLS handshake that never finishes: half a ClientHello, then nothing.
    let mut s = tokio::net::TcpStream::connect(b.https).await.unwrap();
    let t = Instant::now();
    let text = exchange(&mut s, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03").await;
    assert!(in_time(t.elapsed()) && text.is_empty(), "{text:?}");
    counted(&b, "tls_handshake_timeout", 1).await;
    healthz_by_curl(&b);
    b.stop().await;
}

fn site_for_defaults() -> site::Site {
    let dir = tempfile::tempdir().unwrap();
    crate::harness::write_site(dir.path(), |t| t);
    site::load(&dir.path().join("site.yaml")).unwrap()
}

/// Too many headers and too large a head: hyper answers 431 itself, and
/// the connection is counted; so is a head that does not parse (400). On
/// plain HTTP and over TLS; the next request is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_broken_heads_are_answered_and_counted() {
    let b = Bootd::start().await;
    let many: String = (0..150).map(|i| format!("X-H{i}: v\r\n")).collect();
    let many = format!("GET /healthz HTTP/1.1\r\nHost: x\r\n{many}\r\n");
    let big = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(40 * 1024)
    );
    // Under the limits (60 headers, 20 KiB): served, by hyper after bootd's loop.
    let some: String = (0..60).map(|i| format!("X-H{i}: v\r\n")).collect();
    let some = format!("GET /healthz HTTP/1.1\r\nHost: x\r\n{some}Connection: close\r\n\r\n");
    assert_eq!(statuses(&raw(b.http, some.as_bytes()).await), [200]);
    let fair = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
        "a".repeat(20 * 1024)
    );
    assert_eq!(statuses(&raw(b.http, fair.as_bytes()).await), [200]);
    for (n, head) in [many.as_bytes(), big.as_bytes()].into_iter().enumerate() {
        let text = raw(b.http, head).await;
        assert_eq!(statuses(&text), [431], "{text}");
        counted(&b, "head_too_large", 2 * n as u64 + 1).await;
        let mut s = tls(&b).await;
        let text = exchange(&mut s, head).await;
        assert_eq!(statuses(&text), [431], "over TLS: {text}");
        counted(&b, "head_too_large", 2 * n as u64 + 2).await;
        healthz_by_curl(&b);
    }
    let text = raw(b.http, b"GET /healthz HTTP/1.1\r\nBad Header: 1\r\n\r\n").await;
    assert_eq!(statuses(&text), [400], "{text}");
    counted(&b, "bad_head", 1).await;
    healthz_by_curl(&b);
    b.stop().await;
}

/// No bootd route reads a request body, so none waits for one: a body that
/// stops or trickles gets its answer at once and the connection is closed
/// (far inside any body deadline), counted as `body_unread`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_bodies_are_answered_at_once_and_closed() {
    let b = Bootd::start().await;
    let cases: [(&[u8], u16); 3] = [
        (
            b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"name\": ",
            405,
        ),
        (
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nab",
            200,
        ),
        (
            b"PUT /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nab",
            405,
        ),
    ];
    for (i, (head, status)) in cases.into_iter().enumerate() {
        let mut s = tokio::net::TcpStream::connect(b.http).await.unwrap();
        s.write_all(head).await.unwrap();
        let t = Instant::now();
        // The client keeps trickling a byte every 100 ms meanwhile.
        let (mut r, mut w) = s.into_split();
        let trickle = tokio::spawn(async move {
            for _ in 0..50 {
                if w.write_all(b"x").await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), r.read_to_end(&mut out))
            .await
            .expect("closed")
            .ok();
        let text = String::from_utf8_lossy(&out);
        assert_eq!(statuses(&text), [status], "case {i}: {text}");
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        trickle.abort();
        counted(&b, "body_unread", i as u64 + 1).await;
    }
    healthz_by_curl(&b);
    b.stop().await;
}

/// The flood's client: a separate process (so its 10 600 descriptors do
/// not come out of the test process's limit, where bootd holds its 8 192),
/// plain sockets bound to addresses of 127/8. It prints a number after
/// each step and waits for a line on stdin before the next: the open
/// connections after 600 from one address, the connections made after
/// each 5 000 from 10 addresses, the open ones after it all.
const FLOOD: &str = r#"
import select, socket, sys, time
port = int(sys.argv[1])
held = []
def connect(ip, n):
    # 100 at a time, non-blocking, each batch given 5 s.
    for start in range(0, n, 100):
        batch = []
        for _ in range(min(100, n - start)):
            s = socket.socket()
            s.bind((ip, 0))
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            batch.append(s)
        poll = select.poll()
        waiting = {}
        for s in batch:
            poll.register(s, select.POLLOUT)
            waiting[s.fileno()] = s
        deadline = time.time() + 5
        while waiting and time.time() < deadline:
            for fd, _ in poll.poll(500):
                s = waiting.pop(fd)
                poll.unregister(fd)
                if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    held.append(s)
                else:
                    s.close()
        for s in waiting.values():
            s.close()
def still_open():
    n = 0
    for s in held:
        s.setblocking(False)
        try:
            if s.recv(1, socket.MSG_PEEK):
                n += 1
        except BlockingIOError:
            n += 1
        except OSError:
            pass
    return n
def step(v):
    print(v, flush=True)
    sys.stdin.readline()
connect("127.11.0.1", 600)
time.sleep(0.5)
step(still_open())
for half in (0, 1):
    for i in range(10):
        connect("127.10.%d.%d" % (half, i + 1), 500)
    step(len(held))
time.sleep(1)
step(still_open())
"#;

/// 10 600 idle connections from 21 addresses of 127/8 against caps of
/// 8 192 per listener (the site's `httpConnections`) and 512 per source
/// (the default): one address gets 512 and the
/// rest of its 600 are reset at once, counted `per_source`; the listener
/// never holds more than 8 192; once full, each newcomer takes the slot of
/// the oldest idle connection (closed, counted `evicted_idle`), so a client
/// that talks is served during the flood, over HTTP and TFTP alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_idle_connections_from_many_sources() {
    use tokio::io::AsyncBufReadExt;
    // A cap the flood fills; a head deadline longer than the flood takes
    // on a loaded machine, so that no idle connection leaves on its own.
    let b = Bootd::start_config(
        |t| t.replace("host:\n", "host:\n  admission: {httpConnections: 8192}\n"),
        Some(0),
        |c| c.http_limits.head_timeout = Duration::from_secs(600),
    )
    .await;
    assert_eq!(
        b.app.http_limits.max_head,
        bootd::Config::new(site_for_defaults()).http_limits.max_head
    );
    std::fs::write(b.dir.path().join("tftp/probe.txt"), b"tftp ok\n").unwrap();
    let tftp = b.tftp.unwrap();
    let http = b.http;
    let probe = move |t: &str| {
        let out = curl(&["-m", "10", &format!("http://{http}/healthz")]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "ok\n",
            "HTTP {t}: {out:?}"
        );
        let out = curl(&["-m", "10", &format!("tftp://{tftp}/probe.txt")]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "tftp ok\n",
            "TFTP {t}: {out:?}"
        );
    };
    let started = Instant::now();
    let mut flood = tokio::process::Command::new("python3")
        .args(["-c", FLOOD, &b.http.port().to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3");
    let mut lines = tokio::io::BufReader::new(flood.stdout.take().unwrap()).lines();
    let mut go = flood.stdin.take().unwrap();
    let mut step = async || -> usize {
        let line = tokio::time::timeout(Duration::from_secs(120), lines.next_line())
            .await
            .expect("the flood took over 120 s")
            .unwrap()
            .expect("the flood client ended");
        line.trim().parse().unwrap()
    };
    assert_eq!(step().await, 512, "one address holds at most 512");
    go.write_all(b"\n").await.unwrap();
    let made = step().await;
    probe(&format!("after {made} connections"));
    go.write_all(b"\n").await.unwrap();
    let made = step().await;
    probe(&format!("after {made} connections"));
    go.write_all(b"\n").await.unwrap();
    let open = step().await;
    assert!(
        started.elapsed() < Duration::from_secs(150),
        "{:?}",
        started.elapsed()
    );
    // The probes took slots too (then left): the flood holds the rest.
    assert!(
        (8_192 - 10..=8_192).contains(&open),
        "{open} of {made} connections open"
    );
    let m = b.app.metrics.encode();
    let per_source = metric(
        &m,
        "bootd_http_connections_refused_total{reason=\"per_source\"}",
    );
    let full = metric(
        &m,
        "bootd_http_connections_refused_total{reason=\"max_connections\"}",
    );
    let evicted = metric(
        &m,
        "bootd_http_connections_closed_total{reason=\"evicted_idle\"}",
    );
    assert_eq!(per_source, 88, "{m}");
    assert_eq!(
        full, 0,
        "an idle connection was always there to give way: {m}"
    );
    // Every closed connection of the flood is counted: reset at accept or
    // evicted (the HTTP probes, when the listener was full, evicted one each;
    // on loopback a reset can beat connect's own completion: not in `made`).
    let closed = (10_600 - open) as u64;
    assert!(
        (closed..=closed + 2).contains(&(per_source + evicted)),
        "{closed} closed, {per_source} + {evicted} counted"
    );
    assert!(evicted >= 10_512 - 8_192, "{evicted} evicted");
    go.write_all(b"\n").await.unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(10), flood.wait()).await;
    probe("after the flood");
    b.stop().await;
}
