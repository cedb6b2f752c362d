//! Networks and nodes: the site's addresses.

use super::*;

/// One network (one link): an IPv4 subnet, an IPv6 subnet, or one of each.
#[derive(Debug, Clone)]
pub struct Network {
    pub name: String,
    /// One per address family, IPv4 first.
    pub subnets: Vec<Subnet>,
    pub dns_servers: Vec<IpAddr>,
}

/// A subnet of a [`Network`], with its router and dynamic pool.
#[derive(Debug, Clone)]
pub struct Subnet {
    pub net: IpNet,
    pub gateway: Option<IpAddr>,
    /// First and last address of the dynamic pool (inclusive).
    pub pool: Option<(IpAddr, IpAddr)>,
}

impl Network {
    /// The IPv4 subnet, if the network has one.
    pub fn v4(&self) -> Option<&Subnet> {
        self.subnets.iter().find(|s| s.net.addr().is_ipv4())
    }
    /// The IPv6 subnet, if the network has one.
    pub fn v6(&self) -> Option<&Subnet> {
        self.subnets.iter().find(|s| s.net.addr().is_ipv6())
    }
    /// The subnet holding `a`.
    pub fn subnet_of(&self, a: IpAddr) -> Option<&Subnet> {
        self.subnets.iter().find(|s| s.net.contains(&a))
    }
    pub fn contains(&self, a: IpAddr) -> bool {
        self.subnet_of(a).is_some()
    }
    /// The subnets, written as the site writes them (`a, b`).
    pub fn subnets_text(&self) -> String {
        self.subnets
            .iter()
            .map(|s| s.net.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[derive(Debug, Clone)]
pub struct Node {
    pub name: String,
    pub role: String,
    pub macs: Vec<Mac>,
    /// The reserved IPv4 address (`ip`, or its IPv4 entry).
    pub ip4: Option<Ipv4Addr>,
    /// The reserved IPv6 address (`ip`'s IPv6 entry). A node has at least
    /// one of the two.
    pub ip6: Option<Ipv6Addr>,
    /// Index into [`Site::networks`] of the network holding its addresses.
    pub network: usize,
    pub arch: Arch,
    pub firmware: Firmware,
    /// Key into [`Images::sets`].
    pub image: String,
    /// A literal device (`installDisk`): valid only while the kernel
    /// names disks the same way.
    pub install_disk: Option<String>,
    /// The disk to install to, chosen from its inventory
    /// (`rootDeviceHints`, Metal3's).
    pub root_device_hints: Option<crate::hardware::RootDeviceHints>,
    /// Runs the live system, installs nothing (`live: true`).
    pub live: bool,
    pub kernel_args: Vec<String>,
    /// Its host network when not plain DHCP (`network` or
    /// `networkConfig`): rendered as keyfiles and dracut arguments.
    pub host_network: Option<super::netconf::NodeNetwork>,
    /// Overrides the site's UEFI x86_64 boot file (e.g. snponly.efi).
    pub ipxe_binary: Option<String>,
    pub dhcp_options: Vec<DhcpOptionValue>,
    /// From where its boot script, metadata and userdata are served.
    pub fetch_from: FetchFrom,
    /// The node's other addresses, as its provider reported them (bootd
    /// writes them into the node overlay); `None`: none reported. Its
    /// scripts and Ignition are served to these as to `ip`, and a provider
    /// token works only from them once they are known.
    pub addresses: Option<Vec<IpAddr>>,
    /// The switch port that names it (option 82, RFC 3046): a relayed
    /// DHCPv4 request carrying these sub-options is this node's, whatever
    /// its MAC.
    pub relay: Option<RelayId>,
    /// Its incarnation (`epoch`): tokens issued for it under another epoch
    /// are refused. The controller sets it for the nodes it makes (their
    /// creation, or their last reinstall through the API, in ms); an
    /// operator raises it in the site to void every token of a site node.
    pub epoch: u64,
}

/// `nodes[].relay`: sub-options of a relay's option 82. Every one given
/// must match, byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RelayId {
    /// Sub-option 1 (Agent Circuit ID): the port the request came in on.
    pub circuit_id: Option<Vec<u8>>,
    /// Sub-option 2 (Agent Remote ID): the relay (switch) itself.
    pub remote_id: Option<Vec<u8>>,
}

impl RelayId {
    /// Whether option 82's sub-options `circuit_id`, `remote_id` (as the
    /// relay sent them) name this port.
    pub fn matches(&self, circuit_id: Option<&[u8]>, remote_id: Option<&[u8]>) -> bool {
        let want = |mine: &Option<Vec<u8>>, got: Option<&[u8]>| {
            mine.as_deref().is_none_or(|m| got == Some(m))
        };
        (self.circuit_id.is_some() || self.remote_id.is_some())
            && want(&self.circuit_id, circuit_id)
            && want(&self.remote_id, remote_id)
    }

    /// A value as the site writes it: `0x` then hex digits for raw bytes,
    /// anything else for its UTF-8 bytes.
    pub fn parse_value(s: &str) -> Result<Vec<u8>, String> {
        let v = match s.strip_prefix("0x") {
            Some(hex) => {
                // Hex digits only (ASCII): slicing pairs below must not cut
                // a multi-byte character (found by the site_yaml fuzz target).
                if hex.is_empty()
                    || hex.len() % 2 != 0
                    || !hex.bytes().all(|b| b.is_ascii_hexdigit())
                {
                    return Err(format!("{s:?}: 0x and an even number of hex digits"));
                }
                (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
                    .collect::<Result<Vec<u8>, _>>()
                    .map_err(|_| format!("{s:?}: 0x and an even number of hex digits"))?
            }
            None => s.as_bytes().to_vec(),
        };
        match v.len() {
            0 => Err("empty: a relay sends at least one byte".into()),
            // A sub-option's length is one byte.
            n if n > 255 => Err(format!("{n} bytes: a sub-option holds at most 255")),
            _ => Ok(v),
        }
    }

    /// How the site writes a value back (text when printable, else hex).
    pub fn show(v: &[u8]) -> String {
        match std::str::from_utf8(v) {
            Ok(s) if !s.starts_with("0x") && s.chars().all(|c| !c.is_control()) => s.to_string(),
            _ => format!(
                "0x{}",
                v.iter().map(|b| format!("{b:02x}")).collect::<String>()
            ),
        }
    }
}

/// `nodes[].fetchFrom`, `host.api.fetchFrom.<provider>`: whether a node's
/// boot script (which carries a token for its Ignition), metadata and
/// userdata go only to the node's own address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FetchFrom {
    /// Its reserved address, its provider's addresses, or the address
    /// bootd's DHCP leased to one of its MACs.
    #[default]
    NodeAddress,
    /// Any source: for nodes whose requests arrive through NAT or a proxy
    /// that hides their address. A MAC or a name is then enough to get the
    /// script, and with it a single-use token for the Ignition.
    AnyAddress,
}

impl FetchFrom {
    pub fn as_str(&self) -> &'static str {
        match self {
            FetchFrom::NodeAddress => "nodeAddress",
            FetchFrom::AnyAddress => "anyAddress",
        }
    }
    pub fn parse(s: &str) -> Option<FetchFrom> {
        match s {
            "nodeAddress" => Some(FetchFrom::NodeAddress),
            "anyAddress" => Some(FetchFrom::AnyAddress),
            _ => None,
        }
    }
}

impl Node {
    pub fn is_bootstrap(&self) -> bool {
        self.role == ROLE_BOOTSTRAP
    }
    /// Its reserved addresses, IPv4 first.
    pub fn ips(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.ip4
            .map(IpAddr::V4)
            .into_iter()
            .chain(self.ip6.map(IpAddr::V6))
    }
    /// Its first reserved address (IPv4 on a dual-stack node): the one
    /// messages, metadata and single-address consumers use.
    pub fn ip(&self) -> IpAddr {
        self.ips()
            .next()
            .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
    }
    /// Its reserved address of `a`'s family, else its other one.
    pub fn ip_like(&self, a: IpAddr) -> IpAddr {
        match a {
            IpAddr::V6(_) => self.ip6.map(IpAddr::V6).unwrap_or_else(|| self.ip()),
            IpAddr::V4(_) => self.ip(),
        }
    }
    /// Whether `a` is one of its reserved addresses (an IPv4-mapped IPv6
    /// address counts as its IPv4 address).
    /// The disk it installs to: `installDisk`, or the device its
    /// root-device hints name; `None`: it runs live.
    pub fn install_device(&self) -> Option<&str> {
        self.install_disk.as_deref().or_else(|| {
            self.root_device_hints
                .as_ref()
                .and_then(|h| h.device_name.as_deref())
        })
    }
    /// What chooses the disk it installs to: its root-device hints, or
    /// `installDisk` as a device-name hint; `None`: it runs live.
    pub fn disk_hints(&self) -> Option<crate::hardware::RootDeviceHints> {
        match (&self.install_disk, &self.root_device_hints) {
            (Some(d), _) => Some(crate::hardware::RootDeviceHints::device(d)),
            (None, Some(h)) => Some(h.clone()),
            (None, None) => None,
        }
    }

    pub fn has_ip(&self, a: IpAddr) -> bool {
        let a = a.to_canonical();
        self.ips().any(|x| x == a)
    }
}

pub const ROLE_BOOTSTRAP: &str = "bootstrap";
pub const ROLE_MASTER: &str = "master";
pub const ROLE_WORKER: &str = "worker";
