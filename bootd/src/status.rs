//! The status page: where is each node in its boot, and since when.
//!
//! Routes (on bootd's HTTP listener, listed in [`route`]):
//! - `GET /status`: counts of nodes per phase, per role and failing (each
//!   a link to those nodes), then one table of nodes (role, current
//!   phase, time in phase, a bar of its boot phases on one time axis for
//!   all, last event, last error), then any unknown clients;
//!   `?phase=P&role=R&failing=1` keeps the nodes that match ([`Filter`]);
//! - `GET /status/node/NAME`: what the site says of it (role, install
//!   disk, switch port, host network), then its timeline (phases with
//!   durations, then every event);
//! - `GET /status/timeline.json`, `GET /status/node/NAME/timeline.json`: the
//!   same as JSON (what `bootd nodes timeline` and the lab scripts read).
//!
//! Plain server-rendered HTML, no JavaScript; the page refreshes itself
//! with `<meta http-equiv="refresh">`. Every text that reaches the page
//! goes through [`esc`] (DHCP hostnames, vendor classes and file names are
//! client-chosen). The page shows no secrets: event texts are redacted when
//! recorded, and nothing else from a request is shown.

use crate::body::{json_reply, no_store_reply, Body};
use crate::state::Snapshot;
use crate::timeline::{summary, Event, Span, Summary, Track};
use crate::App;

use http::{Response, StatusCode};
use percent_encoding::{percent_decode_str, utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::{json, Value};
use std::fmt::Write;
use std::sync::Arc;

mod rack;
pub use rack::Filter;
use rack::{bar, counts, node_facts, PICTURE};
mod inventory;

/// Seconds between the page's own refreshes.
pub const REFRESH_SECS: u32 = 5;

/// HTML-escapes text for element content and quoted attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// A duration for people: `850 ms`, `12.3 s`, `4 min 05 s`, `2 h 03 min`.
pub fn human(us: i64) -> String {
    let us = us.max(0);
    let ms = us / 1000;
    match ms {
        0..=999 => format!("{ms} ms"),
        1000..=59_999 => format!("{:.1} s", us as f64 / 1e6),
        60_000..=3_599_999 => format!("{} min {:02} s", ms / 60_000, (ms / 1000) % 60),
        _ => format!("{} h {:02} min", ms / 3_600_000, (ms / 60_000) % 60),
    }
}

fn time_of(us: i64) -> String {
    crate::timeline::rfc3339(us / 1000)
}

fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECS}\">\n\
         <title>{}</title>\n<style>\n\
         body{{font-family:sans-serif;margin:1.5em;color:#222}}\n\
         table{{border-collapse:collapse;margin-bottom:1.5em}}\n\
         th,td{{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}}\n\
         th{{background:#eee}} td.num{{text-align:right;font-variant-numeric:tabular-nums}}\n\
         tr.err td{{background:#fde8e8}} .err{{color:#a00}} .muted{{color:#888}}\n\
         .g{{position:relative;width:16em;height:.9em;background:#f3f3f3}} .g i{{position:absolute;top:0;bottom:0}}\n\
         #nodes td{{white-space:nowrap;padding:.15em .5em}} #nodes td:nth-last-child(-n+2){{max-width:30em;overflow:hidden;text-overflow:ellipsis}}\n\
         i.k{{display:inline-block;width:.8em;height:.8em;margin:0 .2em 0 .6em}}\n\
         {colours}</style></head><body>\n{body}\n<p class=\"muted\">Refreshes every {REFRESH_SECS} s. Rendered {}.</p>\n</body></html>\n",
        esc(title),
        esc(&time_of(crate::timeline::now_us())),
        colours = PICTURE
            .iter()
            .enumerate()
            .map(|(i, (_, c))| format!(".p{i}{{background:{c}}}"))
            .collect::<String>(),
    )
}

fn link(node: &str) -> String {
    format!(
        "/status/node/{}",
        utf8_percent_encode(node, NON_ALPHANUMERIC)
    )
}

fn event_text(e: &Event) -> String {
    format!("{}: {}", e.phase.as_str(), e.detail)
}

/// The nodes table, with the counts and filters above it and each node's
/// phase bar: the nodes `filter` keeps, with their roles (`role_of`).
#[allow(clippy::too_many_arguments)]
pub fn render_index(
    cluster: &str,
    all: &[Summary],
    discovered: &[crate::discovery::Machine],
    now_us: i64,
    dropped: u64,
    gates: &[crate::gate::View],
    role_of: &dyn Fn(&str) -> String,
    filter: &Filter,
) -> String {
    let mut b = String::new();
    let _ = writeln!(b, "<h1>bootd: {}</h1>", esc(cluster));
    counts(&mut b, all, role_of);
    let rows: Vec<&Summary> = all
        .iter()
        .filter(|s| filter.keeps(s, &role_of(&s.node)))
        .collect();
    if !filter.is_empty() {
        let _ = writeln!(
            b,
            "<p id=\"filter\">Showing <b>{}</b> of {} nodes: {} &middot; <a href=\"/status\">all nodes</a></p>",
            rows.len(),
            all.len(),
            esc(&filter.describe())
        );
    }
    admission_table(&mut b, gates);
    let t0 = rows
        .iter()
        .filter_map(|s| s.phases.first().map(|p| p.start_us))
        .min()
        .unwrap_or(now_us);
    let legend: Vec<String> = PICTURE
        .iter()
        .enumerate()
        .map(|(i, (p, _))| format!("<i class=\"k p{i}\"></i>{p}"))
        .collect();
    let _ = writeln!(
        b,
        "<p id=\"legend\" class=\"muted\">Boot phases from {} to now: {}</p>",
        esc(&time_of(t0)),
        legend.join(" ")
    );
    let _ = writeln!(
        b,
        "<table id=\"nodes\">\n<tr><th>Node</th><th>Role</th><th>Boot</th><th>MAC</th><th>IP</th><th>Phase</th><th>Time in phase</th><th>Boot phases</th><th>Last event</th><th>Last error</th></tr>"
    );
    for s in rows {
        let class = if s.last_error.is_some() {
            " class=\"err\""
        } else {
            ""
        };
        let phase = s.phase.map(|p| p.as_str()).unwrap_or("waiting");
        let since = s
            .phase_since_us
            .map(|t| human(now_us - t))
            .unwrap_or_else(|| "-".into());
        let last = s
            .last_event
            .as_ref()
            .map(|e| format!("{} {}", esc(&time_of(e.at_us)), esc(&event_text(e))))
            .unwrap_or_default();
        let err = s
            .last_error
            .as_ref()
            .map(|e| format!("<span class=\"err\">{}</span>", esc(&event_text(e))))
            .unwrap_or_default();
        let mut g = String::new();
        bar(&mut g, s, t0, now_us);
        let _ = writeln!(
            b,
            "<tr{class} data-node=\"{n}\" data-phase=\"{phase}\"><td><a href=\"{href}\">{n}</a>{unk}</td><td>{role}</td><td>{boot}</td><td>{mac}</td><td>{ip}</td><td>{phase}</td><td class=\"num\">{since}</td><td>{g}</td><td>{last}</td><td>{err}</td></tr>",
            n = esc(&s.node),
            href = esc(&link(&s.node)),
            unk = if s.site_node { "" } else { " <span class=\"muted\">(not in the site)</span>" },
            role = esc(&role_of(&s.node)),
            boot = s.boot,
            mac = esc(s.mac.as_deref().unwrap_or("")),
            ip = s.ip.map(|i| i.to_string()).unwrap_or_default(),
        );
    }
    b.push_str("</table>\n");
    if !discovered.is_empty() {
        let _ = writeln!(
            b,
            "<h2>Discovered machines</h2>\n<p class=\"muted\">In no node; adopt one with <code>bootd discovered adopt KEY --name NAME --role ROLE</code>.</p>\n<table id=\"discovered\">\n<tr><th>Key</th><th>MACs</th><th>Manufacturer</th><th>Product</th><th>Serial</th><th>Arch</th><th>IP</th><th>Last seen</th><th>Reports</th></tr>"
        );
        for m in discovered {
            let o = |v: &Option<String>| esc(v.as_deref().unwrap_or(""));
            let _ = writeln!(
                b,
                "<tr data-key=\"{k}\"><td>{k}</td><td>{macs}</td><td>{mf}</td><td>{pr}</td><td>{se}</td><td>{arch}</td><td>{ip}</td><td>{seen}</td><td class=\"num\">{n}</td></tr>",
                k = esc(&m.key),
                macs = esc(&marked(&m.macs, &m.verified)),
                mf = o(&m.manufacturer),
                pr = o(&m.product),
                se = o(&m.serial),
                arch = o(&m.buildarch),
                ip = m.ip.map(|i| i.to_string()).unwrap_or_default(),
                seen = esc(&time_of(m.last_seen * 1000)),
                n = m.reports,
            );
            for c in &m.conflicts {
                let _ = writeln!(
                    b,
                    "<tr class=\"err conflict\" data-key=\"{k}\"><td>conflict: also claimed by</td><td>{macs}</td><td></td><td>{pr}</td><td>{se}</td><td></td><td>{ip}</td><td>{seen}</td><td class=\"num\">{n}</td></tr>",
                    k = esc(&m.key),
                    macs = esc(&marked(&c.macs, &c.verified)),
                    pr = esc(c.product.as_deref().unwrap_or("")),
                    se = esc(c.serial.as_deref().unwrap_or("")),
                    ip = c.ip.map(|i| i.to_string()).unwrap_or_default(),
                    seen = esc(&time_of(c.last_seen * 1000)),
                    n = c.reports,
                );
            }
        }
        b.push_str("</table>\n<p class=\"muted\">MACs marked ? were listed by a report, not verified: an adopt does not give them to the node. A conflict (two reporters with other MACs claim one UUID) is adopted by the MAC the right machine booted from.</p>\n");
    }
    if dropped > 0 {
        let _ = writeln!(
            b,
            "<p class=\"err\">{dropped} timeline events were dropped (recorder queue full).</p>"
        );
    }
    page(&format!("bootd status: {cluster}"), &b)
}

/// MACs joined, those not in `verified` marked `?`.
fn marked(macs: &[String], verified: &[String]) -> String {
    macs.iter()
        .map(|m| {
            if verified.contains(m) {
                m.clone()
            } else {
                format!("{m}?")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `host.admission`: each gate's places in use and requests waiting.
fn admission_table(b: &mut String, gates: &[crate::gate::View]) {
    if gates.is_empty() {
        return;
    }
    b.push_str("<table id=\"admission\">\n<tr><th>Admission</th><th>In use</th><th>Limit</th><th>Waiting</th><th>Queue</th></tr>\n");
    for g in gates {
        let full = if g.limit > 0 && g.in_use >= g.limit {
            " class=\"err\""
        } else {
            ""
        };
        let limit = if g.limit == 0 {
            "none".to_string()
        } else {
            g.limit.to_string()
        };
        let queue = g.queue.map(|q| q.to_string()).unwrap_or_else(|| "-".into());
        let _ = writeln!(
            b,
            "<tr{full} data-gate=\"{n}\"><td>{n}</td><td class=\"num\">{}</td><td class=\"num\">{limit}</td><td class=\"num\">{}</td><td class=\"num\">{queue}</td></tr>",
            g.in_use,
            g.waiting,
            n = esc(&g.gate),
        );
    }
    b.push_str("</table>\n");
}

/// Every gate now: TFTP transfers (from the TFTP server's gauges, when it
/// runs), then the image and provider gates.
pub fn gates(app: &App, site: &site::Site) -> Vec<crate::gate::View> {
    let mut v = Vec::new();
    if site.host.tftp.is_some() {
        let a = &site.host.admission;
        v.push(crate::gate::View {
            gate: "tftp".into(),
            in_use: app.metrics.tftp.transfers_active.get().max(0) as usize,
            limit: a.tftp_transfers,
            waiting: app.metrics.tftp.waiting.get().max(0) as usize,
            queue: Some(a.tftp_queue),
        });
    }
    v.extend(app.admission.views());
    v
}

fn phase_rows(b: &mut String, spans: &[Span], now_us: i64, last_is_current: bool) {
    // Where several appliances share the store: which served each phase.
    let by = spans.iter().any(|s| !s.by.is_empty());
    let _ = writeln!(
        b,
        "<table id=\"phases\">\n<tr><th>#</th><th>Phase</th><th>Started</th><th>Duration</th>{}<th>Error</th></tr>",
        if by { "<th>By</th>" } else { "" }
    );
    for (i, s) in spans.iter().enumerate() {
        let current = last_is_current && i + 1 == spans.len();
        let dur = if current {
            format!("{} (current)", human(now_us - s.start_us))
        } else {
            human(s.end_us - s.start_us)
        };
        let by_cell = if by {
            format!("<td class=\"by\">{}</td>", esc(&s.by.join(", ")))
        } else {
            String::new()
        };
        let _ = writeln!(
            b,
            "<tr data-phase=\"{p}\"><td class=\"num\">{}</td><td>{p}</td><td>{}</td><td class=\"num\">{}</td>{by_cell}<td class=\"err\">{}</td></tr>",
            i + 1,
            esc(&time_of(s.start_us)),
            esc(&dur),
            esc(s.last_error.as_deref().unwrap_or("")),
            p = s.phase.as_str(),
        );
    }
    b.push_str("</table>\n");
}

/// One node's timeline.
/// `inventory`: the node's inventory section, put after its facts.
pub fn render_node(t: &Track, now_us: i64, node: Option<&site::Node>, inventory: &str) -> String {
    let s = summary(t);
    let mut b = String::new();
    let _ = writeln!(
        b,
        "<p><a href=\"/status\">&larr; all nodes</a></p>\n<h1>{}</h1>",
        esc(&t.key)
    );
    if let Some(n) = node {
        node_facts(&mut b, n);
    }
    b.push_str(inventory);
    let _ = writeln!(
        b,
        "<p>MAC {} &middot; IP {} &middot; boot attempt {} &middot; phase <b id=\"phase\">{}</b> &middot; phases {} &middot; total {}</p>",
        esc(t.mac.as_deref().unwrap_or("-")),
        t.ip.map(|i| i.to_string()).unwrap_or_else(|| "-".into()),
        s.attempt,
        s.phase.map(|p| p.as_str()).unwrap_or("waiting"),
        if s.in_order { "in order" } else { "<span class=\"err\">out of order</span>" },
        esc(&human(s.total_us)),
    );
    if let Some(e) = &s.last_error {
        let _ = writeln!(
            b,
            "<p class=\"err\" id=\"last-error\">Last error: {} {}</p>",
            esc(&time_of(e.at_us)),
            esc(&event_text(e))
        );
    }
    b.push_str("<h2>Phases (current attempt)</h2>\n");
    phase_rows(&mut b, &s.phases, now_us, true);
    let by = t.events.iter().any(|e| e.by.is_some());
    let _ = writeln!(
        b,
        "<h2>Events</h2>\n<table id=\"events\">\n<tr><th>Time</th><th>Attempt</th><th>Phase</th><th>Event</th>{}<th>Bytes</th><th>Took</th><th>Detail</th></tr>",
        if by { "<th>By</th>" } else { "" }
    );
    for e in &t.events {
        let class = if e.error { " class=\"err\"" } else { "" };
        let by_cell = if by {
            format!(
                "<td class=\"by\">{}</td>",
                esc(e.by.as_deref().unwrap_or(""))
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            b,
            "<tr{class}><td>{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td>{by_cell}<td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            esc(&time_of(e.at_us)),
            e.attempt,
            e.phase.as_str(),
            esc(&e.what),
            e.bytes.map(|n| n.to_string()).unwrap_or_default(),
            if e.took_us > 0 { esc(&human(e.took_us)) } else { String::new() },
            esc(&e.detail),
        );
    }
    b.push_str("</table>\n");
    page(&format!("bootd status: {}", t.key), &b)
}

/// A node's timeline as JSON: the summary of the current attempt (phases
/// with durations) and every event kept. `None`: no such node or client.
pub fn timeline_json(app: &App, snap: &Snapshot, name: &str) -> Option<Value> {
    let track = app.timeline.track(name).or_else(|| {
        let n = snap.site.node(name)?;
        Some(Track {
            key: n.name.clone(),
            site_node: true,
            mac: n.macs.first().map(|m| m.to_string()),
            ip: Some(n.ip()),
            attempt: 1,
            events: Default::default(),
            starts: None,
        })
    })?;
    let s = summary(&track);
    let phases: Vec<Value> = s
        .phases
        .iter()
        .map(|p| {
            json!({
                "phase": p.phase, "start": time_of(p.start_us), "startUs": p.start_us, "endUs": p.end_us,
                "seconds": p.seconds(), "lastError": p.last_error, "by": p.by,
            })
        })
        .collect();
    Some(json!({
        "node": s.node,
        "siteNode": s.site_node,
        "mac": s.mac,
        "ip": s.ip,
        "attempt": s.attempt,
        "phase": s.phase,
        "inOrder": s.in_order,
        "totalSeconds": s.total_us as f64 / 1e6,
        "phases": phases,
        "lastError": s.last_error,
        "events": track.events,
    }))
}

fn html(status: StatusCode, body: String) -> Response<Body> {
    no_store_reply(status, "text/html; charset=utf-8", body.into_bytes())
}

/// The status routes (`path` starts with `/status`).
/// Whether `source` may read the status page and its timeline JSON on
/// bootd's HTTP listeners: an address in `host.statusFrom` (loopback by
/// default) or one of this host's own (a browser on the host itself).
/// Elsewhere they are the API's, behind its bearer token.
pub fn may_read(site: &site::Site, source: std::net::IpAddr) -> bool {
    let source = source.to_canonical();
    site.host.status_from.iter().any(|n| n.contains(&source)) || is_local_address(source)
}

fn is_local_address(a: std::net::IpAddr) -> bool {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return false;
    };
    addrs.into_iter().any(|i| {
        i.address.is_some_and(|sa| {
            sa.as_sockaddr_in().map(|v4| std::net::IpAddr::V4(v4.ip())) == Some(a)
                || sa.as_sockaddr_in6().map(|v6| std::net::IpAddr::V6(v6.ip())) == Some(a)
        })
    })
}

pub fn route(
    app: &Arc<App>,
    snap: &Snapshot,
    path: &str,
    q: Option<&str>,
) -> (&'static str, Response<Body>) {
    let now = crate::timeline::now_us();
    let rest = path.trim_start_matches("/status").trim_start_matches('/');
    if rest.is_empty() {
        let rows = app.timeline.summaries(&snap.site);
        let roles: std::collections::HashMap<&str, &str> = snap
            .site
            .nodes
            .iter()
            .map(|n| (n.name.as_str(), n.role.as_str()))
            .collect();
        let role_of = |n: &str| roles.get(n).copied().unwrap_or("").to_string();
        return (
            "status",
            html(
                StatusCode::OK,
                render_index(
                    &snap.site.cluster.domain(),
                    &rows,
                    &app.discovered.list(),
                    now,
                    app.timeline.dropped.get(),
                    &gates(app, &snap.site),
                    &role_of,
                    &Filter::parse(q),
                ),
            ),
        );
    }
    if rest == "timeline.json" {
        let rows = app.timeline.summaries(&snap.site);
        return (
            "status",
            json_reply(
                StatusCode::OK,
                &json!({ "nodes": rows, "discovered": app.discovered.list(), "admission": gates(app, &snap.site) }),
            ),
        );
    }
    let Some(node) = rest.strip_prefix("node/") else {
        return (
            "status",
            html(
                StatusCode::NOT_FOUND,
                page(
                    "not found",
                    "<p>No such page. <a href=\"/status\">All nodes</a></p>",
                ),
            ),
        );
    };
    let (raw, as_json) = match node.strip_suffix("/timeline.json") {
        Some(n) => (n, true),
        None => (node, false),
    };
    let name = percent_decode_str(raw).decode_utf8_lossy().into_owned();
    match (timeline_json(app, snap, &name), as_json) {
        (Some(v), true) => ("status", json_reply(StatusCode::OK, &v)),
        (None, true) => (
            "status",
            json_reply(StatusCode::NOT_FOUND, &json!({ "error": "no such node" })),
        ),
        (Some(_), false) => {
            let t = app.timeline.track(&name).unwrap_or_else(|| Track {
                key: name.clone(),
                site_node: true,
                mac: snap
                    .site
                    .node(&name)
                    .and_then(|n| n.macs.first())
                    .map(|m| m.to_string()),
                ip: snap.site.node(&name).map(|n| n.ip()),
                attempt: 1,
                events: Default::default(),
                starts: None,
            });
            let mut inv = String::new();
            if let Some(n) = snap.site.node(&name) {
                let rec = app.inventories.get(&name);
                let plan = crate::plan::plan(
                    &snap.site,
                    n,
                    rec.as_deref().map(|r| &r.inventory),
                    app.inventories.release(&name),
                );
                let installed = snap.site.ignition.after_install == site::AfterInstall::Disk
                    && app.installed.at(&name).is_some();
                inventory::section(&mut inv, rec.as_deref(), &plan, installed);
            }
            let page = render_node(&t, now, snap.site.node(&name), &inv);
            ("status", html(StatusCode::OK, page))
        }
        (None, false) => (
            "status",
            html(
                StatusCode::NOT_FOUND,
                page(
                    "no such node",
                    &format!(
                        "<p>No node {}. <a href=\"/status\">All nodes</a></p>",
                        esc(&name)
                    ),
                ),
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::{Book, Phase, Raw, Subject};

    fn lab() -> site::Site {
        site::load(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab/site.yaml"),
        )
        .unwrap()
    }

    /// A rack of 1 000 nodes: counts per phase and role, the failing, a
    /// filter, each node's bar; the page stays under 1 MB.
    #[test]
    fn a_rack_of_a_thousand_nodes() {
        let lab = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab");
        let dir = tempfile::tempdir().unwrap();
        let mut rack = String::from("\nnodes:\n");
        for i in 0..1000u32 {
            let role = if i < 3 { "master" } else { "worker" };
            let _ = writeln!(
                rack,
                "  - {{ name: r{i:04}, role: {role}, live: true, macs: [\"52:54:01:00:{:02x}:{:02x}\"], ip: 10.77.{}.{} }}",
                i / 256,
                i % 256,
                4 + i / 250,
                1 + i % 250
            );
        }
        let text = std::fs::read_to_string(lab.join("site.yaml"))
            .unwrap()
            .replace("dir: ignition", &format!("dir: {}/ignition", lab.display()))
            .replace("subnet: 10.77.0.0/24", "subnet: 10.77.0.0/16")
            .replacen("\nnodes:\n", &rack, 1);
        std::fs::write(dir.path().join("site.yaml"), &text).unwrap();
        let site = site::load(&dir.path().join("site.yaml")).unwrap_or_else(|e| panic!("{e}"));
        let mut book = Book::default();
        let t0 = crate::timeline::now_us() - 600_000_000;
        let steps = [
            Phase::Dhcp,
            Phase::Tftp,
            Phase::Script,
            Phase::Kernel,
            Phase::Ignition,
        ];
        for i in 0..1000i64 {
            let name = format!("r{i:04}");
            // Node i got as far as step i % 5, each step 20 s after the last.
            for (k, p) in steps.iter().enumerate().take(i as usize % 5 + 1) {
                let mut raw = Raw::new(Subject::node(&name), *p, "served", "x")
                    .at(t0 + i * 100_000 + k as i64 * 20_000_000);
                if i % 100 == 7 && k == i as usize % 5 {
                    raw = raw.error();
                }
                book.add(&site, raw);
            }
        }
        let mut rows: Vec<Summary> = book.tracks.values().map(summary).collect();
        rows.sort_by(|a, b| a.node.cmp(&b.node));
        let roles: std::collections::HashMap<&str, &str> = site
            .nodes
            .iter()
            .map(|n| (n.name.as_str(), n.role.as_str()))
            .collect();
        let role_of = |n: &str| roles.get(n).copied().unwrap_or("").to_string();
        let now = t0 + 700_000_000;
        let all = render_index(
            "rack",
            &rows,
            &[],
            now,
            0,
            &[],
            &role_of,
            &Filter::default(),
        );
        eprintln!("status page of 1 000 nodes: {} bytes", all.len());
        assert!(all.len() < 1_000_000, "{} bytes", all.len());
        assert!(all.contains("<p id=\"counts\">Nodes <b>1000</b> &middot; failing <a id=\"failing\" class=\"err\" href=\"/status?failing=1\">10</a>"), "{}", &all[..2000]);
        for p in ["dhcp", "tftp", "script", "kernel", "ignition"] {
            assert!(
                all.contains(&format!("href=\"/status?phase={p}\">{p} 200</a>")),
                "{p}"
            );
        }
        assert!(all.contains("href=\"/status?role=master\">master 3</a>"));
        assert!(all.contains("href=\"/status?role=worker\">worker 997</a>"));
        assert_eq!(all.matches("<div class=\"g\">").count(), 1000);
        // r0004 went through five phases: five segments on its bar.
        let row = all
            .lines()
            .find(|l| l.contains("data-node=\"r0004\""))
            .unwrap();
        assert_eq!(row.matches("<i class=\"p").count(), 5, "{row}");
        let f = Filter::parse(Some("phase=kernel&role=worker&failing=1"));
        let some = render_index("rack", &rows, &[], now, 0, &[], &role_of, &f);
        // Failing at kernel (step 3): i % 5 == 3 and i % 100 == 7: none;
        // at tftp, i % 100 == 7 has i % 5 == 2 (script). So: phase script.
        assert!(
            some.contains("Showing <b>0</b> of 1000 nodes: phase kernel, role worker, failing"),
            "{}",
            &some[..3000]
        );
        let f = Filter::parse(Some("phase=script&failing=1"));
        let some = render_index("rack", &rows, &[], now, 0, &[], &role_of, &f);
        assert!(some.contains("Showing <b>10</b> of 1000 nodes"));
        assert_eq!(some.matches("<tr class=\"err\" data-node=").count(), 10);
    }

    #[test]
    fn escaping_and_durations() {
        assert_eq!(
            esc("<a href=\"x\">&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(esc("a\u{1b}[31mb"), "a\u{fffd}[31mb");
        assert_eq!(human(850_000), "850 ms");
        assert_eq!(human(12_340_000), "12.3 s");
        assert_eq!(human(245_000_000), "4 min 05 s");
        assert_eq!(human(7_380_000_000), "2 h 03 min");
    }

    #[test]
    fn client_supplied_text_is_escaped_on_both_pages() {
        let site = lab();
        let mut book = Book::default();
        let evil = "<script>alert(1)</script>";
        let m: site::Mac = "52:54:00:99:00:02".parse().unwrap();
        book.add(
            &site,
            Raw::new(
                Subject::mac(m),
                Phase::Dhcp,
                "ignored",
                format!("hostname {evil}"),
            )
            .error(),
        );
        book.add(
            &site,
            Raw::new(Subject::node("worker-0"), Phase::Script, "served", evil),
        );
        let now = crate::timeline::now_us();
        let mut rows: Vec<Summary> = book.tracks.values().map(summary).collect();
        rows.sort_by(|a, b| a.node.cmp(&b.node));
        let index = render_index(
            "lab.example.test",
            &rows,
            &[],
            now,
            0,
            &[],
            &|_| String::new(),
            &Filter::default(),
        );
        assert!(!index.contains("<script>"), "{index}");
        assert!(index.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(index.contains("<meta http-equiv=\"refresh\""));
        assert!(
            index.contains("href=\"/status/node/mac%2052%3A54%3A00%3A99%3A00%3A02\""),
            "{index}"
        );
        assert!(index.contains("data-node=\"worker-0\" data-phase=\"script\""));
        let node = render_node(&book.tracks["mac 52:54:00:99:00:02"], now, None, "");
        assert!(!node.contains("<script>"));
        assert!(node.contains("id=\"last-error\""));
    }
}
