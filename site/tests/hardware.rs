//! Root-device hints as Metal3 defines them, against an inventory; role
//! minimums.

mod common;

use common::assert_problems;
use site::hardware::*;

fn inv() -> Inventory {
    let disk = |name: &str, serial: &str, gib: u64, rot: bool| Disk {
        name: name.into(),
        by_path: format!("/dev/disk/by-path/pci-0000:00:0{}.0", &name[7..]),
        size_bytes: gib * GIB,
        model: "QEMU HARDDISK".into(),
        vendor: "ATA".into(),
        serial: serial.into(),
        wwn: format!("0x5000c500{serial}"),
        rotational: rot,
        hctl: format!("0:0:{}:0", &name[7..]),
        ..Disk::default()
    };
    Inventory {
        cpu: Cpu {
            model: "QEMU Virtual CPU".into(),
            count: 2,
            arch: "x86_64".into(),
        },
        memory_mib: 8 * 1024,
        disks: vec![
            disk("/dev/sda", "BOOT0001", 20, true),
            disk("/dev/sdb", "DATA0002", 120, false),
        ],
        nics: vec![],
        firmware: "uefi".into(),
        system: System::default(),
    }
}

#[test]
fn every_hint_given_must_match_and_the_first_match_wins() {
    let inv = inv();
    let pick = |h: RootDeviceHints| choose_disk(&h, &inv).map(|d| d.name.clone());
    assert_eq!(
        pick(RootDeviceHints::default()),
        Ok("/dev/sda".into()),
        "no hint: the first disk"
    );
    assert_eq!(
        pick(RootDeviceHints {
            serial_number: Some("DATA0002".into()),
            ..Default::default()
        }),
        Ok("/dev/sdb".into())
    );
    assert_eq!(
        pick(RootDeviceHints::device(
            "/dev/disk/by-path/pci-0000:00:0b.0"
        )),
        Ok("/dev/sdb".into()),
        "by-path link"
    );
    assert_eq!(
        pick(RootDeviceHints {
            min_size_gigabytes: Some(100),
            ..Default::default()
        }),
        Ok("/dev/sdb".into())
    );
    assert_eq!(
        pick(RootDeviceHints {
            rotational: Some(false),
            ..Default::default()
        }),
        Ok("/dev/sdb".into())
    );
    assert_eq!(
        pick(RootDeviceHints {
            hctl: Some("0:0:a:0".into()),
            ..Default::default()
        }),
        Ok("/dev/sda".into())
    );
    // model and vendor are substrings; serial numbers and WWNs exact.
    assert_eq!(
        pick(RootDeviceHints {
            model: Some("HARD".into()),
            vendor: Some("AT".into()),
            ..Default::default()
        }),
        Ok("/dev/sda".into())
    );
    assert!(pick(RootDeviceHints {
        serial_number: Some("DATA".into()),
        ..Default::default()
    })
    .is_err());
    assert!(pick(RootDeviceHints {
        wwn: Some("0x5000c500DATA".into()),
        ..Default::default()
    })
    .is_err());
    // All at once: both must hold.
    let err = pick(RootDeviceHints {
        serial_number: Some("DATA0002".into()),
        rotational: Some(true),
        ..Default::default()
    })
    .unwrap_err();
    assert!(
        err.starts_with(
            "no disk matches the root-device hints (rotational=true, serialNumber=\"DATA0002\"): "
        ),
        "{err}"
    );
    assert!(
        err.contains("/dev/sda: serialNumber \"DATA0002\" (has \"BOOT0001\")"),
        "{err}"
    );
    assert!(
        err.contains("/dev/sdb: rotational true (is false)"),
        "{err}"
    );
    let none = Inventory {
        disks: vec![],
        ..inv.clone()
    };
    assert_eq!(
        choose_disk(&RootDeviceHints::default(), &none).unwrap_err(),
        "the machine reported no disk"
    );
}

#[test]
fn minimums_name_what_is_short() {
    let inv = inv();
    let master = Minimums::openshift_default("master");
    assert_eq!(
        master,
        Minimums {
            cpus: Some(4),
            memory_gib: Some(16),
            disk_gib: Some(100)
        }
    );
    assert_eq!(
        shortfalls(&master, &inv, Some(&inv.disks[0])),
        [
            "CPUs: 2 < 4",
            "memory: 8.0 GiB < 16 GiB",
            "disk /dev/sda: 20 GiB < 100 GiB"
        ]
    );
    let worker = Minimums::openshift_default("worker");
    assert!(shortfalls(&worker, &inv, Some(&inv.disks[1])).is_empty());
    assert_eq!(Minimums::openshift_default("infra"), Minimums::default());
}

#[test]
fn an_inventory_is_refused_with_an_unknown_key() {
    let v = serde_json::json!({"cpu": {"model": "x", "count": 1, "arch": "x86_64"}, "memoryMib": 1, "firmware": "bios", "gpu": 1});
    let e = serde_json::from_value::<Inventory>(v)
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown field `gpu`"), "{e}");
}

/// worker-0's and worker-1's MACs in the lab site.
const W0_MAC: &str = "52:54:00:77:00:20";
const W1_MAC: &str = "52:54:00:77:00:21";

/// The lab site's text with the nodes of `macs` no longer `live: true` (the
/// lab's guests have no disk), for the tests to give them a disk target or
/// say live themselves.
fn not_live(t: &str, macs: &[&str]) -> String {
    let mut t = t.to_string();
    for mac in macs {
        let live = format!("live: true, macs: [\"{mac}\"]");
        assert!(t.contains(&live), "{t}");
        t = t.replace(&live, &format!("macs: [\"{mac}\"]"));
    }
    t
}

/// The lab site with worker-0 and worker-1's entries given `w0`, `w1`
/// (YAML flow-map entries) instead of `live: true`.
fn lab_with(w0: &str, w1: &str) -> Result<site::Site, site::SiteError> {
    let (_dir, path) = common::lab(|t| {
        not_live(&t, &[W0_MAC, W1_MAC])
            .replace(
                "ip: 10.77.0.20, kernelArgs: [console=ttyS0] }",
                &format!("ip: 10.77.0.20, kernelArgs: [console=ttyS0]{w0} }}"),
            )
            .replace(
                "ip: 10.77.0.21, kernelArgs: [console=ttyS0] }",
                &format!("ip: 10.77.0.21, kernelArgs: [console=ttyS0]{w1} }}"),
            )
    });
    site::load(&path)
}

#[test]
fn a_device_name_hint_and_live_in_the_site() {
    let s = lab_with(
        ", rootDeviceHints: { deviceName: /dev/disk/by-path/pci-0000:00:0b.0 }",
        ", live: true",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let w0 = s.node("worker-0").unwrap();
    assert_eq!(
        w0.install_device(),
        Some("/dev/disk/by-path/pci-0000:00:0b.0")
    );
    assert_eq!(
        choose_disk(w0.root_device_hints.as_ref().unwrap(), &inv())
            .unwrap()
            .name,
        "/dev/sdb"
    );
    let w1 = s.node("worker-1").unwrap();
    assert!(!w0.live && w1.live);
    assert_eq!(w1.install_device(), None);

    let err = lab_with(
        ", installDisk: /dev/sda, rootDeviceHints: { deviceName: sda, hctl: \"0:0\", minSizeGigabytes: 0, size: 9 }",
        ", live: true, rootDeviceHints: { serialNumber: DATA0002 }",
    )
    .unwrap_err();
    assert_problems(
        &err,
        &[
            "nodes[4].rootDeviceHints.size: unknown key",
            "nodes[4].rootDeviceHints.deviceName: \"sda\": a /dev/ path",
            "nodes[4].rootDeviceHints.hctl: \"0:0\": host:channel:target:lun",
            "nodes[4].rootDeviceHints.minSizeGigabytes: at least 1",
            "nodes[4].rootDeviceHints: give rootDeviceHints or installDisk, not both",
            "nodes[5].rootDeviceHints.serialNumber: needs the machine's inventory, and inspection.agents has no agent",
            "nodes[5].live: a live node installs to no disk",
        ],
    );
}

/// With an agent for the node's architecture, any of Metal3's hints; the
/// inspection keys are checked like the rest.
#[test]
fn hints_with_an_agent_and_the_inspection_keys() {
    let edit = |t: String, inspection: &str| {
        t.replace(
            "\nnodes:\n",
            &format!("\ninspection:\n{inspection}\nnodes:\n"),
        )
    };
    let (_d, path) = common::lab(|t| {
        edit(
            not_live(&t, &[W0_MAC]).replace(
                "ip: 10.77.0.20, kernelArgs: [console=ttyS0] }",
                "ip: 10.77.0.20, kernelArgs: [console=ttyS0], rootDeviceHints: { serialNumber: DATA0002, rotational: false } }",
            ),
            "  agents: { x86_64: tools/bootd-agent }\n  minimums: { worker: { cpus: 8 } }\n  enforceMinimums: false\n",
        )
    });
    let s = site::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let w0 = s.node("worker-0").unwrap();
    assert_eq!(
        choose_disk(&w0.disk_hints().unwrap(), &inv())
            .unwrap()
            .serial,
        "DATA0002"
    );
    assert_eq!(
        s.inspection.agent(site::Arch::X86_64),
        Some("tools/bootd-agent")
    );
    assert_eq!(s.inspection.minimums_of("worker").cpus, Some(8));
    assert_eq!(s.inspection.minimums_of("master").memory_gib, Some(16));
    assert!(!s.inspection.enforce_minimums);
    let (_d2, path) = common::lab(|t| {
        edit(
            t,
            "  agents: { sparc: a, x86_64: /abs }\n  minimums: { worker: { cpus: 0 } }\n  lldpSeconds: 301\n",
        )
    });
    assert_problems(
        &site::load(&path).unwrap_err(),
        &[
            "inspection.agents.sparc: \"sparc\" is not one of",
            "inspection.agents.x86_64:",
            "inspection.minimums.worker.cpus: at least 1",
            "inspection.lldpSeconds: 301: at most 300",
        ],
    );
}

/// A node in the site file names a disk to install to or says it runs
/// live; one that does neither (or says `live: false`) is refused by its key
/// path. A node in the overlay is the controller's, checked per provider.
#[test]
fn a_site_node_names_a_disk_or_says_live() {
    const NO_DISK: &str = "names no disk to install to: give rootDeviceHints (Metal3's) or \
        installDisk for the disk it installs to, or live: true for a node that runs the live \
        system and installs nothing";
    let (_d, path) = common::lab(|t| not_live(&t, &[W0_MAC, W1_MAC]));
    let err = site::load(&path).unwrap_err();
    assert_problems(
        &err,
        &[
            &format!("nodes[4]: {NO_DISK}"),
            &format!("nodes[5]: {NO_DISK}"),
        ],
    );
    assert_eq!(err.problems.len(), 2, "{err}");
    assert!(err.problems.iter().all(|p| p.file == path), "{err}");

    let err = lab_with(", live: false", ", installDisk: /dev/sda").unwrap_err();
    assert_problems(&err, &[&format!("nodes[4]: {NO_DISK}")]);
    assert_eq!(err.problems.len(), 1, "{err}");

    // An overlay node with none of the three is accepted.
    let (dir, path) = common::lab(|t| t);
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(
        state.join(site::OVERLAY_FILE),
        "nodes:\n  - { name: worker-3, role: worker, macs: [\"52:54:00:77:00:23\"], ip: 10.77.0.23 }\n",
    )
    .unwrap();
    let s = site::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let w3 = s.node("worker-3").unwrap();
    assert!(s.from_overlay("worker-3"));
    assert!(!w3.live);
    assert_eq!(w3.install_device(), None);
}
