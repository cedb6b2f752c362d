//! One simulated machine's boot, as SeaBIOS/EDK2's PXE ROM and then iPXE
//! do it: DHCP (PXE), TFTP of the boot program, DHCP (iPXE), `boot.ipxe`,
//! the node's script, kernel, initramfs, the rootfs for some (with a reset
//! mid-transfer and a `Range` resume), and the node's Ignition. Each
//! step's bytes are checked against the files the server should serve.
//! With [`Plan::reboot_after`], a boot that fails before the OS runs
//! starts over after that pause, from DHCP, as the firmware does (SeaBIOS
//! retries after 60 s when no device boots; bootd's script reboots after
//! 60 s when its downloads fail); the Ignition fetch, the OS's, never
//! gives up. Each answer is recorded with the server that gave it.

use crate::dhcp::{Asker, Lease, Relay};
use crate::{http, tftp, Plan};
use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// A PXE ROM's DHCP backoff (PXE 2.1: 4, 8, 16, 32 s).
pub const PXE_DHCP: [u64; 4] = [4, 8, 16, 32];
/// iPXE's DHCP backoff (1 s doubling to 10 s).
pub const IPXE_DHCP: [u64; 6] = [1, 2, 4, 8, 10, 10];
/// The node script's download attempts and the pause between them (as
/// bootd's rendered script retries).
pub const SCRIPT_ATTEMPTS: u32 = 5;
pub const SCRIPT_PAUSE: Duration = Duration::from_secs(5);
/// Ignition's backoff between attempts: from 100 ms, doubling, at most 5 s
/// (Ignition's operator notes).
pub const IGNITION_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(5));

/// What one machine did.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub index: usize,
    pub error: Option<String>,
    /// (phase, start, duration), microseconds from the storm's start.
    pub phases: Vec<(&'static str, u64, u64)>,
    pub retries: u32,
    pub bytes: u64,
    /// Each answer (DHCP ACK, a whole TFTP file, an HTTP response): when it
    /// came (microseconds from the storm's start) and which server gave it.
    pub answers: Vec<(u64, Ipv4Addr)>,
    /// What failed before each reboot ([`Plan::reboot_after`]).
    pub reboots: Vec<String>,
    /// For a machine in no node (`--unknown`): who it is and what its
    /// discovery reports met.
    pub discovery: Option<crate::reports::Reports>,
}

/// A file's sha256 and size.
pub type Sum = Arc<([u8; 32], u64)>;

/// The sha256 and size of what the server should send, read once per file.
#[derive(Default)]
pub struct Expect {
    files: Mutex<HashMap<PathBuf, Sum>>,
}

impl Expect {
    pub async fn of(&self, path: PathBuf) -> Result<Sum> {
        let mut files = self.files.lock().await;
        if let Some(h) = files.get(&path) {
            return Ok(Arc::clone(h));
        }
        let p = path.clone();
        let h = tokio::task::spawn_blocking(move || -> Result<([u8; 32], u64)> {
            let mut f = std::fs::File::open(&p).with_context(|| format!("{}", p.display()))?;
            let mut h = Sha256::new();
            let n = std::io::copy(&mut f, &mut h)?;
            Ok((h.finalize().into(), n))
        })
        .await??;
        let h = Arc::new(h);
        files.insert(path, Arc::clone(&h));
        Ok(h)
    }
}

/// One machine's boot under way: what it does, and what it did so far.
pub struct Run<'a> {
    pub plan: &'a Plan,
    pub t0: Instant,
    pub out: Outcome,
    /// The OS runs (kernel and initramfs loaded): no reboot from here on.
    in_os: bool,
}

impl<'a> Run<'a> {
    pub fn new(index: usize, plan: &'a Plan, t0: Instant) -> Run<'a> {
        Run {
            plan,
            t0,
            out: Outcome {
                index,
                error: None,
                phases: Vec::new(),
                retries: 0,
                bytes: 0,
                answers: Vec::new(),
                reboots: Vec::new(),
                discovery: None,
            },
            in_os: false,
        }
    }
    /// An answer from `server`, now.
    pub fn answered(&mut self, server: Ipv4Addr) {
        let t = self.since(Instant::now());
        self.out.answers.push((t, server));
    }
    /// An HTTP answer to a request for `url`.
    fn answered_url(&mut self, url: &str) {
        if let Ok((std::net::SocketAddr::V4(a), _)) = http::split(url) {
            self.answered(*a.ip());
        }
    }
    fn since(&self, t: Instant) -> u64 {
        t.duration_since(self.t0).as_micros() as u64
    }
    /// Before a script's download attempt after the first: its pause.
    async fn pause_before(&mut self, attempt: u32) {
        if attempt > 0 {
            self.out.retries += 1;
            tokio::time::sleep(SCRIPT_PAUSE).await;
        }
    }
    pub fn phase(&mut self, name: &'static str, start: Instant) {
        let s = self.since(start);
        let e = self.since(Instant::now());
        self.out.phases.push((name, s, e - s));
    }
}

/// DHCP's transaction id for machine `n` (of all the storm's machines):
/// every machine its own.
pub fn xid(n: usize) -> u32 {
    0x5700_0000u32 ^ (n as u32).wrapping_mul(2654435761)
}

/// A firmware backoff in seconds, as durations.
pub fn secs(s: &[u64]) -> Vec<Duration> {
    s.iter().map(|&x| Duration::from_secs(x)).collect()
}

/// Boots machine `index`, by `deadline` (then it failed, with what it did
/// so far); never panics, every failure is in the outcome.
pub async fn boot(
    index: usize,
    plan: Arc<Plan>,
    relay: Arc<Relay>,
    expect: Arc<Expect>,
    (t0, deadline): (Instant, Instant),
) -> Outcome {
    let mut run = Run::new(index, &plan, t0);
    loop {
        let e = match tokio::time::timeout_at(deadline, steps(&mut run, &relay, &expect)).await {
            Ok(Ok(())) => break,
            Ok(Err(e)) => format!("{e:#}"),
            Err(_) => {
                let s = deadline.duration_since(t0).as_secs();
                format!("deadline: not booted {s} s into the storm")
            }
        };
        match plan.reboot_after {
            Some(pause) if !run.in_os && Instant::now() + pause < deadline => {
                run.out.reboots.push(e);
                tokio::time::sleep(pause).await;
            }
            _ => {
                run.out.error = Some(e);
                break;
            }
        }
    }
    run.out
}

/// The PXE ROM's part and iPXE's DHCP: a lease (PXE), the boot program
/// over TFTP from it (checked against the file), the same lease again
/// (iPXE); iPXE's lease, whose `file` is `boot.ipxe`'s URL.
pub async fn firmware(
    run: &mut Run<'_>,
    relay: &Relay,
    expect: &Expect,
    mac: [u8; 6],
    xid: u32,
) -> Result<Lease> {
    let plan = run.plan;
    let t = Instant::now();
    let pxe = relay
        .dora(mac, xid, Asker::Pxe { arch: plan.arch }, &secs(&PXE_DHCP))
        .await
        .context("dhcp")?;
    run.out.retries += pxe.retries;
    run.answered(pxe.server);
    run.phase("dhcp", t);
    if pxe.file.is_empty() || pxe.file.starts_with("http") {
        bail!("dhcp: no TFTP boot file offered ({:?})", pxe.file);
    }

    let t = Instant::now();
    let server = if pxe.next_server.is_unspecified() {
        plan.server
    } else {
        pxe.next_server
    };
    let got = tftp::get(
        pxe.ip,
        server,
        &pxe.file,
        plan.blksize,
        plan.windowsize,
        plan.tftp_timeout,
        plan.tftp_retries,
    )
    .await
    .context("tftp")?;
    let want = expect.of(plan.tftp_root.join(&pxe.file)).await?;
    if got.sha256 != want.0 {
        bail!(
            "tftp: {} differs from the file ({} bytes)",
            pxe.file,
            got.bytes
        );
    }
    run.out.retries += got.retries;
    run.out.bytes += got.bytes;
    run.answered(server);
    run.phase("tftp", t);

    let t = Instant::now();
    let ipxe = relay
        .dora(
            mac,
            xid ^ 1,
            Asker::Ipxe { arch: plan.arch },
            &secs(&IPXE_DHCP),
        )
        .await
        .context("dhcp (iPXE)")?;
    run.out.retries += ipxe.retries;
    run.answered(ipxe.server);
    if ipxe.ip != pxe.ip {
        bail!("dhcp (iPXE): {} after {}", ipxe.ip, pxe.ip);
    }
    run.phase("dhcp_ipxe", t);
    Ok(ipxe)
}

/// `boot.ipxe` (at `url`), and the URL it chains to with iPXE's settings
/// filled in (`setting`, as [`expand`]).
pub async fn entry(
    run: &mut Run<'_>,
    ip: Ipv4Addr,
    url: &str,
    setting: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<String> {
    let entry = fetch_small(run, ip, url).await.context("boot.ipxe")?;
    let chain = entry
        .lines()
        .find_map(|l| l.split_whitespace().find(|w| w.starts_with("http://")))
        .context("boot.ipxe: no chain URL")?;
    Ok(expand(chain, setting))
}

/// `s` with each of iPXE's `${name}` replaced by `setting(name)`; a
/// setting it does not have is empty, as in iPXE.
pub fn expand(s: &str, setting: &(dyn Fn(&str) -> Option<String> + Sync)) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let Some(e) = rest[i..].find('}') else {
            rest = &rest[i..];
            break;
        };
        out.push_str(&setting(&rest[i + 2..i + e]).unwrap_or_default());
        rest = &rest[i + e + 1..];
    }
    out.push_str(rest);
    out
}

async fn steps(run: &mut Run<'_>, relay: &Relay, expect: &Expect) -> Result<()> {
    let plan = run.plan;
    let i = run.out.index;
    let mac = plan.mac(i);
    // Each boot its own transaction ids, as firmware draws them anew.
    let x = xid(i) ^ ((run.out.reboots.len() as u32) << 2);
    let ipxe = firmware(run, relay, expect, mac, x).await?;

    let t = Instant::now();
    let setting = |k: &str| match k {
        "mac:hexhyp" => Some(hexhyp(mac)),
        "buildarch" => Some(plan.buildarch().to_string()),
        "uuid" => Some(format!("00000000-0000-0000-0000-{}", hex(mac))),
        _ => None,
    };
    let chain = entry(run, ipxe.ip, &ipxe.file, &setting).await?;
    let script = fetch_small(run, ipxe.ip, &chain)
        .await
        .context("node script")?;
    run.phase("script", t);
    let ip = ipxe.ip;

    let kernel_line = script
        .lines()
        .find(|l| l.trim_start().starts_with("kernel "))
        .context("node script: no kernel line")?;
    let words: Vec<&str> = kernel_line.split_whitespace().collect();
    let kernel = *words
        .iter()
        .find(|w| w.starts_with("http://"))
        .context("kernel line: no URL")?;
    let arg = |k: &str| {
        words
            .iter()
            .find_map(|w| w.strip_prefix(k))
            .map(str::to_string)
    };
    let initrds: Vec<String> = script
        .lines()
        .filter(|l| l.trim_start().starts_with("initrd "))
        .filter_map(|l| {
            l.split_whitespace()
                .find(|w| w.starts_with("http://"))
                .map(str::to_string)
        })
        .collect();

    let t = Instant::now();
    image(run, expect, ip, kernel, None)
        .await
        .context("kernel")?;
    run.phase("kernel", t);
    let t = Instant::now();
    for u in &initrds {
        image(run, expect, ip, u, None).await.context("initramfs")?;
    }
    run.phase("initramfs", t);
    if let Some(rootfs) = arg("coreos.live.rootfs_url=") {
        if plan.takes_rootfs(i) {
            let t = Instant::now();
            image(run, expect, ip, &rootfs, Some(plan.reset_at))
                .await
                .context("rootfs")?;
            run.phase("rootfs", t);
        }
    }

    run.in_os = true;
    let t = Instant::now();
    let url = arg("ignition.config.url=").context("kernel line: no ignition.config.url")?;
    let (got, h) = ignition(run, ip, &url).await?;
    if let Some(dir) = &plan.ignition_dir {
        let want = expect.of(dir.join(format!("{}.ign", plan.node(i)))).await?;
        let sum: [u8; 32] = h.finalize().into();
        if sum != want.0 {
            bail!("ignition: not {}'s ({} bytes)", plan.node(i), got.bytes);
        }
    } else {
        serde_json::from_slice::<serde_json::Value>(&got.body).context("ignition: not JSON")?;
    }
    run.out.bytes += got.bytes;
    run.phase("ignition", t);
    Ok(())
}

/// The Ignition config, fetched as the Ignition client does: after a
/// failed connection or an HTTP 5xx it tries again, 100 ms later, the pause
/// doubling to 5 s, without end (the storm's `--deadline` bounds it); any
/// other status ends the fetch.
pub async fn ignition(
    run: &mut Run<'_>,
    ip: std::net::Ipv4Addr,
    url: &str,
) -> Result<(http::Got, Sha256)> {
    let mut pause = IGNITION_BACKOFF.0;
    loop {
        let mut h = Sha256::new();
        let r = http::get(ip, url, 0, None, &mut h).await;
        if r.is_ok() {
            run.answered_url(url);
        }
        match r {
            Ok(g) if g.status == 200 => return Ok((g, h)),
            Ok(g) if g.status < 500 => bail!("ignition: HTTP {}", g.status),
            Ok(_) | Err(_) => {}
        }
        run.out.retries += 1;
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(IGNITION_BACKOFF.1);
    }
}

/// A script, with the rendered script's retries.
pub async fn fetch_small(run: &mut Run<'_>, ip: std::net::Ipv4Addr, url: &str) -> Result<String> {
    let mut last = None;
    for attempt in 0..SCRIPT_ATTEMPTS {
        run.pause_before(attempt).await;
        let mut h = Sha256::new();
        let r = http::get(ip, url, 0, None, &mut h).await;
        if r.is_ok() {
            run.answered_url(url);
        }
        match r {
            Ok(g) if g.status == 200 => {
                run.out.bytes += g.bytes;
                return Ok(String::from_utf8_lossy(&g.body).into_owned());
            }
            Ok(g) => last = Some(anyhow::anyhow!("HTTP {}", g.status)),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("at least one attempt"))
}

/// An image file, checked against the file under the images root; with
/// `reset_at`, the connection is dropped at that share of the file and the
/// rest fetched with `Range`.
async fn image(
    run: &mut Run<'_>,
    expect: &Expect,
    ip: std::net::Ipv4Addr,
    url: &str,
    reset_at: Option<f64>,
) -> Result<()> {
    let (_, path) = http::split(url)?;
    let rel = path
        .split('?')
        .next()
        .unwrap_or_default()
        .strip_prefix(&run.plan.images_prefix)
        .with_context(|| format!("{url}: not under {}", run.plan.images_prefix))?;
    let want = expect.of(run.plan.images_root.join(rel)).await?;
    let mut last = None;
    for attempt in 0..SCRIPT_ATTEMPTS {
        run.pause_before(attempt).await;
        let mut h = Sha256::new();
        let cut = reset_at.map(|r| (want.1 as f64 * r) as u64);
        let r = async {
            let first = http::get(ip, url, 0, cut, &mut h).await?;
            if first.status != 200 {
                bail!("HTTP {}", first.status);
            }
            let mut bytes = first.bytes;
            if cut.is_some() && bytes < want.1 {
                let rest = http::get(ip, url, bytes, None, &mut h).await?;
                if rest.status != 206 {
                    bail!("resume from {bytes}: HTTP {} (206 expected)", rest.status);
                }
                bytes += rest.bytes;
            }
            Ok(bytes)
        }
        .await;
        match r {
            Ok(bytes) => {
                run.answered_url(url);
                let sum: [u8; 32] = h.finalize().into();
                if sum != want.0 || bytes != want.1 {
                    bail!(
                        "{url}: {bytes} bytes, not the file's {} (or other bytes)",
                        want.1
                    );
                }
                run.out.bytes += bytes;
                return Ok(());
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("at least one attempt"))
}

fn hex(mac: [u8; 6]) -> String {
    mac.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn hexhyp(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join("-")
}

#[cfg(test)]
mod tests {
    #[test]
    fn settings_are_filled_in_as_ipxe_does() {
        let setting = |k: &str| (k == "mac:hexhyp").then(|| "02-7a-00-00-00-01".to_string());
        assert_eq!(
            super::expand(
                "http://s/discover?mac=${mac:hexhyp}&nic1=${net1/mac:hexhyp}&x=1",
                &setting
            ),
            "http://s/discover?mac=02-7a-00-00-00-01&nic1=&x=1"
        );
        assert_eq!(super::expand("a ${b", &setting), "a ${b");
    }
}
