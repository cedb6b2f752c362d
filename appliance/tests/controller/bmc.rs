//! kill -9 of a real bootd process in the middle of a Redfish create: after
//! the boot override reached the BMC but before the power-on was sent, and
//! after the power-on reached the BMC but before its reply. The restarted
//! bootd powers the machine on exactly once in both cases, and there is one
//! node.

use super::{
    after, api_client, cond, curl_from, free_port, process_site, until, with_log, Fake, Proc,
};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use testkit::redfish_fake::{fresh, serve, PASSWORD, SYS};

/// The site of a bootd process in `dir` with its BMC files in `dir/bmc`
/// (made) and the Redfish provider: (that folder, the site, the API port).
pub(super) fn bmc_site(
    dir: &std::path::Path,
    f: &Fake,
) -> (std::path::PathBuf, std::path::PathBuf, u16) {
    let files = dir.join("bmc");
    std::fs::create_dir_all(&files).unwrap();
    let api_port = free_port();
    let files_s = files.display().to_string();
    let site = process_site(dir, f, api_port, move |t| {
        t.replace(
            "    deadline: 10m\n",
            &format!("    deadline: 10m\n    bmcFiles: {files_s}\n    redfish: {{ powerOffTimeout: 5s }}\n"),
        )
    });
    (files, site, api_port)
}

async fn kill_9_while_the_bmc_holds(method: &'static str, path: &'static str) {
    let bmc = fresh();
    let hold = Arc::new(tokio::sync::Notify::new());
    bmc.lock().unwrap().hold = Some((method, path, Arc::clone(&hold)));
    let addr = serve(bmc.clone(), None).await;
    let f = Fake::start().await; // the Equinix/Power VS fake the site names, unused here
    let dir = tempfile::tempdir().unwrap();
    let (files, site, api_port) = bmc_site(dir.path(), &f);
    std::fs::write(files.join("rack-1"), PASSWORD).unwrap();
    let mut p1 = Proc::start(&site, 1);
    let api = api_client(&dir.path().join("state/ca.pem"), api_port, &p1).await;
    let body = json!({
        "name": "rack-1", "role": "worker", "ip": "10.77.0.61", "live": true,
        "provider": { "redfish": {
            "url": format!("http://{addr}{SYS}"), "username": "admin",
            "password": { "file": files.join("rack-1") }, "allowPlainHttp": true, "mode": "Legacy" } }
    });
    let (st, v) = api.create(body).await;
    assert_eq!(st, 201, "{v:#}");
    // The held request took effect at the BMC; its reply never comes: kill.
    let reached = with_log(format!("the {method} reached the BMC"), &p1.log);
    until(reached, 20, async || {
        let b = bmc.lock().unwrap();
        let reached = match method {
            "PATCH" => !b.patches.is_empty(),
            _ => !b.resets.is_empty(),
        };
        reached && b.hold.is_none()
    })
    .await;
    p1.kill9();
    hold.notify_waiters();
    let resets_at_kill = bmc.lock().unwrap().resets.clone();
    match method {
        "PATCH" => assert!(resets_at_kill.is_empty(), "killed before the power-on"),
        _ => assert_eq!(resets_at_kill, vec!["On"]),
    }
    let p2 = Proc::start(&site, 2);
    let api = api.logging(&p2.log);
    let v = api
        .wait_node("rack-1", 30, |st, v| {
            st == 200 && cond(v, "Provisioned")["status"] == "True"
        })
        .await;
    assert_eq!(
        v["spec"]["macs"],
        json!(["52:54:00:aa:bb:01", "52:54:00:aa:bb:02"]),
        "{v:#}"
    );
    // Settle a few polls: nothing more is sent.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    {
        let b = bmc.lock().unwrap();
        assert_eq!(b.resets, vec!["On"], "powered exactly once");
        assert_eq!(b.power, "On");
    }
    let (_, list) = api.call("GET", "/v1/nodes", None).await;
    let n = list["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["name"] == "rack-1")
        .count();
    assert_eq!(n, 1, "one node");
    // The password is in neither process's log.
    for log in [&p1.log, &p2.log] {
        assert!(!std::fs::read_to_string(log).unwrap().contains(PASSWORD));
    }
    drop(p2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_between_the_boot_override_and_the_power_on() {
    kill_9_while_the_bmc_holds("PATCH", SYS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_after_the_power_on_reached_the_bmc() {
    kill_9_while_the_bmc_holds("POST", "/redfish/v1/Systems/sys-1/Actions").await;
}

/// A BMC whose system's MACs another node has: the node fails before
/// anything is sent to the machine (no override, no power action), saying
/// which MAC and which node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bmc_machine_whose_mac_another_node_has_is_never_powered() {
    let bmc = fresh();
    let addr = serve(bmc.clone(), None).await;
    let f = Fake::start().await;
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("bmc");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join("rack-2"), PASSWORD).unwrap();
    let path = super::write_site(dir.path(), &f.url(), &f.url(), &f.url(), "127.0.0.1:0");
    let text = std::fs::read_to_string(&path).unwrap().replace(
        "    deadline: 10m\n",
        &format!(
            "    deadline: 10m\n    bmcFiles: {}\n    redfish: {{ powerOffTimeout: 5s }}\n",
            files.display()
        ),
    );
    std::fs::write(&path, text).unwrap();
    let b = super::Bootd::start_site(dir, &path, super::tuning()).await;
    let (st, _) = b
        .create(json!({"name": "worker-8", "role": "worker", "ip": "10.77.0.28", "macs": ["52:54:00:aa:bb:02"], "live": true}))
        .await;
    assert_eq!(st, 201);
    let (st, v) = b
        .create(
            json!({"name": "rack-2", "role": "worker", "ip": "10.77.0.62", "live": true, "provider": {"redfish": {
            "url": format!("http://{addr}{SYS}"), "username": "admin",
            "password": {"file": files.join("rack-2")}, "allowPlainHttp": true}}}),
        )
        .await;
    assert_eq!(st, 201, "{v:#}");
    let v = b
        .wait_node("rack-2", 20, |_, v| v["phase"] == "Failed")
        .await;
    assert!(
        v["message"].as_str().unwrap().contains("not started")
            && v["message"].to_string().contains("52:54:00:aa:bb:02"),
        "{v:#}"
    );
    assert_eq!(cond(&v, "AddressesRecorded")["status"], "False");
    {
        let fake = bmc.lock().unwrap();
        assert!(fake.patches.is_empty(), "no override sent");
        assert!(fake.resets.is_empty(), "no power action sent");
    }
    b.stop().await;
}

/// `bootd nodes import --install-config`: an install-config's
/// platform.baremetal.hosts entry becomes a node driven through its BMC
/// (redfish+http:// here, against the Redfish fake), with its boot MAC,
/// root-device hint and NMState network config; bootd reads the BMC
/// password from the host's entry in the install-config, which stays in
/// host.api.bmcFiles, and the password is in no request, log or output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_install_config_host_is_imported_with_its_password_left_in_the_file() {
    let bmc = fresh();
    let addr = serve(bmc.clone(), None).await;
    let f = Fake::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (files, site, api_port) = bmc_site(dir.path(), &f);
    let ic = files.join("install-config.yaml");
    std::fs::write(
        &ic,
        format!(
            "apiVersion: v1\nmetadata: {{ name: lab }}\nplatform:\n  baremetal:\n    hosts:\n      \
             - name: rack-3\n        role: worker\n        \
             bmc: {{ address: \"redfish+http://{addr}{SYS}\", username: admin, password: \"{PASSWORD}\" }}\n        \
             bootMACAddress: \"52:54:00:aa:bb:01\"\n        bootMode: legacy\n        \
             rootDeviceHints: {{ deviceName: /dev/disk/by-path/pci-0000:00:05.0 }}\n        \
             networkConfig:\n          interfaces:\n            \
             - {{ name: eno1, type: ethernet, ipv4: {{ enabled: true, address: [{{ ip: 10.77.0.63, prefix-length: 24 }}] }} }}\n          \
             routes: {{ config: [{{ destination: 0.0.0.0/0, next-hop-address: 10.77.0.1, next-hop-interface: eno1 }}] }}\n"
        ),
    )
    .unwrap();
    let p = Proc::start(&site, 1);
    let api = api_client(&dir.path().join("state/ca.pem"), api_port, &p).await;
    let (code, out) = super::bootd_cli(
        &site,
        &["nodes", "import", "--install-config", ic.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("node rack-3: "), "{out}");
    let v = api
        .wait_node("rack-3", 30, |st, v| {
            st == 200 && cond(v, "Provisioned")["status"] == "True"
        })
        .await;
    // The boot MAC, then the BMC's other NIC (read from the BMC).
    assert_eq!(
        v["spec"]["macs"],
        json!(["52:54:00:aa:bb:01", "52:54:00:aa:bb:02"]),
        "{v:#}"
    );
    assert_eq!(
        v["spec"]["rootDeviceHints"]["deviceName"],
        "/dev/disk/by-path/pci-0000:00:05.0"
    );
    assert_eq!(
        v["provider"]["redfish"]["password"],
        json!({ "file": ic, "installConfigHost": "rack-3" })
    );
    {
        let b = bmc.lock().unwrap();
        assert_eq!(
            b.resets,
            vec!["On"],
            "powered on once, with the password from the file"
        );
    }
    // Its network config, as the site takes it, in the node overlay.
    let (_, list) = api.call("GET", "/v1/nodes", None).await;
    assert!(list.to_string().contains("rack-3"));
    let overlay = std::fs::read_to_string(dir.path().join("state/nodes.yaml")).unwrap();
    assert!(
        overlay.contains("networkConfig") && overlay.contains("10.77.0.63"),
        "{overlay}"
    );
    for text in [
        out,
        overlay,
        std::fs::read_to_string(&p.log).unwrap(),
        v.to_string(),
    ] {
        assert!(!text.contains(PASSWORD), "the BMC password leaked");
    }
    // Importing the same file again changes nothing: the create is the
    // same node's (idempotent), and the machine is not powered again.
    let (code, out) = super::bootd_cli(
        &site,
        &["nodes", "import", "--install-config", ic.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("node rack-3: Provisioned"), "{out}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(bmc.lock().unwrap().resets, vec!["On"]);
    drop(p);
}

/// `bootd cluster up --install-config` makes the install-config's
/// platform.baremetal.hosts in its nodes phase, as `nodes import` does:
/// the host becomes a node driven through its BMC (powered on once), with
/// its boot MAC, hint and network config, its password left in the file;
/// a run that goes through the nodes phase again finds it there, makes
/// nothing and powers nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_up_makes_the_install_config_hosts_through_their_bmcs() {
    let bmc = fresh();
    let addr = serve(bmc.clone(), None).await;
    let f = Fake::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (files, site, api_port) = bmc_site(dir.path(), &f);
    // A serial-number hint needs the machine's inventory: an agent to take it.
    let text = std::fs::read_to_string(&site).unwrap().replacen(
        "\nnodes:\n",
        "\ninspection:\n  agents: { x86_64: tools/bootd-agent }\n\nnodes:\n",
        1,
    );
    std::fs::write(&site, text).unwrap();
    std::fs::create_dir_all(dir.path().join("images/tools")).unwrap();
    std::fs::write(dir.path().join("images/tools/bootd-agent"), b"agent").unwrap();
    // The lab site's 3 masters and 3 workers, and one more worker: the host.
    let ic = files.join("install-config.yaml");
    std::fs::write(
        &ic,
        format!(
            "apiVersion: v1\nbaseDomain: example.test\nmetadata: {{ name: lab }}\n\
             controlPlane: {{ name: master, replicas: 3 }}\ncompute: [{{ name: worker, replicas: 4 }}]\n\
             platform:\n  baremetal:\n    hosts:\n      \
             - name: rack-3\n        role: worker\n        \
             bmc: {{ address: \"redfish+http://{addr}{SYS}\", username: admin, password: \"{PASSWORD}\" }}\n        \
             bootMACAddress: \"52:54:00:aa:bb:01\"\n        bootMode: legacy\n        \
             rootDeviceHints: {{ serialNumber: disk-b }}\n        \
             networkConfig:\n          interfaces:\n            \
             - {{ name: eno1, type: ethernet, ipv4: {{ enabled: true, address: [{{ ip: 10.77.0.63, prefix-length: 24 }}] }} }}\n"
        ),
    )
    .unwrap();
    // The configs as openshift-install left them: cluster up installs them.
    let assets = dir.path().join("assets");
    std::fs::create_dir_all(&assets).unwrap();
    for r in ["bootstrap", "master", "worker"] {
        let from = dir.path().join(format!("ignition/{r}.ign"));
        std::fs::copy(from, assets.join(format!("{r}.ign"))).unwrap();
    }
    let p = Proc::start(&site, 1);
    let api = api_client(&dir.path().join("state/ca.pem"), api_port, &p).await;
    // One run to the ready phase, where it waits for the machines: its
    // output then, killed.
    let run = async |n: u32| {
        let out = dir.path().join(format!("up-{n}.out"));
        let err = dir.path().join(format!("up-{n}.err"));
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_bootd"))
            .args(["--site", site.to_str().unwrap(), "cluster", "up"])
            .arg("--install-config")
            .arg(&ic)
            .arg("--dir")
            .arg(&assets)
            .args(["--interval", "0.1", "--timeout", "60"])
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        let end = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let text = std::fs::read_to_string(&out).unwrap();
            let errs = || std::fs::read_to_string(&err).unwrap();
            if text.contains("] ready          waiting") {
                child.kill().unwrap();
                child.wait().unwrap();
                return text + &errs();
            }
            if let Some(st) = child.try_wait().unwrap() {
                panic!(
                    "cluster up ended ({st}) before its ready phase: {text}{}",
                    errs()
                );
            }
            assert!(std::time::Instant::now() < end, "cluster up: {text}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let first = run(1).await;
    assert!(
        first.contains("rack-3 (a host of the install-config) made through its BMC"),
        "{first}"
    );
    // The replicas are the site's nodes and the host: nothing else made.
    assert!(first.contains("all 8 node(s) are there"), "{first}");
    let v = api
        .wait_node("rack-3", 30, |st, v| {
            st == 200 && cond(v, "Provisioned")["status"] == "True"
        })
        .await;
    assert_eq!(v["spec"]["role"], "worker", "{v:#}");
    assert_eq!(v["spec"]["macs"][0], "52:54:00:aa:bb:01", "{v:#}");
    assert_eq!(v["spec"]["rootDeviceHints"]["serialNumber"], "disk-b");
    assert_eq!(
        v["provider"]["redfish"]["password"],
        json!({ "file": ic, "installConfigHost": "rack-3" })
    );
    let overlay = std::fs::read_to_string(dir.path().join("state/nodes.yaml")).unwrap();
    assert!(
        overlay.contains("networkConfig") && overlay.contains("10.77.0.63"),
        "{overlay}"
    );
    assert_eq!(bmc.lock().unwrap().resets, vec!["On"], "powered on once");
    // The nodes phase once more (its progress forgotten): the host is there.
    std::fs::remove_file(assets.join("cluster-up.json")).unwrap();
    let second = run(2).await;
    assert!(
        second.contains("all 8 node(s) are there") && !second.contains("made through"),
        "{second}"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(bmc.lock().unwrap().resets, vec!["On"], "not powered again");
    for text in [
        first,
        second,
        overlay,
        std::fs::read_to_string(&p.log).unwrap(),
        v.to_string(),
    ] {
        assert!(!text.contains(PASSWORD), "the BMC password leaked");
    }
    drop(p);
}

/// The bootd HTTP port a process site listens on.
pub(super) fn http_port(site: &std::path::Path) -> u16 {
    let t = std::fs::read_to_string(site).unwrap();
    let key = "  http:\n    listen: 127.0.0.1:";
    let i = t.find(key).unwrap() + key.len();
    t[i..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Deleting a node behind a BMC that installs to disk boots its machine
/// once more, from the network, into the agent's wipe (the node stays
/// served meanwhile), and powers it off only once the wipe is reported;
/// `keepDisks` powers it off at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_bmc_node_is_wiped_before_it_is_powered_off() {
    let bmc = fresh();
    let addr = serve(bmc.clone(), None).await;
    let f = Fake::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (files, site, api_port) = bmc_site(dir.path(), &f);
    let text = std::fs::read_to_string(&site).unwrap()
        .replace(
            "    dnsServers: [10.77.0.1]\n",
            "    dnsServers: [10.77.0.1]\n  - name: lo\n    subnet: 127.0.0.0/8\n    gateway: 127.0.0.1\n",
        )
        .replacen("\nnodes:\n", "\ninspection:\n  agents: { x86_64: tools/bootd-agent }\n\nnodes:\n", 1);
    std::fs::write(&site, text).unwrap();
    std::fs::create_dir_all(dir.path().join("images/tools")).unwrap();
    std::fs::write(dir.path().join("images/tools/bootd-agent"), b"agent").unwrap();
    std::fs::write(files.join("rack-1"), PASSWORD).unwrap();
    let base = format!("http://127.0.0.1:{}", http_port(&site));
    let p = Proc::start(&site, 1);
    let api = api_client(&dir.path().join("state/ca.pem"), api_port, &p).await;
    let node = |name: &str, ip: &str| {
        json!({
            "name": name, "role": "worker", "ip": ip,
            "rootDeviceHints": { "deviceName": "/dev/vda" },
            "provider": { "redfish": {
                "url": format!("http://{addr}{SYS}"), "username": "admin",
                "password": { "file": files.join("rack-1") }, "allowPlainHttp": true, "mode": "Legacy" } }
        })
    };
    let (st, v) = api.create(node("rack-1", "127.0.0.61")).await;
    assert_eq!(st, 201, "{v:#}");
    until(with_log("powered on", &p.log), 20, async || {
        bmc.lock().unwrap().resets == ["On"]
    })
    .await;
    // What the agent is told to do, as rack-1's network boot sees it: the
    // URL it reports to (bootd names the lab's address: here, loopback's).
    let agent = |action: &str| {
        let script = format!("{base}/ipxe/node?mac=52-54-00-aa-bb-01");
        let (_, script) = curl_from("127.0.0.61", "GET", &script, None);
        let token = after(&script, "agent?token=");
        let cfg_url = format!("{base}/ignition/rack-1/agent?token={token}");
        let (_, cfg) = curl_from("127.0.0.61", "GET", &cfg_url, None);
        after(&cfg, &format!("{action} --post ")).replace("http://10.77.0.1:8080", &base)
    };
    // Its first boot inspects; the agent's report.
    let report = agent("inspect");
    let inv = json!({"cpu": {"model": "", "count": 8, "arch": "x86_64"}, "memoryMib": 32768,
        "disks": [{"name": "/dev/vda", "sizeBytes": 200u64 << 30, "rotational": false}],
        "nics": [], "firmware": "bios"})
    .to_string();
    assert_eq!(curl_from("127.0.0.61", "POST", &report, Some(&inv)).0, 204);

    // Delete: booted again into the wipe, still served, not powered off.
    let (st, _) = api.call("DELETE", "/v1/nodes/rack-1", None).await;
    assert_eq!(st, 202);
    until(
        with_log("restarted into the wipe", &p.log),
        20,
        async || bmc.lock().unwrap().resets.len() == 2,
    )
    .await;
    assert_eq!(bmc.lock().unwrap().resets[1], "ForceRestart");
    let wiped = agent("wipe");
    assert!(wiped.contains("/inventory/rack-1/wiped?token="), "{wiped}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        bmc.lock().unwrap().power,
        "On",
        "not powered off before the wipe"
    );
    let (_, v) = api.call("GET", "/v1/nodes/rack-1", None).await;
    assert!(
        v["message"]
            .as_str()
            .unwrap_or_default()
            .contains("wiping its disks"),
        "{v:#}"
    );
    assert_eq!(v["phase"], "Deleting");
    let report =
        json!({"disks": [{"name": "/dev/vda", "serial": "S1", "partitions": 4}]}).to_string();
    assert_eq!(
        curl_from("127.0.0.61", "POST", &wiped, Some(&report)).0,
        204
    );
    until(
        with_log("the node went after its wipe", &p.log),
        30,
        async || api.call("GET", "/v1/nodes/rack-1", None).await.0 == 404,
    )
    .await;
    assert_eq!(bmc.lock().unwrap().power, "Off");
    let log = std::fs::read_to_string(&p.log).unwrap();
    assert!(log.contains("wiped /dev/vda (S1)"), "the wipe is logged");

    // keepDisks: straight to power-off, nothing restarted.
    let n0 = bmc.lock().unwrap().resets.len();
    let (st, v) = api.create(node("rack-2", "127.0.0.62")).await;
    assert_eq!(st, 201, "{v:#}");
    until(with_log("rack-2 powered on", &p.log), 20, async || {
        bmc.lock().unwrap().resets[n0..] == ["On"]
    })
    .await;
    let (st, _) = api
        .call("DELETE", "/v1/nodes/rack-2?keepDisks=true", None)
        .await;
    assert_eq!(st, 202);
    until(with_log("rack-2 went", &p.log), 30, async || {
        api.call("GET", "/v1/nodes/rack-2", None).await.0 == 404
    })
    .await;
    let resets = bmc.lock().unwrap().resets.clone();
    assert!(
        !resets[n0..].iter().any(|r| r == "ForceRestart"),
        "no restart into a wipe: {resets:?}"
    );
    assert_eq!(bmc.lock().unwrap().power, "Off");
    drop(p);
}

/// A BMC password bound to its BMCs (`host.api.bmcCredentials`): a node
/// that would send it elsewhere is refused when it is created (422 naming
/// the key), before anything is made or sent; at an allowed origin, made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_for_another_bmc_is_refused_at_create() {
    let bmc = fresh();
    let addr = serve(bmc.clone(), None).await;
    let f = Fake::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (files, site, api_port) = bmc_site(dir.path(), &f);
    let pw = files.join("rack-1");
    std::fs::write(&pw, PASSWORD).unwrap();
    let text = std::fs::read_to_string(&site).unwrap().replacen(
        "    redfish: { powerOffTimeout: 5s }\n",
        &format!(
            "    redfish: {{ powerOffTimeout: 5s }}\n    bmcCredentials:\n      - password: {{ file: {} }}\n        origins: [\"http://127.0.0.1:{}\"]\n        allowPlainHttp: true\n",
            pw.display(),
            addr.port()
        ),
        1,
    );
    std::fs::write(&site, text).unwrap();
    let p = Proc::start(&site, 1);
    let api = api_client(&dir.path().join("state/ca.pem"), api_port, &p).await;
    let node = |name: &str, url: String| {
        json!({
            "name": name, "role": "worker", "ip": "10.77.0.61", "live": true,
            "provider": { "redfish": {
                "url": url, "username": "admin",
                "password": { "file": pw }, "allowPlainHttp": true, "mode": "Legacy" } }
        })
    };
    // Another origin (the attacker's): 422, nothing made, nothing sent.
    let (st, v) = api
        .create(node(
            "rack-x",
            format!("http://127.0.0.9:{}{SYS}", addr.port()),
        ))
        .await;
    assert_eq!(st, 422, "{v:#}");
    assert!(
        v["problems"]
            .to_string()
            .contains("host.api.bmcCredentials"),
        "{v:#}"
    );
    assert!(!v.to_string().contains(PASSWORD), "{v:#}");
    let (st, _) = api.call("GET", "/v1/nodes/rack-x", None).await;
    assert_eq!(st, 404);
    // Its own BMC: made.
    let (st, v) = api
        .create(node("rack-1", format!("http://{addr}{SYS}")))
        .await;
    assert_eq!(st, 201, "{v:#}");
    drop(p);
}
