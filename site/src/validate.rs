//! Reading, parsing and validating a site file. Every problem is collected
//! (unknown keys, bad values, broken cross-references) and reported at once.

use crate::mac::Mac;
use crate::model::*;
use crate::{wire, Problem, Secret, SiteError};
use ipnet::IpNet;
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

mod catalog_sets;
mod controller;
mod signing_keys;
pub use controller::OVERLAY_FILE;
pub use controller::{alibaba_disk_problems, alibaba_id_ok, region_id_ok, zone_in_region};
mod lb;
pub use lb::load_lb;
mod boot_files;
mod dhcp6;
mod networks;
use networks::networks;
mod dns;
mod host;
mod install_config;
mod store;
mod vips;
use install_config::{read_install_config, InstallConfig};
use vips::vips;
mod ignition;
mod node;
use boot_files::boot_file;
use host::{dhcp_options, host};
use ignition::ignition;
use node::node;

/// A site node that names no disk to install to and does not say it runs live.
pub const NO_DISK_TARGET: &str = "names no disk to install to: give rootDeviceHints (Metal3's) or \
     installDisk for the disk it installs to, or live: true for a node that runs the live \
     system and installs nothing";
mod inspection;
use inspection::{inspection, metal_image};

const DEFAULT_STATE_DIR: &str = "/var/lib/bootd";
const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(24 * 3600);

/// Reads and validates the site file at `path`, with the node overlay
/// (`<stateDir>/nodes.yaml`) if there is one.
pub fn load(path: &Path) -> Result<Site, SiteError> {
    load_inner(path, None, None)
}

/// As [`load`], but with `overlay` as the node overlay's content instead of
/// the file's: bootd's API validates a candidate overlay this way, exactly
/// as every daemon will, before it replaces the file.
pub fn load_with_overlay(path: &Path, overlay: &str) -> Result<Site, SiteError> {
    load_inner(path, Some(overlay.to_string()), None)
}

/// Site files parsed in this process (see [`loads`]).
static LOADS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many times this process has parsed a site file ([`load`] and
/// [`load_with_overlay`]): a test's way to check that a change of the site
/// is parsed once, however many daemons the process runs.
pub fn loads() -> u64 {
    LOADS.load(std::sync::atomic::Ordering::Relaxed)
}

pub(crate) fn load_inner(
    path: &Path,
    overlay: Option<String>,
    text: Option<String>,
) -> Result<Site, SiteError> {
    LOADS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut cx = Cx::new(path);
    cx.overlay_text = overlay;
    let text = match text.map_or_else(|| std::fs::read_to_string(path), Ok) {
        Ok(t) => t,
        Err(e) => {
            cx.err("", format!("cannot read site file: {e}"));
            return Err(cx.into_error());
        }
    };
    let wire = parse(&text, &mut cx);
    let site = wire.and_then(|w| validate(w, &mut cx));
    match site {
        Some(s) if cx.problems.is_empty() => Ok(s),
        _ => Err(cx.into_error()),
    }
}

struct Cx {
    file: PathBuf,
    dir: PathBuf,
    problems: Vec<Problem>,
    /// Replaces the overlay file's content (see [`load_with_overlay`]).
    overlay_text: Option<String>,
}

impl Cx {
    fn new(path: &Path) -> Cx {
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        Cx {
            file: path.to_path_buf(),
            dir,
            problems: Vec::new(),
            overlay_text: None,
        }
    }
    fn err(&mut self, key: impl Into<String>, reason: impl Into<String>) {
        self.problems.push(Problem {
            file: self.file.clone(),
            key: key.into(),
            reason: reason.into(),
        });
    }
    fn err_in(&mut self, file: &Path, key: impl Into<String>, reason: impl Into<String>) {
        self.problems.push(Problem {
            file: file.to_path_buf(),
            key: key.into(),
            reason: reason.into(),
        });
    }
    fn into_error(self) -> SiteError {
        SiteError {
            problems: self.problems,
        }
    }
    /// A path from the site file, relative to the site file's directory.
    fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.dir.join(p)
        }
    }
}

fn parse<T: serde::de::DeserializeOwned>(text: &str, cx: &mut Cx) -> Option<T> {
    let mut unknown = Vec::new();
    let mut on_unknown = |p: serde_ignored::Path<'_>| unknown.push(ignored_path(&p));
    let de = serde_yaml_ng::Deserializer::from_str(text);
    let ignored = serde_ignored::Deserializer::new(de, &mut on_unknown);
    let result: Result<T, _> = serde_path_to_error::deserialize(ignored);
    for key in unknown {
        cx.err(
            key,
            "unknown key (see docs/site.md for the keys a site file takes)",
        );
    }
    match result {
        Ok(w) => Some(w),
        Err(e) => {
            let key = e.path().to_string();
            let key = if key == "." { String::new() } else { key };
            cx.err(key, e.into_inner().to_string());
            None
        }
    }
}

fn ignored_path(p: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path as P;
    match p {
        P::Root => String::new(),
        P::Seq { parent, index } => format!("{}[{index}]", ignored_path(parent)),
        P::Map { parent, key } => {
            let parent = ignored_path(parent);
            if parent.is_empty() {
                key.clone()
            } else {
                format!("{parent}.{key}")
            }
        }
        P::Some { parent } | P::NewtypeStruct { parent } | P::NewtypeVariant { parent } => {
            ignored_path(parent)
        }
    }
}

fn validate(w: wire::SiteFile, cx: &mut Cx) -> Option<Site> {
    let ic = w
        .cluster
        .install_config
        .as_deref()
        .and_then(|p| read_install_config(cx, p));
    let cluster = cluster(cx, &w.cluster, ic.as_ref());
    let mut w = w;
    if let Some(ic) = &ic {
        if let Some(k) = &ic.ssh_key {
            if !w.ssh_keys.iter().any(|s| s.trim() == k) {
                w.ssh_keys.push(k.clone());
            }
        }
    }
    let host = host(cx, &w.host);
    // The installer and the appliance name one workspace.
    let pv = host.as_ref().and_then(|h| h.api.as_ref()?.powervs.as_ref());
    let guid = ic
        .as_ref()
        .and_then(|i| i.powervs.as_ref()?.service_instance.as_ref());
    if let (Some(pv), Some(guid)) = (pv, guid) {
        if pv.cloud_instance_id != *guid {
            cx.err(
                "host.api.powervs.crn",
                format!(
                    "names workspace {}, the install-config's platform.powervs names {guid}",
                    pv.cloud_instance_id
                ),
            );
        }
    }
    let networks = networks(cx, &w.networks, ic.as_ref());
    // A cloud provider's machine is served once its address is in a site
    // network; with none, no node it makes could ever be.
    let api = host.as_ref().and_then(|h| h.api.as_ref());
    let assigning = api.map(|a| {
        [
            ("equinix", a.equinix.is_some()),
            ("powervs", a.powervs.is_some()),
            ("alibaba", a.alibaba.is_some()),
        ]
    });
    for (p, _) in assigning.into_iter().flatten().filter(|(_, on)| *on) {
        if networks.is_empty() {
            cx.err(
                "networks",
                format!("host.api.{p} gives its machines their addresses, and the site has no network they could be in: list the subnets they get addresses from (or name an install-config with networking.machineNetwork)"),
            );
        }
    }
    if let Some(h) = &host {
        dhcp6::check(cx, h, &networks);
    }
    let vips = vips(cx, w.vips.as_ref(), &networks, host.as_ref());
    networks::pools_hold_no_service(cx, &w.networks, &networks, host.as_ref(), vips.as_ref());
    let (images, broken_images) = images(cx, w.images.as_ref());
    let inspection = inspection(cx, w.inspection.as_ref());
    let mut nodes = Vec::new();
    let overlay_path = controller::overlay_path(cx, &w.host);
    let overlay = controller::read_overlay(cx, &overlay_path);
    let mut overlay_names = Vec::new();
    {
        let site_file = cx.file.clone();
        let mut names: HashMap<String, String> = HashMap::new();
        let mut macs: HashMap<Mac, (usize, String)> = HashMap::new();
        let mut ips: HashMap<IpAddr, String> = HashMap::new();
        let mut ports: HashMap<(Option<String>, Option<String>), String> = HashMap::new();
        // Site nodes, then overlay nodes (their problems name the overlay file).
        let all = w
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (false, i, n))
            .chain(overlay.iter().enumerate().map(|(i, n)| (true, i, n)));
        // Uniqueness is checked on the raw values, so a node that is broken
        // in another way is still compared with the others.
        for (g, (from_overlay, i, wn)) in all.enumerate() {
            cx.file = if from_overlay {
                overlay_path.clone()
            } else {
                site_file.clone()
            };
            let here = if from_overlay {
                format!("nodes[{i}] of {}", overlay_path.display())
            } else {
                format!("nodes[{i}]")
            };
            if let Some(name) = &wn.name {
                if let Some(j) = names.insert(name.clone(), here.clone()) {
                    cx.err(
                        format!("nodes[{i}].name"),
                        format!("duplicate node name {name:?} (also {j})"),
                    );
                }
            }
            for (k, m) in wn.macs.iter().enumerate() {
                if let Ok(m) = m.parse::<Mac>() {
                    if let Some((_, j)) = macs.insert(m, (g, here.clone())).filter(|(j, _)| *j != g)
                    {
                        cx.err(
                            format!("nodes[{i}].macs[{k}]"),
                            format!("duplicate MAC {m} (also in {j})"),
                        );
                    }
                }
            }
            if let Some(r) = &wn.relay {
                let port = (r.circuit_id.clone(), r.remote_id.clone());
                let trusted = host
                    .as_ref()
                    .and_then(|h| h.dhcp.as_ref())
                    .is_some_and(|d| !d.trusted_relays.is_empty());
                if !trusted {
                    cx.err(
                        format!("nodes[{i}].relay"),
                        "needs host.dhcp.trustedRelays: the relays whose option 82 is believed \
                         (a client can write any option 82 itself)",
                    );
                }
                if port != (None, None) {
                    if let Some(j) = ports.insert(port, here.clone()) {
                        cx.err(
                            format!("nodes[{i}].relay"),
                            format!("the same relay port as {j}: one port names one machine"),
                        );
                    }
                }
            }
            if let Some(written) = &wn.ip {
                for (k, s) in written.items().into_iter().enumerate() {
                    let Ok(ip) = s.parse::<IpAddr>() else {
                        continue;
                    };
                    if let Some(j) = ips.insert(ip, here.clone()) {
                        let key = if written.is_list() {
                            format!("nodes[{i}].ip[{k}]")
                        } else {
                            format!("nodes[{i}].ip")
                        };
                        cx.err(key, format!("duplicate IP {ip} (also {j})"));
                    }
                }
            }
            // A site node network-boots: one that names no disk would run
            // the live system, be marked installed, and be told to boot an
            // empty disk at its next network boot. Overlay nodes are the
            // controller's, checked per provider when they are created.
            if !from_overlay
                && wn.install_disk.is_none()
                && wn.root_device_hints.is_none()
                && wn.live != Some(true)
            {
                cx.err(format!("nodes[{i}]"), NO_DISK_TARGET);
            }
            if let Some(n) = node(cx, i, wn, &networks, &images, &broken_images, &inspection) {
                if from_overlay {
                    overlay_names.push(n.name.clone());
                }
                nodes.push(n);
            }
        }
        cx.file = site_file;
    }
    // Roles as written, so a node broken in another way still has its role checked.
    let raw_roles: Vec<(String, String)> = w
        .nodes
        .iter()
        .chain(overlay.iter())
        .filter_map(|n| Some((n.role.clone()?, n.name.clone().unwrap_or_default())))
        .filter(|(r, _)| is_dns_label(r))
        .collect();
    if let Some(c) = &cluster {
        for (role, want) in &c.replicas {
            let have = raw_roles.iter().filter(|(r, _)| r == role).count();
            if have > *want as usize {
                cx.err(
                    format!("cluster.replicas.{role}"),
                    format!("{have} nodes have role {role}, more than the {want} the cluster has (cluster.replicas, or the install-config's replicas)"),
                );
            }
        }
    }
    let ignition = ignition(cx, w.ignition.as_ref(), &raw_roles, host.as_ref());
    let mut ssh_keys = Vec::new();
    for (i, k) in w.ssh_keys.iter().enumerate() {
        let k = k.trim();
        let known = ["ssh-", "ecdsa-sha2-", "sk-ssh-", "sk-ecdsa-"]
            .iter()
            .any(|p| k.starts_with(p));
        if !known || k.contains(['\n', '\r']) {
            cx.err(
                format!("sshKeys[{i}]"),
                "not an OpenSSH public key line (want e.g. 'ssh-ed25519 AAAA... comment')",
            );
        } else {
            ssh_keys.push(k.to_string());
        }
    }
    let dns = dns::dns(
        cx,
        w.dns.as_ref(),
        &dns::Facts {
            cluster: cluster.as_ref(),
            host: host.as_ref(),
            networks: &networks,
            nodes: &nodes,
        },
    );
    let cluster = cluster?;
    let mut host = host?;
    store::defaults(&mut host.store, &cluster);
    if let Some(a) = host.api.as_mut().and_then(|a| a.alibaba.as_mut()) {
        controller::resolve_alibaba_image(cx, a, &images);
    }
    if let Some(d) = host.dhcp.as_mut() {
        if d.domain_name.is_empty() {
            d.domain_name = cluster.domain();
        }
    }
    let lb = lb::lb(cx, "lb.", w.lb.as_ref(), vips.as_ref());
    let overlay = Overlay {
        path: overlay_path,
        nodes: overlay_names,
    };
    let discovery = discovery(cx, w.discovery.as_ref(), &networks, &inspection);
    Some(Site {
        discovery,
        inspection,
        source: cx.file.clone(),
        cluster,
        host,
        networks,
        vips: vips?,
        images,
        nodes,
        ignition: ignition?,
        ssh_keys,
        overlay,
        lb: lb?,
        dns: dns?,
    })
}

fn discovery(
    cx: &mut Cx,
    w: Option<&wire::Discovery>,
    networks: &[Network],
    inspection: &Inspection,
) -> Discovery {
    let mut d = Discovery {
        enabled: false,
        action: DiscoveryAction::Wait,
        retry: Duration::from_secs(30),
        inspect: false,
        kernel_args: Vec::new(),
    };
    let Some(w) = w else { return d };
    d.enabled = w.enabled;
    d.inspect = w.inspect.unwrap_or(false);
    if d.inspect && inspection.agents.is_empty() {
        cx.err(
            "discovery.inspect",
            "needs an inspection agent (inspection.agents): the machine's live system runs it",
        );
    }
    for (j, a) in w.kernel_args.iter().enumerate() {
        if node::arg_ok(a) {
            d.kernel_args.push(a.clone());
        } else {
            cx.err(
                format!("discovery.kernelArgs[{j}]"),
                format!("{a:?}: one argument per entry, no spaces, quotes or control characters"),
            );
        }
    }
    match w.action.as_deref() {
        None | Some("wait") => {}
        Some("poweroff") => d.action = DiscoveryAction::PowerOff,
        Some(a) => cx.err(
            "discovery.action",
            format!("{a:?}: want wait (ask again every retry) or poweroff"),
        ),
    }
    if let Some(r) = w.retry.as_deref() {
        match duration(r) {
            Some(t) if t >= Duration::from_secs(5) && t <= Duration::from_secs(3600) => d.retry = t,
            _ => cx.err(
                "discovery.retry",
                format!("{r:?} is not a duration from 5s to 1h"),
            ),
        }
    }
    if d.enabled
        && !networks
            .iter()
            .any(|n| n.subnets.iter().any(|s| s.pool.is_some()))
    {
        cx.err(
            "discovery.enabled",
            "needs a dynamic DHCP pool (networks[].pool): an unknown machine needs an address to report itself",
        );
    }
    d
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_dns_name(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

fn cluster(cx: &mut Cx, w: &wire::Cluster, ic: Option<&InstallConfig>) -> Option<Cluster> {
    let mut pick = |key: &str,
                    ic_key: &str,
                    site: &Option<String>,
                    from_ic: Option<&String>,
                    icpath: Option<&Path>| match (site, from_ic) {
        (Some(a), Some(b)) if a != b => {
            cx.err(
                format!("cluster.{key}"),
                format!(
                    "{a:?} conflicts with {ic_key} {b:?} in {}",
                    icpath.map(|p| p.display().to_string()).unwrap_or_default()
                ),
            );
            None
        }
        (Some(a), _) => Some(a.clone()),
        (None, Some(b)) => Some(b.clone()),
        (None, None) => {
            cx.err(
                format!("cluster.{key}"),
                "required (or give cluster.installConfig)",
            );
            None
        }
    };
    let icp = ic.map(|i| i.path.as_path());
    let name = pick(
        "name",
        "metadata.name",
        &w.name,
        ic.and_then(|i| i.name.as_ref()),
        icp,
    );
    let base = pick(
        "baseDomain",
        "baseDomain",
        &w.base_domain,
        ic.and_then(|i| i.base_domain.as_ref()),
        icp,
    );
    if let Some(n) = &name {
        if !is_dns_label(n) {
            cx.err(
                "cluster.name",
                format!("{n:?} is not a DNS label (lower-case letters, digits, '-', at most 63)"),
            );
        }
    }
    if let Some(b) = &base {
        if !is_dns_name(b) {
            cx.err("cluster.baseDomain", format!("{b:?} is not a DNS name"));
        }
    }
    let mut replicas = ic.map(|i| i.replicas.clone()).unwrap_or_default();
    for (role, n) in w.replicas.iter().flatten() {
        match replicas.get(role) {
            Some(m) if m != n => cx.err(
                format!("cluster.replicas.{role}"),
                format!(
                    "{n} conflicts with {m} in {}",
                    icp.map(|p| p.display().to_string()).unwrap_or_default()
                ),
            ),
            _ => {
                replicas.insert(role.clone(), *n);
            }
        }
    }
    Some(Cluster {
        name: name?,
        base_domain: base?,
        replicas,
        powervs: ic.and_then(|i| i.powervs.clone()),
    })
}

fn parse_ip(cx: &mut Cx, key: &str, s: &str) -> Option<IpAddr> {
    match s.parse() {
        Ok(a) => Some(a),
        Err(_) => {
            cx.err(key, format!("{s:?} is not an IP address"));
            None
        }
    }
}

/// An image path must stay below the image root: relative, no `..`.
fn rel_path(cx: &mut Cx, key: String, p: &Path) -> Option<String> {
    let ok = !p.as_os_str().is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)));
    let s = p.to_str();
    match (ok, s) {
        (true, Some(s))
            if !s.contains(|c: char| {
                c.is_whitespace() || c.is_control() || c == '?' || c == '#'
            }) =>
        {
            Some(s.to_string())
        }
        _ => {
            cx.err(key, format!("{:?} must be a plain relative path below images.root (no '..', no leading '/', no spaces)", p.display()));
            None
        }
    }
}

/// Returns the valid image sets, and the names of the broken ones (already
/// reported; nodes naming them are not blamed again).
fn images(cx: &mut Cx, w: Option<&wire::Images>) -> (Images, Vec<String>) {
    let root = w
        .and_then(|i| i.root.as_deref())
        .map(|p| cx.resolve(p))
        .unwrap_or_else(|| cx.resolve(Path::new("images")));
    let mut sets = BTreeMap::new();
    let mut broken = Vec::new();
    for (name, s) in w.map(|i| &i.sets).into_iter().flatten() {
        if let Some(c) = &s.catalog {
            match catalog_sets::image_set(cx, &root, name, s, c) {
                Some(set) => {
                    sets.insert(name.clone(), set);
                }
                None => broken.push(name.clone()),
            }
            continue;
        }
        let k = |f: &str| format!("images.sets.{name}.{f}");
        let arch = match s.arch.as_deref() {
            Some(a) => Arch::parse(a).or_else(|| {
                cx.err(
                    k("arch"),
                    format!("{a:?} is not one of x86_64, aarch64, ppc64le"),
                );
                None
            }),
            None => {
                cx.err(k("arch"), "required");
                None
            }
        };
        let req = |cx: &mut Cx, f: &str, p: &Option<PathBuf>| match p {
            Some(p) => rel_path(cx, k(f), p),
            None => {
                cx.err(k(f), "required");
                None
            }
        };
        let kernel = req(cx, "kernel", &s.kernel);
        let initramfs = req(cx, "initramfs", &s.initramfs);
        let rootfs = s.rootfs.as_ref().map(|p| rel_path(cx, k("rootfs"), p));
        let metal = metal_image(cx, &k, s);
        match (arch, kernel, initramfs, rootfs, metal) {
            (Some(arch), Some(kernel), Some(initramfs), rootfs, Some(metal))
                if !matches!(rootfs, Some(None)) =>
            {
                sets.insert(
                    name.clone(),
                    ImageSet {
                        arch,
                        kernel,
                        initramfs,
                        rootfs: rootfs.flatten(),
                        metal,
                        catalog: None,
                    },
                );
            }
            _ => broken.push(name.clone()),
        }
    }
    (signing_keys::with_keys(cx, w, root, sets), broken)
}

/// `500ms`, `30s`, `5m`, `24h`, `7d`; never zero. The one duration syntax
/// of every key of the site.
pub(crate) fn duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit())?);
    let n: u64 = num.parse().ok()?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.checked_mul(60)?),
        "h" => Duration::from_secs(n.checked_mul(3600)?),
        "d" => Duration::from_secs(n.checked_mul(86400)?),
        _ => return None,
    };
    (!d.is_zero()).then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration("30m"), Some(Duration::from_secs(1800)));
        assert_eq!(duration("24h"), Some(Duration::from_secs(86400)));
        assert_eq!(duration("0s"), None);
        assert_eq!(duration("h"), None);
        assert_eq!(duration("5y"), None);
        assert_eq!(duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(duration("7d"), Some(Duration::from_secs(7 * 86400)));
        assert_eq!(duration("5"), None);
        assert_eq!(duration("0ms"), None);
        assert_eq!(duration("99999999999999999999d"), None);
    }

    #[test]
    fn dns_labels() {
        assert!(is_dns_label("master-0"));
        assert!(!is_dns_label("Master"));
        assert!(!is_dns_label("-a"));
        assert!(is_dns_name("example.test"));
        assert!(!is_dns_name("example..test"));
    }
}
