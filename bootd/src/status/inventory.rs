//! A node's page: what its machine reported (CPUs, memory, firmware,
//! disks with the one its hints choose, NICs with their switch ports from
//! LLDP), what its next network boot does, and the disks a release wiped.

use super::esc;
use crate::inventory::Record;
use crate::plan::Plan;
use std::fmt::Write as _;

/// `installed`: the node installed (its next network boot gets its disk).
pub(super) fn section(b: &mut String, rec: Option<&Record>, plan: &Plan, installed: bool) {
    let next = match plan {
        _ if installed => {
            "its local disk (installed; bootd nodes reinstall NAME installs again)".to_string()
        }
        Plan::Live => "runs live".to_string(),
        Plan::Inspect => {
            "inspects: the live system reports the machine's inventory, then reboots".into()
        }
        Plan::Wipe { reboot: false } => "wipes its disks (release), then powers off".into(),
        Plan::Wipe { reboot: true } => "wipes its disks (adopted), then reboots to install".into(),
        Plan::Install { device, why } => format!("installs to {device} ({why})"),
        Plan::Refuse { why, .. } => format!("does not install: {why}"),
    };
    let class = if matches!(plan, Plan::Refuse { .. }) {
        " class=\"err\""
    } else {
        ""
    };
    let _ = writeln!(
        b,
        "<p id=\"next-boot\"{class}>Next network boot: {}</p>",
        esc(&next)
    );
    let Some(r) = rec else {
        if !matches!(plan, Plan::Live) {
            b.push_str("<p id=\"inventory\">No inventory reported yet.</p>\n");
        }
        return;
    };
    let inv = &r.inventory;
    let _ = writeln!(
        b,
        "<h2>Inventory</h2>\n<p id=\"inventory\">{} &times; {} ({}) &middot; {:.1} GiB &middot; {} &middot; {} {} &middot; reported from {}</p>",
        inv.cpu.count,
        esc(&inv.cpu.model),
        esc(&inv.cpu.arch),
        inv.memory_mib as f64 / 1024.0,
        esc(&inv.firmware),
        esc(&inv.system.vendor),
        esc(&inv.system.product),
        r.from,
    );
    let chosen = match plan {
        Plan::Install { device, .. } => Some(device.as_str()),
        _ => None,
    };
    b.push_str("<table id=\"disks\">\n<tr><th>Disk</th><th>Size</th><th>Model</th><th>Serial</th><th>WWN</th><th>Type</th><th>Stable name</th></tr>\n");
    for d in &inv.disks {
        let stable = crate::plan::stable_name(d);
        let mark = if chosen.is_some_and(|c| c == stable || c == d.name || c == d.by_path) {
            " <b>&larr; install</b>"
        } else {
            ""
        };
        let _ = writeln!(
            b,
            "<tr><td>{}{mark}</td><td class=\"num\">{} GiB</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&d.name),
            d.size_bytes >> 30,
            esc(format!("{} {}", d.vendor, d.model).trim()),
            esc(&d.serial),
            esc(&d.wwn),
            if d.rotational { "rotational" } else { "solid state" },
            esc(stable),
        );
    }
    b.push_str("</table>\n<table id=\"nics\">\n<tr><th>NIC</th><th>MAC</th><th>Link</th><th>Switch</th><th>Port</th></tr>\n");
    for n in &inv.nics {
        let (sw, port) = n
            .lldp
            .as_ref()
            .map(|l| {
                (
                    crate::inventory::switch_of(l).to_string(),
                    l.port_id.clone(),
                )
            })
            .unwrap_or_default();
        let _ = writeln!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&n.name),
            esc(&n.mac),
            match (n.link, n.speed_mbps) {
                (true, Some(s)) => format!("up, {s} Mb/s"),
                (true, None) => "up".into(),
                (false, _) => "down".into(),
            },
            esc(&sw),
            esc(&port),
        );
    }
    b.push_str("</table>\n");
    if let Some(w) = &r.wiped {
        let names: Vec<&str> = w.disks.iter().map(|d| d.name.as_str()).collect();
        let _ = writeln!(b, "<p id=\"wiped\">Wiped: {}</p>", esc(&names.join(", ")));
    }
}
