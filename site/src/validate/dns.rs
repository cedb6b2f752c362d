//! Validation of the `dns:` section (stage one → [`crate::dns::Dns`]).

use super::{duration, Cx};
use crate::dns::{self, wire, Dns, Nameserver, RData, Record};
use crate::model::{Cluster, Host, Network, Node};
use ipnet::IpNet;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Everything the `dns:` section is checked against.
pub(super) struct Facts<'a> {
    pub cluster: Option<&'a Cluster>,
    pub host: Option<&'a Host>,
    pub networks: &'a [Network],
    pub nodes: &'a [Node],
}

pub(super) fn dns(cx: &mut Cx, w: Option<&wire::Dns>, f: &Facts<'_>) -> Option<Dns> {
    let present = w.is_some();
    let default = wire::Dns::default();
    let w = w.unwrap_or(&default);
    let mut listen = Vec::new();
    for (i, l) in w.listen.iter().enumerate() {
        match addr(l, 53) {
            Some(a) if listen.contains(&a) => {
                cx.err(format!("dns.listen[{i}]"), format!("{a} is listed twice"))
            }
            Some(a) => listen.push(a),
            None => cx.err(
                format!("dns.listen[{i}]"),
                format!("{l:?} is not an address:port (or an address, port 53)"),
            ),
        }
    }
    if w.listen.is_empty() {
        listen.push(SocketAddr::from(([0, 0, 0, 0], 53)));
    }
    let http = w.http.as_deref().and_then(|h| {
        h.parse::<SocketAddr>().ok().or_else(|| {
            cx.err("dns.http", format!("{h:?} is not an address:port"));
            None
        })
    });
    let seconds = |cx: &mut Cx, key: &str, v: Option<&str>, default: Duration| match v {
        None => default,
        Some(s) => match duration(s).filter(|d| d.as_secs() <= i32::MAX as u64) {
            Some(d) => d,
            None => {
                cx.err(key, format!("{s:?} is not a duration like 30s, 5m, 1h"));
                default
            }
        },
    };
    let ttl = seconds(cx, "dns.ttl", w.ttl.as_deref(), dns::DEFAULT_TTL);
    let negative_ttl = seconds(
        cx,
        "dns.negativeTtl",
        w.negative_ttl.as_deref(),
        dns::DEFAULT_NEGATIVE_TTL,
    );
    let addrs = |cx: &mut Cx, key: &str, v: &[String]| -> Vec<SocketAddr> {
        let mut out = Vec::new();
        for (i, s) in v.iter().enumerate() {
            match addr(s, 53) {
                Some(a) => out.push(a),
                None => cx.err(
                    format!("{key}[{i}]"),
                    format!("{s:?} is not an address or address:port"),
                ),
            }
        }
        out
    };
    let upstreams = addrs(cx, "dns.upstreams", &w.upstreams);
    let notify = addrs(cx, "dns.notify", &w.notify);
    let mut allow_transfer = Vec::new();
    for (i, s) in w.allow_transfer.iter().enumerate() {
        match s
            .parse::<IpNet>()
            .ok()
            .or_else(|| s.parse::<IpAddr>().ok().map(IpNet::from))
        {
            Some(n) => allow_transfer.push(n.trunc()),
            None => cx.err(
                format!("dns.allowTransfer[{i}]"),
                format!("{s:?} is not an address or CIDR"),
            ),
        }
    }
    let allow_forward = match &w.allow_forward {
        Some(list) => {
            let mut v = Vec::new();
            for (i, s) in list.iter().enumerate() {
                match s
                    .parse::<IpNet>()
                    .ok()
                    .or_else(|| s.parse::<IpAddr>().ok().map(IpNet::from))
                {
                    Some(n) => v.push(n.trunc()),
                    None => cx.err(
                        format!("dns.allowForward[{i}]"),
                        format!("{s:?} is not an address or CIDR"),
                    ),
                }
            }
            v
        }
        None => {
            let mut v: Vec<IpNet> = f
                .networks
                .iter()
                .flat_map(|n| n.subnets.iter().map(|s| s.net))
                .collect();
            v.extend(loopback());
            v
        }
    };
    let rate_limit = w
        .rate_limit
        .as_ref()
        .and_then(|r| r.responses_per_second)
        .unwrap_or(dns::DEFAULT_RATE_LIMIT);
    let slip = w
        .rate_limit
        .as_ref()
        .and_then(|r| r.slip)
        .unwrap_or(dns::DEFAULT_SLIP);

    // Names below need the cluster's domain; without it (already reported)
    // there is nothing more to check.
    let cluster = f.cluster?;
    let domain = cluster.domain();
    let mut zones = vec![if w.serve_base_domain {
        cluster.base_domain.clone()
    } else {
        domain.clone()
    }];
    zones.extend(dns::reverse_zones(
        &f.networks
            .iter()
            .flat_map(|n| n.subnets.iter().map(|s| s.net))
            .collect::<Vec<_>>(),
    ));

    let mut nameservers = Vec::new();
    for (i, ns) in w.nameservers.iter().enumerate() {
        let k = |s: &str| format!("dns.nameservers[{i}].{s}");
        let name = match ns.name.as_deref() {
            Some(n) => absolute(cx, &k("name"), n, &domain, false),
            None => {
                cx.err(k("name"), "required (e.g. ns1)");
                None
            }
        };
        let ip = match ns.ip.as_deref() {
            Some(s) => s.parse::<IpAddr>().ok().or_else(|| {
                cx.err(k("ip"), format!("{s:?} is not an IP address"));
                None
            }),
            None => {
                cx.err(k("ip"), "required");
                None
            }
        };
        if let (Some(name), Some(ip)) = (name, ip) {
            nameservers.push(Nameserver { name, ip });
        }
    }
    if w.nameservers.is_empty() {
        match default_nameserver_ip(f, &listen) {
            Some(ip) => nameservers.push(Nameserver { name: format!("ns1.{domain}"), ip }),
            None if present => cx.err(
                "dns.nameservers",
                "required: no address to default to (no networks[].dnsServers, host.dhcp.serverAddress or specific dns.listen)",
            ),
            None => {}
        }
    }

    // Names dnsd derives itself: a CNAME may not share them.
    let mut taken: HashMap<String, String> = HashMap::new();
    let mut take = |n: &str, what: String| {
        taken.entry(n.to_ascii_lowercase()).or_insert(what);
    };
    for z in &zones {
        take(z, "the zone apex".into());
    }
    take(&format!("api.{domain}"), "the api record".into());
    take(&format!("api-int.{domain}"), "the api-int record".into());
    take(&format!("*.apps.{domain}"), "the *.apps record".into());
    for (i, n) in f.nodes.iter().enumerate() {
        take(&format!("{}.{domain}", n.name), format!("nodes[{i}]"));
    }
    for (i, n) in nameservers.iter().enumerate() {
        take(&n.name, format!("dns.nameservers[{i}]"));
    }

    let mut records = Vec::new();
    let mut owners: HashMap<String, (usize, bool)> = HashMap::new();
    for (i, r) in w.records.iter().enumerate() {
        let k = |s: &str| format!("dns.records[{i}].{s}");
        let before = cx.problems.len();
        let Some(name) = r.name.as_deref() else {
            cx.err(k("name"), "required");
            continue;
        };
        let rtype = r.rtype.as_deref().map(str::to_ascii_uppercase);
        let name = match rtype.as_deref() {
            // A PTR may be written for its address.
            Some("PTR") if name.parse::<IpAddr>().is_ok() => {
                name.parse::<IpAddr>().ok().map(dns::reverse_name)
            }
            _ => absolute(cx, &k("name"), name, &domain, true),
        };
        let Some(name) = name else { continue };
        let lname = name.to_ascii_lowercase();
        if !zones
            .iter()
            .any(|z| in_zone(&lname, &z.to_ascii_lowercase()))
        {
            cx.err(
                k("name"),
                format!(
                    "{name} is outside every zone dnsd serves ({})",
                    zones.join(", ")
                ),
            );
        }
        let Some(value) = r.value.as_deref() else {
            cx.err(k("value"), "required");
            continue;
        };
        let data = match rtype.as_deref() {
            None => {
                cx.err(
                    k("type"),
                    "required: A, AAAA, CNAME, TXT, SRV, MX, PTR or NS",
                );
                None
            }
            Some(t) => rdata(cx, &k("value"), t, value, &domain).or_else(|| {
                if !matches!(
                    t,
                    "A" | "AAAA" | "CNAME" | "TXT" | "SRV" | "MX" | "PTR" | "NS"
                ) {
                    cx.err(
                        k("type"),
                        format!("{t:?} is not one of A, AAAA, CNAME, TXT, SRV, MX, PTR, NS"),
                    );
                }
                None
            }),
        };
        let ttl = r
            .ttl
            .as_deref()
            .map(|s| seconds(cx, &k("ttl"), Some(s), ttl));
        let Some(data) = data else { continue };
        let is_cname = matches!(data, RData::Cname(_));
        if let RData::Ns(_) = data {
            if zones.iter().any(|z| z.eq_ignore_ascii_case(&name)) {
                cx.err(
                    k("name"),
                    "the zone apex's NS records come from dns.nameservers",
                );
            }
        }
        if is_cname {
            if let Some(what) = taken.get(&lname) {
                cx.err(
                    k("name"),
                    format!("a CNAME cannot share its name {name} with {what}"),
                );
            }
        }
        match owners.get(&lname) {
            Some((j, other_cname)) if is_cname || *other_cname => {
                cx.err(k("name"), format!("{name}: a CNAME cannot share its name with other records (dns.records[{j}])"));
            }
            _ => {
                owners.insert(lname, (i, is_cname));
            }
        }
        if cx.problems.len() == before {
            records.push(Record { name, ttl, data });
        }
    }
    Some(Dns {
        listen,
        http,
        serve_base_domain: w.serve_base_domain,
        nameservers,
        ttl,
        negative_ttl,
        upstreams,
        notify,
        allow_transfer,
        allow_forward,
        rate_limit,
        slip,
        records,
    })
}

fn addr(s: &str, port: u16) -> Option<SocketAddr> {
    s.parse::<SocketAddr>()
        .ok()
        .or_else(|| s.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, port)))
}

/// This host's address for the default NS glue: what nodes are told to use
/// as their DNS server, else the DHCP server address, else a specific
/// listen address, else the host of `host.http.url`.
fn default_nameserver_ip(f: &Facts<'_>, listen: &[SocketAddr]) -> Option<IpAddr> {
    f.networks
        .iter()
        .flat_map(|n| n.dns_servers.first())
        .next()
        .copied()
        .or_else(|| {
            f.host
                .and_then(|h| h.dhcp.as_ref())
                .map(|d| IpAddr::V4(d.server_address))
        })
        .or_else(|| {
            listen
                .iter()
                .map(|a| a.ip())
                .find(|ip| !ip.is_unspecified())
        })
        .or_else(|| f.host.and_then(|h| h.http.url_host().parse().ok()))
}

fn in_zone(name: &str, zone: &str) -> bool {
    name == zone || name.strip_suffix(zone).is_some_and(|p| p.ends_with('.'))
}

/// A name as written in the site: `@` is the cluster's domain, a trailing
/// dot makes it absolute, anything else is relative to the cluster's domain.
fn absolute(cx: &mut Cx, key: &str, s: &str, domain: &str, owner: bool) -> Option<String> {
    let name = if s == "@" {
        domain.to_string()
    } else if let Some(abs) = s.strip_suffix('.') {
        abs.to_string()
    } else {
        format!("{s}.{domain}")
    };
    let labels_ok = name.split('.').enumerate().all(|(i, l)| {
        (owner && i == 0 && l == "*")
            || (!l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                && !l.starts_with('-')
                && !l.ends_with('-'))
    });
    if !labels_ok || name.len() > 253 {
        cx.err(
            key,
            format!("{s:?} is not a DNS name (letters, digits, '-', '_'; labels of 1-63; '*' only as the first label of an owner)"),
        );
        return None;
    }
    Some(name)
}

fn rdata(cx: &mut Cx, key: &str, rtype: &str, v: &str, domain: &str) -> Option<RData> {
    let bad = |cx: &mut Cx, want: &str| {
        cx.err(key, format!("{v:?} is not {want}"));
        None
    };
    let fields: Vec<&str> = v.split_whitespace().collect();
    let num = |s: &str| s.parse::<u16>().ok();
    match rtype {
        "A" => v
            .parse()
            .map(RData::A)
            .ok()
            .or_else(|| bad(cx, "an IPv4 address")),
        "AAAA" => v
            .parse()
            .map(RData::Aaaa)
            .ok()
            .or_else(|| bad(cx, "an IPv6 address")),
        "CNAME" => absolute(cx, key, v, domain, false).map(RData::Cname),
        "NS" => absolute(cx, key, v, domain, false).map(RData::Ns),
        "PTR" => absolute(cx, key, v, domain, false).map(RData::Ptr),
        "TXT" if v.len() <= 4000 && !v.contains(['\n', '\r']) => Some(RData::Txt(v.to_string())),
        "TXT" => bad(cx, "a text of at most 4000 bytes on one line"),
        "MX" => match fields.as_slice() {
            [p, x] if num(p).is_some() => {
                let preference = num(p)?;
                absolute(cx, key, x, domain, false).map(|exchange| RData::Mx {
                    preference,
                    exchange,
                })
            }
            _ => bad(cx, "\"PREFERENCE EXCHANGE\" (e.g. \"10 mail\")"),
        },
        "SRV" => match fields.as_slice() {
            [p, w, port, t] if num(p).is_some() && num(w).is_some() && num(port).is_some() => {
                let (priority, weight, port) = (num(p)?, num(w)?, num(port)?);
                absolute(cx, key, t, domain, false).map(|target| RData::Srv {
                    priority,
                    weight,
                    port,
                    target,
                })
            }
            _ => bad(
                cx,
                "\"PRIORITY WEIGHT PORT TARGET\" (e.g. \"0 10 2380 etcd-0\")",
            ),
        },
        _ => None,
    }
}

/// 127.0.0.0/8 and ::1: local resolvers (the host's own) may always forward.
pub fn loopback() -> [IpNet; 2] {
    [
        "127.0.0.0/8".parse().expect("a CIDR"),
        "::1/128".parse().expect("a CIDR"),
    ]
}
