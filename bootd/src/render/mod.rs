//! Pure renderers: given the site and a node, the bytes a client gets.
//! No I/O, no clock; callers pass tokens and base URLs in. Golden files in
//! `bootd/tests/golden/` pin every output.

pub mod agent;
pub mod grub;
pub mod ignition;
pub mod ipxe;
pub mod metadata;
pub mod network;
pub mod pxelinux;

use site::{Node, Site};

/// The URLs a node is told to fetch, with its access token where needed.
#[derive(Debug, Clone)]
pub struct NodeUrls {
    pub kernel: String,
    pub initramfs: String,
    pub rootfs: Option<String>,
    /// What `ignition.config.url` / `coreos.inst.ignition_url` point at.
    pub ignition: String,
    /// The metal image an install writes (`coreos.inst.image_url`), and
    /// whether it has a signature beside it.
    pub metal: Option<(String, bool)>,
    pub boot: Boot,
}

/// What the boot does with the live system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Boot {
    /// Ignition configures the live system (`ignition.config.url`).
    Live,
    /// coreos-installer installs to this disk (`coreos.inst.*`).
    Install { device: String },
    /// The live system runs the inspection agent: `ignition` is the
    /// agent's config ([`agent`]).
    Agent,
}

impl NodeUrls {
    /// `token` is the node's current access token (see [`crate::token`]);
    /// `base` the HTTP base URL the client gets ([`site::Listen::base_url`]).
    pub fn new(site: &Site, base: &str, node: &Node, token: &str) -> NodeUrls {
        let boot = match node.install_device() {
            Some(d) => Boot::Install {
                device: d.to_string(),
            },
            None => Boot::Live,
        };
        NodeUrls::with_boot(site, base, node, token, boot)
    }

    /// As [`NodeUrls::new`], for the boot [`crate::plan`] decided.
    pub fn with_boot(site: &Site, base: &str, node: &Node, token: &str, boot: Boot) -> NodeUrls {
        let img = site.image_of(node);
        let image = |p: &str| format!("{base}/images/{p}");
        let ignition = if boot == Boot::Agent {
            format!("{base}/ignition/{}/agent?token={token}", node.name)
        } else if site.ignition.over_https && site.host.https.is_some() {
            // A pointer config over HTTP whose merge source is HTTPS with the site CA.
            format!("{base}/ignition/{}/pointer?token={token}", node.name)
        } else {
            format!("{base}/ignition/{}?token={token}", node.name)
        };
        NodeUrls {
            kernel: image(&img.kernel),
            initramfs: image(&img.initramfs),
            rootfs: img.rootfs.as_deref().map(image),
            ignition,
            metal: img
                .metal
                .as_ref()
                .map(|m| (image(&m.path), m.signature.is_some())),
            boot,
        }
    }
}

/// The kernel command line for a CoreOS live PXE boot of `node`, without
/// the `initrd=` argument (that one depends on the loader).
pub fn kernel_args(site: &Site, node: &Node, urls: &NodeUrls) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(r) = &urls.rootfs {
        args.push(format!("coreos.live.rootfs_url={r}"));
    }
    args.push("ignition.firstboot".into());
    args.push("ignition.platform.id=metal".into());
    match &urls.boot {
        // Installing to disk: the live system runs coreos-installer, which
        // writes the node's config to the installed system. The live system
        // itself gets no cluster config (it must not start a kubelet).
        Boot::Install { device } => {
            args.push(format!("coreos.inst.install_dev={device}"));
            args.push(format!("coreos.inst.ignition_url={}", urls.ignition));
            if let Some((url, signed)) = &urls.metal {
                args.push(format!("coreos.inst.image_url={url}"));
                // Without a signature beside it, coreos-installer must be
                // told not to look for one (docs/site.md, metal).
                if !signed {
                    args.push("coreos.inst.insecure".into());
                }
            }
        }
        // Running live (diskless, or the lab), or the inspection agent:
        // Ignition configures this boot.
        Boot::Live | Boot::Agent => args.push(format!("ignition.config.url={}", urls.ignition)),
    }
    if let Some(hn) = &node.host_network {
        args.extend(network::dracut_args(site, node, hn));
    } else {
        // Addressed by DHCP: the live environment still gets the cluster's
        // resolvers, for whatever DHCP serves the segment (Ignition fetches
        // the machine config from api-int.<domain> before the system runs).
        for d in resolvers(site, node) {
            args.push(format!("nameserver={d}"));
        }
    }
    args.extend(node.kernel_args.iter().cloned());
    args
}

/// The resolvers a node is given for the cluster's names: its network's
/// `dnsServers` (dnsd, usually), both families.
pub fn resolvers<'a>(site: &'a Site, node: &Node) -> &'a [std::net::IpAddr] {
    site.networks
        .get(node.network)
        .map(|n| n.dns_servers.as_slice())
        .unwrap_or_default()
}

/// `why` as one line any boot script may echo: printable ASCII without
/// the characters iPXE, GRUB or a shell would read (`$ " ' \ ; & | # { }`).
pub fn echo_safe(why: &str) -> String {
    why.chars()
        .map(|c| match c {
            ' '..='~' if !"$\"'\\;&|#{}`".contains(c) => c,
            _ => ' ',
        })
        .collect()
}

/// The node's addresses for a config's comment line: `10.77.0.20, fd00:77::20`.
fn ip_list(node: &Node) -> String {
    node.ips()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn fqdn(site: &Site, node: &Node) -> String {
    format!("{}.{}", node.name, site.cluster.domain())
}
