//! Past the Ignition fetch: a node whose role config merges the machine
//! config from `api-int:22623` gets `MachineConfigServed` from what lbd saw
//! (its status read through lbd's admin `GET /status`, as the executables
//! do): True at its first machine-config connection; False, with what to
//! check, when nothing came within `machineConfigWithin` while lbd was
//! being read; True again once it connects. A role config that is whole
//! (the bootstrap's) gets neither.

use super::*;
use bootd::timeline::{Phase, Raw, Subject};
use lbd::status::{ClientStatus, FrontendStatus, Status};
use std::sync::Mutex;

/// Serves `status` at `GET /status`, as lbd's admin listener does.
async fn lbd_admin(status: Arc<Mutex<Status>>) -> std::net::SocketAddr {
    testkit::http_fake::serve_body(move || serde_json::to_vec(&*status.lock().unwrap()).unwrap())
        .await
}

fn machine_config(clients: &[(&str, u64)]) -> Status {
    Status {
        bootstrap: lbd::state::BootstrapPhase::None,
        connections: 0,
        frontends: vec![FrontendStatus {
            name: "machine-config".into(),
            listen: "10.77.0.1:22623".parse().unwrap(),
            balance: "RoundRobin".into(),
            backends: vec![],
            clients: clients
                .iter()
                .map(|(ip, ms)| ClientStatus {
                    ip: ip.parse().unwrap(),
                    first_ms: *ms,
                })
                .collect(),
        }],
    }
}

/// An openshift-install pointer for `role`.
fn pointer(role: &str) -> String {
    serde_json::to_string(
        &json!({"ignition": {"version": "3.2.0", "config": {"merge": [
        {"source": format!("https://api-int.lab.example.test:22623/config/{role}")}]}}}),
    )
    .unwrap()
}

/// The node's MachineConfigServed status, when it has one.
fn status_of(v: &Value) -> Option<&str> {
    v["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "MachineConfigServed")?["status"]
        .as_str()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_config_served_from_lbd_and_not_reached_said_clearly() {
    let status = Arc::new(Mutex::new(machine_config(&[])));
    let admin = lbd_admin(Arc::clone(&status)).await;
    let f = Fake::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = write_site(dir.path(), &f.url(), &f.url(), &f.url(), "127.0.0.1:0");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{text}\nlb:\n  adminListen: {admin}\n")).unwrap();
    for role in ["master", "worker"] {
        std::fs::write(
            dir.path().join(format!("ignition/{role}.ign")),
            pointer(role),
        )
        .unwrap();
    }
    let tuning = controller::Tuning {
        machine_config_within: Some(Duration::from_secs(2)),
        ..tuning()
    };
    let b = Bootd::start_site_lb(
        dir,
        &path,
        tuning,
        Some(appliance::lbwatch::LbSource::Admin),
    )
    .await;
    // The controller follows the timeline once its API answers.
    assert_eq!(b.call("GET", "/v1/nodes", None).await.0, 200);
    // Each of three nodes fetched its Ignition.
    for n in ["master-0", "worker-0", "bootstrap"] {
        b.app.timeline.record(Raw::new(
            Subject::node(n),
            Phase::Ignition,
            "served",
            "Ignition served",
        ));
    }
    // master-0 reaches the machine-config server at once.
    *status.lock().unwrap() = machine_config(&[("10.77.0.11", now_ms())]);
    let v = b
        .wait_node("master-0", 20, |_, v| status_of(v) == Some("True"))
        .await;
    assert_eq!(
        cond(&v, "MachineConfigServed")["reason"],
        "ConnectedThroughLbd"
    );

    // worker-0 (10.77.0.20) never does: after the wait and the next look,
    // False with what to check.
    let v = b
        .wait_node("worker-0", 20, |_, v| status_of(v) == Some("False"))
        .await;
    let c = cond(&v, "MachineConfigServed");
    assert_eq!(c["reason"], "NotReached", "{c:#}");
    let msg = c["message"].as_str().unwrap();
    for want in [
        "10.77.0.20",
        "api-int.lab.example.test",
        "/config/worker",
        "the resolvers 10.77.0.1",
        "Names on every platform",
    ] {
        assert!(msg.contains(want), "{want:?} not in {msg}");
    }
    let (_, ev) = b.call("GET", "/v1/nodes/worker-0/events", None).await;
    assert!(
        ev["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "machine_config" && e["message"] == msg),
        "{ev:#}"
    );
    // master-0 stays True: it was never overdue.
    let (_, v) = b.call("GET", "/v1/nodes/master-0", None).await;
    assert_eq!(cond(&v, "MachineConfigServed")["status"], "True");
    // The bootstrap's config is whole: nothing to reach, nothing said.
    let (_, v) = b.call("GET", "/v1/nodes/bootstrap", None).await;
    assert!(
        !v["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "MachineConfigServed"),
        "{v:#}"
    );

    // worker-0 connects late (its resolver fixed): True.
    let t = now_ms();
    *status.lock().unwrap() = machine_config(&[("10.77.0.11", t - 9_000), ("10.77.0.20", t)]);
    let v = b
        .wait_node("worker-0", 20, |_, v| status_of(v) == Some("True"))
        .await;
    assert_eq!(
        cond(&v, "MachineConfigServed")["reason"],
        "ConnectedThroughLbd"
    );
    b.stop().await;
}
