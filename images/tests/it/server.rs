//! A small HTTP/1.1 file server on 127.0.0.1 for the fetch tests: serves
//! registered paths, honours `Range: bytes=N-` with `If-Range` (ETag), can
//! cut a response mid-body, and records every request it sees.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub path: String,
    pub range: Option<String>,
    pub if_range: Option<String>,
}

#[derive(Clone)]
struct File {
    body: Vec<u8>,
    etag: String,
    /// The next `cuts` GETs of this path stop after `cut_at` body bytes.
    cuts: usize,
    cut_at: usize,
}

#[derive(Clone, Default)]
pub struct Server {
    pub addr: Option<SocketAddr>,
    files: Arc<Mutex<HashMap<String, File>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    pub async fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let s = Server {
            addr: Some(listener.local_addr().unwrap()),
            ..Default::default()
        };
        let me = s.clone();
        tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(me.clone().serve(sock));
            }
        });
        s
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr.unwrap())
    }

    pub fn put(&self, path: &str, body: &[u8]) {
        let etag = format!(
            "\"{:x}-{}\"",
            body.len(),
            body.iter().map(|b| *b as u64).sum::<u64>()
        );
        self.files.lock().unwrap().insert(
            path.to_string(),
            File {
                body: body.to_vec(),
                etag,
                cuts: 0,
                cut_at: 0,
            },
        );
    }

    /// The next `times` GETs of `path` send `at` body bytes, then close.
    pub fn cut(&self, path: &str, at: usize, times: usize) {
        let mut files = self.files.lock().unwrap();
        let f = files.get_mut(path).expect("cut: path not registered");
        f.cuts = times;
        f.cut_at = at;
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    async fn serve(self, mut sock: tokio::net::TcpStream) {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            match sock.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let head = String::from_utf8_lossy(&buf).to_string();
        let mut lines = head.split("\r\n");
        let path = lines
            .next()
            .unwrap_or("")
            .split(' ')
            .nth(1)
            .unwrap_or("")
            .to_string();
        let header = |name: &str| {
            head.split("\r\n").skip(1).find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_string())
            })
        };
        let seen = Seen {
            path: path.clone(),
            range: header("range"),
            if_range: header("if-range"),
        };
        self.seen.lock().unwrap().push(seen.clone());
        let file = {
            let mut files = self.files.lock().unwrap();
            let f = files.get_mut(&path).cloned();
            if let Some(f) = files.get_mut(&path) {
                f.cuts = f.cuts.saturating_sub(1);
            }
            f
        };
        let Some(file) = file else {
            let _ = sock
                .write_all(
                    b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await;
            return;
        };
        let start = seen
            .range
            .as_deref()
            .and_then(|r| r.strip_prefix("bytes="))
            .and_then(|r| r.strip_suffix('-'))
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|_| seen.if_range.as_deref().is_none_or(|v| v == file.etag));
        let len = file.body.len();
        let (status, body, extra) = match start {
            Some(s) if s >= len => {
                let h = format!(
                    "HTTP/1.1 416 Range Not Satisfiable\r\ncontent-range: bytes */{len}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                );
                let _ = sock.write_all(h.as_bytes()).await;
                return;
            }
            Some(s) => (
                "206 Partial Content",
                &file.body[s..],
                format!("content-range: bytes {s}-{}/{len}\r\n", len - 1),
            ),
            None => ("200 OK", &file.body[..], String::new()),
        };
        let h = format!(
            "HTTP/1.1 {status}\r\ncontent-length: {}\r\netag: {}\r\naccept-ranges: bytes\r\n{extra}connection: close\r\n\r\n",
            body.len(),
            file.etag
        );
        let _ = sock.write_all(h.as_bytes()).await;
        let cut = file.cuts > 0;
        let send = if cut {
            &body[..file.cut_at.min(body.len())]
        } else {
            body
        };
        let _ = sock.write_all(send).await;
        let _ = sock.flush().await;
        // Dropping the socket mid-body is the cut.
    }
}
