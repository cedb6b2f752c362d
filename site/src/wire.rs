//! Stage one: the YAML file as written, deserialized without judgement.
//!
//! Structs here accept anything the YAML grammar allows for each key's type;
//! unknown keys are collected by `serde_ignored` in [`crate::load`] (so every
//! unknown key is reported at once, instead of serde's first-error stop).
//! Everything else is checked in [`crate::model`].

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SiteFile {
    pub cluster: Cluster,
    pub host: Host,
    #[serde(default)]
    pub networks: Vec<Network>,
    pub vips: Option<Vips>,
    #[serde(default)]
    pub images: Option<Images>,
    #[serde(default)]
    pub nodes: Vec<Node>,
    pub ignition: Option<Ignition>,
    #[serde(default)]
    pub ssh_keys: Vec<String>,
    pub dns: Option<crate::dns::wire::Dns>,
    /// lbd's frontends, checks and limits (docs/site.md, `lb`).
    pub lb: Option<Lb>,
    pub discovery: Option<Discovery>,
    pub inspection: Option<Inspection>,
}

/// `inspection:`: the agent that reports a machine's hardware before it
/// installs, and what each role needs at least.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Inspection {
    #[serde(default)]
    pub agents: BTreeMap<String, PathBuf>,
    #[serde(default)]
    pub minimums: BTreeMap<String, Minimums>,
    pub enforce_minimums: Option<bool>,
    pub lldp_seconds: Option<u32>,
}

#[derive(Debug, Deserialize)]
pub struct Minimums {
    pub cpus: Option<u32>,
    #[serde(rename = "memoryGiB")]
    pub memory_gib: Option<u64>,
    #[serde(rename = "diskGiB")]
    pub disk_gib: Option<u64>,
}

/// `nodes[].rootDeviceHints`, as Metal3 spells them.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RootDeviceHints {
    pub device_name: Option<String>,
    pub hctl: Option<String>,
    pub model: Option<String>,
    pub vendor: Option<String>,
    pub serial_number: Option<String>,
    pub min_size_gigabytes: Option<u64>,
    pub wwn: Option<String>,
    pub wwn_with_extension: Option<String>,
    pub wwn_vendor_extension: Option<String>,
    pub rotational: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Discovery {
    #[serde(default)]
    pub enabled: bool,
    pub action: Option<String>,
    pub retry: Option<String>,
    pub inspect: Option<bool>,
    #[serde(default)]
    pub kernel_args: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cluster {
    pub name: Option<String>,
    pub base_domain: Option<String>,
    pub install_config: Option<PathBuf>,
    /// Nodes expected per role (`master`, `worker`, …).
    pub replicas: Option<BTreeMap<String, u32>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Host {
    pub state_dir: Option<PathBuf>,
    pub http: Option<Listen>,
    pub https: Option<Listen>,
    pub dhcp: Option<Dhcp>,
    pub dhcp6: Option<Dhcp6>,
    pub tftp: Option<Tftp>,
    pub api: Option<Api>,
    pub status_from: Option<Vec<String>>,
    pub store: Option<Store>,
    pub admission: Option<Admission>,
}

/// `host.admission`: how many of each kind of work run at once.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Admission {
    pub tftp_transfers: Option<u64>,
    pub tftp_queue: Option<u64>,
    pub tftp_per_source: Option<u64>,
    pub image_transfers: Option<u64>,
    pub image_per_source: Option<u64>,
    pub image_queue: Option<u64>,
    pub http_connections: Option<u64>,
    pub queue_wait: Option<String>,
    pub provisions: Option<u64>,
}

/// `host.store`: `sqlite`, `etcd` (every key defaulted but the endpoints,
/// so an error), or a map with one of them.
#[derive(Debug)]
pub enum Store {
    Name(String),
    Map(StoreMap),
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoreMap {
    pub sqlite: Option<Sqlite>,
    pub etcd: Option<Etcd>,
}

/// `sqlite: {}`: no settings (its files are in `stateDir`).
#[derive(Debug, Deserialize)]
pub struct Sqlite {}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Etcd {
    #[serde(default)]
    pub endpoints: Vec<String>,
    pub prefix: Option<String>,
    pub timeout: Option<String>,
    pub lease_ttl: Option<String>,
    pub tls: Option<EtcdTls>,
    pub site_id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EtcdTls {
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

impl<'de> Deserialize<'de> for Store {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Store;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("`sqlite`, or a map with `etcd:`")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Store, E> {
                Ok(Store::Name(v.into()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, m: A) -> Result<Store, A::Error> {
                StoreMap::deserialize(serde::de::value::MapAccessDeserializer::new(m))
                    .map(Store::Map)
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Dhcp {
    pub listen: Option<String>,
    pub interface: Option<String>,
    pub mode: Option<String>,
    pub ha: Option<String>,
    pub server_address: Option<String>,
    pub lease_time: Option<String>,
    pub decline_hold: Option<String>,
    pub cache_threshold: Option<f64>,
    #[serde(default)]
    pub ntp_servers: Vec<String>,
    pub domain_name: Option<String>,
    pub boot_files: Option<BootFiles>,
    #[serde(default)]
    pub options: Vec<DhcpOption>,
    #[serde(default)]
    pub trusted_relays: Vec<String>,
}

/// `host.dhcp6`: bootd's DHCPv6 server.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Dhcp6 {
    pub listen: Option<String>,
    pub interface: Option<String>,
    pub server_address: Option<String>,
    pub lease_time: Option<String>,
    pub decline_hold: Option<String>,
    pub rapid_commit: Option<bool>,
    pub max_bindings: Option<u64>,
    pub boot_files: Option<BootFiles>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootFiles {
    pub bios: Option<String>,
    /// camelCase of `uefi_x86_64` would be `uefiX8664`: the documented
    /// spelling keeps the underscore, the other is accepted too.
    #[serde(rename = "uefiX86_64", alias = "uefiX8664")]
    pub uefi_x86_64: Option<String>,
    pub uefi_arm64: Option<String>,
    pub ieee1275: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DhcpOption {
    pub code: Option<u8>,
    pub text: Option<String>,
    #[serde(default)]
    pub ips: Vec<String>,
    pub hex: Option<String>,
    pub u32: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tftp {
    pub listen: Option<String>,
    pub root: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Listen {
    pub listen: Option<String>,
    /// One URL, or one per address family.
    pub url: Option<OneOrMany<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Network {
    pub name: Option<String>,
    /// One CIDR, or a list of one per family (dual stack).
    pub subnet: Option<OneOrMany<String>>,
    pub gateway: Option<OneOrMany<String>>,
    #[serde(default)]
    pub dns_servers: Vec<String>,
    pub pool: Option<OneOrMany<Pool>>,
}

/// A key that takes one value or a list (one per address family).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

impl<T> OneOrMany<T> {
    pub fn items(&self) -> Vec<&T> {
        match self {
            OneOrMany::One(t) => vec![t],
            OneOrMany::Many(v) => v.iter().collect(),
        }
    }
    /// Whether the value was written as a list (keys then carry `[j]`).
    pub fn is_list(&self) -> bool {
        matches!(self, OneOrMany::Many(_))
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pool {
    pub start: Option<String>,
    pub end: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Vips {
    /// One address, or one per family (dual stack).
    pub api: Option<OneOrMany<String>>,
    pub ingress: Option<OneOrMany<String>>,
    pub boot: Option<String>,
    pub vrrp: Option<Vrrp>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Vrrp {
    pub interface: Option<String>,
    pub router_ids: Option<VrrpIds>,
    pub advert_interval: Option<String>,
    /// The appliances' addresses: VRRP by unicast to each, not multicast.
    pub unicast_peers: Option<Vec<String>>,
    /// A program keepalived runs at every state change, and its user.
    pub notify: Option<String>,
    pub notify_user: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VrrpIds {
    pub api: Option<u8>,
    pub ingress: Option<u8>,
    pub boot: Option<u8>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Images {
    pub root: Option<PathBuf>,
    #[serde(default)]
    pub sets: BTreeMap<String, ImageSet>,
    /// OpenPGP public key files that catalog artifacts must be signed by.
    #[serde(default)]
    pub signing_keys: Vec<PathBuf>,
    pub require_signatures: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageSet {
    pub arch: Option<String>,
    pub kernel: Option<PathBuf>,
    pub initramfs: Option<PathBuf>,
    pub rootfs: Option<PathBuf>,
    /// Instead of kernel/initramfs/rootfs: a set from the image cache.
    pub catalog: Option<Catalog>,
    /// The metal disk image coreos-installer writes, and its signature.
    pub metal: Option<PathBuf>,
    pub metal_signature: Option<PathBuf>,
}

/// `images.sets.<name>.catalog`: a CoreOS stream, version (or "latest"),
/// arch and platform, resolved against the image cache (docs/images.md).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Catalog {
    pub stream: Option<String>,
    pub version: Option<String>,
    pub arch: Option<String>,
    pub platform: Option<String>,
    pub stream_url: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    pub name: Option<String>,
    pub role: Option<String>,
    #[serde(default)]
    pub macs: Vec<String>,
    /// One address, or a list of one per family (dual stack).
    pub ip: Option<OneOrMany<String>>,
    pub arch: Option<String>,
    pub firmware: Option<String>,
    pub image: Option<String>,
    pub install_disk: Option<String>,
    pub root_device_hints: Option<RootDeviceHints>,
    /// The node's incarnation: tokens issued under another are refused.
    pub epoch: Option<u64>,
    pub live: Option<bool>,
    #[serde(default)]
    pub kernel_args: Vec<String>,
    pub network: Option<StaticNetwork>,
    /// The NMState subset (`crate::nmstate`), as install-config's hosts.
    pub network_config: Option<crate::nmstate::NetworkConfig>,
    pub ipxe_binary: Option<String>,
    #[serde(default)]
    pub dhcp_options: Vec<DhcpOption>,
    pub fetch_from: Option<String>,
    pub addresses: Option<Vec<String>>,
    /// The switch port a relay names in option 82 (circuit-id, remote-id).
    pub relay: Option<RelayId>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RelayId {
    pub circuit_id: Option<String>,
    pub remote_id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StaticNetwork {
    pub interface: Option<String>,
    /// address/prefix, or one per family.
    pub address: Option<OneOrMany<String>>,
    pub gateway: Option<OneOrMany<String>>,
    #[serde(default)]
    pub dns: Vec<String>,
    pub mtu: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ignition {
    pub dir: Option<PathBuf>,
    #[serde(default)]
    pub roles: BTreeMap<String, PathBuf>,
    pub token_ttl: Option<String>,
    #[serde(default)]
    pub over_https: bool,
    pub after_install: Option<String>,
    pub single_use_tokens: Option<bool>,
}

/// `host.api`: bootd's controller API (docs/api.md).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Api {
    pub listen: Option<String>,
    pub url: Option<String>,
    pub tokens: Option<SecretRef>,
    pub deadline: Option<String>,
    pub machine_config_within: Option<String>,
    pub equinix: Option<Equinix>,
    pub powervs: Option<PowerVs>,
    pub local: Option<Local>,
    pub redfish: Option<Bmc>,
    pub ipmi: Option<Bmc>,
    pub bmc_files: Option<PathBuf>,
    pub bmc_credentials: Option<Vec<BmcCredential>>,
    pub alibaba: Option<Alibaba>,
    #[serde(default)]
    pub fetch_from: BTreeMap<String, String>,
    /// A kubeconfig file (a path relative to the site file): the cluster
    /// whose kubelet CSRs the controller approves.
    pub kubeconfig: Option<PathBuf>,
}

/// `host.api.bmcCredentials[]`: a BMC password reference (a name ending
/// in `*`: every one under it) and the BMC origins it may be sent to.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BmcCredential {
    pub password: Option<SecretRef>,
    #[serde(default)]
    pub origins: Vec<String>,
    #[serde(default)]
    pub allow_plain_http: bool,
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

/// `host.api.alibaba`: the Alibaba Cloud ECS account and where the
/// cluster's instances go (docs/platforms.md).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Alibaba {
    pub region_id: Option<String>,
    pub endpoint: Option<String>,
    pub access_key_id: Option<SecretRef>,
    pub access_key_secret: Option<SecretRef>,
    pub security_token: Option<SecretRef>,
    pub infra_id: Option<String>,
    #[serde(default)]
    pub zones: Vec<String>,
    #[serde(default)]
    pub v_switches: BTreeMap<String, String>,
    pub security_group_id: Option<String>,
    #[serde(default)]
    pub instance_types: BTreeMap<String, String>,
    pub system_disk: Option<AlibabaDisk>,
    pub image_id: Option<String>,
    pub image_set: Option<String>,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AlibabaDisk {
    pub category: Option<String>,
    pub size: Option<u32>,
    pub performance_level: Option<String>,
}

/// `host.api.redfish`, `host.api.ipmi`: machines behind BMCs (each node's
/// BMC address and credentials come with the node).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bmc {
    pub power_off_timeout: Option<String>,
}

/// Where a secret is read from: a file, or a systemd credential
/// (`$CREDENTIALS_DIRECTORY/<name>`), or an environment variable of the
/// daemon. Never the secret itself.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretRef {
    pub file: Option<PathBuf>,
    pub credential: Option<String>,
    pub env: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Equinix {
    pub base_url: Option<String>,
    pub project_id: Option<String>,
    pub api_key: Option<SecretRef>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PowerVs {
    pub base_url: Option<String>,
    pub iam_url: Option<String>,
    pub cloud_instance_id: Option<String>,
    pub crn: Option<String>,
    pub api_key: Option<SecretRef>,
}

/// `host.api.local`: QEMU VMs on a local bridge (the lab's provider).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Local {
    pub qemu: Option<String>,
    pub bridge: Option<String>,
    pub netns: Option<String>,
    pub firmware: Option<String>,
    pub memory: Option<u32>,
    pub state_dir: Option<PathBuf>,
    pub ovmf_code: Option<PathBuf>,
    pub ovmf_vars: Option<PathBuf>,
}

/// `<stateDir>/nodes.yaml`: nodes added through bootd's API, in the same
/// format as the site's `nodes:`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Overlay {
    #[serde(default)]
    pub nodes: Vec<Node>,
}

/// `lb:` in a site file, or the whole of a standalone lbd file.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lb {
    pub listen: Option<String>,
    pub admin_listen: Option<String>,
    pub balance: Option<String>,
    pub check: Option<LbCheck>,
    pub limits: Option<LbLimits>,
    pub bootstrap: Option<LbBootstrap>,
    pub frontends: Option<LbFrontends>,
    #[serde(default)]
    pub services: Vec<LbService>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LbFrontends {
    pub api: Option<LbFrontend>,
    pub machine_config: Option<LbFrontend>,
    pub ingress_http: Option<LbFrontend>,
    pub ingress_https: Option<LbFrontend>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LbFrontend {
    pub enabled: Option<bool>,
    pub listen: Option<String>,
    pub balance: Option<String>,
    pub check: Option<LbCheck>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LbCheck {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub path: Option<String>,
    pub port: Option<u16>,
    pub interval: Option<String>,
    pub fast_interval: Option<String>,
    pub timeout: Option<String>,
    pub rise: Option<u32>,
    pub fall: Option<u32>,
    pub ca: Option<PathBuf>,
    pub server_name: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LbLimits {
    pub max_conns: Option<u32>,
    pub max_conns_per_source: Option<u32>,
    pub connect_timeout: Option<String>,
    pub idle_timeout: Option<String>,
    pub retry_unanswered: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LbBootstrap {
    pub auto_complete_after: Option<String>,
    pub drain_timeout: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LbService {
    pub name: Option<String>,
    pub listen: Option<String>,
    #[serde(default)]
    pub backends: Vec<String>,
    pub balance: Option<String>,
    pub check: Option<LbCheck>,
}
