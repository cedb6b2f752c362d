//! Cloud and machine providers that create the machines API nodes run on.
//!
//! - [`equinix`]: Equinix Metal devices (`custom_ipxe`, bootd's per-node script).
//! - [`powervs`]: IBM Power Virtual Server instances (IAM token exchange).
//! - [`local`]: QEMU VMs on a local bridge (the lab), network-booting from this host.
//! - [`redfish`]: machines behind a Redfish BMC, powered on to network-boot once.
//! - [`ipmi`]: the same through an IPMI BMC (ipmitool, lanplus).
//! - [`alibaba`]: Alibaba Cloud ECS instances (signed RPC, pointer Ignition as user data).
//!
//! Each provider is one module that implements [`Provider`] and exports a
//! [`Registration`]; [`REGISTRY`] lists them, and nothing else in the
//! controller names a provider. A node's `provider` section is
//! `{"<name>": {...}}`, checked by that provider's registration.
//!
//! Every call is a single HTTP exchange with a timeout and no retry of its
//! own: the reconciler retries whole steps, and every create step looks for
//! an existing machine (by tag or name) first, so a retried or repeated
//! create never makes a second machine.
//!
//! Errors ([`ProviderError`]) carry a message safe to show API clients: the
//! provider, the operation and the HTTP status, never a key, a token or the
//! provider's raw body (that goes to the log, redacted).

mod client;
#[macro_use]
mod forward;
pub mod alibaba;
pub mod bmc;
pub mod equinix;
pub mod ipmi;
pub mod local;
pub mod powervs;
pub mod redfish;
mod request;
mod secrets;

pub use client::{Http, Reply};
pub use request::NodeRequest;
pub use secrets::{read_secret, redact};

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::Full;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// Every provider the controller knows, by the name used in a node's
/// `provider` section and in `host.api.<name>`. Adding a provider: its
/// module, and one line here.
pub const REGISTRY: &[Registration] = &[
    equinix::REGISTRATION,
    powervs::REGISTRATION,
    local::REGISTRATION,
    redfish::REGISTRATION,
    ipmi::REGISTRATION,
    alibaba::REGISTRATION,
];

/// Machines with the cluster's ownership mark, each with its name.
pub type Owned = Vec<(Machine, String)>;

/// A boxed future, so that [`Provider`] can be used as `dyn Provider`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One provider, configured from the site and ready to call.
pub trait Provider: Send + Sync + std::fmt::Debug {
    fn name(&self) -> &'static str;
    /// The machine made for `node` earlier (by this or a previous run), if any.
    fn find<'a>(&'a self, node: &'a NodeRequest) -> BoxFuture<'a, Result<Option<Machine>>>;
    /// Makes the machine; `spec` is the node's `provider.<name>` section,
    /// already accepted by the registration's `check_spec`.
    fn create<'a>(
        &'a self,
        node: &'a NodeRequest,
        spec: &'a Value,
    ) -> BoxFuture<'a, Result<Machine>>;
    /// `None`: the machine is gone.
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Machine>>>;
    /// Deleting a machine that is already gone succeeds.
    fn delete<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<()>>;
    /// Starts a machine `create` left [`MachineState::Prepared`]; starting
    /// one already started succeeds. Providers whose create starts the
    /// machine need not implement it.
    fn start<'a>(&'a self, _id: &'a str, _node: &'a NodeRequest) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }
    /// The node is being released and its disks are to be wiped: boot the
    /// machine from the network once more (bootd serves it the wipe).
    /// `Ok(false)`: this provider's machines go with their nodes (a cloud,
    /// the lab's VMs), nothing to wipe. Calling it again sends nothing twice.
    fn release<'a>(&'a self, _id: &'a str, _node: &'a NodeRequest) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async { Ok(false) })
    }
    /// The machine booted virtual media whose ISO is of another step than
    /// `node.media_step` (its live system inspected or wiped, then powered
    /// off): once it is off, insert the ISO of this step and power it on.
    /// Nothing while it is still on, after the media were ejected, or when
    /// the ISO is this step's. Called before [`Provider::get`] at each
    /// reconcile of a node that boots virtual media.
    fn next_media<'a>(&'a self, _id: &'a str, _node: &'a NodeRequest) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }
    /// The node fetched its Ignition: undo what only its first boot needed
    /// (a BMC ejects its virtual media). Called before the node is Ready,
    /// again after a transient error; doing it twice does no harm.
    fn finish<'a>(&'a self, _id: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }
    /// Every machine this provider holds with `cluster`'s ownership mark
    /// (a cloud tag), with its name: what `bootd cluster destroy` deletes.
    /// `None`: the provider has no such mark (BMC hardware, the lab's VMs).
    /// The controller stops: release what the provider holds open at its
    /// endpoints (a BMC's sessions). Bounded by the controller's grace.
    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
    fn owned<'a>(&'a self, _cluster: &'a str) -> BoxFuture<'a, Result<Option<Owned>>> {
        Box::pin(async { Ok(None) })
    }
}

/// What the controller needs to build providers.
#[derive(Debug, Clone)]
pub struct Setup<'a> {
    /// The HTTP client every provider shares (timeouts from the tuning).
    pub http: Http,
    /// bootd's state directory (the local provider keeps its VMs below it).
    pub state_dir: &'a Path,
    /// The one directory a BMC's password file and CA bundle may be in:
    /// `host.api.bmcFiles`, else the default ([`runtime::paths::bmc_files`]).
    /// Chosen once per start, so it cannot move under a running controller.
    pub bmc_files: PathBuf,
}

/// A provider ready to call, or why it cannot be used.
pub type Configured = std::result::Result<Arc<dyn Provider>, String>;

/// How the controller knows a provider.
#[derive(Debug, Clone, Copy)]
pub struct Registration {
    pub name: &'static str,
    /// Checks a node's `provider.<name>` section: `Err` when it does not
    /// parse (the request is malformed), else every problem found.
    pub check_spec: fn(&Value) -> std::result::Result<Vec<String>, String>,
    /// Checks the node's pointer Ignition config as this provider would
    /// pass it (user data size limits), before anything is made.
    pub check_userdata: fn(&str) -> std::result::Result<(), String>,
    /// How a machine made from this `provider.<name>` section starts its
    /// OS, which decides what makes the node Ready.
    pub boot_kind: fn(&Value) -> BootKind,
    /// Keys a node's `provider.<name>` section may leave out because the
    /// site already says them (install-config's machine pool for the
    /// node's role): an object, merged under what the node gives.
    pub defaults: fn(&site::Site, &str) -> Value,
    /// The provider, when the site configures it (`host.api.<name>`); `Err`
    /// says why it cannot be used (an unreadable key).
    pub configure: fn(&site::Api, &Setup<'_>) -> Option<Configured>,
}

/// How a node's machine starts its operating system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootKind {
    /// Network boot through this host (DHCP or the provider's iPXE hook,
    /// then a boot script): Ready once network-booted and its Ignition fetched.
    Network,
    /// Boots an image the provider holds, with the Ignition pointer config
    /// as user data: Ready once the pointer's target (the node's Ignition)
    /// was fetched from the node.
    Image,
    /// Boots the ISO bootd built for it (the BMC's virtual media): Ready
    /// once it fetched its Ignition.
    Media,
}

impl BootKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BootKind::Network => "Network",
            BootKind::Image => "Image",
            BootKind::Media => "Media",
        }
    }
    /// The boot kind of a stored node: its provider section (`null`: no
    /// provider, a machine brought up by other means, network-booted).
    pub fn of_provider(provider: &Value) -> BootKind {
        match serde_json::from_value::<ProviderSpec>(provider.clone()) {
            Ok(p) => (p.registration.boot_kind)(&p.spec),
            Err(_) => BootKind::Network,
        }
    }
}

/// For a registration with no defaults from the site.
pub fn no_defaults(_: &site::Site, _: &str) -> Value {
    Value::Object(Default::default())
}

/// Fills what the node's provider section leaves out from the site
/// ([`Registration::defaults`]) in a `POST /v1/nodes` body.
pub fn fill_defaults(body: &mut Value, site: &site::Site) {
    let role = body["role"].as_str().unwrap_or_default().to_string();
    let Some(p) = body.get_mut("provider").and_then(Value::as_object_mut) else {
        return;
    };
    for (name, spec) in p.iter_mut() {
        let (Some(reg), Some(spec)) = (registration(name), spec.as_object_mut()) else {
            continue;
        };
        if let Value::Object(d) = (reg.defaults)(site, &role) {
            for (k, v) in d {
                spec.entry(k).or_insert(v);
            }
        }
    }
}

/// For a registration whose machines always network-boot.
pub fn network_boot(_: &Value) -> BootKind {
    BootKind::Network
}

/// The registration of the provider called `name`.
pub fn registration(name: &str) -> Option<&'static Registration> {
    REGISTRY.iter().find(|r| r.name == name)
}

/// Every provider the site configures, by name.
pub fn configure_all(api: &site::Api, setup: &Setup<'_>) -> HashMap<&'static str, Configured> {
    REGISTRY
        .iter()
        .filter_map(|r| (r.configure)(api, setup).map(|p| (r.name, p)))
        .collect()
}

/// For a registration's `check_spec`: parses the typed spec (unknown keys
/// refused) and runs its own checks.
pub fn check_typed<T: DeserializeOwned>(
    v: &Value,
    check: fn(&T) -> Vec<String>,
) -> std::result::Result<Vec<String>, String> {
    serde_json::from_value::<T>(v.clone())
        .map(|t| check(&t))
        .map_err(|e| e.to_string())
}

/// For a provider's `create`: the typed spec, or a permanent error.
pub fn typed_spec<T: DeserializeOwned>(provider: &str, v: &Value) -> Result<T> {
    serde_json::from_value(v.clone()).map_err(|e| {
        ProviderError::permanent(format!("{provider}: stored provider spec unreadable: {e}"))
    })
}

/// For a registration without a user data limit.
pub fn any_userdata(_: &str) -> std::result::Result<(), String> {
    Ok(())
}

/// The provider spec of an API node: `{"<name>": {...}}` with a registered
/// name (stored as given).
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderSpec {
    pub registration: &'static Registration,
    pub spec: Value,
}

impl PartialEq for Registration {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl ProviderSpec {
    pub fn name(&self) -> &'static str {
        self.registration.name
    }
    /// Every problem with the spec, or `Err` when it does not parse.
    pub fn check(&self) -> std::result::Result<Vec<String>, String> {
        (self.registration.check_spec)(&self.spec)
    }
}

impl Serialize for ProviderSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(1))?;
        m.serialize_entry(self.name(), &self.spec)?;
        m.end()
    }
}

impl<'de> Deserialize<'de> for ProviderSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error;
        let m = serde_json::Map::<String, Value>::deserialize(d)?;
        let names = || {
            REGISTRY
                .iter()
                .map(|r| format!("`{}`", r.name))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut it = m.into_iter();
        match (it.next(), it.next()) {
            (Some((name, spec)), None) => match registration(&name) {
                Some(registration) => Ok(ProviderSpec { registration, spec }),
                None => Err(D::Error::custom(format!(
                    "unknown provider `{name}`, expected one of {}",
                    names()
                ))),
            },
            _ => Err(D::Error::custom(format!(
                "exactly one provider, one of {}",
                names()
            ))),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MachineState {
    /// It exists and the provider knows its MACs, but it was not started:
    /// the controller records its facts first and starts it
    /// ([`Provider::start`]) only when they conflict with no other node
    /// (a BMC's machine: no power action for a machine another node has).
    Prepared,
    /// Created, not running yet.
    Pending(String),
    Active,
    Failed(String),
    /// A delete was accepted and the provider is carrying it out.
    Deleting,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    pub id: String,
    pub state: MachineState,
    pub addresses: Vec<String>,
    pub macs: Vec<String>,
    /// The host network the provider documents for this machine (NMState,
    /// as a site node's `networkConfig`): Equinix Metal's layer-3 bond with
    /// its public and private addresses. Written into the node unless its
    /// spec has one.
    pub network_config: Option<serde_json::Value>,
}

impl Machine {
    pub fn state_str(&self) -> String {
        match &self.state {
            MachineState::Prepared => "prepared".into(),
            MachineState::Pending(s) => s.clone(),
            MachineState::Active => "active".into(),
            MachineState::Failed(s) => format!("failed: {s}"),
            MachineState::Deleting => "deleting".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// Worth retrying: 429, 5xx, 408, timeouts, connection failures,
    /// truncated or unparseable replies.
    #[error("{what}")]
    Transient {
        what: String,
        retry_after: Option<Duration>,
    },
    /// Not worth retrying: the provider refused the request.
    #[error("{what}")]
    Permanent { what: String },
}

impl ProviderError {
    pub fn transient(what: impl Into<String>) -> ProviderError {
        ProviderError::Transient {
            what: what.into(),
            retry_after: None,
        }
    }
    pub fn permanent(what: impl Into<String>) -> ProviderError {
        ProviderError::Permanent { what: what.into() }
    }
    pub fn is_transient(&self) -> bool {
        matches!(self, ProviderError::Transient { .. })
    }
}

pub type Result<T> = std::result::Result<T, ProviderError>;

/// What is percent-encoded in a path segment or query value: everything
/// but RFC 3986's unreserved characters.
pub const COMPONENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `Retry-After` as seconds or an HTTP date.
pub fn retry_after(h: &HeaderMap) -> Option<Duration> {
    let v = h.get(http::header::RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(s) = v.parse::<u64>() {
        return Some(Duration::from_secs(s));
    }
    let t = httpdate::parse_http_date(v).ok()?;
    Some(
        t.duration_since(std::time::SystemTime::now())
            .unwrap_or_default(),
    )
}

/// Turns a non-success reply into an error: 429, 408 and 5xx are transient
/// (with Retry-After), the rest permanent. The provider's own message goes
/// to the log (with `secrets` removed), not into the error.
pub fn check(reply: &Reply, what: &str, secrets: &[&str]) -> Result<()> {
    let s = reply.status;
    if s.is_success() {
        return Ok(());
    }
    let detail = redact(
        &String::from_utf8_lossy(&reply.body[..reply.body.len().min(2048)]),
        secrets,
    );
    tracing::warn!(status = s.as_u16(), provider_said = %detail, "{what}: refused");
    let what = format!("{what}: HTTP {}", s.as_u16());
    if s == StatusCode::TOO_MANY_REQUESTS || s == StatusCode::REQUEST_TIMEOUT || s.is_server_error()
    {
        Err(ProviderError::Transient {
            what,
            retry_after: retry_after(&reply.headers),
        })
    } else {
        Err(ProviderError::Permanent { what })
    }
}

/// Parses a JSON reply; a body that does not parse (truncated) is transient.
pub fn parse<T: serde::de::DeserializeOwned>(reply: &Reply, what: &str) -> Result<T> {
    serde_json::from_slice(&reply.body).map_err(|e| {
        tracing::warn!(error = %e, len = reply.body.len(), "{what}: reply does not parse");
        ProviderError::transient(format!(
            "{what}: reply does not parse (line {}, column {})",
            e.line(),
            e.column()
        ))
    })
}

pub fn json_request(
    method: http::Method,
    url: &str,
    body: Option<&serde_json::Value>,
) -> http::request::Builder {
    let b = Request::builder()
        .method(method)
        .uri(url)
        .header(http::header::ACCEPT, "application/json");
    match body {
        Some(_) => b.header(http::header::CONTENT_TYPE, "application/json"),
        None => b,
    }
}

pub fn body_of(v: Option<&serde_json::Value>) -> Full<Bytes> {
    Full::new(
        v.map(|v| Bytes::from(serde_json::to_vec(v).unwrap_or_default()))
            .unwrap_or_default(),
    )
}

/// A request that could not be built (a bad base URL): permanent.
pub fn built(
    r: std::result::Result<Request<Full<Bytes>>, http::Error>,
    what: &str,
) -> Result<Request<Full<Bytes>>> {
    r.map_err(|e| ProviderError::permanent(format!("{what}: cannot build the request ({e})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_removes_keys_and_tokens() {
        let r = redact(
            r#"{"error":"bad key sekrit-123 for https://h/ignition/a?token=999.abc&x=1 and token=zz"}"#,
            &["sekrit-123"],
        );
        assert_eq!(
            r,
            r#"{"error":"bad key <redacted> for https://h/ignition/a?token=<redacted>&x=1 and token=<redacted>"}"#
        );
    }

    #[test]
    fn retry_after_seconds_and_dates() {
        let mut h = HeaderMap::new();
        h.insert(http::header::RETRY_AFTER, "7".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        let later = std::time::SystemTime::now() + Duration::from_secs(120);
        h.insert(
            http::header::RETRY_AFTER,
            httpdate::fmt_http_date(later).parse().unwrap(),
        );
        let d = retry_after(&h).unwrap();
        assert!(
            d > Duration::from_secs(100) && d <= Duration::from_secs(120),
            "{d:?}"
        );
    }

    #[test]
    fn status_classes() {
        let reply = |s: u16| Reply {
            status: StatusCode::from_u16(s).unwrap(),
            headers: HeaderMap::new(),
            body: Bytes::from_static(b"{}"),
        };
        assert!(check(&reply(200), "x", &[]).is_ok());
        for s in [429, 500, 502, 503, 408] {
            assert!(
                check(&reply(s), "x", &[]).unwrap_err().is_transient(),
                "{s}"
            );
        }
        for s in [400, 401, 403, 404, 422] {
            assert!(
                !check(&reply(s), "x", &[]).unwrap_err().is_transient(),
                "{s}"
            );
        }
    }
}

#[cfg(test)]
mod registry_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_are_unique_and_each_module_names_itself() {
        let mut names: Vec<&str> = REGISTRY.iter().map(|r| r.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), REGISTRY.len(), "{names:?}");
        assert_eq!(registration("powervs").map(|r| r.name), Some("powervs"));
        assert_eq!(registration("alibaba").map(|r| r.name), Some("alibaba"));
        assert!(registration("openstack").is_none());
    }

    /// The stored form is what the API took: `{"<name>": {...}}`.
    #[test]
    fn provider_specs_round_trip_and_refuse_clearly() {
        let v = json!({ "local": { "memory": 256 } });
        let p: ProviderSpec = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(p.name(), "local");
        assert_eq!(serde_json::to_value(&p).unwrap(), v);
        assert_eq!(p.check(), Ok(vec![]));
        let e = serde_json::from_value::<ProviderSpec>(json!({ "openstack": {} }))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "unknown provider `openstack`, expected one of `equinix`, `powervs`, `local`, `redfish`, `ipmi`, `alibaba`"
        );
        let e = serde_json::from_value::<ProviderSpec>(json!({ "local": {}, "equinix": {} }))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("exactly one provider"), "{e}");
        // A typed spec with an unknown key does not parse; a bad value is a problem.
        let p: ProviderSpec =
            serde_json::from_value(json!({ "local": { "colour": "red" } })).unwrap();
        assert!(p.check().unwrap_err().contains("unknown field `colour`"));
        let p: ProviderSpec = serde_json::from_value(json!({ "local": { "memory": 1 } })).unwrap();
        assert_eq!(p.check().unwrap().len(), 1);
    }

    /// Power VS's user data limit is checked through its registration.
    #[test]
    fn user_data_limits_come_from_the_registration() {
        let big = "x".repeat(64 * 1024);
        assert!((registration("powervs").unwrap().check_userdata)(&big).is_err());
        assert!((registration("powervs").unwrap().check_userdata)("{}").is_ok());
        assert!((registration("equinix").unwrap().check_userdata)(&big).is_ok());
    }
}

/// The `host.api.bmcCredentials` problem with a BMC node's provider spec,
/// found before the node is made (`POST /v1/nodes` answers 422 with it),
/// as the provider finds it again before it sends anything. `None`: no
/// list in the site, a password from an install-config (checked against
/// that file when it is read), another provider, or no problem.
pub fn binding_problem(api: Option<&site::Api>, p: &ProviderSpec) -> Option<String> {
    let creds = api?.bmc_credentials.as_deref()?;
    let (password, target, insecure, plain) = match p.name() {
        "redfish" => {
            let s: redfish::RedfishSpec = serde_json::from_value(p.spec.clone()).ok()?;
            let t = site::BmcTarget::of_url(&s.url);
            (s.password, t, s.insecure_skip_verify, s.allow_plain_http)
        }
        "ipmi" => {
            let s: ipmi::IpmiSpec = serde_json::from_value(p.spec.clone()).ok()?;
            let t = site::BmcTarget::ipmi(&s.address, s.port);
            (s.password, t, false, false)
        }
        _ => return None,
    };
    if password.install_config_host.is_some() {
        return None;
    }
    let r = password.to_ref()?;
    let key = format!("provider.{}", p.name());
    let Some(t) = target else {
        return Some(format!(
            "{key}: the BMC's address is not one a password can be sent to"
        ));
    };
    site::bmc_binding(creds, &r, &t, insecure, plain)
        .err()
        .map(|e| format!("{key}.password: {e}"))
}
