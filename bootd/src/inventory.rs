//! What each node's machine reported of itself: its inventory (the
//! inspection agent's `POST /inventory/<node>`) and, after a release, the
//! disks it wiped (`POST /inventory/<node>/wiped`). The boot decision
//! ([`crate::plan`]) reads it: no inventory yet, the node inspects; with
//! one, its root-device hints choose the disk and its role's minimums are
//! checked.
//!
//! Kept one file per node, `<stateDir>/inventory/<node>.json`, written
//! atomically before memory changes: a restart forgets nothing, a failed
//! write changes nothing. A file that does not parse is moved aside
//! (`<node>.json.bad`, logged): that node inspects again. Per appliance,
//! like `installed.json`: with several appliances on etcd, a node whose
//! boot another appliance answers inspects once more there.

use serde::{Deserialize, Serialize};
use site::hardware::Inventory;
use std::collections::BTreeMap;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub const DIR: &str = "inventory";
/// The largest report accepted (a machine with 256 disks and 256 NICs
/// fits in a tenth of it).
pub const MAX_BODY: usize = 512 * 1024;
const MAX_ITEMS: usize = 1024;

/// One node's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// When the inventory came (ms since the epoch) and from where.
    pub at_ms: i64,
    pub from: IpAddr,
    pub inventory: Inventory,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wiped: Option<Wiped>,
}

/// What the agent's `wipe` reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Wiped {
    pub at_ms: i64,
    pub disks: Vec<WipedDisk>,
}

/// The agent's wipe report, as it posts it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WipeReport {
    pub disks: Vec<WipedDisk>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WipedDisk {
    pub name: String,
    #[serde(default)]
    pub by_path: String,
    #[serde(default)]
    pub by_id: String,
    #[serde(default)]
    pub serial: String,
    /// Partitions whose signatures were erased, besides the disk's own.
    #[serde(default)]
    pub partitions: u32,
}

/// Why a report was refused (the agent is told, with 400).
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("not JSON of the inventory's shape: {0}")]
    Shape(#[from] serde_json::Error),
    #[error("{0}")]
    Invalid(String),
}

/// An inventory report's body, checked: the shape, and values the boot
/// decision and the status page can use.
pub fn parse_inventory(body: &[u8]) -> Result<Inventory, ReportError> {
    let inv: Inventory = serde_json::from_slice(body)?;
    if inv.disks.len() > MAX_ITEMS || inv.nics.len() > MAX_ITEMS {
        return Err(ReportError::Invalid(format!(
            "{} disks and {} NICs: at most {MAX_ITEMS} of each",
            inv.disks.len(),
            inv.nics.len()
        )));
    }
    if inv.cpu.count == 0 {
        return Err(ReportError::Invalid("cpu.count is 0".into()));
    }
    if let Some(d) = inv.disks.iter().find(|d| !d.name.starts_with("/dev/")) {
        return Err(ReportError::Invalid(format!(
            "disk {:?}: a disk's name is a /dev/ path",
            d.name
        )));
    }
    for d in &inv.disks {
        for (what, link) in [("byPath", &d.by_path), ("byId", &d.by_id)] {
            if !link.is_empty() && (!link.starts_with("/dev/disk/") || !kernel_arg_safe(link)) {
                return Err(ReportError::Invalid(format!(
                    "disk {}: {what} {link:?} is not a /dev/disk/ link",
                    d.name
                )));
            }
        }
        if !kernel_arg_safe(&d.name) {
            return Err(ReportError::Invalid(format!(
                "disk {:?}: not a device name",
                d.name
            )));
        }
    }
    if !matches!(inv.firmware.as_str(), "uefi" | "bios") {
        return Err(ReportError::Invalid(format!(
            "firmware {:?}: uefi or bios",
            inv.firmware
        )));
    }
    Ok(inv)
}

/// A disk name or link goes on a kernel command line: no spaces, quotes,
/// control characters.
fn kernel_arg_safe(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && s.chars()
            .all(|c| c.is_ascii_graphic() && !matches!(c, '"' | '\'' | '\\'))
}

pub fn parse_wipe(body: &[u8]) -> Result<WipeReport, ReportError> {
    let w: WipeReport = serde_json::from_slice(body)?;
    if w.disks.len() > MAX_ITEMS {
        return Err(ReportError::Invalid(format!(
            "{} disks: at most {MAX_ITEMS}",
            w.disks.len()
        )));
    }
    Ok(w)
}

#[derive(Debug)]
pub struct Inventories {
    dir: PathBuf,
    nodes: Mutex<BTreeMap<String, Arc<Record>>>,
    /// Nodes whose deletion waits for their disks to be wiped, kept in
    /// `<stateDir>/releasing.json` (a restart still wipes them).
    releasing_path: PathBuf,
    releasing: Mutex<BTreeMap<String, Release>>,
}

/// A node whose disks are wiped at its next network boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Release {
    /// Since when (ms since the epoch).
    pub since_ms: i64,
    /// `false`: it is being deleted (powered off after the wipe);
    /// `true`: it was adopted and installs after the wipe (the machine
    /// reboots).
    #[serde(default)]
    pub then_install: bool,
}

pub const RELEASING_FILE: &str = "releasing.json";

impl Inventories {
    /// Reads `<state_dir>/inventory/`; a missing directory is none.
    pub fn open(state_dir: &Path) -> io::Result<Inventories> {
        let dir = state_dir.join(DIR);
        let mut nodes = BTreeMap::new();
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => Some(e),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        for e in entries.into_iter().flatten() {
            let path = e?.path();
            let Some(name) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".json"))
                .map(str::to_string)
            else {
                continue;
            };
            match std::fs::read(&path).map(|b| serde_json::from_slice::<Record>(&b)) {
                Ok(Ok(r)) => {
                    nodes.insert(name, Arc::new(r));
                }
                Ok(Err(err)) => {
                    let bad = path.with_extension("json.bad");
                    tracing::warn!(file = %path.display(), error = %err, moved_to = %bad.display(), "an inventory that does not parse is moved aside: the node inspects again at its next boot");
                    std::fs::rename(&path, &bad)?;
                }
                Err(e) => return Err(e),
            }
        }
        let releasing_path = state_dir.join(RELEASING_FILE);
        let releasing = match std::fs::read(&releasing_path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{RELEASING_FILE}: {e}: the file is corrupt (it lists the nodes whose disks are wiped before they are deleted); restore it, or remove it to wipe none"),
                )
            })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Default::default(),
            Err(e) => return Err(e),
        };
        Ok(Inventories {
            dir,
            nodes: Mutex::new(nodes),
            releasing_path,
            releasing: Mutex::new(releasing),
        })
    }

    /// Whether `node`'s next boot wipes its disks, and what follows.
    pub fn release(&self, node: &str) -> Option<Release> {
        self.releasing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(node)
            .copied()
    }

    /// Whether `node` is being deleted and its deletion waits for its wipe.
    pub fn releasing(&self, node: &str) -> bool {
        self.releasing_since(node).is_some()
    }

    /// Since when (ms since the epoch) `node`'s deletion waits for its wipe.
    pub fn releasing_since(&self, node: &str) -> Option<i64> {
        self.release(node)
            .filter(|r| !r.then_install)
            .map(|r| r.since_ms)
    }

    /// Marks `node` as released since `now_ms` (`None`: no longer), on
    /// disk first. Marking a node being released already keeps its time.
    pub fn set_releasing(&self, node: &str, now_ms: Option<i64>) -> io::Result<()> {
        self.mark(
            node,
            now_ms.map(|t| Release {
                since_ms: t,
                then_install: false,
            }),
        )
    }

    /// Marks an adopted `node`: its next boot wipes its disks, then it
    /// reboots to inspect and install.
    pub fn set_wipe_first(&self, node: &str, now_ms: i64) -> io::Result<()> {
        self.mark(
            node,
            Some(Release {
                since_ms: now_ms,
                then_install: true,
            }),
        )
    }

    fn mark(&self, node: &str, to: Option<Release>) -> io::Result<()> {
        let mut r = self.releasing.lock().unwrap_or_else(|p| p.into_inner());
        let now = r.get(node).copied();
        let same = match (now, to) {
            (None, None) => true,
            (Some(a), Some(b)) => a.then_install == b.then_install,
            _ => false,
        };
        if same {
            return Ok(());
        }
        let mut next = r.clone();
        match to {
            Some(t) => {
                next.insert(node.to_string(), t);
            }
            None => {
                next.remove(node);
            }
        }
        let json = serde_json::to_vec_pretty(&next).map_err(io::Error::other)?;
        runtime::fs::write_atomic(&self.releasing_path, &json, 0o644)?;
        *r = next;
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Record>>> {
        self.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn file(&self, node: &str) -> PathBuf {
        self.dir.join(format!("{node}.json"))
    }

    pub fn get(&self, node: &str) -> Option<Arc<Record>> {
        self.lock().get(node).cloned()
    }

    /// Every node's record, by name.
    pub fn all(&self) -> BTreeMap<String, Arc<Record>> {
        self.lock().clone()
    }

    fn store(&self, node: &str, r: Record) -> io::Result<Arc<Record>> {
        let mut n = self.lock();
        let json = serde_json::to_vec_pretty(&r).map_err(io::Error::other)?;
        runtime::fs::write_atomic(&self.file(node), &json, 0o644)?;
        let r = Arc::new(r);
        n.insert(node.to_string(), Arc::clone(&r));
        Ok(r)
    }

    /// Records `node`'s inventory (a new inspection replaces the old one
    /// and its wipe record).
    pub fn put(
        &self,
        node: &str,
        inventory: Inventory,
        from: IpAddr,
        now_ms: i64,
    ) -> io::Result<Arc<Record>> {
        self.store(
            node,
            Record {
                at_ms: now_ms,
                from,
                inventory,
                wiped: None,
            },
        )
    }

    /// Records the disks `node` wiped; `None` when it has no inventory
    /// (the wipe is still logged by the caller).
    pub fn put_wiped(
        &self,
        node: &str,
        report: WipeReport,
        now_ms: i64,
    ) -> io::Result<Option<Arc<Record>>> {
        let Some(old) = self.get(node) else {
            return Ok(None);
        };
        let mut r = (*old).clone();
        r.wiped = Some(Wiped {
            at_ms: now_ms,
            disks: report.disks,
        });
        self.store(node, r).map(Some)
    }

    /// Forgets `node`'s record (deleted, or asked to inspect again);
    /// `true` if it had one.
    pub fn clear(&self, node: &str) -> io::Result<bool> {
        let mut n = self.lock();
        if !n.contains_key(node) {
            return Ok(false);
        }
        match std::fs::remove_file(self.file(node)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        n.remove(node);
        Ok(true)
    }
}

/// The switch an LLDP frame came from: its system name, else its chassis ID.
pub fn switch_of(l: &site::hardware::Lldp) -> &str {
    if l.system_name.is_empty() {
        &l.chassis_id
    } else {
        &l.system_name
    }
}

/// One line for logs, the timeline and conditions: `2 CPUs, 4.0 GiB,
/// disks /dev/vda 1 GiB (disk-a), …; NICs …; bios`.
pub fn summary(inv: &Inventory) -> String {
    let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
    let disks: Vec<String> = inv
        .disks
        .iter()
        .map(|d| {
            let id = [&d.serial, &d.model]
                .into_iter()
                .find(|s| !s.is_empty())
                .map(|s| format!(" ({s})"))
                .unwrap_or_default();
            format!("{} {:.0} GiB{id}", d.name, gib(d.size_bytes))
        })
        .collect();
    let nics: Vec<String> = inv
        .nics
        .iter()
        .map(|n| {
            let port = n
                .lldp
                .as_ref()
                .map(|l| format!(" on {} {}", switch_of(l), l.port_id))
                .unwrap_or_default();
            format!(
                "{} {}{}{port}",
                n.name,
                n.mac,
                if n.link { "" } else { " (no link)" }
            )
        })
        .collect();
    format!(
        "{} CPUs, {:.1} GiB, disks: {}; NICs: {}; {}",
        inv.cpu.count,
        inv.memory_mib as f64 / 1024.0,
        if disks.is_empty() {
            "none".into()
        } else {
            disks.join(", ")
        },
        if nics.is_empty() {
            "none".into()
        } else {
            nics.join(", ")
        },
        inv.firmware
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use site::hardware::{Cpu, Disk, Nic};

    fn inv() -> Inventory {
        Inventory {
            cpu: Cpu {
                model: "QEMU".into(),
                count: 2,
                arch: "x86_64".into(),
            },
            memory_mib: 4096,
            disks: vec![Disk {
                name: "/dev/vda".into(),
                by_id: "/dev/disk/by-id/virtio-disk-a".into(),
                size_bytes: 1 << 30,
                serial: "disk-a".into(),
                ..Disk::default()
            }],
            nics: vec![Nic {
                name: "eth0".into(),
                mac: "52:54:00:00:00:01".into(),
                link: true,
                ..Nic::default()
            }],
            firmware: "bios".into(),
            ..Inventory::default()
        }
    }

    #[test]
    fn records_survive_a_reopen_and_a_bad_file_is_moved_aside() {
        let d = tempfile::tempdir().unwrap();
        let s = Inventories::open(d.path()).unwrap();
        assert!(s.get("m0").is_none());
        let ip: IpAddr = "10.0.0.5".parse().unwrap();
        s.put("m0", inv(), ip, 7).unwrap();
        let w = WipeReport {
            disks: vec![WipedDisk {
                name: "/dev/vda".into(),
                by_path: String::new(),
                by_id: String::new(),
                serial: "disk-a".into(),
                partitions: 3,
            }],
        };
        assert!(s.put_wiped("nobody", w.clone(), 9).unwrap().is_none());
        s.put_wiped("m0", w.clone(), 9).unwrap().unwrap();
        let s = Inventories::open(d.path()).unwrap();
        let r = s.get("m0").unwrap();
        assert_eq!((r.at_ms, r.from, &r.inventory), (7, ip, &inv()));
        assert_eq!(r.wiped.as_ref().unwrap().disks, w.disks);
        std::fs::write(d.path().join(DIR).join("m1.json"), b"{").unwrap();
        let s = Inventories::open(d.path()).unwrap();
        assert!(s.get("m1").is_none());
        assert!(d.path().join(DIR).join("m1.json.bad").exists());
        s.set_wipe_first("m0", 10).unwrap();
        assert!(!s.releasing("m0"));
        assert!(s.release("m0").unwrap().then_install);
        s.set_releasing("m0", Some(11)).unwrap();
        s.set_releasing("m0", Some(12)).unwrap();
        assert_eq!(
            Inventories::open(d.path()).unwrap().releasing_since("m0"),
            Some(11)
        );
        s.set_releasing("m0", None).unwrap();
        assert!(!Inventories::open(d.path()).unwrap().releasing("m0"));
        assert!(s.clear("m0").unwrap());
        assert!(!s.clear("m0").unwrap());
        assert!(Inventories::open(d.path()).unwrap().get("m0").is_none());
    }

    #[test]
    fn reports_are_checked() {
        let ok = serde_json::to_vec(&inv()).unwrap();
        assert_eq!(parse_inventory(&ok).unwrap(), inv());
        let mut bad = inv();
        bad.disks[0].by_id = "/dev/disk/by-id/x y".into();
        let e = parse_inventory(&serde_json::to_vec(&bad).unwrap()).unwrap_err();
        assert!(e.to_string().contains("not a /dev/disk/ link"), "{e}");
        let mut bad = inv();
        bad.disks[0].name = "vda".into();
        assert!(parse_inventory(&serde_json::to_vec(&bad).unwrap()).is_err());
        let mut bad = inv();
        bad.firmware = "coreboot".into();
        assert!(parse_inventory(&serde_json::to_vec(&bad).unwrap()).is_err());
        let e = parse_inventory(br#"{"cpu":{}}"#).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("not JSON of the inventory's shape"),
            "{e}"
        );
        assert_eq!(
            summary(&inv()),
            "2 CPUs, 4.0 GiB, disks: /dev/vda 1 GiB (disk-a); NICs: eth0 52:54:00:00:00:01; bios"
        );
    }
}
