//! What appliances sharing one store (`host.store: etcd`) must agree on,
//! behind an interface the executable supplies (bootd knows no etcd):
//!
//! - the token key: a token minted by one appliance is honoured by all;
//! - the site CA (certificate and key): nodes trust every appliance's HTTPS;
//! - spent tokens: a single-use token spent on one appliance is refused
//!   by all;
//! - nodes' timeline events: each appliance shows what the others saw.
//!
//! DHCP leases go through the same store, behind the `dhcp` crate's own
//! interface (`dhcp::v4::ha::SharedLeases`, [`crate::Config::shared_leases`]).
//!
//! At start, [`agree`] settles each secret: the one already shared wins;
//! with none shared yet, this appliance's (its file, or a new one) is
//! offered, and whichever appliance's transaction commits first is the
//! site's. A file in the state directory that differs from the shared
//! value stops the start: replacing it silently would break every node
//! that trusts it.

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
