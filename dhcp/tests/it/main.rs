//! The dhcp crate's integration tests: each server's `answer` without
//! sockets, every behaviour, with golden dumps of the replies in
//! `dhcp/tests/golden/`. (The servers on loopback, through bootd's `run`:
//! bootd/tests/it/dhcp.rs; a kill -9 under load: appliance/tests/leases.rs.)

mod v4_core;
mod v6_core;
