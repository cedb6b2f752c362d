//! lbd's status reaches bootd's timeline through the executables' watcher:
//! lbd's admin `GET /status` (a stand-in serving lbd's own typed
//! `lbd::status::Status` as JSON, as another process would) is read,
//! and a node's first machine-config connection and its API backend up
//! become its timeline's last two phases, at lbd's times, once each.

use lbd::status::{BackendStatus, ClientStatus, FrontendStatus, Status};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Serves `status` (as lbd's admin listener does) at `GET /status`.
async fn lbd_admin(status: Arc<Mutex<Status>>) -> SocketAddr {
    testkit::http_fake::serve_body(move || serde_json::to_vec(&*status.lock().unwrap()).unwrap())
        .await
}

fn frontend(
    name: &str,
    backends: Vec<BackendStatus>,
    clients: Vec<ClientStatus>,
) -> FrontendStatus {
    FrontendStatus {
        name: name.into(),
        listen: "10.77.0.1:6443".parse().unwrap(),
        balance: "RoundRobin".into(),
        backends,
        clients,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lbd_phases_from_its_status() {
    let status = Arc::new(Mutex::new(Status {
        bootstrap: lbd::state::BootstrapPhase::None,
        connections: 0,
        frontends: vec![],
    }));
    let admin = lbd_admin(Arc::clone(&status)).await;
    let dir = tempfile::tempdir().unwrap();
    let path = testkit::dhcp::write_site(dir.path(), |mut t| {
        t.push_str(&format!("\nlb:\n  adminListen: {admin}\n"));
        t
    });
    let mut config = appliance::boot_config(site::load(&path).unwrap(), None);
    config.poll = None;
    config.grace = Duration::from_millis(200);
    let app = bootd::prepare(&config, false).unwrap();
    let shutdown = CancellationToken::new();
    let sockets = appliance::BootSockets {
        boot: bootd::Sockets::http_only(TcpListener::bind("127.0.0.1:0").await.unwrap(), None),
        api: None,
    };
    let source = Some(appliance::lbwatch::LbSource::Admin);
    let task = tokio::spawn(appliance::run_boot(
        Arc::clone(&app),
        config,
        sockets,
        controller::Tuning::default(),
        source,
        shutdown.clone(),
    ));

    // master-0 (10.77.0.11): its first machine-config connection, then its API backend up.
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let (mc_ms, api_ms) = (now_ms - 2_000, now_ms - 1_000);
    let up = BackendStatus {
        name: "master-0".into(),
        addr: "10.77.0.11:6443".parse().unwrap(),
        role: "master".into(),
        state: "up".into(),
        reason: "HTTPS /readyz 200".into(),
        active: 0,
        connections: 0,
        connect_failures: 0,
        unanswered_failures: 0,
        bytes_to: 0,
        bytes_from: 0,
        check_latency_ms: 1.0,
        up_since_ms: Some(api_ms),
    };
    let down = BackendStatus {
        name: "master-1".into(),
        addr: "10.77.0.12:6443".parse().unwrap(),
        state: "down".into(),
        up_since_ms: None,
        ..up.clone()
    };
    *status.lock().unwrap() = Status {
        bootstrap: lbd::state::BootstrapPhase::None,
        connections: 0,
        frontends: vec![
            frontend(
                "machine-config",
                vec![],
                vec![ClientStatus {
                    ip: "10.77.0.11".parse().unwrap(),
                    first_ms: mc_ms,
                }],
            ),
            frontend("api", vec![up, down], vec![]),
        ],
    };
    let mut track = None;
    for _ in 0..100 {
        track = app
            .timeline
            .track("master-0")
            .filter(|t| t.events.len() >= 2);
        if track.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    track.expect("lbd's phases never reached master-0's timeline");
    // Several more polls: each event once.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let track = app.timeline.track("master-0").unwrap();
    let got: Vec<(&str, &str, i64)> = track
        .events
        .iter()
        .map(|e| (e.phase.as_str(), e.what.as_ref(), e.at_us))
        .collect();
    assert_eq!(
        got,
        [
            ("machine_config", "first_connection", mc_ms as i64 * 1000),
            ("api", "backend_up", api_ms as i64 * 1000)
        ],
        "lbd's phases at lbd's times, once each"
    );
    assert!(
        app.timeline
            .track("master-1")
            .is_none_or(|t| t.events.is_empty()),
        "a backend that is down adds nothing"
    );
    shutdown.cancel();
    task.await.unwrap().unwrap();
}
