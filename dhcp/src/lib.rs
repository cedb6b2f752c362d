//! The provisioning network's DHCP servers, which bootd runs: DHCPv4
//! (reservations from the site's nodes, a dynamic pool, proxyDHCP, relays,
//! several appliances sharing leases) and DHCPv6 (stateful IA_NA, relays),
//! both telling network-boot firmware what to boot, both with leases on
//! disk before the reply that grants them.
//!
//! Modules:
//! - [`v4`]: DHCPv4: boot decision, the pure answer, lease table, socket
//!   loop, neighbour entries, wire checks, leases shared between appliances.
//! - [`v6`]: DHCPv6: the pure answer, binding table, socket loop, codec.
//! - [`journal`]: the lease file both keep (group commit, online compaction).
//! - [`bindings`]: what the two lease tables share (client → lease, address
//!   → client, declined addresses, the compacted file, the pool walk).
//! - [`metrics`]: Prometheus counters (registered into bootd's registry).
//!
//! The crate knows nothing of bootd: it reaches the rest only through a
//! [`Context`] bootd builds (the site served now, an [`Observer`] of each
//! exchange, the counters), through the lease tables it is handed (bootd
//! reads them too: a node's lease address counts as its own), and, with
//! several appliances, through [`v4::ha::SharedLeases`].
//!
//! Invariants:
//! - No ACK or Reply that grants an address leaves before its lease is
//!   fdatasync'ed (or committed to the shared store).
//! - The answer to a request ([`v4::core::answer`], [`v6::core::answer`])
//!   is pure: no socket, clock or file inside; every behaviour is a unit
//!   test.
//! - Every packet is checked whole before it is decoded; a malformed one
//!   is counted and dropped, never half-answered.
//! - The lease tables' mutexes are std: held for one decision, never
//!   across an await.

pub mod bindings;
pub mod journal;
pub mod metrics;
pub mod v4;
pub mod v6;

pub use metrics::Metrics;

use site::{Mac, Site};
use std::net::IpAddr;
use std::sync::Arc;

/// The site served now (bootd's live snapshot: a reload swaps it between
/// two requests, never during one).
pub type LiveSite = Arc<dyn Fn() -> Arc<Site> + Send + Sync>;

/// Told each step of a client's exchange (bootd's node timeline). Called
/// on the packet path: it must not block.
#[derive(Clone)]
pub struct Observer(pub Arc<dyn Fn(Event) + Send + Sync>);

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
}

/// One step of a client's exchange, as the [`Observer`] is told it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The client's hardware address.
    pub mac: Mac,
    /// When (unix microseconds of `runtime::clock`); a reply that waited
    /// for the disk: when it left.
    pub at_us: i64,
    /// `discover`, `request`, `offer`, `ack`, `nak`, `ignored`, `reply`, …
    pub what: &'static str,
    pub detail: String,
    pub error: bool,
    /// From network-boot firmware (PXE, UEFI HTTP, iPXE).
    pub firmware: bool,
    /// An OFFER, ACK or Reply binding this address to `mac`.
    pub binds: Option<IpAddr>,
}

impl Event {
    /// `what` happened to `mac` now.
    pub fn new(mac: Mac, what: &'static str, detail: impl Into<String>) -> Event {
        Event {
            mac,
            at_us: runtime::clock::unix_us(),
            what,
            detail: detail.into(),
            error: false,
            firmware: false,
            binds: None,
        }
    }
    pub fn error(mut self) -> Event {
        self.error = true;
        self
    }
}

/// What the servers take from the program that runs them.
#[derive(Clone)]
pub struct Context {
    pub site: LiveSite,
    pub observer: Observer,
    pub metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Context")
    }
}

impl Context {
    /// Tells the observer.
    pub fn observe(&self, e: Event) {
        (self.observer.0)(e)
    }
}
