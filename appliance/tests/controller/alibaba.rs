//! The alibaba provider end to end with real bootd processes and the ECS
//! fake (tests/controller/ecs-fake.py: every parameter checked against the
//! API metadata, every signature verified by its own implementation):
//! three nodes; bootd is killed with SIGKILL while the ECS API holds the
//! reply to a RunInstances it carried out; the restarted bootd makes no
//! second instance (find before create, and the same ClientToken); then
//! `bootd cluster destroy` lists exactly the cluster's instances (and a
//! stray one with its tag), deletes them with `--yes`, and none of another
//! cluster's.

use super::{
    api_client, bootd_cli as cli, cond, free_port, process_site, until, until_ok, with_log, Fake,
    Proc,
};
use serde_json::json;
use testkit::ecs_fake::{tag, EcsFake, SECRET};

const INFRA: &str = "lab-x7k2p";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_after_run_instances_then_destroy_by_tag() {
    let ecs = EcsFake::start(0.5);
    let f = Fake::start().await; // the Equinix/Power VS fake the site names, unused here
    let dir = tempfile::tempdir().unwrap();
    let api_port = free_port();
    let account = format!(
        "    deadline: 10m\n    alibaba:\n      regionId: cn-hangzhou\n      endpoint: \"{}\"\n      accessKeyId: {{ file: {} }}\n      accessKeySecret: {{ file: {} }}\n      infraId: {INFRA}\n      zones: [cn-hangzhou-h]\n      vSwitches: {{ cn-hangzhou-h: vsw-h1 }}\n      securityGroupId: sg-lab\n      instanceTypes: {{ master: ecs.g6.xlarge, worker: ecs.g6.large }}\n      imageId: m-rhcos418\n      tags: {{ team: platform }}\n",
        ecs.endpoint(),
        ecs.akid_file().display(),
        ecs.secret_file().display()
    );
    let site = process_site(dir.path(), &f, api_port, move |t| {
        t.replace("    deadline: 10m\n", &account)
    });
    // The first RunInstances is carried out and its reply held.
    ecs.control(
        "POST",
        "/_fake/hold",
        Some(json!({"action": "RunInstances", "count": 1})),
    );
    let mut p1 = Proc::start(&site, 1);
    let api = api_client(&dir.path().join("state/ca.pem"), api_port, &p1).await;
    let names = ["worker-a", "worker-b", "worker-c"];
    for n in names {
        let body = json!({"name": n, "role": "worker", "provider": {"alibaba": {}}});
        let (st, v) = api.create(body).await;
        assert_eq!(st, 201, "{v:#}");
        assert_eq!(
            v["provider"]["alibaba"]["instanceType"], "ecs.g6.large",
            "{v:#}"
        );
    }
    until(with_log("a RunInstances held", &p1.log), 30, async || {
        ecs.control("GET", "/_fake/held", None)["held"] == json!(1)
    })
    .await;
    // The held create was carried out (the other nodes' may be too: each
    // node has its own loop); its reply never reached bootd.
    let at_kill = ecs.instances().len();
    assert!((1..=3).contains(&at_kill), "{at_kill}");
    p1.kill9();
    ecs.control("POST", "/_fake/release", None);

    let p2 = Proc::start(&site, 2);
    let api = api.logging(&p2.log);
    let provisioned = api
        .wait_nodes(names, 60, |_, st, v| {
            st == 200 && cond(v, "Provisioned")["status"] == "True"
        })
        .await;
    for v in provisioned {
        assert!(
            v["machine"]["addresses"].to_string().contains("10.77.0.")
                || v["spec"]["ip"]
                    .as_str()
                    .is_some_and(|i| i.starts_with("10.77.0.")),
            "{v:#}"
        );
    }
    let all = ecs.instances();
    assert_eq!(all.len(), 3, "one instance per node, none twice: {all:#?}");
    let mut got: Vec<String> = all
        .iter()
        .map(|i| i["InstanceName"].as_str().unwrap().to_string())
        .collect();
    got.sort();
    assert_eq!(got, names);
    for i in &all {
        assert_eq!(
            tag(i, &format!("kubernetes.io/cluster/{INFRA}")).as_deref(),
            Some("owned")
        );
        assert_eq!(tag(i, "openshift").as_deref(), Some("ISV Integration"));
        assert_eq!(tag(i, "team").as_deref(), Some("platform"));
    }
    let log = ecs.control("GET", "/_fake/requests", None);
    let runs = log
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["action"] == "RunInstances")
        .count();
    assert!(runs >= 3, "{runs} RunInstances");
    assert!(log
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["signatureVerified"] == json!(true)));

    // Another cluster's instances, and a stray one of ours without a node.
    for (name, infra) in [
        ("other-0", "other-9"),
        ("other-1", "other-9"),
        ("stray-0", INFRA),
    ] {
        ecs.control(
            "POST",
            "/_fake/instances",
            Some(json!({"RegionId": "cn-hangzhou", "InstanceName": name, "Status": "Running",
                        "Tags": [{"Key": format!("kubernetes.io/cluster/{infra}"), "Value": "owned"}]})),
        );
    }
    // Without --yes: the list, and nothing deleted.
    let (code, out) = cli(&site, &["cluster", "destroy", "--provider", "alibaba"]);
    assert_eq!(code, 1, "{out}");
    for n in names.iter().chain(&["stray-0"]) {
        assert!(out.contains(n), "{n} not listed: {out}");
    }
    assert!(!out.contains("other-"), "{out}");
    assert!(
        out.contains("4 machine(s) would be deleted; nothing was"),
        "{out}"
    );
    assert_eq!(ecs.instances().len(), 6);
    // With --yes: the nodes go (with their instances), the stray directly.
    let (code, out) = cli(
        &site,
        &["cluster", "destroy", "--provider", "alibaba", "--yes"],
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("deleting with node worker-a") && out.contains(": deleted"),
        "{out}"
    );
    let gone = with_log(
        "only the other cluster's instances left, and no node",
        &p2.log,
    );
    until_ok(gone, 60, async || {
        let left: Vec<String> = ecs
            .instances()
            .iter()
            .map(|i| i["InstanceName"].as_str().unwrap().to_string())
            .collect();
        let (_, nodes) = api.call("GET", "/v1/nodes", None).await;
        let api_nodes = nodes["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["name"].as_str().is_some_and(|x| names.contains(&x)))
            .count();
        if left == ["other-0", "other-1"] && api_nodes == 0 {
            Ok(())
        } else {
            Err(format!("left {left:?}, {api_nodes} nodes"))
        }
    })
    .await;
    // The AccessKey secret in no log and no API reply.
    for l in [&p1.log, &p2.log] {
        assert!(!std::fs::read_to_string(l).unwrap().contains(SECRET));
    }
    let (_, v) = api
        .call("GET", "/v1/cluster/machines?provider=alibaba", None)
        .await;
    assert!(!v.to_string().contains(SECRET));
    assert_eq!(v["machines"], json!([]), "{v:#}");
    // Nor in bootd's metrics.
    let text = std::fs::read_to_string(&site).unwrap();
    let http = text
        .split("  http:\n    listen: ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap()
        .to_string();
    let mut c = std::net::TcpStream::connect(&http).unwrap();
    use std::io::{Read, Write};
    write!(
        c,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut m = String::new();
    c.read_to_string(&mut m).unwrap();
    assert!(
        m.contains("bootd_http_requests_total") || m.contains("# TYPE"),
        "{m}"
    );
    assert!(!m.contains(SECRET));
    drop(p2);
}
