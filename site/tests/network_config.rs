//! `nodes[].networkConfig`: the NMState subset (bonds, VLANs, static or
//! DHCP addressing, routes, resolvers) resolved into the node's host
//! network; everything outside the subset refused at once, each problem
//! with its key path.

mod common;

use common::assert_problems;
use site::{BondMode, InterfaceKind, IpConfig};

/// worker-1 of the lab site with `cfg` (YAML, indented for a node key) as
/// its networkConfig.
fn with(cfg: &str) -> Result<site::Site, site::SiteError> {
    let (_dir, path) = common::lab(|t| {
        let old = "  - { name: worker-1,  role: worker,    live: true, macs: [\"52:54:00:77:00:21\"], ip: 10.77.0.21, kernelArgs: [console=ttyS0] }\n";
        assert!(t.contains(old));
        t.replace(
            old,
            &format!("  - name: worker-1\n    role: worker\n    live: true\n    macs: [\"52:54:00:77:00:21\"]\n    ip: 10.77.0.21\n    networkConfig:\n{cfg}"),
        )
    });
    site::load(&path)
}

/// A bond of two NICs (LACP), a VLAN on it with the node's address, a
/// default and a static route, resolvers and a search domain, indented
/// under worker-1's `networkConfig`.
fn bond_vlan() -> String {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/bond-vlan.yaml"
    ))
    .unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("      {l}\n"))
        .collect()
}

#[test]
fn a_bond_and_a_vlan_resolve() {
    let s = with(&bond_vlan()).unwrap_or_else(|e| panic!("{e}"));
    let hn = s.node("worker-1").unwrap().host_network.as_ref().unwrap();
    let names: Vec<&str> = hn.interfaces.iter().map(|i| i.name.as_str()).collect();
    // The bond's ports (not declared) come first, then as written.
    assert_eq!(names, ["eno1", "eno2", "bond0", "bond0.77"]);
    for port in &hn.interfaces[..2] {
        assert_eq!(port.controller.as_deref(), Some("bond0"));
        assert_eq!(port.kind, InterfaceKind::Ethernet);
        assert!(!port.ipv4.enabled && !port.ipv6.enabled);
        assert_eq!(port.mtu, None);
    }
    match &hn.interfaces[2].kind {
        InterfaceKind::Bond {
            mode,
            options,
            ports,
        } => {
            assert_eq!(*mode, BondMode::Lacp);
            assert_eq!(ports, &["eno1", "eno2"]);
            assert_eq!(
                options,
                &[
                    ("lacp_rate".to_string(), "fast".to_string()),
                    ("miimon".into(), "100".into()),
                    ("xmit_hash_policy".into(), "layer3+4".into())
                ]
            );
        }
        k => panic!("{k:?}"),
    }
    let vlan = &hn.interfaces[3];
    assert_eq!(
        vlan.kind,
        InterfaceKind::Vlan {
            base: "bond0".into(),
            id: 77
        }
    );
    assert_eq!(
        vlan.ipv4,
        IpConfig::manual(vec!["10.77.0.21/24".parse().unwrap()])
    );
    assert_eq!(vlan.ipv6, IpConfig::dhcp());
    assert_eq!(
        hn.gateway("bond0.77", true),
        Some("10.77.0.1".parse().unwrap())
    );
    assert_eq!(hn.routes.len(), 2);
    assert_eq!(hn.routes[1].metric, Some(100));
    assert_eq!(hn.dns, ["10.77.0.1".parse::<std::net::IpAddr>().unwrap()]);
    assert_eq!(hn.search, ["corp.example.test"]);
}

#[test]
fn the_short_form_is_one_ethernet_interface() {
    let (_dir, path) = common::lab(|t| {
        t.replace(
            "ip: 10.77.0.21, kernelArgs: [console=ttyS0] }",
            "ip: 10.77.0.21, kernelArgs: [console=ttyS0], network: { interface: eno1, mtu: 1500 } }",
        )
    });
    let s = site::load(&path).unwrap();
    let hn = s.node("worker-1").unwrap().host_network.as_ref().unwrap();
    assert_eq!(hn.interfaces.len(), 1);
    assert_eq!(
        hn.interfaces[0].ipv4,
        IpConfig::manual(vec!["10.77.0.21/24".parse().unwrap()])
    );
    assert!(!hn.interfaces[0].ipv6.enabled);
    // The subnet's gateway and resolvers.
    assert_eq!(hn.gateway("eno1", true), Some("10.77.0.1".parse().unwrap()));
    assert_eq!(hn.dns, ["10.77.0.1".parse::<std::net::IpAddr>().unwrap()]);
}

#[test]
fn anything_outside_the_subset_is_refused_at_once() {
    let err = with(
        "      interfaces:
        - { name: br0, type: linux-bridge, state: up }
        - { name: eno3, type: ethernet, state: absent, ethtool: {} }
        - name: bond1
          type: bond
          link-aggregation: { mode: lacp, options: { miimon: 100, speed: 10, primary: \"a b\" }, port: [eno4, bond2] }
        - name: bond2
          type: bond
          link-aggregation: { mode: active-backup, port: [eno4] }
          ipv4: { enabled: true, dhcp: true }
        - { name: eno4, type: ethernet, ipv4: { enabled: true, address: [{ ip: 10.77.0.40, prefix-length: 24 }] } }
        - { name: v100, type: vlan, vlan: { base-iface: eno5, id: 100 } }
        - { name: eno6.7, type: vlan, vlan: { base-iface: eno6, id: 5000 } }
        - name: this-name-is-too-long0
          type: ethernet
        - name: eno7
          type: ethernet
          ipv4: { enabled: true, address: [{ ip: \"fd00::1\", prefix-length: 24 }, { ip: 10.77.0.50, prefix-length: 40 }] }
          ipv6: { enabled: true }
      dns-resolver:
        config: { server: [dnsd], search: [\"bad domain\"] }
      routes:
        config:
          - { destination: default, next-hop-address: 10.77.0.1, next-hop-interface: eno9 }
          - { destination: 10.1.0.0/16, next-hop-address: \"fd00::1\", next-hop-interface: eno7, table-id: 100 }
",
    )
    .unwrap_err();
    let n = "nodes[5].networkConfig";
    let expect: Vec<String> = [
        "interfaces[1].ethtool: unknown key",
        "interfaces[0].type: \"linux-bridge\" is not supported: ethernet, bond or vlan",
        "interfaces[1].state: \"absent\": only up is supported",
        "interfaces[2].link-aggregation.mode: \"lacp\": want one of balance-rr, active-backup, balance-xor, broadcast, 802.3ad",
        "interfaces[2].link-aggregation.options.speed: not a bonding option",
        "interfaces[2].link-aggregation.options.primary: \"a b\": one value",
        "interfaces[3].link-aggregation.port: \"eno4\" has addresses of its own",
        "interfaces[5].name: \"v100\" does not end in its VLAN id 100: name it eno5.100 or vlan100",
        "interfaces[6].vlan.id: 5000: 1-4094",
        "interfaces[7].name: \"this-name-is-too-long0\" is not an interface name",
        "interfaces[8].ipv4.address[0].ip: fd00::1 is not an IPv4 address",
        "interfaces[8].ipv4.address[1].prefix-length: 40: 1-32",
        "interfaces[8].ipv6: enabled with neither dhcp nor an address",
        "dns-resolver.config.server[0]: \"dnsd\" is not an IP address",
        "dns-resolver.config.search[0]: \"bad domain\" is not a domain name",
        "routes.config[0].destination: \"default\" is not a CIDR",
        "routes.config[0].next-hop-interface: \"eno9\" is not an interface of this config",
        "routes.config[1].table-id: 100: only the main table (254) is supported",
        "routes.config[1].next-hop-address: fd00::1 is not of 10.1.0.0/16's family",
    ]
    .iter()
    .map(|e| format!("{n}.{e}"))
    .collect();
    let expect: Vec<&str> = expect.iter().map(String::as_str).collect();
    assert_problems(&err, &expect);
}

#[test]
fn the_nodes_address_must_be_on_an_interface_and_one_form_only() {
    let other = bond_vlan().replace("ip: 10.77.0.21, prefix", "ip: 10.77.0.99, prefix");
    let err = with(&other).unwrap_err();
    assert_problems(
        &err,
        &["nodes[5].networkConfig: the node's ip 10.77.0.21 is on no interface (static: 10.77.0.99/24)"],
    );
    let both = format!("{}    network: {{ interface: eno1 }}\n", bond_vlan());
    let err = with(&both).unwrap_err();
    assert_problems(
        &err,
        &["nodes[5].networkConfig: give network (one interface) or networkConfig (NMState), not both"],
    );
}
