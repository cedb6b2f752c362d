//! The API's HTTP side: the accept loop (caps, TLS, [`runtime::http1`]'s limits, connections closed on bad or slow clients counted as `bootd_api_connections_closed_total{reason}`), every route in one function (`route`), each handler, and the JSON replies (errors carry a safe message; the detail goes to the log).

use super::*;

mod access;
mod cluster;
mod discovered;
mod failure;
mod inventory;
use cluster::{bootstrap_complete, cluster, destroy, machines};
use discovered::{adopt, discovered};
pub(super) use failure::internal;

/// Serves the API on `listener` (TLS with the site CA) until `shutdown`.
pub(super) async fn serve(
    ctl: Arc<Controller>,
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let conns = runtime::conns::Conns::new(ctl.tuning.connections);
    while let Some((stream, peer)) = runtime::net::accept(&listener, &shutdown, "API").await {
        // Over a cap: closed at once, counted (not logged per connection).
        let held = match conns.take(peer.ip().to_canonical()) {
            Ok(h) => h,
            Err(why) => {
                ctl.metrics
                    .denials
                    .get_or_create(&bootd::metrics::Reason {
                        reason: why.as_str(),
                    })
                    .inc();
                drop(stream);
                continue;
            }
        };
        let (ctl, acceptor, shutdown) = (Arc::clone(&ctl), acceptor.clone(), shutdown.clone());
        tracker.spawn(async move {
            let _held = held;
            let limits = ctl.tuning.http;
            let why = match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(stream))
                .await
            {
                Ok(Ok(tls)) => {
                    let c = Arc::clone(&ctl);
                    let svc =
                        hyper::service::service_fn(move |req| handle(Arc::clone(&c), req, peer));
                    // On shutdown: the request in progress gets 5 s to finish.
                    let stop = async {
                        shutdown.cancelled().await;
                        tokio::time::sleep(Duration::from_secs(5)).await;
                    };
                    runtime::http1::serve(tls, svc, &limits, shutdown.cancelled(), stop).await
                }
                Ok(Err(_)) => Some(runtime::http1::Closed::HandshakeFailed),
                Err(_) => Some(runtime::http1::Closed::HandshakeTimeout),
            };
            if let Some(why) = why {
                tracing::debug!(%peer, reason = why.as_str(), "API connection closed");
                ctl.metrics
                    .closed
                    .get_or_create(&bootd::metrics::Reason {
                        reason: why.as_str(),
                    })
                    .inc();
            }
        });
    }
}

pub(super) async fn handle(
    ctl: Arc<Controller>,
    req: Request<hyper::body::Incoming>,
    peer: SocketAddr,
) -> Result<Response<Body>, std::convert::Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let (route_name, resp, caller) = route(&ctl, req, peer).await;
    let status = resp.status().as_u16();
    ctl.metrics
        .requests
        .get_or_create(&bootd::metrics::RouteStatus {
            route: route_name,
            status,
        })
        .inc();
    // A 401 was logged by the gate, a few lines a second at most.
    if let Some(c) = &caller {
        info!(%method, path = %path.escape_debug(), %peer, status, route = route_name, token = c.name(), "API request");
        if access::is_write(&method) {
            access::audit(&ctl, c, &method, &path, peer, &resp);
        }
    } else if status != 401 {
        info!(%method, path = %path.escape_debug(), %peer, status, route = route_name, "API request");
    }
    Ok(resp)
}

pub(super) fn reply(status: StatusCode, v: &Value) -> Response<Body> {
    bootd::body::json_reply(status, v)
}

pub(super) fn err(status: StatusCode, msg: impl Into<String>) -> Response<Body> {
    reply(status, &json!({ "error": msg.into() }))
}

pub(super) fn unauthorized() -> Response<Body> {
    let mut r = err(StatusCode::UNAUTHORIZED, "unauthorized");
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

/// Every route of the API, in one place (the scope each needs:
/// `access::needed`); the caller, for the log, when its token was valid.
pub(super) async fn route(
    ctl: &Arc<Controller>,
    req: Request<hyper::body::Incoming>,
    peer: SocketAddr,
) -> (&'static str, Response<Body>, Option<auth::Caller>) {
    let path = req.uri().path().to_string();
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    if segs.as_slice() == ["healthz"] {
        let ok = reply(StatusCode::OK, &json!({ "status": "ok" }));
        return ("healthz", ok, None);
    }
    let caller = match access::admit(ctl, &req, &segs, peer) {
        access::Admit::Caller(c) => c,
        access::Admit::Refused(name, r, who) => return (name, r, who),
    };
    let who = Some(caller.clone());
    let method = req.method().clone();
    if method == Method::GET && segs.first() == Some(&"status") {
        // bootd's status page and timeline JSON, for a caller with a token
        // (on bootd's own listeners they are only for `host.statusFrom`).
        let _: auth::Caller = caller;
        let snap = ctl.app.live.load_full();
        let (name, r) = bootd::status::route(&ctl.app, &snap, &path, req.uri().query());
        return (name, r, who);
    }
    let (name, r) = match (&method, segs.as_slice()) {
        (&Method::GET, ["v1", "nodes"]) => ("nodes", list_nodes(ctl, caller)),
        (&Method::POST, ["v1", "nodes"]) => ("nodes", create_node(ctl, caller, req).await),
        (&Method::GET, ["v1", "nodes", name]) => ("node", get_node(ctl, caller, name)),
        (&Method::DELETE, ["v1", "nodes", name]) => {
            let q = req.uri().query().map(str::to_string);
            ("node", delete_node(ctl, caller, name, q.as_deref()).await)
        }
        (&Method::GET, ["v1", "nodes", name, "events"]) => {
            ("events", node_events(ctl, caller, name))
        }
        (&Method::GET, ["v1", "nodes", name, "timeline"]) => {
            ("timeline", node_timeline(ctl, caller, name))
        }
        (&Method::POST, ["v1", "nodes", name, "reinstall"]) => {
            ("reinstall", reinstall(ctl, caller, name).await)
        }
        (&Method::GET, ["v1", "nodes", name, "inventory"]) => {
            ("inventory", inventory::inventory(ctl, caller, name))
        }
        (&Method::POST, ["v1", "nodes", name, "inspect"]) => {
            ("inventory", inventory::inspect(ctl, caller, name))
        }
        (&Method::GET, ["v1", "discovered"]) => ("discovered", discovered(ctl, caller)),
        (&Method::POST, ["v1", "discovered", key, "adopt"]) => {
            ("discovered", adopt(ctl, caller, key, req).await)
        }
        (&Method::GET, ["v1", "cluster"]) => ("cluster", cluster(ctl, caller).await),
        (&Method::POST, ["v1", "cluster", "bootstrap-complete"]) => {
            ("cluster", bootstrap_complete(ctl, caller).await)
        }
        (&Method::GET, ["v1", "cluster", "machines"]) => {
            let q = req.uri().query().map(str::to_string);
            ("cluster", machines(ctl, caller, q.as_deref()).await)
        }
        (&Method::POST, ["v1", "cluster", "destroy"]) => {
            ("cluster", destroy(ctl, caller, req).await)
        }
        (
            _,
            ["v1", "nodes"]
            | ["v1", "nodes", _]
            | ["v1", "nodes", _, "events"]
            | ["v1", "nodes", _, "timeline"]
            | ["v1", "nodes", _, "reinstall"]
            | ["v1", "nodes", _, "inventory"]
            | ["v1", "nodes", _, "inspect"]
            | ["v1", "discovered"]
            | ["v1", "discovered", _, "adopt"]
            | ["v1", "cluster"]
            | ["v1", "cluster", "bootstrap-complete"]
            | ["v1", "cluster", "machines"]
            | ["v1", "cluster", "destroy"],
        ) => (
            "other",
            err(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
        ),
        _ => ("other", err(StatusCode::NOT_FOUND, "no such route")),
    };
    (name, r, who)
}

/// The status of one node (site or API), as the API shows it.
pub(super) fn node_view(
    ctl: &Controller,
    snap: &Snapshot,
    name: &str,
) -> Result<Option<Value>, store::StoreError> {
    let (row, stored) = ctl.store.node_and_conditions(name)?;
    let site_node = snap.site.node(name);
    if row.is_none() && site_node.is_none() {
        return Ok(None);
    }
    let kind = row
        .as_ref()
        .map(|r| providers::BootKind::of_provider(&r.provider))
        .unwrap_or(providers::BootKind::Network);
    let conds = reconcile::conditions_view(row.as_ref(), stored, kind);
    let ready = conds
        .iter()
        .any(|c| c.kind == "Ready" && c.status == "True");
    let (phase, message) = match &row {
        Some(r) => (r.phase.clone(), r.message.clone()),
        None if ready => ("Ready".to_string(), String::new()),
        None => {
            let booted = conds
                .iter()
                .any(|c| c.kind == reconcile::NETWORK_BOOTED && c.status == "True");
            let msg = conds
                .iter()
                .find(|c| c.status != "True")
                .map(|c| c.message.clone())
                .unwrap_or_default();
            (if booted { "Booting" } else { "Waiting" }.to_string(), msg)
        }
    };
    let machine = ctl.store.resource(name)?.map(|m| {
        json!({ "provider": m.provider, "id": m.external_id, "state": m.state, "addresses": m.addresses, "updatedAt": rfc3339(m.updated_at) })
    });
    let facts = ctl
        .store
        .all_facts()?
        .remove(name)
        .and_then(|v| facts::Facts::from_json(&v));
    let spec = match (&row, site_node) {
        // As served: with the provider's address and MACs where it gave them.
        (Some(r), _) => facts::effective(&r.spec, facts.as_ref()).unwrap_or_else(|| r.spec.clone()),
        (None, Some(n)) => json!({
            "name": n.name, "role": n.role, "macs": n.macs.iter().map(|m| m.to_string()).collect::<Vec<_>>(),
            "ip": crate::addresses::ip_json(n), "arch": n.arch.as_str(), "image": n.image,
        }),
        (None, None) => Value::Null,
    };
    Ok(Some(json!({
        "name": name,
        "origin": if row.is_some() { "api" } else { "site" },
        "spec": spec,
        "provider": row.as_ref().map(|r| r.provider.clone()).unwrap_or(Value::Null),
        "bootKind": kind.as_str(),
        "phase": phase,
        "message": message,
        "createdAt": row.as_ref().map(|r| json!(rfc3339(r.created_at))).unwrap_or(Value::Null),
        "machine": machine,
        "facts": facts,
        "conditions": conds.iter().map(|c| json!({
            "type": c.kind, "status": c.status, "reason": c.reason, "message": c.message, "lastTransitionTime": rfc3339(c.at),
        })).collect::<Vec<_>>(),
    })))
}

pub(super) fn list_nodes(ctl: &Arc<Controller>, _: auth::Caller) -> Response<Body> {
    let snap = ctl.app.live.load_full();
    let rows = match ctl.store.nodes() {
        Ok(r) => r,
        Err(e) => return internal(e),
    };
    let mut names: Vec<String> = snap.site.nodes.iter().map(|n| n.name.clone()).collect();
    names.extend(
        rows.into_iter()
            .map(|r| r.name)
            .filter(|n| snap.site.node(n).is_none()),
    );
    let mut out = Vec::new();
    for n in &names {
        match node_view(ctl, &snap, n) {
            Ok(Some(v)) => out.push(v),
            Ok(None) => {}
            Err(e) => return internal(e),
        }
    }
    reply(StatusCode::OK, &json!({ "nodes": out }))
}

pub(super) fn get_node(ctl: &Arc<Controller>, _: auth::Caller, name: &str) -> Response<Body> {
    let snap = ctl.app.live.load_full();
    match node_view(ctl, &snap, name) {
        Ok(Some(v)) => reply(StatusCode::OK, &v),
        Ok(None) => err(StatusCode::NOT_FOUND, "no such node"),
        Err(e) => internal(e),
    }
}

pub(super) fn node_events(ctl: &Arc<Controller>, _: auth::Caller, name: &str) -> Response<Body> {
    let snap = ctl.app.live.load_full();
    match ctl.store.node(name) {
        Ok(None) if snap.site.node(name).is_none() => {
            return err(StatusCode::NOT_FOUND, "no such node")
        }
        Err(e) => return internal(e),
        _ => {}
    }
    match ctl.store.events(name) {
        Ok(ev) => {
            let list: Vec<Value> = ev
                .iter()
                .map(|e| json!({ "time": rfc3339(e.at), "kind": e.kind, "message": e.message }))
                .collect();
            reply(StatusCode::OK, &json!({ "node": name, "events": list }))
        }
        Err(e) => internal(e),
    }
}

/// The boot timeline (bootd::timeline) of a node, or of an unknown client
/// by its key (`mac 52:54:…`, `ip 10.…`, percent-encoded in the path).
pub(super) fn node_timeline(ctl: &Arc<Controller>, _: auth::Caller, name: &str) -> Response<Body> {
    let snap = ctl.app.live.load_full();
    let name = percent_encoding::percent_decode_str(name).decode_utf8_lossy();
    match bootd::status::timeline_json(&ctl.app, &snap, &name) {
        Some(v) => reply(StatusCode::OK, &v),
        None => err(StatusCode::NOT_FOUND, "no such node"),
    }
}

/// The request's body: at most [`MAX_REQUEST`] bytes (413), arriving within
/// `Tuning::body_timeout` (408: a client that sends its headers and then
/// trickles, or never sends, its body does not hold the connection).
async fn read_body(
    ctl: &Controller,
    req: Request<hyper::body::Incoming>,
) -> Result<bytes::Bytes, Response<Body>> {
    let body = Limited::new(req.into_body(), MAX_REQUEST).collect();
    match tokio::time::timeout(ctl.tuning.body_timeout, body).await {
        Ok(Ok(b)) => Ok(b.to_bytes()),
        Ok(Err(_)) => Err(err(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body larger than {MAX_REQUEST} bytes or cut short"),
        )),
        Err(_) => {
            let mut r = err(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "request body not received within {} s",
                    ctl.tuning.body_timeout.as_secs()
                ),
            );
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            Err(r)
        }
    }
}

pub(super) async fn create_node(
    ctl: &Arc<Controller>,
    caller: auth::Caller,
    req: Request<hyper::body::Incoming>,
) -> Response<Body> {
    match read_body(ctl, req).await {
        Ok(body) => {
            let name = access::node_name(&body);
            access::with_node(create_from(ctl, caller, body).await, name.as_deref())
        }
        Err(r) => r,
    }
}

/// `POST /v1/nodes` with its body read.
/// A rack machine (behind a BMC, or with no provider: brought up by other
/// means) installs to a disk or says `live: true`: one that says neither
/// would run the live system, be marked installed, and be told to boot an
/// empty disk at its next network boot. Not asked of the local provider's
/// lab VMs (they have no disk) nor of the clouds' machines (their provider
/// writes their disk, or, Equinix Metal's `custom_ipxe`, they keep the
/// behaviour the installs made on it rely on). Adopted machines: the same
/// (`discovered::adopt`).
fn no_disk_problem(spec: &NodeSpec, provider: Option<&providers::ProviderSpec>) -> Option<String> {
    let rack = provider.is_none_or(|p| matches!(p.name(), "redfish" | "ipmi"));
    (rack && !says_disk_or_live(spec)).then(|| NO_DISK.to_string())
}

/// Whether the node names a disk to install to or says it runs live.
pub(super) fn says_disk_or_live(spec: &NodeSpec) -> bool {
    spec.install_disk.is_some() || spec.root_device_hints.is_some() || spec.live == Some(true)
}

pub(super) const NO_DISK: &str = "live: the node network-boots and names no disk to install to: give \
    rootDeviceHints (Metal3's) or installDisk for the disk it installs to, or live: true for a node \
    that runs the live system and installs nothing";

async fn create_from(ctl: &Arc<Controller>, _: auth::Caller, body: bytes::Bytes) -> Response<Body> {
    // What the provider section leaves out and the site says (install-config's machine pools).
    let body = match serde_json::from_slice::<Value>(&body) {
        Ok(mut v) => {
            providers::fill_defaults(&mut v, &ctl.app.live.load().site);
            serde_json::to_vec(&v).unwrap_or_default().into()
        }
        Err(_) => body,
    };
    let (spec, provider) = match parse_create(&body) {
        Ok(x) => x,
        Err(e) => return err(StatusCode::BAD_REQUEST, e),
    };
    let mut problems: Vec<String> = provider
        .as_ref()
        .and_then(|p| p.check().ok())
        .unwrap_or_default();
    if let Some(p) = &provider {
        if let Err(e) = ctl.provider(p.name()) {
            problems.push(e);
        }
    }
    if let Some(p) = no_disk_problem(&spec, provider.as_ref()) {
        problems.push(p);
    }
    // A BMC password goes only where the site allows it: refused now,
    // not only when the provider would send it.
    if let Some(e) = provider
        .as_ref()
        .and_then(|p| providers::binding_problem(ctl.app.live.load().site.host.api.as_ref(), p))
    {
        problems.push(e);
    }
    if !problems.is_empty() {
        return reply(
            StatusCode::UNPROCESSABLE_ENTITY,
            &json!({ "error": "invalid node", "problems": problems }),
        );
    }
    let provider_json = provider
        .as_ref()
        .map(|p| serde_json::to_value(p).unwrap_or(Value::Null))
        .unwrap_or(Value::Null);
    let spec_json = serde_json::to_value(&spec).unwrap_or(Value::Null);

    let _w = ctl.writing().await;
    let snap = ctl.app.live.load_full();
    match ctl.store.node(&spec.name) {
        Ok(Some(existing)) => {
            // The same request again (a retry, or one of many concurrent ones): same answer.
            if existing.spec == spec_json
                && existing.provider == provider_json
                && !existing.deleting
            {
                return match node_view(ctl, &snap, &spec.name) {
                    Ok(Some(v)) => reply(StatusCode::OK, &v),
                    Ok(None) => err(StatusCode::NOT_FOUND, "no such node"),
                    Err(e) => internal(e),
                };
            }
            let why = if existing.deleting {
                "is being deleted"
            } else {
                "exists with a different spec"
            };
            return err(StatusCode::CONFLICT, format!("node {:?} {why}", spec.name));
        }
        Ok(None) => {}
        Err(e) => return internal(e),
    }
    if snap.site.node(&spec.name).is_some() {
        return err(
            StatusCode::CONFLICT,
            format!(
                "node {:?} is defined in the site file; it cannot be created through the API",
                spec.name
            ),
        );
    }
    let mut rows = match ctl.store.nodes() {
        Ok(r) => r,
        Err(e) => return internal(e),
    };
    let now = store::now_ms();
    let row = NodeRow {
        name: spec.name.clone(),
        spec: spec_json,
        provider: provider_json,
        created_at: now,
        deleting: false,
        phase: "Pending".into(),
        message: String::new(),
        updated_at: now,
    };
    rows.push(row.clone());
    let facts = match ctl.store.all_facts() {
        Ok(f) => f,
        Err(e) => return internal(e),
    };
    // Validate exactly as every daemon will load it, before anything is
    // stored; a node whose provider assigns its address or MACs is
    // validated with stand-ins for them, and served once the provider says.
    let assigned = spec.ip.is_empty() || spec.macs.is_empty();
    if assigned && provider.is_none() {
        return reply(
            StatusCode::UNPROCESSABLE_ENTITY,
            &json!({ "error": "invalid node", "problems": ["ip and macs: required for a node without a provider (only a provider can assign them)"] }),
        );
    }
    let mut check_rows = rows.clone();
    if assigned {
        if let Some(last) = check_rows.last_mut() {
            last.spec = facts::stand_ins(&snap.site, &rows, &facts, &last.spec);
        }
    }
    let text = ctl.overlay_text(&check_rows, &facts);
    let candidate = match site::load_with_overlay(&ctl.site_path, &text) {
        Ok(s) => s,
        Err(e) => {
            let problems = crate::problems(&e);
            return reply(
                StatusCode::UNPROCESSABLE_ENTITY,
                &json!({ "error": "invalid node", "problems": problems }),
            );
        }
    };
    if let Some(p) = &provider {
        // A provider's user data limit: refuse now, not after the machine is half made.
        let pointer = bootd::http::pointer_for(
            &ctl.app,
            &snap,
            &spec.name,
            bootd::token::Scope::Provider,
            None,
        )
        .to_string();
        if let Err(e) = (p.registration.check_userdata)(&pointer) {
            return reply(
                StatusCode::UNPROCESSABLE_ENTITY,
                &json!({ "error": "invalid node", "problems": [e] }),
            );
        }
    }
    // What is served: the site with exactly these rows (the new node only
    // once it has an address and MACs).
    let (text, candidate) = if assigned {
        let text = ctl.overlay_text(&rows, &facts);
        match site::load_with_overlay(&ctl.site_path, &text) {
            Ok(s) => (text, s),
            Err(e) => return internal(e),
        }
    } else {
        (text, candidate)
    };
    match ctl.store.insert_node(&row) {
        Ok(true) => {
            // A new node installs, whatever a node of this name did before.
            if let Err(e) = ctl.app.installed.clear(&spec.name) {
                warn!(node = %spec.name, error = %e, "a stale install mark was not cleared");
            }
            // And it is another machine: its inventory is its own.
            if let Err(e) = ctl.app.inventories.clear(&spec.name) {
                warn!(node = %spec.name, error = %e, "a stale inventory was not cleared");
            }
        }
        Ok(false) => return err(StatusCode::CONFLICT, format!("node {:?} exists", spec.name)),
        Err(e) => return internal(e),
    }
    // The candidate is the site with exactly these rows: served as validated.
    if let Err(e) = ctl.write_and_serve(&text, candidate, &rows) {
        // Stored: the loop and the next start retry the export.
        error!(node = %spec.name, error = %e, "node stored but the overlay was not written");
    }
    ctl.note(&spec.name, events::API, "created through the API");
    info!(node = %spec.name, provider = %row.provider.as_object().and_then(|o| o.keys().next().cloned()).unwrap_or_else(|| "none".into()), "node created");
    ctl.ensure_loop(&spec.name);
    let snap = ctl.app.live.load_full();
    match node_view(ctl, &snap, &spec.name) {
        Ok(Some(v)) => reply(StatusCode::CREATED, &v),
        Ok(None) => err(StatusCode::NOT_FOUND, "no such node"),
        Err(e) => internal(e),
    }
}

pub(super) async fn delete_node(
    ctl: &Arc<Controller>,
    _: auth::Caller,
    name: &str,
    q: Option<&str>,
) -> Response<Body> {
    let _w = ctl.writing().await;
    let snap = ctl.app.live.load_full();
    let row = match ctl.store.node(name) {
        Ok(Some(r)) => r,
        Ok(None) if snap.site.node(name).is_some() => {
            return err(
                StatusCode::CONFLICT,
                format!("node {name:?} is defined in the site file; remove it there"),
            );
        }
        Ok(None) => return err(StatusCode::NOT_FOUND, "no such node"),
        Err(e) => return internal(e),
    };
    let keep_disks = q.is_some_and(|q| {
        q.split('&')
            .any(|kv| kv == "keepDisks=true" || kv == "keepDisks")
    });
    if let Err(e) = ctl.delete_locked(&row, "requested through the API", keep_disks) {
        return internal(e);
    }
    reply(
        StatusCode::ACCEPTED,
        &json!({ "name": name, "phase": "Deleting" }),
    )
}

/// An API node's epoch advanced to now, and the overlay served with it:
/// tokens issued to the node before are void. A site node's epoch is the
/// site's (`epoch`): nothing to do.
async fn advance_epoch(ctl: &Arc<Controller>, name: &str) -> Result<(), String> {
    let _w = ctl.writing().await;
    if ctl.store.node(name).map_err(|e| e.to_string())?.is_none() {
        return Ok(());
    }
    ctl.store
        .set_cluster(&crate::epoch_key(name), &crate::store::now_ms().to_string())
        .map_err(|e| e.to_string())?;
    let rows = ctl.store.nodes().map_err(|e| e.to_string())?;
    ctl.export_overlay_now(&rows)
}

/// Forgets that the node installed: its next network boot gets the
/// installer again instead of its local disk.
pub(super) async fn reinstall(
    ctl: &Arc<Controller>,
    _: auth::Caller,
    name: &str,
) -> Response<Body> {
    if ctl.app.live.load().site.node(name).is_none() {
        return err(StatusCode::NOT_FOUND, "no such node");
    }
    // An API node's tokens of before are void (its epoch advances), before
    // it is told to install again: a failure leaves it as it was.
    if let Err(e) = advance_epoch(ctl, name).await {
        tracing::error!(node = %name, error = %e, "reinstall: the node's epoch was not advanced");
        return err(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the node's epoch was not advanced; see bootd's log",
        );
    }
    match ctl.app.installed.clear(name) {
        Ok(was) => {
            info!(node = %name, was_installed = was, "reinstall requested through the API");
            ctl.note(
                name,
                events::API,
                if was {
                    "reinstall requested: the next network boot installs"
                } else {
                    "reinstall requested: it had not installed; the next network boot installs"
                },
            );
            reply(
                StatusCode::OK,
                &json!({ "name": name, "wasInstalled": was, "nextNetworkBoot": "install" }),
            )
        }
        Err(e) => internal(e),
    }
}
