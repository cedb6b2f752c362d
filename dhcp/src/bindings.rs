//! What DHCPv4's and DHCPv6's lease tables share: each client's latest
//! lease, the client holding each address, and the declined addresses
//! held out of the pools; how a record is applied, whether an address is
//! free, the lease file's compacted form, and the walk through a pool.
//! Each table adds its own on top ([`crate::v4::leases::Table`]: pool
//! cursors, exhaustion, spreading over appliances;
//! [`crate::v6::leases::Table`]: bindings by MAC, cursors, sweeps).
//!
//! Invariant: an address maps to a client only while that client's lease
//! is active on that address.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::hash::Hash;
use std::io;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LeaseState {
    #[default]
    Active,
    Released,
    /// The client reported the address in use by someone else (DECLINE).
    Declined,
}

/// Keyed by client-chosen values (MACs, DUIDs), so seeded: no hash flooding.
pub(crate) type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// A lease record, as a table keys and files it.
pub trait Record: Clone + Serialize + DeserializeOwned {
    /// Who holds it: a MAC (DHCPv4), a DUID and IAID (DHCPv6).
    type Client: Clone + Eq + Hash;
    type Addr: Copy + Eq + Hash + Ord;
    /// `None`: the record names no client the table can key (skipped).
    fn client(&self) -> Option<Self::Client>;
    fn addr(&self) -> Self::Addr;
    fn state(&self) -> LeaseState;
    /// Unix seconds the lease ends; for a decline, the hold's end.
    fn expires(&self) -> u64;
    /// The order of the holders' records in a compacted file.
    fn file_order(&self, other: &Self) -> std::cmp::Ordering;
}

/// Client → lease, address → client, declined addresses.
#[derive(Debug, Clone)]
pub struct Bindings<R: Record> {
    by_client: Map<R::Client, R>,
    by_addr: Map<R::Addr, R::Client>,
    /// Addresses a client declined, with that record (its `expires`: the
    /// end of the hold): out of the pool until then, whoever asks.
    declined: Map<R::Addr, R>,
}

impl<R: Record> Default for Bindings<R> {
    fn default() -> Self {
        Bindings {
            by_client: Map::default(),
            by_addr: Map::default(),
            declined: Map::default(),
        }
    }
}

impl<R: Record> Bindings<R> {
    pub fn get(&self, client: &R::Client) -> Option<&R> {
        self.by_client.get(client)
    }
    pub fn holder(&self, addr: R::Addr) -> Option<&R::Client> {
        self.by_addr.get(&addr)
    }
    pub fn len(&self) -> usize {
        self.by_client.len()
    }
    pub fn is_empty(&self) -> bool {
        self.by_client.is_empty()
    }
    pub fn leases(&self) -> impl Iterator<Item = &R> {
        self.by_client.values()
    }
    /// The declined addresses' records (held or past their hold).
    pub fn declined(&self) -> impl Iterator<Item = &R> {
        self.declined.values()
    }
    /// How many records a compacted file holds at most.
    pub fn count(&self) -> usize {
        self.by_client.len() + self.declined.len()
    }

    /// Takes `r` as its client's latest record. Returns whether an address
    /// may have become free (the client left it, released or declined it).
    pub fn apply(&mut self, r: R) -> bool {
        let Some(client) = r.client() else {
            return false;
        };
        let mut freed = false;
        if r.state() == LeaseState::Declined {
            // The client gives the address up: its lease on it ends, and
            // the address is held out of the pool on its own, whoever's
            // record named it before (only its holder may decline it: the
            // server checks; in a compacted file a stale record of another
            // client's may come first).
            if self
                .by_client
                .get(&client)
                .is_some_and(|old| old.addr() == r.addr())
            {
                self.by_client.remove(&client);
                freed = true;
            }
            self.by_addr.remove(&r.addr());
            self.declined.insert(r.addr(), r);
            return freed;
        }
        if let Some(old) = self.by_client.get(&client) {
            if self.by_addr.get(&old.addr()) == Some(&client) {
                self.by_addr.remove(&old.addr());
                freed = old.addr() != r.addr() || r.state() == LeaseState::Released;
            }
        }
        if r.state() == LeaseState::Active {
            self.by_addr.insert(r.addr(), client.clone());
        }
        self.by_client.insert(client, r);
        freed
    }

    /// The address `client` holds: its lease, if that address is still its
    /// own (an expired lease's address may since have gone to someone else).
    pub fn held_by(&self, client: &R::Client) -> Option<&R> {
        self.by_client.get(client).filter(|l| {
            l.state() == LeaseState::Active && self.by_addr.get(&l.addr()) == Some(client)
        })
    }

    /// Whether `addr` may be given to `client`: it is not held out after a
    /// DECLINE, and nobody holds it, `client` itself does, or its holder's
    /// lease expired.
    pub fn is_free_for(&self, addr: R::Addr, client: &R::Client, now: u64) -> bool {
        if self.declined.get(&addr).is_some_and(|d| d.expires() >= now) {
            return false;
        }
        match self.by_addr.get(&addr) {
            None => true,
            Some(c) if c == client => self
                .by_client
                .get(c)
                .is_some_and(|l| l.state() == LeaseState::Active),
            Some(c) => self
                .by_client
                .get(c)
                .is_some_and(|l| l.state() == LeaseState::Active && l.expires() < now),
        }
    }

    /// Forgets the leases whose lifetime ended more than `keep` seconds
    /// before `now` (released ones at once: they end at 0), and the
    /// declines whose hold is over. Returns the leases forgotten.
    pub fn sweep(&mut self, now: u64, keep: u64) -> Vec<R> {
        let gone: Vec<R::Client> = self
            .by_client
            .iter()
            .filter(|(_, l)| l.expires().saturating_add(keep) < now)
            .map(|(c, _)| c.clone())
            .collect();
        let mut forgotten = Vec::with_capacity(gone.len());
        for c in gone {
            if let Some(l) = self.by_client.remove(&c) {
                if self.by_addr.get(&l.addr()) == Some(&c) {
                    self.by_addr.remove(&l.addr());
                }
                forgotten.push(l);
            }
        }
        self.declined.retain(|_, d| d.expires() >= now);
        forgotten
    }

    /// The lease file's content with one record per lease, as compaction
    /// writes it. Replayed in this order, the records give the same
    /// addresses back: the declines (each takes its address out of the
    /// pool), then the clients that hold an address (each takes its own).
    /// A client's record that no longer holds its address (it expired and
    /// went to another client, the client moved on, or released it) is
    /// left out: replayed, it would take the address back (found by the
    /// lease_file fuzz target: sorted by MAC, a stale record took an
    /// address from its holder after a restart); that client is simply
    /// new after the restart.
    pub fn render(&self) -> io::Result<Vec<u8>> {
        let mut buf = Vec::new();
        let mut holders: Vec<&R> = self
            .by_client
            .iter()
            .filter(|(c, l)| {
                l.state() == LeaseState::Active && self.by_addr.get(&l.addr()) == Some(*c)
            })
            .map(|(_, l)| l)
            .collect();
        holders.sort_by(|a, b| a.file_order(b));
        let mut declined: Vec<&R> = self.declined.values().collect();
        declined.sort_by_key(|l| l.addr());
        for l in declined.into_iter().chain(holders) {
            serde_json::to_writer(&mut buf, l).map_err(io::Error::other)?;
            buf.push(b'\n');
        }
        Ok(buf)
    }
}

/// Walks a pool `start..=end` (addresses as numbers) from `from`, wrapping
/// at its end, for at most `steps` addresses: the first that `take`
/// accepts, and where the next walk starts.
pub fn walk<N>(
    start: N,
    end: N,
    from: N,
    steps: u128,
    mut take: impl FnMut(N) -> bool,
) -> Option<(N, N)>
where
    N: Copy + PartialEq + std::ops::Add<Output = N> + From<u8>,
{
    let mut a = from;
    for _ in 0..steps {
        let next = if a == end { start } else { a + N::from(1) };
        if take(a) {
            return Some((a, next));
        }
        a = next;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v4::leases::Lease;
    use std::net::Ipv4Addr;

    fn lease(mac: &str, ip: [u8; 4], expires: u64, state: LeaseState) -> Lease {
        Lease {
            mac: mac.into(),
            ip: Ipv4Addr::from(ip),
            expires,
            hostname: None,
            state,
        }
    }

    /// `apply` says when an address may have become free: a client that
    /// moves, releases or declines its own; not a renewal, nor a record
    /// naming no client.
    #[test]
    fn apply_tells_when_an_address_may_have_been_freed() {
        let mut b = Bindings::<Lease>::default();
        let a = "52:54:00:00:00:01";
        assert!(!b.apply(lease(a, [10, 0, 0, 1], 100, LeaseState::Active)));
        assert!(!b.apply(lease(a, [10, 0, 0, 1], 200, LeaseState::Active)));
        assert!(b.apply(lease(a, [10, 0, 0, 2], 200, LeaseState::Active)));
        assert_eq!(b.holder(Ipv4Addr::new(10, 0, 0, 1)), None);
        assert!(b.apply(lease(a, [10, 0, 0, 2], 0, LeaseState::Released)));
        assert!(b.held_by(&a.parse().unwrap()).is_none());
        assert!(!b.apply(lease("not a mac", [10, 0, 0, 3], 100, LeaseState::Active)));
        assert_eq!(b.len(), 1);
        assert!(!b.apply(lease(a, [10, 0, 0, 4], 100, LeaseState::Active)));
        assert!(b.apply(lease(a, [10, 0, 0, 4], 500, LeaseState::Declined)));
        assert!(!b.is_free_for(Ipv4Addr::new(10, 0, 0, 4), &a.parse().unwrap(), 500));
        assert!(b.is_free_for(Ipv4Addr::new(10, 0, 0, 4), &a.parse().unwrap(), 501));
    }

    /// The walk starts where it is told, wraps at the pool's end, and
    /// gives up after `steps` addresses.
    #[test]
    fn the_walk_wraps_and_stops_after_its_steps() {
        assert_eq!(walk(10u32, 13, 12, 4, |a| a == 11), Some((11, 12)));
        assert_eq!(walk(10u32, 13, 13, 4, |a| a == 13), Some((13, 10)));
        assert_eq!(walk(10u128, 13, 12, 2, |a| a == 11), None);
        assert_eq!(
            walk(0u32, u32::MAX, u32::MAX, 1, |_| true),
            Some((u32::MAX, 0))
        );
    }
}
