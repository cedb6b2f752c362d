//! The request socket: which local address each request arrived on.
//!
//! A transfer must answer from the address the client sent its RRQ to (a
//! client drops DATA from any other source), so on a socket bound to the
//! wildcard address every request is received with `IP_PKTINFO` /
//! `IPV6_RECVPKTINFO`, and refusals sent from this socket carry the same
//! address as their source. A socket bound to one address needs neither.

use nix::libc;
use nix::sys::socket::{
    self, sockopt, ControlMessage, ControlMessageOwned, MsgFlags, SockaddrStorage,
};
use std::io::{self, IoSlice, IoSliceMut};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;
use tokio::io::Interest;
use tokio::net::UdpSocket;

#[derive(Debug)]
pub(crate) struct Listener {
    sock: UdpSocket,
    /// Bound to the wildcard address: learn and set addresses per packet.
    pktinfo: bool,
    /// The bound address with port 0.
    bound: SocketAddr,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Datagram {
    /// Bytes kept: a datagram longer than the buffer is cut to its length.
    pub len: usize,
    pub peer: SocketAddr,
    /// The address the datagram was sent to, port 0 (ready to bind).
    pub local: SocketAddr,
}

/// Room for either control message.
pub(crate) fn cmsg_buffer() -> Vec<u8> {
    nix::cmsg_space!(libc::in_pktinfo, libc::in6_pktinfo)
}

impl Listener {
    pub(crate) fn new(sock: UdpSocket) -> io::Result<Listener> {
        let mut bound = sock.local_addr()?;
        bound.set_port(0);
        let pktinfo = bound.ip().is_unspecified();
        if pktinfo {
            match bound {
                SocketAddr::V4(_) => socket::setsockopt(&sock, sockopt::Ipv4PacketInfo, &true)?,
                // Covers IPv4 clients of a dual-stack socket too: they come
                // with an IPV6_PKTINFO holding a v4-mapped address.
                SocketAddr::V6(_) => socket::setsockopt(&sock, sockopt::Ipv6RecvPacketInfo, &true)?,
            }
        }
        // Room for a rack's requests arriving in the same instant (a
        // request takes about 1 KiB of buffer: the default 208 KiB holds
        // some 200); the kernel caps it at net.core.rmem_max.
        let _ = socket::setsockopt(&sock, sockopt::RcvBuf, &(4 << 20));
        Ok(Listener {
            sock,
            pktinfo,
            bound,
        })
    }

    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    pub(crate) async fn recv(&self, buf: &mut [u8], cmsg: &mut Vec<u8>) -> io::Result<Datagram> {
        if !self.pktinfo {
            let (len, peer) = self.sock.recv_from(buf).await?;
            return Ok(Datagram {
                len,
                peer,
                local: self.bound,
            });
        }
        let fd = self.sock.as_raw_fd();
        let bound = self.bound;
        self.sock
            .async_io(Interest::READABLE, || {
                let mut iov = [IoSliceMut::new(&mut buf[..])];
                let msg = socket::recvmsg::<SockaddrStorage>(
                    fd,
                    &mut iov,
                    Some(&mut *cmsg),
                    MsgFlags::empty(),
                )?;
                let peer = msg
                    .address
                    .as_ref()
                    .and_then(to_std)
                    .ok_or_else(|| io::Error::other("datagram without a source address"))?;
                let mut local = bound;
                for c in msg.cmsgs()? {
                    match c {
                        ControlMessageOwned::Ipv4PacketInfo(pi) => {
                            // ipi_spec_dst: the local address, also when the
                            // packet was sent to a broadcast address.
                            local = SocketAddr::new(
                                Ipv4Addr::from(u32::from_be(pi.ipi_spec_dst.s_addr)).into(),
                                0,
                            );
                        }
                        ControlMessageOwned::Ipv6PacketInfo(pi) => {
                            let ip = Ipv6Addr::from(pi.ipi6_addr.s6_addr);
                            let scope = if ip.is_unicast_link_local() {
                                pi.ipi6_ifindex
                            } else {
                                0
                            };
                            local = SocketAddr::V6(SocketAddrV6::new(ip, 0, 0, scope));
                        }
                        _ => {}
                    }
                }
                Ok(Datagram {
                    len: msg.bytes,
                    peer,
                    local,
                })
            })
            .await
    }

    /// Sends `buf` to `peer` from `local` (the address its request came to).
    pub(crate) async fn send(
        &self,
        buf: &[u8],
        peer: SocketAddr,
        local: SocketAddr,
    ) -> io::Result<()> {
        if !self.pktinfo || local.ip().is_unspecified() {
            self.sock.send_to(buf, peer).await?;
            return Ok(());
        }
        let fd = self.sock.as_raw_fd();
        let dst = SockaddrStorage::from(peer);
        self.sock
            .async_io(Interest::WRITABLE, || {
                let iov = [IoSlice::new(buf)];
                match local {
                    SocketAddr::V4(a) => {
                        let pi = libc::in_pktinfo {
                            ipi_ifindex: 0,
                            ipi_spec_dst: libc::in_addr {
                                s_addr: u32::from(*a.ip()).to_be(),
                            },
                            ipi_addr: libc::in_addr { s_addr: 0 },
                        };
                        socket::sendmsg(
                            fd,
                            &iov,
                            &[ControlMessage::Ipv4PacketInfo(&pi)],
                            MsgFlags::empty(),
                            Some(&dst),
                        )?;
                    }
                    SocketAddr::V6(a) => {
                        let pi = libc::in6_pktinfo {
                            ipi6_addr: libc::in6_addr {
                                s6_addr: a.ip().octets(),
                            },
                            ipi6_ifindex: a.scope_id(),
                        };
                        socket::sendmsg(
                            fd,
                            &iov,
                            &[ControlMessage::Ipv6PacketInfo(&pi)],
                            MsgFlags::empty(),
                            Some(&dst),
                        )?;
                    }
                }
                Ok(())
            })
            .await
    }
}

fn to_std(a: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::V4(SocketAddrV4::from(*v4)));
    }
    a.as_sockaddr_in6()
        .map(|v6| SocketAddr::V6(SocketAddrV6::from(*v6)))
}

/// A socket for one transfer: bound to an ephemeral port on `local` (the
/// address the request arrived on) and connected to the client, so the
/// kernel drops datagrams from anyone else and reports an ICMP "port
/// unreachable" (client gone) as an error on the next receive.
/// Blocking: the transfer runs on a thread of its own (see `server`).
pub(crate) fn transfer_socket(
    local: SocketAddr,
    peer: SocketAddr,
) -> io::Result<std::net::UdpSocket> {
    let sock = std::net::UdpSocket::bind(local)?;
    sock.connect(peer)?;
    Ok(sock)
}
