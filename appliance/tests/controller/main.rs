//! The controller API end to end on loopback: bootd's real `run_app` with
//! the controller beside it (`appliance::run_boot`, as the binaries run them),
//! a stateful fake of the providers (`fake`), and real bootd
//! processes killed with SIGKILL. The Prism tests (`prism`) validate every
//! request and reply against ../shared/specs; they need Prism
//! (tests/controller/deps.sh) and run from tests/controller/e2e.sh.

mod alibaba;
mod api;
mod api_scopes;
mod bmc;
mod cluster_up;
mod crash_loop;
mod csr;
mod discovery;
mod epoch;
mod fake;
mod full_disk;
mod ha;
mod ipv6;
mod local;
mod machine_config;
mod media;
mod platforms;
mod prism;
mod sites;

pub use api::{after, curl_from, plain_get, until, until_ok, with_log, Api};
use fake::{Fake, Fault};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::process::{output_text, Process};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use testkit::logs::logs;
use testkit::ports::free_port;

pub const API_TOKEN: &str = "api-token-for-tests-0c9e";

fn lab() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab")
}

/// The lab site in `dir` with `host.api` pointing the providers at
/// `equinix_url`, `iam_url` and `powervs_url`; returns the site path.
pub fn write_site(
    dir: &Path,
    equinix_url: &str,
    iam_url: &str,
    powervs_url: &str,
    api_listen: &str,
) -> PathBuf {
    let text = std::fs::read_to_string(lab().join("site.yaml")).unwrap();
    let api = format!(
        "host:\n  api:\n    listen: {api_listen}\n    tokens: {{ file: api-tokens }}\n    deadline: 10m\n    equinix: {{ baseUrl: \"{equinix_url}\", projectId: {}, apiKey: {{ file: metal.key }} }}\n    powervs: {{ baseUrl: \"{powervs_url}\", iamUrl: \"{iam_url}\", crn: \"crn:v1:bluemix:public:power-iaas:us-south:a/acc:{}::\", apiKey: {{ file: ibm.key }} }}\n",
        fake::PROJECT,
        fake::CLOUD_INSTANCE
    );
    // The tests speak for the machines from 127.0.0.1, not from the nodes'
    // addresses: the providers' nodes and the lab's take scripts from any
    // address (bootd/tests/it/trust.rs tests the binding itself).
    let api = api.replacen(
        "    deadline: 10m\n",
        "    deadline: 10m\n    fetchFrom: { equinix: anyAddress, powervs: anyAddress }\n",
        1,
    );
    let text = text
        .replace(
            "kernelArgs: [console=ttyS0] }",
            "kernelArgs: [console=ttyS0], fetchFrom: anyAddress }",
        )
        .replace("host:\n", &api)
        .replace("root: ../../target/lab-images", "root: images")
        .replace("stateDir: ../../target/lab-state", "stateDir: state")
        .replace("root: ../../target/lab-tftp", "root: tftp");
    for d in ["images", "tftp", "ignition", "state"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    for r in ["bootstrap", "master", "worker"] {
        std::fs::copy(
            lab().join(format!("ignition/{r}.ign")),
            dir.join(format!("ignition/{r}.ign")),
        )
        .unwrap();
    }
    std::fs::write(
        dir.join("api-tokens"),
        format!("# test tokens\n{API_TOKEN}\n"),
    )
    .unwrap();
    std::fs::write(dir.join("metal.key"), format!("{}\n", fake::EQUINIX_KEY)).unwrap();
    std::fs::write(dir.join("ibm.key"), format!("{}\n", fake::POWERVS_KEY)).unwrap();
    let path = dir.join("site.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

/// bootd in-process; its API client ([`Api`]: `b.call(..)`) through `Deref`.
pub struct Bootd {
    pub app: Arc<bootd::App>,
    pub api: std::net::SocketAddr,
    pub http: std::net::SocketAddr,
    pub dir: tempfile::TempDir,
    client: Api,
    shutdown: CancellationToken,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl std::ops::Deref for Bootd {
    type Target = Api;

    fn deref(&self) -> &Api {
        &self.client
    }
}

pub fn tuning() -> controller::Tuning {
    controller::Tuning {
        poll: Duration::from_millis(100),
        backoff_base: Duration::from_millis(50),
        backoff_cap: Duration::from_millis(800),
        request_timeout: Duration::from_millis(700),
        deadline: None,
        body_timeout: Duration::from_secs(1),
        ..controller::Tuning::default()
    }
}

impl Bootd {
    pub async fn start(equinix: &str, iam: &str, powervs: &str) -> Bootd {
        Bootd::start_tuned(equinix, iam, powervs, tuning()).await
    }

    pub async fn start_tuned(
        equinix: &str,
        iam: &str,
        powervs: &str,
        tuning: controller::Tuning,
    ) -> Bootd {
        let dir = tempfile::tempdir().unwrap();
        let path = write_site(dir.path(), equinix, iam, powervs, "127.0.0.1:0");
        Bootd::start_site(dir, &path, tuning).await
    }

    /// bootd with the controller on the site at `path` (in `dir`).
    pub async fn start_site(
        dir: tempfile::TempDir,
        path: &Path,
        tuning: controller::Tuning,
    ) -> Bootd {
        Bootd::start_site_lb(dir, path, tuning, None).await
    }

    /// As [`Bootd::start_site`], with lbd's status read from `lb`.
    pub async fn start_site_lb(
        dir: tempfile::TempDir,
        path: &Path,
        tuning: controller::Tuning,
        lb: Option<appliance::lbwatch::LbSource>,
    ) -> Bootd {
        logs();
        let site = site::load(path).unwrap();
        let mut config = bootd::Config::new(site);
        config.poll = Some(Duration::from_millis(200));
        config.grace = Duration::from_millis(300);
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let https = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let api = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (ha, aa) = (http.local_addr().unwrap(), api.local_addr().unwrap());
        let app = bootd::prepare(&config, true).unwrap();
        let ca = app.tls.as_ref().unwrap().ca_pem.clone();
        let shutdown = CancellationToken::new();
        let sockets = appliance::BootSockets {
            boot: bootd::Sockets::http_only(http, Some(https)),
            api: Some(api),
        };
        let task = tokio::spawn(appliance::run_boot(
            Arc::clone(&app),
            config,
            sockets,
            tuning,
            lb,
            shutdown.clone(),
        ));
        let client = Api::new(
            controller::providers::Http::with_ca(Duration::from_secs(10), ca.as_bytes()).unwrap(),
            aa,
            None,
        );
        Bootd {
            app,
            api: aa,
            http: ha,
            dir,
            client,
            shutdown,
            task: Some(task),
        }
    }

    /// A plain HTTP GET on bootd's boot server (what a node does): status
    /// and body.
    pub async fn boot(&self, path: &str) -> (u16, String) {
        plain_get(&format!("http://{}{path}", self.http)).await
    }

    pub async fn boot_get(&self, path: &str) -> u16 {
        self.boot(path).await.0
    }

    pub async fn boot_body(&self, path: &str) -> String {
        self.boot(path).await.1
    }

    pub async fn metrics(&self) -> String {
        self.boot_body("/metrics").await
    }

    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(t) = self.task.take() {
            t.await.unwrap().unwrap();
        }
    }
}

pub fn equinix_node(name: &str, ip: &str, mac: &str) -> Value {
    json!({
        "name": name, "role": "worker", "macs": [mac], "ip": ip, "kernelArgs": ["console=ttyS0"],
        "provider": { "equinix": { "metro": "sv", "plan": "c3.small.x86", "alwaysPxe": true, "hardwareReservationId": "next-available" } }
    })
}

pub fn powervs_node(name: &str, ip: &str, mac: &str) -> Value {
    json!({
        "name": name, "role": "worker", "macs": [mac], "ip": ip, "arch": "ppc64le", "firmware": "ieee1275",
        "provider": { "powervs": { "imageID": "rhcos-417", "processors": 0.5, "memory": 16, "procType": "shared", "sysType": "s922", "networkID": "net-7", "metadataService": true } }
    })
}

pub fn cond<'a>(v: &'a Value, t: &str) -> &'a Value {
    v["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == t)
        .unwrap()
}

pub fn phase(v: &Value) -> &str {
    v["phase"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_missing_or_wrong_token_gets_a_generic_401() {
    let f = Fake::start().await;
    let b = Bootd::start(&f.url(), &f.url(), &f.url()).await;
    let (st, v) = b.call_as(None, "GET", "/healthz", None).await;
    assert_eq!(
        (st, v["status"].as_str()),
        (200, Some("ok")),
        "liveness needs no token"
    );
    let (missing, body1) = b.call_as(None, "GET", "/v1/nodes", None).await;
    let (wrong, body2) = b
        .call_as(Some("api-token-for-tests-0c9"), "GET", "/v1/nodes", None)
        .await;
    let (wrong2, body3) = b
        .call_as(
            Some("nope"),
            "POST",
            "/v1/nodes",
            Some(equinix_node("x", "10.77.0.40", "52:54:00:77:00:40")),
        )
        .await;
    assert_eq!((missing, wrong, wrong2), (401, 401, 401));
    assert_eq!(body1, json!({ "error": "unauthorized" }));
    assert_eq!(
        body1, body2,
        "missing and wrong tokens are indistinguishable"
    );
    assert_eq!(body1, body3);
    assert_eq!(f.st().creates, 0, "a refused request creates nothing");
    let (ok, v) = b.call("GET", "/v1/nodes", None).await;
    assert_eq!(ok, 200);
    assert_eq!(
        v["nodes"].as_array().unwrap().len(),
        7,
        "the lab site's nodes"
    );
    assert!(b
        .metrics()
        .await
        .contains("bootd_api_denials_total{reason=\"wrong\"} 2"));
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equinix_node_lifecycle_create_boot_ready_delete() {
    let f = Fake::start().await;
    let b = Bootd::start(&f.url(), &f.url(), &f.url()).await;
    let (st, v) = b
        .create(equinix_node("worker-3", "10.77.0.23", "52:54:00:77:00:23"))
        .await;
    assert_eq!(st, 201, "{v:#}");
    assert_eq!(v["origin"], "api");
    // Exported to the overlay at once, and served by this bootd.
    let overlay = std::fs::read_to_string(b.dir.path().join("state/nodes.yaml")).unwrap();
    assert!(
        overlay.contains("worker-3") && overlay.contains("10.77.0.23"),
        "{overlay}"
    );
    assert!(
        site::load(&b.dir.path().join("site.yaml"))
            .unwrap()
            .node("worker-3")
            .is_some(),
        "every daemon loading the site sees it"
    );
    assert!(b.app.live.load().site.node("worker-3").is_some());

    let v = b
        .wait_node("worker-3", 20, |_, v| {
            cond(v, "Provisioned")["status"] == "True"
        })
        .await;
    assert_eq!(v["machine"]["provider"], "equinix");
    assert_eq!(
        v["machine"]["addresses"],
        json!(["147.75.1.2", "10.70.1.2"])
    );
    assert_eq!(phase(&v), "Provisioned");
    {
        let s = f.st();
        assert_eq!(s.devices.len(), 1);
        let d = s.devices.values().next().unwrap();
        // The script URL carries a provider token (the machine's iPXE asks
        // before the provider has said which address the machine has).
        let url = d["ipxe_script_url"].as_str().unwrap();
        let prefix = format!(
            "{}/ipxe/worker-3.ipxe?token=",
            b.app.live.load().site.host.http.url
        );
        let tok = url.strip_prefix(&prefix).unwrap_or_else(|| panic!("{url}"));
        // Issued for the node as it is now (its epoch).
        let snap = b.app.live.load();
        let subject = bootd::token::subject_of(snap.site.node("worker-3").unwrap());
        assert_eq!(
            b.app
                .key
                .verify(&subject, tok, std::time::SystemTime::now())
                .unwrap()
                .scope,
            bootd::token::Scope::Provider
        );
        assert_eq!(d["always_pxe"], true);
        // Owner, node, and the create's intent (module `controller::fence`).
        let tags = d["tags"].as_array().unwrap();
        assert_eq!(
            tags[..2],
            [
                json!("kubernetes.io/cluster/lab:owned"),
                json!("bootd-node:worker-3")
            ]
        );
        assert!(
            tags.len() == 3 && tags[2].as_str().unwrap().starts_with("bootd-intent:"),
            "{tags:?}"
        );
        let ud: Value = serde_json::from_str(d["userdata"].as_str().unwrap()).unwrap();
        let src = ud["ignition"]["config"]["merge"][0]["source"]
            .as_str()
            .unwrap();
        assert!(
            src.starts_with("https://") && src.contains("/ignition/worker-3?token="),
            "{src}"
        );
        assert!(
            ud["ignition"]["security"]["tls"]["certificateAuthorities"][0]["source"]
                .as_str()
                .unwrap()
                .starts_with("data:")
        );
    }
    // The machine boots: its script, then its Ignition (with the token from userdata).
    assert_eq!(b.boot_get("/ipxe/worker-3.ipxe").await, 200);
    let v = b
        .wait_node("worker-3", 10, |_, v| {
            cond(v, "NetworkBooted")["status"] == "True"
        })
        .await;
    assert_eq!(cond(&v, "NetworkBooted")["reason"], "IPXEScriptServed");
    assert_ne!(phase(&v), "Ready");
    let tok = b.app.key.issue(
        &bootd::token::subject_of(b.app.live.load().site.node("worker-3").unwrap()),
        bootd::token::Scope::Script,
        std::time::SystemTime::now(),
        Duration::from_secs(60),
    );
    assert_eq!(
        b.boot_get(&format!("/ignition/worker-3?token={tok}")).await,
        200
    );
    let v = b
        .wait_node("worker-3", 10, |_, v| phase(v) == "Ready")
        .await;
    for c in ["Provisioned", "NetworkBooted", "IgnitionServed", "Ready"] {
        assert_eq!(cond(&v, c)["status"], "True", "{c}: {v:#}");
        assert!(cond(&v, c)["lastTransitionTime"]
            .as_str()
            .unwrap()
            .ends_with('Z'));
    }
    // That fetch came from 127.0.0.1, not from the machine's addresses: a
    // warning condition on the node, with the address. The same token
    // again is refused and raises IgnitionTokenReused.
    let has = |v: &Value, t: &str| {
        v["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == t && c["status"] == "True"))
    };
    let v = b
        .wait_node("worker-3", 10, |_, v| has(v, "IgnitionFromOtherAddress"))
        .await;
    let other = &cond(&v, "IgnitionFromOtherAddress");
    assert!(
        other["message"].as_str().unwrap().contains("127.0.0.1"),
        "{other}"
    );
    assert_eq!(
        b.boot_get(&format!("/ignition/worker-3?token={tok}")).await,
        404
    );
    let v = b
        .wait_node("worker-3", 10, |_, v| has(v, "IgnitionTokenReused"))
        .await;
    assert_eq!(
        cond(&v, "IgnitionTokenReused")["reason"],
        "SpentTokenPresented"
    );
    let (_, ev) = b.call("GET", "/v1/nodes/worker-3/events", None).await;
    let kinds: Vec<&str> = ev["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    for k in ["api", "provider", "ipxe", "ignition"] {
        assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
    }
    // Idempotent: the same create again is 200 with the same node, no second machine.
    let (st, _) = b
        .create(equinix_node("worker-3", "10.77.0.23", "52:54:00:77:00:23"))
        .await;
    assert_eq!(st, 200);
    let (st, _) = b
        .create(equinix_node("worker-3", "10.77.0.24", "52:54:00:77:00:23"))
        .await;
    assert_eq!(st, 409, "same name, different spec");
    assert_eq!(f.st().creates, 1);

    let (st, _) = b.call("DELETE", "/v1/nodes/worker-3", None).await;
    assert_eq!(st, 202);
    b.wait_node("worker-3", 20, |st, _| st == 404).await;
    assert_eq!(f.live_devices(), 0, "machine deleted");
    let overlay = std::fs::read_to_string(b.dir.path().join("state/nodes.yaml")).unwrap();
    assert!(!overlay.contains("worker-3"), "{overlay}");
    assert!(b.app.live.load().site.node("worker-3").is_none());
    let (st, _) = b.call("DELETE", "/v1/nodes/master-0", None).await;
    assert_eq!(st, 409, "site nodes are not deleted through the API");
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn powervs_node_lifecycle_with_a_cached_iam_token() {
    let f = Fake::start().await;
    let b = Bootd::start(&f.url(), &f.url(), &f.url()).await;
    let (st, v) = b
        .create(powervs_node("p9-1", "10.77.0.31", "52:54:00:77:00:31"))
        .await;
    assert_eq!(st, 201, "{v:#}");
    assert_eq!(v["bootKind"], "Image");
    let v = b
        .wait_node("p9-1", 20, |_, v| {
            cond(v, "Provisioned")["status"] == "True"
        })
        .await;
    assert_eq!(v["machine"]["provider"], "powervs");
    let user_data = {
        let s = f.st();
        let i = s.instances.values().next().unwrap();
        assert_eq!(i["serverName"], "lab-p9-1");
        assert_eq!(i["networkIDs"], json!(["net-7"]));
        assert_eq!(i["networks"][0]["ipAddress"], "10.77.0.31");
        s.user_data["lab-p9-1"].clone()
    };
    // An image-booted node: no network boot is waited for.
    let v = b.wait_node("p9-1", 10, |_, v| phase(v) == "Booting").await;
    assert_eq!(cond(&v, "BootKind")["reason"], "Image");
    assert_eq!(cond(&v, "NetworkBooted")["reason"], "NotApplicable");
    assert_eq!(cond(&v, "Ready")["reason"], "WaitingForIgnition");
    let (_, status) = b.call("GET", "/v1/nodes", None).await;
    assert!(status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n["name"] == "p9-1" && n["bootKind"] == "Image"));
    // What the instance's image does: the pointer config from its user
    // data, then the config it points at.
    use base64::Engine as _;
    let pointer: Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(&user_data)
            .unwrap(),
    )
    .unwrap();
    let src = pointer["ignition"]["config"]["merge"][0]["source"]
        .as_str()
        .unwrap();
    let path = &src[src.find("/ignition/").unwrap()..];
    assert!(path.starts_with("/ignition/p9-1?token="), "{src}");
    assert_eq!(b.boot_get(path).await, 200);
    let v = b.wait_node("p9-1", 10, |_, v| phase(v) == "Ready").await;
    assert_eq!(cond(&v, "Ready")["status"], "True");
    assert_eq!(
        cond(&v, "Ready")["message"],
        "booted its image and fetched its Ignition"
    );
    let page = b.boot_body("/status/timeline.json").await;
    let page: Value = serde_json::from_str(&page).unwrap();
    assert!(
        page["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["node"] == "p9-1" && n["boot"] == "image"),
        "{page:#}"
    );
    let (st, _) = b.call("DELETE", "/v1/nodes/p9-1", None).await;
    assert_eq!(st, 202);
    b.wait_node("p9-1", 20, |st, _| st == 404).await;
    assert_eq!(f.live_instances(), 0);
    assert_eq!(
        f.st().iam_calls,
        1,
        "the IAM token is cached until it expires"
    );
    assert_eq!(f.st().creates, 1);
    b.stop().await;
}

/// An image that boots but never follows the pointer in its user data
/// fails the node with exactly that, not a generic timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_that_never_fetches_its_ignition_fails_saying_so() {
    let f = Fake::start().await;
    let mut t = tuning();
    t.deadline = Some(Duration::from_secs(2));
    let b = Bootd::start_tuned(&f.url(), &f.url(), &f.url(), t).await;
    let (st, v) = b
        .create(powervs_node("p9-2", "10.77.0.32", "52:54:00:77:00:32"))
        .await;
    assert_eq!(st, 201, "{v:#}");
    let v = b.wait_node("p9-2", 20, |_, v| phase(v) == "Failed").await;
    let ign = cond(&v, "IgnitionServed");
    assert_eq!(ign["status"], "False");
    assert_eq!(ign["reason"], "NeverFetched");
    let msg = v["message"].as_str().unwrap();
    assert!(
        msg.contains("active but its image never fetched its Ignition")
            && msg.contains("pointer config in its user data"),
        "{msg}"
    );
    assert!(!msg.contains("not Ready within"), "{msg}");
    b.stop().await;
}

/// The conditions follow bootd's timeline, the one record of node events:
/// a GRUB config over HTTP, or a DHCP ACK joined to the node by its MAC,
/// makes a Power node NetworkBooted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditions_follow_the_timeline() {
    use bootd::timeline::{Phase, Raw, Subject};
    let f = Fake::start().await;
    let b = Bootd::start(&f.url(), &f.url(), &f.url()).await;
    let (st, v) = b
        .create(powervs_node("p9-2", "10.77.0.32", "52:54:00:77:00:32"))
        .await;
    assert_eq!(st, 201, "{v:#}");
    b.wait_node("p9-2", 20, |_, v| {
        cond(v, "Provisioned")["status"] == "True"
    })
    .await;
    // The machine's MAC as its provider reports it is the node's now.
    let mac = b.app.live.load().site.node("p9-2").unwrap().macs[0].to_string();
    assert_ne!(
        mac, "52:54:00:77:00:32",
        "the provider's MAC replaced the typed one"
    );
    assert_eq!(
        b.boot_get(&format!("/grub/grub.cfg-01-{}", mac.replace(':', "-")))
            .await,
        200
    );
    let v = b
        .wait_node("p9-2", 10, |_, v| {
            cond(v, "NetworkBooted")["status"] == "True"
        })
        .await;
    assert_eq!(cond(&v, "NetworkBooted")["reason"], "GRUBConfigServed");
    let (_, ev) = b.call("GET", "/v1/nodes/p9-2/events", None).await;
    assert!(
        ev["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "grub" && e["message"] == "GRUB config served over HTTP"),
        "{ev:#}"
    );
    // A DHCP ACK the timeline joins to the node counts as a network boot too.
    let (st, v) = b
        .create(powervs_node("p9-3", "10.77.0.33", "52:54:00:77:00:33"))
        .await;
    assert_eq!(st, 201, "{v:#}");
    b.wait_node("p9-3", 20, |_, v| {
        cond(v, "Provisioned")["status"] == "True"
    })
    .await;
    let mac = b.app.live.load().site.node("p9-3").unwrap().macs[0];
    b.app.timeline.record(Raw::new(
        Subject::mac(mac),
        Phase::Dhcp,
        "ack",
        "ACK 10.77.0.33",
    ));
    let v = b
        .wait_node("p9-3", 10, |_, v| {
            cond(v, "NetworkBooted")["status"] == "True"
        })
        .await;
    assert_eq!(cond(&v, "NetworkBooted")["reason"], "DHCPLease");
    b.stop().await;
}

/// A provider-given address another node holds is a condition on the new
/// node, and nothing is overwritten; a node without a provider must say its
/// address and MACs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_address_held_by_another_node_is_a_conflict() {
    let f = Fake::start().await;
    f.st().assign.push_back("10.77.0.11".into());
    let b = Bootd::start(&f.url(), &f.url(), &f.url()).await;
    let mut n = powervs_node("p9-9", "", "");
    let o = n.as_object_mut().unwrap();
    o.remove("ip");
    o.remove("macs");
    let (st, v) = b.create(n).await;
    assert_eq!(st, 201, "{v:#}");
    let v = b
        .wait_node("p9-9", 20, |_, v| {
            v["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["type"] == "AddressesRecorded")
        })
        .await;
    let c = cond(&v, "AddressesRecorded");
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("False"), Some("Conflict")),
        "{v:#}"
    );
    let msg = c["message"].as_str().unwrap();
    assert!(
        msg.contains("ip 10.77.0.11") && msg.contains("10.77.0.11"),
        "{msg}"
    );
    let snap = b.app.live.load();
    assert_eq!(
        snap.site.node("master-0").unwrap().ip().to_string(),
        "10.77.0.11",
        "not overwritten"
    );
    assert!(
        snap.site.node("p9-9").is_none(),
        "not served with a conflict"
    );
    let (st, v) = b
        .create(json!({ "name": "bare-1", "role": "worker", "live": true }))
        .await;
    assert_eq!(st, 422, "{v:#}");
    assert!(
        v["problems"][0]
            .as_str()
            .unwrap()
            .contains("only a provider can assign them"),
        "{v:#}"
    );
    // A machine brought up by other means names a disk or says live: true.
    let bare = json!({"name": "bare-2", "role": "worker", "ip": "10.77.0.29", "macs": ["52:54:00:77:00:c2"]});
    for extra in [json!({}), json!({"live": false})] {
        let mut n = bare.clone();
        n.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (st, v) = b.create(n).await;
        assert_eq!(st, 422, "{v:#}");
        assert!(
            v["problems"][0]
                .as_str()
                .unwrap()
                .starts_with("live: the node network-boots and names no disk to install to"),
            "{v:#}"
        );
    }
    let mut n = bare.clone();
    n["rootDeviceHints"] = json!({"deviceName": "/dev/sda"});
    let (st, v) = b.create(n).await;
    assert_eq!(st, 201, "{v:#}");
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn powervs_user_data_over_63_kib_is_refused_clearly() {
    let f = Fake::start().await;
    let b = Bootd::start(&f.url(), &f.url(), &f.url()).await;
    // A pointer config is small; a huge kernel argument list cannot change it,
    // so this checks the limit through the same function the API uses.
    let e = controller::providers::powervs::user_data(&"x".repeat(50_000)).unwrap_err();
    assert!(e.contains("63 KiB") && e.contains("66668"), "{e}");
    let mut n = powervs_node("p9-2", "10.77.0.32", "52:54:00:77:00:32");
    n["provider"]["powervs"]["procType"] = json!("turbo");
    let (st, v) = b.create(n).await;
    assert_eq!(st, 422);
    assert!(
        v["problems"][0].as_str().unwrap().contains("procType"),
        "{v:#}"
    );
    assert_eq!(f.st().creates, 0);
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_nodes_are_refused_with_the_site_s_reasons() {
    let f = Fake::start().await;
    let b = Bootd::start(&f.url(), &f.url(), &f.url()).await;
    let (st, v) = b
        .create(equinix_node("worker-9", "10.77.0.20", "52:54:00:77:00:99"))
        .await;
    assert_eq!(st, 422);
    assert!(
        v["problems"]
            .to_string()
            .contains("duplicate IP 10.77.0.20"),
        "{v:#}"
    );
    let (st, v) = b
        .create(equinix_node("worker-9", "10.99.0.1", "52:54:00:77:00:99"))
        .await;
    assert_eq!(st, 422);
    assert!(
        v["problems"].to_string().contains("outside every network"),
        "{v:#}"
    );
    let mut bad = equinix_node("worker-9", "10.77.0.29", "52:54:00:77:00:99");
    bad["colour"] = json!("red");
    let (st, v) = b.create(bad).await;
    assert_eq!(st, 400);
    assert!(v["error"].as_str().unwrap().contains("colour"), "{v:#}");
    let (st, _) = b
        .create(equinix_node("master-0", "10.77.0.29", "52:54:00:77:00:99"))
        .await;
    assert_eq!(st, 409);
    assert_eq!(f.st().creates, 0);
    assert!(
        !b.dir.path().join("state/nodes.yaml").exists(),
        "nothing exported for refused nodes"
    );
    b.stop().await;
}

/// An API node takes a network config as a site node does: a bond and a
/// VLAN in NMState are carried into the overlay and rendered into its
/// Ignition; one outside the subset is refused with the key and reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_nodes_take_an_nmstate_network_config() {
    let f = Fake::start().await;
    let b = Bootd::start(&f.url(), &f.url(), &f.url()).await;
    let cfg = json!({
        "interfaces": [
            {"name": "bond0", "type": "bond", "state": "up",
             "link-aggregation": {"mode": "active-backup", "options": {"miimon": "100"}, "port": ["eno1", "eno2"]},
             "ipv4": {"enabled": false}, "ipv6": {"enabled": false}},
            {"name": "bond0.77", "type": "vlan", "vlan": {"base-iface": "bond0", "id": 77},
             "ipv4": {"enabled": true, "address": [{"ip": "10.77.0.29", "prefix-length": 24}]}}
        ],
        "routes": {"config": [{"destination": "0.0.0.0/0", "next-hop-address": "10.77.0.1", "next-hop-interface": "bond0.77"}]}
    });
    let mut bad = equinix_node("worker-9", "10.77.0.29", "52:54:00:77:00:99");
    let mut wrong = cfg.clone();
    wrong["interfaces"][1]["vlan"]["id"] = json!(78);
    bad["networkConfig"] = wrong;
    let (st, v) = b.create(bad).await;
    assert_eq!(st, 422, "{v:#}");
    assert!(
        v["problems"]
            .to_string()
            .contains("networkConfig.interfaces[1].name")
            && v["problems"]
                .to_string()
                .contains("does not end in its VLAN id 78"),
        "{v:#}"
    );
    let mut good = equinix_node("worker-9", "10.77.0.29", "52:54:00:77:00:99");
    good["networkConfig"] = cfg;
    let (st, v) = b.create(good).await;
    assert_eq!(st, 201, "{v:#}");
    let overlay = std::fs::read_to_string(b.dir.path().join("state/nodes.yaml")).unwrap();
    assert!(overlay.contains("link-aggregation"), "{overlay}");
    let live = b.app.live.load();
    let node = live.site.node("worker-9").unwrap();
    let hn = node.host_network.as_ref().expect("the node's host network");
    let names: Vec<&str> = hn.interfaces.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["eno1", "eno2", "bond0", "bond0.77"]);
    let ign = bootd::render::ignition::node_config(&live.site, node).unwrap();
    assert!(
        ign.to_string()
            .contains("/etc/NetworkManager/system-connections/bond0.77.nmconnection"),
        "{ign}"
    );
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_are_retried_honouring_retry_after() {
    let f = Fake::start().await;
    f.st().faults.extend([
        Fault::Status(429, Some(1)),
        Fault::Status(500, None),
        Fault::Status(503, None),
        Fault::Truncated,
        Fault::Hang(Duration::from_secs(2)),
    ]);
    let b = Bootd::start(&f.url(), &f.url(), &f.url()).await;
    let t0 = Instant::now();
    let (st, _) = b
        .create(equinix_node("worker-4", "10.77.0.24", "52:54:00:77:00:24"))
        .await;
    assert_eq!(st, 201);
    let v = b
        .wait_node("worker-4", 30, |_, v| {
            cond(v, "Provisioned")["status"] == "True"
        })
        .await;
    assert_eq!(phase(&v), "Provisioned");
    assert!(t0.elapsed() >= Duration::from_secs(1));
    {
        let s = f.st();
        assert!(s.faults.is_empty(), "every fault was hit");
        assert_eq!(s.devices.len(), 1, "one machine despite the retries");
        // The request after the 429 came at least Retry-After (1 s) later.
        let gap = s.log[1].0 - s.log[0].0;
        assert!(
            gap >= Duration::from_millis(990),
            "Retry-After not honoured: {gap:?}"
        );
    }
    let m = b.metrics().await;
    assert!(
        m.contains("bootd_provider_errors_total{kind=\"transient\"} 5"),
        "{m}"
    );
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_fails_the_node_clearly_and_secrets_stay_out() {
    let f = Fake::start().await;
    f.st().refuse_create = Some(422);
    let b = Bootd::start(&f.url(), &f.url(), &f.url()).await;
    let (st, _) = b
        .create(equinix_node("worker-5", "10.77.0.25", "52:54:00:77:00:25"))
        .await;
    assert_eq!(st, 201);
    let v = b
        .wait_node("worker-5", 20, |_, v| phase(v) == "Failed")
        .await;
    let msg = v["message"].as_str().unwrap();
    assert_eq!(msg, "Equinix Metal: create device: HTTP 422");
    assert_eq!(cond(&v, "Ready")["reason"], "Failed");
    // Power VS too (IAM exchange, then a create that goes through).
    let (st, _) = b
        .create(powervs_node("p9-3", "10.77.0.33", "52:54:00:77:00:33"))
        .await;
    assert_eq!(st, 201);
    b.wait_node("p9-3", 20, |_, v| {
        cond(v, "Provisioned")["status"] == "True"
    })
    .await;
    // The canary keys never show: not in API answers, metrics or logs.
    let (_, all) = b.call("GET", "/v1/nodes", None).await;
    let metrics = b.metrics().await;
    let logs = String::from_utf8_lossy(&logs().lock().unwrap()).to_string();
    assert!(
        logs.contains("Equinix Metal: create device: refused"),
        "the refusal is logged"
    );
    for canary in [fake::EQUINIX_KEY, fake::POWERVS_KEY, "iam-access-token-1"] {
        assert!(!all.to_string().contains(canary), "{canary} in API answer");
        assert!(!metrics.contains(canary), "{canary} in metrics");
        assert!(!logs.contains(canary), "{canary} in logs");
    }
    assert!(!logs.contains(API_TOKEN), "the API token in logs");
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_parallel_creates_make_one_machine() {
    let f = Fake::start().await;
    let b = Arc::new(Bootd::start(&f.url(), &f.url(), &f.url()).await);
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let b = Arc::clone(&b);
        tasks.push(tokio::spawn(async move {
            b.create(equinix_node("worker-6", "10.77.0.26", "52:54:00:77:00:26"))
                .await
                .0
        }));
    }
    let mut codes = Vec::new();
    for t in tasks {
        codes.push(t.await.unwrap());
    }
    assert_eq!(codes.iter().filter(|c| **c == 201).count(), 1, "{codes:?}");
    assert_eq!(codes.iter().filter(|c| **c == 200).count(), 99, "{codes:?}");
    b.wait_node("worker-6", 20, |_, v| {
        cond(v, "Provisioned")["status"] == "True"
    })
    .await;
    assert_eq!(f.st().creates, 1);
    assert_eq!(f.live_devices(), 1);
    Arc::into_inner(b).unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_bootstrap_complete_is_recorded_once() {
    let f = Fake::start().await;
    let b = Bootd::start(&f.url(), &f.url(), &f.url()).await;
    let (_, v) = b.call("GET", "/v1/cluster", None).await;
    assert_eq!(v["bootstrapComplete"]["complete"], false);
    let (st, first) = b
        .call("POST", "/v1/cluster/bootstrap-complete", Some(json!({})))
        .await;
    assert_eq!(st, 200);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (_, again) = b
        .call("POST", "/v1/cluster/bootstrap-complete", Some(json!({})))
        .await;
    assert_eq!(first["time"], again["time"], "the first time is kept");
    let (_, v) = b.call("GET", "/v1/cluster", None).await;
    assert_eq!(v["bootstrapComplete"]["complete"], true);
    let file: Value = serde_json::from_slice(
        &std::fs::read(b.dir.path().join("state/bootstrap-complete.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(file["complete"], true);
    b.stop().await;
}

/// A real bootd process, for SIGKILL (killed when dropped).
struct Proc {
    child: Process,
    log: PathBuf,
}

/// The API of bootd `p` on `api_port`, trusting the site CA it wrote to
/// `ca_path`, once it answers /healthz (at most 20 s).
async fn api_client(ca_path: &Path, api_port: u16, p: &Proc) -> Api {
    let mut client = None;
    until(with_log("bootd did not start", &p.log), 20, async || {
        let Ok(ca) = std::fs::read(ca_path) else {
            return false;
        };
        let c = controller::providers::Http::with_ca(Duration::from_secs(5), &ca).unwrap();
        let req = http::Request::get(format!("https://localhost:{api_port}/healthz"))
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap();
        let up = c.send(req, "healthz").await.is_ok();
        client = up.then_some(c);
        up
    })
    .await;
    let addr = format!("127.0.0.1:{api_port}").parse().unwrap();
    Api::new(client.unwrap(), addr, Some(&p.log))
}

/// `bootd --site SITE ARGS...`: its exit code and what it printed.
pub(crate) fn bootd_cli(site: &Path, args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bootd"))
        .args(["--site", site.to_str().unwrap()])
        .args(args)
        .output()
        .unwrap();
    (out.status.code().unwrap_or(-1), output_text(&out))
}

impl Proc {
    fn start(site: &Path, n: u32) -> Proc {
        Self::start_on(site, n, None)
    }
    /// [`Proc::start`] with the process's CPUs limited to `cpus` (taskset's
    /// list): one CPU makes bootd's runtime a one-thread one.
    fn start_on(site: &Path, n: u32, cpus: Option<&str>) -> Proc {
        let dir = site.parent().unwrap();
        // Started as root, bootd serves as nobody: it must reach its files.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let log = dir.join(format!("bootd-{n}.log"));
        let bin = env!("CARGO_BIN_EXE_bootd");
        let mut cmd = match cpus {
            Some(c) => {
                let mut t = std::process::Command::new("taskset");
                t.args(["-c", c, bin]);
                t
            }
            None => std::process::Command::new(bin),
        };
        let child = cmd
            .args(["--site", site.to_str().unwrap(), "run"])
            .env("RUST_LOG", "debug,hyper=info,hyper_util=info,rustls=info")
            .stdout(std::fs::File::create(dir.join(format!("bootd-{n}.out"))).unwrap())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Proc {
            child: Process::new(child),
            log,
        }
    }
    /// Its exit status, if it exits within `limit`.
    fn wait(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        self.child.wait_exit(limit)
    }

    fn kill9(&mut self) {
        self.child.kill();
    }
}

/// The lab site for a real bootd process in `dir`: API on `api_port`,
/// HTTP(S) on free loopback ports, no DHCP or TFTP; `edit` changes the text.
fn process_site(dir: &Path, f: &Fake, api_port: u16, edit: impl Fn(String) -> String) -> PathBuf {
    let site = write_site(
        dir,
        &f.url(),
        &f.url(),
        &f.url(),
        &format!("127.0.0.1:{api_port}"),
    );
    let text = std::fs::read_to_string(&site)
        .unwrap()
        .replace("listen: 0.0.0.0:8080", &format!("listen: 127.0.0.1:{}", free_port()))
        .replace("listen: 0.0.0.0:8443", &format!("listen: 127.0.0.1:{}", free_port()))
        .replace("  dhcp:\n    interface: br0                # the lab bridge; broadcasts elsewhere are never seen\n    serverAddress: 10.77.0.1\n    leaseTime: 1h\n", "")
        .replace("  tftp:\n    listen: 0.0.0.0:69\n    root: tftp   # tests/lab fills it with iPXE and GRUB binaries\n", "");
    assert!(
        !text.contains("dhcp:") && !text.contains("0.0.0.0"),
        "{text}"
    );
    std::fs::write(&site, edit(text)).unwrap();
    site
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_between_intent_and_reply_leaves_no_duplicate_and_no_orphan() {
    let f = Fake::start().await;
    let hold = Arc::new(tokio::sync::Notify::new());
    f.st().hold_create = Some(Arc::clone(&hold));
    let dir = tempfile::tempdir().unwrap();
    let api_port = free_port();
    let site = process_site(dir.path(), &f, api_port, |t| t);
    let mut p1 = Proc::start(&site, 1);
    let api = api_client(&dir.path().join("state/ca.pem"), api_port, &p1).await;
    let (st, v) = api
        .create(equinix_node("worker-7", "10.77.0.27", "52:54:00:77:00:27"))
        .await;
    assert_eq!(st, 201, "{v:#}");
    // The provider made the machine but has not answered: kill bootd now.
    until("a create reached the provider", 20, async || {
        f.st().creates > 0
    })
    .await;
    p1.kill9();
    let db = rusqlite::Connection::open(dir.path().join("state/controller.db")).unwrap();
    let open: i64 =
        db.query_row("SELECT count(*) FROM intents WHERE node='worker-7' AND op='create' AND done_at IS NULL", [], |r| r.get(0)).unwrap();
    assert_eq!(
        open, 1,
        "the intent was recorded before the call and is still open"
    );
    let res: i64 = db
        .query_row(
            "SELECT count(*) FROM resources WHERE node='worker-7'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(res, 0, "the reply never arrived");
    drop(db);
    f.st().hold_create = None;
    hold.notify_waiters();

    let p2 = Proc::start(&site, 2);
    let api = api.logging(&p2.log);
    api.wait_node("worker-7", 30, |st, v| {
        st == 200 && cond(v, "Provisioned")["status"] == "True"
    })
    .await;
    assert_eq!(f.st().creates, 1, "no duplicate");
    assert_eq!(f.live_devices(), 1);
    let log2 = std::fs::read_to_string(&p2.log).unwrap();
    assert!(
        log2.contains("how=\"adopted\"") || log2.contains("how=adopted"),
        "the restarted bootd adopted the machine: {log2}"
    );
    // Delete, kill again mid-way, and the machine still goes away: no orphan.
    let (st, _) = api.call("DELETE", "/v1/nodes/worker-7", None).await;
    assert_eq!(st, 202);
    api.wait_node("worker-7", 30, |st, _| st == 404).await;
    assert_eq!(f.live_devices(), 0, "no orphan");
    // The canaries are not in the process's argv or environment, nor its logs.
    let pid = p2.child.id();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    for canary in [fake::EQUINIX_KEY, fake::POWERVS_KEY, API_TOKEN] {
        let c = canary.as_bytes();
        assert!(
            !cmdline.windows(c.len()).any(|w| w == c),
            "{canary} in argv"
        );
        assert!(
            !environ.windows(c.len()).any(|w| w == c),
            "{canary} in environment"
        );
        for l in [&p1.log, &p2.log] {
            assert!(
                !std::fs::read_to_string(l).unwrap().contains(canary),
                "{canary} in {}",
                l.display()
            );
        }
    }
    drop(p2);
}

/// bootd killed with SIGKILL while the bootstrap machine's delete is at the
/// provider (sent, not answered): the restarted bootd resumes the teardown
/// and finishes it without a second delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_in_the_middle_of_bootstrap_teardown_resumes_without_a_second_delete() {
    let f = Fake::start().await;
    let hold = Arc::new(tokio::sync::Notify::new());
    f.st().hold_delete = Some(Arc::clone(&hold));
    let dir = tempfile::tempdir().unwrap();
    let api_port = free_port();
    let site = process_site(dir.path(), &f, api_port, |t| {
        // No site bootstrap node (it is made through the API), and no lbd
        // here: the drain is reported as not possible and does not hold the
        // delete up.
        let t = t.replace("  - { name: bootstrap, role: bootstrap, live: true, macs: [\"52:54:00:77:00:10\"], ip: 10.77.0.10, kernelArgs: [console=ttyS0], fetchFrom: anyAddress }\n", "");
        assert!(!t.contains("name: bootstrap"), "{t}");
        format!("{t}\nlb:\n  adminListen: off\n")
    });
    let mut p1 = Proc::start(&site, 1);
    let api = api_client(&dir.path().join("state/ca.pem"), api_port, &p1).await;
    let mut n = equinix_node("bootstrap", "10.77.0.10", "52:54:00:77:00:10");
    n["role"] = json!("bootstrap");
    let (st, v) = api.create(n).await;
    assert_eq!(st, 201, "{v:#}");
    api.wait_node("bootstrap", 30, |_, v| {
        v["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Provisioned" && c["status"] == "True")
        })
    })
    .await;
    let (st, v) = api
        .call("POST", "/v1/cluster/bootstrap-complete", Some(json!({})))
        .await;
    assert_eq!(st, 200, "{v:#}");
    // The delete reached the provider, which has not answered: kill bootd now.
    until("a delete reached the provider", 30, async || {
        !f.st().deletes.is_empty()
    })
    .await;
    p1.kill9();
    f.st().hold_delete = None;
    hold.notify_waiters();
    let p2 = Proc::start(&site, 2);
    let api = api.logging(&p2.log);
    let cluster = until_ok(with_log("the teardown finished", &p2.log), 30, async || {
        let (st, node) = api.node("bootstrap").await;
        let (_, v) = api.call("GET", "/v1/cluster", None).await;
        let deleted = v["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "BootstrapMachineDeleted" && c["status"] == "True")
        });
        if st == 404 && deleted {
            Ok(v)
        } else {
            Err(format!("{st} {node:#} {v:#}"))
        }
    })
    .await;
    assert_eq!(
        f.st().deletes.len(),
        1,
        "one delete in all: {:?}",
        f.st().deletes
    );
    assert_eq!(f.live_devices(), 0);
    let conds = cluster["conditions"].as_array().unwrap();
    let reason = |t: &str| {
        conds
            .iter()
            .find(|c| c["type"] == t)
            .map(|c| c["reason"].clone())
    };
    assert_eq!(reason("BootstrapIgnitionRevoked"), Some(json!("Revoked")));
    assert_eq!(reason("BootstrapDrained"), Some(json!("NoAdminListen")));
    assert_eq!(reason("BootstrapMachineDeleted"), Some(json!("Deleted")));
    let revoked = std::fs::read_to_string(dir.path().join("state/revoked.json")).unwrap();
    assert!(revoked.contains("bootstrap"), "{revoked}");
}

/// A DHCP lease of 127.0.0.1 for `mac` in `b`'s table (held, or released):
/// a discovery report from the test's loopback counts as from its lease.
pub fn lease_on_loopback(b: &Bootd, mac: &str, active: bool) {
    use dhcp::v4::leases::{Lease, LeaseState};
    b.app.leases.lock().unwrap().apply(Lease {
        mac: mac.into(),
        ip: "127.0.0.1".parse().unwrap(),
        expires: u64::MAX / 2,
        hostname: None,
        state: if active {
            LeaseState::Active
        } else {
            LeaseState::Released
        },
    });
}

/// Discovery through the API: a reported machine is listed, adopted into a
/// node (its MACs, a free address outside the pool, validated as any node),
/// gone from the list, and its next report gets its node's script; an adopt
/// whose MAC another node holds is refused with the site's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovered_machines_are_listed_and_adopted() {
    let (_f, b) = discovery::with_discovery(
        "{ enabled: true }\ninspection: { agents: { x86_64: tools/bootd-agent } }",
    )
    .await;
    // Each report comes from the address leased to its MAC (127.0.0.1 here).
    let lease = |mac: &str, active: bool| lease_on_loopback(&b, mac, active);
    lease("52:54:00:77:00:a1", true);
    let (st, s) = b.boot("/discover?mac=52-54-00-77-00-a1&nic1=52-54-00-77-00-a2&uuid=1b4e28ba-2fa1-11d2-883f-0016d3cca427&buildarch=x86_64").await;
    assert_eq!(st, 200, "{s}");
    lease("52:54:00:77:00:a1", false);
    let (st, _) = b.boot("/discover?mac=52-54-00-77-00-b1").await;
    assert_eq!(st, 403, "not from its lease");
    lease("52:54:00:77:00:b1", true);
    let (st, _) = b.boot("/discover?mac=52-54-00-77-00-b1").await;
    assert_eq!(st, 200);
    let (st, v) = b.call("GET", "/v1/discovered", None).await;
    assert_eq!(st, 200);
    assert_eq!(v["enabled"], true);
    assert_eq!(v["machines"].as_array().unwrap().len(), 2, "{v:#}");
    // An adopt that names no disk and does not say live is refused.
    let (st, v) = b
        .call(
            "POST",
            "/v1/discovered/52:54:00:77:00:b1/adopt",
            Some(json!({"name": "worker-9", "role": "worker"})),
        )
        .await;
    assert_eq!(st, 422, "{v:#}");
    assert!(
        v["problems"][0]
            .as_str()
            .unwrap()
            .starts_with("live: the node network-boots and names no disk"),
        "{v:#}"
    );
    // Another node takes the second machine's MAC: its adopt is refused.
    let (st, _) = b
        .create(json!({"name": "worker-8", "role": "worker", "ip": "10.77.0.28", "macs": ["52:54:00:77:00:b1"], "live": true}))
        .await;
    assert_eq!(st, 201);
    let (st, v) = b
        .call(
            "POST",
            "/v1/discovered/52:54:00:77:00:b1/adopt",
            Some(json!({"name": "worker-9", "role": "worker", "live": true})),
        )
        .await;
    assert_eq!(st, 422, "{v:#}");
    assert!(v["problems"].to_string().contains("duplicate MAC"), "{v:#}");
    // Not by a MAC its report only listed (unverified: whoever listed it
    // need not be that machine)...
    let (st, v) = b
        .call(
            "POST",
            "/v1/discovered/52:54:00:77:00:a2/adopt",
            Some(json!({"name": "worker-7", "role": "worker", "live": true})),
        )
        .await;
    assert_eq!(st, 404, "{v:#}");
    // ...but by the MAC it booted from (percent-encoded, as the CLI sends
    // it), with no address given: the node gets its verified MAC only.
    let (st, v) = b
        .call(
            "POST",
            "/v1/discovered/52%3A54%3A00%3A77%3A00%3Aa1/adopt",
            // Its reports come from 127.0.0.1, not from its address.
            Some(
                json!({"name": "worker-7", "role": "worker", "fetchFrom": "anyAddress",
                        "rootDeviceHints": {"deviceName": "/dev/sda"}}),
            ),
        )
        .await;
    assert_eq!(st, 201, "{v:#}");
    let (_, n) = b.call("GET", "/v1/nodes/worker-7", None).await;
    assert_eq!(n["spec"]["macs"], json!(["52:54:00:77:00:a1"]), "{n:#}");
    assert_eq!(n["spec"]["arch"], "x86_64");
    let ip: std::net::Ipv4Addr = n["spec"]["ip"].as_str().unwrap().parse().unwrap();
    assert!(
        ip.octets()[..3] == [10, 77, 0] && !(200..=250).contains(&ip.octets()[3]),
        "{ip}"
    );
    let (_, v) = b.call("GET", "/v1/discovered", None).await;
    assert_eq!(v["machines"].as_array().unwrap().len(), 1, "{v:#}");
    let (st, _) = b
        .call(
            "POST",
            "/v1/discovered/52:54:00:77:00:a1/adopt",
            Some(json!({"name": "worker-6", "role": "worker", "live": true})),
        )
        .await;
    assert_eq!(st, 404, "adopted already");
    // Its next report: the node's script, which wipes what the machine
    // held (it installs to disk), then reboots to inspect and install.
    let (_, inv) = b.call("GET", "/v1/nodes/worker-7/inventory", None).await;
    assert_eq!(
        inv["nextBoot"],
        json!({"boot": "wipe", "then": "install"}),
        "{inv:#}"
    );
    let (st, s) = b.boot("/discover?mac=52-54-00-77-00-a1").await;
    assert_eq!(st, 200);
    assert!(s.contains("# bootd: worker-7"), "{s}");
    let i = s
        .find("/ignition/worker-7/agent?token=")
        .expect("the agent's config");
    let url = s[i..].split_whitespace().next().unwrap();
    let (st, cfg) = b.boot(url).await;
    assert_eq!(st, 200, "{cfg}");
    let i = cfg.find("wipe --post ").expect("a wipe") + "wipe --post ".len();
    let (report, then) = cfg[i..].split_once(' ').unwrap();
    assert!(then.starts_with("--reboot"), "{cfg}");
    let report = report.replace("http://10.77.0.1:8080", &format!("http://{}", b.http));
    lease("52:54:00:77:00:a1", true);
    let out = std::process::Command::new("curl")
        .args([
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-H",
            "content-type: application/json",
        ])
        .args([
            "--data-binary",
            r#"{"disks":[{"name":"/dev/sda","partitions":2}]}"#,
            &report,
        ])
        .output()
        .unwrap();
    // From the address the machine leased while it was unknown (not its
    // node's reservation): refused, its wipe still ahead. (Its next boot
    // gets the reservation; the wipe report from there is accepted:
    // bmc::a_deleted_bmc_node_is_wiped_before_it_is_powered_off.)
    assert_eq!(String::from_utf8_lossy(&out.stdout), "404");
    let (_, inv) = b.call("GET", "/v1/nodes/worker-7/inventory", None).await;
    assert_eq!(inv["nextBoot"]["boot"], "wipe", "{inv:#}");
    b.stop().await;
}

/// Malformed bodies on every route that takes one: oversized, not JSON,
/// wrong types, unknown fields, deep nesting. Each is refused with a 4xx
/// and a reason, counted by route and status, stores nothing, and the API
/// goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_api_bodies_are_refused_counted_and_change_nothing() {
    let f = Fake::start().await;
    let b = Bootd::start(&f.url(), &f.url(), &f.url()).await;
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n)).into_bytes();
    let node = |extra: &str| {
        format!(r#"{{"name": "worker-9", "role": "worker", "macs": ["52:54:00:77:00:29"], "ip": "10.77.0.29"{extra}}}"#)
            .into_bytes()
    };
    let cases: Vec<(&str, &str, Vec<u8>, u16, &str)> = vec![
        (
            "oversized",
            "/v1/nodes",
            vec![b' '; 65 * 1024],
            413,
            "larger than",
        ),
        ("not JSON", "/v1/nodes", b"{\"name\": ".to_vec(), 400, ""),
        (
            "wrong type",
            "/v1/nodes",
            node(r#", "kernelArgs": "console=ttyS0""#),
            400,
            "kernelArgs",
        ),
        (
            "wrong type (name)",
            "/v1/nodes",
            br#"{"name": 5, "role": "worker"}"#.to_vec(),
            400,
            "",
        ),
        (
            "unknown field",
            "/v1/nodes",
            node(r#", "ipAddress": "10.77.0.29""#),
            400,
            "unknown field `ipAddress`",
        ),
        ("deep nesting", "/v1/nodes", deep(30_000), 400, ""),
        (
            "deep nesting (value)",
            "/v1/nodes",
            node(&format!(
                r#", "kernelArgs": {}"#,
                String::from_utf8(deep(5000)).unwrap()
            )),
            400,
            "",
        ),
        (
            "adopt: not JSON",
            "/v1/discovered/52:54:00:77:00:a9/adopt",
            b"\x00\xff".to_vec(),
            404,
            "",
        ),
        (
            "destroy: wrong type",
            "/v1/cluster/destroy",
            br#"{"provider": 7}"#.to_vec(),
            400,
            "",
        ),
        (
            "destroy: deep nesting",
            "/v1/cluster/destroy",
            deep(30_000),
            400,
            "",
        ),
    ];
    for (what, path, body, want, reason) in &cases {
        let (st, v) = b.call_raw("POST", path, body.clone()).await;
        assert_eq!(st, *want, "{what}: {v:#}");
        if *want != 404 {
            let msg = v["error"]
                .as_str()
                .unwrap_or_else(|| panic!("{what}: no reason: {v:#}"));
            assert!(!msg.is_empty() && msg.contains(reason), "{what}: {msg}");
        }
    }
    // Nothing was stored or served, and the API still answers.
    let (st, v) = b.call("GET", "/v1/nodes/worker-9", None).await;
    assert_eq!(st, 404, "{v:#}");
    assert!(b.app.live.load().site.node("worker-9").is_none());
    let (st, _) = b.call("GET", "/v1/nodes", None).await;
    assert_eq!(st, 200);
    // Counted by route and status.
    let m = b.app.metrics.encode();
    for (route, status, n) in [("nodes", 413, 1), ("nodes", 400, 6)] {
        let line = format!("bootd_api_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}");
        assert!(m.contains(&line), "{line} not in\n{m}");
    }
    b.stop().await;
}

/// A TLS connection to the API trusting bootd's CA.
async fn api_tls(b: &Bootd) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let ca = &b.app.tls.as_ref().unwrap().ca_pem;
    testkit::net::tls_client(ca, b.api, "localhost").await
}

/// The API bounds what one client can hold: a body that never finishes is
/// answered 408 after `body_timeout` and the connection closed; past the
/// per-source cap (256 by default, 32 here) the next connection is closed
/// at accept, counted, and the API still answers once they go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_bodies_and_connection_floods_are_bounded_on_the_api() {
    use tokio::io::AsyncReadExt;
    let f = Fake::start().await;
    let b = Bootd::start_tuned(
        &f.url(),
        &f.url(),
        &f.url(),
        controller::Tuning {
            connections: runtime::conns::ConnLimits {
                max: 64,
                per_source: 32,
            },
            ..tuning()
        },
    )
    .await;
    // Headers, 10 of the 100 body bytes announced, then nothing.
    let mut s = api_tls(&b).await;
    let head = format!(
        "POST /v1/nodes HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {API_TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"name\": "
    );
    let t0 = Instant::now();
    let reply = testkit::net::exchange(&mut s, head.as_bytes()).await;
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    assert!(
        reply.contains("request body not received within 1 s"),
        "{reply}"
    );
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    // 40 idle connections from one address: 32 held, the rest closed at once.
    let mut held = Vec::new();
    for _ in 0..40 {
        held.push(tokio::net::TcpStream::connect(b.api).await.unwrap());
    }
    let mut closed = 0;
    for c in held.iter_mut() {
        let mut buf = [0u8; 1];
        if let Ok(Ok(0)) = tokio::time::timeout(Duration::from_millis(100), c.read(&mut buf)).await
        {
            closed += 1;
        }
    }
    assert_eq!(closed, 8, "connections over the per-source cap are closed");
    let m = b.app.metrics.encode();
    assert!(
        m.contains("bootd_api_denials_total{reason=\"per_source\"} 8"),
        "{m}"
    );
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (st, _) = b.call("GET", "/v1/nodes", None).await;
    assert_eq!(st, 200);
    b.stop().await;
}

/// The API closes a head that stops halfway, an idle connection and a TLS
/// handshake that never finishes at their deadlines (30 s, 30 s and 10 s
/// by default; 1 s here), counts each, and answers after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_heads_and_handshakes_are_closed_on_the_api() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let d = controller::Tuning::default().http;
    assert_eq!(
        (d.head_timeout, d.handshake_timeout),
        (Duration::from_secs(30), Duration::from_secs(10))
    );
    let f = Fake::start().await;
    let mut http = runtime::http1::Limits::new(Duration::from_secs(1));
    http.handshake_timeout = Duration::from_secs(1);
    let b = Bootd::start_tuned(
        &f.url(),
        &f.url(),
        &f.url(),
        controller::Tuning { http, ..tuning() },
    )
    .await;
    async fn closed_after<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
        s: &mut S,
        bytes: &[u8],
    ) -> Duration {
        s.write_all(bytes).await.unwrap();
        let t = Instant::now();
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
            .await
            .expect("closed by the API")
            .ok();
        assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
        t.elapsed()
    }
    let in_time = |d: Duration| d >= Duration::from_millis(900) && d < Duration::from_secs(5);
    let mut s = api_tls(&b).await;
    let d = closed_after(&mut s, b"GET /v1/nodes HTTP/1.1\r\nHost: loc").await;
    assert!(in_time(d), "{d:?}");
    let mut s = api_tls(&b).await;
    let d = closed_after(&mut s, b"").await;
    assert!(in_time(d), "{d:?}");
    let mut s = tokio::net::TcpStream::connect(b.api).await.unwrap();
    let d = closed_after(&mut s, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03").await;
    assert!(in_time(d), "{d:?}");
    // Each is counted just after its connection closed.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let m = b.app.metrics.encode();
    for reason in ["head_timeout", "idle_timeout", "tls_handshake_timeout"] {
        assert!(
            m.contains(&format!(
                "bootd_api_connections_closed_total{{reason=\"{reason}\"}} 1"
            )),
            "{reason}: {m}"
        );
    }
    let (st, _) = b.call("GET", "/v1/nodes", None).await;
    assert_eq!(st, 200);
    b.stop().await;
}
