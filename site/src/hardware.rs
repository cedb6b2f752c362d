//! What a machine has, as its inspection in the live environment reports
//! it ([`Inventory`]), and what the site asks of it: the disk to install
//! to, chosen by root-device hints as Metal3 defines them
//! ([`RootDeviceHints`], [`choose_disk`]), and each role's minimums
//! ([`Minimums`], [`shortfalls`]). Pure: bootd stores the reports, the
//! controller shows them and acts on what these functions say.

use serde::{Deserialize, Serialize};

/// A machine's inventory, as its inspection reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Inventory {
    pub cpu: Cpu,
    /// Installed memory (the memory blocks the kernel sees online, not
    /// MemTotal, which leaves out what the kernel reserves).
    pub memory_mib: u64,
    #[serde(default)]
    pub disks: Vec<Disk>,
    #[serde(default)]
    pub nics: Vec<Nic>,
    /// `uefi` or `bios`: how the inspected boot started.
    pub firmware: String,
    /// SMBIOS system strings, where the firmware has them.
    #[serde(default)]
    pub system: System,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Cpu {
    pub model: String,
    /// Logical CPUs (what the kernel schedules on).
    pub count: u32,
    pub arch: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct System {
    #[serde(default)]
    pub vendor: String,
    #[serde(default)]
    pub product: String,
    #[serde(default)]
    pub serial: String,
    #[serde(default)]
    pub uuid: String,
}

/// A whole disk (no partitions, no removable or read-only devices).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Disk {
    /// The kernel's name, `/dev/sda`: valid for this boot only.
    pub name: String,
    /// `/dev/disk/by-path/…`, stable while the disk stays in its slot.
    #[serde(default)]
    pub by_path: String,
    /// A `/dev/disk/by-id/…` link (the WWN's, else the first), stable
    /// while the disk exists, whatever slot it is in.
    #[serde(default)]
    pub by_id: String,
    pub size_bytes: u64,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub vendor: String,
    #[serde(default)]
    pub serial: String,
    #[serde(default)]
    pub wwn: String,
    #[serde(default)]
    pub wwn_with_extension: String,
    #[serde(default)]
    pub wwn_vendor_extension: String,
    pub rotational: bool,
    /// SCSI host:channel:target:lun, where the disk has one.
    #[serde(default)]
    pub hctl: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Nic {
    pub name: String,
    pub mac: String,
    /// Mb/s, when the link is up and the driver says.
    #[serde(default)]
    pub speed_mbps: Option<u32>,
    pub link: bool,
    /// The switch and port from an LLDP frame the NIC received.
    #[serde(default)]
    pub lldp: Option<Lldp>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Lldp {
    #[serde(default)]
    pub chassis_id: String,
    #[serde(default)]
    pub port_id: String,
    #[serde(default)]
    pub system_name: String,
    #[serde(default)]
    pub port_description: String,
}

/// Root-device hints, as Metal3's BareMetalHost and install-config's
/// `rootDeviceHints` define them: a disk is chosen only if it matches
/// every hint given; the first such disk in the order the inspection
/// found them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RootDeviceHints {
    /// Exactly the disk's kernel name or its `/dev/disk/by-path/` link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    /// Exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hctl: Option<String>,
    /// A substring of the disk's model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// A substring of the disk's vendor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    /// Exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial_number: Option<String>,
    /// At least this many GiB (2^30 bytes, as Ironic counts them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_size_gigabytes: Option<u64>,
    /// Exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwn: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwn_with_extension: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwn_vendor_extension: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotational: Option<bool>,
}

pub const GIB: u64 = 1 << 30;

impl RootDeviceHints {
    /// A hint that names only a device (`installDisk`).
    pub fn device(name: &str) -> RootDeviceHints {
        RootDeviceHints {
            device_name: Some(name.to_string()),
            ..RootDeviceHints::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == RootDeviceHints::default()
    }

    /// Whether choosing by these hints needs the machine's inventory:
    /// any hint but a device name.
    pub fn needs_inventory(&self) -> bool {
        RootDeviceHints {
            device_name: None,
            ..self.clone()
        } != RootDeviceHints::default()
    }

    /// Each hint `d` does not meet, as "key: want, has".
    pub fn misses(&self, d: &Disk) -> Vec<String> {
        let mut out = Vec::new();
        let mut exact = |key: &str, want: &Option<String>, has: &str| {
            if let Some(w) = want {
                if w != has {
                    out.push(format!("{key} {w:?} (has {has:?})"));
                }
            }
        };
        exact("hctl", &self.hctl, &d.hctl);
        exact("serialNumber", &self.serial_number, &d.serial);
        exact("wwn", &self.wwn, &d.wwn);
        exact(
            "wwnWithExtension",
            &self.wwn_with_extension,
            &d.wwn_with_extension,
        );
        exact(
            "wwnVendorExtension",
            &self.wwn_vendor_extension,
            &d.wwn_vendor_extension,
        );
        if let Some(n) = &self.device_name {
            if *n != d.name && (d.by_path.is_empty() || *n != d.by_path) {
                out.push(format!("deviceName {n:?} (is {:?})", d.name));
            }
        }
        let mut sub = |key: &str, want: &Option<String>, has: &str| {
            if let Some(w) = want {
                if !has.contains(w.as_str()) {
                    out.push(format!("{key} {w:?} (has {has:?})"));
                }
            }
        };
        sub("model", &self.model, &d.model);
        sub("vendor", &self.vendor, &d.vendor);
        if let Some(min) = self.min_size_gigabytes {
            if d.size_bytes / GIB < min {
                out.push(format!(
                    "minSizeGigabytes {min} (has {} GiB)",
                    d.size_bytes / GIB
                ));
            }
        }
        if let Some(r) = self.rotational {
            if r != d.rotational {
                out.push(format!("rotational {r} (is {})", d.rotational));
            }
        }
        out
    }

    /// A one-line form for messages: `serialNumber="S2", minSizeGigabytes=20`.
    pub fn describe(&self) -> String {
        let v = serde_json::to_value(self).unwrap_or_default();
        v.as_object()
            .map(|o| {
                o.iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    }
}

/// The disk `hints` choose among `inv`'s, or why none: each disk with the
/// hints it misses.
pub fn choose_disk<'a>(hints: &RootDeviceHints, inv: &'a Inventory) -> Result<&'a Disk, String> {
    if inv.disks.is_empty() {
        return Err("the machine reported no disk".into());
    }
    let mut why = Vec::new();
    for d in &inv.disks {
        let misses = hints.misses(d);
        if misses.is_empty() {
            return Ok(d);
        }
        why.push(format!("{}: {}", d.name, misses.join(", ")));
    }
    Err(format!(
        "no disk matches the root-device hints ({}): {}",
        hints.describe(),
        why.join("; ")
    ))
}

/// What a role needs at least; `None`: no minimum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Minimums {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_gib: Option<u64>,
    /// Of the disk it installs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_gib: Option<u64>,
}

impl Minimums {
    /// OpenShift's documented minimums for installer-provisioned and
    /// user-provisioned clusters: bootstrap and control-plane machines
    /// 4 vCPUs, 16 GB of RAM, 100 GB of storage; compute machines 2, 8
    /// and 100. Other roles have none unless the site gives them.
    pub fn openshift_default(role: &str) -> Minimums {
        match role {
            crate::ROLE_BOOTSTRAP | crate::ROLE_MASTER => Minimums {
                cpus: Some(4),
                memory_gib: Some(16),
                disk_gib: Some(100),
            },
            crate::ROLE_WORKER => Minimums {
                cpus: Some(2),
                memory_gib: Some(8),
                disk_gib: Some(100),
            },
            _ => Minimums::default(),
        }
    }
}

/// What `inv` lacks of `min` (the disk: the one chosen to install to,
/// when there is one), each "what: has < wants". Empty: it meets them.
pub fn shortfalls(min: &Minimums, inv: &Inventory, disk: Option<&Disk>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(c) = min.cpus {
        if inv.cpu.count < c {
            out.push(format!("CPUs: {} < {c}", inv.cpu.count));
        }
    }
    if let Some(m) = min.memory_gib {
        // Installed memory in MiB against GiB: 16 GiB is 16384 MiB.
        if inv.memory_mib < m * 1024 {
            out.push(format!(
                "memory: {:.1} GiB < {m} GiB",
                inv.memory_mib as f64 / 1024.0
            ));
        }
    }
    if let (Some(g), Some(d)) = (min.disk_gib, disk) {
        if d.size_bytes / GIB < g {
            out.push(format!(
                "disk {}: {} GiB < {g} GiB",
                d.name,
                d.size_bytes / GIB
            ));
        }
    }
    out
}
