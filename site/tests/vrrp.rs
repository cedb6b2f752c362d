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
