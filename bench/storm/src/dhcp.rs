//! DHCP as a relay agent sees it: one UDP socket on the relay address
//! (port 67), every simulated machine's exchange through it, replies
//! matched by transaction id. No raw sockets: the server answers giaddr.
//! With several servers, every message goes to each of them, as a relay
//! with several helper addresses (dhcrelay's server list) forwards it.

use anyhow::{bail, Context, Result};
use dhcproto::v4::{
    Architecture, DhcpOption, Flags, HType, Message, MessageType, Opcode, OptionCode,
};
use dhcproto::{Decodable, Decoder, Encodable, Encoder};
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;

/// Which firmware is asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asker {
    /// A PXE ROM (vendor class PXEClient, option 93 = `arch`).
    Pxe { arch: u16 },
    /// iPXE, after it was loaded (user class "iPXE", option 175).
    Ipxe { arch: u16 },
}

/// What the exchange gave.
#[derive(Debug, Clone)]
pub struct Lease {
    pub ip: Ipv4Addr,
    pub next_server: Ipv4Addr,
    pub file: String,
    /// The server that answered: the address the ACK came from (with a
    /// boot address that keepalived moves, every appliance's server
    /// identifier is that address; the source tells them apart).
    pub server: Ipv4Addr,
    /// Messages sent again after a timeout.
    pub retries: u32,
}

/// The relay socket's receive buffer asked for.
const RECV_BUFFER: usize = 16 << 20;

pub struct Relay {
    sock: Arc<UdpSocket>,
    servers: Vec<SocketAddr>,
    giaddr: Ipv4Addr,
    waiting: Mutex<HashMap<u32, mpsc::UnboundedSender<(Message, SocketAddr)>>>,
    /// Replies no machine waited for (late, duplicate or undecodable).
    pub stray: AtomicU64,
}

impl Relay {
    /// Binds `giaddr:67` and starts receiving; each message is sent to
    /// every one of `servers`.
    pub async fn start(giaddr: Ipv4Addr, servers: Vec<SocketAddr>) -> Result<Arc<Relay>> {
        let sock = UdpSocket::bind((giaddr, 67))
            .await
            .with_context(|| format!("bind {giaddr}:67 (root, in the load's namespace)"))?;
        // One socket receives the replies of every machine: a rack's worth
        // of NIC buffers, not the default 208 KiB (which dropped 250-500
        // replies of a 1 000-machine storm, and made those machines wait
        // for their PXE ROM's 4 s retry). SO_RCVBUFFORCE (root) is not
        // capped by net.core.rmem_max.
        if rustix::net::sockopt::set_socket_recv_buffer_size_force(&sock, RECV_BUFFER).is_err() {
            let _ = socket2::SockRef::from(&sock).set_recv_buffer_size(RECV_BUFFER);
        }
        let relay = Arc::new(Relay {
            sock: Arc::new(sock),
            servers,
            giaddr,
            waiting: Mutex::new(HashMap::new()),
            stray: AtomicU64::new(0),
        });
        let r = Arc::clone(&relay);
        tokio::spawn(async move {
            let mut buf = vec![0u8; 1500];
            loop {
                let Ok((n, from)) = r.sock.recv_from(&mut buf).await else {
                    return;
                };
                let Ok(m) = Message::decode(&mut Decoder::new(&buf[..n])) else {
                    r.stray.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let tx = r.waiting.lock().unwrap().get(&m.xid()).cloned();
                match tx {
                    Some(tx) if tx.send((m, from)).is_ok() => {}
                    _ => {
                        r.stray.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        Ok(relay)
    }

    /// DISCOVER, OFFER, REQUEST, ACK for `mac`, each message sent again
    /// after each of `timeouts` (as the firmware's backoff) until answered.
    pub async fn dora(
        &self,
        mac: [u8; 6],
        xid: u32,
        asker: Asker,
        timeouts: &[Duration],
    ) -> Result<Lease> {
        let (tx, mut rx) = mpsc::unbounded_channel();
        self.waiting.lock().unwrap().insert(xid, tx);
        let r = self.dora_inner(mac, xid, asker, timeouts, &mut rx).await;
        self.waiting.lock().unwrap().remove(&xid);
        r
    }

    async fn dora_inner(
        &self,
        mac: [u8; 6],
        xid: u32,
        asker: Asker,
        timeouts: &[Duration],
        rx: &mut mpsc::UnboundedReceiver<(Message, SocketAddr)>,
    ) -> Result<Lease> {
        let discover = self.message(mac, xid, asker, MessageType::Discover, None);
        let ((offer, _), r1) = self
            .exchange(&discover, timeouts, rx, &[MessageType::Offer])
            .await
            .context("DISCOVER: no OFFER")?;
        let server_id = match offer.opts().get(OptionCode::ServerIdentifier) {
            Some(DhcpOption::ServerIdentifier(s)) => *s,
            _ => bail!("OFFER without a server identifier"),
        };
        let request = self.message(
            mac,
            xid,
            asker,
            MessageType::Request,
            Some((offer.yiaddr(), server_id)),
        );
        let ((ack, from), r2) = self
            .exchange(
                &request,
                timeouts,
                rx,
                &[MessageType::Ack, MessageType::Nak],
            )
            .await
            .context("REQUEST: no ACK")?;
        if ack.opts().msg_type() != Some(MessageType::Ack) {
            bail!("NAK for {}", offer.yiaddr());
        }
        let file = match ack.opts().get(OptionCode::BootfileName) {
            Some(DhcpOption::BootfileName(f)) => String::from_utf8_lossy(f).into_owned(),
            _ => String::from_utf8_lossy(ack.fname().unwrap_or_default()).into_owned(),
        };
        let server = match from {
            SocketAddr::V4(a) => *a.ip(),
            SocketAddr::V6(_) => server_id,
        };
        Ok(Lease {
            ip: ack.yiaddr(),
            next_server: ack.siaddr(),
            file: file.trim_end_matches('\0').to_string(),
            server,
            retries: r1 + r2,
        })
    }

    async fn exchange(
        &self,
        msg: &[u8],
        timeouts: &[Duration],
        rx: &mut mpsc::UnboundedReceiver<(Message, SocketAddr)>,
        want: &[MessageType],
    ) -> Option<((Message, SocketAddr), u32)> {
        for (i, t) in timeouts.iter().enumerate() {
            let t = &jitter(*t);
            let mut sent = false;
            for s in &self.servers {
                sent |= self.sock.send_to(msg, s).await.is_ok();
            }
            if !sent {
                tokio::time::sleep(*t).await;
                continue;
            }
            let end = tokio::time::Instant::now() + *t;
            while let Ok(Some(m)) = tokio::time::timeout_at(end, rx.recv()).await {
                if m.0.opts().msg_type().is_some_and(|t| want.contains(&t)) {
                    return Some((m, i as u32));
                }
            }
        }
        None
    }

    fn message(
        &self,
        mac: [u8; 6],
        xid: u32,
        asker: Asker,
        t: MessageType,
        requested: Option<(Ipv4Addr, Ipv4Addr)>,
    ) -> Vec<u8> {
        let mut m = Message::default();
        m.set_opcode(Opcode::BootRequest)
            .set_htype(HType::Eth)
            .set_xid(xid)
            .set_flags(Flags::default())
            .set_chaddr(&mac)
            .set_giaddr(self.giaddr)
            .set_hops(1);
        let o = m.opts_mut();
        o.insert(DhcpOption::MessageType(t));
        o.insert(DhcpOption::MaxMessageSize(1260));
        let arch = match asker {
            Asker::Pxe { arch } | Asker::Ipxe { arch } => arch,
        };
        o.insert(DhcpOption::ClientSystemArchitecture(Architecture::from(
            arch,
        )));
        o.insert(DhcpOption::ClassIdentifier(
            format!("PXEClient:Arch:{arch:05}:UNDI:002001").into_bytes(),
        ));
        if let Asker::Ipxe { .. } = asker {
            // As iPXE sends it: the bare name, no RFC 3004 length.
            o.insert(DhcpOption::UserClass(b"iPXE".to_vec()));
            o.insert(DhcpOption::Unknown(dhcproto::v4::UnknownOption::new(
                OptionCode::Unknown(175),
                vec![19, 1, 1], // 175.19: the HTTP feature
            )));
        }
        o.insert(DhcpOption::ParameterRequestList(vec![
            OptionCode::SubnetMask,
            OptionCode::Router,
            OptionCode::DomainNameServer,
            OptionCode::Hostname,
            OptionCode::DomainName,
            OptionCode::ClassIdentifier,
            OptionCode::TFTPServerName,
            OptionCode::BootfileName,
        ]));
        if let Some((ip, server)) = requested {
            o.insert(DhcpOption::RequestedIpAddress(ip));
            o.insert(DhcpOption::ServerIdentifier(server));
        }
        let mut b = Vec::with_capacity(400);
        m.encode(&mut Encoder::new(&mut b))
            .expect("a message of known fields encodes");
        b
    }
}

/// RFC 2131 4.1: a client's wait before sending again is randomized by a
/// uniform ±1 s (for waits of 2 s and more here), so that machines that
/// powered on together do not all ask again in the same instant.
fn jitter(t: Duration) -> Duration {
    if t < Duration::from_secs(2) {
        return t;
    }
    let ms = rand::random::<u64>() % 2001;
    t + Duration::from_millis(ms) - Duration::from_secs(1)
}
