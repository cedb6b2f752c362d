//! The boot timeline end to end on loopback: a "node" (worker-1 moved to
//! 127.0.0.21) goes through DHCP (relayed), TFTP, the iPXE scripts, kernel,
//! initramfs and Ignition against the real `run`, then lbd's two phases
//! (its first machine-config connection and its API backend up, with lbd's
//! own times, as the executables' lbd watcher records them:
//! appliance/tests/lbwatch.rs). The timeline must have every phase in order, each starting
//! inside the wall-clock window of the step that caused it, and durations
//! adding up to the wall-clock time. Failing nodes show the phase and why.

use crate::harness::{dhcp_recv, request, request_from, Bootd};
use bootd::timeline::{Phase, Raw, Subject};
use dhcproto::v4::{Architecture, DhcpOption, MessageType};
use serde_json::Value;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::net::UdpSocket;

const NODE_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 21);
const MAC: [u8; 6] = [0x52, 0x54, 0, 0x77, 0, 0x21];

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

/// worker-1 on a loopback network; `pool` decides whether unknown MACs get an address.
fn site(pool: bool, lb_admin: Option<SocketAddr>) -> impl FnOnce(String) -> String {
    move |t: String| {
        let pool = if pool {
            "    pool: { start: 127.0.1.0, end: 127.0.9.255 }\n"
        } else {
            ""
        };
        let mut t = t
            .replace(
                "    dnsServers: [10.77.0.1]\n",
                &format!("    dnsServers: [10.77.0.1]\n  - name: lo\n    subnet: 127.0.0.0/8\n    gateway: 127.0.0.1\n{pool}"),
            )
            .replace("ip: 10.77.0.21", "ip: 127.0.0.21");
        t.push_str(&format!(
            "\nlb:\n  adminListen: {}\n",
            lb_admin
                .map(|a| a.to_string())
                .unwrap_or_else(|| "off".into())
        ));
        t
    }
}

fn dhcp(mac: [u8; 6], t: MessageType, xid: u32, ip: Option<Ipv4Addr>, vendor: &str) -> Vec<u8> {
    let mut extra = Vec::new();
    if vendor.starts_with("PXEClient") {
        extra.push(DhcpOption::ClientSystemArchitecture(Architecture::from(
            7u16,
        )));
    }
    extra.push(DhcpOption::ClassIdentifier(vendor.as_bytes().to_vec()));
    testkit::dhcp::request_with(mac, t, xid, ip, extra)
}

/// A plain RFC 1350 read from `from`: returns the bytes.
pub(crate) async fn tftp_get(from: IpAddr, server: SocketAddr, file: &str) -> Vec<u8> {
    let sock = UdpSocket::bind(SocketAddr::new(from, 0)).await.unwrap();
    let mut rrq = vec![0, 1];
    rrq.extend_from_slice(file.as_bytes());
    rrq.extend_from_slice(b"\0octet\0");
    sock.send_to(&rrq, server).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 1024];
    for _ in 0..10_000 {
        let (n, peer) = tokio::time::timeout(Duration::from_secs(3), sock.recv_from(&mut buf))
            .await
            .expect("TFTP DATA")
            .unwrap();
        assert_eq!(&buf[..2], &[0, 3], "DATA expected, got {:?}", &buf[..n]);
        out.extend_from_slice(&buf[4..n]);
        sock.send_to(&[0, 4, buf[2], buf[3]], peer).await.unwrap();
        if n - 4 < 512 {
            return out;
        }
    }
    panic!("TFTP transfer never ended");
}

pub(crate) async fn timeline(b: &Bootd, node: &str) -> Value {
    let path = format!(
        "/status/node/{}/timeline.json",
        percent_encoding::utf8_percent_encode(node, percent_encoding::NON_ALPHANUMERIC)
    );
    let (st, _, body) = request(b.http, "GET", &path, &[]).await;
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).unwrap()
}

/// Polls until `f` holds for the node's timeline (events go through a queue).
async fn wait_for(b: &Bootd, node: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..100 {
        let v = timeline(b, node).await;
        if f(&v) {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "{node}: {what} never showed: {}",
        serde_json::to_string_pretty(&timeline(b, node).await).unwrap()
    );
}

#[tokio::test]
async fn every_phase_in_order_with_durations_matching_the_wall_clock() {
    let relay = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let b = Bootd::start_config(
        site(true, None),
        Some(relay.local_addr().unwrap().port()),
        |_| {},
    )
    .await;
    std::fs::write(b.dir.path().join("tftp/ipxe.efi"), vec![7u8; 3000]).unwrap();
    std::fs::write(b.images().join("lab/kernel"), vec![1u8; 3 << 20]).unwrap();
    std::fs::write(b.images().join("lab/initramfs"), vec![2u8; 1 << 20]).unwrap();
    relay.connect(b.dhcp.unwrap()).await.unwrap();
    let node_ip = IpAddr::V4(NODE_IP);
    let node = Some(node_ip);
    let pause = || tokio::time::sleep(Duration::from_millis(120));
    // (phase, wall-clock window in which it must start)
    let mut windows: Vec<(&str, i64, i64)> = Vec::new();

    let t = now_us();
    relay
        .send(&dhcp(
            MAC,
            MessageType::Discover,
            1,
            None,
            "PXEClient:Arch:00007:UNDI:003016",
        ))
        .await
        .unwrap();
    let offer = dhcp_recv(&relay).await.expect("OFFER");
    assert_eq!(offer.yiaddr(), NODE_IP);
    relay
        .send(&dhcp(
            MAC,
            MessageType::Request,
            2,
            Some(NODE_IP),
            "PXEClient:Arch:00007:UNDI:003016",
        ))
        .await
        .unwrap();
    assert_eq!(
        dhcp_recv(&relay).await.expect("ACK").opts().msg_type(),
        Some(MessageType::Ack)
    );
    windows.push(("dhcp", t, now_us()));
    pause().await;

    let t = now_us();
    assert_eq!(
        tftp_get(node_ip, b.tftp.unwrap(), "ipxe.efi").await.len(),
        3000
    );
    windows.push(("tftp", t, now_us()));
    pause().await;

    let t = now_us();
    let (st, _, _) = request_from(node, b.http, "GET", "/boot.ipxe", &[]).await;
    assert_eq!(st, 200);
    let (st, _, script) = request_from(
        node,
        b.http,
        "GET",
        "/ipxe/node?mac=52:54:00:77:00:21&buildarch=x86_64",
        &[],
    )
    .await;
    assert_eq!(st, 200);
    windows.push(("script", t, now_us()));
    pause().await;

    let t = now_us();
    let (st, _, k) = request_from(node, b.http, "GET", "/images/lab/kernel", &[]).await;
    assert_eq!((st.as_u16(), k.len()), (200, 3 << 20));
    windows.push(("kernel", t, now_us()));
    pause().await;

    let t = now_us();
    let (st, _, i) = request_from(node, b.http, "GET", "/images/lab/initramfs", &[]).await;
    assert_eq!((st.as_u16(), i.len()), (200, 1 << 20));
    windows.push(("initramfs", t, now_us()));
    pause().await;

    // The guest's own DHCP (no boot file): neither a new phase nor a new attempt.
    relay
        .send(&dhcp(
            MAC,
            MessageType::Request,
            3,
            Some(NODE_IP),
            "udhcp 1.35.0",
        ))
        .await
        .unwrap();
    dhcp_recv(&relay).await.expect("ACK to the OS");
    // The token from the script the node got, as a real node would use it.
    let script = String::from_utf8(script.to_vec()).unwrap();
    let token = script
        .split("token=")
        .nth(1)
        .unwrap()
        .split(|c: char| c.is_whitespace() || c == '&' || c == '"')
        .next()
        .unwrap()
        .to_string();
    let t = now_us();
    let (st, _, _) = request_from(
        node,
        b.http,
        "GET",
        &format!("/ignition/worker-1?token={token}"),
        &[],
    )
    .await;
    assert_eq!(st, 200);
    windows.push(("ignition", t, now_us()));

    // lbd's view, with lbd's own times (a little in the future of ours).
    let mc_ms = now_us() / 1000 + 150;
    let api_ms = mc_ms + 250;
    b.app.timeline.record(
        Raw::new(
            Subject::ip(node_ip),
            Phase::MachineConfig,
            "first_connection",
            "first connection through lbd's machine-config frontend",
        )
        .at(mc_ms * 1000),
    );
    b.app.timeline.record(
        Raw::new(
            Subject::ip(node_ip),
            Phase::Api,
            "backend_up",
            "API backend 127.0.0.21:6443 up in lbd's checks",
        )
        .at(api_ms * 1000),
    );
    windows.push(("machine_config", mc_ms * 1000, mc_ms * 1000));
    windows.push(("api", api_ms * 1000, api_ms * 1000));

    let v = wait_for(&b, "worker-1", "the api phase", |v| v["phase"] == "api").await;
    let phases: Vec<&str> = v["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    assert_eq!(
        phases,
        [
            "dhcp",
            "tftp",
            "script",
            "kernel",
            "initramfs",
            "ignition",
            "machine_config",
            "api"
        ],
        "{v:#}"
    );
    assert_eq!(v["inOrder"], true);
    assert_eq!(v["attempt"], 1, "the OS's DHCP did not start a new attempt");
    assert_eq!(v["lastError"], Value::Null, "{v:#}");
    // Each phase starts inside the window of the step that caused it
    // (2 ms of slack: bootd's clock reads come after ours).
    for (p, (name, lo, hi)) in v["phases"].as_array().unwrap().iter().zip(&windows) {
        let start = p["startUs"].as_i64().unwrap();
        assert!(
            start >= lo - 2_000 && start <= hi + 2_000,
            "{name} started at {start}, outside [{lo}, {hi}]"
        );
    }
    // Durations: start to next start; they add up to the whole, and the
    // whole is the wall-clock time from our DISCOVER to lbd's backend-up.
    let secs: Vec<f64> = v["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["seconds"].as_f64().unwrap())
        .collect();
    for (i, w) in windows.windows(2).enumerate() {
        let wall = (w[1].1 - w[0].1) as f64 / 1e6;
        assert!(
            (secs[i] - wall).abs() < 0.05,
            "{}: {} s in the timeline, {wall} s by the wall clock",
            w[0].0,
            secs[i]
        );
    }
    let total: f64 = secs.iter().sum();
    assert!((total - v["totalSeconds"].as_f64().unwrap()).abs() < 1e-6);
    let wall_total = (api_ms * 1000 - windows[0].1) as f64 / 1e6;
    assert!(
        (total - wall_total).abs() < 0.05,
        "total {total} s vs wall clock {wall_total} s"
    );

    // Events carry what was served; nothing carries the token.
    let events = v["events"].as_array().unwrap();
    let find = |phase: &str, what: &str| {
        events
            .iter()
            .find(|e| e["phase"] == phase && e["what"] == what)
            .cloned()
    };
    assert_eq!(find("tftp", "served").unwrap()["bytes"], 3000);
    assert_eq!(find("kernel", "done").unwrap()["bytes"], 3 << 20);
    assert_eq!(find("kernel", "start").unwrap()["bytes"], 3 << 20);
    assert_eq!(find("initramfs", "done").unwrap()["bytes"], 1 << 20);
    assert!(
        find("dhcp", "offer").unwrap()["detail"]
            .as_str()
            .unwrap()
            .contains("UEFI x86 PXE"),
        "the boot decision and its reason"
    );
    assert!(find("ignition", "served").is_some());
    assert!(
        !v.to_string().contains(&token),
        "the token leaked into the timeline"
    );

    // The same from the status page, and the phase durations in /metrics.
    let (_, _, page) = request(b.http, "GET", "/status", &[]).await;
    let page = String::from_utf8(page.to_vec()).unwrap();
    assert!(
        page.contains("data-node=\"worker-1\" data-phase=\"api\""),
        "{page}"
    );
    assert!(page.contains("data-node=\"bootstrap\" data-phase=\"waiting\""));
    let (_, _, metrics) = request(b.http, "GET", "/metrics", &[]).await;
    let metrics = String::from_utf8(metrics.to_vec()).unwrap();
    for p in [
        "dhcp",
        "tftp",
        "script",
        "kernel",
        "initramfs",
        "ignition",
        "machine_config",
    ] {
        assert!(
            metrics.contains(&format!(
                "bootd_node_phase_seconds_count{{phase=\"{p}\"}} 1"
            )),
            "{p} not observed:\n{metrics}"
        );
    }
    assert!(metrics.contains("bootd_timeline_events_dropped_total 0"));
    b.stop().await;
}

#[tokio::test]
async fn failing_nodes_show_the_failing_phase_and_the_reason() {
    let relay = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let b = Bootd::start_dhcp(site(false, None), relay.local_addr().unwrap().port()).await;
    relay.connect(b.dhcp.unwrap()).await.unwrap();

    // An unknown MAC (no pool): not answered; its own timeline says why.
    let stray = [0x52, 0x54, 0, 0x99, 0x99, 0x01];
    relay
        .send(&dhcp(
            stray,
            MessageType::Discover,
            9,
            None,
            "PXEClient:Arch:00007:<b>evil</b>",
        ))
        .await
        .unwrap();
    assert!(
        dhcp_recv(&relay).await.is_none(),
        "no OFFER for an unknown MAC without a pool"
    );
    let v = wait_for(&b, "mac 52:54:00:99:99:01", "the DHCP error", |v| {
        v["lastError"].is_object()
    })
    .await;
    assert_eq!(v["phase"], "dhcp");
    assert_eq!(v["siteNode"], false);
    let why = v["lastError"]["detail"].as_str().unwrap();
    assert!(why.contains("unknown MAC and no dynamic pool"), "{why}");

    // Ignition asked from an address that is not the node's, without a token.
    let (st, _, _) = request(b.http, "GET", "/ignition/worker-0", &[]).await;
    assert_eq!(st, 404);
    let (st, _, _) = request(b.http, "GET", "/ignition/worker-0?token=forged.token", &[]).await;
    assert_eq!(st, 404);
    let v = wait_for(&b, "worker-0", "two denials", |v| {
        v["events"].as_array().is_some_and(|e| e.len() >= 2)
    })
    .await;
    assert_eq!(v["phase"], "ignition");
    let why = v["lastError"]["detail"].as_str().unwrap();
    assert!(why.starts_with("Ignition denied: "), "{why}");
    assert_eq!(v["phases"][0]["lastError"], why);
    assert!(!v.to_string().contains("forged.token"));

    // Both on the status page, escaped.
    let (_, _, page) = request(b.http, "GET", "/status", &[]).await;
    let page = String::from_utf8(page.to_vec()).unwrap();
    assert!(
        page.contains("data-node=\"mac 52:54:00:99:99:01\" data-phase=\"dhcp\""),
        "{page}"
    );
    assert!(page.contains("data-node=\"worker-0\" data-phase=\"ignition\""));
    assert!(page.contains("unknown MAC and no dynamic pool"));
    let (st, _, node_page) = request(
        b.http,
        "GET",
        "/status/node/mac%2052%3A54%3A00%3A99%3A99%3A01",
        &[],
    )
    .await;
    assert_eq!(st, 200);
    let node_page = String::from_utf8(node_page.to_vec()).unwrap();
    assert!(
        !node_page.contains("<b>evil</b>") && node_page.contains("&lt;b&gt;evil&lt;/b&gt;"),
        "{node_page}"
    );
    let (st, _, _) = request(b.http, "GET", "/status/node/no-such-node", &[]).await;
    assert_eq!(st, 404);
    b.stop().await;
}
