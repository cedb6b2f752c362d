//! bootd's integration tests: golden renders, and the real `run` on
//! loopback talked to by real clients (hyper and curl).

mod admission;
mod blocking_store;
mod dhcp;
mod golden;
mod harness;
mod host_network;
mod http;
mod http_limits;
mod identity;
mod inspection;
mod ipv6_render;
mod media;
mod state_dir;
mod timeline;
mod trust;
