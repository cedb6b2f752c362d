//! dnsd's command line: parse flags, load the site (or zone files), bind,
//! then hand over to `dnsd::run`. Also `--check-config` and `zone` (print
//! the zones derived from the site as master files).

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

// mimalloc, as bootd and the appliance: under glibc malloc, malloc and
// free were over a third of a 50 000-node reload and took 9x their time
// at 10 000 nodes (perf: its bins' upkeep, malloc_consolidate and
// unlink_chunk, grew with the heap), so the reload was not linear in the
// site (docs/performance.md, "The site at scale").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "dnsd",
    version,
    about = "Authoritative DNS for the cluster, derived from the site description"
)]
struct Cli {
    /// The site description (YAML); its `dns:` section configures dnsd.
    /// Default: /etc/bare-metal-boot/site.yaml (/etc/bootd/site.yaml, the
    /// old default, while only it exists).
    #[arg(long, global = true)]
    site: Option<PathBuf>,
    /// Standalone: serve this RFC 1035 master file instead of the site
    /// (FILE or FILE=ORIGIN; repeatable). The options below apply then.
    #[arg(long, value_name = "FILE[=ORIGIN]")]
    zone: Vec<String>,
    /// Standalone: UDP and TCP listen address (repeatable; default 0.0.0.0:53).
    #[arg(long)]
    listen: Vec<SocketAddr>,
    /// Standalone: /metrics and /healthz listener.
    #[arg(long)]
    http: Option<SocketAddr>,
    /// Standalone: who may AXFR/IXFR (address or CIDR; repeatable).
    #[arg(long)]
    allow_transfer: Vec<ipnet::IpNet>,
    /// Standalone: send NOTIFY here when a zone changes (repeatable).
    #[arg(long)]
    notify: Vec<SocketAddr>,
    /// Standalone: forward names outside the zones here (repeatable).
    #[arg(long)]
    upstream: Vec<SocketAddr>,
    /// Standalone: whose queries may be forwarded (address or CIDR;
    /// repeatable); loopback always may.
    #[arg(long)]
    allow_forward: Vec<ipnet::IpNet>,
    /// Standalone: responses per second per client network (0: off).
    #[arg(long, default_value_t = site::dns::DEFAULT_RATE_LIMIT)]
    rate_limit: u32,
    /// UDP worker threads (SO_REUSEPORT sockets) per listen address;
    /// default: the CPUs this process may run on.
    #[arg(long)]
    udp_threads: Option<usize>,
    /// Validate FILE (a site) and exit: 0 when valid, 1 listing every problem.
    #[arg(long, value_name = "FILE")]
    check_config: Option<PathBuf>,
    /// Started as root, serve as this user (default: `dnsd` if it exists,
    /// else `nobody`) with CAP_NET_BIND_SERVICE only; `root` keeps root.
    #[arg(long, value_name = "NAME")]
    user: Option<String>,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Serve (the default).
    Run,
    /// Print the zones as RFC 1035 master files.
    Zone,
}

fn main() -> Result<()> {
    runtime::heap::small_pages();
    let cli = Cli::parse();
    let _log_flush = runtime::logging::init();
    if let Some(path) = &cli.check_config {
        return check_config(path);
    }
    let source = if cli.zone.is_empty() {
        dnsd::Source::Site(runtime::paths::site(cli.site.clone()))
    } else {
        let files = cli
            .zone
            .iter()
            .map(|z| match z.split_once('=') {
                Some((f, o)) => (PathBuf::from(f), Some(o.to_string())),
                None => (PathBuf::from(z), None),
            })
            .collect();
        let dns = site::dns::Dns {
            listen: if cli.listen.is_empty() {
                vec![SocketAddr::from(([0, 0, 0, 0], 53))]
            } else {
                cli.listen.clone()
            },
            http: cli.http,
            serve_base_domain: false,
            nameservers: vec![],
            ttl: site::dns::DEFAULT_TTL,
            negative_ttl: site::dns::DEFAULT_NEGATIVE_TTL,
            upstreams: cli.upstream.clone(),
            notify: cli.notify.clone(),
            allow_transfer: cli.allow_transfer.clone(),
            allow_forward: cli
                .allow_forward
                .iter()
                .copied()
                .chain([
                    "127.0.0.0/8".parse().expect("a CIDR"),
                    "::1/128".parse().expect("a CIDR"),
                ])
                .collect(),
            rate_limit: cli.rate_limit,
            slip: site::dns::DEFAULT_SLIP,
            records: vec![],
        };
        dnsd::Source::Files {
            files,
            dns: Box::new(dns),
        }
    };
    let loaded = dnsd::load(&source, None).map_err(|e| anyhow::anyhow!("{e}"))?;
    match cli.cmd.unwrap_or(Cmd::Run) {
        Cmd::Zone => {
            for z in &loaded.catalog.zones {
                print!("{}", z.to_master());
            }
            Ok(())
        }
        Cmd::Run => {
            let watched: Vec<PathBuf> = match &source {
                dnsd::Source::Site(p) => vec![p.clone()],
                dnsd::Source::Files { files, .. } => files.iter().map(|(f, _)| f.clone()).collect(),
                dnsd::Source::Feed(f) => vec![f.current().source.clone()],
            };
            // Before the runtime starts a thread: every thread is the user's.
            let keep = runtime::privileges::CapabilitySet::NET_BIND_SERVICE;
            runtime::privileges::drop_for("dnsd", cli.user.as_deref(), keep, &[], &watched)?;
            serve(dnsd::Config::new(source), loaded, cli.udp_threads)
        }
    }
}

fn check_config(path: &std::path::Path) -> Result<()> {
    match dnsd::load(&dnsd::Source::Site(path.to_path_buf()), None) {
        Ok(l) => {
            let zones: Vec<String> = l
                .catalog
                .zones
                .iter()
                .map(|z| z.origin.to_string())
                .collect();
            println!(
                "{}: ok: zones {}; listening on {:?}",
                path.display(),
                zones.join(", "),
                l.dns.listen
            );
            Ok(())
        }
        Err(e) => {
            eprint!("{e}");
            std::process::exit(1);
        }
    }
}

fn serve(config: dnsd::Config, loaded: dnsd::Loaded, udp_threads: Option<usize>) -> Result<()> {
    let threads = udp_threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.clamp(1, 4))
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let sockets = dnsd::Sockets::bind(&loaded.dns, threads).await?;
        for z in &loaded.catalog.zones {
            println!("dnsd: zone {} serial {}", z.origin, z.serial());
        }
        let shutdown = CancellationToken::new();
        // Zones loaded, sockets bound: tell systemd (no-op outside it).
        let status = format!("serving {} zones", loaded.catalog.zones.len());
        let r = runtime::service::serve_until_stopped(
            shutdown.clone(),
            vec![Arc::clone(&config.reload)],
            vec![Arc::clone(&config.reloaded)],
            &status,
            dnsd::run_loaded(config, loaded, sockets, shutdown),
        )
        .await?;
        r.map_err(anyhow::Error::from)
    })
}
