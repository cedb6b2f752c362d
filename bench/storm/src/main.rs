//! `storm`: a rack powering on at once. N simulated machines, each with
//! its own MAC, arrive together (or over a ramp) and each does what
//! network-boot firmware does, with its timeouts and retries: DHCP through
//! a relay address (no raw sockets), TFTP of the boot program, DHCP again
//! as iPXE, `boot.ipxe` and the node's script over HTTP, kernel and
//! initramfs, the rootfs for a share of them (reset mid-transfer, resumed
//! with `Range`), and the node's own Ignition. Every byte is checked
//! against the files the server should serve. Prints per-phase latency,
//! retries and failures; `--json` writes them for bench/storm/run.sh.
//!
//! Machine `i` has MAC 02:78:00:ii:ii:ii and is node `n<i, 5 digits>` of
//! the site bench/storm/run.sh generates. With `--unknown K`, K machines
//! more (MACs 02:7a:00:jj:jj:jj, second NIC 02:7a:01:jj:jj:jj) are in no
//! node: they report themselves to bootd's discovery (src/discover.rs).
//! Every machine's boot is bounded by the firmware's retries and by
//! `--deadline`.
//!
//! Several `--server`s: the relay sends every DHCP message to each (a
//! relay with several helper addresses), and each machine follows the
//! next-server and URLs of the one that answered it. `--kill-pid` sends
//! SIGKILL to one server's process at `--kill-at` seconds; the report then
//! counts the machines mid-flight on it (`--kill-server`: their last answer
//! before the kill came from it) and gives their figures apart.

mod cloud;
mod dhcp;
mod discover;
mod http;
mod machine;
mod report;
mod reports;
mod tftp;

use anyhow::{Context, Result};
use clap::Parser;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(about = "A rack powering on at once: simulated network-boot machines")]
struct Cli {
    /// Machines.
    #[arg(long, default_value_t = 100)]
    machines: usize,
    /// Machines more whose MACs are in no node: each reports itself to
    /// bootd's discovery (the site needs a pool and `discovery`).
    #[arg(long, default_value_t = 0)]
    unknown: usize,
    /// bootd's `discovered.json`: after the storm, every unknown machine
    /// must be in it once, its MAC verified, and no entry in conflict.
    #[arg(long)]
    discovered: Option<PathBuf>,
    /// The first machine's index (MAC and node name).
    #[arg(long, default_value_t = 0)]
    first: usize,
    /// The DHCP servers (each message relayed to every one; comma-separated),
    /// the first also TFTP's when DHCP names none.
    #[arg(long, value_delimiter = ',', required = true)]
    server: Vec<Ipv4Addr>,
    /// The relay address (giaddr): bound on port 67 here.
    #[arg(long)]
    relay: Ipv4Addr,
    /// Client architecture (option 93): 0 BIOS, 7 x86-64 UEFI.
    #[arg(long, default_value_t = 0)]
    arch: u16,
    /// TFTP block size asked for.
    #[arg(long, default_value_t = 1468)]
    blksize: u16,
    /// TFTP window size asked for (RFC 7440; none: not asked, as a PXE ROM).
    #[arg(long)]
    windowsize: Option<u16>,
    /// TFTP: seconds to wait for a packet before sending again, and how
    /// many times in a row.
    #[arg(long, default_value_t = 2)]
    tftp_timeout: u64,
    #[arg(long, default_value_t = 6)]
    tftp_retries: u32,
    /// Where the server's TFTP files are (to check what arrives).
    #[arg(long)]
    tftp_root: PathBuf,
    /// Where the server's image files are, and the URL path they are under.
    #[arg(long)]
    images_root: PathBuf,
    #[arg(long, default_value = "/images/")]
    images_prefix: String,
    /// Each node's Ignition as the server should send it: DIR/<node>.ign
    /// (none: checked to be JSON only).
    #[arg(long)]
    ignition_dir: Option<PathBuf>,
    /// Share of the machines that fetch the rootfs (when the script names one).
    #[arg(long, default_value_t = 0.1)]
    rootfs_share: f64,
    /// Where in the rootfs the connection is reset (share of its size).
    #[arg(long, default_value_t = 0.5)]
    reset_at: f64,
    /// Seconds over which the machines arrive (0: all at once).
    #[arg(long, default_value_t = 0.0)]
    ramp: f64,
    /// No machine's boot goes on past this many seconds.
    #[arg(long, default_value_t = 900)]
    deadline: u64,
    /// A boot that fails before the OS runs starts over after this many
    /// seconds, from DHCP, as the firmware does (0: a failure is final).
    #[arg(long, default_value_t = 0)]
    reboot_after: u64,
    /// SIGKILL to this process (a server's) at `--kill-at` seconds.
    #[arg(long, requires = "kill_server")]
    kill_pid: Option<i32>,
    #[arg(long, default_value_t = 0.0)]
    kill_at: f64,
    /// The killed process's addresses (one of `--server`, and the boot
    /// address when it held it; comma-separated): for the report of the
    /// machines mid-flight on it.
    #[arg(long, value_delimiter = ',')]
    kill_server: Vec<Ipv4Addr>,
    /// The results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Machines made through the controller's API (src/cloud.rs): the
    /// provider's list of instances (the ECS fake's `/_fake/instances`,
    /// read from `--relay`'s address). No DHCP, TFTP or images: each
    /// instance fetches the Ignition its user data points at.
    #[arg(long)]
    cloud: Option<String>,
    /// With `--cloud`: `name epoch-seconds` lines, when each node's create
    /// was sent (read after the storm).
    #[arg(long, requires = "cloud")]
    created: Option<PathBuf>,
    /// With `--cloud`: where to write `name sha256` of each Ignition config
    /// received (checked against the nodes' own afterwards).
    #[arg(long, requires = "cloud")]
    sums: Option<PathBuf>,
}

/// What every machine does, and what it checks against.
#[derive(Debug)]
pub struct Plan {
    pub first: usize,
    /// Machines that are nodes (the unknown ones come after them).
    pub machines: usize,
    pub server: Ipv4Addr,
    pub arch: u16,
    pub blksize: u16,
    pub windowsize: Option<u16>,
    pub tftp_timeout: Duration,
    pub tftp_retries: u32,
    pub tftp_root: PathBuf,
    pub images_root: PathBuf,
    pub images_prefix: String,
    pub ignition_dir: Option<PathBuf>,
    pub rootfs_share: f64,
    pub reset_at: f64,
    /// A failed boot before the OS starts over after this pause.
    pub reboot_after: Option<Duration>,
}

impl Plan {
    pub fn mac(&self, i: usize) -> [u8; 6] {
        let n = self.first + i;
        [0x02, 0x78, 0, (n >> 16) as u8, (n >> 8) as u8, n as u8]
    }
    /// Unknown machine `j`'s MAC on its NIC `nic` (0: the one it boots from).
    pub fn unknown_mac(&self, j: usize, nic: u8) -> [u8; 6] {
        [0x02, 0x7a, nic, (j >> 16) as u8, (j >> 8) as u8, j as u8]
    }
    pub fn node(&self, i: usize) -> String {
        format!("n{:05}", self.first + i)
    }
    pub fn buildarch(&self) -> &'static str {
        if self.arch == 0 {
            "i386"
        } else {
            "x86_64"
        }
    }
    /// iPXE's `${platform}`.
    pub fn platform(&self) -> &'static str {
        if self.arch == 0 {
            "pcbios"
        } else {
            "efi"
        }
    }
    /// Whether machine `i` fetches the rootfs: spread evenly.
    pub fn takes_rootfs(&self, i: usize) -> bool {
        let s = self.rootfs_share;
        ((i + 1) as f64 * s).floor() > (i as f64 * s).floor()
    }
}

#[cfg(test)]
impl Plan {
    /// A plan for tests that make no storm.
    pub fn for_tests() -> Plan {
        Plan {
            first: 0,
            machines: 1,
            server: Ipv4Addr::LOCALHOST,
            arch: 0,
            blksize: 1468,
            windowsize: None,
            tftp_timeout: Duration::from_secs(1),
            tftp_retries: 1,
            tftp_root: PathBuf::new(),
            images_root: PathBuf::new(),
            images_prefix: "/images/".into(),
            ignition_dir: None,
            rootfs_share: 0.0,
            reset_at: 0.5,
            reboot_after: None,
        }
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let plan = Arc::new(Plan {
        first: cli.first,
        machines: cli.machines,
        server: cli.server[0],
        arch: cli.arch,
        blksize: cli.blksize,
        windowsize: cli.windowsize,
        tftp_timeout: Duration::from_secs(cli.tftp_timeout),
        tftp_retries: cli.tftp_retries,
        tftp_root: cli.tftp_root.clone(),
        images_root: cli.images_root.clone(),
        images_prefix: cli.images_prefix.clone(),
        ignition_dir: cli.ignition_dir.clone(),
        rootfs_share: cli.rootfs_share,
        reset_at: cli.reset_at,
        reboot_after: (cli.reboot_after > 0).then(|| Duration::from_secs(cli.reboot_after)),
    });
    let t0 = tokio::time::Instant::now();
    let deadline = Duration::from_secs(cli.deadline);
    let kill = kill_at(&cli, t0)?;
    if let Some(url) = cli.cloud.clone() {
        let c = cloud::Cloud {
            url,
            local: cli.relay,
            created: cli.created.clone(),
            sums: cli.sums.clone(),
        };
        let (mut outcomes, seen) = cloud::storm(plan, c, (t0, t0 + deadline)).await?;
        outcomes.sort_by_key(|o| o.index);
        return finish(&cli, outcomes, 0, kill, Some(seen)).await;
    }
    let servers = cli.server.iter().map(|s| (*s, 67).into()).collect();
    let relay = dhcp::Relay::start(cli.relay, servers).await?;
    let expect = Arc::new(machine::Expect::default());
    let mut tasks = tokio::task::JoinSet::new();
    // Over the ramp, evenly: the nodes, and the unknown machines beside them.
    let arrival = |i: usize, n: usize| {
        if n > 1 {
            Duration::from_secs_f64(cli.ramp * i as f64 / (n - 1) as f64)
        } else {
            Duration::ZERO
        }
    };
    let late = move |i: usize, discovery| machine::Outcome {
        index: i,
        error: Some(format!(
            "deadline: not booted {} s into the storm",
            deadline.as_secs()
        )),
        phases: Vec::new(),
        retries: 0,
        bytes: 0,
        answers: Vec::new(),
        reboots: Vec::new(),
        discovery,
    };
    for i in 0..cli.machines {
        let (plan, relay, expect) = (Arc::clone(&plan), Arc::clone(&relay), Arc::clone(&expect));
        let at = arrival(i, cli.machines);
        tasks.spawn(async move {
            tokio::time::sleep_until(t0 + at).await;
            machine::boot(i, plan, relay, expect, (t0, t0 + deadline)).await
        });
    }
    for j in 0..cli.unknown {
        let (plan, relay, expect) = (Arc::clone(&plan), Arc::clone(&relay), Arc::clone(&expect));
        let at = arrival(j, cli.unknown);
        let who = discover::Reports::of(&plan, j);
        tasks.spawn(async move {
            tokio::time::sleep_until(t0 + at).await;
            let end = t0 + deadline;
            let report = discover::report(j, plan, relay, expect, (t0, end), who.clone());
            match tokio::time::timeout_at(end, report).await {
                Ok(o) => o,
                Err(_) => late(j, Some(who)),
            }
        });
    }
    let mut outcomes = Vec::with_capacity(cli.machines + cli.unknown);
    while let Some(r) = tasks.join_next().await {
        outcomes.push(r?);
    }
    outcomes.sort_by_key(|o| (o.discovery.is_some(), o.index));
    let stray = relay.stray.load(std::sync::atomic::Ordering::Relaxed);
    finish(&cli, outcomes, stray, kill, None).await
}

/// What `--kill-pid` at `--kill-at` gives the report: (when, PID, the
/// killed server's addresses, whether the signal was sent).
type Kill = tokio::task::JoinHandle<(u64, i32, Vec<Ipv4Addr>, bool)>;

fn kill_at(cli: &Cli, t0: tokio::time::Instant) -> Result<Option<Kill>> {
    Ok(match (cli.kill_pid, cli.kill_server.clone()) {
        (Some(pid), server) if !server.is_empty() => {
            let pid = rustix::process::Pid::from_raw(pid).context("--kill-pid: not a PID")?;
            let at = t0 + Duration::from_secs_f64(cli.kill_at);
            Some(tokio::spawn(async move {
                tokio::time::sleep_until(at).await;
                let when = t0.elapsed().as_micros() as u64;
                let sent = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                (when, pid.as_raw_nonzero().get(), server, sent.is_ok())
            }))
        }
        _ => None,
    })
}

/// The report of `outcomes`, printed and written; exit 1 when a machine failed
/// (or, made through the API, a node has two machines).
async fn finish(
    cli: &Cli,
    outcomes: Vec<machine::Outcome>,
    stray: u64,
    kill: Option<Kill>,
    seen: Option<cloud::Seen>,
) -> Result<()> {
    let mut r = report::Report::of(&outcomes, stray);
    if let Some(k) = kill {
        let (at, pid, server, sent) = k.await?;
        if !sent {
            anyhow::bail!("SIGKILL to PID {pid} failed: no such process?");
        }
        r.killed = Some(report::Killed::of(&outcomes, at, pid, server));
    }
    if let Some(p) = &cli.discovered {
        let unknown: Vec<&discover::Reports> = outcomes
            .iter()
            .filter_map(|o| o.discovery.as_ref())
            .collect();
        r.listed = Some(discover::listed(p, &unknown).await);
    }
    print!("{}", r.text());
    if let Some(s) = &seen {
        print!("{}", s.text(cli.machines));
    }
    if let Some(p) = &cli.json {
        let mut j = r.json();
        if let Some(s) = &seen {
            j["provider"] = s.json();
        }
        std::fs::write(p, serde_json::to_vec_pretty(&j)?)?;
    }
    if r.failed > 0
        || seen.as_ref().is_some_and(|s| s.twice() > 0)
        || r.unknown.as_ref().is_some_and(|u| u.failed > 0)
        || r.listed.as_ref().is_some_and(|l| !l.ok())
    {
        std::process::exit(1);
    }
    Ok(())
}
