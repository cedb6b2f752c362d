//! A running transfer's entry in the server's table, and the guard that
//! frees it (and its transfer slot) however the transfer ends.

use super::Shared;
use std::net::SocketAddr;
use std::sync::{Arc, PoisonError};
use tokio_util::sync::CancellationToken;

pub(super) struct Slot {
    pub(super) id: u64,
    pub(super) cancel: CancellationToken,
}

/// Frees a transfer's place when its task ends, however it ends.
pub(super) struct SlotGuard {
    pub(super) shared: Arc<Shared>,
    pub(super) peer: SocketAddr,
    pub(super) id: u64,
    /// The transfer slot, given back (to the first waiting request) when
    /// the transfer ends.
    pub(super) _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        let mut map = self
            .shared
            .transfers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // A replacement from the same port may hold the entry by now.
        if map.get(&self.peer).is_some_and(|s| s.id == self.id) {
            map.remove(&self.peer);
        }
        self.shared.metrics.transfers_active.dec();
    }
}
