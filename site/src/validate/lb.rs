//! The `lb:` section (lbd's frontends, health checks, limits, bootstrap
//! lifecycle), and the same keys as a standalone lbd file (`load_lb`).
//!
//! Defaults meet OpenShift's load-balancer requirement (a failing API server
//! out of the pool within 30 s, probes every 5-10 s, 2 up / 3 down): see
//! `docs/lbd.md` for the arithmetic.

use super::{parse, Cx};
use crate::model::*;
use crate::{wire, SiteError};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

const DEFAULT_ADMIN: &str = "127.0.0.1:8404";

/// Reads a standalone lbd file: the keys of a site's `lb:` section at the top
/// level, with `services` as the only frontends (there are no nodes to
/// derive pools from).
pub fn load_lb(path: &Path) -> Result<Lb, SiteError> {
    let mut cx = Cx::new(path);
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            cx.err("", format!("cannot read lbd file: {e}"));
            return Err(cx.into_error());
        }
    };
    let w: Option<wire::Lb> = parse(&text, &mut cx);
    let lb =
        w.and_then(|w| {
            if w.frontends.is_some() || w.listen.is_some() {
                cx.err(
                if w.frontends.is_some() { "frontends" } else { "listen" },
                "only in a site file's lb section (there are no VIPs or nodes here); use services",
            );
            }
            if w.services.is_empty() {
                cx.err(
                    "services",
                    "at least one service is required (name, listen, backends)",
                );
            }
            lb(&mut cx, "", Some(&w), None)
        });
    match lb {
        Some(l) if cx.problems.is_empty() => Ok(l),
        _ => Err(cx.into_error()),
    }
}

/// Stage two of `lb:`; `vips` is `None` for a standalone file (no site frontends).
pub(super) fn lb(
    cx: &mut Cx,
    prefix: &str,
    w: Option<&wire::Lb>,
    vips: Option<&Vips>,
) -> Option<Lb> {
    let k = |f: &str| format!("{prefix}{f}");
    let admin_listen = match w.and_then(|w| w.admin_listen.as_deref()) {
        Some("off") => None,
        a => sockaddr(cx, &k("adminListen"), a.unwrap_or(DEFAULT_ADMIN)),
    };
    let balance = balance(cx, &k("balance"), w.and_then(|w| w.balance.as_deref()))
        .unwrap_or(Balance::RoundRobin);
    let site_check = w.and_then(|w| w.check.as_ref());
    if let Some(c) = site_check {
        for (given, key) in [
            (c.kind.is_some(), "type"),
            (c.path.is_some(), "path"),
            (c.port.is_some(), "port"),
            (c.ca.is_some(), "ca"),
        ] {
            if given {
                cx.err(
                    k(&format!("check.{key}")),
                    "set per frontend or service; lb.check holds only timings (interval, fastInterval, timeout, rise, fall)",
                );
            }
        }
        if c.server_name.is_some() {
            cx.err(k("check.serverName"), "set per frontend or service");
        }
    }
    let limits = limits(cx, prefix, w.and_then(|w| w.limits.as_ref()));
    let bootstrap = bootstrap(cx, prefix, w.and_then(|w| w.bootstrap.as_ref()));

    let mut frontends = Vec::new();
    if let Some(vips) = vips {
        let bind_ip = match w.and_then(|w| w.listen.as_deref()) {
            Some(s) => match s.parse::<IpAddr>() {
                Ok(a) => Some(a),
                Err(_) => {
                    cx.err(k("listen"), format!("{s:?} is not an IP address (per-frontend addr:port goes in frontends.<name>.listen)"));
                    None
                }
            },
            None => None,
        };
        // One address for every frontend: an IPv4 one cannot take the
        // IPv6 VIPs' connections, and their frontends would be gone.
        if let (Some(b @ IpAddr::V4(_)), Some(v6)) = (bind_ip, vips.api_v6.or(vips.ingress_v6)) {
            cx.err(
                k("listen"),
                format!(
                    "{b} takes IPv4 only, and this site has IPv6 VIPs ({v6}): their frontends \
                         would listen nowhere. Use \"::\" (both families) or leave lb.listen out \
                         (a frontend on each VIP)"
                ),
            );
        }
        let over = w.and_then(|w| w.frontends.as_ref());
        let table = [
            (
                "api",
                "api",
                vips.api,
                6443,
                over.and_then(|o| o.api.as_ref()),
                https("/readyz"),
            ),
            (
                "machine-config",
                "machineConfig",
                vips.api,
                22623,
                over.and_then(|o| o.machine_config.as_ref()),
                https("/healthz"),
            ),
            (
                "ingress-http",
                "ingressHttp",
                vips.ingress,
                80,
                over.and_then(|o| o.ingress_http.as_ref()),
                CheckKind::Tcp,
            ),
            (
                "ingress-https",
                "ingressHttps",
                vips.ingress,
                443,
                over.and_then(|o| o.ingress_https.as_ref()),
                CheckKind::Tcp,
            ),
        ];
        // A dual-stack site's IPv6 VIPs: the same frontends again, named
        // `<name>-v6` (their listen address is always the VIP's).
        let v6 = |vip: Option<IpAddr>| vip.filter(|_| bind_ip.is_none());
        let table: Vec<_> = table
            .into_iter()
            .map(|(name, key, vip, port, o, kind)| {
                (name.to_string(), key, vip, port, o, kind, false)
            })
            .chain(
                [
                    (
                        "api-v6",
                        "api",
                        v6(vips.api_v6),
                        6443,
                        over.and_then(|o| o.api.as_ref()),
                        https("/readyz"),
                    ),
                    (
                        "machine-config-v6",
                        "machineConfig",
                        v6(vips.api_v6),
                        22623,
                        over.and_then(|o| o.machine_config.as_ref()),
                        https("/healthz"),
                    ),
                    (
                        "ingress-http-v6",
                        "ingressHttp",
                        v6(vips.ingress_v6),
                        80,
                        over.and_then(|o| o.ingress_http.as_ref()),
                        CheckKind::Tcp,
                    ),
                    (
                        "ingress-https-v6",
                        "ingressHttps",
                        v6(vips.ingress_v6),
                        443,
                        over.and_then(|o| o.ingress_https.as_ref()),
                        CheckKind::Tcp,
                    ),
                ]
                .into_iter()
                .filter_map(|(n, key, vip, port, o, kind)| {
                    Some((n.to_string(), key, vip?, port, o, kind, true))
                }),
            )
            .collect();
        for (name, key, vip, port, o, kind, second) in table {
            let fk = k(&format!("frontends.{key}"));
            if o.and_then(|o| o.enabled) == Some(false) {
                continue;
            }
            let listen = match o.and_then(|o| o.listen.as_deref()) {
                Some(s) if !second => sockaddr(cx, &format!("{fk}.listen"), s),
                // The IPv6 twin listens on its VIP, on the port its first
                // was moved to (a bad one is reported for the first).
                Some(s) => Some(SocketAddr::new(
                    vip,
                    s.parse::<SocketAddr>().map_or(port, |a| a.port()),
                )),
                None => Some(SocketAddr::new(bind_ip.unwrap_or(vip), port)),
            };
            let balance = match o.and_then(|o| o.balance.as_deref()) {
                Some(b) => self::balance(cx, &format!("{fk}.balance"), Some(b)).unwrap_or(balance),
                None => balance,
            };
            // TCP checks are cheap: ingress probes twice as often.
            let base = if kind == CheckKind::Tcp {
                Duration::from_secs(2)
            } else {
                Duration::from_secs(5)
            };
            // The IPv6 twin's check problems are its first's: said once.
            let mut quiet = Cx::new(&cx.file);
            let check = check(
                if second { &mut quiet } else { &mut *cx },
                &format!("{fk}.check"),
                kind,
                base,
                site_check,
                o.and_then(|o| o.check.as_ref()),
            );
            if let (Some(listen), Some(check)) = (listen, check) {
                frontends.push(LbFrontend {
                    name,
                    listen,
                    backend_port: port,
                    backends: None,
                    balance,
                    check,
                });
            }
        }
    }
    let mut names: HashMap<String, usize> = HashMap::new();
    for (i, s) in w
        .map(|w| w.services.as_slice())
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let sk = |f: &str| k(&format!("services[{i}].{f}"));
        let name = match s.name.as_deref() {
            Some(n) if is_label(n) => Some(n.to_string()),
            Some(n) => {
                cx.err(
                    sk("name"),
                    format!("{n:?} is not a name (lower-case letters, digits, '-')"),
                );
                None
            }
            None => {
                cx.err(sk("name"), "required");
                None
            }
        };
        if let Some(n) = &name {
            if let Some(j) = names.insert(n.clone(), i) {
                cx.err(
                    sk("name"),
                    format!("duplicate service name {n:?} (also services[{j}])"),
                );
            }
            if ["api", "machine-config", "ingress-http", "ingress-https"]
                .contains(&crate::model::site_frontend(n))
                && vips.is_some()
            {
                cx.err(
                    sk("name"),
                    format!("{n:?} is a site frontend's name; configure it under frontends"),
                );
            }
        }
        let listen = match s.listen.as_deref() {
            Some(a) => sockaddr(cx, &sk("listen"), a),
            None => {
                cx.err(sk("listen"), "required (addr:port)");
                None
            }
        };
        let mut backends = Vec::new();
        if s.backends.is_empty() {
            cx.err(sk("backends"), "at least one backend addr:port is required");
        }
        for (j, b) in s.backends.iter().enumerate() {
            if let Some(a) = sockaddr(cx, &sk(&format!("backends[{j}]")), b) {
                if backends.contains(&a) {
                    cx.err(sk(&format!("backends[{j}]")), format!("{a} listed twice"));
                }
                backends.push(a);
            }
        }
        let balance = match s.balance.as_deref() {
            Some(b) => self::balance(cx, &sk("balance"), Some(b)).unwrap_or(balance),
            None => balance,
        };
        // A service's check is a TCP connect unless its own `type` says otherwise.
        let check = check(
            cx,
            &sk("check"),
            CheckKind::Tcp,
            Duration::from_secs(2),
            site_check,
            s.check.as_ref(),
        );
        if let (Some(name), Some(listen), Some(check)) = (name, listen, check) {
            let port = backends.first().map(|b| b.port()).unwrap_or(0);
            frontends.push(LbFrontend {
                name,
                listen,
                backend_port: port,
                backends: Some(backends),
                balance,
                check,
            });
        }
    }
    let mut seen: HashMap<SocketAddr, &str> = HashMap::new();
    for f in &frontends {
        if let Some(other) = seen.insert(f.listen, &f.name) {
            cx.err(
                k("frontends"),
                format!("{} and {other} both listen on {}", f.name, f.listen),
            );
        }
    }
    if let Some(a) = admin_listen {
        if let Some(f) = seen.get(&a) {
            cx.err(
                k("adminListen"),
                format!("{a} is also frontend {f}'s address"),
            );
        }
    }
    Some(Lb {
        admin_listen,
        limits,
        bootstrap,
        frontends,
    })
}

fn https(path: &str) -> CheckKind {
    CheckKind::Https {
        path: path.to_string(),
        ca: None,
        server_name: None,
    }
}

fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn sockaddr(cx: &mut Cx, key: &str, s: &str) -> Option<SocketAddr> {
    match s.parse::<SocketAddr>() {
        Ok(a) => Some(a),
        Err(_) => {
            cx.err(key, format!("{s:?} is not an address:port"));
            None
        }
    }
}

fn balance(cx: &mut Cx, key: &str, s: Option<&str>) -> Option<Balance> {
    match s? {
        "roundRobin" => Some(Balance::RoundRobin),
        "leastConn" => Some(Balance::LeastConn),
        b => {
            cx.err(key, format!("{b:?}: want roundRobin or leastConn"));
            None
        }
    }
}

fn dur(cx: &mut Cx, key: &str, s: Option<&str>, default: Duration) -> Duration {
    match s {
        None => default,
        Some(s) => super::duration(s).unwrap_or_else(|| {
            cx.err(
                key,
                format!("{s:?} is not a duration like 500ms, 5s, 2m, 1h"),
            );
            default
        }),
    }
}

/// One frontend's or service's check: the kind's defaults, then the site-wide
/// timings (`lb.check`), then the frontend's own keys.
fn check(
    cx: &mut Cx,
    key: &str,
    kind: CheckKind,
    interval: Duration,
    site: Option<&wire::LbCheck>,
    own: Option<&wire::LbCheck>,
) -> Option<Check> {
    let before = cx.problems.len();
    let pick = |f: fn(&wire::LbCheck) -> Option<&String>| {
        own.and_then(f)
            .or_else(|| site.and_then(f))
            .map(String::as_str)
    };
    let interval = dur(
        cx,
        &format!("{key}.interval"),
        pick(|c| c.interval.as_ref()),
        interval,
    );
    let fast_interval = dur(
        cx,
        &format!("{key}.fastInterval"),
        pick(|c| c.fast_interval.as_ref()),
        Duration::from_secs(1).min(interval),
    );
    let timeout = dur(
        cx,
        &format!("{key}.timeout"),
        pick(|c| c.timeout.as_ref()),
        Duration::from_secs(2).min(interval),
    );
    let rise = own
        .and_then(|c| c.rise)
        .or(site.and_then(|c| c.rise))
        .unwrap_or(2);
    let fall = own
        .and_then(|c| c.fall)
        .or(site.and_then(|c| c.fall))
        .unwrap_or(3);
    for (n, name) in [(rise, "rise"), (fall, "fall")] {
        if !(1..=100).contains(&n) {
            cx.err(
                format!("{key}.{name}"),
                format!("{n}: want 1 to 100 consecutive probes"),
            );
        }
    }
    if fast_interval > interval {
        cx.err(
            format!("{key}.fastInterval"),
            format!("{fast_interval:?} is longer than interval {interval:?}"),
        );
    }
    if timeout > interval {
        cx.err(
            format!("{key}.timeout"),
            format!("{timeout:?} is longer than interval {interval:?}"),
        );
    }
    let port = own.and_then(|c| c.port);
    if port == Some(0) {
        cx.err(format!("{key}.port"), "0 is not a port");
    }
    let path = own.and_then(|c| c.path.clone());
    if let Some(p) = &path {
        if !p.starts_with('/') || p.contains(|c: char| c.is_whitespace() || c.is_control()) {
            cx.err(
                format!("{key}.path"),
                format!("{p:?}: want an absolute path without spaces, e.g. /readyz"),
            );
        }
    }
    let ca = own.and_then(|c| c.ca.as_deref()).map(|p| cx.resolve(p));
    if let Some(ca) = &ca {
        match std::fs::read_to_string(ca) {
            Ok(t) if t.contains("-----BEGIN CERTIFICATE-----") => {}
            Ok(_) => cx.err(
                format!("{key}.ca"),
                format!("{}: no PEM certificate in it", ca.display()),
            ),
            Err(e) => cx.err(
                format!("{key}.ca"),
                format!("cannot read {}: {e}", ca.display()),
            ),
        }
    }
    let server_name = own.and_then(|c| c.server_name.clone());
    let kind = match own.and_then(|c| c.kind.as_deref()) {
        None => kind,
        Some("tcp") => CheckKind::Tcp,
        Some("http") => CheckKind::Http {
            path: String::new(),
        },
        Some("https") => CheckKind::Https {
            path: String::new(),
            ca: None,
            server_name: None,
        },
        Some(t) => {
            cx.err(
                format!("{key}.type"),
                format!("{t:?}: want tcp, http or https"),
            );
            kind
        }
    };
    let kind = match kind {
        CheckKind::Tcp => {
            for (given, f) in [
                (path.is_some(), "path"),
                (ca.is_some(), "ca"),
                (server_name.is_some(), "serverName"),
            ] {
                if given {
                    cx.err(format!("{key}.{f}"), "only for http and https checks");
                }
            }
            CheckKind::Tcp
        }
        CheckKind::Http { path: p } => {
            for (given, f) in [(ca.is_some(), "ca"), (server_name.is_some(), "serverName")] {
                if given {
                    cx.err(format!("{key}.{f}"), "only for https checks");
                }
            }
            CheckKind::Http {
                path: path.unwrap_or(if p.is_empty() { "/".to_string() } else { p }),
            }
        }
        CheckKind::Https {
            path: p,
            ca: c,
            server_name: s,
        } => CheckKind::Https {
            path: path.unwrap_or(if p.is_empty() { "/".to_string() } else { p }),
            ca: ca.or(c),
            server_name: server_name.or(s),
        },
    };
    (cx.problems.len() == before).then_some(Check {
        kind,
        port,
        interval,
        fast_interval,
        timeout,
        rise,
        fall,
    })
}

fn limits(cx: &mut Cx, prefix: &str, w: Option<&wire::LbLimits>) -> LbLimits {
    let k = |f: &str| format!("{prefix}limits.{f}");
    let d = LbLimits::default();
    let max_conns = w.and_then(|w| w.max_conns).unwrap_or(d.max_conns);
    let per_source = w
        .and_then(|w| w.max_conns_per_source)
        .unwrap_or(d.max_conns_per_source.min(max_conns));
    if max_conns == 0 {
        cx.err(k("maxConns"), "0 would refuse everything");
    }
    if per_source == 0 || per_source > max_conns {
        cx.err(
            k("maxConnsPerSource"),
            format!("{per_source}: want 1 to maxConns ({max_conns})"),
        );
    }
    LbLimits {
        max_conns,
        max_conns_per_source: per_source,
        connect_timeout: dur(
            cx,
            &k("connectTimeout"),
            w.and_then(|w| w.connect_timeout.as_deref()),
            d.connect_timeout,
        ),
        idle_timeout: dur(
            cx,
            &k("idleTimeout"),
            w.and_then(|w| w.idle_timeout.as_deref()),
            d.idle_timeout,
        ),
        retry_unanswered: w.and_then(|w| w.retry_unanswered).or(d.retry_unanswered),
    }
}

fn bootstrap(cx: &mut Cx, prefix: &str, w: Option<&wire::LbBootstrap>) -> LbBootstrap {
    let k = |f: &str| format!("{prefix}bootstrap.{f}");
    let d = LbBootstrap::default();
    let auto_complete_after = match w.and_then(|w| w.auto_complete_after.as_deref()) {
        None | Some("off") => None,
        Some(s) => Some(dur(
            cx,
            &k("autoCompleteAfter"),
            Some(s),
            Duration::from_secs(600),
        )),
    };
    LbBootstrap {
        auto_complete_after,
        drain_timeout: dur(
            cx,
            &k("drainTimeout"),
            w.and_then(|w| w.drain_timeout.as_deref()),
            d.drain_timeout,
        ),
    }
}
