//! The DHCP socket loop. Decisions come from [`super::core::answer`]; this
//! file only receives, counts, makes leases durable before their ACK, and
//! addresses replies (RFC 2131 §4.1).
//!
//! Unicast to a client that has no address yet (broadcast flag clear, no
//! ciaddr, no giaddr) needs a neighbour entry for yiaddr → chaddr, since the
//! client cannot answer ARP: we add one over rtnetlink (as `ip neigh
//! replace` does) and then send to yiaddr. Without a bound interface, or if
//! that fails, the reply is broadcast (which every client accepts).

use super::core::{self, Dest, Rx};
use super::ha::{DhcpRole, Durable, NotCommitted, SharedLeases};
use super::leases::Table;
use crate::{Context, Event};
use dhcproto::v4::Message;
use dhcproto::{Decodable, Decoder, Encodable, Encoder};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::{Arc, Mutex};
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

/// Ports replies go to; tests move them off the privileged ones.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub client: u16,
    pub server: u16,
}

impl Default for Ports {
    fn default() -> Self {
        Ports {
            client: 68,
            server: 67,
        }
    }
}

/// The host's network interfaces that are up, loopback left out, from
/// `/sys/class/net` (empty when it cannot be read).
pub fn host_interfaces() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/sys/class/net")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let up = std::fs::read_to_string(e.path().join("operstate"))
                .map(|s| s.trim() != "down")
                .unwrap_or(false);
            (name != "lo" && up).then_some(name)
        })
        .collect();
    v.sort();
    v
}

/// What to say when DHCP is bound to no interface on a host with more
/// than one: it answers on all of them (a network that has its own DHCP
/// server gets a second one). `None`: nothing to say.
pub fn unbound_warning(interface: Option<&str>, interfaces: &[String]) -> Option<String> {
    if interface.is_some() || interfaces.len() <= 1 {
        return None;
    }
    Some(format!(
        "host.dhcp.interface is not set and this host has {} interfaces ({}): bootd's DHCP answers on every one of them; set host.dhcp.interface to the provisioning network's",
        interfaces.len(),
        interfaces.join(", ")
    ))
}

/// A UDP socket for DHCP: broadcast allowed, optionally bound to one
/// interface (so broadcasts from other networks are never seen, and ours
/// leave through it).
pub fn bind(addr: SocketAddr, interface: Option<&str>) -> io::Result<UdpSocket> {
    if let Some(w) = unbound_warning(interface, &host_interfaces()) {
        warn!("{w}");
    }
    let s = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    s.set_reuse_address(true)?;
    s.set_broadcast(true)?;
    // A rack powering on sends bursts; the default (~200 KiB) overflows.
    // The kernel caps this at net.core.rmem_max; best effort.
    let _ = s.set_recv_buffer_size(4 << 20);
    if let Some(i) = interface {
        s.bind_device(Some(i.as_bytes()))?;
    }
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    UdpSocket::from_std(s.into())
}

pub struct Server {
    /// The live site, the observer of each exchange, the counters.
    pub cx: Context,
    pub table: Arc<Mutex<Table>>,
    pub store: Durable,
    /// With a shared store: what this appliance answers, per scope
    /// (`None`: all).
    pub active: Option<super::ha::Active>,
    pub ports: Ports,
    /// For neighbour entries (hardware unicast); `None` → broadcast instead.
    pub ifindex: Option<u32>,
    /// This host's address on the DHCP link when `serverAddress` is in
    /// another network ([`link_address`]).
    pub link: Option<Ipv4Addr>,
}

/// An address of the DHCP interface (every interface but `lo` when none is
/// set) in a site network, when no such address is in `serverAddress`'s
/// network: where direct clients are (an appliance of another rack).
/// `None` when `serverAddress`'s network is on the link (the usual case).
pub fn link_address(site: &site::Site) -> Option<Ipv4Addr> {
    let dhcp = site.host.dhcp.as_ref()?;
    let iface = dhcp.interface.as_deref();
    let mine: Vec<Ipv4Addr> = nix::ifaddrs::getifaddrs()
        .ok()?
        .filter(|a| match iface {
            Some(i) => a.interface_name == i,
            None => a.interface_name != "lo",
        })
        .filter_map(|a| Some(a.address?.as_sockaddr_in()?.ip()))
        .collect();
    let net_of = |ip: Ipv4Addr| {
        site.networks
            .iter()
            .position(|n| n.contains(std::net::IpAddr::V4(ip)))
    };
    let server_net = net_of(dhcp.server_address);
    if server_net.is_some() && mine.iter().any(|a| net_of(*a) == server_net) {
        return None;
    }
    mine.into_iter().find(|a| net_of(*a).is_some())
}

/// Whether the request's client is one of the site's nodes (a reserved
/// address).
fn is_node(site: &site::Site, req: &Message) -> bool {
    req.chaddr().len() >= 6 && {
        let mut raw = [0u8; 6];
        raw.copy_from_slice(&req.chaddr()[..6]);
        core::node_of(site, req, &site::Mac(raw)).is_some()
    }
}

/// Load balancing: whether this appliance answers `req`. A client with an
/// address (ciaddr: renewing or rebinding) is answered by whichever
/// appliance it reaches, as RFC 3074 has it; a new one by the appliance
/// its identifier (option 61, else the hardware address) hashes to.
fn ours(shared: &dyn SharedLeases, scope: Option<&str>, req: &Message) -> bool {
    if !req.ciaddr().is_unspecified() {
        return true;
    }
    match req.opts().get(dhcproto::v4::OptionCode::ClientIdentifier) {
        Some(dhcproto::v4::DhcpOption::ClientIdentifier(id)) if !id.is_empty() => {
            shared.answers(scope, id)
        }
        _ => shared.answers(scope, req.chaddr()),
    }
}

/// Lease times: the appliance's clock, which a step of the system clock
/// does not move (`runtime::clock`).
fn now() -> u64 {
    runtime::clock::unix_secs()
}

impl Server {
    /// Serves `socket` until `shutdown`. `local_port` is 67, or 4011 for
    /// the proxyDHCP boot-server socket.
    pub async fn run(
        self: Arc<Self>,
        socket: UdpSocket,
        local_port: u16,
        shutdown: CancellationToken,
    ) {
        let socket = Arc::new(socket);
        let tracker = TaskTracker::new();
        let mut buf = vec![0u8; 4096];
        loop {
            let (n, src) = tokio::select! {
                _ = shutdown.cancelled() => break,
                r = socket.recv_from(&mut buf) => match r {
                    Ok(x) => x,
                    Err(e) => { warn!(error = %e, "DHCP receive failed"); continue; }
                },
            };
            let SocketAddr::V4(src) = src else { continue };
            self.handle(&socket, &tracker, &buf[..n], src, local_port);
        }
        tracker.close();
        tracker.wait().await;
    }

    fn count(&self, kind: &'static str) {
        self.cx.metrics.count4(kind);
    }

    fn handle(
        self: &Arc<Self>,
        socket: &Arc<UdpSocket>,
        tracker: &TaskTracker,
        packet: &[u8],
        src: SocketAddrV4,
        local_port: u16,
    ) {
        if let Err(why) = super::wire::check(packet) {
            self.count("malformed");
            debug!(%src, len = packet.len(), why, "malformed DHCP packet dropped");
            return;
        }
        // Relayed (giaddr set, bytes 24-27) or this segment's broadcast.
        let relayed = packet.get(24..28).is_some_and(|g| g != [0, 0, 0, 0]);
        let (role, scope) = match self.active.as_ref().map(|a| a.role(relayed)) {
            Some((r, s)) => (Some(r), s),
            None => (None, None),
        };
        if role == Some(DhcpRole::Standby) {
            // Another appliance is the elected DHCP server.
            self.count("standby");
            return;
        }
        let mut req = match Message::decode(&mut Decoder::new(packet)) {
            Ok(m) => m,
            Err(e) => {
                self.count("malformed");
                debug!(%src, len = packet.len(), error = %e, "malformed DHCP packet dropped");
                return;
            }
        };
        // Option 82 as the relay wrote it, to echo byte for byte.
        if let Some(raw) = super::wire::relay_agent_info(packet) {
            core::put_relay_info(&mut req, raw);
        }
        if role == Some(DhcpRole::Share) {
            if let Durable::Shared { store: shared, .. } = &self.store {
                if !ours(shared.as_ref(), scope, &req) {
                    // Another appliance of the group answers this client.
                    self.count("peer");
                    return;
                }
            }
        }
        let site = (self.cx.site)();
        // Without the shared store: the site's nodes only, from their
        // reserved addresses (nothing to record: no lease to commit).
        let unrecorded = role == Some(DhcpRole::ReservedOnly);
        if unrecorded && !is_node(&site, &req) {
            self.count("no_store");
            static LOGGED: runtime::logging::Throttle = runtime::logging::Throttle::new(1);
            if let Some(suppressed) = LOGGED.allow() {
                warn!(%src, suppressed, "shared store unavailable: no address granted to a machine that is not a site node");
            }
            return;
        }
        let outcome = {
            let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
            let rx = Rx {
                src,
                local_port,
                link: self.link,
            };
            let o = core::answer(&site, &mut table, &req, rx, now());
            // Update memory now so a concurrent request cannot be handed the
            // same pool address; the ACK still waits for the disk.
            if let Some(l) = &o.commit {
                table.apply_unwritten(l.clone());
            }
            o
        };
        // An answer that waits for the disk is counted once it is sent
        // (or as `store_error` when the disk refuses it).
        let (kind, waits) = (
            outcome.kind,
            outcome.commit.is_some() && outcome.reply.is_some(),
        );
        if !waits {
            self.count(outcome.kind);
        }
        let xid = req.xid();
        let tl = self.observed_client(&req);
        if let Some((mac, firmware)) = &tl {
            let what = match req.opts().msg_type() {
                Some(dhcproto::v4::MessageType::Discover) => "discover",
                Some(dhcproto::v4::MessageType::Request) => "request",
                Some(dhcproto::v4::MessageType::Inform) => "inform",
                Some(dhcproto::v4::MessageType::Release) => "release",
                Some(dhcproto::v4::MessageType::Decline) => "decline",
                _ => "other",
            };
            let client = super::boot::ClientInfo::from_message(&req);
            let mut event = Event::new(
                *mac,
                what,
                format!(
                    "{} xid {xid:#010x} from {src}{}{}",
                    what.to_uppercase(),
                    client
                        .arch
                        .map(|a| format!(", arch {a}"))
                        .unwrap_or_default(),
                    client
                        .vendor_class
                        .as_deref()
                        .map(|v| format!(", vendor class {:?}", v.escape_debug().to_string()))
                        .unwrap_or_default(),
                ),
            );
            event.firmware = *firmware;
            self.cx.observe(event);
            if matches!(outcome.kind, "ignored" | "disabled") {
                self.cx
                    .observe(Event::new(*mac, "ignored", outcome.reason.clone()).error());
            }
        }
        match outcome.kind {
            "malformed" | "ignored" => {
                // Anyone can send these, as fast as they like: counted
                // always, logged at most 10 times a second.
                static LOGGED: runtime::logging::Throttle = runtime::logging::Throttle::new(10);
                if let Some(suppressed) = LOGGED.allow() {
                    info!(%src, xid, kind = outcome.kind, reason = %outcome.reason.escape_debug(), suppressed, "DHCP request not answered")
                }
            }
            _ => {
                info!(%src, xid, kind = outcome.kind, reason = %outcome.reason.escape_debug(), "DHCP")
            }
        }
        let Some((reply, dest)) = outcome.reply else {
            if let Some(l) = outcome.commit {
                // A RELEASE or DECLINE: nothing to withhold; the writer
                // logs a failure naming the file.
                let this = Arc::clone(self);
                tracker.spawn(async move {
                    if let Err(e) = this.store.commit(l).await {
                        this.not_committed(e);
                    }
                });
            }
            return;
        };
        let mut bytes = Vec::with_capacity(576);
        if reply.encode(&mut Encoder::new(&mut bytes)).is_err() {
            warn!(xid, "DHCP reply could not be encoded");
            return;
        }
        // BOOTP's minimum message (RFC 1542 3.3), which some firmware
        // (PowerVM's) insists on: zero padding after the End option.
        if bytes.len() < 300 {
            bytes.resize(300, 0);
        }
        let this = Arc::clone(self);
        let socket = Arc::clone(socket);
        // Recorded when the reply leaves (an ACK waits for the disk first).
        let sent = tl.map(|(mac, _)| {
            let yiaddr = reply.yiaddr();
            let mut event = Event::new(mac, outcome.kind, outcome.reason.clone());
            event.error = outcome.kind == "nak";
            if !yiaddr.is_unspecified() {
                event.binds = Some(std::net::IpAddr::V4(yiaddr));
            }
            event
        });
        match outcome.commit.filter(|_| !unrecorded) {
            None => {
                this.send(&socket, &bytes, dest, src);
                if let Some(event) = sent {
                    this.cx.observe(Event {
                        at_us: runtime::clock::unix_us(),
                        ..event
                    });
                }
            }
            Some(lease) => {
                tracker.spawn(async move {
                    let written = lease.clone();
                    match this.store.commit(lease).await {
                        Ok(()) => {
                            this.table
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .written(&written);
                            this.count(kind);
                            this.send(&socket, &bytes, dest, src);
                            if let Some(event) = sent {
                                this.cx.observe(Event {
                                    at_us: runtime::clock::unix_us(),
                                    ..event
                                });
                            }
                        }
                        Err(e) => {
                            warn!(xid, error = %e, "lease not durable: ACK withheld (the client will retry)");
                            this.not_committed(e);
                        }
                    }
                });
            }
        }
    }

    /// Counts a lease that was not made durable; an address another
    /// appliance gave out is put in the table, so it is not offered again.
    fn not_committed(&self, e: NotCommitted) {
        match e {
            NotCommitted::Io(_) => self.count("store_error"),
            NotCommitted::Taken(other) => {
                self.count("conflict");
                self.table
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .apply(other);
            }
        }
    }

    /// Who a request is about for the observer (its MAC), and whether it
    /// comes from network-boot firmware (PXE, UEFI HTTP, iPXE).
    fn observed_client(&self, req: &Message) -> Option<(site::Mac, bool)> {
        if req.chaddr().len() < 6 {
            return None;
        }
        let mut raw = [0u8; 6];
        raw.copy_from_slice(&req.chaddr()[..6]);
        let client = super::boot::ClientInfo::from_message(req);
        let vc = client.vendor_class.as_deref().unwrap_or("");
        let firmware = client.ipxe
            || vc.starts_with("PXEClient")
            || vc.starts_with("HTTPClient")
            || client.arch.is_some();
        Some((site::Mac(raw), firmware))
    }

    fn send(&self, socket: &UdpSocket, bytes: &[u8], dest: Dest, src: SocketAddrV4) {
        let to = match dest {
            Dest::Relay(gi) => SocketAddrV4::new(gi, self.ports.server),
            Dest::Unicast(ip) => SocketAddrV4::new(ip, self.ports.client),
            Dest::Broadcast => SocketAddrV4::new(Ipv4Addr::BROADCAST, self.ports.client),
            Dest::Source => src,
            Dest::Hardware { ip, mac } => {
                match self.ifindex.map(|i| super::neigh::replace(i, ip, mac)) {
                    Some(Ok(())) => SocketAddrV4::new(ip, self.ports.client),
                    Some(Err(e)) => {
                        debug!(%ip, %mac, error = %e, "no neighbour entry; broadcasting instead");
                        SocketAddrV4::new(Ipv4Addr::BROADCAST, self.ports.client)
                    }
                    None => SocketAddrV4::new(Ipv4Addr::BROADCAST, self.ports.client),
                }
            }
        };
        if let Err(e) = socket.try_send_to(bytes, to.into()) {
            warn!(%to, error = %e, "DHCP reply not sent");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unbound_dhcp_on_a_multi_homed_host_is_warned_about() {
        let two = vec!["br0".to_string(), "eth0".to_string()];
        let w = unbound_warning(None, &two).unwrap();
        assert!(
            w.contains("2 interfaces (br0, eth0)") && w.contains("set host.dhcp.interface"),
            "{w}"
        );
        assert_eq!(unbound_warning(Some("br0"), &two), None);
        assert_eq!(unbound_warning(None, &two[..1]), None);
        assert!(!host_interfaces().contains(&"lo".to_string()));
    }
}
