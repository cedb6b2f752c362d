//! bootd's HTTP(S) front: every route in [`route`], one function per route.
//!
//! Handlers are cancel-safe (they hold no state across awaits but the
//! snapshot they loaded). Node secrets (Ignition, metadata, userdata) are
//! only handed out after [`crate::token::authorize`]; every refusal returns
//! the same 404 body and logs the reason. Ignition content is never logged.

use crate::files::{self, FileBody, Part, Ranges};
use crate::metrics::{Reason, RouteLabel, RouteStatus};
use crate::render::{self, NodeUrls};
use crate::state::Snapshot;
use crate::timeline::{Phase, Raw, Subject};
use crate::token::{self, Deny};
use crate::App;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use percent_encoding::percent_decode_str;
use site::{Mac, Node};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::SystemTime;
use tracing::{debug, info, warn};

pub use crate::body::Body;

mod discover;
mod ignition;
mod images;
mod inventory;
mod media;
use discover::discover;
pub use ignition::{pointer_for, pointer_in_epoch, AWAITED, OTHER_ADDRESS, TOKEN_REUSED};
pub(crate) use images::image_whole;
pub use images::whole_image_rel;
use images::{image, image_phase};
pub(crate) use inventory::boot_plan;
pub use inventory::{post as post_report, AgentSums};
pub use media::media_url_for;

/// The body of every refusal and every miss: nothing to tell them apart.
const NOT_FOUND: &str = "not found\n";

fn full(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let body: Bytes = body.into();
    let mut r = Response::new(Full::new(body).map_err(|never| match never {}).boxed());
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn not_found() -> Response<Body> {
    full(
        StatusCode::NOT_FOUND,
        "text/plain; charset=utf-8",
        NOT_FOUND,
    )
}

fn no_store(mut r: Response<Body>) -> Response<Body> {
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// Query parameters, percent-decoded.
fn query(req_query: Option<&str>, key: &str) -> Option<String> {
    req_query?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == key).then(|| {
            percent_decode_str(&v.replace('+', " "))
                .decode_utf8_lossy()
                .into_owned()
        })
    })
}

/// Every route of the server, in one place. Returns the route's name (for
/// metrics) and the response.
pub async fn route<B>(
    app: &Arc<App>,
    req: &Request<B>,
    peer: SocketAddr,
) -> (&'static str, Response<Body>) {
    let snap = app.live.load_full();
    let path = req.uri().path();
    let q = req.uri().query();
    let get = req.method() == Method::GET || req.method() == Method::HEAD;
    if !get {
        let mut r = full(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "method not allowed\n",
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return ("other", r);
    }
    let segs: Vec<&str> = path.trim_start_matches('/').splitn(3, '/').collect();
    match segs.as_slice() {
        ["healthz"] => (
            "healthz",
            full(StatusCode::OK, "text/plain; charset=utf-8", "ok\n"),
        ),
        ["metrics"] => (
            "metrics",
            full(
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                app.metrics.encode(),
            ),
        ),
        ["status"] | ["status", ..] => {
            if !crate::status::may_read(&snap.site, peer.ip()) {
                app.metrics.status_refused.inc();
                return ("status", not_found());
            }
            crate::status::route(app, &snap, path, q)
        }
        ["boot.ipxe"] => {
            app.timeline.record(Raw::new(
                Subject::ip(peer.ip().to_canonical()),
                Phase::Script,
                "entry",
                "iPXE entry script (boot.ipxe) served",
            ));
            let base = snap.site.host.http.base_url(Some(peer.ip()), None);
            ("ipxe", script(render::ipxe::entry(base)))
        }
        ["ipxe", "node"] => ("ipxe", ipxe_by_mac(app, &snap, q, peer.ip())),
        ["discover"] => ("discover", discover(app, &snap, q, peer.ip())),
        ["discover", "agent"] => (
            "discover",
            discover::discover_agent(app, &snap, q, peer.ip()),
        ),
        ["ipxe", file] if file.ends_with(".ipxe") => (
            "ipxe",
            ipxe_by_name(app, &snap, file.trim_end_matches(".ipxe"), q, peer.ip()),
        ),
        ["grub", "grub.cfg"] => ("grub", script(render::grub::selector(&snap.site))),
        ["grub", file] if file.starts_with("grub.cfg-01-") => (
            "grub",
            mac_config(
                app,
                &snap,
                &GRUB,
                &file["grub.cfg-01-".len()..],
                q,
                peer.ip(),
            ),
        ),
        ["pxelinux.cfg", file] if file.starts_with("01-") => (
            "pxelinux",
            mac_config(app, &snap, &PXELINUX, &file["01-".len()..], q, peer.ip()),
        ),
        ["ignition", name] => (
            "ignition",
            ignition::ignition(app, &snap, name, peer.ip(), q, req.headers(), false).await,
        ),
        ["ignition", name, "agent"] => (
            "ignition",
            inventory::agent_config(app, &snap, name, peer.ip(), q),
        ),
        ["ignition", name, "pointer"] => (
            "ignition",
            ignition::ignition(app, &snap, name, peer.ip(), q, req.headers(), true).await,
        ),
        ["media", file] if file.ends_with(".iso") => (
            "media",
            media::media(app, &snap, file, q, req.headers(), peer.ip()).await,
        ),
        ["metadata"] => ("metadata", metadata(app, &snap, peer.ip(), q, false)),
        ["userdata"] => ("metadata", metadata(app, &snap, peer.ip(), q, true)),
        ["images", ..] => {
            let rel = &path["/images/".len().min(path.len())..];
            let track = image_phase(&snap.site, rel).map(|p| (p, peer.ip()));
            (
                "images",
                image(
                    app,
                    &snap.site.images.root,
                    rel,
                    req.headers(),
                    peer.ip(),
                    track,
                )
                .await,
            )
        }
        // The TFTP root over HTTP, for UEFI HTTP Boot (the iPXE EFI binary).
        ["boot", ..] => match &snap.site.host.tftp {
            Some(t) => (
                "boot",
                image(
                    app,
                    &t.root,
                    &path["/boot/".len().min(path.len())..],
                    req.headers(),
                    peer.ip(),
                    None,
                )
                .await,
            ),
            None => ("boot", not_found()),
        },
        _ => ("other", not_found()),
    }
}

fn script(body: String) -> Response<Body> {
    no_store(full(StatusCode::OK, "text/plain; charset=utf-8", body))
}

/// A fresh token for the node's boot script (every script gets its own:
/// a retry after a failed install still has an unspent one), of the scope
/// the request's grant mints ([`token::Granted::mints`]).
fn node_token(app: &App, snap: &Snapshot, node: &Node, scope: token::Scope) -> String {
    app.key.issue(
        &token::subject_of(node),
        scope,
        runtime::clock::now(),
        snap.site.ignition.token_ttl,
    )
}

/// Whether `node`'s install writes its image set's metal image (it then
/// counts as installed when that image was sent in full, not when the
/// installer fetched its Ignition).
pub(crate) fn writes_metal(snap: &Snapshot, node: &Node) -> bool {
    node.disk_hints().is_some() && snap.site.image_of(node).metal.is_some()
}

/// A metal image was sent in full to `ip`: the node there that installs
/// it has installed.
pub(crate) fn installed_by_image(app: &App, ip: IpAddr) {
    let snap = app.live.load_full();
    let ip = ip.to_canonical();
    let node = snap
        .site
        .nodes
        .iter()
        .find(|n| writes_metal(&snap, n) && (n.has_ip(ip) || node_addrs(n).contains(&ip)));
    let Some(node) = node else { return };
    let now = crate::timeline::now_us() / 1000;
    match app.installed.mark(&node.name, now) {
        Ok(true) => {
            info!(node = %node.name, %ip, "installed (its metal image was sent in full)");
            app.timeline.record(Raw::new(
                Subject::node(&node.name).with_ip(ip),
                Phase::Install,
                "installed",
                "the metal image was sent in full: installed (its next network boot boots its disk)",
            ));
        }
        Ok(false) => {}
        Err(e) => {
            tracing::error!(node = %node.name, error = %e, "cannot record that the node installed")
        }
    }
}

pub(crate) fn installed_at(app: &App, snap: &Snapshot, node: &Node) -> Option<i64> {
    match snap.site.ignition.after_install {
        site::AfterInstall::Disk => app.installed.at(&node.name),
        site::AfterInstall::Network => None,
    }
}

/// An installed node network-booted again: its boot order puts the
/// network first (or someone asked for it). Told to boot its disk.
pub(crate) fn local_boot_flag(app: &App, node: &Node, subject: Subject, installed_at: i64) {
    warn!(node = %node.name, installed_at, "installed node network-booted again: serving a local-disk boot (check its boot order; bootd nodes reinstall to install again)");
    app.timeline.record(
        Raw::new(
            subject,
            Phase::Script,
            "local_boot",
            "install loop averted: the node installed already and network-booted again; \
             told to boot its local disk (check the boot order; `bootd nodes reinstall` to install again)",
        )
        .error(),
    );
}

/// The node's boot script: the installer, or, once it installed (and
/// `ignition.afterInstall: disk`), its local disk, flagged on its timeline.
fn node_script(
    app: &App,
    snap: &Snapshot,
    node: &Node,
    subject: Subject,
    how: &str,
    peer: IpAddr,
    scope: token::Scope,
) -> Response<Body> {
    if let Some(at) = installed_at(app, snap, node) {
        local_boot_flag(app, node, subject, at);
        return script(render::ipxe::local_disk(node));
    }
    let boot = match boot_plan(app, snap, node, &subject) {
        Ok(b) => b,
        Err(why) => return script(render::ipxe::refused(node, &why)),
    };
    app.timeline.record(Raw::new(
        subject,
        Phase::Script,
        "served",
        format!("iPXE node script served ({how})"),
    ));
    let base = snap.site.host.http.base_url(Some(peer), None);
    let urls = NodeUrls::with_boot(
        &snap.site,
        base,
        node,
        &node_token(app, snap, node, scope),
        boot,
    );
    script(render::ipxe::node(&snap.site, node, &urls))
}

fn ipxe_by_mac(app: &App, snap: &Snapshot, q: Option<&str>, peer: IpAddr) -> Response<Body> {
    let mac = query(q, "mac").and_then(|m| m.parse::<Mac>().ok());
    let buildarch = query(q, "buildarch").unwrap_or_default();
    match mac
        .as_ref()
        .and_then(|m| snap.site.node_by_mac_or_port(m, peer))
    {
        Some(node) => {
            let fits = matches!(
                (node.arch, buildarch.as_str()),
                (_, "")
                    | (site::Arch::X86_64, "x86_64" | "i386")
                    | (site::Arch::Aarch64, "arm64")
                    | (site::Arch::Ppc64le, "ppc64")
            );
            if !fits {
                warn!(node = %node.name, node_arch = %node.arch, buildarch = %buildarch.escape_debug(), "iPXE build architecture does not match the node's arch");
            }
            let granted = match script_allowed(app, snap, node, peer, q, "iPXE script") {
                Ok(g) => g,
                Err(r) => return r,
            };
            info!(node = %node.name, mac = ?mac, "iPXE script served");
            let subject = Subject {
                mac,
                ..Subject::node(&node.name)
            }
            .with_ip(peer.to_canonical());
            node_script(app, snap, node, subject, "by MAC", peer, granted.mints())
        }
        None if snap.site.discovery.enabled && mac.is_some() => {
            info!(mac = ?mac, "iPXE request from a MAC no node has: serving the discovery script");
            script(render::ipxe::discover(
                snap.site.host.http.base_url(Some(peer), None),
                snap.site.discovery.retry.as_secs(),
            ))
        }
        None => {
            warn!(mac = ?mac, raw = %query(q, "mac").unwrap_or_default().escape_debug(), "iPXE request from a MAC no node has: serving the explanation script");
            let subject = Subject {
                mac,
                ..Subject::ip(peer.to_canonical())
            };
            app.timeline.record(
                Raw::new(
                    subject,
                    Phase::Script,
                    "unknown_mac",
                    "iPXE asked for the script of a MAC no node has: explanation script served",
                )
                .error(),
            );
            script(render::ipxe::unknown(
                &snap.site,
                snap.site.host.http.base_url(Some(peer), None),
                mac.as_ref(),
            ))
        }
    }
}

fn ipxe_by_name(
    app: &App,
    snap: &Snapshot,
    name: &str,
    q: Option<&str>,
    peer: IpAddr,
) -> Response<Body> {
    match snap.site.node(name) {
        Some(node) => {
            let granted = match script_allowed(app, snap, node, peer, q, "iPXE script") {
                Ok(g) => g,
                Err(r) => return r,
            };
            info!(node = %node.name, "iPXE script served (by name)");
            node_script(
                app,
                snap,
                node,
                Subject::node(&node.name).with_ip(peer.to_canonical()),
                "by name",
                peer,
                granted.mints(),
            )
        }
        None => {
            warn!(name = %name.escape_debug(), "iPXE script asked for an unknown node name");
            script(render::ipxe::unknown(
                &snap.site,
                snap.site.host.http.base_url(Some(peer), None),
                None,
            ))
        }
    }
}

/// A boot config a node's firmware asks for by its MAC (GRUB's
/// `grub.cfg-01-<mac>`, petitboot's pxelinux `01-<mac>`): one gate, one
/// timeline event, its own two renderers.
struct MacConfig {
    /// In logs and the timeline: "GRUB config".
    what: &'static str,
    node: fn(&site::Site, &Node, &NodeUrls) -> String,
    local_disk: fn(&Node) -> String,
    refused: fn(&Node, &str) -> String,
}

const GRUB: MacConfig = MacConfig {
    what: "GRUB config",
    node: render::grub::node,
    local_disk: render::grub::local_disk,
    refused: render::grub::refused,
};

const PXELINUX: MacConfig = MacConfig {
    what: "pxelinux config",
    node: render::pxelinux::node,
    local_disk: render::pxelinux::local_disk,
    refused: render::pxelinux::refused,
};

/// A node's `config`, by the MAC in its file name (`dashed`).
fn mac_config(
    app: &App,
    snap: &Snapshot,
    config: &MacConfig,
    dashed: &str,
    q: Option<&str>,
    peer: IpAddr,
) -> Response<Body> {
    let what = config.what;
    let Ok(mac) = dashed.parse::<Mac>() else {
        return not_found();
    };
    let Some(node) = snap.site.node_by_mac_or_port(&mac, peer) else {
        debug!(%mac, "{what} asked for an unknown MAC");
        return not_found();
    };
    let granted = match script_allowed(app, snap, node, peer, q, what) {
        Ok(g) => g,
        Err(r) => return r,
    };
    let subject = Subject::mac(mac).with_ip(peer.to_canonical());
    if let Some(at) = installed_at(app, snap, node) {
        local_boot_flag(app, node, subject, at);
        return script((config.local_disk)(node));
    }
    let boot = match boot_plan(app, snap, node, &subject) {
        Ok(b) => b,
        Err(why) => return script((config.refused)(node, &why)),
    };
    let urls = NodeUrls::with_boot(
        &snap.site,
        snap.site.host.http.base_url(Some(peer), None),
        node,
        &node_token(app, snap, node, granted.mints()),
        boot,
    );
    info!(node = %node.name, %mac, "{what} served");
    app.timeline.record(Raw::new(
        subject,
        Phase::Script,
        "served",
        format!("{what} served over HTTP"),
    ));
    script((config.node)(&snap.site, node, &urls))
}

fn deny(app: &App, what: &str, name: &str, source: IpAddr, reason: Deny) -> Response<Body> {
    count_refusal(app, what, name, source, reason);
    not_found()
}

/// Counts a refusal (`bootd_ignition_denials{reason}`) and logs it,
/// at most 10 lines a second.
pub(crate) fn count_refusal(app: &App, what: &str, name: &str, source: IpAddr, reason: Deny) {
    app.metrics
        .denials
        .get_or_create(&Reason {
            reason: reason.as_str(),
        })
        .inc();
    // Counted always; logged at most 10 times a second (a probe of many
    // names must not become as many log lines).
    static LOGGED: runtime::logging::Throttle = runtime::logging::Throttle::new(10);
    if let Some(suppressed) = LOGGED.allow() {
        warn!(node = %name.escape_debug(), %source, reason = reason.as_str(), suppressed, "{what} refused");
    }
}

/// The node's addresses: what the operator or its provider stated, its
/// reserved addresses and the ones its provider reported. A DHCP lease is
/// not one of them: bootd's DHCP gives a reserved node its reservation, so
/// a lease elsewhere is a pool address that anyone who saw the node's MAC
/// (or its DUID-LL) in a broadcast could have asked for, in the family the
/// node has no reservation in (docs/bootd.md, the attacker table).
pub fn node_addrs(node: &Node) -> Vec<IpAddr> {
    let mut v: Vec<IpAddr> = node.ips().collect();
    for a in node.addresses.iter().flatten() {
        if !v.contains(a) {
            v.push(*a);
        }
    }
    v
}

/// What [`token`]'s decisions need to know of `node`.
pub(crate) fn access<'a>(
    snap: &Snapshot,
    node: &'a Node,
    addrs: &'a [IpAddr],
) -> token::NodeAccess<'a> {
    token::NodeAccess {
        name: &node.name,
        epoch: node.epoch,
        addrs,
        fetch_from: node.fetch_from,
        // An empty list is no report: the provider said nothing of where
        // the machine is (a virtual-media node whose address came from
        // another DHCP server).
        provider_reported: node.addresses.as_ref().is_some_and(|a| !a.is_empty()),
        revoked: snap.revoked.contains(&node.name),
    }
}

/// Whether `source` may have `node`'s boot script, metadata or userdata
/// (each carries a token for its Ignition): `Err` is the 404 to send,
/// counted and logged as a refusal.
#[allow(clippy::result_large_err)]
pub(crate) fn script_allowed(
    app: &App,
    snap: &Snapshot,
    node: &Node,
    source: IpAddr,
    q: Option<&str>,
    what: &str,
) -> Result<token::Granted, Response<Body>> {
    let addrs = node_addrs(node);
    let tok = query(q, "token");
    token::authorize_script(
        &app.key,
        &access(snap, node, &addrs),
        source,
        tok.as_deref(),
        runtime::clock::now(),
    )
    .map_err(|d| deny(app, what, &node.name, source, d))
}

fn json_response(status: StatusCode, v: &serde_json::Value) -> Response<Body> {
    let body = serde_json::to_vec(v).unwrap_or_default();
    no_store(full(status, "application/json", body))
}

fn metadata(
    app: &App,
    snap: &Snapshot,
    source: IpAddr,
    q: Option<&str>,
    userdata: bool,
) -> Response<Body> {
    let what = if userdata { "userdata" } else { "metadata" };
    let node = match query(q, "node") {
        Some(name) => match snap.site.node(&name) {
            Some(n) => n,
            None => return deny(app, what, &name, source, Deny::UnknownNode),
        },
        None => match snap.site.node_by_ip(source) {
            Some(n) => n,
            None => return deny(app, what, "", source, Deny::NotFromNode),
        },
    };
    if snap.revoked.contains(&node.name) {
        return deny(app, what, &node.name, source, Deny::Revoked);
    }
    let granted = match script_allowed(app, snap, node, source, q, what) {
        Ok(g) => g,
        Err(r) => return r,
    };
    info!(node = %node.name, %source, "{what} served");
    if userdata {
        json_response(
            StatusCode::OK,
            &pointer_for(app, snap, &node.name, granted.mints(), Some(source)),
        )
    } else {
        json_response(
            StatusCode::OK,
            &render::metadata::metadata(&snap.site, node),
        )
    }
}

fn empty() -> Body {
    Full::new(Bytes::new()).map_err(|n| match n {}).boxed()
}

/// Wraps [`route`]: metrics and one log line per request. The query string
/// is left out of the log (it carries tokens).
pub async fn handle<B>(
    app: Arc<App>,
    req: Request<B>,
    peer: SocketAddr,
) -> Result<Response<Body>, std::convert::Infallible> {
    let (route_name, resp) = route(&app, &req, peer).await;
    let status = resp.status().as_u16();
    app.metrics
        .requests
        .get_or_create(&RouteStatus {
            route: route_name,
            status,
        })
        .inc();
    if route_name != "images" {
        if let Some(n) = resp
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
        {
            app.metrics
                .bytes
                .get_or_create(&RouteLabel { route: route_name })
                .inc_by(n);
        } else if let Some(n) = http_body::Body::size_hint(resp.body()).exact() {
            app.metrics
                .bytes
                .get_or_create(&RouteLabel { route: route_name })
                .inc_by(n);
        }
    }
    debug!(method = %req.method(), path = %req.uri().path().escape_debug(), %peer, status, route = route_name, "request");
    Ok(resp)
}
