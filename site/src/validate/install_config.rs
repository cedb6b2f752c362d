//! Facts read from OpenShift's install-config.yaml (`cluster.installConfig`).
//!
//! The document is read into a typed struct that names only what the site
//! uses, so the pull secret (and every other key) is skipped by the parser,
//! never held in a structure that outlives it, and never written anywhere.
//! Read: `metadata.name`, `baseDomain`, `networking.machineNetwork[].cidr`,
//! `controlPlane.replicas`, `compute[].replicas`, `sshKey`,
//! `platform.powervs` (`region`, `zone`, `serviceInstanceGUID` or
//! `serviceInstanceID`) and the Power VS machine pools (`sysType`,
//! `procType`, `processors`, `memoryGiB`).

use super::Cx;
use crate::model::{PowerVsPlatform, PowerVsPool, ROLE_MASTER};
use ipnet::IpNet;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What the site takes from install-config.yaml.
pub(super) struct InstallConfig {
    pub path: PathBuf,
    pub name: Option<String>,
    pub base_domain: Option<String>,
    pub machine_networks: Vec<IpNet>,
    /// By role: `master` from `controlPlane`, a compute pool's name (`worker`) from `compute`.
    pub replicas: BTreeMap<String, u32>,
    pub ssh_key: Option<String>,
    pub powervs: Option<PowerVsPlatform>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Doc {
    metadata: Option<Metadata>,
    base_domain: Option<String>,
    networking: Option<Networking>,
    control_plane: Option<Pool>,
    #[serde(default)]
    compute: Vec<Pool>,
    platform: Option<Platform>,
    ssh_key: Option<String>,
}

#[derive(Deserialize)]
struct Metadata {
    name: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Networking {
    #[serde(default)]
    machine_network: Vec<MachineNetwork>,
}

#[derive(Deserialize)]
struct MachineNetwork {
    cidr: Option<String>,
}

#[derive(Deserialize)]
struct Pool {
    name: Option<String>,
    replicas: Option<u32>,
    platform: Option<PoolPlatform>,
}

#[derive(Deserialize)]
struct PoolPlatform {
    powervs: Option<PowerVsMachinePool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PowerVsMachinePool {
    sys_type: Option<String>,
    proc_type: Option<String>,
    /// A number, or a string holding one (the installer's IntOrString).
    processors: Option<serde_yaml_ng::Value>,
    #[serde(rename = "memoryGiB")]
    memory_gib: Option<u32>,
}

#[derive(Deserialize)]
struct Platform {
    powervs: Option<PowerVs>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PowerVs {
    region: Option<String>,
    zone: Option<String>,
    #[serde(rename = "serviceInstanceGUID")]
    service_instance_guid: Option<String>,
    #[serde(rename = "serviceInstanceID")]
    service_instance_id: Option<String>,
}

pub(super) fn read_install_config(cx: &mut Cx, p: &Path) -> Option<InstallConfig> {
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
    let doc: Doc = match serde_yaml_ng::from_str(&text) {
        Ok(d) => d,
        Err(e) => {
            // The pull secret is never in the message: it is not a field
            // here, so its value is skipped, not checked.
            cx.err_in(&path, "", format!("not a valid install-config: {e}"));
            return None;
        }
    };
    drop(text);
    let mut machine_networks = Vec::new();
    for (i, m) in doc
        .networking
        .map(|n| n.machine_network)
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        match m.cidr.as_deref().map(str::parse::<IpNet>) {
            Some(Ok(n)) => machine_networks.push(n),
            _ => cx.err_in(
                &path,
                format!("networking.machineNetwork[{i}].cidr"),
                "missing or not a CIDR",
            ),
        }
    }
    let mut replicas = BTreeMap::new();
    let mut pools = BTreeMap::new();
    let mut pool = |cx: &mut Cx, key: String, role: String, p: &Pool| {
        if let Some(n) = p.replicas {
            replicas.insert(role.clone(), n);
        }
        if let Some(pv) = p.platform.as_ref().and_then(|p| p.powervs.as_ref()) {
            let processors = match &pv.processors {
                None => None,
                Some(serde_yaml_ng::Value::Number(n)) => n.as_f64(),
                Some(serde_yaml_ng::Value::String(s)) => match s.parse::<f64>() {
                    Ok(f) => Some(f),
                    Err(_) => {
                        cx.err_in(
                            &path,
                            format!("{key}.platform.powervs.processors"),
                            format!("{s:?} is not a number"),
                        );
                        None
                    }
                },
                Some(_) => {
                    cx.err_in(
                        &path,
                        format!("{key}.platform.powervs.processors"),
                        "not a number",
                    );
                    None
                }
            };
            pools.insert(
                role,
                PowerVsPool {
                    sys_type: pv.sys_type.clone(),
                    proc_type: pv.proc_type.clone(),
                    processors,
                    memory: pv.memory_gib,
                },
            );
        }
    };
    if let Some(cp) = &doc.control_plane {
        pool(cx, "controlPlane".into(), ROLE_MASTER.into(), cp);
    }
    for (i, c) in doc.compute.iter().enumerate() {
        let role = c.name.clone().unwrap_or_else(|| "worker".into());
        pool(cx, format!("compute[{i}]"), role, c);
    }
    let powervs = doc
        .platform
        .and_then(|p| p.powervs)
        .map(|p| PowerVsPlatform {
            region: p.region,
            zone: p.zone,
            service_instance: p.service_instance_guid.or(p.service_instance_id),
            pools: pools.clone(),
        });
    Some(InstallConfig {
        name: doc.metadata.and_then(|m| m.name),
        base_domain: doc.base_domain,
        machine_networks,
        replicas,
        ssh_key: doc
            .ssh_key
            .map(|k| k.trim().to_string())
            .filter(|k| !k.is_empty()),
        powervs,
        path,
    })
}
