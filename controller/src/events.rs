//! What the controller keeps of a node's history, and the conditions it
//! makes of it. What the node did (DHCP lease, boot script, GRUB config,
//! Ignition) comes from bootd's timeline, the one record of node events
//! ([`bootd::timeline::Recorder::subscribe`]); what the controller did (API
//! calls, provider actions) it notes itself ([`super::Controller::note`]).
//! Both are stored per node (newest 500) for `GET /v1/nodes/{name}/events`.

use crate::store::Event;
use bootd::timeline::{NodeEvent, Phase};

/// Event kinds, and the condition each sets.
pub const DHCP: &str = "dhcp";
pub const IPXE: &str = "ipxe";
pub const GRUB: &str = "grub";
pub const IGNITION: &str = "ignition";
/// The node's first connection through lbd's machine-config frontend (22623).
pub const MACHINE_CONFIG: &str = "machine_config";
/// An installed node network-booted again and was told to boot its disk.
pub const LOCAL_BOOT: &str = "local_boot";
/// A spent Ignition token was presented again from another address.
pub const TOKEN_REUSED: &str = "ignition_token_reused";
/// The node's Ignition was fetched from another address than the node's.
pub const OTHER_ADDRESS: &str = "ignition_other_address";
/// The machine reported its inventory (the inspection agent).
pub const INSPECTED: &str = "inspected";
/// The disk its root-device hints chose, at an install boot.
pub const DISK_CHOSEN: &str = "disk_chosen";
/// It did not install: below its role's minimums.
pub const BELOW_MINIMUMS: &str = "below_minimums";
/// It did not install: no disk matches its hints.
pub const NO_DISK: &str = "no_disk";
/// Its disks were wiped (release).
pub const WIPED: &str = "wiped";
/// Its metal image was sent in full to the installer.
pub const INSTALLED: &str = "installed";
pub const PROVIDER: &str = "provider";
/// What the controller did in the cluster (a kubelet CSR approved, Joined).
pub const CLUSTER: &str = "cluster";
pub const API: &str = "api";

/// The kind a timeline event is stored under, for the events the controller
/// keeps: an address leased, a node's script or GRUB config served (not
/// the shared entry script), its Ignition served (not the pointer: fetching
/// that is not fetching the config).
pub fn kind_of(ev: &NodeEvent) -> Option<&'static str> {
    match (ev.phase, ev.what.as_ref()) {
        (Phase::Dhcp, "ack") => Some(DHCP),
        (Phase::Script, "served") if ev.detail.starts_with("GRUB") => Some(GRUB),
        (Phase::Script, "served") => Some(IPXE),
        (Phase::Ignition, "served") => Some(IGNITION),
        (Phase::MachineConfig, "first_connection") => Some(MACHINE_CONFIG),
        (Phase::Script, "local_boot") => Some(LOCAL_BOOT),
        (Phase::Machine, "inspected") => Some(INSPECTED),
        (Phase::Machine, "wiped") => Some(WIPED),
        (Phase::Install, "installed") => Some(INSTALLED),
        (Phase::Script, "disk_chosen") => Some(DISK_CHOSEN),
        (Phase::Script, bootd::plan::BELOW_MINIMUMS) => Some(BELOW_MINIMUMS),
        (Phase::Script, bootd::plan::NO_DISK) => Some(NO_DISK),
        (Phase::Ignition, bootd::http::TOKEN_REUSED) => Some(TOKEN_REUSED),
        (Phase::Ignition, bootd::http::OTHER_ADDRESS) => Some(OTHER_ADDRESS),
        _ => None,
    }
}

/// The event stored for a timeline event the controller keeps ([`kind_of`]).
pub fn event_of(ev: &NodeEvent) -> Option<Event> {
    kind_of(ev).map(|kind| Event {
        at: ev.at_us / 1000,
        kind: kind.into(),
        message: ev.detail.clone(),
    })
}

/// The condition an event makes True, with its reason.
pub fn condition_of(kind: &str) -> Option<(&'static str, &'static str)> {
    match kind {
        DHCP => Some(("NetworkBooted", "DHCPLease")),
        IPXE => Some(("NetworkBooted", "IPXEScriptServed")),
        GRUB => Some(("NetworkBooted", "GRUBConfigServed")),
        IGNITION => Some(("IgnitionServed", "IgnitionServed")),
        MACHINE_CONFIG => Some(("MachineConfigServed", "ConnectedThroughLbd")),
        LOCAL_BOOT => Some(("InstallLoop", "NetworkBootedAfterInstall")),
        INSPECTED => Some(("Inspected", "InventoryReported")),
        DISK_CHOSEN => Some(("DiskChosen", "RootDeviceHints")),
        BELOW_MINIMUMS => Some(("BelowMinimums", "HardwareShort")),
        NO_DISK => Some(("NoDiskMatchesHints", "HintsMatchNoDisk")),
        WIPED => Some(("DisksWiped", "Wiped")),
        INSTALLED => Some(("Installed", "ImageWritten")),
        TOKEN_REUSED => Some(("IgnitionTokenReused", "SpentTokenPresented")),
        OTHER_ADDRESS => Some(("IgnitionFromOtherAddress", "FetchedOnToken")),
        _ => None,
    }
}

/// The conditions an event of `kind` makes False (what it shows is no
/// longer so): a disk chosen means the machine is no longer short.
pub fn clears(kind: &str) -> &'static [&'static str] {
    match kind {
        DISK_CHOSEN => &["BelowMinimums", "NoDiskMatchesHints"],
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(phase: Phase, what: &'static str, detail: &str) -> NodeEvent {
        NodeEvent {
            node: "n".into(),
            at_us: 0,
            phase,
            what: what.into(),
            error: false,
            detail: detail.into(),
        }
    }

    /// The timeline's own words for each step (bootd's DHCP server, HTTP
    /// routes and TFTP resolver record these) map to the conditions.
    #[test]
    fn timeline_events_make_conditions() {
        let cases = [
            (ev(Phase::Dhcp, "ack", "lease"), Some("DHCPLease")),
            (ev(Phase::Dhcp, "offer", "offer"), None),
            (
                ev(
                    Phase::Ignition,
                    "token_reused",
                    "Ignition token presented again from 10.0.0.9",
                ),
                Some("SpentTokenPresented"),
            ),
            (
                ev(
                    Phase::Ignition,
                    "other_address",
                    "Ignition fetched from 10.0.0.9",
                ),
                Some("FetchedOnToken"),
            ),
            (
                ev(Phase::Script, "served", "iPXE node script served (by MAC)"),
                Some("IPXEScriptServed"),
            ),
            (
                ev(Phase::Script, "served", "GRUB config served over TFTP"),
                Some("GRUBConfigServed"),
            ),
            (
                ev(Phase::Script, "served", "GRUB config served over HTTP"),
                Some("GRUBConfigServed"),
            ),
            (
                ev(
                    Phase::Script,
                    "entry",
                    "iPXE entry script (boot.ipxe) served",
                ),
                None,
            ),
            (
                ev(
                    Phase::Ignition,
                    "served",
                    "Ignition 3.2.0 served (via Token)",
                ),
                Some("IgnitionServed"),
            ),
            (ev(Phase::Ignition, "pointer_served", "pointer"), None),
            (
                ev(Phase::Script, "local_boot", "install loop averted"),
                Some("NetworkBootedAfterInstall"),
            ),
            (ev(Phase::Ignition, "denied", "denied"), None),
            (ev(Phase::Kernel, "done", "kernel"), None),
        ];
        for (e, want) in cases {
            assert_eq!(
                kind_of(&e).and_then(condition_of).map(|c| c.1),
                want,
                "{e:?}"
            );
        }
    }
}
