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

use super::bmc;
use super::{Http, Machine, MachineState, NodeRequest, ProviderError, Result};
use base64::Engine as _;
use http::HeaderValue;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{info, warn};

mod client;
mod media;
mod spec;

use client::{Bmc, System};
use spec::split_url;
pub use spec::RedfishSpec;

const NAME: &str = "redfish";

/// `host.api.redfish` and a node's `provider.redfish`.
pub const REGISTRATION: super::Registration = super::Registration {
    name: NAME,
    check_spec: |v| super::check_typed(v, RedfishSpec::check),
    check_userdata: super::any_userdata,
    boot_kind: |v| match serde_json::from_value::<RedfishSpec>(v.clone()) {
        Ok(s) if s.virtual_media() => super::BootKind::Media,
        _ => super::BootKind::Network,
    },
    defaults: super::no_defaults,
    configure: |api, setup| {
        let d = api.redfish.as_ref()?;
        Some(Ok(std::sync::Arc::new(Redfish {
            timeout: setup.http.timeout,
            power_off_timeout: d.power_off_timeout,
            dir: bmc::dir(setup.state_dir),
            files: setup.bmc_files.clone(),
            credentials: api.bmc_credentials.clone(),
            clients: Mutex::new(HashMap::new()),
            sessions: Arc::default(),
            origins: Mutex::new(HashMap::new()),
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
    /// The virtual media device bootd's ISO went into (`boot: virtualMedia`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    media: Option<MediaRecord>,
    /// A Continuous override, cleared once the node fetched its Ignition.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    override_cleared: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MediaRecord {
    device: String,
    ejected: bool,
    /// The step of the node's plan the inserted ISO boots
    /// (`NodeRequest::media_step`); empty in records written before it
    /// was kept: never replaced.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    step: String,
}

#[derive(Debug)]
pub struct Redfish {
    timeout: Duration,
    power_off_timeout: Duration,
    dir: PathBuf,
    /// `host.api.bmcFiles`: where password files and CA bundles may be.
    files: PathBuf,
    /// `host.api.bmcCredentials`: the BMC origins each password may go to
    /// (`None`: any).
    credentials: Option<Vec<site::BmcCredential>>,
    /// One client per trust setting (CA bundle, or none, or insecure).
    clients: Mutex<HashMap<(Option<PathBuf>, bool), Http>>,
    /// Open sessions, reused across operations; closed when idle.
    sessions: Arc<client::Sessions>,
    /// The client each BMC origin was last reached with (to close its
    /// session).
    origins: Mutex<HashMap<String, Http>>,
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
        // Before anything is sent: may this password go to this BMC?
        let to = bmc::Destination {
            target: site::BmcTarget::of_url(&spec.url),
            insecure_skip_verify: spec.insecure_skip_verify,
            allow_plain_http: spec.allow_plain_http,
        };
        let password =
            spec.password
                .read_for(NAME, &self.files, self.credentials.as_deref(), &to)?;
        let token = base64::engine::general_purpose::STANDARD
            .encode(format!("{}:{}", spec.username, password.0));
        let mut auth = HeaderValue::from_str(&format!("Basic {token}"))
            .map_err(|_| ProviderError::permanent("redfish: the credentials are not printable"))?;
        auth.set_sensitive(true);
        let sessions = match spec.auth.as_deref() {
            Some("basic") => None,
            Some("session") => Some((client::Auth::Session, Arc::clone(&self.sessions))),
            _ => Some((client::Auth::Auto, Arc::clone(&self.sessions))),
        };
        let http = self.client(spec)?;
        self.origins
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(origin.clone(), http.clone());
        Ok((
            Bmc {
                http,
                origin,
                auth,
                username: spec.username.clone(),
                password,
                sessions,
            },
            path,
        ))
    }

    /// Closes the sessions idle for [`client::SESSION_IDLE`] (every one
    /// with `all`: when the provider stops).
    pub async fn close_sessions(&self, all: bool) {
        let origins = self
            .origins
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        client::close_idle(&self.sessions, |o| origins.get(o).cloned(), all).await;
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
            network_config: None,
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
        let offers = |t: &str| s.targets.as_ref().is_none_or(|a| a.iter().any(|x| x == t));
        let target = match spec.boot.as_deref() {
            Some("uefiHttp") => "UefiHttp",
            Some("virtualMedia") => "Cd",
            // A hint, not an order: PXE where the BMC has no UEFI HTTP boot.
            None if node.firmware == site::Firmware::UefiHttp && offers("UefiHttp") => "UefiHttp",
            None if node.firmware == site::Firmware::UefiHttp => {
                warn!(node = %node.name, "the BMC offers no UefiHttp boot override: booting by PXE");
                "Pxe"
            }
            _ => "Pxe",
        };
        if !offers(target) {
            return Err(ProviderError::permanent(format!(
                "redfish: the BMC offers no {target} boot override (it offers {})",
                s.targets.as_deref().unwrap_or_default().join(", ")
            )));
        }
        // Once where the BMC has it; else Continuous, cleared once the node
        // fetched its Ignition (BMCs that offer Continuous and Disabled only).
        let enabled = match &s.enabled_values {
            Some(v) if !v.iter().any(|x| x == "Once") && v.iter().any(|x| x == "Continuous") => {
                "Continuous"
            }
            Some(v) if !v.iter().any(|x| x == "Once") => {
                return Err(ProviderError::permanent(format!(
                    "redfish: the BMC offers neither a Once nor a Continuous boot override (it offers {})",
                    v.join(", ")
                )))
            }
            _ => "Once",
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
            "BootSourceOverrideEnabled": enabled,
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
            media: None,
            override_cleared: false,
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
    async fn start(&self, id: &str, req: &NodeRequest) -> Result<()> {
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
        if rec.spec.virtual_media() {
            if req.media_url.0.is_empty() {
                return Err(ProviderError::permanent(
                    "redfish: boot virtualMedia: bootd has no ISO for this node",
                ));
            }
            let dev = media::cd(&bmc, &rec.system).await?;
            media::insert(&bmc, &dev, &req.media_url.0).await?;
            rec.media = Some(MediaRecord {
                device: dev.path,
                ejected: false,
                step: req.media_step.clone(),
            });
            bmc::store(&self.dir, NAME, node, &rec)?;
            info!(node, system = %rec.system, step = %req.media_step, "redfish: bootd's ISO inserted as virtual media");
        }
        let s = bmc.system(&rec.system).await?;
        // It boots from the network twice (inspect, then install): a
        // continuous override, which `finish` clears once the install
        // fetched its Ignition. Where the BMC has none, once: the machine
        // then needs the network before its disk in its boot order.
        // Virtual media need none: each step's ISO is inserted with its
        // own one-time override (`next_media`).
        if req.inspects_first
            && !rec.spec.virtual_media()
            && rec.boot["BootSourceOverrideEnabled"] == "Once"
        {
            if s.enabled_values
                .as_ref()
                .is_none_or(|v| v.iter().any(|x| x == "Continuous"))
            {
                rec.boot["BootSourceOverrideEnabled"] = json!("Continuous");
                rec.override_cleared = false;
                bmc::store(&self.dir, NAME, node, &rec)?;
            } else {
                warn!(node, system = %rec.system, "the BMC has no continuous boot override: after its inspection the machine boots from its disk unless the network is first in its boot order");
            }
        }
        let target = rec.boot["BootSourceOverrideTarget"]
            .as_str()
            .unwrap_or("Pxe")
            .to_string();
        bmc.patch(
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

    /// The ISO in the virtual media is of another step than the node's
    /// plan now (its agent reported and powered the machine off): once the
    /// machine is off, the next step's ISO goes in and it is started again
    /// as at first (override, then power on, announced in the record).
    async fn next_media(&self, id: &str, req: &NodeRequest) -> Result<()> {
        let node = bmc::node_of(id);
        let Some(mut rec) = bmc::load::<Record>(&self.dir, NAME, node)? else {
            return Ok(());
        };
        let stale = match &rec.media {
            Some(m) => !m.ejected && !m.step.is_empty() && m.step != req.media_step,
            None => false,
        };
        if !stale || req.media_step.is_empty() || rec.power.delete_at.is_some() {
            return Ok(());
        }
        let (bmc, _) = self.bmc(&rec.spec)?;
        let s = bmc.system(&rec.system).await?;
        if s.power != "Off" {
            // Still running the last step (or on its way down).
            return Ok(());
        }
        let was = rec
            .media
            .as_ref()
            .map(|m| m.step.clone())
            .unwrap_or_default();
        info!(node, system = %rec.system, from = %was, to = %req.media_step, "redfish: the machine is off after a step of its virtual media; inserting the next");
        // The record keeps the device: `start` ejects what is in it.
        rec.power.power_on_at = None;
        if let Some(m) = rec.media.as_mut() {
            m.step.clear();
        }
        bmc::store(&self.dir, NAME, node, &rec)?;
        self.start(id, req).await
    }

    /// The node fetched its Ignition: its ISO is ejected, so that no later
    /// boot starts the installer again.
    async fn finish(&self, id: &str) -> Result<()> {
        let node = bmc::node_of(id);
        let Some(mut rec) = bmc::load::<Record>(&self.dir, NAME, node)? else {
            return Ok(());
        };
        if let Some(m) = rec.media.as_ref().filter(|m| !m.ejected) {
            let (bmc, _) = self.bmc(&rec.spec)?;
            let dev = media::read(&bmc, &m.device).await?;
            media::eject(&bmc, &dev).await?;
            rec.media = Some(MediaRecord {
                device: dev.path,
                ejected: true,
                step: m.step.clone(),
            });
            bmc::store(&self.dir, NAME, node, &rec)?;
            info!(node, system = %rec.system, "redfish: virtual media ejected (the node fetched its Ignition)");
        }
        // A Continuous override (where the BMC has no Once) would boot the
        // installer again at every restart: cleared now.
        if rec.boot["BootSourceOverrideEnabled"] == "Continuous" && !rec.override_cleared {
            let (bmc, _) = self.bmc(&rec.spec)?;
            let s = bmc.system(&rec.system).await?;
            bmc.patch(
                &rec.system,
                &json!({ "Boot": { "BootSourceOverrideEnabled": "Disabled" } }),
                s.etag.as_ref(),
                "redfish: clear the continuous boot override",
            )
            .await?;
            rec.override_cleared = true;
            bmc::store(&self.dir, NAME, node, &rec)?;
            info!(node, system = %rec.system, "redfish: continuous boot override cleared (the node fetched its Ignition)");
        }
        self.close_sessions(false).await;
        Ok(())
    }

    async fn find(&self, node: &NodeRequest) -> Result<Option<Machine>> {
        let Some(rec) = bmc::load::<Record>(&self.dir, NAME, &node.name)? else {
            return Ok(None);
        };
        self.look(&node.name, rec).await
    }

    async fn look(&self, node: &str, mut rec: Record) -> Result<Option<Machine>> {
        self.close_sessions(false).await;
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
                // Leave the machine as we found it: no ISO, no override of ours.
                if let Some(m) = rec.media.as_ref().filter(|m| !m.ejected) {
                    let ejected = match media::read(&bmc, &m.device).await {
                        Ok(dev) => media::eject(&bmc, &dev).await,
                        Err(e) => Err(e),
                    };
                    if let Err(e) = ejected {
                        if e.is_transient() {
                            return Err(e);
                        }
                        warn!(node, error = %e, "the virtual media could not be ejected");
                    }
                }
                let clear = json!({ "Boot": { "BootSourceOverrideEnabled": "Disabled" } });
                if let Err(e) = bmc
                    .patch(
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
    forward_provider_calls!(Redfish, NAME, RedfishSpec);
    fn start<'a>(&'a self, id: &'a str, node: &'a NodeRequest) -> super::BoxFuture<'a, Result<()>> {
        Box::pin(Redfish::start(self, id, node))
    }
    fn finish<'a>(&'a self, id: &'a str) -> super::BoxFuture<'a, Result<()>> {
        Box::pin(Redfish::finish(self, id))
    }
    fn next_media<'a>(
        &'a self,
        id: &'a str,
        node: &'a NodeRequest,
    ) -> super::BoxFuture<'a, Result<()>> {
        Box::pin(Redfish::next_media(self, id, node))
    }
    fn release<'a>(
        &'a self,
        id: &'a str,
        node: &'a NodeRequest,
    ) -> super::BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let name = bmc::node_of(id);
            if let Some(mut rec) = bmc::load::<Record>(&self.dir, NAME, name)? {
                if rec.power.begin_release() {
                    // Its media were ejected after the install: in again.
                    rec.media = None;
                    bmc::store(&self.dir, NAME, name, &rec)?;
                }
            }
            Redfish::start(self, id, node).await.map(|()| true)
        })
    }
    fn close(&self) -> super::BoxFuture<'_, ()> {
        Box::pin(self.close_sessions(true))
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
        credentials: None,
        clients: Mutex::new(HashMap::new()),
        sessions: Arc::default(),
        origins: Mutex::new(HashMap::new()),
    }
}

impl Redfish {
    /// For tests: with `host.api.bmcCredentials`.
    pub fn with_credentials(mut self, credentials: Option<Vec<site::BmcCredential>>) -> Self {
        self.credentials = credentials;
        self
    }
}
