//! The authoritative core, pure (no sockets, no clock): a [`Catalog`] is
//! compiled once per zone version, and [`Catalog::answer`] turns one request
//! into one response in a reused buffer.
//!
//! Compilation resolves every question dnsd can be asked into a
//! [`Template`]: the answer, authority and additional sections already in
//! wire form, with name compression done. Names that are suffixes of the
//! question name point into the question, and the templates are valid for
//! any question name ending in the template's anchor (a node's name, a
//! wildcard's parent, a zone apex), so one template serves a node in any
//! letter case and every name a wildcard matches. Answering is then: parse
//! the question, one to three hash lookups, copy the template, patch a few
//! compression pointers. No allocation on that path.
//!
//! Semantics (RFC 1034 §4.3.2, RFC 2308, RFC 4592, RFC 6604, RFC 8482):
//! NXDOMAIN and NODATA carry the zone's SOA with the negative TTL
//! (min(SOA TTL, SOA minimum)); CNAME chains are followed inside dnsd's
//! zones (the RCODE is the last link's); a name at or below a zone cut gets
//! a referral (AA clear, NS in authority, glue in additional); a wildcard
//! matches only below its closest encloser; ANY gets one RRset (RFC 8482,
//! on both transports, as NSD and Knot).

use crate::codec::{self, Malformed, Request, MAX_NAME};
use crate::zone::Zone;
use hickory_proto::rr::{Name, RData};
use hickory_proto::serialize::binary::{BinEncodable, BinEncoder};
use ipnet::IpNet;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

/// The largest UDP response dnsd sends (RFC 9715 / DNS flag day 2020), and
/// the payload size it advertises.
pub const MAX_UDP: u16 = 1232;
/// How many CNAMEs a chain may have before dnsd stops following it.
const MAX_CHAIN: usize = 8;

type Map = HashMap<Box<[u8]>, u32, foldhash::fast::FixedState>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

/// Policy that is part of a snapshot.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Who may AXFR/IXFR.
    pub allow_transfer: Vec<IpNet>,
    /// Names outside every zone go to upstream resolvers (when the query
    /// has RD set) instead of being REFUSED.
    pub forward: bool,
    /// Who may have its queries forwarded; anyone else is REFUSED.
    pub allow_forward: Vec<IpNet>,
}

/// What the transport does with a request after [`Catalog::answer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Send the buffer.
    Reply { rcode: u8, truncated: bool },
    /// Send nothing (not a request, or not even a header).
    Drop,
    /// A zone transfer (TCP, allowed peer): zone index, and the client's
    /// serial for IXFR.
    Transfer {
        zone: usize,
        ixfr_serial: Option<u32>,
    },
    /// Forward to an upstream resolver (outside every zone, RD set).
    Forward,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Auth,
    /// Has NS and is not an apex: a delegation.
    Cut,
    /// Occluded by the cut at this node (glue lives here).
    Below(u32),
}

#[derive(Debug)]
struct Node {
    zone: u16,
    kind: Kind,
    /// Template per query type that has its own answer; others get `other`.
    by_type: Box<[(u16, u32)]>,
    other: u32,
    any: u32,
    /// For cuts: the referral.
    referral: u32,
}

#[derive(Debug, Clone, Copy)]
struct Fixup {
    /// Offset in the template bytes of a 2-byte compression pointer.
    pos: u32,
    /// Into the question: `val` is the length of the suffix pointed to.
    /// Otherwise into the template: `val` is the offset in the template.
    into_question: bool,
    val: u16,
}

/// A precompiled response body.
#[derive(Debug, Default)]
struct Template {
    /// AA and the RCODE.
    flags: u16,
    an: u16,
    ns: u16,
    bytes: Box<[u8]>,
    /// Answer and authority must fit, or the response is truncated.
    required: u32,
    /// (end offset, cumulative count) after each additional RRset.
    additional: Box<[(u32, u16)]>,
    /// Sorted by `pos`.
    fixups: Box<[Fixup]>,
}

#[derive(Debug)]
struct ZoneInfo {
    nxdomain: u32,
    nodata: u32,
    /// Just the SOA in the answer (an IXFR client that is up to date).
    soa: u32,
    apex: u32,
}

/// Every zone compiled for answering.
#[derive(Debug)]
pub struct Catalog {
    map: Map,
    nodes: Vec<Node>,
    templates: Vec<Template>,
    infos: Vec<ZoneInfo>,
    pub zones: Vec<Zone>,
    pub options: Options,
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("{0}: a name in two zones' data")]
    Overlap(String),
    #[error("{0}: response too large to compile")]
    TooLarge(String),
}

/// Where a name leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    Exact(u32),
    /// At a cut: DS is answered by the parent, everything else referred.
    AtCut(u32),
    Wild(u32),
    Referral(u32),
    /// Inside zone `.0`, no such name.
    Nx(u16),
    Outside,
}

/// Wire form of a name: (as written, lower-cased).
fn wire_name(n: &Name) -> (Vec<u8>, Vec<u8>) {
    let mut w = Vec::with_capacity(n.len() + 2);
    for l in n.iter() {
        w.push(l.len() as u8);
        w.extend_from_slice(l);
    }
    w.push(0);
    let lower = w.to_ascii_lowercase();
    (w, lower)
}

/// Labels of a name, a leading `*` included (hickory's `num_labels` leaves it out).
fn labels(n: &Name) -> usize {
    n.iter().count()
}

fn classify(map: &Map, nodes: &[Node], key: &[u8]) -> Found {
    if let Some(&n) = map.get(key) {
        return match nodes[n as usize].kind {
            Kind::Auth => Found::Exact(n),
            Kind::Cut => Found::AtCut(n),
            Kind::Below(c) => Found::Referral(c),
        };
    }
    let mut i = 0;
    while key[i] != 0 {
        i += 1 + key[i] as usize;
        let suffix = &key[i..];
        if let Some(&ce) = map.get(suffix) {
            let node = &nodes[ce as usize];
            return match node.kind {
                Kind::Cut => Found::Referral(ce),
                Kind::Below(c) => Found::Referral(c),
                Kind::Auth => {
                    let mut wild = [0u8; MAX_NAME + 2];
                    wild[0] = 1;
                    wild[1] = b'*';
                    wild[2..2 + suffix.len()].copy_from_slice(suffix);
                    match map.get(&wild[..2 + suffix.len()]) {
                        Some(&w) if nodes[w as usize].kind == Kind::Auth => Found::Wild(w),
                        _ => Found::Nx(node.zone),
                    }
                }
            };
        }
    }
    Found::Outside
}

// ---------------------------------------------------------------------------
// Compilation

#[derive(Debug, Clone)]
struct RRset {
    ttl: u32,
    rdatas: Vec<RData>,
}

#[derive(Debug, Default)]
struct BuildNode {
    name: Option<Name>,
    rrsets: BTreeMap<u16, RRset>,
}

#[derive(Debug, Clone)]
enum Owner {
    Query,
    Name(Name),
}

#[derive(Debug, Clone)]
struct Section {
    owner: Owner,
    rtype: u16,
    set: RRset,
}

#[derive(Debug, Default)]
struct Logical {
    rcode: u8,
    aa: bool,
    answer: Vec<Section>,
    authority: Vec<Section>,
    additional: Vec<Section>,
}

/// A template's whole content: equal keys, one template.
type TemplateKey = (
    Vec<u8>,
    Vec<(u32, bool, u16)>,
    u16,
    u16,
    u16,
    Vec<(u32, u16)>,
);

struct Builder<'z> {
    zones: &'z [Zone],
    map: Map,
    nodes: Vec<Node>,
    bnodes: Vec<BuildNode>,
    templates: Vec<Template>,
    dedup: HashMap<TemplateKey, u32>,
}

impl Catalog {
    pub fn build(zones: Vec<Zone>, options: Options) -> Result<Catalog, BuildError> {
        let mut b = Builder {
            zones: &zones,
            map: Map::default(),
            nodes: Vec::new(),
            bnodes: Vec::new(),
            templates: Vec::new(),
            dedup: HashMap::new(),
        };
        b.load()?;
        b.mark_cuts();
        let infos = b.compile()?;
        let Builder {
            map,
            nodes,
            templates,
            ..
        } = b;
        Ok(Catalog {
            map,
            nodes,
            templates,
            infos,
            zones,
            options,
        })
    }

    /// Answers one request into `out` (cleared first).
    pub fn answer(
        &self,
        pkt: &[u8],
        transport: Transport,
        peer: IpAddr,
        out: &mut Vec<u8>,
    ) -> Action {
        let mut lower = [0u8; MAX_NAME];
        let req = match codec::parse(pkt, &mut lower) {
            Ok(r) => r,
            Err(Malformed::Drop) => return Action::Drop,
            Err(Malformed::FormErr {
                id,
                flags,
                question_end,
            }) => {
                header_only(pkt, id, flags, question_end, codec::RCODE_FORMERR, out);
                return Action::Reply {
                    rcode: codec::RCODE_FORMERR,
                    truncated: false,
                };
            }
        };
        let limit = match transport {
            Transport::Udp => req
                .edns
                .map(|e| e.udp_size.clamp(512, MAX_UDP))
                .unwrap_or(512) as usize,
            Transport::Tcp => 65535,
        };
        let reply = |rcode: u8, out: &mut Vec<u8>| {
            simple(pkt, &req, rcode, 0, out);
            Action::Reply {
                rcode,
                truncated: false,
            }
        };
        if let Some(e) = req.edns {
            if e.version != 0 {
                simple(pkt, &req, 0, codec::EXT_RCODE_BADVERS, out);
                return Action::Reply {
                    rcode: 16,
                    truncated: false,
                };
            }
        }
        if req.opcode != codec::OPCODE_QUERY {
            return reply(codec::RCODE_NOTIMP, out);
        }
        if req.qclass != codec::CLASS_IN && req.qclass != codec::CLASS_ANY {
            // CHAOS (version.bind, hostname.bind...) included: no disclosure.
            return reply(codec::RCODE_REFUSED, out);
        }
        let key = &lower[..req.qname_len];
        match req.qtype {
            codec::TYPE_OPT => return reply(codec::RCODE_FORMERR, out),
            codec::TYPE_AXFR | codec::TYPE_IXFR => {
                let zone = match self.map.get(key) {
                    Some(&n) if self.infos[self.nodes[n as usize].zone as usize].apex == n => {
                        self.nodes[n as usize].zone as usize
                    }
                    _ => return reply(codec::RCODE_NOTAUTH, out),
                };
                if !self
                    .options
                    .allow_transfer
                    .iter()
                    .any(|net| net.contains(&peer))
                {
                    return reply(codec::RCODE_REFUSED, out);
                }
                let serial = self.zones[zone].serial();
                let up_to_date = req.qtype == codec::TYPE_IXFR
                    && req.soa_serial.is_some_and(|s| serial_ge(s, serial));
                return match (transport, req.qtype) {
                    // RFC 1995 §2: over UDP, or when the client is current, the SOA alone.
                    (Transport::Udp, codec::TYPE_IXFR) => {
                        self.emit(self.infos[zone].soa, pkt, &req, limit, out)
                    }
                    (_, codec::TYPE_IXFR) if up_to_date => {
                        self.emit(self.infos[zone].soa, pkt, &req, limit, out)
                    }
                    (Transport::Udp, _) => reply(codec::RCODE_FORMERR, out),
                    (Transport::Tcp, _) => Action::Transfer {
                        zone,
                        ixfr_serial: req.soa_serial.filter(|_| req.qtype == codec::TYPE_IXFR),
                    },
                };
            }
            _ => {}
        }
        let t = match classify(&self.map, &self.nodes, key) {
            Found::Exact(n) | Found::Wild(n) => {
                let node = &self.nodes[n as usize];
                match req.qtype {
                    codec::TYPE_ANY => node.any,
                    t => node
                        .by_type
                        .iter()
                        .find(|(ty, _)| *ty == t)
                        .map(|(_, i)| *i)
                        .unwrap_or(node.other),
                }
            }
            Found::AtCut(n) if req.qtype == codec::TYPE_DS => {
                self.infos[self.nodes[n as usize].zone as usize].nodata
            }
            Found::AtCut(n) | Found::Referral(n) => self.nodes[n as usize].referral,
            Found::Nx(z) => self.infos[z as usize].nxdomain,
            Found::Outside
                if self.options.forward
                    && req.rd()
                    && self.options.allow_forward.iter().any(|n| n.contains(&peer)) =>
            {
                return Action::Forward
            }
            Found::Outside => return reply(codec::RCODE_REFUSED, out),
        };
        self.emit(t, pkt, &req, limit, out)
    }

    fn emit(&self, t: u32, pkt: &[u8], req: &Request, limit: usize, out: &mut Vec<u8>) -> Action {
        let t = &self.templates[t as usize];
        out.clear();
        let base = req.question_end;
        out.extend_from_slice(&pkt[..base]);
        let opt = if req.edns.is_some() { 11 } else { 0 };
        let room = limit.saturating_sub(base + opt);
        let (an, ns, ar, end, truncated) = if t.required as usize > room {
            (0, 0, 0, 0, true)
        } else {
            let mut end = t.required as usize;
            let mut ar = 0;
            for &(e, n) in t.additional.iter() {
                if e as usize > room {
                    break;
                }
                end = e as usize;
                ar = n;
            }
            (t.an, t.ns, ar, end, false)
        };
        out.extend_from_slice(&t.bytes[..end]);
        let lq = req.qname_len;
        for f in t.fixups.iter() {
            let pos = f.pos as usize;
            if pos >= end {
                break;
            }
            let ptr = if f.into_question {
                codec::HEADER + lq - f.val as usize
            } else {
                base + f.val as usize
            };
            out[base + pos..base + pos + 2].copy_from_slice(&(0xC000 | ptr as u16).to_be_bytes());
        }
        let rcode = (t.flags & 0xF) as u8;
        // RFC 1034 §5.3.2: an answer to class ANY is never authoritative.
        let aa = if req.qclass == codec::CLASS_ANY {
            !codec::FLAG_AA
        } else {
            !0
        };
        let flags = (codec::FLAG_QR
            | (req.flags & (0x7800 | codec::FLAG_RD | codec::FLAG_CD))
            | t.flags
            | if truncated { codec::FLAG_TC } else { 0 })
            & aa;
        write_header(out, flags, an, ns, ar + (opt > 0) as u16);
        if let Some(e) = req.edns {
            push_opt(out, 0, e.dnssec_ok);
        }
        Action::Reply { rcode, truncated }
    }

    /// How many distinct precompiled responses the catalog holds.
    pub fn template_count(&self) -> usize {
        self.templates.len()
    }
}

/// RFC 1982 serial arithmetic: `a` is at or after `b`.
pub fn serial_ge(a: u32, b: u32) -> bool {
    a == b || (a.wrapping_sub(b) as i32) > 0
}

fn write_header(out: &mut [u8], flags: u16, an: u16, ns: u16, ar: u16) {
    out[2..4].copy_from_slice(&flags.to_be_bytes());
    out[4..6].copy_from_slice(&1u16.to_be_bytes());
    out[6..8].copy_from_slice(&an.to_be_bytes());
    out[8..10].copy_from_slice(&ns.to_be_bytes());
    out[10..12].copy_from_slice(&ar.to_be_bytes());
}

fn push_opt(out: &mut Vec<u8>, ext_rcode: u8, dnssec_ok: bool) {
    let [s0, s1] = MAX_UDP.to_be_bytes();
    out.extend_from_slice(&[
        0,
        0,
        41,
        s0,
        s1,
        ext_rcode,
        0,
        if dnssec_ok { 0x80 } else { 0 },
        0,
        0,
        0,
    ]);
}

/// Header, the question, and OPT when the request had one.
fn simple(pkt: &[u8], req: &Request, rcode: u8, ext_rcode: u8, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&pkt[..req.question_end]);
    let flags =
        codec::FLAG_QR | (req.flags & (0x7800 | codec::FLAG_RD | codec::FLAG_CD)) | rcode as u16;
    write_header(out, flags, 0, 0, req.edns.is_some() as u16);
    if let Some(e) = req.edns {
        push_opt(out, ext_rcode, e.dnssec_ok);
    }
}

/// A FORMERR: the header, and the question if it was readable.
fn header_only(
    pkt: &[u8],
    id: u16,
    flags: u16,
    question_end: Option<usize>,
    rcode: u8,
    out: &mut Vec<u8>,
) {
    out.clear();
    out.extend_from_slice(&id.to_be_bytes());
    let f = codec::FLAG_QR | (flags & (0x7800 | codec::FLAG_RD | codec::FLAG_CD)) | rcode as u16;
    out.extend_from_slice(&f.to_be_bytes());
    let qd = question_end.is_some() as u16;
    for c in [qd, 0, 0, 0] {
        out.extend_from_slice(&c.to_be_bytes());
    }
    if let Some(q) = question_end {
        out.extend_from_slice(&pkt[codec::HEADER..q]);
    }
}

mod build;

#[cfg(test)]
mod tests;
