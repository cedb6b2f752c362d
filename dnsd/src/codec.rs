//! The DNS packet codec: the wire format's constants, the few replies
//! made by editing a request (SERVFAIL, a slip's truncation), and strict
//! parsing of one incoming DNS message (a query, NOTIFY or transfer
//! request) without allocating: the header, the one question (its name
//! lower-cased into a caller buffer), the authority section (the SOA of an
//! IXFR request) and the OPT record.
//!
//! Everything RFC 9267 warns about is refused here: compression pointers
//! in the question (there is no earlier name to point to), pointers that do
//! not point strictly backwards, labels over 63 bytes or of the reserved
//! 0x40/0x80 types, names over 255 bytes, lengths and counts that run past
//! the end, bytes after the last record. A message whose header cannot be
//! read, or that is itself a response, is dropped (never answered);
//! anything else malformed gets FORMERR.

pub const HEADER: usize = 12;
pub const MAX_NAME: usize = 255;

pub const FLAG_QR: u16 = 0x8000;
pub const FLAG_AA: u16 = 0x0400;
pub const FLAG_TC: u16 = 0x0200;
pub const FLAG_RD: u16 = 0x0100;
pub const FLAG_RA: u16 = 0x0080;
pub const FLAG_CD: u16 = 0x0010;

pub const TYPE_A: u16 = 1;
pub const TYPE_NS: u16 = 2;
pub const TYPE_CNAME: u16 = 5;
pub const TYPE_SOA: u16 = 6;
pub const TYPE_PTR: u16 = 12;
pub const TYPE_MX: u16 = 15;
pub const TYPE_TXT: u16 = 16;
pub const TYPE_AAAA: u16 = 28;
pub const TYPE_SRV: u16 = 33;
pub const TYPE_OPT: u16 = 41;
pub const TYPE_DS: u16 = 43;
pub const TYPE_IXFR: u16 = 251;
pub const TYPE_AXFR: u16 = 252;
pub const TYPE_ANY: u16 = 255;
pub const CLASS_IN: u16 = 1;
pub const CLASS_ANY: u16 = 255;

pub const OPCODE_QUERY: u8 = 0;
pub const OPCODE_NOTIFY: u8 = 4;

pub const RCODE_NOERROR: u8 = 0;
pub const RCODE_FORMERR: u8 = 1;
pub const RCODE_SERVFAIL: u8 = 2;
pub const RCODE_NXDOMAIN: u8 = 3;
pub const RCODE_NOTIMP: u8 = 4;
pub const RCODE_REFUSED: u8 = 5;
pub const RCODE_NOTAUTH: u8 = 9;
/// Extended RCODE 16 (RFC 6891): upper 8 bits 1 in the OPT TTL, lower 4 bits 0.
pub const EXT_RCODE_BADVERS: u8 = 1;

/// The OPT record of a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edns {
    pub udp_size: u16,
    pub version: u8,
    pub dnssec_ok: bool,
}

/// A well-formed request.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    pub id: u16,
    /// The request's header flags word (opcode, RD, CD...).
    pub flags: u16,
    pub opcode: u8,
    /// Length of the question name in wire form (with the root byte).
    pub qname_len: usize,
    pub qtype: u16,
    pub qclass: u16,
    /// Offset just after the question section.
    pub question_end: usize,
    pub edns: Option<Edns>,
    /// The serial of the SOA in the authority section (IXFR requests).
    pub soa_serial: Option<u32>,
}

impl Request {
    pub fn rd(&self) -> bool {
        self.flags & FLAG_RD != 0
    }
}

/// Why a message is not a well-formed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// Shorter than a header, or a response: no answer at all.
    Drop,
    /// Answer FORMERR; `question_end` is set when the question itself was
    /// well-formed (it is echoed then).
    FormErr {
        id: u16,
        flags: u16,
        question_end: Option<usize>,
    },
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes([
        *b.get(at)?,
        *b.get(at + 1)?,
        *b.get(at + 2)?,
        *b.get(at + 3)?,
    ]))
}

/// Reads the question name at `at` (no pointers allowed), writing it
/// lower-cased into `lower`. Returns its wire length.
pub fn question_name(b: &[u8], at: usize, lower: &mut [u8; MAX_NAME]) -> Option<usize> {
    let mut i = at;
    let mut n = 0usize;
    loop {
        let len = *b.get(i)? as usize;
        if len & 0xC0 != 0 {
            return None;
        }
        if n + 1 + len > MAX_NAME {
            return None;
        }
        let label = b.get(i + 1..i + 1 + len)?;
        lower[n] = len as u8;
        for (d, s) in lower[n + 1..n + 1 + len].iter_mut().zip(label) {
            *d = s.to_ascii_lowercase();
        }
        n += 1 + len;
        i += 1 + len;
        if len == 0 {
            return Some(n);
        }
    }
}

/// Skips a possibly compressed name at `at`, checking that every pointer
/// points strictly backwards (which also rules out loops) and that the
/// name, expanded, stays within 255 bytes. Returns the offset after it.
pub fn skip_name(b: &[u8], at: usize) -> Option<usize> {
    let mut i = at;
    let mut end = None;
    let mut total = 0usize;
    let mut lowest = at;
    loop {
        let len = *b.get(i)? as usize;
        match len & 0xC0 {
            0x00 => {
                total += 1 + len;
                if total > MAX_NAME {
                    return None;
                }
                b.get(i + 1..i + 1 + len)?;
                i += 1 + len;
                if len == 0 {
                    return Some(end.unwrap_or(i));
                }
            }
            0xC0 => {
                let target = (u16_at(b, i)? & 0x3FFF) as usize;
                if target >= lowest {
                    return None;
                }
                end.get_or_insert(i + 2);
                lowest = target;
                i = target;
            }
            _ => return None,
        }
    }
}

/// Parses and checks one request. `lower` receives the lower-cased
/// question name.
pub fn parse(b: &[u8], lower: &mut [u8; MAX_NAME]) -> Result<Request, Malformed> {
    if b.len() < HEADER {
        return Err(Malformed::Drop);
    }
    let id = u16::from_be_bytes([b[0], b[1]]);
    let flags = u16::from_be_bytes([b[2], b[3]]);
    if flags & FLAG_QR != 0 {
        return Err(Malformed::Drop);
    }
    let opcode = ((flags >> 11) & 0xF) as u8;
    let (qd, an, ns, ar) = (
        u16::from_be_bytes([b[4], b[5]]),
        u16::from_be_bytes([b[6], b[7]]),
        u16_at(b, 8),
        u16_at(b, 10),
    );
    let (ns, ar) = (ns.unwrap_or(0), ar.unwrap_or(0));
    let formerr = |q: Option<usize>| Malformed::FormErr {
        id,
        flags,
        question_end: q,
    };
    if qd != 1 || an != 0 {
        return Err(formerr(None));
    }
    let qname_len = question_name(b, HEADER, lower).ok_or(formerr(None))?;
    let mut i = HEADER + qname_len;
    let qtype = u16_at(b, i).ok_or(formerr(None))?;
    let qclass = u16_at(b, i + 2).ok_or(formerr(None))?;
    i += 4;
    let question_end = i;
    let bad = || formerr(Some(question_end));
    let mut edns = None;
    let mut soa_serial = None;
    for k in 0..(ns as usize + ar as usize) {
        let name_at = i;
        i = skip_name(b, i).ok_or_else(bad)?;
        let rtype = u16_at(b, i).ok_or_else(bad)?;
        let class = u16_at(b, i + 2).ok_or_else(bad)?;
        let ttl = u32_at(b, i + 4).ok_or_else(bad)?;
        let rdlen = u16_at(b, i + 8).ok_or_else(bad)? as usize;
        let rdata = i + 10;
        let end = rdata + rdlen;
        if end > b.len() {
            return Err(bad());
        }
        let in_additional = k >= ns as usize;
        if rtype == TYPE_OPT {
            // One OPT, owned by the root, in the additional section.
            if !in_additional || edns.is_some() || b[name_at] != 0 {
                return Err(bad());
            }
            let mut o = rdata;
            while o < end {
                let olen = u16_at(b, o + 2).filter(|_| o + 4 <= end).ok_or_else(bad)? as usize;
                o += 4 + olen;
            }
            if o != end {
                return Err(bad());
            }
            edns = Some(Edns {
                udp_size: class,
                version: (ttl >> 16) as u8,
                dnssec_ok: ttl & 0x8000 != 0,
            });
        } else if rtype == TYPE_SOA && !in_additional && soa_serial.is_none() && rdlen >= 22 {
            // mname, rname, then serial..minimum (20 bytes): the serial is
            // 20 bytes from the end; the names are checked for pointers.
            let after_names = skip_name(b, rdata)
                .and_then(|j| skip_name(b, j))
                .ok_or_else(bad)?;
            if after_names + 20 != end {
                return Err(bad());
            }
            soa_serial = u32_at(b, end - 20);
        }
        i = end;
    }
    if i != b.len() {
        return Err(bad());
    }
    Ok(Request {
        id,
        flags,
        opcode,
        qname_len,
        qtype,
        qclass,
        question_end,
        edns,
        soa_serial,
    })
}

/// Cuts a response after its question, sets TC and zeroes the other
/// counts: what a rate-limited client gets on a slip, to retry over TCP.
pub fn truncate_to_question(out: &mut Vec<u8>) {
    if out.len() < HEADER {
        return;
    }
    let mut end = HEADER;
    if out[4..6] == [0, 1] {
        if let Some(e) = skip_name(out, HEADER) {
            end = (e + 4).min(out.len());
        }
    }
    out.truncate(end);
    out[2] |= (FLAG_TC >> 8) as u8;
    out[6..12].fill(0);
}

/// SERVFAIL for a request (its upstreams did not answer); empty when the
/// request is not one.
pub fn servfail(q: &[u8]) -> Vec<u8> {
    let mut lower = [0; MAX_NAME];
    let Ok(r) = parse(q, &mut lower) else {
        return Vec::new();
    };
    let mut out = q[..r.question_end].to_vec();
    let flags = FLAG_QR | (r.flags & (0x7800 | FLAG_RD | FLAG_CD)) | RCODE_SERVFAIL as u16;
    out[2..4].copy_from_slice(&flags.to_be_bytes());
    out[4..12].copy_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    out
}

/// Label start offsets of a wire name (the root label excluded).
pub fn label_starts(name: &[u8], out: &mut [u8; 128]) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < name.len() && name[i] != 0 {
        out[n] = i as u8;
        n += 1;
        i += 1 + name[i] as usize;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(name: &[u8], extra: &[u8], counts: [u16; 4]) -> Vec<u8> {
        let mut v = vec![0x12, 0x34, 0x01, 0x00];
        for c in counts {
            v.extend_from_slice(&c.to_be_bytes());
        }
        v.extend_from_slice(name);
        v.extend_from_slice(&[0, 1, 0, 1]);
        v.extend_from_slice(extra);
        v
    }

    #[test]
    fn good_query_with_opt() {
        let opt = [0, 0, 41, 0x04, 0xd0, 0, 0, 0x80, 0, 0, 0];
        let q = query(b"\x03Api\x03lab\x00", &opt, [1, 0, 0, 1]);
        let mut lower = [0; MAX_NAME];
        let r = parse(&q, &mut lower).unwrap();
        assert_eq!(&lower[..r.qname_len], b"\x03api\x03lab\x00");
        assert_eq!(
            r.edns,
            Some(Edns {
                udp_size: 1232,
                version: 0,
                dnssec_ok: true
            })
        );
        assert!(r.rd());
    }

    #[test]
    fn rfc9267_cases_are_refused() {
        let mut lower = [0; MAX_NAME];
        let fe = |q: &[u8], lower: &mut [u8; MAX_NAME]| {
            matches!(parse(q, lower), Err(Malformed::FormErr { .. }))
        };
        // pointer in the question (to itself: a loop)
        assert!(fe(&query(b"\xc0\x0c", &[], [1, 0, 0, 0]), &mut lower));
        // label length past the end
        assert!(fe(&query(b"\x3fabc", &[], [1, 0, 0, 0])[..17], &mut lower));
        // reserved label type
        assert!(fe(&query(b"\x41abc\x00", &[], [1, 0, 0, 0]), &mut lower));
        // name over 255 bytes
        let mut long = Vec::new();
        for _ in 0..5 {
            long.push(63);
            long.extend_from_slice(&[b'a'; 63]);
        }
        long.push(0);
        assert!(fe(&query(&long, &[], [1, 0, 0, 0]), &mut lower));
        // counts beyond the data
        assert!(fe(&query(b"\x01a\x00", &[], [1, 0, 0, 3]), &mut lower));
        // a forward pointer, and a pointer to itself (a loop), in the additional section
        assert!(fe(
            &query(
                b"\x01a\x00",
                &[0xc0, 0x30, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0],
                [1, 0, 0, 1]
            ),
            &mut lower
        ));
        assert!(fe(
            &query(
                b"\x01a\x00",
                &[0xc0, 0x13, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0],
                [1, 0, 0, 1]
            ),
            &mut lower
        ));
        // two OPTs
        let opt = [0, 0, 41, 4, 0, 0, 0, 0, 0, 0, 0];
        assert!(fe(
            &query(b"\x01a\x00", &[opt, opt].concat(), [1, 0, 0, 2]),
            &mut lower
        ));
        // OPT option length past its RDATA
        assert!(fe(
            &query(
                b"\x01a\x00",
                &[0, 0, 41, 4, 0, 0, 0, 0, 0, 0, 4, 0, 10, 0, 9, 1, 2, 3, 4],
                [1, 0, 0, 1]
            ),
            &mut lower
        ));
        // trailing bytes, no question, two questions
        assert!(fe(&query(b"\x01a\x00", &[9], [1, 0, 0, 0]), &mut lower));
        assert!(fe(&query(b"\x01a\x00", &[], [0, 0, 0, 0]), &mut lower));
        assert!(fe(&query(b"\x01a\x00", &[], [2, 0, 0, 0]), &mut lower));
        // short header, a response: dropped
        assert_eq!(parse(&[0; 11], &mut lower).unwrap_err(), Malformed::Drop);
        let mut resp = query(b"\x00", &[], [1, 0, 0, 0]);
        resp[2] |= 0x80;
        assert_eq!(parse(&resp, &mut lower).unwrap_err(), Malformed::Drop);
    }

    #[test]
    fn backward_pointers_are_fine() {
        let mut lower = [0; MAX_NAME];
        // an authority SOA whose names point back to the question
        let mut soa = vec![
            0xc0, 0x0c, 0, 6, 0, 1, 0, 0, 0, 0, 0, 24, 0xc0, 0x0c, 0xc0, 0x0c,
        ];
        soa.extend_from_slice(&[0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1]);
        let r = parse(&query(b"\x01a\x00", &soa, [1, 0, 1, 0]), &mut lower).unwrap();
        assert_eq!(r.soa_serial, Some(7));
    }
}
