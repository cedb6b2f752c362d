//! Listening for LLDP: one thread per NIC with link, each on its own
//! packet socket (crate::sys), until every one has a frame or the time is
//! up. Switches send LLDP every 30 s by default, hence the agent's 35 s.
//! A NIC whose socket cannot be opened (not root, gone) is reported on
//! stderr and left without LLDP: the inventory is still worth sending.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use crate::inventory::{Lldp, Nic};
use crate::lldp;

/// How often a listener looks at the clock and the stop flag.
const POLL: Duration = Duration::from_millis(250);

/// The first LLDP frame each NIC with link receives within `window`,
/// by NIC name.
pub fn listen(nics: &[Nic], window: Duration) -> BTreeMap<String, Lldp> {
    let mut got = BTreeMap::new();
    let want: Vec<&Nic> = nics.iter().filter(|n| n.link).collect();
    if want.is_empty() || window.is_zero() {
        return got;
    }
    let deadline = Instant::now() + window;
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let mut threads = Vec::new();
    for nic in &want {
        let (name, own) = (nic.name.clone(), parse_mac(&nic.mac));
        let (tx, stop) = (tx.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let r = listen_one(&name, own, deadline, &stop);
            let _ = tx.send((name, r));
        }));
    }
    drop(tx);
    // One message per thread; each thread ends by the deadline (plus one
    // POLL), so this loop ends too.
    let mut answered = 0;
    while answered < want.len() {
        let left = deadline.saturating_duration_since(Instant::now()) + POLL * 2;
        match rx.recv_timeout(left) {
            Ok((name, Ok(Some(l)))) => {
                got.insert(name, l);
                answered += 1;
            }
            Ok((_, Ok(None))) => answered += 1,
            Ok((name, Err(e))) => {
                eprintln!("bootd-agent: LLDP on {name}: {e}; reporting it without");
                answered += 1;
            }
            Err(_) => break,
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    got
}

/// The first LLDP frame on `ifname` not sent by the machine itself.
fn listen_one(
    ifname: &str,
    own: Option<[u8; 6]>,
    deadline: Instant,
    stop: &AtomicBool,
) -> std::io::Result<Option<Lldp>> {
    let socket = crate::sys::lldp_socket(ifname)?;
    socket.set_read_timeout(Some(POLL))?;
    let mut buf = vec![0u8; 9216];
    while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
        match (&socket).read(&mut buf) {
            Ok(n) => {
                let frame = &buf[..n];
                if own.is_some() && lldp::source_mac(frame) == own {
                    continue;
                }
                if let Some(l) = lldp::parse_lldp(frame) {
                    return Ok(Some(l));
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// `52:54:00:12:34:56` → bytes.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut out {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs() {
        assert_eq!(
            parse_mac("52:54:00:AB:cd:0f"),
            Some([0x52, 0x54, 0, 0xab, 0xcd, 0x0f])
        );
        assert_eq!(parse_mac("52:54:00:ab:cd"), None);
        assert_eq!(parse_mac("52:54:00:ab:cd:0f:11"), None);
        assert_eq!(parse_mac(""), None);
    }

    #[test]
    fn no_nic_with_link_returns_at_once() {
        let nics = vec![Nic {
            name: "nonexistent0".into(),
            link: false,
            ..Nic::default()
        }];
        let t = Instant::now();
        assert!(listen(&nics, Duration::from_secs(30)).is_empty());
        assert!(t.elapsed() < Duration::from_secs(1));
    }
}
