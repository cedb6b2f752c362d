//! lbd's command line: parse flags, load and validate the configuration,
//! bind, then hand over to `lbd::run`. Also `--check-config` and the admin
//! clients `bootstrap-complete` and `status`.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use lbd::{Config, Loaded, Source};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Parser, Debug)]
#[command(
    name = "lbd",
    version,
    about = "L4 load balancer for the cluster API, machine-config server and ingress"
)]
struct Cli {
    /// The site description (YAML): frontends derived from its VIPs, nodes
    /// and `lb:` section. Default: /etc/bare-metal-boot/site.yaml
    /// (/etc/bootd/site.yaml, the old default, while only it exists).
    #[arg(long, global = true)]
    site: Option<PathBuf>,
    /// A standalone lbd file (`services: [{name, listen, backends}]`) instead of a site.
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Where the bootstrap completion is remembered across restarts.
    #[arg(long, global = true, default_value = "/var/lib/lbd")]
    state_dir: PathBuf,
    /// Validate FILE (a site, or with --standalone an lbd file), print what
    /// would be served, and exit: 0 when valid, 1 listing every problem.
    #[arg(long, value_name = "FILE")]
    check_config: Option<PathBuf>,
    /// With --check-config: FILE is a standalone lbd file.
    #[arg(long)]
    standalone: bool,
    /// Worker threads (default: the CPUs lbd may run on; 1 runs a single-threaded runtime).
    #[arg(long)]
    threads: Option<usize>,
    /// Started as root, serve as this user (default: `lbd` if it exists,
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
    /// Tell a running lbd that the bootstrap is complete: it drains the
    /// bootstrap node and removes it from api and machine-config.
    BootstrapComplete {
        /// The admin address (default: lb.adminListen of the configuration).
        #[arg(long)]
        admin: Option<SocketAddr>,
    },
    /// Print a running lbd's frontends and backends.
    Status {
        #[arg(long)]
        admin: Option<SocketAddr>,
    },
    /// Exit 0 when every frontend listening on `--vip` has a backend up,
    /// 1 when one has none (said why), 2 when lbd cannot be asked: the
    /// check keepalived runs before it holds the VIP (`bootd render
    /// keepalived`).
    Ready {
        #[arg(long)]
        vip: IpAddr,
        #[arg(long)]
        admin: Option<SocketAddr>,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let _log_flush = runtime::logging::init();
    if let Some(path) = &cli.check_config {
        let source = if cli.standalone {
            Source::Standalone(path.clone())
        } else {
            Source::Site(path.clone())
        };
        return check_config(&source);
    }
    // Chosen when it is read: `ready --admin` (keepalived's check, every
    // second) reads no file.
    let source = || match &cli.config {
        Some(p) => Source::Standalone(p.clone()),
        None => Source::Site(runtime::paths::site(cli.site.clone())),
    };
    match cli.cmd.unwrap_or(Cmd::Run) {
        Cmd::Run => {
            let source = source();
            let watched = [match &source {
                Source::Site(p) | Source::Standalone(p) => p.clone(),
                Source::Feed(f) => f.current().source.clone(),
            }];
            let loaded = Loaded::load(&source).map_err(|e| anyhow::anyhow!("{e}"))?;
            let mut config = Config::new(source, loaded);
            // Before the runtime starts a thread: every thread is the user's.
            let keep = runtime::privileges::CapabilitySet::NET_BIND_SERVICE;
            let own = [cli.state_dir.as_path()];
            runtime::privileges::drop_for("lbd", cli.user.as_deref(), keep, &own, &watched)?;
            config.state_dir = Some(cli.state_dir);
            serve(config, cli.threads)
        }
        Cmd::BootstrapComplete { admin } => {
            admin_call(&source, admin, "POST", "/bootstrap/complete")
        }
        Cmd::Status { admin } => admin_call(&source, admin, "GET", "/status"),
        Cmd::Ready { vip, admin } => {
            let code = match admin_request(&source, admin, "GET", "/status") {
                Ok((200, body)) => match lbd::status::ready(&body, vip) {
                    Ok(()) => 0,
                    Err(why) => {
                        println!("not ready: {why}");
                        1
                    }
                },
                Ok((st, _)) => {
                    println!("lbd's admin API answered {st}");
                    2
                }
                Err(e) => {
                    println!("lbd cannot be asked: {e:#}");
                    2
                }
            };
            std::process::exit(code)
        }
    }
}

fn check_config(source: &Source) -> Result<()> {
    let path = match source {
        Source::Site(p) | Source::Standalone(p) => p.clone(),
        Source::Feed(f) => f.current().source.clone(),
    };
    match Loaded::load(source) {
        Ok(loaded) => {
            println!(
                "{}: ok: {} frontends",
                path.display(),
                loaded.lb().frontends.len()
            );
            print!("{}", lbd::plan::render(&loaded.plan(false)));
            if let Some(a) = loaded.lb().admin_listen {
                println!("admin http://{a}/ (metrics, status, bootstrap completion)");
            }
            Ok(())
        }
        Err(e) => {
            eprint!("{e}");
            std::process::exit(1);
        }
    }
}

/// A tiny HTTP/1.1 client for the admin API (loopback, no TLS).
fn admin_call(
    source: &dyn Fn() -> Source,
    admin: Option<SocketAddr>,
    method: &str,
    path: &str,
) -> Result<()> {
    let (status, body) = admin_request(source, admin, method, path)?;
    print!("{body}");
    if !(200..300).contains(&status) {
        bail!("{method} {path}: {status}");
    }
    Ok(())
}

/// One request to lbd's admin API: its status code and body.
fn admin_request(
    source: &dyn Fn() -> Source,
    admin: Option<SocketAddr>,
    method: &str,
    path: &str,
) -> Result<(u16, String)> {
    let addr = match admin {
        Some(a) => a,
        None => {
            let loaded = Loaded::load(&source())
                .map_err(|e| anyhow::anyhow!("{e}(or give --admin ADDR)"))?;
            loaded
                .lb()
                .admin_listen
                .context("the admin listener is off in this configuration (lb.adminListen)")?
        }
    };
    // A wildcard listen address is reached on loopback.
    let addr = match addr.ip() {
        IpAddr::V4(a) if a.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), addr.port())
        }
        IpAddr::V6(a) if a.is_unspecified() => {
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), addr.port())
        }
        _ => addr,
    };
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .with_context(|| format!("admin API at {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(s, "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok((status, body.to_string()))
}

/// Lets lbd hold as many connections as the hard limit allows.
fn raise_nofile() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut l = getrlimit(Resource::Nofile);
    if l.current < l.maximum {
        l.current = l.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, l) {
            tracing::warn!(error = %e, "cannot raise the open-file limit");
        }
    }
}

fn serve(config: Config, threads: Option<usize>) -> Result<()> {
    raise_nofile();
    let rt = runtime::service::runtime(threads)?;
    rt.block_on(async move {
        let sockets = lbd::Sockets::bind(&config.loaded)?;
        let shutdown = CancellationToken::new();
        let (reload, reloaded) = (Arc::clone(&config.reload), Arc::clone(&config.reloaded));
        let status = format!("serving {} frontends", config.loaded.plan(false).len());
        let r = runtime::service::serve_until_stopped(
            shutdown.clone(),
            vec![reload],
            vec![reloaded],
            &status,
            lbd::run(config, sockets, shutdown),
        )
        .await?;
        r.map_err(anyhow::Error::from)
    })
}
