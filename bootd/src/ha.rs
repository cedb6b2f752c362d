//! What appliances sharing one store (`host.store: etcd`) must agree on,
//! behind an interface the executable supplies (bootd knows no etcd):
//!
//! - the token key: a token minted by one appliance is honoured by all;
//! - the site CA (certificate and key): nodes trust every appliance's HTTPS;
//! - spent tokens: a single-use token spent on one appliance is refused
//!   by all;
//! - DHCP leases: committed to the shared store before their ACK (one
//!   record per address, one per client: neither is ever granted twice),
//!   answered by one elected appliance at a time, which loads them all
//!   when elected (a client keeps its address across a takeover), or by
//!   every live appliance, each for its share of the clients
//!   (`host.dhcp.ha: loadBalancing`), each following the others' leases.
//!
//! At start, [`agree`] settles each secret: the one already shared wins;
//! with none shared yet, this appliance's (its file, or a new one) is
//! offered, and whichever appliance's transaction commits first is the
//! site's. A file in the state directory that differs from the shared
//! value stops the start: replacing it silently would break every node
//! that trusts it.

pub use crate::dhcp::leases::Lease;
use std::io;
use std::path::Path;
use tokio_util::sync::CancellationToken;

/// The shared store, as bootd needs it.
pub trait Shared: Send + Sync + std::fmt::Debug {
    /// The value shared under `name`, storing `offer` first when there is
    /// none (atomically: of two appliances offering at once, one wins and
    /// both get the winner's value).
    fn agree(&self, name: &str, offer: &[u8]) -> io::Result<Vec<u8>>;
    /// Spends the token `nonce` (valid until `expiry`, unix seconds):
    /// `true` the first time on any appliance, `false` after.
    fn spend(&self, nonce: &str, expiry: u64) -> io::Result<bool>;
    /// Every DHCP lease and declined address in the shared store.
    fn leases(&self) -> io::Result<Vec<Lease>>;
    /// Commits `lease` (before its ACK): `Ok(None)` once committed;
    /// `Ok(Some(other))` when the address is another client's live lease
    /// in the shared store (nothing written).
    fn commit_lease(&self, lease: &Lease) -> io::Result<Option<Lease>>;
    /// [`Shared::commit_lease`] for several leases (no two of one address or
    /// one client) at once, where the store can: one round trip for all
    /// when none conflicts. One answer per lease, in order.
    fn commit_leases(&self, leases: &[Lease]) -> Vec<io::Result<Option<Lease>>> {
        leases.iter().map(|l| self.commit_lease(l)).collect()
    }
    /// What this appliance answers in DHCP now ([`DhcpRole`]) in `scope`:
    /// relayed requests (`None`: site-wide, every appliance a candidate),
    /// or the broadcasts of the segment named `Some(segment)` (the
    /// appliances attached to it). Campaigns (or joins the load-balancing
    /// group) until `stop`.
    fn dhcp_role(
        &self,
        scope: Option<&str>,
        stop: CancellationToken,
    ) -> tokio::sync::watch::Receiver<DhcpRole>;
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
    /// The name this appliance goes by among those sharing the store
    /// (shown beside each step of a node's timeline it served). `None`:
    /// timelines are not shared.
    fn name(&self) -> Option<&str> {
        None
    }
    /// Stores timeline events of site nodes this appliance saw, each as
    /// (node, the event as JSON), for the other appliances to show.
    fn share_events(&self, _events: &[(String, Vec<u8>)]) -> io::Result<()> {
        Ok(())
    }
    /// The timeline events the other appliances shared: everything stored
    /// at first (after [`Others::Reset`]), then each as it is shared, until
    /// `stop`. `None`: not shared.
    fn others_events(
        &self,
        _stop: CancellationToken,
    ) -> Option<tokio::sync::mpsc::Receiver<Others>> {
        None
    }
}

/// What [`Shared::others_events`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Others {
    /// Forget what came before: everything stored follows.
    Reset,
    /// An event of site node `node` that appliance `by` saw, as JSON.
    Event {
        node: String,
        by: String,
        json: Vec<u8>,
    },
}

/// What an appliance of a shared store answers in DHCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DhcpRole {
    /// The elected DHCP server: everything, each lease committed first.
    Serve,
    /// Another appliance is elected: nothing.
    Standby,
    /// A live member of a load-balancing group (`host.dhcp.ha:
    /// loadBalancing`): the clients [`Shared::answers`] gives it, each
    /// lease committed first; a renewing client (ciaddr set) by whichever
    /// appliance it reaches (RFC 3074: the hash is for new clients).
    Share,
    /// The shared store cannot be reached (no quorum): every appliance
    /// answers the site's own nodes (their reserved addresses, the same
    /// answer from each; nothing to record) and grants no other address.
    ReservedOnly,
}

/// How long a start waits for the shared store (an appliance started with
/// etcd, or before it).
const WAIT_FOR_STORE: std::time::Duration = std::time::Duration::from_secs(60);

/// [`Shared::agree`], tried again every second while the store cannot be
/// reached, for at most [`WAIT_FOR_STORE`]: the start waits for etcd
/// rather than failing (nothing can be served without the site's key).
fn agree_waiting(shared: &dyn Shared, name: &str, offer: &[u8]) -> io::Result<Vec<u8>> {
    let end = std::time::Instant::now() + WAIT_FOR_STORE;
    loop {
        match shared.agree(name, offer) {
            Ok(v) => return Ok(v),
            Err(e) if e.kind() != io::ErrorKind::InvalidData && std::time::Instant::now() < end => {
                tracing::warn!(error = %e, name, "the shared store cannot be reached yet: waiting (at most 60 s)");
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Settles the secret stored in `files` (read with `read`, `None` when
/// absent) against the shared value `name`; writes the agreed value with
/// `write` when the files were absent. `make` makes a new one.
pub(crate) fn agree(
    shared: &dyn Shared,
    name: &str,
    dir: &Path,
    files: &str,
    read: impl FnOnce() -> io::Result<Option<Vec<u8>>>,
    make: impl FnOnce() -> io::Result<Vec<u8>>,
    write: impl FnOnce(&[u8]) -> io::Result<()>,
) -> io::Result<()> {
    let local = read()?;
    let offer = match &local {
        Some(v) => v.clone(),
        None => make()?,
    };
    let agreed = agree_waiting(shared, name, &offer)?;
    match local {
        Some(v) if v == agreed => Ok(()),
        Some(_) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{files} in {} differ from the site's shared {name} (host.store): another \
                 appliance set it first. Move {files} aside to take the shared one (nodes \
                 installed with this appliance's alone then need new Ignition), or delete \
                 bootd/secrets/{name} under the site's etcd prefix to make this one the site's",
                dir.display()
            ),
        )),
        None => write(&agreed),
    }
}
