//! Stage two for `nodes[]`: each node checked and resolved (image, network, firmware, kernel arguments, DHCP options).

use super::*;

pub(super) fn arg_ok(a: &str) -> bool {
    !a.is_empty()
        && !a.contains(|c: char| {
            c.is_whitespace() || c.is_control() || c == '"' || c == '\'' || c == '\\'
        })
}

/// Whether `inspection` has an agent for the architecture the node's image
/// set (or arch) has; `true` when that cannot be told yet (another key
/// is wrong and says so).
fn arch_known_without_agent(w: &wire::Node, images: &Images, inspection: &Inspection) -> bool {
    let arch = match (w.arch.as_deref(), w.image.as_deref()) {
        (Some(a), _) => Arch::parse(a),
        (None, Some(i)) => images.sets.get(i).map(|s| s.arch),
        (None, None) => Some(Arch::X86_64),
    };
    arch.is_none_or(|a| inspection.agent(a).is_some())
}

pub(super) fn node(
    cx: &mut Cx,
    i: usize,
    w: &wire::Node,
    networks: &[Network],
    images: &Images,
    broken: &[String],
    inspection: &Inspection,
) -> Option<Node> {
    let k = |f: &str| format!("nodes[{i}].{f}");
    let before = cx.problems.len();
    let name = match w.name.as_deref() {
        Some(n) if is_dns_label(n) => n.to_string(),
        Some(n) => {
            cx.err(
                k("name"),
                format!("{n:?} is not a DNS label (lower-case letters, digits, '-')"),
            );
            String::new()
        }
        None => {
            cx.err(k("name"), "required");
            String::new()
        }
    };
    let role = match w.role.as_deref() {
        Some(r) if is_dns_label(r) => r.to_string(),
        Some(r) => {
            cx.err(
                k("role"),
                format!("{r:?}: want bootstrap, master, worker, or a custom role name (DNS label)"),
            );
            String::new()
        }
        None => {
            cx.err(
                k("role"),
                "required (bootstrap, master, worker, or a custom role)",
            );
            String::new()
        }
    };
    let relay = w.relay.as_ref().map(|r| {
        let mut value = |key: &str, v: &Option<String>| {
            v.as_deref().and_then(|s| {
                RelayId::parse_value(s)
                    .map_err(|why| cx.err(k(&format!("relay.{key}")), why))
                    .ok()
            })
        };
        let id = RelayId {
            circuit_id: value("circuitId", &r.circuit_id),
            remote_id: value("remoteId", &r.remote_id),
        };
        if r.circuit_id.is_none() && r.remote_id.is_none() {
            cx.err(k("relay"), "give circuitId, remoteId or both");
        }
        id
    });
    let mut macs = Vec::new();
    if w.macs.is_empty() && relay.is_none() {
        cx.err(
            k("macs"),
            "at least one MAC is required (or a relay port: relay.circuitId/remoteId)",
        );
    }
    for (j, m) in w.macs.iter().enumerate() {
        match m.parse::<Mac>() {
            Ok(m) if macs.contains(&m) => {
                cx.err(format!("nodes[{i}].macs[{j}]"), format!("{m} listed twice"))
            }
            Ok(m) => macs.push(m),
            Err(e) => cx.err(format!("nodes[{i}].macs[{j}]"), e.to_string()),
        }
    }
    let mut network = 0;
    let (mut ip4, mut ip6) = (None, None);
    match &w.ip {
        None => cx.err(
            k("ip"),
            "required (an address, or one per family for dual stack)",
        ),
        Some(written) => {
            let mut nets: Vec<usize> = Vec::new();
            let items = written.items();
            if items.is_empty() {
                cx.err(k("ip"), "an empty list: give at least one address");
            }
            for (j, s) in items.into_iter().enumerate() {
                let key = if written.is_list() {
                    format!("nodes[{i}].ip[{j}]")
                } else {
                    k("ip")
                };
                let a = match s.parse::<IpAddr>() {
                    Ok(a) => a,
                    Err(_) => {
                        cx.err(key, format!("{s:?} is not an IP address"));
                        continue;
                    }
                };
                match a {
                    IpAddr::V4(v4) if ip4.is_none() => ip4 = Some(v4),
                    IpAddr::V6(v6) if ip6.is_none() => ip6 = Some(v6),
                    _ => {
                        cx.err(
                            key,
                            format!("a second address of {a}'s family: one per family"),
                        );
                        continue;
                    }
                }
                match networks.iter().position(|n| n.contains(a)) {
                    Some(p) => nets.push(p),
                    None => cx.err(
                        key,
                        format!(
                            "{a} is outside every network ({})",
                            networks
                                .iter()
                                .map(|n| n.subnets_text())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ),
                }
            }
            if let Some(&first) = nets.first() {
                network = first;
                if nets.iter().any(|&p| p != first) {
                    cx.err(
                        k("ip"),
                        format!(
                            "its addresses are in different networks ({}): a node's addresses share its one network",
                            nets.iter().map(|&p| networks[p].name.as_str()).collect::<Vec<_>>().join(", ")
                        ),
                    );
                }
            }
        }
    }
    let arch = match w.arch.as_deref() {
        None => Arch::X86_64,
        Some(a) => Arch::parse(a).unwrap_or_else(|| {
            cx.err(
                k("arch"),
                format!("{a:?} is not one of x86_64, aarch64, ppc64le"),
            );
            Arch::X86_64
        }),
    };
    let firmware = match w.firmware.as_deref() {
        None => Firmware::Auto,
        Some(f) => Firmware::parse(f).unwrap_or_else(|| {
            cx.err(
                k("firmware"),
                format!("{f:?} is not one of auto, bios, uefi, uefi-http, ieee1275"),
            );
            Firmware::Auto
        }),
    };
    let mut quiet_fail = false;
    let image = match w.image.as_deref() {
        Some(name) if broken.iter().any(|b| b == name) => {
            // Already reported under images.sets; the node is not blamed again.
            quiet_fail = true;
            String::new()
        }
        Some(name) => match images.sets.get(name) {
            Some(set) if set.arch != arch => {
                cx.err(
                    k("image"),
                    format!("image {name:?} is for {}, but the node is {arch}", set.arch),
                );
                String::new()
            }
            Some(_) => name.to_string(),
            None => {
                cx.err(
                    k("image"),
                    format!("no image set named {name:?} in images.sets"),
                );
                String::new()
            }
        },
        None => {
            let fits: Vec<_> = images
                .sets
                .iter()
                .filter(|(_, s)| s.arch == arch)
                .map(|(n, _)| n.clone())
                .collect();
            match fits.as_slice() {
                [one] => one.clone(),
                [] => {
                    cx.err(
                        k("image"),
                        format!("missing: no image set for {arch} in images.sets"),
                    );
                    String::new()
                }
                _ => {
                    cx.err(
                        k("image"),
                        format!(
                            "required: several image sets fit {arch} ({})",
                            fits.join(", ")
                        ),
                    );
                    String::new()
                }
            }
        }
    };
    let install_disk = match w.install_disk.as_deref() {
        Some(d) if d.starts_with("/dev/") && arg_ok(d) => Some(d.to_string()),
        Some(d) => {
            cx.err(k("installDisk"), format!("{d:?} is not a /dev/ path"));
            None
        }
        None => None,
    };
    let root_device_hints = w.root_device_hints.as_ref().map(|h| {
        let mut text = |key: &str, v: &Option<String>| -> Option<String> {
            let v = v.as_ref()?;
            if v.is_empty() || v.len() > 255 || v.chars().any(char::is_control) {
                cx.err(
                    k(&format!("rootDeviceHints.{key}")),
                    format!("{v:?}: 1-255 printable characters"),
                );
                return None;
            }
            Some(v.clone())
        };
        let hints = crate::hardware::RootDeviceHints {
            device_name: text("deviceName", &h.device_name),
            hctl: text("hctl", &h.hctl),
            model: text("model", &h.model),
            vendor: text("vendor", &h.vendor),
            serial_number: text("serialNumber", &h.serial_number),
            min_size_gigabytes: h.min_size_gigabytes,
            wwn: text("wwn", &h.wwn),
            wwn_with_extension: text("wwnWithExtension", &h.wwn_with_extension),
            wwn_vendor_extension: text("wwnVendorExtension", &h.wwn_vendor_extension),
            rotational: h.rotational,
        };
        if let Some(d) = &hints.device_name {
            if !d.starts_with("/dev/") {
                cx.err(
                    k("rootDeviceHints.deviceName"),
                    format!("{d:?}: a /dev/ path (/dev/sda, /dev/disk/by-path/…)"),
                );
            }
        }
        if let Some(h) = &hints.hctl {
            let parts: Vec<&str> = h.split(':').collect();
            if parts.len() != 4 || parts.iter().any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit())) {
                cx.err(
                    k("rootDeviceHints.hctl"),
                    format!("{h:?}: host:channel:target:lun, like 0:0:0:0"),
                );
            }
        }
        if hints.min_size_gigabytes == Some(0) {
            cx.err(k("rootDeviceHints.minSizeGigabytes"), "at least 1 (leave it out for any size)");
        }
        if hints.is_empty() {
            cx.err(k("rootDeviceHints"), "no hint: give at least one (Metal3's keys)");
        }
        // Hints other than a device name are matched against the disks
        // the machine reports: its live system must run the agent.
        if hints.needs_inventory() && !arch_known_without_agent(w, images, inspection) {
            let v = serde_json::to_value(&hints).unwrap_or_default();
            for key in v.as_object().into_iter().flat_map(|o| o.keys()).filter(|k| *k != "deviceName") {
                cx.err(
                    k(&format!("rootDeviceHints.{key}")),
                    "needs the machine's inventory, and inspection.agents has no agent for the node's \
                     architecture: add one (docs/site.md, inspection), or name the disk with deviceName",
                );
            }
        }
        hints
    });
    let live = w.live.unwrap_or(false);
    if w.install_disk.is_some() && w.root_device_hints.is_some() {
        cx.err(
            k("rootDeviceHints"),
            "give rootDeviceHints or installDisk, not both (installDisk is rootDeviceHints.deviceName)",
        );
    }
    if live && (w.install_disk.is_some() || w.root_device_hints.is_some()) {
        cx.err(
            k("live"),
            "a live node installs to no disk: leave out installDisk and rootDeviceHints",
        );
    }
    for (j, a) in w.kernel_args.iter().enumerate() {
        if !arg_ok(a) {
            cx.err(
                format!("nodes[{i}].kernelArgs[{j}]"),
                format!("{a:?}: one argument per entry, no spaces, quotes or control characters"),
            );
        }
    }
    let short = w.network.as_ref().and_then(|s| {
        let net = networks.get(network);
        let interface = match s.interface.as_deref() {
            Some(n) if crate::nmstate::iface_name_ok(n) => n.to_string(),
            Some(n) => {
                cx.err(
                    k("network.interface"),
                    format!("{n:?} is not an interface name"),
                );
                return None;
            }
            None => {
                cx.err(k("network.interface"), "required (e.g. ens3)");
                return None;
            }
        };
        // Given, one per family; else the node's addresses with their
        // network's prefixes.
        let mut addresses: Vec<IpNet> = Vec::new();
        match &s.address {
            Some(written) => {
                for (j, a) in written.items().into_iter().enumerate() {
                    let key = if written.is_list() {
                        k(&format!("network.address[{j}]"))
                    } else {
                        k("network.address")
                    };
                    match a.parse::<IpNet>() {
                        Ok(n)
                            if addresses
                                .iter()
                                .any(|x| x.addr().is_ipv4() == n.addr().is_ipv4()) =>
                        {
                            cx.err(
                                key,
                                format!("a second address of {n}'s family: one per family"),
                            );
                        }
                        Ok(n) => addresses.push(n),
                        Err(_) => cx.err(key, format!("{a:?} is not address/prefix")),
                    }
                }
            }
            None => {
                for ip in ip4.map(IpAddr::V4).into_iter().chain(ip6.map(IpAddr::V6)) {
                    let prefix = net
                        .and_then(|n| n.subnet_of(ip))
                        .map(|s| s.net.prefix_len())
                        .unwrap_or(if ip.is_ipv4() { 24 } else { 64 });
                    addresses.extend(IpNet::new(ip, prefix).ok());
                }
            }
        }
        if addresses.is_empty() {
            return None;
        }
        let mut given: Vec<IpAddr> = Vec::new();
        if let Some(g) = &s.gateway {
            for (j, x) in g.items().into_iter().enumerate() {
                let key = if g.is_list() {
                    k(&format!("network.gateway[{j}]"))
                } else {
                    k("network.gateway")
                };
                given.extend(parse_ip(cx, &key, x));
            }
        }
        let mut routes = Vec::new();
        for a in &addresses {
            let v4 = a.addr().is_ipv4();
            let gw = given
                .iter()
                .copied()
                .find(|g| g.is_ipv4() == v4)
                .or_else(|| {
                    net.and_then(|n| n.subnet_of(a.addr()))
                        .and_then(|s| s.gateway)
                });
            if let Some(next_hop) = gw {
                let any = if v4 { "0.0.0.0/0" } else { "::/0" };
                routes.push(Route {
                    destination: any.parse().expect("a CIDR"),
                    next_hop,
                    interface: interface.clone(),
                    metric: None,
                });
            }
        }
        let family = |v4: bool| {
            let of: Vec<IpNet> = addresses
                .iter()
                .copied()
                .filter(|a| a.addr().is_ipv4() == v4)
                .collect();
            if of.is_empty() {
                IpConfig::disabled()
            } else {
                IpConfig::manual(of)
            }
        };
        let dns = s
            .dns
            .iter()
            .enumerate()
            .filter_map(|(j, d)| parse_ip(cx, &k(&format!("network.dns[{j}]")), d))
            .collect();
        Some(NodeNetwork {
            interfaces: vec![Interface {
                name: interface,
                kind: InterfaceKind::Ethernet,
                mtu: s.mtu,
                mac: None,
                ipv4: family(true),
                ipv6: family(false),
                controller: None,
            }],
            dns,
            search: Vec::new(),
            routes,
        })
    });
    let nmstate = w.network_config.as_ref().and_then(|c| {
        crate::nmstate::resolve(&k("networkConfig"), c)
            .map_err(|ps| {
                for (key, why) in ps {
                    cx.err(key, why);
                }
            })
            .ok()
    });
    if w.network.is_some() && w.network_config.is_some() {
        cx.err(
            k("networkConfig"),
            "give network (one interface) or networkConfig (NMState), not both",
        );
    }
    let mut host_network = short.or(nmstate);
    if let Some(hn) = &mut host_network {
        // Without resolvers of its own, the node's network's (dnsd).
        if hn.dns.is_empty() {
            hn.dns = networks
                .get(network)
                .map(|n| n.dns_servers.clone())
                .unwrap_or_default();
        }
        // Its reserved addresses must be on an interface, where the
        // config is static in their family (bootd serves the node there).
        for ip in ip4.map(IpAddr::V4).into_iter().chain(ip6.map(IpAddr::V6)) {
            let v4 = ip.is_ipv4();
            let statics: Vec<&IpNet> = hn
                .static_addresses()
                .map(|(_, a)| a)
                .filter(|a| a.addr().is_ipv4() == v4)
                .collect();
            let dhcp = hn
                .interfaces
                .iter()
                .any(|i| NodeNetwork::family(i, v4).dhcp);
            if !statics.is_empty() && !dhcp && !statics.iter().any(|a| a.addr() == ip) {
                let list: Vec<String> = statics.iter().map(|a| a.to_string()).collect();
                cx.err(
                    k(if w.network_config.is_some() {
                        "networkConfig"
                    } else {
                        "network.address"
                    }),
                    format!(
                        "the node's ip {ip} is on no interface (static: {})",
                        list.join(", ")
                    ),
                );
            }
        }
    }
    let ipxe_binary = w
        .ipxe_binary
        .as_deref()
        .map(|b| boot_file(cx, &k("ipxeBinary"), Some(b), "ipxe.efi"));
    let dhcp_options = dhcp_options(cx, &k("dhcpOptions"), &w.dhcp_options);
    let fetch_from = match w.fetch_from.as_deref() {
        None => FetchFrom::NodeAddress,
        Some(s) => FetchFrom::parse(s).unwrap_or_else(|| {
            cx.err(
                k("fetchFrom"),
                format!("{s:?}: want nodeAddress (the default) or anyAddress"),
            );
            FetchFrom::NodeAddress
        }),
    };
    let addresses = w.addresses.as_ref().map(|l| {
        l.iter()
            .enumerate()
            .filter_map(|(j, a)| parse_ip(cx, &k(&format!("addresses[{j}]")), a))
            .collect::<Vec<_>>()
    });
    (cx.problems.len() == before && !quiet_fail).then_some(Node {
        name,
        role,
        macs,
        ip4,
        ip6,
        network,
        arch,
        firmware,
        image,
        install_disk,
        root_device_hints,
        live,
        kernel_args: w.kernel_args.clone(),
        host_network,
        ipxe_binary,
        dhcp_options,
        fetch_from,
        addresses,
        relay,
        epoch: w.epoch.unwrap_or(0),
    })
}
