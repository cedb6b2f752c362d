//! `GET /v1/cluster`, `POST /v1/cluster/bootstrap-complete`: the cluster's
//! view (roles, bootstrap teardown) and its one completion;
//! `GET /v1/cluster/machines`, `POST /v1/cluster/destroy`: a provider's
//! machines that carry the cluster's ownership mark, and their deletion.

use super::*;

pub(super) async fn cluster(ctl: &Arc<Controller>, _: auth::Caller) -> Response<Body> {
    let controller = controller_view(ctl).await;
    let snap = ctl.app.live.load();
    match ctl.store.cluster(teardown::BOOTSTRAP_COMPLETE) {
        Ok(b) => reply(
            StatusCode::OK,
            &json!({
                "name": snap.site.cluster.name,
                "domain": snap.site.cluster.domain(),
                "bootstrapComplete": bootstrap_view(b),
                "roles": roles_view(ctl, &snap),
                "controller": controller,
                "csrs": crate::cluster::view(ctl),
                "conditions": teardown::conditions(ctl).iter().map(|c| json!({
                    "type": c.kind, "status": c.status, "reason": c.reason, "message": c.message, "lastTransitionTime": rfc3339(c.at),
                })).collect::<Vec<_>>(),
            }),
        ),
        Err(e) => internal(e),
    }
}

/// Which store, and which appliance runs the reconcile loops: this one on
/// SQLite; on etcd the elected one (`null` while none is).
async fn controller_view(ctl: &Controller) -> Value {
    let here = crate::leader::identity();
    match ctl.store.shared() {
        None => json!({ "store": "sqlite", "appliance": here, "leader": here, "leading": true }),
        Some(etcd) => {
            let leader = match etcd.leader(crate::leader::ELECTION).await {
                Ok(l) => json!(l),
                Err(e) => {
                    warn!(error = %e, "controller leader not read from etcd");
                    Value::Null
                }
            };
            json!({ "store": "etcd", "appliance": here, "leader": leader, "leading": ctl.acting().is_some() })
        }
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

fn query_value(q: Option<&str>, key: &str) -> Option<String> {
    q?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| {
            percent_encoding::percent_decode_str(v)
                .decode_utf8_lossy()
                .into_owned()
        })
    })
}

/// The provider's owned machines, each with the API node whose machine it is.
async fn owned(ctl: &Arc<Controller>, provider: &str) -> Result<Vec<Value>, Response<Body>> {
    let p = ctl
        .provider(provider)
        .map_err(|e| err(StatusCode::BAD_REQUEST, e))?;
    let snap = ctl.app.live.load();
    let listed = match p.owned(&snap.site.cluster.name).await {
        Ok(Some(l)) => l,
        Ok(None) => {
            return Err(err(
                StatusCode::BAD_REQUEST,
                format!(
                    "provider {provider} marks no machines as the cluster's: nothing to destroy"
                ),
            ))
        }
        Err(e) => return Err(err(StatusCode::BAD_GATEWAY, e.to_string())),
    };
    let mut by_id = std::collections::HashMap::new();
    for row in ctl.store.nodes().map_err(internal)? {
        if let Ok(Some(r)) = ctl.store.resource(&row.name) {
            if r.provider == provider {
                by_id.insert(r.external_id, row.name.clone());
            }
        }
    }
    Ok(listed
        .into_iter()
        .map(|(m, name)| {
            json!({"id": m.id, "name": name, "state": m.state_str(), "addresses": m.addresses,
                   "node": by_id.get(&m.id)})
        })
        .collect())
}

/// `GET /v1/cluster/machines?provider=P`.
pub(super) async fn machines(
    ctl: &Arc<Controller>,
    _: auth::Caller,
    q: Option<&str>,
) -> Response<Body> {
    let Some(provider) = query_value(q, "provider") else {
        return err(StatusCode::BAD_REQUEST, "give ?provider=NAME");
    };
    match owned(ctl, &provider).await {
        Ok(m) => reply(
            StatusCode::OK,
            &json!({"provider": provider, "machines": m}),
        ),
        Err(r) => r,
    }
}

/// `POST /v1/cluster/destroy` `{"provider": P, "machines": [ids]}`: deletes
/// the listed machines that still carry the cluster's mark (and nothing
/// else): a machine of an API node through that node's delete (the node
/// goes too, so nothing re-creates it), any other directly.
pub(super) async fn destroy(
    ctl: &Arc<Controller>,
    _: auth::Caller,
    req: Request<hyper::body::Incoming>,
) -> Response<Body> {
    let body = match read_body(ctl, req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Destroy {
        provider: String,
        machines: Vec<String>,
    }
    let d: Destroy = match serde_json::from_slice(&body) {
        Ok(d) => d,
        Err(e) => return err(StatusCode::BAD_REQUEST, format!("body: {e}")),
    };
    let listed = match owned(ctl, &d.provider).await {
        Ok(m) => m,
        Err(r) => return r,
    };
    let p = match ctl.provider(&d.provider) {
        Ok(p) => p,
        Err(e) => return err(StatusCode::BAD_REQUEST, e),
    };
    let mut done = Vec::new();
    let mut skipped = Vec::new();
    for id in &d.machines {
        let Some(m) = listed.iter().find(|m| m["id"] == json!(id)) else {
            skipped.push(
                json!({"id": id, "reason": "not a machine of this cluster (no ownership mark)"}),
            );
            continue;
        };
        match m["node"].as_str() {
            Some(node) => {
                let _w = ctl.writing().await;
                let r = match ctl.store.node(node) {
                    Ok(Some(row)) => ctl
                        .delete_locked(&row, "cluster destroy", false)
                        .map_err(|e| e.to_string()),
                    Ok(None) => Ok(()),
                    Err(e) => Err(e.to_string()),
                };
                done.push(
                    json!({"id": id, "name": m["name"], "via": "node", "node": node,
                                 "error": r.err()}),
                );
            }
            None => {
                let r = p.delete(id).await.map_err(|e| e.to_string());
                info!(provider = %d.provider, id = %id, ok = r.is_ok(), "cluster destroy: machine without a node deleted");
                done.push(json!({"id": id, "name": m["name"], "via": "direct", "error": r.err()}));
            }
        }
    }
    let target = format!("{} {} machine(s)", d.provider, done.len());
    let r = reply(
        StatusCode::ACCEPTED,
        &json!({"provider": d.provider, "deleting": done, "skipped": skipped}),
    );
    access::with_target(r, target)
}
