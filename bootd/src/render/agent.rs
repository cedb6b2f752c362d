//! The live system's Ignition config when it runs the inspection agent
//! (`bootd-agent`, a static binary bootd serves from the images root):
//! the binary, fetched by Ignition and checked against its SHA-256, and a
//! unit that runs it once the network is up. `inspect` reports the
//! machine's inventory and reboots (the next boot installs); `wipe` erases
//! the signatures of every disk, reports which, and powers off.
//!
//! The report URL carries a fresh token of the node; bootd takes the
//! report only from the node's own address with it
//! (crate::http::inventory). The config holds no cluster secret: the live
//! system that runs the agent gets no cluster config.

use serde_json::{json, Value};

/// What the agent does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Inspect,
    /// Wipe, then power off (a deleted node).
    Wipe,
    /// Wipe, then reboot (an adopted machine: it inspects and installs).
    WipeThenInstall,
}

/// Where the agent binary is placed (RHCOS: /usr/local is writable).
pub const AGENT_PATH: &str = "/usr/local/bin/bootd-agent";
pub const UNIT: &str = "bootd-agent.service";

/// The agent's config. `agent_url`: the binary under `/images/`;
/// `sha256`: its digest (hex); `report_url`: where it posts (with the
/// token); `lldp_seconds`: how long it listens for LLDP; `power_off`:
/// the machine powers off instead of rebooting after every action (it
/// booted an ISO from virtual media: its BMC would boot that same ISO
/// again, so the controller inserts the next one while it is off).
pub fn config(
    action: Action,
    agent_url: &str,
    sha256: &str,
    report_url: &str,
    lldp_seconds: u32,
    power_off: bool,
) -> Value {
    let then = if power_off { "--poweroff" } else { "--reboot" };
    let exec = match action {
        Action::Inspect => {
            format!("{AGENT_PATH} inspect --post {report_url} --lldp-seconds {lldp_seconds} {then}")
        }
        Action::Wipe => format!("{AGENT_PATH} wipe --post {report_url} --poweroff"),
        Action::WipeThenInstall => format!("{AGENT_PATH} wipe --post {report_url} {then}"),
    };
    let after = if power_off { "powers off" } else { "reboots" };
    let what = match action {
        Action::Inspect => format!("reports this machine's inventory to bootd, then {after}"),
        Action::Wipe => "wipes this machine's disks for bootd, then powers off".to_string(),
        Action::WipeThenInstall => {
            format!("wipes this machine's disks for bootd, then {after} to install")
        }
    };
    // systemd reads `%` as a specifier: a URL's escapes are doubled.
    let exec = exec.replace('%', "%%");
    let unit = format!(
        "[Unit]\nDescription=bootd-agent: {what}\n\
         Wants=network-online.target\nAfter=network-online.target\n\n\
         [Service]\nType=oneshot\nExecStart={exec}\n\
         StandardOutput=journal+console\nStandardError=journal+console\n\n\
         [Install]\nWantedBy=multi-user.target\n"
    );
    json!({
        "ignition": { "version": "3.2.0" },
        "storage": { "files": [ {
            "path": AGENT_PATH,
            "mode": 0o755,
            "overwrite": true,
            "contents": {
                "source": agent_url,
                "verification": { "hash": format!("sha256-{sha256}") }
            }
        } ] },
        "systemd": { "units": [ { "name": UNIT, "enabled": true, "contents": unit } ] }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_is_verified_and_its_unit_runs_it() {
        let c = config(
            Action::Inspect,
            "http://10.0.0.1:8080/images/tools/bootd-agent",
            "ab",
            "http://10.0.0.1:8080/inventory/m0?token=T%2F",
            35,
            false,
        );
        let f = &c["storage"]["files"][0];
        assert_eq!(f["path"], AGENT_PATH);
        assert_eq!(f["mode"], 493);
        assert_eq!(f["contents"]["verification"]["hash"], "sha256-ab");
        let unit = c["systemd"]["units"][0]["contents"].as_str().unwrap();
        assert!(unit.contains(
            "ExecStart=/usr/local/bin/bootd-agent inspect --post http://10.0.0.1:8080/inventory/m0?token=T%%2F --lldp-seconds 35 --reboot\n"
        ), "{unit}");
        assert_eq!(c["systemd"]["units"][0]["enabled"], true);
        let w = config(
            Action::Wipe,
            "u",
            "ab",
            "http://h/inventory/m0/wiped?token=T",
            35,
            false,
        );
        let unit = w["systemd"]["units"][0]["contents"].as_str().unwrap();
        assert!(unit
            .contains("bootd-agent wipe --post http://h/inventory/m0/wiped?token=T --poweroff\n"));
        // Booted from virtual media: every action ends powered off.
        for (action, cmd) in [
            (
                Action::Inspect,
                "inspect --post http://h/r --lldp-seconds 35 --poweroff\n",
            ),
            (
                Action::WipeThenInstall,
                "wipe --post http://h/r --poweroff\n",
            ),
        ] {
            let c = config(action, "u", "ab", "http://h/r", 35, true);
            let unit = c["systemd"]["units"][0]["contents"].as_str().unwrap();
            assert!(unit.contains(cmd), "{unit}");
            assert!(unit.contains("then powers off"), "{unit}");
        }
    }
}
