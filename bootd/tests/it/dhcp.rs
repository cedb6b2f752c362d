//! bootd's DHCP server on loopback: a relay's view (giaddr 127.0.0.1),
//! durability before ACK, malformed input dropped and counted, and a
//! kill -9 of a real bootd process under load losing no ACKed lease.

use crate::harness::{dhcp_recv, Bootd};
use dhcproto::v4::{DhcpOption, HType, Message, MessageType, Opcode, OptionCode};
use dhcproto::{Encodable, Encoder};
use std::net::Ipv4Addr;
use std::time::Duration;
use tokio::net::UdpSocket;

/// worker-1 moves to 127.0.0.21 on a loopback network, so a "relay" on
/// 127.0.0.1 can reach it.
fn loopback_site(t: String) -> String {
    t.replace("    dnsServers: [10.77.0.1]\n", "    dnsServers: [10.77.0.1]\n  - name: lo\n    subnet: 127.0.0.0/8\n    gateway: 127.0.0.1\n    pool: { start: 127.0.1.0, end: 127.0.9.255 }\n")
        .replace("ip: 10.77.0.21", "ip: 127.0.0.21")
}

fn request(mac: [u8; 6], t: MessageType, xid: u32, ip: Option<Ipv4Addr>) -> Vec<u8> {
    let mut m = Message::default();
    m.set_opcode(Opcode::BootRequest).set_htype(HType::Eth).set_xid(xid).set_chaddr(&mac).set_giaddr(Ipv4Addr::LOCALHOST).set_hops(1);
    m.opts_mut().insert(DhcpOption::MessageType(t));
    if let Some(ip) = ip {
        m.opts_mut().insert(DhcpOption::RequestedIpAddress(ip));
        m.opts_mut().insert(DhcpOption::ServerIdentifier(Ipv4Addr::new(10, 77, 0, 1)));
    }
    let mut b = Vec::new();
    m.encode(&mut Encoder::new(&mut b)).unwrap();
    b
}

#[tokio::test]
async fn relayed_dora_is_durable_before_ack_and_bad_packets_are_counted() {
    let relay = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let b = Bootd::start_dhcp(loopback_site, relay.local_addr().unwrap().port()).await;
    let server = b.dhcp.unwrap();
    relay.connect(server).await.unwrap();
    let mac = [0x52, 0x54, 0, 0x77, 0, 0x21];
    relay.send(&request(mac, MessageType::Discover, 1, None)).await.unwrap();
    let offer = dhcp_recv(&relay).await.expect("an OFFER to the relay");
    assert_eq!(offer.opts().msg_type(), Some(MessageType::Offer));
    assert_eq!(offer.yiaddr(), Ipv4Addr::new(127, 0, 0, 21));
    assert_eq!(offer.giaddr(), Ipv4Addr::LOCALHOST);
    relay.send(&request(mac, MessageType::Request, 2, Some(offer.yiaddr()))).await.unwrap();
    let ack = dhcp_recv(&relay).await.expect("an ACK");
    assert_eq!(ack.opts().msg_type(), Some(MessageType::Ack));
    assert_eq!(ack.opts().get(OptionCode::Hostname), Some(&DhcpOption::Hostname("worker-1".into())));
    // The ACK arrived, so the lease is already on disk.
    let leases = std::fs::read_to_string(b.state().join("leases.jsonl")).unwrap();
    assert!(leases.contains("\"52:54:00:77:00:21\"") && leases.contains("127.0.0.21"), "{leases}");

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
    let cases: Vec<Vec<u8>> = vec![vec![], vec![1], good[..100].to_vec(), good[..239].to_vec(), bad_cookie, overflow, vec![0xff; 600]];
    for c in &cases {
        relay.send(c).await.unwrap();
    }
    assert!(dhcp_recv(&relay).await.is_none(), "no reply to malformed input");
    relay.send(&overload_loop).await.unwrap();
    assert_eq!(dhcp_recv(&relay).await.expect("the overload case is answered once").xid(), 3);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (_, _, m) = b.get("/metrics").await;
    let m = String::from_utf8_lossy(&m).to_string();
    let malformed: u64 = m
        .lines()
        .find(|l| l.starts_with("bootd_dhcp_packets_total{kind=\"malformed\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(malformed as usize >= cases.len(), "malformed packets counted: {malformed}\n{m}");
    // And the server still answers.
    relay.send(&request(mac, MessageType::Discover, 4, None)).await.unwrap();
    assert_eq!(dhcp_recv(&relay).await.expect("still serving").xid(), 4);
    b.stop().await;
}

/// A real bootd process under a stream of relayed DORAs, killed with
/// SIGKILL mid-stream: every lease whose ACK the client saw is in the lease
/// file after restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_no_acked_lease() {
    let dir = tempfile::tempdir().unwrap();
    let relay = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let dhcp_port = {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap().port()
    };
    let site = crate::harness::write_site(dir.path(), |t| {
        loopback_site(t)
            .replace("    serverAddress: 10.77.0.1\n", &format!("    serverAddress: 10.77.0.1\n    listen: 127.0.0.1:{dhcp_port}\n"))
            .replace("    interface: br0                # the lab bridge; broadcasts elsewhere are never seen\n", "")
    });
    let spawn = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_bootd"))
            .args(["--site", site.to_str().unwrap(), "--dhcp-reply-ports", &format!("68,{}", relay.local_addr().unwrap().port())])
            .env("RUST_LOG", "warn")
            .stderr(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut child = spawn();
    relay.connect(("127.0.0.1", dhcp_port)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut acked = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut i: u32 = 0;
    // DORA for pool clients until ~150 ACKs, killing the server after 100.
    while acked.len() < 150 && tokio::time::Instant::now() < deadline {
        i += 1;
        let mac = [0x02, 0, 0, (i >> 16) as u8, (i >> 8) as u8, i as u8];
        if acked.len() == 100 {
            child.kill().unwrap(); // SIGKILL
            child.wait().unwrap();
            child = spawn();
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        if relay.send(&request(mac, MessageType::Discover, i * 2, None)).await.is_err() {
            continue;
        }
        let Some(offer) = dhcp_recv(&relay).await else { continue };
        let _ = relay.send(&request(mac, MessageType::Request, i * 2 + 1, Some(offer.yiaddr()))).await;
        if let Some(ack) = dhcp_recv(&relay).await {
            if ack.opts().msg_type() == Some(MessageType::Ack) {
                acked.push((site::Mac(mac).to_string(), ack.yiaddr()));
            }
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(acked.len() >= 120, "only {} ACKs", acked.len());
    let text = std::fs::read_to_string(dir.path().join("state/leases.jsonl")).unwrap();
    let mut stored = std::collections::HashMap::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        stored.insert(v["mac"].as_str().unwrap().to_string(), v["ip"].as_str().unwrap().to_string());
    }
    for (mac, ip) in &acked {
        assert_eq!(stored.get(mac).map(String::as_str), Some(ip.to_string().as_str()), "ACKed lease {mac} {ip} lost");
    }
}
