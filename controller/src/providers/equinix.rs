//! Equinix Metal (API v1, `X-Auth-Token`), per the official OpenAPI spec
//! (`../shared/specs/equinix-metal`):
//!
//! - create: `POST /projects/{id}/devices` with `DeviceCreateInMetroInput`:
//!   `operating_system: custom_ipxe`, `ipxe_script_url` = bootd's per-node
//!   script, `always_pxe` (a network-booted node), or the `operatingSystem`
//!   slug of an OS image that runs Ignition (an image-booted node: no iPXE);
//!   `userdata` = the Ignition pointer config with the site CA, ownership
//!   `tags`, `hardware_reservation_id`, spot options;
//! - find: `GET /projects/{id}/devices?tag=bootd-node:<name>` (then the
//!   cluster tag and hostname are checked too), every page;
//! - poll: `GET /devices/{id}` until `state` is `active` (addresses from
//!   `ip_addresses`, MACs from `network_ports`);
//! - delete: `DELETE /devices/{id}` (404: already gone).

use super::{
    body_of, built, check, json_request, parse, Http, Machine, MachineState, NodeRequest,
    ProviderError, Result,
};
use http::Method;
use percent_encoding::utf8_percent_encode;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use site::Secret;

/// The provider part of a node created on Equinix Metal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceSpec {
    /// Metro code, e.g. `sv`, `da`.
    pub metro: String,
    /// Plan slug, e.g. `c3.small.x86`.
    pub plan: String,
    /// iPXE on every boot (`true`) or only the first (`false`, Equinix's default).
    #[serde(default)]
    pub always_pxe: bool,
    /// An OS slug whose image runs Ignition from the user data (the node
    /// boots that image, not through this host); absent or `custom_ipxe`:
    /// the node network-boots bootd's script.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operating_system: Option<String>,
    /// A reservation UUID or `next-available`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware_reservation_id: Option<String>,
    #[serde(default)]
    pub spot_instance: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot_price_max: Option<f64>,
    /// `hourly` (default), `daily`, `monthly`, `yearly`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub billing_cycle: Option<String>,
}

impl DeviceSpec {
    /// The device boots an OS image (with the pointer as user data), not iPXE.
    pub fn image_boot(&self) -> bool {
        self.operating_system
            .as_deref()
            .is_some_and(|os| os != "custom_ipxe")
    }

    /// Problems with the spec, before anything is created.
    pub fn check(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.metro.is_empty() {
            p.push("provider.equinix.metro: required".to_string());
        }
        if self.plan.is_empty() {
            p.push("provider.equinix.plan: required".to_string());
        }
        if let Some(c) = &self.billing_cycle {
            if !["hourly", "daily", "monthly", "yearly"].contains(&c.as_str()) {
                p.push(format!("provider.equinix.billingCycle: {c:?} is not one of hourly, daily, monthly, yearly"));
            }
        }
        if let Some(os) = &self.operating_system {
            if os.is_empty()
                || !os
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
            {
                p.push(format!("provider.equinix.operatingSystem: {os:?} is not an OS slug (letters, digits, _ . -)"));
            }
            if self.always_pxe && self.image_boot() {
                p.push("provider.equinix.alwaysPxe: only for a network-booted node (no operatingSystem, or custom_ipxe)".to_string());
            }
        }
        if self.spot_price_max.is_some() && !self.spot_instance {
            p.push("provider.equinix.spotPriceMax: only with spotInstance: true".to_string());
        }
        if self.spot_instance && self.spot_price_max.is_none_or(|m| m.is_nan() || m <= 0.0) {
            p.push(
                "provider.equinix.spotPriceMax: required (> 0) with spotInstance: true".to_string(),
            );
        }
        p
    }
}

/// `host.api.equinix` and a node's `provider.equinix`.
pub const REGISTRATION: super::Registration = super::Registration {
    name: "equinix",
    check_spec: |v| super::check_typed(v, DeviceSpec::check),
    check_userdata: super::any_userdata,
    boot_kind: |v| match serde_json::from_value::<DeviceSpec>(v.clone()) {
        Ok(s) if s.image_boot() => super::BootKind::Image,
        _ => super::BootKind::Network,
    },
    defaults: super::no_defaults,
    configure: |api, setup| {
        let e = api.equinix.as_ref()?;
        Some(super::read_secret(&e.api_key).map(|key| {
            std::sync::Arc::new(Equinix {
                http: setup.http.clone(),
                base_url: e.base_url.clone(),
                project_id: e.project_id.clone(),
                api_key: key,
            }) as std::sync::Arc<dyn super::Provider>
        }))
    },
};

impl super::Provider for Equinix {
    forward_provider_calls!(Equinix, "equinix", DeviceSpec);
}

#[derive(Debug)]
pub struct Equinix {
    pub http: Http,
    pub base_url: String,
    pub project_id: String,
    pub api_key: Secret<String>,
}

/// The ownership tag of every device bootd creates for a cluster.
pub fn cluster_tag(cluster: &str) -> String {
    format!("kubernetes.io/cluster/{cluster}:owned")
}

/// The tag that finds a node's device.
pub fn node_tag(node: &str) -> String {
    format!("bootd-node:{node}")
}

/// The parts of a `Device` bootd reads; everything optional, as in the spec.
#[derive(Debug, Deserialize)]
struct Device {
    id: Option<String>,
    hostname: Option<String>,
    state: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    ip_addresses: Vec<IpAssignment>,
    #[serde(default)]
    network_ports: Vec<Port>,
}

#[derive(Debug, Deserialize)]
struct IpAssignment {
    address: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Port {
    data: Option<PortData>,
}

#[derive(Debug, Deserialize)]
struct PortData {
    mac: Option<String>,
}

#[derive(Debug, Deserialize)]
struct DeviceList {
    #[serde(default)]
    devices: Vec<Device>,
    meta: Option<Meta>,
}

#[derive(Debug, Deserialize)]
struct Meta {
    next: Option<Href>,
}

#[derive(Debug, Deserialize)]
struct Href {
    href: Option<String>,
}

/// Pages read when listing (bounded; a node has one device, a few at most).
const MAX_PAGES: u32 = 20;

impl Equinix {
    fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        what: &str,
    ) -> Result<http::Request<http_body_util::Full<bytes::Bytes>>> {
        let r = json_request(method, &format!("{}{path}", self.base_url), body)
            .header("X-Auth-Token", self.api_key.expose().as_str())
            .body(body_of(body));
        built(r, what)
    }

    fn secrets(&self) -> [&str; 1] {
        [self.api_key.expose().as_str()]
    }

    fn machine(d: Device, what: &str) -> Result<Machine> {
        let id =
            d.id.filter(|i| !i.is_empty())
                .ok_or_else(|| ProviderError::transient(format!("{what}: device without an id")))?;
        let state = match d.state.as_deref() {
            Some("active") => MachineState::Active,
            Some("failed") => MachineState::Failed("the device failed to provision".into()),
            Some("deprovisioning") => MachineState::Deleting,
            Some(s) => MachineState::Pending(s.to_string()),
            None => MachineState::Pending("unknown".into()),
        };
        Ok(Machine {
            id,
            state,
            addresses: d
                .ip_addresses
                .into_iter()
                .filter_map(|a| a.address)
                .collect(),
            macs: d
                .network_ports
                .into_iter()
                .filter_map(|p| p.data.and_then(|d| d.mac))
                .collect(),
        })
    }

    pub async fn find(&self, node: &NodeRequest) -> Result<Option<Machine>> {
        let what = "Equinix Metal: list devices";
        let tag = node_tag(&node.name);
        let owner = cluster_tag(&node.cluster);
        let mut found = Vec::new();
        for page in 1..=MAX_PAGES {
            let path = format!(
                "/projects/{}/devices?tag={}&page={page}&per_page=50",
                utf8_percent_encode(&self.project_id, super::COMPONENT),
                utf8_percent_encode(&tag, super::COMPONENT)
            );
            let reply = self
                .http
                .send(self.request(Method::GET, &path, None, what)?, what)
                .await?;
            check(&reply, what, &self.secrets())?;
            let list: DeviceList = parse(&reply, what)?;
            let more = list
                .meta
                .as_ref()
                .and_then(|m| m.next.as_ref())
                .and_then(|n| n.href.as_ref())
                .is_some()
                && !list.devices.is_empty();
            for d in list.devices {
                let ours = d.tags.contains(&tag)
                    && d.tags.contains(&owner)
                    && d.hostname.as_deref() == Some(node.name.as_str());
                if ours
                    && d.state.as_deref() != Some("deleted")
                    && d.state.as_deref() != Some("deprovisioning")
                {
                    found.push(Self::machine(d, what)?);
                }
            }
            if !more {
                break;
            }
        }
        if found.len() > 1 {
            tracing::warn!(node = %node.name, devices = found.len(), "more than one Equinix Metal device carries this node's tags; using the first");
        }
        Ok(found.into_iter().next())
    }

    /// The `DeviceCreateInMetroInput` body for `node`.
    pub fn create_body(node: &NodeRequest, spec: &DeviceSpec) -> Value {
        let mut body = json!({
            "metro": spec.metro,
            "plan": spec.plan,
            "hostname": node.name,
            "description": format!("bootd node {} of cluster {}", node.name, node.cluster),
            "operating_system": "custom_ipxe",
            "ipxe_script_url": node.ipxe_url,
            "always_pxe": spec.always_pxe,
            "userdata": node.userdata.expose(),
            "tags": [cluster_tag(&node.cluster), node_tag(&node.name)],
            "billing_cycle": spec.billing_cycle.as_deref().unwrap_or("hourly"),
        });
        if spec.image_boot() {
            let os = spec.operating_system.as_deref().unwrap_or_default();
            let m = body.as_object_mut().expect("an object");
            m.remove("ipxe_script_url");
            m.remove("always_pxe");
            m.insert("operating_system".into(), json!(os));
        }
        if let Some(r) = &spec.hardware_reservation_id {
            body["hardware_reservation_id"] = json!(r);
        }
        if spec.spot_instance {
            body["spot_instance"] = json!(true);
            if let Some(m) = spec.spot_price_max {
                body["spot_price_max"] = json!(m);
            }
        }
        body
    }

    pub async fn create(&self, node: &NodeRequest, spec: &DeviceSpec) -> Result<Machine> {
        let what = "Equinix Metal: create device";
        let path = format!(
            "/projects/{}/devices",
            utf8_percent_encode(&self.project_id, super::COMPONENT)
        );
        let body = Self::create_body(node, spec);
        let reply = self
            .http
            .send(self.request(Method::POST, &path, Some(&body), what)?, what)
            .await?;
        check(&reply, what, &self.secrets())?;
        Self::machine(parse(&reply, what)?, what)
    }

    pub async fn get(&self, id: &str) -> Result<Option<Machine>> {
        let what = "Equinix Metal: get device";
        let path = format!("/devices/{}", utf8_percent_encode(id, super::COMPONENT));
        let reply = self
            .http
            .send(self.request(Method::GET, &path, None, what)?, what)
            .await?;
        if reply.status == http::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        check(&reply, what, &self.secrets())?;
        let d: Device = parse(&reply, what)?;
        if d.state.as_deref() == Some("deleted") {
            return Ok(None);
        }
        Self::machine(d, what).map(Some)
    }

    pub async fn delete(&self, id: &str) -> Result<()> {
        let what = "Equinix Metal: delete device";
        let path = format!("/devices/{}", utf8_percent_encode(id, super::COMPONENT));
        let reply = self
            .http
            .send(self.request(Method::DELETE, &path, None, what)?, what)
            .await?;
        if reply.status == http::StatusCode::NOT_FOUND {
            return Ok(());
        }
        check(&reply, what, &self.secrets())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> NodeRequest {
        NodeRequest {
            ip: "10.77.0.23".parse().unwrap(),
            macs: vec!["52:54:00:77:00:23".into()],
            ipxe_url: "http://10.77.0.1:8080/ipxe/worker-3.ipxe".into(),
            userdata: Secret("{\"ignition\":{}}".into()),
            ..NodeRequest::bare("worker-3", "lab")
        }
    }

    #[test]
    fn create_body_is_the_spec_s_metro_input() {
        let spec = DeviceSpec {
            metro: "sv".into(),
            plan: "c3.small.x86".into(),
            always_pxe: true,
            operating_system: None,
            hardware_reservation_id: Some("next-available".into()),
            spot_instance: true,
            spot_price_max: Some(0.5),
            billing_cycle: None,
        };
        assert!(spec.check().is_empty());
        let b = Equinix::create_body(&node(), &spec);
        assert_eq!(b["operating_system"], "custom_ipxe");
        assert_eq!(
            b["ipxe_script_url"],
            "http://10.77.0.1:8080/ipxe/worker-3.ipxe"
        );
        assert_eq!(b["always_pxe"], true);
        assert_eq!(
            b["tags"],
            json!(["kubernetes.io/cluster/lab:owned", "bootd-node:worker-3"])
        );
        assert_eq!(b["hardware_reservation_id"], "next-available");
        assert_eq!(b["spot_price_max"], 0.5);
        assert_eq!(b["billing_cycle"], "hourly");
    }

    /// An image-booted device: the OS slug, the pointer as user data, no iPXE.
    #[test]
    fn an_os_image_device_has_no_ipxe() {
        let spec: DeviceSpec = serde_json::from_value(json!({
            "metro": "da", "plan": "m3.small.x86", "operatingSystem": "rhcos_4_14"
        }))
        .unwrap();
        assert!(spec.check().is_empty(), "{:?}", spec.check());
        let b = Equinix::create_body(&node(), &spec);
        assert_eq!(b["operating_system"], "rhcos_4_14");
        assert!(b.get("ipxe_script_url").is_none() && b.get("always_pxe").is_none());
        assert_eq!(b["userdata"], "{\"ignition\":{}}");
        let kind = |v: Value| (REGISTRATION.boot_kind)(&v);
        assert_eq!(
            kind(serde_json::to_value(&spec).unwrap()),
            super::super::BootKind::Image
        );
        assert_eq!(
            kind(json!({"metro": "da", "plan": "p", "operatingSystem": "custom_ipxe"})),
            super::super::BootKind::Network
        );
        assert_eq!(
            kind(json!({"metro": "da", "plan": "p"})),
            super::super::BootKind::Network
        );
        let bad: DeviceSpec = serde_json::from_value(json!({
            "metro": "da", "plan": "p", "operatingSystem": "rhcos 4", "alwaysPxe": true
        }))
        .unwrap();
        let p = bad.check().join("\n");
        assert!(
            p.contains("not an OS slug") && p.contains("alwaysPxe: only for a network-booted"),
            "{p}"
        );
    }

    #[test]
    fn spec_problems() {
        let spec = DeviceSpec {
            metro: String::new(),
            plan: "p".into(),
            always_pxe: false,
            operating_system: None,
            hardware_reservation_id: None,
            spot_instance: true,
            spot_price_max: None,
            billing_cycle: Some("weekly".into()),
        };
        let p = spec.check().join("\n");
        assert!(
            p.contains("metro: required")
                && p.contains("weekly")
                && p.contains("spotPriceMax: required"),
            "{p}"
        );
    }
}
