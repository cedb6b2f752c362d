//! A node's conditions: the fixed six (Provisioned, BootKind,
//! NetworkBooted, IgnitionServed, Ready, Joined) as stored by the
//! reconciler and the cluster side and as shown by the API, with defaults
//! for those not set yet; then the others the controller sets
//! (AddressesRecorded, CSRPending, ...).

use crate::providers::BootKind;
use crate::store::{now_ms, Condition, NodeRow};

pub const PROVISIONED: &str = "Provisioned";
pub const NETWORK_BOOTED: &str = "NetworkBooted";
pub const IGNITION_SERVED: &str = "IgnitionServed";
pub const READY: &str = "Ready";
pub const BOOT_KIND: &str = "BootKind";
/// The node's kubelet has its client and serving certificates (the cluster
/// side, [`crate::cluster`]).
pub const JOINED: &str = "Joined";
/// A kubelet CSR naming the node is left for a person, and why.
pub const CSR_PENDING: &str = "CSRPending";

pub fn cond(kind: &str, status: &str, reason: &str, message: &str) -> Condition {
    Condition {
        kind: kind.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        at: now_ms(),
    }
}

/// The condition that says which boot path makes the node Ready.
pub fn boot_kind_condition(kind: BootKind, at: i64) -> Condition {
    let message = match kind {
        BootKind::Network => {
            "network-boots through this host: Ready once network-booted and its Ignition fetched"
        }
        BootKind::Image => {
            "boots its image with the pointer config as user data: Ready once it fetched its Ignition"
        }
        BootKind::Media => {
            "boots this host's ISO from its BMC's virtual media: Ready once it fetched its Ignition"
        }
    };
    Condition {
        kind: BOOT_KIND.into(),
        status: "True".into(),
        reason: kind.as_str().into(),
        message: message.into(),
        at,
    }
}

/// The conditions of a node as shown: stored ones, with defaults for those
/// not yet set, and for site nodes (no machine to make) Provisioned True
/// and Ready computed from the boot conditions. `BootKind` says which path
/// makes the node Ready; an image-booted node's NetworkBooted does not apply.
pub fn conditions_view(
    row: Option<&NodeRow>,
    stored: Vec<Condition>,
    kind: BootKind,
) -> Vec<Condition> {
    let get = |k: &str| stored.iter().find(|c| c.kind == k).cloned();
    let created = row.map(|r| r.created_at).unwrap_or(0);
    let unknown = |k: &str, reason: &str, msg: &str| Condition {
        kind: k.into(),
        status: "Unknown".into(),
        reason: reason.into(),
        message: msg.into(),
        at: created,
    };
    let provisioned = get(PROVISIONED).unwrap_or_else(|| match row {
        None => Condition {
            kind: PROVISIONED.into(),
            status: "True".into(),
            reason: "InSite".into(),
            message: "defined in the site file".into(),
            at: 0,
        },
        Some(_) => unknown(PROVISIONED, "Pending", "the machine is not made yet"),
    });
    let boot = get(BOOT_KIND)
        .filter(|c| c.reason == kind.as_str())
        .unwrap_or_else(|| boot_kind_condition(kind, created));
    let booted = match kind {
        BootKind::Network => get(NETWORK_BOOTED).unwrap_or_else(|| {
            unknown(
                NETWORK_BOOTED,
                "NotSeen",
                "no DHCP lease, boot script or GRUB config served yet",
            )
        }),
        BootKind::Image | BootKind::Media => get(NETWORK_BOOTED).unwrap_or_else(|| {
            unknown(
                NETWORK_BOOTED,
                "NotApplicable",
                "boots an image or virtual media, not a network boot",
            )
        }),
    };
    let ign = get(IGNITION_SERVED)
        .unwrap_or_else(|| unknown(IGNITION_SERVED, "NotSeen", "Ignition not fetched yet"));
    let needed: Vec<&Condition> = match kind {
        BootKind::Network => vec![&provisioned, &booted, &ign],
        BootKind::Image | BootKind::Media => vec![&provisioned, &ign],
    };
    let ready = match (get(READY), row) {
        (Some(r), Some(_)) => r,
        _ => {
            if needed.iter().all(|c| c.status == "True") {
                let at = needed.iter().map(|c| c.at).max().unwrap_or(0);
                Condition {
                    kind: READY.into(),
                    status: "True".into(),
                    reason: "IgnitionServed".into(),
                    message: "network-booted and fetched its Ignition".into(),
                    at,
                }
            } else {
                let first = needed
                    .iter()
                    .find(|c| c.status != "True")
                    .map(|c| c.kind.clone())
                    .unwrap_or_default();
                Condition {
                    kind: READY.into(),
                    status: "False".into(),
                    reason: format!("WaitingFor{first}"),
                    message: format!("waiting for {first}"),
                    at: created,
                }
            }
        }
    };
    let joined = get(JOINED).unwrap_or_else(|| {
        unknown(
            JOINED,
            "NotSeen",
            "no approved kubelet client and serving certificates seen (the controller looks with host.api.kubeconfig)",
        )
    });
    let mut out = vec![provisioned, boot, booted, ign, ready, joined];
    // Others the controller sets (AddressesRecorded, CSRPending), after the fixed six.
    out.extend(
        stored
            .iter()
            .filter(|c| {
                ![
                    PROVISIONED,
                    BOOT_KIND,
                    NETWORK_BOOTED,
                    IGNITION_SERVED,
                    READY,
                    JOINED,
                ]
                .contains(&c.kind.as_str())
            })
            .cloned(),
    );
    out
}
