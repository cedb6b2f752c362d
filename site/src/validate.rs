//! Reading, parsing and validating a site file. Every problem is collected
//! (unknown keys, bad values, broken cross-references) and reported at once.

use crate::mac::Mac;
use crate::model::*;
use crate::{wire, Problem, Secret, SiteError};
use ipnet::IpNet;
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

mod catalog_sets;

mod controller;
pub use controller::OVERLAY_FILE;
mod lb;
pub use lb::load_lb;

mod dns;

const DEFAULT_STATE_DIR: &str = "/var/lib/bootd";
const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(24 * 3600);

/// Reads and validates the site file at `path`, with the node overlay
/// (`<stateDir>/nodes.yaml`) if there is one.
pub fn load(path: &Path) -> Result<Site, SiteError> {
    load_inner(path, None)
}

/// As [`load`], but with `overlay` as the node overlay's content instead of
/// the file's: bootd's API validates a candidate overlay this way, exactly
/// as every daemon will, before it replaces the file.
pub fn load_with_overlay(path: &Path, overlay: &str) -> Result<Site, SiteError> {
    load_inner(path, Some(overlay.to_string()))
}

/// Site files parsed in this process (see [`loads`]).
static LOADS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many times this process has parsed a site file ([`load`] and
/// [`load_with_overlay`]): a test's way to check that a change of the site
/// is parsed once, however many daemons the process runs.
pub fn loads() -> u64 {
    LOADS.load(std::sync::atomic::Ordering::Relaxed)
}

fn load_inner(path: &Path, overlay: Option<String>) -> Result<Site, SiteError> {
    LOADS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut cx = Cx::new(path);
    cx.overlay_text = overlay;
    let text = match std::fs::read_to_string(path) {
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

/// Facts read from OpenShift's install-config.yaml.
struct InstallConfig {
    path: PathBuf,
    name: Option<String>,
    base_domain: Option<String>,
    machine_networks: Vec<IpNet>,
}

fn read_install_config(cx: &mut Cx, p: &Path) -> Option<InstallConfig> {
    let path = cx.resolve(p);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            cx.err(
                "cluster.installConfig",
                format!("cannot read {}: {e}", path.display()),
            );
            return None;
        }
    };
    let v: serde_yaml_ng::Value = match serde_yaml_ng::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            cx.err_in(&path, "", format!("not valid YAML: {e}"));
            return None;
        }
    };
    let s = |v: Option<&serde_yaml_ng::Value>| v.and_then(|v| v.as_str()).map(str::to_string);
    let mut machine_networks = Vec::new();
    if let Some(list) = v
        .get("networking")
        .and_then(|n| n.get("machineNetwork"))
        .and_then(|m| m.as_sequence())
    {
        for (i, m) in list.iter().enumerate() {
            match m
                .get("cidr")
                .and_then(|c| c.as_str())
                .map(str::parse::<IpNet>)
            {
                Some(Ok(n)) => machine_networks.push(n),
                _ => cx.err_in(
                    &path,
                    format!("networking.machineNetwork[{i}].cidr"),
                    "missing or not a CIDR",
                ),
            }
        }
    }
    Some(InstallConfig {
        name: s(v.get("metadata").and_then(|m| m.get("name"))),
        base_domain: s(v.get("baseDomain")),
        machine_networks,
        path,
    })
}

fn validate(w: wire::SiteFile, cx: &mut Cx) -> Option<Site> {
    let ic = w
        .cluster
        .install_config
        .as_deref()
        .and_then(|p| read_install_config(cx, p));
    let cluster = cluster(cx, &w.cluster, ic.as_ref());
    let host = host(cx, &w.host);
    let networks = networks(cx, &w.networks, ic.as_ref());
    let vips = vips(cx, w.vips.as_ref());
    let (images, broken_images) = images(cx, w.images.as_ref());
    let mut nodes = Vec::new();
    let overlay_path = controller::overlay_path(cx, &w.host);
    let overlay = controller::read_overlay(cx, &overlay_path);
    let mut overlay_names = Vec::new();
    {
        let site_file = cx.file.clone();
        let mut names: HashMap<String, String> = HashMap::new();
        let mut macs: HashMap<Mac, (usize, String)> = HashMap::new();
        let mut ips: HashMap<Ipv4Addr, String> = HashMap::new();
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
            if let Some(Ok(ip)) = wn.ip.as_deref().map(str::parse::<Ipv4Addr>) {
                if let Some(j) = ips.insert(ip, here.clone()) {
                    cx.err(
                        format!("nodes[{i}].ip"),
                        format!("duplicate IP {ip} (also {j})"),
                    );
                }
            }
            if let Some(n) = node(cx, i, wn, &networks, &images, &broken_images) {
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
    Some(Site {
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
    Some(Cluster {
        name: name?,
        base_domain: base?,
    })
}

fn listen(cx: &mut Cx, key: &str, w: &wire::Listen, scheme: &str) -> Option<Listen> {
    let addr = match w.listen.as_deref().map(str::parse::<SocketAddr>) {
        Some(Ok(a)) => Some(a),
        Some(Err(_)) => {
            cx.err(
                format!("{key}.listen"),
                format!(
                    "{:?} is not an address:port",
                    w.listen.as_deref().unwrap_or("")
                ),
            );
            None
        }
        None => {
            cx.err(format!("{key}.listen"), "required");
            None
        }
    };
    let url = match w.url.as_deref() {
        Some(u)
            if u.starts_with(&format!("{scheme}://"))
                && u.len() > scheme.len() + 3
                && !u.contains(char::is_whitespace) =>
        {
            Some(u.trim_end_matches('/').to_string())
        }
        Some(u) => {
            cx.err(
                format!("{key}.url"),
                format!("{u:?} is not a {scheme}:// URL"),
            );
            None
        }
        None => {
            cx.err(
                format!("{key}.url"),
                "required: the base URL nodes use to reach this listener",
            );
            None
        }
    };
    Some(Listen {
        listen: addr?,
        url: url?,
    })
}

fn host(cx: &mut Cx, w: &wire::Host) -> Option<Host> {
    let state_dir = w
        .state_dir
        .as_deref()
        .map(|p| cx.resolve(p))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR));
    let http = match &w.http {
        Some(l) => listen(cx, "host.http", l, "http"),
        None => {
            cx.err("host.http", "required");
            None
        }
    };
    let https = w
        .https
        .as_ref()
        .map(|l| listen(cx, "host.https", l, "https"));
    let https = match https {
        Some(None) => return None,
        Some(Some(l)) => Some(l),
        None => None,
    };
    let dhcp = w.dhcp.as_ref().map(|d| dhcp(cx, d, http.as_ref()));
    let dhcp = match dhcp {
        Some(None) => return None,
        Some(Some(d)) => Some(d),
        None => None,
    };
    let tftp = w.tftp.as_ref().map(|t| {
        let listen = match t
            .listen
            .as_deref()
            .unwrap_or("0.0.0.0:69")
            .parse::<SocketAddr>()
        {
            Ok(a) => Some(a),
            Err(_) => {
                cx.err(
                    "host.tftp.listen",
                    format!(
                        "{:?} is not an address:port",
                        t.listen.as_deref().unwrap_or("")
                    ),
                );
                None
            }
        };
        let root = match &t.root {
            Some(r) => Some(cx.resolve(r)),
            None => {
                cx.err(
                    "host.tftp.root",
                    "required: the directory with iPXE and GRUB boot files",
                );
                None
            }
        };
        Some(Tftp {
            listen: listen?,
            root: root?,
        })
    });
    let tftp = match tftp {
        Some(None) => return None,
        Some(Some(t)) => Some(t),
        None => None,
    };
    let api = match w.api.as_ref().map(|a| controller::api(cx, a)) {
        Some(None) => return None,
        Some(Some(a)) => Some(a),
        None => None,
    };
    Some(Host {
        state_dir,
        http: http?,
        https,
        dhcp,
        tftp,
        api,
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

fn networks(cx: &mut Cx, w: &[wire::Network], ic: Option<&InstallConfig>) -> Vec<Network> {
    let mut out = Vec::new();
    for (i, n) in w.iter().enumerate() {
        let k = |f: &str| format!("networks[{i}].{f}");
        let subnet = match n.subnet.as_deref() {
            None => {
                cx.err(k("subnet"), "required (CIDR, e.g. 10.0.0.0/24)");
                continue;
            }
            Some(s) => match s.parse::<IpNet>() {
                Ok(net) if net.trunc() != net => {
                    cx.err(
                        k("subnet"),
                        format!("{s:?} has host bits set; did you mean {}?", net.trunc()),
                    );
                    continue;
                }
                Ok(net) => net,
                Err(_) => {
                    cx.err(k("subnet"), format!("{s:?} is not a CIDR"));
                    continue;
                }
            },
        };
        let inside = |cx: &mut Cx, key: String, s: &str| -> Option<IpAddr> {
            let a = parse_ip(cx, &key, s)?;
            if !subnet.contains(&a) {
                cx.err(key, format!("{a} is outside subnet {subnet}"));
                return None;
            }
            Some(a)
        };
        let gateway = n
            .gateway
            .as_deref()
            .and_then(|g| inside(cx, k("gateway"), g));
        let pool = n.pool.as_ref().and_then(|p| {
            let start = p
                .start
                .as_deref()
                .and_then(|s| inside(cx, k("pool.start"), s));
            let end = p.end.as_deref().and_then(|s| inside(cx, k("pool.end"), s));
            if p.start.is_none() || p.end.is_none() {
                cx.err(k("pool"), "needs both start and end");
            }
            match (start, end) {
                (Some(a), Some(b)) if a > b => {
                    cx.err(k("pool"), format!("start {a} is after end {b}"));
                    None
                }
                (Some(a), Some(b)) => Some((a, b)),
                _ => None,
            }
        });
        let dns_servers = n
            .dns_servers
            .iter()
            .enumerate()
            .filter_map(|(j, s)| parse_ip(cx, &k(&format!("dnsServers[{j}]")), s))
            .collect();
        out.push(Network {
            name: n.name.clone().unwrap_or_else(|| format!("net{i}")),
            subnet,
            gateway,
            dns_servers,
            pool,
        });
    }
    if let Some(ic) = ic {
        if w.is_empty() {
            for (i, m) in ic.machine_networks.iter().enumerate() {
                out.push(Network {
                    name: format!("machine{i}"),
                    subnet: *m,
                    gateway: None,
                    dns_servers: vec![],
                    pool: None,
                });
            }
        } else {
            for m in &ic.machine_networks {
                if !out.iter().any(|n| n.subnet == *m) {
                    cx.err(
                        "networks",
                        format!("no subnet equals machineNetwork {m} of {}; list it here or fix the install-config", ic.path.display()),
                    );
                }
            }
        }
    }
    out
}

fn vips(cx: &mut Cx, w: Option<&wire::Vips>) -> Option<Vips> {
    let Some(w) = w else {
        cx.err(
            "vips",
            "required: api and ingress addresses (they may equal this host's)",
        );
        return None;
    };
    let mut one = |key: &str, v: &Option<String>| match v {
        Some(s) => parse_ip(cx, key, s),
        None => {
            cx.err(key, "required");
            None
        }
    };
    let api = one("vips.api", &w.api);
    let ingress = one("vips.ingress", &w.ingress);
    Some(Vips {
        api: api?,
        ingress: ingress?,
    })
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
        match (arch, kernel, initramfs, rootfs) {
            (Some(arch), Some(kernel), Some(initramfs), None) => {
                sets.insert(
                    name.clone(),
                    ImageSet {
                        arch,
                        kernel,
                        initramfs,
                        rootfs: None,
                        catalog: None,
                    },
                );
            }
            (Some(arch), Some(kernel), Some(initramfs), Some(Some(r))) => {
                sets.insert(
                    name.clone(),
                    ImageSet {
                        arch,
                        kernel,
                        initramfs,
                        rootfs: Some(r),
                        catalog: None,
                    },
                );
            }
            _ => broken.push(name.clone()),
        }
    }
    (Images { root, sets }, broken)
}

fn arg_ok(a: &str) -> bool {
    !a.is_empty()
        && !a.contains(|c: char| {
            c.is_whitespace() || c.is_control() || c == '"' || c == '\'' || c == '\\'
        })
}

fn node(
    cx: &mut Cx,
    i: usize,
    w: &wire::Node,
    networks: &[Network],
    images: &Images,
    broken: &[String],
) -> Option<Node> {
    let k = |f: &str| format!("nodes[{i}].{f}");
    let before = cx.problems.len();
    let name = match w.name.as_deref() {
        Some(n) if is_dns_label(n) => n.to_string(),
        Some(n) => {
            cx.err(
                k("name"),
                format!("{n:?} is not a DNS label (lower-case letters, digits, '-')"),
            );
            String::new()
        }
        None => {
            cx.err(k("name"), "required");
            String::new()
        }
    };
    let role = match w.role.as_deref() {
        Some(r) if is_dns_label(r) => r.to_string(),
        Some(r) => {
            cx.err(
                k("role"),
                format!("{r:?}: want bootstrap, master, worker, or a custom role name (DNS label)"),
            );
            String::new()
        }
        None => {
            cx.err(
                k("role"),
                "required (bootstrap, master, worker, or a custom role)",
            );
            String::new()
        }
    };
    let mut macs = Vec::new();
    if w.macs.is_empty() {
        cx.err(k("macs"), "at least one MAC is required");
    }
    for (j, m) in w.macs.iter().enumerate() {
        match m.parse::<Mac>() {
            Ok(m) if macs.contains(&m) => {
                cx.err(format!("nodes[{i}].macs[{j}]"), format!("{m} listed twice"))
            }
            Ok(m) => macs.push(m),
            Err(e) => cx.err(format!("nodes[{i}].macs[{j}]"), e.to_string()),
        }
    }
    let mut network = 0;
    let ip = match w.ip.as_deref().map(str::parse::<Ipv4Addr>) {
        Some(Ok(a)) => {
            match networks
                .iter()
                .position(|n| n.subnet.contains(&IpAddr::V4(a)))
            {
                Some(p) => network = p,
                None => cx.err(
                    k("ip"),
                    format!(
                        "{a} is outside every network ({})",
                        networks
                            .iter()
                            .map(|n| n.subnet.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ),
            }
            a
        }
        Some(Err(_)) => {
            cx.err(
                k("ip"),
                format!("{:?} is not an IPv4 address", w.ip.as_deref().unwrap_or("")),
            );
            Ipv4Addr::UNSPECIFIED
        }
        None => {
            cx.err(k("ip"), "required");
            Ipv4Addr::UNSPECIFIED
        }
    };
    let arch = match w.arch.as_deref() {
        None => Arch::X86_64,
        Some(a) => Arch::parse(a).unwrap_or_else(|| {
            cx.err(
                k("arch"),
                format!("{a:?} is not one of x86_64, aarch64, ppc64le"),
            );
            Arch::X86_64
        }),
    };
    let firmware = match w.firmware.as_deref() {
        None => Firmware::Auto,
        Some(f) => Firmware::parse(f).unwrap_or_else(|| {
            cx.err(
                k("firmware"),
                format!("{f:?} is not one of auto, bios, uefi, uefi-http, ieee1275"),
            );
            Firmware::Auto
        }),
    };
    let mut quiet_fail = false;
    let image = match w.image.as_deref() {
        Some(name) if broken.iter().any(|b| b == name) => {
            // Already reported under images.sets; the node is not blamed again.
            quiet_fail = true;
            String::new()
        }
        Some(name) => match images.sets.get(name) {
            Some(set) if set.arch != arch => {
                cx.err(
                    k("image"),
                    format!("image {name:?} is for {}, but the node is {arch}", set.arch),
                );
                String::new()
            }
            Some(_) => name.to_string(),
            None => {
                cx.err(
                    k("image"),
                    format!("no image set named {name:?} in images.sets"),
                );
                String::new()
            }
        },
        None => {
            let fits: Vec<_> = images
                .sets
                .iter()
                .filter(|(_, s)| s.arch == arch)
                .map(|(n, _)| n.clone())
                .collect();
            match fits.as_slice() {
                [one] => one.clone(),
                [] => {
                    cx.err(
                        k("image"),
                        format!("missing: no image set for {arch} in images.sets"),
                    );
                    String::new()
                }
                _ => {
                    cx.err(
                        k("image"),
                        format!(
                            "required: several image sets fit {arch} ({})",
                            fits.join(", ")
                        ),
                    );
                    String::new()
                }
            }
        }
    };
    let install_disk = match w.install_disk.as_deref() {
        Some(d) if d.starts_with("/dev/") && arg_ok(d) => Some(d.to_string()),
        Some(d) => {
            cx.err(k("installDisk"), format!("{d:?} is not a /dev/ path"));
            None
        }
        None => None,
    };
    for (j, a) in w.kernel_args.iter().enumerate() {
        if !arg_ok(a) {
            cx.err(
                format!("nodes[{i}].kernelArgs[{j}]"),
                format!("{a:?}: one argument per entry, no spaces, quotes or control characters"),
            );
        }
    }
    let static_network = w.network.as_ref().and_then(|s| {
        let net = networks.get(network);
        let interface = match s.interface.as_deref() {
            Some(n)
                if !n.is_empty()
                    && n.len() <= 15
                    && n.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) =>
            {
                n.to_string()
            }
            Some(n) => {
                cx.err(
                    k("network.interface"),
                    format!("{n:?} is not an interface name"),
                );
                return None;
            }
            None => {
                cx.err(k("network.interface"), "required (e.g. ens3)");
                return None;
            }
        };
        let address = match s.address.as_deref() {
            Some(a) => match a.parse::<IpNet>() {
                Ok(n) => n,
                Err(_) => {
                    cx.err(k("network.address"), format!("{a:?} is not address/prefix"));
                    return None;
                }
            },
            None => IpNet::new(
                IpAddr::V4(ip),
                net.map(|n| n.subnet.prefix_len()).unwrap_or(24),
            )
            .ok()?,
        };
        let gateway = match s.gateway.as_deref() {
            Some(g) => Some(parse_ip(cx, &k("network.gateway"), g)?),
            None => net.and_then(|n| n.gateway),
        };
        let dns = if s.dns.is_empty() {
            net.map(|n| n.dns_servers.clone()).unwrap_or_default()
        } else {
            s.dns
                .iter()
                .enumerate()
                .filter_map(|(j, d)| parse_ip(cx, &k(&format!("network.dns[{j}]")), d))
                .collect()
        };
        Some(StaticNetwork {
            interface,
            address,
            gateway,
            dns,
            mtu: s.mtu,
        })
    });
    let ipxe_binary = w
        .ipxe_binary
        .as_deref()
        .map(|b| boot_file(cx, &k("ipxeBinary"), Some(b), "ipxe.efi"));
    let dhcp_options = dhcp_options(cx, &k("dhcpOptions"), &w.dhcp_options);
    (cx.problems.len() == before && !quiet_fail).then_some(Node {
        name,
        role,
        macs,
        ip,
        network,
        arch,
        firmware,
        image,
        install_disk,
        kernel_args: w.kernel_args.clone(),
        static_network,
        ipxe_binary,
        dhcp_options,
    })
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

fn ignition(
    cx: &mut Cx,
    w: Option<&wire::Ignition>,
    nodes: &[(String, String)],
    host: Option<&Host>,
) -> Option<Ignition> {
    let token_ttl = match w.and_then(|w| w.token_ttl.as_deref()) {
        None => DEFAULT_TOKEN_TTL,
        Some(s) => duration(s).unwrap_or_else(|| {
            cx.err(
                "ignition.tokenTtl",
                format!("{s:?} is not a duration like 30m, 24h, 3600s"),
            );
            DEFAULT_TOKEN_TTL
        }),
    };
    let over_https = w.is_some_and(|w| w.over_https);
    if over_https && host.is_some_and(|h| h.https.is_none()) {
        cx.err("ignition.overHttps", "needs host.https");
    }
    let mut roles = BTreeMap::new();
    let mut used: Vec<&str> = nodes.iter().map(|(r, _)| r.as_str()).collect();
    used.sort_unstable();
    used.dedup();
    let dir = w.and_then(|w| w.dir.as_deref()).map(|d| cx.resolve(d));
    let explicit = w.map(|w| w.roles.clone()).unwrap_or_default();
    for role in explicit.keys() {
        if !is_dns_label(role) {
            cx.err(
                format!("ignition.roles.{role}"),
                "role names are DNS labels",
            );
        }
    }
    let mut wanted: Vec<String> = explicit.keys().cloned().collect();
    wanted.extend(used.iter().map(|s| s.to_string()));
    wanted.sort();
    wanted.dedup();
    for role in wanted {
        let (key, path) = match (explicit.get(&role), &dir) {
            (Some(p), _) => (format!("ignition.roles.{role}"), cx.resolve(p)),
            (None, Some(d)) => ("ignition.dir".to_string(), d.join(format!("{role}.ign"))),
            (None, None) => {
                let who: Vec<_> = nodes
                    .iter()
                    .filter(|(r, _)| *r == role)
                    .map(|(_, n)| n.as_str())
                    .collect();
                cx.err(
                    "ignition",
                    format!("role {role:?} (nodes {}) has no Ignition: set ignition.dir or ignition.roles.{role}", who.join(", ")),
                );
                continue;
            }
        };
        match read_role(&path) {
            Ok(rc) => {
                roles.insert(role, rc);
            }
            Err(reason) => {
                let who: Vec<_> = nodes
                    .iter()
                    .filter(|(r, _)| *r == role)
                    .map(|(_, n)| n.as_str())
                    .collect();
                let users = if who.is_empty() {
                    String::new()
                } else {
                    format!(" (used by {})", who.join(", "))
                };
                cx.err(
                    key,
                    format!("role {role:?}{users}: {}: {reason}", path.display()),
                );
            }
        }
    }
    Some(Ignition {
        roles,
        token_ttl,
        over_https,
    })
}

/// Reads one role's Ignition config. The error text never quotes the file's
/// content: it may hold secrets.
fn read_role(path: &Path) -> Result<RoleConfig, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
    let config: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| format!("not JSON (line {}, column {})", e.line(), e.column()))?;
    let version = config
        .get("ignition")
        .and_then(|i| i.get("version"))
        .and_then(|v| v.as_str())
        .ok_or("no ignition.version")?
        .to_string();
    if !version.starts_with("3.") {
        return Err(format!("Ignition spec {version} is not supported: want 3.x (openshift-install writes 3.2.0 and later)"));
    }
    Ok(RoleConfig {
        path: path.to_path_buf(),
        config: Secret(config),
        version,
    })
}

fn dhcp_options(cx: &mut Cx, key: &str, w: &[wire::DhcpOption]) -> Vec<DhcpOptionValue> {
    let mut out = Vec::new();
    for (i, o) in w.iter().enumerate() {
        let k = format!("{key}[{i}]");
        let Some(code) = o.code else {
            cx.err(format!("{k}.code"), "required (1-254)");
            continue;
        };
        // Options bootd sets itself (or that frame the packet) are not overridable.
        if matches!(code, 0 | 255 | 50..=58 | 61 | 82) {
            cx.err(
                format!("{k}.code"),
                format!("option {code} is managed by bootd and cannot be set"),
            );
            continue;
        }
        let given = [
            o.text.is_some(),
            !o.ips.is_empty(),
            o.hex.is_some(),
            o.u32.is_some(),
        ]
        .iter()
        .filter(|b| **b)
        .count();
        if given != 1 {
            cx.err(&k, "give exactly one of text, ips, hex, u32");
            continue;
        }
        let value = if let Some(t) = &o.text {
            t.as_bytes().to_vec()
        } else if let Some(h) = &o.hex {
            let h: String = h
                .chars()
                .filter(|c| *c != ':' && !c.is_whitespace())
                .collect();
            if h.len() % 2 != 0 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                cx.err(
                    format!("{k}.hex"),
                    "not hex bytes (e.g. 01:02:0a or 01020a)",
                );
                continue;
            }
            (0..h.len())
                .step_by(2)
                .filter_map(|j| u8::from_str_radix(&h[j..j + 2], 16).ok())
                .collect()
        } else if let Some(n) = o.u32 {
            n.to_be_bytes().to_vec()
        } else {
            let mut v = Vec::new();
            for (j, ip) in o.ips.iter().enumerate() {
                match ip.parse::<Ipv4Addr>() {
                    Ok(a) => v.extend_from_slice(&a.octets()),
                    Err(_) => cx.err(
                        format!("{k}.ips[{j}]"),
                        format!("{ip:?} is not an IPv4 address"),
                    ),
                }
            }
            v
        };
        if value.len() > 255 {
            cx.err(&k, "value longer than 255 bytes");
            continue;
        }
        out.push(DhcpOptionValue { code, value });
    }
    out
}

fn boot_file(cx: &mut Cx, key: &str, v: Option<&str>, default: &str) -> String {
    match v {
        None => default.to_string(),
        Some(f)
            if !f.is_empty()
                && f.len() < 128
                && f.is_ascii()
                && !f.contains(|c: char| c.is_whitespace() || c.is_control()) =>
        {
            f.to_string()
        }
        Some(f) => {
            cx.err(
                key,
                format!("{f:?} is not a boot file name (ASCII, no spaces, < 128 bytes)"),
            );
            default.to_string()
        }
    }
}

fn dhcp(cx: &mut Cx, w: &wire::Dhcp, http: Option<&Listen>) -> Option<Dhcp> {
    let listen = match w
        .listen
        .as_deref()
        .unwrap_or("0.0.0.0:67")
        .parse::<SocketAddr>()
    {
        Ok(a) => Some(a),
        Err(_) => {
            cx.err(
                "host.dhcp.listen",
                format!(
                    "{:?} is not an address:port",
                    w.listen.as_deref().unwrap_or("")
                ),
            );
            None
        }
    };
    let mode = match w.mode.as_deref().unwrap_or("server") {
        "server" => Some(DhcpMode::Server),
        "proxy" => Some(DhcpMode::Proxy),
        m => {
            cx.err("host.dhcp.mode", format!("{m:?}: want server or proxy"));
            None
        }
    };
    let server_address = match w.server_address.as_deref() {
        Some(a) => a.parse::<Ipv4Addr>().ok().or_else(|| {
            cx.err(
                "host.dhcp.serverAddress",
                format!("{a:?} is not an IPv4 address"),
            );
            None
        }),
        // The host in the HTTP URL, if it is an IPv4 address.
        None => match http.map(|h| h.url_host().parse::<Ipv4Addr>()) {
            Some(Ok(a)) => Some(a),
            Some(Err(_)) => {
                cx.err(
                    "host.dhcp.serverAddress",
                    "required when host.http.url does not name an IPv4 address",
                );
                None
            }
            None => None,
        },
    };
    let lease_time = match w.lease_time.as_deref() {
        None => Duration::from_secs(3600),
        Some(s) => duration(s).unwrap_or_else(|| {
            cx.err(
                "host.dhcp.leaseTime",
                format!("{s:?} is not a duration like 1h"),
            );
            Duration::from_secs(3600)
        }),
    };
    let mut ntp_servers = Vec::new();
    for (i, n) in w.ntp_servers.iter().enumerate() {
        match n.parse::<Ipv4Addr>() {
            Ok(a) => ntp_servers.push(a),
            Err(_) => cx.err(
                format!("host.dhcp.ntpServers[{i}]"),
                format!("{n:?} is not an IPv4 address"),
            ),
        }
    }
    if let Some(i) = &w.interface {
        if i.is_empty() || i.len() > 15 {
            cx.err(
                "host.dhcp.interface",
                format!("{i:?} is not an interface name"),
            );
        }
    }
    let bf = w.boot_files.as_ref();
    let boot_files = BootFiles {
        bios: boot_file(
            cx,
            "host.dhcp.bootFiles.bios",
            bf.and_then(|b| b.bios.as_deref()),
            "undionly.kpxe",
        ),
        uefi_x86_64: boot_file(
            cx,
            "host.dhcp.bootFiles.uefiX86_64",
            bf.and_then(|b| b.uefi_x86_64.as_deref()),
            "ipxe.efi",
        ),
        uefi_arm64: boot_file(
            cx,
            "host.dhcp.bootFiles.uefiArm64",
            bf.and_then(|b| b.uefi_arm64.as_deref()),
            "ipxe-arm64.efi",
        ),
        ieee1275: boot_file(
            cx,
            "host.dhcp.bootFiles.ieee1275",
            bf.and_then(|b| b.ieee1275.as_deref()),
            "core.elf",
        ),
    };
    let options = dhcp_options(cx, "host.dhcp.options", &w.options);
    Some(Dhcp {
        listen: listen?,
        interface: w.interface.clone(),
        mode: mode?,
        server_address: server_address?,
        lease_time,
        ntp_servers,
        domain_name: w.domain_name.clone().unwrap_or_default(),
        boot_files,
        options,
    })
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
