//! DHCP on two appliances (real bootd processes) sharing one etcd
//! (`host.store.etcd`, a member started by the test): one elected
//! appliance answers, the other counts what it leaves unanswered; killed
//! with SIGKILL, the answering one is replaced by the other, which gives a
//! known client the address it had (leases are committed to etcd before
//! their ACK) and a new client another one.

use dhcproto::v4::{Message, MessageType};
use dhcproto::{Decodable, Decoder};
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use testkit::dhcp::{loopback_site, request, write_site};
use testkit::ports;
use testkit::process::Process;
use tokio::net::UdpSocket;

struct Appliance {
    child: Process,
    dhcp: u16,
    http: u16,
    dir: tempfile::TempDir,
}

impl Appliance {
    fn start(etcd: &str, relay_port: u16) -> Appliance {
        Appliance::start_with(etcd, relay_port, "hotStandby")
    }

    /// `ha`: host.dhcp.ha.
    fn start_with(etcd: &str, relay_port: u16, ha: &str) -> Appliance {
        Appliance::start_named(etcd, relay_port, ha, None)
    }

    /// `name`: `--name` (default: the host name).
    fn start_named(etcd: &str, relay_port: u16, ha: &str, name: Option<&str>) -> Appliance {
        let dir = tempfile::tempdir().unwrap();
        let (dhcp, http, https) = (ports::free_port(), ports::free_port(), ports::free_port());
        let site = write_site(dir.path(), |t| {
            loopback_site(t)
                .replace("    serverAddress: 10.77.0.1\n", &format!("    serverAddress: 10.77.0.1\n    listen: 127.0.0.1:{dhcp}\n    ha: {ha}\n"))
                .replace("    interface: br0                # the lab bridge; broadcasts elsewhere are never seen\n", "")
                .replace("listen: 0.0.0.0:8080", &format!("listen: 127.0.0.1:{http}"))
                .replace("listen: 0.0.0.0:8443", &format!("listen: 127.0.0.1:{https}"))
                .replace("  tftp:\n    listen: 0.0.0.0:69\n    root: tftp   # tests/lab fills it with iPXE and GRUB binaries\n", "")
                .replacen("host:\n", &format!("host:\n  store: {{ etcd: {{ endpoints: [\"{etcd}\"], prefix: /dhcp-ha/, leaseTtl: 2s }} }}\n"), 1)
        });
        let text = std::fs::read_to_string(&site).unwrap();
        assert!(
            !text.contains("0.0.0.0") && !text.contains("tftp:"),
            "{text}"
        );
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_bootd"))
            .args([
                "--site",
                site.to_str().unwrap(),
                "--dhcp-reply-ports",
                &format!("68,{relay_port}"),
            ])
            .args(name.map(|n| ["--name", n]).into_iter().flatten())
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("bootd.log")).unwrap())
            .spawn()
            .unwrap();
        Appliance {
            child: Process::new(child),
            dhcp,
            http,
            dir,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("bootd.log")).unwrap_or_default()
    }

    /// `bootd_dhcp_packets_total{kind}` from /metrics (curl).
    fn counted(&self, kind: &str) -> f64 {
        let out = Command::new("curl")
            .args(["-s", &format!("http://127.0.0.1:{}/metrics", self.http)])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let want = format!("bootd_dhcp_packets_total{{kind=\"{kind}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&want))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    }

    /// GET `path` on the appliance's HTTP listener (from 127.0.0.1, which
    /// may read the status pages): the body.
    fn get(&self, path: &str) -> String {
        self.get_from("127.0.0.1", path)
    }

    /// GET `path` from the source address `from` (a node's, on 127/8).
    fn get_from(&self, from: &str, path: &str) -> String {
        let out = Command::new("curl")
            .args(["-sf", "--interface", from])
            .arg(format!("http://127.0.0.1:{}{path}", self.http))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn kill9(&mut self) {
        self.child.kill();
    }
}

/// The next reply on the relay socket and which server port sent it.
async fn reply(relay: &UdpSocket, wait: Duration) -> Option<(Message, u16)> {
    let mut buf = [0u8; 1500];
    let (n, from) = tokio::time::timeout(wait, relay.recv_from(&mut buf))
        .await
        .ok()?
        .ok()?;
    Some((
        Message::decode(&mut Decoder::new(&buf[..n])).ok()?,
        from.port(),
    ))
}

/// A relayed DORA for `mac`, each message sent to every server (as a relay
/// with two servers does): the ACKed address and who ACKed it; `None`
/// when no server answered. A second answer to either message fails.
async fn dora(
    relay: &UdpSocket,
    servers: &[u16],
    mac: [u8; 6],
    xid: u32,
) -> Option<(Ipv4Addr, u16)> {
    for p in servers {
        relay
            .send_to(
                &request(mac, MessageType::Discover, xid, None),
                ("127.0.0.1", *p),
            )
            .await
            .unwrap();
    }
    let (offer, _) = reply(relay, Duration::from_secs(1)).await?;
    assert!(
        reply(relay, Duration::from_millis(300)).await.is_none(),
        "two servers answered the DISCOVER"
    );
    for p in servers {
        relay
            .send_to(
                &request(mac, MessageType::Request, xid + 1, Some(offer.yiaddr())),
                ("127.0.0.1", *p),
            )
            .await
            .unwrap();
    }
    let (ack, from) = reply(relay, Duration::from_secs(2)).await?;
    assert!(
        reply(relay, Duration::from_millis(300)).await.is_none(),
        "two servers answered the REQUEST"
    );
    assert_eq!(ack.opts().msg_type(), Some(MessageType::Ack), "{ack:?}");
    Some((ack.yiaddr(), from))
}

/// DORAs until one is ACKed (at most `secs`).
async fn dora_until(
    relay: &UdpSocket,
    servers: &[u16],
    mac: [u8; 6],
    secs: u64,
) -> (Ipv4Addr, u16) {
    let end = Instant::now() + Duration::from_secs(secs);
    let mut xid = 100;
    loop {
        if let Some(r) = dora(relay, servers, mac, xid).await {
            return r;
        }
        assert!(Instant::now() < end, "no ACK within {secs} s");
        xid += 2;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_appliance_answers_and_the_other_takes_over_with_the_same_leases() {
    let etcd = etcd::testing::Server::start();
    let relay = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let rport = relay.local_addr().unwrap().port();
    let mut apps = [
        Appliance::start(&etcd.endpoint, rport),
        Appliance::start(&etcd.endpoint, rport),
    ];
    let servers = [apps[0].dhcp, apps[1].dhcp];
    let x = [0x02, 0, 0, 0, 0, 0x0a];
    let (ip_x, from) = dora_until(&relay, &servers, x, 20).await;
    let (lead, standby) = if from == apps[0].dhcp { (0, 1) } else { (1, 0) };
    assert!(
        apps[standby].counted("standby") >= 2.0,
        "the standby left the requests unanswered and counted them"
    );
    assert!(
        apps[lead].log().contains("elected DHCP server"),
        "{}",
        apps[lead].log()
    );
    // The same client again: the same address, from the same server.
    assert_eq!(
        dora_until(&relay, &servers, x, 5).await,
        (ip_x, apps[lead].dhcp)
    );

    let t = Instant::now();
    apps[lead].kill9();
    let (again, from) = dora_until(&relay, &servers, x, 20).await;
    assert_eq!(from, apps[standby].dhcp, "the other appliance answers");
    assert_eq!(
        again, ip_x,
        "the client kept its address across the takeover"
    );
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "took over after {:?}",
        t.elapsed()
    );
    let log = apps[standby].log();
    assert!(log.contains("shared leases loaded"), "{log}");
    let y = [0x02, 0, 0, 0, 0, 0x0b];
    let (ip_y, _) = dora_until(&relay, &servers, y, 5).await;
    assert_ne!(ip_y, ip_x);
    // Both leases are in etcd, each address held by one client.
    let e = etcd::Etcd::connect(&etcd.config("/dhcp-ha/")).unwrap();
    let stored: Vec<(String, String)> = e
        .list("dhcp/leases/")
        .unwrap()
        .into_iter()
        .map(|v| {
            let l: serde_json::Value = serde_json::from_slice(&v.value).unwrap();
            (
                l["mac"].as_str().unwrap().to_string(),
                l["ip"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(
        stored.contains(&(site::Mac(x).to_string(), ip_x.to_string())),
        "{stored:?}"
    );
    assert!(
        stored.contains(&(site::Mac(y).to_string(), ip_y.to_string())),
        "{stored:?}"
    );
    assert_eq!(stored.len(), 2, "{stored:?}");

    // Quorum lost (the only member killed): each appliance answers the
    // site's nodes from their reserved addresses; no other machine gets an
    // address, counted; once etcd is back one is elected and grants again.
    let mut etcd = etcd;
    etcd.kill();
    let node = [0x52, 0x54, 0x00, 0x77, 0x00, 0x21]; // worker-1, reserved 127.0.0.21
    let standby_port = apps[standby].dhcp;
    let (ip, _) = dora_until(&relay, &[standby_port], node, 15).await;
    assert_eq!(ip, Ipv4Addr::new(127, 0, 0, 21));
    assert!(
        apps[standby]
            .log()
            .contains("DHCP answers the site's nodes only"),
        "{}",
        apps[standby].log()
    );
    let z = [0x02, 0, 0, 0, 0, 0x0c];
    assert!(
        dora(&relay, &[standby_port], z, 900).await.is_none(),
        "a pool address granted without the store"
    );
    assert!(apps[standby].counted("no_store") >= 1.0);
    etcd.restart();
    let (ip_z, _) = dora_until(&relay, &[standby_port], z, 20).await;
    assert!(ip_z != ip_x && ip_z != ip_y, "{ip_z}");
}

/// A node's boot served by two appliances (DHCP by the elected one, its
/// iPXE script by the other): each one's status shows the whole boot, each
/// step with the appliance that served it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_appliance_shows_which_one_served_each_step() {
    let etcd = etcd::testing::Server::start();
    let relay = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let rport = relay.local_addr().unwrap().port();
    let names = ["appliance-a", "appliance-b"];
    let apps = [
        Appliance::start_named(&etcd.endpoint, rport, "hotStandby", Some(names[0])),
        Appliance::start_named(&etcd.endpoint, rport, "hotStandby", Some(names[1])),
    ];
    let servers = [apps[0].dhcp, apps[1].dhcp];
    let node = [0x52, 0x54, 0x00, 0x77, 0x00, 0x21]; // worker-1
    let (_, from) = dora_until(&relay, &servers, node, 20).await;
    let (lead, other) = if from == apps[0].dhcp { (0, 1) } else { (1, 0) };
    let script = apps[other].get_from(
        "127.0.0.21",
        "/ipxe/node?mac=52-54-00-77-00-21&buildarch=x86_64",
    );
    assert!(script.starts_with("#!ipxe"), "{script}");
    // Each appliance's view: DHCP by the elected one, the script by the
    // other, as soon as each has shared its events (a second or so).
    for app in [&apps[lead], &apps[other]] {
        let end = Instant::now() + Duration::from_secs(15);
        let phases = loop {
            let t: serde_json::Value =
                serde_json::from_str(&app.get("/status/node/worker-1/timeline.json"))
                    .unwrap_or_default();
            let phases: Vec<(String, Vec<String>)> = t["phases"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| {
                    let by = p["by"].as_array().into_iter().flatten();
                    let by = by.map(|b| b.as_str().unwrap().to_string()).collect();
                    (p["phase"].as_str().unwrap().to_string(), by)
                })
                .collect();
            if phases.len() >= 2 || Instant::now() > end {
                break phases;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(
            phases,
            [
                ("dhcp".to_string(), vec![names[lead].to_string()]),
                ("script".to_string(), vec![names[other].to_string()]),
            ],
            "{}",
            app.log()
        );
        let page = app.get("/status/node/worker-1");
        assert!(page.contains("<th>By</th>"), "{page}");
        assert!(
            page.contains(&format!("<td class=\"by\">{}</td>", names[other])),
            "{page}"
        );
    }
    // What the other appliances see is in etcd, one key per write under
    // the appliance's name, a line per event with its node; nothing of a
    // token.
    let e = etcd::Etcd::connect(&etcd.config("/dhcp-ha/")).unwrap();
    let stored = e
        .list(&format!("timeline/_batch/{}/", names[other]))
        .unwrap();
    assert!(
        stored
            .iter()
            .any(|v| String::from_utf8_lossy(&v.value).contains("worker-1\t{")),
        "{stored:?}"
    );
    for v in &stored {
        let text = String::from_utf8_lossy(&v.value);
        assert!(
            !text.contains("token=ey") && !text.contains("token=")
                || text.contains("token=REDACTED"),
            "{text}"
        );
    }
}

/// An appliance started before etcd answers waits for it (the site's token
/// key and CA come from it), then serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_appliance_started_before_etcd_waits_for_it() {
    let mut etcd = etcd::testing::Server::start();
    etcd.kill();
    let relay = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let app = Appliance::start(&etcd.endpoint, relay.local_addr().unwrap().port());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let log = app.log();
    assert!(
        log.contains("the shared store cannot be reached yet: waiting"),
        "{log}"
    );
    let etcd = tokio::task::spawn_blocking(move || {
        etcd.restart();
        etcd
    })
    .await
    .unwrap();
    // Served once etcd answers: a client gets an address.
    let (ip, _) = dora_until(&relay, &[app.dhcp], [0x02, 0, 0, 0, 0, 0x0d], 30).await;
    assert!(!ip.is_unspecified());
    drop(etcd);
}

/// A lease record in etcd that bootd did not write is never overwritten:
/// the commit fails naming the key (the ACK is withheld).
#[test]
fn a_foreign_lease_record_is_refused_not_overwritten() {
    use dhcp::v4::ha::SharedLeases;
    let server = etcd::testing::Server::start();
    let config = server.config("/foreign/");
    let raw = etcd::Etcd::connect(&config).unwrap();
    raw.put("dhcp/leases/10.77.0.100", b"not a lease".to_vec())
        .unwrap();
    let shared =
        appliance::ha::EtcdShared::new(config, Duration::from_secs(10), site::DhcpHa::HotStandby);
    let lease = dhcp::v4::leases::Lease {
        mac: "02:00:00:00:00:01".into(),
        ip: Ipv4Addr::new(10, 77, 0, 100),
        expires: runtime::clock::unix_secs() + 3600,
        hostname: None,
        state: Default::default(),
    };
    let e = shared.commit_lease(&lease).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{e}");
    assert!(
        e.to_string().contains("/foreign/dhcp/leases/10.77.0.100"),
        "{e}"
    );
    assert_eq!(
        raw.get("dhcp/leases/10.77.0.100").unwrap().unwrap().value,
        b"not a lease"
    );
}

/// `loadBalancing`: both appliances answer, each client by one of them
/// (the other counts it as `peer`); killed, one appliance's clients are
/// answered by the other with the addresses they had; no address twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_balancing_splits_the_clients_and_the_survivor_takes_them_all() {
    let etcd = etcd::testing::Server::start();
    let relay = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let rport = relay.local_addr().unwrap().port();
    let mut apps = [
        Appliance::start_with(&etcd.endpoint, rport, "loadBalancing"),
        Appliance::start_with(&etcd.endpoint, rport, "loadBalancing"),
    ];
    let servers = [apps[0].dhcp, apps[1].dhcp];
    // Both members of the group before the clients come.
    let e = etcd::Etcd::connect(&etcd.config("/dhcp-ha/")).unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    while e.list("members/dhcp/").unwrap().len() < 2 {
        assert!(Instant::now() < end, "{}\n{}", apps[0].log(), apps[1].log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let clients: Vec<[u8; 6]> = (0..16u8).map(|i| [0x02, 0x10, 0, 0, 0, i]).collect();
    let mut first = Vec::new();
    for c in &clients {
        // dora fails on a second answer to any message.
        first.push(dora_until(&relay, &servers, *c, 10).await);
    }
    let by = |p: u16| first.iter().filter(|(_, f)| *f == p).count();
    assert!(
        by(servers[0]) > 0 && by(servers[1]) > 0,
        "both answer a share: {first:?}"
    );
    assert!(apps[0].counted("peer") >= 1.0 && apps[1].counted("peer") >= 1.0);
    let mut ips: Vec<Ipv4Addr> = first.iter().map(|(ip, _)| *ip).collect();
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), clients.len(), "an address twice: {first:?}");
    // The allocations start apart (member 1 of 2 at the pool's start,
    // member 2 at its middle).
    let log = apps[0].log() + &apps[1].log();
    assert!(log.contains("of the DHCP group"), "{log}");

    let t = Instant::now();
    apps[0].kill9();
    for (c, (ip, _)) in clients.iter().zip(&first) {
        let (again, from) = dora_until(&relay, &[servers[1]], *c, 20).await;
        assert_eq!(from, servers[1]);
        assert_eq!(again, *ip, "a client kept its address");
    }
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "took over after {:?}",
        t.elapsed()
    );
    let stored = e.list("dhcp/leases/").unwrap();
    assert_eq!(stored.len(), clients.len());
    assert_eq!(e.list("dhcp/clients/").unwrap().len(), clients.len());
}

/// An appliance's shared store (`loadBalancing`), without its process.
fn balancing(config: &etcd::Config) -> appliance::ha::EtcdShared {
    appliance::ha::EtcdShared::new(
        config.clone(),
        Duration::from_secs(10),
        site::DhcpHa::LoadBalancing,
    )
}

/// A lease of `mac` on `ip` for an hour.
fn live(mac: &str, ip: Ipv4Addr) -> dhcp::v4::leases::Lease {
    dhcp::v4::leases::Lease {
        mac: mac.into(),
        ip,
        expires: runtime::clock::unix_secs() + 3600,
        hostname: None,
        state: Default::default(),
    }
}

/// One record per client: an appliance that did not see another's grant
/// to a client is refused a second address for it, and told the first.
#[test]
fn a_client_is_never_granted_two_addresses() {
    use dhcp::v4::ha::SharedLeases;
    let server = etcd::testing::Server::start();
    let config = server.config("/two/");
    let (a, b) = (balancing(&config), balancing(&config));
    let lease = |last: u8| live("02:00:00:00:00:07", Ipv4Addr::new(10, 77, 0, last));
    assert_eq!(a.commit_lease(&lease(100)).unwrap(), None);
    assert_eq!(
        b.commit_lease(&lease(101)).unwrap(),
        Some(lease(100)),
        "B did not see A's grant: refused, and told it"
    );
    let raw = etcd::Etcd::connect(&config).unwrap();
    assert!(raw.get("dhcp/leases/10.77.0.101").unwrap().is_none());
    assert_eq!(
        raw.get("dhcp/clients/02:00:00:00:00:07")
            .unwrap()
            .unwrap()
            .value,
        b"10.77.0.100"
    );
    // B now knows: renewing that address is fine; and an appliance that
    // moves a client knowingly (a reserved address) may.
    assert_eq!(b.commit_lease(&lease(100)).unwrap(), None);
    assert_eq!(b.commit_lease(&lease(102)).unwrap(), None);
    assert_eq!(
        raw.get("dhcp/clients/02:00:00:00:00:07")
            .unwrap()
            .unwrap()
            .value,
        b"10.77.0.102"
    );
}

/// A lease another appliance wrote, read by this one (its load, or its
/// watch) before its table holds it, is never overwritten by a grant of
/// that address to another client: the grant finds the record and is
/// refused. (The storm of tests/ha/e2e.sh in loadBalancing found 28
/// addresses ACKed to two clients when a read's revision was kept.)
#[test]
fn a_record_read_but_not_yet_in_the_table_is_not_overwritten() {
    use dhcp::v4::ha::SharedLeases;
    let server = etcd::testing::Server::start();
    let config = server.config("/race/");
    let (a, b) = (balancing(&config), balancing(&config));
    let lease = |mac: &str| live(mac, Ipv4Addr::new(10, 80, 128, 128));
    assert_eq!(a.commit_lease(&lease("02:80:00:00:00:82")).unwrap(), None);
    // B reads every lease (as when it starts answering, or its watch does).
    assert_eq!(b.leases().unwrap().len(), 1);
    // B's table did not hold it yet when B chose the address for another client.
    assert_eq!(
        b.commit_lease(&lease("02:80:00:00:00:83")).unwrap(),
        Some(lease("02:80:00:00:00:82"))
    );
    let raw = etcd::Etcd::connect(&config).unwrap();
    let held: serde_json::Value =
        serde_json::from_slice(&raw.get("dhcp/leases/10.80.128.128").unwrap().unwrap().value)
            .unwrap();
    assert_eq!(held["mac"], "02:80:00:00:00:82");
}

/// Leases committed together (the group committer's batches): one
/// transaction when nothing conflicts; when one does, each is judged on
/// its own and only that one is refused.
#[test]
fn leases_committed_together_and_one_conflict_refuses_only_it() {
    use dhcp::v4::ha::SharedLeases;
    let server = etcd::testing::Server::start();
    let config = server.config("/batch/");
    let (a, b) = (balancing(&config), balancing(&config));
    let ip = |last: u8| Ipv4Addr::new(10, 80, 1, last);
    let batch: Vec<dhcp::v4::leases::Lease> = (1..=3)
        .map(|i| live(&format!("02:81:00:00:00:0{i}"), ip(i)))
        .collect();
    let answers = a.commit_leases(&batch);
    assert!(answers.iter().all(|r| matches!(r, Ok(None))), "{answers:?}");
    let raw = etcd::Etcd::connect(&config).unwrap();
    assert_eq!(raw.list("dhcp/leases/").unwrap().len(), 3);
    // B grants .2 to another client before it knew; with two new ones.
    let mut second = vec![
        live("02:81:00:00:00:14", ip(4)),
        live("02:81:00:00:00:12", ip(2)),
        live("02:81:00:00:00:15", ip(5)),
    ];
    let answers = b.commit_leases(&second);
    assert!(matches!(answers[0], Ok(None)), "{answers:?}");
    assert_eq!(answers[1].as_ref().unwrap(), &Some(batch[1].clone()));
    assert!(matches!(answers[2], Ok(None)), "{answers:?}");
    assert_eq!(raw.list("dhcp/leases/").unwrap().len(), 5);
    // Etcd down: every lease of a batch told at once, nothing written.
    let mut server = server;
    server.kill();
    second.truncate(1);
    second.push(live("02:81:00:00:00:16", ip(6)));
    let t = std::time::Instant::now();
    let answers = a.commit_leases(&second);
    assert!(answers.iter().all(|r| r.is_err()), "{answers:?}");
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
}
