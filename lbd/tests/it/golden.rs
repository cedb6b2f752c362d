//! What lbd derives from the example configurations, pinned in
//! `lbd/tests/golden/`. `UPDATE_GOLDEN=1 cargo test -p lbd` rewrites them.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn golden(name: &str, got: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, got).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1 to create)", path.display()));
    assert_eq!(got, want, "{} differs (UPDATE_GOLDEN=1 to accept)", path.display());
}

#[test]
fn openshift_site_frontends() {
    let site = site::load(&repo().join("examples/openshift/site.yaml")).unwrap_or_else(|e| panic!("{e}"));
    golden("openshift.plan", &lbd::plan::render(&lbd::plan::from_site(&site, false)));
    // After the bootstrap completes: the same without the bootstrap node.
    golden("openshift-bootstrap-complete.plan", &lbd::plan::render(&lbd::plan::from_site(&site, true)));
}

#[test]
fn compact_site_sends_ingress_to_masters() {
    let site = site::load(&repo().join("examples/compact/site.yaml")).unwrap_or_else(|e| panic!("{e}"));
    golden("compact.plan", &lbd::plan::render(&lbd::plan::from_site(&site, false)));
}

#[test]
fn standalone_example() {
    let lb = site::load_lb(&repo().join("examples/lbd/lb.yaml")).unwrap_or_else(|e| panic!("{e}"));
    golden("standalone.plan", &lbd::plan::render(&lbd::plan::from_lb(&lb)));
}
