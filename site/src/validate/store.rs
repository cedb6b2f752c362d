//! Stage two for `host.store`: SQLite (the default) or an etcd cluster.

use super::*;

const KEY: &str = "host.store";

pub(super) fn store(cx: &mut Cx, w: &wire::Store) -> Option<Store> {
    match w {
        wire::Store::Name(n) if n == "sqlite" => Some(Store::Sqlite),
        wire::Store::Name(n) if n == "etcd" => {
            cx.err(
                KEY,
                "etcd needs its endpoints: write `store: {etcd: {endpoints: [https://…:2379]}}`",
            );
            None
        }
        wire::Store::Name(n) => {
            cx.err(
                KEY,
                format!("{n:?}: not a store (sqlite, or a map with etcd:)"),
            );
            None
        }
        wire::Store::Map(m) => match (&m.sqlite, &m.etcd) {
            (Some(_), Some(_)) => {
                cx.err(KEY, "sqlite and etcd both given: choose one");
                None
            }
            (_, Some(e)) => etcd(cx, e).map(Store::Etcd),
            (Some(_), None) => Some(Store::Sqlite),
            (None, None) => {
                cx.err(KEY, "empty: sqlite, or a map with etcd:");
                None
            }
        },
    }
}

/// An etcd prefix not given is `/bare-metal-boot/<cluster.name>/`; a
/// site identity not given is the cluster's domain (docs/design-notes.md,
/// "Which site an etcd prefix belongs to").
pub(super) fn defaults(store: &mut Store, cluster: &Cluster) {
    if let Store::Etcd(e) = store {
        if e.prefix.is_empty() {
            e.prefix = format!("/bare-metal-boot/{}/", cluster.name);
        }
        e.cluster = cluster.domain();
        if e.site_id.is_empty() {
            e.site_id = e.cluster.clone();
        }
    }
}

/// `host.store.etcd.siteId`: a name, as a domain's characters.
fn site_id(cx: &mut Cx, key: &str, id: Option<&str>) -> Option<String> {
    let Some(id) = id else {
        return Some(String::new());
    };
    let ok = (1..=253).contains(&id.len())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    if !ok {
        cx.err(
            key,
            format!("{id:?}: 1 to 253 letters, digits, '.', '-' or '_' (e.g. dc1-lab)"),
        );
        return None;
    }
    Some(id.to_string())
}

fn etcd(cx: &mut Cx, w: &wire::Etcd) -> Option<EtcdStore> {
    let k = format!("{KEY}.etcd");
    let mut ok = true;
    if w.endpoints.is_empty() {
        cx.err(
            format!("{k}.endpoints"),
            "required: etcd's client URLs (https://host:2379)",
        );
        ok = false;
    }
    let mut schemes = Vec::new();
    for (i, e) in w.endpoints.iter().enumerate() {
        match endpoint(e) {
            Ok(s) => schemes.push(s),
            Err(why) => {
                cx.err(format!("{k}.endpoints[{i}]"), format!("{e:?}: {why}"));
                ok = false;
            }
        }
    }
    schemes.dedup();
    let https = schemes.first().is_some_and(|s| *s == "https");
    if schemes.len() > 1 {
        cx.err(
            format!("{k}.endpoints"),
            "http:// and https:// mixed: one cluster speaks one of them",
        );
        ok = false;
    }
    let prefix = match w.prefix.as_deref() {
        None => String::new(),
        Some(p)
            if p.len() > 2
                && p.starts_with('/')
                && p.ends_with('/')
                && !p.contains("//")
                && p.chars().all(|c| c.is_ascii_graphic()) =>
        {
            p.to_string()
        }
        Some(p) => {
            cx.err(
                format!("{k}.prefix"),
                format!("{p:?}: begins and ends with / and has no space or empty part (/bare-metal-boot/lab/)"),
            );
            ok = false;
            String::new()
        }
    };
    let timeout = match w.timeout.as_deref() {
        None => Duration::from_secs(3),
        Some(t) => match duration(t) {
            Some(d) if d >= Duration::from_millis(100) && d <= Duration::from_secs(60) => d,
            _ => {
                cx.err(
                    format!("{k}.timeout"),
                    format!("{t:?}: a duration from 100ms to 60s"),
                );
                ok = false;
                Duration::ZERO
            }
        },
    };
    let lease_ttl = whole_seconds(
        cx,
        &format!("{k}.leaseTtl"),
        w.lease_ttl.as_deref(),
        10,
        2..=120,
        " (etcd leases count seconds)",
    );
    ok &= lease_ttl.is_some();
    let lease_ttl = lease_ttl.unwrap_or_default();
    let tls = match &w.tls {
        None if https => {
            cx.err(
                format!("{k}.tls.ca"),
                "required with https:// endpoints: the CA that signed etcd's certificates",
            );
            ok = false;
            None
        }
        None => None,
        Some(t) => {
            if !https && !schemes.is_empty() {
                cx.err(
                    format!("{k}.tls"),
                    "given, but the endpoints are http://: write them as https://",
                );
                ok = false;
            }
            let ca = t.ca.as_deref().map(|p| cx.resolve(p));
            if ca.is_none() {
                cx.err(
                    format!("{k}.tls.ca"),
                    "required: the CA that signed etcd's certificates",
                );
                ok = false;
            }
            if t.cert.is_some() != t.key.is_some() {
                cx.err(
                    format!("{k}.tls.{}", if t.cert.is_some() { "key" } else { "cert" }),
                    "cert and key go together (etcd's --client-cert-auth)",
                );
                ok = false;
            }
            let cert = t.cert.as_deref().map(|p| cx.resolve(p));
            let key = t.key.as_deref().map(|p| cx.resolve(p));
            for (name, p) in [("ca", &ca), ("cert", &cert), ("key", &key)] {
                if let Some(p) = p {
                    if let Err(e) = std::fs::metadata(p) {
                        cx.err(format!("{k}.tls.{name}"), format!("{}: {e}", p.display()));
                        ok = false;
                    }
                }
            }
            ca.map(|ca| EtcdTls { ca, cert, key })
        }
    };
    let site_id = site_id(cx, &format!("{k}.siteId"), w.site_id.as_deref());
    ok &= site_id.is_some();
    ok.then(|| EtcdStore {
        endpoints: w.endpoints.clone(),
        prefix,
        timeout,
        lease_ttl,
        tls,
        site_id: site_id.unwrap_or_default(),
        cluster: String::new(),
    })
}

/// `http://host:port` or `https://host:port`: its scheme.
fn endpoint(e: &str) -> Result<&'static str, &'static str> {
    let (scheme, rest) = if let Some(r) = e.strip_prefix("https://") {
        ("https", r)
    } else if let Some(r) = e.strip_prefix("http://") {
        ("http", r)
    } else {
        return Err("not an http:// or https:// URL");
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or("no port (etcd listens on 2379)")?;
    if host.is_empty() || host.contains(['/', '@', '?', '#']) || host.contains(char::is_whitespace)
    {
        return Err("host:port only, no path or credentials");
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(scheme),
        _ => Err("no port (etcd listens on 2379)"),
    }
}

/// A duration in whole seconds within `range` (`default` when absent);
/// `None` (said, with `why` appended) when it is not one.
pub(super) fn whole_seconds(
    cx: &mut Cx,
    key: &str,
    text: Option<&str>,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
    why: &str,
) -> Option<Duration> {
    let Some(t) = text else {
        return Some(Duration::from_secs(default));
    };
    match duration(t) {
        Some(d) if d.subsec_nanos() == 0 && range.contains(&d.as_secs()) => Some(d),
        _ => {
            cx.err(
                key,
                format!(
                    "{t:?}: whole seconds from {}s to {}s{why}",
                    range.start(),
                    range.end()
                ),
            );
            None
        }
    }
}
