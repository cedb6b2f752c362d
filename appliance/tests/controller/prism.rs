//! The provider clients against Stoplight Prism, from the providers' own
//! specs (../shared/specs): in mock mode Prism answers 422 to any request
//! the spec does not allow (that fails the call, so the test); in proxy
//! mode (`--errors`) in front of the stateful fake it checks both the
//! requests and the fake's replies, and every violation it logs fails the
//! test. Needs Prism (tests/controller/deps.sh); run by
//! tests/controller/e2e.sh (`--ignored`). PRISM and SPECS_DIR override where
//! Prism and the specs are.

use crate::fake::{self, Fake};
use crate::{cond, equinix_node, phase, powervs_node, Bootd};
use controller::providers::{self, equinix, NodeRequest, Provider};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;
use testkit::process::Process;

fn prism_bin() -> PathBuf {
    let p = std::env::var_os("PRISM")
        .map(PathBuf::from)
        .unwrap_or_else(|| testkit::repo().join("target/prism/node_modules/.bin/prism"));
    assert!(
        p.exists(),
        "Prism not found at {} (run tests/controller/deps.sh, or set PRISM)",
        p.display()
    );
    p
}

fn spec(rel: &str) -> PathBuf {
    let p = testkit::specs().join(rel);
    assert!(p.exists(), "spec {} not found (set SPECS_DIR)", p.display());
    p
}

/// One Prism process on 127.0.0.1, stopped (by PID, SIGTERM) on drop.
pub struct Prism {
    child: Process,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Prism {
    fn start(args: &[&str]) -> Prism {
        let port = crate::free_port();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("prism.log");
        let child = Command::new(prism_bin())
            .args(args)
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::from(
                std::fs::File::options().append(true).open(&log).unwrap(),
            ))
            .spawn()
            .unwrap();
        let mut child = Process::new(child).with_log(log).terminate_on_drop();
        child.wait_ready(
            "Prism",
            Duration::from_secs(60),
            Duration::from_millis(200),
            || std::net::TcpStream::connect(("127.0.0.1", port)).ok(),
        );
        Prism {
            child,
            port,
            _dir: dir,
        }
    }

    pub fn mock(spec_rel: &str) -> Prism {
        Prism::start(&["mock", spec(spec_rel).to_str().unwrap()])
    }

    pub fn proxy(spec_rel: &str, upstream: &str) -> Prism {
        Prism::start(&[
            "proxy",
            "--errors",
            spec(spec_rel).to_str().unwrap(),
            upstream,
        ])
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn log_text(&self) -> String {
        self.child.log_text()
    }

    /// A proxy forwarded requests, and found no request or response
    /// violation (with `--errors` it answers those with 422/500 and logs
    /// "not valid").
    pub fn assert_clean(&self) {
        let log = self.log_text();
        assert!(
            log.contains("Forwarding"),
            "Prism forwarded nothing:\n{log}"
        );
        let bad: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("Violation") || l.contains("not valid"))
            .collect();
        assert!(
            bad.is_empty(),
            "Prism found violations:\n{}",
            bad.join("\n")
        );
    }

    /// Prism's log has no request violation. (A mock's own invented replies
    /// do not always meet the spec's patterns; those are Prism's, not ours.)
    pub fn assert_requests_clean(&self) {
        self.assert_no_violation("Violation: request");
    }

    fn assert_no_violation(&self, what: &str) {
        let log = self.log_text();
        assert!(
            log.contains("The request passed the validation rules"),
            "Prism validated nothing:\n{log}"
        );
        let bad: Vec<&str> = log.lines().filter(|l| l.contains(what)).collect();
        assert!(
            bad.is_empty(),
            "Prism found violations:\n{}",
            bad.join("\n")
        );
    }
}

fn node() -> NodeRequest {
    NodeRequest {
        ip: "10.77.0.23".parse().unwrap(),
        macs: vec!["52:54:00:77:00:23".into()],
        ipxe_url: "http://10.77.0.1:8080/ipxe/worker-3.ipxe".into(),
        userdata: site::Secret(
            serde_json::json!({"ignition": {"version": "3.2.0", "config": {"merge": [{"source": "https://10.77.0.1:8443/ignition/worker-3?token=1.x"}]}}})
                .to_string(),
        ),
        ..NodeRequest::bare("worker-3", "lab")
    }
}

fn http() -> providers::Http {
    providers::Http::new(Duration::from_secs(20))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Prism: tests/controller/e2e.sh"]
async fn prism_mock_equinix_accepts_every_request_and_every_reply_parses() {
    let m = Prism::mock("equinix-metal/openapi3.bundled.json");
    // Through the interface the controller calls, with the spec as stored.
    let p: &dyn Provider = &equinix::Equinix {
        http: http(),
        base_url: m.url(),
        project_id: fake::PROJECT.into(),
        api_key: site::Secret(fake::EQUINIX_KEY.into()),
    };
    let spec = serde_json::to_value(equinix::DeviceSpec {
        metro: "sv".into(),
        plan: "c3.small.x86".into(),
        always_pxe: true,
        operating_system: None,
        hardware_reservation_id: Some("next-available".into()),
        spot_instance: true,
        spot_price_max: Some(1.23),
        billing_cycle: Some("hourly".into()),
    })
    .unwrap();
    // Prism's invented devices carry none of our tags: nothing is found, but
    // the list must be a valid request and its reply must parse.
    assert_eq!(p.find(&node()).await.unwrap(), None);
    let created = p.create(&node(), &spec).await.unwrap();
    assert!(!created.id.is_empty());
    p.get(&created.id).await.unwrap();
    p.delete(&created.id).await.unwrap();
    m.assert_requests_clean();
    // And without the key, Prism refuses (the mock does check security).
    let anon: &dyn Provider = &equinix::Equinix {
        http: http(),
        base_url: m.url(),
        project_id: fake::PROJECT.into(),
        api_key: site::Secret(String::new()),
    };
    let e = anon.find(&node()).await.unwrap_err();
    assert!(e.to_string().contains("HTTP 401"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Prism: tests/controller/e2e.sh"]
async fn prism_mock_powervs_and_iam_accept_every_request_and_every_reply_parses() {
    let iam = Prism::mock("powervs/iam-identity-token-api.patched.json");
    let pvs = Prism::mock("powervs/power-iaas.derived.swagger.json");
    let pv = fake::powervs_client(http(), pvs.url(), iam.url());
    let p: &dyn Provider = &pv;
    let spec = fake::powervs_spec(true);
    p.find(&node()).await.unwrap();
    let created = p.create(&node(), &spec).await.unwrap();
    assert!(!created.id.is_empty());
    p.get(&created.id).await.unwrap();
    p.delete(&created.id).await.unwrap();
    iam.assert_requests_clean();
    pvs.assert_requests_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Prism: tests/controller/e2e.sh"]
async fn prism_proxy_checks_the_fake_s_replies_through_both_lifecycles() {
    let f = Fake::start().await;
    let eq = Prism::proxy("equinix-metal/openapi3.bundled.json", &f.url());
    let iam = Prism::proxy("powervs/iam-identity-token-api.patched.json", &f.url());
    let pvs = Prism::proxy("powervs/power-iaas.derived.swagger.json", &f.url());
    let b = Bootd::start(&eq.url(), &iam.url(), &pvs.url()).await;
    for (name, body) in [
        (
            "worker-3",
            equinix_node("worker-3", "10.77.0.23", "52:54:00:77:00:23"),
        ),
        (
            "p9-1",
            powervs_node("p9-1", "10.77.0.31", "52:54:00:77:00:31"),
        ),
    ] {
        let (st, v) = b.create(body).await;
        assert_eq!(st, 201, "{v:#}");
        let v = b
            .wait_node(name, 60, |_, v| {
                cond(v, "Provisioned")["status"] == "True" || phase(v) == "Failed"
            })
            .await;
        assert_eq!(
            cond(&v, "Provisioned")["status"],
            "True",
            "{v:#}\n{}\n{}",
            eq.log_text(),
            pvs.log_text()
        );
        let (st, _) = b.call("DELETE", &format!("/v1/nodes/{name}"), None).await;
        assert_eq!(st, 202);
        b.wait_node(name, 60, |st, _| st == 404).await;
    }
    assert_eq!(f.live_devices(), 0);
    assert_eq!(f.live_instances(), 0);
    assert_eq!(f.st().creates, 2);
    for p in [&eq, &iam, &pvs] {
        p.assert_clean();
    }
    b.stop().await;
}

/// The seed platforms' whole loop (six nodes from API calls to Ready,
/// provider facts, bootstrap teardown) with Prism proxies in front of the
/// fake: every request the controller sends and every reply the fake gives
/// is checked against the providers' specs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Prism: tests/controller/e2e.sh"]
async fn prism_proxy_checks_both_platforms_cluster_loops() {
    use crate::platforms::{cluster_loop, Platform, Urls};
    for (p, net) in [(Platform::Equinix, 81), (Platform::PowerVs, 82)] {
        let proxies = std::sync::Mutex::new(Vec::new());
        let urls = |fake: &str| {
            let eq = Prism::proxy("equinix-metal/openapi3.bundled.json", fake);
            let iam = Prism::proxy("powervs/iam-identity-token-api.patched.json", fake);
            let pvs = Prism::proxy("powervs/power-iaas.derived.swagger.json", fake);
            let u = Urls {
                equinix: eq.url(),
                iam: iam.url(),
                powervs: pvs.url(),
            };
            proxies.lock().unwrap().extend([eq, iam, pvs]);
            u
        };
        cluster_loop(p, net, Some(&urls)).await;
        // The platform's own proxies carried the traffic: [equinix, iam, powervs].
        let proxies = proxies.lock().unwrap();
        let used: &[usize] = match p {
            Platform::Equinix => &[0],
            Platform::PowerVs => &[1, 2],
            Platform::Alibaba => unreachable!("the ECS fake checks its own requests"),
        };
        for i in used {
            proxies[*i].assert_clean();
        }
    }
}
