//! Reading the machine: /proc, /sys and /dev, every path under a root
//! (`/` on a machine, a fixture tree in tests). The parsers of what those
//! files hold are pure functions with their tests below; the readers
//! treat a missing optional attribute as empty, as sysfs leaves out what
//! a driver does not know.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::inventory::{Cpu, Disk, Firmware, Inventory, Nic, System};
use crate::Error;

pub const SECTOR: u64 = 512;

/// A disk as found, with what `wipe` needs besides the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub disk: Disk,
    /// The kernel's name, `sda` (the report's `name` is `/dev/sda`).
    pub kname: String,
    pub partitions: Vec<Partition>,
}

/// A partition as the kernel sees it, in 512-byte sectors whatever the
/// disk's logical block size (sysfs's unit for `start` and `size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    pub start: u64,
    pub sectors: u64,
}

/// Everything but LLDP, which needs listening (crate::capture).
pub fn inventory(root: &Path) -> Result<Inventory, Error> {
    let cpuinfo = read_required(&root.join("proc/cpuinfo"))?;
    let mut count = cpu_count(&cpuinfo);
    if count == 0 {
        // Architectures whose cpuinfo has no per-CPU "processor" line.
        count = read(&root.join("sys/devices/system/cpu/online"))
            .map(|s| cpu_list_len(&s))
            .unwrap_or(0);
    }
    Ok(Inventory {
        cpu: Cpu {
            model: cpu_model(&cpuinfo),
            count,
            arch: std::env::consts::ARCH.to_string(),
        },
        memory_mib: memory_mib(root)?,
        disks: disks(root)?.into_iter().map(|f| f.disk).collect(),
        nics: nics(root)?,
        firmware: if root.join("sys/firmware/efi").exists() {
            Firmware::Uefi
        } else {
            Firmware::Bios
        },
        system: system(root),
    })
}

// ---- CPU ----------------------------------------------------------------

/// `key : value` lines of /proc/cpuinfo, both sides trimmed.
fn cpuinfo_fields(cpuinfo: &str) -> impl Iterator<Item = (&str, &str)> {
    cpuinfo.lines().filter_map(|l| {
        let (k, v) = l.split_once(':')?;
        Some((k.trim(), v.trim()))
    })
}

/// The CPU's name: x86's "model name", POWER's "cpu", 32-bit ARM's
/// "Processor"; empty when the kernel gives none (arm64).
pub fn cpu_model(cpuinfo: &str) -> String {
    for key in ["model name", "cpu", "Processor"] {
        if let Some((_, v)) = cpuinfo_fields(cpuinfo).find(|(k, v)| *k == key && !v.is_empty()) {
            return v.to_string();
        }
    }
    String::new()
}

/// Logical CPUs: one "processor" line each.
pub fn cpu_count(cpuinfo: &str) -> u32 {
    cpuinfo_fields(cpuinfo)
        .filter(|(k, _)| *k == "processor")
        .count() as u32
}

/// The number of CPUs in a kernel CPU list, `0-3,8,10-11` → 7; a part
/// that does not parse counts nothing.
pub fn cpu_list_len(list: &str) -> u32 {
    list.trim()
        .split(',')
        .filter_map(|part| {
            let part = part.trim();
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?);
                    b.checked_sub(a).map(|d| d + 1)
                }
                None => part.parse::<u32>().ok().map(|_| 1),
            }
        })
        .sum()
}

// ---- Memory -------------------------------------------------------------

/// Installed memory in MiB: the online blocks of
/// /sys/devices/system/memory (what the DIMMs give the kernel, including
/// what it reserves for itself), else MemTotal when the kernel has no
/// memory-block directory or no block reads as online.
pub fn memory_mib(root: &Path) -> Result<u64, Error> {
    let dir = root.join("sys/devices/system/memory");
    if let Some(size) = read(&dir.join("block_size_bytes")).and_then(|s| block_size(&s)) {
        let mut online = 0u64;
        for entry in read_dir_sorted(&dir)? {
            let Some(n) = entry.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if !n.starts_with("memory") || n["memory".len()..].parse::<u64>().is_err() {
                continue;
            }
            let on = read(&entry.join("online"))
                .map(|s| s == "1")
                .or_else(|| read(&entry.join("state")).map(|s| s == "online"))
                .unwrap_or(false);
            online += u64::from(on);
        }
        if online > 0 {
            return Ok(online.saturating_mul(size) >> 20);
        }
    }
    let path = root.join("proc/meminfo");
    let meminfo = read_required(&path)?;
    meminfo_total_mib(&meminfo).ok_or_else(|| {
        Error::io(
            &path,
            io::Error::new(io::ErrorKind::InvalidData, "no MemTotal line"),
        )
    })
}

/// block_size_bytes: hexadecimal without `0x` (`8000000` is 128 MiB).
pub fn block_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let s = s.strip_prefix("0x").unwrap_or(s);
    u64::from_str_radix(s, 16).ok().filter(|&n| n > 0)
}

/// `MemTotal:       16303000 kB` → 15920.
pub fn meminfo_total_mib(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut words = line["MemTotal:".len()..].split_whitespace();
    let n: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") | None => Some(n / 1024),
        _ => None,
    }
}

// ---- Disks --------------------------------------------------------------

/// Block devices that are not disks to install to or wipe: loop and RAM
/// disks, device-mapper and MD (they sit on disks listed themselves),
/// optical and floppy drives, network block devices.
pub fn excluded_name(name: &str) -> bool {
    ["loop", "ram", "zram", "dm-", "md", "sr", "fd", "nbd"]
        .iter()
        .any(|p| name.starts_with(p))
}

/// Kernel names in the order the kernel hands them out: a shorter name
/// first (sdz before sdaa, nvme9n1 before nvme10n1), then by bytes.
pub fn disk_order(a: &str, b: &str) -> Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// The WWN fields Ironic reports (udev's ID_WWN, ID_WWN_WITH_EXTENSION,
/// ID_WWN_VENDOR_EXTENSION), from sysfs's `wwid`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wwn {
    pub wwn: String,
    pub with_extension: String,
    pub vendor_extension: String,
}

/// `naa.5000c500a0b1c2d3` → `0x5000c500a0b1c2d3`; a 16-byte NAA 6 id is
/// an 8-byte WWN and an 8-byte vendor extension, as udev splits it.
/// `eui.` ids (EUI-64, NVMe's 16-byte NGUID) become `0x` and their hex,
/// whole. `t10.` (vendor and product text), `nvme.` (made of the
/// controller's vendor, serial and model) and anything else are not
/// WWNs: empty.
pub fn wwn(wwid: &str) -> Wwn {
    let w = wwid.trim();
    let prefix = |p: &str| {
        (w.len() > p.len() && w.is_char_boundary(p.len()) && w[..p.len()].eq_ignore_ascii_case(p))
            .then(|| w[p.len()..].to_ascii_lowercase())
    };
    let (naa, hex) = match (prefix("naa."), prefix("eui.")) {
        (Some(h), _) => (true, h),
        (None, Some(h)) => (false, h),
        (None, None) => return Wwn::default(),
    };
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Wwn::default();
    }
    if naa && hex.len() == 32 {
        Wwn {
            wwn: format!("0x{}", &hex[..16]),
            with_extension: format!("0x{hex}"),
            vendor_extension: format!("0x{}", &hex[16..]),
        }
    } else {
        Wwn {
            wwn: format!("0x{hex}"),
            with_extension: format!("0x{hex}"),
            vendor_extension: String::new(),
        }
    }
}

/// A SCSI address `H:C:T:L` (the name of a SCSI disk's `device` link
/// target), or None.
pub fn hctl(name: &str) -> Option<String> {
    let parts: Vec<&str> = name.split(':').collect();
    (parts.len() == 4
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())))
    .then(|| name.to_string())
}

/// The unit serial number from SCSI VPD page 0x80 (`device/vpd_pg80`):
/// 4 header bytes (page code 0x80 at 1, length at 2..4), then ASCII.
pub fn vpd80_serial(page: &[u8]) -> Option<String> {
    if page.len() < 4 || page[1] != 0x80 {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([page[2], page[3]]));
    let body = page.get(4..4 + len).unwrap_or(&page[4..]);
    let s = String::from_utf8_lossy(body);
    let s = s.trim_matches(|c: char| c.is_whitespace() || c == '\0');
    (!s.is_empty()).then(|| s.to_string())
}

/// Where a link in `/dev/disk/by-*/` points, as an absolute path with
/// `.` and `..` resolved without touching the file system (the target
/// may not exist in a fixture): (`/dev/disk/by-id`, `../../sda`) →
/// `/dev/sda`.
pub fn resolve_link(link_dir: &str, target: &str) -> String {
    let joined = if target.starts_with('/') {
        target.to_string()
    } else {
        format!("{link_dir}/{target}")
    };
    let mut out: Vec<&str> = Vec::new();
    for c in joined.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    format!("/{}", out.join("/"))
}

/// The disks: /sys/block without the excluded names, removable and
/// read-only devices, in [`disk_order`].
pub fn disks(root: &Path) -> Result<Vec<Found>, Error> {
    let block = root.join("sys/block");
    let by_path = dev_links(root, "by-path")?;
    let by_id = dev_links(root, "by-id")?;
    let mut names: Vec<String> = read_dir_sorted(&block)?
        .iter()
        .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
        .filter(|n| !excluded_name(n))
        .collect();
    names.sort_by(|a, b| disk_order(a, b));
    let mut out = Vec::new();
    for kname in names {
        let dir = block.join(&kname);
        if read(&dir.join("removable")).as_deref() == Some("1")
            || read(&dir.join("ro")).as_deref() == Some("1")
        {
            continue;
        }
        let dev = dir.join("device");
        let sectors: u64 = read(&dir.join("size"))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let serial = read(&dir.join("serial"))
            .or_else(|| read(&dev.join("serial")))
            .or_else(|| {
                fs::read(dev.join("vpd_pg80"))
                    .ok()
                    .and_then(|p| vpd80_serial(&p))
            })
            .unwrap_or_default();
        let w = read(&dev.join("wwid"))
            .or_else(|| read(&dir.join("wwid")))
            .map(|s| wwn(&s))
            .unwrap_or_default();
        let hctl = fs::read_link(&dev)
            .ok()
            .and_then(|t| t.file_name()?.to_str().and_then(hctl))
            .unwrap_or_default();
        let by_path = by_path
            .get(&kname)
            .and_then(|l| l.first())
            .map(|l| format!("/dev/disk/by-path/{l}"))
            .unwrap_or_default();
        let by_id = by_id
            .get(&kname)
            .and_then(|l| l.iter().find(|l| l.starts_with("wwn-")).or(l.first()))
            .map(|l| format!("/dev/disk/by-id/{l}"))
            .unwrap_or_default();
        out.push(Found {
            disk: Disk {
                name: format!("/dev/{kname}"),
                by_path,
                by_id,
                size_bytes: sectors.saturating_mul(SECTOR),
                model: read(&dev.join("model")).unwrap_or_default(),
                vendor: read(&dev.join("vendor")).unwrap_or_default(),
                serial,
                wwn: w.wwn,
                wwn_with_extension: w.with_extension,
                wwn_vendor_extension: w.vendor_extension,
                rotational: read(&dir.join("queue/rotational")).as_deref() == Some("1"),
                hctl,
            },
            partitions: partitions(&dir, &kname)?,
            kname,
        });
    }
    Ok(out)
}

/// The partitions of the disk at `dir`: its subdirectories named after
/// it that have a `start` (sda1, nvme0n1p2).
fn partitions(dir: &Path, kname: &str) -> Result<Vec<Partition>, Error> {
    let mut out = Vec::new();
    for p in read_dir_sorted(dir)? {
        let Some(n) = p.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !n.starts_with(kname) || n == kname {
            continue;
        }
        let num = |f: &str| read(&p.join(f)).and_then(|s| s.parse::<u64>().ok());
        if let (Some(start), Some(sectors)) = (num("start"), num("size")) {
            out.push(Partition { start, sectors });
        }
    }
    Ok(out)
}

/// The links of `/dev/disk/<kind>/` by the kernel name of the device they
/// point to (whole disks and partitions alike), each list sorted.
fn dev_links(root: &Path, kind: &str) -> Result<BTreeMap<String, Vec<String>>, Error> {
    let mut map: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let virtual_dir = format!("/dev/disk/{kind}");
    for link in read_dir_sorted(&root.join("dev/disk").join(kind))? {
        let (Some(name), Ok(target)) = (
            link.file_name().and_then(|n| n.to_str()),
            fs::read_link(&link),
        ) else {
            continue;
        };
        let Some(target) = target.to_str() else {
            continue;
        };
        let abs = resolve_link(&virtual_dir, target);
        if let Some(dev) = abs.strip_prefix("/dev/").filter(|d| !d.contains('/')) {
            map.entry(dev.to_string())
                .or_default()
                .push(name.to_string());
        }
    }
    Ok(map)
}

// ---- NICs and the rest ----------------------------------------------------

/// Physical NICs: /sys/class/net entries with a `device` link (bridges,
/// bonds, VLANs, veths and `lo` have none), sorted by name.
pub fn nics(root: &Path) -> Result<Vec<Nic>, Error> {
    let mut out = Vec::new();
    for dir in read_dir_sorted(&root.join("sys/class/net"))? {
        let Some(name) = dir.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if fs::symlink_metadata(dir.join("device")).is_err() {
            continue;
        }
        out.push(Nic {
            name: name.to_string(),
            // A port of a bond shows the bond's MAC as its address (every
            // port of an active-backup bond does): its own is perm_hwaddr.
            mac: read(&dir.join("bonding_slave/perm_hwaddr"))
                .or_else(|| read(&dir.join("address")))
                .unwrap_or_default()
                .to_ascii_lowercase(),
            // Reading speed or carrier of a NIC that is down fails (EINVAL).
            speed_mbps: read(&dir.join("speed"))
                .and_then(|s| s.parse::<i64>().ok())
                .filter(|&s| s > 0)
                .and_then(|s| u32::try_from(s).ok()),
            link: read(&dir.join("carrier")).as_deref() == Some("1"),
            lldp: None,
        });
    }
    Ok(out)
}

/// SMBIOS strings; empty where the firmware has none (or no DMI at all).
pub fn system(root: &Path) -> System {
    let dmi = root.join("sys/class/dmi/id");
    let r = |f: &str| read(&dmi.join(f)).unwrap_or_default();
    System {
        vendor: r("sys_vendor"),
        product: r("product_name"),
        serial: r("product_serial"),
        uuid: r("product_uuid"),
    }
}

// ---- Files ----------------------------------------------------------------

/// A file's text, trimmed; None when it is missing, unreadable or empty.
pub(crate) fn read(path: &Path) -> Option<String> {
    let s = fs::read(path).ok()?;
    let s = String::from_utf8_lossy(&s);
    let s = s.trim_matches(|c: char| c.is_whitespace() || c == '\0');
    (!s.is_empty()).then(|| s.to_string())
}

fn read_required(path: &Path) -> Result<String, Error> {
    fs::read_to_string(path).map_err(|e| Error::io(path, e))
}

/// The entries of `dir` sorted by name; none when it does not exist.
fn read_dir_sorted(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    let mut out = Vec::new();
    for e in rd {
        out.push(e.map_err(|e| Error::io(dir, e))?.path());
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const X86: &str = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Silver 4214 CPU @ 2.20GHz\nflags\t\t: fpu vme\n\nprocessor\t: 1\nmodel name\t: Intel(R) Xeon(R) Silver 4214 CPU @ 2.20GHz\n\n";
    const POWER: &str = "processor\t: 0\ncpu\t\t: POWER9 (architected), altivec supported\nclock\t\t: 2300.000000MHz\n\nprocessor\t: 1\ncpu\t\t: POWER9 (architected), altivec supported\n\ntimebase\t: 512000000\nplatform\t: pSeries\n";
    const ARM32: &str = "Processor\t: ARMv7 Processor rev 10 (v7l)\nprocessor\t: 0\nBogoMIPS\t: 1581.05\n\nprocessor\t: 1\nBogoMIPS\t: 1581.05\n";
    const ARM64: &str = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n\nprocessor\t: 1\nBogoMIPS\t: 50.00\n";

    #[test]
    fn cpuinfo_model_and_count_per_architecture() {
        assert_eq!(cpu_model(X86), "Intel(R) Xeon(R) Silver 4214 CPU @ 2.20GHz");
        assert_eq!(cpu_count(X86), 2);
        assert_eq!(cpu_model(POWER), "POWER9 (architected), altivec supported");
        assert_eq!(cpu_count(POWER), 2);
        assert_eq!(cpu_model(ARM32), "ARMv7 Processor rev 10 (v7l)");
        assert_eq!(cpu_count(ARM32), 2, "\"Processor\" is the name, not a CPU");
        assert_eq!(cpu_model(ARM64), "");
        assert_eq!(cpu_count(ARM64), 2);
        assert_eq!(cpu_model(""), "");
        assert_eq!(cpu_count("garbage\n::\n"), 0);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(cpu_list_len("0-3,8,10-11\n"), 7);
        assert_eq!(cpu_list_len("0"), 1);
        assert_eq!(cpu_list_len(""), 0);
        assert_eq!(cpu_list_len("3-1,x"), 0);
    }

    #[test]
    fn memory_blocks_and_meminfo() {
        assert_eq!(block_size("8000000\n"), Some(128 << 20));
        assert_eq!(block_size("0x40000000"), Some(1 << 30));
        assert_eq!(block_size("zz"), None);
        assert_eq!(block_size("0"), None);
        assert_eq!(
            meminfo_total_mib("MemTotal:       16303000 kB\nMemFree:  1 kB\n"),
            Some(15920)
        );
        assert_eq!(meminfo_total_mib("MemFree: 1 kB\n"), None);
        assert_eq!(meminfo_total_mib("MemTotal: lots kB\n"), None);
        assert_eq!(meminfo_total_mib("MemTotal: 1 MB\n"), None);
    }

    #[test]
    fn memory_mib_counts_online_blocks_else_memtotal() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        fs::create_dir_all(r.join("proc")).unwrap();
        fs::write(r.join("proc/meminfo"), "MemTotal: 2048000 kB\n").unwrap();
        assert_eq!(memory_mib(r).unwrap(), 2000, "no memory directory");
        let m = r.join("sys/devices/system/memory");
        fs::create_dir_all(&m).unwrap();
        fs::write(m.join("block_size_bytes"), "8000000\n").unwrap();
        for (i, state) in [(0, "1"), (1, "1"), (2, "0"), (32, "1")] {
            let b = m.join(format!("memory{i}"));
            fs::create_dir_all(&b).unwrap();
            fs::write(b.join("online"), state).unwrap();
        }
        // Not a block: ignored.
        fs::create_dir_all(m.join("power")).unwrap();
        let b = m.join("memory40");
        fs::create_dir_all(&b).unwrap();
        fs::write(b.join("state"), "online\n").unwrap();
        assert_eq!(memory_mib(r).unwrap(), 4 * 128);
    }

    #[test]
    fn excluded_disk_names() {
        for n in [
            "loop0", "ram0", "zram0", "dm-0", "md127", "sr0", "fd0", "nbd3",
        ] {
            assert!(excluded_name(n), "{n}");
        }
        for n in ["sda", "vda", "nvme0n1", "xvda", "mmcblk0", "hda"] {
            assert!(!excluded_name(n), "{n}");
        }
    }

    #[test]
    fn disks_in_kernel_order() {
        let mut v = vec!["sdaa", "sdb", "nvme10n1", "sda", "nvme9n1", "sdz", "vda"];
        v.sort_by(|a, b| disk_order(a, b));
        assert_eq!(
            v,
            ["sda", "sdb", "sdz", "vda", "sdaa", "nvme9n1", "nvme10n1"]
        );
    }

    #[test]
    fn wwn_from_wwid() {
        assert_eq!(
            wwn("naa.5000C500A0B1C2D3\n"),
            Wwn {
                wwn: "0x5000c500a0b1c2d3".into(),
                with_extension: "0x5000c500a0b1c2d3".into(),
                vendor_extension: "".into(),
            }
        );
        assert_eq!(
            wwn("naa.600508b1001c7e1f2a3b4c5d6e7f8091"),
            Wwn {
                wwn: "0x600508b1001c7e1f".into(),
                with_extension: "0x600508b1001c7e1f2a3b4c5d6e7f8091".into(),
                vendor_extension: "0x2a3b4c5d6e7f8091".into(),
            }
        );
        assert_eq!(wwn("eui.0025385b71b0c6e1").wwn, "0x0025385b71b0c6e1");
        assert_eq!(
            wwn("eui.36344630528061510025384500000001"),
            Wwn {
                wwn: "0x36344630528061510025384500000001".into(),
                with_extension: "0x36344630528061510025384500000001".into(),
                vendor_extension: "".into(),
            }
        );
        for not in [
            "t10.ATA     QEMU HARDDISK                           QM00001",
            "nvme.1b36-6465616462656566-51454d55-00000001",
            "naa.",
            "naa.xyz",
            "",
            "5000c500a0b1c2d3",
            "naé.00",
        ] {
            assert_eq!(wwn(not), Wwn::default(), "{not}");
        }
    }

    #[test]
    fn hctl_only_for_scsi_addresses() {
        assert_eq!(hctl("0:0:0:0").as_deref(), Some("0:0:0:0"));
        assert_eq!(hctl("10:2:31:7").as_deref(), Some("10:2:31:7"));
        for not in [
            "nvme0",
            "virtio2",
            "0:0:0",
            "0:0:0:0:0",
            "a:b:c:d",
            "0::0:0",
        ] {
            assert_eq!(hctl(not), None, "{not}");
        }
    }

    #[test]
    fn vpd_page_80() {
        let mut p = vec![0x00, 0x80, 0x00, 0x0c];
        p.extend_from_slice(b"  ZA1B2C3D  ");
        assert_eq!(vpd80_serial(&p).as_deref(), Some("ZA1B2C3D"));
        // A length past the end: what there is.
        assert_eq!(
            vpd80_serial(&[0, 0x80, 0xff, 0xff, b'S', b'1']).as_deref(),
            Some("S1")
        );
        assert_eq!(vpd80_serial(&[0, 0x83, 0, 2, b'x', b'y']), None);
        assert_eq!(vpd80_serial(&[0, 0x80, 0]), None);
        assert_eq!(vpd80_serial(&[0, 0x80, 0, 2, b' ', 0]), None);
    }

    #[test]
    fn links_resolve_lexically() {
        assert_eq!(resolve_link("/dev/disk/by-id", "../../sda"), "/dev/sda");
        assert_eq!(
            resolve_link("/dev/disk/by-id", "/dev/nvme0n1"),
            "/dev/nvme0n1"
        );
        assert_eq!(
            resolve_link("/dev/disk/by-path", "./../../sda1"),
            "/dev/sda1"
        );
        assert_eq!(
            resolve_link("/dev/disk/by-path", "../../../../../sdb"),
            "/sdb"
        );
        assert_eq!(
            resolve_link("/dev/disk/by-path", "../../mapper/x"),
            "/dev/mapper/x"
        );
    }
}
