//! Ports for a child process to bind: picked, checked free on 127.0.0.1
//! (TCP and UDP), and never handed out twice by this test process.
//!
//! Binding port 0 and releasing it is racy: the kernel hands the same port
//! to the next `bind(0)` or outgoing `connect` of any concurrent test before
//! the child binds it. These ports come from below the kernel's ephemeral
//! range (32768-60999 on Linux), which `bind(0)` and `connect` never use,
//! each test process starting at its own place in it. The counter is one
//! static of this crate: every crate in a test binary that picks ports here
//! (etcd's test member among them) draws from the same one.

use std::sync::atomic::{AtomicU32, Ordering};

const LOW: u32 = 20_000;
const SPAN: u32 = 12_000;
static NEXT: AtomicU32 = AtomicU32::new(0);

/// A port free for both TCP and UDP on 127.0.0.1 right now, not returned
/// before by this process.
pub fn free_port() -> u16 {
    let start = std::process::id().wrapping_mul(7919) % SPAN;
    for _ in 0..SPAN {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (LOW + (start + n) % SPAN) as u16;
        let tcp = std::net::TcpListener::bind(("127.0.0.1", port));
        let udp = std::net::UdpSocket::bind(("127.0.0.1", port));
        if tcp.is_ok() && udp.is_ok() {
            return port;
        }
    }
    panic!("no free port in {LOW}..{} on 127.0.0.1", LOW + SPAN);
}
