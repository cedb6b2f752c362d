//! The DHCPv6 socket loop: receive, take relay envelopes off, decide
//! ([`super::core::answer`]), make bindings durable, then reply (to the
//! client's link-local address on port 546, or to the relay on 547).
//!
//! Every message is counted (`bootd_dhcp6_packets_total{kind}`); its log
//! lines are not one per message: anyone on the link can send as many as
//! they like, so each kind of line is let through at most 10 times a
//! second, the next one through saying how many were left out
//! (`suppressed=N`).

use super::core::{self, Request};
use super::leases::{Lease6, LeaseState, Store, Table};
use super::wire;
use crate::journal::{settled, Durable};
use crate::{Context, Event};
use runtime::logging::Throttle;
use std::io;
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6};
use std::path::Path;
use std::sync::{Arc, Mutex};
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

/// At most 10 lines a second of each kind (`suppressed`: left out before).
static MALFORMED: Throttle = Throttle::new(10);
static NOT_ANSWERED: Throttle = Throttle::new(10);
static ANSWERED: Throttle = Throttle::new(10);
static NOT_DURABLE: Throttle = Throttle::new(10);
static NOT_SENT: Throttle = Throttle::new(10);
static NOT_RECEIVED: Throttle = Throttle::new(1);

/// All_DHCP_Relay_Agents_and_Servers (RFC 8415 §7.1).
pub const ALL_SERVERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 1, 2);
pub const CLIENT_PORT: u16 = 546;
pub const SERVER_PORT: u16 = 547;

/// The DHCPv6 socket: IPv6 only, listening on `addr`, in the servers'
/// multicast group on `interface`.
pub fn bind(addr: SocketAddr, interface: &str) -> io::Result<UdpSocket> {
    let ifindex = nix::net::if_::if_nametoindex(interface)
        .map_err(|e| io::Error::other(format!("interface {interface}: {e}")))?;
    let s = socket2::Socket::new(
        socket2::Domain::IPV6,
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    s.set_only_v6(true)?;
    s.set_reuse_address(true)?;
    let _ = s.set_recv_buffer_size(4 << 20);
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    s.join_multicast_v6(&ALL_SERVERS, ifindex)?;
    // Replies to link-local addresses leave through the DHCP interface.
    s.set_multicast_if_v6(ifindex)?;
    UdpSocket::from_std(s.into())
}

/// This server's DUID, made once and kept in the state directory: a
/// DUID-UUID (type 4) of random bytes. Clients renew with it, so it must
/// not change across restarts.
pub fn server_duid(state_dir: &Path) -> io::Result<Vec<u8>> {
    let path = state_dir.join("dhcp6-server-duid");
    match std::fs::read(&path) {
        Ok(b) if b.len() == 18 && b[..2] == [0, 4] => return Ok(b),
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: not a DUID-UUID", path.display()),
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut duid = vec![0, 4];
    duid.extend_from_slice(&rand::random::<[u8; 16]>());
    runtime::fs::write_atomic(&path, &duid, 0o644)?;
    Ok(duid)
}

pub struct Server {
    /// The live site, the observer of each exchange, the counters.
    pub cx: Context,
    pub table: Arc<Mutex<Table>>,
    pub store: Store,
    pub server_id: Vec<u8>,
    /// The interface direct clients are on (scope of their link-local address).
    pub ifindex: u32,
}

fn now() -> u64 {
    runtime::clock::unix_secs()
}

impl Server {
    pub async fn run(self: Arc<Self>, socket: UdpSocket, shutdown: CancellationToken) {
        let socket = Arc::new(socket);
        let tracker = TaskTracker::new();
        let mut buf = vec![0u8; 65_536];
        loop {
            let (n, src) = tokio::select! {
                _ = shutdown.cancelled() => break,
                r = socket.recv_from(&mut buf) => match r {
                    Ok(x) => x,
                    Err(e) => {
                        if let Some(suppressed) = NOT_RECEIVED.allow() {
                            warn!(error = %e, suppressed, "DHCPv6 receive failed");
                        }
                        continue;
                    }
                },
            };
            let SocketAddr::V6(src) = src else { continue };
            let Some(job) = self.handle(&socket, &buf[..n], src) else {
                continue;
            };
            // Queued here, in the order the table took the bindings (a
            // Request and a Release of one IA reach the file as they
            // happened); this waits only while the writer's queue is full.
            match self.store.enqueue(job.commit).await {
                Ok(durable) => {
                    tracker.spawn(Arc::clone(&self).reply_when(
                        durable,
                        Arc::clone(&socket),
                        job.reply,
                    ));
                }
                Err(e) => {
                    if let Some(suppressed) = NOT_DURABLE.allow() {
                        warn!(xid = job.reply.xid, error = %e, suppressed, "DHCPv6 binding not durable: Reply withheld (the client will retry)");
                    }
                    self.count("store_error");
                }
            }
        }
        tracker.close();
        tracker.wait().await;
    }

    fn count(&self, kind: &'static str) {
        self.cx.metrics.count6(kind);
    }

    /// Answers one datagram: at once when nothing is to be recorded, or
    /// the bindings to make durable and the Reply that waits for them.
    fn handle(&self, socket: &UdpSocket, packet: &[u8], src: SocketAddrV6) -> Option<Job> {
        let (hops, inner) = match wire::unwrap(packet) {
            Ok(x) => x,
            Err(why) => {
                self.count("malformed");
                if let Some(suppressed) = MALFORMED.allow() {
                    debug!(%src, len = packet.len(), %why, suppressed, "malformed DHCPv6 message dropped");
                }
                return None;
            }
        };
        let msg = match wire::Msg::parse(inner) {
            Ok(m) => m,
            Err(why) => {
                self.count("malformed");
                if let Some(suppressed) = MALFORMED.allow() {
                    debug!(%src, len = packet.len(), %why, suppressed, "malformed DHCPv6 message dropped");
                }
                return None;
            }
        };
        let site = (self.cx.site)();
        let outcome = {
            let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
            let req = Request {
                msg: &msg,
                hops: &hops,
                src: *src.ip(),
            };
            let o = core::answer(&site, &mut table, &self.server_id, &req, now());
            self.cx
                .metrics
                .v6_bindings
                .set(i64::try_from(table.len()).unwrap_or(i64::MAX));
            o
        };
        let xid = u32::from_be_bytes([0, msg.xid[0], msg.xid[1], msg.xid[2]]);
        match outcome.kind {
            "malformed" | "ignored" | "not-ours" => {
                if let Some(suppressed) = NOT_ANSWERED.allow() {
                    info!(%src, xid, kind = outcome.kind, reason = %outcome.reason.escape_debug(), suppressed, "DHCPv6 message not answered");
                }
            }
            _ => {
                if let Some(suppressed) = ANSWERED.allow() {
                    info!(%src, xid, kind = outcome.kind, reason = %outcome.reason.escape_debug(), suppressed, "DHCPv6")
                }
            }
        }
        let firmware = {
            let c = core::client_info(&msg);
            c.ipxe || c.arch.is_some()
        };
        let mac = outcome.mac;
        if let Some(mac) = mac {
            let mut event = Event::new(mac, outcome.kind, outcome.reason.clone());
            event.firmware = firmware;
            event.error = matches!(outcome.kind, "ignored" | "malformed");
            self.cx.observe(event);
        }
        let Some(reply) = outcome.reply else {
            self.count(outcome.kind);
            return None;
        };
        let bytes = wire::wrap(&hops, reply.encode());
        // Relayed: back to the relay that sent it, on the servers' port
        // 547 (RFC 8415 §19; not the datagram's source port, so a forged
        // Relay-forward cannot aim replies at any port); direct: to the
        // client's port on the address it sent from.
        let to = if hops.is_empty() {
            SocketAddrV6::new(
                *src.ip(),
                CLIENT_PORT,
                0,
                if src.scope_id() != 0 {
                    src.scope_id()
                } else {
                    self.ifindex
                },
            )
        } else {
            SocketAddrV6::new(*src.ip(), SERVER_PORT, 0, src.scope_id())
        };
        let kind = outcome.kind;
        let bound = outcome
            .commit
            .iter()
            .find(|l| l.state == LeaseState::Active)
            .map(|l| l.ip);
        if outcome.commit.is_empty() {
            self.count(kind);
            send(socket, &bytes, to);
            return None;
        }
        Some(Job {
            commit: outcome.commit,
            reply: Reply {
                xid,
                bytes,
                to,
                kind,
                mac,
                bound,
            },
        })
    }

    /// Sends `reply` once its bindings are on disk; withholds it if they
    /// could not be written.
    async fn reply_when(self: Arc<Self>, durable: Durable, socket: Arc<UdpSocket>, reply: Reply) {
        if let Err(e) = settled(durable).await {
            if let Some(suppressed) = NOT_DURABLE.allow() {
                warn!(xid = reply.xid, error = %e, suppressed, "DHCPv6 binding not durable: Reply withheld (the client will retry)");
            }
            self.count("store_error");
            return;
        }
        self.count(reply.kind);
        send(&socket, &reply.bytes, reply.to);
        if let Some(mac) = reply.mac {
            let what = format!("DHCPv6 Reply sent ({})", reply.kind);
            let mut event = Event::new(mac, "reply", what);
            event.binds = reply.bound.map(std::net::IpAddr::V6);
            self.cx.observe(event);
        }
    }
}

/// Bindings to make durable, and the Reply that waits for them.
struct Job {
    commit: Vec<Lease6>,
    reply: Reply,
}

struct Reply {
    xid: u32,
    bytes: Vec<u8>,
    to: SocketAddrV6,
    kind: &'static str,
    mac: Option<site::Mac>,
    bound: Option<std::net::Ipv6Addr>,
}

fn send(socket: &UdpSocket, bytes: &[u8], to: SocketAddrV6) {
    if let Err(e) = socket.try_send_to(bytes, to.into()) {
        if let Some(suppressed) = NOT_SENT.allow() {
            warn!(%to, error = %e, suppressed, "DHCPv6 reply not sent");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The log lines of `kind` (a piece of their text) for `src`: how many,
    /// and how many they say were left out.
    fn lines(log: &str, src: &str, kind: &str) -> (u64, u64) {
        let of: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(src) && l.contains(kind))
            .collect();
        let left_out = of
            .iter()
            .filter_map(|l| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix("suppressed="))
            })
            .map(|n| n.parse::<u64>().unwrap())
            .sum();
        (of.len() as u64, left_out)
    }

    /// A flood from the link: every message counted, each kind of log line
    /// (answered, malformed, reply not sent) at most 10 a second, and the
    /// next line of each says how many were left out.
    #[tokio::test]
    async fn a_flood_is_counted_whole_and_logged_a_few_lines_a_second() {
        let logs = testkit::logs::logs();
        let site = Arc::new(
            site::load(
                &Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab-dual/site.yaml"),
            )
            .unwrap(),
        );
        let dir = tempfile::tempdir().unwrap();
        let (store, table) = Store::open(dir.path()).unwrap();
        let metrics = Arc::new(crate::Metrics::default());
        let server = Server {
            cx: Context {
                site: Arc::new(move || Arc::clone(&site)),
                observer: crate::Observer(Arc::new(|_| {})),
                metrics: Arc::clone(&metrics),
            },
            table: Arc::new(Mutex::new(table)),
            store,
            server_id: [0, 4].into_iter().chain([7; 16]).collect(),
            ifindex: 0,
        };
        let socket = UdpSocket::bind("[::1]:0").await.unwrap();
        // Answered (an Information-Request), and malformed.
        let src = SocketAddrV6::new("fe80::f100:d6".parse().unwrap(), CLIENT_PORT, 0, 0);
        let mut m = wire::Msg::new(wire::INFORMATION_REQUEST, [1, 2, 3]);
        m.push(
            wire::OPT_CLIENT_ID,
            vec![0, 3, 0, 1, 0x52, 0x54, 0, 0x77, 0xf1, 0xd6],
        );
        let answered = m.encode();
        let flood = || {
            for _ in 0..1000 {
                assert!(server.handle(&socket, &answered, src).is_none());
                assert!(server.handle(&socket, &[0xff], src).is_none());
            }
        };
        let start = std::time::Instant::now();
        flood();
        let secs = start.elapsed().as_secs();
        // The next second: one more of each, whose lines carry the counts.
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
        assert!(server.handle(&socket, &answered, src).is_none());
        assert!(server.handle(&socket, &[0xff], src).is_none());
        let log = String::from_utf8_lossy(&logs.lock().unwrap()).to_string();
        let at = "fe80::f100:d6";
        // A flood under `secs + 1` seconds can touch `secs + 2` one-second
        // windows of 10 lines each; the message after the pause adds one.
        let bound = 10 * (secs + 2) + 1;
        for kind in ["information-request", "malformed DHCPv6 message dropped"] {
            let (shown, left_out) = lines(&log, at, kind);
            assert!(shown <= bound, "{kind}: {shown} lines in {secs} s");
            assert_eq!(
                shown + left_out,
                1001,
                "{kind}: {shown} shown, {left_out} left out"
            );
        }
        // Whether a send fails is the socket's business (here, until tokio
        // has seen it writable); its lines are bounded all the same.
        let (shown, _) = lines(&log, at, "DHCPv6 reply not sent");
        assert!(shown <= bound, "reply not sent: {shown} lines in {secs} s");
        let count = |kind| {
            metrics
                .v6
                .get_or_create(&crate::metrics::Kind { kind })
                .get()
        };
        assert_eq!(count("information-request"), 1001, "every one counted");
        assert_eq!(count("malformed"), 1001, "every one counted");
    }
}
