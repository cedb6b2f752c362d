//! lbd's integration tests: one binary, real sockets on loopback.

mod admin_limits;
mod bootstrap;
mod golden;
mod harness;
mod keepalived;
mod process;
mod proxy;
mod timing;
