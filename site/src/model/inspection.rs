//! `inspection:` and the metal image an install writes: what a node's
//! live system does before it installs to disk.

use super::Arch;
use std::collections::BTreeMap;

/// `inspection:`: before a node installs to disk, its live system runs an
/// agent (bootd serves it, the node's Ignition fetches it with its
/// SHA-256) that reports the machine's inventory; root-device hints are
/// resolved against it and the role's minimums checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Inspection {
    /// The agent binary per architecture, relative to [`Images::root`].
    pub agents: Vec<(Arch, String)>,
    /// Per role; a role not listed has OpenShift's documented minimums
    /// ([`crate::hardware::Minimums::openshift_default`]).
    pub minimums: BTreeMap<String, crate::hardware::Minimums>,
    /// `false`: a machine below its minimums installs anyway (the condition
    /// still says what is short).
    pub enforce_minimums: bool,
    /// How long the agent listens for an LLDP frame on each NIC with link.
    pub lldp_seconds: u32,
}

impl Inspection {
    pub fn agent(&self, arch: Arch) -> Option<&str> {
        self.agents
            .iter()
            .find(|(a, _)| *a == arch)
            .map(|(_, p)| p.as_str())
    }

    pub fn minimums_of(&self, role: &str) -> crate::hardware::Minimums {
        self.minimums
            .get(role)
            .copied()
            .unwrap_or_else(|| crate::hardware::Minimums::openshift_default(role))
    }
}

/// `images.sets.<name>.metal`: the disk image coreos-installer writes
/// (`coreos.inst.image_url`), with its detached signature when there is
/// one (served at the image's URL + `.sig`, where coreos-installer looks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetalImage {
    pub path: String,
    pub signature: Option<String>,
}
