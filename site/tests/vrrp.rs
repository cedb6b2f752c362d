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
