//! `vips`: the api, ingress and boot addresses, and `vips.vrrp`, how
//! keepalived moves them between appliances.

use std::net::IpAddr;
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct Vips {
    /// The API VIP; on a dual-stack site (`vips.api` a list) the IPv4 one.
    pub api: IpAddr,
    pub ingress: IpAddr,
    /// A dual-stack site's IPv6 API and ingress VIPs (`vips.api`'s and
    /// `vips.ingress`'s IPv6 entries).
    pub api_v6: Option<IpAddr>,
    pub ingress_v6: Option<IpAddr>,
    /// The boot service address (`vips.boot`): where nodes fetch scripts,
    /// images and Ignition when several appliances serve the site; the
    /// host of `host.http.url` (and `https.url`), moved by keepalived.
    pub boot: Option<IpAddr>,
    /// keepalived moves the VIPs between appliances (`vips.vrrp`).
    pub vrrp: Option<Vrrp>,
}

/// `vips.vrrp`: what `bootd render keepalived` writes for each VIP.
#[derive(Debug, Clone, PartialEq)]
pub struct Vrrp {
    /// The interface the VIPs live on (every appliance's name for it).
    pub interface: String,
    /// VRRP virtual router ids (1-255) of the api and ingress VIPs (one
    /// instance, api's, when both VIPs are the same address).
    pub api_router_id: u8,
    pub ingress_router_id: u8,
    /// The boot address's router id (used when `vips.boot` is set).
    pub boot_router_id: u8,
    /// VRRP advertisement interval (whole seconds, 1-255).
    pub advert_interval: std::time::Duration,
    /// Prefix lengths of the api and ingress VIPs: their site network's.
    pub api_prefix: u8,
    pub ingress_prefix: u8,
    /// The boot address's prefix length (0 when `vips.boot` is not set).
    pub boot_prefix: u8,
    /// `unicastPeers`: the appliances' own addresses, which VRRP
    /// advertisements go to one by one instead of to VRRP's multicast
    /// group. Empty: multicast. Each appliance leaves its own address out
    /// of what it renders (`unicast_src_ip` is that address).
    pub unicast_peers: Vec<IpAddr>,
    /// `notify`: run by keepalived at every state change of every instance.
    pub notify: Option<Notify>,
}

/// `vips.vrrp.notify` and `notifyUser`.
#[derive(Debug, Clone, PartialEq)]
pub struct Notify {
    /// An absolute path of portable file name characters only (keepalived
    /// reads the script line as words it may unquote, substitute or skip
    /// as a comment: nothing in it may mean anything to that reader).
    pub path: PathBuf,
    /// Who runs it (keepalived's `script_user`, `nobody`, when not given).
    pub user: Option<String>,
}

impl Vips {
    /// The API VIPs, IPv4 first.
    pub fn apis(&self) -> impl Iterator<Item = IpAddr> + '_ {
        std::iter::once(self.api).chain(self.api_v6)
    }
    /// The ingress VIPs, IPv4 first.
    pub fn ingresses(&self) -> impl Iterator<Item = IpAddr> + '_ {
        std::iter::once(self.ingress).chain(self.ingress_v6)
    }
    /// Every address keepalived moves: the VIPs and the boot address.
    pub fn moved(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.apis().chain(self.ingresses()).chain(self.boot)
    }
}
