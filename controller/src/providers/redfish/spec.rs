//! A node's `provider.redfish` section and its checks.

use super::super::bmc::PasswordRef;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

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
    /// `pxe` (default), `uefiHttp`, or `virtualMedia` (bootd's ISO for the
    /// node, inserted as a CD).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot: Option<String>,
    /// `UEFI` or `Legacy`; default from the node's `firmware` hint, else
    /// left as the BMC has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// `auto` (default: a session where the BMC serves SessionService,
    /// else Basic), `session`, or `basic`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<String>,
}

impl RedfishSpec {
    /// Whether the node boots bootd's ISO from the BMC's virtual media.
    pub fn virtual_media(&self) -> bool {
        self.boot.as_deref() == Some("virtualMedia")
    }

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
            None | Some("pxe" | "uefiHttp" | "virtualMedia") => {}
            Some(b) => p.push(format!(
                "{k}.boot: {b:?}: want pxe, uefiHttp or virtualMedia"
            )),
        }
        match self.mode.as_deref() {
            None | Some("UEFI" | "Legacy") => {}
            Some(m) => p.push(format!("{k}.mode: {m:?}: want UEFI or Legacy")),
        }
        match self.auth.as_deref() {
            None | Some("auto" | "session" | "basic") => {}
            Some(a) => p.push(format!("{k}.auth: {a:?}: want auto, session or basic")),
        }
        if self.boot.as_deref() == Some("uefiHttp") && self.mode.as_deref() == Some("Legacy") {
            p.push(format!("{k}: boot uefiHttp needs mode UEFI"));
        }
        p
    }
}

/// `(origin, system path)`: `https://h:p` and `/redfish/v1/Systems/x`, or
/// an empty path for a service-root URL.
pub(super) fn split_url(url: &str) -> std::result::Result<(String, String), String> {
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
