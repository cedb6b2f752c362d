//! `host.store`: SQLite by default, or an etcd cluster, validated with
//! every problem at once.

mod common;
use common::lab;
use site::Store;
use std::time::Duration;

fn with_store(yaml: &str) -> Result<site::Site, String> {
    let (_d, path) = lab(|t| t.replace("host:\n", &format!("host:\n  store: {yaml}\n")));
    site::load(&path).map_err(|e| e.to_string())
}

#[test]
fn sqlite_is_the_default_and_can_be_named() {
    let (_d, path) = lab(|t| t);
    assert_eq!(site::load(&path).unwrap().host.store, Store::Sqlite);
    assert_eq!(with_store("sqlite").unwrap().host.store, Store::Sqlite);
    assert_eq!(
        with_store("{sqlite: {}}").unwrap().host.store,
        Store::Sqlite
    );
}

#[test]
fn etcd_defaults_its_prefix_to_the_cluster_and_its_timeout_to_3s() {
    let site =
        with_store("{etcd: {endpoints: [\"http://127.0.0.1:2379\", \"http://127.0.0.2:2379\"]}}")
            .unwrap();
    let Store::Etcd(e) = site.host.store else {
        panic!("not etcd")
    };
    assert_eq!(
        e.endpoints,
        ["http://127.0.0.1:2379", "http://127.0.0.2:2379"]
    );
    assert_eq!(e.prefix, format!("/bare-metal-boot/{}/", site.cluster.name));
    assert_eq!(e.timeout, Duration::from_secs(3));
    assert_eq!(e.lease_ttl, Duration::from_secs(10));
    assert_eq!(e.tls, None);
    // The site's identity under the prefix: its cluster's domain.
    assert_eq!(e.site_id, site.cluster.domain());
    assert_eq!(e.cluster, site.cluster.domain());
}

/// `siteId` names the site under its prefix instead of the cluster's
/// domain: two sites whose clusters are alike tell themselves apart.
#[test]
fn a_site_id_replaces_the_cluster_domain_as_the_identity() {
    let site =
        with_store("{etcd: {endpoints: [\"http://127.0.0.1:2379\"], siteId: dc1-lab}}").unwrap();
    let Store::Etcd(e) = site.host.store else {
        panic!("not etcd")
    };
    assert_eq!(e.site_id, "dc1-lab");
    assert_eq!(e.cluster, "lab.example.test");
    for bad in ["\"\"", "\"dc1 lab\"", "dc1/lab"] {
        let e = with_store(&format!(
            "{{etcd: {{endpoints: [\"http://127.0.0.1:2379\"], siteId: {bad}, prefix: lab}}}}"
        ))
        .unwrap_err();
        assert!(
            e.contains("host.store.etcd.siteId: ")
                && e.contains("1 to 253 letters, digits, '.', '-' or '_'")
                && e.contains("host.store.etcd.prefix: "),
            "{bad}: every problem at once:\n{e}"
        );
    }
}

/// etcd in the clear, or without a client certificate, is warned about
/// by --check-config (site::exposure::warnings).
#[test]
fn etcd_without_client_certificates_is_warned_about() {
    let site = with_store("{etcd: {endpoints: [\"http://127.0.0.1:2379\"]}}").unwrap();
    let w = site::exposure::warnings(&site);
    assert_eq!(w, site::exposure::store_warnings(&site), "{w:#?}");
    assert_eq!(w.len(), 1, "{w:#?}");
    assert!(
        w[0].starts_with(
            "host.store.etcd.endpoints: http://: the token key, the site CA's private key"
        ) && w[0].contains("read and write /bare-metal-boot/lab/"),
        "{}",
        w[0]
    );

    let tls = |files: &str| {
        let (d, path) = lab(|t| {
            t.replace(
                "host:\n",
                &format!("host:\n  store: {{etcd: {{endpoints: [\"https://10.77.0.5:2379\"], tls: {{{files}}}}}}}\n"),
            )
        });
        for f in ["ca.pem", "c.pem", "k.pem"] {
            std::fs::write(d.path().join(f), "x").unwrap();
        }
        site::exposure::warnings(&site::load(&path).unwrap())
    };
    let w = tls("ca: ca.pem");
    assert_eq!(w.len(), 1, "{w:#?}");
    assert!(
        w[0].starts_with(
            "host.store.etcd.tls: no client certificate (cert, key): etcd cannot tell"
        ) && w[0].contains("/bare-metal-boot/lab/"),
        "{}",
        w[0]
    );
    assert_eq!(
        tls("ca: ca.pem, cert: c.pem, key: k.pem"),
        Vec::<String>::new()
    );
}

#[test]
fn etcd_over_tls_resolves_its_files_next_to_the_site() {
    let (d, path) = lab(|t| {
        t.replace(
            "host:\n",
            "host:\n  store:\n    etcd:\n      endpoints: [\"https://10.77.0.5:2379\"]\n      prefix: /boot/lab/\n      timeout: 500ms\n      leaseTtl: 4s\n      tls: {ca: etcd/ca.pem, cert: etcd/client.pem, key: etcd/client-key.pem}\n",
        )
    });
    std::fs::create_dir(d.path().join("etcd")).unwrap();
    for f in ["ca.pem", "client.pem", "client-key.pem"] {
        std::fs::write(d.path().join("etcd").join(f), "x").unwrap();
    }
    let site = site::load(&path).unwrap();
    let Store::Etcd(e) = site.host.store else {
        panic!("not etcd")
    };
    assert_eq!(e.prefix, "/boot/lab/");
    assert_eq!(e.timeout, Duration::from_millis(500));
    assert_eq!(e.lease_ttl, Duration::from_secs(4));
    let tls = e.tls.unwrap();
    assert_eq!(tls.ca, d.path().join("etcd/ca.pem"));
    assert_eq!(tls.key.unwrap(), d.path().join("etcd/client-key.pem"));
}

#[test]
fn every_problem_is_named_at_once() {
    let e = with_store(
        "{etcd: {endpoints: [\"https://10.0.0.1:2379\", \"http://10.0.0.2\", \"10.0.0.3:2379\"], prefix: \"lab\", timeout: 2h, leaseTtl: 1500ms, tls: {cert: c.pem}, colour: blue}}",
    )
    .unwrap_err();
    for want in [
        "host.store.etcd.endpoints[1]: \"http://10.0.0.2\": no port",
        "host.store.etcd.endpoints[2]: \"10.0.0.3:2379\": not an http:// or https:// URL",
        "host.store.etcd.prefix: \"lab\": begins and ends with /",
        "host.store.etcd.timeout: \"2h\": a duration from 100ms to 60s",
        "host.store.etcd.leaseTtl: \"1500ms\": whole seconds from 2s to 120s",
        "host.store.etcd.tls.ca: required",
        "host.store.etcd.tls.key: cert and key go together",
        "host.store.etcd.tls.cert:",
        "host.store.etcd.colour",
    ] {
        assert!(e.contains(want), "missing {want:?} in:\n{e}");
    }
}

#[test]
fn schemes_must_agree_with_tls() {
    let e = with_store("{etcd: {endpoints: [\"https://10.0.0.1:2379\"]}}").unwrap_err();
    assert!(
        e.contains("host.store.etcd.tls.ca: required with https:// endpoints"),
        "{e}"
    );
    let e =
        with_store("{etcd: {endpoints: [\"http://10.0.0.1:2379\", \"https://10.0.0.2:2379\"]}}")
            .unwrap_err();
    assert!(
        e.contains("host.store.etcd.endpoints: http:// and https:// mixed"),
        "{e}"
    );
    let e = with_store("{etcd: {endpoints: [\"http://10.0.0.1:2379\"], tls: {ca: ca.pem}}}")
        .unwrap_err();
    assert!(
        e.contains("host.store.etcd.tls: given, but the endpoints are http://"),
        "{e}"
    );
}

#[test]
fn names_other_than_sqlite_are_refused() {
    let e = with_store("etcd").unwrap_err();
    assert!(e.contains("host.store: etcd needs its endpoints"), "{e}");
    let e = with_store("postgres").unwrap_err();
    assert!(e.contains("host.store: \"postgres\": not a store"), "{e}");
    let e = with_store("{sqlite: {}, etcd: {endpoints: [\"http://127.0.0.1:2379\"]}}").unwrap_err();
    assert!(e.contains("host.store: sqlite and etcd both given"), "{e}");
}

/// `host.dhcp.ha`: hotStandby by default; loadBalancing needs etcd.
#[test]
fn dhcp_ha_modes() {
    let (_d, path) = common::lab(|t| t);
    assert_eq!(
        site::load(&path).unwrap().host.dhcp.unwrap().ha,
        site::DhcpHa::HotStandby
    );
    let (_d, path) = common::lab(|t| {
        t.replace(
            "    leaseTime: 1h\n",
            "    leaseTime: 1h\n    ha: loadBalancing\n",
        )
    });
    let e = site::load(&path).unwrap_err().to_string();
    assert!(
        e.contains("host.dhcp.ha: loadBalancing needs host.store.etcd"),
        "{e}"
    );
    let (_d, path) = common::lab(|t| {
        t.replace(
            "    leaseTime: 1h\n",
            "    leaseTime: 1h\n    ha: loadBalancing\n",
        )
        .replacen(
            "host:\n",
            "host:\n  store: { etcd: { endpoints: [\"http://127.0.0.1:2379\"] } }\n",
            1,
        )
    });
    assert_eq!(
        site::load(&path).unwrap().host.dhcp.unwrap().ha,
        site::DhcpHa::LoadBalancing
    );
    let (_d, path) = common::lab(|t| {
        t.replace(
            "    leaseTime: 1h\n",
            "    leaseTime: 1h\n    ha: roundRobin\n",
        )
    });
    let e = site::load(&path).unwrap_err().to_string();
    assert!(
        e.contains("host.dhcp.ha: \"roundRobin\": want hotStandby or loadBalancing"),
        "{e}"
    );
}
