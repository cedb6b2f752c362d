//! The Redfish provider: a machine in a rack, behind a BMC that speaks DMTF
//! Redfish. The machine exists already; "create" makes it network-boot
//! once through this host, "delete" powers it off. Hardware is never
//! destroyed.
//!
//! - create: resolve the system (a `…/Systems/<id>` URL, or the service
//!   root and a selector) and read its MACs from `EthernetInterfaces` (the
//!   node's MACs need not be typed); nothing changes on the machine yet.
//! - start, once the controller recorded those MACs without a conflict with
//!   another node: set a one-time boot override
//!   (`BootSourceOverrideEnabled: Once`, target `Pxe`, or `UefiHttp` with
//!   `HttpBootUri` at this host's UEFI iPXE; `BootSourceOverrideMode` from
//!   the spec or the node's firmware hint), then power on (`On`), or
//!   restart (`ForceRestart`) a system that was already on. The next boot
//!   after the install is from disk again: no install loop.
//! - Each power action is announced in the provider's record
//!   ([`super::bmc`]) before it is sent, so a crash between the override and
//!   the power-on, or after the power-on, never powers a machine twice.
//! - get: `PowerState` `On` is Active; a system still `Off` a minute after
//!   the power-on was sent is sent `On` again (the request was lost).
//! - delete: `GracefulShutdown`, then `ForceOff` after `powerOffTimeout`;
//!   once off, the override is cleared and the record goes.
//!
//! Requests carry HTTP Basic credentials (marked sensitive), `If-Match`
//! with the system's ETag on PATCH when the BMC gives one, and are bounded
//! by the shared client's timeout. The BMC's certificate is checked against
//! the node's `caBundle`, else the system's CA store; `insecureSkipVerify`
//! turns that off and is logged as a warning at every create.

use super::bmc::{self, PasswordRef};
use super::{Http, Machine, MachineState, NodeRequest, ProviderError, Result};
use base64::Engine as _;
use http::{HeaderValue, Method};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;
use tracing::{info, warn};

const NAME: &str = "redfish";

/// A node's `provider.redfish`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RedfishSpec {
    /// `https://bmc[:port]/redfish/v1/Systems/<id>`, or the BMC's address
    /// (`https://bmc[:port]`) with `system` choosing among its systems.
    pub url: String,
    /// With a service-root `url`: the system's `Id`, `Name` or `UUID`;
    /// without it the BMC must have exactly one system.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    pub username: String,
    pub password: PasswordRef,
    /// PEM file (absolute path) with the CA(s) the BMC's certificate chains to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure_skip_verify: bool,
    /// Allows an `http://` url: the credentials cross the network in clear.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_plain_http: bool,
    /// `pxe` (default) or `uefiHttp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot: Option<String>,
    /// `UEFI` or `Legacy`; default from the node's `firmware` hint, else
    /// left as the BMC has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

impl RedfishSpec {
    pub fn check(&self) -> Vec<String> {
        let mut p = Vec::new();
        let k = "provider.redfish";
        match split_url(&self.url) {
            Ok((origin, path)) => {
                if origin.starts_with("http://") {
                    if !self.allow_plain_http {
                        p.push(format!("{k}.url: http:// sends the BMC credentials in clear: use https://, or set allowPlainHttp"));
                    }
                    if self.ca_bundle.is_some() || self.insecure_skip_verify {
                        p.push(format!(
                            "{k}: caBundle and insecureSkipVerify are for https:// urls"
                        ));
                    }
                }
                if path.is_empty() && self.system.as_deref().is_some_and(str::is_empty) {
                    p.push(format!("{k}.system: empty"));
                }
                if !path.is_empty() && self.system.is_some() {
                    p.push(format!(
                        "{k}.system: the url names a system already ({path})"
                    ));
                }
            }
            Err(e) => p.push(format!("{k}.url: {e}")),
        }
        if self.username.is_empty() || self.username.contains(char::is_control) {
            p.push(format!("{k}.username: empty or not printable"));
        }
        p.extend(self.password.check(&format!("{k}.password")));
        if let Some(c) = &self.ca_bundle {
            if !c.is_absolute() {
                p.push(format!(
                    "{k}.caBundle: {:?} is not an absolute path",
                    c.display()
                ));
            }
            if self.insecure_skip_verify {
                p.push(format!(
                    "{k}: caBundle and insecureSkipVerify together: give one"
                ));
            }
        }
        match self.boot.as_deref() {
            None | Some("pxe" | "uefiHttp") => {}
            Some("virtualMedia") => p.push(format!(
                "{k}.boot: virtualMedia is not available: use pxe or uefiHttp"
            )),
            Some(b) => p.push(format!("{k}.boot: {b:?}: want pxe or uefiHttp")),
        }
        match self.mode.as_deref() {
            None | Some("UEFI" | "Legacy") => {}
            Some(m) => p.push(format!("{k}.mode: {m:?}: want UEFI or Legacy")),
        }
        if self.boot.as_deref() == Some("uefiHttp") && self.mode.as_deref() == Some("Legacy") {
            p.push(format!("{k}: boot uefiHttp needs mode UEFI"));
        }
        p
    }
}

/// `(origin, system path)`: `https://h:p` and `/redfish/v1/Systems/x`, or
/// an empty path for a service-root URL.
fn split_url(url: &str) -> std::result::Result<(String, String), String> {
    let uri: http::Uri = url.parse().map_err(|_| format!("{url:?} is not a URL"))?;
    match uri.scheme_str() {
        Some("https" | "http") => {}
        _ => return Err(format!("{url:?}: want https:// (or http://)")),
    }
    let auth = uri
        .authority()
        .ok_or_else(|| format!("{url:?} has no host"))?;
    if auth.as_str().contains('@') {
        return Err("no credentials in the URL: give username and password".into());
    }
    if uri.query().is_some() {
        return Err(format!("{url:?}: no query"));
    }
    let origin = format!("{}://{}", uri.scheme_str().unwrap_or("https"), auth);
    let path = uri.path().trim_end_matches('/');
    if path.is_empty() || path == "/redfish/v1" || path == "/redfish" {
        return Ok((origin, String::new()));
    }
    match path.rsplit_once("/Systems/") {
        Some((root, id))
            if root.ends_with("/redfish/v1") && !id.is_empty() && !id.contains('/') =>
        {
            Ok((origin, path.to_string()))
        }
        _ => Err(format!(
            "{url:?}: want the BMC's address or …/redfish/v1/Systems/<id>"
        )),
    }
}

/// `host.api.redfish` and a node's `provider.redfish`.
pub const REGISTRATION: super::Registration = super::Registration {
    name: NAME,
    check_spec: |v| super::check_typed(v, RedfishSpec::check),
    check_userdata: super::any_userdata,
    boot_kind: super::network_boot,
    defaults: super::no_defaults,
    configure: |api, setup| {
        let d = api.redfish.as_ref()?;
        Some(Ok(std::sync::Arc::new(Redfish {
            timeout: setup.http.timeout,
            power_off_timeout: d.power_off_timeout,
            dir: bmc::dir(setup.state_dir),
            files: api.bmc_files.clone(),
            clients: Mutex::new(HashMap::new()),
        }) as std::sync::Arc<dyn super::Provider>))
    },
};

/// What the provider keeps per node ([`super::bmc`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Record {
    spec: RedfishSpec,
    /// The system's absolute path on the BMC.
    system: String,
    /// The `Boot` object `start` PATCHes (the one-time override).
    #[serde(default)]
    boot: Value,
    /// What bootd did to its power.
    #[serde(flatten)]
    power: bmc::PowerLog,
}

#[derive(Debug)]
pub struct Redfish {
    timeout: Duration,
    power_off_timeout: Duration,
    dir: PathBuf,
    /// `host.api.bmcFiles`: where password files and CA bundles may be.
    files: PathBuf,
    /// One client per trust setting (CA bundle, or none, or insecure).
    clients: Mutex<HashMap<(Option<PathBuf>, bool), Http>>,
}

/// One BMC, with its credentials.
struct Bmc {
    http: Http,
    origin: String,
    auth: HeaderValue,
    password: site::Secret<String>,
}

/// A system as read.
struct System {
    power: String,
    etag: Option<HeaderValue>,
    reset_target: String,
    reset_types: Vec<String>,
    nics: Option<String>,
    override_target: Option<String>,
}

impl Bmc {
    fn secrets(&self) -> [&str; 1] {
        [self.password.0.as_str()]
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        etag: Option<&HeaderValue>,
        what: &str,
    ) -> Result<super::Reply> {
        // Paths come from the BMC's replies (`@odata.id`, action targets):
        // only paths on this BMC get its credentials.
        let url = format!("{}{}", self.origin, path);
        let same_host = path.starts_with('/')
            && !path.starts_with("//")
            && url
                .parse::<http::Uri>()
                .ok()
                .and_then(|u| u.authority().map(|a| a.as_str().to_string()))
                == self.origin.split_once("://").map(|(_, a)| a.to_string());
        if !same_host {
            return Err(ProviderError::permanent(format!(
                "{what}: the BMC named a path outside itself; not followed"
            )));
        }
        let mut b = super::json_request(method, &url, body)
            .header(http::header::AUTHORIZATION, self.auth.clone())
            .header("OData-Version", "4.0");
        if let Some(e) = etag {
            b = b.header(http::header::IF_MATCH, e.clone());
        }
        let req = super::built(b.body(super::body_of(body)), what)?;
        let reply = self.http.send(req, what).await?;
        if reply.status == http::StatusCode::UNAUTHORIZED {
            return Err(ProviderError::permanent(format!(
                "{what}: HTTP 401: the BMC refused the username or password"
            )));
        }
        Ok(reply)
    }

    /// `None`: 404.
    async fn get_opt(
        &self,
        path: &str,
        what: &str,
    ) -> Result<Option<(Value, Option<HeaderValue>)>> {
        let reply = self.call(Method::GET, path, None, None, what).await?;
        if reply.status == http::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        super::check(&reply, what, &self.secrets())?;
        let etag = reply.headers.get(http::header::ETAG).cloned();
        Ok(Some((super::parse(&reply, what)?, etag)))
    }

    async fn get(&self, path: &str, what: &str) -> Result<(Value, Option<HeaderValue>)> {
        self.get_opt(path, what).await?.ok_or_else(|| {
            ProviderError::permanent(format!(
                "{what}: HTTP 404: {path} does not exist on the BMC"
            ))
        })
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: &Value,
        etag: Option<&HeaderValue>,
        what: &str,
    ) -> Result<()> {
        let reply = self.call(method, path, Some(body), etag, what).await?;
        super::check(&reply, what, &self.secrets())
    }

    async fn system(&self, path: &str) -> Result<System> {
        self.system_opt(path).await?.ok_or_else(|| {
            ProviderError::permanent(format!(
                "redfish: read the system: HTTP 404: {path} does not exist on the BMC"
            ))
        })
    }

    /// `None`: the BMC has no such system.
    async fn system_opt(&self, path: &str) -> Result<Option<System>> {
        let Some((v, etag)) = self.get_opt(path, "redfish: read the system").await? else {
            return Ok(None);
        };
        let reset = &v["Actions"]["#ComputerSystem.Reset"];
        Ok(Some(System {
            power: v["PowerState"].as_str().unwrap_or("Unknown").to_string(),
            etag: etag.or_else(|| {
                v["@odata.etag"]
                    .as_str()
                    .and_then(|s| HeaderValue::from_str(s).ok())
            }),
            reset_target: reset["target"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| format!("{path}/Actions/ComputerSystem.Reset")),
            reset_types: reset["ResetType@Redfish.AllowableValues"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|t| t.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            nics: v["EthernetInterfaces"]["@odata.id"]
                .as_str()
                .map(str::to_string),
            override_target: v["Boot"]["BootSourceOverrideTarget"]
                .as_str()
                .map(str::to_string),
        }))
    }

    /// The system a spec names.
    async fn resolve(&self, path: &str, selector: Option<&str>) -> Result<String> {
        if !path.is_empty() {
            return Ok(path.to_string());
        }
        let (root, _) = self
            .get("/redfish/v1", "redfish: read the service root")
            .await?;
        let systems = root["Systems"]["@odata.id"]
            .as_str()
            .unwrap_or("/redfish/v1/Systems")
            .to_string();
        let (coll, _) = self.get(&systems, "redfish: list the systems").await?;
        let members: Vec<String> = coll["Members"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|m| m["@odata.id"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let Some(want) = selector else {
            return match members.as_slice() {
                [one] => Ok(one.clone()),
                _ => Err(ProviderError::permanent(format!(
                    "redfish: the BMC has {} systems: say which (system: Id, Name or UUID)",
                    members.len()
                ))),
            };
        };
        for m in &members {
            if m.rsplit('/').next() == Some(want) {
                return Ok(m.clone());
            }
            let (s, _) = self.get(m, "redfish: read a system").await?;
            let is = |k: &str| s[k].as_str().is_some_and(|v| v.eq_ignore_ascii_case(want));
            if is("Id") || is("Name") || is("UUID") {
                return Ok(m.clone());
            }
        }
        Err(ProviderError::permanent(format!(
            "redfish: no system {want:?} among the BMC's {} systems",
            members.len()
        )))
    }

    /// The MACs of the system's network interfaces, lower case.
    async fn macs(&self, nics: Option<&str>) -> Result<Vec<String>> {
        let Some(nics) = nics else {
            return Ok(vec![]);
        };
        let (coll, _) = self
            .get(nics, "redfish: list the network interfaces")
            .await?;
        let mut macs = Vec::new();
        for m in coll["Members"].as_array().into_iter().flatten() {
            let Some(p) = m["@odata.id"].as_str() else {
                continue;
            };
            let (nic, _) = self.get(p, "redfish: read a network interface").await?;
            let mac = nic["MACAddress"]
                .as_str()
                .or_else(|| nic["PermanentMACAddress"].as_str());
            if let Some(mac) = mac {
                let mac = mac.to_ascii_lowercase();
                if mac.parse::<site::Mac>().is_ok() && !macs.contains(&mac) {
                    macs.push(mac);
                }
            }
        }
        Ok(macs)
    }

    /// `Err`: no answer (the action may or may not have been done);
    /// `Ok(Err)`: the BMC answered and refused it.
    async fn reset(&self, s: &System, want: &str) -> Result<Result<()>> {
        // A BMC that lists its reset types may lack the one asked for:
        // take the nearest it has.
        let kind = if s.reset_types.is_empty() || s.reset_types.iter().any(|t| t == want) {
            want
        } else {
            let alts: &[&str] = match want {
                "On" => &["ForceOn", "PowerCycle"],
                "ForceRestart" => &["PowerCycle", "GracefulRestart"],
                "GracefulShutdown" => &["ForceOff"],
                _ => &[],
            };
            alts.iter()
                .copied()
                .find(|a| s.reset_types.iter().any(|t| t == a))
                .ok_or_else(|| {
                    ProviderError::permanent(format!(
                        "redfish: the BMC offers no {want} (it offers {})",
                        s.reset_types.join(", ")
                    ))
                })?
        };
        let what = format!("redfish: reset {kind}");
        let body = json!({ "ResetType": kind });
        let reply = match self
            .call(Method::POST, &s.reset_target, Some(&body), None, &what)
            .await
        {
            Ok(r) => r,
            Err(e @ ProviderError::Permanent { .. }) => return Ok(Err(e)),
            Err(e) => return Err(e),
        };
        Ok(super::check(&reply, &what, &self.secrets()))
    }
}

impl Redfish {
    fn client(&self, spec: &RedfishSpec) -> Result<Http> {
        let key = (spec.ca_bundle.clone(), spec.insecure_skip_verify);
        let mut c = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = c.get(&key) {
            return Ok(h.clone());
        }
        let h = match (&spec.ca_bundle, spec.insecure_skip_verify) {
            (Some(ca), _) => {
                let pem = bmc::read_confined(ca, &self.files, bmc::MAX_CA_BUNDLE)
                    .map_err(|e| ProviderError::permanent(format!("redfish: caBundle: {e}")))?;
                Http::with_ca(self.timeout, &pem).map_err(|e| {
                    ProviderError::permanent(format!("redfish: caBundle {}: {e}", ca.display()))
                })?
            }
            (None, true) => Http::insecure(self.timeout),
            (None, false) => Http::new(self.timeout),
        };
        c.insert(key, h.clone());
        Ok(h)
    }

    fn bmc(&self, spec: &RedfishSpec) -> Result<(Bmc, String)> {
        let (origin, path) = split_url(&spec.url)
            .map_err(|e| ProviderError::permanent(format!("redfish: url: {e}")))?;
        let password = spec.password.read(NAME, &self.files)?;
        let token = base64::engine::general_purpose::STANDARD
            .encode(format!("{}:{}", spec.username, password.0));
        let mut auth = HeaderValue::from_str(&format!("Basic {token}"))
            .map_err(|_| ProviderError::permanent("redfish: the credentials are not printable"))?;
        auth.set_sensitive(true);
        Ok((
            Bmc {
                http: self.client(spec)?,
                origin,
                auth,
                password,
            },
            path,
        ))
    }

    fn id(node: &str, bmc: &Bmc, system: &str) -> String {
        format!("{node}@{}{system}", bmc.origin)
    }

    fn machine(id: String, s: &System, macs: Vec<String>, rec: &Record) -> Machine {
        let state = if rec.power.delete_at.is_some() {
            MachineState::Deleting
        } else if rec.power.power_on_at.is_none() {
            MachineState::Prepared
        } else {
            match s.power.as_str() {
                "On" => MachineState::Active,
                other => MachineState::Pending(format!("power {other}")),
            }
        };
        Machine {
            id,
            state,
            addresses: vec![],
            macs,
        }
    }

    /// Reads the system and its MACs and records what starting it will
    /// send; nothing is changed on the machine yet ([`MachineState::Prepared`]).
    async fn create(&self, node: &NodeRequest, spec: &RedfishSpec) -> Result<Machine> {
        let (bmc, path) = self.bmc(spec)?;
        if spec.insecure_skip_verify {
            warn!(node = %node.name, bmc = %bmc.origin, "insecureSkipVerify: the BMC's certificate is not checked; anyone answering for its address gets the credentials");
        }
        let system = bmc.resolve(&path, spec.system.as_deref()).await?;
        let s = bmc.system(&system).await?;
        let macs = bmc.macs(s.nics.as_deref()).await?;
        let target = match spec.boot.as_deref() {
            Some("uefiHttp") => "UefiHttp",
            None if node.firmware == site::Firmware::UefiHttp => "UefiHttp",
            _ => "Pxe",
        };
        let mode = match spec.mode.as_deref() {
            Some(m) => Some(m),
            None => match node.firmware {
                site::Firmware::Bios => Some("Legacy"),
                site::Firmware::Uefi | site::Firmware::UefiHttp => Some("UEFI"),
                _ if target == "UefiHttp" => Some("UEFI"),
                _ => None,
            },
        };
        let mut boot = json!({
            "BootSourceOverrideEnabled": "Once",
            "BootSourceOverrideTarget": target,
        });
        if let Some(m) = mode {
            boot["BootSourceOverrideMode"] = json!(m);
        }
        if target == "UefiHttp" {
            if node.uefi_http_url.is_empty() {
                return Err(ProviderError::permanent(
                    "redfish: boot uefiHttp needs bootd's DHCP (host.dhcp) for the UEFI iPXE binary",
                ));
            }
            boot["HttpBootUri"] = json!(node.uefi_http_url);
        }
        let rec = Record {
            spec: spec.clone(),
            system: system.clone(),
            boot,
            power: bmc::PowerLog::default(),
        };
        bmc::store(&self.dir, NAME, &node.name, &rec)?;
        info!(node = %node.name, system = %system, macs = ?macs, "redfish: system read; started once its MACs are recorded");
        Ok(Self::machine(
            Self::id(&node.name, &bmc, &system),
            &s,
            macs,
            &rec,
        ))
    }

    /// Sets the one-time boot override, then powers on (or restarts a
    /// system that was on). The power action is announced in the record
    /// first: after a crash it is never sent twice.
    async fn start(&self, id: &str) -> Result<()> {
        let node = bmc::node_of(id);
        let Some(mut rec) = bmc::load::<Record>(&self.dir, NAME, node)? else {
            return Err(ProviderError::permanent(format!(
                "redfish: no record of {id}: it was never prepared"
            )));
        };
        if rec.power.power_on_at.is_some() {
            return Ok(());
        }
        let (bmc, _) = self.bmc(&rec.spec)?;
        let s = bmc.system(&rec.system).await?;
        let target = rec.boot["BootSourceOverrideTarget"]
            .as_str()
            .unwrap_or("Pxe")
            .to_string();
        bmc.send(
            Method::PATCH,
            &rec.system,
            &json!({ "Boot": rec.boot }),
            s.etag.as_ref(),
            "redfish: set the one-time boot override",
        )
        .await?;
        let after = bmc.system(&rec.system).await?;
        if after.override_target.as_deref() != Some(target.as_str()) {
            warn!(node, want = %target, got = ?after.override_target, "the BMC does not show the boot override it accepted");
        }
        // Announce, then act: after a crash, the record says the power
        // action may have been sent, and it is not sent again.
        rec.power.power_on_at = Some(bmc::now_ms());
        bmc::store(&self.dir, NAME, node, &rec)?;
        let action = if after.power == "On" {
            "ForceRestart"
        } else {
            "On"
        };
        match bmc.reset(&after, action).await {
            Ok(Ok(())) => {}
            Ok(Err(refused)) => {
                // The BMC answered and refused: nothing was done, so the
                // next attempt may send it again. (A request lost on the
                // way is not known to be undone: `get` sends it again only
                // after the grace time.)
                rec.power.power_on_at = None;
                bmc::store(&self.dir, NAME, node, &rec)?;
                return Err(refused);
            }
            Err(lost) => return Err(lost),
        }
        info!(node, system = %rec.system, action, target = %target, "redfish: boot override set, power action sent");
        Ok(())
    }

    async fn find(&self, node: &NodeRequest) -> Result<Option<Machine>> {
        let Some(rec) = bmc::load::<Record>(&self.dir, NAME, &node.name)? else {
            return Ok(None);
        };
        self.look(&node.name, rec).await
    }

    async fn look(&self, node: &str, mut rec: Record) -> Result<Option<Machine>> {
        let (bmc, _) = self.bmc(&rec.spec)?;
        let id = Self::id(node, &bmc, &rec.system);
        let s = match bmc.system_opt(&rec.system).await? {
            Some(s) => s,
            // The system is gone from the BMC: nothing left to power off.
            None if rec.power.delete_at.is_some() => {
                bmc::remove(&self.dir, NAME, node)?;
                return Ok(None);
            }
            None => {
                return Err(ProviderError::permanent(format!(
                    "redfish: {} no longer exists on the BMC",
                    rec.system
                )))
            }
        };
        match rec
            .power
            .next(s.power == "Off", bmc::now_ms(), self.power_off_timeout)
        {
            bmc::PowerStep::Gone => {
                // Leave the machine as we found it: no override of ours.
                let clear = json!({ "Boot": { "BootSourceOverrideEnabled": "Disabled" } });
                if let Err(e) = bmc
                    .send(
                        Method::PATCH,
                        &rec.system,
                        &clear,
                        s.etag.as_ref(),
                        "redfish: clear the boot override",
                    )
                    .await
                {
                    if e.is_transient() {
                        return Err(e);
                    }
                    warn!(node, error = %e, "the boot override could not be cleared");
                }
                bmc::remove(&self.dir, NAME, node)?;
                info!(node, system = %rec.system, "redfish: powered off; record removed");
                return Ok(None);
            }
            bmc::PowerStep::ForceOff => {
                rec.power.forced_off = true;
                bmc::store(&self.dir, NAME, node, &rec)?;
                warn!(
                    node,
                    "redfish: no power-off within {:?}; forcing it", self.power_off_timeout
                );
                bmc.reset(&s, "ForceOff").await??;
            }
            bmc::PowerStep::PowerOnAgain => {
                rec.power.power_on_at = Some(bmc::now_ms());
                bmc::store(&self.dir, NAME, node, &rec)?;
                warn!(
                    node,
                    "redfish: still off a minute after power-on; sending it again"
                );
                bmc.reset(&s, "On").await??;
            }
            bmc::PowerStep::Wait => {}
        }
        if rec.power.delete_at.is_some() {
            return Ok(Some(Self::machine(id, &s, vec![], &rec)));
        }
        let macs = bmc.macs(s.nics.as_deref()).await?;
        Ok(Some(Self::machine(id, &s, macs, &rec)))
    }

    async fn get(&self, id: &str) -> Result<Option<Machine>> {
        let node = bmc::node_of(id);
        match bmc::load::<Record>(&self.dir, NAME, node)? {
            None => Ok(None),
            Some(rec) => self.look(node, rec).await,
        }
    }

    async fn delete(&self, id: &str) -> Result<()> {
        let node = bmc::node_of(id);
        let Some(mut rec) = bmc::load::<Record>(&self.dir, NAME, node)? else {
            return Ok(());
        };
        match rec.power.begin_delete(bmc::now_ms()) {
            bmc::DeleteStart::Underway => Ok(()),
            bmc::DeleteStart::NeverPowered => bmc::remove(&self.dir, NAME, node),
            bmc::DeleteStart::Begin => {
                let (bmc, _) = self.bmc(&rec.spec)?;
                let s = bmc.system(&rec.system).await?;
                bmc::store(&self.dir, NAME, node, &rec)?;
                if s.power != "Off" {
                    bmc.reset(&s, "GracefulShutdown").await??;
                }
                Ok(())
            }
        }
    }
}

impl super::Provider for Redfish {
    fn name(&self) -> &'static str {
        NAME
    }
    fn find<'a>(&'a self, node: &'a NodeRequest) -> super::BoxFuture<'a, Result<Option<Machine>>> {
        Box::pin(Redfish::find(self, node))
    }
    fn create<'a>(
        &'a self,
        node: &'a NodeRequest,
        spec: &'a Value,
    ) -> super::BoxFuture<'a, Result<Machine>> {
        Box::pin(async move {
            Redfish::create(self, node, &super::typed_spec::<RedfishSpec>(NAME, spec)?).await
        })
    }
    fn get<'a>(&'a self, id: &'a str) -> super::BoxFuture<'a, Result<Option<Machine>>> {
        Box::pin(Redfish::get(self, id))
    }
    fn delete<'a>(&'a self, id: &'a str) -> super::BoxFuture<'a, Result<()>> {
        Box::pin(Redfish::delete(self, id))
    }
    fn start<'a>(&'a self, id: &'a str) -> super::BoxFuture<'a, Result<()>> {
        Box::pin(Redfish::start(self, id))
    }
}

/// For tests: a provider on `dir` with `timeout` per request.
pub fn for_tests(
    dir: PathBuf,
    files: PathBuf,
    timeout: Duration,
    power_off_timeout: Duration,
) -> Redfish {
    Redfish {
        timeout,
        power_off_timeout,
        dir,
        files,
        clients: Mutex::new(HashMap::new()),
    }
}
