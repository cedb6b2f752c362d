//! The node overlay (`<stateDir>/nodes.yaml`): nodes added through bootd's
//! API are merged into the site and validated exactly like the site's own,
//! with problems naming the overlay file.

mod common;

use common::assert_keys;
use std::path::{Path, PathBuf};

/// The lab site in a temp dir, its state dir `state/` beside it.
fn lab() -> (tempfile::TempDir, PathBuf) {
    let (dir, site) = common::lab(|text| {
        assert!(text.contains("stateDir: state"));
        text
    });
    std::fs::create_dir_all(dir.path().join("state")).unwrap();
    (dir, site)
}

/// The site at `path` rewritten to `text`, loaded.
fn load_text(path: &Path, text: &str) -> Result<site::Site, site::SiteError> {
    std::fs::write(path, text).unwrap();
    site::load(path)
}

const WORKER_3: &str =
    "nodes:\n  - { name: worker-3, role: worker, macs: [\"52:54:00:77:00:23\"], ip: 10.77.0.23 }\n";

#[test]
fn overlay_nodes_are_merged_and_watched() {
    let (dir, path) = lab();
    let before = site::load(&path).unwrap();
    let overlay = dir.path().join("state").join(site::OVERLAY_FILE);
    assert_eq!(before.overlay.path, overlay);
    assert!(
        before.watched_files().contains(&overlay),
        "the overlay must be watched even before it exists"
    );
    assert!(before.node("worker-3").is_none());

    std::fs::write(&overlay, WORKER_3).unwrap();
    let after = site::load(&path).unwrap();
    let n = after.node("worker-3").expect("overlay node merged");
    assert_eq!(n.ip().to_string(), "10.77.0.23");
    assert_eq!(n.image, "lab-x86_64");
    assert!(after.from_overlay("worker-3"));
    assert!(!after.from_overlay("worker-0"));
    assert_eq!(after.nodes.len(), before.nodes.len() + 1);
    assert_eq!(
        after
            .node_by_mac(&"52:54:00:77:00:23".parse().unwrap())
            .unwrap()
            .name,
        "worker-3"
    );
}

#[test]
fn overlay_problems_name_the_overlay_file_and_key() {
    let (dir, path) = lab();
    let overlay = dir.path().join("state").join(site::OVERLAY_FILE);
    // MAC of worker-0, IP of worker-1, outside every network, an unknown key.
    std::fs::write(
        &overlay,
        "nodes:\n  - { name: w3, role: worker, macs: [\"52:54:00:77:00:20\"], ip: 10.77.0.21 }\n  - { name: w4, role: worker, macs: [\"52:54:00:77:00:24\"], ip: 10.99.0.1, colour: red }\n",
    )
    .unwrap();
    let e = site::load(&path).unwrap_err();
    let text = e.to_string();
    let in_overlay = |key: &str| {
        e.problems
            .iter()
            .find(|p| p.file == overlay && p.key == key)
            .map(|p| p.reason.clone())
    };
    assert!(
        in_overlay("nodes[0].macs[0]")
            .unwrap()
            .contains("duplicate MAC 52:54:00:77:00:20 (also in nodes[4])"),
        "{text}"
    );
    assert!(
        in_overlay("nodes[0].ip")
            .unwrap()
            .contains("duplicate IP 10.77.0.21 (also nodes[5])"),
        "{text}"
    );
    assert!(
        in_overlay("nodes[1].ip")
            .unwrap()
            .contains("outside every network"),
        "{text}"
    );
    assert!(
        in_overlay("nodes[1].colour")
            .unwrap()
            .contains("unknown key"),
        "{text}"
    );
    // Nothing is blamed on the site file itself.
    assert!(e.problems.iter().all(|p| p.file == overlay), "{text}");
}

#[test]
fn candidate_overlay_is_checked_without_writing_it() {
    let (dir, path) = lab();
    let site = site::load_with_overlay(&path, WORKER_3).unwrap();
    assert!(site.node("worker-3").is_some());
    assert!(!dir.path().join("state").join(site::OVERLAY_FILE).exists());
    let dup = WORKER_3.replace("worker-3", "master-0");
    let e = site::load_with_overlay(&path, &dup).unwrap_err();
    assert!(
        e.to_string()
            .contains("duplicate node name \"master-0\" (also nodes[1])"),
        "{e}"
    );
    // An empty overlay is no overlay.
    assert_eq!(
        site::load_with_overlay(&path, "").unwrap().nodes.len(),
        site::load(&path).unwrap().nodes.len()
    );
}

#[test]
fn host_api_keys_are_validated() {
    let (dir, path) = lab();
    let text = std::fs::read_to_string(&path).unwrap();
    let good = text.replace(
        "host:\n",
        "host:\n  api:\n    listen: 127.0.0.1:9443\n    tokens: { credential: bootd-api-tokens }\n    deadline: 45m\n    equinix: { projectId: p1, apiKey: { file: metal.key } }\n",
    );
    let s = load_text(&path, &good).unwrap();
    let api = s.host.api.as_ref().unwrap();
    assert_eq!(api.deadline.as_secs(), 2700);
    assert_eq!(
        api.tokens,
        site::SecretRef::Credential("bootd-api-tokens".into())
    );
    let eq = api.equinix.as_ref().unwrap();
    assert_eq!(eq.base_url, "https://api.equinix.com/metal/v1");
    assert_eq!(
        eq.api_key,
        site::SecretRef::File(dir.path().join("metal.key"))
    );

    let bad = text.replace(
        "host:\n",
        "host:\n  api:\n    listen: nowhere\n    tokens: { file: t, credential: c }\n    powervs: { baseUrl: ftp://x, crn: nope, apiKey: { credential: k } }\n",
    );
    std::fs::write(&path, &bad).unwrap();
    let e = site::load(&path).unwrap_err();
    let keys: Vec<_> = e.problems.iter().map(|p| p.key.as_str()).collect();
    for k in [
        "host.api.listen",
        "host.api.tokens",
        "host.api.powervs.baseUrl",
        "host.api.powervs.crn",
    ] {
        assert!(keys.contains(&k), "{k} missing in {e}");
    }

    // The workspace is named once, by its CRN.
    let crn = "crn:v1:bluemix:public:power-iaas:lon04:a/acc:ws-7::";
    let one = |extra: &str| {
        text.replace(
            "host:\n",
            &format!("host:\n  api:\n    listen: 127.0.0.1:9443\n    tokens: {{ file: t }}\n    powervs: {{ baseUrl: \"https://lon.power-iaas.cloud.ibm.com\", crn: \"{crn}\"{extra}, apiKey: {{ file: k }} }}\n"),
        )
    };
    std::fs::write(&path, one("")).unwrap();
    let s = site::load(&path).unwrap();
    let pv = s.host.api.unwrap().powervs.unwrap();
    assert_eq!(
        (pv.cloud_instance_id.as_str(), pv.crn.as_str()),
        ("ws-7", crn)
    );
    // A cloudInstanceId beside it must say the same.
    std::fs::write(&path, one(", cloudInstanceId: ws-7")).unwrap();
    let pv = site::load(&path)
        .unwrap()
        .host
        .api
        .unwrap()
        .powervs
        .unwrap();
    assert_eq!(pv.cloud_instance_id, "ws-7");
    std::fs::write(&path, one(", cloudInstanceId: ws-8")).unwrap();
    let e = site::load(&path).unwrap_err().to_string();
    assert!(
        e.contains(
            "host.api.powervs.cloudInstanceId: \"ws-8\" is not the workspace of crn, whose cloud instance id is \"ws-7\""
        ),
        "{e}"
    );
}

#[test]
fn host_api_local_keys_are_validated() {
    let (dir, path) = lab();
    let text = std::fs::read_to_string(&path).unwrap();
    let api = "host:\n  api:\n    listen: 127.0.0.1:9443\n    tokens: { file: t }\n";
    let s = load_text(
        &path,
        &text.replace("host:\n", &format!("{api}    local: {{}}\n")),
    )
    .unwrap();
    let l = s.host.api.as_ref().unwrap().local.clone().unwrap();
    assert_eq!(
        (l.qemu.as_str(), l.bridge.as_str(), l.netns.as_deref()),
        ("qemu-system-x86_64", "br0", None)
    );
    assert_eq!(
        (l.firmware, l.memory_mib, l.state_dir.clone()),
        (site::LocalFirmware::SeabiosIpxe, 512, None)
    );

    let good =
        format!("{api}    local: {{ qemu: bin/qemu, bridge: labbr, netns: lab, firmware: ovmf-ipxe, memory: 1024, stateDir: vms }}\n");
    let l = load_text(&path, &text.replace("host:\n", &good))
        .unwrap()
        .host
        .api
        .unwrap()
        .local
        .unwrap();
    assert_eq!(
        l.qemu,
        dir.path().join("bin/qemu").display().to_string(),
        "a path is relative to the site file"
    );
    assert_eq!(
        (l.firmware, l.memory_mib, l.netns.as_deref()),
        (site::LocalFirmware::OvmfIpxe, 1024, Some("lab"))
    );
    assert_eq!(l.state_dir, Some(dir.path().join("vms")));

    let bad = format!(
        "{api}    local: {{ qemu: \"qemu x\", bridge: a-bridge-name-too-long, netns: a/b, firmware: slof, memory: 64, disk: x }}\n"
    );
    let e = load_text(&path, &text.replace("host:\n", &bad)).unwrap_err();
    assert_keys(
        &e,
        &[
            "host.api.local.qemu",
            "host.api.local.bridge",
            "host.api.local.netns",
            "host.api.local.firmware",
            "host.api.local.memory",
            "host.api.local.disk",
        ],
    );
    assert!(
        e.to_string().contains("want seabios-ipxe or ovmf-ipxe"),
        "{e}"
    );
}

#[test]
fn bmc_providers_secret_references_and_after_install_are_validated() {
    let (_dir, path) = lab();
    let text = std::fs::read_to_string(&path).unwrap();
    let good = text.replace(
        "host:\n",
        "host:\n  api:\n    listen: 127.0.0.1:9443\n    tokens: { env: BOOTD_API_TOKENS }\n    redfish: { powerOffTimeout: 30s }\n    ipmi: {}\n",
    );
    let s = load_text(&path, &good).unwrap();
    let api = s.host.api.as_ref().unwrap();
    assert_eq!(api.tokens, site::SecretRef::Env("BOOTD_API_TOKENS".into()));
    assert_eq!(
        api.redfish.as_ref().unwrap().power_off_timeout.as_secs(),
        30
    );
    assert_eq!(api.ipmi.as_ref().unwrap().power_off_timeout.as_secs(), 120);
    assert_eq!(s.ignition.after_install, site::AfterInstall::Disk);

    let bad = text
        .replace(
            "host:\n",
            "host:\n  api:\n    listen: 127.0.0.1:9443\n    tokens: { env: 1-bad }\n    redfish: { powerOffTimeout: soon }\n    ipmi: { powerOffTimeout: 0s }\n",
        )
        .replace("  tokenTtl: 1h", "  tokenTtl: 1h\n  afterInstall: never");
    let e = load_text(&path, &bad).unwrap_err();
    assert_keys(
        &e,
        &[
            "host.api.tokens.env",
            "host.api.redfish.powerOffTimeout",
            "host.api.ipmi.powerOffTimeout",
            "ignition.afterInstall",
        ],
    );
}

const ALIBABA_API: &str =
    "host:\n  api:\n    listen: 127.0.0.1:9443\n    tokens: { file: t }\n    alibaba:\n";

#[test]
fn alibaba_account_is_validated_with_every_problem() {
    let (dir, path) = lab();
    let text = std::fs::read_to_string(&path).unwrap();
    let good = format!(
        "{ALIBABA_API}      regionId: cn-hangzhou\n      accessKeyId: {{ file: ak-id }}\n      accessKeySecret: {{ credential: ali-secret }}\n      zones: [cn-hangzhou-h, cn-hangzhou-i]\n      vSwitches: {{ cn-hangzhou-h: vsw-h, cn-hangzhou-i: vsw-i }}\n      securityGroupId: sg-1\n      instanceTypes: {{ master: ecs.g6.xlarge, worker: ecs.g6.large }}\n      imageId: m-rhcos\n"
    );
    let a = load_text(&path, &text.replace("host:\n", &good))
        .unwrap()
        .host
        .api
        .unwrap()
        .alibaba
        .unwrap();
    assert_eq!(a.endpoint, "https://ecs.cn-hangzhou.aliyuncs.com");
    // Without a network, no address ECS gives could ever be served.
    let lab_network = "networks:\n  - name: lab\n    subnet: 10.77.0.0/24\n    gateway: 10.77.0.1\n    dnsServers: [10.77.0.1]\n";
    assert!(text.contains(lab_network));
    std::fs::write(
        &path,
        text.replace("host:\n", &good).replace(lab_network, ""),
    )
    .unwrap();
    let e = site::load(&path).unwrap_err().to_string();
    assert!(
        e.contains("networks: host.api.alibaba gives its machines their addresses, and the site has no network they could be in"),
        "{e}"
    );
    assert_eq!(
        a.instance_types["bootstrap"], "ecs.g6.xlarge",
        "bootstrap: master's"
    );
    assert_eq!(
        a.system_disk,
        site::AlibabaDisk {
            category: "cloud_essd".into(),
            size_gib: 120,
            performance_level: None
        }
    );
    assert_eq!(
        a.access_key_id,
        site::SecretRef::File(dir.path().join("ak-id"))
    );

    let bad = format!(
        "{ALIBABA_API}      regionId: hangzhou\n      accessKeyId: {{ file: a, env: B }}\n      zones: [cn-shanghai-b]\n      vSwitches: {{ cn-hangzhou-x: subnet-1 }}\n      securityGroupId: group\n      instanceTypes: {{ master: g6, gpu: ecs.gn6 }}\n      systemDisk: {{ category: cloud_ssd, size: 8, performanceLevel: PL1 }}\n      imageId: m-a\n      imageSet: rhcos\n      tags: {{ aliyun-x: y, openshift: z }}\n"
    );
    let e = load_text(&path, &text.replace("host:\n", &bad)).unwrap_err();
    assert_keys(
        &e,
        &[
            "host.api.alibaba.regionId",
            "host.api.alibaba.accessKeyId",
            "host.api.alibaba.accessKeySecret",
            "host.api.alibaba.vSwitches",
            "host.api.alibaba.vSwitches.cn-hangzhou-x",
            "host.api.alibaba.securityGroupId",
            "host.api.alibaba.instanceTypes.master",
            "host.api.alibaba.instanceTypes.gpu",
            "host.api.alibaba.instanceTypes.worker",
            "host.api.alibaba.systemDisk.size",
            "host.api.alibaba.systemDisk.performanceLevel",
            "host.api.alibaba.imageSet",
            "host.api.alibaba.tags.aliyun-x",
            "host.api.alibaba.tags.openshift",
        ],
    );
    let t = e.to_string();
    assert!(
        t.contains("below the image's 16 GiB") && t.contains("PL1 is for category cloud_essd"),
        "{t}"
    );

    // A zone outside the region (with a well-formed region).
    let zone = good.replace(
        "zones: [cn-hangzhou-h, cn-hangzhou-i]",
        "zones: [cn-hangzhou-h, cn-shanghai-b]",
    );
    let e = load_text(&path, &text.replace("host:\n", &zone))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("\"cn-shanghai-b\" is not a zone of region cn-hangzhou"),
        "{e}"
    );

    // imageSet: the image the cached stream metadata lists for the region.
    let root = dir.path().join("cache");
    // aarch64: the lab's nodes are x86_64 and must keep one set that fits them.
    let set = root.join("rhcos-4.18/418.94.1/aarch64/metal");
    std::fs::create_dir_all(&set).unwrap();
    let file = |role: &str, name: &str| serde_json::json!({"role": role, "format": "pxe", "name": name, "sha256": "00", "size": 1, "location": "http://x/"});
    std::fs::write(
        set.join("manifest.json"),
        serde_json::json!({"stream": "rhcos-4.18", "version": "418.94.1", "arch": "aarch64", "platform": "metal",
                           "files": [file("kernel", "k"), file("initramfs", "i")]})
        .to_string(),
    )
    .unwrap();
    let stream = serde_json::json!({"architectures": {"aarch64": {"images": {"aliyun": {"regions": {
        "cn-hangzhou": {"release": "418.94.1", "image": "m-bp1rhcos418"}}}}}}});
    std::fs::write(
        root.join("rhcos-4.18/418.94.1/stream.json"),
        stream.to_string(),
    )
    .unwrap();
    let with_set = |region: &str| {
        let g = good
            .replace("imageId: m-rhcos", "imageSet: rhcos")
            .replace("regionId: cn-hangzhou", &format!("regionId: {region}"))
            .replace("cn-hangzhou-", &format!("{region}-"));
        text.replace("host:\n", &g)
            .replace("root: ../../target/lab-images", &format!("root: {}", root.display()))
            .replace(
                "  sets:\n",
                "  sets:\n    rhcos: { catalog: { stream: rhcos-4.18, version: 418.94.1, arch: aarch64 } }\n",
            )
    };
    let a = load_text(&path, &with_set("cn-hangzhou"))
        .unwrap()
        .host
        .api
        .unwrap()
        .alibaba
        .unwrap();
    assert_eq!(a.image_id, "m-bp1rhcos418");
    // A set not fetched yet: the site stays valid (`images fetch --site`
    // reads it; bootd does not start until the set is cached).
    std::fs::write(
        &path,
        with_set("cn-hangzhou").replace("version: 418.94.1", "version: 418.94.9"),
    )
    .unwrap();
    let a = site::load(&path)
        .unwrap()
        .host
        .api
        .unwrap()
        .alibaba
        .unwrap();
    assert_eq!(a.image_id, "");
    std::fs::write(&path, with_set("eu-central-1")).unwrap();
    let e = site::load(&path).unwrap_err().to_string();
    assert!(
        e.contains("host.api.alibaba.imageSet")
            && e.contains(
                "rhcos-4.18 418.94.1 (aarch64) has no aliyun image in region eu-central-1"
            ),
        "{e}"
    );
}
