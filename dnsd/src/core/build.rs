//! Compiling zones into the catalog: each owner name's answers encoded
//! once, with compression pointers into the question, so that answering is
//! a lookup and a copy ([`super::Catalog::build`] drives it).

use super::*;

impl Builder<'_> {
    pub(super) fn node_for(&mut self, key: Vec<u8>, zone: u16) -> u32 {
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
    pub(super) fn load(&mut self) -> Result<(), BuildError> {
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

    pub(super) fn mark_cuts(&mut self) {
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
                    .contains_key(&codec::TYPE_NS)
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

    pub(super) fn soa_section(&self, zone: usize) -> Section {
        let z = &self.zones[zone];
        let soa = z.soa();
        let ttl = z.records[0].ttl().min(soa.minimum());
        Section {
            owner: Owner::Name(z.origin.clone()),
            rtype: codec::TYPE_SOA,
            set: RRset {
                ttl,
                rdatas: vec![z.records[0].data().clone()],
            },
        }
    }

    pub(super) fn compile(&mut self) -> Result<Vec<ZoneInfo>, BuildError> {
        let mut infos = Vec::new();
        for (zi, z) in self.zones.iter().enumerate() {
            let soa = self.soa_section(zi);
            let nx = Logical {
                rcode: codec::RCODE_NXDOMAIN,
                aa: true,
                authority: vec![soa.clone()],
                ..Default::default()
            };
            let nodata = Logical {
                rcode: codec::RCODE_NOERROR,
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
                    let has_cname = self.bnodes[id].rrsets.contains_key(&codec::TYPE_CNAME);
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
                    let l = self.resolve(id as u32, codec::TYPE_ANY);
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

    pub(super) fn find(&self, name: &Name) -> Found {
        classify(&self.map, &self.nodes, &wire_name(name).1)
    }

    /// A and AAAA of `target` if `zone` has them (glue included). Other
    /// zones' data is left out, as NSD and Knot do.
    pub(super) fn addresses(&self, target: &Name, zone: u16, out: &mut Vec<Section>) {
        let Some(&n) = self.map.get(wire_name(target).1.as_slice()) else {
            return;
        };
        if self.nodes[n as usize].zone != zone {
            return;
        }
        let bn = &self.bnodes[n as usize];
        for t in [codec::TYPE_A, codec::TYPE_AAAA] {
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

    pub(super) fn referral(&self, cut: u32) -> Logical {
        let bn = &self.bnodes[cut as usize];
        let name = bn.name.clone().unwrap_or_else(Name::root);
        let ns = bn.rrsets[&codec::TYPE_NS].clone();
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
                rtype: codec::TYPE_NS,
                set: ns,
            }],
            additional,
        }
    }

    /// The logical answer for `qtype` at node `start` (an exact or
    /// wildcard match; the owner of the first RRset is the question name).
    pub(super) fn resolve(&self, start: u32, qtype: u16) -> Logical {
        let mut l = Logical {
            aa: true,
            ..Default::default()
        };
        let mut cur = start;
        let mut owner = Owner::Query;
        let mut seen = vec![start];
        loop {
            let bn = &self.bnodes[cur as usize];
            if qtype == codec::TYPE_ANY {
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
            if let Some(set) = bn.rrsets.get(&codec::TYPE_CNAME) {
                l.answer.push(Section {
                    owner,
                    rtype: codec::TYPE_CNAME,
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
                        l.rcode = codec::RCODE_NXDOMAIN;
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

    pub(super) fn template(&mut self, anchor: &Name, l: &Logical) -> Result<u32, BuildError> {
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
        let flags = (if l.aa { codec::FLAG_AA } else { 0 }) | l.rcode as u16;
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
const MAX_TARGET: usize = 0x4000 - codec::HEADER - MAX_NAME - 4;

impl Enc {
    pub(super) fn new(anchor: &Name) -> Enc {
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

    pub(super) fn pointer(&mut self, into_question: bool, val: u16) {
        self.fixups.push(Fixup {
            pos: self.buf.len() as u32,
            into_question,
            val,
        });
        self.buf.extend_from_slice(&[0xC0, 0]);
    }

    pub(super) fn name(&mut self, n: &Name, compress: bool) {
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
    pub(super) fn remember(&mut self, lower: &[u8], upto: usize, start: usize) {
        let mut i = 0;
        while i < upto {
            if start + i <= MAX_TARGET {
                self.known
                    .push((lower[i..].to_vec(), false, (start + i) as u16));
            }
            i += 1 + lower[i] as usize;
        }
    }

    pub(super) fn rr(&mut self, owner: &Owner, rtype: u16, ttl: u32, rd: &RData) {
        match owner {
            Owner::Query => self.buf.extend_from_slice(&[0xC0, 0x0C]),
            Owner::Name(n) => self.name(n, true),
        }
        self.buf.extend_from_slice(&rtype.to_be_bytes());
        self.buf.extend_from_slice(&codec::CLASS_IN.to_be_bytes());
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
