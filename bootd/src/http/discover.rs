//! `GET /discover`: what a machine in no node reports of itself.

use super::*;
use crate::discovery::Machine;

/// A discovery report (`discovery.enabled`): kept, shown on the status page
/// and the timeline, answered with a wait-and-retry or power-off script.
pub(super) fn discover(
    app: &App,
    snap: &Snapshot,
    q: Option<&str>,
    peer: IpAddr,
) -> Response<Body> {
    if !snap.site.discovery.enabled {
        return not_found();
    }
    let keys = [
        "mac",
        "uuid",
        "serial",
        "manufacturer",
        "product",
        "asset",
        "buildarch",
        "platform",
        "nic0",
        "nic1",
        "nic2",
        "nic3",
    ];
    let report: crate::discovery::Query<'_> = keys
        .iter()
        .filter_map(|k| query(q, k).map(|v| (*k, v)))
        .collect();
    let now = crate::timeline::now_us() / 1000;
    let peer = peer.to_canonical();
    let m = match crate::discovery::from_report(&report, Some(peer), now) {
        Ok(m) => m,
        Err(e) => {
            warn!(%peer, error = %e, "discovery report refused");
            return full(
                StatusCode::BAD_REQUEST,
                "text/plain; charset=utf-8",
                format!("discovery report refused: {e}\n"),
            );
        }
    };
    // A machine adopted in the meantime is a node now: its script, not a report.
    let first: Option<Mac> = m.macs.first().and_then(|s| s.parse().ok());
    if let Some(node) = first.as_ref().and_then(|mac| snap.site.node_by_mac(mac)) {
        let granted = match script_allowed(app, snap, node, peer, q, "iPXE script") {
            Ok(g) => g,
            Err(r) => return r,
        };
        let subject = Subject {
            mac: first,
            ..Subject::node(&node.name)
        }
        .with_ip(peer);
        return node_script(
            app,
            snap,
            node,
            subject,
            "by MAC, after discovery",
            peer,
            granted.mints(),
        );
    }
    // When bootd hands out the addresses, a report counts only from the
    // address leased to the MAC it names.
    let serves_addresses = snap
        .site
        .host
        .dhcp
        .as_ref()
        .is_some_and(|d| d.mode == site::DhcpMode::Server)
        || snap.site.host.dhcp6.is_some();
    let peer = peer.to_canonical();
    let from_its_lease = || {
        if let IpAddr::V6(p6) = peer {
            // Over IPv6: the address bootd's DHCPv6 bound to that MAC.
            let leases6 = app.leases6.lock().unwrap_or_else(|p| p.into_inner());
            return first
                .as_ref()
                .and_then(|mac| leases6.held_by_mac(&mac.to_string()))
                .is_some_and(|l| l.ip == p6);
        }
        let leases = app.leases.lock().unwrap_or_else(|p| p.into_inner());
        first
            .as_ref()
            .and_then(|mac| leases.get(mac))
            .is_some_and(|l| {
                l.state == dhcp::v4::leases::LeaseState::Active
                    && IpAddr::V4(l.ip) == peer
                    && first
                        .as_ref()
                        .is_some_and(|m| leases.holder(l.ip) == Some(m))
            })
    };
    let kept = if serves_addresses && !from_its_lease() {
        Err(crate::discovery::Refused::NotItsLease)
    } else {
        app.discovered.report(m)
    };
    let m = match kept {
        Ok(m) => m,
        Err(e) => {
            use crate::discovery::Refused;
            let (reason, status) = match e {
                Refused::Conflict => ("conflict", StatusCode::CONFLICT),
                Refused::NotItsLease => ("not_its_lease", StatusCode::FORBIDDEN),
                Refused::NoMac => ("no_mac", StatusCode::BAD_REQUEST),
                Refused::Store(_) => ("store", StatusCode::SERVICE_UNAVAILABLE),
            };
            app.metrics
                .discovery_refused
                .get_or_create(&crate::metrics::Reason { reason })
                .inc();
            warn!(%peer, error = %e, "discovery report not kept");
            return full(
                status,
                "text/plain; charset=utf-8",
                format!("discovery report not kept: {e}\n"),
            );
        }
    };
    app.metrics.discovered.set(app.discovered.len() as i64);
    if m.reports == 1 {
        info!(key = %m.key, macs = ?m.macs, product = ?m.product, %peer, "machine discovered");
    }
    app.timeline.record(Raw::new(
        Subject {
            mac: first,
            ..Subject::ip(peer)
        },
        Phase::Script,
        "discovered",
        format!(
            "discovered as {} (MACs {}); waiting to be adopted",
            m.key,
            m.macs.join(", ")
        ),
    ));
    let base = snap.site.host.http.base_url(Some(peer), None);
    if let Some(s) = inspect_script(app, snap, &m, base) {
        return script(s);
    }
    script(render::ipxe::discovered(&snap.site, base, &m.key))
}

/// The name a discovered machine's tokens are issued for: no node's (a
/// node's name is a DNS label, without a colon).
pub(crate) fn token_name(key: &str) -> String {
    format!("discovered:{key}")
}

/// A discovered machine's architecture, from iPXE's `${buildarch}`.
fn arch_of(m: &Machine) -> site::Arch {
    match m.buildarch.as_deref() {
        Some("arm64") => site::Arch::Aarch64,
        Some("ppc64" | "ppc64le") => site::Arch::Ppc64le,
        _ => site::Arch::X86_64,
    }
}

/// With `discovery.inspect`, for a machine not inspected yet whose
/// architecture has an agent and an image set: the live boot that runs it.
fn inspect_script(app: &App, snap: &Snapshot, m: &Machine, base: &str) -> Option<String> {
    let site = &snap.site;
    if !site.discovery.inspect || m.inventory.is_some() {
        return None;
    }
    let arch = arch_of(m);
    site.inspection.agent(arch)?;
    let set = site.images.sets.values().find(|s| s.arch == arch)?;
    let tok = app.key.issue(
        &token_name(&m.key),
        token::Scope::Script,
        runtime::clock::now(),
        site.ignition.token_ttl,
    );
    let url = format!("{base}/discover/agent?key={}&token={tok}", m.key);
    Some(render::ipxe::discover_inspect(
        site, set, base, &m.key, &url,
    ))
}

/// `GET /discover/agent?key=K&token=T`: the agent's config for a
/// discovered machine, to its reported address only.
pub(super) fn discover_agent(
    app: &App,
    snap: &Snapshot,
    q: Option<&str>,
    peer: IpAddr,
) -> Response<Body> {
    let what = "discovery agent Ignition";
    let (key, m) = match discovered_asking(app, q, peer) {
        Ok(x) => x,
        Err(d) => return deny(app, what, "", peer, d),
    };
    let arch = arch_of(&m);
    let Some(rel) = snap.site.inspection.agent(arch) else {
        return not_found();
    };
    let sum = match app.agent_sums.sha256(&snap.site.images.root.join(rel)) {
        Ok(s) => s,
        Err(e) => {
            warn!(key = %key, agent = %rel, error = %e, "the inspection agent cannot be read");
            return full(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain; charset=utf-8",
                "the inspection agent is missing; see bootd's log\n",
            );
        }
    };
    let base = snap.site.host.http.base_url(Some(peer), None);
    let tok = app.key.issue(
        &token_name(&key),
        token::Scope::Script,
        runtime::clock::now(),
        snap.site.ignition.token_ttl,
    );
    let cfg = render::agent::config(
        render::agent::Action::Inspect,
        &format!("{base}/images/{rel}"),
        &sum,
        &format!("{base}/discover/inventory?key={key}&token={tok}"),
        snap.site.inspection.lldp_seconds,
        false,
    );
    info!(key = %key, %peer, "discovery agent Ignition served");
    json_response(StatusCode::OK, &cfg)
}

/// The discovered machine a request names (`key`, `token`), when it comes
/// from the address the machine reported from with a token issued for it.
pub(super) fn discovered_asking(
    app: &App,
    q: Option<&str>,
    peer: IpAddr,
) -> Result<(String, Machine), Deny> {
    let key = query(q, "key").ok_or(Deny::UnknownNode)?;
    let m = app
        .discovered
        .find(&key)
        .ok()
        .flatten()
        .filter(|m| m.key == key)
        .ok_or(Deny::UnknownNode)?;
    if m.ip != Some(peer.to_canonical()) {
        return Err(Deny::NotFromNode);
    }
    let tok = query(q, "token").ok_or(Deny::NotFromNode)?;
    app.key
        .verify(&token_name(&key), &tok, runtime::clock::now())?;
    Ok((key, m))
}
