//! A node's host network ([`site::NodeNetwork`]) as the two things that
//! configure it: NetworkManager keyfiles, which its Ignition writes for
//! the installed or running system, and dracut's kernel arguments
//! (`ifname=`, `bond=`, `vlan=`, `ip=`, `rd.route=`, `nameserver=`), which NetworkManager's
//! initrd generator reads before the root file system is there (the live
//! rootfs and the Ignition are fetched over that network).

use super::fqdn;
use site::{Interface, InterfaceKind, Node, NodeNetwork, Site};
use std::fmt::Write;
use std::net::IpAddr;

/// Where an interface's keyfile goes.
pub fn keyfile_path(iface: &str) -> String {
    format!("/etc/NetworkManager/system-connections/{iface}.nmconnection")
}

/// Every interface's keyfile: (path, contents), in the config's order.
pub fn keyfiles(site: &Site, hn: &NodeNetwork) -> Vec<(String, String)> {
    hn.interfaces
        .iter()
        .map(|i| (keyfile_path(&i.name), keyfile(site, hn, i)))
        .collect()
}

/// One interface's NetworkManager keyfile (nm-settings-keyfile(5)).
pub fn keyfile(site: &Site, hn: &NodeNetwork, i: &Interface) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "[connection]\nid={name}\ntype={ty}\n",
        name = i.name,
        ty = i.kind.nm_type()
    );
    // A NIC known by its MAC is matched by it alone: the running system
    // may name it otherwise than the config (enp1s0f0 for eth0).
    if i.mac.is_none() {
        let _ = writeln!(s, "interface-name={}", i.name);
    }
    s.push_str("autoconnect=true\n");
    if let Some(bond) = &i.controller {
        // The older names NetworkManager still reads (controller= and
        // port-type= are 1.46's): every RHCOS release takes these.
        let _ = write!(s, "master={bond}\nslave-type=bond\n");
    }
    if matches!(i.kind, InterfaceKind::Bond { .. }) {
        // Activating the bond brings its ports up.
        s.push_str("autoconnect-slaves=1\n");
    }
    s.push('\n');
    if i.mac.is_some() || i.mtu.is_some() {
        s.push_str("[ethernet]\n");
        if let Some(m) = i.mac {
            let _ = writeln!(s, "mac-address={m}");
        }
        if let Some(m) = i.mtu {
            let _ = writeln!(s, "mtu={m}");
        }
        s.push('\n');
    }
    match &i.kind {
        InterfaceKind::Ethernet => {}
        InterfaceKind::Bond { mode, options, .. } => {
            let _ = writeln!(s, "[bond]\nmode={}", mode.as_str());
            for (k, v) in options {
                let _ = writeln!(s, "{k}={v}");
            }
            s.push('\n');
        }
        InterfaceKind::Vlan { base, id } => {
            let _ = write!(s, "[vlan]\nid={id}\nparent={base}\n\n");
        }
    }
    // A bond's port has no addressing of its own.
    if i.controller.is_none() {
        for v4 in [true, false] {
            family(&mut s, site, hn, i, v4);
        }
    }
    s.truncate(s.trim_end().len() + 1);
    s
}

/// The `[ipv4]` or `[ipv6]` section.
fn family(s: &mut String, site: &Site, hn: &NodeNetwork, i: &Interface, v4: bool) {
    let fam = if v4 { "ipv4" } else { "ipv6" };
    let c = NodeNetwork::family(i, v4);
    if !c.enabled {
        let _ = write!(s, "[{fam}]\nmethod=disabled\n\n");
        return;
    }
    let method = if c.dhcp { "auto" } else { "manual" };
    let _ = write!(s, "[{fam}]\nmethod={method}\n");
    let gw = hn.gateway(&i.name, v4);
    for (n, a) in c.addresses.iter().enumerate() {
        let _ = write!(s, "address{}={a}", n + 1);
        // The default route's gateway goes with the first address.
        if let (0, Some(g)) = (n, gw) {
            let _ = write!(s, ",{g}");
        }
        s.push('\n');
    }
    if c.addresses.is_empty() {
        if let Some(g) = gw {
            let _ = writeln!(s, "gateway={g}");
        }
    }
    let routes = hn
        .routes
        .iter()
        .filter(|r| !r.is_default() && r.interface == i.name && r.next_hop.is_ipv4() == v4);
    for (n, r) in routes.enumerate() {
        let _ = write!(s, "route{}={},{}", n + 1, r.destination, r.next_hop);
        if let Some(m) = r.metric {
            let _ = write!(s, ",{m}");
        }
        s.push('\n');
    }
    let dns: Vec<String> = hn
        .dns
        .iter()
        .filter(|d| d.is_ipv4() == v4)
        .map(|d| format!("{d};"))
        .collect();
    if !dns.is_empty() {
        let _ = writeln!(s, "dns={}", dns.concat());
    }
    let mut search = format!("{};", site.cluster.domain());
    for d in &hn.search {
        let _ = write!(search, "{d};");
    }
    let _ = write!(s, "dns-search={search}\n\n");
}

/// dracut's network arguments for the initramfs and the live system:
/// `bond=`, `vlan=`, one `ip=` per interface and family that has
/// addressing, `rd.route=` for the routes beside the default ones, and
/// `nameserver=`.
pub fn dracut_args(site: &Site, node: &Node, hn: &NodeNetwork) -> Vec<String> {
    let mut args = Vec::new();
    // A NIC known by its MAC gets the config's name in the initramfs.
    for i in &hn.interfaces {
        if let Some(m) = i.mac {
            args.push(format!("ifname={}:{m}", i.name));
        }
    }
    for i in &hn.interfaces {
        match &i.kind {
            InterfaceKind::Bond {
                mode,
                options,
                ports,
            } => {
                let mut opts = vec![format!("mode={}", mode.as_str())];
                opts.extend(options.iter().map(|(k, v)| format!("{k}={v}")));
                let mut a = format!("bond={}:{}:{}", i.name, ports.join(","), opts.join(","));
                if let Some(m) = i.mtu {
                    let _ = write!(a, ":{m}");
                }
                args.push(a);
            }
            InterfaceKind::Vlan { base, .. } => args.push(format!("vlan={}:{base}", i.name)),
            InterfaceKind::Ethernet => {}
        }
    }
    let host = fqdn(site, node);
    for i in hn.interfaces.iter().filter(|i| i.controller.is_none()) {
        for v4 in [true, false] {
            let c = NodeNetwork::family(i, v4);
            if !c.enabled {
                continue;
            }
            match c.addresses.first() {
                // ip=<client>::<gw>:<netmask>:<hostname>:<iface>:none[:<mtu>];
                // IPv6 in brackets, the prefix length as mask.
                Some(a) if !c.dhcp => {
                    let gw = hn.gateway(&i.name, v4).map(lit).unwrap_or_default();
                    let mut x = format!(
                        "ip={}::{gw}:{}:{host}:{}:none",
                        lit(a.addr()),
                        netmask(a.prefix_len(), v4),
                        i.name
                    );
                    if let (Some(m), InterfaceKind::Ethernet) = (i.mtu, &i.kind) {
                        let _ = write!(x, ":{m}");
                    }
                    args.push(x);
                }
                _ => args.push(format!(
                    "ip={}:{}",
                    i.name,
                    if v4 { "dhcp" } else { "auto6" }
                )),
            }
        }
    }
    for r in hn.routes.iter().filter(|r| !r.is_default()) {
        let dest = match r.destination.addr() {
            IpAddr::V4(_) => r.destination.to_string(),
            IpAddr::V6(_) => format!("[{}]", r.destination),
        };
        args.push(format!(
            "rd.route={dest}:{}:{}",
            lit(r.next_hop),
            r.interface
        ));
    }
    for d in &hn.dns {
        args.push(format!("nameserver={d}"));
    }
    args
}

fn lit(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => format!("[{a}]"),
    }
}

fn netmask(prefix: u8, v4: bool) -> String {
    if v4 {
        let m: u32 = if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(prefix))
        };
        std::net::Ipv4Addr::from(m).to_string()
    } else {
        prefix.to_string()
    }
}
