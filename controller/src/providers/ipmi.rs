//! The IPMI provider: a machine behind a BMC without Redfish, over IPMI
//! v2.0 lanplus (RMCP+), through Debian's `ipmitool` run as a child process
//! (as Ironic's ipmitool driver does; see docs/design-notes.md).
//!
//! - create: `chassis bootdev pxe [options=efiboot]` (a one-time boot
//!   device: the BMC clears it after the next boot, or 60 s without one,
//!   so it is set right before the power action; `options=persistent` for
//!   a node that inspects first, cleared by `finish` with `chassis bootdev
//!   none` once the install fetched its Ignition), then `chassis power on`,
//!   or `chassis power reset` for a machine that was on. The power action
//!   is announced in the provider's record first ([`super::bmc`]).
//! - get: `chassis power status`: on is Active.
//! - delete: `chassis power soft`, then `chassis power off` after
//!   `powerOffTimeout`; once off, `chassis bootdev none` and the record goes.
//!
//! ipmitool gets its arguments as a vector (no shell), the password in its
//! environment (`-E`, `IPMI_PASSWORD`), never on its command line (which
//! every user can read in /proc), and a deadline after which it is killed.
//! IPMI cannot list a machine's MACs: an IPMI node gives its `macs`.

use super::bmc::{self, PasswordRef};
use super::{Machine, MachineState, NodeRequest, ProviderError, Result};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;
use tracing::{info, warn};

const NAME: &str = "ipmi";

/// A node's `provider.ipmi`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IpmiSpec {
    /// The BMC's address or host name.
    pub address: String,
    #[serde(default = "default_port")]
    pub port: u16,
    pub username: String,
    pub password: PasswordRef,
    /// `UEFI` (`options=efiboot`) or `Legacy`; default from the node's
    /// `firmware` hint, else Legacy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// RMCP+ cipher suite (`-C`); default ipmitool's (17 on Debian 12).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cipher_suite: Option<u8>,
}

fn default_port() -> u16 {
    623
}

impl IpmiSpec {
    pub fn check(&self) -> Vec<String> {
        let k = "provider.ipmi";
        let mut p = Vec::new();
        let a = &self.address;
        if a.is_empty()
            || a.starts_with('-')
            || !a
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || ".-:_".contains(c))
        {
            p.push(format!("{k}.address: {a:?} is not an address or host name"));
        }
        if self.port == 0 {
            p.push(format!("{k}.port: 0"));
        }
        if self.username.is_empty()
            || self.username.starts_with('-')
            || self.username.contains(char::is_control)
        {
            p.push(format!("{k}.username: empty or not printable"));
        }
        p.extend(self.password.check(&format!("{k}.password")));
        match self.mode.as_deref() {
            None | Some("UEFI" | "Legacy") => {}
            Some(m) => p.push(format!("{k}.mode: {m:?}: want UEFI or Legacy")),
        }
        if let Some(c) = self.cipher_suite {
            if c > 17 {
                p.push(format!("{k}.cipherSuite: {c}: want 0 to 17"));
            }
        }
        p
    }
}

/// `host.api.ipmi` and a node's `provider.ipmi`.
pub const REGISTRATION: super::Registration = super::Registration {
    name: NAME,
    check_spec: |v| super::check_typed(v, IpmiSpec::check),
    check_userdata: super::any_userdata,
    boot_kind: super::network_boot,
    defaults: super::no_defaults,
    configure: |api, setup| {
        let d = api.ipmi.as_ref()?;
        Some(Ok(std::sync::Arc::new(Ipmi {
            ipmitool: PathBuf::from("ipmitool"),
            timeout: setup.http.timeout,
            power_off_timeout: d.power_off_timeout,
            dir: bmc::dir(setup.state_dir),
            files: setup.bmc_files.clone(),
            credentials: api.bmc_credentials.clone(),
        }) as std::sync::Arc<dyn super::Provider>))
    },
};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Record {
    spec: IpmiSpec,
    /// `options=efiboot` on the boot device.
    #[serde(default)]
    uefi: bool,
    /// The node's MACs (IPMI cannot read them).
    #[serde(default)]
    macs: Vec<String>,
    /// What bootd did to its power.
    #[serde(flatten)]
    power: bmc::PowerLog,
    /// The network boot was set persistent (the node inspects first); it
    /// is cleared once the install fetched its Ignition.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    persistent: bool,
}

#[derive(Debug)]
pub struct Ipmi {
    pub ipmitool: PathBuf,
    /// Per ipmitool run.
    pub timeout: Duration,
    pub power_off_timeout: Duration,
    /// The records' directory.
    pub dir: PathBuf,
    /// `host.api.bmcFiles`: where password files may be.
    pub files: PathBuf,
    /// `host.api.bmcCredentials`: the BMC origins each password may go to
    /// (`None`: any).
    pub credentials: Option<Vec<site::BmcCredential>>,
}

/// What ipmitool's stderr says about a refusal that retrying will not fix.
fn permanent_refusal(stderr: &str) -> bool {
    let s = stderr.to_ascii_lowercase();
    [
        "rakp 2 hmac is invalid",
        "unauthorized name",
        "invalid user name",
        "insufficient privilege",
        "invalid command",
    ]
    .iter()
    .any(|m| s.contains(m))
}

impl Ipmi {
    /// Runs `ipmitool -I lanplus … <args>`; its stdout.
    async fn run(&self, spec: &IpmiSpec, args: &[&str], what: &str) -> Result<String> {
        // Before ipmitool runs: may this password go to this BMC?
        let to = bmc::Destination {
            target: site::BmcTarget::ipmi(&spec.address, spec.port),
            insecure_skip_verify: false,
            allow_plain_http: false,
        };
        let password =
            spec.password
                .read_for(NAME, &self.files, self.credentials.as_deref(), &to)?;
        let mut cmd = tokio::process::Command::new(&self.ipmitool);
        cmd.args(["-I", "lanplus", "-H", &spec.address, "-p"])
            .arg(spec.port.to_string())
            .args(["-U", &spec.username, "-E", "-N", "2", "-R", "2"]);
        if let Some(c) = spec.cipher_suite {
            cmd.arg("-C").arg(c.to_string());
        }
        cmd.args(args)
            .env("IPMI_PASSWORD", &password.0)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        // Fenced as every HTTP exchange is (module `fence`).
        if crate::fence::current().is_some_and(|t| t.is_cancelled()) {
            return Err(ProviderError::transient(format!(
                "{what}: not sent: {}",
                crate::fence::ENDED
            )));
        }
        let child = cmd.spawn().map_err(|e| {
            ProviderError::permanent(format!(
                "{what}: cannot run {}: {e}",
                self.ipmitool.display()
            ))
        })?;
        let waited =
            crate::fence::guarded(tokio::time::timeout(self.timeout, child.wait_with_output()))
                .await
                .map_err(|why| {
                    // ipmitool is killed with its handle (kill_on_drop).
                    ProviderError::transient(format!("{what}: abandoned: {why}"))
                })?;
        let out = match waited {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => return Err(ProviderError::transient(format!("{what}: ipmitool: {e}"))),
            Err(_) => {
                return Err(ProviderError::transient(format!(
                    "{what}: no answer from the BMC within {:?}",
                    self.timeout
                )))
            }
        };
        let stderr = super::redact(&String::from_utf8_lossy(&out.stderr), &[&password.0]);
        if out.status.success() {
            return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        warn!(ipmitool_said = %stderr.trim(), "{what}: failed");
        if permanent_refusal(&stderr) {
            Err(ProviderError::permanent(format!(
                "{what}: the BMC refused the username, password or privilege"
            )))
        } else {
            Err(ProviderError::transient(format!(
                "{what}: no IPMI session with {}:{} (unreachable, or refused)",
                spec.address, spec.port
            )))
        }
    }

    /// `true` when the chassis power is on.
    async fn power_on(&self, spec: &IpmiSpec) -> Result<bool> {
        let out = self
            .run(spec, &["chassis", "power", "status"], "ipmi: power status")
            .await?;
        let o = out.to_ascii_lowercase();
        if o.contains("power is on") {
            Ok(true)
        } else if o.contains("power is off") {
            Ok(false)
        } else {
            Err(ProviderError::transient(format!(
                "ipmi: power status: unexpected answer {:?}",
                out.trim()
            )))
        }
    }

    fn id(node: &str, spec: &IpmiSpec) -> String {
        format!("{node}@ipmi://{}:{}", spec.address, spec.port)
    }

    fn machine(id: String, on: bool, rec: &Record, macs: Vec<String>) -> Machine {
        let state = match (rec.power.delete_at.is_some(), on) {
            (true, _) => MachineState::Deleting,
            (false, _) if rec.power.power_on_at.is_none() => MachineState::Prepared,
            (false, true) => MachineState::Active,
            (false, false) => MachineState::Pending("power off".into()),
        };
        Machine {
            network_config: None,
            id,
            state,
            addresses: vec![],
            macs,
        }
    }

    /// Checks the BMC answers and records what starting will send;
    /// nothing changes on the machine yet ([`MachineState::Prepared`]).
    async fn create(&self, node: &NodeRequest, spec: &IpmiSpec) -> Result<Machine> {
        if node.macs.is_empty() {
            return Err(ProviderError::permanent(
                "ipmi: IPMI cannot read a machine's MACs: give the node's macs",
            ));
        }
        let on = self.power_on(spec).await?;
        let uefi = match spec.mode.as_deref() {
            Some(m) => m == "UEFI",
            None => matches!(
                node.firmware,
                site::Firmware::Uefi | site::Firmware::UefiHttp
            ),
        };
        let rec = Record {
            spec: spec.clone(),
            uefi,
            macs: node.macs.clone(),
            power: bmc::PowerLog::default(),
            persistent: false,
        };
        bmc::store(&self.dir, NAME, &node.name, &rec)?;
        Ok(Self::machine(
            Self::id(&node.name, spec),
            on,
            &rec,
            node.macs.clone(),
        ))
    }

    /// One-time network boot, then power on (or reset a machine that was
    /// on); the power action is announced in the record first.
    async fn start(&self, id: &str, inspects_first: bool) -> Result<()> {
        let node = bmc::node_of(id);
        let Some(mut rec) = bmc::load::<Record>(&self.dir, NAME, node)? else {
            return Err(ProviderError::permanent(format!(
                "ipmi: no record of {id}: it was never prepared"
            )));
        };
        if rec.power.power_on_at.is_some() {
            return Ok(());
        }
        let spec = rec.spec.clone();
        let was_on = self.power_on(&spec).await?;
        // A node that inspects first boots from the network twice (the
        // agent's reboot, then the install): persistent until `finish`.
        rec.persistent = rec.persistent || inspects_first;
        let options = match (rec.persistent, rec.uefi) {
            (true, true) => Some("options=persistent,efiboot"),
            (true, false) => Some("options=persistent"),
            (false, true) => Some("options=efiboot"),
            (false, false) => None,
        };
        let mut bootdev = vec!["chassis", "bootdev", "pxe"];
        bootdev.extend(options);
        self.run(&spec, &bootdev, "ipmi: one-time boot from the network")
            .await?;
        rec.power.power_on_at = Some(bmc::now_ms());
        bmc::store(&self.dir, NAME, node, &rec)?;
        let action = if was_on { "reset" } else { "on" };
        if let Err(e) = self
            .run(&spec, &["chassis", "power", action], "ipmi: power")
            .await
        {
            if !e.is_transient() {
                rec.power.power_on_at = None;
                bmc::store(&self.dir, NAME, node, &rec)?;
            }
            return Err(e);
        }
        info!(
            node,
            action,
            uefi = rec.uefi,
            "ipmi: boot device set, power action sent"
        );
        Ok(())
    }

    async fn look(&self, node: &str, mut rec: Record) -> Result<Option<Machine>> {
        let id = Self::id(node, &rec.spec);
        let on = self.power_on(&rec.spec).await?;
        match rec.power.next(!on, bmc::now_ms(), self.power_off_timeout) {
            bmc::PowerStep::Gone => {
                if let Err(e) = self
                    .run(
                        &rec.spec,
                        &["chassis", "bootdev", "none"],
                        "ipmi: clear the boot device",
                    )
                    .await
                {
                    warn!(node, error = %e, "the boot device could not be cleared");
                }
                bmc::remove(&self.dir, NAME, node)?;
                info!(node, "ipmi: powered off; record removed");
                return Ok(None);
            }
            bmc::PowerStep::ForceOff => {
                rec.power.forced_off = true;
                bmc::store(&self.dir, NAME, node, &rec)?;
                warn!(
                    node,
                    "ipmi: no power-off within {:?}; forcing it", self.power_off_timeout
                );
                self.run(&rec.spec, &["chassis", "power", "off"], "ipmi: power off")
                    .await?;
            }
            bmc::PowerStep::PowerOnAgain => {
                rec.power.power_on_at = Some(bmc::now_ms());
                bmc::store(&self.dir, NAME, node, &rec)?;
                warn!(
                    node,
                    "ipmi: still off a minute after power-on; sending it again"
                );
                self.run(&rec.spec, &["chassis", "power", "on"], "ipmi: power on")
                    .await?;
            }
            bmc::PowerStep::Wait => {}
        }
        if rec.power.delete_at.is_some() {
            return Ok(Some(Self::machine(id, true, &rec, vec![])));
        }
        Ok(Some(Self::machine(id, on, &rec, rec.macs.clone())))
    }

    async fn find(&self, node: &NodeRequest) -> Result<Option<Machine>> {
        match bmc::load::<Record>(&self.dir, NAME, &node.name)? {
            Some(rec) => self.look(&node.name, rec).await,
            None => Ok(None),
        }
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
                let on = self.power_on(&rec.spec).await?;
                bmc::store(&self.dir, NAME, node, &rec)?;
                if on {
                    self.run(
                        &rec.spec,
                        &["chassis", "power", "soft"],
                        "ipmi: soft power off",
                    )
                    .await?;
                }
                Ok(())
            }
        }
    }
}

impl super::Provider for Ipmi {
    forward_provider_calls!(Ipmi, NAME, IpmiSpec);
    fn start<'a>(&'a self, id: &'a str, node: &'a NodeRequest) -> super::BoxFuture<'a, Result<()>> {
        Box::pin(Ipmi::start(self, id, node.inspects_first))
    }
    fn finish<'a>(&'a self, id: &'a str) -> super::BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let node = bmc::node_of(id);
            let Some(mut rec) = bmc::load::<Record>(&self.dir, NAME, node)? else {
                return Ok(());
            };
            if !rec.persistent {
                return Ok(());
            }
            self.run(
                &rec.spec,
                &["chassis", "bootdev", "none"],
                "ipmi: clear the persistent network boot",
            )
            .await?;
            rec.persistent = false;
            bmc::store(&self.dir, NAME, node, &rec)?;
            info!(
                node,
                "ipmi: persistent network boot cleared (the node fetched its Ignition)"
            );
            Ok(())
        })
    }
    fn release<'a>(
        &'a self,
        id: &'a str,
        _node: &'a NodeRequest,
    ) -> super::BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let name = bmc::node_of(id);
            if let Some(mut rec) = bmc::load::<Record>(&self.dir, NAME, name)? {
                if rec.power.begin_release() {
                    bmc::store(&self.dir, NAME, name, &rec)?;
                }
            }
            Ipmi::start(self, id, false).await.map(|()| true)
        })
    }
}
