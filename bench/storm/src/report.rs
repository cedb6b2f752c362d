//! The storm's numbers: makespan, machines per second, per-phase and
//! DISCOVER-to-Ignition percentiles, retries, failures; for the machines in
//! no node (`--unknown`), their reports' percentiles and refusals; with a
//! server killed (`--kill-pid`), the machines that were mid-flight on it,
//! apart.

use crate::discover::Listed;
use crate::machine::Outcome;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write;

pub const PHASES: [&str; 10] = [
    // A machine made through the API (src/cloud.rs): the node's POST to
    // its instance in the provider's list, and that to Running.
    "create",
    "instance",
    "dhcp",
    "tftp",
    "dhcp_ipxe",
    "script",
    "kernel",
    "initramfs",
    "rootfs",
    "ignition",
];

pub struct Report {
    pub machines: usize,
    pub booted: usize,
    pub failed: usize,
    /// First DISCOVER to last Ignition, seconds.
    pub makespan: f64,
    /// Per phase: (count, p50, p99, max) in seconds.
    pub phases: BTreeMap<&'static str, (usize, f64, f64, f64)>,
    /// DISCOVER to Ignition per booted machine: (p50, p99, max) seconds.
    pub d2i: (f64, f64, f64),
    pub retries: u64,
    pub bytes: u64,
    pub stray: u64,
    /// Failure messages and how many machines had each (first 10 kinds).
    pub errors: Vec<(String, usize)>,
    /// The first failures as they were (machine, message, and when it
    /// failed, seconds from the storm's start), at most 5.
    pub examples: Vec<String>,
    /// The machines in no node, when there were any.
    pub unknown: Option<Unknown>,
    /// What bootd's `discovered.json` said of them (`--discovered`).
    pub listed: Option<Listed>,
    /// Reboots (`--reboot-after`) and the machines that rebooted.
    pub reboots: (u64, usize),
    /// What failed before a reboot, by kind, as `errors`.
    pub reboot_errors: Vec<(String, usize)>,
    /// A server killed during the storm (`--kill-pid`).
    pub killed: Option<Killed>,
}

/// A server killed during the storm, and the machines it left mid-flight:
/// not booted at the kill, their last answer before it from that server.
pub struct Killed {
    /// Microseconds from the storm's start.
    pub at: u64,
    pub pid: i32,
    /// Its addresses (its own, and the boot address if it held it).
    pub server: Vec<std::net::Ipv4Addr>,
    /// Booted before the kill.
    pub done: usize,
    /// Not booted at the kill, their last answer before it from another server.
    pub elsewhere: usize,
    /// Not booted at the kill and no answer yet.
    pub unanswered: usize,
    /// The machines mid-flight on the killed server, as a report of their own.
    pub mid: Box<Report>,
}

impl Killed {
    pub fn of(all: &[Outcome], at: u64, pid: i32, server: Vec<std::net::Ipv4Addr>) -> Killed {
        let (mut done, mut elsewhere, mut unanswered) = (0, 0, 0);
        let mut mid = Vec::new();
        for o in all.iter().filter(|o| o.discovery.is_none()) {
            if o.error.is_none() && span(o).is_some_and(|(_, e)| e <= at) {
                done += 1;
                continue;
            }
            match o.answers.iter().rev().find(|a| a.0 < at) {
                Some((_, s)) if server.contains(s) => mid.push(o.clone()),
                Some(_) => elsewhere += 1,
                None => unanswered += 1,
            }
        }
        Killed {
            at,
            pid,
            server,
            done,
            elsewhere,
            unanswered,
            mid: Box::new(Report::of(&mid, 0)),
        }
    }

    fn text(&self) -> String {
        let mut b = format!(
            "kill: SIGKILL to PID {} (server {}) {:.2} s into the storm; machines booted before it {}, mid-flight on it {} (their last answer before the kill from it), mid-flight on the others {}, not answered yet {}\n",
            self.pid, list(&self.server), self.at as f64 / 1e6, self.done, self.mid.machines, self.elsewhere, self.unanswered
        );
        b.push_str("machines mid-flight on the killed server:\n");
        for l in self.mid.text().lines() {
            let _ = writeln!(b, "  {l}");
        }
        b
    }

    fn json(&self) -> Value {
        json!({
            "at": self.at as f64 / 1e6, "pid": self.pid, "server": list(&self.server),
            "doneBefore": self.done, "elsewhere": self.elsewhere, "unanswered": self.unanswered,
            "mid": self.mid.json(),
        })
    }
}

fn list(a: &[std::net::Ipv4Addr]) -> String {
    a.iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Messages by kind (digits folded to `#`), most frequent first, at most 10.
fn kinds<'a>(messages: impl Iterator<Item = &'a String>) -> Vec<(String, usize)> {
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for e in messages {
        let mut kind = String::new();
        for c in e.chars() {
            if !c.is_ascii_digit() {
                kind.push(c);
            } else if !kind.ends_with('#') {
                kind.push('#');
            }
        }
        *kinds.entry(kind).or_default() += 1;
    }
    let mut v: Vec<(String, usize)> = kinds.into_iter().collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.1));
    v.truncate(10);
    v
}

/// The machines in no node: (p50, p99, max) in seconds of their report
/// (first report to the one taken) and of DISCOVER to the report taken.
pub struct Unknown {
    pub machines: usize,
    pub reported: usize,
    pub failed: usize,
    pub report: (f64, f64, f64),
    pub d2r: (f64, f64, f64),
    pub too_many: u64,
    pub not_its_lease: u64,
    pub other: u64,
    pub retries: u64,
}

/// (p50, p99, max) of `d`.
fn spread(mut d: Vec<f64>) -> (f64, f64, f64) {
    d.sort_by(f64::total_cmp);
    (
        quantile(&d, 0.5),
        quantile(&d, 0.99),
        d.last().copied().unwrap_or(f64::NAN),
    )
}

/// First phase's start and last phase's end, microseconds.
fn span(o: &Outcome) -> Option<(u64, u64)> {
    let s = o.phases.first()?.1;
    let e = o.phases.last().map(|x| x.1 + x.2)?;
    Some((s, e))
}

impl Unknown {
    fn of(all: &[Outcome]) -> Option<Unknown> {
        let u: Vec<&Outcome> = all.iter().filter(|o| o.discovery.is_some()).collect();
        if u.is_empty() {
            return None;
        }
        let ok: Vec<&&Outcome> = u.iter().filter(|o| o.error.is_none()).collect();
        let sum = |f: fn(&crate::discover::Reports) -> u32| {
            u.iter()
                .filter_map(|o| o.discovery.as_ref())
                .map(|r| f(r) as u64)
                .sum()
        };
        Some(Unknown {
            machines: u.len(),
            reported: ok.len(),
            failed: u.len() - ok.len(),
            report: spread(
                ok.iter()
                    .flat_map(|o| o.phases.iter().filter(|p| p.0 == "report"))
                    .map(|p| p.2 as f64 / 1e6)
                    .collect(),
            ),
            d2r: spread(
                ok.iter()
                    .filter_map(|o| span(o))
                    .map(|(s, e)| (e - s) as f64 / 1e6)
                    .collect(),
            ),
            too_many: sum(|r| r.too_many),
            not_its_lease: sum(|r| r.not_its_lease),
            other: sum(|r| r.other),
            retries: u.iter().map(|o| o.retries as u64).sum(),
        })
    }

    fn text(&self) -> String {
        format!(
            "unknown machines {} reported {} failed {}: report p50 {:.3} s p99 {:.3} s max {:.3} s, DISCOVER to report p50 {:.3} s p99 {:.3} s; answered 429 x{} 403 x{} other x{}; retries {}\n",
            self.machines, self.reported, self.failed, self.report.0, self.report.1, self.report.2,
            self.d2r.0, self.d2r.1, self.too_many, self.not_its_lease, self.other, self.retries
        )
    }

    fn json(&self) -> Value {
        json!({
            "machines": self.machines, "reported": self.reported, "failed": self.failed,
            "report": {"p50": self.report.0, "p99": self.report.1, "max": self.report.2},
            "d2r": {"p50": self.d2r.0, "p99": self.d2r.1, "max": self.d2r.2},
            "tooMany": self.too_many, "notItsLease": self.not_its_lease, "other": self.other,
            "retries": self.retries,
        })
    }
}

/// The `q` quantile (0..1) of sorted `v`, nearest rank.
pub fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = (q * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}

impl Report {
    pub fn of(all: &[Outcome], stray: u64) -> Report {
        let unknown = Unknown::of(all);
        let outcomes: Vec<Outcome> = all
            .iter()
            .filter(|o| o.discovery.is_none())
            .cloned()
            .collect();
        let booted: Vec<&Outcome> = outcomes.iter().filter(|o| o.error.is_none()).collect();
        let mut phases = BTreeMap::new();
        for p in PHASES {
            let mut d: Vec<f64> = booted
                .iter()
                .flat_map(|o| {
                    o.phases
                        .iter()
                        .filter(|x| x.0 == p)
                        .map(|x| x.2 as f64 / 1e6)
                })
                .collect();
            d.sort_by(f64::total_cmp);
            if !d.is_empty() {
                phases.insert(
                    p,
                    (
                        d.len(),
                        quantile(&d, 0.5),
                        quantile(&d, 0.99),
                        d[d.len() - 1],
                    ),
                );
            }
        }
        let d2i = spread(
            booted
                .iter()
                .filter_map(|o| span(o))
                .map(|(s, e)| (e - s) as f64 / 1e6)
                .collect(),
        );
        let first = outcomes
            .iter()
            .filter_map(span)
            .map(|x| x.0)
            .min()
            .unwrap_or(0);
        let last = booted
            .iter()
            .filter_map(|o| span(o))
            .map(|x| x.1)
            .max()
            .unwrap_or(0);
        let mut examples = Vec::new();
        for o in all {
            if let Some(e) = &o.error {
                if examples.len() < 5 {
                    let at = o
                        .phases
                        .iter()
                        .map(|(_, s, d)| s + d)
                        .max()
                        .map(|us| format!(" (its last phase ended {:.1} s in)", us as f64 / 1e6))
                        .unwrap_or_default();
                    let who = if o.discovery.is_some() {
                        "unknown machine"
                    } else {
                        "machine"
                    };
                    examples.push(format!("{who} {}: {e}{at}", o.index));
                }
            }
        }
        // The messages without addresses and numbers: one kind each.
        let errors = kinds(all.iter().filter_map(|o| o.error.as_ref()));
        Report {
            machines: outcomes.len(),
            booted: booted.len(),
            failed: outcomes.len() - booted.len(),
            makespan: last.saturating_sub(first) as f64 / 1e6,
            phases,
            d2i,
            retries: outcomes.iter().map(|o| o.retries as u64).sum(),
            bytes: outcomes.iter().map(|o| o.bytes).sum(),
            stray,
            errors,
            examples,
            unknown,
            listed: None,
            reboots: (
                outcomes.iter().map(|o| o.reboots.len() as u64).sum(),
                outcomes.iter().filter(|o| !o.reboots.is_empty()).count(),
            ),
            reboot_errors: kinds(outcomes.iter().flat_map(|o| o.reboots.iter())),
            killed: None,
        }
    }

    pub fn per_second(&self) -> f64 {
        if self.makespan > 0.0 {
            self.booted as f64 / self.makespan
        } else {
            f64::NAN
        }
    }

    pub fn text(&self) -> String {
        let mut b = String::new();
        let _ = writeln!(
            b,
            "machines {} booted {} failed {} makespan {:.2} s ({:.1} machines/s) retries {} bytes {} stray DHCP replies {}",
            self.machines, self.booted, self.failed, self.makespan, self.per_second(), self.retries, self.bytes, self.stray
        );
        let from = if self.phases.contains_key("create") {
            "the API's create"
        } else {
            "DISCOVER"
        };
        let _ = writeln!(
            b,
            "{from} to Ignition: p50 {:.3} s p99 {:.3} s max {:.3} s",
            self.d2i.0, self.d2i.1, self.d2i.2
        );
        for p in PHASES {
            if let Some((n, p50, p99, max)) = self.phases.get(p) {
                let _ = writeln!(
                    b,
                    "  {p:<10} n {n:>6}  p50 {:>9.3} ms  p99 {:>9.3} ms  max {:>9.3} ms",
                    p50 * 1e3,
                    p99 * 1e3,
                    max * 1e3
                );
            }
        }
        if let Some(u) = &self.unknown {
            b.push_str(&u.text());
        }
        if let Some(l) = &self.listed {
            let _ = writeln!(b, "{}", l.text());
        }
        for (e, n) in &self.errors {
            let _ = writeln!(b, "  failed x{n}: {e}");
        }
        for e in &self.examples {
            let _ = writeln!(b, "  e.g. {e}");
        }
        if self.reboots.0 > 0 {
            let _ = writeln!(
                b,
                "reboots {} (machines {}), each after what failed:",
                self.reboots.0, self.reboots.1
            );
            for (e, n) in &self.reboot_errors {
                let _ = writeln!(b, "  rebooted x{n}: {e}");
            }
        }
        if let Some(k) = &self.killed {
            b.push_str(&k.text());
        }
        b
    }

    pub fn json(&self) -> Value {
        let phases: serde_json::Map<String, Value> = self
            .phases
            .iter()
            .map(|(k, (n, p50, p99, max))| {
                (
                    k.to_string(),
                    json!({"n": n, "p50": p50, "p99": p99, "max": max}),
                )
            })
            .collect();
        let mut j = json!({
            "machines": self.machines, "booted": self.booted, "failed": self.failed,
            "makespan": self.makespan, "perSecond": self.per_second(),
            "d2i": {"p50": self.d2i.0, "p99": self.d2i.1, "max": self.d2i.2},
            "phases": phases, "retries": self.retries, "bytes": self.bytes,
            "strayDhcp": self.stray,
            "errors": self.errors.iter().map(|(e, n)| json!({"error": e, "machines": n})).collect::<Vec<_>>(),
            "examples": self.examples,
        });
        if let Some(u) = &self.unknown {
            j["unknown"] = u.json();
        }
        if self.reboots.0 > 0 {
            j["reboots"] = json!({
                "reboots": self.reboots.0, "machines": self.reboots.1,
                "after": self.reboot_errors.iter().map(|(e, n)| json!({"error": e, "machines": n})).collect::<Vec<_>>(),
            });
        }
        if let Some(k) = &self.killed {
            j["killed"] = k.json();
        }
        if let Some(l) = &self.listed {
            j["discovered"] = json!({
                "machines": l.machines, "entries": l.entries, "onceVerified": l.once_verified,
                "twice": l.twice, "missing": l.missing, "unverified": l.unverified,
                "conflicts": l.conflicts, "error": l.error,
            });
        }
        j
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_spans() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v, 1.0), 100.0);
        let o = |i, err: Option<&str>, s: u64, e: u64| Outcome {
            index: i,
            error: err.map(str::to_string),
            phases: vec![("dhcp", s, 10), ("ignition", e - 5, 5)],
            retries: 1,
            bytes: 7,
            answers: Vec::new(),
            reboots: Vec::new(),
            discovery: None,
        };
        let r = Report::of(
            &[
                o(0, None, 0, 2_000_000),
                o(1, None, 1_000_000, 4_000_000),
                o(2, Some("tftp: 10.0.0.1"), 0, 9),
            ],
            3,
        );
        assert_eq!((r.booted, r.failed), (2, 1));
        assert_eq!(r.makespan, 4.0);
        assert_eq!(r.d2i.1, 3.0);
        assert_eq!(r.errors, [("tftp: #.#.#.#".to_string(), 1)]);
        assert_eq!(r.retries, 3);
        assert!(r.unknown.is_none());
    }

    #[test]
    fn a_kill_counts_the_machines_whose_last_answer_was_the_dead_servers() {
        let (a, b) = ([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
        let o = |i, err: Option<&str>, end: u64, answers: Vec<(u64, std::net::Ipv4Addr)>| Outcome {
            index: i,
            error: err.map(str::to_string),
            phases: vec![("dhcp", 0, 10), ("ignition", end - 5, 5)],
            retries: 0,
            bytes: 1,
            answers,
            reboots: if i == 4 {
                vec!["kernel: connect".into()]
            } else {
                Vec::new()
            },
            discovery: None,
        };
        let all = [
            o(0, None, 1_000_000, vec![(500_000, a)]),
            o(1, None, 5_000_000, vec![(500_000, a), (4_000_000, b)]),
            o(2, None, 3_000_000, vec![(500_000, b)]),
            o(3, Some("dhcp: no OFFER"), 9_000_000, Vec::new()),
            o(
                4,
                None,
                70_000_000,
                vec![(100_000, a), (1_900_000, a), (69_000_000, b)],
            ),
        ];
        let k = Killed::of(&all, 2_000_000, 42, vec![a]);
        assert_eq!((k.done, k.elsewhere, k.unanswered), (1, 1, 1));
        assert_eq!((k.mid.machines, k.mid.booted), (2, 2));
        assert_eq!(k.mid.d2i.2, 70.0);
        assert_eq!(k.mid.reboots, (1, 1));
        assert!(k.text().contains("mid-flight on it 2 "));
        // A kill of the holder of a moved boot address: answers from
        // either of its addresses count as the dead server's.
        let k = Killed::of(&all, 2_000_000, 42, vec![a, b]);
        assert_eq!((k.done, k.elsewhere, k.unanswered), (1, 0, 1));
        assert_eq!(k.mid.machines, 3);
    }

    #[test]
    fn machines_in_no_node_are_counted_apart() {
        let node = Outcome {
            index: 0,
            error: None,
            phases: vec![("dhcp", 0, 10), ("ignition", 1_000_000, 5)],
            retries: 0,
            bytes: 7,
            answers: Vec::new(),
            reboots: Vec::new(),
            discovery: None,
        };
        let unknown = |i, err: Option<&str>, too_many| Outcome {
            index: i,
            error: err.map(str::to_string),
            phases: vec![("dhcp", 0, 10), ("report", 500_000, 2_000_000)],
            retries: too_many,
            bytes: 1,
            answers: Vec::new(),
            reboots: Vec::new(),
            discovery: Some(crate::discover::Reports {
                too_many,
                not_its_lease: 1,
                ..Default::default()
            }),
        };
        let r = Report::of(
            &[
                node,
                unknown(0, None, 2),
                unknown(1, Some("report: deadline"), 3),
            ],
            0,
        );
        assert_eq!((r.machines, r.booted, r.failed, r.bytes), (1, 1, 0, 7));
        let u = r.unknown.as_ref().unwrap();
        assert_eq!((u.machines, u.reported, u.failed), (2, 1, 1));
        assert_eq!((u.too_many, u.not_its_lease, u.retries), (5, 2, 5));
        assert_eq!((u.report.1, u.d2r.1), (2.0, 2.5));
        assert!(r.examples[0].starts_with("unknown machine 1: "));
        assert!(r.text().contains("unknown machines 2 reported 1 failed 1"));
    }
}
