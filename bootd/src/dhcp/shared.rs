//! Where a lease is made durable before its ACK: the lease file (one
//! appliance) or the store shared by several (`host.store: etcd`), where
//! one elected appliance answers at a time and loads every lease when it
//! is elected.

use super::leases::{Lease, Store, Table};
use crate::shared::{DhcpRole, Shared};
use std::io;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub enum Durable {
    File(Store),
    Shared(Arc<dyn Shared>),
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
            Durable::Shared(s) => {
                let s = Arc::clone(s);
                let r = tokio::task::spawn_blocking(move || s.commit_lease(&lease))
                    .await
                    .map_err(|e| NotCommitted::Io(io::Error::other(e)))?;
                match r {
                    Ok(None) => Ok(()),
                    Ok(Some(other)) => Err(NotCommitted::Taken(other)),
                    Err(e) => Err(NotCommitted::Io(e)),
                }
            }
        }
    }
}

/// Where leases go: the lease file in the state directory (read into the
/// table now), or the shared store (read when this appliance is elected;
/// the receiver says whether it is).
pub fn open(
    app: &crate::App,
    shared: Option<&Arc<dyn Shared>>,
    stop: &CancellationToken,
) -> io::Result<(Durable, Option<watch::Receiver<DhcpRole>>)> {
    match shared {
        None => {
            let (store, table) = Store::open(&app.state_dir)?;
            info!(
                file = %app.state_dir.join("leases.jsonl").display(),
                leases = table.len(),
                declined = table.declined().count(),
                "lease file read"
            );
            *app.leases.lock().unwrap_or_else(|p| p.into_inner()) = table;
            Ok((Durable::File(store), None))
        }
        Some(s) => {
            if let Some(mut changes) = s.lease_changes(stop.clone()) {
                // Load balancing: every lease another appliance grants goes
                // into the table, so it is neither offered again nor lost.
                let table = Arc::clone(&app.leases);
                tokio::spawn(async move {
                    while let Some(l) = changes.recv().await {
                        table.lock().unwrap_or_else(|p| p.into_inner()).apply(l);
                    }
                });
            }
            let active = follow(Arc::clone(s), Arc::clone(&app.leases), stop.clone());
            Ok((Durable::Shared(Arc::clone(s)), Some(active)))
        }
    }
}

/// Follows this appliance's DHCP role; each time it is elected it loads
/// the shared leases into `table` before it answers as the server.
pub fn follow(
    shared: Arc<dyn Shared>,
    table: Arc<Mutex<Table>>,
    stop: CancellationToken,
) -> watch::Receiver<DhcpRole> {
    let mut role = shared.dhcp_role(stop.clone());
    let (tx, rx) = watch::channel(DhcpRole::Standby);
    tokio::spawn(async move {
        loop {
            let now = *role.borrow_and_update();
            let was = *tx.borrow();
            let answering = |r: DhcpRole| matches!(r, DhcpRole::Serve | DhcpRole::Share);
            if answering(now) && !answering(was) {
                let s = Arc::clone(&shared);
                match tokio::task::spawn_blocking(move || s.leases()).await {
                    Ok(Ok(leases)) => {
                        let mut t = Table::default();
                        for l in leases {
                            t.apply(l);
                        }
                        let place = shared.place();
                        if let Some((i, n)) = place {
                            t.spread(i, n);
                        }
                        let what = match (now, place) {
                            (DhcpRole::Share, Some((i, n))) => format!("member {} of {n} of the DHCP group: shared leases loaded; answering its share of the clients", i + 1),
                            _ => "elected DHCP server: shared leases loaded; answering".to_string(),
                        };
                        info!(leases = t.len(), declined = t.declined().count(), "{what}");
                        *table.lock().unwrap_or_else(|p| p.into_inner()) = t;
                        let _ = tx.send(now);
                    }
                    Ok(Err(e)) => {
                        warn!(error = %e, "elected DHCP server, but the shared leases could not be read: not granting leases; trying again in 1 s");
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
                match now {
                    DhcpRole::ReservedOnly => warn!("the shared store cannot be reached: DHCP answers the site's nodes only and grants no other address"),
                    _ => info!("another appliance is the elected DHCP server: not answering"),
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
