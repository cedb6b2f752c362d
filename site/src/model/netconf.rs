//! A node's host network, validated: interfaces (Ethernet, bonds, VLANs),
//! their addresses per family, routes and resolvers. Written in the site
//! as `nodes[].network` (one interface, the short form) or
//! `nodes[].networkConfig` (the NMState subset install-config's hosts use,
//! `crate::nmstate`); rendered by bootd as NetworkManager keyfiles in the
//! node's Ignition and as dracut arguments on its kernel line.

use crate::Mac;
use ipnet::IpNet;
use std::net::IpAddr;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeNetwork {
    /// In the order written; a bond's ports and a VLAN's base come before
    /// it (implicit Ethernet ports are added where the bond names them).
    pub interfaces: Vec<Interface>,
    /// Resolvers, both families.
    pub dns: Vec<IpAddr>,
    /// Search domains besides the cluster's.
    pub search: Vec<String>,
    pub routes: Vec<Route>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub kind: InterfaceKind,
    pub mtu: Option<u32>,
    /// An Ethernet interface's MAC: the profile applies to that NIC only.
    pub mac: Option<Mac>,
    pub ipv4: IpConfig,
    pub ipv6: IpConfig,
    /// The bond this interface is a port of (then it has no addresses).
    pub controller: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InterfaceKind {
    Ethernet,
    Bond {
        mode: BondMode,
        /// Linux bonding options (`miimon`, `lacp_rate`, …), as written.
        options: Vec<(String, String)>,
        ports: Vec<String>,
    },
    Vlan {
        base: String,
        id: u16,
    },
}

impl InterfaceKind {
    pub fn nm_type(&self) -> &'static str {
        match self {
            InterfaceKind::Ethernet => "ethernet",
            InterfaceKind::Bond { .. } => "bond",
            InterfaceKind::Vlan { .. } => "vlan",
        }
    }
}

/// The Linux bonding modes, by the names NMState, NetworkManager and the
/// kernel share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BondMode {
    BalanceRr,
    ActiveBackup,
    BalanceXor,
    Broadcast,
    Lacp,
    BalanceTlb,
    BalanceAlb,
}

impl BondMode {
    pub const ALL: [BondMode; 7] = [
        BondMode::BalanceRr,
        BondMode::ActiveBackup,
        BondMode::BalanceXor,
        BondMode::Broadcast,
        BondMode::Lacp,
        BondMode::BalanceTlb,
        BondMode::BalanceAlb,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            BondMode::BalanceRr => "balance-rr",
            BondMode::ActiveBackup => "active-backup",
            BondMode::BalanceXor => "balance-xor",
            BondMode::Broadcast => "broadcast",
            BondMode::Lacp => "802.3ad",
            BondMode::BalanceTlb => "balance-tlb",
            BondMode::BalanceAlb => "balance-alb",
        }
    }
    pub fn parse(s: &str) -> Option<BondMode> {
        BondMode::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

/// One family's addressing of an interface.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IpConfig {
    /// `false`: the family is off on this interface.
    pub enabled: bool,
    /// Addresses from DHCP (and, for IPv6, router advertisements).
    pub dhcp: bool,
    /// Static addresses with their prefixes.
    pub addresses: Vec<IpNet>,
}

impl IpConfig {
    pub fn disabled() -> IpConfig {
        IpConfig::default()
    }
    pub fn manual(addresses: Vec<IpNet>) -> IpConfig {
        IpConfig {
            enabled: true,
            dhcp: false,
            addresses,
        }
    }
    pub fn dhcp() -> IpConfig {
        IpConfig {
            enabled: true,
            dhcp: true,
            addresses: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub destination: IpNet,
    pub next_hop: IpAddr,
    pub interface: String,
    pub metric: Option<u32>,
}

impl Route {
    pub fn is_default(&self) -> bool {
        self.destination.prefix_len() == 0
    }
}

impl NodeNetwork {
    pub fn interface(&self, name: &str) -> Option<&Interface> {
        self.interfaces.iter().find(|i| i.name == name)
    }

    /// The family's config of `iface`.
    pub fn family(iface: &Interface, v4: bool) -> &IpConfig {
        if v4 {
            &iface.ipv4
        } else {
            &iface.ipv6
        }
    }

    /// The default route's next hop of that family through `iface`.
    pub fn gateway(&self, iface: &str, v4: bool) -> Option<IpAddr> {
        self.routes
            .iter()
            .find(|r| r.is_default() && r.interface == iface && r.next_hop.is_ipv4() == v4)
            .map(|r| r.next_hop)
    }

    /// Every static address, with its interface.
    pub fn static_addresses(&self) -> impl Iterator<Item = (&Interface, &IpNet)> {
        self.interfaces.iter().flat_map(|i| {
            i.ipv4
                .addresses
                .iter()
                .chain(i.ipv6.addresses.iter())
                .map(move |a| (i, a))
        })
    }
}
