//! Zone data: what dnsd serves, as plain records (hickory-proto types),
//! derived from the site ([`from_site`]) or read from RFC 1035 master files
//! ([`from_files`]). [`crate::core::Catalog::build`] compiles it into
//! answers.

use foldhash::fast::FixedState;
use hickory_proto::rr::rdata::{A, AAAA, CNAME, MX, NS, PTR, SOA, SRV, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use site::dns::RData as SiteRData;
use site::Site;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// What makes two records the same one (RFC 2136 1.1.1, as hickory's
/// `Record` equality: name, type, data; names case-insensitive, also in the
/// data of the types that carry names).
type DedupKey = (Name, RecordType, String);

fn dedup_key(r: &Record) -> DedupKey {
    let data = r.data().to_string();
    let data = match r.record_type() {
        RecordType::CNAME
        | RecordType::NS
        | RecordType::PTR
        | RecordType::MX
        | RecordType::SRV
        | RecordType::SOA => data.to_ascii_lowercase(),
        _ => data,
    };
    (r.name().clone(), r.record_type(), data)
}

/// A name's wire form in lower case, the root label only when it is fully
/// qualified: equal for names hickory compares equal (letter case aside,
/// RFC 4343), and cheap to hash.
fn lower_wire(n: &Name) -> Vec<u8> {
    let mut w = Vec::with_capacity(n.len() + 2);
    for l in n.iter() {
        w.push(l.len() as u8);
        w.extend(l.iter().map(u8::to_ascii_lowercase));
    }
    if n.is_fqdn() {
        w.push(0);
    }
    w
}

/// A hash of a record's owner (letter case aside) and type: two records
/// with the same [`DedupKey`] have the same one.
fn owner_type(r: &Record) -> u64 {
    let mut h = FixedState::default().build_hasher();
    h.write(&lower_wire(r.name()));
    h.write_u16(u16::from(r.record_type()));
    h.finish()
}

/// The [`owner_type`]s that more than one of `records` has.
fn shared_owner_types<'r>(records: impl Iterator<Item = &'r Record>) -> HashSet<u64, FixedState> {
    let mut once = HashSet::with_hasher(FixedState::default());
    let mut more = HashSet::with_hasher(FixedState::default());
    for r in records {
        let k = owner_type(r);
        if !once.insert(k) {
            more.insert(k);
        }
    }
    more
}

/// Two SOAs alike but for their serials.
fn soa_but_serial(a: &RData, b: &RData) -> bool {
    match (a, b) {
        (RData::SOA(a), RData::SOA(b)) => {
            a.mname() == b.mname()
                && a.rname() == b.rname()
                && a.refresh() == b.refresh()
                && a.retry() == b.retry()
                && a.expire() == b.expire()
                && a.minimum() == b.minimum()
        }
        _ => false,
    }
}

/// One zone: its origin and every record, the SOA first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zone {
    pub origin: Name,
    pub records: Vec<Record>,
}

impl Zone {
    pub fn soa(&self) -> &SOA {
        match self.records[0].data() {
            RData::SOA(s) => s,
            _ => unreachable!("Zone::records[0] is the SOA (checked when built)"),
        }
    }
    pub fn serial(&self) -> u32 {
        self.soa().serial()
    }
    /// Sets the SOA serial.
    pub fn set_serial(&mut self, serial: u32) {
        let s = self.soa().clone();
        let soa = SOA::new(
            s.mname().clone(),
            s.rname().clone(),
            serial,
            s.refresh(),
            s.retry(),
            s.expire(),
            s.minimum(),
        );
        self.records[0].set_data(RData::SOA(soa));
    }
    /// Whether `other` holds the same records, TTLs included, whatever the
    /// SOA serials: what a reload's serial is decided on. Compared in
    /// order (zones made from one description list their records in its
    /// order; records merely reordered count as a change, which costs a
    /// serial). Without formatting a record: at 50 000 nodes a reload
    /// compared its zones' text for seconds.
    pub fn same_content(&self, other: &Zone) -> bool {
        self.origin == other.origin
            && self.records.len() == other.records.len()
            && self
                .records
                .iter()
                .zip(&other.records)
                .enumerate()
                .all(|(i, (a, b))| {
                    a.ttl() == b.ttl()
                        && a.record_type() == b.record_type()
                        && if i == 0 {
                            soa_but_serial(a.data(), b.data())
                        } else {
                            a == b
                        }
                })
    }
    /// The records without the SOA's serial, in a stable order: two zones
    /// with equal content compare equal whatever their serials.
    pub fn content(&self) -> Vec<String> {
        let mut z = self.clone();
        z.set_serial(0);
        let mut v: Vec<String> = z
            .records
            .iter()
            .map(|r| r.to_string().to_ascii_lowercase())
            .collect();
        v.sort();
        v
    }
    /// The zone as an RFC 1035 master file (what `dnsd zone` prints and the
    /// differential tests load into NSD and Knot).
    pub fn to_master(&self) -> String {
        let mut s = format!("$ORIGIN {}\n", self.origin);
        for r in &self.records {
            match r.data() {
                // hickory's TXT Display is not master-file syntax (no quotes).
                RData::TXT(t) => {
                    s.push_str(&format!("{} {} {} TXT", r.name(), r.ttl(), r.dns_class()));
                    for chunk in t.txt_data() {
                        s.push_str(" \"");
                        for &b in chunk.iter() {
                            match b {
                                b'"' | b'\\' => s.push_str(&format!("\\{}", b as char)),
                                0x20..=0x7e => s.push(b as char),
                                _ => s.push_str(&format!("\\{b:03}")),
                            }
                        }
                        s.push('"');
                    }
                }
                _ => s.push_str(&r.to_string()),
            }
            s.push('\n');
        }
        s
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ZoneError {
    #[error("{0}: {1}")]
    Read(PathBuf, std::io::Error),
    #[error("{0}: {1}")]
    Parse(PathBuf, String),
    #[error("{file}: {reason}")]
    Invalid { file: PathBuf, reason: String },
    #[error("the site has no DNS nameserver: set dns.nameservers")]
    NoNameserver,
    #[error("{0}")]
    Name(String),
}

fn name(s: &str) -> Result<Name, ZoneError> {
    let mut n = Name::from_ascii(s).map_err(|e| ZoneError::Name(format!("{s:?}: {e}")))?;
    n.set_fqdn(true);
    Ok(n)
}

fn rdata_for_ip(ip: IpAddr) -> RData {
    match ip {
        IpAddr::V4(a) => RData::A(A(a)),
        IpAddr::V6(a) => RData::AAAA(AAAA(a)),
    }
}

/// SOA timers for zones derived from the site.
const REFRESH: i32 = 3600;
const RETRY: i32 = 600;
const EXPIRE: i32 = 1_209_600;

/// Every zone the site asks for: the cluster's (or the base domain's) and
/// the reverse zones of its subnets, all with `serial`.
pub fn from_site(site: &Site, serial: u32) -> Result<Vec<Zone>, ZoneError> {
    let d = &site.dns;
    let ns0 = d.nameservers.first().ok_or(ZoneError::NoNameserver)?;
    let domain = site.cluster.domain();
    let ttl = d.ttl.as_secs() as u32;
    let neg = d.negative_ttl.as_secs() as u32;
    let fwd_origin = if d.serve_base_domain {
        site.cluster.base_domain.clone()
    } else {
        domain.clone()
    };
    let mut origins = vec![fwd_origin.clone()];
    origins.extend(site::dns::reverse_zones(
        &site
            .networks
            .iter()
            .flat_map(|n| n.subnets.iter().map(|s| s.net))
            .collect::<Vec<_>>(),
    ));
    let mut zones = Vec::new();
    for o in &origins {
        let origin = name(o)?;
        let soa = SOA::new(
            name(&ns0.name)?,
            name(&format!("hostmaster.{o}"))?,
            serial,
            REFRESH,
            RETRY,
            EXPIRE,
            neg,
        );
        let mut records = vec![Record::from_rdata(origin.clone(), ttl, RData::SOA(soa))];
        for ns in &d.nameservers {
            records.push(Record::from_rdata(
                origin.clone(),
                ttl,
                RData::NS(NS(name(&ns.name)?)),
            ));
        }
        zones.push(Zone { origin, records });
    }
    let mut all: Vec<Record> = Vec::new();
    for ns in &d.nameservers {
        all.push(Record::from_rdata(
            name(&ns.name)?,
            ttl,
            rdata_for_ip(ns.ip),
        ));
    }
    for vip in site.vips.apis() {
        for n in ["api", "api-int"] {
            all.push(Record::from_rdata(
                name(&format!("{n}.{domain}"))?,
                ttl,
                rdata_for_ip(vip),
            ));
        }
    }
    for vip in site.vips.ingresses() {
        all.push(Record::from_rdata(
            name(&format!("*.apps.{domain}"))?,
            ttl,
            rdata_for_ip(vip),
        ));
    }
    for n in &site.nodes {
        let fqdn = format!("{}.{domain}", n.name);
        for ip in n.ips() {
            all.push(Record::from_rdata(name(&fqdn)?, ttl, rdata_for_ip(ip)));
            all.push(Record::from_rdata(
                name(&site::dns::reverse_name(ip))?,
                ttl,
                RData::PTR(PTR(name(&fqdn)?)),
            ));
        }
    }
    for vip in site.vips.apis() {
        if !site.nodes.iter().any(|n| n.has_ip(vip)) {
            all.push(Record::from_rdata(
                name(&site::dns::reverse_name(vip))?,
                ttl,
                RData::PTR(PTR(name(&format!("api.{domain}"))?)),
            ));
        }
    }
    for r in &d.records {
        let rd = match &r.data {
            SiteRData::A(a) => RData::A(A(*a)),
            SiteRData::Aaaa(a) => RData::AAAA(AAAA(*a)),
            SiteRData::Cname(t) => RData::CNAME(CNAME(name(t)?)),
            SiteRData::Ns(t) => RData::NS(NS(name(t)?)),
            SiteRData::Ptr(t) => RData::PTR(PTR(name(t)?)),
            SiteRData::Mx {
                preference,
                exchange,
            } => RData::MX(MX::new(*preference, name(exchange)?)),
            SiteRData::Srv {
                priority,
                weight,
                port,
                target,
            } => RData::SRV(SRV::new(*priority, *weight, *port, name(target)?)),
            SiteRData::Txt(t) => RData::TXT(TXT::from_bytes(t.as_bytes().chunks(255).collect())),
        };
        all.push(Record::from_rdata(
            name(&r.name)?,
            r.ttl.map(|t| t.as_secs() as u32).unwrap_or(ttl),
            rd,
        ));
    }
    // Each zone's records, to leave out a record already there (the same
    // name, type and data) without comparing it with every one: the
    // comparison of each with each made a 10 000-node site take seconds.
    // Only a record whose owner and type another record has can be one
    // already there: the others' data is not formatted for the comparison
    // (each node's PTR target, formatted twice, was a tenth of a reload).
    let shared = shared_owner_types(zones.iter().flat_map(|z| &z.records).chain(&all));
    let mut seen: Vec<HashSet<DedupKey>> = zones
        .iter()
        .map(|z| {
            z.records
                .iter()
                .filter(|r| shared.contains(&owner_type(r)))
                .map(dedup_key)
                .collect()
        })
        .collect();
    for r in all {
        // The deepest zone holding the name; names in no zone (a PTR of a
        // node whose subnet's zone is elsewhere) are left out.
        let Some(i) = (0..zones.len())
            .filter(|&i| zones[i].origin.zone_of(r.name()))
            .max_by_key(|&i| zones[i].origin.num_labels())
        else {
            continue;
        };
        if !shared.contains(&owner_type(&r)) || seen[i].insert(dedup_key(&r)) {
            zones[i].records.push(r);
        }
    }
    for z in &zones {
        check(z, &site.source)?;
    }
    Ok(zones)
}

/// Reads master files: each `(path, origin)`; the origin may also come from
/// the file's `$ORIGIN`. Every zone must have one SOA, at its origin.
pub fn from_files(files: &[(PathBuf, Option<String>)]) -> Result<Vec<Zone>, ZoneError> {
    let mut zones = Vec::new();
    for (path, origin) in files {
        let text = std::fs::read_to_string(path).map_err(|e| ZoneError::Read(path.clone(), e))?;
        let origin = origin.as_deref().map(name).transpose()?;
        let (origin, sets) =
            hickory_proto::serialize::txt::Parser::new(text, Some(path.clone()), origin)
                .parse()
                .map_err(|e| ZoneError::Parse(path.clone(), e.to_string()))?;
        let mut soa = Vec::new();
        let mut records = Vec::new();
        for set in sets.values() {
            for r in set.records_without_rrsigs() {
                if r.record_type() == RecordType::SOA {
                    soa.push(r.clone());
                } else {
                    records.push(r.clone());
                }
            }
        }
        let invalid = |reason: String| ZoneError::Invalid {
            file: path.clone(),
            reason,
        };
        if soa.len() != 1 || soa[0].name() != &origin {
            return Err(invalid(format!(
                "want exactly one SOA, at the origin {origin}"
            )));
        }
        soa.extend(records);
        let z = Zone {
            origin,
            records: soa,
        };
        check(&z, path)?;
        zones.push(z);
    }
    Ok(zones)
}

/// What no zone may hold: names outside it, a CNAME beside other data,
/// two zones with one origin.
fn check(z: &Zone, file: &Path) -> Result<(), ZoneError> {
    let invalid = |reason: String| ZoneError::Invalid {
        file: file.to_path_buf(),
        reason,
    };
    // Each owner (its lower-case wire form) and whether it has a CNAME.
    // A hash map: a BTreeSet of names compared label by label made this
    // check a quarter of a 50 000-node reload, and more than linear.
    let mut owners: HashMap<Vec<u8>, bool, FixedState> =
        HashMap::with_capacity_and_hasher(z.records.len(), FixedState::default());
    for r in &z.records {
        if !z.origin.zone_of(r.name()) {
            return Err(invalid(format!(
                "{} is outside the zone {}",
                r.name(),
                z.origin
            )));
        }
        let cname = r.record_type() == RecordType::CNAME;
        match owners.entry(lower_wire(r.name())) {
            Entry::Vacant(e) => {
                e.insert(cname);
            }
            Entry::Occupied(e) if cname || *e.get() => {
                return Err(invalid(format!("{}: a CNAME beside other data", r.name())));
            }
            Entry::Occupied(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lab() -> Vec<Zone> {
        let site =
            site::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab/site.yaml"))
                .unwrap();
        from_site(&site, 1).unwrap()
    }

    /// A record the site lists twice, or that a node already has (its A
    /// record, in other letter case), is in the zone once.
    #[test]
    fn a_record_is_in_its_zone_once() {
        let mut site =
            site::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab/site.yaml"))
                .unwrap();
        let a = |name: &str| site::dns::Record {
            name: name.into(),
            ttl: None,
            data: SiteRData::A("10.77.0.11".parse().unwrap()),
        };
        site.dns.records.push(a("MASTER-0.lab.example.test."));
        site.dns.records.push(a("extra.lab.example.test."));
        site.dns.records.push(a("extra.lab.example.test."));
        let zones = from_site(&site, 1).unwrap();
        let fwd = zones
            .iter()
            .find(|z| z.origin.to_ascii() == "lab.example.test.")
            .unwrap();
        let count = |n: &str| {
            fwd.records
                .iter()
                .filter(|r| {
                    r.record_type() == RecordType::A && r.name().to_ascii().eq_ignore_ascii_case(n)
                })
                .count()
        };
        assert_eq!(count("master-0.lab.example.test."), 1);
        assert_eq!(count("extra.lab.example.test."), 1);
    }

    /// The fast comparison says what comparing the zones' text says.
    #[test]
    fn same_content_whatever_the_serial_and_not_after_a_change() {
        for z in lab() {
            let mut other = z.clone();
            other.set_serial(99);
            assert!(z.same_content(&other) && z.content() == other.content());
            let mut ttl = other.clone();
            let last = ttl.records.len() - 1;
            let t = ttl.records[last].ttl();
            ttl.records[last].set_ttl(t + 1);
            assert!(!z.same_content(&ttl) && z.content() != ttl.content());
            let mut fewer = other.clone();
            fewer.records.pop();
            assert!(!z.same_content(&fewer) && z.content() != fewer.content());
            let mut soa = other.clone();
            let s = soa.soa().clone();
            soa.records[0].set_data(RData::SOA(SOA::new(
                s.mname().clone(),
                s.rname().clone(),
                s.serial(),
                s.refresh() + 1,
                s.retry(),
                s.expire(),
                s.minimum(),
            )));
            assert!(!z.same_content(&soa) && z.content() != soa.content());
        }
    }

    /// A zone file with a CNAME beside other data at one name, in any
    /// letter case, is refused; other types may share a name.
    #[test]
    fn a_cname_beside_other_data_is_refused_in_any_letter_case() {
        let dir = tempfile::tempdir().unwrap();
        let load = |extra: &str| {
            let path = dir.path().join("example.test.zone");
            std::fs::write(
                &path,
                format!(
                    "$ORIGIN example.test.\n$TTL 300\n\
                     @ IN SOA ns1 hostmaster 1 3600 600 1209600 300\n\
                     @ IN NS ns1\nns1 IN A 10.0.0.1\n\
                     www IN A 10.0.0.2\nwww IN AAAA ::2\n{extra}"
                ),
            )
            .unwrap();
            from_files(&[(path, None)])
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        assert_eq!(load(""), Ok(()));
        assert_eq!(load("alias IN CNAME www\n"), Ok(()));
        for extra in [
            "WWW IN CNAME ns1\n",
            "alias IN CNAME www\nALIAS IN TXT \"x\"\n",
        ] {
            let r = load(extra);
            assert!(
                r.as_ref()
                    .is_err_and(|e| e.contains("a CNAME beside other data")),
                "{extra:?}: {r:?}"
            );
        }
    }
}
