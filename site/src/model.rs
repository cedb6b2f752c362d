//! Stage two: the validated site. Every value here has been checked, every
//! cross-reference resolved; daemons derive their configuration from it and
//! never re-validate.

use crate::mac::Mac;
use crate::Secret;
use ipnet::IpNet;
use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

mod admission;
mod api;
mod bmc;
mod inspection;
mod listen;
pub mod netconf;
mod network;
mod signing;
mod vips;
pub use admission::Admission;
pub use api::*;
pub use bmc::*;
pub use inspection::*;
pub use listen::*;
pub use netconf::*;
pub use network::*;
pub use signing::*;
pub use vips::*;

#[derive(Debug, Clone)]
pub struct Site {
    /// The site file this was loaded from (for reload and for messages).
    pub source: PathBuf,
    pub cluster: Cluster,
    pub host: Host,
    pub networks: Vec<Network>,
    pub vips: Vips,
    pub images: Images,
    pub nodes: Vec<Node>,
    pub ignition: Ignition,
    pub ssh_keys: Vec<String>,
    /// dnsd's configuration (defaults when the site has no `dns:` section).
    pub dns: crate::dns::Dns,
    /// lbd's frontends (defaults when the site has no `lb:` section).
    pub lb: Lb,
    /// Nodes added at run time through bootd's API (`<stateDir>/nodes.yaml`),
    /// already merged into [`Site::nodes`].
    pub overlay: Overlay,
    /// What a machine whose MAC is in no node gets (`discovery:`).
    pub discovery: Discovery,
    /// The agent that reports a machine's hardware, and role minimums.
    pub inspection: Inspection,
}

/// `discovery:`: machines with unknown MACs report themselves and wait to
/// be adopted as nodes. Off by default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery {
    pub enabled: bool,
    pub action: DiscoveryAction,
    /// How long a waiting machine sleeps before it asks again.
    pub retry: Duration,
    /// A machine reported for the first time boots the live system with
    /// the inspection agent, so that its inventory is known before it is
    /// adopted (`discovery.inspect`).
    pub inspect: bool,
    /// Added to the kernel line of that boot (a serial console).
    pub kernel_args: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscoveryAction {
    /// Ask again every `retry` (adopted: it boots as the node, no power cycle).
    Wait,
    /// Power off once reported (adopted: it boots as the node at its next power-on).
    PowerOff,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Cluster {
    pub name: String,
    pub base_domain: String,
    /// How many nodes each role has once the cluster is whole
    /// (`cluster.replicas`, or install-config's `controlPlane.replicas` and
    /// `compute[].replicas`); a role not listed has no bound.
    pub replicas: BTreeMap<String, u32>,
    /// install-config's `platform.powervs` and the Power VS machine pools.
    pub powervs: Option<PowerVsPlatform>,
}

/// What install-config.yaml says of a Power VS cluster.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PowerVsPlatform {
    pub region: Option<String>,
    pub zone: Option<String>,
    /// The workspace (`serviceInstanceGUID`, or `serviceInstanceID`).
    pub service_instance: Option<String>,
    /// Machine pool per role (`master` from `controlPlane`, others from `compute`).
    pub pools: BTreeMap<String, PowerVsPool>,
}

/// A Power VS machine pool: defaults for the instances of a role.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PowerVsPool {
    pub sys_type: Option<String>,
    pub proc_type: Option<String>,
    pub processors: Option<f64>,
    /// GiB.
    pub memory: Option<u32>,
}

impl Cluster {
    /// `<name>.<baseDomain>`, the zone every cluster name lives in.
    pub fn domain(&self) -> String {
        format!("{}.{}", self.name, self.base_domain)
    }
}

#[derive(Debug, Clone)]
pub struct Host {
    pub state_dir: PathBuf,
    pub http: Listen,
    pub https: Option<Listen>,
    /// bootd's DHCP server; `None`: another DHCP server hands out addresses.
    pub dhcp: Option<Dhcp>,
    /// bootd's DHCPv6 server (`host.dhcp6`); `None`: none.
    pub dhcp6: Option<Dhcp6>,
    pub tftp: Option<Tftp>,
    /// bootd's controller API; `None`: no API.
    pub api: Option<Api>,
    /// Who may read the status page and its timeline JSON on bootd's HTTP
    /// listeners without a token (default: loopback, and this host's own
    /// addresses).
    pub status_from: Vec<IpNet>,
    /// Where bootd and the controller keep their state (`host.store`).
    pub store: Store,
    /// How many of each kind of work run at once (`host.admission`).
    pub admission: Admission,
}

/// `host.store`.
#[derive(Debug, Clone, PartialEq)]
pub enum Store {
    /// One appliance: SQLite and files in `stateDir` (the default).
    Sqlite,
    /// Appliances sharing one state in an etcd cluster.
    Etcd(EtcdStore),
}

#[derive(Debug, Clone, PartialEq)]
pub struct EtcdStore {
    /// Client URLs, all `http://` or all `https://`.
    pub endpoints: Vec<String>,
    /// Every key is under it: begins and ends with `/` (default
    /// `/bare-metal-boot/<cluster.name>/`).
    pub prefix: String,
    /// Deadline of one request to etcd (default 3 s).
    pub timeout: std::time::Duration,
    /// How long an appliance that stopped answering keeps what it holds
    /// (the controller's leadership) before another takes it over
    /// (default 10 s).
    pub lease_ttl: std::time::Duration,
    /// Required with `https://` endpoints.
    pub tls: Option<EtcdTls>,
    /// Which site the prefix belongs to: stored under it at the first
    /// start, compared at every start (`siteId`; default the cluster's
    /// domain).
    pub site_id: String,
    /// The cluster's domain, stored beside `site_id` for people.
    pub cluster: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct EtcdTls {
    /// The CA that signed the members' certificates.
    pub ca: PathBuf,
    /// A client certificate and its key (etcd's `--client-cert-auth`).
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// How several appliances sharing one store (`host.store.etcd`) answer
/// DHCP; one appliance answers alone either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DhcpHa {
    /// One elected appliance answers; the others take over when its
    /// election lapses.
    #[default]
    HotStandby,
    /// Every live appliance answers a share of the clients: the one the
    /// hash of the client's identifier gives it to.
    LoadBalancing,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DhcpMode {
    /// Authoritative server: addresses, options and boot information.
    Server,
    /// proxyDHCP: boot information only (ports 67 and 4011); addresses come
    /// from another DHCP server.
    Proxy,
}

#[derive(Debug, Clone)]
pub struct Dhcp {
    pub listen: SocketAddr,
    /// Bind to this interface (SO_BINDTODEVICE); broadcasts from other
    /// networks are never seen.
    pub interface: Option<String>,
    pub mode: DhcpMode,
    /// How appliances sharing the store answer (`host.dhcp.ha`).
    pub ha: DhcpHa,
    /// This host's address on the provisioning network: server identifier,
    /// next-server (siaddr) and TFTP server.
    pub server_address: Ipv4Addr,
    pub lease_time: Duration,
    /// How long an address a client DECLINEd (another machine answers on
    /// it) is kept out of the pool.
    pub decline_hold: Duration,
    /// A REQUEST for the lease a client was granted less than this share
    /// of `lease_time` ago is answered with the lease as it stands (its
    /// remaining time) and nothing written (`host.dhcp.cacheThreshold`,
    /// Kea's `cache-threshold`; 0: every REQUEST written).
    pub cache_threshold: f64,
    pub ntp_servers: Vec<Ipv4Addr>,
    /// Option 15; default `<cluster>.<baseDomain>`.
    pub domain_name: String,
    pub boot_files: BootFiles,
    pub options: Vec<DhcpOptionValue>,
    /// Relay agents (their giaddr) whose option 82 names a node's port
    /// (`nodes[].relay`); from any other, option 82 is echoed, never
    /// believed.
    pub trusted_relays: Vec<Ipv4Addr>,
}

/// `host.dhcp6`: stateful DHCPv6 (addresses, boot URLs) on one link.
#[derive(Debug, Clone)]
pub struct Dhcp6 {
    pub listen: SocketAddr,
    /// DHCPv6 clients send to ff02::1:2 on their link: the interface
    /// where bootd joins that group and answers (relayed requests arrive
    /// by unicast on any interface).
    pub interface: String,
    /// This host's address on the link: the server of `tftp://` boot URLs.
    pub server_address: Ipv6Addr,
    /// Valid and preferred lifetime of an address; T1 is half of it, T2
    /// four fifths.
    pub lease_time: Duration,
    pub decline_hold: Duration,
    /// Answer a Solicit with Rapid Commit by a Reply (when the client asks).
    pub rapid_commit: bool,
    /// At most this many bindings are kept (nodes' reservations are
    /// granted beyond it): DUIDs cost nothing to invent, and a /64 pool
    /// never runs out (dnsmasq's `dhcp-lease-max`).
    pub max_bindings: usize,
    pub boot_files: BootFiles,
}

/// TFTP file names handed to firmware that cannot speak HTTP itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootFiles {
    pub bios: String,
    pub uefi_x86_64: String,
    pub uefi_arm64: String,
    pub ieee1275: String,
}

/// An extra DHCP option, already encoded as its value bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DhcpOptionValue {
    pub code: u8,
    pub value: Vec<u8>,
}

#[derive(Debug, Clone)]
pub struct Tftp {
    pub listen: SocketAddr,
    pub root: PathBuf,
}

#[derive(Debug, Clone)]
pub struct Images {
    /// Absolute directory every image path is relative to.
    pub root: PathBuf,
    pub sets: BTreeMap<String, ImageSet>,
    /// The keys catalog artifacts must be signed by (`signingKeys`).
    pub signing: Signing,
}

/// Paths relative to [`Images::root`], as they appear in URLs under `/images/`.
#[derive(Debug, Clone)]
pub struct ImageSet {
    pub arch: Arch,
    pub kernel: String,
    pub initramfs: String,
    pub rootfs: Option<String>,
    /// The disk image installs write; without it coreos-installer installs
    /// the image the live system carries.
    pub metal: Option<MetalImage>,
    /// Set for `catalog:` sets: the paths above are the cached files when
    /// `resolved` is Ok, and empty when it is not (bootd then refuses to start).
    pub catalog: Option<CatalogImage>,
}

/// A `catalog:` image set: what the site names and what the cache answered.
#[derive(Debug, Clone)]
pub struct CatalogImage {
    pub reference: crate::catalog::CatalogRef,
    /// The cached set, or why it cannot be used yet (not fetched, no "latest").
    pub resolved: Result<crate::catalog::Resolved, String>,
}

impl Images {
    /// The cache files `catalog:` sets were resolved from (manifests and
    /// `latest.json`): a fetch that changes them triggers a reload.
    pub fn catalog_files(&self) -> Vec<PathBuf> {
        let mut v = Vec::new();
        for c in self.sets.values().filter_map(|s| s.catalog.as_ref()) {
            let r = &c.reference;
            if r.version == crate::catalog::VERSION_LATEST {
                v.push(crate::catalog::latest_path(&self.root, &r.stream));
            }
            // A pinned version not fetched yet: its manifest-to-be, so the
            // fetch that creates it triggers the reload.
            let dir = match &c.resolved {
                Ok(res) => Some(res.dir.clone()),
                Err(_) if r.version != crate::catalog::VERSION_LATEST => Some(
                    crate::catalog::set_dir(&r.stream, &r.version, &r.arch, &r.platform),
                ),
                Err(_) => None,
            };
            v.extend(dir.map(|d| self.root.join(d).join(crate::catalog::MANIFEST)));
        }
        v
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    X86_64,
    Aarch64,
    Ppc64le,
}

impl Arch {
    pub fn parse(s: &str) -> Option<Arch> {
        match s {
            "x86_64" | "amd64" => Some(Arch::X86_64),
            "aarch64" | "arm64" => Some(Arch::Aarch64),
            "ppc64le" | "ppc64el" => Some(Arch::Ppc64le),
            _ => None,
        }
    }
    pub fn as_str(&self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
            Arch::Ppc64le => "ppc64le",
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the node's firmware is expected to be; `Auto` lets bootd decide from
/// what the firmware says about itself on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Firmware {
    Auto,
    Bios,
    Uefi,
    UefiHttp,
    /// Open Firmware: SLOF under QEMU, PowerVM; boots GRUB over TFTP.
    Ieee1275,
}

impl Firmware {
    pub fn parse(s: &str) -> Option<Firmware> {
        match s {
            "auto" => Some(Firmware::Auto),
            "bios" => Some(Firmware::Bios),
            "uefi" => Some(Firmware::Uefi),
            "uefi-http" => Some(Firmware::UefiHttp),
            "ieee1275" | "powervm" | "slof" => Some(Firmware::Ieee1275),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Ignition {
    /// Role name → that role's config, as openshift-install wrote it.
    pub roles: BTreeMap<String, RoleConfig>,
    pub token_ttl: Duration,
    /// Point nodes at an HTTP pointer config that fetches the real one over
    /// HTTPS with the site CA (when `host.https` is set).
    pub over_https: bool,
    /// What a node that fetched its Ignition (it installed) gets when it
    /// network-boots again.
    pub after_install: AfterInstall,
    /// A token grants one Ignition fetch from another address than the
    /// node's; a second one is refused (`IgnitionTokenReused`).
    pub single_use_tokens: bool,
    /// `ignition.dir` (absolute), where `<role>.ign` is read from.
    pub dir: Option<PathBuf>,
    /// `ignition.roles` (absolute paths): roles read from elsewhere.
    pub role_paths: BTreeMap<String, PathBuf>,
}

impl Ignition {
    /// Where `role`'s config is read from, whether a node uses it yet or not.
    pub fn path_of(&self, role: &str) -> Option<PathBuf> {
        self.role_paths
            .get(role)
            .cloned()
            .or_else(|| self.dir.as_ref().map(|d| d.join(format!("{role}.ign"))))
    }
}

/// `ignition.afterInstall`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterInstall {
    /// A script that boots the local disk, until a reinstall is asked for:
    /// a machine whose boot order puts the network first does not loop.
    Disk,
    /// The install script again (diskless nodes that live-boot every time).
    Network,
}

#[derive(Debug, Clone)]
pub struct RoleConfig {
    pub path: PathBuf,
    /// Parsed JSON. Holds secrets (pull secret, keys): never log it.
    pub config: Secret<serde_json::Value>,
    /// `ignition.version` of the config, e.g. "3.2.0".
    pub version: String,
}

impl Site {
    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.name == name)
    }
    pub fn node_by_mac(&self, mac: &Mac) -> Option<&Node> {
        self.nodes.iter().find(|n| n.macs.contains(mac))
    }
    /// The node a relayed request names by its option 82 sub-options:
    /// one whose `relay` matches, the one naming both sub-options first
    /// (a port on a given switch before a port name alone).
    pub fn node_by_relay(
        &self,
        circuit_id: Option<&[u8]>,
        remote_id: Option<&[u8]>,
    ) -> Option<&Node> {
        let mut found: Option<&Node> = None;
        for n in &self.nodes {
            let Some(r) = &n.relay else { continue };
            if !r.matches(circuit_id, remote_id) {
                continue;
            }
            let both = r.circuit_id.is_some() && r.remote_id.is_some();
            if both {
                return Some(n);
            }
            found = found.or(Some(n));
        }
        found
    }
    /// The node a boot file request is for: by the MAC it names, else, for
    /// a node known by its switch port (`relay`, whose MAC the site need
    /// not know), by the address DHCP gave that port, which the request
    /// comes from.
    pub fn node_by_mac_or_port(&self, mac: &Mac, from: IpAddr) -> Option<&Node> {
        self.node_by_mac(mac)
            .or_else(|| self.node_by_ip(from).filter(|n| n.relay.is_some()))
    }
    pub fn node_by_ip(&self, ip: IpAddr) -> Option<&Node> {
        self.nodes.iter().find(|n| n.has_ip(ip))
    }
    /// The nodes' addresses from `start` to `end` (a DHCP pool's): those
    /// the pool must skip, gathered once per allocation.
    pub fn node_ips_in(&self, start: IpAddr, end: IpAddr) -> std::collections::HashSet<IpAddr> {
        self.nodes
            .iter()
            .flat_map(|n| n.ips())
            .filter(|a| (start..=end).contains(a))
            .collect()
    }
    pub fn image_of(&self, node: &Node) -> &ImageSet {
        // Validation guarantees every node's image exists.
        &self.images.sets[&node.image]
    }
}

impl Site {
    /// Every file this site was built from: the site file and each role's
    /// Ignition. A daemon reloads when any of them changes (mtime) or on SIGHUP.
    /// Files that extend the site at run time (e.g. nodes added through bootd's
    /// API) are listed here too, so every daemon follows them the same way.
    pub fn watched_files(&self) -> Vec<PathBuf> {
        let mut v = vec![self.source.clone(), self.overlay.path.clone()];
        v.extend(self.ignition.roles.values().map(|r| r.path.clone()));
        v.extend(self.images.catalog_files());
        v
    }
}

/// The node overlay: `<stateDir>/nodes.yaml`, written only by bootd's API
/// (atomically), read by every daemon with the site. It lives in the site's
/// `host.stateDir` even when bootd runs with `--state-dir`, because dnsd and
/// lbd know only the site file.
#[derive(Debug, Clone)]
pub struct Overlay {
    pub path: PathBuf,
    /// Names of the nodes that came from the overlay.
    pub nodes: Vec<String>,
}

impl Site {
    /// Whether `name` was added through the API (and so may be deleted through it).
    pub fn from_overlay(&self, name: &str) -> bool {
        self.overlay.nodes.iter().any(|n| n == name)
    }
}

/// `lb:`: lbd's frontends, health checks, limits and bootstrap lifecycle.
/// Pools of the site frontends are derived from `nodes` by lbd.
#[derive(Debug, Clone)]
pub struct Lb {
    /// lbd's admin HTTP listener (`/metrics`, `/status`, bootstrap completion); `None`: off.
    pub admin_listen: Option<SocketAddr>,
    pub limits: LbLimits,
    pub bootstrap: LbBootstrap,
    /// The enabled site frontends (api, machine-config, ingress-http,
    /// ingress-https) and then the `services`, listen addresses unique.
    pub frontends: Vec<LbFrontend>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LbFrontend {
    /// `api`, `machine-config`, `ingress-http`, `ingress-https`, or a service's name.
    pub name: String,
    pub listen: SocketAddr,
    /// The port traffic goes to on each node (site frontends).
    pub backend_port: u16,
    /// A service's fixed backends; `None` for a site frontend, whose
    /// backends lbd derives from the nodes.
    pub backends: Option<Vec<SocketAddr>>,
    pub balance: Balance,
    pub check: Check,
}

/// The site frontend a frontend name is: `api-v6` (a dual-stack site's
/// IPv6 VIP) is `api`; any other name is itself.
pub fn site_frontend(name: &str) -> &str {
    name.strip_suffix("-v6").unwrap_or(name)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balance {
    RoundRobin,
    LeastConn,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub kind: CheckKind,
    /// Probe this port instead of the traffic port.
    pub port: Option<u16>,
    /// Between probes while the state is settled.
    pub interval: Duration,
    /// Between probes while the state is changing (after a first failure
    /// or success against the current state), as HAProxy's `fastinter`.
    pub fast_interval: Duration,
    pub timeout: Duration,
    /// Consecutive successes that bring a down backend up.
    pub rise: u32,
    /// Consecutive failures that take an up backend down.
    pub fall: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub enum CheckKind {
    Tcp,
    /// `GET path`, 2xx or 3xx is healthy.
    Http {
        path: String,
    },
    /// As `Http` over TLS; without `ca` the certificate is not verified.
    Https {
        path: String,
        ca: Option<PathBuf>,
        server_name: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct LbLimits {
    pub max_conns: u32,
    pub max_conns_per_source: u32,
    pub connect_timeout: Duration,
    pub idle_timeout: Duration,
    /// A backend that resets or closes before its first byte back is
    /// replaced by another and the client's bytes are sent again, while
    /// they fit in lbd's relay buffer (16 KiB). `None`: only on the
    /// frontends whose first bytes are a TLS ClientHello (api,
    /// machine-config, ingress-https), never on plain HTTP or a service,
    /// where a replayed first request may not be idempotent.
    pub retry_unanswered: Option<bool>,
}

impl LbLimits {
    /// Whether unanswered first bytes are replayed on frontend `name`.
    pub fn retries_unanswered(&self, name: &str) -> bool {
        self.retry_unanswered.unwrap_or(matches!(
            site_frontend(name),
            "api" | "machine-config" | "ingress-https"
        ))
    }
}

impl Default for LbLimits {
    fn default() -> Self {
        LbLimits {
            max_conns: 20_000,
            max_conns_per_source: 2_000,
            connect_timeout: Duration::from_secs(3),
            idle_timeout: Duration::from_secs(3600),
            retry_unanswered: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct LbBootstrap {
    /// Complete the bootstrap by itself once every master has been up
    /// (passing its checks) on the api and machine-config frontends this long.
    pub auto_complete_after: Option<Duration>,
    /// How long the bootstrap's (or a removed backend's) open connections
    /// may go on after it stops getting new ones.
    pub drain_timeout: Duration,
}

impl Default for LbBootstrap {
    fn default() -> Self {
        LbBootstrap {
            auto_complete_after: None,
            drain_timeout: Duration::from_secs(120),
        }
    }
}

#[cfg(test)]
mod lb_limits_tests {
    #[test]
    fn unanswered_bytes_are_replayed_by_default_on_tls_frontends_only() {
        let d = super::LbLimits::default();
        for tls in ["api", "machine-config", "ingress-https"] {
            assert!(d.retries_unanswered(tls), "{tls}");
        }
        for plain in ["ingress-http", "my-service"] {
            assert!(!d.retries_unanswered(plain), "{plain}");
        }
        let on = super::LbLimits {
            retry_unanswered: Some(true),
            ..d
        };
        assert!(on.retries_unanswered("ingress-http"));
    }
}
