//! A fake Kubernetes API server for the controller's cluster side: the
//! CSRs of `certificates.k8s.io/v1` (list with `limit` and `continue`,
//! get, the `/approval` subresource) and the `kube-system/bootstrap`
//! ConfigMap, over TLS with a CA made at test time, authenticating every
//! client as an API server does: by a client certificate its client CA
//! signed ([`Auth::ClientCert`]) or a bearer token ([`Auth::Token`]).
//!
//! Every request is checked against Kubernetes' own OpenAPI document
//! (`<specs>/kubernetes/certificates.k8s.io-v1.openapi.json`, [`Spec`]):
//! the path matches a template, the method is one of the path's, each
//! query parameter is declared and of its type, and a body (the PUT of an
//! approval) validates against the `CertificateSigningRequest` schema. The
//! fake's own replies are checked against the document too. The ConfigMap
//! read is not in that document: it is checked against the one route it
//! stands for (core/v1 `readCoreV1NamespacedConfigMap`: `GET`, query
//! `pretty` only, no body). A request that fails a check is answered 400
//! and kept in [`Cluster::violations`]; a test asserts there are none.
//!
//! [`kubelet_csr`] makes a CSR object as a kubelet's would be, with a real
//! PKCS#10 request (rcgen).

use crate::http_fake::{self, Reply};
use crate::openapi::Spec;
use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
pub const BOOTSTRAPPER: &str =
    "system:serviceaccount:openshift-machine-config-operator:node-bootstrapper";
const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
const CONFIGMAP: &str = "/api/v1/namespaces/kube-system/configmaps/bootstrap";

/// How clients prove who they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// A certificate signed by the fake's client CA (TLS client auth).
    ClientCert,
    /// `Authorization: Bearer <token>`.
    Token(String),
}

/// What the fake holds and saw.
#[derive(Debug, Default)]
pub struct Cluster {
    /// CSR objects by name, as the API server stores them.
    pub csrs: BTreeMap<String, Value>,
    /// `data.status` of `kube-system/bootstrap`; `None`: no such ConfigMap.
    pub bootstrap: Option<String>,
    /// CSRs given an `Approved` condition, in order.
    pub approved: Vec<String>,
    /// CSRs given a `Denied` condition (the controller must never).
    pub denied: Vec<String>,
    /// Every request: `METHOD path?query`.
    pub requests: Vec<String>,
    /// Requests that did not pass the document's checks, and why.
    pub violations: Vec<String>,
    /// Requests refused for a missing or wrong token.
    pub unauthorized: u32,
    /// With [`Auth::Token`]: the token accepted now (a test may change it).
    pub token: Option<String>,
    /// Most items per list page (a smaller `limit` wins).
    pub page: usize,
    resource_version: u64,
}

impl Cluster {
    fn next_version(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }
}

/// The test PKI: the server's CA (what the kubeconfig trusts), the
/// server's certificate, and a client certificate the client CA signed.
pub struct Pki {
    pub ca_pem: String,
    pub client_cert_pem: String,
    pub client_key_pem: String,
    server: rustls::ServerConfig,
}

/// A running fake.
pub struct KubeFake {
    pub addr: SocketAddr,
    pub state: Arc<Mutex<Cluster>>,
    pub auth: Auth,
    pub ca_pem: String,
    client_cert_pem: String,
    client_key_pem: String,
}

fn pki(auth: &Auth) -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name
        .push(DnType::CommonName, "kube-apiserver test CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .unwrap()
        .signed_by(&server_key, &ca_cert, &ca_key)
        .unwrap();
    let client_key = KeyPair::generate().unwrap();
    let mut client = CertificateParams::new(Vec::<String>::new()).unwrap();
    client
        .distinguished_name
        .push(DnType::CommonName, "system:admin");
    client
        .distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    let client_cert = client.signed_by(&client_key, &ca_cert, &ca_key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match auth {
        Auth::ClientCert => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(ca_cert.der().clone()).unwrap();
            let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(v)
        }
        Auth::Token(_) => builder.with_no_client_auth(),
    };
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(server_key.serialize_der().into());
    let server = builder
        .with_single_cert(vec![server.der().clone(), ca_cert.der().clone()], key)
        .unwrap();
    Pki {
        ca_pem: ca_cert.pem(),
        client_cert_pem: client_cert.pem(),
        client_key_pem: client_key.serialize_pem(),
        server,
    }
}

impl KubeFake {
    /// Serves on 127.0.0.1 over TLS, checking requests against `spec`
    /// (usually [`KubeFake::spec`]).
    pub async fn start(auth: Auth, spec: Arc<Spec>) -> KubeFake {
        let p = pki(&auth);
        let state = Arc::new(Mutex::new(Cluster {
            page: 2,
            token: match &auth {
                Auth::Token(t) => Some(t.clone()),
                Auth::ClientCert => None,
            },
            ..Default::default()
        }));
        let st = Arc::clone(&state);
        let addr = http_fake::serve(Some(Arc::new(p.server)), move |req| {
            handle(Arc::clone(&st), Arc::clone(&spec), req)
        })
        .await;
        KubeFake {
            addr,
            state,
            auth,
            ca_pem: p.ca_pem,
            client_cert_pem: p.client_cert_pem,
            client_key_pem: p.client_key_pem,
        }
    }

    /// Kubernetes' certificates.k8s.io/v1 document from the specs directory.
    pub fn spec() -> Arc<Spec> {
        Arc::new(Spec::load(
            &crate::specs().join("kubernetes/certificates.k8s.io-v1.openapi.json"),
        ))
    }

    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.addr.port())
    }

    pub fn st(&self) -> MutexGuard<'_, Cluster> {
        self.state.lock().unwrap()
    }

    /// Writes a kubeconfig for this server as `openshift-install` writes
    /// one (CA and client certificate inline), or with the token; returns
    /// its path.
    pub fn write_kubeconfig(&self, dir: &Path) -> PathBuf {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let user = match &self.auth {
            Auth::ClientCert => format!(
                "    client-certificate-data: {}\n    client-key-data: {}\n",
                b64(&self.client_cert_pem),
                b64(&self.client_key_pem)
            ),
            Auth::Token(t) => format!("    token: {t}\n"),
        };
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n    certificate-authority-data: {}\ncontexts:\n- name: admin\n  context:\n    cluster: test\n    user: admin\ncurrent-context: admin\npreferences: {{}}\nusers:\n- name: admin\n  user:\n{user}",
            self.url(),
            b64(&self.ca_pem)
        );
        let path = dir.join("kubeconfig");
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Adds a CSR object (as [`kubelet_csr`] makes them).
    pub fn add_csr(&self, mut csr: Value) {
        let mut st = self.st();
        let name = csr["metadata"]["name"].as_str().unwrap().to_string();
        csr["metadata"]["resourceVersion"] = json!(st.next_version());
        st.csrs.insert(name, csr);
    }

    /// The CSR's condition types, as stored.
    pub fn conditions(&self, name: &str) -> Vec<String> {
        self.st().csrs[name]["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| c["type"].as_str().unwrap_or_default().to_string())
            .collect()
    }
}

/// A CSR as a kubelet asks for it.
pub struct KubeletCsr<'a> {
    pub name: &'a str,
    /// The subject: `CN`, then `O`s.
    pub cn: &'a str,
    pub orgs: &'a [&'a str],
    /// DNS names and IP addresses (each parsed as an IP address if it is one).
    pub sans: &'a [&'a str],
    pub signer: &'a str,
    pub usages: &'a [&'a str],
    /// Who created it (the API server fills this in).
    pub username: &'a str,
    pub groups: &'a [&'a str],
}

impl<'a> KubeletCsr<'a> {
    /// A new node's first client CSR, from the bootstrapper.
    pub fn client(name: &'a str, cn: &'a str) -> KubeletCsr<'a> {
        KubeletCsr {
            name,
            cn,
            orgs: &["system:nodes"],
            sans: &[],
            signer: CLIENT_SIGNER,
            usages: &["digital signature", "client auth"],
            username: BOOTSTRAPPER,
            groups: &[
                "system:serviceaccounts",
                "system:serviceaccounts:openshift-machine-config-operator",
                "system:authenticated",
            ],
        }
    }

    /// A serving CSR, from the node itself (`username`: `system:node:<n>`).
    pub fn serving(name: &'a str, cn: &'a str, sans: &'a [&'a str]) -> KubeletCsr<'a> {
        KubeletCsr {
            name,
            cn,
            orgs: &["system:nodes"],
            sans,
            signer: SERVING_SIGNER,
            usages: &["digital signature", "server auth"],
            username: cn,
            groups: &["system:nodes", "system:authenticated"],
        }
    }
}

/// The CSR object for `c`: a real PKCS#10 request with a fresh key.
pub fn kubelet_csr(c: &KubeletCsr<'_>) -> Value {
    let key = KeyPair::generate().unwrap();
    let mut p =
        CertificateParams::new(c.sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, c.cn);
    for o in c.orgs {
        p.distinguished_name.push(DnType::OrganizationName, *o);
    }
    let pem = p.serialize_request(&key).unwrap().pem().unwrap();
    json!({
        "metadata": { "name": c.name, "creationTimestamp": "2026-11-22T01:30:02Z" },
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(pem),
            "signerName": c.signer,
            "usages": c.usages,
            "username": c.username,
            "groups": c.groups,
        },
        "status": {},
    })
}

fn reply(status: u16, v: &Value) -> Reply {
    Response::builder()
        .status(status)
        .header("Content-Type", "application/json")
        .body(Full::new(Bytes::from(v.to_string())))
        .unwrap()
}

/// A `Status` object, as the API server's errors are.
fn status(code: u16, reason: &str, message: &str) -> Reply {
    reply(
        code,
        &json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                 "message": message, "reason": reason, "code": code }),
    )
}

async fn handle(
    st: Arc<Mutex<Cluster>>,
    spec: Arc<Spec>,
    req: Request<hyper::body::Incoming>,
) -> Option<Reply> {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().map(str::to_string);
    let content_type = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let bearer = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = req.into_body().collect().await.ok()?.to_bytes();
    let mut s = st.lock().unwrap();
    s.requests.push(format!(
        "{method} {path}{}",
        query
            .as_deref()
            .map(|q| format!("?{q}"))
            .unwrap_or_default()
    ));
    if let Some(t) = &s.token {
        if bearer.as_deref() != Some(format!("Bearer {t}").as_str()) {
            s.unauthorized += 1;
            return Some(status(401, "Unauthorized", "Unauthorized"));
        }
    }
    let problems = if path == CONFIGMAP {
        configmap_route(&method, query.as_deref(), &body)
    } else {
        spec.check_request(
            &method,
            &path,
            query.as_deref(),
            content_type.as_deref(),
            &body,
        )
    };
    if !problems.is_empty() {
        let msg = problems.join("; ");
        s.violations.push(format!("{method} {path}: {msg}"));
        return Some(status(400, "BadRequest", &msg));
    }
    let (code, v) = respond(&mut s, &method, &path, query.as_deref(), &body);
    if path != CONFIGMAP && code < 300 {
        let bad = spec.check_reply(&method, &path, code, &v);
        if !bad.is_empty() {
            s.violations.push(format!(
                "the fake's reply to {method} {path}: {}",
                bad.join("; ")
            ));
        }
    }
    Some(reply(code, &v))
}

/// core/v1 `readCoreV1NamespacedConfigMap` for `kube-system/bootstrap`.
fn configmap_route(method: &str, query: Option<&str>, body: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    if method != "GET" {
        out.push(format!(
            "{method} is not an operation of {CONFIGMAP} (the fake serves GET)"
        ));
    }
    for kv in query
        .unwrap_or_default()
        .split('&')
        .filter(|kv| !kv.is_empty())
    {
        if kv.split('=').next() != Some("pretty") {
            out.push(format!(
                "query parameter {kv:?} is not declared (only pretty)"
            ));
        }
    }
    if !body.is_empty() {
        out.push("a GET takes no body".into());
    }
    out
}

fn respond(
    s: &mut Cluster,
    method: &str,
    path: &str,
    query: Option<&str>,
    body: &[u8],
) -> (u16, Value) {
    let not_found = |what: &str| {
        (
            404,
            json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": format!("{what} not found"), "reason": "NotFound", "code": 404 }),
        )
    };
    if path == CONFIGMAP {
        return match &s.bootstrap {
            Some(st) => (
                200,
                json!({ "kind": "ConfigMap", "apiVersion": "v1",
                "metadata": { "name": "bootstrap", "namespace": "kube-system" }, "data": { "status": st } }),
            ),
            None => not_found("configmaps \"bootstrap\""),
        };
    }
    let rest = path.strip_prefix(CSRS).unwrap_or_default();
    let q = |k: &str| {
        query?.split('&').find_map(|kv| {
            let (a, b) = kv.split_once('=')?;
            (a == k).then(|| {
                percent_encoding::percent_decode_str(b)
                    .decode_utf8_lossy()
                    .into_owned()
            })
        })
    };
    match (
        method,
        rest.trim_start_matches('/')
            .split('/')
            .collect::<Vec<_>>()
            .as_slice(),
    ) {
        ("GET", [""]) => {
            let limit = q("limit")
                .and_then(|l| l.parse::<usize>().ok())
                .filter(|l| *l > 0);
            let page = limit.map_or(s.page, |l| l.min(s.page)).max(1);
            let start = q("continue")
                .and_then(|c| c.parse::<usize>().ok())
                .unwrap_or(0);
            let all: Vec<&Value> = s.csrs.values().collect();
            let items: Vec<Value> = all
                .iter()
                .skip(start)
                .take(page)
                .map(|v| (*v).clone())
                .collect();
            let next = start + items.len();
            let mut meta = json!({ "resourceVersion": s.resource_version.to_string() });
            if next < all.len() {
                meta["continue"] = json!(next.to_string());
            }
            (
                200,
                json!({ "kind": "CertificateSigningRequestList", "apiVersion": "certificates.k8s.io/v1", "metadata": meta, "items": items }),
            )
        }
        ("GET", [name]) | ("GET", [name, "approval"]) => match s.csrs.get(*name) {
            Some(v) => (200, v.clone()),
            None => not_found(name),
        },
        ("PUT", [name, "approval"]) => {
            let Ok(new) = serde_json::from_slice::<Value>(body) else {
                return (400, json!({}));
            };
            let version = s
                .csrs
                .get(*name)
                .map(|c| c["metadata"]["resourceVersion"].clone());
            let Some(version) = version else {
                return not_found(name);
            };
            if new["metadata"]["name"] != *name {
                return (
                    400,
                    json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                     "message": "metadata.name does not match the path", "reason": "BadRequest", "code": 400 }),
                );
            }
            if new["metadata"]["resourceVersion"] != version {
                return (
                    409,
                    json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                     "message": "the object has been modified", "reason": "Conflict", "code": 409 }),
                );
            }
            let conds = new["status"]["conditions"].clone();
            for c in conds.as_array().into_iter().flatten() {
                match c["type"].as_str() {
                    Some("Approved") if !s.approved.contains(&name.to_string()) => {
                        s.approved.push(name.to_string())
                    }
                    Some("Denied") if !s.denied.contains(&name.to_string()) => {
                        s.denied.push(name.to_string())
                    }
                    _ => {}
                }
            }
            let rv = s.next_version();
            let stored = s.csrs.get_mut(*name).unwrap();
            stored["status"]["conditions"] = conds;
            stored["metadata"]["resourceVersion"] = json!(rv);
            (200, stored.clone())
        }
        _ => not_found(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const APPROVAL: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests/csr-1/approval";

    fn put(spec: &Spec, v: &Value) -> Vec<String> {
        spec.check_request(
            "PUT",
            APPROVAL,
            None,
            Some("application/json"),
            v.to_string().as_bytes(),
        )
    }

    /// Kubernetes' own document takes an approval as `oc adm certificate
    /// approve` sends it, and refuses what the API server would.
    #[test]
    fn approvals_are_checked_against_kubernetes_own_document() {
        let spec = KubeFake::spec();
        let mut csr = kubelet_csr(&KubeletCsr::client("csr-1", "system:node:worker-0"));
        csr["apiVersion"] = json!("certificates.k8s.io/v1");
        csr["kind"] = json!("CertificateSigningRequest");
        csr["metadata"]["resourceVersion"] = json!("7");
        csr["status"]["conditions"] = json!([{ "type": "Approved", "status": "True", "reason": "R",
            "message": "m", "lastUpdateTime": "2026-11-22T01:30:02Z" }]);
        assert_eq!(put(&spec, &csr), Vec::<String>::new());
        let mut bad = csr.clone();
        bad["spec"].as_object_mut().unwrap().remove("request");
        bad["spec"]["usages"] = json!("client auth");
        bad["spec"]["colour"] = json!("red");
        bad["status"]["conditions"][0]
            .as_object_mut()
            .unwrap()
            .remove("status");
        bad["status"]["conditions"][0]["type"] = json!("Approve");
        bad["status"]["conditions"][0]["lastUpdateTime"] = json!("now");
        let got = put(&spec, &bad);
        for want in [
            "body.spec.request: required",
            "body.spec.usages: not an array",
            "body.spec.colour: unknown field",
            "body.status.conditions[0].status: required",
            "body.status.conditions[0].type: \"Approve\" is not one of",
            "body.status.conditions[0].lastUpdateTime: \"now\" is not an RFC 3339",
        ] {
            assert!(got.iter().any(|g| g.starts_with(want)), "{want}: {got:#?}");
        }
        assert!(spec.check_request(
            "PATCH",
            "/apis/certificates.k8s.io/v1/certificatesigningrequests",
            None,
            None,
            b""
        )[0]
        .contains("not an operation"));
        assert!(spec.check_request(
            "GET",
            "/apis/certificates.k8s.io/v1/certificatesigningrequests",
            Some("limit=5&sort=name"),
            None,
            b""
        )[0]
        .contains("\"sort\" is not declared"));
    }
}
