//! kill -9 of a real bootd process under DHCP load (relayed, on loopback)
//! loses no ACKed lease: every ACK the relay saw is in the lease file.

use dhcproto::v4::MessageType;
use std::time::Duration;
use testkit::dhcp::{dhcp_recv, loopback_site, request, write_site};
use testkit::ports;
use testkit::process::Process;
use tokio::net::UdpSocket;

/// A real bootd process under a stream of relayed DORAs, killed with
/// SIGKILL mid-stream: every lease whose ACK the client saw is in the lease
/// file after restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_no_acked_lease() {
    let dir = tempfile::tempdir().unwrap();
    let relay = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let dhcp_port = ports::free_port();
    let site = write_site(dir.path(), |t| {
        loopback_site(t)
            .replace("    serverAddress: 10.77.0.1\n", &format!("    serverAddress: 10.77.0.1\n    listen: 127.0.0.1:{dhcp_port}\n"))
            .replace("    interface: br0                # the lab bridge; broadcasts elsewhere are never seen\n", "")
    });
    // Started as root, bootd serves as nobody: it must reach its files.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let spawn = || {
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_bootd"))
            .args([
                "--site",
                site.to_str().unwrap(),
                "--dhcp-reply-ports",
                &format!("68,{}", relay.local_addr().unwrap().port()),
            ])
            .env("RUST_LOG", "warn")
            .stderr(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        Process::new(child)
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
            child.kill(); // SIGKILL
            child = spawn();
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        if relay
            .send(&request(mac, MessageType::Discover, i * 2, None))
            .await
            .is_err()
        {
            continue;
        }
        let Some(offer) = dhcp_recv(&relay).await else {
            continue;
        };
        let _ = relay
            .send(&request(
                mac,
                MessageType::Request,
                i * 2 + 1,
                Some(offer.yiaddr()),
            ))
            .await;
        if let Some(ack) = dhcp_recv(&relay).await {
            if ack.opts().msg_type() == Some(MessageType::Ack) {
                acked.push((site::Mac(mac).to_string(), ack.yiaddr()));
            }
        }
    }
    child.kill();
    assert!(acked.len() >= 120, "only {} ACKs", acked.len());
    let text = std::fs::read_to_string(dir.path().join("state/leases.jsonl")).unwrap();
    let mut stored = std::collections::HashMap::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        stored.insert(
            v["mac"].as_str().unwrap().to_string(),
            v["ip"].as_str().unwrap().to_string(),
        );
    }
    for (mac, ip) in &acked {
        assert_eq!(
            stored.get(mac).map(String::as_str),
            Some(ip.to_string().as_str()),
            "ACKed lease {mac} {ip} lost"
        );
    }
}
