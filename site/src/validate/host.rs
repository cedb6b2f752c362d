//! Stage two for `host`: listeners, the DHCP server (boot files, options) and TFTP.

use super::boot_files::boot_files;
use super::*;

pub(super) fn listen(cx: &mut Cx, key: &str, w: &wire::Listen, scheme: &str) -> Option<Listen> {
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
    let mut urls = Vec::new();
    match &w.url {
        None => cx.err(
            format!("{key}.url"),
            "required: the base URL nodes use to reach this listener",
        ),
        Some(written) => {
            let items = written.items();
            if items.is_empty() {
                cx.err(format!("{key}.url"), "an empty list: give at least one URL");
            }
            let mut families: Vec<Option<bool>> = Vec::new();
            for (j, u) in items.into_iter().enumerate() {
                let k = if written.is_list() {
                    format!("{key}.url[{j}]")
                } else {
                    format!("{key}.url")
                };
                if !(u.starts_with(&format!("{scheme}://"))
                    && u.len() > scheme.len() + 3
                    && !u.contains(char::is_whitespace))
                {
                    cx.err(k, format!("{u:?} is not a {scheme}:// URL"));
                    continue;
                }
                let u = u.trim_end_matches('/').to_string();
                let host = crate::model::url_host(&u);
                let family = host.parse::<IpAddr>().ok().map(|a| a.is_ipv6());
                if u.contains("://[") != (family == Some(true)) {
                    cx.err(k, format!("{u:?}: an IPv6 address in a URL is written in brackets, http://[fd00::1]:8080"));
                    continue;
                }
                if written.is_list() && (family.is_none() || families.contains(&family)) {
                    cx.err(
                        k,
                        format!("{u:?}: a list gives one URL per family, each with an IPv4 or IPv6 address"),
                    );
                    continue;
                }
                families.push(family);
                urls.push(u);
            }
        }
    }
    let url = urls.first().cloned();
    Some(Listen {
        listen: addr?,
        url: url?,
        urls,
    })
}

pub(super) fn host(cx: &mut Cx, w: &wire::Host) -> Option<Host> {
    let state_dir = super::controller::state_dir(cx, w);
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
    let dhcp6 = w
        .dhcp6
        .as_ref()
        .map(|d| super::dhcp6::dhcp6(cx, d, http.as_ref()));
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
    let status_from = match &w.status_from {
        None => vec![
            "127.0.0.0/8".parse().expect("a CIDR"),
            "::1/128".parse().expect("a CIDR"),
        ],
        Some(l) => l
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let key = format!("host.statusFrom[{i}]");
                match s
                    .parse::<IpNet>()
                    .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                {
                    Ok(n) if n.trunc() == n => Some(n),
                    Ok(n) => {
                        cx.err(
                            key,
                            format!("{s:?}: host bits set (did you mean {}?)", n.trunc()),
                        );
                        None
                    }
                    Err(_) => {
                        cx.err(key, format!("{s:?} is not an address or a CIDR"));
                        None
                    }
                }
            })
            .collect(),
    };
    let store = match &w.store {
        None => Some(Store::Sqlite),
        Some(s) => super::store::store(cx, s),
    };
    if let (Some(d), Some(Store::Sqlite)) = (&dhcp, &store) {
        if d.ha == DhcpHa::LoadBalancing {
            cx.err(
                "host.dhcp.ha",
                "loadBalancing needs host.store.etcd: the appliances that share the clients share their leases there",
            );
        }
    }
    let admission = match &w.admission {
        None => Some(Admission::default()),
        Some(a) => admission(cx, a),
    };
    let dhcp6 = match dhcp6 {
        Some(None) => return None,
        Some(Some(d)) => Some(d),
        None => None,
    };
    Some(Host {
        admission: admission?,
        store: store?,
        state_dir,
        http: http?,
        https,
        dhcp,
        dhcp6,
        tftp,
        api,
        status_from,
    })
}

/// The most TFTP transfers at once: each runs on a thread of the
/// runtime's blocking pool (512 threads, shared with file reads).
const MAX_TFTP_TRANSFERS: u64 = 400;

fn admission(cx: &mut Cx, w: &wire::Admission) -> Option<Admission> {
    let d = Admission::default();
    let mut ok = true;
    let mut count = |cx: &mut Cx,
                     key: &str,
                     v: Option<u64>,
                     default: usize,
                     range: std::ops::RangeInclusive<u64>,
                     why: &str|
     -> usize {
        match v {
            None => default,
            Some(n) if range.contains(&n) => n as usize,
            Some(n) => {
                cx.err(
                    format!("host.admission.{key}"),
                    format!("{n}: from {} to {}{why}", range.start(), range.end()),
                );
                ok = false;
                default
            }
        }
    };
    let tftp_transfers = count(
        cx,
        "tftpTransfers",
        w.tftp_transfers,
        d.tftp_transfers,
        1..=MAX_TFTP_TRANSFERS,
        " (each transfer is a thread)",
    );
    let tftp_queue = count(cx, "tftpQueue", w.tftp_queue, d.tftp_queue, 0..=65_536, "");
    let tftp_per_source = count(
        cx,
        "tftpPerSource",
        w.tftp_per_source,
        d.tftp_per_source.min(tftp_transfers),
        1..=tftp_transfers as u64,
        " (at most tftpTransfers)",
    );
    let image_transfers = match w.image_transfers {
        Some(0) => None,
        v => Some(count(
            cx,
            "imageTransfers",
            v,
            d.image_transfers.unwrap_or(64),
            1..=100_000,
            " (0: no limit)",
        )),
    };
    let image_per_source = match w.image_per_source {
        Some(0) => None,
        v => Some(count(
            cx,
            "imagePerSource",
            v,
            d.image_per_source.unwrap_or(8),
            1..=100_000,
            " (0: no limit)",
        )),
    };
    let image_queue = count(
        cx,
        "imageQueue",
        w.image_queue,
        d.image_queue,
        0..=1_000_000,
        "",
    );
    let http_connections = count(
        cx,
        "httpConnections",
        w.http_connections,
        d.http_connections,
        64..=60_000,
        " (each is a descriptor: bootd's limit is 65 536)",
    );
    let provisions = count(cx, "provisions", w.provisions, d.provisions, 1..=1_000, "");
    let queue_wait = match w.queue_wait.as_deref() {
        None => Some(d.queue_wait),
        Some(t) => match super::duration(t) {
            Some(x) if x >= Duration::from_secs(1) && x <= Duration::from_secs(600) => Some(x),
            _ => {
                cx.err(
                    "host.admission.queueWait",
                    format!("{t:?}: a duration from 1s to 10m"),
                );
                None
            }
        },
    };
    if !ok {
        return None;
    }
    Some(Admission {
        tftp_transfers,
        tftp_queue,
        tftp_per_source,
        image_transfers,
        image_per_source,
        image_queue,
        http_connections,
        queue_wait: queue_wait?,
        provisions,
    })
}

pub(super) fn dhcp_options(cx: &mut Cx, key: &str, w: &[wire::DhcpOption]) -> Vec<DhcpOptionValue> {
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

pub(super) fn dhcp(cx: &mut Cx, w: &wire::Dhcp, http: Option<&Listen>) -> Option<Dhcp> {
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
    let ha = match w.ha.as_deref().unwrap_or("hotStandby") {
        "hotStandby" => Some(DhcpHa::HotStandby),
        "loadBalancing" => Some(DhcpHa::LoadBalancing),
        h => {
            cx.err(
                "host.dhcp.ha",
                format!("{h:?}: want hotStandby or loadBalancing"),
            );
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
    let decline_hold = match w.decline_hold.as_deref() {
        // Kea's decline-probation-period.
        None => Duration::from_secs(24 * 3600),
        Some(s) => match duration(s) {
            Some(d) if d >= Duration::from_secs(1) => d,
            _ => {
                cx.err(
                    "host.dhcp.declineHold",
                    format!("{s:?} is not a duration of at least 1s, like 24h"),
                );
                Duration::from_secs(24 * 3600)
            }
        },
    };
    let cache_threshold = match w.cache_threshold {
        None => 0.25,
        Some(t) if (0.0..=0.5).contains(&t) => t,
        Some(t) => {
            cx.err(
                "host.dhcp.cacheThreshold",
                format!("{t}: a share of the lease time from 0 (every REQUEST written) to 0.5"),
            );
            0.25
        }
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
    let boot_files = boot_files(cx, "host.dhcp.bootFiles", w.boot_files.as_ref());
    let options = dhcp_options(cx, "host.dhcp.options", &w.options);
    let mut trusted_relays = Vec::new();
    for (i, r) in w.trusted_relays.iter().enumerate() {
        match r.parse::<Ipv4Addr>() {
            Ok(a) if !a.is_unspecified() && !a.is_broadcast() => trusted_relays.push(a),
            _ => cx.err(
                format!("host.dhcp.trustedRelays[{i}]"),
                format!("{r:?} is not a relay agent's IPv4 address (its giaddr)"),
            ),
        }
    }
    Some(Dhcp {
        listen: listen?,
        interface: w.interface.clone(),
        mode: mode?,
        ha: ha?,
        server_address: server_address?,
        lease_time,
        decline_hold,
        cache_threshold,
        ntp_servers,
        domain_name: w.domain_name.clone().unwrap_or_default(),
        boot_files,
        options,
        trusted_relays,
    })
}
