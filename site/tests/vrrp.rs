//! `vips.vrrp`: validated with every problem at once; prefix lengths from
//! the VIPs' networks.

mod common;
use common::lab;
use std::time::Duration;

fn with(vips: &str) -> Result<site::Site, String> {
    let (_d, path) = lab(|t| {
        let t = t.replace("vips:\n  api: 10.77.0.1\n  ingress: 10.77.0.1\n", vips);
        assert!(t.contains(vips), "the lab's vips changed");
        t
    });
    site::load(&path).map_err(|e| e.to_string())
}

#[test]
fn defaults_and_prefixes_from_the_network() {
    let s = with("vips:\n  api: 10.77.0.2\n  ingress: 10.77.0.3\n  vrrp: { interface: br0 }\n")
        .unwrap();
    let v = s.vips.vrrp.unwrap();
    assert_eq!(v.interface, "br0");
    assert_eq!((v.api_router_id, v.ingress_router_id), (51, 52));
    assert_eq!(v.advert_interval, Duration::from_secs(1));
    assert_eq!((v.api_prefix, v.ingress_prefix), (24, 24));
    let s = with("vips:\n  api: 10.77.0.1\n  ingress: 10.77.0.1\n  vrrp: { interface: br0, routerIds: { api: 7, ingress: 7 }, advertInterval: 3s }\n").unwrap();
    let v = s.vips.vrrp.unwrap();
    assert_eq!(
        (v.api_router_id, v.advert_interval),
        (7, Duration::from_secs(3)),
        "one address: one id is fine"
    );
}

#[test]
fn every_problem_at_once() {
    let e = with("vips:\n  api: 10.77.0.2\n  ingress: 192.0.2.9\n  vrrp: { routerIds: { api: 9, ingress: 9 }, advertInterval: 1500ms, colour: red }\n").unwrap_err();
    for want in [
        "vips.vrrp.interface: required",
        "vips.vrrp.routerIds: api and ingress both 9",
        "vips.vrrp.advertInterval: \"1500ms\": whole seconds from 1s to 255s",
        "vips.ingress: 192.0.2.9 is in no site network",
        "vips.vrrp.colour",
    ] {
        assert!(e.contains(want), "missing {want:?} in:\n{e}");
    }
    let e = with("vips:\n  api: 10.77.0.2\n  ingress: 10.77.0.3\n  vrrp: { interface: \"a/b\", routerIds: { api: 0 } }\n").unwrap_err();
    assert!(
        e.contains("vips.vrrp.interface: \"a/b\": not an interface name"),
        "{e}"
    );
    assert!(
        e.contains("vips.vrrp.routerIds.api: 0: VRRP router ids are 1-255"),
        "{e}"
    );
}

/// `vips.boot`: the address nodes fetch from, moved like the VIPs; it
/// must be what the URLs name, and bootd must listen on the wildcard.
#[test]
fn the_boot_address() {
    let s = with("vips:\n  api: 10.77.0.2\n  ingress: 10.77.0.3\n  boot: 10.77.0.1\n  vrrp: { interface: br0 }\n")
        .unwrap();
    let v = s.vips.vrrp.unwrap();
    assert_eq!(s.vips.boot, Some("10.77.0.1".parse().unwrap()));
    assert_eq!((v.boot_router_id, v.boot_prefix), (53, 24));
    // Everything wrong at once.
    let (_d, path) = lab(|t| {
        t.replace("vips:\n  api: 10.77.0.1\n  ingress: 10.77.0.1\n", "vips:\n  api: 10.77.0.2\n  ingress: 10.77.0.2\n  boot: 10.77.0.2\n  vrrp: { interface: br0, routerIds: { api: 9, boot: 9 } }\n")
            .replace("url: http://10.77.0.1:8080", "url: http://10.77.0.9:8080")
            .replace("listen: 0.0.0.0:69", "listen: 10.77.0.1:69")
    });
    let e = site::load(&path).unwrap_err().to_string();
    for want in [
        "vips.boot: 10.77.0.2 is also vips.api: the boot address needs an address of its own",
        "host.http.url: \"http://10.77.0.9:8080\" names 10.77.0.9, not vips.boot 10.77.0.2",
        "host.https.url: \"https://10.77.0.1:8443\" names 10.77.0.1, not vips.boot 10.77.0.2",
        "host.tftp.listen: 10.77.0.1:69: with vips.boot, listen on 0.0.0.0 (port 69)",
    ] {
        assert!(e.contains(want), "missing {want:?} in:\n{e}");
    }
    let e = with("vips:\n  api: 10.77.0.2\n  ingress: 10.77.0.3\n  boot: 10.77.0.1\n  vrrp: { interface: br0, routerIds: { ingress: 53 } }\n").unwrap_err();
    assert!(
        e.contains("vips.vrrp.routerIds: ingress and boot both 53: two VIPs need two router ids"),
        "{e}"
    );
    // Without vrrp (one appliance) the boot address may be any site address.
    let s = with("vips:\n  api: 10.77.0.1\n  ingress: 10.77.0.1\n  boot: 10.77.0.1\n").unwrap();
    assert!(s.vips.vrrp.is_none());
}

/// `unicastPeers`, `notify` and `notifyUser`: taken as written; without
/// them, multicast and no program.
#[test]
fn unicast_peers_and_the_notify_program() {
    let s = with("vips:\n  api: 10.77.0.2\n  ingress: 10.77.0.3\n  vrrp: { interface: br0, unicastPeers: [10.77.0.8, 10.77.0.9], notify: /usr/local/libexec/vip-moved, notifyUser: vip-hook }\n")
        .unwrap();
    let v = s.vips.vrrp.unwrap();
    let ip = |s: &str| -> std::net::IpAddr { s.parse().unwrap() };
    assert_eq!(v.unicast_peers, vec![ip("10.77.0.8"), ip("10.77.0.9")]);
    assert_eq!(
        v.notify,
        Some(site::Notify {
            path: "/usr/local/libexec/vip-moved".into(),
            user: Some("vip-hook".into()),
        })
    );
    let s = with("vips:\n  api: 10.77.0.2\n  ingress: 10.77.0.3\n  vrrp: { interface: br0 }\n")
        .unwrap();
    let v = s.vips.vrrp.unwrap();
    assert!(v.unicast_peers.is_empty() && v.notify.is_none());
}

#[test]
fn unicast_peers_and_notify_every_problem_at_once() {
    let e = with("vips:\n  api: 10.77.0.2\n  ingress: 10.77.0.3\n  vrrp: { interface: br0, unicastPeers: [10.77.0.3, appliance-b, 10.77.0.8, 10.77.0.8, 224.0.0.18, 127.0.0.1], notify: libexec/vip-moved, notifyUser: \"-x\", advertInterval: 0s }\n").unwrap_err();
    for want in [
        "vips.vrrp.unicastPeers[0]: 10.77.0.3: an address keepalived moves (a VIP or vips.boot), not an appliance's own",
        "vips.vrrp.unicastPeers[1]: \"appliance-b\" is not an IP address",
        "vips.vrrp.unicastPeers[3]: 10.77.0.8: listed twice",
        "vips.vrrp.unicastPeers[4]: 224.0.0.18: not an appliance's address",
        "vips.vrrp.unicastPeers[5]: 127.0.0.1: not an appliance's address",
        "vips.vrrp.notify: \"libexec/vip-moved\": not an absolute path",
        "vips.vrrp.notifyUser: \"-x\": not a user name",
        "vips.vrrp.advertInterval",
    ] {
        assert!(e.contains(want), "missing {want:?} in:\n{e}");
    }
    for (vrrp, want) in [
        (
            "unicastPeers: []",
            "vips.vrrp.unicastPeers: an empty list: list the appliances' addresses, or leave the key out for multicast",
        ),
        (
            "unicastPeers: [\"fd00:77::8\"]",
            "vips.vrrp.unicastPeers: no IPv4 address: the IPv4 VIPs' instances advertise to the appliances' IPv4 addresses",
        ),
        (
            "notify: \"/usr/local/bin/vip moved\"",
            "vips.vrrp.notify: \"/usr/local/bin/vip moved\": letters, digits, '/', '.', '_', '+' and '-' only",
        ),
        (
            "notify: \"/usr/local/bin/$HOOK\"",
            "vips.vrrp.notify: \"/usr/local/bin/$HOOK\": letters, digits",
        ),
        (
            "notify: /usr/local/../bin/hook",
            "vips.vrrp.notify: \"/usr/local/../bin/hook\": a file's path, without '.', '..', '//' or a trailing '/'",
        ),
        (
            "notify: /usr/local/bin/",
            "vips.vrrp.notify: \"/usr/local/bin/\": a file's path",
        ),
        (
            "notifyUser: nobody",
            "vips.vrrp.notifyUser: without notify: nothing runs as this user",
        ),
    ] {
        let e = with(&format!(
            "vips:\n  api: 10.77.0.2\n  ingress: 10.77.0.3\n  vrrp: {{ interface: br0, {vrrp} }}\n"
        ))
        .unwrap_err();
        assert!(e.contains(want), "{vrrp}: missing {want:?} in:\n{e}");
    }
}
