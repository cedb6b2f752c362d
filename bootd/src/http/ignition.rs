//! The Ignition routes: a node's config (negotiated to the newest spec
//! version the client accepts) and its pointer config.

use super::*;
use crate::render::ignition::IgnitionError;

/// The pointer Ignition config for the node called `name` (HTTPS with the
/// site CA when bootd serves HTTPS), with a fresh token: what provider
/// userdata carries. The node need not be served yet (a node waiting for
/// its provider's address).
pub fn pointer_for(app: &App, snap: &Snapshot, name: &str) -> serde_json::Value {
    let tok = app
        .key
        .issue(name, SystemTime::now(), snap.site.ignition.token_ttl);
    match (&snap.site.host.https, &app.tls) {
        (Some(https), Some(tls)) => render::ignition::pointer(
            &format!("{}/ignition/{}?token={tok}", https.url, name),
            Some(&tls.ca_pem),
        ),
        _ => render::ignition::pointer(
            &format!("{}/ignition/{}?token={tok}", snap.site.host.http.url, name),
            None,
        ),
    }
}

pub(super) fn ignition(
    app: &App,
    snap: &Snapshot,
    name: &str,
    source: IpAddr,
    q: Option<&str>,
    headers: &HeaderMap,
    pointer: bool,
) -> Response<Body> {
    let what = if pointer {
        "Ignition pointer config"
    } else {
        "Ignition"
    };
    let subject = Subject::node(name).with_ip(source.to_canonical());
    let denied = |d: Deny| {
        app.timeline.record(
            Raw::new(
                subject.clone(),
                Phase::Ignition,
                "denied",
                format!("{what} denied: {}", d.as_str()),
            )
            .error(),
        );
        deny(app, "Ignition", name, source, d)
    };
    let Some(node) = snap.site.node(name) else {
        return denied(Deny::UnknownNode);
    };
    let granted = match authorize(app, snap, node, source, q) {
        Ok(g) => g,
        Err(d) => return denied(d),
    };
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    if pointer {
        // The pointer is a config too: an older client gets it relabelled.
        return match render::ignition::negotiate(pointer_for(app, snap, &node.name), accept) {
            Ok(cfg) => {
                let v = cfg["ignition"]["version"].as_str().unwrap_or("?");
                info!(node = %node.name, %source, via = ?granted, version = %v, "Ignition pointer config served");
                let note = format!("Ignition pointer config {v} served (via {granted:?})");
                app.timeline
                    .record(Raw::new(subject, Phase::Ignition, "pointer_served", note));
                json_response(StatusCode::OK, &cfg)
            }
            Err(e) => not_acceptable(app, node, source, subject, &e),
        };
    }
    let cfg = render::ignition::node_config(&snap.site, node)
        .and_then(|c| render::ignition::negotiate(c, accept));
    match cfg {
        Ok(cfg) => {
            info!(node = %node.name, %source, via = ?granted, version = %cfg["ignition"]["version"].as_str().unwrap_or("?"), "Ignition served");
            let now = crate::timeline::now_us() / 1000;
            if !node_addrs(app, node).contains(&source.to_canonical()) {
                info!(node = %node.name, %source, "Ignition fetched from another address than the node's: not taken as its install");
            } else {
                match app.installed.mark(&node.name, now) {
                    Ok(true) => info!(node = %node.name, "installed (its Ignition was served)"),
                    Ok(false) => {}
                    Err(e) => {
                        tracing::error!(node = %node.name, error = %e, "cannot record that the node installed")
                    }
                }
            }
            let v = cfg["ignition"]["version"].as_str().unwrap_or("?");
            app.timeline.record(Raw::new(
                subject,
                Phase::Ignition,
                "served",
                format!("Ignition {v} served (via {granted:?})"),
            ));
            json_response(StatusCode::OK, &cfg)
        }
        Err(e @ IgnitionError::NotAcceptable { .. }) => {
            not_acceptable(app, node, source, subject, &e)
        }
        Err(e) => {
            warn!(node = %node.name, error = %e, "Ignition cannot be rendered");
            app.timeline.record(
                Raw::new(
                    subject,
                    Phase::Ignition,
                    "failed",
                    "Ignition cannot be rendered (see bootd's log)",
                )
                .error(),
            );
            full(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain; charset=utf-8",
                "cannot render Ignition; see bootd's log\n",
            )
        }
    }
}

fn not_acceptable(
    app: &App,
    node: &Node,
    source: IpAddr,
    subject: Subject,
    e: &IgnitionError,
) -> Response<Body> {
    warn!(node = %node.name, %source, error = %e, "Ignition spec not acceptable to the client");
    app.timeline.record(
        Raw::new(
            subject,
            Phase::Ignition,
            "failed",
            format!("Ignition not served: {e}"),
        )
        .error(),
    );
    full(
        StatusCode::NOT_ACCEPTABLE,
        "text/plain; charset=utf-8",
        format!("{e}\n"),
    )
}
