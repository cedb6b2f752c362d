//! `GET /v1/nodes/{name}/inventory`: what the node's machine reported
//! (the inspection agent), the disk its hints choose and what its role's
//! minimums say; `POST /v1/nodes/{name}/inspect`: forget the inventory, so
//! that its next network boot inspects again (a disk or DIMM replaced).

use super::*;

pub(in crate::api) fn inventory(
    ctl: &Arc<Controller>,
    _: auth::Caller,
    name: &str,
) -> Response<Body> {
    let snap = ctl.app.live.load_full();
    let Some(node) = snap.site.node(name) else {
        return err(StatusCode::NOT_FOUND, "no such node");
    };
    let rec = ctl.app.inventories.get(name);
    let plan = bootd::plan::plan(
        &snap.site,
        node,
        rec.as_deref().map(|r| &r.inventory),
        ctl.app.inventories.release(name),
    );
    let installed = ctl.app.installed.at(name).is_some()
        && snap.site.ignition.after_install == site::AfterInstall::Disk;
    let next = match &plan {
        _ if installed => json!({"boot": "disk"}),
        bootd::plan::Plan::Live => json!({"boot": "live"}),
        bootd::plan::Plan::Inspect => json!({"boot": "inspect"}),
        bootd::plan::Plan::Wipe { reboot } => {
            json!({"boot": "wipe", "then": if *reboot { "install" } else { "powerOff" }})
        }
        bootd::plan::Plan::Install { device, why } => {
            json!({"boot": "install", "device": device, "why": why})
        }
        bootd::plan::Plan::Refuse { condition, why } => {
            json!({"boot": "none", "reason": condition, "why": why})
        }
    };
    let min = snap.site.inspection.minimums_of(&node.role);
    reply(
        StatusCode::OK,
        &json!({
            "name": name,
            "hints": node.disk_hints(),
            "minimums": min,
            "reported": rec.as_deref(),
            "nextBoot": next,
        }),
    )
}

pub(in crate::api) fn inspect(
    ctl: &Arc<Controller>,
    _: auth::Caller,
    name: &str,
) -> Response<Body> {
    let snap = ctl.app.live.load_full();
    if snap.site.node(name).is_none() {
        return err(StatusCode::NOT_FOUND, "no such node");
    }
    match ctl.app.inventories.clear(name) {
        Ok(had) => {
            ctl.note(
                name,
                events::API,
                "inspection requested: the next network boot reports the machine's inventory again",
            );
            reply(
                StatusCode::OK,
                &json!({"name": name, "hadInventory": had, "nextNetworkBoot": "inspect"}),
            )
        }
        Err(e) => internal(e),
    }
}
