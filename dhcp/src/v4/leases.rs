//! The lease table and its store.
//!
//! In memory: MAC → lease, and IP → MAC ([`crate::bindings`]). On disk:
//! `leases.jsonl` in the state directory, one JSON record per line,
//! appended; the last record of a MAC wins. Durability: a record is
//! written and `fdatasync`ed before the ACK that it backs is sent
//! ([`Store::commit`] resolves only then); records arriving while a sync
//! is in progress are written together and share the next sync (group
//! commit, [`crate::journal`]). On start the file is read back; a torn
//! last line (a crash mid-write) is dropped with a warning and the file is
//! compacted (rewritten, fsynced, renamed).
//!
//! Client-supplied strings (hostname) are stored as JSON strings, so any
//! byte sequence is stored and escaped safely; they are logged with
//! `escape_debug`.

pub use crate::bindings::LeaseState;
use crate::bindings::{self, Bindings, Map, Record};
pub use crate::journal::{append, Truncate};
use crate::journal::{Journal, Records};
use serde::{Deserialize, Serialize};
use site::Mac;
use std::io::{self, BufRead};
use std::net::Ipv4Addr;
use std::path::Path;
use tracing::warn;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub mac: String,
    pub ip: Ipv4Addr,
    /// Unix seconds; 0 for a released lease.
    pub expires: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default)]
    pub state: LeaseState,
}

impl Record for Lease {
    type Client = Mac;
    type Addr = Ipv4Addr;
    fn client(&self) -> Option<Mac> {
        self.mac.parse().ok()
    }
    fn addr(&self) -> Ipv4Addr {
        self.ip
    }
    fn state(&self) -> LeaseState {
        self.state
    }
    fn expires(&self) -> u64 {
        self.expires
    }
    fn file_order(&self, other: &Lease) -> std::cmp::Ordering {
        self.mac.cmp(&other.mac)
    }
}

#[derive(Debug, Default, Clone)]
pub struct Table {
    bindings: Bindings<Lease>,
    /// Per dynamic pool (keyed by its first address): where the next
    /// allocation starts looking. Successive clients walk the pool, so
    /// DISCOVERs in flight at the same time are offered different addresses
    /// without any per-offer state (as Kea's iterative allocator does).
    cursors: Map<u32, u32>,
    /// Per pool: the (second, generation) at which a full walk found nothing
    /// free. Until either changes, "exhausted" is answered without a walk.
    exhausted: Map<u32, (u64, u64)>,
    /// Bumped whenever an address may have become free.
    generation: u64,
    /// (this appliance's place, how many share the pools): where a walk
    /// starts in a pool it has not walked yet, so appliances answering
    /// at once (load balancing) rarely offer the same address.
    spread: (u32, u32),
    /// Per client: the expiry of its lease last known durable (read from
    /// the file or the shared store, or written and synced). A lease in
    /// the table with another expiry is not on disk yet (its write is in
    /// flight, or failed), and is never answered as it stands.
    durable: Map<Mac, u64>,
}

impl Table {
    /// Starts each pool's walk at `place`/`of` of its length (see
    /// `spread`): appliance 0 at the first address, 1 of 2 at the middle.
    pub fn spread(&mut self, place: usize, of: usize) {
        if of > 0 && place < of {
            self.spread = (place as u32, of as u32);
            self.cursors.clear();
        }
    }

    pub fn get(&self, mac: &Mac) -> Option<&Lease> {
        self.bindings.get(mac)
    }
    pub fn holder(&self, ip: Ipv4Addr) -> Option<&Mac> {
        self.bindings.holder(ip)
    }
    pub fn len(&self) -> usize {
        self.bindings.len()
    }
    pub fn is_empty(&self) -> bool {
        self.bindings.is_empty()
    }
    /// A lease that is durable (read from the file or the shared store).
    pub fn apply(&mut self, lease: Lease) {
        let durable = lease.clone();
        self.apply_unwritten(lease);
        self.written(&durable);
    }

    /// A lease decided but not yet durable (its write follows): in the
    /// table at once, so a concurrent request cannot be given its address.
    pub fn apply_unwritten(&mut self, lease: Lease) {
        if self.bindings.apply(lease) {
            self.generation += 1;
        }
    }

    /// `lease` is durable now (its write was synced). The record of
    /// clients the table no longer holds is dropped whenever it outgrows
    /// the table (clients come and go: it must not grow with them).
    pub fn written(&mut self, lease: &Lease) {
        if let Ok(mac) = lease.mac.parse::<Mac>() {
            self.durable.insert(mac, lease.expires);
        }
        if self.durable.len() > 2 * self.bindings.len() + 1024 {
            let bindings = &self.bindings;
            self.durable.retain(|m, _| bindings.get(m).is_some());
        }
    }

    /// Whether `lease` (the table's, for its client) is the one last made
    /// durable.
    pub fn is_durable(&self, lease: &Lease) -> bool {
        lease
            .mac
            .parse::<Mac>()
            .is_ok_and(|m| self.durable.get(&m) == Some(&lease.expires))
    }

    /// The address `mac` holds: its lease, if that address is still its own
    /// (an expired lease's address may since have gone to someone else).
    pub fn held_by(&self, mac: &Mac) -> Option<&Lease> {
        self.bindings.held_by(mac)
    }

    /// Whether `ip` may be given to `mac`: it is not held out after a
    /// DECLINE, and nobody holds it, `mac` itself does, or its holder's
    /// lease expired.
    pub fn is_free_for(&self, ip: Ipv4Addr, mac: &Mac, now: u64) -> bool {
        self.bindings.is_free_for(ip, mac, now)
    }

    /// A free address in `start..=end` for `mac`, walking from the pool's
    /// cursor; `None` when the pool is exhausted. Amortised O(1) while the
    /// pool has room; a full walk at most once per second per pool while it
    /// has none (unless an address is freed meanwhile).
    pub fn allocate(
        &mut self,
        start: Ipv4Addr,
        end: Ipv4Addr,
        mac: &Mac,
        now: u64,
        reserved: impl Fn(Ipv4Addr) -> bool,
    ) -> Option<Ipv4Addr> {
        let (s, e) = (u32::from(start), u32::from(end));
        if e < s || self.exhausted.get(&s) == Some(&(now, self.generation)) {
            return None;
        }
        let size = u64::from(e - s) + 1;
        let from = self
            .cursors
            .get(&s)
            .copied()
            .filter(|c| (s..=e).contains(c))
            .unwrap_or_else(|| {
                let (i, n) = self.spread;
                s + (size * u64::from(i) / u64::from(n.max(1))) as u32
            });
        let free = |a: u32| {
            let ip = Ipv4Addr::from(a);
            !reserved(ip) && self.is_free_for(ip, mac, now)
        };
        match bindings::walk(s, e, from, u128::from(size), free) {
            Some((a, next)) => {
                self.cursors.insert(s, next);
                Some(Ipv4Addr::from(a))
            }
            None => {
                self.exhausted.insert(s, (now, self.generation));
                None
            }
        }
    }
    pub fn leases(&self) -> impl Iterator<Item = &Lease> {
        self.bindings.leases()
    }
    /// The DECLINEd addresses' records (held or past their hold).
    pub fn declined(&self) -> impl Iterator<Item = &Lease> {
        self.bindings.declined()
    }
}

/// Reads `path`, returning the table and how many lines were dropped: at
/// most one, a last line without its newline (a write a crash cut short,
/// never ACKed). Any other line that is not a lease record is corruption:
/// `InvalidData` naming the line, and the file is left alone, because
/// starting without the leases it holds would offer addresses clients
/// still use.
pub fn load(path: &Path) -> io::Result<(Table, usize)> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Table::default(), 0)),
        Err(e) => return Err(e),
    };
    if let Some(n) = corrupt_line(&bytes) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: line {n} is not a lease record: the file is corrupt. bootd does not start \
                 without the leases it holds (it would offer addresses clients still use): \
                 restore the file, or move it aside to start with no leases (clients keep their \
                 addresses until they renew; set the pool's addresses aside meanwhile)",
                path.display()
            ),
        ));
    }
    recover(&bytes[..])
}

/// The 1-based number of the first line that is not a lease record,
/// except a last line without its newline (a torn write).
fn corrupt_line(bytes: &[u8]) -> Option<usize> {
    let complete = bytes.ends_with(b"\n");
    let lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    // `split` yields an empty piece after a final newline.
    let count = if complete {
        lines.len() - 1
    } else {
        lines.len()
    };
    (0..count).find_map(|i| {
        let l = lines[i];
        let torn_tail = i + 1 == count && !complete;
        (!l.is_empty() && !torn_tail && serde_json::from_slice::<Lease>(l).is_err())
            .then_some(i + 1)
    })
}

/// The table the lease file's content `r` holds, and how many lines were
/// unreadable ([`load`] without the file: the fuzz target's entry).
pub fn recover(r: impl BufRead) -> io::Result<(Table, usize)> {
    crate::journal::recover(r)
}

/// The lease file's content with one record per lease, as compaction
/// writes it.
pub fn render(t: &Table) -> io::Result<Vec<u8>> {
    t.bindings.render()
}

/// The durable side: a writer thread owns the file.
#[derive(Debug, Clone)]
pub struct Store {
    journal: Journal<Table>,
}

impl Store {
    /// Opens (recovering and compacting) the lease file and starts the
    /// writer. Returns the store and the recovered table.
    pub fn open(state_dir: &Path) -> io::Result<(Store, Table)> {
        std::fs::create_dir_all(state_dir)?;
        let path = state_dir.join("leases.jsonl");
        let (table, bad) = load(&path)?;
        if bad > 0 {
            warn!(file = %path.display(), "lease file ended in a torn line (a write a crash cut short, never acknowledged); dropped it");
        }
        let journal = Journal::start(path, table.clone(), "bootd-leases")?;
        Ok((Store { journal }, table))
    }

    /// Resolves once `lease` is on disk (fdatasync'ed).
    pub async fn commit(&self, lease: Lease) -> io::Result<()> {
        self.journal.commit(lease).await
    }
}

impl Records for Table {
    type Rec = Lease;
    fn apply(&mut self, r: Lease) {
        Table::apply(self, r)
    }
    fn count(&self) -> usize {
        self.bindings.count()
    }
    fn render(&self) -> io::Result<Vec<u8>> {
        render(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(mac: &str, ip: &str, host: Option<&str>) -> Lease {
        Lease {
            mac: mac.into(),
            ip: ip.parse().unwrap(),
            expires: 100,
            hostname: host.map(Into::into),
            state: LeaseState::Active,
        }
    }

    /// What is known durable is kept for the clients the table holds, not
    /// for every client ever written: it stays bounded as clients come
    /// and go, and a lease read from the file is durable.
    #[test]
    fn the_durable_record_follows_the_table_not_every_client_ever_seen() {
        let mut t = Table::default();
        let held = lease("02:00:00:00:00:01", "10.0.0.1", None);
        t.apply(held.clone());
        assert!(t.is_durable(&held));
        for i in 0..10_000u32 {
            let b = i.to_be_bytes();
            let gone = lease(
                &format!("02:01:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3]),
                "10.0.9.9",
                None,
            );
            t.written(&gone);
        }
        assert!(t.durable.len() <= 2 * t.len() + 1025, "{}", t.durable.len());
        assert!(t.is_durable(&held), "a held client's record is kept");
        let later = Lease {
            expires: 200,
            ..held
        };
        t.apply_unwritten(later.clone());
        assert!(!t.is_durable(&later), "not written yet");
    }

    /// Spread: member 1 of 2 starts at the pool's start, member 2 at its
    /// middle; each then walks on, wrapping at the end.
    #[test]
    fn spread_starts_each_member_at_its_part_of_the_pool() {
        let (s, e): (Ipv4Addr, Ipv4Addr) =
            ("10.0.0.10".parse().unwrap(), "10.0.0.19".parse().unwrap());
        let mac = |i: u8| Mac([2, 0, 0, 0, 0, i]);
        for (place, first) in [(0, "10.0.0.10"), (1, "10.0.0.15")] {
            let mut t = Table::default();
            t.spread(place, 2);
            let ip = t.allocate(s, e, &mac(1), 0, |_| false).unwrap();
            assert_eq!(ip, first.parse::<Ipv4Addr>().unwrap());
        }
        let mut t = Table::default();
        t.spread(1, 2);
        let got: Vec<Ipv4Addr> = (0..10)
            .map(|i| {
                let ip = t.allocate(s, e, &mac(i), 0, |_| false).unwrap();
                t.apply(Lease {
                    mac: mac(i).to_string(),
                    ip,
                    expires: 100,
                    hostname: None,
                    state: LeaseState::Active,
                });
                ip
            })
            .collect();
        assert_eq!(
            got[5],
            "10.0.0.10".parse::<Ipv4Addr>().unwrap(),
            "wrapped: {got:?}"
        );
        assert_eq!(
            t.allocate(s, e, &mac(99), 0, |_| false),
            None,
            "all ten taken"
        );
    }

    /// A line that is not a record anywhere but at the torn tail: refused
    /// with its number, and the file left as it was (never emptied).
    #[test]
    fn a_corrupt_lease_file_is_refused_naming_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("leases.jsonl");
        let good = serde_json::to_string(&lease("52:54:00:00:00:01", "10.0.0.1", None)).unwrap();
        for (text, line) in [
            (format!("{good}\ngarbage\n{good}\n"), 2),
            (format!("garbage\n{good}\n"), 1),
            (format!("{good}\n{{\"mac\":\"52:54\n"), 2),
            ("\u{0}\u{1}\u{2}\n".repeat(3), 1),
        ] {
            std::fs::write(&p, &text).unwrap();
            let e = load(&p).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            let e = e.to_string();
            assert!(
                e.contains(&format!("leases.jsonl: line {line} is not a lease record")),
                "{e}"
            );
            assert!(Store::open(dir.path()).is_err());
            assert_eq!(
                std::fs::read_to_string(&p).unwrap(),
                text,
                "the file was changed"
            );
        }
    }

    /// An address that went from an expired client to another stays the
    /// new holder's through compaction and a restart (the lease_file fuzz
    /// target's regress-address-moved-to-lower-mac).
    #[test]
    fn compaction_keeps_an_address_with_its_current_holder() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("leases.jsonl");
        std::fs::write(
            &p,
            "{\"mac\":\"52:54:00:99:00:02\",\"ip\":\"10.77.0.100\",\"expires\":1700000000}\n\
             {\"mac\":\"52:54:00:99:00:01\",\"ip\":\"10.77.0.100\",\"expires\":1700003600}\n",
        )
        .unwrap();
        let holder = |t: &Table| {
            t.holder("10.77.0.100".parse().unwrap())
                .map(|m| m.to_string())
        };
        let (t, _) = load(&p).unwrap();
        assert_eq!(holder(&t).as_deref(), Some("52:54:00:99:00:01"));
        // Compacted (as at every start), read back: the same holder.
        let (store, t2) = Store::open(dir.path()).unwrap();
        drop(store);
        assert_eq!(holder(&t2).as_deref(), Some("52:54:00:99:00:01"));
        let (t3, _) = load(&p).unwrap();
        assert_eq!(holder(&t3).as_deref(), Some("52:54:00:99:00:01"));
    }

    #[test]
    fn torn_tail_is_dropped_and_the_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("leases.jsonl");
        let mut text = String::new();
        for l in [
            lease("52:54:00:00:00:01", "10.0.0.1", Some("a\u{0}\n\"b")),
            lease("52:54:00:00:00:02", "10.0.0.2", None),
        ] {
            text.push_str(&serde_json::to_string(&l).unwrap());
            text.push('\n');
        }
        text.push_str("{\"mac\":\"52:54:00:00:00:03\",\"ip\":\"10.0.");
        std::fs::write(&p, text).unwrap();
        let (t, bad) = load(&p).unwrap();
        assert_eq!((t.len(), bad), (2, 1));
        assert_eq!(
            t.get(&"52:54:00:00:00:01".parse().unwrap())
                .unwrap()
                .hostname
                .as_deref(),
            Some("a\u{0}\n\"b")
        );
    }

    #[tokio::test]
    async fn commits_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (store, t) = Store::open(dir.path()).unwrap();
        assert!(t.is_empty());
        store
            .commit(lease("52:54:00:00:00:01", "10.0.0.1", None))
            .await
            .unwrap();
        store
            .commit(lease("52:54:00:00:00:01", "10.0.0.9", None))
            .await
            .unwrap();
        let (_, t) = Store::open(dir.path()).unwrap();
        assert_eq!(
            t.get(&"52:54:00:00:00:01".parse().unwrap()).unwrap().ip,
            "10.0.0.9".parse::<Ipv4Addr>().unwrap()
        );
        assert_eq!(t.holder("10.0.0.1".parse().unwrap()), None);
    }
}

#[cfg(test)]
mod log_tests {
    use super::*;
    use crate::journal::COMPACT_SLACK;
    use std::io::Write;

    /// A file that takes `room` more bytes, then fails (a full disk).
    struct Full {
        data: Vec<u8>,
        room: usize,
    }

    impl Write for Full {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            if self.room == 0 {
                return Err(io::Error::new(io::ErrorKind::StorageFull, "no space"));
            }
            let n = b.len().min(self.room);
            self.data.extend_from_slice(&b[..n]);
            self.room -= n;
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Truncate for Full {
        fn size(&mut self) -> io::Result<u64> {
            Ok(self.data.len() as u64)
        }
        fn truncate(&mut self, len: u64) -> io::Result<()> {
            self.data.truncate(len as usize);
            Ok(())
        }
        fn sync(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_short_write_is_cut_back_and_the_next_record_survives() {
        let rec = |i: u8| {
            let mut v = serde_json::to_vec(&Lease {
                mac: format!("52:54:00:00:00:{i:02x}"),
                ip: Ipv4Addr::new(10, 0, 0, i),
                expires: 100,
                hostname: None,
                state: LeaseState::Active,
            })
            .unwrap();
            v.push(b'\n');
            v
        };
        let mut f = Full {
            data: Vec::new(),
            room: rec(1).len() + 10,
        };
        append(&mut f, &rec(1)).unwrap();
        // The disk fills in the middle of the second record: refused, and
        // nothing of it is left in the file.
        assert!(append(&mut f, &rec(2)).is_err());
        assert_eq!(f.data, rec(1));
        // Space again: the third record is whole and readable.
        f.room = 1 << 20;
        append(&mut f, &rec(3)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("leases.jsonl");
        std::fs::write(&p, &f.data).unwrap();
        let (t, bad) = load(&p).unwrap();
        assert_eq!((t.len(), bad), (2, 0));
    }

    /// Renewals add a line each; the file is compacted while bootd runs,
    /// so it stays near one line per lease, and nothing is lost.
    #[tokio::test]
    async fn the_lease_file_is_compacted_online() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(dir.path()).unwrap();
        for round in 0..(COMPACT_SLACK as u64 / 10 + 200) {
            for i in 0..10u8 {
                store
                    .commit(Lease {
                        mac: format!("52:54:00:00:00:{i:02x}"),
                        ip: Ipv4Addr::new(10, 0, 0, i + 1),
                        expires: 1000 + round,
                        hostname: None,
                        state: LeaseState::Active,
                    })
                    .await
                    .unwrap();
            }
        }
        let text = std::fs::read_to_string(dir.path().join("leases.jsonl")).unwrap();
        let lines = text.lines().count();
        assert!(lines < COMPACT_SLACK + 10 + 1024, "{lines} lines");
        let (t, bad) = load(&dir.path().join("leases.jsonl")).unwrap();
        assert_eq!((t.len(), bad), (10, 0));
        let last = COMPACT_SLACK as u64 / 10 + 200 - 1;
        assert!(t.leases().all(|l| l.expires == 1000 + last));
    }
}
