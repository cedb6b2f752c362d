//! Stage two for `vips`: the api and ingress addresses, and `vips.vrrp`
//! (keepalived moving them between appliances).

use super::*;

pub(super) fn vips(
    cx: &mut Cx,
    w: Option<&wire::Vips>,
    networks: &[Network],
    host: Option<&Host>,
) -> Option<Vips> {
    let Some(w) = w else {
        cx.err(
            "vips",
            "required: api and ingress addresses (they may equal this host's)",
        );
        return None;
    };
    // One address, or one per family: (the first, IPv4 on a dual-stack
    // site; the IPv6 one of a pair).
    let mut pair = |key: &str, v: &Option<wire::OneOrMany<String>>| {
        let Some(written) = v else {
            cx.err(key, "required");
            return None;
        };
        let mut got: Vec<IpAddr> = Vec::new();
        let items = written.items();
        if items.is_empty() {
            cx.err(key, "an empty list: give an address, or one per family");
        }
        for (j, s) in items.into_iter().enumerate() {
            let k = if written.is_list() {
                format!("{key}[{j}]")
            } else {
                key.to_string()
            };
            let Some(a) = parse_ip(cx, &k, s) else {
                continue;
            };
            if got.iter().any(|g| g.is_ipv4() == a.is_ipv4()) {
                cx.err(
                    k,
                    format!("a second address of {a}'s family: one per family"),
                );
                continue;
            }
            got.push(a);
        }
        got.sort_by_key(|a| a.is_ipv6());
        match got.as_slice() {
            [a] => Some((*a, None)),
            [a, b] => Some((*a, Some(*b))),
            _ => None,
        }
    };
    let api = pair("vips.api", &w.api);
    let ingress = pair("vips.ingress", &w.ingress);
    let boot = w
        .boot
        .as_ref()
        .map(|s| parse_ip(cx, "vips.boot", s).ok_or(()));
    let ((api, api_v6), (ingress, ingress_v6)) = (api?, ingress?);
    let boot = boot.transpose().ok()?;
    if let (Some(b), Some(h)) = (boot, host) {
        boot_is_served(cx, b, h);
    }
    let moved: Vec<IpAddr> = [Some(api), Some(ingress), api_v6, ingress_v6, boot]
        .into_iter()
        .flatten()
        .collect();
    let vrrp = w
        .vrrp
        .as_ref()
        .map(|v| vrrp(cx, v, [api, ingress], boot, networks, &moved));
    let vrrp = vrrp.map(|v| v.ok_or(())).transpose().ok()?; // given and wrong: said
    if vrrp.is_some() {
        for (key, vip) in [("vips.api", api_v6), ("vips.ingress", ingress_v6)] {
            if let Some(vip) = vip.filter(|a| !networks.iter().any(|n| n.contains(*a))) {
                cx.err(
                    key,
                    format!("{vip} is in no site network: keepalived needs its prefix length"),
                );
            }
        }
    }
    Some(Vips {
        api,
        ingress,
        api_v6,
        ingress_v6,
        boot,
        vrrp,
    })
}

/// Nodes are told `host.http.url` (and `https.url`): with `vips.boot`
/// set, an address in them must be the boot address, or nodes would be
/// sent to an address keepalived does not move (a name is not checked: it
/// resolves wherever DNS says). And bootd must listen on the wildcard
/// address: the boot address arrives on an appliance while bootd runs.
fn boot_is_served(cx: &mut Cx, boot: IpAddr, host: &Host) {
    let listens = [
        Some(("host.http.listen", host.http.listen)),
        host.https.as_ref().map(|h| ("host.https.listen", h.listen)),
        host.tftp.as_ref().map(|t| ("host.tftp.listen", t.listen)),
    ];
    for (key, addr) in listens.into_iter().flatten() {
        if !addr.ip().is_unspecified() {
            cx.err(
                key,
                format!(
                    "{addr}: with vips.boot, listen on 0.0.0.0 (port {}): keepalived moves the boot address to an appliance while bootd runs",
                    addr.port()
                ),
            );
        }
    }
    let urls = [
        Some(("host.http.url", &host.http)),
        host.https.as_ref().map(|h| ("host.https.url", h)),
    ];
    // Every URL given (one per family): the one of vips.boot's family must
    // name it; one of the other family names an address nothing moves.
    for (key, l) in urls.into_iter().flatten() {
        for (j, url) in l.urls.iter().enumerate() {
            let Ok(ip) = crate::model::url_host(url).parse::<IpAddr>() else {
                continue;
            };
            if ip != boot {
                let k = if l.urls.len() > 1 {
                    format!("{key}[{j}]")
                } else {
                    key.to_string()
                };
                cx.err(
                    k,
                    format!(
                        "{url:?} names {ip}, not vips.boot {boot}: nodes would fetch from an address keepalived does not move"
                    ),
                );
            }
        }
    }
}

/// `vips.vrrp`: the interface, router ids and advert interval; each VIP
/// must be in a site network (its prefix length is that network's); the
/// unicast peers and the notify program. `moved`: every address keepalived
/// moves (both families' VIPs and the boot address).
fn vrrp(
    cx: &mut Cx,
    w: &wire::Vrrp,
    vips: [IpAddr; 2],
    boot: Option<IpAddr>,
    networks: &[Network],
    moved: &[IpAddr],
) -> Option<Vrrp> {
    let k = "vips.vrrp";
    let mut ok = true;
    let interface = match w.interface.as_deref() {
        Some(i) if !i.is_empty() && i.len() <= 15 && !i.contains(['/', ' ', '\t']) => i.to_string(),
        Some(i) => {
            cx.err(
                format!("{k}.interface"),
                format!("{i:?}: not an interface name (1-15 characters, no '/' or space)"),
            );
            ok = false;
            String::new()
        }
        None => {
            cx.err(
                format!("{k}.interface"),
                "required: the interface the VIPs live on",
            );
            ok = false;
            String::new()
        }
    };
    let ids = w.router_ids.as_ref();
    let api_id = ids.and_then(|i| i.api).unwrap_or(51);
    let ingress_id = ids.and_then(|i| i.ingress).unwrap_or(52);
    let boot_id = ids.and_then(|i| i.boot).unwrap_or(53);
    for (name, id) in [("api", api_id), ("ingress", ingress_id), ("boot", boot_id)] {
        if id == 0 {
            cx.err(
                format!("{k}.routerIds.{name}"),
                "0: VRRP router ids are 1-255",
            );
            ok = false;
        }
    }
    if vips[0] != vips[1] && api_id == ingress_id {
        cx.err(
            format!("{k}.routerIds"),
            format!("api and ingress both {api_id}: two VIPs need two router ids"),
        );
        ok = false;
    }
    if let Some(b) = boot {
        for (name, ip, id) in [("api", vips[0], api_id), ("ingress", vips[1], ingress_id)] {
            if b == ip {
                cx.err(
                    "vips.boot",
                    format!(
                        "{b} is also vips.{name}: the boot address needs an address of its own"
                    ),
                );
                ok = false;
            } else if id == boot_id {
                cx.err(
                    format!("{k}.routerIds"),
                    format!("{name} and boot both {id}: two VIPs need two router ids"),
                );
                ok = false;
            }
        }
    }
    let advert_interval = super::store::whole_seconds(
        cx,
        &format!("{k}.advertInterval"),
        w.advert_interval.as_deref(),
        1,
        1..=255,
        "",
    );
    ok &= advert_interval.is_some();
    let advert_interval = advert_interval.unwrap_or_default();
    let mut prefix = [0u8; 3];
    let all = [
        ("api", Some(vips[0])),
        ("ingress", Some(vips[1])),
        ("boot", boot),
    ];
    for (i, (name, ip)) in all.into_iter().enumerate() {
        let Some(ip) = ip else { continue };
        match networks.iter().find_map(|n| n.subnet_of(ip)) {
            Some(s) => prefix[i] = s.net.prefix_len(),
            None => {
                cx.err(
                    format!("vips.{name}"),
                    format!("{ip} is in no site network: keepalived needs its prefix length"),
                );
                ok = false;
            }
        }
    }
    let unicast_peers = unicast_peers(cx, k, w.unicast_peers.as_deref(), moved);
    let notify = notify(cx, k, w);
    let (Some(unicast_peers), Ok(notify)) = (unicast_peers, notify) else {
        return None;
    };
    ok.then(|| Vrrp {
        interface,
        api_router_id: api_id,
        ingress_router_id: ingress_id,
        advert_interval,
        boot_router_id: boot_id,
        api_prefix: prefix[0],
        ingress_prefix: prefix[1],
        boot_prefix: prefix[2],
        unicast_peers,
        notify,
    })
}

/// `vips.vrrp.unicastPeers`: the appliances' own addresses (never one
/// keepalived moves), each once, and one at least of each family the
/// moved addresses have: an instance advertises to its own family's.
/// Not given: empty (multicast).
fn unicast_peers(
    cx: &mut Cx,
    k: &str,
    list: Option<&[String]>,
    moved: &[IpAddr],
) -> Option<Vec<IpAddr>> {
    let Some(list) = list else {
        return Some(Vec::new());
    };
    let key = format!("{k}.unicastPeers");
    if list.is_empty() {
        cx.err(
            key,
            "an empty list: list the appliances' addresses, or leave the key out for multicast",
        );
        return None;
    }
    let mut ok = true;
    let mut peers: Vec<IpAddr> = Vec::new();
    for (i, s) in list.iter().enumerate() {
        let ki = format!("{key}[{i}]");
        let Some(a) = parse_ip(cx, &ki, s) else {
            ok = false;
            continue;
        };
        let why = if a.is_unspecified()
            || a.is_loopback()
            || a.is_multicast()
            || a == IpAddr::V4(Ipv4Addr::BROADCAST)
        {
            "not an appliance's address (unspecified, loopback, multicast or broadcast)"
        } else if moved.contains(&a) {
            "an address keepalived moves (a VIP or vips.boot), not an appliance's own"
        } else if peers.contains(&a) {
            "listed twice"
        } else {
            peers.push(a);
            continue;
        };
        cx.err(ki, format!("{a}: {why}"));
        ok = false;
    }
    for (v6, family) in [(false, "IPv4"), (true, "IPv6")] {
        if ok && moved.iter().any(|m| m.is_ipv6() == v6) && !peers.iter().any(|p| p.is_ipv6() == v6)
        {
            cx.err(
                &key,
                format!("no {family} address: the {family} VIPs' instances advertise to the appliances' {family} addresses"),
            );
            ok = false;
        }
    }
    ok.then_some(peers)
}

/// `vips.vrrp.notify` (and `notifyUser`): an absolute path of portable
/// file name characters, so that keepalived's reader of script lines
/// (quotes, escapes, `$` parameters, comments) takes it as it is written.
/// Whether the file is there is the appliance's matter: `bootd render
/// keepalived` warns where it renders.
fn notify(cx: &mut Cx, k: &str, w: &wire::Vrrp) -> Result<Option<Notify>, ()> {
    let user = w.notify_user.as_deref();
    let mut ok = true;
    if let Some(u) = user {
        let good = u.len() <= 32
            && u.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && u.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
        if !good {
            cx.err(
                format!("{k}.notifyUser"),
                format!("{u:?}: not a user name (1-32 letters, digits, '_', '.', '-'; a letter or '_' first)"),
            );
            ok = false;
        }
    }
    let Some(p) = w.notify.as_deref() else {
        if user.is_some() {
            cx.err(
                format!("{k}.notifyUser"),
                "without notify: nothing runs as this user",
            );
            return Err(());
        }
        return if ok { Ok(None) } else { Err(()) };
    };
    let why = if !p.starts_with('/') {
        Some("not an absolute path: keepalived does not run it from the site's directory")
    } else if !p
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/._+-".contains(&b))
    {
        Some("letters, digits, '/', '.', '_', '+' and '-' only: keepalived reads a script line as words it may unquote, substitute or cut at a comment")
    } else if p.len() > 4095
        || p.split('/')
            .skip(1)
            .any(|s| s.is_empty() || s == "." || s == "..")
    {
        Some("a file's path, without '.', '..', '//' or a trailing '/'")
    } else {
        None
    };
    if let Some(why) = why {
        cx.err(format!("{k}.notify"), format!("{p:?}: {why}"));
        return Err(());
    }
    ok.then(|| {
        Some(Notify {
            path: PathBuf::from(p),
            user: user.map(str::to_string),
        })
    })
    .ok_or(())
}
