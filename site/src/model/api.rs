//! The controller API's part of the model: `host.api`, its provider
//! accounts and secret references.

use super::FetchFrom;
use crate::Secret;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// `host.api`: bootd's controller API.
#[derive(Debug, Clone)]
pub struct Api {
    pub listen: SocketAddr,
    /// The base URL clients use (its host goes into the serving certificate).
    pub url: Option<String>,
    /// Bearer tokens, one per line.
    pub tokens: SecretRef,
    /// How long a node may take from creation to Ready before it is failed.
    pub deadline: Duration,
    /// How long after its Ignition a node that merges the machine config
    /// may take to reach lbd's machine-config frontend before its
    /// `MachineConfigServed` is False.
    pub machine_config_within: Duration,
    pub equinix: Option<EquinixAccount>,
    pub powervs: Option<PowerVsAccount>,
    pub local: Option<LocalVms>,
    pub redfish: Option<BmcDriver>,
    pub ipmi: Option<BmcDriver>,
    /// The one directory whose files a node's BMC `password: {file}` and
    /// `caBundle` may name, when set; the controller's default otherwise
    /// (`runtime::paths::bmc_files`: `/etc/bare-metal-boot/bmc`, or
    /// `/etc/bootd/bmc` while only it exists).
    pub bmc_files: Option<PathBuf>,
    /// `host.api.bmcCredentials`: which BMC origins each password reference
    /// may be sent to ([`super::bmc_binding`]); `None`: any reference to
    /// any origin (warned by `--check-config`).
    pub bmc_credentials: Option<Vec<super::BmcCredential>>,
    pub alibaba: Option<AlibabaAccount>,
    /// Per provider: where its nodes' scripts may be fetched from
    /// (a node's own `fetchFrom` wins).
    pub fetch_from: BTreeMap<String, FetchFrom>,
    /// `host.api.kubeconfig`: how the controller reaches the cluster's API
    /// (kubelet CSRs, the bootstrap ConfigMap); `None`: it does not.
    pub kubeconfig: Option<Kubeconfig>,
}

/// A kubeconfig's current context, read and checked when the site loads:
/// the cluster's API server, the CA that signs its certificate, and the
/// credentials. Its `Debug` prints no key and no token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kubeconfig {
    /// The file it was read from.
    pub path: PathBuf,
    /// `current-context`.
    pub context: String,
    /// The cluster's `server`, `https://host[:port]`, no trailing slash.
    pub server: String,
    /// PEM: the CA certificates the server's certificate must chain to.
    pub ca_pem: Vec<u8>,
    pub auth: KubeAuth,
}

/// How the controller authenticates to the cluster's API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubeAuth {
    /// A client certificate and its key (PEM).
    ClientCert {
        cert_pem: Vec<u8>,
        key_pem: Secret<Vec<u8>>,
    },
    /// A bearer token (`token`, or the content of `tokenFile`).
    Token(Secret<String>),
}

/// `host.api.alibaba`: an Alibaba Cloud ECS account, the region and where in
/// it the cluster's instances go; a node's `provider.alibaba` may override
/// the zone, instance type, image and system disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlibabaAccount {
    /// e.g. `cn-hangzhou`, `ap-southeast-1`.
    pub region_id: String,
    /// Without a trailing slash; default `https://ecs.<region>.aliyuncs.com`.
    pub endpoint: String,
    pub access_key_id: SecretRef,
    pub access_key_secret: SecretRef,
    /// An STS token, with a temporary AccessKey.
    pub security_token: Option<SecretRef>,
    /// The cluster's ID in the ownership tag `kubernetes.io/cluster/<id>`;
    /// `None`: the cluster's name.
    pub infra_id: Option<String>,
    /// Zones of the region, each with its vSwitch.
    pub zones: Vec<String>,
    pub v_switches: BTreeMap<String, String>,
    pub security_group_id: String,
    /// ECS instance type by role (`bootstrap` defaults to `master`'s).
    pub instance_types: BTreeMap<String, String>,
    pub system_disk: AlibabaDisk,
    /// The RHCOS/FCOS image in the region: given, or from `image_set`.
    pub image_id: String,
    /// A `catalog:` image set whose cached stream metadata names the
    /// region's image (`images.aliyun.regions.<region>.image`).
    pub image_set: Option<String>,
    /// The user's tags, on every instance beside bootd's own.
    pub tags: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlibabaDisk {
    /// `cloud_essd`, `cloud_essd_entry`, `cloud_auto`, `cloud_ssd`, `cloud_efficiency`.
    pub category: String,
    pub size_gib: u32,
    /// `PL0`..`PL3`, ESSD only.
    pub performance_level: Option<String>,
}

/// `host.api.redfish`, `host.api.ipmi`: the BMC providers are enabled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BmcDriver {
    /// How long a graceful power-off may take before it is forced.
    pub power_off_timeout: Duration,
}

/// `host.api.local`: the local provider starts a QEMU VM per node, with a
/// tap on `bridge` and the node's MAC, network-booting from this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalVms {
    /// The QEMU binary (a name looked up in PATH, or a path).
    pub qemu: String,
    /// The bridge the VMs' taps join (the lab's `br0`).
    pub bridge: String,
    /// A network namespace to start QEMU in (`ip netns exec`); none: bootd's own.
    pub netns: Option<String>,
    pub firmware: LocalFirmware,
    /// Guest memory, MiB.
    pub memory_mib: u32,
    /// Where each VM's pidfile, console log and QEMU log go
    /// (`<dir>/<node>/`); none: `<bootd's state dir>/vms`.
    pub state_dir: Option<PathBuf>,
    /// OVMF code and variable-store template (`ovmf-ipxe`).
    pub ovmf_code: PathBuf,
    pub ovmf_vars: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalFirmware {
    /// SeaBIOS + the NIC's iPXE option ROM.
    SeabiosIpxe,
    /// OVMF (pflash) + the NIC's iPXE EFI option ROM.
    OvmfIpxe,
}

impl LocalFirmware {
    pub fn parse(s: &str) -> Option<LocalFirmware> {
        match s {
            "seabios-ipxe" => Some(LocalFirmware::SeabiosIpxe),
            "ovmf-ipxe" => Some(LocalFirmware::OvmfIpxe),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            LocalFirmware::SeabiosIpxe => "seabios-ipxe",
            LocalFirmware::OvmfIpxe => "ovmf-ipxe",
        }
    }
}

/// Where a secret is read from. The secret is read when needed, never
/// stored in the site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretRef {
    File(PathBuf),
    /// A systemd credential: `$CREDENTIALS_DIRECTORY/<name>`.
    Credential(String),
    /// An environment variable of the daemon (not of a child it starts).
    Env(String),
}

/// A portable environment variable name: letters, digits and `_`, not
/// starting with a digit.
pub fn env_name_ok(v: &str) -> bool {
    !v.is_empty()
        && !v.starts_with(|c: char| c.is_ascii_digit())
        && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[derive(Debug, Clone)]
pub struct EquinixAccount {
    /// Without a trailing slash, e.g. `https://api.equinix.com/metal/v1`.
    pub base_url: String,
    pub project_id: String,
    pub api_key: SecretRef,
}

#[derive(Debug, Clone)]
pub struct PowerVsAccount {
    /// Regional endpoint, e.g. `https://us-south.power-iaas.cloud.ibm.com`.
    pub base_url: String,
    /// IAM, e.g. `https://iam.cloud.ibm.com`.
    pub iam_url: String,
    pub cloud_instance_id: String,
    pub crn: String,
    pub api_key: SecretRef,
}
