//! Per-node Ignition: the role's config (as openshift-install wrote it)
//! plus the node's hostname and optional static network keyfile; spec
//! version negotiated from the client's `Accept` header as OpenShift's
//! machine-config server does.

use super::fqdn;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::{json, Value};
use site::{Node, Site, StaticNetwork};

const IGNITION_MEDIA: &str = "application/vnd.coreos.ignition+json";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IgnitionError {
    #[error("node {node}: role {role:?} has no Ignition config")]
    NoRoleConfig { node: String, role: String },
    /// The client accepts no spec version we can serve this config as.
    #[error("client accepts Ignition spec {accepted}; node's config is {have} and needs at least {needs}")]
    NotAcceptable { accepted: String, have: String, needs: String },
}

/// Everything a data: URL may carry unescaped (RFC 3986 unreserved).
const DATA_URL: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

fn data_url(content: &str) -> String {
    format!("data:,{}", utf8_percent_encode(content, DATA_URL))
}

fn file_entry(path: &str, content: &str, mode: u32) -> Value {
    json!({
        "path": path,
        "mode": mode,
        "overwrite": true,
        "contents": { "source": data_url(content) },
    })
}

/// A NetworkManager keyfile for the node's static addressing.
pub fn nm_keyfile(site: &Site, sn: &StaticNetwork) -> String {
    let mut s = format!("[connection]\nid={iface}\ntype=ethernet\ninterface-name={iface}\nautoconnect=true\n\n", iface = sn.interface);
    if let Some(mtu) = sn.mtu {
        s.push_str(&format!("[ethernet]\nmtu={mtu}\n\n"));
    }
    let fam = if sn.address.addr().is_ipv4() { "ipv4" } else { "ipv6" };
    let other = if fam == "ipv4" { "ipv6" } else { "ipv4" };
    s.push_str(&format!("[{fam}]\nmethod=manual\naddress1={}", sn.address));
    if let Some(gw) = sn.gateway {
        s.push_str(&format!(",{gw}"));
    }
    s.push('\n');
    if !sn.dns.is_empty() {
        let dns: Vec<String> = sn.dns.iter().map(|d| format!("{d};")).collect();
        s.push_str(&format!("dns={}\n", dns.concat()));
    }
    s.push_str(&format!("dns-search={};\n\n[{other}]\nmethod=disabled\n", site.cluster.domain()));
    s
}

/// The node's config as a JSON value, in the role config's spec version.
pub fn node_config(site: &Site, node: &Node) -> Result<Value, IgnitionError> {
    let role = site
        .ignition
        .roles
        .get(&node.role)
        .ok_or_else(|| IgnitionError::NoRoleConfig { node: node.name.clone(), role: node.role.clone() })?;
    let mut cfg = role.config.expose().clone();
    let mut ours = vec![file_entry("/etc/hostname", &format!("{}\n", fqdn(site, node)), 0o644)];
    if let Some(sn) = &node.static_network {
        ours.push(file_entry(
            &format!("/etc/NetworkManager/system-connections/{}.nmconnection", sn.interface),
            &nm_keyfile(site, sn),
            0o600,
        ));
    }
    let obj = cfg.as_object_mut().expect("role configs are validated to be JSON objects");
    let storage = obj.entry("storage").or_insert_with(|| json!({}));
    if !storage.is_object() {
        *storage = json!({});
    }
    let files = storage.as_object_mut().map(|s| s.entry("files").or_insert_with(|| json!([])));
    if let Some(files) = files {
        if !files.is_array() {
            *files = json!([]);
        }
        let list = files.as_array_mut().expect("just made an array");
        // Ignition rejects two entries for one path: ours win.
        let our_paths: Vec<String> = ours.iter().map(|f| f["path"].as_str().unwrap_or_default().to_string()).collect();
        list.retain(|f| !our_paths.iter().any(|p| f.get("path").and_then(Value::as_str) == Some(p)));
        list.extend(ours);
    }
    Ok(cfg)
}

/// Parses `version=3.2.0` style versions.
fn parse_version(v: &str) -> Option<(u32, u32, u32)> {
    let v = v.split('-').next()?; // 3.4.0-experimental
    let mut it = v.split('.').map(|p| p.parse::<u32>().ok());
    Some((it.next()??, it.next().flatten().unwrap_or(0), it.next().flatten().unwrap_or(0)))
}

fn fmt_version(v: (u32, u32, u32)) -> String {
    format!("{}.{}.{}", v.0, v.1, v.2)
}

/// The Ignition spec versions an `Accept` header names (empty: no
/// preference, serve the config as it is).
pub fn accepted_versions(accept: Option<&str>) -> Vec<(u32, u32, u32)> {
    let mut out = Vec::new();
    for item in accept.unwrap_or_default().split(',') {
        let mut parts = item.split(';').map(str::trim);
        if !parts.next().is_some_and(|m| m.eq_ignore_ascii_case(IGNITION_MEDIA)) {
            continue;
        }
        for p in parts {
            if let Some((k, v)) = p.split_once('=') {
                if k.trim().eq_ignore_ascii_case("version") {
                    if let Some(v) = parse_version(v.trim().trim_matches('"')) {
                        out.push(v);
                    }
                }
            }
        }
    }
    out
}

/// The lowest 3.x spec version that has every field the config uses.
fn min_version(cfg: &Value) -> (u32, u32, u32) {
    fn walk(v: &Value, min: &mut (u32, u32, u32)) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    let need = match k.as_str() {
                        "compression" | "httpHeaders" | "proxy" => (3, 1, 0),
                        "luks" | "resize" | "shouldExist" => (3, 2, 0),
                        "kernelArguments" => (3, 3, 0),
                        "cex" => (3, 4, 0),
                        _ => (3, 0, 0),
                    };
                    *min = (*min).max(need);
                    walk(v, min);
                }
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, min)),
            _ => {}
        }
    }
    let mut min = (3, 0, 0);
    walk(cfg, &mut min);
    min
}

/// Picks the spec version to serve `cfg` as, given what the client accepts,
/// and rewrites `ignition.version` accordingly. As the machine-config server
/// does: serve the config's own version if accepted, else the highest
/// accepted 3.x version that can express the config.
pub fn negotiate(mut cfg: Value, accept: Option<&str>) -> Result<Value, IgnitionError> {
    let have_s = cfg["ignition"]["version"].as_str().unwrap_or("3.0.0").to_string();
    let have = parse_version(&have_s).unwrap_or((3, 0, 0));
    let accepted = accepted_versions(accept);
    if accepted.is_empty() || accepted.iter().any(|v| (v.0, v.1) == (have.0, have.1)) {
        return Ok(cfg);
    }
    let needs = min_version(&cfg);
    let pick = accepted.iter().filter(|v| v.0 == 3 && **v >= needs && **v <= have).max().copied();
    match pick {
        Some(v) => {
            cfg["ignition"]["version"] = Value::String(fmt_version(v));
            Ok(cfg)
        }
        None => Err(IgnitionError::NotAcceptable {
            accepted: accepted.iter().map(|v| fmt_version(*v)).collect::<Vec<_>>().join(", "),
            have: have_s,
            needs: fmt_version(needs),
        }),
    }
}

/// A pointer config that merges `source` and trusts the site CA (PEM).
pub fn pointer(source: &str, ca_pem: Option<&str>) -> Value {
    let mut cfg = json!({
        "ignition": {
            "version": "3.2.0",
            "config": { "merge": [ { "source": source } ] },
        }
    });
    if let Some(ca) = ca_pem {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD.encode(ca);
        cfg["ignition"]["security"] = json!({
            "tls": { "certificateAuthorities": [ { "source": format!("data:text/plain;charset=utf-8;base64,{b64}") } ] }
        });
    }
    cfg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_parsing() {
        let a = "application/vnd.coreos.ignition+json;version=3.4.0, application/vnd.coreos.ignition+json; version=3.2.0;q=0.5, */*;q=0.1";
        assert_eq!(accepted_versions(Some(a)), vec![(3, 4, 0), (3, 2, 0)]);
        assert!(accepted_versions(Some("*/*")).is_empty());
        assert!(accepted_versions(None).is_empty());
    }

    #[test]
    fn negotiation() {
        let cfg = json!({"ignition": {"version": "3.2.0"}, "storage": {"files": []}});
        // No preference, or the same minor: as is.
        assert_eq!(negotiate(cfg.clone(), None).unwrap()["ignition"]["version"], "3.2.0");
        // A 3.1-only client gets 3.1.0: nothing here needs 3.2.
        let v = negotiate(cfg.clone(), Some("application/vnd.coreos.ignition+json;version=3.1.0")).unwrap();
        assert_eq!(v["ignition"]["version"], "3.1.0");
        // A 2.2-only client cannot be served a 3.x config.
        let e = negotiate(cfg.clone(), Some("application/vnd.coreos.ignition+json;version=2.2.0")).unwrap_err();
        assert!(matches!(e, IgnitionError::NotAcceptable { .. }));
        // A config using LUKS (3.2) cannot go down to 3.1.
        let luks = json!({"ignition": {"version": "3.2.0"}, "storage": {"luks": [{"name": "root"}]}});
        assert!(negotiate(luks, Some("application/vnd.coreos.ignition+json;version=3.1.0")).is_err());
        // Never up: a 3.4-only client of a 3.2 config gets nothing.
        assert!(negotiate(cfg, Some("application/vnd.coreos.ignition+json;version=3.4.0")).is_err());
    }

    #[test]
    fn data_urls_escape_everything_but_unreserved() {
        assert_eq!(data_url("a b\n%/"), "data:,a%20b%0A%25%2F");
    }
}
