//! `host.admission.imageTransfers`: image responses beyond the limit wait
//! their turn, beyond the queue or the wait get 503, and a reload that
//! raises the limit lets the waiting through at once. Real clients (curl,
//! one of them rate-limited so that it holds its place).

use crate::harness::Bootd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Large enough that loopback's socket buffers (a few MiB) do not take it all
/// at once: a rate-limited client holds its place for seconds.
const BIG: usize = 48 << 20;

fn fetch(b: &Bootd, rate: Option<&str>) -> Child {
    fetch_from(b, rate, "127.0.0.1")
}

fn fetch_from(b: &Bootd, rate: Option<&str>, from: &str) -> Child {
    let mut c = Command::new("curl");
    c.args(["--interface", from]);
    c.args([
        "-sS",
        "-o",
        "/dev/null",
        "-D",
        "-",
        "-w",
        "%{http_code} %{size_download}\n",
    ]);
    if let Some(r) = rate {
        c.args(["--limit-rate", r]);
    }
    c.arg(format!("http://{}/images/big.img", b.http))
        .stdout(Stdio::piped())
        .spawn()
        .expect("curl")
}

/// curl's last line: status and body bytes; and the response head.
fn done(c: Child) -> (String, String) {
    let out = c.wait_with_output().expect("curl ran");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let last = text.lines().last().unwrap_or("").to_string();
    (last, text)
}

/// Stops the curls by PID, then waits until their places are free.
async fn stop_all<const N: usize>(b: &Bootd, children: [Child; N]) {
    for mut c in children {
        c.kill().unwrap();
        c.wait().unwrap();
    }
    until("places freed", || gate(b).in_use == 0).await;
}

fn gate(b: &Bootd) -> bootd::gate::View {
    b.app
        .admission
        .views()
        .into_iter()
        .find(|v| v.gate == "images")
        .expect("the images gate")
}

async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{what}: not within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_requests_beyond_the_limit_wait_beyond_the_queue_get_503_and_a_reload_lets_them_through(
) {
    let limits = |n: u32| {
        move |t: String| {
            t.replace(
                "host:\n",
                &format!(
                    "host:\n  admission: {{imageTransfers: {n}, imageQueue: 1, queueWait: 3s}}\n"
                ),
            )
        }
    };
    let b = Bootd::start_with(limits(1)).await;
    std::fs::create_dir_all(b.images()).unwrap();
    std::fs::write(b.images().join("big.img"), vec![7u8; BIG]).unwrap();

    // A holds the one place (8 MiB/s: about 5 s).
    let a = fetch(&b, Some("8M"));
    until("A through the gate", || gate(&b).in_use == 1).await;
    // B waits in the queue (of one).
    let bb = fetch(&b, None);
    until("B waiting", || gate(&b).waiting == 1).await;
    // C finds the queue full: 503 at once, with Retry-After.
    let t = Instant::now();
    let (last, head) = done(fetch(&b, None));
    assert!(last.starts_with("503 "), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 5"),
        "{head}"
    );
    assert!(t.elapsed() < Duration::from_secs(2), "refused at once");
    // The status page shows it.
    let (_, _, page) = b.get("/status").await;
    let page = String::from_utf8_lossy(&page);
    assert!(page.contains("data-gate=\"images\""), "{page}");

    // A reload raising the limit to 2 lets B through while A still runs.
    std::fs::write(
        b.dir.path().join("site.yaml"),
        limits(2)(
            std::fs::read_to_string(b.dir.path().join("site.yaml"))
                .unwrap()
                .replace(
                    "  admission: {imageTransfers: 1, imageQueue: 1, queueWait: 3s}\n",
                    "",
                ),
        ),
    )
    .unwrap();
    b.reload.notify_one();
    let (last, head) = done(bb);
    assert_eq!(last, format!("200 {BIG}"), "{head}");
    assert_eq!(gate(&b).limit, 2);
    // B's place is given back when its connection finishes sending, which
    // may be a moment after curl has read the last byte; A's is still held.
    until("B's place given back, A's still held", || {
        gate(&b).in_use == 1
    })
    .await;
    let (last, head) = done(a);
    assert_eq!(last, format!("200 {BIG}"), "{head}");
    until("A's place given back", || gate(&b).in_use == 0).await;

    // Both places held: the next waits 3 s (queueWait), then 503.
    let (a1, a2) = (fetch(&b, Some("8M")), fetch(&b, Some("8M")));
    until("both places held", || gate(&b).in_use == 2).await;
    let t = Instant::now();
    let (last, head) = done(fetch(&b, None));
    assert!(last.starts_with("503 "), "{head}");
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_secs(3) && waited < Duration::from_secs(6),
        "waited {waited:?}"
    );
    stop_all(&b, [a1, a2]).await;

    let (_, _, m) = b.get("/metrics").await;
    let m = String::from_utf8_lossy(&m);
    assert_eq!(
        metric(&m, "bootd_admission_waited_total{gate=\"images\"}"),
        1,
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "bootd_admission_refused_total{gate=\"images\",reason=\"queue_full\"}"
        ),
        1
    );
    assert_eq!(
        metric(
            &m,
            "bootd_admission_refused_total{gate=\"images\",reason=\"wait_expired\"}"
        ),
        1
    );
    assert_eq!(metric(&m, "bootd_admission_limit{gate=\"images\"}"), 2);
    b.stop().await;
}

/// The site's TFTP limits reach bootd's TFTP server: one transfer at once
/// and no queue, so a second client is told busy; the status page shows
/// the place in use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sites_tftp_limits_reach_the_tftp_server() {
    let b = Bootd::start_dhcp(
        |t| {
            t.replace(
                "host:\n",
                "host:\n  admission: {tftpTransfers: 1, tftpQueue: 0}\n",
            )
        },
        1,
    )
    .await;
    let tftp = b.tftp.expect("TFTP bound");
    std::fs::write(b.dir.path().join("tftp/two-blocks.bin"), vec![1u8; 1000]).unwrap();
    let rrq = b"\x00\x01two-blocks.bin\x00octet\x00";
    let a = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    a.send_to(rrq, tftp).await.unwrap();
    let mut buf = [0u8; 1024];
    let (n, _) = tokio::time::timeout(Duration::from_secs(5), a.recv_from(&mut buf))
        .await
        .expect("DATA 1")
        .unwrap();
    assert_eq!(&buf[..4], b"\x00\x03\x00\x01", "{:?}", &buf[..n]);
    // A holds the one place (block 1 not acknowledged) and no request may
    // wait: B is dropped unanswered (a PXE ROM gives up on an error, not
    // on silence: it asks again), and counted busy.
    let c = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    c.send_to(rrq, tftp).await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_secs(1), c.recv_from(&mut buf))
            .await
            .is_err(),
        "a request beyond the limits was answered"
    );
    let (_, _, metrics) = b.get("/metrics").await;
    let metrics = String::from_utf8_lossy(&metrics);
    assert!(
        metrics.lines().any(|l| l == "bootd_tftp_busy_total 1"),
        "{metrics}"
    );
    let (_, _, page) = b.get("/status").await;
    let page = String::from_utf8_lossy(&page);
    let row = page
        .lines()
        .find(|l| l.contains("data-gate=\"tftp\""))
        .unwrap_or_else(|| panic!("no tftp row: {page}"));
    assert!(
        row.contains("<td class=\"num\">1</td><td class=\"num\">1</td>"),
        "{row}"
    );
    b.stop().await;
}

/// `imagePerSource`: one address reading slowly holds at most its share
/// of the image places; the next request from it is refused at once, and
/// another address is served at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_hold_every_image_place() {
    let b = Bootd::start_with(|t| {
        t.replace(
            "host:\n",
            "host:\n  admission: {imageTransfers: 4, imagePerSource: 2, queueWait: 20s}\n",
        )
    })
    .await;
    std::fs::create_dir_all(b.images()).unwrap();
    std::fs::write(b.images().join("big.img"), vec![7u8; BIG]).unwrap();
    let slow = [fetch(&b, Some("4M")), fetch(&b, Some("4M"))];
    until("two places held", || gate(&b).in_use == 2).await;
    let t = Instant::now();
    let (last, head) = done(fetch(&b, None));
    assert!(last.starts_with("503 "), "{head}");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "refused at once, not queued"
    );
    let t = Instant::now();
    let (last, head) = done(fetch_from(&b, None, "127.0.0.2"));
    assert_eq!(last, format!("200 {BIG}"), "{head}");
    assert!(t.elapsed() < Duration::from_secs(5), "served at once");
    stop_all(&b, slow).await;
    let (_, _, m) = b.get("/metrics").await;
    let m = String::from_utf8_lossy(&m);
    assert_eq!(
        metric(
            &m,
            "bootd_admission_refused_total{gate=\"images\",reason=\"per_source\"}"
        ),
        1,
        "{m}"
    );
    b.stop().await;
}

/// `host.admission.httpConnections`: the listener holds that many
/// connections (each with part of a request: none idle to evict), resets
/// the next, and a reload raising it lets curl in while they stay open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_cap_is_the_sites_and_a_reload_raises_it() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let cap = |n: u32| {
        move |t: String| {
            t.replace(
                "host:\n",
                &format!("host:\n  admission: {{httpConnections: {n}}}\n"),
            )
        }
    };
    let b = Bootd::start_with(cap(64)).await;
    let mut held = Vec::new();
    for _ in 0..64 {
        let mut s = tokio::net::TcpStream::connect(b.http).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
        held.push(s);
    }
    // Every one of them taken (the accept loop has seen them all).
    let refused = || {
        b.app
            .metrics
            .http_refused
            .get_or_create(&bootd::metrics::Reason {
                reason: "max_connections",
            })
            .get()
    };
    let curl = || {
        Command::new("curl")
            .args([
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "5",
            ])
            .arg(format!("http://{}/healthz", b.http))
            .output()
            .expect("curl")
    };
    let t = Instant::now();
    loop {
        // The 65th: reset at once (curl: "Recv failure" / empty reply).
        let out = curl();
        if refused() >= 1 {
            assert_ne!(String::from_utf8_lossy(&out.stdout), "200");
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "never refused");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    std::fs::write(
        b.dir.path().join("site.yaml"),
        std::fs::read_to_string(b.dir.path().join("site.yaml"))
            .unwrap()
            .replace("httpConnections: 64", "httpConnections: 128"),
    )
    .unwrap();
    b.reload.notify_one();
    until("the cap raised", || {
        b.app.live.load().site.host.admission.http_connections == 128
    })
    .await;
    let out = curl();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200", "{out:?}");
    // The 64 held through the reload: each still gets its answer.
    for s in held.iter_mut().take(3) {
        s.write_all(b"Host: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        assert!(
            got.starts_with(b"HTTP/1.1 200"),
            "{:?}",
            String::from_utf8_lossy(&got)
        );
    }
    drop(held);
    b.stop().await;
}
