//! Forwarding: queries for names outside dnsd's zones (with RD set) are
//! relayed to the configured upstream resolvers, so nodes can use dnsd as
//! their only resolver. Each relayed query goes out from a fresh socket
//! (a random source port) with a random ID; the answer must come from the
//! upstream asked and carry that ID and the same question, or it is
//! ignored. Upstreams are tried in order, 2 s each.

use rand::Rng;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug)]
pub struct Forwarder {
    upstreams: Vec<SocketAddr>,
}

impl Forwarder {
    pub fn new(upstreams: Vec<SocketAddr>) -> Forwarder {
        Forwarder { upstreams }
    }

    /// The upstream's answer with the client's ID restored, or `None` when
    /// no upstream answered. `tcp` relays over TCP (the client came by TCP).
    pub async fn forward(&self, query: &[u8], tcp: bool) -> Option<Vec<u8>> {
        if query.len() < crate::wire::HEADER {
            return None;
        }
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
    let qend = crate::wire::skip_name(q, crate::wire::HEADER)
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
