//! The floor of a user-space L4 relay, for bench/lb (FLOOR=1): one thread,
//! level-triggered epoll, one `read` and one `write` per readiness per
//! direction, a blocking `connect` (instant on loopback) to the backends in
//! turn, no timers, no health checks, no metrics, no limits, no half-close
//! (the first end of stream closes both sockets). A relay that moves bytes
//! through the kernel's TCP sockets in user space makes the same `read` and
//! `write` per relayed message, so this relay's requests per CPU-second
//! show how much of a real relay's cost is the kernel's. Per connection it
//! also makes two `ioctl(FIONBIO)` that `accept4`/`SOCK_NONBLOCK` would save.
//!
//! Not a load balancer: a dead backend fails the client's connection, a
//! backend with a full backlog stalls the whole relay (blocking connect), and
//! an accept error other than EAGAIN (EMFILE) makes it spin until it clears.
//!
//! Usage: `relay_floor LISTEN_ADDR BACKEND_ADDR...`

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};

const LISTENER: u64 = u64::MAX;

struct Pair {
    client: TcpStream,
    backend: TcpStream,
}

fn die(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("relay_floor: {what}: {e}");
    std::process::exit(1)
}

/// Writes all of `buf`, waiting (blocking) only if the socket buffer is full.
fn write_all(to: &mut TcpStream, buf: &[u8]) -> std::io::Result<()> {
    match to.write(buf) {
        Ok(n) if n == buf.len() => Ok(()),
        Ok(n) => blocking_rest(to, &buf[n..]),
        Err(e) if e.kind() == ErrorKind::WouldBlock => blocking_rest(to, buf),
        Err(e) => Err(e),
    }
}

fn blocking_rest(to: &mut TcpStream, buf: &[u8]) -> std::io::Result<()> {
    to.set_nonblocking(false)?;
    let r = to.write_all(buf);
    to.set_nonblocking(true)?;
    r
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        eprintln!("usage: relay_floor LISTEN_ADDR BACKEND_ADDR...");
        std::process::exit(2)
    }
    let backends: Vec<SocketAddr> = args[1..]
        .iter()
        .map(|a| a.parse().unwrap_or_else(|e| die(a, e)))
        .collect();
    let listener = TcpListener::bind(&args[0]).unwrap_or_else(|e| die(&args[0], e));
    listener
        .set_nonblocking(true)
        .unwrap_or_else(|e| die("listener", e));
    let ep = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).unwrap_or_else(|e| die("epoll", e));
    ep.add(&listener, EpollEvent::new(EpollFlags::EPOLLIN, LISTENER))
        .unwrap_or_else(|e| die("epoll add", e));
    let mut pairs: Vec<Option<Pair>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut next = 0usize;
    let mut buf = vec![0u8; 16 * 1024];
    let mut events = vec![EpollEvent::empty(); 256];
    let mut freed: Vec<usize> = Vec::new();
    loop {
        let n = match ep.wait(&mut events, EpollTimeout::NONE) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => die("epoll wait", e),
        };
        for ev in &events[..n] {
            let token = ev.data();
            if token == LISTENER {
                while let Ok((client, _)) = listener.accept() {
                    let to = backends[next % backends.len()];
                    next += 1;
                    let Ok(backend) = TcpStream::connect(to) else {
                        continue;
                    };
                    let ok = [&client, &backend]
                        .iter()
                        .all(|s| s.set_nodelay(true).is_ok() && s.set_nonblocking(true).is_ok());
                    if !ok {
                        continue;
                    }
                    let idx = free.pop().unwrap_or_else(|| {
                        pairs.push(None);
                        pairs.len() - 1
                    });
                    let t = (idx as u64) << 1;
                    let reg = ep
                        .add(&client, EpollEvent::new(EpollFlags::EPOLLIN, t))
                        .and_then(|_| {
                            ep.add(&backend, EpollEvent::new(EpollFlags::EPOLLIN, t | 1))
                        });
                    if reg.is_err() {
                        free.push(idx);
                        continue;
                    }
                    pairs[idx] = Some(Pair { client, backend });
                }
                continue;
            }
            let idx = (token >> 1) as usize;
            let from_backend = token & 1 == 1;
            let Some(pair) = pairs.get_mut(idx).and_then(|p| p.as_mut()) else {
                continue;
            };
            let (src, dst) = if from_backend {
                (&mut pair.backend, &mut pair.client)
            } else {
                (&mut pair.client, &mut pair.backend)
            };
            let done = match src.read(&mut buf) {
                Ok(0) => true,
                Ok(k) => write_all(dst, &buf[..k]).is_err(),
                Err(e)
                    if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted =>
                {
                    false
                }
                Err(_) => true,
            };
            if done {
                // Closing both descriptors also takes them out of the epoll set.
                pairs[idx] = None;
                freed.push(idx);
            }
        }
        // Slots are reused only after the batch: an event of this batch for a
        // closed pair must not reach a new pair in the same slot.
        free.append(&mut freed);
    }
}
