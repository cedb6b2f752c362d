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

/// The lab site with worker-0 and worker-1's entries given `w0`, `w1`
/// (YAML flow-map entries).
fn lab_with(w0: &str, w1: &str) -> Result<site::Site, site::SiteError> {
    let (_dir, path) = common::lab(|t| {
        t.replace(
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
            t.replace(
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
