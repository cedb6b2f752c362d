//! LLDP (IEEE 802.1AB) frames: which switch and port a NIC is cabled to.
//! Pure; [`parse_lldp`] never panics, whatever the bytes (the tests feed
//! it every truncation of a valid frame and many mutated ones).
//!
//! A frame is an Ethernet header (an 802.1Q tag allowed), ethertype
//! 0x88cc, then TLVs: 7 bits of type, 9 bits of length, the value. The
//! agent reads four: chassis ID (1) and port ID (2), which every LLDPDU
//! must carry, port description (4) and system name (5).

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::inventory::Lldp;

pub const ETHERTYPE: u16 = 0x88cc;
const VLAN: u16 = 0x8100;
/// The nearest-bridge group address LLDP is sent to; switches do not
/// forward it, so a frame to it comes from the port the NIC is cabled to.
pub const MULTICAST: [u8; 6] = [0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e];

const END: u16 = 0;
const CHASSIS_ID: u16 = 1;
const PORT_ID: u16 = 2;
const PORT_DESCRIPTION: u16 = 4;
const SYSTEM_NAME: u16 = 5;

/// The chassis ID, port ID, system name and port description of an
/// Ethernet frame carrying an LLDPDU; None when it is not one, a TLV
/// runs past the end, or the chassis or port ID is missing or empty. An
/// LLDPDU may end at the End TLV or with the frame.
pub fn parse_lldp(frame: &[u8]) -> Option<Lldp> {
    let mut rest = lldpdu(frame)?;
    let mut out = Lldp::default();
    let (mut chassis, mut port) = (false, false);
    // Each turn consumes at least the 2 header bytes: bounded by the length.
    while !rest.is_empty() {
        let h = rest.get(..2)?;
        let header = u16::from_be_bytes([h[0], h[1]]);
        let (kind, len) = (header >> 9, usize::from(header & 0x01ff));
        let value = rest.get(2..2 + len)?;
        rest = &rest[2 + len..];
        match kind {
            END => break,
            CHASSIS_ID if !chassis => {
                out.chassis_id = chassis_id(value)?;
                chassis = true;
            }
            PORT_ID if !port => {
                out.port_id = port_id(value)?;
                port = true;
            }
            PORT_DESCRIPTION => out.port_description = text(value),
            SYSTEM_NAME => out.system_name = text(value),
            _ => {}
        }
    }
    (chassis && port).then_some(out)
}

/// The source MAC of an Ethernet frame.
pub fn source_mac(frame: &[u8]) -> Option<[u8; 6]> {
    frame.get(6..12)?.try_into().ok()
}

/// The LLDPDU of an Ethernet frame whose ethertype (after at most one
/// 802.1Q tag) is LLDP's.
fn lldpdu(frame: &[u8]) -> Option<&[u8]> {
    let ethertype = |at: usize| -> Option<u16> {
        let b = frame.get(at..at + 2)?;
        Some(u16::from_be_bytes([b[0], b[1]]))
    };
    let mut at = 12;
    if ethertype(at)? == VLAN {
        at += 4;
    }
    (ethertype(at)? == ETHERTYPE).then(|| &frame[at + 2..])
}

/// Chassis ID subtypes (802.1AB 8.5.2.2): 4 MAC address, 5 network
/// address; 1 chassis component, 2 interface alias, 3 port component,
/// 6 interface name, 7 locally assigned are text.
fn chassis_id(value: &[u8]) -> Option<String> {
    let (&subtype, id) = value.split_first()?;
    if id.is_empty() {
        return None;
    }
    Some(match subtype {
        4 => mac(id),
        5 => network_address(id),
        _ => text(id),
    })
}

/// Port ID subtypes (8.5.3.2): 3 MAC address, 4 network address; 1
/// interface alias, 2 port component, 5 interface name, 6 agent circuit
/// ID, 7 locally assigned are text.
fn port_id(value: &[u8]) -> Option<String> {
    let (&subtype, id) = value.split_first()?;
    if id.is_empty() {
        return None;
    }
    Some(match subtype {
        3 => mac(id),
        4 => network_address(id),
        _ => text(id),
    })
}

/// `aa:bb:cc:dd:ee:ff` (any length).
pub fn mac(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// An IANA address family number (1 IPv4, 2 IPv6) and the address;
/// another family or a wrong length as hex.
fn network_address(b: &[u8]) -> String {
    match b {
        [1, a, b, c, d] => Ipv4Addr::new(*a, *b, *c, *d).to_string(),
        [2, rest @ ..] if rest.len() == 16 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(rest);
            Ipv6Addr::from(o).to_string()
        }
        _ => mac(b),
    }
}

/// Text as the switch sent it, without control characters and trimmed.
fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b)
        .chars()
        .filter(|c| !c.is_control())
        .collect::<String>()
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tlv(kind: u16, value: &[u8]) -> Vec<u8> {
        let h = (kind << 9) | value.len() as u16;
        let mut v = h.to_be_bytes().to_vec();
        v.extend_from_slice(value);
        v
    }

    fn frame(tlvs: &[Vec<u8>]) -> Vec<u8> {
        let mut f = MULTICAST.to_vec();
        f.extend_from_slice(&[0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
        f.extend_from_slice(&ETHERTYPE.to_be_bytes());
        for t in tlvs {
            f.extend_from_slice(t);
        }
        f
    }

    /// What a Juniper-like switch sends: MAC chassis, ifName port, TTL,
    /// port description, system name, an org-specific TLV, End.
    fn switch_frame() -> Vec<u8> {
        frame(&[
            tlv(1, &[4, 0x00, 0x1c, 0x73, 0xaa, 0xbb, 0xcc]),
            tlv(2, b"\x05xe-0/0/12"),
            tlv(3, &[0x00, 0x78]),
            tlv(4, b"rack12 node3 eno1\0"),
            tlv(5, b"tor-12a.example.net"),
            tlv(127, &[0x00, 0x12, 0x0f, 0x01, 0x03, 0x6c, 0x00, 0x00, 0x10]),
            tlv(0, &[]),
        ])
    }

    #[test]
    fn a_switch_frame() {
        assert_eq!(
            parse_lldp(&switch_frame()),
            Some(Lldp {
                chassis_id: "00:1c:73:aa:bb:cc".into(),
                port_id: "xe-0/0/12".into(),
                system_name: "tor-12a.example.net".into(),
                port_description: "rack12 node3 eno1".into(),
            })
        );
        assert_eq!(
            source_mac(&switch_frame()),
            Some([0x52, 0x54, 0x00, 0x12, 0x34, 0x56])
        );
    }

    #[test]
    fn id_subtypes() {
        let ids = |c: Vec<u8>, p: Vec<u8>| {
            let l = parse_lldp(&frame(&[tlv(1, &c), tlv(2, &p), tlv(0, &[])])).unwrap();
            (l.chassis_id, l.port_id)
        };
        assert_eq!(
            ids(
                vec![5, 1, 192, 0, 2, 7],
                vec![3, 0xde, 0xad, 0xbe, 0xef, 0, 1]
            ),
            ("192.0.2.7".to_string(), "de:ad:be:ef:00:01".to_string())
        );
        let mut v6 = vec![5, 2];
        v6.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(
            ids(v6, b"\x07port 7".to_vec()),
            ("2001:db8::1".to_string(), "port 7".to_string())
        );
        assert_eq!(
            ids(b"\x07  SN1234 ".to_vec(), b"\x01uplink-a".to_vec()),
            ("SN1234".to_string(), "uplink-a".to_string())
        );
        assert_eq!(
            ids(vec![5, 9, 1, 2], vec![4, 1, 10, 0, 0, 1]),
            ("09:01:02".to_string(), "10.0.0.1".to_string())
        );
        assert_eq!(
            ids(b"\x06sw0".to_vec(), b"\x02Gi1/0/3".to_vec()),
            ("sw0".to_string(), "Gi1/0/3".to_string())
        );
    }

    #[test]
    fn a_vlan_tagged_frame_and_no_end_tlv() {
        let mut f = MULTICAST.to_vec();
        f.extend_from_slice(&[2, 0, 0, 0, 0, 1]);
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x64]);
        f.extend_from_slice(&ETHERTYPE.to_be_bytes());
        f.extend(tlv(1, b"\x07c"));
        f.extend(tlv(2, b"\x05p"));
        let l = parse_lldp(&f).unwrap();
        assert_eq!((l.chassis_id.as_str(), l.port_id.as_str()), ("c", "p"));
    }

    #[test]
    fn refused() {
        // Not LLDP.
        let mut ip = switch_frame();
        ip[12..14].copy_from_slice(&[0x08, 0x00]);
        assert_eq!(parse_lldp(&ip), None);
        // No port ID; an empty chassis ID; a TLV longer than the frame.
        assert_eq!(parse_lldp(&frame(&[tlv(1, b"\x07c"), tlv(0, &[])])), None);
        assert_eq!(
            parse_lldp(&frame(&[tlv(1, b"\x07"), tlv(2, b"\x05p")])),
            None
        );
        let mut long = frame(&[tlv(1, b"\x07c"), tlv(2, b"\x05p")]);
        long.extend_from_slice(&[(5 << 1) | 1, 0xff, b'x']);
        assert_eq!(parse_lldp(&long), None);
        // IDs after End do not count.
        assert_eq!(
            parse_lldp(&frame(&[tlv(1, b"\x07c"), tlv(0, &[]), tlv(2, b"\x05p")])),
            None
        );
        assert_eq!(parse_lldp(&[]), None);
        assert_eq!(parse_lldp(&[0xff; 13]), None);
    }

    #[test]
    fn every_truncation_parses_or_is_refused_without_panic() {
        let f = switch_frame();
        let full = parse_lldp(&f).unwrap();
        let mut some = 0;
        for n in 0..=f.len() {
            if let Some(l) = parse_lldp(&f[..n]) {
                // A cut between TLVs, after both IDs: a subset of the whole.
                assert_eq!(l.chassis_id, full.chassis_id);
                assert_eq!(l.port_id, full.port_id);
                some += 1;
            }
        }
        // After port ID, TTL, description, name, org TLV, End (and the
        // whole frame, also at End): six TLV boundaries.
        assert_eq!(some, 6);
    }

    #[test]
    fn mutated_frames_never_panic() {
        // xorshift: deterministic, no dependency; 20 000 frames of the
        // valid one with 1..4 bytes replaced, and random lengths.
        let base = switch_frame();
        let mut s: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for _ in 0..20_000 {
            let mut f = base.clone();
            for _ in 0..1 + next() % 4 {
                let i = (next() % f.len() as u64) as usize;
                f[i] = next() as u8;
            }
            let n = (next() % (f.len() as u64 + 1)) as usize;
            let _ = parse_lldp(&f[..n]);
            let _ = parse_lldp(&f);
        }
        for len in 0..64 {
            let junk: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let _ = parse_lldp(&junk);
        }
    }
}
