//! Stage two for `host.dhcp6`: bootd's DHCPv6 server.

use super::boot_files::boot_files;
use super::*;

pub(super) fn dhcp6(cx: &mut Cx, w: &wire::Dhcp6, http: Option<&Listen>) -> Option<Dhcp6> {
    let listen = match w
        .listen
        .as_deref()
        .unwrap_or("[::]:547")
        .parse::<SocketAddr>()
    {
        Ok(a) if a.is_ipv6() => Some(a),
        _ => {
            cx.err(
                "host.dhcp6.listen",
                format!(
                    "{:?} is not an IPv6 address:port like [::]:547",
                    w.listen.as_deref().unwrap_or("")
                ),
            );
            None
        }
    };
    let interface = match w.interface.as_deref() {
        Some(i) if !i.is_empty() && i.len() <= 15 => Some(i.to_string()),
        Some(i) => {
            cx.err(
                "host.dhcp6.interface",
                format!("{i:?} is not an interface name"),
            );
            None
        }
        None => {
            cx.err(
                "host.dhcp6.interface",
                "required: clients send to ff02::1:2 on their link, which bootd joins on this interface",
            );
            None
        }
    };
    let server_address = match w.server_address.as_deref() {
        Some(a) => match a.parse::<Ipv6Addr>() {
            Ok(a) if !a.is_unspecified() && !a.is_multicast() => Some(a),
            _ => {
                cx.err(
                    "host.dhcp6.serverAddress",
                    format!("{a:?} is not a unicast IPv6 address"),
                );
                None
            }
        },
        // The host of the HTTP URL for IPv6 clients, if it is an address.
        None => match http.map(|h| crate::model::url_host(h.url_for(true)).parse::<Ipv6Addr>()) {
            Some(Ok(a)) => Some(a),
            Some(Err(_)) => {
                cx.err(
                    "host.dhcp6.serverAddress",
                    "required when no host.http.url names an IPv6 address",
                );
                None
            }
            None => None,
        },
    };
    let lease_time = lifetime(
        cx,
        "host.dhcp6.leaseTime",
        w.lease_time.as_deref(),
        3600,
        60,
        "a duration from 1m to 136y, like 1h",
    );
    let decline_hold = lifetime(
        cx,
        "host.dhcp6.declineHold",
        w.decline_hold.as_deref(),
        24 * 3600,
        1,
        "a duration of at least 1s, like 24h",
    );
    let max_bindings = match w.max_bindings {
        None => DEFAULT_MAX_BINDINGS,
        Some(n @ 1..=MAX_MAX_BINDINGS) => n as usize,
        Some(n) => {
            cx.err(
                "host.dhcp6.maxBindings",
                format!("{n} is not from 1 to {MAX_MAX_BINDINGS}"),
            );
            DEFAULT_MAX_BINDINGS
        }
    };
    let boot_files = boot_files(cx, "host.dhcp6.bootFiles", w.boot_files.as_ref());
    Some(Dhcp6 {
        listen: listen?,
        interface: interface?,
        server_address: server_address?,
        lease_time,
        decline_hold,
        rapid_commit: w.rapid_commit.unwrap_or(true),
        max_bindings,
        boot_files,
    })
}

/// `host.dhcp6.maxBindings` when not given: a few bindings (firmware,
/// iPXE, installer, system) for each of some ten thousand machines, at a
/// few hundred bytes each.
const DEFAULT_MAX_BINDINGS: usize = 65_536;
const MAX_MAX_BINDINGS: u64 = 1 << 20;

/// `host.dhcp6.serverAddress` is on a site network's IPv6 subnet, the
/// boot URLs it hands out can be reached over IPv6, and the leases are
/// this appliance's own.
pub(super) fn check(cx: &mut Cx, h: &Host, networks: &[Network]) {
    let Some(d) = &h.dhcp6 else { return };
    let store = &h.store;
    // A URL whose host is a name may resolve to an IPv6 address; one whose
    // host is an IPv4 address cannot be fetched by an IPv6-only client.
    let v4_only = |l: &Listen| {
        l.urls.iter().all(|u| {
            crate::model::url_host(u)
                .parse::<IpAddr>()
                .is_ok_and(|a| a.is_ipv4())
        })
    };
    if v4_only(&h.http) && h.https.as_ref().is_none_or(v4_only) {
        cx.err(
            "host.dhcp6",
            "every host.http.url (and https.url) is an IPv4 address: DHCPv6 clients are handed \
             boot URLs they could not reach over IPv6. Add an IPv6 URL (a list of one per family) \
             or use a DNS name",
        );
    }
    let a = IpAddr::V6(d.server_address);
    if !networks.iter().any(|n| n.contains(a)) {
        cx.err(
            "host.dhcp6.serverAddress",
            format!("{a} is in no site network's IPv6 subnet: bootd answers only for the networks it is on"),
        );
    }
    if matches!(store, Store::Etcd(_)) {
        cx.err(
            "host.dhcp6",
            "DHCPv6 leases are kept in this appliance's state directory, not in host.store.etcd: appliances sharing a store would give the same addresses twice",
        );
    }
}

/// A duration of `min` seconds to u32::MAX (DHCPv6 lifetimes are 32-bit).
fn lifetime(
    cx: &mut Cx,
    key: &str,
    v: Option<&str>,
    default: u64,
    min: u64,
    want: &str,
) -> Duration {
    let Some(s) = v else {
        return Duration::from_secs(default);
    };
    match duration(s) {
        Some(d) if d.as_secs() >= min && d.as_secs() < u64::from(u32::MAX) => d,
        _ => {
            cx.err(key, format!("{s:?} is not {want}"));
            Duration::from_secs(default)
        }
    }
}
