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
//! - when bootd hands out the addresses, a report counts only from the
//!   address leased to the MAC it names (checked by the HTTP route);
//! - a machine's MACs are those of its first report: a later report under
//!   the same key with other MACs is refused (nobody can add their MAC to a
//!   machine an operator is about to adopt);
//! - every value is checked (MACs parsed, text printable, at most 128 bytes);
//! - the list is bounded: when full, the machine seen longest ago makes room
//!   (a real machine that waits reports again at every retry).
//!
//! Kept in `<stateDir>/discovered.json`, written atomically, before memory
//! changes, when a machine is new or its facts change; a file that does not
//! parse is moved aside (`discovered.json.bad`) and the list starts empty.

use serde::{Deserialize, Serialize};
use site::Mac;
use std::collections::BTreeMap;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub const FILE: &str = "discovered.json";
/// The most machines kept.
pub const MAX: usize = 1024;
const MAX_TEXT: usize = 128;

/// One discovered machine, as shown by the API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Machine {
    /// Its UUID, or the MAC it booted from when it has no UUID.
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// The MAC it booted from first, then its other NICs'.
    pub macs: Vec<String>,
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
}

/// Why a report was not kept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("no MAC, or not a MAC")]
    NoMac,
    #[error("a machine with this key reported other MACs before: kept as first reported")]
    Conflict,
    #[error("the report does not come from the address leased to its MAC")]
    NotItsLease,
    #[error("cannot write {FILE}: {0}")]
    Store(String),
}

/// Several discovered machines list the MAC an adopt named: use the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("several discovered machines list this MAC: adopt by key (UUID)")]
pub struct Ambiguous;

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

/// The machine a report describes (not yet merged with what was known).
pub fn from_report(q: &Query<'_>, ip: Option<IpAddr>, now_ms: i64) -> Result<Machine, Refused> {
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
    })
}

#[derive(Debug)]
pub struct Discovered {
    path: PathBuf,
    max: usize,
    machines: Mutex<BTreeMap<String, Machine>>,
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
        Ok(Discovered {
            path,
            max: MAX,
            machines: Mutex::new(list.into_iter().map(|m| (m.key.clone(), m)).collect()),
        })
    }

    /// With room for `max` machines (tests).
    pub fn with_max(mut self, max: usize) -> Discovered {
        self.max = max;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Machine>> {
        self.machines.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn save(&self, m: &BTreeMap<String, Machine>) -> Result<(), Refused> {
        let list: Vec<&Machine> = m.values().collect();
        let json = serde_json::to_vec_pretty(&list).map_err(|e| Refused::Store(e.to_string()))?;
        crate::state::write_atomic(&self.path, &json, 0o644)
            .map_err(|e| Refused::Store(e.to_string()))
    }

    /// Keeps a report: a new machine, or what a known one says now. The
    /// file is written when something but the time and count changed.
    pub fn report(&self, m: Machine) -> Result<Machine, Refused> {
        let mut all = self.lock();
        let (merged, changed) = match all.get(&m.key) {
            Some(old) if old.macs != m.macs => return Err(Refused::Conflict),
            Some(old) => {
                let mut n = m.clone();
                n.first_seen = old.first_seen;
                n.reports = old.reports.saturating_add(1);
                // A report from iPXE says nothing of its inventory: kept.
                n.inventory = n.inventory.or_else(|| old.inventory.clone());
                let same = Machine {
                    last_seen: 0,
                    reports: 0,
                    ..old.clone()
                } == Machine {
                    last_seen: 0,
                    reports: 0,
                    ..n.clone()
                };
                (n, !same)
            }
            None => (m, true),
        };
        let mut next = all.clone();
        if !next.contains_key(&merged.key) && next.len() >= self.max {
            // Full: the machine seen longest ago makes room.
            if let Some(oldest) = next
                .values()
                .min_by_key(|x| (x.last_seen, x.key.clone()))
                .map(|x| x.key.clone())
            {
                next.remove(&oldest);
            }
        }
        next.insert(merged.key.clone(), merged.clone());
        if changed {
            // On disk first: memory never says what a restart would forget.
            self.save(&next)?;
        }
        *all = next;
        Ok(merged)
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every discovered machine, most recently seen first.
    pub fn list(&self) -> Vec<Machine> {
        let mut v: Vec<Machine> = self.lock().values().cloned().collect();
        v.sort_by(|a, b| b.last_seen.cmp(&a.last_seen).then(a.key.cmp(&b.key)));
        v
    }

    /// The machine with this key (UUID or MAC) exactly, else the one
    /// machine that lists this MAC; `Err` when several do.
    pub fn find(&self, key_or_mac: &str) -> Result<Option<Machine>, Ambiguous> {
        let k = key_or_mac.trim().to_ascii_lowercase();
        let mac = k.parse::<Mac>().ok().map(|m| m.to_string());
        let all = self.lock();
        if let Some(m) = all
            .get(&k)
            .or_else(|| mac.as_ref().and_then(|x| all.get(x)))
        {
            return Ok(Some(m.clone()));
        }
        let Some(mac) = mac else { return Ok(None) };
        let mut hits = all.values().filter(|m| m.macs.contains(&mac));
        match (hits.next(), hits.next()) {
            (Some(m), None) => Ok(Some(m.clone())),
            (None, _) => Ok(None),
            (Some(_), Some(_)) => Err(Ambiguous),
        }
    }

    /// Records the inventory machine `key` reported; `None`: no such machine.
    pub fn set_inventory(
        &self,
        key: &str,
        inv: site::hardware::Inventory,
    ) -> Result<Option<Machine>, Refused> {
        let mut all = self.lock();
        let Some(m) = all.get(key) else {
            return Ok(None);
        };
        let m = Machine {
            inventory: Some(inv),
            ..m.clone()
        };
        let mut next = all.clone();
        next.insert(key.to_string(), m.clone());
        self.save(&next)?;
        *all = next;
        Ok(Some(m))
    }

    /// Forgets a machine (it was adopted); `true` if it was there.
    pub fn remove(&self, key: &str) -> Result<bool, Refused> {
        let mut all = self.lock();
        if !all.contains_key(key) {
            return Ok(false);
        }
        let mut next = all.clone();
        next.remove(key);
        self.save(&next)?;
        *all = next;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&'static str, &str)]) -> Query<'static> {
        pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
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
        let m = from_report(&r, Some("10.77.0.200".parse().unwrap()), 1000).unwrap();
        assert_eq!(m.key, "0f6a4c2e-0298-4cf2-b280-b4ec459afdf0");
        assert_eq!(m.macs, vec!["52:54:00:12:34:56", "52:54:00:12:34:57"]);
        assert_eq!(m.manufacturer.as_deref(), Some("QEMU"));
        assert_eq!(m.serial, None, "control characters are refused");
        assert_eq!(m.product, None, "over 128 bytes is refused");
        disc.report(m.clone()).unwrap();
        let again = from_report(&r, None, 2000).unwrap();
        let kept = disc.report(again).unwrap();
        assert_eq!(
            (kept.first_seen, kept.last_seen, kept.reports),
            (1000, 2000, 2)
        );
        // Found by key or any of its MACs; kept across a reopen.
        // Another report under the same key with another MAC: refused.
        let mut poisoned = r.clone();
        poisoned.insert("nic2", "02-66-66-66-66-66".into());
        assert_eq!(
            disc.report(from_report(&poisoned, None, 3000).unwrap()),
            Err(Refused::Conflict)
        );
        let disc = Discovered::open(d.path()).unwrap();
        assert_eq!(disc.list()[0].macs.len(), 2);
        assert!(disc.find("52:54:00:12:34:57").unwrap().is_some());
        assert!(disc
            .find("0f6a4c2e-0298-4cf2-b280-b4ec459afdf0")
            .unwrap()
            .is_some());
        // Another machine listing the same MAC: the MAC no longer names one.
        let other = q(&[("mac", "52-54-00-99-00-01"), ("nic1", "52-54-00-12-34-57")]);
        disc.report(from_report(&other, None, 4000).unwrap())
            .unwrap();
        assert_eq!(disc.find("52:54:00:12:34:57"), Err(Ambiguous));
        assert!(
            disc.find("52:54:00:99:00:01").unwrap().is_some(),
            "a key wins"
        );
        disc.remove("52:54:00:99:00:01").unwrap();
        assert!(disc.remove(&m.key).unwrap());
        assert!(disc.list().is_empty());
        // No UUID (or a placeholder one): keyed by the MAC.
        let r = q(&[
            ("mac", "52:54:00:aa:00:01"),
            ("uuid", "00000000-0000-0000-0000-000000000000"),
        ]);
        assert_eq!(from_report(&r, None, 1).unwrap().key, "52:54:00:aa:00:01");
        assert_eq!(
            from_report(&q(&[("mac", "zz")]), None, 1),
            Err(Refused::NoMac)
        );
    }

    #[test]
    fn the_list_is_bounded_by_evicting_the_oldest() {
        let d = tempfile::tempdir().unwrap();
        let disc = Discovered::open(d.path()).unwrap().with_max(16);
        for i in 0..16 {
            let mac = format!("02:00:00:00:{:02x}:{:02x}", i / 256, i % 256);
            disc.report(from_report(&q(&[("mac", &mac)]), None, 1).unwrap())
                .unwrap();
        }
        // A known machine reports again (seen later than the others)...
        let known = from_report(&q(&[("mac", "02:00:00:00:00:01")]), None, 5).unwrap();
        assert_eq!(disc.report(known).unwrap().reports, 2);
        // ...and a new one makes room by dropping the one seen longest ago.
        let extra = from_report(&q(&[("mac", "02:00:00:ff:00:00")]), None, 6).unwrap();
        disc.report(extra).unwrap();
        assert_eq!(disc.len(), 16);
        assert!(disc.find("02:00:00:ff:00:00").unwrap().is_some());
        assert!(disc.find("02:00:00:00:00:01").unwrap().is_some());
        assert!(disc.find("02:00:00:00:00:00").unwrap().is_none());
        // A file that does not parse is moved aside.
        std::fs::write(d.path().join(FILE), b"{").unwrap();
        assert!(Discovered::open(d.path()).unwrap().is_empty());
        assert!(d.path().join("discovered.json.bad").exists());
    }
}
