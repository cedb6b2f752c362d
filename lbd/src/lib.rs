//! lbd: the L4 TCP load balancer for the API, machine-config server and ingress.
//!
//! Not built yet: this crate is a placeholder until its issue ("[4 of 7] lbd").
