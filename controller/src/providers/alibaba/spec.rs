//! A node's `provider.alibaba`: what differs from the account's defaults
//! (`host.api.alibaba`), all optional in a request and filled from the site
//! by role before it is stored.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InstanceSpec {
    /// A zone of the account's `zones`; default: one of them, chosen by the
    /// node's name (the same node always lands in the same zone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_disk: Option<Disk>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Disk {
    pub category: String,
    pub size: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub performance_level: Option<String>,
}

use site::alibaba_id_ok as id_ok;

impl InstanceSpec {
    pub fn check(&self) -> Vec<String> {
        let k = "provider.alibaba";
        let mut p = Vec::new();
        match &self.instance_type {
            Some(t) if !id_ok(t, "ecs.") => p.push(format!(
                "{k}.instanceType: {t:?} is not an instance type (ecs....)"
            )),
            None => p.push(format!(
                "{k}.instanceType: required (or host.api.alibaba.instanceTypes for the node's role)"
            )),
            _ => {}
        }
        match &self.image_id {
            Some(i) if !id_ok(i, "m-") => {
                p.push(format!("{k}.imageId: {i:?} is not an image id (m-...)"))
            }
            None => p.push(format!(
                "{k}.imageId: required (or host.api.alibaba.imageId)"
            )),
            _ => {}
        }
        if let Some(z) = &self.zone_id {
            if !z.contains('-')
                || !z
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            {
                p.push(format!(
                    "{k}.zoneId: {z:?} is not a zone id like cn-hangzhou-h"
                ));
            }
        }
        if let Some(d) = &self.system_disk {
            p.extend(site::alibaba_disk_problems(
                &format!("{k}.systemDisk"),
                &d.category,
                d.size,
                d.performance_level.as_deref(),
            ));
        }
        p
    }
}

/// What a node of `role` takes from `host.api.alibaba` unless it says.
pub fn defaults(site: &site::Site, role: &str) -> Value {
    let Some(a) = site.host.api.as_ref().and_then(|a| a.alibaba.as_ref()) else {
        return json!({});
    };
    let mut d = json!({
        "imageId": a.image_id,
        "systemDisk": {"category": a.system_disk.category, "size": a.system_disk.size_gib},
    });
    if let Some(pl) = &a.system_disk.performance_level {
        d["systemDisk"]["performanceLevel"] = json!(pl);
    }
    if let Some(t) = a.instance_types.get(role) {
        d["instanceType"] = json!(t);
    }
    d
}
