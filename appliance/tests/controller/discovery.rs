//! `discovery.inspect`: a machine in no node that reports itself boots the
//! live system with the inspection agent; its inventory (taken only from
//! the address it reported from, with its token) is listed with it, and is
//! its node's once it is adopted, so the node need not inspect again.

use super::{after, curl_from as curl, tuning, write_site, Bootd, Fake};
use serde_json::json;

/// bootd with a pool in the lab network, `discovery: <discovery>` (more
/// top-level keys may follow it), and an agent file at tools/bootd-agent.
pub async fn with_discovery(discovery: &str) -> (Fake, Bootd) {
    let f = Fake::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = write_site(dir.path(), &f.url(), &f.url(), &f.url(), "127.0.0.1:0");
    let text = std::fs::read_to_string(&path).unwrap().replace(
        "    dnsServers: [10.77.0.1]\n",
        "    dnsServers: [10.77.0.1]\n    pool: { start: 10.77.0.200, end: 10.77.0.250 }\n",
    ) + &format!("\ndiscovery: {discovery}\n");
    std::fs::write(&path, text).unwrap();
    std::fs::create_dir_all(dir.path().join("images/tools")).unwrap();
    std::fs::write(dir.path().join("images/tools/bootd-agent"), b"agent").unwrap();
    let b = Bootd::start_site(dir, &path, tuning()).await;
    (f, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discovered_machine_is_inspected_and_its_node_keeps_the_inventory() {
    let (_f, b) = with_discovery(
        "{ enabled: true, inspect: true, kernelArgs: [console=ttyS0] }\n\
         inspection: { agents: { x86_64: tools/bootd-agent } }",
    )
    .await;
    // Its report comes from the address leased to its MAC.
    super::lease_on_loopback(&b, "52:54:00:77:00:c1", true);
    let uuid = "2c4e28ba-2fa1-11d2-883f-0016d3cca427";
    let report = format!("/discover?mac=52-54-00-77-00-c1&uuid={uuid}&buildarch=x86_64");
    let (st, s) = b.boot(&report).await;
    assert_eq!(st, 200, "{s}");
    assert!(
        s.contains(&format!("discovered as {uuid}: inspecting it")),
        "{s}"
    );
    assert!(
        s.contains("/images/lab/kernel ") && s.contains(" console=ttyS0"),
        "{s}"
    );
    let cfg_url = after(&s, "ignition.config.url=")
        .replace("http://10.77.0.1:8080", &format!("http://{}", b.http));
    // Its agent's config: to its address only.
    assert_eq!(curl("127.0.0.2", "GET", &cfg_url, None).0, 404);
    let (st, cfg) = curl("127.0.0.1", "GET", &cfg_url, None);
    assert_eq!(st, 200, "{cfg}");
    let post = after(&cfg, "inspect --post ")
        .replace("http://10.77.0.1:8080", &format!("http://{}", b.http));
    assert!(
        post.contains(&format!("/discover/inventory?key={uuid}&token=")),
        "{post}"
    );
    let inv = json!({"cpu": {"model": "", "count": 8, "arch": "x86_64"}, "memoryMib": 32768,
        "disks": [{"name": "/dev/sda", "byId": "/dev/disk/by-id/wwn-0x5000c500a1b2c3d4", "sizeBytes": 480u64 << 30,
                   "serial": "S1", "rotational": false}],
        "nics": [], "firmware": "uefi"}).to_string();
    assert_eq!(
        curl("127.0.0.2", "POST", &post, Some(&inv)).0,
        404,
        "not from its address"
    );
    assert_eq!(
        curl(
            "127.0.0.1",
            "POST",
            &post.replace("token=", "token=x"),
            Some(&inv)
        )
        .0,
        404
    );
    assert_eq!(curl("127.0.0.1", "POST", &post, Some(&inv)).0, 204);
    let (_, v) = b.call("GET", "/v1/discovered", None).await;
    assert_eq!(v["machines"][0]["inventory"]["cpu"]["count"], 8, "{v:#}");
    // Inspected: its next report waits to be adopted.
    let (_, s) = b.boot(&report).await;
    assert!(
        s.contains("adopt it with") && !s.contains("inspecting"),
        "{s}"
    );
    // Adopted with a hint: its node has the inventory, and after the wipe
    // it installs to the disk the hint chooses, with no second inspection.
    let (st, v) = b
        .call(
            "POST",
            &format!("/v1/discovered/{uuid}/adopt"),
            Some(
                json!({"name": "worker-5", "role": "worker", "fetchFrom": "anyAddress",
                        "rootDeviceHints": {"serialNumber": "S1"}}),
            ),
        )
        .await;
    assert_eq!(st, 201, "{v:#}");
    let (_, n) = b.call("GET", "/v1/nodes/worker-5/inventory", None).await;
    assert_eq!(
        n["reported"]["inventory"]["disks"][0]["serial"], "S1",
        "{n:#}"
    );
    assert_eq!(
        n["nextBoot"],
        json!({"boot": "wipe", "then": "install"}),
        "{n:#}"
    );
    b.app.inventories.set_releasing("worker-5", None).unwrap();
    let (_, n) = b.call("GET", "/v1/nodes/worker-5/inventory", None).await;
    assert_eq!(n["nextBoot"]["boot"], "install", "{n:#}");
    assert_eq!(
        n["nextBoot"]["device"], "/dev/disk/by-id/wwn-0x5000c500a1b2c3d4",
        "{n:#}"
    );
    b.stop().await;
}

/// The claim attack over HTTP and the API: a neighbour (MAC A, its own
/// lease) that saw a victim's PXE DISCOVER (MAC B, UUID U) reports
/// `uuid=U&nic1=B` first. Before, the victim's report was refused (409)
/// and adopting U made a node of [A, B], so A got the node's address and
/// Ignition. Now the victim's report is kept as a conflicting claim,
/// `GET /v1/discovered` and the CLI show it, adopting U is refused naming
/// both, and adopting by B gives the node B alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_neighbour_claiming_a_machines_uuid_is_a_conflict_not_the_machine() {
    let (_f, b) = with_discovery("{ enabled: true }").await;
    let u = "3d4e28ba-2fa1-11d2-883f-0016d3cca427";
    // The attacker, from its own lease.
    super::lease_on_loopback(&b, "02:66:66:66:66:0a", true);
    let (st, s) = b
        .boot(&format!(
            "/discover?mac=02-66-66-66-66-0a&nic1=52-54-00-77-00-d1&uuid={u}&serial=FAKE"
        ))
        .await;
    assert_eq!(st, 200, "{s}");
    // The victim, from its own lease: kept, not refused.
    super::lease_on_loopback(&b, "52:54:00:77:00:d1", true);
    let (st, s) = b
        .boot(&format!(
            "/discover?mac=52-54-00-77-00-d1&nic1=52-54-00-77-00-d2&uuid={u}&serial=S-REAL"
        ))
        .await;
    assert_eq!(st, 200, "{s}");
    let (_, v) = b.call("GET", "/v1/discovered", None).await;
    let m = &v["machines"][0];
    assert_eq!(m["key"], u, "{v:#}");
    assert_eq!(m["verified"], json!(["02:66:66:66:66:0a"]), "{v:#}");
    assert_eq!(
        m["conflicts"][0]["macs"],
        json!(["52:54:00:77:00:d1", "52:54:00:77:00:d2"]),
        "{v:#}"
    );
    assert_eq!(
        m["conflicts"][0]["verified"],
        json!(["52:54:00:77:00:d1"]),
        "{v:#}"
    );
    assert_eq!(m["conflicts"][0]["serial"], "S-REAL", "{v:#}");
    // The CLI's list says so.
    let mut out = Vec::new();
    controller::client::discovered_list_to(&super::csr::client_of(&b), &mut out)
        .await
        .unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.contains("CONFLICT: also claimed by 52:54:00:77:00:d1,52:54:00:77:00:d2?"),
        "{out}"
    );
    // Adopting U: refused, naming both claims.
    let node =
        json!({"name": "worker-6", "role": "worker", "live": true, "fetchFrom": "anyAddress"});
    let (st, v) = b
        .call(
            "POST",
            &format!("/v1/discovered/{u}/adopt"),
            Some(node.clone()),
        )
        .await;
    assert_eq!(st, 409, "{v:#}");
    assert!(
        v.to_string()
            .contains("booted from 02:66:66:66:66:0a, 52:54:00:77:00:d1"),
        "{v:#}"
    );
    // By the victim's MAC: its claim, its verified MAC only.
    let (st, v) = b
        .call("POST", "/v1/discovered/52:54:00:77:00:d1/adopt", Some(node))
        .await;
    assert_eq!(st, 201, "{v:#}");
    let (_, n) = b.call("GET", "/v1/nodes/worker-6", None).await;
    assert_eq!(n["spec"]["macs"], json!(["52:54:00:77:00:d1"]), "{n:#}");
    // The attacker's next report: not the node's script.
    super::lease_on_loopback(&b, "02:66:66:66:66:0a", true);
    let (st, s) = b
        .boot(&format!(
            "/discover?mac=02-66-66-66-66-0a&nic1=52-54-00-77-00-d1&uuid={u}"
        ))
        .await;
    assert_eq!(st, 200, "{s}");
    assert!(!s.contains("worker-6"), "{s}");
    b.stop().await;
}
