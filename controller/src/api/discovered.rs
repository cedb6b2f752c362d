//! `GET /v1/discovered` and `POST /v1/discovered/{key}/adopt`: machines in
//! no node that reported themselves, and making one a node (wiped first
//! when it installs to disk, unless `keepDisks`).

use super::*;

/// Machines with unknown MACs that reported themselves (`discovery:`).
pub(in crate::api) fn discovered(ctl: &Arc<Controller>, _: auth::Caller) -> Response<Body> {
    let snap = ctl.app.live.load();
    reply(
        StatusCode::OK,
        &json!({ "enabled": snap.site.discovery.enabled, "machines": ctl.app.discovered.list() }),
    )
}

/// Turns a discovered machine into an API node: its MACs, and the name,
/// role and (optionally) address and node keys the body gives, validated
/// exactly as `POST /v1/nodes`; then the machine is no longer listed. At
/// its next report it gets its node's script.
pub(in crate::api) async fn adopt(
    ctl: &Arc<Controller>,
    caller: auth::Caller,
    key: &str,
    req: Request<hyper::body::Incoming>,
) -> Response<Body> {
    let body = match read_body(ctl, req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let key = percent_encoding::percent_decode_str(key).decode_utf8_lossy();
    let m = match ctl.app.discovered.adoptable(&key) {
        Ok(Some(m)) => m,
        Ok(None) => {
            return err(
                StatusCode::NOT_FOUND,
                "no such discovered machine (a UUID, or a MAC it booted from and reported from its own lease)",
            )
        }
        Err(e) => return err(StatusCode::CONFLICT, e.to_string()),
    };
    let mut spec = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(o)) => o,
        _ => return err(StatusCode::BAD_REQUEST, "the body must be a JSON object: {\"name\", \"role\", optional \"ip\" and other node keys}"),
    };
    if spec.contains_key("provider") {
        return err(
            StatusCode::BAD_REQUEST,
            "provider: an adopted machine is one that booted through this host; create a provider node with POST /v1/nodes",
        );
    }
    // Not a node key: whether its disks are kept as they are.
    let keep_disks = match spec.remove("keepDisks") {
        None => false,
        Some(Value::Bool(b)) => b,
        Some(_) => return err(StatusCode::BAD_REQUEST, "keepDisks: true or false"),
    };
    if !["installDisk", "rootDeviceHints"]
        .iter()
        .any(|k| spec.contains_key(*k))
        && spec.get("live") != Some(&Value::Bool(true))
    {
        return reply(
            StatusCode::UNPROCESSABLE_ENTITY,
            &json!({ "error": "invalid node", "problems": [NO_DISK] }),
        );
    }
    // Its verified MACs, unless the operator names them (a statement, as
    // in POST /v1/nodes): a MAC its reports only listed is not proof.
    if !spec.contains_key("macs") {
        if m.macs.is_empty() {
            return reply(
                StatusCode::UNPROCESSABLE_ENTITY,
                &json!({ "error": "invalid node", "problems": [format!(
                    "macs: none of this machine's MACs ({}) was verified (reported from its own lease, or from the address the neighbour table gives it): name the node's MACs with macs",
                    m.unverified.join(", "))] }),
            );
        }
        spec.insert("macs".into(), json!(m.macs));
    }
    if !spec.contains_key("arch") {
        if let Some(a) = m.buildarch.as_deref().and_then(|b| match b {
            "arm64" => Some("aarch64"),
            "x86_64" | "i386" => Some("x86_64"),
            _ => None,
        }) {
            spec.insert("arch".into(), json!(a));
        }
    }
    if !spec.contains_key("ip") {
        let snap = ctl.app.live.load();
        match crate::addresses::free_address(&snap.site, m.ip) {
            Some(ip) => {
                spec.insert("ip".into(), json!(ip.to_string()));
            }
            None => {
                return reply(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    &json!({ "error": "invalid node", "problems": ["ip: no free address outside the pool in the machine's network: give one"] }),
                )
            }
        }
    }
    let spec_name = spec.get("name").and_then(Value::as_str).map(str::to_string);
    let body = serde_json::to_vec(&Value::Object(spec)).unwrap_or_default();
    let resp = create_from(ctl, caller, body.into()).await;
    if resp.status().is_success() {
        if let Err(e) = ctl.app.discovered.remove(&m.key) {
            warn!(key = %m.key, error = %e, "adopted machine not removed from the discovered list");
        }
        ctl.app
            .metrics
            .discovered
            .set(ctl.app.discovered.len() as i64);
        ctl.app
            .metrics
            .discovered_conflicts
            .set(ctl.app.discovered.conflicts() as i64);
        info!(key = %m.key, macs = ?m.macs, unverified = ?m.unverified, "discovered machine adopted");
        let name = spec_name.as_deref().unwrap_or_default();
        // What its inspection found is the node's: it need not inspect again.
        if let Some(inv) = &m.inventory {
            let from =
                m.ip.unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
            if let Err(e) = ctl
                .app
                .inventories
                .put(name, inv.clone(), from, crate::store::now_ms())
            {
                warn!(node = %name, error = %e, "the discovered machine's inventory was not kept for its node: it inspects again");
            }
        }
        if !keep_disks && ctl.wipes_before_install(name) {
            // Whatever it held (an old install, another cluster's data)
            // goes before it installs, as Ironic's cleaning does.
            match ctl.app.inventories.set_wipe_first(name, crate::store::now_ms()) {
                Ok(()) => ctl.note(
                    name,
                    events::API,
                    "adopted: its disks are wiped at its next boot, then it inspects and installs (keepDisks skips that)",
                ),
                Err(e) => warn!(node = %name, error = %e, "the adopted machine's wipe was not marked: it installs without it"),
            }
        }
    }
    access::with_node(resp, spec_name.as_deref())
}
