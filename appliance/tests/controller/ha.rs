//! Two appliances (real bootd processes, their own state directories and
//! ports) on one etcd (`host.store.etcd`, a member started by the test):
//! the API of either takes a node, one elected appliance runs the loops,
//! and when it is killed with SIGKILL between a provider's create and its
//! reply (the provider carrying the create out after the other appliance
//! was elected), the other waits out the old leader's calls in flight
//! (module `controller::fence`) and finishes the node with no second machine.

use super::{
    api_client, cond, equinix_node, free_port, plain_get, process_site, until, Api, Fake, Proc,
};
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Appliance {
    proc: Proc,
    api: Api,
    /// bootd's plain HTTP listener.
    http: SocketAddr,
    dir: tempfile::TempDir,
}

impl Appliance {
    async fn start(f: &Fake, etcd: &str, n: u32) -> Appliance {
        Self::start_in(tempfile::tempdir().unwrap(), f, etcd, n).await
    }

    fn site(dir: &std::path::Path, f: &Fake, etcd: &str) -> (std::path::PathBuf, u16, SocketAddr) {
        let port = free_port();
        let site = process_site(dir, f, port, |t| {
            t.replacen(
                "host:\n",
                &format!("host:\n  store: {{ etcd: {{ endpoints: [\"{etcd}\"], prefix: /ha-test/, leaseTtl: 2s }} }}\n"),
                1,
            )
        });
        let text = std::fs::read_to_string(&site).unwrap();
        let after = &text[text.find("  http:\n").unwrap()..];
        let at = after.find("listen: ").unwrap() + "listen: ".len();
        let http = after[at..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        (site, port, http)
    }

    async fn start_in(dir: tempfile::TempDir, f: &Fake, etcd: &str, n: u32) -> Appliance {
        Self::start_on(dir, f, etcd, n, None).await
    }

    async fn start_on(
        dir: tempfile::TempDir,
        f: &Fake,
        etcd: &str,
        n: u32,
        cpus: Option<&str>,
    ) -> Appliance {
        let (site, port, http) = Self::site(dir.path(), f, etcd);
        let proc = Proc::start_on(&site, n, cpus);
        let api = api_client(&dir.path().join("state/ca.pem"), port, &proc).await;
        Appliance {
            proc,
            http,
            api,
            dir,
        }
    }

    /// Two appliances on `etcd`, once one is elected: (leader, follower).
    async fn elected_pair(f: &Fake, etcd: &str) -> (Appliance, Appliance) {
        let a = Appliance::start(f, etcd, 1).await;
        let b = Appliance::start(f, etcd, 2).await;
        until("one appliance elected", 20, async || {
            a.leading().await || b.leading().await
        })
        .await;
        if a.leading().await {
            (a, b)
        } else {
            (b, a)
        }
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.api.call("GET", path, None).await
    }

    async fn leading(&self) -> bool {
        self.get("/v1/cluster").await.1["controller"]["leading"] == true
    }

    /// A plain HTTP GET of bootd: status and body.
    async fn boot(&self, path: &str) -> (u16, String) {
        plain_get(&format!("http://{}{path}", self.http)).await
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.proc.log).unwrap_or_default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_other_appliance_is_elected_and_finishes_the_node_once() {
    let etcd = etcd::testing::Server::start();
    let f = Fake::start().await;
    let hold = Arc::new(tokio::sync::Notify::new());
    f.st().hold_create = Some(Arc::clone(&hold));
    f.st().create_lands_on_release = true;
    let (mut leader, follower) = Appliance::elected_pair(&f, &etcd.endpoint).await;
    assert!(!follower.leading().await, "two leaders");
    let (_, v) = follower.get("/v1/cluster").await;
    assert_eq!(v["controller"]["store"], "etcd");
    assert!(
        v["controller"]["leader"]
            .as_str()
            .is_some_and(|l| l.contains("pid")),
        "{v:#}"
    );

    // Created through the appliance that does not lead.
    let (st, v) = follower
        .api
        .create(equinix_node("worker-7", "10.77.0.27", "52:54:00:77:00:27"))
        .await;
    assert_eq!(st, 201, "{v:#}");
    // The leader's loop calls the provider; its reply is held.
    until("the create reached the provider", 20, async || {
        f.st().creates == 1
    })
    .await;
    // The node boots from either appliance: both overlays have it.
    for (who, app) in [("leader", &leader), ("follower", &follower)] {
        let overlay = app.dir.path().join("state/nodes.yaml");
        until(&format!("{who}'s overlay has worker-7"), 10, async || {
            std::fs::read_to_string(&overlay).is_ok_and(|t| t.contains("worker-7"))
        })
        .await;
    }
    let t = Instant::now();
    leader.proc.kill9();
    until("the follower elected", 15, async || {
        follower.leading().await
    })
    .await;
    let took = t.elapsed();
    // leaseTtl 2 s: etcd expires the dead leader's lease, then elects.
    assert!(took < Duration::from_secs(8), "elected after {took:?}");
    // The provider carries out the old leader's create only now, after the
    // new leader was elected (the fencing attack: before fencing, the new
    // leader's find came first, found nothing and made a second device).
    tokio::time::sleep(Duration::from_secs(8)).await;
    f.st().hold_create = None;
    hold.notify_waiters();
    until("worker-7 Provisioned on the new leader", 60, async || {
        let (st, v) = follower.get("/v1/nodes/worker-7").await;
        st == 200 && cond(&v, "Provisioned")["status"] == "True"
    })
    .await;
    assert_eq!(f.st().creates, 1, "no second machine");
    assert_eq!(f.live_devices(), 1);
    let log = follower.log();
    assert!(log.contains("controller leadership taken"), "{log}");
    assert!(
        log.contains("acting once its provider calls in flight have ended"),
        "the new term waited (fencing): {log}"
    );
    assert!(
        log.contains("how=\"adopted\"") || log.contains("how=adopted"),
        "the open intent was resumed by finding the machine: {log}"
    );
    // Deleted through the new leader: the machine goes, the node goes.
    let (st, _) = follower
        .api
        .call("DELETE", "/v1/nodes/worker-7", None)
        .await;
    assert_eq!(st, 202);
    until("worker-7 deleted", 30, async || {
        follower.get("/v1/nodes/worker-7").await.0 == 404
    })
    .await;
    assert_eq!(f.live_devices(), 0, "no orphan");
    drop(leader);
}

/// A batch of nodes created through the API, the leader killed with
/// several of their creates in flight (Power VS: the instance exists, its
/// reply held): the new leader waits out the old one's calls, finds each
/// open intent's instance by its tag, creates the rest, and every node
/// ends with exactly one machine: as many creates as nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_created_across_a_leader_kill_get_one_machine_each() {
    const N: usize = 24;
    let etcd = etcd::testing::Server::start();
    let f = Fake::start().await;
    let hold = Arc::new(tokio::sync::Notify::new());
    f.st().hold_create = Some(Arc::clone(&hold));
    let (mut leader, follower) = Appliance::elected_pair(&f, &etcd.endpoint).await;
    let name = |i: usize| format!("p9-{i:02}");
    for i in 0..N {
        let (st, v) = follower
            .api
            .create(super::powervs_node(
                &name(i),
                &format!("10.77.0.{}", 40 + i),
                &format!("52:54:00:77:01:{i:02x}"),
            ))
            .await;
        assert_eq!(st, 201, "{v:#}");
    }
    until("creates in flight at the provider", 30, async || {
        f.st().creates >= 2
    })
    .await;
    let in_flight = f.st().creates as usize;
    leader.proc.kill9();
    eprintln!("{in_flight} of {N} creates in flight at the kill");
    until("the follower elected", 15, async || {
        follower.leading().await
    })
    .await;
    // The old leader's creates are answered now, to nobody; the new
    // leader's are not held.
    f.st().hold_create = None;
    hold.notify_waiters();
    until(
        "every node Provisioned on the new leader",
        120,
        async || {
            for i in 0..N {
                let (st, v) = follower.get(&format!("/v1/nodes/{}", name(i))).await;
                if st != 200 || cond(&v, "Provisioned")["status"] != "True" {
                    return false;
                }
            }
            true
        },
    )
    .await;
    let st = f.st();
    let mut names: Vec<String> = st
        .instances
        .values()
        .filter(|i| i["status"] != "DELETING")
        .map(|i| i["serverName"].as_str().unwrap_or_default().to_string())
        .collect();
    names.sort();
    let want: Vec<String> = (0..N).map(|i| format!("lab-{}", name(i))).collect();
    assert_eq!(names, want, "one machine per node, none twice");
    assert_eq!(
        st.creates as usize, N,
        "{in_flight} creates were in flight at the kill: each found by its intent, not made again"
    );
    drop(st);
    let log = follower.log();
    assert!(
        log.contains("acting once its provider calls in flight have ended"),
        "the new term waited (fencing): {log}"
    );
    drop(leader);
}

/// The token key and the site CA are the site's, not one appliance's: the
/// second appliance takes the first's; a token minted by one is honoured
/// by the other, once: spent on one, refused on both. An appliance whose
/// state directory holds another CA does not start, and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_the_ca_are_the_sites_and_a_token_is_spent_everywhere() {
    let etcd = etcd::testing::Server::start();
    let f = Fake::start().await;
    let a = Appliance::start(&f, &etcd.endpoint, 1).await;
    let b = Appliance::start(&f, &etcd.endpoint, 2).await;
    let file = |app: &Appliance, name: &str| {
        std::fs::read(app.dir.path().join("state").join(name)).unwrap()
    };
    for name in ["ca.pem", "ca.key", "token.key"] {
        assert_eq!(file(&a, name), file(&b, name), "{name} differs");
    }
    // worker-0's script from A carries a token A minted.
    let (st, script) = a.boot("/ipxe/worker-0.ipxe").await;
    assert_eq!(st, 200, "{script}");
    let at = script.find("/ignition/worker-0?token=").expect(&script);
    let path: String = script[at..]
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != '"')
        .collect();
    // Honoured by B, then spent everywhere.
    let (st, body) = b.boot(&path).await;
    assert_eq!(st, 200, "A's token on B: {body}");
    assert!(body.contains("\"ignition\""), "{body}");
    for (who, app) in [("A", &a), ("B", &b)] {
        let (st, _) = app.boot(&path).await;
        assert_ne!(st, 200, "the spent token was honoured again on {who}");
    }
    assert!(
        a.log().contains("token_reused") || a.log().contains("presented again"),
        "{}",
        a.log()
    );

    // Bootstrap complete, said to A: B refuses the bootstrap node's
    // Ignition too (not only the appliance whose teardown ran).
    let (st, script) = b.boot("/ipxe/bootstrap.ipxe").await;
    assert_eq!(st, 200, "{script}");
    let at = script.find("/ignition/bootstrap?token=").expect(&script);
    let boot_ign: String = script[at..]
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != '"')
        .collect();
    let (st, _) = a
        .api
        .call(
            "POST",
            "/v1/cluster/bootstrap-complete",
            Some(serde_json::json!({})),
        )
        .await;
    assert_eq!(st, 200);
    for (who, app) in [("A", &a), ("B", &b)] {
        let revoked = app.dir.path().join("state/revoked.json");
        until(
            &format!("{who} revoked the bootstrap node"),
            15,
            async || std::fs::read_to_string(&revoked).is_ok_and(|t| t.contains("bootstrap")),
        )
        .await;
    }
    until("B refuses the bootstrap node's Ignition", 10, async || {
        b.boot(&boot_ign).await.0 != 200
    })
    .await;

    // An appliance whose state directory holds another CA (A's) than the
    // one shared on its etcd (a second etcd, where D came first) does not start.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("state")).unwrap();
    for name in ["ca.pem", "ca.key"] {
        std::fs::copy(
            a.dir.path().join("state").join(name),
            dir.path().join("state").join(name),
        )
        .unwrap();
    }
    let etcd2 = etcd::testing::Server::start();
    let d = Appliance::start(&f, &etcd2.endpoint, 4).await;
    let (site, _, _) = Appliance::site(dir.path(), &f, &etcd2.endpoint);
    let mut p = Proc::start(&site, 5);
    let status = p
        .wait(Duration::from_secs(20))
        .expect("bootd with another CA exited");
    assert!(!status.success());
    let log = std::fs::read_to_string(&p.log).unwrap();
    assert!(
        log.contains("ca.pem and ca.key in")
            && log.contains("differ from the site's shared site-ca"),
        "{log}"
    );
    drop(d);
}

/// Creates keyed by their intent where the provider has no idempotency
/// key: each create carries its intent's tag (Equinix `tags`, Power VS
/// `userTags`), and a find returns the machine its own intent made when
/// the node has several (a late create of an old leader beside a new one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_find_prefers_the_machine_its_create_intent_made() {
    use controller::providers::{equinix, NodeRequest, Provider};
    let f = Fake::start().await;
    let http = || controller::providers::Http::new(Duration::from_secs(10));
    let node = |intent: &str| NodeRequest {
        ip: "10.77.0.23".parse().unwrap(),
        macs: vec!["52:54:00:77:00:23".into()],
        ipxe_url: "http://10.77.0.1:8080/ipxe/worker-3.ipxe".into(),
        intent: intent.into(),
        ..NodeRequest::bare("worker-3", "lab")
    };
    let eq: &dyn Provider = &equinix::Equinix {
        http: http(),
        base_url: f.url(),
        project_id: super::fake::PROJECT.into(),
        api_key: site::Secret(super::fake::EQUINIX_KEY.into()),
    };
    let spec = serde_json::to_value(equinix::DeviceSpec {
        metro: "sv".into(),
        plan: "c3.small.x86".into(),
        always_pxe: true,
        operating_system: None,
        hardware_reservation_id: None,
        spot_instance: false,
        spot_price_max: None,
        billing_cycle: None,
    })
    .unwrap();
    let a = eq.create(&node("1-100"), &spec).await.unwrap();
    let b = eq.create(&node("2-200"), &spec).await.unwrap();
    assert_ne!(a.id, b.id);
    assert_eq!(eq.find(&node("1-100")).await.unwrap().unwrap().id, a.id);
    assert_eq!(eq.find(&node("2-200")).await.unwrap().unwrap().id, b.id);
    let tags = f.st().devices[&a.id]["tags"].clone();
    assert!(
        tags.as_array()
            .unwrap()
            .iter()
            .any(|t| t == "bootd-intent:1-100"),
        "{tags}"
    );

    let pv = super::fake::powervs_client(http(), f.url(), f.url());
    let pv: &dyn Provider = &pv;
    let spec = super::fake::powervs_spec(false);
    let a = pv.create(&node("1-100"), &spec).await.unwrap();
    let b = pv.create(&node("2-200"), &spec).await.unwrap();
    assert_eq!(pv.find(&node("1-100")).await.unwrap().unwrap().id, a.id);
    assert_eq!(pv.find(&node("2-200")).await.unwrap().unwrap().id, b.id);
}

/// The controller runs on a thread of its own: its store calls (etcd round
/// trips, here each waiting out etcd's deadline) never hold bootd's answers.
/// An appliance given one CPU runs bootd on a one-thread runtime; when the
/// controller shared it, every API write waiting on etcd held `/healthz`
/// too (keepalived's check, `bootd ready`, gives up after 1 s and moves the
/// boot address), and under the storm's 1 000 API nodes the overlay exports
/// did the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_waiting_on_etcd_holds_no_boot_answer() {
    let etcd = etcd::testing::Server::start();
    let f = Fake::start().await;
    let a = Appliance::start_on(
        tempfile::tempdir().unwrap(),
        &f,
        &etcd.endpoint,
        1,
        Some("0"),
    )
    .await;
    until("the appliance elected", 20, async || a.leading().await).await;
    assert_eq!(a.boot("/healthz").await.0, 200);
    let pid = etcd.pid().expect("etcd runs").to_string();
    let signal = |s: &str| {
        let st = std::process::Command::new("kill")
            .args([s, &pid])
            .status()
            .unwrap();
        assert!(st.success(), "kill {s} {pid}");
    };
    signal("-STOP");
    // API writes, each waiting on the stopped etcd (its deadline: 3 s).
    let writes = async {
        let mut answers = Vec::new();
        for i in 0..3 {
            let ip = format!("10.77.0.{}", 40 + i);
            let mac = format!("52:54:00:77:00:{}", 40 + i);
            answers.push(
                a.api
                    .create(equinix_node(&format!("w-{i}"), &ip, &mac))
                    .await
                    .0,
            );
        }
        answers
    };
    // bootd meanwhile, as keepalived's check asks it.
    let health = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut worst = Duration::ZERO;
        for _ in 0..20 {
            let t = Instant::now();
            let (st, _) = a.boot("/healthz").await;
            assert_eq!(st, 200);
            worst = worst.max(t.elapsed());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        worst
    };
    let (answers, worst) = tokio::join!(writes, health);
    signal("-CONT");
    assert!(
        worst < Duration::from_secs(1),
        "/healthz took {worst:?} while the controller waited on etcd"
    );
    // Refused (503 once etcd's deadline passed) or not answered in the
    // client's time: none stored.
    assert!(
        answers.iter().all(|&s| s == 503 || s == 0),
        "the writes waited on etcd: {answers:?}"
    );
}
