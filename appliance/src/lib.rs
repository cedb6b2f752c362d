//! The executables, above the libraries they compose: `bootd` (the boot
//! server with the controller API, and the offline tools and API client)
//! and `appliance` (bootd, the controller, dnsd and lbd in one process).
//! Cargo forbids a package cycle, so the binaries that compose bootd with
//! the controller, dnsd, lbd and the image catalog live here, and bootd's
//! library depends on none of them.
//!
//! This file holds what both binaries do the same way: bootd's
//! configuration (with the image catalog's cache check passed in), binding,
//! and running bootd with the controller beside it.

pub mod ha;
pub mod lbwatch;
pub mod migrate;

use anyhow::Result;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// bootd's configuration for `site`, with the image catalog's check that
/// every `catalog:` set is in the cache and intact. `name`: what this
/// appliance goes by among those sharing the store (`--name`; default its
/// host name).
pub fn boot_config(site: site::Site, name: Option<&str>) -> bootd::Config {
    let store = site.host.store.clone();
    let ha = site.host.dhcp.as_ref().map(|d| d.ha).unwrap_or_default();
    let mut c = bootd::Config::new(site);
    if let site::Store::Etcd(e) = &store {
        let mut s = ha::EtcdShared::new(etcd::Config::from_site(e), e.lease_ttl, ha);
        if let Some(n) = name {
            s = s.named(n);
        }
        // One store: bootd's secrets and timelines, and DHCPv4's leases.
        let s = Arc::new(s);
        c.shared_leases = Some(s.clone());
        c.shared = Some(s);
    }
    c.check_images = Some(Arc::new(|s: &site::Site| {
        images::check_site(s).map_err(|e| e.to_string())
    }));
    c
}

/// Logs, once at start, what `host.store` leaves open
/// (site::exposure::store_warnings; `--check-config` prints them too).
pub fn warn_store(site: &site::Site) {
    for w in site::exposure::store_warnings(site) {
        tracing::warn!("{w}");
    }
}

/// Started as root: becomes `user` (`--user`; default `default_user` when
/// such a user exists, else `nobody`) holding what bootd's systemd unit
/// grants (`CAP_NET_BIND_SERVICE`, `CAP_NET_RAW`); bootd's
/// state directories are handed to that user. With the local provider
/// (the lab's QEMU VMs: taps, network namespaces) root is kept, and said.
/// Call it before the runtime starts its threads (docs/design-notes.md).
pub fn drop_root(
    site: &site::Site,
    state_dirs: &[&std::path::Path],
    user: Option<&str>,
    default_user: &str,
) -> Result<runtime::privileges::Dropped> {
    use runtime::privileges::CapabilitySet as Cap;
    if site.host.api.as_ref().is_some_and(|a| a.local.is_some()) && user != Some("root") {
        // Its QEMU VMs need taps on the bridge and `ip netns exec`.
        if runtime::privileges::is_root() {
            tracing::warn!("host.api.local: keeping root (the local provider makes taps and enters network namespaces for its VMs); the lab's provider, not for production");
        }
        return Ok(runtime::privileges::Dropped::KeptRoot);
    }
    let keep = Cap::NET_BIND_SERVICE | Cap::NET_RAW;
    let mut own: Vec<std::path::PathBuf> = state_dirs.iter().map(|d| d.to_path_buf()).collect();
    own.push(site.host.state_dir.clone());
    own.dedup();
    let dirs: Vec<&std::path::Path> = own.iter().map(|p| p.as_path()).collect();
    Ok(runtime::privileges::drop_for(
        default_user,
        user,
        keep,
        &dirs,
        &site.watched_files(),
    )?)
}

/// Everything bootd and the controller listen on.
pub struct BootSockets {
    pub boot: bootd::Sockets,
    /// `host.api.listen`, when the site has an API.
    pub api: Option<TcpListener>,
}

impl BootSockets {
    pub async fn bind(site: &site::Site) -> Result<BootSockets> {
        Ok(BootSockets {
            boot: bootd::Sockets::bind(site).await?,
            api: controller::bind(site).await?,
        })
    }
    /// Whether bootd needs its CA and serving certificate.
    pub fn want_tls(&self) -> bool {
        self.boot.https.is_some() || self.api.is_some()
    }
}

/// Runs the controller on a thread and runtime of its own, beside bootd's:
/// its store is synchronous (an etcd round trip, a SQLite write), and its
/// work grows with the nodes (an overlay export reads, renders and
/// validates every node). On bootd's runtime, which has one thread on a
/// one-CPU appliance, each such call held every DHCP, TFTP and HTTP answer,
/// `/healthz` included: with 1 000 nodes made through the API, keepalived's
/// check timed out and the boot address moved under the storm. The answer
/// comes back on the returned channel when the controller stops; it stops
/// bootd too (`stop`).
fn controller_thread(
    app: Arc<bootd::App>,
    tuning: controller::Tuning,
    listener: TcpListener,
    stop: CancellationToken,
    grace: std::time::Duration,
) -> Result<tokio::sync::oneshot::Receiver<Result<()>>> {
    // Registered with bootd's runtime: given to the controller's as a
    // plain socket.
    let listener = listener.into_std()?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("controller".into())
        .spawn(move || {
            let r = (|| -> Result<()> {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                rt.block_on(async {
                    let l = TcpListener::from_std(listener)?;
                    Ok(controller::run(app, tuning, l, stop.clone(), grace).await?)
                })
            })();
            stop.cancel();
            let _ = tx.send(r);
        })?;
    Ok(rx)
}

/// Runs bootd and, with an API socket, the controller beside it on the same
/// [`bootd::App`], until `shutdown`; the first to fail stops the other.
/// With `lb`, lbd's status feeds the timeline's lbd phases (every second).
pub async fn run_boot(
    app: Arc<bootd::App>,
    config: bootd::Config,
    sockets: BootSockets,
    tuning: controller::Tuning,
    lb: Option<lbwatch::LbSource>,
    shutdown: CancellationToken,
) -> Result<()> {
    let grace = config.grace;
    let stop = shutdown.child_token();
    let lb_watch = lb.map(|source| {
        tokio::spawn(lbwatch::watch(
            Arc::clone(&app),
            source,
            std::time::Duration::from_secs(1),
            stop.clone(),
        ))
    });
    let ctl = match sockets.api {
        Some(l) => Some(controller_thread(
            Arc::clone(&app),
            tuning,
            l,
            stop.clone(),
            grace,
        )?),
        None => None,
    };
    let boot = {
        let stop = stop.clone();
        async move {
            let r = bootd::run_app(app, config, sockets.boot, stop.clone()).await;
            stop.cancel();
            r
        }
    };
    let boot_result = boot.await;
    if let Some(w) = lb_watch {
        let _ = w.await;
    }
    let ctl_result = match ctl {
        Some(rx) => rx
            .await
            .map_err(|_| anyhow::anyhow!("the controller's thread panicked"))?,
        None => Ok(()),
    };
    boot_result?;
    ctl_result?;
    Ok(())
}
