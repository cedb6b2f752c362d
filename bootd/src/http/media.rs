//! `GET /media/<node>.iso?token=…`: the node's virtual-media ISO
//! ([`crate::media`]), for its BMC to mount.
//!
//! The BMC fetches it, not the node, so the source address does not count:
//! the node's token alone grants it (a token is only handed to the
//! controller, which gives the URL to the BMC). The ISO holds the node's
//! Ignition URL with that same token; Ignition itself is still only served
//! as [`crate::token::authorize`] says.

use super::*;
use crate::media::{Media, MediaError};

/// The URL a BMC is given to mount `name`'s ISO, with a fresh token:
/// secret (anyone with it can read the ISO and the token inside). The
/// BMC's address family is not the node's: the site's first URL.
pub fn media_url_for(app: &App, snap: &Snapshot, name: &str) -> String {
    let epoch = snap.site.node(name).map_or(0, |n| n.epoch);
    let tok = app.key.issue(
        &token::subject(name, epoch),
        token::Scope::Media,
        runtime::clock::now(),
        snap.site.ignition.token_ttl,
    );
    let base = snap.site.host.http.base_url(None, None);
    format!("{base}/media/{name}.iso?token={tok}")
}

pub(super) async fn media(
    app: &Arc<App>,
    snap: &Snapshot,
    file: &str,
    q: Option<&str>,
    headers: &HeaderMap,
    source: IpAddr,
) -> Response<Body> {
    const WHAT: &str = "virtual media";
    let name = file.trim_end_matches(".iso");
    let Some(node) = snap.site.node(name) else {
        return deny(app, WHAT, name, source, Deny::UnknownNode);
    };
    if snap.revoked.contains(&node.name) {
        return deny(app, WHAT, name, source, Deny::Revoked);
    }
    let Some(tok) = query(q, "token") else {
        return deny(app, WHAT, name, source, Deny::TokenInvalid);
    };
    // A media token only: the controller mints one for a node that boots
    // virtual media, for its BMC. Any other token (a script's, a
    // provider's) is no licence to build an ISO.
    match app
        .key
        .verify(&token::subject_of(node), &tok, runtime::clock::now())
    {
        Ok(v) if v.scope == token::Scope::Media => {}
        Ok(_) => return deny(app, WHAT, name, source, Deny::TokenInvalid),
        Err(d) => return deny(app, WHAT, name, source, d),
    }
    let boot = match boot_plan(
        app,
        snap,
        node,
        &Subject::node(&node.name).with_ip(source.to_canonical()),
    ) {
        Ok(b) => b,
        Err(why) => {
            warn!(node = %node.name, "virtual media not served: {why}");
            return not_found();
        }
    };
    let spec = match Media::spec(&snap.site, node, &tok, boot) {
        Ok(s) => s,
        Err(e) => {
            warn!(node = %node.name, error = %e, "virtual media not served");
            return not_found();
        }
    };
    let file = match app.media.get(spec).await {
        Ok(f) => f,
        Err(MediaError::Busy(why)) => {
            warn!(node = %node.name, %source, "virtual media not built now: {why}");
            let mut r = full(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain; charset=utf-8",
                format!("{why}; retry\n"),
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, http::HeaderValue::from_static("10"));
            return r;
        }
        Err(e) => {
            tracing::error!(node = %node.name, error = %e, "cannot build the node's virtual media");
            app.timeline.record(
                Raw::new(
                    Subject::node(&node.name),
                    Phase::Script,
                    "media_failed",
                    "virtual media ISO cannot be built (see bootd's log)",
                )
                .error(),
            );
            return full(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain; charset=utf-8",
                "cannot build the node's virtual media; see bootd's log\n",
            );
        }
    };
    // A BMC may read the ISO in many ranges: one event for its first bytes.
    let first = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|r| r.trim_start_matches("bytes=").starts_with("0-"));
    if first {
        info!(node = %node.name, %source, file = %file, "virtual media served");
        app.timeline.record(Raw::new(
            Subject::node(&node.name),
            Phase::Script,
            "media",
            format!("virtual media ISO served to {source} (its BMC)"),
        ));
    }
    image(app, app.media.dir(), &file, headers, source, None).await
}
