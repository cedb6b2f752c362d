//! `bootd cluster up --install-config FILE` on each provider fake, as the
//! platforms' loop runs them (bootd with the controller, dnsd and lbd in one
//! process; the machines on 127.N.0.0/24 so a simulated node sends from the
//! address its provider gave it). The command runs as its own process and
//! is killed with SIGKILL at each phase, then run again: it resumes, and
//! every machine is made once. The test plays the machines (each fetches
//! its Ignition from its own address once its provider has said which) and
//! the cluster, in a fake Kubernetes API server (testkit's `kube_fake`,
//! every request checked against Kubernetes' OpenAPI document) that the
//! site's `host.api.kubeconfig` names: its `bootstrap` ConfigMap says
//! complete while the command waits for it, and each node's kubelet sends
//! its client and serving CSRs, which the controller approves: the command
//! ends with every node Joined. Without a kubeconfig it ends at bootstrap,
//! saying the CSRs are the operator's.

use super::platforms::{alibaba_account, get_from, write_site, Cloud, Daemons, Platform, NODES};
use super::{fake::Fake, free_port, Bootd};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::io::Read;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::ecs_fake::EcsFake;
use testkit::kube_fake::{kubelet_csr, Auth, KubeFake, KubeletCsr};
use tokio::sync::Notify;

/// How each platform's nodes are made: `--provider` with the site's
/// defaults, or a `--node` template per role.
fn how(p: Platform) -> Vec<String> {
    match p {
        Platform::Alibaba => vec!["--provider".into(), "alibaba".into()],
        Platform::PowerVs => ["bootstrap", "master", "worker"]
            .iter()
            .flat_map(|r| {
                [
                    "--node".to_string(),
                    format!(
                        r#"{r}={{"arch":"ppc64le","firmware":"ieee1275","provider":{{"powervs":{{"imageID":"rhcos-417","networkID":"net-7"}}}}}}"#
                    ),
                ]
            })
            .collect(),
        Platform::Equinix => vec![
            "--node".into(),
            r#"worker={"provider":{"equinix":{"metro":"da","plan":"m3.small.x86","operatingSystem":"rhcos_4_14"}}}"#.into(),
            "--node".into(),
            r#"master={"provider":{"equinix":{"metro":"da","plan":"m3.small.x86","alwaysPxe":true}}}"#.into(),
            "--node".into(),
            r#"bootstrap={"provider":{"equinix":{"metro":"da","plan":"m3.small.x86","alwaysPxe":true}}}"#.into(),
        ],
    }
}

/// One `bootd cluster up` process, its output in a file.
struct Up {
    child: Child,
    out: std::path::PathBuf,
}

impl Up {
    fn start(site: &Path, b: &Bootd, ca: &Path, assets: &Path, p: Platform, n: u32) -> Up {
        let out = b.dir.path().join(format!("up-{n}.out"));
        let child = Command::new(env!("CARGO_BIN_EXE_bootd"))
            .args(["--site", site.to_str().unwrap(), "cluster"])
            .args(["--api", &format!("https://localhost:{}", b.api.port())])
            .args(["--ca", ca.to_str().unwrap()])
            .args([
                "--token-file",
                b.dir.path().join("api-tokens").to_str().unwrap(),
            ])
            .args(["up", "--install-config"])
            .arg(b.dir.path().join("install-config.yaml"))
            .arg("--dir")
            .arg(assets)
            .args(["--interval", "0.1", "--timeout", "120"])
            .args(how(p))
            // openshift-install's stand-in, when the test made one.
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    b.dir.path().join("bin").display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(Stdio::from(
                std::fs::File::create(b.dir.path().join(format!("up-{n}.err"))).unwrap(),
            ))
            .spawn()
            .unwrap();
        Up { child, out }
    }

    fn output(&self) -> String {
        let mut s = String::new();
        std::fs::File::open(&self.out)
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        s
    }
}

/// Every node whose provider has said its address fetches its Ignition
/// from it, once (an Equinix master or bootstrap network-boots first).
async fn play_machines(
    b: &Bootd,
    cloud: &Cloud<'_>,
    p: Platform,
    done: &mut BTreeSet<&'static str>,
) {
    for (name, role) in NODES {
        if done.contains(name) {
            continue;
        }
        let Some(node) = b.app.live.load().site.node(name).cloned() else {
            continue;
        };
        let ip = node.ip();
        if p == Platform::Equinix && role != "worker" {
            let (st, _) = get_from(Some(ip), b.http, &format!("/ipxe/{name}.ipxe")).await;
            if st != 200 {
                continue;
            }
        }
        let pointer = cloud.user_data(p, name);
        let src = pointer["ignition"]["config"]["merge"][0]["source"]
            .as_str()
            .unwrap()
            .to_string();
        let path = &src[src.find("/ignition/").unwrap()..];
        if get_from(Some(ip), b.http, path).await.0 == 200 {
            done.insert(name);
        }
    }
}

async fn cluster_up_resumes_at_each_phase(p: Platform, net: u8, kube: bool) {
    let k8s = if kube {
        Some(KubeFake::start(Auth::ClientCert, KubeFake::spec()).await)
    } else {
        None
    };
    let f = Fake::start().await;
    f.st().private_prefix = Some(format!("127.{net}.0."));
    let ecs = (p == Platform::Alibaba)
        .then(|| EcsFake::start_at(0.3, format!("127.{net}.0.100").parse().unwrap()));
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let urls = super::platforms::Urls {
        equinix: f.url(),
        iam: f.url(),
        powervs: f.url(),
    };
    let account = ecs.as_ref().map(alibaba_account);
    let site = write_site(
        dir.path(),
        net,
        p == Platform::PowerVs,
        &urls,
        admin,
        account.as_deref(),
    );
    // openshift-install's three configs, as `create ignition-configs` left
    // them; the worker's differs from the site's, so it is installed.
    let assets = dir.path().join("assets");
    std::fs::create_dir_all(&assets).unwrap();
    let worker = json!({"ignition": {"version": "3.2.0"}, "storage": {"files": [
        {"path": "/etc/cluster-up", "contents": {"source": "data:,made%20by%20cluster%20up"}}]}});
    if kube {
        for r in ["bootstrap", "master", "worker"] {
            std::fs::copy(
                dir.path().join(format!("ignition/{r}.ign")),
                assets.join(format!("{r}.ign")),
            )
            .unwrap();
        }
        std::fs::write(assets.join("worker.ign"), worker.to_string()).unwrap();
    } else {
        // No configs in --dir: openshift-install (a stand-in on PATH: the
        // real one cannot be fetched here) makes them, as `create
        // ignition-configs --dir DIR` does, from the install-config it
        // finds there (mode 0600), which it consumes.
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let lab = dir.path().join("ignition");
        let script = format!(
            "#!/bin/sh\nset -e\n[ \"$1 $2 $3\" = \"create ignition-configs --dir\" ] || exit 3\n\
             [ \"$(stat -c %a \"$4/install-config.yaml\")\" = 600 ] || exit 4\n\
             grep -q 'name: plat' \"$4/install-config.yaml\" || exit 5\n\
             rm \"$4/install-config.yaml\"\n\
             cp {lab}/bootstrap.ign {lab}/master.ign \"$4/\"\n\
             printf '%s' '{worker}' > \"$4/worker.ign\"\n\
             echo ran >> \"$4/openshift-install.ran\"\n",
            lab = lab.display(),
        );
        let oi = bin.join("openshift-install");
        std::fs::write(&oi, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&oi, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    if let Some(k) = &k8s {
        k.write_kubeconfig(dir.path());
        let text = std::fs::read_to_string(&site).unwrap().replace(
            "    tokens: { file: api-tokens }\n",
            "    tokens: { file: api-tokens }\n    kubeconfig: kubeconfig\n",
        );
        assert!(text.contains("kubeconfig: kubeconfig"));
        std::fs::write(&site, text).unwrap();
    }
    let tuning = controller::Tuning {
        cluster_poll: Duration::from_millis(100),
        ..super::tuning()
    };
    let b = Bootd::start_site(dir, &site, tuning).await;
    let d = Daemons::start(&b, admin).await;
    let ca = b.dir.path().join("api-ca.pem");
    std::fs::write(&ca, &b.app.tls.as_ref().unwrap().ca_pem).unwrap();
    let cloud = match &ecs {
        Some(e) => Cloud::Ecs(e),
        None => Cloud::Seed(&f, Arc::new(Notify::new())),
    };

    // Killed when its output first shows each of these, then run again. A
    // run may pass a point before it is seen (the first three take
    // milliseconds): it is then killed at the latest point seen. It waits
    // at the last two, so those are always hit.
    let kills = [
        "] ignition       the configs",
        "made through",
        "] ready          waiting",
        "] bootstrap      waiting",
    ];
    let mut next = 0;
    let mut killed_at = Vec::new();
    let mut machines = BTreeSet::new();
    let mut said_complete = false;
    let mut kubelets = BTreeSet::new();
    let mut n = 0;
    let mut outputs = Vec::new();
    let end = Instant::now() + Duration::from_secs(180);
    'runs: loop {
        n += 1;
        let mut up = Up::start(&site, &b, &ca, &assets, p, n);
        for tick in 0u64.. {
            assert!(
                Instant::now() < end,
                "cluster up never finished; outputs: {outputs:#?}\nlast: {}",
                up.output()
            );
            let out = up.output();
            if let Some(i) = (next..kills.len()).rev().find(|&i| out.contains(kills[i])) {
                up.child.kill().unwrap();
                up.child.wait().unwrap();
                killed_at.push(kills[i]);
                next = i + 1;
                outputs.push(out);
                continue 'runs;
            }
            if let Some(st) = up.child.try_wait().unwrap() {
                let out = up.output();
                let err = std::fs::read_to_string(b.dir.path().join(format!("up-{n}.err")))
                    .unwrap_or_default();
                assert_eq!(
                    next,
                    kills.len(),
                    "cluster up ended ({st}) before being killed at each point: {out}{err}"
                );
                assert!(st.success(), "cluster up failed ({st}): {out}{err}");
                outputs.push(out);
                break 'runs;
            }
            if tick % 10 == 0 {
                play_machines(&b, &cloud, p, &mut machines).await;
                let (_, c) = b.call("GET", "/v1/nodes", None).await;
                let all_ready = c["nodes"].as_array().is_some_and(|ns| {
                    ns.len() == NODES.len() && ns.iter().all(|n| n["phase"] == "Ready")
                });
                // Bootstrap is said complete while the command waits for
                // it, once it was killed there.
                let waiting = out.contains(kills[3]);
                if all_ready && waiting && next == kills.len() && !said_complete {
                    match &k8s {
                        // The cluster says it (kube-system/bootstrap).
                        Some(k) => k.st().bootstrap = Some("complete".into()),
                        // As openshift-install wait-for bootstrap-complete would.
                        None => {
                            let (st, v) = b
                                .call("POST", "/v1/cluster/bootstrap-complete", Some(json!({})))
                                .await;
                            assert_eq!(st, 200, "{v:#}");
                        }
                    }
                    said_complete = true;
                }
                // Each Ready node's kubelet asks for its certificates, once.
                if let Some(k) = &k8s {
                    for n in c["nodes"].as_array().into_iter().flatten() {
                        let name = n["name"].as_str().unwrap().to_string();
                        if n["phase"] != "Ready"
                            || name == "bootstrap"
                            || !kubelets.insert(name.clone())
                        {
                            continue;
                        }
                        let ip = b.app.live.load().site.node(&name).unwrap().ip().to_string();
                        let cn = format!("system:node:{name}");
                        let fqdn = format!("{name}.plat.example.test");
                        let sans = [name.as_str(), fqdn.as_str(), ip.as_str()];
                        let client = format!("csr-{name}-client");
                        let serving = format!("csr-{name}-serving");
                        k.add_csr(kubelet_csr(&KubeletCsr::client(&client, &cn)));
                        k.add_csr(kubelet_csr(&KubeletCsr::serving(&serving, &cn, &sans)));
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // Where it waits, it was killed each time.
    assert!(killed_at.ends_with(&[kills[2], kills[3]]), "{killed_at:?}");
    let last = outputs.last().unwrap();
    assert!(last.contains("is up"), "{last}");
    assert!(
        last.contains("resume") && last.contains("done before: ignition, images, nodes, ready"),
        "{last}"
    );
    // Every machine made once, across five runs; the bootstrap's deleted.
    assert_eq!(cloud.creates_ever(), 6, "{outputs:#?}");
    assert_eq!(cloud.deletes(), 1, "{outputs:#?}");
    let (st, _) = b.call("GET", "/v1/nodes/bootstrap", None).await;
    assert_eq!(st, 404);
    for (name, _) in NODES.iter().skip(1) {
        let (_, v) = b.call("GET", &format!("/v1/nodes/{name}"), None).await;
        assert_eq!(v["phase"], "Ready", "{v:#}");
    }
    // The worker config from the assets is the site's now.
    let served: Value =
        serde_json::from_slice(&std::fs::read(b.dir.path().join("ignition/worker.ign")).unwrap())
            .unwrap();
    assert_eq!(served, worker);
    let all = outputs.join("");
    assert!(
        all.contains("installed") && all.contains("worker.ign"),
        "{all}"
    );
    match &k8s {
        Some(k) => {
            // Said by the cluster; every kubelet's two CSRs approved, none
            // denied, and every request as Kubernetes' document says.
            let (_, c) = b.call("GET", "/v1/cluster", None).await;
            assert_eq!(c["bootstrapComplete"]["by"], "cluster", "{c:#}");
            assert!(last.contains("all 5 node(s) Joined after"), "{last}");
            {
                let st = k.st();
                assert_eq!(st.approved.len(), 10, "{:?}", st.approved);
                assert!(st.denied.is_empty(), "{:?}", st.denied);
                assert!(st.violations.is_empty(), "{:?}", st.violations);
            }
            for (name, _) in NODES.iter().skip(1) {
                let (_, v) = b.call("GET", &format!("/v1/nodes/{name}"), None).await;
                let joined = v["conditions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|c| c["type"] == "Joined")
                    .unwrap();
                assert_eq!(joined["status"], "True", "{v:#}");
            }
        }
        None => {
            // Without a kubeconfig the controller does not follow the cluster.
            assert!(all.contains("oc adm certificate approve"), "{last}");
            // openshift-install made the configs, once (the runs after
            // took them from --dir).
            assert!(all.contains("create ignition-configs --dir"), "{all}");
            let ran = std::fs::read_to_string(assets.join("openshift-install.ran")).unwrap();
            assert_eq!(ran, "ran\n");
            assert!(!assets.join("install-config.yaml").exists());
        }
    }
    d.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_up_on_alibaba_resumes_after_kill_9_at_each_phase() {
    cluster_up_resumes_at_each_phase(Platform::Alibaba, 84, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_up_on_powervs_resumes_after_kill_9_at_each_phase() {
    cluster_up_resumes_at_each_phase(Platform::PowerVs, 85, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_up_on_equinix_resumes_after_kill_9_at_each_phase() {
    cluster_up_resumes_at_each_phase(Platform::Equinix, 86, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_up_without_a_kubeconfig_ends_at_bootstrap_saying_the_csrs_are_the_operator_s() {
    cluster_up_resumes_at_each_phase(Platform::Alibaba, 87, false).await;
}
