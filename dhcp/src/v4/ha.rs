//! Where a lease is made durable before its ACK: the lease file (one
//! appliance) or the store shared by several (`host.store: etcd`), where
//! the appliances answering (one elected, or each its share) load every
//! lease when they start answering.
//!
//! DHCP leases are committed to the shared store before their ACK (one
//! record per address, one per client: neither is ever granted twice),
//! answered by one elected appliance at a time, which loads them all when
//! elected (a client keeps its address across a takeover), or by every
//! live appliance, each for its share of the clients (`host.dhcp.ha:
//! loadBalancing`), each following the others' leases.
//!
//! With a shared store, DHCP has two scopes, each with its own election
//! (or group): relayed requests (giaddr set), for which every appliance is
//! a candidate (a relay sends to every appliance it is told of), and the
//! broadcasts of this appliance's segment, for which only the appliances
//! attached to it are: each rack's appliances answer their own segment.

use super::leases::{Lease, Store, Table};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// The store several appliances share, as DHCPv4 needs it (the executable
/// supplies it: this crate knows no etcd).
pub trait SharedLeases: Send + Sync + std::fmt::Debug {
    /// Every DHCP lease and declined address in the shared store.
    fn leases(&self) -> io::Result<Vec<Lease>>;
    /// Commits `lease` (before its ACK): `Ok(None)` once committed;
    /// `Ok(Some(other))` when the address is another client's live lease
    /// in the shared store (nothing written).
    fn commit_lease(&self, lease: &Lease) -> io::Result<Option<Lease>>;
    /// [`SharedLeases::commit_lease`] for several leases (no two of one
    /// address or one client) at once, where the store can: one round trip
    /// for all when none conflicts. One answer per lease, in order.
    fn commit_leases(&self, leases: &[Lease]) -> Vec<io::Result<Option<Lease>>> {
        leases.iter().map(|l| self.commit_lease(l)).collect()
    }
    /// What this appliance answers in DHCP now ([`DhcpRole`]) in `scope`:
    /// relayed requests (`None`: site-wide, every appliance a candidate),
    /// or the broadcasts of the segment named `Some(segment)` (the
    /// appliances attached to it). Campaigns (or joins the load-balancing
    /// group) until `stop`.
    fn dhcp_role(&self, scope: Option<&str>, stop: CancellationToken) -> watch::Receiver<DhcpRole>;
    /// [`DhcpRole::Share`]: whether the client with this identifier
    /// (option 61, else its hardware address) is this appliance's in `scope`.
    fn answers(&self, _scope: Option<&str>, _client: &[u8]) -> bool {
        true
    }
    /// [`DhcpRole::Share`]: this appliance's place among the live ones of
    /// `scope` (index, count); where its allocations start in each pool.
    fn place(&self, _scope: Option<&str>) -> Option<(usize, usize)> {
        None
    }
    /// [`DhcpRole::Share`]: every lease as any appliance writes it, from
    /// now until `stop` (the table follows the others' grants). `None`:
    /// one appliance answers at a time, nothing to follow.
    fn lease_changes(
        &self,
        _stop: CancellationToken,
    ) -> Option<tokio::sync::mpsc::Receiver<Lease>> {
        None
    }
}

/// What an appliance of a shared store answers in DHCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DhcpRole {
    /// The elected DHCP server: everything, each lease committed first.
    Serve,
    /// Another appliance is elected: nothing.
    Standby,
    /// A live member of a load-balancing group (`host.dhcp.ha:
    /// loadBalancing`): the clients [`SharedLeases::answers`] gives it,
    /// each lease committed first; a renewing client (ciaddr set) by
    /// whichever appliance it reaches (RFC 3074: the hash is for new
    /// clients).
    Share,
    /// The shared store cannot be reached (no quorum): every appliance
    /// answers the site's own nodes (their reserved addresses, the same
    /// answer from each; nothing to record) and grants no other address.
    ReservedOnly,
}

pub enum Durable {
    File(Store),
    Shared {
        store: Arc<dyn SharedLeases>,
        /// To the group committer ([`committer`]).
        commits: tokio::sync::mpsc::Sender<Pending>,
    },
}

/// A lease waiting for the group committer, and where its answer goes.
pub type Pending = (
    Lease,
    tokio::sync::oneshot::Sender<io::Result<Option<Lease>>>,
);

/// The most leases in one transaction: two compares and two writes each,
/// within etcd's default of 128 operations per transaction.
const MAX_BATCH: usize = 32;

/// Commits leases in groups, as the lease file's writer syncs them: while
/// one transaction is in flight the next leases queue, and go together in
/// the next (at most [`MAX_BATCH`], no two of one address or one client:
/// a transaction may not write a key twice). Under a storm one round trip
/// to a quorum serves many ACKs.
async fn committer(shared: Arc<dyn SharedLeases>, mut rx: tokio::sync::mpsc::Receiver<Pending>) {
    let mut carried: Option<Pending> = None;
    loop {
        let first = match carried.take() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            let Ok(p) = rx.try_recv() else { break };
            let clash = batch
                .iter()
                .any(|(l, _)| l.ip == p.0.ip || l.mac == p.0.mac);
            if clash {
                carried = Some(p);
                break;
            }
            batch.push(p);
        }
        let leases: Vec<Lease> = batch.iter().map(|(l, _)| l.clone()).collect();
        let s = Arc::clone(&shared);
        let answers = tokio::task::spawn_blocking(move || s.commit_leases(&leases)).await;
        match answers {
            Ok(answers) => {
                for ((_, tx), a) in batch.into_iter().zip(answers) {
                    let _ = tx.send(a);
                }
            }
            Err(e) => {
                for (_, tx) in batch {
                    let _ = tx.send(Err(io::Error::other(e.to_string())));
                }
            }
        }
    }
}

/// Why a lease was not committed.
#[derive(Debug)]
pub enum NotCommitted {
    /// The disk or the shared store refused it.
    Io(io::Error),
    /// The address is another client's lease in the shared store.
    Taken(Lease),
}

impl std::fmt::Display for NotCommitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotCommitted::Io(e) => write!(f, "{e}"),
            NotCommitted::Taken(l) => write!(f, "{} is {}'s in the shared store", l.ip, l.mac),
        }
    }
}

impl Durable {
    /// Resolves once `lease` is durable (synced to disk, or committed to
    /// a quorum of the shared store).
    pub async fn commit(&self, lease: Lease) -> Result<(), NotCommitted> {
        match self {
            Durable::File(s) => s.commit(lease).await.map_err(NotCommitted::Io),
            Durable::Shared { commits, .. } => {
                let (tx, rx) = tokio::sync::oneshot::channel();
                let gone = || NotCommitted::Io(io::Error::other("the lease committer stopped"));
                commits.send((lease, tx)).await.map_err(|_| gone())?;
                let r = rx.await.map_err(|_| gone())?;
                match r {
                    Ok(None) => Ok(()),
                    Ok(Some(other)) => Err(NotCommitted::Taken(other)),
                    Err(e) => Err(NotCommitted::Io(e)),
                }
            }
        }
    }
}

/// What this appliance answers with a shared store, per scope.
#[derive(Clone)]
pub struct Active {
    /// Relayed requests (giaddr set).
    pub relayed: watch::Receiver<DhcpRole>,
    /// This segment's broadcasts: its name and the role; `None` when no
    /// site network holds an address of the DHCP interface (its direct
    /// requests then follow `relayed`).
    pub direct: Option<(String, watch::Receiver<DhcpRole>)>,
}

impl Active {
    /// The role for a request and its scope (`None`: relayed).
    pub fn role(&self, relayed: bool) -> (DhcpRole, Option<&str>) {
        match (&self.direct, relayed) {
            (Some((seg, r)), false) => (*r.borrow(), Some(seg.as_str())),
            _ => (*self.relayed.borrow(), None),
        }
    }
}

/// This appliance's segment: the site networks holding an IPv4 address of
/// `interface` (every interface but `lo` when `None`), their names sorted
/// and joined with `+`; `None` when there is none.
pub fn segment(site: &site::Site, interface: Option<&str>) -> Option<String> {
    let addrs = nix::ifaddrs::getifaddrs().ok()?;
    let mut names: Vec<&str> = addrs
        .filter(|a| match interface {
            Some(i) => a.interface_name == i,
            None => a.interface_name != "lo",
        })
        .filter_map(|a| {
            let ip = a.address?.as_sockaddr_in()?.ip();
            site.networks
                .iter()
                .find(|n| n.contains(std::net::IpAddr::V4(ip)))
                .map(|n| n.name.as_str())
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    (!names.is_empty()).then(|| names.join("+"))
}

/// Where leases go: the lease file in the state directory (read into the
/// table now), or the shared store (read when this appliance starts
/// answering; [`Active`] says in which scopes it does).
pub fn open(
    state_dir: &Path,
    table: &Arc<Mutex<Table>>,
    site: &site::Site,
    shared: Option<&Arc<dyn SharedLeases>>,
    stop: &CancellationToken,
) -> io::Result<(Durable, Option<Active>)> {
    match shared {
        None => {
            let (store, read) = Store::open(state_dir)?;
            info!(
                file = %state_dir.join("leases.jsonl").display(),
                leases = read.len(),
                declined = read.declined().count(),
                "lease file read"
            );
            *table.lock().unwrap_or_else(|p| p.into_inner()) = read;
            Ok((Durable::File(store), None))
        }
        Some(s) => {
            if let Some(mut changes) = s.lease_changes(stop.clone()) {
                // Load balancing: every lease another appliance grants goes
                // into the table, so it is neither offered again nor lost.
                let table = Arc::clone(table);
                tokio::spawn(async move {
                    while let Some(l) = changes.recv().await {
                        table.lock().unwrap_or_else(|p| p.into_inner()).apply(l);
                    }
                });
            }
            let iface = site.host.dhcp.as_ref().and_then(|d| d.interface.clone());
            let seg = segment(site, iface.as_deref());
            let answering = Arc::new(AtomicUsize::new(0));
            let follow = |scope: Option<String>| {
                follow(
                    Arc::clone(s),
                    Arc::clone(table),
                    scope,
                    Arc::clone(&answering),
                    stop.clone(),
                )
            };
            match &seg {
                Some(seg) => info!(segment = %seg, "DHCP: relayed requests answered site-wide, this segment's broadcasts by the appliances on it"),
                None => info!("DHCP: no site network holds an address of the DHCP interface: every request is answered as relayed (site-wide)"),
            }
            let active = Active {
                relayed: follow(None),
                direct: seg.map(|g| (g.clone(), follow(Some(g)))),
            };
            let (commits, queue) = tokio::sync::mpsc::channel(4 * MAX_BATCH);
            tokio::spawn(committer(Arc::clone(s), queue));
            let durable = Durable::Shared {
                store: Arc::clone(s),
                commits,
            };
            Ok((durable, Some(active)))
        }
    }
}

/// Follows this appliance's DHCP role in `scope`; each time it starts
/// answering there it loads the shared leases into `table` before it
/// answers (into a fresh table when it answers in no other scope, else
/// merged: `answering` counts the scopes it answers in).
pub fn follow(
    shared: Arc<dyn SharedLeases>,
    table: Arc<Mutex<Table>>,
    scope: Option<String>,
    answering_in: Arc<AtomicUsize>,
    stop: CancellationToken,
) -> watch::Receiver<DhcpRole> {
    let mut role = shared.dhcp_role(scope.as_deref(), stop.clone());
    let (tx, rx) = watch::channel(DhcpRole::Standby);
    let what_scope = match &scope {
        Some(s) => format!("segment {s}"),
        None => "relayed requests".to_string(),
    };
    tokio::spawn(async move {
        loop {
            let now = *role.borrow_and_update();
            let was = *tx.borrow();
            let answering = |r: DhcpRole| matches!(r, DhcpRole::Serve | DhcpRole::Share);
            if answering(now) && !answering(was) {
                let s = Arc::clone(&shared);
                match tokio::task::spawn_blocking(move || s.leases()).await {
                    Ok(Ok(leases)) => {
                        let place = shared.place(scope.as_deref());
                        let what = match (now, place) {
                            (DhcpRole::Share, Some((i, n))) => format!("member {} of {n} of the DHCP group ({what_scope}): shared leases loaded; answering its share of the clients", i + 1),
                            _ => format!("elected DHCP server ({what_scope}): shared leases loaded; answering"),
                        };
                        let mut current = table.lock().unwrap_or_else(|p| p.into_inner());
                        if answering_in.fetch_add(1, Ordering::SeqCst) == 0 {
                            let mut t = Table::default();
                            if let Some((i, n)) = place {
                                t.spread(i, n);
                            }
                            *current = t;
                        }
                        for l in leases {
                            current.apply(l);
                        }
                        info!(
                            leases = current.len(),
                            declined = current.declined().count(),
                            "{what}"
                        );
                        drop(current);
                        let _ = tx.send(now);
                    }
                    Ok(Err(e)) => {
                        warn!(error = %e, "elected DHCP server ({what_scope}), but the shared leases could not be read: not granting leases; trying again in 1 s");
                        let _ = tx.send(DhcpRole::ReservedOnly);
                        tokio::select! {
                            _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => continue,
                            _ = stop.cancelled() => return,
                        }
                    }
                    Err(_) => return,
                }
            } else if answering(now) && now != was {
                let _ = tx.send(now);
            } else if !answering(now) && now != was {
                if answering(was) {
                    answering_in.fetch_sub(1, Ordering::SeqCst);
                }
                match now {
                    DhcpRole::ReservedOnly => warn!("the shared store cannot be reached: DHCP answers the site's nodes only and grants no other address ({what_scope})"),
                    _ => info!("another appliance is the elected DHCP server ({what_scope}): not answering"),
                }
                let _ = tx.send(now);
            }
            tokio::select! {
                r = role.changed() => if r.is_err() { let _ = tx.send(DhcpRole::ReservedOnly); return },
                _ = stop.cancelled() => return,
            }
        }
    });
    rx
}
