//! `host.api.alibaba`: checked as Gardener's Alicloud extension checks its
//! infrastructure config: every problem at once, each with its key path.

use super::{secret_ref, url_of, Cx};
use crate::model::{AlibabaAccount, AlibabaDisk};
use crate::wire;
use std::collections::BTreeMap;

const K: &str = "host.api.alibaba";

/// The smallest system disk an RHCOS or FCOS image for Alibaba fits on
/// (their disk images are 16 GiB).
pub const IMAGE_DISK_GIB: u32 = 16;
/// ECS caps a system disk at 2 TiB.
const MAX_SYSTEM_DISK_GIB: u32 = 2048;
/// Tags an ECS resource may carry, and bootd's own among them
/// (`kubernetes.io/cluster/<id>`, `openshift`, `bootd-node`).
const MAX_TAGS: usize = 20;
const OWN_TAGS: usize = 3;

const CATEGORIES: &[&str] = &[
    "cloud_essd",
    "cloud_essd_entry",
    "cloud_auto",
    "cloud_ssd",
    "cloud_efficiency",
];

/// `cn-hangzhou`, `ap-southeast-1`, `cn-north-2-gov-1`: a two-letter
/// prefix and one or more lower-case words.
pub fn region_id_ok(r: &str) -> bool {
    let mut parts = r.split('-');
    let first = parts.next().unwrap_or_default();
    let rest: Vec<&str> = parts.collect();
    first.len() == 2
        && first.bytes().all(|b| b.is_ascii_lowercase())
        && !rest.is_empty()
        && rest.iter().all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

/// A zone of `region`: `<region>-<letter(s) or digits>` (`cn-hangzhou-h`).
pub fn zone_in_region(zone: &str, region: &str) -> bool {
    zone.strip_prefix(region)
        .and_then(|z| z.strip_prefix('-'))
        .is_some_and(|z| {
            !z.is_empty()
                && z.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

/// An Alibaba resource id with its kind's prefix (`vsw-`, `sg-`, `m-`, `ecs.`).
pub fn id_ok(v: &str, prefix: &str) -> bool {
    v.len() > prefix.len()
        && v.starts_with(prefix)
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// Every problem with the system disk (`key`: where it is in the site or a
/// node's provider section).
pub fn disk_problems(key: &str, category: &str, size: u32, pl: Option<&str>) -> Vec<String> {
    let mut p = Vec::new();
    if !CATEGORIES.contains(&category) {
        p.push(format!(
            "{key}.category: {category:?} is not one of {}",
            CATEGORIES.join(", ")
        ));
    }
    if size < IMAGE_DISK_GIB {
        p.push(format!(
            "{key}.size: {size} GiB is below the image's {IMAGE_DISK_GIB} GiB"
        ));
    }
    if size > MAX_SYSTEM_DISK_GIB {
        p.push(format!(
            "{key}.size: {size} GiB is above a system disk's {MAX_SYSTEM_DISK_GIB} GiB"
        ));
    }
    if let Some(pl) = pl {
        // Minimum sizes per level: Alibaba's ESSD documentation.
        let min = match pl {
            "PL0" | "PL1" => Some(if pl == "PL0" { 1 } else { 20 }),
            "PL2" => Some(461),
            "PL3" => Some(1261),
            _ => None,
        };
        match min {
            None => p.push(format!(
                "{key}.performanceLevel: {pl:?} is not one of PL0, PL1, PL2, PL3"
            )),
            Some(_) if category != "cloud_essd" => p.push(format!(
                "{key}.performanceLevel: {pl} is for category cloud_essd, not {category}"
            )),
            Some(m) if size < m => p.push(format!(
                "{key}.size: {size} GiB is below {pl}'s minimum of {m} GiB"
            )),
            Some(_) => {}
        }
    }
    p
}

pub(super) fn alibaba(cx: &mut Cx, w: &wire::Alibaba) -> Option<AlibabaAccount> {
    let region = match w.region_id.as_deref() {
        Some(r) if region_id_ok(r) => Some(r.to_string()),
        Some(r) => {
            cx.err(
                format!("{K}.regionId"),
                format!("{r:?} is not a region id like cn-hangzhou or ap-southeast-1"),
            );
            None
        }
        None => {
            cx.err(format!("{K}.regionId"), "required, e.g. cn-hangzhou");
            None
        }
    };
    let default_endpoint = region
        .as_deref()
        .map(|r| format!("https://ecs.{r}.aliyuncs.com"))
        .unwrap_or_else(|| "https://ecs.aliyuncs.com".into());
    let endpoint = url_of(
        cx,
        &format!("{K}.endpoint"),
        w.endpoint.as_deref(),
        &default_endpoint,
    );
    let access_key_id = secret_ref(cx, &format!("{K}.accessKeyId"), w.access_key_id.as_ref());
    let access_key_secret = secret_ref(
        cx,
        &format!("{K}.accessKeySecret"),
        w.access_key_secret.as_ref(),
    );
    let security_token = w
        .security_token
        .as_ref()
        .map(|t| secret_ref(cx, &format!("{K}.securityToken"), Some(t)));
    if let Some(i) = &w.infra_id {
        if i.is_empty()
            || i.len() > 63
            || !i
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            cx.err(
                format!("{K}.infraId"),
                format!("{i:?}: lower-case letters, digits and '-', at most 63"),
            );
        }
    }
    if w.zones.is_empty() {
        cx.err(
            format!("{K}.zones"),
            "required: at least one zone of the region, e.g. [cn-hangzhou-h]",
        );
    }
    for (i, z) in w.zones.iter().enumerate() {
        if let Some(r) = &region {
            if !zone_in_region(z, r) {
                cx.err(
                    format!("{K}.zones[{i}]"),
                    format!("{z:?} is not a zone of region {r}"),
                );
            }
        }
        if w.zones[..i].contains(z) {
            cx.err(format!("{K}.zones[{i}]"), format!("{z:?} is listed twice"));
        }
        if !w.v_switches.contains_key(z) {
            cx.err(
                format!("{K}.vSwitches"),
                format!("zone {z} has no vSwitch (vSwitches: {{{z}: vsw-...}})"),
            );
        }
    }
    for (z, v) in &w.v_switches {
        if !w.zones.contains(z) {
            cx.err(format!("{K}.vSwitches.{z}"), "not one of the zones");
        }
        if !id_ok(v, "vsw-") {
            cx.err(
                format!("{K}.vSwitches.{z}"),
                format!("{v:?} is not a vSwitch id (vsw-...)"),
            );
        }
    }
    let security_group_id = match w.security_group_id.as_deref() {
        Some(s) if id_ok(s, "sg-") => Some(s.to_string()),
        Some(s) => {
            cx.err(
                format!("{K}.securityGroupId"),
                format!("{s:?} is not a security group id (sg-...)"),
            );
            None
        }
        None => {
            cx.err(
                format!("{K}.securityGroupId"),
                "required: the group that lets the nodes reach this host and each other",
            );
            None
        }
    };
    let mut types = BTreeMap::new();
    for (role, t) in &w.instance_types {
        if !["bootstrap", "master", "worker"].contains(&role.as_str()) {
            cx.err(
                format!("{K}.instanceTypes.{role}"),
                "not a role: bootstrap, master or worker",
            );
        } else if !id_ok(t, "ecs.") {
            cx.err(
                format!("{K}.instanceTypes.{role}"),
                format!("{t:?} is not an instance type (ecs....)"),
            );
        } else {
            types.insert(role.clone(), t.clone());
        }
    }
    for role in ["master", "worker"] {
        if !w.instance_types.contains_key(role) {
            cx.err(
                format!("{K}.instanceTypes.{role}"),
                "required, e.g. ecs.g6.xlarge",
            );
        }
    }
    if !types.contains_key("bootstrap") {
        if let Some(m) = types.get("master").cloned() {
            types.insert("bootstrap".into(), m);
        }
    }
    let d = w.system_disk.as_ref();
    let disk = AlibabaDisk {
        category: d
            .and_then(|d| d.category.clone())
            .unwrap_or_else(|| "cloud_essd".into()),
        size_gib: d.and_then(|d| d.size).unwrap_or(120),
        performance_level: d.and_then(|d| d.performance_level.clone()),
    };
    for p in disk_problems(
        &format!("{K}.systemDisk"),
        &disk.category,
        disk.size_gib,
        disk.performance_level.as_deref(),
    ) {
        let (key, reason) = p.split_once(": ").unwrap_or((&p, ""));
        cx.err(key.to_string(), reason.to_string());
    }
    let image_id = match (w.image_id.as_deref(), &w.image_set) {
        (Some(i), None) if id_ok(i, "m-") => Some(i.to_string()),
        (Some(i), None) => {
            cx.err(
                format!("{K}.imageId"),
                format!("{i:?} is not an image id (m-...)"),
            );
            None
        }
        // Looked up once the image sets are known (resolve_image).
        (None, Some(_)) => Some(String::new()),
        (Some(_), Some(_)) => {
            cx.err(
                format!("{K}.imageSet"),
                "give imageId or imageSet, not both",
            );
            None
        }
        (None, None) => {
            cx.err(
                format!("{K}.imageId"),
                "required: the RHCOS image in the region, or imageSet: a catalog image set whose stream metadata lists it",
            );
            None
        }
    };
    if w.tags.len() + OWN_TAGS > MAX_TAGS {
        cx.err(
            format!("{K}.tags"),
            format!(
                "{} tags, and bootd adds {OWN_TAGS}: ECS allows {MAX_TAGS}",
                w.tags.len()
            ),
        );
    }
    for (k, v) in &w.tags {
        let lower = k.to_ascii_lowercase();
        if k.is_empty() || k.len() > 128 || lower.starts_with("aliyun") || lower.starts_with("acs:")
        {
            cx.err(
                format!("{K}.tags.{k}"),
                "a key of 1-128 characters not starting with aliyun or acs: (Alibaba's)",
            );
        } else if k.starts_with("kubernetes.io/cluster/") || k == "openshift" || k == "bootd-node" {
            cx.err(format!("{K}.tags.{k}"), "bootd sets this tag itself");
        }
        if v.len() > 128
            || v.to_ascii_lowercase().starts_with("aliyun")
            || v.starts_with("http://")
            || v.starts_with("https://")
        {
            cx.err(
                format!("{K}.tags.{k}"),
                "a value of at most 128 characters, not starting with aliyun, http:// or https://",
            );
        }
    }
    Some(AlibabaAccount {
        region_id: region?,
        endpoint: endpoint?,
        access_key_id: access_key_id?,
        access_key_secret: access_key_secret?,
        security_token: match security_token {
            Some(Some(t)) => Some(t),
            Some(None) => return None,
            None => None,
        },
        infra_id: w.infra_id.clone(),
        zones: w.zones.clone(),
        v_switches: w.v_switches.clone(),
        security_group_id: security_group_id?,
        instance_types: types,
        system_disk: disk,
        image_id: image_id?,
        image_set: w.image_set.clone(),
        tags: w.tags.clone(),
    })
}

/// `imageSet`: the image ID from the named catalog set's cached stream
/// metadata, for the account's region; a set that is not a catalog set, or
/// a version without an image in the region, is a problem naming both.
pub(in crate::validate) fn resolve_image(
    cx: &mut Cx,
    a: &mut AlibabaAccount,
    images: &crate::model::Images,
) {
    let Some(name) = a.image_set.clone() else {
        return;
    };
    let key = format!("{K}.imageSet");
    let Some(set) = images.sets.get(&name) else {
        cx.err(key, format!("no image set {name:?} in images.sets"));
        return;
    };
    let Some(c) = &set.catalog else {
        cx.err(key, format!("image set {name:?} is not a catalog: set (no stream metadata to look the image up in)"));
        return;
    };
    // A set not fetched yet leaves the site valid, as every catalog set
    // does: `images fetch --site` reads this same site, `--check-config`
    // warns, and bootd does not start until the set is in the cache.
    let Ok(r) = &c.resolved else {
        return;
    };
    let version = r.version.clone();
    match crate::catalog::cloud_image(
        &images.root,
        &c.reference.stream,
        &version,
        &c.reference.arch,
        "aliyun",
        &a.region_id,
    ) {
        Ok(id) => a.image_id = id,
        Err(e) => cx.err(key, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_and_zone_shapes() {
        for r in [
            "cn-hangzhou",
            "ap-southeast-1",
            "cn-north-2-gov-1",
            "us-west-1",
        ] {
            assert!(region_id_ok(r), "{r}");
        }
        for r in [
            "hangzhou",
            "CN-hangzhou",
            "cn-",
            "cn_hangzhou",
            "c-hangzhou",
            "",
        ] {
            assert!(!region_id_ok(r), "{r}");
        }
        assert!(zone_in_region("cn-hangzhou-h", "cn-hangzhou"));
        assert!(!zone_in_region("cn-shanghai-b", "cn-hangzhou"));
        assert!(!zone_in_region("cn-hangzhou", "cn-hangzhou"));
        assert!(!zone_in_region("cn-hangzhou-", "cn-hangzhou"));
    }

    #[test]
    fn disk_problems_are_all_named() {
        assert!(disk_problems("d", "cloud_essd", 120, Some("PL1")).is_empty());
        let p = disk_problems("d", "cloud_ssd", 10, Some("PL1"));
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("below the image's 16 GiB"), "{p:?}");
        assert!(
            p[1].contains("PL1 is for category cloud_essd, not cloud_ssd"),
            "{p:?}"
        );
        let p = disk_problems("d", "cloud_essd", 200, Some("PL2"));
        assert_eq!(p, vec!["d.size: 200 GiB is below PL2's minimum of 461 GiB"]);
        let p = disk_problems("d", "gp2", 4096, Some("PL9"));
        assert_eq!(p.len(), 3, "{p:?}");
    }
}
