//! `bootd nodes import --install-config FILE`: the nodes of an
//! install-config's `platform.baremetal.hosts`, as OpenShift describes a
//! rack, created through the API: name, role, boot MAC, BMC (Redfish,
//! Redfish virtual media, IPMI, by the address schemes OpenShift writes),
//! root-device hints and NMState network config. The BMC password is
//! never read here: each node's provider refers to the host in FILE
//! (`{file, installConfigHost}`), and bootd reads it from there when it
//! talks to that BMC.

use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// The part of an install-config this reads. `bmc.password` is not a
/// field: the parser skips it, and no request carries it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct InstallConfig {
    platform: Option<Platform>,
}

#[derive(Debug, Deserialize)]
struct Platform {
    baremetal: Option<Baremetal>,
}

#[derive(Debug, Deserialize)]
struct Baremetal {
    #[serde(default)]
    hosts: Vec<Host>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Host {
    name: Option<String>,
    role: Option<String>,
    bmc: Option<Bmc>,
    #[serde(rename = "bootMACAddress")]
    boot_mac_address: Option<String>,
    boot_mode: Option<String>,
    root_device_hints: Option<Value>,
    network_config: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Bmc {
    address: Option<String>,
    username: Option<String>,
    #[serde(default)]
    disable_certificate_verification: bool,
}

/// What a BMC address names: the provider, and its spec without the
/// credentials.
#[derive(Debug, Clone, PartialEq)]
pub enum BmcAddress {
    Redfish {
        /// `https://host[:port]` or `http://…`, with the system's path.
        url: String,
        virtual_media: bool,
    },
    Ipmi {
        address: String,
        port: u16,
    },
}

/// The BMC address schemes of OpenShift's bare-metal platform that bootd
/// drives, and the others by name.
pub fn bmc_address(a: &str) -> Result<BmcAddress, String> {
    let (scheme, rest) = a
        .split_once("://")
        .ok_or_else(|| format!("{a:?} is not a BMC address (scheme://host…)"))?;
    let redfish = |plain: bool, virtual_media: bool| -> Result<BmcAddress, String> {
        let (host, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if host.is_empty() {
            return Err(format!("{a:?}: no host"));
        }
        // No path: the BMC's one system (its service root).
        let path = if path == "/" { "" } else { path };
        if !path.is_empty() && !path.starts_with("/redfish/v1/Systems/") {
            return Err(format!(
                "{a:?}: the path is a Redfish system's (/redfish/v1/Systems/<id>)"
            ));
        }
        let scheme = if plain { "http" } else { "https" };
        Ok(BmcAddress::Redfish {
            url: format!("{scheme}://{host}{path}"),
            virtual_media,
        })
    };
    match scheme {
        "redfish" | "redfish+https" | "idrac-redfish" | "idrac-redfish+https" => redfish(false, false),
        "redfish+http" | "idrac-redfish+http" => redfish(true, false),
        "redfish-virtualmedia" | "redfish-virtualmedia+https" | "idrac-virtualmedia"
        | "idrac-virtualmedia+https" => redfish(false, true),
        "redfish-virtualmedia+http" | "idrac-virtualmedia+http" => redfish(true, true),
        "ipmi" => {
            let host = rest.trim_end_matches('/');
            let (address, port) = match host.rsplit_once(':') {
                // [v6]:port, or v4/name:port
                Some((h, p)) if !h.ends_with(':') && p.bytes().all(|b| b.is_ascii_digit()) => {
                    (h.trim_matches(|c| c == '[' || c == ']').to_string(), p.parse::<u16>().map_err(|_| format!("{a:?}: bad port"))?)
                }
                _ => (host.trim_matches(|c| c == '[' || c == ']').to_string(), 623),
            };
            if address.is_empty() {
                return Err(format!("{a:?}: no host"));
            }
            Ok(BmcAddress::Ipmi { address, port })
        }
        other => Err(format!(
            "{other}:// is not supported: redfish, redfish+http(s), redfish-virtualmedia(+http/s), \
             idrac-virtualmedia(+http/s), idrac-redfish(+http/s) or ipmi (iLO, iRMC, iDRAC's WS-Man \
             and the others need their vendor's protocol)"
        )),
    }
}

/// The `POST /v1/nodes` body of each host, in the file's order, or every
/// problem (with the host's index and key). `file` is where bootd reads
/// the install-config (absolute, on its host); `ips` gives addresses to
/// hosts whose networkConfig has no static one.
pub fn bodies(
    text: &str,
    file: &Path,
    ips: &BTreeMap<String, String>,
) -> Result<Vec<Value>, Vec<String>> {
    let ic: InstallConfig =
        serde_yaml_ng::from_str(text).map_err(|e| vec![format!("not an install-config: {e}")])?;
    let hosts = ic
        .platform
        .and_then(|p| p.baremetal)
        .map(|b| b.hosts)
        .unwrap_or_default();
    if hosts.is_empty() {
        return Err(vec!["no platform.baremetal.hosts".into()]);
    }
    if !file.is_absolute() {
        return Err(vec![format!(
            "{}: give the install-config's absolute path (bootd reads each BMC password from it, on its host)",
            file.display()
        )]);
    }
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for (i, h) in hosts.iter().enumerate() {
        let at = |k: &str| format!("platform.baremetal.hosts[{i}].{k}");
        let mut bad = |k: &str, why: String| problems.push(format!("{}: {why}", at(k)));
        let Some(name) = h.name.clone() else {
            bad("name", "required".into());
            continue;
        };
        let role = match h.role.as_deref() {
            Some(r @ ("master" | "worker")) => r.to_string(),
            // OpenShift's other spellings of the two roles.
            Some("control-plane") => "master".into(),
            Some("arbiter") => {
                bad(
                    "role",
                    "arbiter: not a role bootd installs (master or worker)".into(),
                );
                continue;
            }
            Some(r) => {
                bad("role", format!("{r:?}: master or worker"));
                continue;
            }
            None => {
                bad("role", "required (master or worker)".into());
                continue;
            }
        };
        let mut node = Map::new();
        node.insert("name".into(), json!(name));
        node.insert("role".into(), json!(role));
        match &h.boot_mac_address {
            Some(m) => {
                node.insert("macs".into(), json!([m]));
            }
            None => bad(
                "bootMACAddress",
                "required: the NIC the machine network-boots from".into(),
            ),
        }
        let static_ip = h.network_config.as_ref().and_then(|nc| {
            site::nmstate::NetworkConfig::static_ips_of(nc)
                .into_iter()
                .next()
        });
        match (ips.get(&name).cloned(), static_ip) {
            (Some(ip), _) | (None, Some(ip)) => {
                node.insert("ip".into(), json!(ip));
            }
            (None, None) => bad(
                "networkConfig",
                format!("no static address for {name}: give one in networkConfig, or --ip {name}=ADDRESS"),
            ),
        }
        match h.boot_mode.as_deref() {
            None => {}
            Some("UEFI" | "UEFISecureBoot") => {
                node.insert("firmware".into(), json!("uefi"));
            }
            Some("legacy") => {
                node.insert("firmware".into(), json!("bios"));
            }
            Some(m) => bad("bootMode", format!("{m:?}: UEFI, UEFISecureBoot or legacy")),
        }
        // Without hints, Ironic installs to the smallest disk of at least
        // 4 GiB; bootd takes the first the machine reports of that size
        // (docs/bmc.md): a rack host never runs live by accident.
        let hints = h
            .root_device_hints
            .clone()
            .unwrap_or_else(|| json!({ "minSizeGigabytes": 4 }));
        node.insert("rootDeviceHints".into(), hints);
        if let Some(nc) = &h.network_config {
            node.insert("networkConfig".into(), nc.clone());
        }
        let Some(bmc) = &h.bmc else {
            bad("bmc", "required (address, username, password)".into());
            continue;
        };
        let password = json!({ "file": file, "installConfigHost": name });
        let Some(username) = bmc.username.clone() else {
            bad("bmc.username", "required".into());
            continue;
        };
        let provider = match bmc.address.as_deref().map(bmc_address) {
            Some(Ok(BmcAddress::Redfish { url, virtual_media })) => {
                let mut r = json!({ "url": url, "username": username, "password": password });
                if url.starts_with("http://") {
                    r["allowPlainHttp"] = json!(true);
                }
                if bmc.disable_certificate_verification {
                    r["insecureSkipVerify"] = json!(true);
                }
                if virtual_media {
                    r["boot"] = json!("virtualMedia");
                }
                json!({ "redfish": r })
            }
            Some(Ok(BmcAddress::Ipmi { address, port })) => {
                json!({ "ipmi": { "address": address, "port": port, "username": username, "password": password } })
            }
            Some(Err(why)) => {
                bad("bmc.address", why);
                continue;
            }
            None => {
                bad("bmc.address", "required".into());
                continue;
            }
        };
        node.insert("provider".into(), provider);
        out.push(Value::Object(node));
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// Whether an install-config lists `platform.baremetal.hosts`.
pub fn has_hosts(text: &str) -> bool {
    serde_yaml_ng::from_str::<InstallConfig>(text)
        .ok()
        .and_then(|ic| ic.platform)
        .and_then(|p| p.baremetal)
        .is_some_and(|b| !b.hosts.is_empty())
}

/// For `cluster up`: the bodies of the hosts not yet among `have` (node
/// names), every problem of the file at once as `bodies` has them.
pub fn hosts_to_make(text: &str, file: &Path, have: &[String]) -> Result<Vec<Value>, Vec<String>> {
    if !has_hosts(text) {
        return Ok(Vec::new());
    }
    Ok(bodies(text, file, &BTreeMap::new())?
        .into_iter()
        .filter(|b| !have.iter().any(|h| b["name"] == h.as_str()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const IC: &str = r#"
apiVersion: v1
metadata: { name: ocp }
platform:
  baremetal:
    apiVIPs: [10.77.0.5]
    hosts:
      - name: master-0
        role: master
        bmc: { address: "redfish-virtualmedia://10.1.0.10/redfish/v1/Systems/1", username: admin, password: "s3cret-m0", disableCertificateVerification: true }
        bootMACAddress: "52:54:00:aa:00:01"
        bootMode: UEFI
        rootDeviceHints: { deviceName: /dev/disk/by-path/pci-0000:00:17.0-ata-1 }
        networkConfig:
          interfaces:
            - { name: eno1, type: ethernet, ipv4: { enabled: true, address: [{ ip: 10.77.0.11, prefix-length: 24 }] } }
      - name: worker-0
        role: worker
        bmc: { address: "ipmi://10.1.0.20:6230", username: root, password: "s3cret-w0" }
        bootMACAddress: "52:54:00:aa:00:02"
        bootMode: legacy
      - name: worker-1
        role: worker
        bmc: { address: "redfish+http://[fd00::20]:8000/redfish/v1/Systems/abc", username: admin, password: "s3cret-w1" }
        bootMACAddress: "52:54:00:aa:00:03"
      - name: worker-2
        role: worker
        bmc: { address: "idrac-virtualmedia://10.1.0.22", username: admin, password: "s3cret-w2" }
        bootMACAddress: "52:54:00:aa:00:04"
"#;

    fn ips() -> BTreeMap<String, String> {
        [
            ("worker-0", "10.77.0.20"),
            ("worker-1", "10.77.0.21"),
            ("worker-2", "10.77.0.22"),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
    }

    #[test]
    fn each_host_becomes_a_node_with_its_bmc_and_no_password() {
        let file = Path::new("/etc/bare-metal-boot/bmc/install-config.yaml");
        let b = bodies(IC, file, &ips()).unwrap();
        assert_eq!(b.len(), 4);
        let pw = |name: &str| json!({ "file": file, "installConfigHost": name });
        assert_eq!(
            b[0],
            json!({
                "name": "master-0", "role": "master", "macs": ["52:54:00:aa:00:01"], "ip": "10.77.0.11",
                "firmware": "uefi",
                "rootDeviceHints": { "deviceName": "/dev/disk/by-path/pci-0000:00:17.0-ata-1" },
                "networkConfig": { "interfaces": [{ "name": "eno1", "type": "ethernet", "ipv4": { "enabled": true, "address": [{ "ip": "10.77.0.11", "prefix-length": 24 }] } }] },
                "provider": { "redfish": { "url": "https://10.1.0.10/redfish/v1/Systems/1", "username": "admin",
                    "password": pw("master-0"), "insecureSkipVerify": true, "boot": "virtualMedia" } }
            })
        );
        assert_eq!(
            b[1]["provider"],
            json!({ "ipmi": { "address": "10.1.0.20", "port": 6230, "username": "root", "password": pw("worker-0") } })
        );
        assert_eq!(b[1]["firmware"], "bios");
        assert_eq!(b[1]["ip"], "10.77.0.20");
        assert_eq!(
            b[2]["provider"]["redfish"],
            json!({ "url": "http://[fd00::20]:8000/redfish/v1/Systems/abc", "username": "admin", "password": pw("worker-1"), "allowPlainHttp": true })
        );
        // No path: the BMC's one system, at its service root.
        assert_eq!(b[3]["provider"]["redfish"]["url"], "https://10.1.0.22");
        assert_eq!(b[3]["provider"]["redfish"]["boot"], "virtualMedia");
        let all = serde_json::to_string(&b).unwrap();
        assert!(!all.contains("s3cret"), "{all}");
    }

    #[test]
    fn every_problem_is_named_with_its_host() {
        let text = IC
            .replace("ipmi://10.1.0.20:6230", "ilo5-virtualmedia://10.1.0.20")
            .replace(
                "role: worker\n        bmc: { address: \"redfish+http",
                "role: infra\n        bmc: { address: \"redfish+http",
            )
            .replace("        bootMACAddress: \"52:54:00:aa:00:04\"\n", "");
        let mut no_ips = ips();
        no_ips.remove("worker-2");
        let e = bodies(&text, Path::new("/etc/ic.yaml"), &no_ips).unwrap_err();
        let all = e.join("\n");
        assert!(
            all.contains("hosts[1].bmc.address: ilo5-virtualmedia:// is not supported"),
            "{all}"
        );
        assert!(
            all.contains("hosts[2].role: \"infra\": master or worker"),
            "{all}"
        );
        assert!(all.contains("hosts[3].bootMACAddress: required"), "{all}");
        assert!(
            all.contains("hosts[3].networkConfig: no static address for worker-2"),
            "{all}"
        );
        assert!(!all.contains("s3cret"), "{all}");
        let e = bodies(IC, Path::new("ic.yaml"), &ips()).unwrap_err();
        assert!(e[0].contains("absolute path"), "{e:?}");
    }

    #[test]
    fn cluster_up_makes_the_hosts_not_yet_there() {
        let file = Path::new("/etc/bare-metal-boot/bmc/install-config.yaml");
        let text = IC.replace("      - name: worker-0\n", "      - name: worker-0\n        networkConfig: { interfaces: [{ name: eno1, type: ethernet, ipv4: { enabled: true, address: [{ ip: 10.77.0.20, prefix-length: 24 }] } }] }\n")
            .replace("      - name: worker-1\n", "      - name: worker-1\n        networkConfig: { interfaces: [{ name: eno1, type: ethernet, ipv4: { enabled: true, address: [{ ip: 10.77.0.21, prefix-length: 24 }] } }] }\n")
            .replace("      - name: worker-2\n", "      - name: worker-2\n        networkConfig: { interfaces: [{ name: eno1, type: ethernet, ipv4: { enabled: true, address: [{ ip: 10.77.0.22, prefix-length: 24 }] } }] }\n");
        let make = hosts_to_make(&text, file, &["master-0".into(), "worker-1".into()]).unwrap();
        let names: Vec<&str> = make.iter().map(|b| b["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["worker-0", "worker-2"]);
        assert!(
            hosts_to_make("apiVersion: v1\nplatform: { none: {} }\n", file, &[])
                .unwrap()
                .is_empty()
        );
        // Without addresses (the hosts have no static one, cluster up has no --ip): said.
        let e = hosts_to_make(IC, file, &[]).unwrap_err();
        assert!(
            e.iter()
                .any(|p| p.contains("no static address for worker-0")),
            "{e:?}"
        );
    }

    #[test]
    fn the_password_is_read_from_the_host_in_the_file() {
        let pw = crate::providers::bmc::install_config_password(IC.as_bytes(), "worker-1").unwrap();
        assert_eq!(pw.0, "s3cret-w1");
        let e =
            crate::providers::bmc::install_config_password(IC.as_bytes(), "worker-9").unwrap_err();
        assert_eq!(e, "no host \"worker-9\" in platform.baremetal.hosts");
        let e = crate::providers::bmc::install_config_password(b"password: [", "x").unwrap_err();
        assert!(!e.contains("password: ["), "{e}");
    }
}
