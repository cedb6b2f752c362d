//! Per-node Ignition: the role's config (as openshift-install wrote it)
//! plus the node's hostname and its host network's keyfiles; spec
//! version negotiated from the client's `Accept` header ([`decide`]);
//! [`spec`] knows which spec each field needs.

pub mod spec;

use super::fqdn;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::{json, Value};
use site::{Node, Site};
pub use spec::Version;

const IGNITION_MEDIA: &str = "application/vnd.coreos.ignition+json";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IgnitionError {
    #[error("node {node}: role {role:?} has no Ignition config")]
    NoRoleConfig { node: String, role: String },
    /// The client accepts no spec version we can serve this config as.
    #[error(
        "client accepts {accepted}; node's config is Ignition {have} and needs at least {needs}"
    )]
    NotAcceptable {
        accepted: String,
        have: String,
        needs: String,
    },
}

/// Everything a data: URL may carry unescaped (RFC 3986 unreserved).
const DATA_URL: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

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

/// Where a DHCP-addressed node's resolver drop-in goes.
pub const RESOLVER_CONF: &str = "/etc/NetworkManager/conf.d/50-cluster-dns.conf";

/// A NetworkManager drop-in that makes the node's network's `dnsServers`
/// its resolvers on the running system, whatever the segment's DHCP says
/// (a cloud's DHCP names the cloud's resolver, which knows nothing of
/// api-int.<domain>); `None` when the network names none.
pub fn resolver_conf(site: &Site, node: &Node) -> Option<String> {
    let servers = super::resolvers(site, node);
    if servers.is_empty() {
        return None;
    }
    let list: Vec<String> = servers.iter().map(ToString::to_string).collect();
    Some(format!(
        "# The cluster's names (api-int, api, *.apps) resolve through the\n\
         # boot appliance's DNS; names outside its zones are forwarded.\n\
         [global-dns]\nsearches={}\n\n[global-dns-domain-*]\nservers={}\n",
        site.cluster.domain(),
        list.join(",")
    ))
}

/// The node's config as a JSON value, in the role config's spec version.
pub fn node_config(site: &Site, node: &Node) -> Result<Value, IgnitionError> {
    let role = site
        .ignition
        .roles
        .get(&node.role)
        .ok_or_else(|| IgnitionError::NoRoleConfig {
            node: node.name.clone(),
            role: node.role.clone(),
        })?;
    let mut cfg = role.config.expose().clone();
    let mut ours = vec![file_entry(
        "/etc/hostname",
        &format!("{}\n", fqdn(site, node)),
        0o644,
    )];
    if let Some(hn) = &node.host_network {
        // Its keyfiles carry the DNS servers.
        for (path, content) in super::network::keyfiles(site, hn) {
            ours.push(file_entry(&path, &content, 0o600));
        }
    } else if let Some(conf) = resolver_conf(site, node) {
        ours.push(file_entry(RESOLVER_CONF, &conf, 0o644));
    }
    let obj = cfg
        .as_object_mut()
        .expect("role configs are validated to be JSON objects");
    let storage = obj.entry("storage").or_insert_with(|| json!({}));
    if !storage.is_object() {
        *storage = json!({});
    }
    let files = storage
        .as_object_mut()
        .map(|s| s.entry("files").or_insert_with(|| json!([])));
    if let Some(files) = files {
        if !files.is_array() {
            *files = json!([]);
        }
        let list = files.as_array_mut().expect("just made an array");
        // Ignition rejects two entries for one path: ours win.
        let our_paths: Vec<String> = ours
            .iter()
            .map(|f| f["path"].as_str().unwrap_or_default().to_string())
            .collect();
        list.retain(|f| {
            !our_paths
                .iter()
                .any(|p| f.get("path").and_then(Value::as_str) == Some(p))
        });
        list.extend(ours);
    }
    Ok(cfg)
}

/// What a client's `Accept` header says about Ignition specs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The spec versions named with the Ignition media type (q > 0), in
    /// header order.
    pub versions: Vec<Version>,
    /// No header, or a media range that takes any JSON (`*/*`,
    /// `application/*`, `application/json`, the Ignition type without a
    /// version) with q > 0.
    pub anything: bool,
}

/// Reads an `Accept` header (RFC 9110 section 12.5.1).
pub fn accepted(accept: Option<&str>) -> Accepted {
    let header = accept.unwrap_or_default();
    let mut out = Accepted {
        versions: Vec::new(),
        anything: header.trim().is_empty(),
    };
    for item in header.split(',') {
        let mut parts = item.split(';').map(str::trim);
        let range = parts.next().unwrap_or_default().to_ascii_lowercase();
        let (mut version, mut q) = (None, 1.0f32);
        for p in parts {
            let Some((k, v)) = p.split_once('=') else {
                continue;
            };
            let v = v.trim().trim_matches('"');
            match k.trim().to_ascii_lowercase().as_str() {
                "version" => version = Some(Version::parse(v)),
                "q" => q = v.parse().unwrap_or(0.0),
                _ => {}
            }
        }
        if q <= 0.0 {
            continue;
        }
        match (range.as_str(), version) {
            (IGNITION_MEDIA, Some(Some(v))) => out.versions.push(v),
            // A version we cannot read names nothing we can serve.
            (IGNITION_MEDIA, Some(None)) => {}
            (IGNITION_MEDIA | "*/*" | "application/*" | "application/json", _) => {
                out.anything = true
            }
            _ => {}
        }
    }
    out
}

/// How a config goes to a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serve {
    /// Unchanged: the client reads the config's spec.
    AsIs,
    /// With `ignition.version` set to this older spec, which has every
    /// field the config uses.
    As(Version),
}

/// The rule. An Ignition client reads every 3.x spec up to the newest it
/// names, so a config goes as it is to any client that names a 3.x
/// version at least the config's. An older client (it names only older
/// 3.x versions) gets the config relabelled to the newest of those that
/// has every field the config uses, else 406. A client that names no 3.x
/// version at all is served as is when it takes any JSON (no header,
/// `*/*`: Ignition 2.0.0 named spec 2.2.0 with `*/*;q=0.1` while it read
/// 3.0.0), else 406. Configs are never relabelled upwards.
pub fn decide(have: Version, needs: Version, acc: &Accepted) -> Result<Serve, IgnitionError> {
    let threes: Vec<Version> = acc
        .versions
        .iter()
        .copied()
        .filter(|v| v.0 == have.0)
        .collect();
    let refuse = || {
        let named = if acc.versions.is_empty() {
            "no Ignition spec and no */*".to_string()
        } else {
            format!(
                "Ignition spec {}",
                acc.versions
                    .iter()
                    .map(Version::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        IgnitionError::NotAcceptable {
            accepted: named,
            have: have.to_string(),
            needs: needs.to_string(),
        }
    };
    if threes.is_empty() {
        return if acc.anything {
            Ok(Serve::AsIs)
        } else {
            Err(refuse())
        };
    }
    if threes.iter().any(|v| *v >= have) {
        return Ok(Serve::AsIs);
    }
    threes
        .into_iter()
        .filter(|v| *v >= needs)
        .max()
        .map(Serve::As)
        .ok_or_else(refuse)
}

/// Serves `cfg` to a client with this `Accept` header by [`decide`]'s rule,
/// rewriting `ignition.version` when it goes down.
pub fn negotiate(mut cfg: Value, accept: Option<&str>) -> Result<Value, IgnitionError> {
    let have = cfg["ignition"]["version"]
        .as_str()
        .and_then(Version::parse)
        .unwrap_or(Version::V3_0);
    match decide(have, spec::min_version(&cfg), &accepted(accept))? {
        Serve::AsIs => Ok(cfg),
        Serve::As(v) => {
            cfg["ignition"]["version"] = Value::String(v.to_string());
            Ok(cfg)
        }
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

    const V: fn(u32, u32) -> Version = |a, b| Version(3, a, b);

    #[test]
    fn accept_parsing() {
        let a = "application/vnd.coreos.ignition+json;version=3.4.0, application/vnd.coreos.ignition+json; version=3.2.0;q=0.5, */*;q=0.1";
        assert_eq!(
            accepted(Some(a)),
            Accepted {
                versions: vec![V(4, 0), V(2, 0)],
                anything: true
            }
        );
        assert_eq!(
            accepted(Some("*/*")),
            Accepted {
                versions: vec![],
                anything: true
            }
        );
        assert_eq!(
            accepted(None),
            Accepted {
                versions: vec![],
                anything: true
            }
        );
        assert_eq!(
            accepted(Some("")),
            Accepted {
                versions: vec![],
                anything: true
            }
        );
        assert_eq!(
            accepted(Some("text/html")),
            Accepted {
                versions: vec![],
                anything: false
            }
        );
        // q=0 means "not acceptable"; names are case-insensitive.
        let a = "Application/VND.CoreOS.Ignition+JSON;Version=\"3.3.0\", */*;q=0";
        assert_eq!(
            accepted(Some(a)),
            Accepted {
                versions: vec![V(3, 0)],
                anything: false
            }
        );
        assert!(accepted(Some("application/json;q=0.2")).anything);
        assert_eq!(
            accepted(Some("application/vnd.coreos.ignition+json;version=banana")),
            Accepted {
                versions: vec![],
                anything: false
            }
        );
    }

    /// The Accept headers real clients send, each against configs of every
    /// spec from 3.0 to 3.5, with and without a field of the config's own
    /// spec. Headers are Ignition's own (internal/resource/url.go at each
    /// release tag).
    #[test]
    fn headers_seen_in_the_wild() {
        const IGN_0X_AND_2_0: &str =
            "application/vnd.coreos.ignition+json; version=2.2.0, application/vnd.coreos.ignition+json; version=1; q=0.5, */*; q=0.1";
        let ign = |v: &str| format!("application/vnd.coreos.ignition+json;version={v}, */*;q=0.1");
        // (client, header, newest spec it names or None)
        let clients: Vec<(&str, String, Option<Version>)> = vec![
            ("Ignition 0.x / 2.0-2.2", IGN_0X_AND_2_0.into(), None),
            ("Ignition 2.3-2.6", ign("3.1.0"), Some(V(1, 0))),
            ("Ignition 2.7-2.10", ign("3.2.0"), Some(V(2, 0))),
            ("Ignition 2.11-2.14", ign("3.3.0"), Some(V(3, 0))),
            ("Ignition 2.15-2.19", ign("3.4.0"), Some(V(4, 0))),
            ("Ignition 2.20-2.22", ign("3.5.0"), Some(V(5, 0))),
            ("Ignition 2.23+", ign("3.6.0"), Some(V(6, 0))),
            ("curl, wget", "*/*".into(), None),
            ("no header", String::new(), None),
        ];
        // A field that needs exactly spec 3.N.
        let field_of = |minor: u32| -> Option<(&str, Value)> {
            match minor {
                1 => Some(("proxy", json!({"httpProxy": "http://p"}))),
                2 => Some((
                    "storage",
                    json!({"luks": [{"name": "root", "device": "/dev/sda"}]}),
                )),
                3 => Some(("kernelArguments", json!({"shouldExist": ["a"]}))),
                4 => Some((
                    "storage",
                    json!({"luks": [{"name": "root", "device": "/dev/sda", "discard": true}]}),
                )),
                5 => Some((
                    "storage",
                    json!({"luks": [{"name": "root", "device": "/dev/sda", "cex": {"enabled": true}}]}),
                )),
                _ => None,
            }
        };
        for minor in 0..=5 {
            for with_field in [false, true] {
                let mut cfg = json!({"ignition": {"version": format!("3.{minor}.0")}});
                let needs = match (with_field, field_of(minor)) {
                    (true, Some((k, v))) => {
                        cfg[k] = v;
                        V(minor, 0)
                    }
                    (true, None) => continue,
                    (false, _) => Version::V3_0,
                };
                for (client, header, newest) in &clients {
                    let accept = (!header.is_empty()).then_some(header.as_str());
                    let got = negotiate(cfg.clone(), accept);
                    let want: Option<Version> = match newest {
                        None => Some(V(minor, 0)),
                        Some(n) if *n >= V(minor, 0) => Some(V(minor, 0)),
                        Some(n) if *n >= needs => Some(*n),
                        Some(_) => None,
                    };
                    match (want, got) {
                        (Some(w), Ok(c)) => {
                            assert_eq!(c["ignition"]["version"], w.to_string(), "{client} given 3.{minor}.0 (field {with_field})")
                        }
                        (None, Err(IgnitionError::NotAcceptable { .. })) => {}
                        (w, g) => panic!("{client} given 3.{minor}.0 (field {with_field}): want {w:?}, got {g:?}"),
                    }
                }
            }
        }
    }

    /// The configs openshift-install writes (3.2.0) go as they are to the
    /// Ignition releases RHCOS ships: the reported refusal.
    #[test]
    fn openshift_configs_reach_newer_clients() {
        let cfg = json!({"ignition": {"version": "3.2.0", "config": {"merge": [{"source": "https://api-int:22623/config/master"}]}}});
        for v in ["3.3.0", "3.4.0", "3.5.0"] {
            let h = format!("application/vnd.coreos.ignition+json;version={v}, */*;q=0.1");
            assert_eq!(negotiate(cfg.clone(), Some(&h)).unwrap(), cfg, "{v}");
        }
    }

    #[test]
    fn refusals_say_why() {
        let cfg =
            json!({"ignition": {"version": "3.2.0"}, "storage": {"luks": [{"name": "root"}]}});
        // A client that names only spec 2 and takes nothing else.
        let e = negotiate(
            cfg.clone(),
            Some("application/vnd.coreos.ignition+json; version=2.2.0"),
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "client accepts Ignition spec 2.2.0; node's config is Ignition 3.2.0 and needs at least 3.2.0");
        // An older 3.x client, and a field it cannot read: */* does not override what it named.
        let e = negotiate(
            cfg.clone(),
            Some("application/vnd.coreos.ignition+json;version=3.1.0, */*;q=0.1"),
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "client accepts Ignition spec 3.1.0; node's config is Ignition 3.2.0 and needs at least 3.2.0");
        let e = negotiate(cfg, Some("text/html")).unwrap_err();
        assert_eq!(e.to_string(), "client accepts no Ignition spec and no */*; node's config is Ignition 3.2.0 and needs at least 3.2.0");
    }

    #[test]
    fn data_urls_escape_everything_but_unreserved() {
        assert_eq!(data_url("a b\n%/"), "data:,a%20b%0A%25%2F");
    }
}
