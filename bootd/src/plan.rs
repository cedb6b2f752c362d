//! What a node's network boot does, from the site and what its machine
//! reported ([`crate::inventory`]): run live, inspect, wipe, install to
//! the disk its hints choose, or nothing (with the reason). Pure: the
//! HTTP and TFTP routes render the plan and record it on the timeline.

use site::hardware::{choose_disk, shortfalls, Disk, Inventory};
use site::{Node, Site};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// It runs the live system (`live: true`).
    Live,
    /// It installs to disk and its machine has not reported its inventory:
    /// the live system runs the agent, which reports and reboots.
    Inspect,
    /// It is being released (deleted, or adopted: `reboot`, it installs
    /// next): the live system runs the agent's wipe.
    Wipe { reboot: bool },
    /// It installs to `device`; `why` says how the disk was chosen.
    Install { device: String, why: String },
    /// It must not install; `condition` names the reason's kind.
    Refuse {
        condition: &'static str,
        why: String,
    },
}

impl Plan {
    /// A short name of what the boot does (`live`, `inspect`, `wipe`,
    /// `wipe-then-install`, `install:<device>`, `refuse`): two boots with
    /// the same step serve the same thing. A BMC's virtual media holds one
    /// ISO per step.
    pub fn step(&self) -> String {
        match self {
            Plan::Live => "live".into(),
            Plan::Inspect => "inspect".into(),
            Plan::Wipe { reboot: false } => "wipe".into(),
            Plan::Wipe { reboot: true } => "wipe-then-install".into(),
            Plan::Install { device, .. } => format!("install:{device}"),
            Plan::Refuse { .. } => "refuse".into(),
        }
    }
}

/// Condition kinds of [`Plan::Refuse`].
pub const BELOW_MINIMUMS: &str = "below_minimums";
pub const NO_DISK: &str = "no_disk";

/// The plan for `node`. `inventory`: what its machine reported, if it did;
/// `release`: its disks are to be wiped first ([`crate::inventory::Release`]).
pub fn plan(
    site: &Site,
    node: &Node,
    inventory: Option<&Inventory>,
    release: Option<crate::inventory::Release>,
) -> Plan {
    let Some(hints) = node.disk_hints() else {
        return Plan::Live;
    };
    let agent = site.inspection.agent(node.arch).is_some();
    if let (Some(r), true) = (release, agent) {
        return Plan::Wipe {
            reboot: r.then_install,
        };
    }
    let Some(inv) = inventory else {
        if agent {
            return Plan::Inspect;
        }
        // No agent for its architecture: validation let it through only
        // with a device name.
        return match &hints.device_name {
            Some(d) if !hints.needs_inventory() => Plan::Install {
                device: d.clone(),
                why: format!(
                    "deviceName {d}, not inspected (inspection.agents has no {} agent): its minimums are not checked",
                    node.arch
                ),
            },
            _ => Plan::Refuse {
                condition: NO_DISK,
                why: format!(
                    "its root-device hints need the machine's inventory and inspection.agents has no {} agent",
                    node.arch
                ),
            },
        };
    };
    let disk = match choose_disk(&hints, inv) {
        Ok(d) => d,
        Err(why) => {
            return Plan::Refuse {
                condition: NO_DISK,
                why,
            }
        }
    };
    let min = site.inspection.minimums_of(&node.role);
    let short = shortfalls(&min, inv, Some(disk));
    let device = hints
        .device_name
        .clone()
        .unwrap_or_else(|| stable_name(disk).to_string());
    let mut why = format!("{} chosen by {}", disk.name, hints.describe());
    if !short.is_empty() {
        let what = format!("below the {} minimums: {}", node.role, short.join(", "));
        if site.inspection.enforce_minimums {
            return Plan::Refuse {
                condition: BELOW_MINIMUMS,
                why: format!("{what} (inspection.enforceMinimums)"),
            };
        }
        why.push_str(&format!(
            "; {what}, installing anyway (inspection.enforceMinimums: false)"
        ));
    }
    Plan::Install { device, why }
}

/// The name the installer is given for `d`: one that stays with the disk
/// across boots (its by-id link, else its by-path link), the kernel's name
/// only when the machine reported neither.
pub fn stable_name(d: &Disk) -> &str {
    [&d.by_id, &d.by_path]
        .into_iter()
        .find(|s| !s.is_empty())
        .unwrap_or(&d.name)
}
