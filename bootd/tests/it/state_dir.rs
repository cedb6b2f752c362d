//! bootd's state directory when it goes wrong: a full disk under the lease
//! file (a real tmpfs, filled), a lease file cut short, corrupt small state
//! files at start.

use crate::harness::{dhcp_recv, logs, Bootd};
use dhcproto::v4::MessageType;
use std::net::Ipv4Addr;
use testkit::dhcp::{loopback_site, request, write_site};
use tokio::net::UdpSocket;

fn log_text() -> String {
    String::from_utf8_lossy(&logs().lock().unwrap()).into_owned()
}

/// The value of the `/metrics` line starting with `name` (0 when absent).
async fn metric(b: &Bootd, name: &str) -> u64 {
    let (_, _, m) = b.get("/metrics").await;
    String::from_utf8_lossy(&m)
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

/// A whole DORA through the relay; the ACK, if one came.
async fn dora(relay: &UdpSocket, mac: [u8; 6], xid: u32) -> Option<dhcproto::v4::Message> {
    relay
        .send(&request(mac, MessageType::Discover, xid, None))
        .await
        .unwrap();
    let offer = dhcp_recv(relay).await.expect("an OFFER");
    assert_eq!(offer.opts().msg_type(), Some(MessageType::Offer));
    relay
        .send(&request(
            mac,
            MessageType::Request,
            xid + 1,
            Some(offer.yiaddr()),
        ))
        .await
        .unwrap();
    dhcp_recv(relay).await
}

/// The state directory on a real filesystem that fills up: the ACK whose
/// lease cannot be written is withheld (the client gets nothing and
/// retries), counted as `store_error` (not as an ACK), logged naming the
/// file, and nothing of the failed record stays in the file; once there is
/// room again, the client's retry and the next DORA are ACKed and durable.
#[tokio::test]
async fn a_full_disk_withholds_the_ack_counts_it_and_recovers() {
    let disk = tempfile::tempdir().unwrap();
    let state = disk.path().join("state");
    let fs = testkit::tmpfs::Tmpfs::mount(&state, "1m");
    let relay = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let port = relay.local_addr().unwrap().port();
    let st = state.clone();
    let b = Bootd::start_config(loopback_site, Some(port), move |c| {
        c.state_dir = Some(st);
    })
    .await;
    relay.connect(b.dhcp.unwrap()).await.unwrap();
    let leases = state.join("leases.jsonl");
    let filler = fs.fill();

    let worker1 = [0x52, 0x54, 0, 0x77, 0, 0x21];
    assert!(
        dora(&relay, worker1, 100).await.is_none(),
        "ACKed with the lease not on disk"
    );
    assert_eq!(
        metric(&b, "bootd_dhcp_packets_total{kind=\"store_error\"}").await,
        1
    );
    assert_eq!(
        metric(&b, "bootd_dhcp_packets_total{kind=\"ack\"}").await,
        0
    );
    assert_eq!(
        std::fs::metadata(&leases).unwrap().len(),
        0,
        "a failed record was left in the file"
    );
    let logs = log_text();
    let named = format!("{}: No space left on device", leases.display());
    assert!(
        logs.lines()
            .any(|l| l.contains("lease write failed") && l.contains(&leases.display().to_string())),
        "no error naming the lease file"
    );
    assert!(
        logs.lines()
            .any(|l| l.contains("ACK withheld") && l.contains(&named)),
        "no warning naming the file and the reason"
    );

    // Room again: the client's retry of its REQUEST, then a new client.
    std::fs::remove_file(&filler).unwrap();
    relay
        .send(&request(
            worker1,
            MessageType::Request,
            102,
            Some(Ipv4Addr::new(127, 0, 0, 21)),
        ))
        .await
        .unwrap();
    let ack = dhcp_recv(&relay).await.expect("the retry ACKed");
    assert_eq!(
        (ack.xid(), ack.opts().msg_type()),
        (102, Some(MessageType::Ack))
    );
    let other = [0x52, 0x54, 0, 0x99, 0, 0x01];
    let ack = dora(&relay, other, 200).await.expect("the next DORA ACKed");
    assert_eq!(ack.opts().msg_type(), Some(MessageType::Ack));
    let text = std::fs::read_to_string(&leases).unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(
        text.contains("52:54:00:77:00:21") && text.contains("52:54:00:99:00:01"),
        "{text}"
    );
    assert_eq!(
        metric(&b, "bootd_dhcp_packets_total{kind=\"ack\"}").await,
        2
    );
    assert_eq!(
        metric(&b, "bootd_dhcp_packets_total{kind=\"store_error\"}").await,
        1
    );
    b.stop().await;
    drop(fs);
}

/// A lease file whose last line was cut short (a crash in the middle of a
/// write that was never acknowledged): bootd starts, warns naming the file,
/// says how many leases it read, and keeps the whole records (the client
/// is offered its address again). A file cut at a line boundary is a
/// valid earlier state and reads without a warning: only the count tells.
#[tokio::test]
async fn a_torn_lease_file_is_warned_about_and_its_leases_kept() {
    let pre = tempfile::tempdir().unwrap();
    let state = pre.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let far = runtime_now() + 3600;
    let kept =
        format!("{{\"mac\":\"52:54:00:99:00:05\",\"ip\":\"127.0.1.5\",\"expires\":{far}}}\n");
    let torn = "{\"mac\":\"52:54:00:99:00:06\",\"ip\":\"127.0.1.6\",\"exp";
    std::fs::write(state.join("leases.jsonl"), format!("{kept}{torn}")).unwrap();
    let relay = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let port = relay.local_addr().unwrap().port();
    let st = state.clone();
    let b = Bootd::start_config(loopback_site, Some(port), move |c| {
        c.state_dir = Some(st);
    })
    .await;
    relay.connect(b.dhcp.unwrap()).await.unwrap();
    // The server reads the file before it answers: one DISCOVER answered
    // means the start-up lines are written.
    relay
        .send(&request(
            [0x52, 0x54, 0, 0x99, 0, 0x05],
            MessageType::Discover,
            1,
            None,
        ))
        .await
        .unwrap();
    let offer = dhcp_recv(&relay).await.expect("an OFFER");
    assert_eq!(
        offer.yiaddr(),
        Ipv4Addr::new(127, 0, 1, 5),
        "the lease was lost"
    );
    let file = state.join("leases.jsonl").display().to_string();
    let logs = log_text();
    assert!(
        logs.lines()
            .any(|l| l.contains("WARN") && l.contains("torn line") && l.contains(&file)),
        "no warning naming the file"
    );
    assert!(
        logs.lines()
            .any(|l| l.contains("lease file read") && l.contains(&file) && l.contains("leases=1")),
        "no start line with the file and the count"
    );
    // Compacted at start: the torn line is gone, the record kept.
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.contains("\"52:54:00:99:00:05\"") && !text.contains("52:54:00:99:00:06"),
        "{text}"
    );
    b.stop().await;
}

fn runtime_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A corrupt `revoked.json` or `installed.json` stops bootd at start with
/// the state directory, the file, why, and what to do; the file is left as
/// it was.
#[test]
fn corrupt_revoked_or_installed_files_stop_the_start_saying_what_to_do() {
    for (file, advice) in [
        (
            "revoked.json",
            "Restore it from a backup, or write the list again",
        ),
        (
            "installed.json",
            "Restore it from a backup; moving it aside makes every installed node",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        write_site(dir.path(), |t| t);
        let state = dir.path().join("state");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::write(state.join(file), b"[\"bootstrap\"").unwrap();
        let site = site::load(&dir.path().join("site.yaml")).unwrap();
        let config = bootd::Config::new(site);
        let e = bootd::prepare(&config, false).unwrap_err().to_string();
        let head = format!("state directory {}: {file}: ", state.display());
        assert!(e.starts_with(&head), "{e}");
        assert!(
            e.contains("the file is corrupt") && e.contains(advice),
            "{e}"
        );
        assert_eq!(std::fs::read(state.join(file)).unwrap(), b"[\"bootstrap\"");
    }
}
