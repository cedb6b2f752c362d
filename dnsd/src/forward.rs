//! Forwarding: queries for names outside dnsd's zones (with RD set) are
//! relayed to the configured upstream resolvers, so nodes can use dnsd as
//! their only resolver. Each relayed query goes out from a fresh socket
//! (a random source port) with a random ID; the answer must come from the
//! upstream asked and carry that ID and the same question, or it is
//! ignored. Upstreams are tried in order, 2 s each. At most
//! [`MAX_IN_FLIGHT`] queries are relayed at once (each holds a socket):
//! beyond that a query is answered SERVFAIL at once, so a flood cannot
//! take every descriptor or grow memory without bound. Forwarded queries
//! are rate-limited per client network as answers are ([`crate::rrl`],
//! `dns.rateLimit`): beyond it, SERVFAIL at once (no larger than the query).

use rand::Rng;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TIMEOUT: Duration = Duration::from_secs(2);
/// Relayed queries at once.
pub const MAX_IN_FLIGHT: usize = 256;

#[derive(Debug)]
pub struct Forwarder {
    upstreams: Vec<SocketAddr>,
    in_flight: tokio::sync::Semaphore,
    rate: std::sync::Mutex<crate::rrl::Rrl>,
}

impl Forwarder {
    /// `per_second`: forwarded queries per client network (0: no limit).
    pub fn new(upstreams: Vec<SocketAddr>, per_second: u32) -> Forwarder {
        Forwarder {
            upstreams,
            in_flight: tokio::sync::Semaphore::new(MAX_IN_FLIGHT),
            rate: std::sync::Mutex::new(crate::rrl::Rrl::new(crate::rrl::Limit {
                per_second,
                slip: 0,
            })),
        }
    }

    /// The upstream's answer with the client's ID restored, or `None` when
    /// no upstream answered. `tcp` relays over TCP (the client came by TCP).
    pub async fn forward(&self, query: &[u8], tcp: bool, peer: IpAddr) -> Option<Vec<u8>> {
        if query.len() < crate::codec::HEADER {
            return None;
        }
        let verdict = self
            .rate
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .check(peer, std::time::Instant::now());
        if verdict != crate::rrl::Verdict::Send {
            return None;
        }
        let Ok(_slot) = self.in_flight.try_acquire() else {
            tracing::debug!("forwarding: {MAX_IN_FLIGHT} queries in flight already; SERVFAIL");
            return None;
        };
        let id = [query[0], query[1]];
        for up in &self.upstreams {
            let mut q = query.to_vec();
            let new_id: u16 = rand::thread_rng().gen();
            q[..2].copy_from_slice(&new_id.to_be_bytes());
            let r = if tcp {
                tokio::time::timeout(TIMEOUT, ask_tcp(*up, &q)).await
            } else {
                tokio::time::timeout(TIMEOUT, ask_udp(*up, &q)).await
            };
            if let Ok(Ok(mut resp)) = r {
                resp[..2].copy_from_slice(&id);
                return Some(resp);
            }
        }
        None
    }
}

/// Whether `resp` answers `q`: same ID and the same question bytes
/// (compared case-insensitively; a resolver may change the case).
fn matches(q: &[u8], resp: &[u8]) -> bool {
    let qend = crate::codec::skip_name(q, crate::codec::HEADER)
        .map(|e| e + 4)
        .unwrap_or(q.len());
    resp.len() >= qend
        && resp[..2] == q[..2]
        && resp[2] & 0x80 != 0
        && resp[12..qend].eq_ignore_ascii_case(&q[12..qend])
}

async fn ask_udp(up: SocketAddr, q: &[u8]) -> std::io::Result<Vec<u8>> {
    let bind: SocketAddr = if up.is_ipv4() {
        "0.0.0.0:0".parse().unwrap_or(up)
    } else {
        "[::]:0".parse().unwrap_or(up)
    };
    let s = tokio::net::UdpSocket::bind(bind).await?;
    s.connect(up).await?;
    s.send(q).await?;
    let mut buf = vec![0u8; 65535];
    loop {
        let n = s.recv(&mut buf).await?;
        if matches(q, &buf[..n]) {
            buf.truncate(n);
            return Ok(buf);
        }
    }
}

async fn ask_tcp(up: SocketAddr, q: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut s = tokio::net::TcpStream::connect(up).await?;
    let mut msg = (q.len() as u16).to_be_bytes().to_vec();
    msg.extend_from_slice(q);
    s.write_all(&msg).await?;
    let len = s.read_u16().await? as usize;
    let mut buf = vec![0u8; len];
    s.read_exact(&mut buf).await?;
    if matches(q, &buf) {
        Ok(buf)
    } else {
        Err(std::io::Error::other("answer does not match the query"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probe: 20 000 forwarded queries opened 13 818 sockets. With an
    /// upstream that never answers, 300 queries at once: 256 wait (each
    /// with its socket), the other 44 get SERVFAIL at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn relayed_queries_are_bounded() {
        let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let f = std::sync::Arc::new(Forwarder::new(vec![silent.local_addr().unwrap()], 0));
        let q = {
            let mut q = vec![0u8; crate::codec::HEADER];
            q[5] = 1; // QDCOUNT
            q.extend_from_slice(b"\x07example\x03org\x00\x00\x01\x00\x01");
            q
        };
        let started = std::time::Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..300 {
            let (f, q) = (std::sync::Arc::clone(&f), q.clone());
            tasks.push(tokio::spawn(async move {
                let t = std::time::Instant::now();
                let r = f.forward(&q, false, "10.77.0.20".parse().unwrap()).await;
                (r.is_none(), t.elapsed())
            }));
        }
        let mut quick = 0;
        for t in tasks {
            let (none, took) = t.await.unwrap();
            assert!(none, "nobody answers");
            if took < Duration::from_millis(500) {
                quick += 1;
            }
        }
        assert_eq!(quick, 300 - MAX_IN_FLIGHT, "turned away at once");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}

#[cfg(test)]
mod rate_tests {
    use super::*;

    /// Forwarded queries count against the client network's rate: beyond
    /// it, SERVFAIL at once, without asking (or waiting for) an upstream.
    #[tokio::test]
    async fn forwarding_is_rate_limited_per_client_network() {
        let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let f = Forwarder::new(vec![silent.local_addr().unwrap()], 3);
        let mut q = vec![0u8; crate::codec::HEADER];
        q[5] = 1;
        q.extend_from_slice(b"\x07example\x03org\x00\x00\x01\x00\x01");
        // Use the bucket up without waiting: the rate check comes first.
        {
            let mut r = f.rate.lock().unwrap();
            let now = std::time::Instant::now();
            for _ in 0..3 {
                assert_eq!(
                    r.check("10.77.0.20".parse().unwrap(), now),
                    crate::rrl::Verdict::Send
                );
            }
        }
        let t = std::time::Instant::now();
        assert!(f
            .forward(&q, false, "10.77.0.21".parse().unwrap())
            .await
            .is_none());
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "refused at once, no upstream asked"
        );
        // Another network still has its rate: asked (and times out here).
        let t = std::time::Instant::now();
        assert!(f
            .forward(&q, false, "10.78.0.5".parse().unwrap())
            .await
            .is_none());
        assert!(
            t.elapsed() >= Duration::from_secs(1),
            "that one went to the upstream"
        );
    }
}
