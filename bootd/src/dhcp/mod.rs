//! bootd's DHCPv4 server: reservations from the site's nodes, an optional
//! dynamic pool, proxyDHCP, relays, and arch-aware network boot.
//!
//! - [`boot`]: which firmware asks, what it boots (pure).
//! - [`core`]: the whole answer to one request (pure; `answer`).
//! - [`leases`]: the lease table and its crash-safe store (group commit).
//! - [`server`]: sockets, reply addressing, durability before ACK.
//! - [`wire`]: structural checks on raw packets before decoding.
//!
//! Invariant: no ACK leaves before the lease it grants is fdatasync'ed.

pub mod boot;
pub mod core;
pub mod journal;
pub mod leases;
pub mod neigh;
pub mod server;
pub mod shared;
pub mod wire;
