//! `host.api.kubeconfig`: the cluster whose kubelet certificates the
//! controller approves. Read when the site loads, as kubectl reads it (the
//! current context, its cluster and its user; relative paths from the
//! kubeconfig's directory), and checked: every problem at once, each with
//! its key path inside the kubeconfig.
//!
//! Invariant: a problem never quotes a value of the file (it holds a key or
//! a token); only names, paths and positions.

use super::Cx;
use crate::model::{KubeAuth, Kubeconfig};
use crate::Secret;
use base64::Engine;
use serde_yaml_ng::{Mapping, Value};
use std::path::{Path, PathBuf};

const K: &str = "host.api.kubeconfig";

/// Collects the kubeconfig's problems under its own file name.
struct Problems<'a, 'b> {
    cx: &'a mut Cx,
    file: &'b Path,
    bad: bool,
}

impl Problems<'_, '_> {
    fn err(&mut self, key: impl Into<String>, reason: impl Into<String>) {
        self.bad = true;
        let reason = format!("{} (the kubeconfig of {K})", reason.into());
        self.cx.err_in(self.file, key, reason);
    }
}

/// Reads and checks the kubeconfig at `path` (relative to the site file).
pub(super) fn kubeconfig(cx: &mut Cx, path: &Path) -> Option<Kubeconfig> {
    let path = cx.resolve(path);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            cx.err(
                K,
                format!("{}: cannot read the kubeconfig: {e}", path.display()),
            );
            return None;
        }
    };
    let dir = path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let mut p = Problems {
        cx,
        file: &path,
        bad: false,
    };
    let doc: Value = match serde_yaml_ng::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            // Only where: a syntax error's text may quote the line.
            let at = e
                .location()
                .map(|l| format!(" (line {}, column {})", l.line(), l.column()))
                .unwrap_or_default();
            p.err("", format!("not YAML{at}"));
            return None;
        }
    };
    let Some(doc) = doc.as_mapping() else {
        p.err(
            "",
            "not a kubeconfig (a map with clusters, contexts, users)",
        );
        return None;
    };
    let current = string(&mut p, doc, "current-context", "current-context")?;
    let (ci, context) = named(
        &mut p,
        doc,
        "contexts",
        "context",
        &current,
        "current-context",
    )?;
    let cluster_name = string(
        &mut p,
        context,
        "cluster",
        &format!("contexts[{ci}].context.cluster"),
    );
    let user_name = string(
        &mut p,
        context,
        "user",
        &format!("contexts[{ci}].context.user"),
    );
    let cluster = cluster_name.and_then(|n| {
        named(
            &mut p,
            doc,
            "clusters",
            "cluster",
            &n,
            &format!("contexts[{ci}].context.cluster"),
        )
    });
    let user = user_name.and_then(|n| {
        named(
            &mut p,
            doc,
            "users",
            "user",
            &n,
            &format!("contexts[{ci}].context.user"),
        )
    });
    let (server, ca_pem) = match cluster {
        Some((i, c)) => cluster_of(&mut p, &dir, i, c),
        None => (None, None),
    };
    let auth = user.and_then(|(i, u)| auth_of(&mut p, &dir, i, u));
    if p.bad {
        return None;
    }
    Some(Kubeconfig {
        path: path.clone(),
        context: current,
        server: server?,
        ca_pem: ca_pem?,
        auth: auth?,
    })
}

fn string(p: &mut Problems, m: &Mapping, field: &str, key: &str) -> Option<String> {
    match m.get(field) {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(Value::String(_)) | None => {
            p.err(key, "required");
            None
        }
        Some(_) => {
            p.err(key, "not a string");
            None
        }
    }
}

/// The entry of list `list` called `name` (`[{name, <field>: {...}}]`), by
/// index, with its `<field>` map.
fn named<'a>(
    p: &mut Problems,
    doc: &'a Mapping,
    list: &str,
    field: &str,
    name: &str,
    from: &str,
) -> Option<(usize, &'a Mapping)> {
    let items = match doc.get(list) {
        Some(Value::Sequence(s)) => s,
        Some(_) => {
            p.err(list, "not a list");
            return None;
        }
        None => {
            p.err(
                list,
                format!("required: the {field} {name:?} ({from}) is in it"),
            );
            return None;
        }
    };
    let found = items
        .iter()
        .position(|e| e.get("name").and_then(Value::as_str) == Some(name));
    let Some(i) = found else {
        p.err(from, format!("no {field} named {name:?} in {list}"));
        return None;
    };
    match items[i].get(field).and_then(Value::as_mapping) {
        Some(m) => Some((i, m)),
        None => {
            p.err(format!("{list}[{i}].{field}"), "required: a map");
            None
        }
    }
}

/// Keys that change how the server is reached or verified, which the
/// controller does not implement: refused rather than ignored.
const CLUSTER_UNSUPPORTED: &[&str] = &["tls-server-name", "proxy-url"];
const USER_UNSUPPORTED: &[&str] = &[
    "exec",
    "auth-provider",
    "username",
    "password",
    "as",
    "as-uid",
    "as-groups",
    "as-user-extra",
];

fn cluster_of(
    p: &mut Problems,
    dir: &Path,
    i: usize,
    c: &Mapping,
) -> (Option<String>, Option<Vec<u8>>) {
    let key = |k: &str| format!("clusters[{i}].cluster.{k}");
    for k in CLUSTER_UNSUPPORTED {
        if c.contains_key(*k) {
            p.err(key(k), "not supported by the controller");
        }
    }
    if c.get("insecure-skip-tls-verify").and_then(Value::as_bool) == Some(true) {
        p.err(
            key("insecure-skip-tls-verify"),
            "not supported: the controller verifies the API server against the cluster's CA",
        );
    }
    let server = string(p, c, "server", &key("server")).and_then(|s| {
        let rest = s.strip_prefix("https://").unwrap_or_default();
        if rest.is_empty()
            || rest.starts_with('/')
            || s.contains(|c: char| c.is_whitespace() || c == '?' || c == '#')
        {
            p.err(
                key("server"),
                "not an https:// URL (the cluster's API server)",
            );
            None
        } else {
            Some(s.trim_end_matches('/').to_string())
        }
    });
    let ca = pem_field(
        p,
        dir,
        c,
        ("certificate-authority-data", "certificate-authority"),
        &key,
        Pem::Certificate,
        "required: certificate-authority-data or certificate-authority (the CA the server's certificate chains to)",
    );
    (server, ca.map(|s| s.0))
}

fn auth_of(p: &mut Problems, dir: &Path, i: usize, u: &Mapping) -> Option<KubeAuth> {
    let key = |k: &str| format!("users[{i}].user.{k}");
    let mut ok = true;
    for k in USER_UNSUPPORTED {
        if u.contains_key(*k) {
            p.err(
                key(k),
                "not supported: give a client certificate and key, or a token",
            );
            ok = false;
        }
    }
    let has = |a: &str, b: &str| u.contains_key(a) || u.contains_key(b);
    let certs = has("client-certificate-data", "client-certificate")
        || has("client-key-data", "client-key");
    let token = has("token", "tokenFile");
    if certs && token {
        p.err(
            format!("users[{i}].user"),
            "give a client certificate and key, or a token, not both",
        );
        return None;
    }
    if token {
        let t = match (u.get("token"), u.get("tokenFile")) {
            (Some(_), Some(_)) => {
                p.err(
                    format!("users[{i}].user"),
                    "give token or tokenFile, not both",
                );
                return None;
            }
            (Some(Value::String(t)), None) => Some(t.trim().to_string()),
            (Some(_), None) => {
                p.err(key("token"), "not a string");
                return None;
            }
            (None, Some(Value::String(f))) => {
                let path = resolve(dir, f);
                match std::fs::read_to_string(&path) {
                    Ok(t) => Some(t.trim().to_string()),
                    Err(e) => {
                        p.err(key("tokenFile"), format!("{}: {e}", path.display()));
                        return None;
                    }
                }
            }
            _ => {
                p.err(key("tokenFile"), "not a path");
                return None;
            }
        };
        let t = t?;
        let field = if u.contains_key("token") {
            "token"
        } else {
            "tokenFile"
        };
        if t.is_empty() || t.contains(|c: char| c.is_whitespace() || c.is_control()) {
            p.err(
                key(field),
                "not a bearer token (empty, or with spaces or control characters)",
            );
            return None;
        }
        return ok.then_some(KubeAuth::Token(Secret(t)));
    }
    let cert = pem_field(
        p,
        dir,
        u,
        ("client-certificate-data", "client-certificate"),
        &key,
        Pem::Certificate,
        "required: client-certificate-data or client-certificate with a key, or a token",
    );
    let key_pem = pem_field(
        p,
        dir,
        u,
        ("client-key-data", "client-key"),
        &key,
        Pem::PrivateKey,
        "required with the client certificate: client-key-data or client-key",
    );
    Some(KubeAuth::ClientCert {
        cert_pem: cert?.0,
        key_pem: Secret(key_pem?.0),
    })
    .filter(|_| ok)
}

fn resolve(dir: &Path, f: &str) -> PathBuf {
    let f = Path::new(f);
    if f.is_absolute() {
        f.to_path_buf()
    } else {
        dir.join(f)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Pem {
    Certificate,
    PrivateKey,
}

/// PEM from `<data>` (base64 of the PEM) or `<file>` (a path to it); the
/// bytes wrapped so that a key's never reach a message.
fn pem_field(
    p: &mut Problems,
    dir: &Path,
    m: &Mapping,
    (data, file): (&str, &str),
    key: &dyn Fn(&str) -> String,
    want: Pem,
    missing: &str,
) -> Option<Secret<Vec<u8>>> {
    let (field, bytes) = match (m.get(data), m.get(file)) {
        (Some(_), Some(_)) => {
            p.err(key(data), format!("give {data} or {file}, not both"));
            return None;
        }
        (Some(Value::String(b64)), None) => {
            let clean: String = b64.chars().filter(|c| !c.is_whitespace()).collect();
            match base64::engine::general_purpose::STANDARD.decode(clean) {
                Ok(b) => (data, b),
                Err(_) => {
                    p.err(key(data), "not base64");
                    return None;
                }
            }
        }
        (None, Some(Value::String(f))) => {
            let path = resolve(dir, f);
            match std::fs::read(&path) {
                Ok(b) => (file, b),
                Err(e) => {
                    p.err(key(file), format!("{}: {e}", path.display()));
                    return None;
                }
            }
        }
        (Some(_), None) => {
            p.err(key(data), "not a string");
            return None;
        }
        (None, Some(_)) => {
            p.err(key(file), "not a path");
            return None;
        }
        (None, None) => {
            p.err(key(data), missing);
            return None;
        }
    };
    if let Err(why) = check_pem(&bytes, want) {
        p.err(key(field), why);
        return None;
    }
    Some(Secret(bytes))
}

/// Whether `bytes` hold PEM blocks of the kind wanted, each of well-formed
/// base64; the reason names only labels, never content.
fn check_pem(bytes: &[u8], want: Pem) -> Result<(), &'static str> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not PEM text")?;
    let mut found = false;
    let mut lines = text.lines().map(str::trim);
    while let Some(line) = lines.next() {
        let Some(label) = line
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        else {
            continue;
        };
        let end = format!("-----END {label}-----");
        let mut body = String::new();
        let mut closed = false;
        for l in lines.by_ref() {
            if l == end {
                closed = true;
                break;
            }
            body.push_str(l);
        }
        if !closed {
            return Err("a PEM block without its END line");
        }
        if base64::engine::general_purpose::STANDARD
            .decode(&body)
            .map_or(true, |d| d.is_empty())
        {
            return Err("a PEM block that is not base64");
        }
        let kind = match label {
            "CERTIFICATE" => Some(Pem::Certificate),
            l if l.ends_with("PRIVATE KEY") && !l.contains("ENCRYPTED") => Some(Pem::PrivateKey),
            _ => None,
        };
        found |= kind == Some(want);
    }
    match (found, want) {
        (true, _) => Ok(()),
        (false, Pem::Certificate) => Err("no PEM CERTIFICATE in it"),
        (false, Pem::PrivateKey) => Err(
            "no unencrypted PEM private key in it (PRIVATE KEY, RSA PRIVATE KEY, EC PRIVATE KEY)",
        ),
    }
}
