//! What the BMC providers ([`super::redfish`], [`super::ipmi`]) share: the
//! reference to a BMC password, and the provider's own durable record of
//! what it did to a machine it does not own.
//!
//! A BMC cannot be asked "did I already power this on for node X?": the
//! machine exists before and after the node, and its power state says
//! nothing about who set it. So before each power action the provider
//! writes (fsync, rename) what it is about to do in
//! `<stateDir>/bmc/<provider>-<node>.json`; `find` and `get` read it back
//! after a crash, so an action is sent once, and a delete that began before
//! a crash goes on from where it was. The record also holds the node's BMC
//! spec, so `get` and `delete` (which receive only the machine id) can reach
//! the BMC. It holds references to the password, never the password.

use super::{ProviderError, Result};
use serde::{Deserialize, Serialize};
use site::{Secret, SecretRef};
use std::path::{Path, PathBuf};

/// Where a BMC password is read from: `{file: PATH}` (absolute),
/// `{credential: NAME}` (a systemd credential) or `{env: VAR}` (bootd's
/// environment). Exactly one. With `installConfigHost: NAME`, `file` is
/// an install-config.yaml and the password is that host's
/// `platform.baremetal.hosts[].bmc.password`: it stays in the file the
/// operator wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PasswordRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_config_host: Option<String>,
}

/// The fields, parsed only from a map: a string in their place is likely
/// the password itself, and serde's own error would quote it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PasswordFields {
    #[serde(default)]
    file: Option<PathBuf>,
    #[serde(default)]
    credential: Option<String>,
    #[serde(default)]
    env: Option<String>,
    #[serde(default)]
    install_config_host: Option<String>,
}

impl<'de> Deserialize<'de> for PasswordRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error;
        const WANT: &str =
            "password: give {file: PATH}, {credential: NAME}, {env: VAR} or {file: INSTALL-CONFIG, installConfigHost: NAME}, never the password itself";
        let v = serde_json::Value::deserialize(d)?;
        if !v.is_object() {
            return Err(D::Error::custom(WANT));
        }
        let f: PasswordFields = serde_json::from_value(v).map_err(|_| D::Error::custom(WANT))?;
        Ok(PasswordRef {
            file: f.file,
            credential: f.credential,
            env: f.env,
            install_config_host: f.install_config_host,
        })
    }
}

impl PasswordRef {
    /// Every problem, with `key` (e.g. `provider.redfish.password`) in front.
    pub fn check(&self, key: &str) -> Vec<String> {
        let mut p = Vec::new();
        if let Some(h) = &self.install_config_host {
            if self.file.is_none() {
                p.push(format!(
                    "{key}.installConfigHost: goes with file, the install-config.yaml that holds the host"
                ));
            }
            if h.is_empty() || h.len() > 253 || h.chars().any(char::is_control) {
                p.push(format!("{key}.installConfigHost: {h:?} is not a host name"));
            }
        }
        match (&self.file, &self.credential, &self.env) {
            (Some(f), None, None) if !f.is_absolute() => p.push(format!(
                "{key}.file: {:?} is not an absolute path (it is read by bootd, on its host)",
                f.display()
            )),
                        (None, Some(c), None)
                if !c.starts_with(CREDENTIAL_PREFIX) || c.contains('/') || c.len() > 128 =>
            {
                p.push(format!(
                    "{key}.credential: {c:?}: a BMC credential's name starts with {CREDENTIAL_PREFIX:?}"
                ))
            }
            (None, None, Some(v)) if !site::env_name_ok(v) || !v.starts_with(ENV_PREFIX) => p.push(
                format!("{key}.env: {v:?}: a BMC password's variable starts with {ENV_PREFIX}"),
            ),
            (Some(_), None, None) | (None, Some(_), None) | (None, None, Some(_)) => {}
            _ => p.push(format!(
                "{key}: give exactly one of file, credential, env (never the password itself)"
            )),
        }
        p
    }

    pub fn to_ref(&self) -> Option<SecretRef> {
        match (&self.file, &self.credential, &self.env) {
            (Some(f), None, None) => Some(SecretRef::File(f.clone())),
            (None, Some(c), None) => Some(SecretRef::Credential(c.clone())),
            (None, None, Some(v)) => Some(SecretRef::Env(v.clone())),
            _ => None,
        }
    }

    /// The password, once it is known that it may go where `to` says:
    /// an install-config host's only to that host's `bmc.address` in the
    /// file, any other only as `host.api.bmcCredentials` allows (when the
    /// site sets it). The providers call this before any request leaves,
    /// so a refused reference reaches no one. A permanent error names the
    /// key to change, never the password.
    pub fn read_for(
        &self,
        provider: &str,
        dir: &Path,
        credentials: Option<&[site::BmcCredential]>,
        to: &Destination,
    ) -> Result<Secret<String>> {
        let refuse = |why: String| ProviderError::permanent(format!("{provider}: {why}"));
        let Some(target) = &to.target else {
            return Err(refuse(
                "the BMC's address is not one a password can be sent to".into(),
            ));
        };
        if let (Some(f), Some(host)) = (&self.file, &self.install_config_host) {
            if !self.check("password").is_empty() {
                return Err(refuse("the password reference is invalid".into()));
            }
            let bytes = read_confined(f, dir, MAX_INSTALL_CONFIG)
                .map_err(|e| refuse(format!("the BMC password: {e}")))?;
            let h = install_config_host(&bytes, host)
                .map_err(|e| refuse(format!("the BMC password: {}: {e}", f.display())))?;
            let theirs =
                h.address.as_deref().and_then(|a| {
                    match crate::client::import::bmc_address(a).ok()? {
                        crate::client::import::BmcAddress::Redfish { url, .. } => {
                            site::BmcTarget::of_url(&url)
                        }
                        crate::client::import::BmcAddress::Ipmi { address, port } => {
                            site::BmcTarget::ipmi(&address, port)
                        }
                    }
                });
            let at = format!(
                "the password of host {host:?} in {} goes only to its own bmc.address",
                f.display()
            );
            match theirs {
                Some(t) if t == *target => {}
                Some(t) => return Err(refuse(format!("{at} ({t}), not to {target}"))),
                None => {
                    return Err(refuse(format!(
                        "{at}, which is missing or not one bootd drives"
                    )))
                }
            }
            if to.insecure_skip_verify && !h.disable_certificate_verification {
                return Err(refuse(format!(
                    "insecureSkipVerify: {at}, whose bmc.disableCertificateVerification is not true"
                )));
            }
            if to.allow_plain_http && target.scheme != site::BmcScheme::Http {
                return Err(refuse(format!("allowPlainHttp: {at}, an https:// address")));
            }
            return Ok(h.password);
        }
        if let (Some(creds), Some(r)) = (credentials, self.to_ref()) {
            site::bmc_binding(
                creds,
                &r,
                target,
                to.insecure_skip_verify,
                to.allow_plain_http,
            )
            .map_err(refuse)?;
        }
        self.read(provider, dir)
    }

    /// The password, from a file inside `dir` (`host.api.bmcFiles`), a
    /// `bmc-` credential or a `BOOTD_BMC_` variable: whoever may create
    /// nodes cannot make bootd send another of its secrets to a BMC URL of
    /// their choosing. A permanent error names the reference, never content.
    pub fn read(&self, provider: &str, dir: &Path) -> Result<Secret<String>> {
        if !self.check("password").is_empty() {
            return Err(ProviderError::permanent(format!(
                "{provider}: the password reference is invalid"
            )));
        }
        let r = self.to_ref().ok_or_else(|| {
            ProviderError::permanent(format!("{provider}: the password reference is invalid"))
        })?;
        if let (SecretRef::File(f), Some(host)) = (&r, &self.install_config_host) {
            let bytes = read_confined(f, dir, MAX_INSTALL_CONFIG).map_err(|e| {
                ProviderError::permanent(format!("{provider}: the BMC password: {e}"))
            })?;
            return install_config_password(&bytes, host).map_err(|e| {
                ProviderError::permanent(format!(
                    "{provider}: the BMC password: {}: {e}",
                    f.display()
                ))
            });
        }
        if let SecretRef::File(f) = &r {
            let bytes = read_confined(f, dir, MAX_PASSWORD).map_err(|e| {
                ProviderError::permanent(format!("{provider}: the BMC password: {e}"))
            })?;
            let s = String::from_utf8(bytes).map_err(|_| {
                ProviderError::permanent(format!(
                    "{provider}: the BMC password: {} is not text",
                    f.display()
                ))
            })?;
            let s = s.trim();
            if s.is_empty() {
                return Err(ProviderError::permanent(format!(
                    "{provider}: the BMC password: {} is empty",
                    f.display()
                )));
            }
            return Ok(Secret(s.to_string()));
        }
        super::read_secret(&r)
            .map_err(|e| ProviderError::permanent(format!("{provider}: the BMC password: {e}")))
    }
}

/// A BMC credential's name starts with this (`LoadCredential=bmc-…`).
pub const CREDENTIAL_PREFIX: &str = "bmc-";
/// A BMC password's environment variable starts with this.
pub const ENV_PREFIX: &str = "BOOTD_BMC_";
/// The largest password file read.
pub const MAX_PASSWORD: u64 = 4096;
/// The largest install-config.yaml read for a password.
pub const MAX_INSTALL_CONFIG: u64 = 1 << 20;

/// Where and how a provider would send a node's BMC password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// The BMC's origin; `None`: the url or address is not one.
    pub target: Option<site::BmcTarget>,
    pub insecure_skip_verify: bool,
    pub allow_plain_http: bool,
}

/// `platform.baremetal.hosts[name=host].bmc.password` of an
/// install-config. Errors say what is missing, never a value of the file.
pub fn install_config_password(
    yaml: &[u8],
    host: &str,
) -> std::result::Result<Secret<String>, String> {
    install_config_host(yaml, host).map(|h| h.password)
}

/// What an install-config says of a host's BMC.
pub struct InstallConfigBmc {
    pub password: Secret<String>,
    /// `bmc.address`, as written.
    pub address: Option<String>,
    pub disable_certificate_verification: bool,
}

/// The BMC of `platform.baremetal.hosts[name=host]`. Errors say what is
/// missing, never a value of the file.
pub fn install_config_host(
    yaml: &[u8],
    host: &str,
) -> std::result::Result<InstallConfigBmc, String> {
    let v: serde_yaml_ng::Value = serde_yaml_ng::from_slice(yaml)
        .map_err(|_| "not YAML (an install-config.yaml)".to_string())?;
    let hosts = v
        .get("platform")
        .and_then(|p| p.get("baremetal"))
        .and_then(|b| b.get("hosts"))
        .and_then(|h| h.as_sequence())
        .ok_or("no platform.baremetal.hosts")?;
    let h = hosts
        .iter()
        .find(|h| h.get("name").and_then(|n| n.as_str()) == Some(host))
        .ok_or_else(|| format!("no host {host:?} in platform.baremetal.hosts"))?;
    let bmc = h.get("bmc");
    match bmc.and_then(|b| b.get("password")) {
        Some(serde_yaml_ng::Value::String(s)) if !s.is_empty() => Ok(InstallConfigBmc {
            password: Secret(s.clone()),
            address: bmc
                .and_then(|b| b.get("address"))
                .and_then(|a| a.as_str())
                .map(str::to_string),
            disable_certificate_verification: bmc
                .and_then(|b| b.get("disableCertificateVerification"))
                .and_then(|d| d.as_bool())
                .unwrap_or(false),
        }),
        _ => Err(format!(
            "host {host:?} has no bmc.password (a non-empty string)"
        )),
    }
}

/// The largest CA bundle read.
pub const MAX_CA_BUNDLE: u64 = 1 << 20;

/// Reads `f`, which must be a regular file of at most `max` bytes inside
/// `dir` once symbolic links are resolved.
pub fn read_confined(f: &Path, dir: &Path, max: u64) -> std::result::Result<Vec<u8>, String> {
    use std::io::Read;
    let not_here = || {
        format!(
            "{} is not a file in host.api.bmcFiles ({})",
            f.display(),
            dir.display()
        )
    };
    let dir = dir.canonicalize().map_err(|_| not_here())?;
    let real = f.canonicalize().map_err(|_| not_here())?;
    if !real.starts_with(&dir) {
        return Err(not_here());
    }
    let meta = std::fs::metadata(&real).map_err(|_| not_here())?;
    if !meta.is_file() {
        return Err(not_here());
    }
    if meta.len() > max {
        return Err(format!("{} is larger than {max} bytes", f.display()));
    }
    let mut buf = Vec::new();
    std::fs::File::open(&real)
        .and_then(|h| h.take(max + 1).read_to_end(&mut buf))
        .map_err(|e| format!("cannot read {}: {}", f.display(), e.kind()))?;
    if buf.len() as u64 > max {
        return Err(format!("{} is larger than {max} bytes", f.display()));
    }
    Ok(buf)
}

/// A machine still off this long after its power-on was sent gets it again.
pub const POWER_ON_GRACE_MS: i64 = 60_000;

/// What a BMC provider did to a machine's power: the part of its record
/// both BMC providers keep alike (flattened into each record's JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PowerLog {
    /// When the power-on (or restart) was sent.
    #[serde(default)]
    pub power_on_at: Option<i64>,
    /// When the delete's graceful shutdown was sent.
    #[serde(default)]
    pub delete_at: Option<i64>,
    #[serde(default)]
    pub forced_off: bool,
    /// The node is being released: its machine was (or is being) booted
    /// once more from the network, to wipe its disks.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub released: bool,
}

impl PowerLog {
    /// Starts a release: the next `start` boots the machine from the
    /// network again. `true` when the record changed (store it); a release
    /// begun already changes nothing, so its power action is sent once.
    pub fn begin_release(&mut self) -> bool {
        if self.released {
            return false;
        }
        self.released = true;
        self.power_on_at = None;
        true
    }
}

/// What to do next to a machine, from its record and its power now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerStep {
    /// Deleted and off: clear the boot override, drop the record.
    Gone,
    /// Deleted, still on past the power-off timeout: force it off (once).
    ForceOff,
    /// Still off a grace time after its power-on was sent: it was lost.
    PowerOnAgain,
    /// Nothing to send.
    Wait,
}

/// How a delete begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteStart {
    /// Begun before: nothing more to send.
    Underway,
    /// bootd never powered it: leave it as found, drop the record.
    NeverPowered,
    /// Recorded now: send the graceful shutdown if it is on.
    Begin,
}

impl PowerLog {
    /// `off`: the BMC says the machine is off (not powering on or off).
    pub fn next(
        &self,
        off: bool,
        now_ms: i64,
        power_off_timeout: std::time::Duration,
    ) -> PowerStep {
        match self.delete_at {
            Some(_) if off => PowerStep::Gone,
            Some(at) if !self.forced_off && now_ms - at > power_off_timeout.as_millis() as i64 => {
                PowerStep::ForceOff
            }
            Some(_) => PowerStep::Wait,
            None if off
                && self
                    .power_on_at
                    .is_some_and(|at| now_ms - at > POWER_ON_GRACE_MS) =>
            {
                PowerStep::PowerOnAgain
            }
            None => PowerStep::Wait,
        }
    }

    /// Marks the delete begun (the caller stores the record before it
    /// sends anything).
    pub fn begin_delete(&mut self, now_ms: i64) -> DeleteStart {
        if self.delete_at.is_some() {
            return DeleteStart::Underway;
        }
        if self.power_on_at.is_none() {
            return DeleteStart::NeverPowered;
        }
        self.delete_at = Some(now_ms);
        DeleteStart::Begin
    }
}

/// The directory of the BMC providers' records.
pub fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join("bmc")
}

fn path_of(dir: &Path, provider: &str, node: &str) -> PathBuf {
    dir.join(format!("{provider}-{node}.json"))
}

/// A record, or `None` when there is none.
pub fn load<T: serde::de::DeserializeOwned>(
    dir: &Path,
    provider: &str,
    node: &str,
) -> Result<Option<T>> {
    let p = path_of(dir, provider, node);
    match std::fs::read(&p) {
        Ok(b) => serde_json::from_slice(&b).map(Some).map_err(|e| {
            ProviderError::permanent(format!(
                "{provider}: the record {} does not parse: {e}",
                p.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ProviderError::transient(format!(
            "{provider}: cannot read {}: {e}",
            p.display()
        ))),
    }
}

/// Writes a record durably (temporary file, fsync, rename, fsync of the
/// directory) before the action it announces is sent.
pub fn store<T: Serialize>(dir: &Path, provider: &str, node: &str, rec: &T) -> Result<()> {
    use std::io::Write;
    let fail = |e: std::io::Error| {
        ProviderError::transient(format!(
            "{provider}: cannot write its record in {}: {e}",
            dir.display()
        ))
    };
    std::fs::create_dir_all(dir).map_err(fail)?;
    let p = path_of(dir, provider, node);
    let tmp = p.with_extension("json.tmp");
    let body = serde_json::to_vec_pretty(rec).map_err(|e| fail(std::io::Error::other(e)))?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(fail)?;
    f.write_all(&body).map_err(fail)?;
    f.sync_all().map_err(fail)?;
    std::fs::rename(&tmp, &p).map_err(fail)?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(fail)
}

pub fn remove(dir: &Path, provider: &str, node: &str) -> Result<()> {
    match std::fs::remove_file(path_of(dir, provider, node)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(ProviderError::transient(format!(
            "{provider}: cannot remove its record: {e}"
        ))),
    }
}

/// A machine id of a BMC provider: `<node>@<where>`; the node names the record.
pub fn node_of(id: &str) -> &str {
    id.split_once('@').map(|(n, _)| n).unwrap_or(id)
}

/// Milliseconds since the epoch.
pub fn now_ms() -> i64 {
    crate::store::now_ms()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_references_are_checked() {
        let ok = PasswordRef {
            file: Some("/etc/bootd/bmc".into()),
            ..Default::default()
        };
        assert!(ok.check("k").is_empty());
        let rel = PasswordRef {
            file: Some("bmc".into()),
            ..Default::default()
        };
        assert!(rel.check("k")[0].contains("absolute"));
        let two = PasswordRef {
            file: Some("/a".into()),
            env: Some("B".into()),
            ..Default::default()
        };
        assert!(two.check("k")[0].contains("exactly one"));
        let none = PasswordRef::default();
        assert!(none.check("k")[0].contains("exactly one"));
        let bad_env = PasswordRef {
            env: Some("HOME".into()),
            ..Default::default()
        };
        assert!(bad_env.check("k")[0].contains("BOOTD_BMC_"));
        let bad_cred = PasswordRef {
            credential: Some("bootd-api-tokens".into()),
            ..Default::default()
        };
        assert!(bad_cred.check("k")[0].contains("bmc-"));
    }

    #[test]
    fn password_files_are_read_only_inside_the_bmc_directory() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("bmc");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("r1"), "pw-1\n").unwrap();
        std::fs::write(d.path().join("ca.key"), "SECRET KEY").unwrap();
        std::os::unix::fs::symlink(d.path().join("ca.key"), dir.join("link")).unwrap();
        let file = |p: std::path::PathBuf| PasswordRef {
            file: Some(p),
            ..Default::default()
        };
        assert_eq!(
            file(dir.join("r1")).read("redfish", &dir).unwrap().0,
            "pw-1"
        );
        for outside in [
            d.path().join("ca.key"),
            dir.join("link"),
            dir.join("../ca.key"),
            "/dev/zero".into(),
        ] {
            let e = file(outside.clone())
                .read("redfish", &dir)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("is not a file in host.api.bmcFiles"),
                "{outside:?}: {e}"
            );
            assert!(!e.contains("SECRET"), "{e}");
        }
        std::fs::write(dir.join("big"), vec![b'x'; 5000]).unwrap();
        let e = file(dir.join("big"))
            .read("redfish", &dir)
            .unwrap_err()
            .to_string();
        assert!(e.contains("larger than 4096"), "{e}");
    }

    #[test]
    fn the_power_steps() {
        let t = std::time::Duration::from_secs(10);
        let started = PowerLog {
            power_on_at: Some(1_000),
            ..Default::default()
        };
        assert_eq!(started.next(false, 2_000, t), PowerStep::Wait);
        assert_eq!(started.next(true, 2_000, t), PowerStep::Wait);
        assert_eq!(
            started.next(true, 1_000 + POWER_ON_GRACE_MS + 1, t),
            PowerStep::PowerOnAgain
        );
        let mut d = started.clone();
        assert_eq!(d.begin_delete(5_000), DeleteStart::Begin);
        assert_eq!(d.begin_delete(6_000), DeleteStart::Underway);
        assert_eq!(d.next(false, 6_000, t), PowerStep::Wait);
        assert_eq!(d.next(false, 15_001, t), PowerStep::ForceOff);
        d.forced_off = true;
        assert_eq!(d.next(false, 20_000, t), PowerStep::Wait);
        assert_eq!(d.next(true, 20_000, t), PowerStep::Gone);
        assert_eq!(
            PowerLog::default().begin_delete(1),
            DeleteStart::NeverPowered
        );
        // The record's JSON keys are the same as when they stood in each record.
        assert_eq!(
            serde_json::to_value(&started).unwrap(),
            serde_json::json!({"powerOnAt": 1000, "deleteAt": null, "forcedOff": false})
        );
    }

    #[test]
    fn records_round_trip_and_go() {
        let d = tempfile::tempdir().unwrap();
        let dir = super::dir(d.path());
        assert_eq!(
            load::<serde_json::Value>(&dir, "redfish", "n").unwrap(),
            None
        );
        store(&dir, "redfish", "n", &serde_json::json!({"a": 1})).unwrap();
        assert_eq!(
            load::<serde_json::Value>(&dir, "redfish", "n").unwrap(),
            Some(serde_json::json!({"a": 1}))
        );
        remove(&dir, "redfish", "n").unwrap();
        remove(&dir, "redfish", "n").unwrap();
        assert_eq!(
            load::<serde_json::Value>(&dir, "redfish", "n").unwrap(),
            None
        );
        assert_eq!(node_of("n@https://bmc/redfish/v1/Systems/1"), "n");
    }
}
