//! What bootd gives its DHCP servers (the `dhcp` crate): the live site,
//! each exchange into the timeline, the counters; and their start.

use crate::*;

/// The `dhcp` crate's view of bootd: the site served now, each step of a
/// client's exchange recorded in the timeline, bootd's DHCP counters.
pub(crate) fn context(app: &Arc<App>) -> dhcp::Context {
    let live = Arc::clone(&app.live);
    let timeline = Arc::clone(&app.timeline);
    dhcp::Context {
        site: Arc::new(move || Arc::clone(&live.load().site)),
        observer: dhcp::Observer(Arc::new(move |e: dhcp::Event| {
            let mut raw = timeline::Raw::new(
                timeline::Subject::mac(e.mac),
                timeline::Phase::Dhcp,
                e.what,
                e.detail,
            )
            .at(e.at_us);
            raw.error = e.error;
            raw.firmware = e.firmware;
            raw.binds = e.binds.map(|ip| (ip, e.mac));
            timeline.record(raw);
        })),
        metrics: Arc::clone(&app.metrics.dhcp),
    }
}

/// Starts DHCPv4 on the sockets bound for it (port 67, and 4011 for
/// proxyDHCP) and DHCPv6 on its socket, each on `tracker` until
/// `shutdown`; the lease files are read (or the shared store followed)
/// first.
pub(crate) fn start(
    app: &Arc<App>,
    config: &Config,
    sockets: [Option<tokio::net::UdpSocket>; 3],
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
) -> Result<(), Error> {
    let [v4, proxy, v6] = sockets;
    let state_dir = |e| Error::StateDir(app.state_dir.clone(), e);
    if v4.is_some() || proxy.is_some() {
        let site = Arc::clone(&app.live.load().site);
        let (store, active) = dhcp::v4::ha::open(
            &app.state_dir,
            &app.leases,
            &site,
            config.shared_leases.as_ref(),
            shutdown,
        )
        .map_err(state_dir)?;
        let ifindex = site
            .host
            .dhcp
            .as_ref()
            .and_then(|d| d.interface.as_deref())
            .and_then(|i| nix::net::if_::if_nametoindex(i).ok());
        // Neighbour entries need CAP_NET_ADMIN, which neither the systemd
        // unit nor a dropped root grants: replies to address-less clients
        // are broadcast instead (every client accepts those).
        let net_admin = runtime::privileges::effective()
            .contains(runtime::privileges::CapabilitySet::NET_ADMIN);
        if ifindex.is_some() && !net_admin {
            info!("no CAP_NET_ADMIN: DHCP replies to clients without an address are broadcast, not unicast");
        }
        let ifindex = ifindex.filter(|_| net_admin);
        let server = Arc::new(dhcp::v4::server::Server {
            cx: context(app),
            table: Arc::clone(&app.leases),
            store,
            active,
            ports: config.dhcp_ports,
            ifindex,
            link: dhcp::v4::server::link_address(&site),
        });
        for (sock, port) in [(v4, 67), (proxy, 4011)] {
            if let Some(sock) = sock {
                info!(addr = %sock.local_addr().map(|a| a.to_string()).unwrap_or_default(), "DHCP listening");
                tracker.spawn(Arc::clone(&server).run(sock, port, shutdown.clone()));
            }
        }
    }
    if let Some(sock) = v6 {
        let (store, table) = dhcp::v6::leases::Store::open(&app.state_dir).map_err(state_dir)?;
        app.metrics
            .dhcp
            .v6_bindings
            .set(i64::try_from(table.len()).unwrap_or(i64::MAX));
        *app.leases6.lock().unwrap_or_else(|p| p.into_inner()) = table;
        let server_id = dhcp::v6::server::server_duid(&app.state_dir).map_err(state_dir)?;
        let ifindex = app
            .live
            .load()
            .site
            .host
            .dhcp6
            .as_ref()
            .and_then(|d| nix::net::if_::if_nametoindex(d.interface.as_str()).ok())
            .unwrap_or(0);
        let server = Arc::new(dhcp::v6::server::Server {
            cx: context(app),
            table: Arc::clone(&app.leases6),
            store,
            server_id,
            ifindex,
        });
        info!(addr = %sock.local_addr().map(|a| a.to_string()).unwrap_or_default(), "DHCPv6 listening");
        tracker.spawn(server.run(sock, shutdown.clone()));
    }
    Ok(())
}
