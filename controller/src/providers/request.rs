//! What a provider is asked to create for one node ([`NodeRequest`]), made
//! by the reconciler from the node and the site.

use site::Secret;

/// What a provider is asked to create for one node.
#[derive(Debug, Clone)]
pub struct NodeRequest {
    pub name: String,
    pub cluster: String,
    pub ip: std::net::Ipv4Addr,
    /// The node's MACs from the site (the local provider gives the VM the first).
    pub macs: Vec<String>,
    /// bootd's per-node iPXE script URL.
    pub ipxe_url: String,
    /// The node's firmware hint (`firmware:`), for a BMC's boot mode.
    pub firmware: site::Firmware,
    /// UEFI HTTP Boot's first URL: the UEFI iPXE binary over HTTP.
    pub uefi_http_url: String,
    /// The Ignition pointer config (JSON) with the site CA and a token: secret.
    pub userdata: Secret<String>,
    /// bootd's ISO of the node for a BMC's virtual media, with a token: secret.
    pub media_url: Secret<String>,
    /// The node's create intent: the same across retries and restarts of one
    /// create, new for a new node of the same name (idempotency tokens).
    pub intent: String,
    /// Its first network boot only inspects the machine (the agent reboots
    /// it) and the next installs: a BMC keeps it booting from the network
    /// until the install fetched its Ignition (`finish`), not once.
    pub inspects_first: bool,
    /// What the node's boot does now ([`bootd::plan::Plan::step`]): a BMC
    /// whose virtual media holds the ISO of another step inserts this
    /// one's ([`super::Provider::next_media`]).
    pub media_step: String,
}

impl NodeRequest {
    /// The tag that marks a machine made by this create intent, on
    /// providers without an idempotency key (Equinix tags, Power VS
    /// `userTags`): a find prefers the machine its own intent made.
    pub fn intent_tag(&self) -> Option<String> {
        (!self.intent.is_empty()).then(|| format!("bootd-intent:{}", self.intent))
    }

    /// A request that names only the node and its cluster: no address
    /// (0.0.0.0), MACs, URLs, user data or intent, firmware `auto`. What a
    /// delete looks the machine up with when the node left the site, and
    /// the base of the tests' requests.
    pub fn bare(name: &str, cluster: &str) -> NodeRequest {
        NodeRequest {
            name: name.to_string(),
            cluster: cluster.to_string(),
            ip: std::net::Ipv4Addr::UNSPECIFIED,
            macs: vec![],
            ipxe_url: String::new(),
            firmware: site::Firmware::Auto,
            uefi_http_url: String::new(),
            userdata: Secret(String::new()),
            media_url: Secret(String::new()),
            intent: String::new(),
            inspects_first: false,
            media_step: String::new(),
        }
    }
}
