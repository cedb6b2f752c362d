//! `GET /discover`: what a machine in no node reports of itself.

use super::*;

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
        if let Err(r) = script_allowed(app, snap, node, peer, q, "iPXE script") {
            return r;
        }
        let subject = Subject {
            mac: first,
            ..Subject::node(&node.name)
        }
        .with_ip(peer);
        return node_script(app, snap, node, subject, "by MAC, after discovery", peer);
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
    script(render::ipxe::discovered(
        &snap.site,
        snap.site.host.http.base_url(Some(peer), None),
        &m.key,
    ))
}
