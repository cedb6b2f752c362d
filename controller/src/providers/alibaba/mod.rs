//! Alibaba Cloud ECS (RPC API `2014-05-26`, signed with ACS3-HMAC-SHA256,
//! [`sign`]), per the API metadata in `../shared/specs/alibaba-ecs`:
//!
//! - create: `RunInstances` in the account's region, the node's zone (and
//!   that zone's vSwitch), image, instance type, security group and system
//!   disk; `InstanceName` and `HostName` the node's; `UserData` the Ignition
//!   pointer config (base64, at most 32 KiB, checked before the call); tags
//!   `kubernetes.io/cluster/<infraId>: owned`, `openshift: ISV Integration`,
//!   `bootd-node: <name>` and the user's; `ClientToken` derived from the
//!   node's create intent, so a retried or repeated create (after a crash
//!   between the call and its reply) never makes a second instance;
//! - find: `DescribeInstances` by the cluster and node tags and the
//!   instance name, every page (`NextToken`);
//! - get: `DescribeInstances` by id; `Running` is Active, `Pending`,
//!   `Starting`, `Stopping`, `Stopped` are not (yet);
//! - delete: `DeleteInstance` with `Force` (an instance already gone is
//!   deleted);
//! - [`Alibaba::owned`]: every instance the cluster's ownership tag marks
//!   (what `bootd cluster destroy` deletes).
//!
//! Errors: `Throttling.*`, `ServiceUnavailable`, `InternalError` and 5xx are
//! transient (the reconciler backs off, honouring `Retry-After`); anything
//! else (`InvalidParameter`, `Forbidden.RAM`, `InvalidAccessKeyId.NotFound`,
//! `SignatureDoesNotMatch`…) is permanent, shown with the API's code,
//! `RequestId` and message, the AccessKey and token removed.

pub mod sign;
pub mod spec;

use super::{
    built, parse, redact, Http, Machine, MachineState, NodeRequest, ProviderError, Result,
};
use base64::Engine as _;
use bytes::Bytes;
use http::Method;
use http_body_util::Full;
use serde_json::Value;
use sha2::{Digest, Sha256};
use site::Secret;
pub use spec::InstanceSpec;

const NAME: &str = "alibaba";
const VERSION: &str = "2014-05-26";
const FORM: &str = "application/x-www-form-urlencoded";
/// ECS's limit on `UserData`, base64-encoded as sent (the stricter reading
/// of its documentation, which also says "before encoding").
pub const MAX_USERDATA: usize = 32 * 1024;
/// Pages read when listing (100 instances each).
const MAX_PAGES: usize = 50;

/// `host.api.alibaba` and a node's `provider.alibaba`.
pub const REGISTRATION: super::Registration = super::Registration {
    name: NAME,
    check_spec: |v| super::check_typed(v, InstanceSpec::check),
    check_userdata: |pointer| {
        let n = base64::engine::general_purpose::STANDARD
            .encode(pointer)
            .len();
        if n > MAX_USERDATA {
            Err(format!(
                "the Ignition pointer config is {n} bytes base64-encoded; ECS user data holds {MAX_USERDATA}"
            ))
        } else {
            Ok(())
        }
    },
    boot_kind: |_| super::BootKind::Image,
    defaults: spec::defaults,
    configure: |api, setup| {
        let a = api.alibaba.as_ref()?;
        Some(
            Alibaba::new(setup.http.clone(), a)
                .map(|p| std::sync::Arc::new(p) as std::sync::Arc<dyn super::Provider>),
        )
    },
};

#[derive(Debug)]
pub struct Alibaba {
    http: Http,
    /// `https://ecs.<region>.aliyuncs.com` (no trailing slash).
    endpoint: String,
    /// The endpoint's authority, signed as `host`.
    host: String,
    account: site::AlibabaAccount,
    access_key_id: Secret<String>,
    access_key_secret: Secret<String>,
    security_token: Option<Secret<String>>,
}

/// The tag that marks an instance as the cluster's (what destroy looks for).
pub fn cluster_tag(infra_id: &str) -> (String, String) {
    (format!("kubernetes.io/cluster/{infra_id}"), "owned".into())
}

/// The tag that finds a node's instance.
pub fn node_tag(node: &str) -> (String, String) {
    ("bootd-node".into(), node.into())
}

/// The `ClientToken` of a node's create: the same intent always sends the
/// same token (ECS then returns the instance it made, not a second one); a
/// new node of the same name has a new intent, so a new token.
pub fn client_token(infra_id: &str, node: &str, intent: &str) -> String {
    let d = Sha256::digest(format!("{infra_id}\0{node}\0{intent}").as_bytes());
    let hex: String = d[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("bootd-{hex}")
}

/// The zone a node without `zoneId` goes to: one of `zones`, by its name.
pub fn zone_for(node: &str, zones: &[String]) -> Option<String> {
    if zones.is_empty() {
        return None;
    }
    let d = Sha256::digest(node.as_bytes());
    let i = u64::from_be_bytes(d[..8].try_into().expect("8 bytes")) % zones.len() as u64;
    zones.get(i as usize).cloned()
}

fn push_tags(p: &mut Vec<(String, String)>, tags: &[(String, String)]) {
    for (i, (k, v)) in tags.iter().enumerate() {
        p.push((format!("Tag.{}.Key", i + 1), k.clone()));
        p.push((format!("Tag.{}.Value", i + 1), v.clone()));
    }
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// An `Instance` of `DescribeInstances` as a machine.
fn machine(i: &Value) -> Option<Machine> {
    let id = i["InstanceId"].as_str().filter(|s| !s.is_empty())?;
    let state = match i["Status"].as_str().unwrap_or("Unknown") {
        "Running" => MachineState::Active,
        s => MachineState::Pending(s.to_string()),
    };
    let mut addresses = strs(&i["VpcAttributes"]["PrivateIpAddress"]["IpAddress"]);
    addresses.extend(strs(&i["PublicIpAddress"]["IpAddress"]));
    if let Some(e) = i["EipAddress"]["IpAddress"]
        .as_str()
        .filter(|e| !e.is_empty())
    {
        addresses.push(e.to_string());
    }
    // IPv6 addresses are per network interface (DescribeInstances'
    // NetworkInterfaces.NetworkInterface[].Ipv6Sets.Ipv6Set[].Ipv6Address).
    for nic in i["NetworkInterfaces"]["NetworkInterface"]
        .as_array()
        .into_iter()
        .flatten()
    {
        for v6 in nic["Ipv6Sets"]["Ipv6Set"].as_array().into_iter().flatten() {
            if let Some(a) = v6["Ipv6Address"].as_str().filter(|a| !a.is_empty()) {
                addresses.push(a.to_string());
            }
        }
    }
    let macs = i["NetworkInterfaces"]["NetworkInterface"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n["MacAddress"].as_str().map(|m| m.to_ascii_lowercase()))
        .collect();
    Some(Machine {
        network_config: None,
        id: id.to_string(),
        state,
        addresses,
        macs,
    })
}

impl Alibaba {
    pub fn new(http: Http, a: &site::AlibabaAccount) -> std::result::Result<Alibaba, String> {
        let uri: http::Uri = a
            .endpoint
            .parse()
            .map_err(|_| format!("host.api.alibaba.endpoint {:?} is not a URL", a.endpoint))?;
        let host = uri
            .authority()
            .map(|x| x.as_str().to_string())
            .ok_or_else(|| format!("host.api.alibaba.endpoint {:?} has no host", a.endpoint))?;
        Ok(Alibaba {
            http,
            endpoint: a.endpoint.trim_end_matches('/').to_string(),
            host,
            account: a.clone(),
            access_key_id: super::read_secret(&a.access_key_id)?,
            access_key_secret: super::read_secret(&a.access_key_secret)?,
            security_token: match &a.security_token {
                Some(t) => Some(super::read_secret(t)?),
                None => None,
            },
        })
    }

    fn secrets(&self) -> Vec<&str> {
        let mut v = vec![
            self.access_key_secret.expose().as_str(),
            self.access_key_id.expose().as_str(),
        ];
        if let Some(t) = &self.security_token {
            v.push(t.expose().as_str());
        }
        v
    }

    fn infra_id<'a>(&'a self, node: &'a NodeRequest) -> &'a str {
        self.account.infra_id.as_deref().unwrap_or(&node.cluster)
    }

    /// One signed RPC call, its parameters in a form body.
    async fn call(&self, action: &str, params: &[(String, String)]) -> Result<Value> {
        let what = format!("alibaba: {action}");
        let body = params
            .iter()
            .map(|(k, v)| format!("{}={}", sign::encode(k), sign::encode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let date = time::OffsetDateTime::now_utc()
            .format(time::macros::format_description!(
                "[year]-[month]-[day]T[hour]:[minute]:[second]Z"
            ))
            .map_err(|e| ProviderError::permanent(format!("{what}: the date: {e}")))?;
        let nonce: String = (0..16)
            .map(|_| format!("{:02x}", rand::random::<u8>()))
            .collect();
        let req = sign::Request {
            method: "POST",
            host: &self.host,
            action,
            version: VERSION,
            date: &date,
            nonce: &nonce,
            query: &[],
            body: body.as_bytes(),
            content_type: Some(FORM),
            security_token: self.security_token.as_ref().map(|t| t.expose().as_str()),
        };
        let (headers, _) = sign::sign(
            &req,
            self.access_key_id.expose(),
            self.access_key_secret.expose(),
        );
        let mut b = http::Request::builder()
            .method(Method::POST)
            .uri(format!("{}/", self.endpoint))
            .header(http::header::ACCEPT, "application/json");
        for (k, v) in headers {
            let mut hv = http::HeaderValue::from_str(&v).map_err(|_| {
                ProviderError::permanent(format!("{what}: a header is not printable"))
            })?;
            if k == "authorization" || k == "x-acs-security-token" {
                hv.set_sensitive(true);
            }
            b = b.header(k.as_str(), hv);
        }
        let req = built(b.body(Full::new(Bytes::from(body))), &what)?;
        let reply = self.http.send(req, &what).await?;
        if reply.status.is_success() {
            return parse(&reply, &what);
        }
        Err(self.error(&reply, &what))
    }

    /// An error reply as a [`ProviderError`], safe to show.
    fn error(&self, reply: &super::Reply, what: &str) -> ProviderError {
        let v: Value = serde_json::from_slice(&reply.body).unwrap_or_default();
        let secrets = self.secrets();
        let code = redact(v["Code"].as_str().unwrap_or("unknown"), &secrets);
        let id = redact(v["RequestId"].as_str().unwrap_or("-"), &secrets);
        let msg: String = redact(v["Message"].as_str().unwrap_or(""), &secrets)
            .chars()
            .take(300)
            .collect();
        tracing::warn!(what, status = reply.status.as_u16(), code = %code, request_id = %id, "Alibaba Cloud refused a request");
        let text = format!(
            "{what}: {code} (HTTP {}, RequestId {id}): {msg}",
            reply.status.as_u16()
        );
        let transient = code.starts_with("Throttling")
            || code == "ServiceUnavailable"
            || code.starts_with("InternalError")
            || code == "UnknownError"
            || reply.status.is_server_error()
            || reply.status == http::StatusCode::TOO_MANY_REQUESTS;
        if transient {
            ProviderError::Transient {
                what: text,
                retry_after: super::retry_after(&reply.headers),
            }
        } else {
            ProviderError::permanent(text)
        }
    }

    /// Every instance `DescribeInstances` lists with `filter`, all pages.
    async fn describe(&self, filter: &[(String, String)]) -> Result<Vec<Value>> {
        let mut out = Vec::new();
        let mut token = String::new();
        for _ in 0..MAX_PAGES {
            let mut p = vec![
                ("RegionId".to_string(), self.account.region_id.clone()),
                ("MaxResults".to_string(), "100".to_string()),
            ];
            p.extend(filter.iter().cloned());
            if !token.is_empty() {
                p.push(("NextToken".into(), token.clone()));
            }
            let v = self.call("DescribeInstances", &p).await?;
            out.extend(
                v["Instances"]["Instance"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default(),
            );
            token = v["NextToken"].as_str().unwrap_or_default().to_string();
            if token.is_empty() {
                return Ok(out);
            }
        }
        Err(ProviderError::transient(format!(
            "alibaba: DescribeInstances: more than {MAX_PAGES} pages"
        )))
    }

    pub async fn find(&self, node: &NodeRequest) -> Result<Option<Machine>> {
        let mut f = vec![("InstanceName".to_string(), node.name.clone())];
        push_tags(
            &mut f,
            &[cluster_tag(self.infra_id(node)), node_tag(&node.name)],
        );
        let found: Vec<Machine> = self
            .describe(&f)
            .await?
            .iter()
            .filter_map(machine)
            .collect();
        if found.len() > 1 {
            tracing::warn!(node = %node.name, instances = found.len(), "more than one ECS instance carries this node's tags; using the first");
        }
        Ok(found.into_iter().next())
    }

    /// The `RunInstances` parameters for `node` (`intent`: its create intent).
    pub fn run_params(
        &self,
        node: &NodeRequest,
        spec: &InstanceSpec,
    ) -> Result<Vec<(String, String)>> {
        let a = &self.account;
        let zone = match &spec.zone_id {
            Some(z) => z.clone(),
            None => zone_for(&node.name, &a.zones).ok_or_else(|| {
                ProviderError::permanent("alibaba: no zone (host.api.alibaba.zones)")
            })?,
        };
        let vswitch = a.v_switches.get(&zone).ok_or_else(|| {
            ProviderError::permanent(format!(
                "alibaba: zone {zone} is not one of host.api.alibaba.zones (no vSwitch for it)"
            ))
        })?;
        let (Some(image), Some(itype)) = (&spec.image_id, &spec.instance_type) else {
            return Err(ProviderError::permanent(
                "alibaba: the node has no imageId or instanceType",
            ));
        };
        let disk = spec.system_disk.clone().unwrap_or(spec::Disk {
            category: a.system_disk.category.clone(),
            size: a.system_disk.size_gib,
            performance_level: a.system_disk.performance_level.clone(),
        });
        let userdata = base64::engine::general_purpose::STANDARD.encode(node.userdata.expose());
        if userdata.len() > MAX_USERDATA {
            return Err(ProviderError::permanent(format!(
                "alibaba: the Ignition pointer config is {} bytes base64-encoded; ECS user data holds {MAX_USERDATA}",
                userdata.len()
            )));
        }
        let s = |k: &str, v: &str| (k.to_string(), v.to_string());
        let mut p = vec![
            s("RegionId", &a.region_id),
            s("ZoneId", &zone),
            s("ImageId", image),
            s("InstanceType", itype),
            s("SecurityGroupId", &a.security_group_id),
            s("VSwitchId", vswitch),
            s("InstanceName", &node.name),
            s("HostName", &node.name),
            s(
                "Description",
                &format!("bootd node {} of cluster {}", node.name, node.cluster),
            ),
            s("SystemDisk.Category", &disk.category),
            s("SystemDisk.Size", &disk.size.to_string()),
            s("UserData", &userdata),
            s(
                "ClientToken",
                &client_token(self.infra_id(node), &node.name, &node.intent),
            ),
            s("Amount", "1"),
        ];
        if let Some(pl) = &disk.performance_level {
            p.push(s("SystemDisk.PerformanceLevel", pl));
        }
        let mut tags = vec![
            cluster_tag(self.infra_id(node)),
            ("openshift".to_string(), "ISV Integration".to_string()),
            node_tag(&node.name),
        ];
        tags.extend(a.tags.iter().map(|(k, v)| (k.clone(), v.clone())));
        push_tags(&mut p, &tags);
        Ok(p)
    }

    pub async fn create(&self, node: &NodeRequest, spec: &InstanceSpec) -> Result<Machine> {
        let p = self.run_params(node, spec)?;
        let v = self.call("RunInstances", &p).await?;
        let id = v["InstanceIdSets"]["InstanceIdSet"][0]
            .as_str()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                ProviderError::transient("alibaba: RunInstances: no instance id in the reply")
            })?;
        tracing::info!(node = %node.name, id, "ECS instance created");
        Ok(Machine {
            network_config: None,
            id: id.to_string(),
            state: MachineState::Pending("Pending".into()),
            addresses: vec![],
            macs: vec![],
        })
    }

    pub async fn get(&self, id: &str) -> Result<Option<Machine>> {
        let ids = serde_json::to_string(&[id]).unwrap_or_default();
        let found = self.describe(&[("InstanceIds".to_string(), ids)]).await?;
        Ok(found.iter().filter_map(machine).find(|m| m.id == id))
    }

    pub async fn delete(&self, id: &str) -> Result<()> {
        let p = [
            ("InstanceId".to_string(), id.to_string()),
            ("Force".to_string(), "true".to_string()),
        ];
        match self.call("DeleteInstance", &p).await {
            Ok(_) => Ok(()),
            Err(ProviderError::Permanent { what })
                if what.contains("InvalidInstanceId.NotFound") =>
            {
                Ok(())
            }
            // Being created or changing state: try again later.
            Err(ProviderError::Permanent { what }) if what.contains("IncorrectInstanceStatus") => {
                Err(ProviderError::transient(what))
            }
            Err(e) => Err(e),
        }
    }

    /// Every instance carrying the ownership tag of `infra_id`, with its
    /// name: what a destroy of the cluster deletes.
    pub async fn owned_by(&self, infra_id: &str) -> Result<Vec<(Machine, String)>> {
        let mut f = Vec::new();
        push_tags(&mut f, &[cluster_tag(infra_id)]);
        Ok(self
            .describe(&f)
            .await?
            .iter()
            .filter_map(|i| {
                machine(i).map(|m| (m, i["InstanceName"].as_str().unwrap_or("").to_string()))
            })
            .collect())
    }
}

impl super::Provider for Alibaba {
    forward_provider_calls!(Alibaba, NAME, InstanceSpec);
    fn owned<'a>(&'a self, cluster: &'a str) -> super::BoxFuture<'a, Result<Option<super::Owned>>> {
        Box::pin(async move {
            let infra = self.account.infra_id.as_deref().unwrap_or(cluster);
            self.owned_by(infra).await.map(Some)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_machine_s_addresses_are_both_families() {
        // DescribeInstances' shape (../shared/specs/alibaba-ecs): the private
        // IPv4 under VpcAttributes, IPv6 per network interface.
        let i = json!({
            "InstanceId": "i-1", "Status": "Running",
            "VpcAttributes": {"PrivateIpAddress": {"IpAddress": ["10.77.0.40"]}},
            "PublicIpAddress": {"IpAddress": []},
            "NetworkInterfaces": {"NetworkInterface": [{
                "MacAddress": "00:16:3E:00:00:01",
                "Ipv6Sets": {"Ipv6Set": [{"Ipv6Address": "fd00:77::40"}]}
            }]}
        });
        let m = machine(&i).unwrap();
        assert_eq!(m.addresses, ["10.77.0.40", "fd00:77::40"]);
        assert_eq!(m.macs, ["00:16:3e:00:00:01"]);
        assert_eq!(m.state, MachineState::Active);
    }
}
