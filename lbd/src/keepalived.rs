//! keepalived's configuration for the site's VIPs (`vips.vrrp`), as
//! `bootd render keepalived` prints it: one VRRP instance per VIP (one
//! for both when api and ingress are the same address), every appliance
//! starting as BACKUP at the same priority with `nopreempt` (the first up
//! holds the VIP, and keeps it while it is healthy, so a VIP does not
//! flap back when an appliance returns), and a track script that asks
//! this lbd whether every frontend on the VIP has a backend up: a VIP
//! never stays on an appliance whose lbd has none. lbd binds the VIPs
//! with IP_FREEBIND, so it serves a VIP from the moment it arrives.
//!
//! With `vips.boot`, the boot service address (where nodes fetch scripts,
//! images and Ignition) is a third instance, whose check asks bootd's
//! own health (`bootd ready`): it stays where bootd serves.
//!
//! The same text on every appliance: derived from the site like the rest.

use site::Site;
use std::fmt::Write;
use std::net::IpAddr;
use std::path::Path;

/// Where the track scripts' programs are installed on the appliances.
pub struct Programs<'a> {
    /// `lbd ready --vip` asks lbd's admin listener (`lb.adminListen`).
    pub lbd: &'a Path,
    /// `bootd ready --http` asks bootd's `/healthz` (for `vips.boot`).
    pub bootd: &'a Path,
}

/// The configuration text. Neither check reads a file. `Err` when the
/// site has no `vips.vrrp` or no lbd admin listener.
pub fn render(site: &Site, bin: &Programs) -> Result<String, String> {
    let lbd_bin = bin.lbd;
    let v = site.vips.vrrp.as_ref().ok_or_else(|| {
        format!(
            "{}: vips.vrrp is not set: nothing for keepalived to move",
            site.source.display()
        )
    })?;
    let admin = site
        .lb
        .admin_listen
        .ok_or_else(|| "lb.adminListen is off: keepalived's check asks lbd there".to_string())?;
    let lbd_check =
        |vip: IpAddr| format!("{} ready --vip {vip} --admin {admin}", lbd_bin.display());
    let mut instances: Vec<(&str, IpAddr, u8, u8, String)> = vec![(
        "api",
        site.vips.api,
        v.api_router_id,
        v.api_prefix,
        lbd_check(site.vips.api),
    )];
    if site.vips.ingress != site.vips.api {
        instances.push((
            "ingress",
            site.vips.ingress,
            v.ingress_router_id,
            v.ingress_prefix,
            lbd_check(site.vips.ingress),
        ));
    }
    // A dual-stack site's IPv6 VIPs: instances of their own (keepalived
    // keeps one family per instance; VRRP's router ids are per family, so
    // the IPv4 instance's id is used again).
    let prefix6 = |vip: IpAddr| {
        site.networks
            .iter()
            .find_map(|n| n.subnet_of(vip))
            .map_or(64, |s| s.net.prefix_len())
    };
    if let Some(vip) = site.vips.api_v6 {
        instances.push(("api6", vip, v.api_router_id, prefix6(vip), lbd_check(vip)));
    }
    if let Some(vip) = site
        .vips
        .ingress_v6
        .filter(|i| Some(*i) != site.vips.api_v6)
    {
        instances.push((
            "ingress6",
            vip,
            v.ingress_router_id,
            prefix6(vip),
            lbd_check(vip),
        ));
    }
    if let Some(boot) = site.vips.boot {
        // bootd's HTTP listener as seen from the appliance itself.
        let mut http = site.host.http.listen;
        if http.ip().is_unspecified() {
            http.set_ip(match http {
                std::net::SocketAddr::V4(_) => IpAddr::from([127, 0, 0, 1]),
                std::net::SocketAddr::V6(_) => IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
            });
        }
        instances.push((
            "boot",
            boot,
            v.boot_router_id,
            v.boot_prefix,
            format!("{} ready --http {http}", bin.bootd.display()),
        ));
    }
    let mut out = String::new();
    let cluster = &site.cluster.name;
    let _ = writeln!(
        out,
        "# keepalived for cluster {cluster}: written by `bootd render keepalived` from {}.\n\
         # The same on every appliance; regenerate it when the site changes.\n",
        site.source.display()
    );
    let _ = writeln!(
        out,
        "global_defs {{\n    router_id bootd_{cluster}\n    enable_script_security\n    script_user nobody\n}}\n"
    );
    let interval = v.advert_interval.as_secs();
    // A check is a process started every interval: on a loaded host (two
    // cores, QEMU beside it) one can take over a second, so a check has two
    // intervals and three must fail in a row (about 3-5 s) before the
    // address leaves a healthy appliance. An appliance that is gone stops
    // advertising and loses its addresses after 3 adverts either way.
    for (name, vip, id, prefix, check) in &instances {
        let _ = writeln!(
            out,
            "vrrp_script check_{name} {{\n    script \"{check}\"\n    interval {interval}\n    timeout {timeout}\n    fall 3\n    rise 2\n}}\n",
            timeout = 2 * interval,
        );
        let _ = writeln!(
            out,
            "vrrp_instance {cluster}_{name} {{\n    state BACKUP\n    nopreempt\n    interface {iface}\n    virtual_router_id {id}\n    priority 100\n    advert_int {interval}\n    virtual_ipaddress {{\n        {vip}/{prefix} dev {iface}\n    }}\n    track_script {{\n        check_{name}\n    }}\n}}\n",
            iface = v.interface,
        );
    }
    Ok(out)
}
