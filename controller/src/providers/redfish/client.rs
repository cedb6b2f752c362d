//! One BMC's Redfish service: requests with its credentials, confined to
//! its own paths, and what the provider reads and sends (the system, its
//! NICs, reset actions).

use super::super::{Http, ProviderError, Result};
use http::{HeaderValue, Method, StatusCode};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One BMC, with its credentials.
pub(super) struct Bmc {
    pub(super) http: Http,
    pub(super) origin: String,
    /// `Basic …` of the username and password.
    pub(super) auth: HeaderValue,
    pub(super) username: String,
    pub(super) password: site::Secret<String>,
    /// Session authentication (`auth: auto|session`), with the provider's
    /// sessions, one per BMC and username, reused across operations.
    pub(super) sessions: Option<(Auth, Arc<Sessions>)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Auth {
    /// A session where the service root links a SessionService, else Basic.
    Auto,
    /// A session; a BMC without SessionService is an error.
    Session,
}

/// An open Redfish session: its token and where to delete it.
pub(super) struct Session {
    token: HeaderValue,
    location: String,
    last_used: Instant,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("Session")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

/// Open sessions by (BMC origin, username); `None`: that BMC has no
/// SessionService (Basic is used).
pub(super) type Sessions = Mutex<HashMap<(String, String), Option<Session>>>;

/// A session unused this long is deleted (BMCs hold a few at once: an
/// idle one kept open takes the place of an operator's console).
pub(super) const SESSION_IDLE: Duration = Duration::from_secs(300);

/// A system as read.
pub(super) struct System {
    pub(super) power: String,
    pub(super) etag: Option<HeaderValue>,
    pub(super) reset_target: String,
    pub(super) reset_types: Vec<String>,
    pub(super) nics: Option<String>,
    pub(super) override_target: Option<String>,
    /// `BootSourceOverrideTarget@Redfish.AllowableValues`, when listed.
    pub(super) targets: Option<Vec<String>>,
    /// `BootSourceOverrideEnabled@Redfish.AllowableValues`, when listed.
    pub(super) enabled_values: Option<Vec<String>>,
}

impl Bmc {
    pub(super) fn secrets(&self) -> [&str; 1] {
        [self.password.0.as_str()]
    }

    pub(super) async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        etag: Option<&HeaderValue>,
        what: &str,
    ) -> Result<super::super::Reply> {
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
        let mut retried = false;
        loop {
            let token = self.token().await?;
            let mut b = super::super::json_request(method.clone(), &url, body)
                .header("OData-Version", "4.0");
            b = match &token {
                Some(t) => b.header("X-Auth-Token", t.clone()),
                None => b.header(http::header::AUTHORIZATION, self.auth.clone()),
            };
            if let Some(e) = etag {
                b = b.header(http::header::IF_MATCH, e.clone());
            }
            let req = super::super::built(b.body(super::super::body_of(body)), what)?;
            let reply = self.http.send(req, what).await?;
            if reply.status == StatusCode::UNAUTHORIZED {
                // A session the BMC ended (timed out, or closed by someone):
                // log in again, once.
                if token.is_some() && !retried {
                    self.forget_session();
                    retried = true;
                    continue;
                }
                return Err(ProviderError::permanent(format!(
                    "{what}: HTTP 401: the BMC refused the username or password"
                )));
            }
            return Ok(reply);
        }
    }

    fn key(&self) -> (String, String) {
        (self.origin.clone(), self.username.clone())
    }

    /// The session token to send, logging in when there is none; `None`:
    /// Basic authentication.
    async fn token(&self) -> Result<Option<HeaderValue>> {
        let Some((mode, sessions)) = &self.sessions else {
            return Ok(None);
        };
        if let Some(known) = sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&self.key())
        {
            return Ok(known.as_mut().map(|s| {
                s.last_used = Instant::now();
                s.token.clone()
            }));
        }
        let opened = self.login(*mode).await?;
        let token = opened.as_ref().map(|s| s.token.clone());
        sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(self.key(), opened);
        Ok(token)
    }

    fn forget_session(&self) {
        if let Some((_, sessions)) = &self.sessions {
            sessions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&self.key());
        }
    }

    /// DMTF's login: the service root (readable without credentials)
    /// links the sessions collection; a POST of the credentials there
    /// answers the token in `X-Auth-Token` and the session in `Location`.
    async fn login(&self, mode: Auth) -> Result<Option<Session>> {
        let what = "redfish: open a session";
        let root_req = super::super::built(
            super::super::json_request(Method::GET, &format!("{}/redfish/v1", self.origin), None)
                .header("OData-Version", "4.0")
                .body(super::super::body_of(None)),
            what,
        )?;
        let root = self.http.send(root_req, what).await?;
        // A BMC that is busy now must not be taken for one without
        // sessions for good: try again later.
        if root.status.is_server_error() || root.status == StatusCode::TOO_MANY_REQUESTS {
            super::super::check(&root, "redfish: read the service root", &self.secrets())?;
        }
        let link = if root.status.is_success() {
            super::super::parse::<Value>(&root, what)
                .ok()
                .and_then(|v| {
                    v["Links"]["Sessions"]["@odata.id"]
                        .as_str()
                        .map(str::to_string)
                })
        } else {
            None
        };
        let Some(link) = link.filter(|l| l.starts_with('/') && !l.starts_with("//")) else {
            return match mode {
                Auth::Auto => Ok(None),
                Auth::Session => Err(ProviderError::permanent(
                    "redfish: auth session: the BMC's service root links no SessionService",
                )),
            };
        };
        let body = json!({ "UserName": self.username, "Password": self.password.0 });
        let req = super::super::built(
            super::super::json_request(
                Method::POST,
                &format!("{}{link}", self.origin),
                Some(&body),
            )
            .header("OData-Version", "4.0")
            .body(super::super::body_of(Some(&body))),
            what,
        )?;
        let reply = self.http.send(req, what).await?;
        if reply.status == StatusCode::UNAUTHORIZED || reply.status == StatusCode::FORBIDDEN {
            return Err(ProviderError::permanent(format!(
                "{what}: HTTP {}: the BMC refused the username or password",
                reply.status.as_u16()
            )));
        }
        super::super::check(&reply, what, &self.secrets())?;
        let mut token = reply.headers.get("x-auth-token").cloned().ok_or_else(|| {
            ProviderError::permanent(format!("{what}: the BMC answered no X-Auth-Token"))
        })?;
        token.set_sensitive(true);
        let location = reply
            .headers
            .get(http::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .map(str::to_string)
            .or_else(|| {
                super::super::parse::<Value>(&reply, what)
                    .ok()
                    .and_then(|v| v["@odata.id"].as_str().map(str::to_string))
            })
            .unwrap_or_default();
        // A Location may be absolute; keep the path on this BMC only.
        let location = location
            .strip_prefix(&self.origin)
            .map(str::to_string)
            .unwrap_or(location);
        Ok(Some(Session {
            token,
            location,
            last_used: Instant::now(),
        }))
    }

    /// PATCH with the resource's ETag (`If-Match`, which BMCs such as HPE
    /// iLO require), as BMCs differ on a refusal with 412: with the ETag
    /// still current (a BMC whose conditional PATCH is broken), it goes
    /// again without If-Match; with a changed ETag (a real concurrent
    /// change), again with the new one. At most one retry.
    pub(super) async fn patch(
        &self,
        path: &str,
        body: &Value,
        etag: Option<&HeaderValue>,
        what: &str,
    ) -> Result<()> {
        let reply = self
            .call(Method::PATCH, path, Some(body), etag, what)
            .await?;
        let again = match reply.status {
            StatusCode::PRECONDITION_FAILED if etag.is_some() => {
                let (_, now) = self.get(path, what).await?;
                if now.as_ref() == etag {
                    tracing::warn!(bmc = %self.origin, path, "the BMC refused If-Match with the current ETag: PATCH again without it");
                    Some(None)
                } else {
                    Some(now)
                }
            }
            _ => None,
        };
        match again {
            None => super::super::check(&reply, what, &self.secrets()),
            Some(e) => self.send(Method::PATCH, path, body, e.as_ref(), what).await,
        }
    }

    /// `None`: 404.
    pub(super) async fn get_opt(
        &self,
        path: &str,
        what: &str,
    ) -> Result<Option<(Value, Option<HeaderValue>)>> {
        let reply = self.call(Method::GET, path, None, None, what).await?;
        if reply.status == http::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        super::super::check(&reply, what, &self.secrets())?;
        let etag = reply.headers.get(http::header::ETAG).cloned();
        Ok(Some((super::super::parse(&reply, what)?, etag)))
    }

    pub(super) async fn get(&self, path: &str, what: &str) -> Result<(Value, Option<HeaderValue>)> {
        self.get_opt(path, what).await?.ok_or_else(|| {
            ProviderError::permanent(format!(
                "{what}: HTTP 404: {path} does not exist on the BMC"
            ))
        })
    }

    pub(super) async fn send(
        &self,
        method: Method,
        path: &str,
        body: &Value,
        etag: Option<&HeaderValue>,
        what: &str,
    ) -> Result<()> {
        let reply = self.call(method, path, Some(body), etag, what).await?;
        super::super::check(&reply, what, &self.secrets())
    }

    pub(super) async fn system(&self, path: &str) -> Result<System> {
        self.system_opt(path).await?.ok_or_else(|| {
            ProviderError::permanent(format!(
                "redfish: read the system: HTTP 404: {path} does not exist on the BMC"
            ))
        })
    }

    /// `None`: the BMC has no such system.
    pub(super) async fn system_opt(&self, path: &str) -> Result<Option<System>> {
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
            targets: strings(&v["Boot"]["BootSourceOverrideTarget@Redfish.AllowableValues"]),
            enabled_values: strings(
                &v["Boot"]["BootSourceOverrideEnabled@Redfish.AllowableValues"],
            ),
        }))
    }

    /// The system a spec names.
    pub(super) async fn resolve(&self, path: &str, selector: Option<&str>) -> Result<String> {
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
    pub(super) async fn macs(&self, nics: Option<&str>) -> Result<Vec<String>> {
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
    pub(super) async fn reset(&self, s: &System, want: &str) -> Result<Result<()>> {
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
        Ok(super::super::check(&reply, &what, &self.secrets()))
    }
}

/// A JSON array of strings; `None` when absent.
fn strings(v: &Value) -> Option<Vec<String>> {
    v.as_array().map(|a| {
        a.iter()
            .filter_map(|t| t.as_str().map(str::to_string))
            .collect()
    })
}

/// Deletes the sessions unused for [`SESSION_IDLE`] (all of them with
/// `all`), each on its BMC; a failure is only logged (the BMC ends it at
/// its own timeout).
pub(super) async fn close_idle(
    sessions: &Sessions,
    clients: impl Fn(&str) -> Option<Http>,
    all: bool,
) {
    let idle: Vec<((String, String), Session)> = {
        let mut m = sessions.lock().unwrap_or_else(|p| p.into_inner());
        let keys: Vec<(String, String)> = m
            .iter()
            .filter(|(_, s)| {
                s.as_ref()
                    .is_some_and(|s| all || s.last_used.elapsed() >= SESSION_IDLE)
            })
            .map(|(k, _)| k.clone())
            .collect();
        keys.into_iter()
            .filter_map(|k| m.remove(&k).flatten().map(|s| (k, s)))
            .collect()
    };
    for ((origin, _), s) in idle {
        let Some(http) = clients(&origin) else {
            continue;
        };
        if s.location.is_empty() {
            continue;
        }
        let what = "redfish: close the session";
        let req =
            super::super::json_request(Method::DELETE, &format!("{origin}{}", s.location), None)
                .header("X-Auth-Token", s.token.clone())
                .header("OData-Version", "4.0")
                .body(super::super::body_of(None));
        let Ok(req) = super::super::built(req, what) else {
            continue;
        };
        match http.send(req, what).await {
            Ok(r) if r.status.is_success() || r.status == StatusCode::NOT_FOUND => {}
            Ok(r) => {
                tracing::warn!(bmc = %origin, status = r.status.as_u16(), "the BMC did not close the session")
            }
            Err(e) => tracing::warn!(bmc = %origin, error = %e, "the session could not be closed"),
        }
    }
}
