//! DHCPv6 bindings: (client DUID, IAID) → address, and address → client
//! ([`crate::bindings`]). On disk: `leases6.jsonl` in the state directory,
//! kept as DHCPv4's lease file is ([`crate::journal`]): a binding is on
//! disk before the Reply that grants it is sent.

pub use crate::bindings::LeaseState;
use crate::bindings::{self, Bindings, Map, Record};
use crate::journal::{Durable, Journal, Records};
use serde::{Deserialize, Serialize};
use std::io::{self, BufRead};
use std::net::Ipv6Addr;
use std::path::Path;
use tracing::warn;

/// A client's identity association: its DUID (hex) and the IA's IAID.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Ia {
    pub duid: String,
    pub iaid: u32,
}

impl Ia {
    pub fn new(duid: &[u8], iaid: u32) -> Ia {
        Ia {
            duid: hex(duid),
            iaid,
        }
    }
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease6 {
    #[serde(flatten)]
    pub ia: Ia,
    pub ip: Ipv6Addr,
    /// Unix seconds the valid lifetime ends; the hold's end for a decline.
    pub expires: u64,
    #[serde(default)]
    pub state: LeaseState,
    /// The client's MAC, when it could be told (status and timeline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
}

impl Record for Lease6 {
    type Client = Ia;
    type Addr = Ipv6Addr;
    fn client(&self) -> Option<Ia> {
        Some(self.ia.clone())
    }
    fn addr(&self) -> Ipv6Addr {
        self.ip
    }
    fn state(&self) -> LeaseState {
        self.state
    }
    fn expires(&self) -> u64 {
        self.expires
    }
    fn file_order(&self, other: &Lease6) -> std::cmp::Ordering {
        self.ia.cmp(&other.ia)
    }
}

#[derive(Debug, Default, Clone)]
pub struct Table {
    bindings: Bindings<Lease6>,
    /// A client's MAC (when it could be told) → its latest binding.
    by_mac: Map<String, Ia>,
    /// Per pool (its first address): where the next walk starts.
    cursors: Map<u128, u128>,
    /// When [`Table::sweep_due`] and [`Table::sweep_full`] last swept (Unix seconds).
    swept: u64,
    swept_full: u64,
}

/// How long a binding is kept after its lifetime ends: the client that
/// held it gets the same address back if it returns within this (Kea's
/// `hold-reclaimed-time` default). Then it is forgotten, in memory and at
/// the file's next compaction.
pub const KEEP_EXPIRED: u64 = 3600;

/// How often [`Table::sweep_due`] sweeps, in seconds.
const SWEEP_EVERY: u64 = 60;
const SWEEP_FULL_EVERY: u64 = 10;

/// How far one allocation walks a pool before it gives up (a /64 pool
/// cannot be walked whole; one this full is a site to fix).
const WALK: u128 = 65_536;

impl Table {
    pub fn get(&self, ia: &Ia) -> Option<&Lease6> {
        self.bindings.get(ia)
    }
    pub fn holder(&self, ip: Ipv6Addr) -> Option<&Ia> {
        self.bindings.holder(ip)
    }
    pub fn len(&self) -> usize {
        self.bindings.len()
    }
    pub fn is_empty(&self) -> bool {
        self.bindings.is_empty()
    }
    pub fn leases(&self) -> impl Iterator<Item = &Lease6> {
        self.bindings.leases()
    }

    pub fn apply(&mut self, l: Lease6) {
        let named = match (&l.mac, l.state) {
            (Some(m), LeaseState::Active) => Some((m.clone(), l.ia.clone(), l.expires)),
            _ => None,
        };
        self.bindings.apply(l);
        if let Some((m, ia, expires)) = named {
            // A MAC's binding is the one that lasts longest: a MAC seen
            // under several DUIDs (firmware, iPXE, the installed system)
            // names the latest, whatever order the file lists them in.
            let longer = self
                .by_mac
                .get(&m)
                .is_some_and(|o| o != &ia && self.held_by(o).is_some_and(|o| o.expires > expires));
            if !longer {
                self.by_mac.insert(m, ia);
            }
        }
    }

    /// Forgets the bindings whose lifetime ended more than `keep` seconds
    /// before `now` (released ones at once: they end at 0), and the
    /// declines whose hold is over.
    pub fn sweep(&mut self, now: u64, keep: u64) {
        for l in self.bindings.sweep(now, keep) {
            if let Some(m) = &l.mac {
                if self.by_mac.get(m) == Some(&l.ia) {
                    self.by_mac.remove(m);
                }
            }
        }
    }

    /// [`Table::sweep`] of everything expired (a full table's last
    /// resort), at most once in [`SWEEP_FULL_EVERY`] seconds.
    pub fn sweep_full(&mut self, now: u64) {
        if now >= self.swept_full.saturating_add(SWEEP_FULL_EVERY) {
            self.sweep(now, 0);
            self.swept_full = now;
        }
    }

    /// [`Table::sweep`] with [`KEEP_EXPIRED`], at most once a minute.
    pub fn sweep_due(&mut self, now: u64) {
        if now >= self.swept.saturating_add(SWEEP_EVERY) {
            self.sweep(now, KEEP_EXPIRED);
            self.swept = now;
        }
    }

    /// The address the client with `mac` holds, if any.
    pub fn held_by_mac(&self, mac: &str) -> Option<&Lease6> {
        self.held_by(self.by_mac.get(mac)?)
    }

    /// The address `ia` holds, if it is still its own.
    pub fn held_by(&self, ia: &Ia) -> Option<&Lease6> {
        self.bindings.held_by(ia)
    }

    /// Whether `ip` may go to `ia`: not held out after a Decline, and free,
    /// `ia`'s own, or its holder's lifetime over.
    pub fn is_free_for(&self, ip: Ipv6Addr, ia: &Ia, now: u64) -> bool {
        self.bindings.is_free_for(ip, ia, now)
    }

    /// A free address in `start..=end` for `ia`, walking from the pool's
    /// cursor (at most [`WALK`] addresses).
    pub fn allocate(
        &mut self,
        start: Ipv6Addr,
        end: Ipv6Addr,
        ia: &Ia,
        now: u64,
        reserved: impl Fn(Ipv6Addr) -> bool,
    ) -> Option<Ipv6Addr> {
        let (s, e) = (u128::from(start), u128::from(end));
        if e < s {
            return None;
        }
        let from = self
            .cursors
            .get(&s)
            .copied()
            .filter(|c| (s..=e).contains(c))
            .unwrap_or(s);
        let free = |a: u128| {
            let ip = Ipv6Addr::from(a);
            !reserved(ip) && self.is_free_for(ip, ia, now)
        };
        let (a, next) = bindings::walk(s, e, from, (e - s).saturating_add(1).min(WALK), free)?;
        self.cursors.insert(s, next);
        Some(Ipv6Addr::from(a))
    }

    /// The compacted file: declines, then the bindings that hold their
    /// address (a stale one replayed would take an address back).
    pub fn render(&self) -> io::Result<Vec<u8>> {
        self.bindings.render()
    }
}

impl Records for Table {
    type Rec = Lease6;
    fn apply(&mut self, r: Lease6) {
        Table::apply(self, r)
    }
    fn count(&self) -> usize {
        self.bindings.count()
    }
    fn render(&self) -> io::Result<Vec<u8>> {
        Table::render(self)
    }
    fn sweep(&mut self, now: u64) {
        Table::sweep(self, now, KEEP_EXPIRED)
    }
}

/// The table a lease file's content holds, and how many lines were
/// unreadable.
pub fn recover(r: impl BufRead) -> io::Result<(Table, usize)> {
    crate::journal::recover(r)
}

/// The durable side of the table.
#[derive(Debug, Clone)]
pub struct Store {
    journal: Journal<Table>,
}

impl Store {
    /// Opens `leases6.jsonl` (recovering it: a torn last line is dropped;
    /// any other unreadable line stops bootd, as for DHCPv4) and starts
    /// its writer.
    pub fn open(state_dir: &Path) -> io::Result<(Store, Table)> {
        std::fs::create_dir_all(state_dir)?;
        let path = state_dir.join("leases6.jsonl");
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        let complete = bytes.is_empty() || bytes.ends_with(b"\n");
        let (table, bad) = recover(&bytes[..])?;
        if bad > 1 || (bad == 1 && complete) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: {bad} lines are not lease records: the file is corrupt. bootd does not \
                     start without the leases it holds: restore it, or move it aside",
                    path.display()
                ),
            ));
        }
        if bad == 1 {
            warn!(file = %path.display(), "lease file ended in a torn line (a write a crash cut short, never acknowledged); dropped it");
        }
        let journal = Journal::start(path, table.clone(), "bootd-leases6")?;
        Ok((Store { journal }, table))
    }

    /// Resolves once `lease` is on disk.
    pub async fn commit(&self, lease: Lease6) -> io::Result<()> {
        self.journal.commit(lease).await
    }

    /// Queues one request's bindings, in the order the table took them.
    pub async fn enqueue(&self, leases: Vec<Lease6>) -> io::Result<Durable> {
        self.journal.enqueue(leases).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(duid: u8, ip: &str, expires: u64, state: LeaseState) -> Lease6 {
        Lease6 {
            ia: Ia::new(&[0, 3, 0, 1, duid], 1),
            ip: ip.parse().unwrap(),
            expires,
            state,
            mac: None,
        }
    }

    #[test]
    fn allocation_walks_the_pool_and_skips_held_reserved_and_declined() {
        let mut t = Table::default();
        let (s, e): (Ipv6Addr, Ipv6Addr) =
            ("fd00::10".parse().unwrap(), "fd00::13".parse().unwrap());
        t.apply(lease(1, "fd00::10", 100, LeaseState::Active));
        t.apply(lease(2, "fd00::12", 100, LeaseState::Declined));
        let c = Ia::new(&[9], 1);
        let reserved = |ip: Ipv6Addr| ip == "fd00::11".parse::<Ipv6Addr>().unwrap();
        assert_eq!(
            t.allocate(s, e, &c, 50, reserved),
            Some("fd00::13".parse().unwrap())
        );
        t.apply(Lease6 {
            ia: c.clone(),
            ip: "fd00::13".parse().unwrap(),
            expires: 100,
            state: LeaseState::Active,
            mac: None,
        });
        assert_eq!(
            t.allocate(s, e, &Ia::new(&[8], 1), 50, reserved),
            None,
            "full"
        );
        // Past its lifetime an address is free for another client.
        assert_eq!(
            t.allocate(s, e, &Ia::new(&[8], 1), 101, reserved),
            Some("fd00::10".parse().unwrap())
        );
    }

    #[test]
    fn expired_bindings_are_forgotten_after_the_keep_time_and_a_mac_names_its_longest() {
        let mut t = Table::default();
        let mut a = lease(1, "fd00::1", 1000, LeaseState::Active);
        a.mac = Some("52:54:00:00:00:01".into());
        let mut b = lease(2, "fd00::2", 5000, LeaseState::Active);
        b.mac = a.mac.clone();
        // The longer binding first, as a compacted file may list them:
        // the shorter one read after it does not take the MAC.
        t.apply(b.clone());
        t.apply(a.clone());
        assert_eq!(t.held_by_mac("52:54:00:00:00:01"), Some(&b));
        t.apply(lease(3, "fd00::3", 0, LeaseState::Released));
        t.apply(lease(4, "fd00::4", 1500, LeaseState::Declined));
        assert_eq!(t.len(), 3);
        // Within the keep time nothing goes but the release.
        t.sweep(1000 + KEEP_EXPIRED, KEEP_EXPIRED);
        assert_eq!(t.len(), 2);
        assert!(t.get(&a.ia).is_some());
        assert!(
            t.is_free_for("fd00::4".parse().unwrap(), &a.ia, 1000 + KEEP_EXPIRED),
            "the hold is over"
        );
        t.sweep(1001 + KEEP_EXPIRED, KEEP_EXPIRED);
        assert_eq!(t.get(&a.ia), None);
        assert_eq!(t.holder("fd00::1".parse().unwrap()), None);
        assert_eq!(t.held_by_mac("52:54:00:00:00:01"), Some(&b));
        t.sweep(5001, 0);
        assert!(t.is_empty());
        assert_eq!(t.held_by_mac("52:54:00:00:00:01"), None);
        assert_eq!(String::from_utf8(t.render().unwrap()).unwrap(), "");
    }

    #[test]
    fn the_file_round_trips_without_stale_records() {
        let mut t = Table::default();
        t.apply(lease(1, "fd00::10", 100, LeaseState::Active));
        t.apply(lease(1, "fd00::11", 100, LeaseState::Active));
        t.apply(lease(2, "fd00::10", 100, LeaseState::Active));
        t.apply(lease(3, "fd00::20", 100, LeaseState::Declined));
        let text = t.render().unwrap();
        let (back, bad) = recover(&text[..]).unwrap();
        assert_eq!(bad, 0);
        assert_eq!(back.render().unwrap(), text);
        assert_eq!(
            back.holder("fd00::10".parse().unwrap()),
            Some(&Ia::new(&[0, 3, 0, 1, 2], 1))
        );
        assert_eq!(
            back.holder("fd00::11".parse().unwrap()),
            Some(&Ia::new(&[0, 3, 0, 1, 1], 1))
        );
        assert!(!back.is_free_for("fd00::20".parse().unwrap(), &Ia::new(&[7], 1), 99));
    }

    #[tokio::test]
    async fn a_committed_lease_is_there_after_a_restart_and_a_torn_tail_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let (store, t) = Store::open(dir.path()).unwrap();
        assert!(t.is_empty());
        store
            .commit(lease(1, "fd00::10", 100, LeaseState::Active))
            .await
            .unwrap();
        drop(store);
        let path = dir.path().join("leases6.jsonl");
        let mut text = std::fs::read(&path).unwrap();
        text.extend_from_slice(b"{\"duid\":\"00");
        std::fs::write(&path, &text).unwrap();
        let (_s, t) = Store::open(dir.path()).unwrap();
        assert_eq!(
            t.holder("fd00::10".parse().unwrap()),
            Some(&Ia::new(&[0, 3, 0, 1, 1], 1))
        );
        std::fs::write(&path, b"not a lease\n").unwrap();
        let err = Store::open(dir.path()).unwrap_err();
        assert!(err.to_string().contains("corrupt"), "{err}");
    }
}
