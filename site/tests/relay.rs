//! `nodes[].relay` and `host.dhcp.trustedRelays`: a switch port (option 82)
//! names a node; only a trusted relay's option 82 is believed.

mod common;

use common::assert_problems;

/// The lab site with `trusted` relays and `nodes` first among its nodes.
fn with(trusted: &str, nodes: &str) -> Result<site::Site, site::SiteError> {
    let (_dir, path) = common::lab(|t| {
        let t = t.replace(
            "    leaseTime: 1h\n",
            &format!("    leaseTime: 1h\n{trusted}"),
        );
        t.replacen("\nnodes:\n", &format!("\nnodes:\n{nodes}"), 1)
    });
    site::load(&path)
}

const TRUSTED: &str = "    trustedRelays: [10.77.0.254]\n";

#[test]
fn a_port_names_a_node_without_a_mac() {
    let s = with(
        TRUSTED,
        "  - { name: r-0, role: worker, live: true, ip: 10.77.0.40, relay: { circuitId: eth1/7 } }\n  \
         - { name: r-1, role: worker, live: true, ip: 10.77.0.41, relay: { circuitId: eth1/7, remoteId: \"0x0a0b\" } }\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let dhcp = s.host.dhcp.as_ref().unwrap();
    assert_eq!(
        dhcp.trusted_relays,
        ["10.77.0.254".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    let r0 = s.node("r-0").unwrap();
    assert!(r0.macs.is_empty());
    assert_eq!(
        r0.relay.as_ref().unwrap().circuit_id.as_deref(),
        Some(&b"eth1/7"[..])
    );
    // The port on the named switch wins over the port name alone; another
    // switch's eth1/7 is r-0's (its relay names no switch).
    let by = |c: &[u8], r: Option<&[u8]>| s.node_by_relay(Some(c), r).map(|n| n.name.as_str());
    assert_eq!(by(b"eth1/7", Some(&[0x0a, 0x0b])), Some("r-1"));
    assert_eq!(by(b"eth1/7", Some(b"other")), Some("r-0"));
    assert_eq!(by(b"eth1/7", None), Some("r-0"));
    assert_eq!(by(b"eth1/8", None), None);
    assert!(s.node_by_relay(None, Some(&[0x0a, 0x0b])).is_none());
}

#[test]
fn untrusted_duplicate_and_malformed_ports_are_refused_at_once() {
    let err = with(
        "",
        "  - { name: r-0, role: worker, ip: 10.77.0.40, relay: { circuitId: eth1/7 } }\n  \
         - { name: r-1, role: worker, ip: 10.77.0.41, relay: { circuitId: eth1/7 } }\n  \
         - { name: r-2, role: worker, ip: 10.77.0.42, relay: { remoteId: \"0xabc\", circuitId: \"0x07\u{fffd}a0b\" } }\n  \
         - { name: r-3, role: worker, ip: 10.77.0.43, relay: {} }\n  \
         - { name: r-4, role: worker, ip: 10.77.0.44 }\n",
    )
    .unwrap_err();
    assert_problems(
        &err,
        &[
            "nodes[0].relay: needs host.dhcp.trustedRelays",
            "nodes[1].relay: the same relay port as nodes[0]",
            "nodes[2].relay.remoteId: \"0xabc\": 0x and an even number of hex digits",
            "nodes[2].relay.circuitId: \"0x07\u{fffd}a0b\": 0x and an even number of hex digits",
            "nodes[3].relay: give circuitId, remoteId or both",
            "nodes[4].macs: at least one MAC is required (or a relay port",
        ],
    );
    let err = with("    trustedRelays: [0.0.0.0, relay-1]\n", "").unwrap_err();
    assert_problems(
        &err,
        &[
            "host.dhcp.trustedRelays[0]: \"0.0.0.0\" is not a relay agent's IPv4 address",
            "host.dhcp.trustedRelays[1]: \"relay-1\" is not a relay agent's IPv4 address",
        ],
    );
}
