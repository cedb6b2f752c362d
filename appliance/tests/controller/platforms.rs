//! The platforms' loop on loopback, all in one process as the all-in-one
//! binary runs it: bootd with the controller, dnsd and lbd following the
//! same published site, and a stateful provider fake assigning each
//! machine its own address in the site's network (127.79.0.0/24,
//! 127.80.0.0/24 or 127.83.0.0/24: loopback, so a simulated node can send
//! from the address its provider gave it). Equinix Metal and Power VS run
//! against the in-process fake (`fake`), Alibaba Cloud against the ECS fake
//! (tests/controller/ecs-fake.py: every parameter checked against the API
//! metadata, every signature verified).
//!
//! A bootstrap, three masters and two workers are created through the API
//! with no address and no MAC; the provider's come back and are served:
//! `dig` against dnsd answers them (A and PTR), lbd's pools hold them, and
//! bootd lets a node fetch its Ignition from that address without a token.
//! Each simulated node does what its machine would (its iPXE script for a
//! network-booted Equinix device; the pointer config from its user data and
//! then its Ignition), and every node reaches Ready. bootstrap-complete then
//! revokes the bootstrap Ignition, drains it out of lbd through lbd's admin
//! interface and deletes its machine; a second bootstrap-complete changes
//! nothing.

use super::fake::{self, Fake};
use super::{cond, phase, Bootd, API_TOKEN};
use base64::Engine as _;
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use testkit::ecs_fake::EcsFake;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Where the controller finds each provider API: the fake itself, or Prism
/// proxies in front of it that check every request and reply against the
/// providers' specs.
pub struct Urls {
    pub equinix: String,
    pub iam: String,
    pub powervs: String,
}

/// `host.api.alibaba` for the ECS fake.
pub(super) fn alibaba_account(ecs: &EcsFake) -> String {
    format!(
        "    alibaba:\n      regionId: cn-hangzhou\n      endpoint: \"{}\"\n      accessKeyId: {{ file: {} }}\n      accessKeySecret: {{ file: {} }}\n      zones: [cn-hangzhou-h, cn-hangzhou-i]\n      vSwitches: {{ cn-hangzhou-h: vsw-h1, cn-hangzhou-i: vsw-i1 }}\n      securityGroupId: sg-plat\n      instanceTypes: {{ master: ecs.g6.xlarge, worker: ecs.g6.large }}\n      imageId: m-rhcos418\n",
        ecs.endpoint(),
        ecs.akid_file().display(),
        ecs.secret_file().display()
    )
}

pub(super) fn write_site(
    dir: &Path,
    net: u8,
    powervs: bool,
    urls: &Urls,
    admin: SocketAddr,
    alibaba: Option<&str>,
) -> PathBuf {
    let lab = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab");
    for d in ["images", "ignition", "state"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    for r in ["bootstrap", "master", "worker"] {
        std::fs::copy(
            lab.join(format!("ignition/{r}.ign")),
            dir.join(format!("ignition/{r}.ign")),
        )
        .unwrap();
    }
    std::fs::write(dir.join("api-tokens"), format!("{API_TOKEN}\n")).unwrap();
    std::fs::write(dir.join("metal.key"), format!("{}\n", fake::EQUINIX_KEY)).unwrap();
    std::fs::write(dir.join("ibm.key"), format!("{}\n", fake::POWERVS_KEY)).unwrap();
    // What openshift-install reads: the cluster's shape and, on Power VS,
    // the machine pools the nodes' provider sections leave out.
    let pools = if powervs {
        "\n  platform: { powervs: { sysType: s922, procType: shared, processors: \"0.5\", memoryGiB: 16 } }"
    } else {
        ""
    };
    std::fs::write(
        dir.join("install-config.yaml"),
        format!(
            "apiVersion: v1\nbaseDomain: example.test\nmetadata: {{ name: plat }}\nnetworking: {{ machineNetwork: [ {{ cidr: 127.{net}.0.0/24 }} ] }}\ncontrolPlane:\n  name: master\n  replicas: 3{pools}\ncompute:\n  - name: worker\n    replicas: 2{}\n{}pullSecret: '{{\"auths\":{{}}}}'\n",
            pools.replace("\n  ", "\n    "),
            if powervs {
                format!("platform: {{ powervs: {{ region: lon, zone: lon04, serviceInstanceGUID: {} }} }}\n", fake::CLOUD_INSTANCE)
            } else {
                "platform: { none: {} }\n".to_string()
            }
        ),
    )
    .unwrap();
    let text = format!(
        r#"cluster: {{ installConfig: install-config.yaml }}
host:
  stateDir: state
  http: {{ listen: "127.0.0.1:1", url: "http://127.{net}.0.1:8080" }}
  https: {{ listen: "127.0.0.1:2", url: "https://127.{net}.0.1:8443" }}
  api:
    listen: 127.0.0.1:0
    tokens: {{ file: api-tokens }}
    deadline: 10m
    equinix: {{ baseUrl: "{eq}", projectId: {project}, apiKey: {{ file: metal.key }} }}
    powervs: {{ baseUrl: "{pvs}", iamUrl: "{iam}", crn: "crn:v1:bluemix:public:power-iaas:us-south:a/acc:{ci}::", apiKey: {{ file: ibm.key }} }}
{alibaba}networks:
  - {{ name: plat, subnet: 127.{net}.0.0/24, gateway: 127.{net}.0.1, dnsServers: [127.{net}.0.1] }}
vips: {{ api: 127.{net}.0.2, ingress: 127.{net}.0.3 }}
images:
  root: images
  sets:
    x: {{ arch: x86_64, kernel: k, initramfs: i }}
    p: {{ arch: ppc64le, kernel: k, initramfs: i }}
ignition: {{ dir: ignition }}
dns:
  listen: [127.{net}.0.1:53]
  negativeTtl: 1s
lb:
  adminListen: {admin}
  check: {{ interval: 200ms, fastInterval: 100ms, timeout: 150ms }}
"#,
        project = fake::PROJECT,
        ci = fake::CLOUD_INSTANCE,
        eq = urls.equinix,
        iam = urls.iam,
        pvs = urls.powervs,
        alibaba = alibaba.unwrap_or_default(),
    );
    let path = dir.join("site.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

/// dnsd and lbd following bootd's published site, on loopback ports.
pub(super) struct Daemons {
    dns: SocketAddr,
    admin: SocketAddr,
    shutdown: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Daemons {
    pub(super) async fn start(b: &Bootd, admin: SocketAddr) -> Daemons {
        let shutdown = CancellationToken::new();
        let mut tasks = Vec::new();
        // dnsd
        let source = dnsd::Source::Feed(b.app.feed.clone());
        let loaded = dnsd::load(&source, None).unwrap();
        let udp = dnsd::bind_udp("127.0.0.1:0".parse().unwrap(), 1).unwrap();
        let dns = udp[0].local_addr().unwrap();
        let sockets = dnsd::Sockets {
            udp,
            tcp: vec![],
            http: None,
        };
        let sd = shutdown.clone();
        tasks.push(tokio::spawn(async move {
            dnsd::run_loaded(dnsd::Config::new(source), loaded, sockets, sd)
                .await
                .unwrap();
        }));
        // lbd
        let source = lbd::Source::Feed(b.app.feed.clone());
        let loaded = lbd::Loaded::load(&source).unwrap();
        let mut sockets = lbd::Sockets::default();
        for f in loaded.plan(false) {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            sockets.frontends.insert(f.name, l);
        }
        sockets.admin = Some(tokio::net::TcpListener::bind(admin).await.unwrap());
        let mut config = lbd::Config::new(source, loaded);
        config.state_dir = Some(b.dir.path().join("state/lbd"));
        config.grace = Duration::from_millis(200);
        let lbd = lbd::start(config, sockets, shutdown.clone()).await.unwrap();
        tasks.push(tokio::spawn(async move { lbd.wait().await }));
        Daemons {
            dns,
            admin,
            shutdown,
            tasks,
        }
    }

    pub(super) async fn stop(self) {
        self.shutdown.cancel();
        for t in self.tasks {
            t.await.unwrap();
        }
    }

    fn dig(&self, args: &[&str]) -> String {
        let out = std::process::Command::new("dig")
            .args([
                &format!("@{}", self.dns.ip()),
                "-p",
                &self.dns.port().to_string(),
                "+short",
                "+time=2",
                "+tries=1",
            ])
            .args(args)
            .output()
            .expect("dig (dnsutils) is installed by the test command");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    async fn lbd_status(&self) -> Value {
        serde_json::from_str(&get_from(None, self.admin, "/status").await.1).unwrap()
    }
}

/// A plain HTTP/1.1 GET from `source` (a node's own address), as the node
/// would send it: (status, body).
pub(super) async fn get_from(source: Option<IpAddr>, to: SocketAddr, path: &str) -> (u16, String) {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    if let Some(ip) = source {
        sock.bind(SocketAddr::new(ip, 0)).unwrap();
    }
    let mut s = sock.connect(to).await.unwrap();
    s.write_all(
        format!(
            "GET {path} HTTP/1.1\r\nHost: {to}\r\nAccept: application/vnd.coreos.ignition+json;version=3.4.0, */*;q=0.1\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

fn has(v: &Value, t: &str, status: &str) -> bool {
    v["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == t && c["status"] == status))
}

#[derive(Clone, Copy, PartialEq)]
pub enum Platform {
    Equinix,
    PowerVs,
    Alibaba,
}

/// The provider API the loop runs against, as the test sees it: it holds
/// a create's reply, counts creates and deletes, and shows the user data a
/// machine was given.
pub(super) enum Cloud<'a> {
    Seed(&'a Fake, Arc<Notify>),
    Ecs(&'a EcsFake),
}

impl Cloud<'_> {
    /// The next create is carried out and its reply held.
    fn hold_create(&self) {
        match self {
            Cloud::Seed(f, hold) => f.st().hold_create = Some(Arc::clone(hold)),
            Cloud::Ecs(e) => {
                e.control(
                    "POST",
                    "/_fake/hold",
                    Some(json!({"action": "RunInstances", "count": 1})),
                );
            }
        }
    }

    /// Whether `made` machines exist with the last create's reply held.
    fn held(&self, made: u32) -> bool {
        match self {
            Cloud::Seed(f, _) => f.st().creates >= made,
            Cloud::Ecs(e) => {
                e.control("GET", "/_fake/held", None)["held"] == json!(1)
                    && e.instances().len() as u32 >= made
            }
        }
    }

    pub(super) fn creates(&self) -> u32 {
        match self {
            Cloud::Seed(f, _) => f.st().creates,
            Cloud::Ecs(e) => e.instances().len() as u32,
        }
    }

    fn release(&self) {
        match self {
            Cloud::Seed(_, hold) => hold.notify_one(),
            Cloud::Ecs(e) => {
                e.control("POST", "/_fake/release", None);
            }
        }
    }

    fn stop_holding(&self) {
        if let Cloud::Seed(f, _) = self {
            f.st().hold_create = None;
        }
    }

    /// Every create the provider carried out, deleted machines included.
    pub(super) fn creates_ever(&self) -> usize {
        match self {
            Cloud::Seed(f, _) => f.st().creates as usize,
            Cloud::Ecs(e) => e
                .control("GET", "/_fake/requests", None)
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["status"] == 200 && r["action"] == "RunInstances")
                .count(),
        }
    }

    /// Every delete of a machine that the provider accepted.
    pub(super) fn deletes(&self) -> usize {
        match self {
            Cloud::Seed(f, _) => f.st().deletes.len(),
            Cloud::Ecs(e) => e
                .control("GET", "/_fake/requests", None)
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| {
                    r["status"] == 200
                        && matches!(
                            r["action"].as_str(),
                            Some("DeleteInstance" | "DeleteInstances")
                        )
                })
                .count(),
        }
    }

    /// The user data the provider holds for `name`'s machine: the pointer config.
    pub(super) fn user_data(&self, p: Platform, name: &str) -> Value {
        match self {
            Cloud::Seed(f, _) => user_data(f, p, name),
            Cloud::Ecs(e) => {
                let i = e
                    .instances()
                    .into_iter()
                    .find(|i| i["InstanceName"] == name)
                    .expect("the instance exists");
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(i["UserData"].as_str().unwrap())
                    .unwrap();
                serde_json::from_slice(&raw).unwrap()
            }
        }
    }
}

fn node_body(p: Platform, name: &str, role: &str) -> Value {
    match p {
        // Workers boot an OS image with the pointer as user data; the
        // others network-boot bootd's script (custom_ipxe).
        Platform::Equinix if role == "worker" => json!({
            "name": name, "role": role,
            "provider": { "equinix": { "metro": "da", "plan": "m3.small.x86", "operatingSystem": "rhcos_4_14" } }
        }),
        Platform::Equinix => json!({
            "name": name, "role": role,
            "provider": { "equinix": { "metro": "da", "plan": "m3.small.x86", "alwaysPxe": true } }
        }),
        // Processors, memory, procType and sysType come from the
        // install-config's machine pools.
        Platform::PowerVs => json!({
            "name": name, "role": role, "arch": "ppc64le", "firmware": "ieee1275",
            "provider": { "powervs": { "imageID": "rhcos-417", "networkID": "net-7" } }
        }),
        // Zone, instance type and image come from host.api.alibaba.
        Platform::Alibaba => json!({
            "name": name, "role": role, "provider": { "alibaba": {} }
        }),
    }
}

/// The user data the provider holds for `name`'s machine: the pointer config.
fn user_data(f: &Fake, p: Platform, name: &str) -> Value {
    let s = f.st();
    let raw = match p {
        Platform::Alibaba => unreachable!("the ECS fake holds it"),
        Platform::Equinix => s
            .devices
            .values()
            .find(|d| d["hostname"] == name && d["state"] != "deprovisioning")
            .map(|d| d["userdata"].as_str().unwrap().to_string()),
        Platform::PowerVs => s.user_data.get(&format!("plat-{name}")).map(|ud| {
            use base64::Engine as _;
            String::from_utf8(
                base64::engine::general_purpose::STANDARD
                    .decode(ud)
                    .unwrap(),
            )
            .unwrap()
        }),
    };
    serde_json::from_str(&raw.expect("the machine exists")).unwrap()
}

pub(super) const NODES: [(&str, &str); 6] = [
    ("bootstrap", "bootstrap"),
    ("master-0", "master"),
    ("master-1", "master"),
    ("master-2", "master"),
    ("worker-0", "worker"),
    ("worker-1", "worker"),
];

/// The loop on `p` with its machines' addresses in 127.`net`.0.0/24;
/// `urls` maps the fake's URL to where the controller reaches it (`None`:
/// directly).
pub async fn cluster_loop(p: Platform, net: u8, urls: Option<&dyn Fn(&str) -> Urls>) {
    let f = Fake::start().await;
    f.st().private_prefix = Some(format!("127.{net}.0."));
    let ecs = (p == Platform::Alibaba)
        .then(|| EcsFake::start_at(0.3, format!("127.{net}.0.100").parse().unwrap()));
    let admin: SocketAddr = format!("127.0.0.1:{}", super::free_port()).parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let urls = match urls {
        Some(u) => u(&f.url()),
        None => Urls {
            equinix: f.url(),
            iam: f.url(),
            powervs: f.url(),
        },
    };
    let account = ecs.as_ref().map(alibaba_account);
    let path = write_site(
        dir.path(),
        net,
        p == Platform::PowerVs,
        &urls,
        admin,
        account.as_deref(),
    );
    let b = Bootd::start_site(dir, &path, super::tuning()).await;
    let d = Daemons::start(&b, admin).await;
    let cloud = match &ecs {
        Some(e) => Cloud::Ecs(e),
        None => Cloud::Seed(&f, Arc::new(Notify::new())),
    };

    // Each create is held at the fake (the machine made, the reply not yet
    // sent): until the provider's answer names its address, the node is not
    // in the served site.
    for (i, (name, role)) in NODES.into_iter().enumerate() {
        cloud.hold_create();
        let (st, v) = b.create(node_body(p, name, role)).await;
        assert_eq!(st, 201, "{v:#}");
        let made = i as u32 + 1;
        for _ in 0..300 {
            if cloud.held(made) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(cloud.creates(), made, "{name}: the provider was asked once");
        assert!(
            b.app.live.load().site.node(name).is_none(),
            "{name}: not served before its provider gave an address"
        );
        // Its machine may run already (a cloud instance boots its image):
        // Ignition asking with the token of its user data is told "not
        // yet" (503: Ignition tries again; a 404 would end its boot),
        // and given nothing. Without the token, the name is unknown.
        let pointer = cloud.user_data(p, name);
        let src = pointer["ignition"]["config"]["merge"][0]["source"]
            .as_str()
            .unwrap();
        let path = &src[src.find("/ignition/").unwrap()..];
        let anywhere: IpAddr = format!("127.{net}.0.250").parse().unwrap();
        let (st, body) = get_from(Some(anywhere), b.http, path).await;
        assert_eq!(
            (st, body.as_str()),
            (503, "this node's machine is not known yet; try again\n"),
            "{name}"
        );
        // On the node's own timeline (the name its token vouches for), not
        // the asking address's.
        let mut awaited = Value::Null;
        for _ in 0..100 {
            let (st, v) = b
                .call("GET", &format!("/v1/nodes/{name}/timeline"), None)
                .await;
            if st == 200 && v["events"].to_string().contains("\"awaited\"") {
                awaited = v;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(awaited["node"], name, "{name}: no awaited on its timeline");
        let (st, _) = get_from(Some(anywhere), b.http, &format!("/ignition/{name}")).await;
        assert_eq!(st, 404, "{name}: no token");
        let forged = format!("/ignition/{name}?token=1.p.AAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAA");
        let (st, _) = get_from(Some(anywhere), b.http, &forged).await;
        assert_eq!(st, 404, "{name}: a token not bootd's");
        cloud.release();
    }
    cloud.stop_holding();
    if p == Platform::PowerVs {
        for _ in 0..300 {
            if !f.st().instances.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let s = f.st();
        let i = s.instances.values().next().unwrap();
        assert_eq!(
            (
                i["sysType"].as_str(),
                i["procType"].as_str(),
                i["processors"].as_f64(),
                i["memory"].as_f64()
            ),
            (Some("s922"), Some("shared"), Some(0.5), Some(16.0)),
            "the machine pool from install-config.yaml"
        );
    }
    // The provider's addresses and MACs come back and are served.
    let mut ips = std::collections::BTreeMap::new();
    for (name, _) in NODES {
        let v = b
            .wait_node(name, 30, |_, v| {
                has(v, "AddressesRecorded", "True") || phase(v) == "Failed"
            })
            .await;
        assert_eq!(cond(&v, "AddressesRecorded")["status"], "True", "{v:#}");
        let node = b.app.live.load().site.node(name).cloned().expect("served");
        assert!(
            node.ip().to_string().starts_with(&format!("127.{net}.0.1")),
            "{}",
            node.ip()
        );
        if p == Platform::Equinix {
            // Its layer-3 network from the device's facts: bond0 over eth0
            // and eth1 (by MAC), the private address the node is served at
            // and the public one, the default route public.
            let hn = node.host_network.as_ref().expect("the device's network");
            let names: Vec<&str> = hn.interfaces.iter().map(|i| i.name.as_str()).collect();
            assert_eq!(names, ["eth0", "eth1", "bond0"], "{hn:?}");
            let bond = &hn.interfaces[2];
            assert!(
                bond.ipv4.addresses.iter().any(|a| a.addr() == node.ip()),
                "{hn:?}"
            );
            assert_eq!(bond.ipv4.addresses.len(), 2, "{hn:?}");
            assert_eq!(
                hn.gateway("bond0", true),
                Some("147.75.1.1".parse().unwrap())
            );
            assert_eq!(
                hn.interfaces[0].mac.map(|m| m.to_string()),
                Some(node.macs[0].to_string())
            );
        }
        let prefix = match p {
            Platform::Equinix => "b4:96:91:a0:",
            Platform::PowerVs => "fa:16:3e:00:",
            Platform::Alibaba => "00:16:3e:",
        };
        assert!(
            node.macs[0].to_string().starts_with(prefix),
            "{:?}",
            node.macs
        );
        assert_eq!(
            v["spec"]["ip"],
            node.ip().to_string(),
            "the node's view shows it"
        );
        ips.insert(name, node.ip());
    }
    let overlay = std::fs::read_to_string(b.dir.path().join("state/nodes.yaml")).unwrap();
    for ip in ips.values() {
        assert!(
            overlay.contains(&ip.to_string()),
            "exported for other processes: {overlay}"
        );
    }

    // Each machine does what it would do.
    for (name, role) in NODES {
        let ip = ips[name];
        let image = p != Platform::Equinix || role == "worker";
        if !image {
            let (st, script) = get_from(Some(ip), b.http, &format!("/ipxe/{name}.ipxe")).await;
            assert_eq!(st, 200, "{script}");
        }
        let pointer = cloud.user_data(p, name);
        let src = pointer["ignition"]["config"]["merge"][0]["source"]
            .as_str()
            .unwrap();
        let path = &src[src.find("/ignition/").unwrap()..];
        let (st, cfg) = get_from(Some(ip), b.http, path).await;
        assert_eq!(st, 200, "{name}: {cfg}");
        let cfg: Value = serde_json::from_str(&cfg).unwrap();
        assert!(cfg["ignition"]["version"]
            .as_str()
            .unwrap()
            .starts_with("3."));
    }
    // The source check follows the provider's address: no token needed
    // from it, refused from any other.
    let (st, _) = get_from(Some(ips["master-1"]), b.http, "/ignition/master-1").await;
    assert_eq!(st, 200);
    let other: IpAddr = format!("127.{net}.0.250").parse().unwrap();
    let (st, _) = get_from(Some(other), b.http, "/ignition/master-1").await;
    assert_eq!(st, 404);
    for (name, role) in NODES {
        let v = b
            .wait_node(name, 20, |_, v| phase(v) == "Ready" || phase(v) == "Failed")
            .await;
        assert_eq!(phase(&v), "Ready", "{v:#}");
        let image = p != Platform::Equinix || role == "worker";
        assert_eq!(
            v["bootKind"],
            if image { "Image" } else { "Network" },
            "{name}"
        );
    }

    let (_, c) = b.call("GET", "/v1/cluster", None).await;
    assert_eq!(
        c["roles"]["master"],
        json!({"replicas": 3, "present": 3, "ready": 3}),
        "{c:#}"
    );
    assert_eq!(
        c["roles"]["worker"],
        json!({"replicas": 2, "present": 2, "ready": 2}),
        "{c:#}"
    );
    // A fourth master is more than the install-config's replicas.
    let (st, v) = b.create(node_body(p, "master-3", "master")).await;
    assert_eq!(st, 422, "{v:#}");
    assert!(
        v["problems"]
            .to_string()
            .contains("cluster.replicas.master"),
        "{v:#}"
    );
    // dnsd answers the provider's addresses (A and PTR).
    for (name, _) in NODES {
        let fqdn = format!("{name}.plat.example.test");
        let mut a = String::new();
        for _ in 0..50 {
            a = d.dig(&[&fqdn, "A"]);
            if a == ips[name].to_string() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(a, ips[name].to_string(), "{fqdn}");
        assert_eq!(d.dig(&["-x", &ips[name].to_string()]), format!("{fqdn}."));
    }
    // lbd's pools hold them: api = bootstrap + masters, at their addresses.
    let api_pool = |s: &Value| -> Vec<String> {
        let fe = s["frontends"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "api")
            .unwrap()
            .clone();
        let mut v: Vec<String> = fe["backends"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["addr"].as_str().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    let mut want: Vec<String> = ["bootstrap", "master-0", "master-1", "master-2"]
        .iter()
        .map(|n| format!("{}:6443", ips[n]))
        .collect();
    want.sort();
    let mut pool = Vec::new();
    for _ in 0..50 {
        pool = api_pool(&d.lbd_status().await);
        if pool == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(pool, want);

    // Bootstrap teardown.
    let deletes_before = cloud.deletes();
    let (st, first) = b
        .call("POST", "/v1/cluster/bootstrap-complete", Some(json!({})))
        .await;
    assert_eq!(st, 200, "{first:#}");
    assert_eq!(first["by"], "api");
    assert!(
        b.app.live.load().revoked.contains("bootstrap"),
        "revoked once the call returns"
    );
    let mut cluster = Value::Null;
    for _ in 0..200 {
        let (_, v) = b.call("GET", "/v1/cluster", None).await;
        let all = [
            "BootstrapIgnitionRevoked",
            "BootstrapDrained",
            "BootstrapMachineDeleted",
        ]
        .iter()
        .all(|t| {
            v["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["type"] == *t && c["status"] == "True")
        });
        cluster = v;
        if all {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let conds = cluster["conditions"].as_array().unwrap();
    for (t, reason) in [
        ("BootstrapIgnitionRevoked", "Revoked"),
        ("BootstrapDrained", "Removed"),
        ("BootstrapMachineDeleted", "Deleted"),
    ] {
        let c = conds
            .iter()
            .find(|c| c["type"] == t)
            .unwrap_or_else(|| panic!("{t}: {cluster:#}"));
        assert_eq!(
            (c["status"].as_str(), c["reason"].as_str()),
            (Some("True"), Some(reason)),
            "{cluster:#}"
        );
    }
    assert_eq!(d.lbd_status().await["bootstrap"], "removed");
    b.wait_node("bootstrap", 10, |st, _| st == 404).await;
    assert_eq!(
        cloud.deletes(),
        deletes_before + 1,
        "one delete, of the bootstrap machine"
    );
    let mut pool_after = want.clone();
    pool_after.retain(|a| !a.starts_with(&format!("{}:", ips["bootstrap"])));
    assert_eq!(api_pool(&d.lbd_status().await), pool_after);
    assert_eq!(d.dig(&["bootstrap.plat.example.test", "A"]), "");
    // A second bootstrap-complete changes nothing.
    let (st, again) = b
        .call("POST", "/v1/cluster/bootstrap-complete", Some(json!({})))
        .await;
    assert_eq!(st, 200);
    assert_eq!(again["time"], first["time"]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(cloud.deletes(), deletes_before + 1);
    let (_, v) = b.call("GET", "/v1/cluster", None).await;
    assert_eq!(v["conditions"], cluster["conditions"]);
    for (name, _) in NODES.iter().skip(1) {
        let (st, v) = b.call("GET", &format!("/v1/nodes/{name}"), None).await;
        assert_eq!((st, phase(&v)), (200, "Ready"));
    }
    d.stop().await;
    b.stop().await;
    let _ = Arc::clone(&f.state);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equinix_cluster_from_api_calls_to_ready_then_bootstrap_leaves() {
    cluster_loop(Platform::Equinix, 79, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn powervs_cluster_from_api_calls_to_ready_then_bootstrap_leaves() {
    cluster_loop(Platform::PowerVs, 80, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alibaba_cluster_from_api_calls_to_ready_then_bootstrap_leaves() {
    cluster_loop(Platform::Alibaba, 83, None).await;
}

/// `host.admission.provisions: 1`: one Equinix create at a time; the next
/// nodes wait (their phase says so, the metrics count them) and go one by
/// one as each reply arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_creates_beyond_the_provisioning_limit_wait_their_turn() {
    let f = Fake::start().await;
    let hold = Arc::new(Notify::new());
    f.st().hold_create = Some(Arc::clone(&hold));
    let admin: SocketAddr = format!("127.0.0.1:{}", super::free_port()).parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let urls = Urls {
        equinix: f.url(),
        iam: f.url(),
        powervs: f.url(),
    };
    let path = write_site(dir.path(), 86, false, &urls, admin, None);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("host:\n"), "{text}");
    std::fs::write(
        &path,
        text.replacen("host:\n", "host:\n  admission: {provisions: 1}\n", 1),
    )
    .unwrap();
    let b = Bootd::start_site(dir, &path, super::tuning()).await;
    let names = ["master-0", "master-1", "master-2"];
    for name in names {
        let (st, v) = b.create(node_body(Platform::Equinix, name, "master")).await;
        assert_eq!(st, 201, "{v:#}");
    }
    let metric = |text: &str, name: &str| -> i64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(-1)
    };
    for made in 1..=3u32 {
        let end = std::time::Instant::now() + Duration::from_secs(20);
        while f.st().creates < made {
            assert!(std::time::Instant::now() < end, "create {made} never came");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Held at the fake: no other create may start meanwhile.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(f.st().creates, made, "one create at a time");
        let m = b.app.metrics.encode();
        assert_eq!(
            metric(&m, "bootd_admission_in_use{gate=\"provisions:equinix\"}"),
            1,
            "{m}"
        );
        assert_eq!(
            metric(&m, "bootd_admission_waiting{gate=\"provisions:equinix\"}"),
            3 - made as i64
        );
        if made == 1 {
            let mut waiting = 0;
            for name in names {
                let (_, v) = b.call("GET", &format!("/v1/nodes/{name}"), None).await;
                if v.to_string()
                    .contains("waiting for a provisioning place at equinix (1 at once)")
                {
                    waiting += 1;
                }
            }
            assert_eq!(waiting, 2, "the two waiting nodes say why");
        }
        hold.notify_one();
    }
    f.st().hold_create = None;
    for name in names {
        b.wait_node(name, 30, |st, v| {
            st == 200 && cond(v, "Provisioned")["status"] == "True"
        })
        .await;
    }
    assert_eq!(f.st().creates, 3);
}
