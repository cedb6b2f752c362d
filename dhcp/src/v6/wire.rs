//! DHCPv6 on the wire (RFC 8415 §8-9, §21): relay envelopes, client and
//! server messages, and the options bootd reads or writes.
//!
//! Its own codec rather than dhcproto's v6 module, which encodes the User
//! and Vendor Class options with wrong lengths, decodes a Relay-message
//! option always as another relay message (never the client's message
//! inside), stops silently at a truncated option, and underflows on a
//! Status Code or Vendor Class shorter than its fixed part. Here every
//! length is checked before it is used: a message either parses whole or
//! is refused with the reason.

use site::Mac;
use std::net::Ipv6Addr;

pub const SOLICIT: u8 = 1;
pub const ADVERTISE: u8 = 2;
pub const REQUEST: u8 = 3;
pub const CONFIRM: u8 = 4;
pub const RENEW: u8 = 5;
pub const REBIND: u8 = 6;
pub const REPLY: u8 = 7;
pub const RELEASE: u8 = 8;
pub const DECLINE: u8 = 9;
pub const INFORMATION_REQUEST: u8 = 11;
pub const RELAY_FORW: u8 = 12;
pub const RELAY_REPL: u8 = 13;
pub const OPT_CLIENT_ID: u16 = 1;
pub const OPT_SERVER_ID: u16 = 2;
pub const OPT_IA_NA: u16 = 3;
pub const OPT_IA_TA: u16 = 4;
pub const OPT_IAADDR: u16 = 5;
pub const OPT_ORO: u16 = 6;
pub const OPT_RELAY_MSG: u16 = 9;
pub const OPT_STATUS_CODE: u16 = 13;
pub const OPT_RAPID_COMMIT: u16 = 14;
pub const OPT_USER_CLASS: u16 = 15;
pub const OPT_VENDOR_CLASS: u16 = 16;
pub const OPT_DNS_SERVERS: u16 = 23;
pub const OPT_DOMAIN_LIST: u16 = 24;
pub const OPT_INTERFACE_ID: u16 = 18;
pub const OPT_BOOTFILE_URL: u16 = 59;
pub const OPT_BOOTFILE_PARAM: u16 = 60;
pub const OPT_CLIENT_ARCH: u16 = 61;
pub const OPT_CLIENT_LINKLAYER: u16 = 79;
pub const OPT_IA_PD: u16 = 25;

pub const STATUS_SUCCESS: u16 = 0;
pub const STATUS_NO_ADDRS_AVAIL: u16 = 2;
pub const STATUS_NO_BINDING: u16 = 3;
pub const STATUS_NOT_ON_LINK: u16 = 4;
/// Relays nested deeper than this are dropped (RFC 3315's HOP_COUNT_LIMIT
/// was 32; RFC 8415's default is 8, and a relay drops beyond its limit).
pub const MAX_HOPS: u8 = 32;
/// Fixed part of a relay message: type, hop count, link and peer address.
const RELAY_HEADER: usize = 34;

/// One relay the request passed through, outermost first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hop {
    pub hop_count: u8,
    /// An address on the client's link (the relay's), or :: .
    pub link: Ipv6Addr,
    /// Where the relay got the message from (the client, or the next
    /// relay in).
    pub peer: Ipv6Addr,
    /// Echoed in the Relay-reply so the relay knows the port to send on.
    pub interface_id: Option<Vec<u8>>,
    /// RFC 6939: the client's link-layer address as the relay saw it.
    pub client_linklayer: Option<Mac>,
}

/// Why a datagram is not a DHCPv6 message we answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Malformed {
    Truncated(&'static str),
    /// Relays nested past [`MAX_HOPS`], or a hop count past it.
    TooManyHops,
    /// A Relay-forward without a Relay-message option.
    NoRelayMessage,
    /// An option shorter than its fixed part (code, what it needs).
    Short(u16, &'static str),
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Malformed::Truncated(what) => write!(f, "truncated {what}"),
            Malformed::TooManyHops => write!(f, "relayed through more than {MAX_HOPS} relays"),
            Malformed::NoRelayMessage => {
                f.write_str("Relay-forward without a Relay-message option")
            }
            Malformed::Short(code, what) => write!(f, "option {code} shorter than {what}"),
        }
    }
}

/// The options of `buf` as (code, value), in order; an error when an
/// option runs past the end.
pub fn options(mut buf: &[u8]) -> Result<Vec<(u16, &[u8])>, Malformed> {
    let mut v = Vec::new();
    while !buf.is_empty() {
        if buf.len() < 4 {
            return Err(Malformed::Truncated("option header"));
        }
        let code = u16::from_be_bytes([buf[0], buf[1]]);
        let len = usize::from(u16::from_be_bytes([buf[2], buf[3]]));
        let Some(value) = buf.get(4..4 + len) else {
            return Err(Malformed::Truncated("option"));
        };
        v.push((code, value));
        buf = &buf[4 + len..];
    }
    Ok(v)
}

/// Takes the relay envelopes off `buf`: the hops (outermost first) and the
/// client's message.
pub fn unwrap(buf: &[u8]) -> Result<(Vec<Hop>, &[u8]), Malformed> {
    let mut hops = Vec::new();
    let mut inner = buf;
    while inner.first() == Some(&RELAY_FORW) {
        if hops.len() >= usize::from(MAX_HOPS) {
            return Err(Malformed::TooManyHops);
        }
        if inner.len() < RELAY_HEADER {
            return Err(Malformed::Truncated("relay header"));
        }
        let hop_count = inner[1];
        if hop_count > MAX_HOPS {
            return Err(Malformed::TooManyHops);
        }
        let addr = |at: usize| {
            let mut o = [0u8; 16];
            o.copy_from_slice(&inner[at..at + 16]);
            Ipv6Addr::from(o)
        };
        let (link, peer) = (addr(2), addr(18));
        let mut hop = Hop {
            hop_count,
            link,
            peer,
            interface_id: None,
            client_linklayer: None,
        };
        let mut msg = None;
        for (code, value) in options(&inner[RELAY_HEADER..])? {
            match code {
                OPT_RELAY_MSG => msg = Some(value),
                OPT_INTERFACE_ID => hop.interface_id = Some(value.to_vec()),
                OPT_CLIENT_LINKLAYER => hop.client_linklayer = linklayer(value),
                _ => {}
            }
        }
        hops.push(hop);
        inner = msg.ok_or(Malformed::NoRelayMessage)?;
    }
    if inner.len() < 4 {
        return Err(Malformed::Truncated("message header"));
    }
    Ok((hops, inner))
}

/// A client or server message: type, transaction id, options (raw,
/// in order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg {
    pub ty: u8,
    pub xid: [u8; 3],
    pub opts: Vec<(u16, Vec<u8>)>,
}

/// An IA_NA as a client sends it: its IAID and the addresses it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IaNa {
    pub id: u32,
    pub addrs: Vec<Ipv6Addr>,
}

impl Msg {
    pub fn new(ty: u8, xid: [u8; 3]) -> Msg {
        Msg {
            ty,
            xid,
            opts: Vec::new(),
        }
    }

    /// Parses a client message; every option's length is checked, and
    /// those bootd reads are checked against their fixed parts.
    pub fn parse(buf: &[u8]) -> Result<Msg, Malformed> {
        if buf.len() < 4 {
            return Err(Malformed::Truncated("message header"));
        }
        let mut opts = Vec::new();
        for (code, v) in options(&buf[4..])? {
            match code {
                OPT_IA_NA => {
                    if v.len() < 12 {
                        return Err(Malformed::Short(code, "12 bytes (IAID, T1, T2)"));
                    }
                    for (c, a) in options(&v[12..])? {
                        if c == OPT_IAADDR && a.len() < 24 {
                            return Err(Malformed::Short(c, "24 bytes (address, lifetimes)"));
                        }
                    }
                }
                OPT_ORO if v.len() % 2 != 0 => {
                    return Err(Malformed::Short(code, "a whole number of codes"))
                }
                OPT_VENDOR_CLASS if v.len() < 4 => {
                    return Err(Malformed::Short(code, "4 bytes (enterprise number)"))
                }
                OPT_CLIENT_ARCH if v.len() < 2 => return Err(Malformed::Short(code, "2 bytes")),
                _ => {}
            }
            opts.push((code, v.to_vec()));
        }
        Ok(Msg {
            ty: buf[0],
            xid: [buf[1], buf[2], buf[3]],
            opts,
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![self.ty, self.xid[0], self.xid[1], self.xid[2]];
        for (c, v) in &self.opts {
            put(&mut out, *c, v);
        }
        out
    }

    pub fn get(&self, code: u16) -> Option<&[u8]> {
        self.opts
            .iter()
            .find(|(c, _)| *c == code)
            .map(|(_, v)| v.as_slice())
    }

    pub fn push(&mut self, code: u16, value: Vec<u8>) -> &mut Msg {
        self.opts.push((code, value));
        self
    }

    /// The IA_NAs, each with the addresses it names.
    pub fn ia_nas(&self) -> Vec<IaNa> {
        self.opts
            .iter()
            .filter(|(c, v)| *c == OPT_IA_NA && v.len() >= 12)
            .map(|(_, v)| IaNa {
                id: u32::from_be_bytes([v[0], v[1], v[2], v[3]]),
                addrs: options(&v[12..])
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|(c, a)| *c == OPT_IAADDR && a.len() >= 24)
                    .map(|(_, a)| addr16(&a[..16]))
                    .collect(),
            })
            .collect()
    }

    /// The option codes the client asks for (Option Request, 6).
    pub fn requested(&self) -> Vec<u16> {
        self.get(OPT_ORO)
            .map(|v| {
                v.chunks_exact(2)
                    .map(|c| u16::from_be_bytes([c[0], c[1]]))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The data items of a User Class (15), or of a Vendor Class (16)
    /// after its enterprise number.
    pub fn class_items(&self, code: u16) -> Vec<Vec<u8>> {
        let Some(mut v) = self.get(code) else {
            return Vec::new();
        };
        if code == OPT_VENDOR_CLASS {
            v = v.get(4..).unwrap_or_default();
        }
        let mut items = Vec::new();
        while v.len() >= 2 {
            let n = usize::from(u16::from_be_bytes([v[0], v[1]]));
            let Some(item) = v.get(2..2 + n) else { break };
            items.push(item.to_vec());
            v = &v[2 + n..];
        }
        items
    }
}

fn addr16(b: &[u8]) -> Ipv6Addr {
    let mut o = [0u8; 16];
    o.copy_from_slice(&b[..16]);
    Ipv6Addr::from(o)
}

/// An IA Address option's value (5) with its lifetimes.
pub fn ia_addr(a: Ipv6Addr, preferred: u32, valid: u32) -> Vec<u8> {
    let mut v = a.octets().to_vec();
    v.extend_from_slice(&preferred.to_be_bytes());
    v.extend_from_slice(&valid.to_be_bytes());
    v
}

/// An IA_NA option's value (3) around its options (already encoded).
pub fn ia_na(id: u32, t1: u32, t2: u32, inner: &[u8]) -> Vec<u8> {
    let mut v = id.to_be_bytes().to_vec();
    v.extend_from_slice(&t1.to_be_bytes());
    v.extend_from_slice(&t2.to_be_bytes());
    v.extend_from_slice(inner);
    v
}

/// A Status Code option's value (13).
pub fn status(code: u16, msg: &str) -> Vec<u8> {
    let mut v = code.to_be_bytes().to_vec();
    v.extend_from_slice(msg.as_bytes());
    v
}

/// Class data items (each with its 2-byte length), as User Class (15)
/// and Vendor Class (16, after the enterprise number) carry them.
pub fn class_data(items: &[&[u8]]) -> Vec<u8> {
    let mut v = Vec::new();
    for i in items {
        v.extend_from_slice(&(i.len().min(usize::from(u16::MAX)) as u16).to_be_bytes());
        v.extend_from_slice(&i[..i.len().min(usize::from(u16::MAX))]);
    }
    v
}

/// A domain name in DNS wire form (labels), as option 24 carries it.
pub fn dns_name(name: &str) -> Vec<u8> {
    let mut v = Vec::new();
    for label in name.split('.').filter(|l| !l.is_empty()) {
        let l = &label.as_bytes()[..label.len().min(63)];
        v.push(l.len() as u8);
        v.extend_from_slice(l);
    }
    v.push(0);
    v
}

/// Puts `reply` into Relay-reply envelopes for `hops` (outermost first),
/// each echoing its Interface-ID.
pub fn wrap(hops: &[Hop], reply: Vec<u8>) -> Vec<u8> {
    hops.iter().rev().fold(reply, |inner, h| {
        let mut out = Vec::with_capacity(RELAY_HEADER + inner.len() + 32);
        out.push(RELAY_REPL);
        out.push(h.hop_count);
        out.extend_from_slice(&h.link.octets());
        out.extend_from_slice(&h.peer.octets());
        if let Some(id) = &h.interface_id {
            put(&mut out, OPT_INTERFACE_ID, id);
        }
        put(&mut out, OPT_RELAY_MSG, &inner);
        out
    })
}

/// Appends option `code` with `value` (cut at 65 535 bytes).
pub fn put(out: &mut Vec<u8>, code: u16, value: &[u8]) {
    let value = &value[..value.len().min(usize::from(u16::MAX))];
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(&(value.len() as u16).to_be_bytes());
    out.extend_from_slice(value);
}

/// An Ethernet address from a link-layer type and address (option 79's
/// value, and the tail of a DUID-LL/LLT).
fn ethernet(htype: &[u8], addr: &[u8]) -> Option<Mac> {
    (htype == [0, 1] && addr.len() == 6).then(|| {
        let mut m = [0u8; 6];
        m.copy_from_slice(addr);
        Mac(m)
    })
}

/// Option 79: link-layer type (2 bytes), then the address.
pub fn linklayer(v: &[u8]) -> Option<Mac> {
    ethernet(v.get(..2)?, v.get(2..)?)
}

/// The Ethernet address inside a DUID-LLT (type 1) or DUID-LL (type 3).
pub fn duid_mac(duid: &[u8]) -> Option<Mac> {
    match duid.get(..2)? {
        [0, 1] => ethernet(duid.get(2..4)?, duid.get(8..)?),
        [0, 3] => ethernet(duid.get(2..4)?, duid.get(4..)?),
        _ => None,
    }
}

/// The Ethernet address an EUI-64 interface identifier was made from
/// (`fe80::5054:ff:fe12:3456` → 52:54:00:12:34:56), if it is one.
pub fn eui64_mac(a: Ipv6Addr) -> Option<Mac> {
    let o = a.octets();
    (o[11] == 0xff && o[12] == 0xfe).then(|| Mac([o[8] ^ 0x02, o[9], o[10], o[13], o[14], o[15]]))
}

/// Option 61's first architecture type.
pub fn client_arch(v: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes([*v.first()?, *v.get(1)?]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relay(inner: &[u8], hop: u8, iface: Option<&[u8]>, ll: Option<&[u8]>) -> Vec<u8> {
        let mut v = vec![RELAY_FORW, hop];
        v.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        v.extend_from_slice(&"fe80::1".parse::<Ipv6Addr>().unwrap().octets());
        if let Some(i) = iface {
            put(&mut v, OPT_INTERFACE_ID, i);
        }
        if let Some(l) = ll {
            put(&mut v, OPT_CLIENT_LINKLAYER, l);
        }
        put(&mut v, OPT_RELAY_MSG, inner);
        v
    }

    #[test]
    fn relays_unwrap_and_wrap_back_with_their_interface_ids() {
        let client = [1u8, 0xaa, 0xbb, 0xcc, 0, 8, 0, 2, 0, 0];
        let once = relay(
            &client,
            0,
            Some(b"eth3"),
            Some(&[0, 1, 0x52, 0x54, 0, 1, 2, 3]),
        );
        let twice = relay(&once, 1, None, None);
        let (hops, inner) = unwrap(&twice).unwrap();
        assert_eq!(inner, client);
        assert_eq!(hops.len(), 2);
        assert_eq!(hops[0].hop_count, 1);
        assert_eq!(hops[1].interface_id.as_deref(), Some(&b"eth3"[..]));
        assert_eq!(
            hops[1].client_linklayer,
            Some(Mac([0x52, 0x54, 0, 1, 2, 3]))
        );
        let back = wrap(&hops, vec![7, 0xaa, 0xbb, 0xcc]);
        assert_eq!(back[0], RELAY_REPL);
        let opts = options(&back[RELAY_HEADER..]).unwrap();
        assert_eq!(opts[0].0, OPT_RELAY_MSG);
        let inner = opts[0].1;
        assert_eq!(inner[0], RELAY_REPL);
        let opts = options(&inner[RELAY_HEADER..]).unwrap();
        assert_eq!(opts[0], (OPT_INTERFACE_ID, &b"eth3"[..]));
        assert_eq!(opts[1], (OPT_RELAY_MSG, &[7u8, 0xaa, 0xbb, 0xcc][..]));
    }

    #[test]
    fn malformed_envelopes_are_refused() {
        let client = [1u8, 0, 0, 1];
        assert_eq!(
            unwrap(&relay(&client, 33, None, None)),
            Err(Malformed::TooManyHops)
        );
        let mut deep = client.to_vec();
        for _ in 0..33 {
            deep = relay(&deep, 0, None, None);
        }
        assert_eq!(unwrap(&deep), Err(Malformed::TooManyHops));
        let mut cut = relay(&client, 0, None, None);
        cut.truncate(cut.len() - 1);
        assert_eq!(unwrap(&cut), Err(Malformed::Truncated("option")));
        assert_eq!(
            unwrap(&cut[..20]),
            Err(Malformed::Truncated("relay header"))
        );
        let mut empty = relay(&client, 0, None, None);
        empty.truncate(RELAY_HEADER);
        assert_eq!(unwrap(&empty), Err(Malformed::NoRelayMessage));
        assert_eq!(unwrap(&[1, 2]), Err(Malformed::Truncated("message header")));
    }

    #[test]
    fn a_message_parses_whole_or_not_at_all() {
        let mut m = Msg::new(SOLICIT, [1, 2, 3]);
        let mut inner = Vec::new();
        put(
            &mut inner,
            OPT_IAADDR,
            &ia_addr("fd00::5".parse().unwrap(), 1, 2),
        );
        m.push(OPT_CLIENT_ID, vec![0, 3, 0, 1, 1, 2, 3, 4, 5, 6])
            .push(OPT_IA_NA, ia_na(9, 0, 0, &inner))
            .push(OPT_ORO, vec![0, 59, 0, 23])
            .push(OPT_USER_CLASS, class_data(&[b"iPXE"]))
            .push(
                OPT_VENDOR_CLASS,
                [
                    &343u32.to_be_bytes()[..],
                    &class_data(&[b"PXEClient:Arch:00007"]),
                ]
                .concat(),
            );
        let b = m.encode();
        let back = Msg::parse(&b).unwrap();
        assert_eq!(back, m);
        assert_eq!(
            back.ia_nas(),
            [IaNa {
                id: 9,
                addrs: vec!["fd00::5".parse().unwrap()]
            }]
        );
        assert_eq!(back.requested(), [59, 23]);
        assert_eq!(back.class_items(OPT_USER_CLASS), [b"iPXE".to_vec()]);
        assert_eq!(
            back.class_items(OPT_VENDOR_CLASS),
            [b"PXEClient:Arch:00007".to_vec()]
        );
        // Cut inside an option: refused, not parsed up to the cut.
        assert_eq!(
            Msg::parse(&b[..b.len() - 1]),
            Err(Malformed::Truncated("option"))
        );
        assert_eq!(
            Msg::parse(&b[..6]),
            Err(Malformed::Truncated("option header"))
        );
        let mut short = Msg::new(SOLICIT, [0; 3]);
        short.push(OPT_VENDOR_CLASS, vec![0, 0]);
        assert_eq!(
            Msg::parse(&short.encode()),
            Err(Malformed::Short(16, "4 bytes (enterprise number)"))
        );
        let mut short = Msg::new(SOLICIT, [0; 3]);
        short.push(OPT_IA_NA, ia_na(1, 0, 0, &[0, 5, 0, 4, 1, 2, 3, 4]));
        assert!(matches!(
            Msg::parse(&short.encode()),
            Err(Malformed::Short(5, _))
        ));
        assert_eq!(
            dns_name("lab.example.test"),
            b"\x03lab\x07example\x04test\x00"
        );
    }

    #[test]
    fn macs_from_duids_option_79_and_eui64() {
        let mac = Mac([0x52, 0x54, 0, 0x77, 0, 0x11]);
        let llt = [0, 1, 0, 1, 0x2a, 0, 0, 1, 0x52, 0x54, 0, 0x77, 0, 0x11];
        let ll = [0, 3, 0, 1, 0x52, 0x54, 0, 0x77, 0, 0x11];
        assert_eq!(duid_mac(&llt), Some(mac));
        assert_eq!(duid_mac(&ll), Some(mac));
        // DUID-UUID (type 4) and DUID-EN (2) carry no MAC.
        assert_eq!(duid_mac(&[0, 4, 1, 2, 3, 4, 5, 6, 7, 8]), None);
        assert_eq!(
            duid_mac(&[0, 3, 0, 6, 1, 2, 3, 4, 5, 6]),
            None,
            "not Ethernet"
        );
        assert_eq!(linklayer(&[0, 1, 0x52, 0x54, 0, 0x77, 0, 0x11]), Some(mac));
        assert_eq!(
            eui64_mac("fe80::5054:ff:fe77:11".parse().unwrap()),
            Some(mac)
        );
        assert_eq!(eui64_mac("fe80::1".parse().unwrap()), None);
        assert_eq!(client_arch(&[0, 7, 0, 16]), Some(7));
        assert_eq!(client_arch(&[0]), None);
        assert_eq!(class_data(&[b"a", b"bc"]), [0, 1, b'a', 0, 2, b'b', b'c']);
    }
}
