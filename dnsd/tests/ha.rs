//! Zone serials agreed by appliances sharing a real etcd (a member started
//! by the test, stopped by PID): two appliances loading the same site at
//! different moments serve the same serials; a change of content raises
//! the serial once, and the other appliance takes the raised one.

use std::path::Path;

fn site(dir: &Path, etcd: &str, extra_node: bool) -> site::Site {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    std::fs::copy(data.join("worker.ign"), dir.join("worker.ign")).unwrap();
    let mut text = std::fs::read_to_string(data.join("site.yaml"))
        .unwrap()
        .replacen(
            "host:\n",
            &format!(
                "host:\n  store: {{ etcd: {{ endpoints: [\"{etcd}\"], prefix: /dns-test/ }} }}\n"
            ),
            1,
        );
    if extra_node {
        text = text.replace(
            "nodes:\n",
            "nodes:\n  - { name: worker-9, role: worker, live: true, macs: [\"52:54:00:77:00:29\"], ip: 10.77.0.29 }\n",
        );
    }
    std::fs::write(dir.join("site.yaml"), text).unwrap();
    site::load(&dir.join("site.yaml")).unwrap_or_else(|e| panic!("{e}"))
}

fn serials(l: &dnsd::Loaded) -> Vec<(String, u32)> {
    l.catalog
        .zones
        .iter()
        .map(|z| (z.origin.to_ascii(), z.serial()))
        .collect()
}

#[test]
fn appliances_serve_the_same_serials() {
    let server = etcd::testing::Server::start();
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = dnsd::load_site(&site(da.path(), &server.endpoint, false), None).unwrap();
    let e = etcd::Etcd::connect(a.shared.as_ref().expect("the site names etcd")).unwrap();
    let a = dnsd::ha::agree(&e, a);
    // B loads later: alone, its serials (the time) would be larger.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let b_alone = dnsd::load_site(&site(db.path(), &server.endpoint, false), None).unwrap();
    assert_ne!(
        serials(&a),
        serials(&b_alone),
        "the test needs serials that differ alone"
    );
    let b = dnsd::ha::agree(&e, b_alone);
    assert_eq!(serials(&a), serials(&b));
    assert!(serials(&a).len() >= 2, "{:?}", serials(&a));

    // A's site gains a node: its forward and reverse zones change, once.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let a2 = dnsd::load_site(&site(da.path(), &server.endpoint, true), Some(&a.catalog)).unwrap();
    let a2 = dnsd::ha::agree(&e, a2);
    let (before, after) = (serials(&a), serials(&a2));
    let raised: Vec<_> = before
        .iter()
        .zip(&after)
        .filter(|(x, y)| y.1 > x.1)
        .collect();
    assert!(!raised.is_empty(), "{before:?} -> {after:?}");
    assert!(
        before.iter().zip(&after).all(|(x, y)| y.1 >= x.1),
        "{before:?} -> {after:?}"
    );
    // B gets the same change later: the same raised serials, not its own.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let b2 = dnsd::load_site(&site(db.path(), &server.endpoint, true), Some(&b.catalog)).unwrap();
    let b2 = dnsd::ha::agree(&e, b2);
    assert_eq!(serials(&a2), serials(&b2));
    // A site without etcd names none.
    let plain =
        site::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/site.yaml")).unwrap();
    assert!(dnsd::load_site(&plain, None).unwrap().shared.is_none());
}
