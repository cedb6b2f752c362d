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
    address_family: Option<u8>,
    cidr: Option<u8>,
    gateway: Option<String>,
    public: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct Port {
    name: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    network_type: Option<String>,
    bond: Option<PortBond>,
    data: Option<PortData>,
}

#[derive(Debug, Deserialize)]
struct PortBond {
    name: Option<String>,
}

#[derive(Debug, Deserialize)]
struct PortData {
    mac: Option<String>,
}

/// Equinix Metal's layer-3 network as it documents it for an OS to set
/// up: the NICs (`network_ports` of type `NetworkPort`, matched by MAC)
/// bonded into the `NetworkBondPort` (LACP: miimon 100, up/down delay 200,
/// lacp_rate fast, xmit_hash_policy layer3+4); on it the public IPv4 and
/// IPv6 addresses with the default routes through their gateways, and the
/// private IPv4 address with 10.0.0.0/8 through its gateway. `None`: not
/// a layer-3 device, or the ports or addresses to make it are missing.
fn layer3_network(ports: &[Port], ips: &[IpAssignment]) -> Option<Value> {
    let bond = ports.iter().find(|p| {
        p.kind.as_deref() == Some("NetworkBondPort") && p.network_type.as_deref() == Some("layer3")
    })?;
    let bond_name = bond.name.clone()?;
    let members: Vec<(String, String)> = ports
        .iter()
        .filter(|p| p.kind.as_deref() == Some("NetworkPort"))
        .filter(|p| p.bond.as_ref().and_then(|b| b.name.as_deref()) == Some(bond_name.as_str()))
        .filter_map(|p| {
            Some((
                p.name.clone()?,
                p.data.as_ref()?.mac.clone()?.to_ascii_lowercase(),
            ))
        })
        .collect();
    if members.is_empty() {
        return None;
    }
    let (mut v4, mut v6, mut routes) = (Vec::new(), Vec::new(), Vec::new());
    for a in ips {
        let (Some(ip), Some(cidr)) = (a.address.as_deref(), a.cidr) else {
            continue;
        };
        let gw = a.gateway.as_deref();
        let entry = json!({ "ip": ip, "prefix-length": cidr });
        match (a.address_family, a.public) {
            (Some(4), Some(true)) => {
                v4.push(entry);
                if let Some(g) = gw {
                    routes.push(json!({ "destination": "0.0.0.0/0", "next-hop-address": g, "next-hop-interface": bond_name }));
                }
            }
            (Some(4), _) => {
                v4.push(entry);
                if let Some(g) = gw {
                    routes.push(json!({ "destination": "10.0.0.0/8", "next-hop-address": g, "next-hop-interface": bond_name }));
                }
            }
            (Some(6), _) => {
                v6.push(entry);
                if let Some(g) = gw {
                    routes.push(json!({ "destination": "::/0", "next-hop-address": g, "next-hop-interface": bond_name }));
                }
            }
            _ => {}
        }
    }
    if v4.is_empty() && v6.is_empty() {
        return None;
    }
    let family = |a: Vec<Value>| {
        if a.is_empty() {
            json!({ "enabled": false })
        } else {
            json!({ "enabled": true, "dhcp": false, "address": a })
        }
    };
    let mut interfaces: Vec<Value> = members
        .iter()
        .map(|(name, mac)| {
            json!({ "name": name, "type": "ethernet", "state": "up", "mac-address": mac,
                    "ipv4": { "enabled": false }, "ipv6": { "enabled": false } })
        })
        .collect();
    interfaces.push(json!({
        "name": bond_name, "type": "bond", "state": "up",
        "link-aggregation": {
            "mode": "802.3ad",
            "options": { "miimon": "100", "updelay": "200", "downdelay": "200", "lacp_rate": "fast", "xmit_hash_policy": "layer3+4" },
            "port": members.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>()
        },
        "ipv4": family(v4),
        "ipv6": family(v6),
    }));
    Some(json!({ "interfaces": interfaces, "routes": { "config": routes } }))
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
            network_config: layer3_network(&d.network_ports, &d.ip_addresses),
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
                    let mine = node.intent_tag().is_some_and(|t| d.tags.contains(&t));
                    found.push((mine, Self::machine(d, what)?));
                }
            }
            if !more {
                break;
            }
        }
        // The device this create's intent made first (module `fence`).
        found.sort_by_key(|(mine, _)| !mine);
        if found.len() > 1 {
            let ids: Vec<&str> = found.iter().map(|(_, m)| m.id.as_str()).collect();
            tracing::warn!(node = %node.name, devices = ?ids, "more than one Equinix Metal device carries this node's tags; using the first (its create intent's, if any): delete the others");
        }
        Ok(found.into_iter().next().map(|(_, m)| m))
    }

    /// The `DeviceCreateInMetroInput` body for `node`.
    pub fn create_body(node: &NodeRequest, spec: &DeviceSpec) -> Value {
        let tags: Vec<String> = [cluster_tag(&node.cluster), node_tag(&node.name)]
            .into_iter()
            .chain(node.intent_tag())
            .collect();
        let mut body = json!({
            "metro": spec.metro,
            "plan": spec.plan,
            "hostname": node.name,
            "description": format!("bootd node {} of cluster {}", node.name, node.cluster),
            "operating_system": "custom_ipxe",
            "ipxe_script_url": node.ipxe_url,
            "always_pxe": spec.always_pxe,
            "userdata": node.userdata.expose(),
            "tags": tags,
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

#[cfg(test)]
mod layer3_tests {
    use super::*;

    /// A layer-3 device as the API answers it (the fields of `Device`,
    /// `Port` and `IPAssignment` in Equinix's OpenAPI document).
    fn device() -> Device {
        serde_json::from_value(json!({
            "id": "d1", "state": "active",
            "network_ports": [
                { "name": "bond0", "type": "NetworkBondPort", "network_type": "layer3", "data": { "bonded": true } },
                { "name": "eth0", "type": "NetworkPort", "bond": { "name": "bond0" }, "data": { "mac": "B4:96:91:AA:00:01", "bonded": true } },
                { "name": "eth1", "type": "NetworkPort", "bond": { "name": "bond0" }, "data": { "mac": "b4:96:91:aa:00:02", "bonded": true } }
            ],
            "ip_addresses": [
                { "address": "147.75.1.101", "address_family": 4, "cidr": 31, "gateway": "147.75.1.100", "public": true, "management": true },
                { "address": "2604:1380:1::3", "address_family": 6, "cidr": 127, "gateway": "2604:1380:1::2", "public": true, "management": true },
                { "address": "10.70.1.3", "address_family": 4, "cidr": 31, "gateway": "10.70.1.2", "public": false, "management": true }
            ]
        }))
        .unwrap()
    }

    #[test]
    fn a_layer3_device_gets_its_bond_addresses_and_routes() {
        let d = device();
        let nc = layer3_network(&d.network_ports, &d.ip_addresses).expect("a layer-3 config");
        assert_eq!(
            nc["interfaces"][0],
            json!({ "name": "eth0", "type": "ethernet", "state": "up",
            "mac-address": "b4:96:91:aa:00:01", "ipv4": { "enabled": false }, "ipv6": { "enabled": false } })
        );
        assert_eq!(
            nc["interfaces"][2]["link-aggregation"]["port"],
            json!(["eth0", "eth1"])
        );
        assert_eq!(nc["interfaces"][2]["link-aggregation"]["mode"], "802.3ad");
        assert_eq!(
            nc["interfaces"][2]["ipv4"]["address"],
            json!([{ "ip": "147.75.1.101", "prefix-length": 31 }, { "ip": "10.70.1.3", "prefix-length": 31 }])
        );
        assert_eq!(
            nc["routes"]["config"],
            json!([
                { "destination": "0.0.0.0/0", "next-hop-address": "147.75.1.100", "next-hop-interface": "bond0" },
                { "destination": "::/0", "next-hop-address": "2604:1380:1::2", "next-hop-interface": "bond0" },
                { "destination": "10.0.0.0/8", "next-hop-address": "10.70.1.2", "next-hop-interface": "bond0" }
            ])
        );
        // The site takes it as any networkConfig.
        let w: site::nmstate::NetworkConfig = serde_json::from_value(nc).unwrap();
        let hn = site::nmstate::resolve("networkConfig", &w).unwrap();
        let names: Vec<&str> = hn.interfaces.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["eth0", "eth1", "bond0"]);
        assert_eq!(hn.interfaces[0].controller.as_deref(), Some("bond0"));
        assert_eq!(
            hn.gateway("bond0", true),
            Some("147.75.1.100".parse().unwrap())
        );
        // Not layer 3 (hybrid, or no bond port): nothing.
        let mut ports = device().network_ports;
        ports[0].network_type = Some("hybrid".into());
        assert!(layer3_network(&ports, &d.ip_addresses).is_none());
        assert!(layer3_network(&d.network_ports[1..], &d.ip_addresses).is_none());
    }
}
