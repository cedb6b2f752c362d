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

use crate::wire::{self, Malformed, Request, MAX_NAME};
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
        let req = match wire::parse(pkt, &mut lower) {
            Ok(r) => r,
            Err(Malformed::Drop) => return Action::Drop,
            Err(Malformed::FormErr {
                id,
                flags,
                question_end,
            }) => {
                header_only(pkt, id, flags, question_end, wire::RCODE_FORMERR, out);
                return Action::Reply {
                    rcode: wire::RCODE_FORMERR,
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
                simple(pkt, &req, 0, wire::EXT_RCODE_BADVERS, out);
                return Action::Reply {
                    rcode: 16,
                    truncated: false,
                };
            }
        }
        if req.opcode != wire::OPCODE_QUERY {
            return reply(wire::RCODE_NOTIMP, out);
        }
        if req.qclass != wire::CLASS_IN && req.qclass != wire::CLASS_ANY {
            // CHAOS (version.bind, hostname.bind...) included: no disclosure.
            return reply(wire::RCODE_REFUSED, out);
        }
        let key = &lower[..req.qname_len];
        match req.qtype {
            wire::TYPE_OPT => return reply(wire::RCODE_FORMERR, out),
            wire::TYPE_AXFR | wire::TYPE_IXFR => {
                let zone = match self.map.get(key) {
                    Some(&n) if self.infos[self.nodes[n as usize].zone as usize].apex == n => {
                        self.nodes[n as usize].zone as usize
                    }
                    _ => return reply(wire::RCODE_NOTAUTH, out),
                };
                if !self
                    .options
                    .allow_transfer
                    .iter()
                    .any(|net| net.contains(&peer))
                {
                    return reply(wire::RCODE_REFUSED, out);
                }
                let serial = self.zones[zone].serial();
                let up_to_date = req.qtype == wire::TYPE_IXFR
                    && req.soa_serial.is_some_and(|s| serial_ge(s, serial));
                return match (transport, req.qtype) {
                    // RFC 1995 §2: over UDP, or when the client is current, the SOA alone.
                    (Transport::Udp, wire::TYPE_IXFR) => {
                        self.emit(self.infos[zone].soa, pkt, &req, limit, out)
                    }
                    (_, wire::TYPE_IXFR) if up_to_date => {
                        self.emit(self.infos[zone].soa, pkt, &req, limit, out)
                    }
                    (Transport::Udp, _) => reply(wire::RCODE_FORMERR, out),
                    (Transport::Tcp, _) => Action::Transfer {
                        zone,
                        ixfr_serial: req.soa_serial.filter(|_| req.qtype == wire::TYPE_IXFR),
                    },
                };
            }
            _ => {}
        }
        let t = match classify(&self.map, &self.nodes, key) {
            Found::Exact(n) | Found::Wild(n) => {
                let node = &self.nodes[n as usize];
                match req.qtype {
                    wire::TYPE_ANY => node.any,
                    t => node
                        .by_type
                        .iter()
                        .find(|(ty, _)| *ty == t)
                        .map(|(_, i)| *i)
                        .unwrap_or(node.other),
                }
            }
            Found::AtCut(n) if req.qtype == wire::TYPE_DS => {
                self.infos[self.nodes[n as usize].zone as usize].nodata
            }
            Found::AtCut(n) | Found::Referral(n) => self.nodes[n as usize].referral,
            Found::Nx(z) => self.infos[z as usize].nxdomain,
            Found::Outside if self.options.forward && req.rd() => return Action::Forward,
            Found::Outside => return reply(wire::RCODE_REFUSED, out),
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
                wire::HEADER + lq - f.val as usize
            } else {
                base + f.val as usize
            };
            out[base + pos..base + pos + 2].copy_from_slice(&(0xC000 | ptr as u16).to_be_bytes());
        }
        let rcode = (t.flags & 0xF) as u8;
        let flags = wire::FLAG_QR
            | (req.flags & (0x7800 | wire::FLAG_RD | wire::FLAG_CD))
            | t.flags
            | if truncated { wire::FLAG_TC } else { 0 };
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
        wire::FLAG_QR | (req.flags & (0x7800 | wire::FLAG_RD | wire::FLAG_CD)) | rcode as u16;
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
    let f = wire::FLAG_QR | (flags & (0x7800 | wire::FLAG_RD | wire::FLAG_CD)) | rcode as u16;
    out.extend_from_slice(&f.to_be_bytes());
    let qd = question_end.is_some() as u16;
    for c in [qd, 0, 0, 0] {
        out.extend_from_slice(&c.to_be_bytes());
    }
    if let Some(q) = question_end {
        out.extend_from_slice(&pkt[wire::HEADER..q]);
    }
}

impl Builder<'_> {
    fn node_for(&mut self, key: Vec<u8>, zone: u16) -> u32 {
        if let Some(&n) = self.map.get(key.as_slice()) {
            return n;
        }
        let id = self.nodes.len() as u32;
        self.nodes.push(Node {
            zone,
            kind: Kind::Auth,
            by_type: Box::new([]),
            other: 0,
            any: 0,
            referral: u32::MAX,
        });
        self.bnodes.push(BuildNode::default());
        self.map.insert(key.into_boxed_slice(), id);
        id
    }

    /// Nodes for every owner, every empty non-terminal between an owner
    /// and its apex, and every apex. Data a parent zone holds at or below
    /// another served zone's apex is left out: the child is authoritative.
    fn load(&mut self) -> Result<(), BuildError> {
        let zones = self.zones;
        for (zi, z) in zones.iter().enumerate() {
            let (_, apex) = wire_name(&z.origin);
            if self.map.contains_key(apex.as_slice()) {
                return Err(BuildError::Overlap(z.origin.to_string()));
            }
            let n = self.node_for(apex, zi as u16);
            self.bnodes[n as usize].name = Some(z.origin.clone());
        }
        for (zi, z) in zones.iter().enumerate() {
            let children: Vec<&Name> = zones
                .iter()
                .filter(|c| c.origin != z.origin && z.origin.zone_of(&c.origin))
                .map(|c| &c.origin)
                .collect();
            for r in &z.records {
                if children.iter().any(|c| c.zone_of(r.name())) {
                    continue;
                }
                let mut name = r.name().clone();
                let (_, key) = wire_name(&name);
                let owner = self.node_for(key, zi as u16);
                if self.nodes[owner as usize].zone as usize != zi {
                    return Err(BuildError::Overlap(name.to_string()));
                }
                let bn = &mut self.bnodes[owner as usize];
                bn.name.get_or_insert_with(|| r.name().clone());
                let set = bn
                    .rrsets
                    .entry(u16::from(r.record_type()))
                    .or_insert(RRset {
                        ttl: r.ttl(),
                        rdatas: Vec::new(),
                    });
                set.ttl = set.ttl.min(r.ttl());
                if !set.rdatas.contains(r.data()) {
                    set.rdatas.push(r.data().clone());
                }
                // empty non-terminals up to the apex
                while labels(&name) > labels(&z.origin) + 1 {
                    name = name.base_name();
                    let (_, key) = wire_name(&name);
                    let n = self.node_for(key, zi as u16);
                    self.bnodes[n as usize]
                        .name
                        .get_or_insert_with(|| name.clone());
                }
            }
        }
        Ok(())
    }

    fn mark_cuts(&mut self) {
        let apexes: BTreeSet<u32> = self
            .zones
            .iter()
            .map(|z| self.map[wire_name(&z.origin).1.as_slice()])
            .collect();
        let ids: Vec<u32> = (0..self.nodes.len() as u32).collect();
        for id in &ids {
            if !apexes.contains(id)
                && self.bnodes[*id as usize]
                    .rrsets
                    .contains_key(&wire::TYPE_NS)
            {
                self.nodes[*id as usize].kind = Kind::Cut;
            }
        }
        // Below a cut: the highest cut above the node (excluding itself).
        for id in ids {
            let Some(mut name) = self.bnodes[id as usize].name.clone() else {
                continue;
            };
            let zone = &self.zones[self.nodes[id as usize].zone as usize].origin;
            let mut below = None;
            while labels(&name) > labels(zone) + 1 {
                name = name.base_name();
                if let Some(&a) = self.map.get(wire_name(&name).1.as_slice()) {
                    if self.nodes[a as usize].kind == Kind::Cut
                        || matches!(self.nodes[a as usize].kind, Kind::Below(_))
                    {
                        below = Some(a);
                    }
                }
            }
            if let Some(c) = below {
                self.nodes[id as usize].kind = Kind::Below(c);
            }
        }
    }

    fn soa_section(&self, zone: usize) -> Section {
        let z = &self.zones[zone];
        let soa = z.soa();
        let ttl = z.records[0].ttl().min(soa.minimum());
        Section {
            owner: Owner::Name(z.origin.clone()),
            rtype: wire::TYPE_SOA,
            set: RRset {
                ttl,
                rdatas: vec![z.records[0].data().clone()],
            },
        }
    }

    fn compile(&mut self) -> Result<Vec<ZoneInfo>, BuildError> {
        let mut infos = Vec::new();
        for (zi, z) in self.zones.iter().enumerate() {
            let soa = self.soa_section(zi);
            let nx = Logical {
                rcode: wire::RCODE_NXDOMAIN,
                aa: true,
                authority: vec![soa.clone()],
                ..Default::default()
            };
            let nodata = Logical {
                rcode: wire::RCODE_NOERROR,
                aa: true,
                authority: vec![soa.clone()],
                ..Default::default()
            };
            let mut soa_answer = soa;
            soa_answer.set.ttl = z.records[0].ttl();
            soa_answer.owner = Owner::Query;
            let soa_only = Logical {
                aa: true,
                answer: vec![soa_answer],
                ..Default::default()
            };
            let apex = self.map[wire_name(&z.origin).1.as_slice()];
            infos.push(ZoneInfo {
                nxdomain: self.template(&z.origin, &nx)?,
                nodata: self.template(&z.origin, &nodata)?,
                soa: self.template(&z.origin, &soa_only)?,
                apex,
            });
        }
        let all_types: BTreeSet<u16> = self
            .bnodes
            .iter()
            .flat_map(|b| b.rrsets.keys().copied())
            .collect();
        for id in 0..self.nodes.len() {
            let node_zone = self.nodes[id].zone as usize;
            let Some(name) = self.bnodes[id].name.clone() else {
                continue;
            };
            match self.nodes[id].kind {
                Kind::Cut => {
                    let l = self.referral(id as u32);
                    self.nodes[id].referral = self.template(&name, &l)?;
                }
                Kind::Below(_) => {}
                Kind::Auth => {
                    // A wildcard's templates are anchored at its parent: they
                    // serve every name the wildcard matches.
                    let anchor = if name.is_wildcard() {
                        name.base_name()
                    } else {
                        name.clone()
                    };
                    let has_cname = self.bnodes[id].rrsets.contains_key(&wire::TYPE_CNAME);
                    let types: Vec<u16> = if has_cname {
                        all_types.iter().copied().collect()
                    } else {
                        self.bnodes[id].rrsets.keys().copied().collect()
                    };
                    let mut by_type = Vec::new();
                    for t in types {
                        let l = self.resolve(id as u32, t);
                        by_type.push((t, self.template(&anchor, &l)?));
                    }
                    let other = if has_cname {
                        let l = self.resolve(id as u32, 0);
                        self.template(&anchor, &l)?
                    } else {
                        // The zone's NODATA, valid for any name in it.
                        let soa = self.soa_section(node_zone);
                        let l = Logical {
                            aa: true,
                            authority: vec![soa],
                            ..Default::default()
                        };
                        self.template(&anchor, &l)?
                    };
                    let l = self.resolve(id as u32, wire::TYPE_ANY);
                    let any = self.template(&anchor, &l)?;
                    let n = &mut self.nodes[id];
                    n.by_type = by_type.into_boxed_slice();
                    n.other = other;
                    n.any = any;
                }
            }
        }
        Ok(infos)
    }

    fn find(&self, name: &Name) -> Found {
        classify(&self.map, &self.nodes, &wire_name(name).1)
    }

    /// A and AAAA of `target` if `zone` has them (glue included). Other
    /// zones' data is left out, as NSD and Knot do.
    fn addresses(&self, target: &Name, zone: u16, out: &mut Vec<Section>) {
        let Some(&n) = self.map.get(wire_name(target).1.as_slice()) else {
            return;
        };
        if self.nodes[n as usize].zone != zone {
            return;
        }
        let bn = &self.bnodes[n as usize];
        for t in [wire::TYPE_A, wire::TYPE_AAAA] {
            if let Some(set) = bn.rrsets.get(&t) {
                let owner = Owner::Name(bn.name.clone().unwrap_or_else(|| target.clone()));
                if !out
                    .iter()
                    .any(|s| s.rtype == t && matches!(&s.owner, Owner::Name(o) if o == target))
                {
                    out.push(Section {
                        owner,
                        rtype: t,
                        set: set.clone(),
                    });
                }
            }
        }
    }

    fn referral(&self, cut: u32) -> Logical {
        let bn = &self.bnodes[cut as usize];
        let name = bn.name.clone().unwrap_or_else(Name::root);
        let ns = bn.rrsets[&wire::TYPE_NS].clone();
        let mut additional = Vec::new();
        for rd in &ns.rdatas {
            if let RData::NS(t) = rd {
                self.addresses(&t.0, self.nodes[cut as usize].zone, &mut additional);
            }
        }
        Logical {
            rcode: 0,
            aa: false,
            answer: vec![],
            authority: vec![Section {
                owner: Owner::Name(name),
                rtype: wire::TYPE_NS,
                set: ns,
            }],
            additional,
        }
    }

    /// The logical answer for `qtype` at node `start` (an exact or
    /// wildcard match; the owner of the first RRset is the question name).
    fn resolve(&self, start: u32, qtype: u16) -> Logical {
        let mut l = Logical {
            aa: true,
            ..Default::default()
        };
        let mut cur = start;
        let mut owner = Owner::Query;
        let mut seen = vec![start];
        loop {
            let bn = &self.bnodes[cur as usize];
            if qtype == wire::TYPE_ANY {
                // RFC 8482: one RRset (the first by type number, as Knot).
                if let Some((t, set)) = bn.rrsets.iter().next() {
                    l.answer.push(Section {
                        owner,
                        rtype: *t,
                        set: set.clone(),
                    });
                }
                break;
            }
            if let Some(set) = bn.rrsets.get(&qtype) {
                l.answer.push(Section {
                    owner,
                    rtype: qtype,
                    set: set.clone(),
                });
                break;
            }
            if let Some(set) = bn.rrsets.get(&wire::TYPE_CNAME) {
                l.answer.push(Section {
                    owner,
                    rtype: wire::TYPE_CNAME,
                    set: set.clone(),
                });
                let RData::CNAME(target) = &set.rdatas[0] else {
                    break;
                };
                let target = target.0.clone();
                if l.answer.len() > MAX_CHAIN {
                    break;
                }
                match self.find(&target) {
                    Found::Exact(n) | Found::Wild(n) if !seen.contains(&n) => {
                        seen.push(n);
                        cur = n;
                        owner = Owner::Name(target);
                        continue;
                    }
                    Found::Nx(z) => {
                        l.rcode = wire::RCODE_NXDOMAIN;
                        l.authority.push(self.soa_section(z as usize));
                    }
                    // A loop, a referral or a name elsewhere: the resolver
                    // takes it from here.
                    _ => {}
                }
                break;
            }
            l.authority
                .push(self.soa_section(self.nodes[cur as usize].zone as usize));
            break;
        }
        let mut additional = Vec::new();
        let zone = self.nodes[cur as usize].zone;
        for s in &l.answer {
            for rd in &s.set.rdatas {
                match rd {
                    RData::NS(t) => self.addresses(&t.0, zone, &mut additional),
                    RData::MX(mx) => self.addresses(mx.exchange(), zone, &mut additional),
                    RData::SRV(srv) => self.addresses(srv.target(), zone, &mut additional),
                    _ => {}
                }
            }
        }
        additional.retain(|a| {
            !l.answer.iter().any(|s| {
                s.rtype == a.rtype
                    && matches!((&s.owner, &a.owner), (Owner::Name(x), Owner::Name(y)) if x == y)
            })
        });
        l.additional = additional;
        l
    }

    fn template(&mut self, anchor: &Name, l: &Logical) -> Result<u32, BuildError> {
        let mut e = Enc::new(anchor);
        let count = |e: &mut Enc, secs: &[Section]| -> Result<u16, BuildError> {
            let mut n = 0u16;
            for s in secs {
                for rd in &s.set.rdatas {
                    e.rr(&s.owner, s.rtype, s.set.ttl, rd);
                    n += 1;
                }
            }
            if e.buf.len() > 65000 {
                return Err(BuildError::TooLarge(anchor.to_string()));
            }
            Ok(n)
        };
        let an = count(&mut e, &l.answer)?;
        let ns = count(&mut e, &l.authority)?;
        let required = e.buf.len() as u32;
        let mut additional = Vec::new();
        let mut ar = 0u16;
        for s in &l.additional {
            ar += count(&mut e, std::slice::from_ref(s))?;
            additional.push((e.buf.len() as u32, ar));
        }
        let flags = (if l.aa { wire::FLAG_AA } else { 0 }) | l.rcode as u16;
        let fixups: Vec<(u32, bool, u16)> = e
            .fixups
            .iter()
            .map(|f| (f.pos, f.into_question, f.val))
            .collect();
        let key = (e.buf.clone(), fixups, flags, an, ns, additional.clone());
        if let Some(&t) = self.dedup.get(&key) {
            return Ok(t);
        }
        let id = self.templates.len() as u32;
        self.templates.push(Template {
            flags,
            an,
            ns,
            bytes: e.buf.into_boxed_slice(),
            required,
            additional: additional.into_boxed_slice(),
            fixups: e.fixups.into_boxed_slice(),
        });
        self.dedup.insert(key, id);
        Ok(id)
    }
}

/// Builds a template's bytes with compression. Known names: every suffix of
/// the anchor (in the question) and every name written so far.
struct Enc {
    buf: Vec<u8>,
    fixups: Vec<Fixup>,
    known: Vec<(Vec<u8>, bool, u16)>,
}

/// Template offsets above this are not used as compression targets (the
/// pointer must stay below 0x4000 after the header and a 255-byte question).
const MAX_TARGET: usize = 0x4000 - wire::HEADER - MAX_NAME - 4;

impl Enc {
    fn new(anchor: &Name) -> Enc {
        let (_, lower) = wire_name(anchor);
        let mut known = Vec::new();
        let mut i = 0;
        while i < lower.len() && lower[i] != 0 {
            known.push((lower[i..].to_vec(), true, (lower.len() - i) as u16));
            i += 1 + lower[i] as usize;
        }
        Enc {
            buf: Vec::new(),
            fixups: Vec::new(),
            known,
        }
    }

    fn pointer(&mut self, into_question: bool, val: u16) {
        self.fixups.push(Fixup {
            pos: self.buf.len() as u32,
            into_question,
            val,
        });
        self.buf.extend_from_slice(&[0xC0, 0]);
    }

    fn name(&mut self, n: &Name, compress: bool) {
        let (w, lower) = wire_name(n);
        if !compress {
            self.buf.extend_from_slice(&w);
            return;
        }
        let mut i = 0;
        let start = self.buf.len();
        while i < lower.len() && lower[i] != 0 {
            if let Some(&(_, q, v)) = self
                .known
                .iter()
                .find(|(k, _, _)| k.as_slice() == &lower[i..])
            {
                self.buf.extend_from_slice(&w[..i]);
                self.remember(&lower[..], i, start);
                self.pointer(q, v);
                return;
            }
            i += 1 + lower[i] as usize;
        }
        self.buf.extend_from_slice(&w);
        self.remember(&lower, lower.len() - 1, start);
    }

    /// Remembers the suffixes of `lower` that start before `upto`, written at `start`.
    fn remember(&mut self, lower: &[u8], upto: usize, start: usize) {
        let mut i = 0;
        while i < upto {
            if start + i <= MAX_TARGET {
                self.known
                    .push((lower[i..].to_vec(), false, (start + i) as u16));
            }
            i += 1 + lower[i] as usize;
        }
    }

    fn rr(&mut self, owner: &Owner, rtype: u16, ttl: u32, rd: &RData) {
        match owner {
            Owner::Query => self.buf.extend_from_slice(&[0xC0, 0x0C]),
            Owner::Name(n) => self.name(n, true),
        }
        self.buf.extend_from_slice(&rtype.to_be_bytes());
        self.buf.extend_from_slice(&wire::CLASS_IN.to_be_bytes());
        self.buf.extend_from_slice(&ttl.to_be_bytes());
        let len_at = self.buf.len();
        self.buf.extend_from_slice(&[0, 0]);
        match rd {
            RData::A(a) => self.buf.extend_from_slice(&a.0.octets()),
            RData::AAAA(a) => self.buf.extend_from_slice(&a.0.octets()),
            RData::NS(n) => self.name(&n.0, true),
            RData::CNAME(n) => self.name(&n.0, true),
            RData::PTR(n) => self.name(&n.0, true),
            RData::MX(mx) => {
                self.buf.extend_from_slice(&mx.preference().to_be_bytes());
                self.name(mx.exchange(), true);
            }
            RData::SOA(s) => {
                self.name(s.mname(), true);
                self.name(s.rname(), true);
                for v in [
                    s.serial(),
                    s.refresh() as u32,
                    s.retry() as u32,
                    s.expire() as u32,
                    s.minimum(),
                ] {
                    self.buf.extend_from_slice(&v.to_be_bytes());
                }
            }
            RData::SRV(s) => {
                for v in [s.priority(), s.weight(), s.port()] {
                    self.buf.extend_from_slice(&v.to_be_bytes());
                }
                // RFC 2782: the target is never compressed.
                self.name(s.target(), false);
            }
            other => {
                let mut v = Vec::new();
                let mut enc = BinEncoder::new(&mut v);
                enc.set_canonical_names(true);
                // Data that came out of a parser encodes; if not, an empty RDATA.
                let _ = other.emit(&mut enc);
                self.buf.extend_from_slice(&v);
            }
        }
        let len = (self.buf.len() - len_at - 2) as u16;
        self.buf[len_at..len_at + 2].copy_from_slice(&len.to_be_bytes());
    }
}

#[cfg(test)]
#[path = "core_tests.rs"]
mod tests;
