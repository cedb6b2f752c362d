//! The cluster's API as the controller calls it: CSRs listed and approved
//! (`certificates.k8s.io/v1`, as `oc adm certificate approve` does: the
//! object as read, an `Approved` condition added, `PUT` to its `/approval`
//! subresource) and the `bootstrap` ConfigMap read (as `openshift-install
//! wait-for bootstrap-complete` reads it). One exchange per call over the
//! providers' [`Http`], trusting the kubeconfig's CA alone, with its client
//! certificate or bearer token.
//!
//! Errors are [`ProviderError`]s with safe words (the call and the HTTP
//! status); the server's own text goes to the log, the token removed. A
//! key or token is never in an error, a log line or a `Debug`.

use crate::providers::{self, Http, ProviderError, Result, COMPONENT};
use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, StatusCode};
use http_body_util::Full;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Value};
use site::{KubeAuth, Kubeconfig, Secret};
use std::time::Duration;

pub const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
pub const BOOTSTRAP_CONFIGMAP: &str = "/api/v1/namespaces/kube-system/configmaps/bootstrap";
/// The reason of the `Approved` conditions the controller adds.
pub const APPROVED_REASON: &str = "BareMetalBootApproved";
/// CSRs asked for per page of the list.
const PAGE: usize = 250;
/// Pages followed per list at most (a runaway `continue`).
const MAX_PAGES: usize = 200;

/// A client of one cluster's API server.
pub struct Kube {
    http: Http,
    server: String,
    token: Option<Secret<String>>,
}

impl std::fmt::Debug for Kube {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kube")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

/// What an approval came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approval {
    Approved,
    /// The CSR changed since it was read (409): looked at again next time.
    Conflict,
    /// The CSR is gone (404).
    Gone,
}

impl Kube {
    /// A client for the kubeconfig's cluster; `Err` says why its CA or
    /// credentials cannot be used (never what they hold).
    pub fn new(k: &Kubeconfig, timeout: Duration) -> std::result::Result<Kube, String> {
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(&k.ca_pem) {
            let c = c.map_err(|_| "its CA is not PEM".to_string())?;
            roots
                .add(c)
                .map_err(|e| format!("its CA certificate cannot be used: {e}"))?;
        }
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots);
        let (tls, token) = match &k.auth {
            KubeAuth::ClientCert { cert_pem, key_pem } => {
                let certs = CertificateDer::pem_slice_iter(cert_pem)
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|_| "its client certificate is not PEM".to_string())?;
                let key = PrivateKeyDer::from_pem_slice(key_pem.expose())
                    .map_err(|_| "its client key is not a PEM private key".to_string())?;
                let tls = tls.with_client_auth_cert(certs, key).map_err(|_| {
                    "its client certificate and key cannot be used together".to_string()
                })?;
                (tls, None)
            }
            KubeAuth::Token(t) => (tls.with_no_client_auth(), Some(t.clone())),
        };
        Ok(Kube {
            http: Http::with_tls(timeout, tls),
            server: k.server.clone(),
            token,
        })
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Request<Full<Bytes>>> {
        let mut b = providers::json_request(method, &format!("{}{path}", self.server), body);
        if let Some(t) = &self.token {
            let mut v = HeaderValue::from_str(&format!("Bearer {}", t.expose()))
                .map_err(|_| ProviderError::permanent("cluster API: the token cannot be sent"))?;
            v.set_sensitive(true);
            b = b.header(header::AUTHORIZATION, v);
        }
        providers::built(b.body(providers::body_of(body)), "cluster API")
    }

    fn secrets(&self) -> Vec<&str> {
        self.token.iter().map(|t| t.expose().as_str()).collect()
    }

    /// Every CSR, following `continue` page by page.
    pub async fn list_csrs(&self) -> Result<Vec<Value>> {
        let what = "cluster API: list CSRs";
        let mut items = Vec::new();
        let mut cont: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut path = format!("{CSRS}?limit={PAGE}");
            if let Some(c) = &cont {
                path.push_str("&continue=");
                path.extend(percent_encoding::utf8_percent_encode(c, COMPONENT));
            }
            let reply = self
                .http
                .send(self.request(Method::GET, &path, None)?, what)
                .await?;
            providers::check(&reply, what, &self.secrets())?;
            let mut v: Value = providers::parse(&reply, what)?;
            if let Some(a) = v["items"].as_array_mut() {
                items.append(a);
            }
            cont = v["metadata"]["continue"]
                .as_str()
                .filter(|c| !c.is_empty())
                .map(str::to_string);
            if cont.is_none() {
                return Ok(items);
            }
        }
        Err(ProviderError::transient(format!(
            "{what}: more than {MAX_PAGES} pages"
        )))
    }

    /// Approves `csr` (the object as listed): an `Approved` condition with
    /// [`APPROVED_REASON`] and `message`, `lastUpdateTime` `now` (RFC 3339).
    pub async fn approve(&self, csr: &Value, message: &str, now: &str) -> Result<Approval> {
        let name = csr["metadata"]["name"].as_str().unwrap_or_default();
        let what = "cluster API: approve a CSR";
        let mut body = csr.clone();
        body["apiVersion"] = json!("certificates.k8s.io/v1");
        body["kind"] = json!("CertificateSigningRequest");
        if !body["status"].is_object() {
            body["status"] = json!({});
        }
        let cond = json!({
            "type": "Approved",
            "status": "True",
            "reason": APPROVED_REASON,
            "message": message,
            "lastUpdateTime": now,
        });
        match body["status"]["conditions"].as_array_mut() {
            Some(a) => a.push(cond),
            None => body["status"]["conditions"] = json!([cond]),
        }
        let path = format!(
            "{CSRS}/{}/approval",
            percent_encoding::utf8_percent_encode(name, COMPONENT)
        );
        let reply = self
            .http
            .send(self.request(Method::PUT, &path, Some(&body))?, what)
            .await?;
        match reply.status {
            StatusCode::CONFLICT => Ok(Approval::Conflict),
            StatusCode::NOT_FOUND => Ok(Approval::Gone),
            _ => {
                providers::check(&reply, what, &self.secrets())?;
                Ok(Approval::Approved)
            }
        }
    }

    /// `data.status` of the `kube-system/bootstrap` ConfigMap; `None` while
    /// there is none (404).
    pub async fn bootstrap_status(&self) -> Result<Option<String>> {
        let what = "cluster API: read the bootstrap ConfigMap";
        let reply = self
            .http
            .send(self.request(Method::GET, BOOTSTRAP_CONFIGMAP, None)?, what)
            .await?;
        if reply.status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        providers::check(&reply, what, &self.secrets())?;
        let v: Value = providers::parse(&reply, what)?;
        Ok(Some(
            v["data"]["status"].as_str().unwrap_or_default().to_string(),
        ))
    }
}
