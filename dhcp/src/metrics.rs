//! DHCP counters. The one label is a fixed word (the message kind or why
//! it was not answered): never a MAC, a hostname or a DUID.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Kind {
    pub kind: &'static str,
}

/// Cloned handles are shared with the registry they are registered in.
#[derive(Debug, Default)]
pub struct Metrics {
    /// DHCPv4 requests by outcome (`dhcp_packets`).
    pub v4: Family<Kind, Counter>,
    /// DHCPv6 messages by kind (`dhcp6_packets`).
    pub v6: Family<Kind, Counter>,
    /// Bindings in the DHCPv6 table (`host.dhcp6.maxBindings` bounds it).
    pub v6_bindings: Gauge,
}

impl Metrics {
    /// Registers every counter in `registry` (bootd's, prefixed `bootd`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "dhcp_packets",
            "DHCP requests by outcome (offer, ack, nak, inform, release, decline, proxy, ignored, malformed, store_error)",
            self.v4.clone(),
        );
        registry.register(
            "dhcp6_packets",
            "DHCPv6 messages by kind (solicit, request, renew, rebind, release, decline, confirm, information-request) once answered, or why not (ignored, malformed, not-ours, store_error)",
            self.v6.clone(),
        );
        registry.register(
            "dhcp6_bindings",
            "Bindings in the DHCPv6 table, expired ones within their hour of grace included (host.dhcp6.maxBindings bounds it)",
            self.v6_bindings.clone(),
        );
    }

    pub(crate) fn count4(&self, kind: &'static str) {
        self.v4.get_or_create(&Kind { kind }).inc();
    }

    pub(crate) fn count6(&self, kind: &'static str) {
        self.v6.get_or_create(&Kind { kind }).inc();
    }
}
