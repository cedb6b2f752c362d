//! The HTTP(S) client every provider exchange goes through: one exchange
//! at a time, bounded in time and size, fenced between controller leaders
//! (module `crate::fence`), with TLS refusals said precisely.

use super::{ProviderError, Result};
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::{connect::HttpConnector, Client as HyperClient};
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::{pem::PemObject, CertificateDer};
use std::time::Duration;

/// The largest reply body read from a provider.
const MAX_BODY: usize = 8 << 20;

/// A reply: status, headers, body.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// HTTP(S) client for providers: one exchange, bounded in time and size.
#[derive(Clone)]
pub struct Http {
    client: HyperClient<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    pub timeout: Duration,
}

impl std::fmt::Debug for Http {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Http {
    /// Trusts the system's CA store (for the providers' public endpoints);
    /// plain `http://` base URLs (test fakes, proxies) work too.
    pub fn new(timeout: Duration) -> Http {
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let builder = hyper_rustls::HttpsConnectorBuilder::new();
        let conn = match builder.with_provider_and_native_roots(provider) {
            Ok(b) => b.https_or_http().enable_http1().build(),
            Err(e) => {
                // No system CA store (a minimal container): https:// endpoints
                // will fail to verify, and say so; http:// ones still work.
                tracing::warn!(error = %e, "no system CA certificates; HTTPS to providers will fail");
                let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
                let tls = rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .expect("ring supports TLS 1.2 and 1.3")
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth();
                hyper_rustls::HttpsConnectorBuilder::new()
                    .with_tls_config(tls)
                    .https_or_http()
                    .enable_http1()
                    .build()
            }
        };
        Http {
            client: HyperClient::builder(TokioExecutor::new()).build(conn),
            timeout,
        }
    }

    /// With a custom root CA (the CLI talking to bootd's API, a BMC's CA bundle).
    pub fn with_ca(timeout: Duration, ca_pem: &[u8]) -> std::io::Result<Http> {
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca_pem) {
            roots
                .add(c.map_err(std::io::Error::other)?)
                .map_err(std::io::Error::other)?;
        }
        if roots.is_empty() {
            return Err(std::io::Error::other("no PEM certificate in it"));
        }
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(std::io::Error::other)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Http::with_tls(timeout, tls))
    }

    /// Accepts any server certificate (a BMC's `insecureSkipVerify`): the
    /// handshake's signatures are still checked, the certificate's chain
    /// and name are not. Whoever can answer for the address sees the
    /// credentials sent.
    pub fn insecure(timeout: Duration) -> Http {
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("ring supports TLS 1.2 and 1.3")
            .dangerous()
            .with_custom_certificate_verifier(std::sync::Arc::new(AnyCertificate(provider)))
            .with_no_client_auth();
        Http::with_tls(timeout, tls)
    }

    /// With a TLS configuration of the caller's own (the cluster API: its CA
    /// alone, and a client certificate).
    pub(crate) fn with_tls(timeout: Duration, tls: rustls::ClientConfig) -> Http {
        let conn = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        Http {
            client: HyperClient::builder(TokioExecutor::new()).build(conn),
            timeout,
        }
    }

    /// Sends `req`; `what` names the operation in errors (no secrets in it).
    pub async fn send(&self, req: Request<Full<Bytes>>, what: &str) -> Result<Reply> {
        let fut = async {
            let resp = self.client.request(req).await.map_err(|e| {
                tracing::debug!(error = ?e, "{what}: request failed");
                match tls_refusal(&e) {
                    Some(why) => ProviderError::permanent(format!("{what}: {why}")),
                    None => ProviderError::transient(format!("{what}: connection failed")),
                }
            })?;
            let (parts, body) = resp.into_parts();
            let body = Limited::new(body, MAX_BODY)
                .collect()
                .await
                .map_err(|_| {
                    ProviderError::transient(format!(
                        "{what}: reply cut short (HTTP {})",
                        parts.status.as_u16()
                    ))
                })?
                .to_bytes();
            Ok(Reply {
                status: parts.status,
                headers: parts.headers,
                body,
            })
        };
        // Fenced (module `fence`): not sent once this appliance's term as
        // the controller's leader has ended, abandoned when it ends.
        match crate::fence::guarded(tokio::time::timeout(self.timeout, fut)).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(ProviderError::transient(format!(
                "{what}: no reply within {:?}",
                self.timeout
            ))),
            Err(why) => Err(ProviderError::transient(format!("{what}: not sent: {why}"))),
        }
    }
}

/// A TLS handshake that failed because the server's certificate was not
/// trusted: worth saying precisely, and not worth retrying.
fn tls_refusal(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    // hyper's error, whose source is an io::Error, holding an io::Error,
    // holding rustls' error.
    fn rustls_in<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
        if let Some(r) = err.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        err.downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| rustls_in(inner))
    }
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(rustls::Error::InvalidCertificate(why)) = rustls_in(err) {
            return Some(format!(
                "the server's TLS certificate does not verify ({why:?}): give its CA, or \
                 (on a trusted network only) skip verification"
            ));
        }
        cur = err.source();
    }
    None
}

/// The verifier of [`Http::insecure`].
#[derive(Debug)]
struct AnyCertificate(std::sync::Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> std::result::Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
