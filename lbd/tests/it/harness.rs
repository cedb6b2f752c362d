//! Real backends on loopback (plain and TLS), clients, and lbd started
//! in-process on port 0.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// An HTTP/1.1 backend: `/healthz` and `/readyz` answer 200 while `healthy`,
/// 503 otherwise; any other path answers its name. Keep-alive.
pub struct Backend {
    pub name: String,
    pub addr: SocketAddr,
    pub healthy: Arc<AtomicBool>,
    /// Flip `healthy` after every health probe (a flapping backend).
    pub flap: Arc<AtomicBool>,
    pub hits: Arc<AtomicU64>,
    pub probes: Arc<AtomicU64>,
    stop: CancellationToken,
}

impl Backend {
    pub async fn start(name: &str, addr: SocketAddr) -> Backend {
        Self::start_with(name, addr, None).await
    }

    pub async fn start_tls(
        name: &str,
        addr: SocketAddr,
        tls: tokio_rustls::TlsAcceptor,
    ) -> Backend {
        Self::start_with(name, addr, Some(tls)).await
    }

    async fn start_with(
        name: &str,
        addr: SocketAddr,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> Backend {
        let l = lbd::state::bind(addr).unwrap_or_else(|e| panic!("bind backend {addr}: {e}"));
        let addr = l.local_addr().unwrap();
        let b = Backend {
            name: name.to_string(),
            addr,
            healthy: Arc::new(AtomicBool::new(true)),
            flap: Arc::new(AtomicBool::new(false)),
            hits: Arc::new(AtomicU64::new(0)),
            probes: Arc::new(AtomicU64::new(0)),
            stop: CancellationToken::new(),
        };
        let (name, healthy, flap, hits, probes, stop) = (
            b.name.clone(),
            b.healthy.clone(),
            b.flap.clone(),
            b.hits.clone(),
            b.probes.clone(),
            b.stop.clone(),
        );
        tokio::spawn(async move {
            loop {
                let (s, _) = tokio::select! {
                    _ = stop.cancelled() => return,
                    r = l.accept() => match r { Ok(x) => x, Err(_) => continue },
                };
                let st = State {
                    name: name.clone(),
                    healthy: healthy.clone(),
                    flap: flap.clone(),
                    hits: hits.clone(),
                    probes: probes.clone(),
                };
                let stop = stop.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let _ = s.set_nodelay(true);
                    tokio::select! {
                        _ = stop.cancelled() => {}
                        _ = async {
                            match tls {
                                Some(t) => { if let Ok(s) = t.accept(s).await { serve_http(s, st).await } }
                                None => serve_http(s, st).await,
                            }
                        } => {}
                    }
                });
            }
        });
        b
    }

    /// Closes the listener and every connection: connects are refused from now on.
    pub fn kill(&self) {
        self.stop.cancel();
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[derive(Clone)]
struct State {
    name: String,
    healthy: Arc<AtomicBool>,
    flap: Arc<AtomicBool>,
    hits: Arc<AtomicU64>,
    probes: Arc<AtomicU64>,
}

async fn serve_http<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, st: State) {
    let mut buf = Vec::new();
    loop {
        let Some(head) = read_head(&mut s, &mut buf).await else {
            return;
        };
        let path = head.split(' ').nth(1).unwrap_or("/").to_string();
        let close = head.to_ascii_lowercase().contains("connection: close");
        let (status, body) = if path == "/healthz" || path == "/readyz" {
            st.probes.fetch_add(1, Relaxed);
            let ok = st.healthy.load(Relaxed);
            if st.flap.load(Relaxed) {
                st.healthy.store(!ok, Relaxed);
            }
            if ok {
                ("200 OK", "ok".to_string())
            } else {
                ("503 Service Unavailable", "not ready".to_string())
            }
        } else {
            st.hits.fetch_add(1, Relaxed);
            ("200 OK", st.name.clone())
        };
        let resp = format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if s.write_all(resp.as_bytes()).await.is_err() || close {
            let _ = s.shutdown().await;
            return;
        }
    }
}

async fn read_head<S: AsyncRead + Unpin>(s: &mut S, buf: &mut Vec<u8>) -> Option<String> {
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i]).to_string();
            buf.drain(..i + 4);
            return Some(head);
        }
        let mut chunk = [0u8; 4096];
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// One request on a new connection; the body (the backend's name).
pub async fn get(addr: SocketAddr) -> std::io::Result<String> {
    let mut s = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr)).await??;
    get_on(&mut s, true).await
}

/// One request on an open connection (keep-alive unless `close`).
pub async fn get_on<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    close: bool,
) -> std::io::Result<String> {
    let conn = if close { "close" } else { "keep-alive" };
    s.write_all(format!("GET / HTTP/1.1\r\nHost: t\r\nConnection: {conn}\r\n\r\n").as_bytes())
        .await?;
    let mut buf = Vec::new();
    let head = tokio::time::timeout(Duration::from_secs(5), read_head(s, &mut buf))
        .await?
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "no response"))?;
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length: ")
                .map(|v| v.trim().parse().unwrap_or(0))
        })
        .unwrap_or(0);
    while buf.len() < len {
        let mut chunk = [0u8; 4096];
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    if !head.starts_with("HTTP/1.1 200") {
        return Err(std::io::Error::other(head));
    }
    Ok(String::from_utf8_lossy(&buf[..len]).to_string())
}

/// A self-signed certificate for `ips` (rcgen, made at test time) and its acceptor.
pub fn tls_acceptor(ips: &[&str]) -> (tokio_rustls::TlsAcceptor, String) {
    let names: Vec<String> = ips.iter().map(|s| s.to_string()).collect();
    let ck = rcgen::generate_simple_self_signed(names).unwrap();
    let cert_pem = ck.cert.pem();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(ck.key_pair.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![ck.cert.der().clone()], key)
        .unwrap();
    (tokio_rustls::TlsAcceptor::from(Arc::new(config)), cert_pem)
}

/// A running lbd from a configuration file, frontends on 127.0.0.1:0.
pub struct Lb {
    pub lbd: Arc<lbd::Lbd>,
    pub addrs: HashMap<String, SocketAddr>,
    pub admin: Option<SocketAddr>,
    pub reload: Arc<tokio::sync::Notify>,
    pub shutdown: CancellationToken,
    pub path: PathBuf,
}

impl Lb {
    pub async fn start(source: lbd::Source, state_dir: Option<&Path>) -> Lb {
        Lb::start_tuned(source, state_dir, |_| {}).await
    }

    /// [`Lb::start`]; `tune` may change the config first.
    pub async fn start_tuned(
        source: lbd::Source,
        state_dir: Option<&Path>,
        tune: impl FnOnce(&mut lbd::Config),
    ) -> Lb {
        let loaded = lbd::Loaded::load(&source).unwrap_or_else(|e| panic!("{e}"));
        let mut sockets = lbd::Sockets::default();
        let mut addrs = HashMap::new();
        for f in loaded.plan(false) {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            addrs.insert(f.name.clone(), l.local_addr().unwrap());
            sockets.frontends.insert(f.name, l);
        }
        let admin_l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = Some(admin_l.local_addr().unwrap());
        sockets.admin = Some(admin_l);
        let path = match &source {
            lbd::Source::Site(p) | lbd::Source::Standalone(p) => p.clone(),
            lbd::Source::Feed(f) => f.current().source.clone(),
        };
        let mut config = lbd::Config::new(source, loaded);
        config.poll = None;
        config.grace = Duration::from_secs(2);
        config.state_dir = state_dir.map(Path::to_path_buf);
        tune(&mut config);
        let reload = Arc::clone(&config.reload);
        let shutdown = CancellationToken::new();
        let lbd = lbd::start(config, sockets, shutdown.clone()).await.unwrap();
        Lb {
            lbd,
            addrs,
            admin,
            reload,
            shutdown,
            path,
        }
    }

    pub fn addr(&self, frontend: &str) -> SocketAddr {
        self.addrs[frontend]
    }

    /// The backend `addr` of `frontend`, wherever it is (pool or draining).
    pub fn backend(&self, frontend: &str, addr: SocketAddr) -> Option<Arc<lbd::state::Backend>> {
        let fe = self.lbd.app.frontend(frontend)?;
        let pool = fe.pool.load();
        let draining = fe.draining.lock().unwrap();
        pool.iter()
            .chain(draining.iter())
            .find(|b| b.addr == addr)
            .cloned()
    }

    pub async fn admin(&self, method: &str, path: &str) -> (u16, String) {
        self.admin_with(method, path, "").await
    }

    /// [`Lb::admin`] with extra header lines (`"Origin: x\r\n"`).
    pub async fn admin_with(&self, method: &str, path: &str, headers: &str) -> (u16, String) {
        let mut s = TcpStream::connect(self.admin.unwrap()).await.unwrap();
        s.write_all(format!("{method} {path} HTTP/1.1\r\nHost: t\r\n{headers}Content-Length: 0\r\nConnection: close\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let status = out.split(' ').nth(1).unwrap_or("0").parse().unwrap_or(0);
        let body = out
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (status, body)
    }

    /// Rewrites the configuration file and reloads; waits until the reload ran.
    pub async fn rewrite(&self, text: &str) {
        let m = &self.lbd.app.metrics;
        let before = m.reloads_ok.load(Relaxed) + m.reloads_failed.load(Relaxed);
        std::fs::write(&self.path, text).unwrap();
        self.reload.notify_one();
        wait_for(Duration::from_secs(5), || {
            m.reloads_ok.load(Relaxed) + m.reloads_failed.load(Relaxed) > before
        })
        .await;
    }
}

impl Drop for Lb {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Polls `cond` every 10 ms; panics after `limit`. Returns the time it took.
pub async fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let t0 = std::time::Instant::now();
    while !cond() {
        assert!(t0.elapsed() < limit, "condition not met within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    t0.elapsed()
}

/// A standalone lbd file with one service `web` over `backends`.
pub fn web_service(backends: &[SocketAddr], extra: &str) -> String {
    let list: Vec<String> = backends.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "adminListen: 127.0.0.1:1\n{extra}services:\n  - name: web\n    listen: 127.0.0.1:2\n    backends: [{}]\n    check: {{ type: http, path: /healthz, interval: 200ms, fastInterval: 100ms, timeout: 100ms, rise: 2, fall: 3 }}\n",
        list.join(", ")
    )
}

pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}
