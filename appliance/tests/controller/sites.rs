//! Two sites on one etcd: an appliance of another site whose prefix is the
//! same (the default prefix names the cluster only) stops at its start,
//! naming the prefix and both identities, before it reads the token key or
//! the CA or joins an election; it writes nothing under the prefix. And
//! etcd in the clear, or without a client certificate, is warned about.

use super::{api_client, bootd_cli, free_port, process_site, until, Fake, Proc};
use std::path::Path;
use std::time::Duration;

/// The lab site with `host.store.etcd` on `endpoint`, the default prefix.
fn on_etcd(text: String, endpoint: &str) -> String {
    text.replacen(
        "host:\n",
        &format!("host:\n  store: {{ etcd: {{ endpoints: [\"{endpoint}\"], leaseTtl: 2s }} }}\n"),
        1,
    )
}

/// Every key under `prefix` with the revision of its last change.
fn keys(etcd: &etcd::Etcd) -> Vec<(String, i64)> {
    etcd.list("")
        .unwrap()
        .into_iter()
        .map(|v| (v.key, v.mod_revision))
        .collect()
}

fn read(dir: &Path, name: &str) -> Option<Vec<u8>> {
    std::fs::read(dir.join("state").join(name)).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_site_with_the_same_cluster_name_takes_over_nothing() {
    let etcd = etcd::testing::Server::start();
    let f = Fake::start().await;
    // Site A: lab.example.test, under /bare-metal-boot/lab/.
    let a_dir = tempfile::tempdir().unwrap();
    let a_port = free_port();
    let a_site = process_site(a_dir.path(), &f, a_port, |t| on_etcd(t, &etcd.endpoint));
    let a = Proc::start(&a_site, 1);
    let a_api = api_client(&a_dir.path().join("state/ca.pem"), a_port, &a).await;
    until("A elected", 20, async || {
        a_api.call("GET", "/v1/cluster", None).await.1["controller"]["leading"] == true
    })
    .await;
    let raw = etcd::Etcd::connect(&etcd.config("/bare-metal-boot/lab/")).unwrap();
    let before = keys(&raw);
    assert!(
        before.iter().any(|(k, _)| k == "bootd/secrets/token-key"),
        "{before:?}"
    );

    // Site B: another site whose cluster is also named lab (lab.other.test).
    let b_dir = tempfile::tempdir().unwrap();
    let b_site = process_site(b_dir.path(), &f, free_port(), |t| {
        on_etcd(t, &etcd.endpoint).replace("baseDomain: example.test", "baseDomain: other.test")
    });
    let mut b = Proc::start(&b_site, 2);
    let status = b.wait(Duration::from_secs(20));
    let log = std::fs::read_to_string(&b.log).unwrap_or_default();
    let adopted = |name: &str| {
        read(b_dir.path(), name).is_some() && read(b_dir.path(), name) == read(a_dir.path(), name)
    };
    let Some(status) = status else {
        panic!(
            "site B is running on site A's prefix: A's token.key adopted: {}, A's ca.key \
             adopted: {}\n{log}",
            adopted("token.key"),
            adopted("ca.key"),
        );
    };
    assert!(!status.success(), "{log}");
    for part in [
        "/bare-metal-boot/lab/",
        "\"lab.example.test\"",
        "\"lab.other.test\"",
        "host.store.etcd.prefix",
        "host.store.etcd.siteId",
    ] {
        assert!(log.contains(part), "{part} not said:\n{log}");
    }
    for name in ["token.key", "ca.key", "ca.pem"] {
        assert!(!adopted(name), "B took A's {name}");
    }
    assert!(!log.contains("elected"), "{log}");
    // Nor does a migration into that prefix copy anything.
    let (code, out) = bootd_cli(
        &b_site,
        &["store", "migrate", "--from", "sqlite", "--to", "etcd"],
    );
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("belongs to another site"), "{out}");
    // Nothing written under the prefix: no key, no election candidate.
    assert_eq!(keys(&raw), before, "B wrote under A's prefix");
    // A goes on.
    let (st, v) = a_api.call("GET", "/v1/cluster", None).await;
    assert_eq!((st, &v["controller"]["leading"]), (200, &true.into()));
    // http:// to etcd: said once, at the start.
    let a_log = std::fs::read_to_string(&a.log).unwrap();
    assert_eq!(
        a_log
            .matches("host.store.etcd.endpoints: http://: the token key")
            .count(),
        1,
        "{a_log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_config_warns_of_etcd_in_the_clear_and_without_a_client_certificate() {
    let f = Fake::start().await;
    let dir = tempfile::tempdir().unwrap();
    let site = process_site(dir.path(), &f, free_port(), |t| {
        on_etcd(t, "http://127.0.0.1:2379")
    });
    let check = |site: &Path| bootd_cli(site, &["--check-config", site.to_str().unwrap()]);
    let (code, out) = check(&site);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(
            "warning: host.store.etcd.endpoints: http://: the token key, the site CA's private key"
        ),
        "{out}"
    );
    for f in ["ca.pem", "c.pem", "k.pem"] {
        std::fs::write(dir.path().join(f), "x").unwrap();
    }
    let tls = |files: &str| {
        let text = std::fs::read_to_string(&site).unwrap().replace(
            "endpoints: [\"http://127.0.0.1:2379\"]",
            &format!("endpoints: [\"https://127.0.0.1:2379\"], tls: {{ {files} }}"),
        );
        std::fs::write(dir.path().join("tls.yaml"), text).unwrap();
        check(&dir.path().join("tls.yaml"))
    };
    let (code, out) = tls("ca: ca.pem");
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("warning: host.store.etcd.tls: no client certificate (cert, key)"),
        "{out}"
    );
    let (code, out) = tls("ca: ca.pem, cert: c.pem, key: k.pem");
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("host.store.etcd"), "{out}");
}
