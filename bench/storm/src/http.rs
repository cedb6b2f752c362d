//! HTTP/1.1 GET as iPXE does it: one connection per request from the
//! machine's own address, `Range` to resume; the body hashed as it
//! arrives and kept only when small (scripts, Ignition).

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

/// Bodies up to this size are kept ([`Got::body`]).
pub const KEEP: u64 = 1 << 20;
/// A connection must be made within this (iPXE: 15 s).
pub const CONNECT: Duration = Duration::from_secs(15);
/// No byte for this long ends the transfer.
pub const IDLE: Duration = Duration::from_secs(30);

pub struct Got {
    pub status: u16,
    /// Body bytes received.
    pub bytes: u64,
    /// The body, when at most [`KEEP`].
    pub body: Vec<u8>,
    /// `Retry-After`, in seconds (a 429's).
    pub retry_after: Option<u64>,
}

/// `http://host:port/path?query` → (address, path and query).
pub fn split(url: &str) -> Result<(SocketAddr, &str)> {
    let rest = url
        .strip_prefix("http://")
        .with_context(|| format!("not an http URL: {url}"))?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr = if hostport.contains(':') {
        hostport.parse()
    } else {
        format!("{hostport}:80").parse()
    }
    .with_context(|| format!("host in {url} (an address is expected)"))?;
    Ok((addr, path))
}

/// GET `url` from `local`, from byte `from` on (`Range`), feeding the body
/// to `hash`; with `cut`, the connection is dropped after that many body
/// bytes (an injected reset) and `Ok` is returned with what was read.
pub async fn get(
    local: Ipv4Addr,
    url: &str,
    from: u64,
    cut: Option<u64>,
    hash: &mut Sha256,
) -> Result<Got> {
    get_keeping(local, url, from, cut, hash, KEEP).await
}

/// [`get`], keeping bodies up to `keep` bytes.
pub async fn get_keeping(
    local: Ipv4Addr,
    url: &str,
    from: u64,
    cut: Option<u64>,
    hash: &mut Sha256,
    keep_up_to: u64,
) -> Result<Got> {
    let (addr, path) = split(url)?;
    let sock = TcpSocket::new_v4()?;
    sock.bind((local, 0).into())
        .with_context(|| format!("bind {local}"))?;
    let mut s = tokio::time::timeout(CONNECT, sock.connect(addr))
        .await
        .with_context(|| format!("connect {addr}: timed out"))?
        .with_context(|| format!("connect {addr}"))?;
    let range = if from > 0 {
        format!("Range: bytes={from}-\r\n")
    } else {
        String::new()
    };
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: iPXE/1.21.1 (storm)\r\nConnection: close\r\n{range}\r\n"
    );
    s.write_all(req.as_bytes()).await?;
    let mut buf = vec![0u8; 256 * 1024];
    let mut head = Vec::new();
    let body_start = loop {
        let n = read(&mut s, &mut buf).await?;
        if n == 0 {
            bail!("GET {url}: connection closed in the response head");
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if head.len() > 64 * 1024 {
            bail!("GET {url}: response head over 64 KiB");
        }
    };
    let text = String::from_utf8_lossy(&head[..body_start]).into_owned();
    let status: u16 = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("GET {url}: no status"))?;
    let length = number(&text, "content-length");
    let retry_after = number(&text, "retry-after");
    if text.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    }) {
        bail!("GET {url}: chunked responses are not read by this client");
    }
    let mut got = Got {
        status,
        bytes: 0,
        body: Vec::new(),
        retry_after,
    };
    let keep = |chunk: &[u8], got: &mut Got| {
        if got.bytes + (chunk.len() as u64) <= keep_up_to {
            got.body.extend_from_slice(chunk);
        }
        got.bytes += chunk.len() as u64;
    };
    let first = &head[body_start..];
    let first = &first[..first.len().min(cut.unwrap_or(u64::MAX) as usize)];
    hash.update(first);
    keep(first, &mut got);
    loop {
        if length.is_some_and(|l| got.bytes >= l) {
            break;
        }
        let room = match cut {
            Some(c) if got.bytes >= c => return Ok(got),
            Some(c) => ((c - got.bytes) as usize).min(buf.len()),
            None => buf.len(),
        };
        let n = read(&mut s, &mut buf[..room]).await?;
        if n == 0 {
            if let Some(l) = length {
                bail!("GET {url}: closed after {} of {l} body bytes", got.bytes);
            }
            break;
        }
        keep(&buf[..n], &mut got);
        buf = digest(hash, buf, n).await?;
    }
    Ok(got)
}

/// Header `name`'s value in response head `head`, as a number.
fn number(head: &str, name: &str) -> Option<u64> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name)
            .then(|| v.trim().parse().ok())?
    })
}

/// Bodies of at least this many bytes a read are hashed on the hashing
/// threads; smaller ones at once.
const HASH_AWAY: usize = 64 * 1024;

/// The hashing threads: a runtime of its own whose blocking threads run
/// at nice 19, on the generator's CPU like the rest. Hashing every byte
/// (about 1 GB/s a core) is most of the generator's work; at nice 19 it
/// takes only what the protocol work (DHCP, TFTP's lock step, requests)
/// leaves, so a simulated machine answers its server as promptly as a
/// real one, which has a CPU of its own, while the storm's byte rate is
/// still what the hashing allows.
static HASHER: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();

fn hasher() -> &'static tokio::runtime::Runtime {
    HASHER.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .max_blocking_threads(2)
            .thread_keep_alive(std::time::Duration::from_secs(3600))
            .on_thread_start(|| {
                // nice(2) changes the calling thread only (Linux: the nice
                // value is per thread).
                let _ = rustix::process::nice(19);
            })
            .build()
            .expect("the hashing runtime")
    })
}

/// Feeds `buf[..n]` to `hash` (on the hashing threads when it is large)
/// and gives the buffer back.
async fn digest(hash: &mut Sha256, buf: Vec<u8>, n: usize) -> Result<Vec<u8>> {
    if n < HASH_AWAY {
        hash.update(&buf[..n]);
        return Ok(buf);
    }
    let mut h = std::mem::take(hash);
    let (h, buf) = hasher()
        .spawn_blocking(move || {
            h.update(&buf[..n]);
            (h, buf)
        })
        .await?;
    *hash = h;
    Ok(buf)
}

async fn read(s: &mut tokio::net::TcpStream, buf: &mut [u8]) -> Result<usize> {
    Ok(tokio::time::timeout(IDLE, s.read(buf))
        .await
        .context("no byte for 30 s")??)
}

#[cfg(test)]
mod tests {
    #[test]
    fn urls() {
        let (a, p) = super::split("http://10.78.0.1:8080/ipxe/node?mac=x").unwrap();
        assert_eq!(a.to_string(), "10.78.0.1:8080");
        assert_eq!(p, "/ipxe/node?mac=x");
        assert_eq!(super::split("http://10.0.0.1").unwrap().1, "/");
        assert!(super::split("https://x/").is_err());
    }
}
