//! `host.api` (bootd's controller API) and the node overlay
//! (`<stateDir>/nodes.yaml`, the nodes added through that API).

use super::{duration, parse, Cx, DEFAULT_STATE_DIR};
use crate::model::{
    env_name_ok, Api, BmcDriver, EquinixAccount, LocalFirmware, LocalVms, PowerVsAccount, SecretRef,
};
use crate::wire;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod alibaba;
mod bmc_credentials;
mod kubeconfig;
pub(super) use alibaba::resolve_image as resolve_alibaba_image;
pub use alibaba::{
    disk_problems as alibaba_disk_problems, id_ok as alibaba_id_ok, region_id_ok, zone_in_region,
};

/// The file name of the overlay inside `host.stateDir`.
pub const OVERLAY_FILE: &str = "nodes.yaml";

const DEFAULT_DEADLINE: Duration = Duration::from_secs(3600);
const DEFAULT_MACHINE_CONFIG_WITHIN: Duration = Duration::from_secs(20 * 60);
const DEFAULT_POWER_OFF_TIMEOUT: Duration = Duration::from_secs(120);

pub(super) fn overlay_path(cx: &Cx, host: &wire::Host) -> PathBuf {
    state_dir(cx, host).join(OVERLAY_FILE)
}

/// `host.stateDir`, or the process's `--state-dir` when it set one
/// ([`crate::override_state_dir`]).
pub(super) fn state_dir(cx: &Cx, host: &wire::Host) -> PathBuf {
    if let Some(d) = crate::state_dir_override() {
        return d.to_path_buf();
    }
    host.state_dir
        .as_deref()
        .map(|p| cx.resolve(p))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR))
}

/// The overlay's nodes as written; a missing file is an empty overlay.
/// Problems (unreadable, unknown keys, wrong types) name the overlay file.
pub(super) fn read_overlay(cx: &mut Cx, path: &Path) -> Vec<wire::Node> {
    let text = match cx.overlay_text.take() {
        Some(t) => t,
        None => match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
            Err(e) => {
                cx.err_in(path, "", format!("cannot read the node overlay: {e}"));
                return Vec::new();
            }
        },
    };
    if text.trim().is_empty() {
        return Vec::new();
    }
    let site_file = std::mem::replace(&mut cx.file, path.to_path_buf());
    let parsed: Option<wire::Overlay> = parse(&text, cx);
    cx.file = site_file;
    parsed.map(|o| o.nodes).unwrap_or_default()
}

fn secret_ref(cx: &mut Cx, key: &str, w: Option<&wire::SecretRef>) -> Option<SecretRef> {
    let Some(w) = w else {
        cx.err(
            key,
            "required: {file: PATH}, {credential: NAME} (a systemd credential) or {env: VAR}",
        );
        return None;
    };
    match (&w.file, &w.credential, &w.env) {
        (Some(f), None, None) => Some(SecretRef::File(cx.resolve(f))),
        (None, Some(c), None) => {
            if c.is_empty() || c.contains('/') || c == "." || c == ".." {
                cx.err(
                    format!("{key}.credential"),
                    format!("{c:?} is not a credential name"),
                );
                return None;
            }
            Some(SecretRef::Credential(c.clone()))
        }
        (None, None, Some(v)) => {
            if !env_name_ok(v) {
                cx.err(
                    format!("{key}.env"),
                    format!("{v:?} is not an environment variable name"),
                );
                return None;
            }
            Some(SecretRef::Env(v.clone()))
        }
        _ => {
            cx.err(key, "give exactly one of file, credential, env");
            None
        }
    }
}

fn bmc(cx: &mut Cx, key: &str, w: &wire::Bmc) -> BmcDriver {
    let power_off_timeout = match w.power_off_timeout.as_deref() {
        None => DEFAULT_POWER_OFF_TIMEOUT,
        Some(s) => match duration(s) {
            Some(d) if d >= Duration::from_secs(1) => d,
            _ => {
                cx.err(
                    format!("{key}.powerOffTimeout"),
                    format!("{s:?} is not a duration of at least 1s, like 90s or 5m"),
                );
                DEFAULT_POWER_OFF_TIMEOUT
            }
        },
    };
    BmcDriver { power_off_timeout }
}

fn url_of(cx: &mut Cx, key: &str, v: Option<&str>, default: &str) -> Option<String> {
    let u = v.unwrap_or(default);
    if (u.starts_with("https://") || u.starts_with("http://"))
        && !u.contains(char::is_whitespace)
        && !u.contains(['?', '#'])
    {
        Some(u.trim_end_matches('/').to_string())
    } else {
        cx.err(key, format!("{u:?} is not an http(s):// base URL"));
        None
    }
}

/// The cloud instance id (the workspace's GUID) in a Power VS workspace's
/// CRN: `crn:v1:<cname>:<ctype>:power-iaas:<zone>:a/<account>:<id>::`.
fn powervs_crn_instance(crn: &str) -> Result<&str, String> {
    let shape = "crn:v1:bluemix:public:power-iaas:<zone>:a/<account>:<cloud-instance-id>::";
    let f: Vec<&str> = crn.split(':').collect();
    if f.len() != 10 || f[0] != "crn" || crn.contains(char::is_whitespace) {
        return Err(format!("{crn:?} is not a CRN (want {shape})"));
    }
    if f[4] != "power-iaas" {
        return Err(format!(
            "{crn:?} is a CRN of service {:?}, not of a Power VS workspace (power-iaas): {shape}",
            f[4]
        ));
    }
    if !f[6].starts_with("a/") || f[6].len() == 2 {
        return Err(format!(
            "{crn:?}: the scope {:?} is not an account (a/<account>): {shape}",
            f[6]
        ));
    }
    let id = f[7];
    if id.is_empty() || id.contains('/') {
        return Err(format!(
            "{crn:?} names no workspace (its cloud instance id, the eighth field, is {id:?}): {shape}"
        ));
    }
    Ok(id)
}

fn required(cx: &mut Cx, key: &str, v: Option<&String>) -> Option<String> {
    match v {
        Some(s) if !s.is_empty() && !s.contains(|c: char| c.is_whitespace() || c == '/') => {
            Some(s.clone())
        }
        Some(s) => {
            cx.err(key, format!("{s:?}: no spaces or '/'"));
            None
        }
        None => {
            cx.err(key, "required");
            None
        }
    }
}

pub(super) fn api(cx: &mut Cx, w: &wire::Api) -> Option<Api> {
    let listen = match w.listen.as_deref().map(str::parse::<SocketAddr>) {
        Some(Ok(a)) => Some(a),
        Some(Err(_)) => {
            cx.err(
                "host.api.listen",
                format!(
                    "{:?} is not an address:port",
                    w.listen.as_deref().unwrap_or("")
                ),
            );
            None
        }
        None => {
            cx.err("host.api.listen", "required");
            None
        }
    };
    let url = match w.url.as_deref() {
        None => None,
        Some(u) if u.starts_with("https://") && u.len() > 8 && !u.contains(char::is_whitespace) => {
            Some(u.trim_end_matches('/').to_string())
        }
        Some(u) => {
            cx.err(
                "host.api.url",
                format!("{u:?} is not an https:// URL (the API is served over HTTPS only)"),
            );
            None
        }
    };
    let tokens = secret_ref(cx, "host.api.tokens", w.tokens.as_ref());
    let deadline = match w.deadline.as_deref() {
        None => DEFAULT_DEADLINE,
        Some(s) => duration(s).unwrap_or_else(|| {
            cx.err(
                "host.api.deadline",
                format!("{s:?} is not a duration like 45m, 2h"),
            );
            DEFAULT_DEADLINE
        }),
    };
    let machine_config_within = match w.machine_config_within.as_deref() {
        None => DEFAULT_MACHINE_CONFIG_WITHIN,
        Some(s) => duration(s).unwrap_or_else(|| {
            cx.err(
                "host.api.machineConfigWithin",
                format!("{s:?} is not a duration like 20m, 1h"),
            );
            DEFAULT_MACHINE_CONFIG_WITHIN
        }),
    };
    let equinix = w.equinix.as_ref().map(|e| {
        let base_url = url_of(
            cx,
            "host.api.equinix.baseUrl",
            e.base_url.as_deref(),
            "https://api.equinix.com/metal/v1",
        );
        let project_id = required(cx, "host.api.equinix.projectId", e.project_id.as_ref());
        let api_key = secret_ref(cx, "host.api.equinix.apiKey", e.api_key.as_ref());
        Some(EquinixAccount {
            base_url: base_url?,
            project_id: project_id?,
            api_key: api_key?,
        })
    });
    let powervs = w.powervs.as_ref().map(|p| {
        let base_url = match p.base_url.as_deref() {
            Some(u) => url_of(cx, "host.api.powervs.baseUrl", Some(u), ""),
            None => {
                cx.err("host.api.powervs.baseUrl", "required: the region's endpoint, e.g. https://us-south.power-iaas.cloud.ibm.com");
                None
            }
        };
        let iam_url = url_of(cx, "host.api.powervs.iamUrl", p.iam_url.as_deref(), "https://iam.cloud.ibm.com");
        let crn = match p.crn.as_deref() {
            Some(c) => match powervs_crn_instance(c) {
                // A cloudInstanceId beside it says the same, or it is wrong.
                Ok(id) if p.cloud_instance_id.as_deref().is_some_and(|given| given != id) => {
                    cx.err(
                        "host.api.powervs.cloudInstanceId",
                        format!(
                            "{:?} is not the workspace of crn, whose cloud instance id is {id:?} (crn alone names the workspace)",
                            p.cloud_instance_id.as_deref().unwrap_or_default()
                        ),
                    );
                    None
                }
                Ok(id) => Some((c.to_string(), id.to_string())),
                Err(why) => {
                    cx.err("host.api.powervs.crn", why);
                    None
                }
            },
            None => {
                cx.err("host.api.powervs.crn", "required: the workspace's CRN (crn:v1:bluemix:public:power-iaas:<zone>:a/<account>:<cloud-instance-id>::)");
                None
            }
        };
        let api_key = secret_ref(cx, "host.api.powervs.apiKey", p.api_key.as_ref());
        let (crn, cloud_instance_id) = crn?;
        Some(PowerVsAccount { base_url: base_url?, iam_url: iam_url?, cloud_instance_id, crn, api_key: api_key? })
    });
    let local = w.local.as_ref().map(|l| local(cx, l));
    let local = match local {
        Some(None) => return None,
        Some(Some(l)) => Some(l),
        None => None,
    };
    let equinix = match equinix {
        Some(None) => return None,
        Some(Some(e)) => Some(e),
        None => None,
    };
    let powervs = match powervs {
        Some(None) => return None,
        Some(Some(p)) => Some(p),
        None => None,
    };
    let bmc_files = w.bmc_files.as_deref().map(|d| cx.resolve(d));
    let bmc_credentials = bmc_credentials::bmc_credentials(cx, w, bmc_files.as_deref());
    let redfish = w.redfish.as_ref().map(|b| bmc(cx, "host.api.redfish", b));
    let ipmi = w.ipmi.as_ref().map(|b| bmc(cx, "host.api.ipmi", b));
    let alibaba = match w.alibaba.as_ref().map(|a| alibaba::alibaba(cx, a)) {
        Some(None) => return None,
        Some(Some(a)) => Some(a),
        None => None,
    };
    let mut fetch_from = std::collections::BTreeMap::new();
    for (p, v) in &w.fetch_from {
        let key = format!("host.api.fetchFrom.{p}");
        let configured = match p.as_str() {
            "equinix" => w.equinix.is_some(),
            "powervs" => w.powervs.is_some(),
            "alibaba" => w.alibaba.is_some(),
            "local" => w.local.is_some(),
            "redfish" => w.redfish.is_some(),
            "ipmi" => w.ipmi.is_some(),
            _ => {
                cx.err(
                    &key,
                    "not a provider (equinix, powervs, alibaba, local, redfish, ipmi)",
                );
                continue;
            }
        };
        if !configured {
            cx.err(
                &key,
                format!("provider {p} is not configured (host.api.{p})"),
            );
        }
        match crate::FetchFrom::parse(v) {
            Some(f) => {
                fetch_from.insert(p.clone(), f);
            }
            None => cx.err(&key, format!("{v:?}: want nodeAddress or anyAddress")),
        }
    }
    let kubeconfig = w
        .kubeconfig
        .as_deref()
        .and_then(|p| kubeconfig::kubeconfig(cx, p));
    Some(Api {
        listen: listen?,
        url,
        tokens: tokens?,
        deadline,
        machine_config_within,
        equinix,
        powervs,
        local,
        redfish,
        ipmi,
        bmc_files,
        bmc_credentials,
        alibaba,
        fetch_from,
        kubeconfig,
    })
}

/// A network interface name as Linux takes it: 1-15 bytes, no '/', ':' or space.
fn ifname_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 15
        && s != "."
        && s != ".."
        && !s.contains(|c: char| c == '/' || c == ':' || c.is_whitespace() || c.is_control())
}

fn local(cx: &mut Cx, w: &wire::Local) -> Option<LocalVms> {
    let mut ok = true;
    let qemu = w
        .qemu
        .clone()
        .unwrap_or_else(|| "qemu-system-x86_64".into());
    if qemu.is_empty() || qemu.contains(|c: char| c.is_whitespace() || c.is_control()) {
        cx.err(
            "host.api.local.qemu",
            format!("{qemu:?} is not a command (a name in PATH or a path, no spaces)"),
        );
        ok = false;
    }
    // A path relative to the site file; a bare name is looked up in PATH.
    let qemu = if qemu.contains('/') {
        cx.resolve(Path::new(&qemu)).to_string_lossy().into_owned()
    } else {
        qemu
    };
    let bridge = w.bridge.clone().unwrap_or_else(|| "br0".into());
    if !ifname_ok(&bridge) {
        cx.err(
            "host.api.local.bridge",
            format!("{bridge:?} is not an interface name (1-15 characters, no '/', ':' or spaces)"),
        );
        ok = false;
    }
    if let Some(n) = &w.netns {
        if n.is_empty()
            || n.len() > 64
            || n == "."
            || n == ".."
            || n.contains(|c: char| c == '/' || c.is_whitespace() || c.is_control())
        {
            cx.err(
                "host.api.local.netns",
                format!("{n:?} is not a network namespace name (as `ip netns list` shows them)"),
            );
            ok = false;
        }
    }
    let firmware = match w.firmware.as_deref() {
        None => LocalFirmware::SeabiosIpxe,
        Some(f) => LocalFirmware::parse(f).unwrap_or_else(|| {
            cx.err(
                "host.api.local.firmware",
                format!("{f:?}: want seabios-ipxe or ovmf-ipxe"),
            );
            ok = false;
            LocalFirmware::SeabiosIpxe
        }),
    };
    let memory_mib = w.memory.unwrap_or(512);
    if !(128..=65536).contains(&memory_mib) {
        cx.err(
            "host.api.local.memory",
            format!("{memory_mib} MiB: want 128 to 65536 (MiB)"),
        );
        ok = false;
    }
    let state_dir = w.state_dir.as_deref().map(|p| cx.resolve(p));
    let ovmf_code = w
        .ovmf_code
        .as_deref()
        .map(|p| cx.resolve(p))
        .unwrap_or_else(|| PathBuf::from("/usr/share/OVMF/OVMF_CODE_4M.fd"));
    let ovmf_vars = w
        .ovmf_vars
        .as_deref()
        .map(|p| cx.resolve(p))
        .unwrap_or_else(|| PathBuf::from("/usr/share/OVMF/OVMF_VARS_4M.fd"));
    ok.then(|| LocalVms {
        qemu,
        bridge,
        netns: w.netns.clone(),
        firmware,
        memory_mib,
        state_dir,
        ovmf_code,
        ovmf_vars,
    })
}

#[cfg(test)]
mod tests {
    use super::powervs_crn_instance;

    #[test]
    fn powervs_crn_names_its_workspace() {
        assert_eq!(
            powervs_crn_instance(
                "crn:v1:bluemix:public:power-iaas:lon04:a/2c4e6f:0aa1bb2c-3d4e-5f60-7182-93a4b5c6d7e8::"
            ),
            Ok("0aa1bb2c-3d4e-5f60-7182-93a4b5c6d7e8")
        );
        for (bad, says) in [
            ("nope", "is not a CRN"),
            (
                "crn:v1:bluemix:public:power-iaas:lon04:a/acc:ws",
                "is not a CRN",
            ),
            (
                "crn:v1:bluemix:public:is:lon04:a/acc:ws::",
                "not of a Power VS workspace",
            ),
            (
                "crn:v1:bluemix:public:power-iaas:lon04:s/acc:ws::",
                "is not an account",
            ),
            (
                "crn:v1:bluemix:public:power-iaas:lon04:a/acc:::",
                "names no workspace",
            ),
            (
                "crn:v1:bluemix:public:power-iaas:lon04:a/acc:w s::",
                "is not a CRN",
            ),
        ] {
            let e = powervs_crn_instance(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
