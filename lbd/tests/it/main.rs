//! lbd's integration tests: one binary, real sockets on loopback.

mod bootstrap;
mod golden;
mod harness;
mod process;
mod proxy;
mod timing;
