//! `discovery.inspect`: a machine in no node that reports itself boots the
//! live system with the inspection agent; its inventory (taken only from
//! the address it reported from, with its token) is listed with it, and is
//! its node's once it is adopted, so the node need not inspect again.

use super::{after, curl_from as curl, tuning, write_site, Bootd, Fake};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discovered_machine_is_inspected_and_its_node_keeps_the_inventory() {
    let f = Fake::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = write_site(dir.path(), &f.url(), &f.url(), &f.url(), "127.0.0.1:0");
    let text = std::fs::read_to_string(&path).unwrap().replace(
        "    dnsServers: [10.77.0.1]\n",
        "    dnsServers: [10.77.0.1]\n    pool: { start: 10.77.0.200, end: 10.77.0.250 }\n",
    ) + "\ndiscovery: { enabled: true, inspect: true, kernelArgs: [console=ttyS0] }\n\
           inspection: { agents: { x86_64: tools/bootd-agent } }\n";
    std::fs::write(&path, text).unwrap();
    std::fs::create_dir_all(dir.path().join("images/tools")).unwrap();
    std::fs::write(dir.path().join("images/tools/bootd-agent"), b"agent").unwrap();
    let b = Bootd::start_site(dir, &path, tuning()).await;
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
