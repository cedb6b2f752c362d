//! DHCPv6 (RFC 8415) for the provisioning network: stateful addresses
//! (IA_NA) with reservations matched by MAC (from the client's DUID-LL or
//! DUID-LLT, a relay's client link-layer address option, or an EUI-64
//! link-local address), relays, and the boot URL (option 59) decided as
//! DHCPv4's boot file is. Bindings are durable before the Reply.
//!
//! Router advertisements are not sent here: the link's router (or an
//! RA daemon) sends them with the M flag, which tells clients to ask.

pub mod core;
pub mod leases;
pub mod server;
pub mod wire;
