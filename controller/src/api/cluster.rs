//! `GET /v1/cluster` and `POST /v1/cluster/bootstrap-complete`: the
//! cluster's view (roles, bootstrap teardown) and its one completion.

use super::*;

pub(super) fn cluster(ctl: &Arc<Controller>, _: auth::Caller) -> Response<Body> {
    let snap = ctl.app.live.load();
    match ctl.store.cluster(teardown::BOOTSTRAP_COMPLETE) {
        Ok(b) => reply(
            StatusCode::OK,
            &json!({
                "name": snap.site.cluster.name,
                "domain": snap.site.cluster.domain(),
                "bootstrapComplete": bootstrap_view(b),
                "roles": roles_view(ctl, &snap),
                "conditions": teardown::conditions(ctl).iter().map(|c| json!({
                    "type": c.kind, "status": c.status, "reason": c.reason, "message": c.message, "lastTransitionTime": rfc3339(c.at),
                })).collect::<Vec<_>>(),
            }),
        ),
        Err(e) => internal(e),
    }
}

/// Per role with a replica count: how many nodes it has and how many are Ready.
fn roles_view(ctl: &Controller, snap: &Snapshot) -> Value {
    let rows = ctl.store.nodes().unwrap_or_default();
    let mut out = serde_json::Map::new();
    for (role, want) in &snap.site.cluster.replicas {
        let mut names: Vec<String> = snap
            .site
            .nodes
            .iter()
            .filter(|n| &n.role == role)
            .map(|n| n.name.clone())
            .collect();
        for r in rows
            .iter()
            .filter(|r| !r.deleting && r.spec["role"] == role.as_str())
        {
            if !names.contains(&r.name) {
                names.push(r.name.clone());
            }
        }
        let ready = names
            .iter()
            .filter(|n| matches!(node_view(ctl, snap, n), Ok(Some(v)) if v["phase"] == "Ready"))
            .count();
        out.insert(
            role.clone(),
            json!({ "replicas": want, "present": names.len(), "ready": ready }),
        );
    }
    Value::Object(out)
}

fn bootstrap_view(b: Option<(String, i64)>) -> Value {
    match b {
        Some((by, at)) => json!({ "complete": true, "time": rfc3339(at), "by": by }),
        None => json!({ "complete": false, "time": null }),
    }
}

pub(super) async fn bootstrap_complete(ctl: &Arc<Controller>, _: auth::Caller) -> Response<Body> {
    match ctl.complete_bootstrap("api") {
        Ok(_) => {}
        Err(e) => return internal(e),
    }
    // The revocation is local and quick: answer after it, so that the
    // bootstrap node's Ignition is refused once this returns.
    teardown::settle(ctl, Duration::from_secs(2)).await;
    match ctl.store.cluster(teardown::BOOTSTRAP_COMPLETE) {
        Ok(b) => reply(StatusCode::OK, &bootstrap_view(b)),
        Err(e) => internal(e),
    }
}
