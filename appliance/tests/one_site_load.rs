//! One site parse per change of the site, whatever the number of daemons:
//! bootd with the controller, dnsd and lbd in one process on one site feed
//! (as the all-in-one binary runs them). An edit of the site file is parsed
//! once and reaches all three; an API node write is parsed once (the
//! controller's validation) and reaches all three without the overlay file
//! it wrote being parsed again.
//!
//! Alone in its test binary: `site::loads()` counts the whole process.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::net::{TcpListener, UdpSocket};
use tokio_util::sync::CancellationToken;

const API_TOKEN: &str = "one-site-load-test-token";

/// A DNS query for `name` A; the answer's first A record, if any.
async fn resolve(server: SocketAddr, name: &str) -> Option<Ipv4Addr> {
    let sock = UdpSocket::bind("127.0.0.1:0").await.ok()?;
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.trim_end_matches('.').split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    sock.send_to(&q, server).await.ok()?;
    let mut buf = [0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(1), sock.recv(&mut buf))
        .await
        .ok()?
        .ok()?;
    let r = &buf[..n];
    let answers = u16::from_be_bytes([r[6], r[7]]);
    if answers == 0 {
        return None;
    }
    // The answer's last four bytes are its address (one A record, no EDNS).
    let a = &r[n - 4..];
    Some(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
}

async fn until(what: &str, secs: u64, mut f: impl AsyncFnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(secs);
    while !f().await {
        assert!(Instant::now() < end, "{what}: not within {secs} s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_is_parsed_once_for_every_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let path = testkit::dhcp::write_site(dir.path(), |t| {
        t.replacen(
            "host:\n",
            "host:\n  api:\n    listen: 127.0.0.1:9\n    tokens: { file: api-tokens }\n",
            1,
        )
    });
    std::fs::write(dir.path().join("api-tokens"), format!("{API_TOKEN}\n")).unwrap();
    let mut boot = appliance::boot_config(site::load(&path).unwrap(), None);
    boot.poll = Some(Duration::from_millis(100));
    boot.grace = Duration::from_millis(300);
    let feed = boot.feed.clone();
    let shutdown = CancellationToken::new();

    // dnsd on the feed.
    let dns_config = dnsd::Config::new(dnsd::Source::Feed(feed.clone()));
    let dns_loaded = dnsd::load(&dns_config.source, None).unwrap();
    let udp = dnsd::bind_udp("127.0.0.1:0".parse().unwrap(), 1).unwrap();
    let dns_addr = udp[0].local_addr().unwrap();
    let dns_sockets = dnsd::Sockets {
        udp,
        tcp: vec![],
        http: None,
    };
    let dns = tokio::spawn(dnsd::run_loaded(
        dns_config,
        dns_loaded,
        dns_sockets,
        shutdown.clone(),
    ));

    // lbd on the feed.
    let lb_source = lbd::Source::Feed(feed.clone());
    let lb_loaded = lbd::Loaded::load(&lb_source).unwrap();
    let mut lb_sockets = lbd::Sockets::default();
    for f in lb_loaded.plan(false) {
        lb_sockets
            .frontends
            .insert(f.name, TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    let mut lb_config = lbd::Config::new(lb_source, lb_loaded);
    lb_config.poll = Some(Duration::from_millis(100));
    let lb = lbd::start(lb_config, lb_sockets, shutdown.clone())
        .await
        .unwrap();

    // bootd with the controller beside it.
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let https = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api_addr = api.local_addr().unwrap();
    let app = bootd::prepare(&boot, true).unwrap();
    let ca = app.tls.as_ref().unwrap().ca_pem.clone();
    let sockets = appliance::BootSockets {
        boot: bootd::Sockets::http_only(http, Some(https)),
        api: Some(api),
    };
    let boot_task = tokio::spawn(appliance::run_boot(
        Arc::clone(&app),
        boot,
        sockets,
        controller::Tuning::default(),
        None,
        shutdown.clone(),
    ));

    let all_serve = |want: Arc<site::Site>| {
        let (app, lb) = (Arc::clone(&app), Arc::clone(&lb));
        move || {
            Arc::ptr_eq(&app.live.load().site, &want)
                && lb.with_loaded(|l| matches!(l, lbd::Loaded::Site(s) if Arc::ptr_eq(s, &want)))
        }
    };
    assert_eq!(
        resolve(dns_addr, "registry.lab.example.test").await,
        Some(Ipv4Addr::new(10, 77, 0, 1))
    );

    // 1. The site file changes: one parse, and every daemon serves the result.
    let before = site::loads();
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replace(
        "    - { name: registry, type: A, value: 10.77.0.1 }\n",
        "    - { name: registry, type: A, value: 10.77.0.1 }\n    - { name: once, type: A, value: 10.77.0.99 }\n",
    );
    std::fs::write(&path, text).unwrap();
    // A later modification time whatever the file system's granularity.
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(SystemTime::now() + Duration::from_secs(2))
        .unwrap();
    until("dnsd answers the new record", 10, async || {
        resolve(dns_addr, "once.lab.example.test").await == Some(Ipv4Addr::new(10, 77, 0, 99))
    })
    .await;
    let published = feed.current();
    assert!(
        published
            .dns
            .records
            .iter()
            .any(|r| r.name.starts_with("once.")),
        "the feed has the edited site"
    );
    until("bootd and lbd serve the published site", 10, {
        let f = all_serve(Arc::clone(&published));
        async move || f()
    })
    .await;
    // Several polling periods later, still one parse.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        site::loads() - before,
        1,
        "one change of the site file, parsed once for bootd, the controller, dnsd and lbd"
    );

    // 2. An API node write: the controller's validation is the only parse.
    let before = site::loads();
    let client =
        controller::providers::Http::with_ca(Duration::from_secs(10), ca.as_bytes()).unwrap();
    let body = serde_json::json!({ "name": "worker-9", "role": "worker", "macs": ["52:54:00:77:00:29"], "ip": "10.77.0.29", "live": true });
    let req = http::Request::post(format!("https://localhost:{}/v1/nodes", api_addr.port()))
        .header("authorization", format!("Bearer {API_TOKEN}"))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_string(),
        )))
        .unwrap();
    let reply = client.send(req, "api").await.unwrap();
    assert_eq!(
        reply.status.as_u16(),
        201,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    until("dnsd answers the new node", 10, async || {
        resolve(dns_addr, "worker-9.lab.example.test").await == Some(Ipv4Addr::new(10, 77, 0, 29))
    })
    .await;
    let published = feed.current();
    assert!(published.node("worker-9").is_some());
    until("bootd and lbd serve the site with the new node", 10, {
        let f = all_serve(Arc::clone(&published));
        async move || f()
    })
    .await;
    assert!(
        std::fs::read_to_string(&published.overlay.path)
            .unwrap()
            .contains("worker-9"),
        "the overlay file is the durable record"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        site::loads() - before,
        1,
        "an API write: validated once, not parsed again by any daemon or by the reload loop"
    );

    shutdown.cancel();
    boot_task.await.unwrap().unwrap();
    dns.await.unwrap().unwrap();
}
