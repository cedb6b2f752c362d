//! The HTTP(S) client for stream metadata and artifacts: hyper's pooled
//! client over hyper-rustls (ring provider, as the rest of the workspace),
//! trusting the system's roots plus an optional extra CA (a mirror's).
//! Redirects are followed (mirrors redirect), at most [`MAX_REDIRECTS`].

use bytes::Bytes;
use http::{header, HeaderMap, Request, Response, StatusCode, Uri};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client as Hyper};
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::{pem::PemObject, CertificateDer};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub const MAX_REDIRECTS: usize = 5;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{url}: {msg}")]
    Request { url: String, msg: String },
    #[error("TLS setup: {0}")]
    Tls(String),
}

#[derive(Clone, Debug)]
pub struct Client {
    inner: Hyper<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>,
    /// How long a response head may take.
    pub timeout: Duration,
}

impl Client {
    /// `extra_ca`: a PEM file of additional roots (e.g. a local mirror's CA).
    pub fn new(extra_ca: Option<&Path>) -> Result<Client, ClientError> {
        let mut roots = rustls::RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        for cert in native.certs {
            // A system store may hold certificates rustls rejects; skip them.
            let _ = roots.add(cert);
        }
        if let Some(p) = extra_ca {
            let pem =
                std::fs::read(p).map_err(|e| ClientError::Tls(format!("{}: {e}", p.display())))?;
            for c in CertificateDer::pem_slice_iter(&pem) {
                let c = c.map_err(|e| ClientError::Tls(format!("{}: {e}", p.display())))?;
                roots
                    .add(c)
                    .map_err(|e| ClientError::Tls(format!("{}: {e}", p.display())))?;
            }
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(Duration::from_secs(15)));
        http.set_nodelay(true);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let inner = Hyper::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(https);
        Ok(Client {
            inner,
            timeout: Duration::from_secs(30),
        })
    }

    /// GET `url` with `headers`, following redirects. Returns the final URL
    /// with the response (its body not read yet).
    pub async fn get(
        &self,
        url: &str,
        headers: &HeaderMap,
    ) -> Result<(String, Response<Incoming>), ClientError> {
        let mut url = url.to_string();
        for _ in 0..=MAX_REDIRECTS {
            let uri: Uri = url.parse().map_err(|e| ClientError::Request {
                url: url.clone(),
                msg: format!("not a URL: {e}"),
            })?;
            let mut req =
                Request::get(uri.clone())
                    .body(Empty::new())
                    .map_err(|e| ClientError::Request {
                        url: url.clone(),
                        msg: e.to_string(),
                    })?;
            req.headers_mut().extend(headers.clone());
            req.headers_mut().insert(
                header::USER_AGENT,
                header::HeaderValue::from_static(concat!("images/", env!("CARGO_PKG_VERSION"))),
            );
            let resp = tokio::time::timeout(self.timeout, self.inner.request(req))
                .await
                .map_err(|_| ClientError::Request {
                    url: url.clone(),
                    msg: format!("no response within {:?}", self.timeout),
                })?
                .map_err(|e| ClientError::Request {
                    url: url.clone(),
                    msg: error_chain(&e),
                })?;
            let redirect = matches!(
                resp.status(),
                StatusCode::MOVED_PERMANENTLY
                    | StatusCode::FOUND
                    | StatusCode::SEE_OTHER
                    | StatusCode::TEMPORARY_REDIRECT
                    | StatusCode::PERMANENT_REDIRECT
            );
            if !redirect {
                return Ok((url, resp));
            }
            let loc = resp
                .headers()
                .get(header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .ok_or_else(|| ClientError::Request {
                    url: url.clone(),
                    msg: format!("{} without a Location", resp.status()),
                })?;
            url = join(&uri, loc);
        }
        Err(ClientError::Request {
            url,
            msg: format!("more than {MAX_REDIRECTS} redirects"),
        })
    }
}

/// Resolves a Location header against the request URI (absolute, or
/// absolute-path; relative paths are resolved against the directory).
fn join(base: &Uri, loc: &str) -> String {
    if loc.contains("://") {
        return loc.to_string();
    }
    let scheme = base.scheme_str().unwrap_or("http");
    let auth = base.authority().map(|a| a.as_str()).unwrap_or("");
    if loc.starts_with('/') {
        return format!("{scheme}://{auth}{loc}");
    }
    let path = base.path();
    let dir = &path[..path.rfind('/').map(|i| i + 1).unwrap_or(0)];
    format!("{scheme}://{auth}{dir}{loc}")
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_targets() {
        let base: Uri = "http://h:8/a/b/c?x".parse().unwrap();
        assert_eq!(join(&base, "https://m/x"), "https://m/x");
        assert_eq!(join(&base, "/y"), "http://h:8/y");
        assert_eq!(join(&base, "z"), "http://h:8/a/b/z");
    }
}
