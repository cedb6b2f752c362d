//! Seeds of the DHCPv6 target: what UEFI PXE, UEFI HTTP Boot, iPXE,
//! dhclient and a relay send, built as dhcp/tests/it/v6_core.rs
//! builds them.

use dhcp::v6::wire::{self, Msg};

fn client(t: u8, mac: [u8; 6], addr: Option<&str>, server: bool) -> Msg {
    let mut m = Msg::new(t, [0x12, 0x34, 0x56]);
    let mut duid = vec![0, 1, 0, 1, 0x2a, 0x2b, 0x2c, 0x2d];
    duid.extend_from_slice(&mac);
    m.push(wire::OPT_CLIENT_ID, duid);
    if server {
        m.push(
            wire::OPT_SERVER_ID,
            vec![0, 4, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16],
        );
    }
    let mut inner = Vec::new();
    if let Some(a) = addr {
        wire::put(
            &mut inner,
            wire::OPT_IAADDR,
            &wire::ia_addr(a.parse().unwrap(), 0, 0),
        );
    }
    m.push(wire::OPT_IA_NA, wire::ia_na(7, 0, 0, &inner));
    m
}

fn firmware(mut m: Msg, arch: u16, class: &str) -> Msg {
    m.push(wire::OPT_CLIENT_ARCH, arch.to_be_bytes().to_vec());
    let mut vc = 343u32.to_be_bytes().to_vec();
    vc.extend_from_slice(&wire::class_data(&[format!(
        "{class}:Arch:{arch:05}:UNDI:003016"
    )
    .as_bytes()]));
    m.push(wire::OPT_VENDOR_CLASS, vc);
    m.push(wire::OPT_ORO, vec![0, 59, 0, 23, 0, 24]);
    m
}

pub fn dhcp6() -> Vec<(String, Vec<u8>)> {
    let node = [0x52, 0x54, 0, 0x77, 0, 0x11];
    let unknown = [0x52, 0x54, 0, 0x99, 0, 0x01];
    let mut ipxe = client(wire::SOLICIT, node, None, false);
    ipxe.push(wire::OPT_USER_CLASS, wire::class_data(&[b"iPXE"]));
    ipxe.push(wire::OPT_ORO, vec![0, 59]);
    let mut rapid = client(wire::SOLICIT, unknown, None, false);
    rapid.push(wire::OPT_RAPID_COMMIT, vec![]);
    let list = [
        (
            "uefi-pxe-solicit",
            firmware(client(wire::SOLICIT, node, None, false), 7, "PXEClient"),
        ),
        (
            "uefi-pxe-request",
            firmware(
                client(wire::REQUEST, node, Some("fd00:77::11"), true),
                7,
                "PXEClient",
            ),
        ),
        (
            "uefi-http-solicit",
            firmware(client(wire::SOLICIT, node, None, false), 16, "HTTPClient"),
        ),
        ("ipxe-solicit", ipxe),
        ("rapid-commit", rapid),
        (
            "renew",
            client(wire::RENEW, unknown, Some("fd00:77::1000"), true),
        ),
        (
            "rebind",
            client(wire::REBIND, unknown, Some("fd00:77::1000"), false),
        ),
        (
            "release",
            client(wire::RELEASE, unknown, Some("fd00:77::1000"), true),
        ),
        (
            "decline",
            client(wire::DECLINE, unknown, Some("fd00:77::1000"), true),
        ),
        (
            "confirm",
            client(wire::CONFIRM, unknown, Some("fd00:77::1000"), false),
        ),
    ];
    let mut out: Vec<(String, Vec<u8>)> = list
        .into_iter()
        .map(|(n, m)| (format!("{n}.bin"), m.encode()))
        .collect();
    // Relayed twice, the inner relay with an Interface-ID and option 79.
    let inner = firmware(
        client(wire::SOLICIT, [9, 9, 9, 9, 9, 9], None, false),
        7,
        "PXEClient",
    )
    .encode();
    let relay = |payload: &[u8], hop: u8, extra: bool| {
        let mut v = vec![wire::RELAY_FORW, hop];
        v.extend_from_slice(
            &"fd00:77::fe"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets(),
        );
        v.extend_from_slice(&"fe80::2".parse::<std::net::Ipv6Addr>().unwrap().octets());
        if extra {
            wire::put(&mut v, wire::OPT_INTERFACE_ID, b"port7");
            wire::put(
                &mut v,
                wire::OPT_CLIENT_LINKLAYER,
                &[0, 1, 0x52, 0x54, 0, 0x77, 0, 0x12],
            );
        }
        wire::put(&mut v, wire::OPT_RELAY_MSG, payload);
        v
    };
    out.push((
        "relayed-twice.bin".into(),
        relay(&relay(&inner, 0, true), 1, false),
    ));
    out
}
