//! `GET /discover`: what a machine in no node reports of itself.

use super::*;
use crate::discovery::Machine;

/// At most 10 lines a second of refused reports (each is counted).
static REFUSED: runtime::logging::Throttle = runtime::logging::Throttle::new(10);

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
    let refused = |reason: &'static str, status: StatusCode, e: &dyn std::fmt::Display| {
        app.metrics
            .discovery_refused
            .get_or_create(&crate::metrics::Reason { reason })
            .inc();
        if let Some(left_out) = REFUSED.allow() {
            warn!(%peer, error = %e, suppressed = left_out, "discovery report not kept");
        }
        full(
            status,
            "text/plain; charset=utf-8",
            format!("discovery report not kept: {e}\n"),
        )
    };
    let m = match crate::discovery::from_report(&report, Some(peer), now, false) {
        Ok(m) => m,
        Err(e) => return refused("no_mac", StatusCode::BAD_REQUEST, &e),
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
    if !app
        .discovered
        .admit(peer, &m.macs[0], std::time::Instant::now())
    {
        let mut r = refused(
            "rate",
            StatusCode::TOO_MANY_REQUESTS,
            &crate::discovery::Refused::Limited,
        );
        r.headers_mut().insert(
            hyper::header::RETRY_AFTER,
            hyper::header::HeaderValue::from_static("2"),
        );
        return r;
    }
    // When bootd hands out the addresses, a report counts only from the
    // address leased to the MAC it booted from; else that MAC is verified
    // when the host's neighbour table gives it the report's address.
    let serves_addresses = snap
        .site
        .host
        .dhcp
        .as_ref()
        .is_some_and(|d| d.mode == site::DhcpMode::Server)
        || snap.site.host.dhcp6.is_some();
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
    let verified = if serves_addresses {
        if !from_its_lease() {
            return refused(
                "not_its_lease",
                StatusCode::FORBIDDEN,
                &crate::discovery::Refused::NotItsLease,
            );
        }
        true
    } else {
        match peer {
            IpAddr::V4(p4) => std::fs::read_to_string("/proc/net/arp")
                .ok()
                .and_then(|t| crate::discovery::arp_mac(&t, p4))
                .is_some_and(|mac| mac == m.macs[0]),
            IpAddr::V6(_) => false,
        }
    };
    let m = crate::discovery::Machine {
        verified: if verified {
            vec![m.macs[0].clone()]
        } else {
            Vec::new()
        },
        ..m
    };
    let m = match app.discovered.report(m) {
        Ok(m) => m,
        Err(e) => return refused("store", StatusCode::SERVICE_UNAVAILABLE, &e),
    };
    app.metrics.discovered.set(app.discovered.len() as i64);
    app.metrics
        .discovered_conflicts
        .set(app.discovered.conflicts() as i64);
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
    if !site.discovery.inspect
        || m.inventory.is_some()
        || !m.boot_verified()
        || !m.conflicts.is_empty()
    {
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
    let m = app.discovered.get(&key).ok_or(Deny::UnknownNode)?;
    if m.ip != Some(peer.to_canonical()) {
        return Err(Deny::NotFromNode);
    }
    let tok = query(q, "token").ok_or(Deny::NotFromNode)?;
    app.key
        .verify(&token_name(&key), &tok, runtime::clock::now())?;
    Ok((key, m))
}
