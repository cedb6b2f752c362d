//! bootd's command line: parse flags, load and validate the site, bind,
//! then run bootd (and, with `host.api`, the controller beside it). Also
//! the offline tools (`--check-config`, `render`, `revoke`) and the
//! controller API's client (`nodes`, `cluster`).

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

// mimalloc: a request allocates a few dozen small objects; glibc malloc
// was 8 % of the CPU per small-file request (docs/performance.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "bootd",
    version,
    about = "Network-boot server: iPXE/GRUB scripts, per-node Ignition, OS images"
)]
struct Cli {
    /// The site description (YAML). Default: /etc/bare-metal-boot/site.yaml
    /// (/etc/bootd/site.yaml, the old default, while only it exists).
    #[arg(long, global = true)]
    site: Option<PathBuf>,
    /// Overrides host.stateDir from the site.
    #[arg(long, global = true)]
    state_dir: Option<PathBuf>,
    /// Validate FILE and exit: 0 when valid, 1 listing every problem.
    #[arg(long, value_name = "FILE")]
    check_config: Option<PathBuf>,
    /// Started as root, serve as this user (default: `bootd` if it exists,
    /// else `nobody`); `root` keeps root. docs/bootd.md.
    #[arg(long, value_name = "NAME")]
    user: Option<String>,
    /// What this appliance goes by among those sharing the site's store
    /// (`host.store: etcd`): beside each step of a node's timeline it
    /// served. Default: the host name.
    #[arg(long, global = true, value_name = "NAME", value_parser = appliance::ha::timeline::valid_name)]
    name: Option<String>,
    /// Where DHCP replies go, CLIENT,SERVER ports (default 68,67); for tests.
    #[arg(long, hide = true, value_name = "CLIENT,SERVER")]
    dhcp_reply_ports: Option<String>,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Serve (the default).
    Run,
    /// Print what bootd would serve a node (`ipxe`, `grub`, `ignition`,
    /// `metadata` NODE), or keepalived's configuration for the site's VIPs
    /// (`keepalived`, from `vips.vrrp`).
    Render {
        #[arg(value_enum)]
        what: What,
        node: Option<String>,
        /// Where lbd is installed on the appliances (keepalived's check runs it).
        #[arg(long, default_value = "/usr/local/bin/lbd")]
        lbd: PathBuf,
        /// Where bootd is installed on the appliances (the boot address's check).
        #[arg(long, default_value = "/usr/local/bin/bootd")]
        bootd: PathBuf,
        /// With `vips.vrrp.unicastPeers`: this appliance's own address
        /// (one per family), VRRP's source. Default: the address of
        /// `vips.vrrp.interface` here that the peers list, else its only one.
        #[arg(long, value_name = "ADDR")]
        unicast_src: Vec<std::net::IpAddr>,
        /// keepalived: only these addresses (`api`, `ingress`, `boot`;
        /// comma-separated). Default: every VIP the site has. `boot` alone
        /// needs no lbd (its API behind another load balancer).
        #[arg(long, value_enum, value_delimiter = ',', value_name = "VIP")]
        only: Vec<lbd::keepalived::Vip>,
        /// Without NODE: write every node's file into this directory, as
        /// `<node>.ign` (`.ipxe`, `.grub.cfg`, `.json`), in one pass.
        #[arg(long, value_name = "DIR")]
        each_to: Option<PathBuf>,
    },
    /// keepalived's check for the boot address (`vips.boot`): exits 0 when
    /// bootd answers 200 on /healthz at ADDR, 1 when it answers otherwise,
    /// 2 when nothing answers within a second. Reads no file.
    Ready {
        /// bootd's HTTP listener, as seen from this host.
        #[arg(long, value_name = "ADDR")]
        http: std::net::SocketAddr,
    },
    /// Stop serving a node's Ignition, metadata and userdata (e.g. the
    /// bootstrap node's once the cluster is up). A running bootd picks it
    /// up within seconds.
    Revoke { node: String },
    /// Undo `revoke`.
    Unrevoke { node: String },
    /// The controller API's client: list, add, delete and wait for nodes.
    Nodes {
        #[command(flatten)]
        conn: controller::client::Conn,
        #[command(subcommand)]
        cmd: controller::client::NodesCmd,
    },
    /// The controller API's client: machines discovered by their own report.
    Discovered {
        #[command(flatten)]
        conn: controller::client::Conn,
        #[command(subcommand)]
        cmd: controller::client::DiscoveredCmd,
    },
    /// The state's store: `migrate --from sqlite --to etcd` moves a single
    /// appliance's state into the site's etcd (`host.store.etcd`), or back.
    /// Stop bootd first.
    Store {
        #[command(subcommand)]
        cmd: StoreCmd,
    },
    /// The controller API's client: cluster facts.
    Cluster {
        #[command(flatten)]
        conn: controller::client::Conn,
        #[command(subcommand)]
        cmd: controller::client::ClusterCmd,
    },
}

#[derive(Subcommand, Debug)]
enum StoreCmd {
    /// Moves the controller's nodes and machines, DHCP leases, spent tokens,
    /// token key and site CA from one store to the other.
    Migrate {
        #[arg(long, value_enum)]
        from: appliance::migrate::Side,
        #[arg(long, value_enum)]
        to: appliance::migrate::Side,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum What {
    Keepalived,
    Ipxe,
    Grub,
    Ignition,
    Metadata,
}

fn main() -> Result<()> {
    runtime::heap::small_pages();
    let cli = Cli::parse();
    if let Some(Cmd::Ready { http }) = cli.cmd {
        // Before the site is read or the log thread started: keepalived
        // runs this as `nobody` every second on every appliance.
        let (code, why) = ready(http);
        eprintln!("{why}");
        std::process::exit(code);
    }
    // Log lines are written by a separate thread, so a request never waits
    // on write(2) to a slow terminal or journal. Not lossy: when the queue is
    // full, logging waits rather than dropping a decision's record. The guard
    // flushes what is queued when main returns.
    let _log_flush = runtime::logging::init();
    if let Some(path) = &cli.check_config {
        return check_config(path);
    }
    if let Some(d) = &cli.state_dir {
        // Before any site is loaded: its overlay is read from there too.
        site::override_state_dir(d).map_err(anyhow::Error::msg)?;
    }
    let site =
        site::load(&runtime::paths::site(cli.site.clone())).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut config = appliance::boot_config(site, cli.name.as_deref());
    config.state_dir = cli.state_dir.clone();
    if let Some(p) = &cli.dhcp_reply_ports {
        let (c, s) = p
            .split_once(',')
            .context("--dhcp-reply-ports CLIENT,SERVER")?;
        config.dhcp_ports = dhcp::v4::server::Ports {
            client: c.parse()?,
            server: s.parse()?,
        };
    }
    match cli.cmd.unwrap_or(Cmd::Run) {
        Cmd::Run => {
            appliance::warn_store(&config.site);
            // Before the runtime starts a thread: every thread is the user's.
            appliance::drop_root(
                &config.site,
                &[&config.state_dir()],
                cli.user.as_deref(),
                "bootd",
            )?;
            serve(config)
        }
        Cmd::Render {
            what: What::Keepalived,
            lbd,
            bootd,
            unicast_src,
            only,
            ..
        } => {
            use lbd::keepalived as ka;
            let bin = ka::Programs {
                lbd: &lbd,
                bootd: &bootd,
            };
            let site = &config.site;
            let here = match (&site.vips.vrrp, unicast_src.is_empty()) {
                (Some(v), true) if !v.unicast_peers.is_empty() => {
                    ka::interface_addresses(&v.interface)
                }
                _ => Vec::new(),
            };
            let local = ka::Local {
                unicast_src: ka::unicast_sources(site, &unicast_src, &here)
                    .map_err(anyhow::Error::msg)?,
            };
            let text = ka::render(site, &bin, &local, &only).map_err(anyhow::Error::msg)?;
            for w in ka::notify_warnings(site) {
                eprintln!("warning: {w}");
            }
            print!("{text}");
            Ok(())
        }
        Cmd::Ready { .. } => unreachable!("answered before the site is read"),
        Cmd::Render {
            what,
            node: None,
            each_to: Some(dir),
            ..
        } => render_each(&config, what, &dir),
        Cmd::Render { what, node, .. } => render(
            &config,
            what,
            &node.context("which node? (bootd render WHAT NODE, or --each-to DIR)")?,
        ),
        Cmd::Store {
            cmd: StoreCmd::Migrate { from, to },
        } => {
            let report = appliance::migrate::migrate(&config.site, &config.state_dir(), from, to)?;
            println!("{report}");
            Ok(())
        }
        Cmd::Revoke { node } => set_revoked(&config, &node, true),
        Cmd::Unrevoke { node } => set_revoked(&config, &node, false),
        Cmd::Nodes { conn, cmd } => api_client(&config, &conn, |c| {
            Box::pin(async move { controller::client::nodes(&c, cmd).await })
        }),
        Cmd::Discovered { conn, cmd } => api_client(&config, &conn, |c| {
            Box::pin(async move { controller::client::discovered(&c, cmd).await })
        }),
        Cmd::Cluster {
            conn,
            cmd: controller::client::ClusterCmd::Up(args),
        } => {
            let (site, state_dir) = (config.site.clone(), config.state_dir());
            api_client(&config, &conn, move |c| {
                Box::pin(async move { controller::client::up(&c, &site, &state_dir, &args).await })
            })
        }
        Cmd::Cluster { conn, cmd } => api_client(&config, &conn, |c| {
            Box::pin(async move { controller::client::cluster(&c, cmd).await })
        }),
    }
}

/// `bootd ready`: one GET /healthz, a second at most; (exit code, why).
fn ready(addr: std::net::SocketAddr) -> (i32, String) {
    use std::io::{Read, Write};
    let limit = std::time::Duration::from_secs(1);
    let mut s = match std::net::TcpStream::connect_timeout(&addr, limit) {
        Ok(s) => s,
        Err(e) => return (2, format!("bootd at {addr} does not answer: {e}")),
    };
    let _ = s.set_read_timeout(Some(limit));
    let _ = s.set_write_timeout(Some(limit));
    let req = format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let mut head = [0u8; 64];
    let n = match s.write_all(req.as_bytes()).and_then(|_| s.read(&mut head)) {
        Ok(n) => n,
        Err(e) => return (2, format!("bootd at {addr} does not answer: {e}")),
    };
    let line = String::from_utf8_lossy(&head[..n]);
    let line = line.lines().next().unwrap_or("");
    match line.split(' ').nth(1) {
        Some("200") => (0, format!("bootd at {addr} is healthy")),
        _ => (1, format!("bootd at {addr} answered {line:?} on /healthz")),
    }
}

fn check_config(path: &std::path::Path) -> Result<()> {
    match site::load(path) {
        Ok(site) => {
            // The API's token file: its problems fail the check, as the
            // site's do (bootd would refuse every request with it).
            let (problems, warnings) = site
                .host
                .api
                .as_ref()
                .map(|a| controller::auth::check(&a.tokens))
                .unwrap_or_default();
            if !problems.is_empty() {
                for p in problems {
                    eprintln!("host.api.tokens: {p}");
                }
                std::process::exit(1);
            }
            println!(
                "{}: ok: cluster {}, {} nodes",
                path.display(),
                site.cluster.domain(),
                site.nodes.len()
            );
            for w in site::exposure::warnings(&site).into_iter().chain(warnings) {
                println!("warning: {w}");
            }
            if let Some(d) = &site.host.dhcp {
                let ifs = dhcp::v4::server::host_interfaces();
                if let Some(w) = dhcp::v4::server::unbound_warning(d.interface.as_deref(), &ifs) {
                    println!("warning: {w}");
                }
            }
            // Image files are not required to exist yet (they may be fetched
            // later), but say so.
            for (name, set) in &site.images.sets {
                if let Some(Err(why)) = set.catalog.as_ref().map(|c| &c.resolved) {
                    println!(
                        "warning: images.sets.{name}: {why}; fetch it with: {}",
                        images::cache::fetch_command(&site, name)
                    );
                    continue;
                }
                for f in [Some(&set.kernel), Some(&set.initramfs), set.rootfs.as_ref()]
                    .into_iter()
                    .flatten()
                {
                    let p = site.images.root.join(f);
                    if !p.is_file() {
                        println!(
                            "warning: images.sets.{name}: {} does not exist yet",
                            p.display()
                        );
                    }
                }
            }
            Ok(())
        }
        Err(e) => {
            eprint!("{e}");
            std::process::exit(1);
        }
    }
}

fn render(config: &bootd::Config, what: What, name: &str) -> Result<()> {
    let site = &config.site;
    let Some(node) = site.node(name) else {
        bail!("no node named {name:?} in {}", site.source.display())
    };
    let key = bootd::token::TokenKey::load_or_create(&config.state_dir())
        .with_context(|| format!("state directory {}", config.state_dir().display()))?;
    print!("{}", render_one(config, &key, what, node)?);
    Ok(())
}

/// Every node's file into `dir` (a rack's worth without reading the site
/// once per node).
fn render_each(config: &bootd::Config, what: What, dir: &std::path::Path) -> Result<()> {
    let ext = match what {
        What::Ignition => "ign",
        What::Ipxe => "ipxe",
        What::Grub => "grub.cfg",
        What::Metadata => "json",
        What::Keepalived => unreachable!("rendered without a node"),
    };
    let key = bootd::token::TokenKey::load_or_create(&config.state_dir())
        .with_context(|| format!("state directory {}", config.state_dir().display()))?;
    std::fs::create_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
    for node in &config.site.nodes {
        let path = dir.join(format!("{}.{ext}", node.name));
        std::fs::write(&path, render_one(config, &key, what, node)?)
            .with_context(|| format!("{}", path.display()))?;
    }
    Ok(())
}

fn render_one(
    config: &bootd::Config,
    key: &bootd::token::TokenKey,
    what: What,
    node: &site::Node,
) -> Result<String> {
    let site = &config.site;
    let token = key.issue(
        &bootd::token::subject_of(node),
        bootd::token::Scope::Script,
        runtime::clock::now(),
        site.ignition.token_ttl,
    );
    let urls = bootd::render::NodeUrls::new(
        site,
        site.host.http.base_url(None, Some(node)),
        node,
        &token,
    );
    let out = match what {
        What::Ipxe => bootd::render::ipxe::node(site, node, &urls),
        What::Grub => bootd::render::grub::node(site, node, &urls),
        What::Ignition => {
            let cfg = bootd::render::ignition::node_config(site, node)?;
            // Exactly the bytes the HTTP route sends.
            String::from_utf8(serde_json::to_vec(&cfg)?)?
        }
        What::Keepalived => unreachable!("rendered without a node"),
        What::Metadata => {
            serde_json::to_string_pretty(&bootd::render::metadata::metadata(site, node))? + "\n"
        }
    };
    Ok(out)
}

type ClientFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Result<i32>>>>;

/// Runs one API client command; its exit code becomes the process's.
fn api_client(
    config: &bootd::Config,
    conn: &controller::client::Conn,
    f: impl FnOnce(controller::client::Client) -> ClientFuture,
) -> Result<()> {
    let client = controller::client::Client::new(&config.site, &config.state_dir(), conn)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let code = rt.block_on(f(client))?;
    if code != 0 {
        std::process::exit(code);
    }
    Ok(())
}

fn set_revoked(config: &bootd::Config, node: &str, revoked: bool) -> Result<()> {
    if config.site.node(node).is_none() {
        bail!("no node named {node:?} in {}", config.site.source.display());
    }
    let set = bootd::state::set_revoked(&config.state_dir(), node, revoked)?;
    println!(
        "revoked nodes: {}",
        set.into_iter().collect::<Vec<_>>().join(", ")
    );
    Ok(())
}

fn serve(config: bootd::Config) -> Result<()> {
    let rt = runtime::service::runtime(None)?;
    rt.block_on(async move {
        let site = &config.site;
        let sockets = appliance::BootSockets::bind(site).await?;
        let shutdown = CancellationToken::new();
        let reload = Arc::clone(&config.reload);
        println!(
            "bootd: serving cluster {} ({} nodes) from {}",
            site.cluster.domain(),
            site.nodes.len(),
            site.source.display()
        );
        println!("  iPXE entry:    {}/boot.ipxe", site.host.http.url);
        println!("  GRUB:          {}/grub/grub.cfg", site.host.http.url);
        println!(
            "  images:        {}/images/  ({})",
            site.host.http.url,
            site.images.root.display()
        );
        if let Some(h) = &site.host.https {
            println!(
                "  HTTPS:         {}/  (CA: {}/ca.pem)",
                h.url,
                config.state_dir().display()
            );
        }
        println!(
            "  health/metrics {}/healthz {}/metrics",
            site.host.http.url, site.host.http.url
        );
        for n in &site.nodes {
            println!(
                "  node {:<12} {:<9} {} {}",
                n.name,
                n.role,
                n.macs.first().map(|m| m.to_string()).unwrap_or_default(),
                n.ips().map(|a| a.to_string()).collect::<Vec<_>>().join(" ")
            );
        }
        let reloaded = Arc::clone(&config.reloaded);
        let app = bootd::prepare(&config, sockets.want_tls())?;
        // Config validated, sockets bound, state (CA, keys) ready: tell systemd.
        let status = format!(
            "serving {} ({} nodes)",
            site.cluster.domain(),
            site.nodes.len()
        );
        runtime::service::serve_until_stopped(
            shutdown.clone(),
            vec![reload],
            vec![reloaded],
            &status,
            appliance::run_boot(
                app,
                config,
                sockets,
                controller::Tuning::default(),
                Some(appliance::lbwatch::LbSource::Admin),
                shutdown,
            ),
        )
        .await?
    })
}
