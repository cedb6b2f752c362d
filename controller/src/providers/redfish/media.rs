//! Virtual media through the BMC: the system's CD (or DVD) device, bootd's
//! ISO for the node inserted into it, and ejected once the node fetched
//! its Ignition.
//!
//! The device is found from the system's `VirtualMedia` collection
//! (Redfish 1.11 and later), else from its first manager's (older BMCs
//! keep virtual media under the manager).

use super::super::{ProviderError, Result};
use super::client::Bmc;
use http::Method;
use serde_json::{json, Value};

/// One virtual media device as read.
pub(super) struct Device {
    pub(super) path: String,
    pub(super) inserted: bool,
    /// What is inserted now (the BMC's `Image`).
    pub(super) image: Option<String>,
    insert: String,
    eject: String,
}

fn members(coll: &Value) -> Vec<String> {
    coll["Members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["@odata.id"].as_str().map(str::to_string))
        .collect()
}

fn device(path: &str, v: &Value) -> Device {
    let action = |a: &str| {
        v["Actions"][format!("#VirtualMedia.{a}")]["target"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("{path}/Actions/VirtualMedia.{a}"))
    };
    Device {
        path: path.to_string(),
        inserted: v["Inserted"].as_bool().unwrap_or(false),
        image: v["Image"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string),
        insert: action("InsertMedia"),
        eject: action("EjectMedia"),
    }
}

/// Whether a device takes a CD image (`MediaTypes` has `CD` or `DVD`).
fn is_cd(v: &Value) -> bool {
    v["MediaTypes"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| matches!(t.as_str(), Some("CD" | "DVD")))
}

/// The system's CD device.
pub(super) async fn cd(bmc: &Bmc, system: &str) -> Result<Device> {
    let (sys, _) = bmc.get(system, "redfish: read the system").await?;
    let coll = match sys["VirtualMedia"]["@odata.id"].as_str() {
        Some(c) => c.to_string(),
        None => {
            let manager = sys["Links"]["ManagedBy"][0]["@odata.id"]
                .as_str()
                .ok_or_else(no_media)?
                .to_string();
            let (m, _) = bmc.get(&manager, "redfish: read the manager").await?;
            m["VirtualMedia"]["@odata.id"]
                .as_str()
                .ok_or_else(no_media)?
                .to_string()
        }
    };
    let (list, _) = bmc
        .get(&coll, "redfish: list the virtual media devices")
        .await?;
    for m in members(&list) {
        let (v, _) = bmc.get(&m, "redfish: read a virtual media device").await?;
        if is_cd(&v) {
            return Ok(device(&m, &v));
        }
    }
    Err(ProviderError::permanent(
        "redfish: boot virtualMedia: the BMC has no CD or DVD virtual media device",
    ))
}

fn no_media() -> ProviderError {
    ProviderError::permanent(
        "redfish: boot virtualMedia: the BMC offers no virtual media (no VirtualMedia on the system or its manager)",
    )
}

/// Reads the device again.
pub(super) async fn read(bmc: &Bmc, path: &str) -> Result<Device> {
    let (v, _) = bmc
        .get(path, "redfish: read the virtual media device")
        .await?;
    Ok(device(path, &v))
}

/// Inserts `url` (secret: it carries the node's token), ejecting what
/// another insert left in the device first.
pub(super) async fn insert(bmc: &Bmc, dev: &Device, url: &str) -> Result<()> {
    if dev.inserted && dev.image.as_deref() != Some(url) {
        eject(bmc, dev).await?;
    } else if dev.inserted {
        return Ok(());
    }
    let what = "redfish: insert the virtual media";
    let body = json!({ "Image": url, "Inserted": true, "WriteProtected": true });
    let reply = bmc
        .call(Method::POST, &dev.insert, Some(&body), None, what)
        .await?;
    super::super::check(&reply, what, &[bmc.secrets()[0], url])
}

pub(super) async fn eject(bmc: &Bmc, dev: &Device) -> Result<()> {
    if !dev.inserted {
        return Ok(());
    }
    bmc.send(
        Method::POST,
        &dev.eject,
        &json!({}),
        None,
        "redfish: eject the virtual media",
    )
    .await
}
