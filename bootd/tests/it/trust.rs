//! Who gets a node's secrets: its boot script (which carries a token for
//! its Ignition), metadata and userdata go to the node's own address only;
//! its Ignition goes to that address, or once to a token; the status page
//! goes to `host.statusFrom`. The attacks are run from another loopback
//! address than the node's, exactly as a neighbour on the provisioning
//! network would send them.

use crate::harness::{request_from, Bootd};
use http::StatusCode;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

const NODE: &str = "127.0.0.11";
const MAC: &str = "52-54-00-77-00-11";
const NOT_FOUND: &[u8] = b"not found\n";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// master-0 on 127.0.0.11 (a loopback network in the site), so a test can
/// speak from its address and from its neighbours'.
pub(crate) fn on_loopback(t: String) -> String {
    t.replace(
        "    dnsServers: [10.77.0.1]\n",
        "    dnsServers: [10.77.0.1]\n  - name: lo\n    subnet: 127.0.0.0/8\n    gateway: 127.0.0.1\n",
    )
    .replace("ip: 10.77.0.11", &format!("ip: {NODE}"))
}

pub(crate) async fn get(b: &Bootd, from: &str, path: &str) -> (StatusCode, Vec<u8>) {
    let (s, _, body) = request_from(Some(ip(from)), b.http, "GET", path, &[]).await;
    (s, body.to_vec())
}

/// The token in a script or pointer config.
pub(crate) fn token_in(body: &[u8]) -> String {
    let t = String::from_utf8_lossy(body);
    let i = t.find("token=").expect("a token in the script") + "token=".len();
    t[i..]
        .split(|c: char| c == '"' || c == '&' || c.is_whitespace())
        .next()
        .unwrap()
        .to_string()
}

async fn metric(b: &Bootd, line: &str) -> u64 {
    let (_, body) = get(b, "127.0.0.1", "/metrics").await;
    String::from_utf8_lossy(&body)
        .lines()
        .find_map(|l| l.strip_prefix(line).map(|v| v.trim().parse().unwrap()))
        .unwrap_or(0)
}

/// Waits for an event `what` on the node's timeline; returns its detail.
async fn event(b: &Bootd, node: &str, what: &str) -> String {
    for _ in 0..100 {
        let v = crate::timeline::timeline(b, node).await;
        if let Some(e) = v["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["what"] == what)
        {
            return e["detail"].as_str().unwrap().to_string();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{node}: no {what} event");
}

const ROUTES: [&str; 6] = [
    "/ipxe/node?mac=52-54-00-77-00-11",
    "/ipxe/master-0.ipxe",
    "/grub/grub.cfg-01-52-54-00-77-00-11",
    "/pxelinux.cfg/01-52-54-00-77-00-11",
    "/metadata?node=master-0",
    "/userdata?node=master-0",
];

#[tokio::test]
async fn a_nodes_script_and_ignition_go_to_that_node_only() {
    let b = Bootd::start_strict(on_loopback).await;
    let attacker = "127.0.0.99";
    // Every route that hands out a token, asked by MAC or by name from a
    // neighbour: the same 404 as an unknown node, counted.
    let (_, unknown) = get(&b, attacker, "/ignition/nobody").await;
    assert_eq!(unknown, NOT_FOUND);
    for path in ROUTES {
        assert_eq!(
            get(&b, attacker, path).await,
            (StatusCode::NOT_FOUND, NOT_FOUND.to_vec()),
            "{path}"
        );
    }
    assert_eq!(
        get(&b, attacker, "/ignition/master-0").await,
        (StatusCode::NOT_FOUND, NOT_FOUND.to_vec())
    );
    assert_eq!(
        metric(&b, "bootd_ignition_denials_total{reason=\"not_from_node\"}").await,
        ROUTES.len() as u64 + 1
    );
    // From the node itself, each is served; the scripts carry a token, a
    // new one every time (a retry gets an unspent one).
    for path in ROUTES {
        let (s, body) = get(&b, NODE, path).await;
        assert_eq!(
            s,
            StatusCode::OK,
            "{path}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    let (_, script) = get(&b, NODE, &format!("/ipxe/node?mac={MAC}")).await;
    let (_, again) = get(&b, NODE, &format!("/ipxe/node?mac={MAC}")).await;
    let (t1, t2) = (token_in(&script), token_in(&again));
    assert_ne!(t1, t2, "each script gets its own token");

    // The node fetches its Ignition with t1: served, and t1 is spent.
    let ign = format!("/ignition/master-0?token={t1}");
    assert_eq!(get(&b, NODE, &ign).await.0, StatusCode::OK);
    // Someone who saw t1 on the wire replays it: refused, and the node's
    // timeline says so with the replayer's address.
    assert_eq!(
        get(&b, attacker, &ign).await,
        (StatusCode::NOT_FOUND, NOT_FOUND.to_vec())
    );
    let detail = event(&b, "master-0", "token_reused").await;
    assert!(detail.contains(attacker), "{detail}");
    assert_eq!(
        metric(&b, "bootd_ignition_denials_total{reason=\"token_reused\"}").await,
        1
    );
    // The node's own retry is granted by its address.
    assert_eq!(get(&b, NODE, &ign).await.0, StatusCode::OK);

    // t2 used first from another address (an installer environment on a
    // different address, or a thief): served once, flagged on the node.
    let ign2 = format!("/ignition/master-0?token={t2}");
    assert_eq!(get(&b, "127.0.0.98", &ign2).await.0, StatusCode::OK);
    let detail = event(&b, "master-0", "other_address").await;
    assert!(detail.contains("127.0.0.98"), "{detail}");
    assert_eq!(metric(&b, "bootd_ignition_other_address_total").await, 1);
    assert_eq!(get(&b, attacker, &ign2).await.0, StatusCode::NOT_FOUND);
    // Spent tokens survive a restart of bootd (same state directory).
    let cfg = bootd::Config {
        state_dir: Some(b.state()),
        ..bootd::Config::new((*b.app.live.load().site).clone())
    };
    let app2 = bootd::prepare(&cfg, true).unwrap();
    let t1v = app2
        .key
        .verify("master-0", &t1, std::time::SystemTime::now())
        .unwrap();
    assert!(matches!(
        app2.spent.spend(&t1v),
        Err(bootd::spent::SpendError::Reused)
    ));
    b.stop().await;
}

#[tokio::test]
async fn grub_configs_over_tftp_go_to_the_node_only() {
    let relay = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let b = Bootd::start_config(
        |t| on_loopback(crate::harness::strict(t)),
        Some(relay.local_addr().unwrap().port()),
        |_| {},
    )
    .await;
    let server = b.tftp.unwrap();
    let file = format!("grub/grub.cfg-01-{MAC}");
    // From a neighbour: a TFTP error (file not found), no config, no token.
    let sock = tokio::net::UdpSocket::bind(SocketAddr::new(ip("127.0.0.99"), 0))
        .await
        .unwrap();
    let mut rrq = vec![0, 1];
    rrq.extend_from_slice(file.as_bytes());
    rrq.extend_from_slice(b"\0octet\0");
    sock.send_to(&rrq, server).await.unwrap();
    let mut buf = [0u8; 1024];
    let (n, _) = tokio::time::timeout(Duration::from_secs(3), sock.recv_from(&mut buf))
        .await
        .expect("a TFTP answer")
        .unwrap();
    assert_eq!(
        &buf[..4],
        &[0, 5, 0, 1],
        "ERROR file not found: {:?}",
        &buf[..n]
    );
    // From the node: its config, with its token.
    let cfg = crate::timeline::tftp_get(ip(NODE), server, &file).await;
    assert!(!token_in(&cfg).is_empty());
    assert_eq!(
        metric(&b, "bootd_ignition_denials_total{reason=\"not_from_node\"}").await,
        1
    );
    // Once it installed, GRUB over TFTP boots its disk, as over HTTP: no
    // installer, no token (no install loop for firmware reading GRUB over TFTP).
    let node = b
        .app
        .live
        .load()
        .site
        .node_by_ip(ip(NODE))
        .unwrap()
        .name
        .clone();
    b.app.installed.mark(&node, 1).unwrap();
    let cfg = String::from_utf8(crate::timeline::tftp_get(ip(NODE), server, &file).await).unwrap();
    assert!(
        cfg.contains("installed already") && cfg.contains("exit"),
        "{cfg}"
    );
    assert!(!cfg.contains("token="), "{cfg}");
    b.app.installed.clear(&node).unwrap();
    let cfg = crate::timeline::tftp_get(ip(NODE), server, &file).await;
    assert!(!token_in(&cfg).is_empty(), "reinstall: the installer again");
    b.stop().await;
}

#[tokio::test]
async fn provider_tokens_work_where_the_provider_says_the_node_is() {
    let b = Bootd::start_strict(on_loopback).await;
    let provider_token = || {
        b.app.key.issue(
            "master-0",
            bootd::token::Scope::Provider,
            std::time::SystemTime::now(),
            Duration::from_secs(600),
        )
    };
    // Before the provider said where the machine is: its iPXE script URL
    // and userdata pointer (what a provider is given) work from anywhere.
    let p = provider_token();
    assert_eq!(
        get(&b, "127.0.0.99", &format!("/ipxe/master-0.ipxe?token={p}"))
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        get(&b, "127.0.0.99", &format!("/ignition/master-0?token={p}"))
            .await
            .0,
        StatusCode::OK
    );
    // The provider reports the node's addresses (the overlay's
    // `addresses`): from now on only from there.
    let site_path = b.dir.path().join("site.yaml");
    let text = std::fs::read_to_string(&site_path).unwrap().replace(
        &format!("ip: {NODE}, kernelArgs"),
        &format!("ip: {NODE}, addresses: [127.0.0.50], kernelArgs"),
    );
    std::fs::write(&site_path, text).unwrap();
    b.reload.notify_one();
    let p = provider_token();
    let mut refused = false;
    for _ in 0..50 {
        if get(&b, "127.0.0.99", &format!("/ipxe/master-0.ipxe?token={p}"))
            .await
            .0
            == StatusCode::NOT_FOUND
        {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(refused, "the reported addresses were not applied");
    assert_eq!(
        get(&b, "127.0.0.99", &format!("/ignition/master-0?token={p}"))
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    // A script token (from a script the node had at its own address) still
    // works elsewhere, once.
    let s = b.token("master-0");
    assert_eq!(
        get(&b, "127.0.0.99", &format!("/ignition/master-0?token={s}"))
            .await
            .0,
        StatusCode::OK
    );
    // From the reported address: served.
    assert_eq!(
        get(&b, "127.0.0.50", &format!("/ignition/master-0?token={p}"))
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        get(&b, "127.0.0.50", "/ipxe/master-0.ipxe").await.0,
        StatusCode::OK
    );
    b.stop().await;
}

#[tokio::test]
async fn the_status_page_goes_to_status_from_only() {
    let b = Bootd::start_strict(|t| {
        on_loopback(t).replace("host:\n", "host:\n  statusFrom: [127.0.0.1]\n")
    })
    .await;
    for path in [
        "/status",
        "/status/timeline.json",
        "/status/node/master-0",
        "/status/node/master-0/timeline.json",
    ] {
        assert_eq!(get(&b, "127.0.0.1", path).await.0, StatusCode::OK, "{path}");
        let (s, body) = get(&b, "127.0.0.7", path).await;
        assert_eq!(
            (s, body.as_slice()),
            (StatusCode::NOT_FOUND, NOT_FOUND),
            "{path}"
        );
    }
    assert_eq!(metric(&b, "bootd_status_refused_total").await, 4);
    b.stop().await;
}

/// A node known by its switch port (`relay`, no MAC in the site): its boot
/// script and configs go, by whatever MAC the machine asks with, to the
/// address DHCP gave that port, and to no one else; a node the site knows
/// by MAC is not found by address.
#[tokio::test]
async fn a_rack_nodes_script_goes_to_its_ports_address_only() {
    let b = Bootd::start_strict(|t| {
        on_loopback(t)
            .replace("    leaseTime: 1h\n", "    leaseTime: 1h\n    trustedRelays: [10.77.0.254]\n")
            .replacen(
                "\nnodes:\n",
                "\nnodes:\n  - { name: rack-7, role: worker, live: true, ip: 127.0.0.47, relay: { circuitId: eth1/7 } }\n",
                1,
            )
    })
    .await;
    let any_mac = "52-54-00-99-00-07";
    let routes = [
        format!("/ipxe/node?mac={any_mac}"),
        format!("/grub/grub.cfg-01-{any_mac}"),
        format!("/pxelinux.cfg/01-{any_mac}"),
    ];
    for path in &routes {
        let (s, body) = get(&b, "127.0.0.47", path).await;
        assert_eq!(s, StatusCode::OK, "{path}");
        assert!(!token_in(&body).is_empty(), "{path}");
        assert!(String::from_utf8_lossy(&body).contains("rack-7"), "{path}");
        // From a neighbour: as for any unknown MAC.
        let (_, body) = get(&b, "127.0.0.99", path).await;
        assert!(!String::from_utf8_lossy(&body).contains("token="), "{path}");
    }
    // master-0 (known by MAC) asking with another MAC from its address: not it.
    let (_, body) = get(&b, NODE, &format!("/ipxe/node?mac={any_mac}")).await;
    assert!(!String::from_utf8_lossy(&body).contains("token="));
}
