//! The Ignition routes: a node's config (negotiated to the newest spec
//! version the client accepts) and its pointer config.

use super::*;
use crate::render::ignition::IgnitionError;

/// The pointer Ignition config for the node called `name` (HTTPS with the
/// site CA when bootd serves HTTPS), with a fresh token: what provider
/// userdata carries. The node need not be served yet (a node waiting for
/// its provider's address). `scope`: [`token::Scope::Provider`] for what a
/// provider is given as userdata. `peer`: the client it is served to, when
/// known; the URL is [`site::Listen::base_url`]'s choice for it and the
/// node (in the site or not yet).
pub fn pointer_for(
    app: &App,
    snap: &Snapshot,
    name: &str,
    scope: token::Scope,
    peer: Option<IpAddr>,
) -> serde_json::Value {
    let epoch = snap.site.node(name).map_or(0, |n| n.epoch);
    pointer_in_epoch(app, snap, name, epoch, scope, peer)
}

/// [`pointer_for`] with a token of the node's `epoch`: for a node the
/// controller made that is not served yet (its address unknown), whose
/// epoch the site does not hold. A token of another epoch would never
/// verify once the node is served.
pub fn pointer_in_epoch(
    app: &App,
    snap: &Snapshot,
    name: &str,
    epoch: u64,
    scope: token::Scope,
    peer: Option<IpAddr>,
) -> serde_json::Value {
    let node = snap.site.node(name);
    let base = |l: &site::Listen| l.base_url(peer, node).to_string();
    let tok = app.key.issue(
        &token::subject(name, epoch),
        scope,
        runtime::clock::now(),
        snap.site.ignition.token_ttl,
    );
    match (&snap.site.host.https, &app.tls) {
        (Some(https), Some(tls)) => render::ignition::pointer(
            &format!("{}/ignition/{}?token={tok}", base(https), name),
            Some(&tls.ca_pem),
        ),
        _ => render::ignition::pointer(
            &format!(
                "{}/ignition/{}?token={tok}",
                base(&snap.site.host.http),
                name
            ),
            None,
        ),
    }
}

pub(super) async fn ignition(
    app: &Arc<App>,
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
        if awaited_with_token(app, name, q) {
            app.timeline.record(Raw::new(
                Subject::vouched(name).with_ip(source.to_canonical()),
                Phase::Ignition,
                AWAITED,
                format!(
                    "{what} asked for from {} before the node's provider said where its machine is: 503, retry",
                    source.to_canonical()
                ),
            ));
            let mut r = full(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain; charset=utf-8",
                "this node's machine is not known yet; try again\n",
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            return r;
        }
        return denied(Deny::UnknownNode);
    };
    let addrs = node_addrs(node);
    let tok = query(q, "token");
    let granted = match token::authorize_ignition(
        &app.key,
        &access(snap, node, &addrs),
        source,
        tok.as_deref(),
        runtime::clock::now(),
    ) {
        Ok(g) => g,
        Err(d) => return denied(d),
    };
    let own = matches!(granted, token::Granted::SourceAddress(_));
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let cfg = if pointer {
        // The pointer is a config too: an older client gets it relabelled.
        render::ignition::negotiate(
            pointer_for(app, snap, &node.name, granted.mints(), Some(source)),
            accept,
        )
    } else {
        render::ignition::node_config(&snap.site, node)
            .and_then(|c| render::ignition::negotiate(c, accept))
    };
    let cfg = match cfg {
        Ok(cfg) => cfg,
        Err(e @ IgnitionError::NotAcceptable { .. }) => {
            return not_acceptable(app, node, source, subject, &e)
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
            return full(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain; charset=utf-8",
                "cannot render Ignition; see bootd's log\n",
            );
        }
    };
    // The fetch succeeds: its token is spent now, before the bytes go.
    if let Err(r) = spend(app, snap, node, source, &subject, &granted, what).await {
        return r;
    }
    if !own {
        app.metrics.ignition_other_address.inc();
        warn!(node = %node.name, %source, via = granted.as_str(), "{what} fetched from another address than the node's");
        app.timeline.record_surely(
            Raw::new(
                subject.clone(),
                Phase::Ignition,
                OTHER_ADDRESS,
                format!(
                    "{what} fetched from {}, not one of the node's addresses (on a token): if that was not the node, revoke it and reinstall",
                    source.to_canonical()
                ),
            )
            .error(),
        );
    }
    let v = cfg["ignition"]["version"]
        .as_str()
        .unwrap_or("?")
        .to_string();
    if pointer {
        info!(node = %node.name, %source, via = granted.as_str(), version = %v, "Ignition pointer config served");
        let note = format!(
            "Ignition pointer config {v} served (via {})",
            granted.as_str()
        );
        app.timeline
            .record(Raw::new(subject, Phase::Ignition, "pointer_served", note));
        return json_response(StatusCode::OK, &cfg);
    }
    info!(node = %node.name, %source, via = granted.as_str(), version = %v, "Ignition served");
    if !own {
        info!(node = %node.name, %source, "Ignition fetched from another address than the node's: not taken as its install");
    } else if writes_metal(snap, node) {
        // coreos-installer fetches the config before it writes the image:
        // the node installed once the image has been sent in full.
        info!(node = %node.name, "the installer has its config: installed once its metal image is sent in full");
    } else {
        let now = crate::timeline::now_us() / 1000;
        match app.installed.mark(&node.name, now) {
            Ok(true) => info!(node = %node.name, "installed (its Ignition was served)"),
            Ok(false) => {}
            Err(e) => {
                tracing::error!(node = %node.name, error = %e, "cannot record that the node installed")
            }
        }
    }
    app.timeline.record(Raw::new(
        subject,
        Phase::Ignition,
        "served",
        format!("Ignition {v} served (via {})", granted.as_str()),
    ));
    json_response(StatusCode::OK, &cfg)
}

/// The timeline's word for an Ignition fetched from elsewhere than the node.
pub const OTHER_ADDRESS: &str = "other_address";
/// The timeline's word for a spent token presented again.
pub const TOKEN_REUSED: &str = "token_reused";

/// Spends the token the fetch carried (`ignition.singleUseTokens`). A
/// spent one presented again from another address is refused (the 404,
/// and `token_reused` on the node's timeline, with that address); from the
/// node's own address the address grants it and the token does not matter.
#[allow(clippy::result_large_err)]
async fn spend(
    app: &Arc<App>,
    snap: &Snapshot,
    node: &Node,
    source: IpAddr,
    subject: &Subject,
    granted: &token::Granted,
    what: &str,
) -> Result<(), Response<Body>> {
    if !snap.site.ignition.single_use_tokens {
        return Ok(());
    }
    match granted {
        token::Granted::Token(v) => match spend_off_runtime(app, v).await {
            Ok(()) => Ok(()),
            Err(crate::spent::SpendError::Reused) => {
                app.timeline.record(
                    Raw::new(
                        subject.clone(),
                        Phase::Ignition,
                        TOKEN_REUSED,
                        format!(
                            "{what} token presented again from {}: refused (it was spent on an earlier fetch); \
                             someone else may hold the node's token",
                            source.to_canonical()
                        ),
                    )
                    .error(),
                );
                Err(deny(app, what, &node.name, source, Deny::TokenReused))
            }
            Err(crate::spent::SpendError::Io(e)) => {
                tracing::error!(node = %node.name, error = %e, "token spend not recorded: {what} not served");
                Err(full(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain; charset=utf-8",
                    "cannot record the token's use; see bootd's log\n",
                ))
            }
        },
        token::Granted::SourceAddress(Some(v)) => {
            if let Err(crate::spent::SpendError::Io(e)) = spend_off_runtime(app, v).await {
                warn!(node = %node.name, error = %e, "token spend not recorded");
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The timeline's `what` of an Ignition fetch answered "not yet".
pub const AWAITED: &str = "awaited";

/// Whether `name` is a node the controller made whose address its
/// provider has not said yet ([`crate::awaited`]), asked for with a valid
/// token of that node (any scope; a spent one too: nothing is served).
fn awaited_with_token(app: &App, name: &str, q: Option<&str>) -> bool {
    let Some(epoch) = app.awaited.epoch(name) else {
        return false;
    };
    query(q, "token").is_some_and(|t| {
        app.key
            .verify(&token::subject(name, epoch), &t, runtime::clock::now())
            .is_ok()
    })
}

/// [`crate::spent::Spent::spend`] on a blocking thread: a spend waits for
/// the shared store's commit (etcd: a quorum; a member lost, up to
/// `etcd.timeout`) and the file's sync. On the server's own threads that
/// wait would hold every other request, `/healthz` included: with one
/// worker (an appliance given one CPU) a store that answers slowly stopped
/// the whole HTTP server, and keepalived moved the boot address away.
async fn spend_off_runtime(
    app: &Arc<App>,
    v: &token::Verified,
) -> Result<(), crate::spent::SpendError> {
    let (app, v) = (Arc::clone(app), v.clone());
    tokio::task::spawn_blocking(move || app.spent.spend(&v))
        .await
        .unwrap_or_else(|e| {
            Err(crate::spent::SpendError::Io(std::io::Error::other(
                format!("the spend's thread ended: {e}"),
            )))
        })
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
