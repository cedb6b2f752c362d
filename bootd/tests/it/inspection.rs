//! A node that installs to disk by root-device hints: its first boot runs
//! the inspection agent (its config fetched by Ignition with the agent's
//! SHA-256), the agent's report is taken only from the node's address with
//! its token, and the next boot installs to the disk the hints choose, by a
//! name that stays with the disk, or is refused below the role's minimums.
//! Reports are posted by curl (a real client) from the node's loopback
//! address and from a neighbour's.

use crate::harness::{request_from, Bootd};
use http::StatusCode;
use std::net::IpAddr;

const NODE: &str = "127.0.0.11";
const MAC: &str = "52-54-00-77-00-11";
const AGENT: &[u8] = b"\x7fELF not really the agent, but bytes to hash";

fn site(t: String) -> String {
    t.replace(
        "    dnsServers: [10.77.0.1]\n",
        "    dnsServers: [10.77.0.1]\n  - name: lo\n    subnet: 127.0.0.0/8\n    gateway: 127.0.0.1\n",
    )
    // master-0 installs to disk, not live as in the lab.
    .replace(
        "live: true, macs: [\"52:54:00:77:00:11\"]",
        "macs: [\"52:54:00:77:00:11\"]",
    )
    .replace(
        "ip: 10.77.0.11, kernelArgs: [console=ttyS0] }",
        &format!("ip: {NODE}, kernelArgs: [console=ttyS0], rootDeviceHints: {{ serialNumber: disk-b, minSizeGigabytes: 100 }} }}"),
    )
    .replace(
        "      initramfs: lab/initramfs\n",
        "      initramfs: lab/initramfs\n      metal: lab/metal.raw.gz\n",
    )
    .replace(
        "\nnodes:\n",
        "\ninspection:\n  agents: { x86_64: tools/bootd-agent }\n  lldpSeconds: 5\n\nnodes:\n",
    )
}

async fn get(b: &Bootd, from: &str, path: &str) -> (StatusCode, String) {
    let (s, _, body) = request_from(
        Some(from.parse::<IpAddr>().unwrap()),
        b.http,
        "GET",
        path,
        &[],
    )
    .await;
    (s, String::from_utf8_lossy(&body).into_owned())
}

/// curl POSTs `body` from `from`; returns the HTTP status and body.
fn post(b: &Bootd, from: &str, path: &str, body: &str) -> (u16, String) {
    let out = std::process::Command::new("curl")
        .args([
            "-sS",
            "--interface",
            from,
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
        ])
        .args(["--data-binary", body, "-w", "\n%{http_code}"])
        .arg(format!("http://{}{path}", b.http))
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.parse().unwrap(), body.to_string())
}

fn inventory(cpus: u32, mem_gib: u64) -> String {
    let disk = |name: &str, serial: &str, gib: u64| {
        serde_json::json!({
            "name": name, "byPath": "", "byId": format!("/dev/disk/by-id/virtio-{serial}"),
            "sizeBytes": gib << 30, "model": "", "vendor": "0x1af4", "serial": serial,
            "wwn": "", "wwnWithExtension": "", "wwnVendorExtension": "", "rotational": true, "hctl": ""
        })
    };
    serde_json::json!({
        "cpu": {"model": "QEMU Virtual CPU", "count": cpus, "arch": "x86_64"},
        "memoryMib": mem_gib * 1024,
        "disks": [disk("/dev/vda", "disk-a", 120), disk("/dev/vdb", "disk-b", 120)],
        "nics": [{"name": "eth0", "mac": "52:54:00:77:00:11", "speedMbps": null, "link": true,
                  "lldp": {"chassisId": "aa:bb:cc:00:00:01", "portId": "swp7", "systemName": "tor-1", "portDescription": ""}}],
        "firmware": "bios",
        "system": {"vendor": "QEMU", "product": "Standard PC", "serial": "", "uuid": ""}
    })
    .to_string()
}

/// Waits for an event `what` on master-0's timeline; returns its detail.
async fn event(b: &Bootd, what: &str) -> String {
    for _ in 0..100 {
        let v = crate::timeline::timeline(b, "master-0").await;
        if let Some(e) = v["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["what"] == what)
        {
            return e["detail"].as_str().unwrap().to_string();
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("master-0: no {what} event");
}

fn token_after<'a>(text: &'a str, prefix: &str) -> &'a str {
    let i = text
        .find(prefix)
        .unwrap_or_else(|| panic!("{prefix} in {text}"))
        + prefix.len();
    text[i..]
        .split(|c: char| c == '"' || c == '&' || c.is_whitespace())
        .next()
        .unwrap()
}

// curl runs as a blocking child process: bootd needs another worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_inspects_then_installs_to_the_disk_its_hints_choose() {
    let b = Bootd::start_strict(site).await;
    std::fs::create_dir_all(b.images().join("tools")).unwrap();
    std::fs::write(b.images().join("tools/bootd-agent"), AGENT).unwrap();
    let script = format!("/ipxe/node?mac={MAC}");

    // First boot: live, with the agent's config.
    let (s, first) = get(&b, NODE, &script).await;
    assert_eq!(s, StatusCode::OK);
    assert!(first.contains("/ignition/master-0/agent?token="), "{first}");
    assert!(!first.contains("coreos.inst"), "{first}");
    let agent_url = format!(
        "/ignition/master-0/agent?token={}",
        token_after(&first, "agent?token=")
    );
    // Not from a neighbour without the token; from the node, the config.
    let (s, _) = get(&b, "127.0.0.99", "/ignition/master-0/agent").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, cfg) = get(&b, NODE, &agent_url).await;
    assert_eq!(s, StatusCode::OK, "{cfg}");
    let cfg: serde_json::Value = serde_json::from_str(&cfg).unwrap();
    use sha2::Digest;
    let want: String = sha2::Sha256::digest(AGENT)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let file = &cfg["storage"]["files"][0];
    assert_eq!(
        file["contents"]["verification"]["hash"],
        format!("sha256-{want}")
    );
    assert!(file["contents"]["source"]
        .as_str()
        .unwrap()
        .ends_with("/images/tools/bootd-agent"));
    let unit = cfg["systemd"]["units"][0]["contents"].as_str().unwrap();
    assert!(unit.contains("--lldp-seconds 5 --reboot"), "{unit}");
    let report = format!(
        "/inventory/master-0?token={}",
        token_after(unit, "master-0?token=")
    );
    // The agent's binary is served where the config says.
    let (s, bytes) = get(&b, NODE, "/images/tools/bootd-agent").await;
    assert_eq!((s, bytes.as_bytes()), (StatusCode::OK, AGENT));

    // Reports: a neighbour with the token, the node without one: refused alike.
    assert_eq!(post(&b, "127.0.0.99", &report, &inventory(8, 32)).0, 404);
    assert_eq!(
        post(&b, NODE, "/inventory/master-0", &inventory(8, 32)).0,
        404
    );
    assert_eq!(
        post(
            &b,
            NODE,
            &report.replace("token=", "token=x"),
            &inventory(8, 32)
        )
        .0,
        404
    );
    let (code, why) = post(&b, NODE, &report, "{\"cpu\": 1}");
    assert_eq!(code, 400);
    assert!(
        why.starts_with("inventory report refused: not JSON of the inventory's shape"),
        "{why}"
    );
    assert!(b.app.inventories.get("master-0").is_none());

    // A machine below a master's minimums: reported, then refused.
    assert_eq!(post(&b, NODE, &report, &inventory(2, 8)).0, 204);
    assert!(b.state().join("inventory/master-0.json").is_file());
    let (_, refused) = get(&b, NODE, &script).await;
    assert!(
        refused.contains("master-0 does not install: below the master minimums: CPUs: 2 < 4, memory: 8.0 GiB < 16 GiB"),
        "{refused}"
    );
    assert!(!refused.contains("token="), "{refused}");
    let (_, grub) = get(&b, NODE, &format!("/grub/grub.cfg-01-{MAC}")).await;
    assert!(
        grub.contains("does not install: below the master minimums"),
        "{grub}"
    );
    event(&b, "inspected").await;
    assert!(event(&b, "below_minimums").await.contains("CPUs: 2 < 4"));

    // The machine grew (a report replaces the last): it installs to disk-b,
    // named by its by-id link, with the metal image, unsigned.
    assert_eq!(post(&b, NODE, &report, &inventory(8, 32)).0, 204);
    for path in [
        script.clone(),
        format!("/grub/grub.cfg-01-{MAC}"),
        format!("/pxelinux.cfg/01-{MAC}"),
    ] {
        let (_, text) = get(&b, NODE, &path).await;
        assert!(
            text.contains("coreos.inst.install_dev=/dev/disk/by-id/virtio-disk-b "),
            "{path}: {text}"
        );
        assert!(
            text.contains("/images/lab/metal.raw.gz coreos.inst.insecure"),
            "{path}: {text}"
        );
        assert!(
            text.contains("coreos.inst.ignition_url=http://"),
            "{path}: {text}"
        );
        assert!(!text.contains("/agent?"), "{path}: {text}");
    }
    assert_eq!(
        event(&b, "disk_chosen").await,
        "installs to /dev/disk/by-id/virtio-disk-b: /dev/vdb chosen by minSizeGigabytes=100, serialNumber=\"disk-b\""
    );
    // The installer fetches the config, then the image: installed only
    // once the image was sent in full (a failed write installs again).
    let (_, text) = get(&b, NODE, &script).await;
    let ign = format!(
        "/ignition/master-0?token={}",
        token_after(&text, "master-0?token=")
    );
    let (s, _) = get(&b, NODE, &ign).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        b.app.installed.at("master-0").is_none(),
        "not installed before its image was written"
    );
    let (_, again) = get(&b, NODE, &script).await;
    assert!(again.contains("coreos.inst.install_dev="), "{again}");
    std::fs::write(b.images().join("lab/metal.raw.gz"), vec![7u8; 300_000]).unwrap();
    let (s, img) = get(&b, NODE, "/images/lab/metal.raw.gz").await;
    assert_eq!((s, img.len()), (StatusCode::OK, 300_000));
    assert!(event(&b, "installed")
        .await
        .starts_with("the metal image was sent in full"));
    assert!(b.app.installed.at("master-0").is_some());
    let (_, after) = get(&b, NODE, &script).await;
    assert!(
        after.contains("installed already: booting its local disk"),
        "{after}"
    );

    // The node's status page shows the inventory and the disk chosen.
    let (s, page) = get(&b, "127.0.0.1", "/status/node/master-0").await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        page.contains("id=\"next-boot\">Next network boot: its local disk (installed"),
        "{page}"
    );
    assert!(
        page.contains("<tr><td>/dev/vdb <b>&larr; install</b></td><td class=\"num\">120 GiB</td>"),
        "{page}"
    );
    assert!(page.contains("<td>tor-1</td><td>swp7</td>"), "{page}");
    assert!(
        page.contains("8 &times; QEMU Virtual CPU (x86_64) &middot; 32.0 GiB &middot; bios"),
        "{page}"
    );
    // Kept across a restart of the store.
    let again = bootd::inventory::Inventories::open(&b.state()).unwrap();
    assert_eq!(again.get("master-0").unwrap().inventory.cpu.count, 8);
    b.stop().await;
}
