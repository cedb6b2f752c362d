//! Machines made through the controller's API (`--cloud`): each node is
//! created by an API call (bench/storm/create-nodes.py, run beside the
//! storm), the controller makes its instance at the provider (the ECS
//! fake), and the instance does what an image-booted cloud machine does:
//! once it runs, Ignition reads its user data (the pointer config the
//! controller gave the provider) and fetches the config it names, from the
//! instance's own address, as the Ignition client does (retries without
//! end, bounded by `--deadline`).
//!
//! The provider's list (the fake's `GET /_fake/instances`) is read every
//! second: a node's instance first seen there ends its `create` phase
//! (from its POST, when `--created` says when that was), seen `Running`
//! its `instance` phase. Instances of one node beyond the first are
//! counted: a second machine for a node is what the controller's fencing
//! must never let happen, whoever leads.

use crate::http;
use crate::machine::{self, Outcome, Run};
use crate::Plan;
use anyhow::{bail, Context, Result};
use base64::Engine as _;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// The provider's list, read this often.
const POLL: Duration = Duration::from_secs(1);
/// The provider's list may be large: 1 000 instances with their user data.
const LIST_KEEP: u64 = 64 << 20;

pub struct Cloud {
    /// The provider's list of instances (the ECS fake's `/_fake/instances`).
    pub url: String,
    /// Where the list is read from (an address of this namespace).
    pub local: Ipv4Addr,
    /// `name epoch-seconds` lines: when each node's create was POSTed.
    pub created: Option<PathBuf>,
    /// `name sha256` of each Ignition config received, written here.
    pub sums: Option<PathBuf>,
}

/// What the provider's list showed over the storm.
#[derive(Default)]
pub struct Seen {
    /// Instances per node name, at the last read.
    pub instances: HashMap<String, usize>,
    /// Instances in the list at the last read.
    pub total: usize,
    /// Reads of the list that failed.
    pub failed_reads: u64,
}

impl Seen {
    /// The provider's list `all`, read now: its instances per node name.
    fn count(&mut self, all: &[Value]) {
        self.instances.clear();
        self.total = all.len();
        for inst in all {
            let name = inst["InstanceName"].as_str().unwrap_or("");
            *self.instances.entry(name.to_string()).or_default() += 1;
        }
    }
    /// Nodes with more than one instance.
    pub fn twice(&self) -> usize {
        self.instances.values().filter(|&&n| n > 1).count()
    }
    pub fn text(&self, want: usize) -> String {
        format!(
            "provider: instances {} for {} nodes (want {want}), nodes with two or more {}; list reads failed {}\n",
            self.total,
            self.instances.len(),
            self.twice(),
            self.failed_reads
        )
    }
    pub fn json(&self) -> Value {
        json!({"instances": self.total, "nodes": self.instances.len(), "twice": self.twice(), "failedReads": self.failed_reads})
    }
}

/// Runs the cloud machines of `plan` (nodes `plan.node(0..machines)`) until
/// each has its Ignition or `deadline`.
pub async fn storm(
    plan: Arc<Plan>,
    cloud: Cloud,
    (t0, deadline): (Instant, Instant),
) -> Result<(Vec<Outcome>, Seen)> {
    let epoch0 = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs_f64();
    let names: HashMap<String, usize> = (0..plan.machines).map(|i| (plan.node(i), i)).collect();
    let sums = Arc::new(Mutex::new(Vec::new()));
    let mut first: HashMap<usize, u64> = HashMap::new();
    let mut started: HashSet<usize> = HashSet::new();
    let mut tasks = tokio::task::JoinSet::new();
    let mut seen = Seen::default();
    while started.len() < plan.machines && Instant::now() < deadline {
        let tick = Instant::now();
        match list(&cloud).await {
            Ok(all) => {
                seen.count(&all);
                let now = tick.duration_since(t0).as_micros() as u64;
                for inst in &all {
                    let name = inst["InstanceName"].as_str().unwrap_or("");
                    let Some(&i) = names.get(name) else { continue };
                    let at = *first.entry(i).or_insert(now);
                    if inst["Status"] != "Running" || !started.insert(i) {
                        continue;
                    }
                    let m = Machine {
                        index: i,
                        ip: inst["PrivateIpAddress"]
                            .as_str()
                            .and_then(|s| s.parse().ok())
                            .unwrap_or(Ipv4Addr::UNSPECIFIED),
                        userdata: inst["UserData"].as_str().unwrap_or("").to_string(),
                        seen: at,
                        running: now,
                    };
                    let (plan, sums) = (Arc::clone(&plan), Arc::clone(&sums));
                    tasks.spawn(async move {
                        let mut run = Run::new(m.index, &plan, t0);
                        run.out
                            .phases
                            .push(("instance", m.seen, m.running.saturating_sub(m.seen)));
                        tokio::select! {
                            r = boot(&mut run, &m) => match r {
                                Ok(sum) => sums.lock().unwrap().push((plan.node(m.index), sum)),
                                Err(e) => run.out.error = Some(format!("{e:#}")),
                            },
                            _ = tokio::time::sleep_until(deadline) => {
                                let s = deadline.duration_since(t0).as_secs();
                                run.out.error = Some(format!("deadline: not booted {s} s into the storm"));
                            }
                        }
                        run.out
                    });
                }
            }
            Err(_) => seen.failed_reads += 1,
        }
        tokio::time::sleep_until(tick + POLL).await;
    }
    let mut outcomes = Vec::with_capacity(plan.machines);
    while let Some(r) = tasks.join_next().await {
        outcomes.push(r?);
    }
    // The list once more: a second instance made after the last node's first.
    if let Ok(all) = list(&cloud).await {
        seen.count(&all);
    }
    for i in (0..plan.machines).filter(|i| !started.contains(i)) {
        let mut run = Run::new(i, &plan, t0);
        run.out.error = Some(match first.get(&i) {
            Some(_) => "its instance never ran".into(),
            None => "no instance made for it".into(),
        });
        outcomes.push(run.out);
    }
    if let Some(p) = &cloud.created {
        let posted = read_created(p, epoch0)?;
        for o in &mut outcomes {
            let (Some(&at), Some(&seen)) = (posted.get(&plan.node(o.index)), first.get(&o.index))
            else {
                continue;
            };
            o.phases.insert(0, ("create", at, seen.saturating_sub(at)));
        }
    }
    if let Some(p) = &cloud.sums {
        let mut text = String::new();
        for (name, sum) in sums.lock().unwrap().iter() {
            text.push_str(&format!("{name} {sum}\n"));
        }
        std::fs::write(p, text).with_context(|| format!("{}", p.display()))?;
    }
    Ok((outcomes, seen))
}

struct Machine {
    index: usize,
    ip: Ipv4Addr,
    userdata: String,
    seen: u64,
    running: u64,
}

/// The instance's boot once it runs: its user data read, the config it
/// points at fetched from its own address, checked to be JSON. The config's
/// sha256 (hex) is returned, to check against the node's own afterwards.
async fn boot(run: &mut Run<'_>, m: &Machine) -> Result<String> {
    let source = pointer_source(&m.userdata)?;
    let t = Instant::now();
    let (got, h) = machine::ignition(run, m.ip, &source).await?;
    serde_json::from_slice::<Value>(&got.body).context("ignition: not JSON")?;
    run.out.bytes += got.bytes;
    run.phase("ignition", t);
    Ok(format!("{:x}", h.finalize()))
}

/// The URL a pointer config (base64, as the provider holds user data)
/// names: `ignition.config.merge[0].source` or `…replace.source`.
pub fn pointer_source(userdata: &str) -> Result<String> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(userdata.trim())
        .context("user data: not base64")?;
    let v: Value = serde_json::from_slice(&raw).context("user data: not JSON")?;
    let c = &v["ignition"]["config"];
    let s = c["merge"][0]["source"]
        .as_str()
        .or_else(|| c["replace"]["source"].as_str());
    match s {
        Some(s) => Ok(s.to_string()),
        None => bail!("user data: a pointer config names no source"),
    }
}

async fn list(cloud: &Cloud) -> Result<Vec<Value>> {
    let mut h = Sha256::new();
    let got = http::get_keeping(cloud.local, &cloud.url, 0, None, &mut h, LIST_KEEP).await?;
    if got.status != 200 {
        bail!("the provider's list: HTTP {}", got.status);
    }
    Ok(serde_json::from_slice(&got.body)?)
}

/// `name epoch-seconds` lines → microseconds from the storm's start.
fn read_created(p: &std::path::Path, epoch0: f64) -> Result<HashMap<String, u64>> {
    let text = std::fs::read_to_string(p).with_context(|| format!("{}", p.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let (name, t) = l.split_once(' ')?;
            let t: f64 = t.trim().parse().ok()?;
            Some((name.to_string(), ((t - epoch0).max(0.0) * 1e6) as u64))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pointer_configs_source() {
        let p = json!({"ignition": {"version": "3.2.0", "config": {"merge": [{"source": "http://10.78.0.100:8080/ignition/n00001?token=t"}]}}});
        let b = base64::engine::general_purpose::STANDARD.encode(p.to_string());
        assert_eq!(
            pointer_source(&b).unwrap(),
            "http://10.78.0.100:8080/ignition/n00001?token=t"
        );
        let r = json!({"ignition": {"config": {"replace": {"source": "http://x/"}}}});
        let b = base64::engine::general_purpose::STANDARD.encode(r.to_string());
        assert_eq!(pointer_source(&b).unwrap(), "http://x/");
        let none = base64::engine::general_purpose::STANDARD.encode("{}");
        assert!(pointer_source(&none).is_err());
        assert!(pointer_source("%%%").is_err());
    }

    #[test]
    fn posts_are_placed_on_the_storms_clock() {
        let d = std::env::temp_dir().join(format!("storm-created-{}", std::process::id()));
        std::fs::write(&d, "n00000 1000.5\nn00001 999.0\nbad\n").unwrap();
        let m = read_created(&d, 1000.0).unwrap();
        std::fs::remove_file(&d).unwrap();
        assert_eq!(m["n00000"], 500_000);
        assert_eq!(
            m["n00001"], 0,
            "a POST before the storm's start is at its start"
        );
        assert_eq!(m.len(), 2);
    }
}
