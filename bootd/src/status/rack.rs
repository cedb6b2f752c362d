//! The parts of the status page that make a rack readable: which nodes a
//! page lists ([`Filter`]), the counts above the table, each node's bar of
//! boot phases, and what the site says of a node on its own page.

use super::esc;
use crate::timeline::Summary;
use percent_encoding::{percent_decode_str, utf8_percent_encode, NON_ALPHANUMERIC};
use std::fmt::Write;

/// Which nodes `/status` lists: its query's `phase` (a phase's name, or
/// `waiting`), `role` and `failing=1` (a last error), all of those given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub phase: Option<String>,
    pub role: Option<String>,
    pub failing: bool,
}

impl Filter {
    pub fn parse(q: Option<&str>) -> Filter {
        let mut f = Filter::default();
        for kv in q.unwrap_or_default().split('&') {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let v = percent_decode_str(v).decode_utf8_lossy().into_owned();
            match k {
                "phase" if !v.is_empty() => f.phase = Some(v),
                "role" if !v.is_empty() => f.role = Some(v),
                "failing" => f.failing = v == "1" || v == "true",
                _ => {}
            }
        }
        f
    }

    pub(super) fn keeps(&self, s: &Summary, role: &str) -> bool {
        self.phase.as_deref().is_none_or(|p| p == phase_name(s))
            && self.role.as_deref().is_none_or(|r| r == role)
            && (!self.failing || s.last_error.is_some())
    }

    pub(super) fn is_empty(&self) -> bool {
        *self == Filter::default()
    }

    pub(super) fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(p) = &self.phase {
            parts.push(format!("phase {p}"));
        }
        if let Some(r) = &self.role {
            parts.push(format!("role {r}"));
        }
        if self.failing {
            parts.push("failing".into());
        }
        parts.join(", ")
    }
}

fn phase_name(s: &Summary) -> &'static str {
    s.phase.map(|p| p.as_str()).unwrap_or("waiting")
}

/// The phases a boot goes through, in order, with their colours on the
/// phase picture.
pub(super) const PICTURE: &[(&str, &str)] = &[
    ("machine", "#9e9e9e"),
    ("dhcp", "#4e79a7"),
    ("tftp", "#76b7b2"),
    ("script", "#59a14f"),
    ("kernel", "#edc948"),
    ("initramfs", "#f28e2b"),
    ("rootfs", "#ff9da7"),
    ("ignition", "#b07aa1"),
    ("machine_config", "#9c755f"),
    ("api", "#e15759"),
    ("joined", "#2f4b7c"),
];

/// Counts per phase, per role and of the failing, each a link to the
/// nodes it counts.
pub(super) fn counts(b: &mut String, rows: &[Summary], role_of: &dyn Fn(&str) -> String) {
    let failing = rows.iter().filter(|s| s.last_error.is_some()).count();
    let _ = writeln!(
        b,
        "<p id=\"counts\">Nodes <b>{}</b> &middot; failing <a id=\"failing\" class=\"{}\" href=\"/status?failing=1\">{failing}</a></p>",
        rows.len(),
        if failing > 0 { "err" } else { "muted" },
    );
    let mut by_phase: Vec<(&str, usize)> = std::iter::once("waiting")
        .chain(PICTURE.iter().map(|(p, _)| *p))
        .map(|p| (p, rows.iter().filter(|s| phase_name(s) == p).count()))
        .filter(|(_, n)| *n > 0)
        .collect();
    by_phase.retain(|(_, n)| *n > 0);
    let phases: Vec<String> = by_phase
        .iter()
        .map(|(p, n)| format!("<a data-count=\"{p}\" href=\"/status?phase={p}\">{p} {n}</a>"))
        .collect();
    let _ = writeln!(
        b,
        "<p id=\"by-phase\">By phase: {}</p>",
        phases.join(" &middot; ")
    );
    let mut roles: std::collections::BTreeMap<String, usize> = Default::default();
    for s in rows {
        *roles.entry(role_of(&s.node)).or_default() += 1;
    }
    let roles: Vec<String> = roles
        .iter()
        .map(|(r, n)| {
            let r = esc(r);
            let q = esc(&utf8_percent_encode(&r, NON_ALPHANUMERIC).to_string());
            format!("<a data-role-count=\"{r}\" href=\"/status?role={q}\">{r} {n}</a>")
        })
        .collect();
    let _ = writeln!(
        b,
        "<p id=\"by-role\">By role: {}</p>",
        roles.join(" &middot; ")
    );
}

/// One node's bar on the phase picture: each phase where it fell between
/// `t0` and `now` (percent of that span).
pub(super) fn bar(b: &mut String, s: &Summary, t0: i64, now: i64) {
    let span = (now - t0).max(1) as f64;
    b.push_str("<div class=\"g\">");
    for p in &s.phases {
        let Some(i) = PICTURE.iter().position(|(n, _)| *n == p.phase.as_str()) else {
            continue;
        };
        let left = (p.start_us - t0) as f64 / span * 100.0;
        let width = ((p.end_us - p.start_us) as f64 / span * 100.0).max(0.3);
        let _ = write!(
            b,
            "<i class=\"p{i}\" style=\"left:{left:.1}%;width:{width:.1}%\"></i>"
        );
    }
    b.push_str("</div>");
}

/// What the site says of a node: role, the disk it installs to, its host
/// network.
pub(super) fn node_facts(b: &mut String, n: &site::Node) {
    let disk = match (n.install_device(), n.live) {
        (Some(d), _) => format!("installs to <code id=\"install-device\">{}</code>", esc(d)),
        (None, true) => "runs live (<code>live: true</code>)".into(),
        (None, false) => "runs live (no install disk)".into(),
    };
    let _ = writeln!(
        b,
        "<p id=\"facts\">Role <b>{}</b> &middot; {} &middot; {} &middot; {}</p>",
        esc(&n.role),
        n.arch,
        disk,
        match &n.relay {
            Some(r) => format!(
                "switch port {}",
                esc(&[r.remote_id.as_deref(), r.circuit_id.as_deref()]
                    .into_iter()
                    .flatten()
                    .map(site::RelayId::show)
                    .collect::<Vec<_>>()
                    .join(" "))
            ),
            None => "by MAC".into(),
        }
    );
    let Some(hn) = &n.host_network else {
        return;
    };
    b.push_str("<h2>Host network</h2>\n<table id=\"network\">\n<tr><th>Interface</th><th>Type</th><th>Of</th><th>IPv4</th><th>IPv6</th><th>MTU</th></tr>\n");
    let fam = |c: &site::IpConfig| {
        if !c.enabled {
            return "off".to_string();
        }
        let mut v: Vec<String> = c.addresses.iter().map(|a| a.to_string()).collect();
        if c.dhcp {
            v.push("DHCP".into());
        }
        v.join(", ")
    };
    for i in &hn.interfaces {
        let of = match &i.kind {
            site::InterfaceKind::Bond { mode, ports, .. } => {
                format!("{} of {}", mode.as_str(), ports.join(", "))
            }
            site::InterfaceKind::Vlan { base, id } => format!("VLAN {id} on {base}"),
            site::InterfaceKind::Ethernet => i
                .controller
                .as_ref()
                .map(|c| format!("port of {c}"))
                .unwrap_or_default(),
        };
        let _ = writeln!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td></tr>",
            esc(&i.name),
            i.kind.nm_type(),
            esc(&of),
            esc(&fam(&i.ipv4)),
            esc(&fam(&i.ipv6)),
            i.mtu.map(|m| m.to_string()).unwrap_or_default()
        );
    }
    b.push_str("</table>\n");
    let routes: Vec<String> = hn
        .routes
        .iter()
        .map(|r| format!("{} via {} ({})", r.destination, r.next_hop, r.interface))
        .collect();
    if !routes.is_empty() {
        let _ = writeln!(b, "<p>Routes: {}</p>", esc(&routes.join("; ")));
    }
}
