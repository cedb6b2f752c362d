//! The agent's only `unsafe`: what neither std nor socket2 offers safely.
//!
//! - An AF_PACKET socket bound to one interface: socket2 creates, reads
//!   and closes it, but a `sockaddr_ll` to bind to can only be built
//!   through `SockAddrStorage::view_as` and `SockAddr::new` (unsafe), and
//!   the interface index comes from `if_nametoindex` (libc).
//! - `PACKET_ADD_MEMBERSHIP` for LLDP's group address, so a NIC whose
//!   filter drops unknown multicast passes LLDP up: `setsockopt` with a
//!   `packet_mreq`, which socket2 has no wrapper for. The membership ends
//!   with the socket (no promiscuous mode left behind).
//! - `sync(2)` before rebooting or powering off through sysrq.
//!
//! Each block is a single call on values built just before it; nothing
//! here keeps a raw pointer or file descriptor beyond the call.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::mem::size_of;
use std::os::fd::AsRawFd;

use socket2::{Domain, SockAddr, SockAddrStorage, Socket, Type};

use crate::lldp;

/// A raw packet socket that receives only LLDP frames arriving on
/// `ifname`, and has joined LLDP's multicast group there.
pub fn lldp_socket(ifname: &str) -> io::Result<Socket> {
    let name = CString::new(ifname).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `name` is a NUL-terminated string that outlives the call.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        return Err(io::Error::last_os_error());
    }
    let index = i32::try_from(index).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // Protocol 0: the socket receives nothing until bound, so no frame of
    // another interface is queued between socket() and bind().
    let socket = Socket::new(Domain::PACKET, Type::RAW, None)?;
    let protocol = (lldp::ETHERTYPE).to_be();

    let mut storage = SockAddrStorage::zeroed();
    // SAFETY: sockaddr_ll is a sockaddr type of this platform, smaller
    // than sockaddr_storage (view_as asserts it); all-zero is valid.
    let ll: &mut libc::sockaddr_ll = unsafe { storage.view_as() };
    ll.sll_family = libc::AF_PACKET as libc::sa_family_t;
    ll.sll_protocol = protocol;
    ll.sll_ifindex = index;
    // SAFETY: the storage holds an initialised sockaddr_ll of that length.
    let addr = unsafe { SockAddr::new(storage, size_of::<libc::sockaddr_ll>() as libc::socklen_t) };
    socket.bind(&addr)?;

    let mut mreq = libc::packet_mreq {
        mr_ifindex: index,
        mr_type: libc::PACKET_MR_MULTICAST as u16,
        mr_alen: 6,
        mr_address: [0; 8],
    };
    mreq.mr_address[..6].copy_from_slice(&lldp::MULTICAST);
    // SAFETY: the fd is open (owned by `socket`); the option value points
    // to a packet_mreq of the length given, alive for the call.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_ADD_MEMBERSHIP,
            (&mreq as *const libc::packet_mreq).cast(),
            size_of::<libc::packet_mreq>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(socket)
}

/// sync(2): flush every file system's dirty data before sysrq reboots
/// or powers off (which does not).
pub fn sync() {
    // SAFETY: sync takes no arguments and cannot fail.
    unsafe { libc::sync() }
}
