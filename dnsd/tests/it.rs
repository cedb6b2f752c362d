//! dnsd's `run` on loopback (port 0), talked to over real sockets: UDP,
//! TCP pipelining and idle timeout, AXFR, live reload (serial increases, a
//! bad site keeps the old zones), NOTIFY to a secondary, forwarding to an
//! upstream, malformed datagrams, /healthz and /metrics.

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

struct Server {
    udp: SocketAddr,
    tcp: SocketAddr,
    http: SocketAddr,
    site: PathBuf,
    reload: Arc<tokio::sync::Notify>,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

/// The test site with `extra` appended to its `dns:` section.
fn site_with(dir: &Path, extra: &str) -> PathBuf {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    std::fs::copy(data.join("worker.ign"), dir.join("worker.ign")).unwrap();
    let text = std::fs::read_to_string(data.join("site.yaml"))
        .unwrap()
        .replace("  records:\n", &format!("{extra}  records:\n"));
    let path = dir.join("site.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

async fn start(extra: &str) -> Server {
    start_tuned(extra, |_| {}).await
}

/// [`start`]; `tune` may change the config first.
async fn start_tuned(extra: &str, tune: impl FnOnce(&mut dnsd::Config)) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let site = site_with(dir.path(), extra);
    let udp = dnsd::bind_udp("127.0.0.1:0".parse().unwrap(), 2).unwrap();
    let udp_addr = udp[0].local_addr().unwrap();
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (tcp_addr, http_addr) = (tcp.local_addr().unwrap(), http.local_addr().unwrap());
    let mut config = dnsd::Config::new(dnsd::Source::Site(site.clone()));
    config.poll = None;
    config.tcp_idle = Duration::from_millis(300);
    tune(&mut config);
    let reload = Arc::clone(&config.reload);
    let stop = CancellationToken::new();
    let s = stop.clone();
    tokio::spawn(async move {
        dnsd::run(
            config,
            dnsd::Sockets {
                udp,
                tcp: vec![tcp],
                http: Some(http),
            },
            s,
        )
        .await
        .unwrap()
    });
    Server {
        udp: udp_addr,
        tcp: tcp_addr,
        http: http_addr,
        site,
        reload,
        stop,
        _dir: dir,
    }
}

fn query(id: u16, name: &str, t: RecordType, rd: bool) -> Vec<u8> {
    let mut m = Message::new();
    m.set_id(id)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(rd);
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), t));
    m.to_vec().unwrap()
}

fn udp_ask(to: SocketAddr, q: &[u8]) -> Option<Vec<u8>> {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    s.send_to(q, to).unwrap();
    let mut buf = [0u8; 65535];
    let (n, _) = s.recv_from(&mut buf).ok()?;
    Some(buf[..n].to_vec())
}

fn tcp_read(s: &mut TcpStream) -> std::io::Result<Message> {
    let mut len = [0u8; 2];
    s.read_exact(&mut len)?;
    let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
    s.read_exact(&mut buf)?;
    Ok(Message::from_vec(&buf).unwrap())
}

fn serial(to: SocketAddr) -> u32 {
    let r = Message::from_vec(
        &udp_ask(to, &query(1, "lab.example.test.", RecordType::SOA, false)).unwrap(),
    )
    .unwrap();
    match r.answers()[0].data() {
        hickory_proto::rr::RData::SOA(s) => s.serial(),
        other => panic!("{other:?}"),
    }
}

async fn http_get(addr: SocketAddr, path: &str) -> String {
    let path = path.to_string();
    tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_tcp_pipelining_idle_and_axfr() {
    let s = start("").await;
    let udp = s.udp;
    let r = tokio::task::spawn_blocking(move || {
        udp_ask(
            udp,
            &query(7, "Master-0.Lab.Example.Test.", RecordType::A, true),
        )
    })
    .await
    .unwrap()
    .unwrap();
    let m = Message::from_vec(&r).unwrap();
    assert_eq!(m.id(), 7);
    assert!(m.authoritative());
    assert_eq!(
        m.answers()[0].name().to_ascii(),
        "Master-0.Lab.Example.Test."
    );
    assert_eq!(m.answers()[0].data().to_string(), "10.77.0.11");

    let tcp = s.tcp;
    tokio::task::spawn_blocking(move || {
        // three queries in one write: three answers, in order
        let mut c = TcpStream::connect(tcp).unwrap();
        let mut batch = Vec::new();
        for (id, name) in [
            (1u16, "api.lab.example.test."),
            (2, "nope.lab.example.test."),
            (3, "x.apps.lab.example.test."),
        ] {
            let q = query(id, name, RecordType::A, false);
            batch.extend_from_slice(&(q.len() as u16).to_be_bytes());
            batch.extend_from_slice(&q);
        }
        c.write_all(&batch).unwrap();
        let rs: Vec<Message> = (0..3).map(|_| tcp_read(&mut c).unwrap()).collect();
        assert_eq!(rs.iter().map(|m| m.id()).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(rs[1].response_code(), ResponseCode::NXDomain);
        assert_eq!(rs[2].answers()[0].data().to_string(), "10.77.0.3");
        // idle: the server closes after 300 ms without a request
        c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut b = [0u8; 1];
        assert_eq!(c.read(&mut b).unwrap(), 0, "connection closed when idle");

        // AXFR: SOA first and last, every record in between
        let mut c = TcpStream::connect(tcp).unwrap();
        let q = query(9, "lab.example.test.", RecordType::AXFR, false);
        c.write_all(&(q.len() as u16).to_be_bytes()).unwrap();
        c.write_all(&q).unwrap();
        let m = tcp_read(&mut c).unwrap();
        let a = m.answers();
        assert_eq!(a.first().unwrap().record_type(), RecordType::SOA);
        assert_eq!(a.last().unwrap().record_type(), RecordType::SOA);
        assert!(a
            .iter()
            .any(|r| r.name().to_ascii() == "*.apps.lab.example.test."
                && r.data().to_string() == "10.77.0.3"));
        assert!(a.len() > 15, "{}", a.len());
    })
    .await
    .unwrap();

    // malformed: FORMERR for a pointer in the question, nothing for a short packet
    let udp = s.udp;
    tokio::task::spawn_blocking(move || {
        let mut bad = query(5, "a.lab.example.test.", RecordType::A, false);
        bad[12] = 0xC0;
        bad[13] = 0x0C;
        let r = udp_ask(udp, &bad).unwrap();
        assert_eq!(r[3] & 0xF, 1, "FORMERR");
        assert!(udp_ask(udp, &[1, 2, 3]).is_none());
    })
    .await
    .unwrap();
    let metrics = http_get(s.http, "/metrics").await;
    assert!(
        metrics.contains("dnsd_responses_total{transport=\"udp\",rcode=\"FORMERR\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("dnsd_transfers_total{result=\"axfr\"} 1"),
        "{metrics}"
    );
    s.stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_notify_and_a_bad_site() {
    // A fake secondary that acknowledges NOTIFY.
    let secondary = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let sec_addr = secondary.local_addr().unwrap();
    let s = start(&format!("  notify: [{sec_addr}]\n")).await;
    let mut buf = vec![0u8; 4096];
    // one NOTIFY per zone at start
    let mut notified = Vec::new();
    for _ in 0..3 {
        let (n, from) = tokio::time::timeout(Duration::from_secs(5), secondary.recv_from(&mut buf))
            .await
            .unwrap()
            .unwrap();
        let m = Message::from_vec(&buf[..n]).unwrap();
        assert_eq!(m.op_code(), OpCode::Notify);
        notified.push(m.queries()[0].name().to_ascii());
        let mut ack = m.clone();
        ack.set_message_type(MessageType::Response);
        secondary
            .send_to(&ack.to_vec().unwrap(), from)
            .await
            .unwrap();
    }
    notified.sort();
    assert_eq!(
        notified,
        [
            "0.0.0.0.0.0.0.0.7.7.0.0.0.0.d.f.ip6.arpa.",
            "0.77.10.in-addr.arpa.",
            "lab.example.test."
        ]
    );

    let udp = s.udp;
    let before = tokio::task::spawn_blocking(move || serial(udp))
        .await
        .unwrap();
    let text = std::fs::read_to_string(&s.site).unwrap()
        + "    - { name: added, type: A, value: 10.77.0.99 }\n";
    std::fs::write(&s.site, text).unwrap();
    s.reload.notify_one();
    // the changed zone only: a NOTIFY for lab.example.test with the new serial
    let (n, _) = tokio::time::timeout(Duration::from_secs(5), secondary.recv_from(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let m = Message::from_vec(&buf[..n]).unwrap();
    assert_eq!(m.queries()[0].name().to_ascii(), "lab.example.test.");
    let after = tokio::task::spawn_blocking(move || serial(udp))
        .await
        .unwrap();
    assert!(after > before, "serial {before} -> {after}");
    let r = tokio::task::spawn_blocking(move || {
        udp_ask(
            udp,
            &query(3, "added.lab.example.test.", RecordType::A, false),
        )
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        Message::from_vec(&r).unwrap().answers()[0]
            .data()
            .to_string(),
        "10.77.0.99"
    );

    // a bad site: refused, the old zones keep serving
    let text = std::fs::read_to_string(&s.site).unwrap() + "  colour: red\n";
    std::fs::write(&s.site, text).unwrap();
    s.reload.notify_one();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        tokio::task::spawn_blocking(move || serial(udp))
            .await
            .unwrap(),
        after
    );
    let metrics = http_get(s.http, "/metrics").await;
    assert!(
        metrics.contains("dnsd_reloads_total{result=\"error\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "dnsd_zone_serial{{zone=\"lab.example.test.\"}} {after}"
        )),
        "{metrics}"
    );
    let health = http_get(s.http, "/healthz").await;
    assert!(
        health.starts_with("HTTP/1.1 200")
            && health.contains(&format!("lab.example.test. {after}")),
        "{health}"
    );
    s.stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwards_other_names_when_asked_to_recurse() {
    // A fake upstream answering every query with one A record.
    let up = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let up_addr = up.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        while let Ok((n, from)) = up.recv_from(&mut buf).await {
            let q = Message::from_vec(&buf[..n]).unwrap();
            let mut r = Message::new();
            r.set_id(q.id())
                .set_message_type(MessageType::Response)
                .set_recursion_available(true);
            r.add_queries(q.queries().iter().cloned());
            let name = q.queries()[0].name().clone();
            r.add_answer(hickory_proto::rr::Record::from_rdata(
                name,
                60,
                hickory_proto::rr::RData::A("192.0.2.7".parse().unwrap()),
            ));
            up.send_to(&r.to_vec().unwrap(), from).await.unwrap();
        }
    });
    let s = start(&format!("  upstreams: [{up_addr}]\n")).await;
    let udp = s.udp;
    tokio::task::spawn_blocking(move || {
        let r = Message::from_vec(
            &udp_ask(udp, &query(0x5151, "www.example.org.", RecordType::A, true)).unwrap(),
        )
        .unwrap();
        assert_eq!(r.id(), 0x5151);
        assert!(r.recursion_available());
        assert_eq!(r.answers()[0].data().to_string(), "192.0.2.7");
        // without RD: not forwarded
        let r = Message::from_vec(
            &udp_ask(udp, &query(2, "www.example.org.", RecordType::A, false)).unwrap(),
        )
        .unwrap();
        assert_eq!(r.response_code(), ResponseCode::Refused);
        // in-zone names are never forwarded
        let r = Message::from_vec(
            &udp_ask(
                udp,
                &query(3, "nope.lab.example.test.", RecordType::A, true),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(r.response_code(), ResponseCode::NXDomain);
    })
    .await
    .unwrap();
    s.stop.cancel();
}

/// The probe: one client held all 512 TCP slots. Now one source has at
/// most 32 (the next is closed at once and counted), another source is
/// still answered, and a client that sends queries but reads no answers
/// is closed once its writes stall for the idle time.
/// The metrics listener holds at most 16 connections from one address: the
/// rest are closed at accept and counted; it answers again once they go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_listener_caps_idle_connections() {
    let s = start("").await;
    let http = s.http;
    let (held, closed) = tokio::task::spawn_blocking(move || {
        let mut held = Vec::new();
        for _ in 0..20 {
            held.push(TcpStream::connect(http).unwrap());
        }
        let mut closed = 0;
        for c in held.iter_mut() {
            c.set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            let mut buf = [0u8; 1];
            if let Ok(0) = c.read(&mut buf) {
                closed += 1;
            }
        }
        (held, closed)
    })
    .await
    .unwrap();
    assert_eq!(closed, 4);
    drop(held);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let m = http_get(s.http, "/metrics").await;
    assert!(
        m.contains("dnsd_tcp_refused_total{result=\"http_per_source\"} 4"),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_source_cannot_hold_every_tcp_slot() {
    let s = start("").await;
    let tcp = s.tcp;
    let held = tokio::task::spawn_blocking(move || {
        let mut held = Vec::new();
        for _ in 0..32 {
            let mut c = TcpStream::connect(tcp).unwrap();
            // A query keeps it from the 300 ms idle close for a moment.
            let q = query(7, "api.lab.example.test.", RecordType::A, false);
            c.write_all(&(q.len() as u16).to_be_bytes()).unwrap();
            c.write_all(&q).unwrap();
            tcp_read(&mut c).unwrap();
            held.push(c);
        }
        // The 33rd from this address: closed without an answer.
        let mut over = TcpStream::connect(tcp).unwrap();
        over.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let q = query(8, "api.lab.example.test.", RecordType::A, false);
        let _ = over.write_all(&(q.len() as u16).to_be_bytes());
        let _ = over.write_all(&q);
        assert!(
            tcp_read(&mut over).is_err(),
            "the 33rd connection was answered"
        );
        // From 127.0.0.2: answered.
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.bind(&"127.0.0.2:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        sock.connect(&tcp.into()).unwrap();
        let mut other: TcpStream = sock.into();
        other.write_all(&(q.len() as u16).to_be_bytes()).unwrap();
        other.write_all(&q).unwrap();
        assert_eq!(tcp_read(&mut other).unwrap().id(), 8);
        held
    })
    .await
    .unwrap();
    drop(held);
    let m = http_get(s.http, "/metrics").await;
    assert!(
        m.contains("dnsd_tcp_refused_total{result=\"per_source\"} "),
        "{m}"
    );
    // A client that pipelines queries and never reads: closed once its
    // answers stop going out (the 300 ms idle limit), not held.
    let closed = tokio::task::spawn_blocking(move || {
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.set_recv_buffer_size(4096).unwrap();
        sock.connect(&tcp.into()).unwrap();
        let mut c: TcpStream = sock.into();
        c.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        let q = query(9, "api.lab.example.test.", RecordType::A, false);
        let mut burst = Vec::new();
        for _ in 0..256 {
            burst.extend_from_slice(&(q.len() as u16).to_be_bytes());
            burst.extend_from_slice(&q);
        }
        let t = std::time::Instant::now();
        // Keep asking, never reading: the answers fill both sockets'
        // buffers, the server's writes stall, and it gives up on us (our
        // next write fails), bounded in time.
        while t.elapsed() < Duration::from_secs(10) {
            match c.write_all(&burst) {
                Ok(()) => {}
                // The server closed it (our unread answers make that a reset).
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                    ) =>
                {
                    return true
                }
                // Our own write timed out: the server still holds it.
                Err(_) => {}
            }
        }
        false
    })
    .await
    .unwrap();
    assert!(
        closed,
        "a client reading nothing kept its connection for 10 s"
    );
    s.stop.cancel();
}

/// The value of the metric line starting with `name` (0 when absent).
fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

/// Malformed queries through the real UDP listener: those with a usable
/// header are answered FORMERR (QDCOUNT 0 or 2, a cut or broken EDNS OPT),
/// a datagram larger than dnsd reads is dropped; each is counted, and the
/// next query (from dig) is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_udp_queries_are_refused_counted_and_the_next_answered() {
    let s = start("").await;
    let udp = s.udp;
    let q = query(0x4242, "master-0.lab.example.test.", RecordType::A, false);
    let with_counts = |qd: u16, ar: u16, tail: &[u8]| {
        let mut b = q.clone();
        b[4..6].copy_from_slice(&qd.to_be_bytes());
        b[10..12].copy_from_slice(&ar.to_be_bytes());
        b.extend_from_slice(tail);
        b
    };
    let question = q[12..].to_vec();
    // OPT: root name, type 41, UDP size 1232, TTL 0, then RDLEN and RDATA.
    let opt = |rdlen: u16, rdata: &[u8]| {
        let mut o = vec![0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0];
        o.extend_from_slice(&rdlen.to_be_bytes());
        o.extend_from_slice(rdata);
        o
    };
    let formerr: Vec<(&str, Vec<u8>)> = vec![
        ("QDCOUNT 0, header only", q[..12].to_vec()),
        ("QDCOUNT 0, a question after it", with_counts(0, 0, &[])),
        ("QDCOUNT 2, one question", with_counts(2, 0, &[])),
        ("QDCOUNT 2, two questions", with_counts(2, 0, &question)),
        ("ARCOUNT 1, no OPT", with_counts(1, 1, &[])),
        (
            "OPT cut in its fixed part",
            with_counts(1, 1, &opt(0, &[])[..7]),
        ),
        (
            "OPT RDATA shorter than RDLEN",
            with_counts(1, 1, &opt(8, &[0, 10, 0, 8, 1, 2])),
        ),
        (
            "OPT option longer than the RDATA",
            with_counts(1, 1, &opt(6, &[0, 10, 0, 9, 1, 2])),
        ),
    ];
    let n_formerr = formerr.len() as u64;
    // Over what dnsd reads (4 096 bytes): a real query padded to 5 000
    // bytes, and to the largest UDP datagram over IPv4.
    let oversized: Vec<Vec<u8>> = [5000usize, 65_507]
        .iter()
        .map(|&n| {
            let mut b = q.clone();
            b.resize(n, 0);
            b
        })
        .collect();
    tokio::task::spawn_blocking(move || {
        for (what, bytes) in &formerr {
            let r = udp_ask(udp, bytes).unwrap_or_else(|| panic!("{what}: no answer"));
            assert_eq!(&r[..2], &[0x42, 0x42], "{what}: not the query's ID");
            assert_eq!(r[2] & 0x80, 0x80, "{what}: not a response");
            assert_eq!(r[3] & 0xF, 1, "{what}: not FORMERR");
        }
        for b in &oversized {
            assert!(
                udp_ask(udp, b).is_none(),
                "a {}-byte datagram was answered",
                b.len()
            );
        }
    })
    .await
    .unwrap();
    // The next query, from a real client.
    let out = std::process::Command::new("dig")
        .args([
            "@127.0.0.1",
            "-p",
            &udp.port().to_string(),
            "+short",
            "+tries=1",
            "+time=2",
            "master-0.lab.example.test",
            "A",
        ])
        .output()
        .expect("dig not found");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "10.77.0.11");
    // UDP counts reach /metrics within 250 ms, or when the worker idles.
    let end = std::time::Instant::now() + Duration::from_secs(3);
    let m = loop {
        let m = http_get(s.http, "/metrics").await;
        let done = metric(&m, "dnsd_dropped_total{result=\"malformed\"}") >= 2
            && metric(
                &m,
                "dnsd_responses_total{transport=\"udp\",rcode=\"NOERROR\"}",
            ) >= 1;
        if done || std::time::Instant::now() > end {
            break m;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        metric(
            &m,
            "dnsd_responses_total{transport=\"udp\",rcode=\"FORMERR\"}"
        ),
        n_formerr,
        "{m}"
    );
    assert_eq!(
        metric(&m, "dnsd_dropped_total{result=\"malformed\"}"),
        2,
        "{m}"
    );
    s.stop.cancel();
}

/// The metrics listener closes a head that stops halfway, and a connection
/// that sends nothing, at its head deadline (10 s by default, 1 s here),
/// refuses a request smuggling framing (400), and counts each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_listener_closes_slow_heads_and_bad_framings() {
    let d = dnsd::Config::new(dnsd::Source::Site(PathBuf::from("x")));
    assert_eq!(d.http.head_timeout, Duration::from_secs(10));
    let s = start_tuned("", |c| c.http.head_timeout = Duration::from_secs(1)).await;
    let http = s.http;
    let exchange = move |bytes: &'static [u8]| {
        tokio::task::spawn_blocking(move || {
            let mut c = TcpStream::connect(http).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            c.write_all(bytes).unwrap();
            let t = std::time::Instant::now();
            let mut out = Vec::new();
            c.read_to_end(&mut out).expect("closed by dnsd");
            (t.elapsed(), String::from_utf8_lossy(&out).into_owned())
        })
    };
    for partial in [&b"GET /metrics HTTP/1.1\r\nHo"[..], b""] {
        let (d, text) = exchange(partial).await.unwrap();
        assert!(
            d >= Duration::from_millis(900) && d < Duration::from_secs(5),
            "{d:?}"
        );
        assert_eq!(text, "");
    }
    let (_, text) = exchange(
        b"GET /healthz HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    )
    .await
    .unwrap();
    assert!(text.starts_with("HTTP/1.1 400 "), "{text}");
    // Each is counted just after its connection closed.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let m = http_get(s.http, "/metrics").await;
    for reason in [
        "head_timeout",
        "idle_timeout",
        "content_length_and_transfer_encoding",
    ] {
        assert!(
            m.contains(&format!(
                "dnsd_http_connections_closed_total{{reason=\"{reason}\"}} 1"
            )),
            "{reason}: {m}"
        );
    }
}
