//! kill -9 at random moments under mixed load, many times over: a real
//! bootd process serves relayed DHCP to a stream of new clients, takes node
//! creates through the API (each a SQLite write, a node-overlay write and a
//! provider create against the fake) and reloads its site (rewritten and
//! signalled), and is killed with SIGKILL at a random moment, then started
//! again, at least 50 times. Afterwards:
//! - every lease whose ACK a client saw is in the lease file, for that client;
//! - every node whose create was answered 201 exists and gets its machine;
//! - no node has two machines at the provider (the fake counts every create).
//!
//! The seed is printed; `CRASH_LOOP_SEED=<n>` replays a run's timing choices.

use super::{api_client, cond, equinix_node, free_port, process_site, Api, Fake, Proc};
use dhcproto::v4::MessageType;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::dhcp::{self, dhcp_recv, request};
use testkit::process::Process;
use tokio::net::UdpSocket;

const KILLS: u32 = 50;

#[derive(Default)]
struct Seen {
    /// (client MAC, address) of every ACK a client received.
    acked: Vec<(String, std::net::Ipv4Addr)>,
    /// Nodes whose create was answered 201.
    created: Vec<String>,
    /// Creates that got no answer (the process died under them).
    unanswered: u32,
    reloads: u32,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_kill_9_at_random_moments_under_dhcp_api_and_reloads_lose_nothing() {
    let seed: u64 = std::env::var("CRASH_LOOP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen());
    eprintln!("crash loop seed {seed} (CRASH_LOOP_SEED replays it)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);

    let f = Fake::start().await;
    // Each machine gets its own private address (not the one the API gave
    // the node), as providers do: no two nodes report the same one.
    f.st().private_prefix = Some("127.79.0.".into());
    let dir = tempfile::tempdir().unwrap();
    let api_port = free_port();
    let dhcp_port = free_port();
    let relay = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    relay.connect(("127.0.0.1", dhcp_port)).await.unwrap();
    let reply_port = relay.local_addr().unwrap().port();
    let site = process_site(dir.path(), &f, api_port, |t| {
        with_relayed_dhcp(&t, dhcp_port)
    });
    let site_text = std::fs::read_to_string(&site).unwrap();
    let ca_path = dir.path().join("state/ca.pem");

    let seen = Arc::new(Mutex::new(Seen::default()));
    let next_client = Arc::new(AtomicU32::new(0));
    let next_node = Arc::new(AtomicU32::new(0));
    let started = Instant::now();
    for round in 0..KILLS {
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "bounded: {round} rounds in 240 s"
        );
        let mut p = start(&site, round, reply_port);
        let api = api_client(&ca_path, api_port, &p).await;
        let running = Arc::new(AtomicBool::new(true));
        // The process to signal; cleared (under its lock) when it is killed.
        let target = Arc::new(Mutex::new(Some(p.child.id())));
        let load = vec![
            tokio::spawn(dhcp_load(
                Arc::clone(&relay),
                Arc::clone(&next_client),
                Arc::clone(&seen),
                Arc::clone(&running),
            )),
            tokio::spawn(api_load(
                api,
                Arc::clone(&next_node),
                Arc::clone(&seen),
                Arc::clone(&running),
            )),
            tokio::spawn(reload_load(
                site.clone(),
                site_text.clone(),
                Arc::clone(&target),
                Arc::clone(&seen),
                Arc::clone(&running),
            )),
        ];
        // A random moment: anywhere from just after start to well into the load.
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..900))).await;
        {
            let mut t = target.lock().unwrap();
            p.kill9();
            *t = None;
        }
        running.store(false, Ordering::SeqCst);
        for t in load {
            t.await.unwrap();
        }
    }

    // Started once more: it converges, and nothing acknowledged is missing.
    let p = start(&site, KILLS, reply_port);
    let api = api_client(&ca_path, api_port, &p).await;
    let (acked, created, unanswered, reloads) = {
        let s = seen.lock().unwrap();
        (s.acked.clone(), s.created.clone(), s.unanswered, s.reloads)
    };
    eprintln!(
        "{KILLS} kills in {:?}: {} ACKs, {} creates answered 201, {unanswered} unanswered, {reloads} reloads",
        started.elapsed(),
        acked.len(),
        created.len()
    );
    assert!(
        acked.len() >= 100,
        "too little DHCP load to mean anything: {}",
        acked.len()
    );
    assert!(created.len() >= 25, "too few creates: {}", created.len());
    assert!(reloads >= 25, "too few reloads: {reloads}");

    let text = std::fs::read_to_string(dir.path().join("state/leases.jsonl")).unwrap();
    let mut stored = HashMap::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if let (Some(mac), Some(ip)) = (v["mac"].as_str(), v["ip"].as_str()) {
            stored.insert(mac.to_string(), ip.to_string());
        }
    }
    let lost: Vec<_> = acked
        .iter()
        .filter(|(mac, ip)| stored.get(mac).map(String::as_str) != Some(ip.to_string().as_str()))
        .collect();
    assert!(lost.is_empty(), "ACKed leases lost: {lost:?}");
    let mut by_ip: HashMap<String, &String> = HashMap::new();
    for (mac, _) in &acked {
        let ip = &stored[mac];
        if let Some(other) = by_ip.insert(ip.clone(), mac) {
            panic!("{ip} ACKed to {other} and {mac}");
        }
    }

    api.wait_nodes(created.iter().map(String::as_str), 90, |n, st, v| {
        assert_ne!(st, 404, "{n} was acknowledged (201) and is gone");
        st == 200 && cond(v, "Provisioned")["status"] == "True"
    })
    .await;
    // Let the reconcilers settle, then count machines per node.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut per_node: BTreeMap<String, u32> = BTreeMap::new();
    for d in f.st().devices.values() {
        *per_node
            .entry(d["hostname"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
    }
    let twice: Vec<_> = per_node.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "nodes with more than one machine: {twice:?}"
    );
    for n in &created {
        assert_eq!(per_node.get(n), Some(&1), "{n}: one machine");
    }
    eprintln!(
        "{} machines for {} nodes ({} acknowledged), none twice",
        per_node.values().sum::<u32>(),
        per_node.len(),
        created.len()
    );
    drop(p);
}

/// DHCP on a loopback port for relayed clients (giaddr 127.0.0.1), with a
/// pool on 127.0.0.0/8.
fn with_relayed_dhcp(t: &str, port: u16) -> String {
    let t = t.replacen(
        "host:\n",
        &format!("host:\n  dhcp:\n    serverAddress: 10.77.0.1\n    listen: 127.0.0.1:{port}\n    leaseTime: 1h\n"),
        1,
    );
    dhcp::loopback_site(t)
}

fn start(site: &std::path::Path, round: u32, reply_port: u16) -> Proc {
    let dir = site.parent().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let log = dir.join(format!("bootd-{round}.log"));
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_bootd"))
        .args([
            "--site",
            site.to_str().unwrap(),
            "--dhcp-reply-ports",
            &format!("68,{reply_port}"),
            "run",
        ])
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    Proc {
        child: Process::new(child),
        log,
    }
}

/// New clients, one DORA after another, until `running` ends; every ACK is
/// recorded the moment it arrives.
async fn dhcp_load(
    relay: Arc<UdpSocket>,
    next: Arc<AtomicU32>,
    seen: Arc<Mutex<Seen>>,
    running: Arc<AtomicBool>,
) {
    // Replies to an earlier round's requests are still in the socket: drop them.
    let mut buf = [0u8; 1500];
    while relay.try_recv(&mut buf).is_ok() {}
    while running.load(Ordering::SeqCst) {
        let i = next.fetch_add(1, Ordering::SeqCst) + 1;
        let mac = [0x02, 0x0c, 0x1a, (i >> 16) as u8, (i >> 8) as u8, i as u8];
        let xid = 0x4c00_0000 | (i << 1);
        if relay
            .send(&request(mac, MessageType::Discover, xid, None))
            .await
            .is_err()
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        let Some(offer) = recv_xid(&relay, xid).await else {
            continue;
        };
        if relay
            .send(&request(
                mac,
                MessageType::Request,
                xid | 1,
                Some(offer.yiaddr()),
            ))
            .await
            .is_err()
        {
            continue;
        }
        if let Some(ack) = recv_xid(&relay, xid | 1).await {
            if ack.opts().msg_type() == Some(MessageType::Ack) {
                seen.lock()
                    .unwrap()
                    .acked
                    .push((site::Mac(mac).to_string(), ack.yiaddr()));
            }
        }
    }
}

/// The reply with this xid (others are a killed round's leftovers), or none
/// within the 2 s of [`dhcp_recv`].
async fn recv_xid(relay: &UdpSocket, xid: u32) -> Option<dhcproto::v4::Message> {
    loop {
        let m = dhcp_recv(relay).await?;
        if m.xid() == xid {
            return Some(m);
        }
    }
}

/// Node creates, one after another, until `running` ends.
async fn api_load(
    api: Api,
    next: Arc<AtomicU32>,
    seen: Arc<Mutex<Seen>>,
    running: Arc<AtomicBool>,
) {
    while running.load(Ordering::SeqCst) {
        let i = next.fetch_add(1, Ordering::SeqCst);
        if i >= 150 {
            break; // the 10.77.0.0/24 addresses left for new nodes
        }
        let name = format!("crash-{i}");
        let node = equinix_node(
            &name,
            &format!("10.77.0.{}", 100 + i),
            &format!("52:54:00:7c:00:{:02x}", i),
        );
        let (st, v) = api.create(node).await;
        {
            let mut s = seen.lock().unwrap();
            match st {
                201 => s.created.push(name),
                0 => s.unanswered += 1,
                // The process died after the create reached it; the reply was cut.
                other => panic!("create {name}: {other} {v:#}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The site rewritten (a DNS record changes) and SIGHUP, every 100 ms.
async fn reload_load(
    site: std::path::PathBuf,
    text: String,
    target: Arc<Mutex<Option<u32>>>,
    seen: Arc<Mutex<Seen>>,
    running: Arc<AtomicBool>,
) {
    let mut n = 0u32;
    while running.load(Ordering::SeqCst) {
        n += 1;
        let edited = text.replace(
            "{ name: registry, type: A, value: 10.77.0.1 }",
            &format!(
                "{{ name: registry, type: A, value: 10.77.0.{} }}",
                1 + n % 2
            ),
        );
        let tmp = site.with_extension("yaml.new");
        std::fs::write(&tmp, edited).unwrap();
        std::fs::rename(&tmp, &site).unwrap();
        {
            let t = target.lock().unwrap();
            let Some(pid) = *t else { break };
            if nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGHUP,
            )
            .is_ok()
            {
                seen.lock().unwrap().reloads += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
