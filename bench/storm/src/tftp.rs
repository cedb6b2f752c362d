//! A TFTP read as network-boot firmware does it (RFC 1350 with the
//! blksize, tsize and, when asked, windowsize options), from the
//! machine's own address; the bytes hashed as they arrive, in order.

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;
use tokio::net::UdpSocket;

pub struct Got {
    pub sha256: [u8; 32],
    pub bytes: u64,
    /// Packets sent again after a timeout.
    pub retries: u32,
}

/// Reads `file` from `server` (port 69). `timeout` per packet, at most
/// `retries` timeouts in a row.
pub async fn get(
    local: Ipv4Addr,
    server: Ipv4Addr,
    file: &str,
    blksize: u16,
    windowsize: Option<u16>,
    timeout: Duration,
    retries: u32,
) -> Result<Got> {
    let sock = UdpSocket::bind((local, 0))
        .await
        .with_context(|| format!("bind {local}"))?;
    let mut rrq = vec![0, 1];
    for part in [file, "octet", "blksize", &blksize.to_string(), "tsize", "0"] {
        rrq.extend_from_slice(part.as_bytes());
        rrq.push(0);
    }
    if let Some(w) = windowsize {
        for part in ["windowsize", &w.to_string()] {
            rrq.extend_from_slice(part.as_bytes());
            rrq.push(0);
        }
    }
    let first: SocketAddr = (server, 69).into();
    let mut peer: Option<SocketAddr> = None;
    let mut last_sent = rrq;
    sock.send_to(&last_sent, first).await?;
    let (mut blk, mut win) = (512usize, 1u16);
    let mut next: u16 = 1;
    let mut since_ack = 0u16;
    let mut hash = Sha256::new();
    let mut bytes = 0u64;
    let mut timeouts = 0u32;
    let mut resent = 0u32;
    let mut buf = vec![0u8; 65536];
    loop {
        let r = tokio::time::timeout(timeout, sock.recv_from(&mut buf)).await;
        let Ok(r) = r else {
            timeouts += 1;
            if timeouts > retries {
                bail!("TFTP {file}: no answer after {retries} retries (at block {next})");
            }
            resent += 1;
            sock.send_to(&last_sent, peer.unwrap_or(first)).await?;
            continue;
        };
        let (n, from) = r?;
        if peer.is_some_and(|p| p != from) {
            continue; // another transfer ID: not ours
        }
        let p = &buf[..n];
        if n < 4 {
            continue;
        }
        match u16::from_be_bytes([p[0], p[1]]) {
            6 if peer.is_none() => {
                // OACK: the options the server took.
                peer = Some(from);
                let mut fields = p[2..].split(|&b| b == 0);
                while let (Some(k), Some(v)) = (fields.next(), fields.next()) {
                    let v: usize = String::from_utf8_lossy(v).parse().unwrap_or(0);
                    match String::from_utf8_lossy(k).to_ascii_lowercase().as_str() {
                        "blksize" if v > 0 => blk = v,
                        "windowsize" if v > 0 => win = v as u16,
                        _ => {}
                    }
                }
                last_sent = ack(0);
                sock.send_to(&last_sent, from).await?;
                timeouts = 0;
            }
            3 => {
                if peer.is_none() {
                    peer = Some(from); // no options taken: 512-byte blocks
                }
                let block = u16::from_be_bytes([p[2], p[3]]);
                let data = &p[4..];
                if block != next {
                    // Lost or repeated: say where we are.
                    if block != next.wrapping_sub(1) || win > 1 {
                        last_sent = ack(next.wrapping_sub(1));
                        sock.send_to(&last_sent, from).await?;
                    }
                    continue;
                }
                hash.update(data);
                bytes += data.len() as u64;
                timeouts = 0;
                since_ack += 1;
                let done = data.len() < blk;
                if done || since_ack >= win {
                    last_sent = ack(block);
                    sock.send_to(&last_sent, from).await?;
                    since_ack = 0;
                }
                next = next.wrapping_add(1);
                if done {
                    return Ok(Got {
                        sha256: hash.finalize().into(),
                        bytes,
                        retries: resent,
                    });
                }
            }
            5 => bail!(
                "TFTP {file}: error {} {}",
                u16::from_be_bytes([p[2], p[3]]),
                String::from_utf8_lossy(&p[4..]).trim_end_matches('\0')
            ),
            _ => {}
        }
    }
}

fn ack(block: u16) -> Vec<u8> {
    let b = block.to_be_bytes();
    vec![0, 4, b[0], b[1]]
}
