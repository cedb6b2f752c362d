//! `bootd store migrate`: a single appliance's state (SQLite and files)
//! into the site's etcd and back out into another state directory, with
//! the real binary and a real etcd member: everything the first held, the
//! second holds.

use controller::store::{Condition, Event, NodeRow, Resource, Store};
use std::path::Path;
use std::process::Command;

fn site_in(dir: &Path, etcd: Option<&str>) -> std::path::PathBuf {
    testkit::dhcp::write_site(dir, |t| match etcd {
        Some(e) => t.replacen(
            "host:\n",
            &format!("host:\n  store: {{ etcd: {{ endpoints: [\"{e}\"], prefix: /migrate/ }} }}\n"),
            1,
        ),
        None => t,
    })
}

fn migrate(site: &Path, from: &str, to: &str) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_bootd"))
        .args([
            "--site",
            site.to_str().unwrap(),
            "store",
            "migrate",
            "--from",
            from,
            "--to",
            to,
        ])
        .output()
        .unwrap();
    (out.status.success(), testkit::process::output_text(&out))
}

fn node(name: &str) -> NodeRow {
    NodeRow {
        name: name.into(),
        spec: serde_json::json!({"name": name, "role": "worker", "macs": ["52:54:00:00:00:01"], "ip": "10.77.0.50"}),
        provider: serde_json::json!({"equinix": {"plan": "c3.small.x86"}}),
        created_at: 1_700_000_000_000,
        deleting: false,
        phase: "Provisioned".into(),
        message: "m".into(),
        updated_at: 1_700_000_000_500,
    }
}

#[test]
fn a_single_appliance_moves_into_etcd_and_back_with_everything() {
    let etcd = etcd::testing::Server::start();
    let a = tempfile::tempdir().unwrap();
    let site_a = site_in(a.path(), Some(&etcd.endpoint));
    let state_a = a.path().join("state");
    std::fs::create_dir_all(&state_a).unwrap();
    // The single appliance's state.
    {
        let s = Store::sqlite(&state_a).unwrap();
        for n in ["w1", "w2"] {
            assert!(s.insert_node(&node(n)).unwrap());
        }
        let res = Resource {
            provider: "equinix".into(),
            external_id: "d-1".into(),
            state: "active".into(),
            addresses: vec!["10.70.0.5".into()],
            updated_at: 5,
        };
        s.put_resource("w1", &res).unwrap();
        s.put_facts("w1", &serde_json::json!({"macs": ["52:54:00:00:00:01"]}))
            .unwrap();
        let c = Condition {
            kind: "Ready".into(),
            status: "True".into(),
            reason: "R".into(),
            message: String::new(),
            at: 42,
        };
        s.set_condition("w1", &c).unwrap();
        s.add_events(&[(
            "w1".into(),
            Event {
                at: 7,
                kind: "api".into(),
                message: "created".into(),
            },
        )])
        .unwrap();
        s.begin_intent("w2", "create", "equinix").unwrap();
        s.restore_cluster("bootstrapComplete", "api", 99).unwrap();
    }
    std::fs::write(state_a.join("token.key"), [7u8; 32]).unwrap();
    bootd::tls::load_or_create(&state_a, &["localhost".into()]).unwrap();
    let far = runtime::clock::unix_secs() + 3600;
    std::fs::write(
        state_a.join("leases.jsonl"),
        format!(
            "{{\"mac\":\"02:00:00:00:00:01\",\"ip\":\"10.77.0.100\",\"expires\":{far}}}\n\
             {{\"mac\":\"02:00:00:00:00:02\",\"ip\":\"10.77.0.101\",\"expires\":{far},\"state\":\"declined\"}}\n"
        ),
    )
    .unwrap();
    std::fs::write(
        state_a.join("spent-tokens"),
        format!("{far} live-nonce\n5 long-expired\n"),
    )
    .unwrap();

    let (ok, out) = migrate(&site_a, "sqlite", "etcd");
    assert!(ok, "{out}");
    assert!(out.contains("2 nodes (1 machines, 1 events, 1 open intents), 1 cluster facts, 2 DHCP records, 1 spent tokens"), "{out}");
    // Again: the target holds nodes now.
    let (ok, out) = migrate(&site_a, "sqlite", "etcd");
    assert!(!ok && out.contains("already holds 2 node(s)"), "{out}");

    // Out again, into a new state directory.
    let b = tempfile::tempdir().unwrap();
    let site_b = site_in(b.path(), Some(&etcd.endpoint));
    let (ok, out) = migrate(&site_b, "etcd", "sqlite");
    assert!(ok, "{out}");
    let state_b = b.path().join("state");
    for f in ["token.key", "ca.pem", "ca.key"] {
        assert_eq!(
            std::fs::read(state_a.join(f)).unwrap(),
            std::fs::read(state_b.join(f)).unwrap(),
            "{f}"
        );
    }
    let (sa, sb) = (
        Store::sqlite(&state_a).unwrap(),
        Store::sqlite(&state_b).unwrap(),
    );
    assert_eq!(sa.nodes().unwrap(), sb.nodes().unwrap());
    for n in ["w1", "w2"] {
        assert_eq!(sa.resource(n).unwrap(), sb.resource(n).unwrap());
        assert_eq!(sa.conditions(n).unwrap(), sb.conditions(n).unwrap());
        assert_eq!(sa.events(n).unwrap(), sb.events(n).unwrap());
    }
    assert_eq!(sa.all_facts().unwrap(), sb.all_facts().unwrap());
    assert_eq!(sb.open_intents("w2").unwrap().len(), 1);
    assert_eq!(sa.clusters().unwrap(), sb.clusters().unwrap());
    let leases = |d: &Path| {
        let (t, _) = dhcp::v4::leases::load(&d.join("leases.jsonl")).unwrap();
        let mut v: Vec<_> = t
            .leases()
            .chain(t.declined())
            .cloned()
            .map(|l| (l.mac, l.ip, l.expires, l.state))
            .collect();
        v.sort_by_key(|x| x.1);
        v
    };
    assert_eq!(leases(&state_a), leases(&state_b));
    assert_eq!(leases(&state_b).len(), 2);
    assert_eq!(
        std::fs::read_to_string(state_b.join("spent-tokens")).unwrap(),
        format!("{far} live-nonce\n")
    );

    // A site that names no etcd: said, nothing done.
    let c = tempfile::tempdir().unwrap();
    let (ok, out) = migrate(&site_in(c.path(), None), "sqlite", "etcd");
    assert!(
        !ok && out.contains("host.store.etcd is not set in the site"),
        "{out}"
    );
}
