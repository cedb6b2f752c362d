//! Discovered machines: with `discovery.enabled`, a machine whose MAC is in
//! no node is sent a script that reports what iPXE knows of it (every NIC's
//! MAC, SMBIOS manufacturer, product, serial, UUID, asset tag, build
//! architecture, platform) to `GET /discover?…`; bootd keeps it here until an
//! operator adopts it as a node (`bootd discovered adopt`, `POST
//! /v1/discovered/{key}/adopt`), and answers it with a script that waits and
//! asks again (so the adopted machine boots as its node without a power
//! cycle) or powers it off.
//!
//! A machine is keyed by its SMBIOS UUID when it has a real one, else by the
//! MAC it booted from. Anyone on the provisioning network can report, so:
//! - a MAC is *verified* only by a report it booted from (`mac=`), sent from
//!   that MAC's own lease when bootd hands out the addresses (a report from
//!   anywhere else is refused), else from the address the host's neighbour
//!   table gives that MAC; the other NICs a report lists (`nic0..3`) are
//!   shown but never verified by it, and an adopt takes only verified MACs;
//! - a key is a *claim*: reports that agree on their MACs (or come from a
//!   MAC the claim already verified) are one claim; a report of the same key
//!   with other MACs is a second claim, kept beside the first as a conflict
//!   (`conflicts`), never silently the first one's: adopting such a key is
//!   refused until the operator names the claim by its MAC;
//! - every value is checked (MACs parsed, text printable, at most 128 bytes);
//! - reports are rate-limited per source address and per MAC
//!   ([`rate`]), and written by a thread of their own ([`store`]);
//! - the list is bounded: one source holds at most [`PER_SOURCE`] machines
//!   (its own oldest makes room for its next), and when the list is full the
//!   source holding the most gives up its oldest, so one lease reporting
//!   ever new UUIDs cannot evict the machines that wait to be adopted.
//!
//! Kept in `<stateDir>/discovered.json`; a file that does not parse is moved
//! aside (`discovered.json.bad`) and the list starts empty.

pub mod rate;
pub mod store;

use runtime::sync::lock;
use serde::{Deserialize, Serialize};
use site::Mac;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::{Arc, Mutex};

pub const FILE: &str = "discovered.json";
/// The most machines kept.
pub const MAX: usize = 1024;
/// The most machines one source address holds.
pub const PER_SOURCE: usize = 4;
/// The most claims to one key (the first and three conflicting ones).
pub const MAX_CLAIMS: usize = 4;
const MAX_TEXT: usize = 128;

/// One discovered machine, as shown by the API: its first claim's MACs and
/// facts, and any other claims to its key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Machine {
    /// Its UUID, or the MAC it booted from when it has no UUID.
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// The MAC it booted from first, then its other NICs'.
    pub macs: Vec<String>,
    /// Those of `macs` a report verified (see the module's note): the MACs
    /// an adopt gives the node.
    #[serde(default)]
    pub verified: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manufacturer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asset: Option<String>,
    /// iPXE's `${buildarch}`: x86_64, i386, arm64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buildarch: Option<String>,
    /// iPXE's `${platform}`: pcbios, efi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// The address it reported from (its lease from the pool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<IpAddr>,
    /// Milliseconds since the epoch.
    pub first_seen: i64,
    pub last_seen: i64,
    pub reports: u64,
    /// What its live system reported (`discovery.inspect`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<site::hardware::Inventory>,
    /// Other reporters' claims to this key, with other MACs: a conflict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<Claim>,
}

/// One reporter's claim to a key: what its reports said and where from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Claim {
    pub macs: Vec<String>,
    #[serde(default)]
    pub verified: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product: Option<String>,
    pub first_seen: i64,
    pub last_seen: i64,
    pub reports: u64,
}

impl Machine {
    /// Its first claim.
    fn claim(&self) -> Claim {
        Claim {
            macs: self.macs.clone(),
            verified: self.verified.clone(),
            ip: self.ip,
            serial: self.serial.clone(),
            product: self.product.clone(),
            first_seen: self.first_seen,
            last_seen: self.last_seen,
            reports: self.reports,
        }
    }

    /// The MAC it booted from, verified.
    pub fn boot_verified(&self) -> bool {
        self.macs.first().is_some_and(|m| self.verified.contains(m))
    }
}

/// Why a report was not kept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("no MAC, or not a MAC")]
    NoMac,
    #[error("the report does not come from the address leased to its MAC")]
    NotItsLease,
    #[error("too many reports from this address or for this MAC: report again later")]
    Limited,
    #[error("cannot write {FILE}: {0}")]
    Store(String),
}

/// Why an adopt cannot tell which machine it names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unclear {
    #[error("several discovered machines report from this MAC: adopt by key (UUID)")]
    Ambiguous,
    #[error("{key} is claimed by {} reporters with other MACs (booted from {}): check which is the machine you mean (its label, its BMC) and adopt it by the MAC it booted from", .booted_from.len(), .booted_from.join(", "))]
    Conflict {
        key: String,
        booted_from: Vec<String>,
    },
}

/// What an adopt makes a node of: one claim's verified MACs, and the
/// machine's facts when it is the first claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adoptable {
    pub key: String,
    /// The verified MACs, the one it booted from first.
    pub macs: Vec<String>,
    /// Listed by its reports, not verified: not given to the node.
    pub unverified: Vec<String>,
    pub ip: Option<IpAddr>,
    pub buildarch: Option<String>,
    /// Its inventory (the first claim's only: an inspection ran for it).
    pub inventory: Option<site::hardware::Inventory>,
}

/// A report's raw query values, by name.
pub type Query<'a> = BTreeMap<&'a str, String>;

/// Printable ASCII, at most 128 bytes; empty is none.
fn text(v: Option<&String>) -> Option<String> {
    let v = v?.trim();
    if v.is_empty() || v.len() > MAX_TEXT || !v.chars().all(|c| (' '..='~').contains(&c)) {
        return None;
    }
    Some(v.to_string())
}

/// A UUID that says something (SMBIOS has all-zero and all-F placeholders).
fn uuid(v: Option<&String>) -> Option<String> {
    let v = v?.trim().to_ascii_lowercase();
    let hex: String = v.chars().filter(|c| *c != '-').collect();
    let shaped = v.len() == 36
        && v.chars().enumerate().all(|(i, c)| {
            if [8, 13, 18, 23].contains(&i) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        });
    let placeholder = hex.chars().all(|c| c == '0') || hex.chars().all(|c| c == 'f');
    (shaped && !placeholder).then_some(v)
}

/// The machine a report describes (not yet merged with what was known);
/// `verified`: the MAC it booted from is proven (see the module's note).
pub fn from_report(
    q: &Query<'_>,
    ip: Option<IpAddr>,
    now_ms: i64,
    verified: bool,
) -> Result<Machine, Refused> {
    let first: Mac = q
        .get("mac")
        .and_then(|m| m.parse().ok())
        .ok_or(Refused::NoMac)?;
    let mut macs = vec![first.to_string()];
    for i in 0..8 {
        if let Some(m) = q
            .get(format!("nic{i}").as_str())
            .and_then(|m| m.parse::<Mac>().ok())
        {
            let m = m.to_string();
            if !macs.contains(&m) {
                macs.push(m);
            }
        }
    }
    let uuid = uuid(q.get("uuid"));
    Ok(Machine {
        key: uuid.clone().unwrap_or_else(|| first.to_string()),
        uuid,
        verified: if verified {
            vec![first.to_string()]
        } else {
            Vec::new()
        },
        macs,
        manufacturer: text(q.get("manufacturer")),
        product: text(q.get("product")),
        serial: text(q.get("serial")),
        asset: text(q.get("asset")),
        buildarch: text(q.get("buildarch")),
        platform: text(q.get("platform")),
        ip,
        first_seen: now_ms,
        last_seen: now_ms,
        reports: 1,
        inventory: None,
        conflicts: Vec::new(),
    })
}

/// The MAC the host's IPv4 neighbour table (`/proc/net/arp` text) gives
/// `ip`, complete entries only.
pub fn arp_mac(table: &str, ip: Ipv4Addr) -> Option<String> {
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // IP address, HW type, Flags (0x2: complete), HW address, Mask, Device.
        let complete = f
            .get(2)
            .and_then(|x| u32::from_str_radix(x.trim_start_matches("0x"), 16).ok())
            .is_some_and(|flags| flags & 0x2 != 0);
        (f.len() >= 4 && f[0].parse() == Ok(ip) && complete)
            .then(|| f[3].parse::<Mac>().ok().map(|m| m.to_string()))
            .flatten()
    })
}

/// Whether a report's MACs (the one it booted from first) are this claim's:
/// the same MACs, or a MAC the claim verified reporting again.
fn same_claim(c: &Claim, macs: &[String]) -> bool {
    let mut a = c.macs.clone();
    let mut b = macs.to_vec();
    a.sort();
    b.sort();
    a == b || macs.first().is_some_and(|m| c.verified.contains(m))
}

/// `c` updated by report `m` of the same claim: a verified report (or any,
/// while nothing is verified) says where the claim is and what it lists;
/// an unverified one is only counted.
fn merge_claim(c: &mut Claim, m: &Machine) {
    c.last_seen = m.last_seen;
    c.reports = c.reports.saturating_add(1);
    let says = m.boot_verified() || c.verified.is_empty();
    if says {
        c.macs = m.macs.clone();
        c.ip = m.ip;
        c.serial = m.serial.clone();
        c.product = m.product.clone();
    }
    let mut verified: Vec<String> = c
        .verified
        .iter()
        .chain(&m.verified)
        .filter(|v| c.macs.contains(v))
        .cloned()
        .collect();
    verified.sort_by_key(|v| c.macs.iter().position(|x| x == v));
    verified.dedup();
    c.verified = verified;
}

/// The machine and its claims after report `m` of the same key; whether
/// anything but times and counts changed.
fn merge(old: &Machine, m: Machine) -> (Machine, bool) {
    let mut claims: Vec<Claim> = std::iter::once(old.claim())
        .chain(old.conflicts.iter().cloned())
        .collect();
    let mut next = old.clone();
    match claims.iter().position(|c| same_claim(c, &m.macs)) {
        Some(0) => {
            merge_claim(&mut claims[0], &m);
            if m.boot_verified() || old.verified.is_empty() {
                next.manufacturer = m.manufacturer.clone();
                next.asset = m.asset.clone();
                next.buildarch = m.buildarch.clone();
                next.platform = m.platform.clone();
            }
        }
        Some(i) => merge_claim(&mut claims[i], &m),
        None => {
            if claims.len() >= MAX_CLAIMS {
                // The first stays; the conflicting claim seen longest ago goes.
                if let Some(i) = (1..claims.len()).min_by_key(|i| claims[*i].last_seen) {
                    claims.remove(i);
                }
            }
            claims.push(m.claim());
        }
    }
    let first = claims.remove(0);
    next.macs = first.macs;
    next.verified = first.verified;
    next.ip = first.ip;
    next.serial = first.serial;
    next.product = first.product;
    next.last_seen = m.last_seen.max(old.last_seen);
    next.reports = first.reports;
    next.conflicts = claims;
    let quiet = |x: &Machine| Machine {
        last_seen: 0,
        reports: 0,
        conflicts: x
            .conflicts
            .iter()
            .map(|c| Claim {
                last_seen: 0,
                reports: 0,
                ..c.clone()
            })
            .collect(),
        ..x.clone()
    };
    let changed = quiet(old) != quiet(&next);
    (next, changed)
}

/// The key of the machine to drop for a new one from `source`: its own
/// oldest when it holds [`PER_SOURCE`] already; when the list is full, the
/// oldest of the source holding the most (of anyone's, when none holds two).
fn to_evict(all: &BTreeMap<String, Machine>, source: Option<IpAddr>, max: usize) -> Option<String> {
    let oldest = |of: &dyn Fn(&Machine) -> bool| {
        all.values()
            .filter(|m| of(m))
            .min_by_key(|m| (m.last_seen, m.key.clone()))
            .map(|m| m.key.clone())
    };
    if source.is_some() && all.values().filter(|m| m.ip == source).count() >= PER_SOURCE {
        return oldest(&|m| m.ip == source);
    }
    if all.len() < max {
        return None;
    }
    let mut held: HashMap<Option<IpAddr>, usize> = HashMap::new();
    for m in all.values() {
        *held.entry(m.ip).or_default() += 1;
    }
    let most = held.values().copied().max().unwrap_or(0);
    if most < 2 {
        return oldest(&|_| true);
    }
    oldest(&|m| held.get(&m.ip) == Some(&most))
}

#[derive(Debug)]
pub struct Discovered {
    max: usize,
    machines: Arc<Mutex<BTreeMap<String, Machine>>>,
    rate: Mutex<rate::Rate>,
    writer: store::Writer,
}

impl Discovered {
    /// Reads `<state_dir>/discovered.json`; a missing file is none.
    pub fn open(state_dir: &Path) -> io::Result<Discovered> {
        let path = state_dir.join(FILE);
        let list: Vec<Machine> = match std::fs::read(&path) {
            Ok(b) => match serde_json::from_slice(&b) {
                Ok(l) => l,
                Err(e) => {
                    // What machines reported is not worth refusing to start
                    // for: they report again.
                    tracing::warn!(error = %e, "{FILE} does not parse: moved to {FILE}.bad, starting empty");
                    std::fs::rename(&path, path.with_extension("json.bad"))?;
                    Vec::new()
                }
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        let machines = Arc::new(Mutex::new(
            list.into_iter()
                .map(|m| (m.key.clone(), m))
                .collect::<BTreeMap<_, _>>(),
        ));
        let m = Arc::clone(&machines);
        let writer = store::Writer::start(path, move || {
            let all = lock(&m);
            let list: Vec<&Machine> = all.values().collect();
            serde_json::to_vec_pretty(&list).unwrap_or_default()
        })?;
        Ok(Discovered {
            max: MAX,
            machines,
            rate: Mutex::new(rate::Rate::default()),
            writer,
        })
    }

    /// With room for `max` machines (tests).
    pub fn with_max(mut self, max: usize) -> Discovered {
        self.max = max;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Machine>> {
        lock(&self.machines)
    }

    /// Whether a report from `source` naming `mac` is taken now ([`rate`]).
    pub fn admit(&self, source: IpAddr, mac: &str, now: std::time::Instant) -> bool {
        lock(&self.rate).admit(
            &[rate::Key::Source(source), rate::Key::Mac(mac.to_string())],
            now,
        )
    }

    /// Waits until everything changed so far is on disk (tests, shutdown).
    pub fn flush(&self) -> Result<(), Refused> {
        let g = self.writer.changed();
        self.writer.durable(g).map_err(Refused::Store)
    }

    /// Keeps a report: a new machine, what a known claim says now, or a
    /// claim in conflict with the first. Memory changes at once; the file
    /// is written by its own thread when something but times and counts
    /// changed.
    pub fn report(&self, m: Machine) -> Result<Machine, Refused> {
        let mut all = self.lock();
        let (merged, changed) = match all.get(&m.key) {
            Some(old) => merge(old, m),
            None => {
                if let Some(k) = to_evict(&all, m.ip, self.max) {
                    all.remove(&k);
                }
                (m, true)
            }
        };
        all.insert(merged.key.clone(), merged.clone());
        drop(all);
        if changed {
            self.writer.changed();
        }
        Ok(merged)
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Machines whose key more than one reporter claims.
    pub fn conflicts(&self) -> usize {
        self.lock()
            .values()
            .filter(|m| !m.conflicts.is_empty())
            .count()
    }

    /// Every discovered machine, most recently seen first.
    pub fn list(&self) -> Vec<Machine> {
        let mut v: Vec<Machine> = self.lock().values().cloned().collect();
        v.sort_by(|a, b| b.last_seen.cmp(&a.last_seen).then(a.key.cmp(&b.key)));
        v
    }

    /// The machine with this key exactly (the inspection's routes).
    pub fn get(&self, key: &str) -> Option<Machine> {
        self.lock().get(key).cloned()
    }

    /// What an adopt of `key_or_mac` makes a node of: the machine with this
    /// key (refused while other reporters claim it), else the one claim
    /// that verified this MAC. A MAC only listed by a report, unverified,
    /// names nothing: whoever listed it need not be that machine.
    pub fn adoptable(&self, key_or_mac: &str) -> Result<Option<Adoptable>, Unclear> {
        let k = key_or_mac.trim().to_ascii_lowercase();
        let mac = k.parse::<Mac>().ok().map(|m| m.to_string());
        let all = self.lock();
        let of = |m: &Machine, c: &Claim, first: bool| Adoptable {
            key: m.key.clone(),
            macs: c.verified.clone(),
            unverified: c
                .macs
                .iter()
                .filter(|x| !c.verified.contains(x))
                .cloned()
                .collect(),
            ip: c.ip,
            buildarch: m.buildarch.clone(),
            inventory: if first { m.inventory.clone() } else { None },
        };
        if let Some(m) = all.get(&k) {
            if !m.conflicts.is_empty() {
                return Err(Unclear::Conflict {
                    key: m.key.clone(),
                    booted_from: std::iter::once(&m.macs)
                        .chain(m.conflicts.iter().map(|c| &c.macs))
                        .filter_map(|x| x.first().cloned())
                        .collect(),
                });
            }
            return Ok(Some(of(m, &m.claim(), true)));
        }
        let Some(mac) = mac else { return Ok(None) };
        let mut hits = all.values().flat_map(|m| {
            std::iter::once(m.claim())
                .chain(m.conflicts.iter().cloned())
                .enumerate()
                .filter(|(_, c)| c.verified.contains(&mac))
                .map(move |(i, c)| of(m, &c, i == 0))
        });
        match (hits.next(), hits.next()) {
            (Some(a), None) => Ok(Some(a)),
            (None, _) => Ok(None),
            (Some(_), Some(_)) => Err(Unclear::Ambiguous),
        }
    }

    /// Records the inventory machine `key` reported, on disk before this
    /// returns; `None`: no such machine.
    pub fn set_inventory(
        &self,
        key: &str,
        inv: site::hardware::Inventory,
    ) -> Result<Option<Machine>, Refused> {
        let mut all = self.lock();
        let Some(m) = all.get_mut(key) else {
            return Ok(None);
        };
        m.inventory = Some(inv);
        let m = m.clone();
        drop(all);
        let g = self.writer.changed();
        self.writer.durable(g).map_err(Refused::Store)?;
        Ok(Some(m))
    }

    /// Forgets a machine (it was adopted), on disk before this returns;
    /// `true` if it was there.
    pub fn remove(&self, key: &str) -> Result<bool, Refused> {
        if self.lock().remove(key).is_none() {
            return Ok(false);
        }
        let g = self.writer.changed();
        self.writer.durable(g).map_err(Refused::Store)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&'static str, &str)]) -> Query<'static> {
        pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn reports_are_checked_keyed_merged_and_kept() {
        let d = tempfile::tempdir().unwrap();
        let disc = Discovered::open(d.path()).unwrap();
        let r = q(&[
            ("mac", "52-54-00-12-34-56"),
            ("nic0", "52-54-00-12-34-56"),
            ("nic1", "52-54-00-12-34-57"),
            ("nic2", ""),
            ("uuid", "0F6A4C2E-0298-4CF2-B280-B4EC459AFDF0"),
            ("manufacturer", "QEMU"),
            ("serial", "bad\u{7}serial"),
            ("product", &"x".repeat(200)),
            ("buildarch", "x86_64"),
        ]);
        let m = from_report(&r, ip("10.77.0.200"), 1000, true).unwrap();
        assert_eq!(m.key, "0f6a4c2e-0298-4cf2-b280-b4ec459afdf0");
        assert_eq!(m.macs, vec!["52:54:00:12:34:56", "52:54:00:12:34:57"]);
        assert_eq!(
            m.verified,
            vec!["52:54:00:12:34:56"],
            "the MAC it booted from"
        );
        assert_eq!(m.manufacturer.as_deref(), Some("QEMU"));
        assert_eq!(m.serial, None, "control characters are refused");
        assert_eq!(m.product, None, "over 128 bytes is refused");
        disc.report(m.clone()).unwrap();
        let again = from_report(&r, ip("10.77.0.200"), 2000, true).unwrap();
        let kept = disc.report(again).unwrap();
        assert_eq!(
            (kept.first_seen, kept.last_seen, kept.reports),
            (1000, 2000, 2)
        );
        // The same machine (its verified MAC) listing one more NIC: the
        // same claim, the new NIC listed and not verified.
        let mut more = r.clone();
        more.insert("nic2", "52-54-00-12-34-58".into());
        let kept = disc
            .report(from_report(&more, ip("10.77.0.200"), 3000, true).unwrap())
            .unwrap();
        assert_eq!(kept.macs.len(), 3);
        assert_eq!(kept.verified, vec!["52:54:00:12:34:56"]);
        assert!(kept.conflicts.is_empty());
        // Found by key, or by a verified MAC; kept across a reopen.
        disc.flush().unwrap();
        drop(disc);
        let disc = Discovered::open(d.path()).unwrap();
        assert_eq!(disc.list()[0].macs.len(), 3);
        let a = disc.adoptable("52:54:00:12:34:56").unwrap().unwrap();
        assert_eq!(a.macs, vec!["52:54:00:12:34:56"]);
        assert_eq!(a.unverified, vec!["52:54:00:12:34:57", "52:54:00:12:34:58"]);
        assert!(disc
            .adoptable("0F6A4C2E-0298-4CF2-B280-B4EC459AFDF0")
            .unwrap()
            .is_some());
        assert_eq!(
            disc.adoptable("52:54:00:12:34:57").unwrap(),
            None,
            "a MAC only listed names nothing"
        );
        assert!(disc.remove(&m.key).unwrap());
        assert!(disc.list().is_empty());
        // No UUID (or a placeholder one): keyed by the MAC.
        let r = q(&[
            ("mac", "52:54:00:aa:00:01"),
            ("uuid", "00000000-0000-0000-0000-000000000000"),
        ]);
        assert_eq!(
            from_report(&r, None, 1, true).unwrap().key,
            "52:54:00:aa:00:01"
        );
        assert_eq!(
            from_report(&q(&[("mac", "zz")]), None, 1, true),
            Err(Refused::NoMac)
        );
    }

    /// The attack: a neighbour that saw a victim's PXE DISCOVER (MAC B,
    /// UUID U) reports `uuid=U&nic1=B` from its own lease first. Before,
    /// the victim's report was refused and adopting U made a node of
    /// [A, B]: A got the node's address and Ignition.
    #[test]
    fn a_claim_to_another_machines_uuid_is_a_visible_conflict() {
        let d = tempfile::tempdir().unwrap();
        let disc = Discovered::open(d.path()).unwrap();
        let u = "2c4e28ba-2fa1-11d2-883f-0016d3cca427";
        let (a, b, c) = (
            "02:66:66:66:66:0a",
            "52:54:00:00:00:0b",
            "52:54:00:00:00:0c",
        );
        let attacker = q(&[("mac", a), ("nic1", b), ("uuid", u), ("serial", "FAKE")]);
        disc.report(from_report(&attacker, ip("10.77.0.201"), 1, true).unwrap())
            .unwrap();
        // Alone, its claim to U gives a node only A, its own verified MAC.
        let only = disc.adoptable(u).unwrap().unwrap();
        assert_eq!(
            (only.macs, only.unverified),
            (vec![a.to_string()], vec![b.to_string()])
        );
        // The victim reports U from its own lease: kept, as a conflict.
        let victim = q(&[("mac", b), ("nic1", c), ("uuid", u), ("serial", "S-REAL")]);
        let m = disc
            .report(from_report(&victim, ip("10.77.0.202"), 2, true).unwrap())
            .unwrap();
        assert_eq!(m.macs, vec![a, b], "the first claim stays as it was");
        assert_eq!(m.conflicts.len(), 1);
        assert_eq!(m.conflicts[0].macs, vec![b, c]);
        assert_eq!(m.conflicts[0].verified, vec![b]);
        assert_eq!(m.conflicts[0].serial.as_deref(), Some("S-REAL"));
        assert_eq!(disc.conflicts(), 1);
        // Adopting U is refused, naming both; by B, the victim's MACs only.
        let e = disc.adoptable(u).unwrap_err();
        assert!(
            e.to_string().contains(&format!("booted from {a}, {b}")),
            "{e}"
        );
        let v = disc.adoptable(b).unwrap().unwrap();
        assert_eq!(v.macs, vec![b]);
        assert_eq!(v.ip, ip("10.77.0.202"));
        assert_eq!(disc.adoptable(a).unwrap().unwrap().macs, vec![a]);
        assert_eq!(disc.adoptable(c).unwrap(), None);
        // Each reporting again stays its own claim; a third and fourth
        // conflict are kept, a fifth replaces the one seen longest ago.
        disc.report(from_report(&victim, ip("10.77.0.202"), 3, true).unwrap())
            .unwrap();
        disc.report(from_report(&attacker, ip("10.77.0.201"), 4, true).unwrap())
            .unwrap();
        for (i, t) in [(1, 10), (2, 11), (3, 12)] {
            let r = q(&[("mac", &format!("02:66:66:66:66:{i:02x}")), ("uuid", u)]);
            disc.report(from_report(&r, ip("10.77.0.203"), t, true).unwrap())
                .unwrap();
        }
        let m = &disc.list()[0];
        assert_eq!(m.macs, vec![a, b]);
        assert_eq!(m.conflicts.len(), MAX_CLAIMS - 1);
        assert!(
            !m.conflicts.iter().any(|c| c.macs[0] == b),
            "the victim's claim, seen longest ago, made room: {m:?}"
        );
        assert_eq!(m.reports, 2);
    }

    /// Without a verified MAC (bootd does not hand out the addresses and
    /// the neighbour table does not vouch): kept, shown, adopted with no MAC.
    #[test]
    fn an_unverified_report_is_listed_but_verifies_nothing() {
        let d = tempfile::tempdir().unwrap();
        let disc = Discovered::open(d.path()).unwrap();
        let r = q(&[("mac", "52:54:00:00:00:0d"), ("product", "spoofed")]);
        disc.report(from_report(&r, ip("10.9.9.9"), 1, false).unwrap())
            .unwrap();
        // Its key is that MAC: found, with no MAC to give the node (the
        // adopt asks the operator to name them).
        let a = disc.adoptable("52:54:00:00:00:0d").unwrap().unwrap();
        assert!(a.macs.is_empty());
        assert_eq!(a.unverified, vec!["52:54:00:00:00:0d"]);
        // The same MAC verified from its own address: it says where it is.
        let real = q(&[("mac", "52:54:00:00:00:0d"), ("product", "real")]);
        let m = disc
            .report(from_report(&real, ip("10.9.0.13"), 2, true).unwrap())
            .unwrap();
        assert_eq!(
            (m.ip, m.product.as_deref()),
            (ip("10.9.0.13"), Some("real"))
        );
        // An unverified report after that only counts.
        let m = disc
            .report(from_report(&r, ip("10.9.9.9"), 3, false).unwrap())
            .unwrap();
        assert_eq!(
            (m.ip, m.product.as_deref(), m.reports),
            (ip("10.9.0.13"), Some("real"), 3)
        );
        assert!(m.boot_verified());
    }

    #[test]
    fn the_neighbour_table_gives_complete_entries_only() {
        let table =
            "IP address       HW type     Flags       HW address            Mask     Device\n\
                     10.77.0.200      0x1         0x2         52:54:00:77:00:c1     *        br0\n\
                     10.77.0.201      0x1         0x0         00:00:00:00:00:00     *        br0\n";
        assert_eq!(
            arp_mac(table, "10.77.0.200".parse().unwrap()).as_deref(),
            Some("52:54:00:77:00:c1")
        );
        assert_eq!(arp_mac(table, "10.77.0.201".parse().unwrap()), None);
        assert_eq!(arp_mac(table, "10.77.0.9".parse().unwrap()), None);
    }

    #[test]
    fn the_list_is_bounded_by_evicting_the_oldest() {
        let d = tempfile::tempdir().unwrap();
        let disc = Discovered::open(d.path()).unwrap().with_max(16);
        let report = |i: u32, t: i64| {
            let mac = format!("02:00:00:00:{:02x}:{:02x}", i / 256, i % 256);
            let from = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            disc.report(from_report(&q(&[("mac", &mac)]), Some(from), t, true).unwrap())
                .unwrap()
        };
        for i in 0..16 {
            report(i, 1);
        }
        // A known machine reports again (seen later than the others)...
        assert_eq!(report(1, 5).reports, 2);
        // ...and a new one makes room by dropping the one seen longest ago.
        report(0xff00, 6);
        assert_eq!(disc.len(), 16);
        assert!(disc.adoptable("02:00:00:00:ff:00").unwrap().is_some());
        assert!(disc.adoptable("02:00:00:00:00:01").unwrap().is_some());
        assert!(disc.adoptable("02:00:00:00:00:00").unwrap().is_none());
        // A file that does not parse is moved aside.
        drop(disc);
        std::fs::write(d.path().join(FILE), b"{").unwrap();
        assert!(Discovered::open(d.path()).unwrap().is_empty());
        assert!(d.path().join("discovered.json.bad").exists());
    }

    /// The flood: one lease reporting ever new UUIDs. Before, each evicted
    /// a real machine once the list was full (1 024 reports emptied it).
    #[test]
    fn one_source_holds_its_share_and_never_evicts_the_others() {
        let d = tempfile::tempdir().unwrap();
        let real = |disc: &Discovered, i: u32| {
            let mac = format!("52:54:00:00:{:02x}:{:02x}", i / 256, i % 256);
            let from = IpAddr::from(std::net::Ipv4Addr::from(0x0a4d_0000 + i));
            disc.report(from_report(&q(&[("mac", &mac)]), Some(from), 1, true).unwrap())
                .unwrap();
        };
        let flood = |disc: &Discovered| {
            for i in 0..1000u32 {
                let u = format!("{i:08x}-0000-4000-8000-000000000001");
                let r = q(&[("mac", "02:66:66:66:66:66"), ("uuid", &u)]);
                disc.report(from_report(&r, ip("10.77.0.250"), 2 + i64::from(i), true).unwrap())
                    .unwrap();
            }
        };
        let flooder = |disc: &Discovered| {
            disc.list()
                .iter()
                .filter(|m| m.ip == ip("10.77.0.250"))
                .count()
        };
        // Room enough: the flood holds its share, its newest.
        let disc = Discovered::open(d.path()).unwrap();
        for i in 0..14 {
            real(&disc, i);
        }
        flood(&disc);
        assert_eq!(flooder(&disc), PER_SOURCE);
        assert_eq!(disc.len(), 14 + PER_SOURCE);
        assert!(disc.get("000003e7-0000-4000-8000-000000000001").is_some());
        drop(disc);
        // Full: the source holding the most gives way, never a real machine.
        std::fs::remove_file(d.path().join(FILE)).unwrap();
        let disc = Discovered::open(d.path()).unwrap().with_max(16);
        for i in 0..14 {
            real(&disc, i);
        }
        flood(&disc);
        assert_eq!((disc.len(), flooder(&disc)), (16, 2));
        real(&disc, 14);
        assert_eq!((disc.len(), flooder(&disc)), (16, 1));
        for i in 0..15 {
            let mac = format!("52:54:00:00:00:{i:02x}");
            assert!(disc.adoptable(&mac).unwrap().is_some(), "{mac} kept");
        }
        // Full of one machine per source: the one seen longest ago goes.
        real(&disc, 15);
        assert_eq!(disc.len(), 16);
        assert!(disc.adoptable("52:54:00:00:00:0f").unwrap().is_some());
    }
}
