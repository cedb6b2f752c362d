//! The real probes: TCP connect, HTTP GET, HTTPS GET (rustls; without a CA
//! the certificate is not verified, as HAProxy's `check-ssl verify none`).
//! Healthy: connected (tcp), or a 2xx/3xx status line (http, https).

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use site::{Check, CheckKind};
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// One probe of one backend: `Ok` when healthy, `Err(reason)` otherwise.
/// Two implementations: [`NetProber`] and the tests' fake; [`crate::health`]
/// runs it.
pub trait Prober: Send + Sync + 'static {
    fn probe(
        &self,
        addr: SocketAddr,
        check: &Check,
    ) -> impl Future<Output = Result<(), String>> + Send;

    /// Probes in flight at once, all backends together: a check loop
    /// takes a slot before its probe (and before the probe's timeout
    /// starts). `None`: no bound.
    fn slots(&self) -> Option<&tokio::sync::Semaphore> {
        None
    }
}

/// Probes in flight at once ([`Prober::slots`]): each holds a socket, and a
/// site of 50 000 workers (two ingress pools of 50 000 backends) probing
/// addresses that do not answer would otherwise take every descriptor
/// (reloads then failed to read the site file: "Too many open files").
pub const PROBE_SLOTS: usize = 1024;

/// Probes over the network; TLS client configs are built once per CA file.
#[derive(Debug)]
pub struct NetProber {
    tls: Mutex<HashMap<Option<PathBuf>, Arc<ClientConfig>>>,
    slots: tokio::sync::Semaphore,
}

impl Default for NetProber {
    fn default() -> Self {
        NetProber {
            tls: Mutex::default(),
            slots: tokio::sync::Semaphore::new(PROBE_SLOTS),
        }
    }
}

impl Prober for NetProber {
    fn slots(&self) -> Option<&tokio::sync::Semaphore> {
        Some(&self.slots)
    }

    async fn probe(&self, addr: SocketAddr, check: &Check) -> Result<(), String> {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let _ = tcp.set_nodelay(true);
        match &check.kind {
            CheckKind::Tcp => Ok(()),
            CheckKind::Http { path } => http_get(tcp, &addr.ip().to_string(), path).await,
            CheckKind::Https {
                path,
                ca,
                server_name,
            } => {
                let config = self.tls_config(ca.as_ref())?;
                let name = match server_name {
                    Some(n) => ServerName::try_from(n.clone())
                        .map_err(|e| format!("server name {n:?}: {e}"))?,
                    None => ServerName::IpAddress(addr.ip().into()),
                };
                let host = server_name.clone().unwrap_or_else(|| addr.ip().to_string());
                let tls = tokio_rustls::TlsConnector::from(config)
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("TLS: {e}"))?;
                http_get(tls, &host, path).await
            }
        }
    }
}

impl NetProber {
    fn tls_config(&self, ca: Option<&PathBuf>) -> Result<Arc<ClientConfig>, String> {
        let mut cache = self.tls.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = cache.get(&ca.cloned()) {
            return Ok(Arc::clone(c));
        }
        let config = match ca {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|e| format!("CA {}: {e}", path.display()))?;
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(&pem) {
                    let cert = cert.map_err(|e| format!("CA {}: {e}", path.display()))?;
                    roots
                        .add(cert)
                        .map_err(|e| format!("CA {}: {e}", path.display()))?;
                }
                let provider = Arc::new(rustls::crypto::ring::default_provider());
                let builder = ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(|e| e.to_string())?;
                Arc::new(builder.with_root_certificates(roots).with_no_client_auth())
            }
            None => insecure_client_config(),
        };
        cache.insert(ca.cloned(), Arc::clone(&config));
        Ok(config)
    }
}

/// Sends `GET path` and reads the status line.
async fn http_get<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    host: &str,
    path: &str,
) -> Result<(), String> {
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: lbd-check\r\nAccept: */*\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| format!("send: {e}"))?;
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 256];
    while !buf.contains(&b'\n') && buf.len() < 4096 {
        let n = s.read(&mut chunk).await.map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let line = String::from_utf8_lossy(buf.split(|b| *b == b'\n').next().unwrap_or_default())
        .trim_end()
        .to_string();
    let status: u16 = match line.split(' ').collect::<Vec<_>>().as_slice() {
        [v, code, ..] if v.starts_with("HTTP/1.") => code
            .parse()
            .map_err(|_| format!("bad status line {line:?}"))?,
        _ => {
            return Err(if line.is_empty() {
                "no HTTP answer".into()
            } else {
                format!("bad status line {line:?}")
            })
        }
    };
    if (200..400).contains(&status) {
        Ok(())
    } else {
        Err(format!("GET {path}: HTTP {status}"))
    }
}

/// A client that accepts any certificate (signatures still checked): the
/// check asks "is it serving", not "is it who it claims", unless a CA is
/// configured. Tests use it as their client too.
pub fn insecure_client_config() -> Arc<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
        .with_no_client_auth();
    Arc::new(config)
}

#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
