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
//! The same text on every appliance, derived from the site like the rest,
//! but for one thing with `vips.vrrp.unicastPeers`: VRRP then goes to each
//! peer by unicast (networks that drop multicast), and each appliance's
//! text names its own source address (`unicast_src_ip`) and leaves it out
//! of its peers (keepalived would advertise to itself, and warn of an
//! equal-priority advert "from remote host with our IP address" each
//! second). Which address is its own: [`Local`], found by
//! [`unicast_sources`] from what the renderer is told or what the VRRP
//! interface holds.
//!
//! With `vips.vrrp.notify`, every instance runs that program at each
//! change of state, as keepalived's `notify` with the VIP first:
//! `PROGRAM VIP INSTANCE <name> MASTER|BACKUP|FAULT|STOP <priority>`.

use site::Site;
use std::fmt::Write;
use std::net::IpAddr;
use std::path::Path;

/// What differs between appliances: with unicast peers, this appliance's
/// own address of each family the instances use (`unicast_src_ip`).
#[derive(Debug, Default, Clone)]
pub struct Local {
    pub unicast_src: Vec<IpAddr>,
}

/// Where the track scripts' programs are installed on the appliances.
pub struct Programs<'a> {
    /// `lbd ready --vip` asks lbd's admin listener (`lb.adminListen`).
    pub lbd: &'a Path,
    /// `bootd ready --http` asks bootd's `/healthz` (for `vips.boot`).
    pub bootd: &'a Path,
}

/// Which of the site's addresses keepalived moves (`bootd render
/// keepalived --only`): the API VIP (and its IPv6 one), the ingress VIP
/// (and its IPv6 one), the boot address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Vip {
    Api,
    Ingress,
    Boot,
}

/// The configuration text. Neither check reads a file. `only` names the
/// addresses to move (empty: every one the site has); the API and ingress
/// VIPs' checks ask lbd, so they need `lb.adminListen`, the boot address's
/// does not. `Err` when the site has no `vips.vrrp`, an address named in
/// `only` is not in the site, an instance asks lbd and there is no admin
/// listener, or, with unicast peers, when `local` has no source address of
/// an instance's family or no peer is left once it is taken out.
pub fn render(site: &Site, bin: &Programs, local: &Local, only: &[Vip]) -> Result<String, String> {
    let lbd_bin = bin.lbd;
    let v = site.vips.vrrp.as_ref().ok_or_else(|| {
        format!(
            "{}: vips.vrrp is not set: nothing for keepalived to move",
            site.source.display()
        )
    })?;
    let wants = |vip: Vip| only.is_empty() || only.contains(&vip);
    if only.contains(&Vip::Boot) && site.vips.boot.is_none() {
        return Err("--only boot: the site has no vips.boot".to_string());
    }
    let same = site.vips.ingress == site.vips.api;
    // One instance moves both when the API and ingress VIPs are one address.
    let api = wants(Vip::Api) || (same && wants(Vip::Ingress));
    let ingress = wants(Vip::Ingress) && !same;
    let admin = if wants(Vip::Api) || wants(Vip::Ingress) {
        Some(site.lb.admin_listen.ok_or_else(|| {
            "lb.adminListen is off: keepalived's check asks lbd there".to_string()
        })?)
    } else {
        None
    };
    let lbd_check = |vip: IpAddr| {
        format!(
            "{} ready --vip {vip} --admin {}",
            lbd_bin.display(),
            admin.map(|a| a.to_string()).unwrap_or_default()
        )
    };
    let mut instances: Vec<(&str, IpAddr, u8, u8, String)> = Vec::new();
    if api {
        instances.push((
            "api",
            site.vips.api,
            v.api_router_id,
            v.api_prefix,
            lbd_check(site.vips.api),
        ));
    }
    if ingress {
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
    let api6 = wants(Vip::Api) || (site.vips.ingress_v6 == site.vips.api_v6 && wants(Vip::Ingress));
    if let Some(vip) = site.vips.api_v6.filter(|_| api6) {
        instances.push(("api6", vip, v.api_router_id, prefix6(vip), lbd_check(vip)));
    }
    if let Some(vip) = site
        .vips
        .ingress_v6
        .filter(|i| Some(*i) != site.vips.api_v6 && wants(Vip::Ingress))
    {
        instances.push((
            "ingress6",
            vip,
            v.ingress_router_id,
            prefix6(vip),
            lbd_check(vip),
        ));
    }
    if let Some(boot) = site.vips.boot.filter(|_| wants(Vip::Boot)) {
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
    let whose = if v.unicast_peers.is_empty() {
        "The same on every appliance".to_string()
    } else {
        let own: Vec<String> = local.unicast_src.iter().map(ToString::to_string).collect();
        format!(
            "For the appliance at {} (VRRP by unicast from there)",
            own.join(" and ")
        )
    };
    let _ = writeln!(
        out,
        "# keepalived for cluster {cluster}: written by `bootd render keepalived` from {}.\n\
         # {whose}; regenerate it when the site changes.\n",
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
        let _ = write!(
            out,
            "vrrp_instance {cluster}_{name} {{\n    state BACKUP\n    nopreempt\n    interface {iface}\n    virtual_router_id {id}\n    priority 100\n    advert_int {interval}\n{unicast}    virtual_ipaddress {{\n        {vip}/{prefix} dev {iface}\n    }}\n    track_script {{\n        check_{name}\n    }}\n",
            iface = v.interface,
            unicast = unicast(v, *vip, local)?,
        );
        if let Some(n) = &v.notify {
            // keepalived appends its four arguments to these.
            let _ = write!(out, "    notify \"{} {vip}\"", n.path.display());
            if let Some(u) = &n.user {
                let _ = write!(out, " {u}");
            }
            out.push('\n');
        }
        out.push_str("}\n\n");
    }
    Ok(out)
}

/// An instance's unicast lines: this appliance's source address of the
/// VIP's family, every other peer of that family, and the check that an
/// advert comes from one of them. Empty without unicast peers.
fn unicast(v: &site::Vrrp, vip: IpAddr, local: &Local) -> Result<String, String> {
    if v.unicast_peers.is_empty() {
        return Ok(String::new());
    }
    let family = if vip.is_ipv6() { "IPv6" } else { "IPv4" };
    let src = local
        .unicast_src
        .iter()
        .find(|a| a.is_ipv6() == vip.is_ipv6())
        .ok_or_else(|| {
            format!("vips.vrrp.unicastPeers: no {family} source address of this appliance for {vip}'s instance (--unicast-src)")
        })?;
    let peers: Vec<&IpAddr> = v
        .unicast_peers
        .iter()
        .filter(|p| p.is_ipv6() == vip.is_ipv6() && *p != src)
        .collect();
    if peers.is_empty() {
        return Err(format!(
            "vips.vrrp.unicastPeers: no {family} peer but this appliance's own address {src}: list the other appliances' addresses"
        ));
    }
    let mut out = format!("    unicast_src_ip {src}\n    unicast_peer {{\n");
    for p in peers {
        let _ = writeln!(out, "        {p}");
    }
    out.push_str("    }\n    check_unicast_src\n");
    Ok(out)
}

/// This appliance's unicast source addresses, one per family the site's
/// moved addresses have: `given` (the renderer's `--unicast-src`) when
/// any is given; else, per family, the one address of `on_interface` (what
/// `vips.vrrp.interface` holds here) that `unicastPeers` lists; else its
/// one address that is no VIP (IPv6 link-local addresses aside). `Err`
/// names what is missing or ambiguous. Empty without unicast peers.
pub fn unicast_sources(
    site: &Site,
    given: &[IpAddr],
    on_interface: &[IpAddr],
) -> Result<Vec<IpAddr>, String> {
    let Some(v) = site
        .vips
        .vrrp
        .as_ref()
        .filter(|v| !v.unicast_peers.is_empty())
    else {
        return Ok(Vec::new());
    };
    let moved: Vec<IpAddr> = site.vips.moved().collect();
    let mut out = Vec::new();
    for (v6, family) in [(false, "IPv4"), (true, "IPv6")] {
        if !moved.iter().any(|m| m.is_ipv6() == v6) {
            continue;
        }
        let of = |list: &[IpAddr]| -> Vec<IpAddr> {
            list.iter()
                .copied()
                .filter(|a| a.is_ipv6() == v6 && !moved.contains(a))
                .collect()
        };
        let chosen = if !given.is_empty() {
            match of(given).as_slice() {
                [a] => *a,
                [] => return Err(format!("--unicast-src: no {family} address (the site's {family} VIPs need one; a VIP is not one)")),
                more => return Err(format!("--unicast-src: {} {family} addresses: one per family", more.len())),
            }
        } else {
            let here = of(on_interface);
            let listed: Vec<IpAddr> = here
                .iter()
                .copied()
                .filter(|a| v.unicast_peers.contains(a))
                .collect();
            let own: Vec<IpAddr> = here
                .into_iter()
                .filter(|a| !matches!(a, IpAddr::V6(a6) if a6.is_unicast_link_local()))
                .collect();
            match (listed.as_slice(), own.as_slice()) {
                ([a], _) | ([], [a]) => *a,
                ([], []) => {
                    return Err(format!(
                        "{} has no {family} address here: give --unicast-src",
                        v.interface
                    ))
                }
                ([], more) | (more, _) => {
                    return Err(format!(
                        "{} holds several {family} addresses ({}): give --unicast-src",
                        v.interface,
                        more.iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                }
            }
        };
        out.push(chosen);
    }
    Ok(out)
}

/// The addresses `interface` holds on this host (empty when it has none
/// or does not exist): where [`unicast_sources`] looks for this
/// appliance's own.
pub fn interface_addresses(interface: &str) -> Vec<IpAddr> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    addrs
        .filter(|a| a.interface_name == interface)
        .filter_map(|a| {
            let sa = a.address?;
            sa.as_sockaddr_in()
                .map(|v4| IpAddr::V4(v4.ip()))
                .or_else(|| sa.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
        })
        .collect()
}

/// What keepalived would make of `vips.vrrp.notify` on this host, as
/// warnings: the program missing, not an executable file, or (keepalived
/// runs scripts with `enable_script_security`) writable, or under a
/// directory writable, by anyone but root: keepalived would not run it.
pub fn notify_warnings(site: &Site) -> Vec<String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let Some(n) = site.vips.vrrp.as_ref().and_then(|v| v.notify.as_ref()) else {
        return Vec::new();
    };
    let p = &n.path;
    let key = "vips.vrrp.notify";
    match std::fs::metadata(p) {
        Err(e) => {
            return vec![format!(
                "{key}: {}: {e} on this host: keepalived runs it where it runs",
                p.display()
            )]
        }
        Ok(m) if !m.is_file() || m.permissions().mode() & 0o111 == 0 => {
            return vec![format!("{key}: {}: not an executable file", p.display())];
        }
        Ok(_) => {}
    }
    p.ancestors()
        .filter_map(|a| Some((a, std::fs::metadata(a).ok()?)))
        .filter(|(_, m)| {
            let mode = m.permissions().mode();
            m.uid() != 0 || (mode & 0o020 != 0 && m.gid() != 0) || mode & 0o002 != 0
        })
        .map(|(a, _)| {
            format!(
                "{key}: {} is writable by someone other than root: keepalived (enable_script_security) will not run {}",
                a.display(),
                p.display()
            )
        })
        .collect()
}
