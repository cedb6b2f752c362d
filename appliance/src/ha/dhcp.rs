//! DHCP on etcd: leases committed before their ACK, and who answers.
//!
//! A grant writes two keys in one transaction: the address's record
//! (`dhcp/leases/<ip>`) and the client's (`dhcp/clients/<mac>`: the
//! address it was granted), each compared with the revision this appliance
//! last wrote (or read and judged free to take; never one it merely
//! read). When either changed meanwhile, the records are
//! read: an address is taken over only when it is the same client's,
//! released or expired; a client that holds another address live is not
//! granted a second one. Either way the commit is refused (the ACK
//! withheld) and the other lease returned, which goes into the table: the
//! client's retry is answered from it. So no address is granted to two
//! clients and no client holds two addresses, whichever appliances answer.
//!
//! Who answers (`host.dhcp.ha`):
//! - `hotStandby`: the appliance elected as `election/dhcp`; it loads every
//!   lease when elected.
//! - `loadBalancing`: every member of `members/dhcp/` (an appliance with a
//!   live etcd lease), each for the clients whose identifier hashes to it:
//!   the identifier (option 61, else the hardware address) hashes into one
//!   of 256 buckets, as in RFC 3074, and each bucket belongs to the member
//!   that ranks first for it (rendezvous hashing over the live members:
//!   when a member goes, only its buckets move). Each member follows every
//!   lease as it is written (a watch), so its table holds the others'.

use super::{EtcdShared, Revs};
use dhcp::v4::ha::DhcpRole;
use dhcp::v4::leases::{Lease, LeaseState};
use etcd::{Compare, CompareOp, Transaction, TxnOp, TxnOpResponse};
use std::io;
use std::net::Ipv4Addr;
use tokio_util::sync::CancellationToken;

/// Attempts of a lease's compare-and-swap.
const CAS_ATTEMPTS: usize = 8;

fn lease_key(ip: Ipv4Addr) -> String {
    format!("dhcp/leases/{ip}")
}

fn client_key(mac: &str) -> String {
    format!("dhcp/clients/{mac}")
}

/// The election (or group) of a scope: `dhcp` for relayed requests,
/// `dhcp-on-<segment>` for a segment's broadcasts (not `dhcp/…`: etcd's
/// election of `dhcp` holds every key under `election/dhcp/`).
fn group(scope: Option<&str>) -> String {
    match scope {
        None => "dhcp".to_string(),
        Some(s) => format!("dhcp-on-{s}"),
    }
}

/// FNV-1a (64 bits), then a finalizer (splitmix64's) so that nearby
/// inputs spread: the same on every appliance, whatever its build.
fn hash(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in *p {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^= 0xff; // part separator
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The member that answers `client`: the first for the client's bucket.
pub(crate) fn owner<'a>(members: &'a [String], client: &[u8]) -> Option<&'a str> {
    let bucket = [(hash(&[client]) % 256) as u8];
    members
        .iter()
        .max_by_key(|m| hash(&[m.as_bytes(), &bucket]))
        .map(String::as_str)
}

fn parse_lease(key: &str, bytes: &[u8]) -> io::Result<Lease> {
    serde_json::from_slice(bytes).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{key}: not a lease record bootd writes ({e}): restore it, or delete it"),
        )
    })
}

/// Every lease and declined address.
///
/// No revision is taken from a read: a revision in [`Revs`] lets a write
/// overwrite a record without looking at it, which is right only for a
/// record this appliance's decisions already knew (its own write, or one
/// it read and judged free to take). A record read here reaches the table
/// a moment later, and a decision made in that moment must not overwrite
/// it: its write finds another revision, reads the record, and judges.
fn list_leases(etcd: &etcd::Etcd) -> io::Result<Vec<Lease>> {
    let values = etcd.list("dhcp/leases/").map_err(io::Error::other)?;
    let mut out = Vec::with_capacity(values.len());
    for v in values {
        out.push(parse_lease(&etcd.key(&v.key), &v.value)?);
    }
    Ok(out)
}

impl Revs {
    fn set_rev(&self, ip: Ipv4Addr, rev: i64) {
        self.addr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(ip, rev);
    }

    fn set_crev(&self, mac: &str, rev: i64) {
        self.client
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(mac.to_string(), rev);
    }

    fn rev(&self, ip: Ipv4Addr) -> i64 {
        *self
            .addr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&ip)
            .unwrap_or(&0)
    }

    fn crev(&self, mac: &str) -> i64 {
        *self
            .client
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(mac)
            .unwrap_or(&0)
    }
}

/// DHCPv4's view of the store, answered by the methods below.
impl dhcp::v4::ha::SharedLeases for EtcdShared {
    fn leases(&self) -> io::Result<Vec<Lease>> {
        self.dhcp_leases()
    }

    fn commit_lease(&self, lease: &Lease) -> io::Result<Option<Lease>> {
        self.dhcp_commit(lease)
    }

    fn commit_leases(&self, leases: &[Lease]) -> Vec<io::Result<Option<Lease>>> {
        self.dhcp_commit_many(leases)
    }

    fn dhcp_role(
        &self,
        scope: Option<&str>,
        stop: CancellationToken,
    ) -> tokio::sync::watch::Receiver<DhcpRole> {
        self.dhcp_role_now(scope, stop)
    }

    fn answers(&self, scope: Option<&str>, client: &[u8]) -> bool {
        self.dhcp_answers(scope, client)
    }

    fn place(&self, scope: Option<&str>) -> Option<(usize, usize)> {
        self.dhcp_place(scope)
    }

    fn lease_changes(&self, stop: CancellationToken) -> Option<tokio::sync::mpsc::Receiver<Lease>> {
        self.dhcp_lease_changes(stop)
    }
}

impl EtcdShared {
    pub(super) fn dhcp_leases(&self) -> io::Result<Vec<Lease>> {
        list_leases(self.etcd()?)
    }

    /// The live lease `ip` holds for `mac`, if it does (read now).
    fn held_by(&self, etcd: &etcd::Etcd, ip: Ipv4Addr, mac: &str) -> io::Result<Option<Lease>> {
        let Some(v) = etcd.get(&lease_key(ip)).map_err(io::Error::other)? else {
            return Ok(None);
        };
        let l = parse_lease(&etcd.key(&v.key), &v.value)?;
        let live = l.mac == mac
            && l.state == LeaseState::Active
            && l.expires > runtime::clock::unix_secs();
        Ok(live.then_some(l))
    }

    pub(super) fn dhcp_commit(&self, lease: &Lease) -> io::Result<Option<Lease>> {
        let etcd = self.etcd()?;
        let key = etcd.key(&lease_key(lease.ip));
        // Only a grant moves the client's record (not a release or decline).
        let ckey = (lease.state == LeaseState::Active).then(|| etcd.key(&client_key(&lease.mac)));
        let value = serde_json::to_vec(lease).map_err(io::Error::other)?;
        for _ in 0..CAS_ATTEMPTS {
            let (rev, crev) = (self.revs.rev(lease.ip), self.revs.crev(&lease.mac));
            let mut when = vec![Compare::mod_revision(key.clone(), CompareOp::Equal, rev)];
            let mut then = vec![TxnOp::put(key.clone(), value.clone(), None)];
            let mut otherwise = vec![TxnOp::get(key.clone(), None)];
            if let Some(ck) = &ckey {
                when.push(Compare::mod_revision(ck.clone(), CompareOp::Equal, crev));
                then.push(TxnOp::put(ck.clone(), lease.ip.to_string(), None));
                otherwise.push(TxnOp::get(ck.clone(), None));
            }
            let t = Transaction::new()
                .when(when)
                .and_then(then)
                .or_else(otherwise);
            let r = etcd.txn("commit a lease", t).map_err(io::Error::other)?;
            if r.succeeded() {
                let at = r.header().map(|h| h.revision()).unwrap_or(0);
                self.revs.set_rev(lease.ip, at);
                if ckey.is_some() {
                    self.revs.set_crev(&lease.mac, at);
                }
                return Ok(None);
            }
            // Written by another appliance since: whose are they now?
            let gets: Vec<Option<(Vec<u8>, i64)>> = r
                .op_responses()
                .into_iter()
                .filter_map(|op| match op {
                    TxnOpResponse::Get(g) => Some(
                        g.kvs()
                            .first()
                            .map(|kv| (kv.value().to_vec(), kv.mod_revision())),
                    ),
                    _ => None,
                })
                .collect();
            let (other, other_rev) = match gets.first().cloned().flatten() {
                Some((bytes, rev)) => (Some(parse_lease(&key, &bytes)?), rev),
                None => (None, 0),
            };
            let now = runtime::clock::unix_secs();
            let ours = match &other {
                None => true,
                Some(o) => {
                    o.mac == lease.mac || o.state == LeaseState::Released || o.expires <= now
                }
            };
            if !ours {
                // Its revision is not kept: the table learns the record
                // from the answer, after this returns (see `list_leases`).
                return Ok(other);
            }
            // Judged free to take: the retry may overwrite it.
            self.revs.set_rev(lease.ip, other_rev);
            if let Some(ck) = &ckey {
                match gets.get(1).cloned().flatten() {
                    None => self.revs.set_crev(&lease.mac, 0),
                    Some((bytes, crev)) => {
                        let held = std::str::from_utf8(&bytes)
                            .ok()
                            .and_then(|s| s.parse::<Ipv4Addr>().ok())
                            .ok_or_else(|| {
                                io::Error::new(
                                    io::ErrorKind::InvalidData,
                                    format!("{ck}: not a client record bootd writes: restore it, or delete it"),
                                )
                            })?;
                        if held != lease.ip {
                            // Granted another address (by another appliance,
                            // unseen here): that one, not a second.
                            if let Some(l) = self.held_by(etcd, held, &lease.mac)? {
                                return Ok(Some(l));
                            }
                        }
                        // The same address, or one the client no longer
                        // holds: the retry may overwrite the record.
                        self.revs.set_crev(&lease.mac, crev);
                    }
                }
            }
        }
        Err(io::Error::other(format!(
            "{key}: changed by another appliance {CAS_ATTEMPTS} times in a row"
        )))
    }

    /// Several leases (no two of one address or one client) in one
    /// transaction, each with the compares a single grant makes; when any
    /// compare fails, nothing is written and each lease is committed on
    /// its own ([`EtcdShared::dhcp_commit`]: read, judge, retry). When the
    /// store does not answer, every lease gets its error at once.
    pub(super) fn dhcp_commit_many(&self, leases: &[Lease]) -> Vec<io::Result<Option<Lease>>> {
        if leases.len() <= 1 {
            return leases.iter().map(|l| self.dhcp_commit(l)).collect();
        }
        let together = || -> io::Result<bool> {
            let etcd = self.etcd()?;
            let mut when = Vec::with_capacity(2 * leases.len());
            let mut then = Vec::with_capacity(2 * leases.len());
            for l in leases {
                let key = etcd.key(&lease_key(l.ip));
                when.push(Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    self.revs.rev(l.ip),
                ));
                then.push(TxnOp::put(
                    key,
                    serde_json::to_vec(l).map_err(io::Error::other)?,
                    None,
                ));
                if l.state == LeaseState::Active {
                    let ck = etcd.key(&client_key(&l.mac));
                    when.push(Compare::mod_revision(
                        ck.clone(),
                        CompareOp::Equal,
                        self.revs.crev(&l.mac),
                    ));
                    then.push(TxnOp::put(ck, l.ip.to_string(), None));
                }
            }
            let t = Transaction::new().when(when).and_then(then);
            let r = etcd.txn("commit leases", t).map_err(io::Error::other)?;
            if r.succeeded() {
                let at = r.header().map(|h| h.revision()).unwrap_or(0);
                for l in leases {
                    self.revs.set_rev(l.ip, at);
                    if l.state == LeaseState::Active {
                        self.revs.set_crev(&l.mac, at);
                    }
                }
            }
            Ok(r.succeeded())
        };
        match together() {
            Ok(true) => leases.iter().map(|_| Ok(None)).collect(),
            // A compare failed: one by one, each read and judged.
            Ok(false) => leases.iter().map(|l| self.dhcp_commit(l)).collect(),
            // The store did not answer: nothing written, each told so at once.
            Err(e) => leases
                .iter()
                .map(|_| Err(io::Error::new(e.kind(), e.to_string())))
                .collect(),
        }
    }

    pub(super) fn dhcp_role_now(
        &self,
        scope: Option<&str>,
        stop: CancellationToken,
    ) -> tokio::sync::watch::Receiver<DhcpRole> {
        let name = group(scope);
        let (tx, rx) = tokio::sync::watch::channel(DhcpRole::Standby);
        let etcd = match self.etcd() {
            Ok(e) => e.clone(),
            Err(e) => {
                tracing::error!(error = %e, "etcd: no connection; this appliance answers the site's nodes only");
                let _ = tx.send(DhcpRole::ReservedOnly);
                return rx;
            }
        };
        let ttl = self.lease_ttl;
        let mut up = self
            .store_up
            .get_or_init(|| {
                let (up_tx, up) = tokio::sync::watch::channel(true);
                tokio::spawn(probe(etcd.clone(), up_tx, stop.clone()));
                up
            })
            .clone();
        if self.ha == site::DhcpHa::LoadBalancing {
            // A member (its key alive in etcd) and etcd answering: its share.
            let mut group = etcd.membership(&name, ttl, stop.clone());
            let members = std::sync::Arc::clone(&self.members);
            tokio::spawn(async move {
                loop {
                    let g = group.borrow_and_update().clone();
                    let role = match (g.me.is_some(), *up.borrow_and_update()) {
                        (_, false) => DhcpRole::ReservedOnly,
                        (true, true) => DhcpRole::Share,
                        (false, true) => DhcpRole::Standby,
                    };
                    members
                        .write()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(name.clone(), g);
                    tx.send_if_modified(|r| std::mem::replace(r, role) != role);
                    tokio::select! {
                        r = group.changed() => if r.is_err() { return },
                        r = up.changed() => if r.is_err() { return },
                        _ = stop.cancelled() => return,
                    }
                }
            });
            return rx;
        }
        // Elected or not (the campaign), and whether etcd answers (a read
        // every second): the role is their product.
        let mut elected = etcd.elect(&name, ttl, stop.clone());
        tokio::spawn(async move {
            loop {
                let role = match (*elected.borrow_and_update(), *up.borrow_and_update()) {
                    (true, _) => DhcpRole::Serve,
                    (false, true) => DhcpRole::Standby,
                    (false, false) => DhcpRole::ReservedOnly,
                };
                tx.send_if_modified(|r| std::mem::replace(r, role) != role);
                tokio::select! {
                    r = elected.changed() => if r.is_err() { return },
                    r = up.changed() => if r.is_err() { return },
                    _ = stop.cancelled() => return,
                }
            }
        });
        rx
    }

    pub(super) fn dhcp_answers(&self, scope: Option<&str>, client: &[u8]) -> bool {
        let all = self.members.read().unwrap_or_else(|p| p.into_inner());
        let Some(m) = all.get(&group(scope)) else {
            return false;
        };
        match (&m.me, owner(&m.members, client)) {
            (Some(me), Some(o)) => me == o,
            _ => false,
        }
    }

    pub(super) fn dhcp_place(&self, scope: Option<&str>) -> Option<(usize, usize)> {
        let all = self.members.read().unwrap_or_else(|p| p.into_inner());
        let m = all.get(&group(scope))?;
        let me = m.me.as_ref()?;
        let i = m.members.iter().position(|x| x == me)?;
        Some((i, m.members.len()))
    }

    /// `loadBalancing`: a watch of `dhcp/leases/`: each lease written (by
    /// any appliance) sent to the table, as the watch carries it (no read
    /// per change: a rack's leases made one etcd range per lease per
    /// appliance); after a lost watch, every lease stored again. No
    /// revision is taken from it (see [`list_leases`]): a record applied
    /// late is overwritten by the next change's, and a write is still
    /// judged against etcd's revision.
    pub(super) fn dhcp_lease_changes(
        &self,
        stop: CancellationToken,
    ) -> Option<tokio::sync::mpsc::Receiver<Lease>> {
        if self.ha != site::DhcpHa::LoadBalancing {
            return None;
        }
        let etcd = self.etcd().ok()?.clone();
        let (tx, rx) = tokio::sync::mpsc::channel(4096);
        let mut puts = etcd.watch_puts("dhcp/leases/", 1000);
        tokio::spawn(async move {
            loop {
                let p = tokio::select! {
                    p = puts.recv() => p,
                    _ = stop.cancelled() => return,
                };
                let (key, value) = match p {
                    None => return,
                    // The stored leases follow, then the changes.
                    Some(etcd::Put::Reset) => continue,
                    Some(etcd::Put::Value(key, value)) => (key, value),
                };
                match parse_lease(&etcd.key(&key), &value) {
                    Ok(l) => {
                        if tx.send(l).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "a lease written by another appliance could not be read")
                    }
                }
            }
        });
        Some(rx)
    }
}

/// Whether etcd answers a read (with a leader), every second.
async fn probe(etcd: etcd::Etcd, up: tokio::sync::watch::Sender<bool>, stop: CancellationToken) {
    loop {
        let key = etcd.key("dhcp/probe");
        let ok = etcd
            .run("probe", move |mut c| async move { c.get(key, None).await })
            .await
            .is_ok();
        up.send_if_modified(|u| std::mem::replace(u, ok) != ok);
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
            _ = stop.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_spread_evenly_and_only_a_gone_members_move() {
        let two = vec!["a1".to_string(), "b2".to_string()];
        let three = vec!["a1".to_string(), "b2".to_string(), "c3".to_string()];
        let mut per = std::collections::HashMap::new();
        let mut moved_wrongly = 0;
        for i in 0u32..20_000 {
            let mac = [2, 0x80, 0, (i >> 16) as u8, (i >> 8) as u8, i as u8];
            let o3 = owner(&three, &mac).unwrap();
            *per.entry(o3).or_insert(0) += 1;
            let o2 = owner(&two, &mac).unwrap();
            // c3 gone: only c3's clients change hands.
            if o3 != "c3" && o3 != o2 {
                moved_wrongly += 1;
            }
        }
        assert_eq!(moved_wrongly, 0);
        for (m, n) in &per {
            assert!((4_500..=8_800).contains(n), "{m}: {n} of 20 000: {per:?}");
        }
        assert_eq!(owner(&[], b"x"), None);
    }
}
