//! The DHCPv4 server: reservations from the site's nodes, an optional
//! dynamic pool, proxyDHCP, relays, and arch-aware network boot.
//!
//! - [`boot`]: which firmware asks, what it boots (pure).
//! - [`core`]: the whole answer to one request (pure; `answer`).
//! - [`leases`]: the lease table and its crash-safe store (group commit).
//! - [`server`]: sockets, reply addressing, durability before ACK.
//! - [`neigh`]: neighbour entries, for unicast to clients without an address.
//! - [`ha`]: leases in the store several appliances share, who answers.
//! - [`wire`]: structural checks on raw packets before decoding.
//!
//! Invariant: no ACK leaves before the lease it grants is fdatasync'ed
//! (or committed to the shared store).

pub mod boot;
pub mod core;
pub mod ha;
pub mod leases;
pub mod neigh;
pub mod server;
pub mod wire;
