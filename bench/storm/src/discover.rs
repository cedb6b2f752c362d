//! Machines whose MAC is in no node (`--unknown`): the firmware's steps of
//! every machine (DHCP, from the pool; TFTP; DHCP as iPXE; `boot.ipxe`),
//! then the discovery script bootd gives a MAC it does not know, followed
//! as iPXE follows it: the report (`/discover?mac=…&uuid=…&nic0=…`) sent
//! from the machine's own lease, and after a refusal (429, 403, any other
//! failure) sent again after `Retry-After`, else after the script's
//! `sleep`, and a DHCP again (the script's `dhcp ||`), until bootd takes it
//! (200, `discovered as <key>`) or the storm's deadline. After the storm,
//! [`listed`] checks bootd's `discovered.json` against the machines.

use crate::dhcp::{Asker, Relay};
use crate::machine::{self, Expect, Outcome, Run, IPXE_DHCP};
use crate::{http, Plan};
use anyhow::{bail, Context, Result};
use serde_json::Value;
use sha2::Sha256;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The most reports one machine sends (the deadline bounds them too).
pub const MAX_REPORTS: u32 = 200;

pub use crate::reports::Reports;

impl Reports {
    /// Unknown machine `j`, with a random UUID; nothing reported yet.
    pub fn of(plan: &Plan, j: usize) -> Reports {
        Reports {
            mac: machine::hexhyp(plan.unknown_mac(j, 0)).replace('-', ":"),
            uuid: uuid(),
            ..Reports::default()
        }
    }
}

/// A random (version 4) UUID, as SMBIOS gives iPXE's `${uuid}`.
pub fn uuid() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// Runs unknown machine `j` (`reports`: [`Reports::of`]) until its
/// report is taken; never panics, every failure is in the outcome.
pub async fn report(
    j: usize,
    plan: Arc<Plan>,
    relay: Arc<Relay>,
    expect: Arc<Expect>,
    (t0, deadline): (Instant, Instant),
    mut reports: Reports,
) -> Outcome {
    let mut run = Run::new(j, &plan, t0);
    if let Err(e) = steps(&mut run, &relay, &expect, deadline, &mut reports).await {
        run.out.error = Some(format!("{e:#}"));
    }
    run.out.discovery = Some(reports);
    run.out
}

async fn steps(
    run: &mut Run<'_>,
    relay: &Relay,
    expect: &Expect,
    deadline: Instant,
    reports: &mut Reports,
) -> Result<()> {
    let plan = run.plan;
    let j = run.out.index;
    let (mac, nic1) = (plan.unknown_mac(j, 0), plan.unknown_mac(j, 1));
    // After the known machines' ids: no two machines share one.
    let xid = machine::xid(plan.machines + j);
    let ipxe = machine::firmware(run, relay, expect, mac, xid).await?;
    let mut ip = ipxe.ip;

    // What iPXE would fill in: a server with two NICs, booting from the first.
    let uuid = reports.uuid.clone();
    let setting = move |k: &str| -> Option<String> {
        Some(match k {
            "mac:hexhyp" | "net0/mac:hexhyp" => machine::hexhyp(mac),
            "net1/mac:hexhyp" => machine::hexhyp(nic1),
            "uuid" => uuid.clone(),
            "serial:uristring" => format!("STORM{j:06}"),
            "manufacturer:uristring" => "Storm".into(),
            "product:uristring" => "Simulated%20server".into(),
            "buildarch" => plan.buildarch().into(),
            "platform" => plan.platform().into(),
            _ => return None,
        })
    };
    let t = Instant::now();
    let chain = machine::entry(run, ip, &ipxe.file, &setting).await?;
    let script = machine::fetch_small(run, ip, &chain)
        .await
        .context("discovery script")?;
    run.phase("script", t);
    let url = script
        .lines()
        .filter(|l| l.trim_start().starts_with("chain "))
        .find_map(|l| l.split_whitespace().find(|w| w.contains("/discover?")))
        .with_context(|| {
            format!(
                "a MAC in no node got no discovery script (discovery off?): {:?}",
                script.lines().nth(1).unwrap_or_default()
            )
        })?;
    let url = machine::expand(url, &setting);
    let retry = script
        .lines()
        .find_map(|l| l.trim().strip_prefix("sleep ")?.trim().parse().ok())
        .map(Duration::from_secs)
        .context("discovery script: no sleep before reporting again")?;

    let t = Instant::now();
    for attempt in 1..=MAX_REPORTS {
        let Some(wait) = send(run, ip, &url, retry, reports).await? else {
            run.phase("report", t);
            return Ok(());
        };
        if Instant::now() + wait >= deadline {
            bail!("report: not taken before the deadline ({attempt} reports)");
        }
        run.out.retries += 1;
        tokio::time::sleep(wait).await;
        // The script's `dhcp ||`: a failure is not the report's.
        let again = relay
            .dora(
                mac,
                xid ^ 1,
                Asker::Ipxe { arch: plan.arch },
                &machine::secs(&IPXE_DHCP),
            )
            .await;
        if let Ok(l) = again {
            run.out.retries += l.retries;
            ip = l.ip;
        }
    }
    bail!("report: not taken after {MAX_REPORTS} reports")
}

/// One report from `ip`: `None` when bootd took it, else how long to wait
/// before the next (`Retry-After`, else `retry`: the script's `sleep`),
/// the refusal counted in `reports`.
async fn send(
    run: &mut Run<'_>,
    ip: Ipv4Addr,
    url: &str,
    retry: Duration,
    reports: &mut Reports,
) -> Result<Option<Duration>> {
    let g = match http::get(ip, url, 0, None, &mut Sha256::default()).await {
        Ok(g) => g,
        Err(_) => {
            reports.other += 1;
            return Ok(Some(retry));
        }
    };
    match g.status {
        200 => {
            let body = String::from_utf8_lossy(&g.body);
            if !body.contains("discovered as") {
                bail!("report: 200 without `discovered as`: {body:?}");
            }
            run.out.bytes += g.bytes;
            return Ok(None);
        }
        429 => reports.too_many += 1,
        403 => reports.not_its_lease += 1,
        _ => reports.other += 1,
    }
    Ok(Some(g.retry_after.map_or(retry, Duration::from_secs)))
}

/// What bootd's `discovered.json` says of the unknown machines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listed {
    /// Machines in the storm, and entries in the file.
    pub machines: usize,
    pub entries: usize,
    /// Machines listed exactly once (by UUID or MAC) with their MAC
    /// verified; listed more than once; not listed.
    pub once_verified: usize,
    pub twice: usize,
    pub missing: usize,
    /// Machines listed once whose MAC is not verified.
    pub unverified: usize,
    /// Entries with `conflicts`.
    pub conflicts: usize,
    /// Why the file could not be read.
    pub error: Option<String>,
}

impl Listed {
    pub fn ok(&self) -> bool {
        self.error.is_none() && self.once_verified == self.machines && self.conflicts == 0
    }

    fn of(text: &str, machines: &[&Reports]) -> Listed {
        let list: Vec<Value> = match serde_json::from_str(text) {
            Ok(l) => l,
            Err(e) => {
                return Listed {
                    machines: machines.len(),
                    error: Some(format!("not a list of machines: {e}")),
                    ..Listed::default()
                }
            }
        };
        let strs = |v: &Value, k: &str| -> Vec<String> {
            v[k].as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut l = Listed {
            machines: machines.len(),
            entries: list.len(),
            conflicts: list
                .iter()
                .filter(|m| m["conflicts"].as_array().is_some_and(|c| !c.is_empty()))
                .count(),
            ..Listed::default()
        };
        for r in machines {
            let entries: Vec<&Value> = list
                .iter()
                .filter(|m| m["key"] == r.uuid.as_str() || strs(m, "macs").contains(&r.mac))
                .collect();
            match entries[..] {
                [] => l.missing += 1,
                [m] if strs(m, "verified").contains(&r.mac) => l.once_verified += 1,
                [_] => l.unverified += 1,
                _ => l.twice += 1,
            }
        }
        l
    }

    pub fn text(&self) -> String {
        match &self.error {
            Some(e) => format!("discovered.json: {e}"),
            None => format!(
                "discovered.json: {} of {} unknown machines listed once with their MAC verified ({} entries; {} not listed, {} listed twice or more, {} unverified, {} with conflicts)",
                self.once_verified, self.machines, self.entries, self.missing, self.twice, self.unverified, self.conflicts
            ),
        }
    }
}

/// `discovered.json` at `path` against the unknown machines; bootd writes
/// it on a thread of its own, at most every 100 ms, so it is read again
/// (for at most 10 s) until every machine is in it.
pub async fn listed(path: &Path, machines: &[&Reports]) -> Listed {
    let mut last = Listed::default();
    for _ in 0..100 {
        last = match std::fs::read_to_string(path) {
            Ok(t) => Listed::of(&t, machines),
            Err(e) => Listed {
                machines: machines.len(),
                error: Some(format!("{}: {e}", path.display())),
                ..Listed::default()
            },
        };
        if last.ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers each connection on 127.0.0.1 with the next of `answers`.
    async fn server(answers: Vec<&'static str>) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "http://{}/discover?mac=02-7a-00-00-00-00",
            l.local_addr().unwrap()
        );
        tokio::spawn(async move {
            for a in answers {
                let (mut c, _) = l.accept().await.unwrap();
                let _ = c.read(&mut [0u8; 2048]).await;
                let _ = c.write_all(a.as_bytes()).await;
            }
        });
        url
    }

    #[tokio::test]
    async fn refusals_are_counted_and_waited_out() {
        let url = server(vec![
            "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 2\r\nContent-Length: 0\r\n\r\n",
            "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            "HTTP/1.1 200 OK\r\nContent-Length: 30\r\n\r\n#!ipxe\necho discovered as u-a\n",
        ])
        .await;
        let plan = crate::Plan::for_tests();
        let mut run = Run::new(0, &plan, Instant::now());
        let mut r = Reports::default();
        let ip = Ipv4Addr::LOCALHOST;
        let retry = Duration::from_secs(5);
        let wait = send(&mut run, ip, &url, retry, &mut r).await.unwrap();
        assert_eq!(
            (wait, r.too_many),
            (Some(Duration::from_secs(2)), 1),
            "Retry-After"
        );
        let wait = send(&mut run, ip, &url, retry, &mut r).await.unwrap();
        assert_eq!(
            (wait, r.not_its_lease),
            (Some(retry), 1),
            "the script's sleep"
        );
        assert!(
            send(&mut run, ip, &url, retry, &mut r).await.is_err(),
            "200, but no report taken"
        );
        assert_eq!(send(&mut run, ip, &url, retry, &mut r).await.unwrap(), None);
        assert_eq!(r.other, 0);
    }

    #[test]
    fn uuids_are_version_4() {
        let u = uuid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert_ne!(u, uuid());
    }

    #[test]
    fn the_list_is_checked_per_machine() {
        let r = |mac: &str, uuid: &str| Reports {
            mac: mac.into(),
            uuid: uuid.into(),
            ..Reports::default()
        };
        let (a, b, c) = (
            r("02:7a:00:00:00:00", "u-a"),
            r("02:7a:00:00:00:01", "u-b"),
            r("02:7a:00:00:00:02", "u-c"),
        );
        let file = r#"[
            {"key": "u-a", "macs": ["02:7a:00:00:00:00", "02:7a:80:00:00:00"], "verified": ["02:7a:00:00:00:00"]},
            {"key": "u-b", "macs": ["02:7a:00:00:00:01"], "verified": []},
            {"key": "x", "macs": ["02:66:00:00:00:00"], "verified": [], "conflicts": [{"macs": []}]}
        ]"#;
        let l = Listed::of(file, &[&a, &b, &c]);
        assert_eq!(
            (
                l.once_verified,
                l.unverified,
                l.missing,
                l.conflicts,
                l.entries
            ),
            (1, 1, 1, 1, 3)
        );
        assert!(!l.ok());
        let l = Listed::of(file, &[&a]);
        assert!(!l.ok(), "another entry's conflict counts");
        assert!(Listed::of("{", &[&a]).error.is_some());
    }
}
