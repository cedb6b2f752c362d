//! What lbd derives from the example configurations, pinned in
//! `lbd/tests/golden/`. `UPDATE_GOLDEN=1 cargo test -p lbd` rewrites them.

use std::path::{Path, PathBuf};

pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub(crate) fn golden(name: &str, got: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    testkit::golden::check(&path, got);
}

#[test]
fn openshift_site_frontends() {
    let site =
        site::load(&repo().join("examples/openshift/site.yaml")).unwrap_or_else(|e| panic!("{e}"));
    golden(
        "openshift.plan",
        &lbd::plan::render(&lbd::plan::from_site(&site, false)),
    );
    // After the bootstrap completes: the same without the bootstrap node.
    golden(
        "openshift-bootstrap-complete.plan",
        &lbd::plan::render(&lbd::plan::from_site(&site, true)),
    );
}

#[test]
fn compact_site_sends_ingress_to_masters() {
    let site =
        site::load(&repo().join("examples/compact/site.yaml")).unwrap_or_else(|e| panic!("{e}"));
    golden(
        "compact.plan",
        &lbd::plan::render(&lbd::plan::from_site(&site, false)),
    );
}

#[test]
fn standalone_example() {
    let lb = site::load_lb(&repo().join("examples/lbd/lb.yaml")).unwrap_or_else(|e| panic!("{e}"));
    golden(
        "standalone.plan",
        &lbd::plan::render(&lbd::plan::from_lb(&lb)),
    );
}

/// The shape of `GET /status` (JSON crossing a process boundary: bootd's
/// timeline reads it), from a fixed value.
#[test]
fn status_json_shape() {
    use lbd::status::{BackendStatus, ClientStatus, FrontendStatus, Status};
    let s = Status {
        bootstrap: lbd::state::BootstrapPhase::Draining,
        connections: 3,
        frontends: vec![FrontendStatus {
            name: "api".into(),
            listen: "10.77.0.1:6443".parse().unwrap(),
            balance: "RoundRobin".into(),
            backends: vec![BackendStatus {
                name: "master-0".into(),
                addr: "10.77.0.11:6443".parse().unwrap(),
                role: "master".into(),
                state: "up".into(),
                reason: "2 consecutive probes passed".into(),
                active: 1,
                connections: 7,
                connect_failures: 0,
                unanswered_failures: 0,
                bytes_to: 1200,
                bytes_from: 5300,
                check_latency_ms: 1.5,
                up_since_ms: Some(1_795_550_000_123),
            }],
            clients: vec![ClientStatus {
                ip: "10.77.0.11".parse().unwrap(),
                first_ms: 1_795_550_000_456,
            }],
        }],
    };
    let mut got = serde_json::to_string_pretty(&s).unwrap();
    got.push('\n');
    golden("status.json", &got);
    assert_eq!(
        serde_json::from_str::<Status>(&got).unwrap(),
        s,
        "what lbd sends, a reader reads back"
    );
}
