//! The floor of a socket-based UDP DNS server, for bench/dns (FLOOR=1):
//! the same batched receive and send as dnsd's UDP worker (`recvmmsg` with
//! MSG_WAITFORONE, then one `sendmmsg`, 64 datagrams per batch, one
//! blocking socket), but no DNS work at all: each datagram goes back as it
//! came, with QR and AA set. No server that reads and writes datagrams
//! through the kernel's UDP sockets, one recvmmsg and one sendmmsg per
//! batch, can spend less CPU per query than this, so its queries per
//! CPU-second bound what any user-space change to dnsd could reach.
//!
//! Not a DNS server: it answers every datagram, whatever it holds.
//!
//! Usage: `udp_floor 127.0.0.1:PORT`

use nix::sys::socket::{recvmmsg, sendmmsg, MsgFlags, MultiHeaders, SockaddrStorage};
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::AsRawFd;

const BATCH: usize = 64;

fn main() {
    let addr = std::env::args().nth(1).unwrap_or_else(|| {
        eprintln!("usage: udp_floor ADDR:PORT");
        std::process::exit(2)
    });
    let sock = std::net::UdpSocket::bind(&addr).unwrap_or_else(|e| {
        eprintln!("udp_floor: bind {addr}: {e}");
        std::process::exit(1)
    });
    let fd = sock.as_raw_fd();
    let mut bufs = vec![[0u8; 4096]; BATCH];
    let mut lens = [0usize; BATCH];
    let mut addrs: Vec<Option<SockaddrStorage>> = Vec::with_capacity(BATCH);
    let mut rhdr = MultiHeaders::<SockaddrStorage>::preallocate(BATCH, None);
    let mut shdr = MultiHeaders::<SockaddrStorage>::preallocate(BATCH, None);
    loop {
        addrs.clear();
        {
            let mut iovs: Vec<[IoSliceMut<'_>; 1]> = bufs
                .iter_mut()
                .map(|b| [IoSliceMut::new(&mut b[..])])
                .collect();
            match recvmmsg(
                fd,
                &mut rhdr,
                iovs.iter_mut(),
                MsgFlags::MSG_WAITFORONE,
                None,
            ) {
                Ok(res) => {
                    for (i, r) in res.enumerate() {
                        lens[i] = r.bytes;
                        addrs.push(r.address);
                    }
                }
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    eprintln!("udp_floor: recvmmsg: {e}");
                    std::process::exit(1)
                }
            }
        }
        for (b, &len) in bufs.iter_mut().zip(&lens).take(addrs.len()) {
            if len >= 12 {
                b[2] |= 0x84; // QR, AA
            }
        }
        let slices: Vec<[IoSlice<'_>; 1]> = bufs
            .iter()
            .zip(&lens)
            .take(addrs.len())
            .map(|(b, &l)| [IoSlice::new(&b[..l])])
            .collect();
        let mut from = 0;
        while from < slices.len() {
            match sendmmsg(
                fd,
                &mut shdr,
                slices[from..].iter(),
                &addrs[from..],
                [],
                MsgFlags::empty(),
            ) {
                Ok(res) => match res.count() {
                    0 => break,
                    n => from += n,
                },
                Err(nix::errno::Errno::EINTR) => {}
                Err(_) => from += 1,
            }
        }
    }
}
