//! The per-node event timeline: what bootd saw a node do (DHCP lease, iPXE
//! script, GRUB config over HTTP or TFTP, Ignition) and what the controller
//! did for it (provider calls). Recorded from the request paths through
//! [`Sink::record`], which never blocks: events go over a bounded channel to
//! one writer task that stores them in batches and updates the node's
//! conditions; when the channel is full, events are dropped and counted.

use crate::store::{now_ms, Event};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use tokio::sync::mpsc;

/// Event kinds, and the condition each sets.
pub const DHCP: &str = "dhcp";
pub const IPXE: &str = "ipxe";
pub const GRUB: &str = "grub";
pub const IGNITION: &str = "ignition";
pub const PROVIDER: &str = "provider";
pub const API: &str = "api";

/// Capacity of the channel to the writer.
pub const CAPACITY: usize = 4096;

#[derive(Debug, Default)]
pub struct Sink {
    tx: OnceLock<mpsc::Sender<(String, Event)>>,
    pub dropped: AtomicU64,
}

impl Sink {
    /// Connects the sink to a writer; before that (no API), events are ignored.
    pub fn connect(&self) -> Option<mpsc::Receiver<(String, Event)>> {
        let (tx, rx) = mpsc::channel(CAPACITY);
        self.tx.set(tx).ok().map(|_| rx)
    }

    pub fn record(&self, node: &str, kind: &str, message: impl Into<String>) {
        let Some(tx) = self.tx.get() else { return };
        let e = Event { at: now_ms(), kind: kind.to_string(), message: message.into() };
        if tx.try_send((node.to_string(), e)).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The condition an event makes True, with its reason.
pub fn condition_of(kind: &str) -> Option<(&'static str, &'static str)> {
    match kind {
        DHCP => Some(("NetworkBooted", "DHCPLease")),
        IPXE => Some(("NetworkBooted", "IPXEScriptServed")),
        GRUB => Some(("NetworkBooted", "GRUBConfigServed")),
        IGNITION => Some(("IgnitionServed", "IgnitionServed")),
        _ => None,
    }
}

/// The node an HTTP request was about, for the routes that make events:
/// `/ipxe/<name>.ipxe`, `/ipxe/node?mac=`, `/grub/grub.cfg-01-<mac>`,
/// `/ignition/<name>` (not the pointer: fetching it is not fetching the config).
pub fn http_event(site: &site::Site, route: &str, path: &str, query: Option<&str>) -> Option<(String, &'static str, String)> {
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let by_mac = |m: &str| m.parse::<site::Mac>().ok().and_then(|m| site.node_by_mac(&m)).map(|n| n.name.clone());
    match (route, segs.as_slice()) {
        ("ipxe", ["ipxe", "node"]) => {
            let mac = query?.split('&').find_map(|kv| kv.strip_prefix("mac="))?;
            let mac = percent_encoding::percent_decode_str(mac).decode_utf8().ok()?;
            Some((by_mac(&mac)?, IPXE, "iPXE script served".into()))
        }
        ("ipxe", ["ipxe", file]) => {
            let n = site.node(file.strip_suffix(".ipxe")?)?;
            Some((n.name.clone(), IPXE, "iPXE script served".into()))
        }
        ("grub", ["grub", file]) => Some((by_mac(file.strip_prefix("grub.cfg-01-")?)?, GRUB, "GRUB config served over HTTP".into())),
        ("ignition", ["ignition", name]) => Some((site.node(name)?.name.clone(), IGNITION, "Ignition config served".into())),
        _ => None,
    }
}
