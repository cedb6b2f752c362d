//! bootd-agent: the inspection and wipe step a bare-metal machine runs in
//! its CoreOS live environment before it installs. bootd serves this
//! static binary and hands the machine a URL to report to.
//!
//! `inspect` reports the machine's inventory as JSON (the shape of
//! `site::hardware::Inventory`) to that URL:
//! - CPU: model from /proc/cpuinfo, logical CPUs, architecture;
//! - memory: online memory blocks of /sys/devices/system/memory, else
//!   MemTotal of /proc/meminfo;
//! - disks: /sys/block without loop, RAM, device-mapper, MD, optical,
//!   floppy, NBD, removable and read-only devices; size, model, vendor,
//!   serial, WWN, rotational and SCSI address from sysfs, `by-path` and
//!   `by-id` links from /dev/disk where udev made them;
//! - NICs: /sys/class/net entries backed by a device; MAC, link, speed,
//!   and the switch's chassis, port, name and port description from the
//!   first LLDP frame each NIC with link receives;
//! - firmware (UEFI if /sys/firmware/efi exists, else BIOS) and the
//!   SMBIOS system strings of /sys/class/dmi/id.
//!
//! `wipe` zeroes the partition tables and the file system, RAID and LVM
//! signatures of those disks (Ironic's metadata cleaning) and reports
//! which it wiped.
//!
//! Nothing it sends is secret: serial numbers and MACs are what the
//! machine shows anyone who can reach it. What authenticates the report
//! is the single-use token bootd minted into the URL; it appears in no
//! message the agent prints ([`http::Url::redacted`]).
//!
//! Modules: [`cli`] (arguments), [`probe`] (reading /proc, /sys, /dev),
//! [`lldp`] (the frame parser), [`capture`] (listening for frames),
//! [`wipe`] (which bytes to zero, and zeroing them), [`http`] (the POST),
//! [`inventory`] (the JSON), [`sys`] (the crate's only `unsafe`: the
//! packet socket and sync(2)).
//!
//! Invariants: every path is read under `--root`, so tests run on fixture
//! trees; parsers never panic on what a file or the network holds; every
//! wait is bounded (LLDP by `--lldp-seconds`, the POST by its retries and
//! timeouts).

pub mod capture;
pub mod cli;
mod error;
pub mod http;
pub mod inventory;
pub mod lldp;
pub mod probe;
pub mod sys;
pub mod wipe;

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

pub use error::Error;

use cli::Command;
use inventory::{Inventory, WipeReport, WipedDisk};

pub fn run(cmd: Command) -> Result<(), Error> {
    match cmd {
        Command::Help => {
            println!("{}", cli::USAGE);
            Ok(())
        }
        Command::Inspect(i) => {
            let inv = inspect(&i.root, Duration::from_secs(i.lldp_seconds))?;
            let body = serde_json::to_vec(&inv).expect("the inventory serializes");
            http::post_json(&i.post, &body, http::RETRY)?;
            eprintln!(
                "bootd-agent: inventory sent to {}: {} CPUs, {} MiB, {} disks, {} NICs ({} with LLDP)",
                i.post.redacted(),
                inv.cpu.count,
                inv.memory_mib,
                inv.disks.len(),
                inv.nics.len(),
                inv.nics.iter().filter(|n| n.lldp.is_some()).count()
            );
            if i.poweroff {
                sysrq(&i.root, b'o')?;
            } else if i.reboot {
                sysrq(&i.root, b'b')?;
            }
            Ok(())
        }
        Command::Wipe(w) => {
            let report = wipe_disks(&w.root, &w.disks)?;
            let body = serde_json::to_vec(&report).expect("the report serializes");
            http::post_json(&w.post, &body, http::RETRY)?;
            eprintln!("bootd-agent: wipe report sent to {}", w.post.redacted());
            if w.poweroff {
                sysrq(&w.root, b'o')?;
            } else if w.reboot {
                sysrq(&w.root, b'b')?;
            }
            Ok(())
        }
    }
}

/// The inventory under `root`, with up to `lldp` of listening.
pub fn inspect(root: &Path, lldp: Duration) -> Result<Inventory, Error> {
    let mut inv = probe::inventory(root)?;
    let listening: Vec<&str> = inv
        .nics
        .iter()
        .filter(|n| n.link)
        .map(|n| n.name.as_str())
        .collect();
    if !lldp.is_zero() && !listening.is_empty() {
        eprintln!(
            "bootd-agent: listening for LLDP on {} for up to {} s",
            listening.join(", "),
            lldp.as_secs()
        );
    }
    let mut frames = capture::listen(&inv.nics, lldp);
    for nic in &mut inv.nics {
        nic.lldp = frames.remove(&nic.name);
    }
    Ok(inv)
}

/// Wipe the disks named (kernel names), or every disk the inspection
/// lists; every disk is tried, and any failure is the error (no report
/// then: a machine half wiped must not pass for clean).
pub fn wipe_disks(root: &Path, names: &[String]) -> Result<WipeReport, Error> {
    let found = probe::disks(root)?;
    let chosen = if names.is_empty() {
        found
    } else {
        let mut out = Vec::new();
        for n in names {
            let f = found
                .iter()
                .find(|f| &f.kname == n)
                .ok_or_else(|| Error::NoSuchDisk {
                    name: n.clone(),
                    known: found.iter().map(|f| f.kname.clone()).collect(),
                })?;
            out.push(f.clone());
        }
        out
    };
    let mut report = WipeReport::default();
    let mut failed = Vec::new();
    for f in &chosen {
        let ranges = wipe::plan(f.disk.size_bytes, &f.partitions);
        let path = root.join("dev").join(&f.kname);
        match wipe::wipe(&path, &ranges) {
            Ok(()) => {
                eprintln!(
                    "bootd-agent: wiped {} ({} partitions)",
                    f.disk.name,
                    f.partitions.len()
                );
                report.disks.push(WipedDisk {
                    name: f.disk.name.clone(),
                    by_path: f.disk.by_path.clone(),
                    by_id: f.disk.by_id.clone(),
                    serial: f.disk.serial.clone(),
                    partitions: f.partitions.len() as u32,
                });
            }
            Err(e) => failed.push(format!("{}: {e}", path.display())),
        }
    }
    if failed.is_empty() {
        Ok(report)
    } else {
        Err(Error::Wipe(failed))
    }
}

/// Flush the file systems, then reboot (`b`) or power off (`o`) at once
/// through the kernel's sysrq trigger (no init system involved: the live
/// environment has nothing to save). Under a test root, it writes a file.
fn sysrq(root: &Path, key: u8) -> Result<(), Error> {
    sys::sync();
    OpenOptions::new()
        .write(true)
        .open(root.join("proc/sysrq-trigger"))
        .and_then(|mut f| f.write_all(&[key]))
        .map_err(Error::Power)
}
