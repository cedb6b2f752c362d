//! A deleted node's machine, behind a BMC, is wiped before it is powered
//! off (docs/bmc.md, "Wipe on release").

use super::*;

/// How long a released machine has to report its wipe before it is
/// powered off unwiped (the condition says so).
const WIPE_DEADLINE_MS: i64 = 30 * 60 * 1000;

/// A released node's disks are wiped before its machine is powered off:
/// it boots from the network once more (bootd serves the agent's wipe),
/// until the agent's report arrives or [`WIPE_DEADLINE_MS`] passes.
/// `None`: go on with the delete.
pub(super) async fn release_step(
    ctl: &Arc<Controller>,
    row: &NodeRow,
    provider: &dyn crate::providers::Provider,
    id: &str,
    since: i64,
) -> Result<Option<Next>, StoreError> {
    let name = row.name.as_str();
    // Released: the node leaves the served site now, as any deleted node.
    async fn done(ctl: &Controller, name: &str) -> Result<Option<Next>, StoreError> {
        if let Err(e) = ctl.app.inventories.set_releasing(name, None) {
            error!(node = %name, error = %e, "the release mark was not cleared");
            return Ok(Some(Next::Poll));
        }
        let _w = ctl.writing().await;
        let rows = ctl.store.nodes()?;
        if let Err(e) = ctl.export_overlay_now(&rows) {
            error!(node = %name, error = %e, "the overlay without the released node was not written");
        }
        Ok(None)
    }
    let wiped = ctl
        .app
        .inventories
        .get(name)
        .and_then(|r| r.wiped.clone())
        .filter(|w| w.at_ms >= since);
    if wiped.is_some() {
        info!(node = %name, "disks wiped: powering the machine off");
        return done(ctl, name).await;
    }
    if now_ms() - since > WIPE_DEADLINE_MS {
        warn!(node = %name, "the machine did not report its wipe in time: powering it off unwiped");
        ctl.store.set_condition(
            name,
            &Condition {
                kind: "DisksWiped".into(),
                status: "False".into(),
                reason: "NotReported".into(),
                message: "the machine did not report its wipe within 30 minutes of the delete: its disks may still hold its install".into(),
                at: now_ms(),
            },
        )?;
        return done(ctl, name).await;
    }
    let snap = ctl.app.live.load_full();
    let Some(req) = node_request(ctl, &snap, row) else {
        // Not served (yet): the overlay keeps releasing nodes; wait for it.
        return Ok(Some(Next::Poll));
    };
    match provider.release(id, &req).await {
        Ok(true) => {
            ctl.store.set_phase(
                name,
                "Deleting",
                "wiping its disks: booted from the network, the agent erases their signatures and powers it off",
            )?;
            Ok(Some(Next::Poll))
        }
        Ok(false) => done(ctl, name).await,
        Err(e) => Ok(Some(retry_delete(ctl, name, e))),
    }
}
