//! The appliances' shared state on etcd.
//!
//! One [`Etcd`] per process: a client of the site's etcd cluster
//! (`host.store.etcd`) that owns a small runtime of its own, so that it is
//! callable from synchronous code (the controller's store, which runs each
//! call as one short transaction, as it does on SQLite) and from async code
//! alike. Every key is under the site's prefix; callers name keys relative
//! to it.
//!
//! A connection that names its site ([`Config::site`]) checks, before its
//! first request, that the prefix is that site's ([`claim`]): one of
//! another site fails every request with [`Error::other_site`].
//!
//! Requests carry a deadline (`timeout`) and require an etcd leader
//! (`require_leader`): when the cluster has lost quorum a request fails at
//! once with [`Error::unavailable`] true, instead of waiting on a member
//! that cannot commit.

use etcd_client::{
    Certificate, Client, ConnectOptions, GetOptions, Identity, TlsOptions, Txn, TxnResponse,
};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use etcd_client::{Compare, CompareOp, TxnOp, TxnOpResponse};

pub mod claim;
mod elect;
mod endpoints;
mod members;
#[cfg(feature = "testing")]
pub mod testing;
mod watch;

pub use claim::{OtherSite, SiteIdentity};
pub use elect::{identity, Leadership};
pub use members::Membership;
pub use watch::{Change, Put};

/// Wakes the members' check ([`endpoints::supervise`]) when `out` says no
/// member was reached.
fn noticed<T>(out: &Result<T, claim::Refused>, wake: &tokio::sync::Notify) {
    if let Err(claim::Refused::Etcd(e)) = out {
        if cannot_answer(e) {
            wake.notify_one();
        }
    }
}

/// How to reach the cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Client URLs (`http://` or `https://`).
    pub endpoints: Vec<String>,
    /// Every key is under it (ends in `/`).
    pub prefix: String,
    pub tls: Option<Tls>,
    /// Deadline of one request.
    pub timeout: Duration,
    /// The site the prefix must belong to ([`claim`]); `None`: unchecked
    /// (tools and tests reading a prefix).
    pub site: Option<SiteIdentity>,
}

impl Config {
    /// The site's `host.store.etcd`.
    pub fn from_site(e: &site::EtcdStore) -> Config {
        Config {
            endpoints: e.endpoints.clone(),
            prefix: e.prefix.clone(),
            timeout: e.timeout,
            site: Some(SiteIdentity {
                id: e.site_id.clone(),
                cluster: e.cluster.clone(),
            }),
            tls: e.tls.as_ref().map(|t| Tls {
                ca: t.ca.clone(),
                cert: t.cert.clone(),
                key: t.key.clone(),
            }),
        }
    }
}

/// TLS to etcd: the CA that signed the members' certificates, and the
/// client certificate etcd's `--client-cert-auth` asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Tls {
    pub ca: PathBuf,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
#[error("etcd {endpoints}: {what}: {source}")]
pub struct Error {
    endpoints: String,
    what: String,
    #[source]
    source: Cause,
}

#[derive(Debug, thiserror::Error)]
enum Cause {
    #[error(transparent)]
    Etcd(#[from] etcd_client::Error),
    /// Boxed: the refusal's text is rare, an error's size is paid by every
    /// request.
    #[error(transparent)]
    OtherSite(Box<OtherSite>),
}

impl Error {
    /// The prefix belongs to another site: nothing was read or written
    /// under it, and no request on this connection ever will be.
    pub fn other_site(&self) -> Option<&OtherSite> {
        match &self.source {
            Cause::OtherSite(o) => Some(o),
            Cause::Etcd(_) => None,
        }
    }

    /// The cluster cannot answer now (no leader, no quorum, no member
    /// reachable, deadline passed): nothing was committed by this request,
    /// and the same request may succeed later.
    pub fn unavailable(&self) -> bool {
        let Cause::Etcd(source) = &self.source else {
            return false;
        };
        cannot_answer(source)
    }
}

/// [`Error::unavailable`] of the client's own error.
fn cannot_answer(source: &etcd_client::Error) -> bool {
    match source {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        etcd_client::Error::GRpcStatus(s) => match s.code() {
            tonic::Code::Cancelled | tonic::Code::DeadlineExceeded | tonic::Code::Unavailable => {
                true
            }
            tonic::Code::Unknown if from_transport(s) => true,
            _ => s.message().contains("no leader"),
        },
        _ => false,
    }
}

/// Whether a status was made on this side from a failed connection (tonic
/// reports a member that died mid-request as UNKNOWN "transport error"
/// over the socket's error, e.g. a broken pipe), not answered by etcd.
fn from_transport(s: &tonic::Status) -> bool {
    let mut cur = std::error::Error::source(s);
    while let Some(e) = cur {
        if e.is::<tonic::transport::Error>() || e.is::<std::io::Error>() {
            return true;
        }
        cur = e.source();
    }
    false
}

/// A value and its revisions.
#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    /// The key, relative to the prefix.
    pub key: String,
    pub value: Vec<u8>,
    /// The revision of the value's last change (the compare for a CAS).
    pub mod_revision: i64,
    pub create_revision: i64,
}

struct Inner {
    client: Client,
    /// Wakes [`endpoints::supervise`]: a request found no member.
    unreachable: Arc<tokio::sync::Notify>,
    gate: Arc<claim::Gate>,
    rt: Option<tokio::runtime::Runtime>,
    config: Config,
    endpoints: String,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // May be dropped inside another runtime: never block here.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// A connection to the cluster; cheap to clone.
#[derive(Clone)]
pub struct Etcd {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Etcd({} {})",
            self.inner.endpoints, self.inner.config.prefix
        )
    }
}

impl Etcd {
    /// Connects (lazily: an unreachable cluster is an error at the first
    /// request, not here, so an appliance starts and says what it cannot
    /// reach). Reads the TLS files now.
    pub fn connect(config: &Config) -> Result<Etcd, Error> {
        let endpoints = config.endpoints.join(",");
        let fail = |what: &str, source: etcd_client::Error| Error {
            endpoints: endpoints.clone(),
            what: what.into(),
            source: source.into(),
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("etcd")
            .enable_all()
            .build()
            .map_err(|e| fail("runtime", etcd_client::Error::IoError(e)))?;
        let mut opts = ConnectOptions::new()
            .with_timeout(config.timeout)
            .with_connect_timeout(config.timeout)
            .with_keep_alive(Duration::from_secs(5), config.timeout)
            .with_require_leader(true);
        if let Some(tls) = &config.tls {
            let read = |p: &PathBuf| {
                std::fs::read(p)
                    .map_err(|e| fail(&format!("{}", p.display()), etcd_client::Error::IoError(e)))
            };
            let mut t = TlsOptions::new().ca_certificate(Certificate::from_pem(read(&tls.ca)?));
            if let (Some(c), Some(k)) = (&tls.cert, &tls.key) {
                t = t.identity(Identity::from_pem(read(c)?, read(k)?));
            }
            opts = opts.with_tls(t);
        }
        let eps = config.endpoints.clone();
        // A member's status needs no leader: during an election it still answers.
        let probe_opts = opts.clone().with_require_leader(false);
        // Not `block_on`: the caller may be on a thread of another runtime.
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        rt.spawn(async move {
            let _ = tx.send(Client::connect(eps, Some(opts)).await);
        });
        let client = rx
            .recv()
            .unwrap_or_else(|_| {
                Err(etcd_client::Error::IoError(std::io::Error::other(
                    "the etcd runtime stopped",
                )))
            })
            .map_err(|e| fail("connect", e))?;
        let unreachable = Arc::new(tokio::sync::Notify::new());
        rt.spawn(endpoints::supervise(
            client.clone(),
            config.endpoints.clone(),
            probe_opts,
            Arc::clone(&unreachable),
        ));
        Ok(Etcd {
            inner: Arc::new(Inner {
                client,
                unreachable,
                gate: Arc::new(claim::Gate::new(config)),
                rt: Some(rt),
                config: config.clone(),
                endpoints,
            }),
        })
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The full key of `rel`.
    pub fn key(&self, rel: &str) -> String {
        format!("{}{rel}", self.inner.config.prefix)
    }

    pub(crate) fn rel(&self, key: &[u8]) -> String {
        let k = String::from_utf8_lossy(key);
        k.strip_prefix(&self.inner.config.prefix)
            .unwrap_or(&k)
            .to_string()
    }

    pub(crate) fn error(&self, what: &str, source: etcd_client::Error) -> Error {
        self.refused(what, claim::Refused::Etcd(source))
    }

    fn refused(&self, what: &str, r: claim::Refused) -> Error {
        let (what, source) = match r {
            claim::Refused::Etcd(e) => (what.to_string(), Cause::Etcd(e)),
            claim::Refused::OtherSite(o) => ("site identity".to_string(), Cause::OtherSite(o)),
        };
        Error {
            endpoints: self.inner.endpoints.clone(),
            what,
            source,
        }
    }

    /// The site's check ([`claim`]) now, when it has not passed yet on
    /// this connection (every request passes it first anyway): a start
    /// calls it to stop at once on another site's prefix.
    pub fn check_site(&self) -> Result<(), Error> {
        self.block("site identity", |_| async {
            Ok::<(), etcd_client::Error>(())
        })
    }

    /// Whether the site's check passed on this connection (a watch waits
    /// for it).
    pub(crate) async fn gate(&self, client: &Client) -> bool {
        self.inner.gate.pass(client).await.is_ok()
    }

    /// Runs `f` with a client on this connection's runtime and waits for
    /// it: callable from synchronous code, also on a thread of another
    /// runtime (the wait blocks that thread for one round trip, as a
    /// SQLite commit does).
    pub fn block<T, F, Fut>(&self, what: &str, f: F) -> Result<T, Error>
    where
        F: FnOnce(Client) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let client = self.inner.client.clone();
        let gate = Arc::clone(&self.inner.gate);
        let wake = Arc::clone(&self.inner.unreachable);
        let rt = self.inner.rt.as_ref().expect("runtime present until drop");
        rt.spawn(async move {
            let out = match gate.pass(&client).await {
                Ok(()) => f(client).await.map_err(claim::Refused::Etcd),
                Err(r) => Err(r),
            };
            noticed(&out, &wake);
            let _ = tx.send(out);
        });
        let out = rx.recv().unwrap_or_else(|_| {
            Err(claim::Refused::Etcd(etcd_client::Error::IoError(
                std::io::Error::other("the etcd runtime stopped"),
            )))
        });
        out.map_err(|r| self.refused(what, r))
    }

    /// As [`block`](Self::block), awaited.
    /// Spawns `fut` on this connection's runtime (a task that lives as
    /// long as the connection, e.g. a lease's keep-alive).
    pub(crate) fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static) {
        if let Some(rt) = self.inner.rt.as_ref() {
            rt.spawn(fut);
        }
    }

    /// Asks for the members' check ([`endpoints::supervise`]): a lease
    /// renewal or a watch on this connection failed.
    pub(crate) fn check_members(&self) {
        self.inner.unreachable.notify_one();
    }

    pub(crate) fn client(&self) -> Client {
        self.inner.client.clone()
    }

    pub async fn run<T, F, Fut>(&self, what: &str, f: F) -> Result<T, Error>
    where
        F: FnOnce(Client) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
        T: Send + 'static,
    {
        let client = self.inner.client.clone();
        let gate = Arc::clone(&self.inner.gate);
        let wake = Arc::clone(&self.inner.unreachable);
        let rt = self.inner.rt.as_ref().expect("runtime present until drop");
        let out = rt
            .spawn(async move {
                gate.pass(&client).await?;
                let out = f(client).await.map_err(claim::Refused::Etcd);
                noticed(&out, &wake);
                out
            })
            .await;
        let out = out.unwrap_or_else(|e| {
            Err(claim::Refused::Etcd(etcd_client::Error::IoError(
                std::io::Error::other(e.to_string()),
            )))
        });
        out.map_err(|r| self.refused(what, r))
    }

    /// The value at `rel`, if any.
    pub fn get(&self, rel: &str) -> Result<Option<Value>, Error> {
        let key = self.key(rel);
        let r = self.block(&format!("get {key}"), move |mut c| async move {
            c.get(key, None).await
        })?;
        Ok(r.kvs().first().map(|kv| self.value(kv)))
    }

    /// Every value under `rel` (a prefix), in key order.
    pub fn list(&self, rel: &str) -> Result<Vec<Value>, Error> {
        let key = self.key(rel);
        let r = self.block(&format!("list {key}"), move |mut c| async move {
            c.get(key, Some(GetOptions::new().with_prefix())).await
        })?;
        Ok(r.kvs().iter().map(|kv| self.value(kv)).collect())
    }

    /// Sets `rel`; returns the revision of the write.
    pub fn put(&self, rel: &str, value: Vec<u8>) -> Result<i64, Error> {
        let key = self.key(rel);
        let r = self.block(&format!("put {key}"), move |mut c| async move {
            c.put(key, value, None).await
        })?;
        Ok(r.header().map(|h| h.revision()).unwrap_or(0))
    }

    /// A new lease that lives `ttl` and is not kept alive: keys written
    /// with it are deleted by etcd when it ends.
    pub fn grant(&self, ttl: Duration) -> Result<i64, Error> {
        let secs = ttl.as_secs().max(1) as i64;
        let r = self.block("lease grant", move |mut c| async move {
            c.lease_grant(secs, None).await
        })?;
        Ok(r.id())
    }

    /// Runs a transaction (keys in it are full keys: build them with
    /// [`key`](Self::key)).
    pub fn txn(&self, what: &str, txn: Txn) -> Result<TxnResponse, Error> {
        self.block(what, move |mut c| async move { c.txn(txn).await })
    }

    /// A key-value of a response as a [`Value`].
    pub fn value(&self, kv: &etcd_client::KeyValue) -> Value {
        Value {
            key: self.rel(kv.key()),
            value: kv.value().to_vec(),
            mod_revision: kv.mod_revision(),
            create_revision: kv.create_revision(),
        }
    }
}

pub use etcd_client::Txn as Transaction;
pub use etcd_client::{DeleteOptions, PutOptions};

#[cfg(test)]
mod tests {
    use super::Error;

    fn err(source: etcd_client::Error) -> Error {
        Error {
            endpoints: "http://127.0.0.1:2379".into(),
            what: "put".into(),
            source: source.into(),
        }
    }

    /// A member that dies mid-request: tonic's UNKNOWN over the socket's
    /// error is the cluster being unreachable; an UNKNOWN etcd sent is not.
    #[test]
    fn a_transport_failure_inside_a_status_is_unavailable() {
        let broken = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        let s = tonic::Status::from_error(Box::new(broken));
        assert_eq!(s.code(), tonic::Code::Unknown);
        assert!(err(etcd_client::Error::GRpcStatus(s)).unavailable());
        let answered = tonic::Status::unknown("etcdserver: something else");
        assert!(!err(etcd_client::Error::GRpcStatus(answered)).unavailable());
        let leader = tonic::Status::unavailable("etcdserver: no leader");
        assert!(err(etcd_client::Error::GRpcStatus(leader)).unavailable());
    }
}
