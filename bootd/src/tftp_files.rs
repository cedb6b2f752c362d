//! What bootd's TFTP server serves (generated per-node files, else the
//! TFTP root) and what it records of each transfer (the timeline).

use crate::*;

/// What a TFTP file name maps to: generated per-node files (GRUB configs,
/// the iPXE entry script) from the live site, else a file below
/// `host.tftp.root`.
pub(crate) fn tftp_resolver(app: Arc<App>) -> tftp::Resolver {
    Arc::new(move |name: &str, peer: SocketAddr| {
        let snap = app.live.load();
        let site = &snap.site;
        let base = name.strip_prefix("grub/").unwrap_or(name);
        if base == "grub.cfg" {
            return tftp::Resolved::Bytes(render::grub::selector(site).into());
        }
        if let Some(mac) = base
            .strip_prefix("grub.cfg-01-")
            .and_then(|m| m.parse::<site::Mac>().ok())
        {
            return match site.node_by_mac_or_port(&mac, peer.ip()) {
                Some(node) => {
                    let addrs = http::node_addrs(node);
                    let allowed = token::authorize_script(
                        &app.key,
                        &http::access(&snap, node, &addrs),
                        peer.ip(),
                        None,
                        runtime::clock::now(),
                    );
                    if let Err(d) = allowed {
                        http::count_refusal(&app, "GRUB config (TFTP)", &node.name, peer.ip(), d);
                        return tftp::Resolved::NotFound;
                    }
                    // Installed already: its disk, never the installer again
                    // (as over HTTP; PowerVM's firmware reads GRUB over TFTP).
                    if let Some(at) = http::installed_at(&app, &snap, node) {
                        let subject = timeline::Subject {
                            mac: Some(mac),
                            ..timeline::Subject::node(&node.name)
                        }
                        .with_ip(peer.ip().to_canonical());
                        http::local_boot_flag(&app, node, subject, at);
                        return tftp::Resolved::Bytes(render::grub::local_disk(node).into());
                    }
                    let subject = timeline::Subject {
                        mac: Some(mac),
                        ..timeline::Subject::node(&node.name)
                    }
                    .with_ip(peer.ip().to_canonical());
                    let boot = match http::boot_plan(&app, &snap, node, &subject) {
                        Ok(b) => b,
                        Err(why) => {
                            return tftp::Resolved::Bytes(render::grub::refused(node, &why).into())
                        }
                    };
                    let tok = app.key.issue(
                        &token::subject_of(node),
                        token::Scope::Script,
                        runtime::clock::now(),
                        site.ignition.token_ttl,
                    );
                    let urls = render::NodeUrls::with_boot(
                        site,
                        site.host.http.base_url(Some(peer.ip()), None),
                        node,
                        &tok,
                        boot,
                    );
                    info!(node = %node.name, %mac, "GRUB config served over TFTP");
                    app.timeline.record(timeline::Raw::new(
                        subject,
                        timeline::Phase::Script,
                        "served",
                        "GRUB config served over TFTP",
                    ));
                    tftp::Resolved::Bytes(render::grub::node(site, node, &urls).into())
                }
                None => tftp::Resolved::NotFound,
            };
        }
        if name == "boot.ipxe" {
            return tftp::Resolved::Bytes(
                render::ipxe::entry(site.host.http.base_url(Some(peer.ip()), None)).into(),
            );
        }
        match &site.host.tftp {
            Some(t) => tftp::resolve_in(files::open_beneath, &t.root, name),
            None => tftp::Resolved::NotFound,
        }
    })
}

/// TFTP transfers into the timeline: served files (name, bytes, duration)
/// and failures; a miss is not an error (GRUB probes a dozen names).
pub(crate) fn tftp_observer(app: Arc<App>) -> tftp::Observer {
    use timeline::{Phase, Raw, Subject};
    tftp::Observer(Arc::new(move |r: &tftp::Report<'_>| {
        let file = tftp::packet::Escaped(r.file).to_string();
        let subject = Subject::ip(r.peer.ip().to_canonical());
        let raw = match (r.outcome, r.bytes) {
            (tftp::Outcome::Ok, Some(n)) => Raw::new(
                subject,
                Phase::Tftp,
                "served",
                format!("{file}: {n} bytes in {} ms", r.took.as_millis()),
            )
            .bytes(n),
            (tftp::Outcome::NotFound, _) => Raw::new(
                subject,
                Phase::Tftp,
                "not_found",
                format!("{file}: not found"),
            ),
            (tftp::Outcome::Replaced | tftp::Outcome::ClientAbort, _) => Raw::new(
                subject,
                Phase::Tftp,
                "aborted",
                format!("{file}: {}", r.reason.as_deref().unwrap_or("aborted")),
            ),
            (o, _) => Raw::new(
                subject,
                Phase::Tftp,
                "failed",
                format!(
                    "{file}: {}: {}",
                    o.as_str(),
                    r.reason.as_deref().unwrap_or("")
                ),
            )
            .error(),
        };
        app.timeline.record(raw.took(r.took));
    }))
}
