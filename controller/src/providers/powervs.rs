//! IBM Power Virtual Server (pcloud v1), per `../shared/specs/powervs`:
//!
//! - IAM: `POST {iamUrl}/identity/token` (form: `grant_type=
//!   urn:ibm:params:oauth:grant-type:apikey`, `apikey`) → an access token,
//!   cached until a minute before it expires;
//! - every pcloud call carries `Authorization: Bearer <token>` and `CRN`;
//! - create: `POST /pcloud/v1/cloud-instances/{id}/pvm-instances`
//!   (`PVMInstanceCreate`: serverName, imageID, processors, memory, procType,
//!   sysType, networks with the node's IP, userData = base64 Ignition pointer
//!   config, at most 63 KiB; metadataService optional);
//! - find: the list of pvm-instances, by `serverName` (`<cluster>-<node>`);
//! - poll: `GET .../pvm-instances/{id}` until `status` is `ACTIVE`;
//! - delete: `DELETE .../pvm-instances/{id}` (404 and 410: already gone).

use super::{
    body_of, built, check, json_request, parse, Http, Machine, MachineState, NodeRequest,
    ProviderError, Result,
};
use base64::Engine;
use bytes::Bytes;
use http::Method;
use http_body_util::Full;
use percent_encoding::utf8_percent_encode;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use site::Secret;
use std::time::{Duration, Instant};

/// Power VS refuses user data above 63 KiB (`PVMInstanceCreate.userData`).
pub const MAX_USER_DATA: usize = 63 * 1024;

/// The provider part of a node created on Power VS.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InstanceSpec {
    #[serde(rename = "imageID")]
    pub image_id: String,
    pub processors: f64,
    /// GiB.
    pub memory: f64,
    /// `dedicated`, `shared` or `capped`.
    pub proc_type: String,
    /// e.g. `s922`, `e980`.
    pub sys_type: String,
    /// The Power VS network the node's IP (from the site) is on.
    #[serde(rename = "networkID")]
    pub network_id: String,
    /// Turn the instance's metadata service on.
    #[serde(default)]
    pub metadata_service: bool,
}

/// install-config's Power VS machine pool for `role` (`controlPlane` for
/// masters, the compute pool of that name otherwise), as spec keys.
pub fn pool_defaults(site: &site::Site, role: &str) -> Value {
    let mut d = serde_json::Map::new();
    let role = if role == site::ROLE_BOOTSTRAP {
        site::ROLE_MASTER
    } else {
        role
    };
    if let Some(p) = site
        .cluster
        .powervs
        .as_ref()
        .and_then(|p| p.pools.get(role))
    {
        if let Some(v) = &p.sys_type {
            d.insert("sysType".into(), json!(v));
        }
        if let Some(v) = &p.proc_type {
            d.insert("procType".into(), json!(v));
        }
        if let Some(v) = p.processors {
            d.insert("processors".into(), json!(v));
        }
        if let Some(v) = p.memory {
            d.insert("memory".into(), json!(v));
        }
    }
    Value::Object(d)
}

impl InstanceSpec {
    pub fn check(&self) -> Vec<String> {
        let mut p = Vec::new();
        for (k, v) in [
            ("imageID", &self.image_id),
            ("sysType", &self.sys_type),
            ("networkID", &self.network_id),
        ] {
            if v.is_empty() {
                p.push(format!("provider.powervs.{k}: required"));
            }
        }
        if !["dedicated", "shared", "capped"].contains(&self.proc_type.as_str()) {
            p.push(format!(
                "provider.powervs.procType: {:?} is not one of dedicated, shared, capped",
                self.proc_type
            ));
        }
        if self.processors.is_nan() || self.processors < 0.05 {
            p.push("provider.powervs.processors: at least 0.05".to_string());
        }
        if self.memory.is_nan() || self.memory < 2.0 {
            p.push("provider.powervs.memory: at least 2 (GiB)".to_string());
        }
        p
    }
}

/// The user data Power VS gets: base64 of the pointer config, refused
/// (with the sizes) above [`MAX_USER_DATA`].
pub fn user_data(pointer: &str) -> std::result::Result<String, String> {
    let b64 = base64::engine::general_purpose::STANDARD.encode(pointer);
    if b64.len() > MAX_USER_DATA {
        return Err(format!(
            "the Ignition pointer config is {} bytes base64-encoded; Power VS accepts at most {MAX_USER_DATA} (63 KiB)",
            b64.len()
        ));
    }
    Ok(b64)
}

pub fn server_name(node: &NodeRequest) -> String {
    format!("{}-{}", node.cluster, node.name)
}

/// `host.api.powervs` and a node's `provider.powervs`.
pub const REGISTRATION: super::Registration = super::Registration {
    name: "powervs",
    check_spec: |v| super::check_typed(v, InstanceSpec::check),
    check_userdata: |pointer| user_data(pointer).map(|_| ()),
    // An instance boots the image it was made from, with the pointer as user data.
    boot_kind: |_| super::BootKind::Image,
    defaults: pool_defaults,
    configure: |api, setup| {
        let p = api.powervs.as_ref()?;
        Some(super::read_secret(&p.api_key).map(|key| {
            let pv = PowerVs::new(
                setup.http.clone(),
                p.base_url.clone(),
                p.iam_url.clone(),
                p.cloud_instance_id.clone(),
                p.crn.clone(),
                key,
            );
            std::sync::Arc::new(pv) as std::sync::Arc<dyn super::Provider>
        }))
    },
};

impl super::Provider for PowerVs {
    forward_provider_calls!(PowerVs, "powervs", InstanceSpec);
}

#[derive(Debug)]
pub struct PowerVs {
    pub http: Http,
    pub base_url: String,
    pub iam_url: String,
    pub cloud_instance_id: String,
    pub crn: String,
    pub api_key: Secret<String>,
    token: tokio::sync::Mutex<Option<(Secret<String>, Instant)>>,
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    expires_in: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Instance {
    #[serde(rename = "pvmInstanceID")]
    pvm_instance_id: Option<String>,
    server_name: Option<String>,
    status: Option<String>,
    #[serde(default)]
    networks: Vec<InstanceNetwork>,
    #[serde(default)]
    addresses: Vec<InstanceNetwork>,
    fault: Option<Fault>,
    /// In a single instance's reply (`PVMInstance`), not in the list's.
    #[serde(default)]
    user_tags: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct InstanceNetwork {
    ip_address: Option<String>,
    #[serde(rename = "externalIP")]
    external_ip: Option<String>,
    mac_address: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Fault {
    message: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct InstanceList {
    #[serde(default)]
    pvm_instances: Vec<Instance>,
}

impl PowerVs {
    pub fn new(
        http: Http,
        base_url: String,
        iam_url: String,
        cloud_instance_id: String,
        crn: String,
        api_key: Secret<String>,
    ) -> PowerVs {
        PowerVs {
            http,
            base_url,
            iam_url,
            cloud_instance_id,
            crn,
            api_key,
            token: tokio::sync::Mutex::new(None),
        }
    }

    fn secrets<'a>(&'a self, token: &'a str) -> [&'a str; 2] {
        [self.api_key.expose().as_str(), token]
    }

    /// An IAM access token, from the cache while it has more than a minute left.
    async fn token(&self) -> Result<Secret<String>> {
        let mut cached = self.token.lock().await;
        if let Some((t, until)) = cached.as_ref() {
            if Instant::now() < *until {
                return Ok(t.clone());
            }
        }
        let what = "IBM IAM: token exchange";
        let form = format!(
            "grant_type={}&apikey={}",
            utf8_percent_encode("urn:ibm:params:oauth:grant-type:apikey", super::COMPONENT),
            utf8_percent_encode(self.api_key.expose(), super::COMPONENT)
        );
        let req = http::Request::builder()
            .method(Method::POST)
            .uri(format!("{}/identity/token", self.iam_url))
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(http::header::ACCEPT, "application/json")
            .body(Full::new(Bytes::from(form)));
        let reply = self.http.send(built(req, what)?, what).await?;
        check(&reply, what, &self.secrets(""))?;
        let t: TokenResponse = parse(&reply, what)?;
        if t.access_token.is_empty() {
            return Err(ProviderError::transient(format!(
                "{what}: empty access token"
            )));
        }
        let life = Duration::from_secs(t.expires_in.unwrap_or(3600));
        let until = Instant::now() + life.saturating_sub(Duration::from_secs(60));
        let tok = Secret(t.access_token);
        *cached = Some((tok.clone(), until));
        tracing::debug!(valid_for = ?life, "IBM IAM token obtained");
        Ok(tok)
    }

    /// Drops the cached token (after a 401: it was revoked or expired early).
    async fn forget_token(&self) {
        *self.token.lock().await = None;
    }

    fn instances_path(&self) -> String {
        format!(
            "/pcloud/v1/cloud-instances/{}/pvm-instances",
            utf8_percent_encode(&self.cloud_instance_id, super::COMPONENT)
        )
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        what: &str,
    ) -> Result<super::Reply> {
        let token = self.token().await?;
        let req = json_request(method, &format!("{}{path}", self.base_url), body)
            .header(
                http::header::AUTHORIZATION,
                format!("Bearer {}", token.expose()),
            )
            .header("CRN", self.crn.as_str())
            .body(body_of(body));
        let reply = self.http.send(built(req, what)?, what).await?;
        if reply.status == http::StatusCode::UNAUTHORIZED {
            self.forget_token().await;
            check(&reply, what, &self.secrets(token.expose()))?;
        }
        if reply.status.is_success()
            || reply.status == http::StatusCode::NOT_FOUND
            || reply.status == http::StatusCode::GONE
        {
            return Ok(reply);
        }
        check(&reply, what, &self.secrets(token.expose()))?;
        Ok(reply)
    }

    fn machine(i: Instance, what: &str) -> Result<Machine> {
        let id = i
            .pvm_instance_id
            .filter(|s| !s.is_empty())
            .ok_or_else(|| ProviderError::transient(format!("{what}: instance without an id")))?;
        let state = match i.status.as_deref().map(str::to_ascii_uppercase).as_deref() {
            Some("ACTIVE") => MachineState::Active,
            Some("DELETING") => MachineState::Deleting,
            Some("ERROR") => MachineState::Failed(
                i.fault
                    .and_then(|f| f.message)
                    .map(|m| format!("instance in ERROR: {m}"))
                    .unwrap_or_else(|| "instance in ERROR".into()),
            ),
            Some(s) => MachineState::Pending(s.to_ascii_lowercase()),
            None => MachineState::Pending("unknown".into()),
        };
        let nets = i.networks.into_iter().chain(i.addresses);
        let mut addresses = Vec::new();
        let mut macs = Vec::new();
        for n in nets {
            addresses.extend(
                n.ip_address
                    .into_iter()
                    .chain(n.external_ip)
                    .filter(|a| !a.is_empty()),
            );
            macs.extend(n.mac_address.filter(|m| !m.is_empty()));
        }
        addresses.dedup();
        macs.dedup();
        Ok(Machine {
            network_config: None,
            id,
            state,
            addresses,
            macs,
        })
    }

    pub async fn find(&self, node: &NodeRequest) -> Result<Option<Machine>> {
        let what = "Power VS: list instances";
        let reply = self
            .call(Method::GET, &self.instances_path(), None, what)
            .await?;
        if !reply.status.is_success() {
            return Err(ProviderError::permanent(format!(
                "{what}: HTTP {} (is cloudInstanceId right?)",
                reply.status.as_u16()
            )));
        }
        let list: InstanceList = parse(&reply, what)?;
        let name = server_name(node);
        let mut found: Vec<Machine> = Vec::new();
        for i in list
            .pvm_instances
            .into_iter()
            .filter(|i| i.server_name.as_deref() == Some(name.as_str()))
        {
            found.push(Self::machine(i, what)?);
        }
        if found.len() > 1 {
            // The list has no tags: each instance's own reply says which
            // one this create's intent made (module `fence`).
            let mut mine = None;
            if let Some(tag) = node.intent_tag() {
                for (n, m) in found.iter().enumerate() {
                    if self.user_tags(&m.id).await?.contains(&tag) {
                        mine = Some(n);
                        break;
                    }
                }
            }
            let ids: Vec<&str> = found.iter().map(|m| m.id.as_str()).collect();
            tracing::warn!(node = %node.name, instances = ?ids, "more than one Power VS instance has this node's name; using its create intent's (else the first): delete the others");
            if let Some(n) = mine {
                return Ok(Some(found.swap_remove(n)));
            }
        }
        Ok(found.into_iter().next())
    }

    /// An instance's `userTags` (`GET …/pvm-instances/{id}`).
    async fn user_tags(&self, id: &str) -> Result<Vec<String>> {
        let what = "Power VS: get instance";
        Ok(self
            .instance(id, what)
            .await?
            .map(|i| i.user_tags)
            .unwrap_or_default())
    }

    /// `GET …/pvm-instances/{id}`; `None` when it does not answer 2xx.
    async fn instance(&self, id: &str, what: &str) -> Result<Option<Instance>> {
        let path = format!(
            "{}/{}",
            self.instances_path(),
            utf8_percent_encode(id, super::COMPONENT)
        );
        let reply = self.call(Method::GET, &path, None, what).await?;
        if !reply.status.is_success() {
            return Ok(None);
        }
        parse(&reply, what).map(Some)
    }

    /// The `PVMInstanceCreate` body for `node`.
    pub fn create_body(
        node: &NodeRequest,
        spec: &InstanceSpec,
    ) -> std::result::Result<Value, String> {
        let tags: Vec<String> =
            std::iter::once(format!("kubernetes.io/cluster/{}:owned", node.cluster))
                .chain(node.intent_tag())
                .collect();
        let mut body = json!({
            "serverName": server_name(node),
            "imageID": spec.image_id,
            "processors": spec.processors,
            "memory": spec.memory,
            "procType": spec.proc_type,
            "sysType": spec.sys_type,
            // Without the node's address, Power VS assigns one in the network.
            "networks": [ if node.ip.is_unspecified() {
                json!({ "networkID": spec.network_id })
            } else {
                json!({ "networkID": spec.network_id, "ipAddress": node.ip.to_string() })
            } ],
            "userData": user_data(node.userdata.expose())?,
            "userTags": tags,
        });
        if spec.metadata_service {
            body["metadataService"] = json!({ "enabled": true });
        }
        Ok(body)
    }

    pub async fn create(&self, node: &NodeRequest, spec: &InstanceSpec) -> Result<Machine> {
        let what = "Power VS: create instance";
        let body = Self::create_body(node, spec).map_err(ProviderError::permanent)?;
        let reply = self
            .call(Method::POST, &self.instances_path(), Some(&body), what)
            .await?;
        if !reply.status.is_success() {
            return Err(ProviderError::permanent(format!(
                "{what}: HTTP {}",
                reply.status.as_u16()
            )));
        }
        let list: Vec<Instance> = parse(&reply, what)?;
        let first = list.into_iter().next().ok_or_else(|| {
            ProviderError::transient(format!("{what}: empty instance list in the reply"))
        })?;
        Self::machine(first, what)
    }

    pub async fn get(&self, id: &str) -> Result<Option<Machine>> {
        let what = "Power VS: get instance";
        match self.instance(id, what).await? {
            Some(i) => Self::machine(i, what).map(Some),
            None => Ok(None),
        }
    }

    pub async fn delete(&self, id: &str) -> Result<()> {
        let what = "Power VS: delete instance";
        let path = format!(
            "{}/{}",
            self.instances_path(),
            utf8_percent_encode(id, super::COMPONENT)
        );
        self.call(Method::DELETE, &path, None, what)
            .await
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_data_limit_is_63_kib_of_base64() {
        let small = user_data("{\"ignition\":{\"version\":\"3.2.0\"}}").unwrap();
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(small)
                .unwrap(),
            b"{\"ignition\":{\"version\":\"3.2.0\"}}"
        );
        // 48 KiB of text is 64 KiB of base64: refused, with both sizes.
        let e = user_data(&"x".repeat(48 * 1024)).unwrap_err();
        assert!(e.contains("65536 bytes") && e.contains("64512"), "{e}");
        assert!(user_data(&"x".repeat(MAX_USER_DATA / 4 * 3)).is_ok());
    }

    #[test]
    fn spec_problems() {
        let s = InstanceSpec {
            image_id: String::new(),
            processors: 0.0,
            memory: 1.0,
            proc_type: "turbo".into(),
            sys_type: "s922".into(),
            network_id: "n".into(),
            metadata_service: false,
        };
        let p = s.check().join("\n");
        assert!(
            p.contains("imageID: required")
                && p.contains("turbo")
                && p.contains("processors")
                && p.contains("memory"),
            "{p}"
        );
    }
}
