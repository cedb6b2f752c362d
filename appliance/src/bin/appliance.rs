//! The all-in-one appliance: bootd (with the controller), dnsd and lbd in one process, from one
//! site description, with one runtime, one signal handler and one systemd
//! notification. This is what the container runs and what the demo can use;
//! the three daemons also run as separate units (systemd/).
//!
//! Each daemon is a library (`run(config, sockets, shutdown)`), so this file
//! only binds what the site asks for, starts the three, and stops them
//! together: when one fails the others are drained and the process exits
//! non-zero naming the daemon.

use anyhow::{Context, Result};
use clap::Parser;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

// The allocator bootd's own binary uses (see src/bin/bootd.rs), counted:
// `bootd_process_heap_bytes` is the live heap, the soak's leak signal (one
// atomic add per allocation and free). No limit is set.
#[global_allocator]
static GLOBAL: cap::Cap<mimalloc::MiMalloc> = cap::Cap::new(mimalloc::MiMalloc, usize::MAX);

#[derive(Parser, Debug)]
#[command(
    name = "appliance",
    version,
    about = "bootd + dnsd + lbd in one process, from one site description"
)]
struct Cli {
    /// The site description. Default: /etc/bare-metal-boot/site.yaml
    /// (/etc/bootd/site.yaml, the old default, while only it exists).
    #[arg(long)]
    site: Option<PathBuf>,
    /// State directory (bootd's leases, CA, keys, API store; lbd's bootstrap
    /// state in `lbd/` below it). Default: the site's host.stateDir.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Do not run dnsd.
    #[arg(long)]
    no_dns: bool,
    /// Do not run lbd.
    #[arg(long)]
    no_lb: bool,
    /// Started as root, serve as this user (default: `bootd` if it exists,
    /// else `nobody`); `root` keeps root.
    #[arg(long, value_name = "NAME")]
    user: Option<String>,
    /// What this appliance goes by among those sharing the site's store
    /// (`host.store: etcd`): beside each step of a node's timeline it
    /// served. Default: the host name.
    #[arg(long, value_name = "NAME", value_parser = appliance::ha::timeline::valid_name)]
    name: Option<String>,
}

fn main() -> Result<()> {
    runtime::heap::small_pages();
    runtime::heap::set_probe(|| GLOBAL.allocated());
    let cli = Cli::parse();
    let _log_flush = runtime::logging::init();
    // Stage two of every daemon's config, before anything is bound: a bad
    // site is refused here with file, key and reason.
    if let Some(d) = &cli.state_dir {
        // Before any site is loaded: its overlay is read from there too.
        site::override_state_dir(d).map_err(anyhow::Error::msg)?;
    }
    let site =
        site::load(&runtime::paths::site(cli.site.clone())).map_err(|e| anyhow::anyhow!("{e}"))?;
    appliance::warn_store(&site);
    let mut boot = appliance::boot_config(site, cli.name.as_deref());
    boot.state_dir = cli.state_dir.clone();
    let state_dir = boot.state_dir();
    let dns = if cli.no_dns {
        None
    } else {
        // dnsd and lbd follow bootd's site feed: the site is parsed once
        // per change, whatever the number of daemons.
        let source = dnsd::Source::Feed(boot.feed.clone());
        let loaded = dnsd::load(&source, None).map_err(|e| anyhow::anyhow!("dnsd: {e}"))?;
        Some((dnsd::Config::new(source), loaded))
    };
    let lb = if cli.no_lb {
        None
    } else {
        let source = lbd::Source::Feed(boot.feed.clone());
        let loaded = lbd::Loaded::load(&source).map_err(|e| anyhow::anyhow!("lbd: {e}"))?;
        let mut c = lbd::Config::new(source, loaded);
        c.state_dir = Some(state_dir.join("lbd"));
        Some(c)
    };
    // Before the runtime starts a thread: every thread is the user's.
    appliance::drop_root(&boot.site, &[&state_dir], cli.user.as_deref(), "bootd")?;
    tokio::runtime::Runtime::new()?.block_on(serve(boot, dns, lb))
}

async fn serve(
    boot: bootd::Config,
    dns: Option<(dnsd::Config, dnsd::Loaded)>,
    lb: Option<lbd::Config>,
) -> Result<()> {
    // Bind everything first: READY only when every socket is ours.
    let boot_sockets = appliance::BootSockets::bind(&boot.site).await?;
    let dns_sockets = match &dns {
        Some((_, loaded)) => {
            let threads = std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
                .min(2);
            Some(dnsd::Sockets::bind(&loaded.dns, threads).await?)
        }
        None => None,
    };
    let lb_sockets = match &lb {
        Some(c) => Some(lbd::Sockets::bind(&c.loaded)?),
        None => None,
    };
    let app = bootd::prepare(&boot, boot_sockets.want_tls())?;

    let shutdown = CancellationToken::new();
    // One reload loop for the process (bootd's, on the shared feed): SIGHUP
    // goes to it, and READY=1 follows once it has published the new site
    // or its refusal (the daemons apply it from there).
    let reloads: Vec<Arc<Notify>> = vec![Arc::clone(&boot.reload)];
    let reloaded: Vec<Arc<Notify>> = vec![Arc::clone(&boot.reloaded)];
    let mut tasks = tokio::task::JoinSet::new();
    let summary = format!(
        "serving {} ({} nodes): bootd{}{}",
        boot.site.cluster.domain(),
        boot.site.nodes.len(),
        if dns.is_some() { " dnsd" } else { "" },
        if lb.is_some() { " lbd" } else { "" }
    );
    // lbd first: bootd's timeline reads its status in process.
    let mut lb_source = appliance::lbwatch::LbSource::Admin;
    if let (Some(config), Some(sockets)) = (lb, lb_sockets) {
        let lbd = lbd::start(config, sockets, shutdown.clone())
            .await
            .context("lbd")?;
        lb_source = appliance::lbwatch::LbSource::InProcess(Arc::clone(&lbd));
        tasks.spawn(async move {
            lbd.wait().await;
            ("lbd", Ok(()))
        });
    }
    {
        let sd = shutdown.clone();
        let source = Some(lb_source);
        tasks.spawn(async move {
            (
                "bootd",
                appliance::run_boot(
                    app,
                    boot,
                    boot_sockets,
                    controller::Tuning::default(),
                    source,
                    sd,
                )
                .await,
            )
        });
    }
    if let (Some((config, loaded)), Some(sockets)) = (dns, dns_sockets) {
        let sd = shutdown.clone();
        tasks.spawn(async move {
            (
                "dnsd",
                dnsd::run_loaded(config, loaded, sockets, sd)
                    .await
                    .map_err(anyhow::Error::from),
            )
        });
    }
    let all = async {
        tracing::info!("{summary}");
        // The first daemon to stop (an error, or the shutdown) stops the others.
        let mut failed = None;
        while let Some(joined) = tasks.join_next().await {
            let (name, result) = joined.context("a daemon task panicked")?;
            if let Err(e) = result {
                tracing::error!(daemon = name, error = %e, "stopped with an error; stopping the others");
                failed.get_or_insert((name, e));
            }
            shutdown.cancel();
        }
        match failed {
            Some((name, e)) => Err(e.context(name)),
            None => Ok(()),
        }
    };
    runtime::service::serve_until_stopped(shutdown.clone(), reloads, reloaded, &summary, all)
        .await?
}
