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
//! The same text on every appliance: derived from the site like the rest.

use site::Site;
use std::fmt::Write;
use std::net::IpAddr;
use std::path::Path;

/// The configuration text; `lbd_bin` as the track script runs it on the
/// appliance (it asks lbd's admin listener, `lb.adminListen`, and reads
/// no file). `Err` when the site has no `vips.vrrp` or no admin listener.
pub fn render(site: &Site, lbd_bin: &Path) -> Result<String, String> {
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
    let mut instances: Vec<(&str, IpAddr, u8, u8)> =
        vec![("api", site.vips.api, v.api_router_id, v.api_prefix)];
    if site.vips.ingress != site.vips.api {
        instances.push((
            "ingress",
            site.vips.ingress,
            v.ingress_router_id,
            v.ingress_prefix,
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
    for (name, vip, id, prefix) in &instances {
        let _ = writeln!(
            out,
            "vrrp_script lbd_{name} {{\n    script \"{} ready --vip {vip} --admin {admin}\"\n    interval {interval}\n    timeout {interval}\n    fall 2\n    rise 2\n}}\n",
            lbd_bin.display(),
        );
        let _ = writeln!(
            out,
            "vrrp_instance {cluster}_{name} {{\n    state BACKUP\n    nopreempt\n    interface {iface}\n    virtual_router_id {id}\n    priority 100\n    advert_int {interval}\n    virtual_ipaddress {{\n        {vip}/{prefix} dev {iface}\n    }}\n    track_script {{\n        lbd_{name}\n    }}\n}}\n",
            iface = v.interface,
        );
    }
    Ok(out)
}
