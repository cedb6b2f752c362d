//! The cluster side against a fake Kubernetes API server (testkit's
//! `kube_fake`: TLS with a CA made here, client-certificate or token auth,
//! every request checked against Kubernetes' own OpenAPI document): the
//! kubelet CSRs of nodes this bootd booted are approved, everything else is
//! left pending (a node condition, a metric, `GET /v1/cluster`), never
//! denied; `Joined`; `bootd nodes wait --for joined`; bootstrap completion
//! read from the cluster's `bootstrap` ConfigMap starts the teardown.
//!
//! The nodes speak from their own loopback addresses (a `lo` network in
//! the site), as in bootd's trust tests; worker-1's Ignition is fetched
//! from 127.0.0.99 on the token its script carries.

use crate::{cond, logs, write_site, Bootd};
use base64::Engine;
use serde_json::Value;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use testkit::kube_fake::{kubelet_csr, Auth, KubeFake, KubeletCsr};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The lab site with a loopback network holding worker-0, worker-1,
/// master-0 and master-1, and `host.api.kubeconfig` for `fake`.
fn site(dir: &Path, fake: &KubeFake) -> std::path::PathBuf {
    let none = "http://127.0.0.1:9";
    let path = write_site(dir, none, none, none, "127.0.0.1:0");
    fake.write_kubeconfig(dir);
    let mut text = std::fs::read_to_string(&path)
        .unwrap()
        .replace(
            "    dnsServers: [10.77.0.1]\n",
            "    dnsServers: [10.77.0.1]\n  - name: lo\n    subnet: 127.0.0.0/8\n    gateway: 127.0.0.1\n",
        )
        .replace(
            "    tokens: { file: api-tokens }\n",
            "    tokens: { file: api-tokens }\n    kubeconfig: kubeconfig\n",
        );
    for (from, to) in [
        ("10.77.0.20", "127.0.0.20"),
        ("10.77.0.21", "127.0.0.21"),
        ("10.77.0.11", "127.0.0.11"),
        ("10.77.0.12", "127.0.0.12"),
    ] {
        text = text.replace(&format!("ip: {from}"), &format!("ip: {to}"));
    }
    std::fs::write(&path, text).unwrap();
    path
}

fn tuning() -> controller::Tuning {
    controller::Tuning {
        cluster_poll: Duration::from_millis(100),
        ..crate::tuning()
    }
}

/// A plain HTTP GET to bootd from source address `from`.
async fn get_from(from: &str, to: SocketAddr, path: &str) -> (u16, String) {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(SocketAddr::new(from.parse().unwrap(), 0))
        .unwrap();
    let mut s = sock.connect(to).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: bootd\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text[9..12].parse().unwrap();
    let body = text
        .split_once("\r\n\r\n")
        .map(|b| b.1.to_string())
        .unwrap_or_default();
    (status, body)
}

fn token_in(body: &str) -> String {
    let i = body.find("token=").expect("a token in the script") + "token=".len();
    body[i..]
        .split(|c: char| c == '"' || c == '&' || c.is_whitespace())
        .next()
        .unwrap()
        .to_string()
}

/// worker-0, master-0 and master-1 fetch their Ignition from their own
/// addresses; worker-1's is fetched from 127.0.0.99 on its token.
async fn boot(b: &Bootd) {
    // The controller is up (it follows the timeline from before its API answers).
    assert_eq!(b.call("GET", "/v1/nodes", None).await.0, 200);
    for (node, ip) in [
        ("worker-0", "127.0.0.20"),
        ("master-0", "127.0.0.11"),
        ("master-1", "127.0.0.12"),
    ] {
        assert_eq!(
            get_from(ip, b.http, &format!("/ipxe/{node}.ipxe")).await.0,
            200,
            "{node}"
        );
        assert_eq!(
            get_from(ip, b.http, &format!("/ignition/{node}")).await.0,
            200,
            "{node}"
        );
    }
    let (st, script) = get_from("127.0.0.99", b.http, "/ipxe/worker-1.ipxe").await;
    assert_eq!(st, 200, "{script}");
    let t = token_in(&script);
    let (st, _) = get_from(
        "127.0.0.99",
        b.http,
        &format!("/ignition/worker-1?token={t}"),
    )
    .await;
    assert_eq!(st, 200);
    for node in ["worker-0", "worker-1", "master-0", "master-1"] {
        b.wait_node(node, 10, |_, v| {
            cond(v, "IgnitionServed")["status"] == "True"
        })
        .await;
        if node != "worker-1" {
            b.wait_node(node, 10, |_, v| v["phase"] == "Ready").await;
        }
    }
    b.wait_node("worker-1", 10, |_, v| {
        v["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "IgnitionFromOtherAddress")
    })
    .await;
}

async fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < end, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn metric(text: &str, line: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(line).map(|v| v.trim().parse().unwrap()))
}

async fn cluster(b: &Bootd) -> Value {
    b.call("GET", "/v1/cluster", None).await.1
}

pub fn client_of(b: &Bootd) -> controller::client::Client {
    let ca = b.dir.path().join("api-ca.pem");
    std::fs::write(&ca, &b.app.tls.as_ref().unwrap().ca_pem).unwrap();
    let site = b.app.live.load().site.clone();
    controller::client::Client::new(
        &site,
        &b.dir.path().join("state"),
        &controller::client::Conn {
            api: Some(format!("https://localhost:{}", b.api.port())),
            ca: Some(ca),
            token_file: Some(b.dir.path().join("api-tokens")),
        },
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_csrs_of_booted_nodes_are_approved_and_the_rest_left_pending() {
    let fake = KubeFake::start(Auth::ClientCert, KubeFake::spec()).await;
    let dir = tempfile::tempdir().unwrap();
    let path = site(dir.path(), &fake);
    let b = Bootd::start_site(dir, &path, tuning()).await;
    boot(&b).await;

    let w0_sans = ["worker-0", "worker-0.lab.example.test", "127.0.0.20"];
    let csrs = [
        KubeletCsr::client("csr-w0-client", "system:node:worker-0"),
        KubeletCsr::serving("csr-w0-serving", "system:node:worker-0", &w0_sans),
        // Its Ignition went to 127.0.0.99: someone else may hold its credentials.
        KubeletCsr::client("csr-w1-client", "system:node:worker-1"),
        KubeletCsr::client("csr-m0-client", "system:node:master-0"),
        // An address that is not master-0's.
        KubeletCsr::serving(
            "csr-m0-serving",
            "system:node:master-0",
            &["master-0", "10.66.0.1"],
        ),
        // A kubelet-shaped subject for the general client signer.
        KubeletCsr {
            signer: "kubernetes.io/kube-apiserver-client",
            ..KubeletCsr::client("csr-m1-client", "system:node:master-1")
        },
        // No node of this site.
        KubeletCsr::client("csr-intruder", "system:node:intruder"),
        // Someone's own client certificate: none of the controller's business.
        KubeletCsr {
            signer: "kubernetes.io/kube-apiserver-client",
            ..KubeletCsr::client("csr-alice", "alice")
        },
    ];
    for c in &csrs {
        fake.add_csr(kubelet_csr(c));
    }
    wait_for("the three good CSRs approved", 20, || {
        fake.st().approved.len() >= 3
    })
    .await;
    // A few more looks: nothing else gets approved.
    let seen = fake.st().requests.len();
    wait_for("a few more looks", 10, || {
        fake.st().requests.len() > seen + 6
    })
    .await;
    let mut approved = fake.st().approved.clone();
    approved.sort();
    assert_eq!(
        approved,
        ["csr-m0-client", "csr-w0-client", "csr-w0-serving"]
    );

    let v = b
        .wait_node("worker-0", 10, |_, v| cond(v, "Joined")["status"] == "True")
        .await;
    assert_eq!(cond(&v, "Joined")["reason"], "CertificatesApproved");
    // The last phase of its timeline, once.
    let mut joined = 0;
    for _ in 0..100 {
        joined = b
            .app
            .timeline
            .track("worker-0")
            .map(|t| {
                t.events
                    .iter()
                    .filter(|e| e.phase == bootd::timeline::Phase::Joined)
                    .count()
            })
            .unwrap_or(0);
        if joined > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(joined, 1, "worker-0's timeline shows it joined");
    let pending = |node: &'static str, reason: &'static str| {
        b.wait_node(node, 10, move |_, v| {
            v["conditions"].as_array().unwrap().iter().any(|c| {
                c["type"] == "CSRPending" && c["status"] == "True" && c["reason"] == reason
            })
        })
    };
    let w1 = pending("worker-1", "IgnitionFromOtherAddress").await;
    assert!(
        cond(&w1, "CSRPending")["message"]
            .as_str()
            .unwrap()
            .contains("csr-w1-client"),
        "{w1:#}"
    );
    let m0 = pending("master-0", "ForeignSAN").await;
    assert!(
        cond(&m0, "CSRPending")["message"]
            .as_str()
            .unwrap()
            .contains("10.66.0.1"),
        "{m0:#}"
    );
    assert_eq!(cond(&m0, "Joined")["reason"], "WaitingForServingCSR");
    pending("master-1", "WrongSigner").await;

    // Never denied, never touched: the pending ones are as they were added.
    assert!(fake.st().denied.is_empty());
    for n in [
        "csr-w1-client",
        "csr-m0-serving",
        "csr-m1-client",
        "csr-intruder",
        "csr-alice",
    ] {
        assert!(
            fake.conditions(n).is_empty(),
            "{n}: {:?}",
            fake.conditions(n)
        );
    }
    let m = b.metrics().await;
    for (reason, n) in [
        ("UnknownNode", 1),
        ("IgnitionFromOtherAddress", 1),
        ("ForeignSAN", 1),
        ("WrongSigner", 1),
        ("BadRequest", 0),
    ] {
        assert_eq!(
            metric(&m, &format!("bootd_csr_pending{{reason=\"{reason}\"}} ")),
            Some(n),
            "{reason}\n{m}"
        );
    }
    assert_eq!(
        metric(&m, "bootd_csr_approved_total{kind=\"client\"} "),
        Some(2)
    );
    assert_eq!(
        metric(&m, "bootd_csr_approved_total{kind=\"serving\"} "),
        Some(1)
    );
    let (st, c) = b.call("GET", "/v1/cluster", None).await;
    assert_eq!(st, 200);
    assert_eq!(c["csrs"]["followed"], true);
    let listed: Vec<&Value> = c["csrs"]["pending"].as_array().unwrap().iter().collect();
    assert_eq!(listed.len(), 4, "{c:#}");
    assert!(
        listed.iter().any(|p| p["node"].is_null()
            && p["reason"] == "UnknownNode"
            && p["message"].as_str().unwrap().starts_with("csr-intruder")),
        "{c:#}"
    );

    // `bootd nodes wait --for joined`: worker-0 has joined; master-0 has not.
    let client = client_of(&b);
    let mut out = Vec::new();
    let code = controller::client::wait(
        &client,
        &["worker-0".into()],
        controller::client::WaitFor::Joined,
        Duration::from_secs(5),
        0.1,
        &mut out,
    )
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("all 1 node(s) Joined"), "{text}");
    let mut out = Vec::new();
    let code = controller::client::wait(
        &client,
        &["master-0".into()],
        controller::client::WaitFor::Joined,
        Duration::from_millis(300),
        0.1,
        &mut out,
    )
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out);
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("Joined: the kubelet's client CSR is approved; its serving CSR is not yet"),
        "{text}"
    );

    // A person approves master-0's serving CSR: it joins, nothing is pending for it.
    {
        let mut st = fake.st();
        let c = st.csrs.get_mut("csr-m0-serving").unwrap();
        c["status"]["conditions"] = serde_json::json!([{ "type": "Approved", "status": "True", "reason": "KubectlApprove", "message": "by a person" }]);
    }
    let m0 = b
        .wait_node("master-0", 10, |_, v| cond(v, "Joined")["status"] == "True")
        .await;
    assert_eq!(cond(&m0, "CSRPending")["status"], "False");

    // Every request was one the document allows; the key never left the kubeconfig.
    {
        let st = fake.st();
        assert!(st.violations.is_empty(), "{:#?}", st.violations);
        assert!(
            st.requests
                .iter()
                .any(|r| r.contains("certificatesigningrequests?limit=250&continue=")),
            "pages followed: {:?}",
            &st.requests[..3]
        );
    }
    let kc = std::fs::read_to_string(b.dir.path().join("kubeconfig")).unwrap();
    let key_b64 = kc
        .lines()
        .find_map(|l| l.trim().strip_prefix("client-key-data: "))
        .unwrap()
        .to_string();
    let key_pem = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(&key_b64)
            .unwrap(),
    )
    .unwrap();
    let key_line = key_pem.lines().nth(1).unwrap().to_string();
    let log = String::from_utf8_lossy(&logs().lock().unwrap()).into_owned();
    for secret in [
        &key_b64[key_b64.len() / 2..key_b64.len() / 2 + 32],
        &key_line[..32],
        "PRIVATE KEY",
    ] {
        assert!(
            !log.contains(secret) && !m.contains(secret) && !c.to_string().contains(secret),
            "{secret} leaked"
        );
    }
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_complete_from_the_clusters_configmap_starts_the_teardown() {
    const TOKEN: &str = "sha256~kube-token-for-tests-7f3a";
    let fake = KubeFake::start(Auth::Token(TOKEN.into()), KubeFake::spec()).await;
    let dir = tempfile::tempdir().unwrap();
    let path = site(dir.path(), &fake);
    let b = Bootd::start_site(dir, &path, tuning()).await;
    // A token for the bootstrap node's Ignition, taken before completion.
    let (st, script) = get_from("127.0.0.1", b.http, "/ipxe/bootstrap.ipxe").await;
    assert_eq!(st, 200, "{script}");
    let ignition = format!("/ignition/bootstrap?token={}", token_in(&script));
    // No ConfigMap, then one still in progress: not complete.
    wait_for("the ConfigMap asked for", 10, || {
        fake.st()
            .requests
            .iter()
            .any(|r| r.contains("configmaps/bootstrap"))
    })
    .await;
    fake.st().bootstrap = Some("progressing".into());
    let seen = fake.st().requests.len();
    wait_for("looked again", 10, || fake.st().requests.len() > seen + 2).await;
    assert_eq!(cluster(&b).await["bootstrapComplete"]["complete"], false);

    // A wrong token: refused by the server, said in /v1/cluster without it.
    fake.st().token = Some("another".into());
    let end = Instant::now() + Duration::from_secs(10);
    let c = loop {
        let c = cluster(&b).await;
        if c["csrs"]["error"].is_string() {
            break c;
        }
        assert!(Instant::now() < end, "{c:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        c["csrs"]["error"].as_str().unwrap().contains("HTTP 401"),
        "{c:#}"
    );
    assert!(!c.to_string().contains(TOKEN));
    fake.st().token = Some(TOKEN.into());

    fake.st().bootstrap = Some("complete".into());
    let end = Instant::now() + Duration::from_secs(10);
    let c = loop {
        let c = cluster(&b).await;
        if c["bootstrapComplete"]["complete"] == true && c["csrs"]["error"].is_null() {
            break c;
        }
        assert!(Instant::now() < end, "{c:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(c["bootstrapComplete"]["by"], "cluster", "{c:#}");
    // The teardown follows: the bootstrap node's Ignition is refused.
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let c = cluster(&b).await;
        let revoked = c["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["type"] == "BootstrapIgnitionRevoked" && x["status"] == "True");
        if revoked {
            break;
        }
        assert!(Instant::now() < end, "{c:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(get_from("127.0.0.1", b.http, &ignition).await.0, 404);
    // Once complete, the ConfigMap is not read again.
    let reads = || {
        fake.st()
            .requests
            .iter()
            .filter(|r| r.contains("configmaps/bootstrap"))
            .count()
    };
    let before = reads();
    let seen = fake.st().requests.len();
    wait_for("a few more looks", 10, || {
        fake.st().requests.len() > seen + 4
    })
    .await;
    assert_eq!(reads(), before);

    {
        let st = fake.st();
        assert!(st.violations.is_empty(), "{:#?}", st.violations);
        assert!(st.unauthorized > 0);
    }
    let log = String::from_utf8_lossy(&logs().lock().unwrap()).into_owned();
    assert!(!log.contains(TOKEN), "the token reached the log");
    assert!(!b.metrics().await.contains(TOKEN));
    b.stop().await;
}
