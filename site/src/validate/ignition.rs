//! Stage two for `ignition`: the role configs (read, parsed, versioned) and the token TTL.

use super::*;

pub(super) fn ignition(
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
    let after_install = match w.and_then(|w| w.after_install.as_deref()) {
        None | Some("disk") => AfterInstall::Disk,
        Some("network") => AfterInstall::Network,
        Some(s) => {
            cx.err(
                "ignition.afterInstall",
                format!("{s:?}: want disk (boot the local disk once installed) or network"),
            );
            AfterInstall::Disk
        }
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
        after_install,
        single_use_tokens: w.and_then(|w| w.single_use_tokens).unwrap_or(true),
        role_paths: explicit
            .iter()
            .map(|(r, p)| (r.clone(), cx.resolve(p)))
            .collect(),
        dir,
    })
}

/// Reads one role's Ignition config. The error text never quotes the file's
/// content: it may hold secrets.
pub(super) fn read_role(path: &Path) -> Result<RoleConfig, String> {
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
