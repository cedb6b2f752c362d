//! A node's identity on the network is what the operator or its provider
//! stated: its reserved addresses and the addresses its provider reported.
//! A lease its MAC holds in a family it has no reservation in is not the
//! node: anyone can get one by asking DHCP with the node's MAC (seen in its
//! broadcasts). The attacks run over bootd's real DHCP listener and HTTP
//! server, from loopback addresses other than the node's.

use crate::harness::{dhcp_recv, request_from, strict, Bootd};
use dhcproto::v4::MessageType;
use http::StatusCode;
use std::net::IpAddr;
use testkit::dhcp::{loopback_site, request};
use tokio::net::UdpSocket;

/// worker-0 made IPv6-only (its one reservation is fd00:77::20) on a site
/// whose loopback network hands out an IPv4 pool.
fn v6_only_worker(t: String) -> String {
    loopback_site(strict(t))
        .replace(
            "    dnsServers: [10.77.0.1]\n",
            "    dnsServers: [10.77.0.1]\n  - name: v6\n    subnet: fd00:77::/64\n    gateway: fd00:77::1\n",
        )
        .replace("ip: 10.77.0.20,", "ip: \"fd00:77::20\",")
}

/// An IPv6-only node's MAC, asked for over DHCPv4 by a neighbour through a
/// relay, gets a pool address; from it, the node's boot script (and the
/// Ignition token in it) is not served, and no event says the node booted.
#[tokio::test]
async fn a_pool_lease_in_the_nodes_other_family_is_not_the_node() {
    let relay = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let b = Bootd::start_dhcp(v6_only_worker, relay.local_addr().unwrap().port()).await;
    let snap = b.app.live.load();
    let node = snap.site.node("worker-0").expect("worker-0 in the site");
    assert_eq!(node.ip4, None, "IPv6-only");
    drop(snap);
    relay.connect(b.dhcp.unwrap()).await.unwrap();
    // The spoofer: worker-0's MAC, seen in its broadcasts.
    let mac = [0x52, 0x54, 0, 0x77, 0, 0x20];
    relay
        .send(&request(mac, MessageType::Discover, 1, None))
        .await
        .unwrap();
    let offer = dhcp_recv(&relay).await.expect("an OFFER");
    let pool = offer.yiaddr();
    assert!(pool.octets()[..3] != [127, 0, 0], "a pool address: {pool}");
    relay
        .send(&request(mac, MessageType::Request, 2, Some(pool)))
        .await
        .unwrap();
    let ack = dhcp_recv(&relay).await.expect("an ACK");
    assert_eq!(ack.opts().msg_type(), Some(MessageType::Ack));
    // From that address, as worker-0.
    for path in [
        "/ipxe/node?mac=52-54-00-77-00-20",
        "/ipxe/worker-0.ipxe",
        "/grub/grub.cfg-01-52-54-00-77-00-20",
        "/metadata?node=worker-0",
    ] {
        let (s, _, body) = request_from(Some(IpAddr::V4(pool)), b.http, "GET", path, &[]).await;
        let body = String::from_utf8_lossy(&body);
        assert!(
            !body.contains("token="),
            "{path} from the pool lease {pool}: {s} {body}"
        );
        assert!(
            s == StatusCode::OK || s == StatusCode::NOT_FOUND,
            "{path}: {s}"
        );
    }
    b.stop().await;
}

/// The other family: an IPv4-only node's MAC as a DUID-LL in a spoofed
/// Solicit with Rapid Commit gets a pool binding from the real DHCPv6
/// core; that address is not one of the node's.
#[test]
fn a_dhcpv6_binding_for_the_nodes_mac_is_not_the_node() {
    use dhcp::v6::{core, leases::Table, wire};
    let dir = tempfile::tempdir().unwrap();
    let lab =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab-dual/site.yaml");
    let text = std::fs::read_to_string(&lab)
        .unwrap()
        .replace("ip: [10.77.0.20, \"fd00:77::20\"]", "ip: 10.77.0.20");
    // The lab's Ignition files, where the example's relative path finds them.
    let ign = lab.parent().unwrap().join("../lab/ignition");
    let text = text.replace("dir: ../lab/ignition", &format!("dir: {}", ign.display()));
    let site_path = dir.path().join("site.yaml");
    std::fs::write(&site_path, text).unwrap();
    let loaded = site::load(&site_path);
    let site = loaded.unwrap();
    let node = site.node("worker-0").unwrap();
    assert_eq!(node.ip6, None, "IPv4-only");
    // DUID-LL (type 3, Ethernet) of worker-0's MAC.
    let mut duid = vec![0, 3, 0, 1];
    duid.extend_from_slice(&[0x52, 0x54, 0, 0x77, 0, 0x20]);
    let mut m = wire::Msg::new(wire::SOLICIT, [1, 2, 3]);
    m.push(wire::OPT_CLIENT_ID, duid);
    m.push(wire::OPT_RAPID_COMMIT, vec![]);
    m.push(wire::OPT_IA_NA, wire::ia_na(7, 0, 0, &[]));
    let m = wire::Msg::parse(&m.encode()).unwrap();
    let mut table = Table::default();
    let server_id = [0, 4, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];
    let req = core::Request {
        msg: &m,
        hops: &[],
        src: "fe80::5054:ff:fe77:20".parse().unwrap(),
    };
    let out = core::answer(&site, &mut table, &server_id, &req, 1_000);
    let bound = out.commit.first().map(|l| l.ip).expect("a pool binding");
    for l in out.commit {
        table.apply(l);
    }
    assert_eq!(
        table.held_by_mac("52:54:00:77:00:20").map(|l| l.ip),
        Some(bound),
        "the binding is the MAC's"
    );
    let addrs = bootd::http::node_addrs(node);
    assert!(
        !addrs.contains(&IpAddr::V6(bound)),
        "{bound} became worker-0's: {addrs:?}"
    );
    assert_eq!(addrs, vec![IpAddr::V4("10.77.0.20".parse().unwrap())]);
}

/// A provider token (what a provider's iPXE URL and userdata carry) buys
/// a script and a pointer whose tokens are provider tokens too: once the
/// provider reported where the machine is, they work only from there. (A
/// script token minted from it would work from anywhere, for the token's
/// lifetime.)
#[tokio::test]
async fn a_provider_token_buys_provider_tokens_only() {
    use crate::trust::{get, on_loopback, token_in};
    let b = Bootd::start_strict(on_loopback).await;
    let p = b.app.key.issue(
        "master-0",
        bootd::token::Scope::Provider,
        std::time::SystemTime::now(),
        std::time::Duration::from_secs(600),
    );
    let scope = |t: &str| t.split('.').nth(1).unwrap_or_default().to_string();
    let (s, script) = get(&b, "127.0.0.99", &format!("/ipxe/master-0.ipxe?token={p}")).await;
    assert_eq!(s, StatusCode::OK);
    let from_script = token_in(&script);
    assert_eq!(scope(&from_script), "p", "the script's token");
    let (s, pointer) = get(
        &b,
        "127.0.0.99",
        &format!("/userdata?node=master-0&token={p}"),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let from_pointer = token_in(&pointer);
    assert_eq!(scope(&from_pointer), "p", "the pointer's token");
    // The provider reports the machine's address: the minted tokens go
    // where provider tokens go, and nowhere else.
    let site_path = b.dir.path().join("site.yaml");
    let text = std::fs::read_to_string(&site_path).unwrap().replace(
        "ip: 127.0.0.11, kernelArgs",
        "ip: 127.0.0.11, addresses: [127.0.0.50], kernelArgs",
    );
    std::fs::write(&site_path, text).unwrap();
    b.reload.notify_one();
    let mut applied = false;
    for _ in 0..50 {
        if b.app
            .live
            .load()
            .site
            .node("master-0")
            .unwrap()
            .addresses
            .is_some()
        {
            applied = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(applied, "the reported addresses were not applied");
    for t in [&from_script, &from_pointer] {
        let (s, _) = get(&b, "127.0.0.99", &format!("/ignition/master-0?token={t}")).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "a minted token from a neighbour");
    }
    let (s, _) = get(
        &b,
        "127.0.0.50",
        &format!("/ignition/master-0?token={from_script}"),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "from the reported address");
    b.stop().await;
}

/// A provider that reported no address (an empty list) said nothing of
/// where the machine is: its provider token still works from where the
/// machine really is.
#[tokio::test]
async fn an_empty_address_report_is_no_report() {
    use crate::trust::{get, on_loopback};
    let b = Bootd::start_strict(|t| {
        on_loopback(t).replace(
            "ip: 127.0.0.11, kernelArgs",
            "ip: 127.0.0.11, addresses: [], kernelArgs",
        )
    })
    .await;
    assert_eq!(
        b.app.live.load().site.node("master-0").unwrap().addresses,
        Some(vec![])
    );
    let p = b.app.key.issue(
        "master-0",
        bootd::token::Scope::Provider,
        std::time::SystemTime::now(),
        std::time::Duration::from_secs(600),
    );
    let (s, _) = get(&b, "127.0.0.98", &format!("/ignition/master-0?token={p}")).await;
    assert_eq!(s, StatusCode::OK);
    b.stop().await;
}
