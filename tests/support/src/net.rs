//! Raw connections for the tests of a listener's limits: a TLS client that
//! trusts a test's CA, and an exchange that writes what an attacker would
//! and reads until the server closes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// A TLS connection to `addr` for `server_name`, trusting only the CA
/// certificates in `ca_pem`.
pub async fn tls_client(ca_pem: &str, addr: SocketAddr, server_name: &str) -> TlsStream<TcpStream> {
    use rustls::pki_types::{pem::PemObject, CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from(server_name.to_string()).unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await
        .unwrap()
}

/// Writes `bytes`, then reads until the server closes (which it must within
/// 10 s; a read error ends the reading too): what it sent, as lossy UTF-8.
pub async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, bytes: &[u8]) -> String {
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("the server did not close the connection within 10 s")
        .ok();
    String::from_utf8_lossy(&out).into_owned()
}
