//! One BMC's Redfish service: requests with its credentials, confined to
//! its own paths, and what the provider reads and sends (the system, its
//! NICs, reset actions).

use super::super::{Http, ProviderError, Result};
use http::{HeaderValue, Method};
use serde_json::{json, Value};

/// One BMC, with its credentials.
pub(super) struct Bmc {
    pub(super) http: Http,
    pub(super) origin: String,
    pub(super) auth: HeaderValue,
    pub(super) password: site::Secret<String>,
}

/// A system as read.
pub(super) struct System {
    pub(super) power: String,
    pub(super) etag: Option<HeaderValue>,
    pub(super) reset_target: String,
    pub(super) reset_types: Vec<String>,
    pub(super) nics: Option<String>,
    pub(super) override_target: Option<String>,
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
        let mut b = super::super::json_request(method, &url, body)
            .header(http::header::AUTHORIZATION, self.auth.clone())
            .header("OData-Version", "4.0");
        if let Some(e) = etag {
            b = b.header(http::header::IF_MATCH, e.clone());
        }
        let req = super::super::built(b.body(super::super::body_of(body)), what)?;
        let reply = self.http.send(req, what).await?;
        if reply.status == http::StatusCode::UNAUTHORIZED {
            return Err(ProviderError::permanent(format!(
                "{what}: HTTP 401: the BMC refused the username or password"
            )));
        }
        Ok(reply)
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
