//! Stage one of `networkConfig`: NMState's document as written (its
//! kebab-case keys), deserialized without judgement; unknown keys are
//! reported by the site loader with their paths.

use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub struct NetworkConfig {
    #[serde(default)]
    pub interfaces: Vec<NmInterface>,
    pub dns_resolver: Option<NmDnsResolver>,
    pub routes: Option<NmRoutes>,
}

impl NetworkConfig {
    /// The static addresses as written (IPv4 ones first, then IPv6), of
    /// the families not disabled: where a node configured by this is
    /// reached, before any check.
    pub fn static_ips(&self) -> Vec<String> {
        let fam = |v4: bool| {
            self.interfaces.iter().flat_map(move |i| {
                let ip = if v4 { &i.ipv4 } else { &i.ipv6 };
                ip.iter()
                    .filter(|c| c.enabled != Some(false))
                    .flat_map(|c| c.address.iter().filter_map(|a| a.ip.clone()))
            })
        };
        fam(true).chain(fam(false)).collect()
    }

    /// [`NetworkConfig::static_ips`] of a config held as JSON (an API
    /// body, a provider's facts); none when it is not one.
    pub fn static_ips_of(v: &serde_json::Value) -> Vec<String> {
        NetworkConfig::deserialize(v)
            .map(|c| c.static_ips())
            .unwrap_or_default()
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct NmInterface {
    pub name: Option<String>,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub state: Option<String>,
    pub mac_address: Option<String>,
    pub mtu: Option<u32>,
    pub description: Option<String>,
    pub ipv4: Option<NmIp>,
    pub ipv6: Option<NmIp>,
    pub link_aggregation: Option<NmBond>,
    pub vlan: Option<NmVlan>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct NmIp {
    pub enabled: Option<bool>,
    pub dhcp: Option<bool>,
    /// IPv6 router advertisements (SLAAC); with `dhcp`, NetworkManager's
    /// `auto`.
    pub autoconf: Option<bool>,
    #[serde(default)]
    pub address: Vec<NmAddress>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct NmAddress {
    pub ip: Option<String>,
    pub prefix_length: Option<u8>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct NmBond {
    pub mode: Option<String>,
    #[serde(default)]
    pub options: BTreeMap<String, serde_yaml_ng::Value>,
    /// NMState ≥ 2; `slaves` in older documents.
    pub port: Option<Vec<String>>,
    pub slaves: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct NmVlan {
    pub base_iface: Option<String>,
    pub id: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct NmDnsResolver {
    pub config: Option<NmDnsConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct NmDnsConfig {
    #[serde(default)]
    pub server: Vec<String>,
    #[serde(default)]
    pub search: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct NmRoutes {
    #[serde(default)]
    pub config: Vec<NmRoute>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct NmRoute {
    pub destination: Option<String>,
    pub next_hop_address: Option<String>,
    pub next_hop_interface: Option<String>,
    pub metric: Option<u32>,
    pub table_id: Option<u32>,
}
