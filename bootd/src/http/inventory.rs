//! The inspection agent's routes: its Ignition config (`GET
//! /ignition/<node>/agent`), its reports (`POST /inventory/<node>`, `POST
//! /inventory/<node>/wiped`), and the boot plan every node script, GRUB
//! and pxelinux config follows ([`boot_plan`]).
//!
//! A report is taken only from one of the node's own addresses (its
//! reservation, its provider's, its DHCP lease) and with a token bootd
//! issued for the node: a machine elsewhere on the network cannot give a
//! node another machine's disks, and one that sniffed a token cannot use
//! it from its own address. Both answer 404 like every refusal.

use super::*;
use crate::inventory;
use crate::plan::{self, Plan};
use crate::render::agent::Action;
use crate::render::Boot;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The SHA-256 of each agent binary, by path, with the size and mtime it
/// was computed for: recomputed when the file changes.
#[derive(Debug, Default)]
pub struct AgentSums(Mutex<HashMap<PathBuf, (u64, SystemTime, String)>>);

impl AgentSums {
    pub fn sha256(&self, path: &Path) -> io::Result<String> {
        let meta = std::fs::metadata(path)?;
        let key = (meta.len(), meta.modified()?);
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((len, mtime, sum)) = m.get(path) {
            if (*len, *mtime) == key {
                return Ok(sum.clone());
            }
        }
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        let mut f = std::fs::File::open(path)?;
        io::copy(&mut f, &mut h)?;
        let sum: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
        m.insert(path.to_path_buf(), (key.0, key.1, sum.clone()));
        Ok(sum)
    }
}

/// What `node`'s network boot does now, recorded on its timeline when it
/// installs (the disk chosen) or must not (`Err`: the reason, for the
/// script that says so).
pub(crate) fn boot_plan(
    app: &App,
    snap: &Snapshot,
    node: &Node,
    subject: &Subject,
) -> Result<Boot, String> {
    let rec = app.inventories.get(&node.name);
    match plan::plan(
        &snap.site,
        node,
        rec.as_deref().map(|r| &r.inventory),
        app.inventories.release(&node.name),
    ) {
        Plan::Live => Ok(Boot::Live),
        Plan::Inspect | Plan::Wipe { .. } => Ok(Boot::Agent),
        Plan::Install { device, why } => {
            if rec.is_some() {
                app.timeline.record(Raw::new(
                    subject.clone(),
                    Phase::Script,
                    "disk_chosen",
                    format!("installs to {device}: {why}"),
                ));
            }
            Ok(Boot::Install { device })
        }
        Plan::Refuse { condition, why } => {
            warn!(node = %node.name, reason = condition, "{why}: not installing");
            app.timeline.record(
                Raw::new(
                    subject.clone(),
                    Phase::Script,
                    condition,
                    format!("not installing: {why}"),
                )
                .error(),
            );
            Err(why)
        }
    }
}

/// `GET /ignition/<node>/agent`: the live config that runs the agent, for
/// a node whose plan is to inspect or wipe.
pub(super) fn agent_config(
    app: &App,
    snap: &Snapshot,
    name: &str,
    source: IpAddr,
    q: Option<&str>,
) -> Response<Body> {
    let what = "agent Ignition";
    let Some(node) = snap.site.node(name) else {
        return deny(app, what, name, source, Deny::UnknownNode);
    };
    let addrs = node_addrs(node);
    let granted = match token::authorize_ignition(
        &app.key,
        &access(snap, node, &addrs),
        source,
        query(q, "token").as_deref(),
        runtime::clock::now(),
    ) {
        Ok(g) => g,
        Err(d) => return deny(app, what, name, source, d),
    };
    let rec = app.inventories.get(&node.name);
    let action = match plan::plan(
        &snap.site,
        node,
        rec.as_deref().map(|r| &r.inventory),
        app.inventories.release(&node.name),
    ) {
        Plan::Wipe { reboot: false } => Action::Wipe,
        Plan::Wipe { reboot: true } => Action::WipeThenInstall,
        // Asked again once inspected (a retried fetch): inspect again.
        _ => Action::Inspect,
    };
    let Some(rel) = snap.site.inspection.agent(node.arch) else {
        return deny(app, what, name, source, Deny::UnknownNode);
    };
    let sum = match app.agent_sums.sha256(&snap.site.images.root.join(rel)) {
        Ok(s) => s,
        Err(e) => {
            warn!(node = %node.name, agent = %rel, error = %e, "the inspection agent cannot be read");
            app.timeline.record(
                Raw::new(
                    Subject::node(&node.name).with_ip(source.to_canonical()),
                    Phase::Ignition,
                    "failed",
                    format!("the inspection agent images/{rel} cannot be read: {e}"),
                )
                .error(),
            );
            return full(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain; charset=utf-8",
                "the inspection agent is missing; see bootd's log\n",
            );
        }
    };
    let base = snap.site.host.http.base_url(Some(source), Some(node));
    let tok = node_token(app, snap, node, granted.mints());
    let report = match action {
        Action::Inspect => format!("{base}/inventory/{}?token={tok}", node.name),
        Action::Wipe | Action::WipeThenInstall => {
            format!("{base}/inventory/{}/wiped?token={tok}", node.name)
        }
    };
    // Its ISO's URL says so (`then=poweroff`, [`crate::media`]).
    let power_off = query(q, "then").as_deref() == Some("poweroff");
    let cfg = render::agent::config(
        action,
        &format!("{base}/images/{rel}"),
        &sum,
        &report,
        snap.site.inspection.lldp_seconds,
        power_off,
    );
    info!(node = %node.name, %source, action = ?action, "agent Ignition served");
    app.timeline.record(Raw::new(
        Subject::node(&node.name).with_ip(source.to_canonical()),
        Phase::Ignition,
        "agent",
        match action {
            Action::Inspect => "inspection agent config served",
            Action::Wipe | Action::WipeThenInstall => "wipe agent config served",
        },
    ));
    json_response(StatusCode::OK, &cfg)
}

/// `POST /inventory/<node>` and `POST /inventory/<node>/wiped`: the
/// agent's reports. Answers 204 when stored, 400 with the reason when the
/// report is wrong, 404 for any refusal.
pub async fn post(
    app: Arc<App>,
    req: Request<hyper::body::Incoming>,
    peer: SocketAddr,
) -> Response<Body> {
    let source = peer.ip().to_canonical();
    let path = req.uri().path().to_string();
    let q = req.uri().query().map(str::to_string);
    if path == "/discover/inventory" {
        return discovered_report(app, req, source, q.as_deref()).await;
    }
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (name, wiped) = match segs.as_slice() {
        ["inventory", name] => (name.to_string(), false),
        ["inventory", name, "wiped"] => (name.to_string(), true),
        _ => return not_found(),
    };
    let what = if wiped {
        "wipe report"
    } else {
        "inventory report"
    };
    let snap = app.live.load_full();
    let Some(node) = snap.site.node(&name) else {
        return deny(&app, what, &name, source, Deny::UnknownNode);
    };
    // Its own address, and a token of the node: both.
    let addrs = node_addrs(node);
    if !addrs.contains(&source) {
        return deny(&app, what, &name, source, Deny::NotFromNode);
    }
    match query(q.as_deref(), "token").map(|t| {
        app.key
            .verify(&token::subject_of(node), &t, runtime::clock::now())
    }) {
        Some(Ok(_)) => {}
        Some(Err(d)) => return deny(&app, what, &name, source, d),
        None => return deny(&app, what, &name, source, Deny::NotFromNode),
    }
    let body = match body_of(req, what).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let now = crate::timeline::now_us() / 1000;
    let subject = Subject::node(&node.name).with_ip(source);
    let bad = |e: inventory::ReportError| {
        warn!(node = %node.name, %source, error = %e, "{what} refused");
        full(
            StatusCode::BAD_REQUEST,
            "text/plain; charset=utf-8",
            format!("{what} refused: {e}\n"),
        )
    };
    let stored = if wiped {
        let report = match inventory::parse_wipe(&body) {
            Ok(r) => r,
            Err(e) => return bad(e),
        };
        let disks: Vec<String> = report
            .disks
            .iter()
            .map(|d| {
                let id = [&d.by_id, &d.by_path, &d.serial]
                    .into_iter()
                    .find(|s| !s.is_empty())
                    .map(|s| format!(" ({s})"))
                    .unwrap_or_default();
                format!("{}{id}", d.name)
            })
            .collect();
        let line = if disks.is_empty() {
            "wiped no disk: the machine reported none".to_string()
        } else {
            format!("wiped {}", disks.join(", "))
        };
        // An adopted machine, wiped: its next boot inspects and installs.
        let adopted = app
            .inventories
            .release(&node.name)
            .is_some_and(|r| r.then_install);
        app.inventories
            .put_wiped(&node.name, report, now)
            .and_then(|_| match adopted {
                true => app.inventories.set_releasing(&node.name, None),
                false => Ok(()),
            })
            .map(|_| line)
    } else {
        let inv = match inventory::parse_inventory(&body) {
            Ok(i) => i,
            Err(e) => return bad(e),
        };
        let line = format!("inventory reported: {}", inventory::summary(&inv));
        app.inventories
            .put(&node.name, inv, source, now)
            .map(|_| line)
    };
    match stored {
        Ok(line) => {
            info!(node = %node.name, %source, "{line}");
            app.timeline.record_surely(Raw::new(
                subject,
                Phase::Machine,
                if wiped { "wiped" } else { "inspected" },
                line,
            ));
            let mut r = full(StatusCode::NO_CONTENT, "text/plain; charset=utf-8", "");
            *r.status_mut() = StatusCode::NO_CONTENT;
            r
        }
        Err(e) => {
            warn!(node = %node.name, error = %e, "{what} could not be stored");
            full(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain; charset=utf-8",
                "the report could not be stored; try again\n",
            )
        }
    }
}

/// The body of a report, at most [`inventory::MAX_BODY`] bytes.
async fn body_of(req: Request<hyper::body::Incoming>, what: &str) -> Result<Bytes, Response<Body>> {
    match http_body_util::Limited::new(req.into_body(), inventory::MAX_BODY)
        .collect()
        .await
    {
        Ok(b) => Ok(b.to_bytes()),
        Err(e) => Err(full(
            StatusCode::BAD_REQUEST,
            "text/plain; charset=utf-8",
            format!(
                "{what} refused: the body could not be read (at most {} bytes): {e}\n",
                inventory::MAX_BODY
            ),
        )),
    }
}

/// `POST /discover/inventory?key=K&token=T`: a discovered machine's
/// inventory (`discovery.inspect`), from the address it reported from.
async fn discovered_report(
    app: Arc<App>,
    req: Request<hyper::body::Incoming>,
    source: IpAddr,
    q: Option<&str>,
) -> Response<Body> {
    let what = "discovered machine's inventory";
    let key = match super::discover::discovered_asking(&app, q, source) {
        Ok((key, _)) => key,
        Err(d) => return deny(&app, what, "", source, d),
    };
    let body = match body_of(req, what).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let inv = match inventory::parse_inventory(&body) {
        Ok(i) => i,
        Err(e) => {
            warn!(%key, %source, error = %e, "{what} refused");
            return full(
                StatusCode::BAD_REQUEST,
                "text/plain; charset=utf-8",
                format!("{what} refused: {e}\n"),
            );
        }
    };
    let line = format!("inventory reported: {}", inventory::summary(&inv));
    match app.discovered.set_inventory(&key, inv) {
        Ok(Some(_)) => {
            info!(%key, %source, "discovered machine's {line}");
            app.timeline.record(Raw::new(
                Subject::ip(source),
                Phase::Machine,
                "inspected",
                format!("discovered {key}: {line}"),
            ));
            let mut r = full(StatusCode::NO_CONTENT, "text/plain; charset=utf-8", "");
            *r.status_mut() = StatusCode::NO_CONTENT;
            r
        }
        Ok(None) => deny(&app, what, "", source, Deny::UnknownNode),
        Err(e) => {
            warn!(%key, error = %e, "{what} could not be stored");
            full(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain; charset=utf-8",
                "the report could not be stored; try again\n",
            )
        }
    }
}
