//! Adds a neighbour (ARP) entry over rtnetlink, as `ip neigh replace IP
//! lladdr MAC dev IF` does, so a reply can be unicast to a client that has
//! no address yet and cannot answer ARP.

use rustix::net::netlink::SocketAddrNetlink;
use rustix::net::{AddressFamily, SocketFlags, SocketType};
use site::Mac;
use std::io;
use std::net::Ipv4Addr;

const RTM_NEWNEIGH: u16 = 28;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_CREATE: u16 = 0x400;
const NUD_REACHABLE: u16 = 0x02;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
const AF_INET: u8 = 2;

fn attr(buf: &mut Vec<u8>, kind: u16, data: &[u8]) {
    let len = 4 + data.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(data);
    while buf.len() % 4 != 0 {
        buf.push(0);
    }
}

/// The RTM_NEWNEIGH message (pure; tested).
pub fn message(ifindex: u32, ip: Ipv4Addr, mac: Mac) -> Vec<u8> {
    let mut body = Vec::new();
    // struct ndmsg
    body.push(AF_INET);
    body.extend_from_slice(&[0, 0, 0]);
    body.extend_from_slice(&(ifindex as i32).to_ne_bytes());
    body.extend_from_slice(&NUD_REACHABLE.to_ne_bytes());
    body.extend_from_slice(&[0, 0]); // flags, type
    attr(&mut body, NDA_DST, &ip.octets());
    attr(&mut body, NDA_LLADDR, &mac.0);
    let mut msg = Vec::with_capacity(16 + body.len());
    msg.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
    msg.extend_from_slice(&RTM_NEWNEIGH.to_ne_bytes());
    msg.extend_from_slice(
        &(NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE).to_ne_bytes(),
    );
    msg.extend_from_slice(&1u32.to_ne_bytes()); // seq
    msg.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel
    msg.extend_from_slice(&body);
    msg
}

/// Adds the entry, and says whether the kernel did: the request asks for
/// an acknowledgement, which carries the error (EPERM without
/// `CAP_NET_ADMIN`, as under the systemd unit or after dropping root). The
/// send alone succeeds either way, and a reply then unicast to an address
/// with no neighbour entry is lost (the client cannot answer ARP yet).
pub fn replace(ifindex: u32, ip: Ipv4Addr, mac: Mac) -> io::Result<()> {
    let fd = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::sockopt::set_socket_timeout(
        &fd,
        rustix::net::sockopt::Timeout::Recv,
        Some(std::time::Duration::from_millis(200)),
    )?;
    let msg = message(ifindex, ip, mac);
    rustix::net::sendto(
        &fd,
        &msg,
        rustix::net::SendFlags::empty(),
        &SocketAddrNetlink::new(0, 0),
    )?;
    let mut buf = [0u8; 512];
    let (n, _) = rustix::net::recv(&fd, &mut buf, rustix::net::RecvFlags::empty())?;
    ack(&buf[..n])
}

/// The kernel's answer to [`message`]: `NLMSG_ERROR` with error 0 is the
/// acknowledgement; a negative errno is the failure (pure; tested).
pub fn ack(reply: &[u8]) -> io::Result<()> {
    if reply.len() < 20 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "short netlink reply",
        ));
    }
    let kind = u16::from_ne_bytes([reply[4], reply[5]]);
    if kind != NLMSG_ERROR {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("netlink reply of type {kind}, not an acknowledgement"),
        ));
    }
    match i32::from_ne_bytes([reply[16], reply[17], reply[18], reply[19]]) {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(-e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn layout() {
        let m = message(
            3,
            Ipv4Addr::new(10, 77, 0, 10),
            "52:54:00:77:00:10".parse().unwrap(),
        );
        // nlmsghdr 16 + ndmsg 12 + dst 8 + lladdr 12
        assert_eq!(m.len(), 48);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()), 48);
        assert_eq!(&m[32..36], &[10, 77, 0, 10]);
        assert_eq!(&m[40..46], &[0x52, 0x54, 0, 0x77, 0, 0x10]);
        // The acknowledgement is asked for.
        assert_eq!(u16::from_ne_bytes([m[6], m[7]]) & NLM_F_ACK, NLM_F_ACK);
    }

    #[test]
    fn acknowledgements_and_refusals() {
        let reply = |kind: u16, err: i32| {
            let mut r = vec![0u8; 36];
            r[0..4].copy_from_slice(&36u32.to_ne_bytes());
            r[4..6].copy_from_slice(&kind.to_ne_bytes());
            r[16..20].copy_from_slice(&err.to_ne_bytes());
            r
        };
        assert!(ack(&reply(NLMSG_ERROR, 0)).is_ok());
        assert_eq!(
            ack(&reply(NLMSG_ERROR, -1)).unwrap_err().raw_os_error(),
            Some(1) // EPERM: no CAP_NET_ADMIN
        );
        assert!(ack(&reply(3, 0)).is_err());
        assert!(ack(&[0u8; 8]).is_err());
    }
}
