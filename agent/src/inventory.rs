//! The JSON the agent sends, as its own serde structs: the agent does not
//! depend on `site` (it must stay small and build for any live image), so
//! these mirror `site::hardware::Inventory` field for field; a test
//! (tests/agent.rs) deserializes the agent's output into site's types with
//! `deny_unknown_fields`, so a drift on either side fails there.

use serde::Serialize;

/// A machine's inventory (`site::hardware::Inventory`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Inventory {
    pub cpu: Cpu,
    /// Installed memory: the online memory blocks, else MemTotal.
    pub memory_mib: u64,
    pub disks: Vec<Disk>,
    pub nics: Vec<Nic>,
    pub firmware: Firmware,
    pub system: System,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cpu {
    pub model: String,
    /// Logical CPUs.
    pub count: u32,
    pub arch: String,
}

/// How the running (live) system was booted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Firmware {
    Uefi,
    #[default]
    Bios,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct System {
    pub vendor: String,
    pub product: String,
    pub serial: String,
    pub uuid: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Disk {
    /// `/dev/sda`.
    pub name: String,
    /// `/dev/disk/by-path/…`, empty without udev links.
    pub by_path: String,
    /// `/dev/disk/by-id/…` (the `wwn-` link, else the first), or empty.
    pub by_id: String,
    pub size_bytes: u64,
    pub model: String,
    pub vendor: String,
    pub serial: String,
    pub wwn: String,
    pub wwn_with_extension: String,
    pub wwn_vendor_extension: String,
    pub rotational: bool,
    pub hctl: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Nic {
    pub name: String,
    pub mac: String,
    pub speed_mbps: Option<u32>,
    pub link: bool,
    pub lldp: Option<Lldp>,
}

/// What one LLDP frame said about the switch port a NIC is cabled to.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Lldp {
    pub chassis_id: String,
    pub port_id: String,
    pub system_name: String,
    pub port_description: String,
}

/// What `wipe` POSTs when it is done.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WipeReport {
    pub disks: Vec<WipedDisk>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WipedDisk {
    pub name: String,
    pub by_path: String,
    pub by_id: String,
    pub serial: String,
    /// Partitions whose first and last MiB were zeroed.
    pub partitions: u32,
}
