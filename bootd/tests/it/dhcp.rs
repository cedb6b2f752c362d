//! bootd's DHCP server on loopback: a relay's view (giaddr 127.0.0.1),
//! durability before ACK, malformed input dropped and counted. (A kill -9
//! of a bootd process under load: appliance/tests/leases.rs.)

use crate::harness::{dhcp_recv, Bootd};
use dhcproto::v4::{DhcpOption, MessageType, OptionCode};
use std::net::Ipv4Addr;
use std::time::Duration;
use testkit::dhcp::{loopback_site, request};
use tokio::net::UdpSocket;

#[tokio::test]
async fn relayed_dora_is_durable_before_ack_and_bad_packets_are_counted() {
    let relay = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let b = Bootd::start_dhcp(loopback_site, relay.local_addr().unwrap().port()).await;
    let server = b.dhcp.unwrap();
    relay.connect(server).await.unwrap();
    let mac = [0x52, 0x54, 0, 0x77, 0, 0x21];
    relay
        .send(&request(mac, MessageType::Discover, 1, None))
        .await
        .unwrap();
    let offer = dhcp_recv(&relay).await.expect("an OFFER to the relay");
    assert_eq!(offer.opts().msg_type(), Some(MessageType::Offer));
    assert_eq!(offer.yiaddr(), Ipv4Addr::new(127, 0, 0, 21));
    assert_eq!(offer.giaddr(), Ipv4Addr::LOCALHOST);
    relay
        .send(&request(mac, MessageType::Request, 2, Some(offer.yiaddr())))
        .await
        .unwrap();
    let ack = dhcp_recv(&relay).await.expect("an ACK");
    assert_eq!(ack.opts().msg_type(), Some(MessageType::Ack));
    assert_eq!(
        ack.opts().get(OptionCode::Hostname),
        Some(&DhcpOption::Hostname("worker-1".into()))
    );
    // The ACK arrived, so the lease is already on disk.
    let leases = std::fs::read_to_string(b.state().join("leases.jsonl")).unwrap();
    assert!(
        leases.contains("\"52:54:00:77:00:21\"") && leases.contains("127.0.0.21"),
        "{leases}"
    );

    // Malformed input: dropped (no reply) and counted.
    let good = request(mac, MessageType::Discover, 3, None);
    let mut bad_cookie = good.clone();
    bad_cookie[236..240].copy_from_slice(&[1, 2, 3, 4]);
    let mut overflow = good[..240].to_vec();
    overflow.extend_from_slice(&[53, 1, 1, 12, 200, b'x']); // option length past the end
                                                            // Overload (52) into `file`, whose own content overloads again: honoured
                                                            // from the options field only, so it is answered once and cannot loop.
    let mut overload_loop = good[..240].to_vec();
    overload_loop[108..112].copy_from_slice(&[52, 1, 3, 255]);
    overload_loop.extend_from_slice(&[53, 1, 1, 52, 1, 3, 255]);
    // Not Ethernet: htype 6 (IEEE 802), and hlen 16 with htype 1.
    let mut htype = good.clone();
    htype[1] = 6;
    let mut hlen = good.clone();
    hlen[2] = 16;
    // Oversized: no END within the 4 096 bytes read (6 000 of PAD after
    // the options).
    let mut oversized = good[..good.len() - 1].to_vec();
    oversized.resize(6000, 0);
    let cases: Vec<Vec<u8>> = vec![
        vec![],
        vec![1],
        good[..100].to_vec(),
        good[..239].to_vec(),
        bad_cookie,
        overflow,
        vec![0xff; 600],
        htype,
        hlen,
        oversized,
    ];
    for c in &cases {
        relay.send(c).await.unwrap();
    }
    assert!(
        dhcp_recv(&relay).await.is_none(),
        "no reply to malformed input"
    );
    relay.send(&overload_loop).await.unwrap();
    assert_eq!(
        dhcp_recv(&relay)
            .await
            .expect("the overload case is answered once")
            .xid(),
        3
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (_, _, m) = b.get("/metrics").await;
    let m = String::from_utf8_lossy(&m).to_string();
    let malformed: u64 = m
        .lines()
        .find(|l| l.starts_with("bootd_dhcp_packets_total{kind=\"malformed\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert_eq!(
        malformed as usize,
        cases.len(),
        "each malformed packet counted once:\n{m}"
    );
    // And the server still answers.
    relay
        .send(&request(mac, MessageType::Discover, 4, None))
        .await
        .unwrap();
    assert_eq!(dhcp_recv(&relay).await.expect("still serving").xid(), 4);
    b.stop().await;
}

/// The value of the `/metrics` line starting with `name` (0 when absent).
fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

/// A request whose relay address (giaddr) is in no site network, through
/// the real listener: no reply (neither to the forged relay nor anywhere
/// else), counted as `kind="ignored"` with the reason logged, and the next
/// client is served.
#[tokio::test]
async fn a_forged_giaddr_is_ignored_counted_and_the_next_client_served() {
    let relay = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let port = relay.local_addr().unwrap().port();
    // The loopback network narrowed to 127.0.0.0/16: 127.1.0.1 is in no
    // site network, and a reply to it would still stay on loopback.
    let b = Bootd::start_dhcp(
        |t| loopback_site(t).replace("subnet: 127.0.0.0/8", "subnet: 127.0.0.0/16"),
        port,
    )
    .await;
    let server = b.dhcp.unwrap();
    // Where replies relayed through 127.1.0.1 would go.
    let forged = UdpSocket::bind(("127.1.0.1", port)).await.unwrap();
    // master-0's MAC: a node of the lab network (10.77.0.0/24), which
    // would be answered there if the relay address were not checked.
    let master0 = [0x52, 0x54, 0, 0x77, 0, 0x11];
    for (t, xid) in [(MessageType::Discover, 7), (MessageType::Request, 8)] {
        let ip = (t == MessageType::Request).then_some(Ipv4Addr::new(10, 77, 0, 11));
        let mut p = request(master0, t, xid, ip);
        p[24..28].copy_from_slice(&[127, 1, 0, 1]);
        forged.send_to(&p, server).await.unwrap();
    }
    assert!(
        dhcp_recv(&forged).await.is_none(),
        "a forged relay was answered"
    );
    assert!(dhcp_recv(&relay).await.is_none(), "answered elsewhere");
    let (_, _, m) = b.get("/metrics").await;
    let m = String::from_utf8_lossy(&m).to_string();
    assert_eq!(
        metric(&m, "bootd_dhcp_packets_total{kind=\"ignored\"}"),
        2,
        "{m}"
    );
    let logs = String::from_utf8_lossy(&crate::harness::logs().lock().unwrap()).to_string();
    assert!(
        logs.contains("relayed from giaddr 127.1.0.1, which is in no site network"),
        "the reason is not logged"
    );
    // The next client, through the real relay: a whole DORA.
    let mac = [0x52, 0x54, 0, 0x77, 0, 0x21];
    relay.connect(server).await.unwrap();
    relay
        .send(&request(mac, MessageType::Discover, 9, None))
        .await
        .unwrap();
    let offer = dhcp_recv(&relay).await.expect("an OFFER after the forgery");
    assert_eq!(
        (offer.xid(), offer.opts().msg_type()),
        (9, Some(MessageType::Offer))
    );
    relay
        .send(&request(
            mac,
            MessageType::Request,
            10,
            Some(offer.yiaddr()),
        ))
        .await
        .unwrap();
    let ack = dhcp_recv(&relay).await.expect("an ACK");
    assert_eq!(ack.opts().msg_type(), Some(MessageType::Ack));
    b.stop().await;
}
