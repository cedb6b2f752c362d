//! A node behind a BMC that boots virtual media and inspects before it
//! installs: its first ISO runs the agent, which reports and powers the
//! machine off; the controller then inserts the ISO of the install (the
//! disk its hints chose on the kernel line) and powers it on again.

use super::bmc::{bmc_site, http_port};
use super::{after, api_client, curl_from, until, with_log, Fake, Proc};
use serde_json::json;
use std::process::Command;
use testkit::redfish_fake::{fresh, serve, PASSWORD, SYS};

/// `boot/grub/grub.cfg` out of the ISO at `url`, fetched as the BMC does.
fn grub_cfg_of(url: &str) -> String {
    let d = tempfile::tempdir().unwrap();
    let iso = d.path().join("x.iso");
    let st = Command::new("curl")
        .args(["-sS", "--fail", "-o"])
        .arg(&iso)
        .arg(url)
        .status()
        .unwrap();
    assert!(st.success(), "the ISO was not served");
    let out = d.path().join("grub.cfg");
    let x = Command::new("xorriso")
        .args(["-osirrox", "on", "-indev"])
        .arg(&iso)
        .args(["-extract", "/boot/grub/grub.cfg"])
        .arg(&out)
        .output()
        .expect("xorriso (tests/lab/deps.sh installs it)");
    assert!(x.status.success(), "{}", String::from_utf8_lossy(&x.stderr));
    std::fs::read_to_string(out).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_virtual_media_node_inspects_powers_off_and_gets_its_install_iso() {
    let bmc = fresh();
    let addr = serve(bmc.clone(), None).await;
    let f = Fake::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (files, site, api_port) = bmc_site(dir.path(), &f);
    let text = std::fs::read_to_string(&site)
        .unwrap()
        .replace(
            "    dnsServers: [10.77.0.1]\n",
            "    dnsServers: [10.77.0.1]\n  - name: lo\n    subnet: 127.0.0.0/8\n    gateway: 127.0.0.1\n",
        )
        .replacen(
            "\nnodes:\n",
            "\ninspection:\n  agents: { x86_64: tools/bootd-agent }\n\nnodes:\n",
            1,
        );
    std::fs::write(&site, &text).unwrap();
    let images = dir.path().join("images");
    std::fs::create_dir_all(images.join("tools")).unwrap();
    std::fs::create_dir_all(images.join("lab")).unwrap();
    std::fs::write(images.join("tools/bootd-agent"), b"agent").unwrap();
    // Stand-ins for the live kernel and initramfs the ISO carries.
    std::fs::write(images.join("lab/kernel"), vec![0x4b; 40_000]).unwrap();
    std::fs::write(images.join("lab/initramfs"), vec![0x49; 70_000]).unwrap();
    std::fs::write(files.join("rack-m"), PASSWORD).unwrap();
    let base = format!("http://127.0.0.1:{}", http_port(&site));
    let p = Proc::start(&site, 1);
    let api = api_client(&dir.path().join("state/ca.pem"), api_port, &p).await;
    let (st, v) = api
        .create(json!({
            "name": "rack-m", "role": "worker", "ip": "127.0.0.64",
            "rootDeviceHints": { "serialNumber": "S2" },
            "provider": { "redfish": {
                "url": format!("http://{addr}{SYS}"), "username": "admin",
                "password": { "file": files.join("rack-m") }, "allowPlainHttp": true,
                "mode": "Legacy", "boot": "virtualMedia" } }
        }))
        .await;
    assert_eq!(st, 201, "{v:#}");
    until(
        with_log("the first ISO in, powered on", &p.log),
        30,
        async || {
            let b = bmc.lock().unwrap();
            b.media.is_some() && b.resets == ["On"]
        },
    )
    .await;
    let first = bmc.lock().unwrap().media.clone().unwrap();
    assert!(
        first.starts_with("http://10.77.0.1:8080/media/rack-m.iso?token="),
        "{first}"
    );
    let first = first.replace("http://10.77.0.1:8080", &base);

    // The first ISO runs the agent, told to power off when done.
    let cfg = grub_cfg_of(&first);
    assert!(cfg.contains("/ignition/rack-m/agent?token="), "{cfg}");
    assert!(cfg.contains("&then=poweroff"), "{cfg}");
    assert!(!cfg.contains("coreos.inst.install_dev"), "{cfg}");
    // GRUB quotes the argument (`&` is a GRUB metacharacter).
    let agent_url = format!(
        "{base}/ignition/rack-m/agent?token={}",
        after(&cfg, "/ignition/rack-m/agent?token=").trim_end_matches('\'')
    );
    let (_, agent) = curl_from("127.0.0.64", "GET", &agent_url, None);
    assert!(agent.contains(" --poweroff"), "{agent}");
    assert!(!agent.contains(" --reboot"), "{agent}");
    let report = after(&agent, "inspect --post ").replace("http://10.77.0.1:8080", &base);
    let inv = json!({"cpu": {"model": "", "count": 8, "arch": "x86_64"}, "memoryMib": 32768,
        "disks": [
            {"name": "/dev/sda", "byId": "/dev/disk/by-id/wwn-0x1", "sizeBytes": 200u64 << 30, "serial": "S1", "rotational": false},
            {"name": "/dev/sdb", "byId": "/dev/disk/by-id/wwn-0x2", "sizeBytes": 200u64 << 30, "serial": "S2", "rotational": false}],
        "nics": [], "firmware": "bios"})
    .to_string();
    assert_eq!(curl_from("127.0.0.64", "POST", &report, Some(&inv)).0, 204);
    // Reported, still on: the first ISO stays (the machine is on its way down).
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert_eq!(bmc.lock().unwrap().resets, ["On"]);
    assert_eq!(bmc.lock().unwrap().media_ops.len(), 1);
    // The agent powered it off: the install's ISO goes in, the machine on.
    bmc.lock().unwrap().power = "Off".into();
    until(
        with_log("the install ISO in, powered on", &p.log),
        30,
        async || {
            let b = bmc.lock().unwrap();
            b.resets.len() == 2
                && b.media
                    .as_deref()
                    .is_some_and(|m| m != bmc_first(&first, &base))
        },
    )
    .await;
    let second = {
        let b = bmc.lock().unwrap();
        assert_eq!(b.resets, ["On", "On"]);
        assert_eq!(
            b.media_ops.len(),
            3,
            "insert, eject, insert: {:?}",
            b.media_ops
        );
        assert_eq!(b.media_ops[1], "eject");
        // The one-time override was set again for this boot.
        assert_eq!((b.enabled.as_str(), b.target.as_str()), ("Once", "Cd"));
        b.media
            .clone()
            .unwrap()
            .replace("http://10.77.0.1:8080", &base)
    };
    let cfg = grub_cfg_of(&second);
    assert!(
        cfg.contains("coreos.inst.install_dev=/dev/disk/by-id/wwn-0x2"),
        "the disk with serial S2: {cfg}"
    );
    assert!(!cfg.contains("/agent?"), "{cfg}");
    let (_, v) = api.call("GET", "/v1/nodes/rack-m", None).await;
    let conds = v["conditions"].to_string();
    assert!(
        conds.contains("Inspected") && conds.contains("DiskChosen"),
        "{v:#}"
    );
    // Nothing more happens while it installs (the step is the ISO's).
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    assert_eq!(bmc.lock().unwrap().media_ops.len(), 3);
    drop(p);
}

/// The BMC's view of an ISO URL (it was given bootd's site address).
fn bmc_first(url: &str, base: &str) -> String {
    url.replace(base, "http://10.77.0.1:8080")
}
