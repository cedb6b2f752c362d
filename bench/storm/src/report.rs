//! The storm's numbers: makespan, machines per second, per-phase and
//! DISCOVER-to-Ignition percentiles, retries, failures.

use crate::machine::Outcome;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write;

pub const PHASES: [&str; 8] = [
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
    pub fn of(outcomes: &[Outcome], stray: u64) -> Report {
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
        let span = |o: &Outcome| -> Option<(u64, u64)> {
            let s = o.phases.first()?.1;
            let e = o.phases.last().map(|x| x.1 + x.2)?;
            Some((s, e))
        };
        let mut d2i: Vec<f64> = booted
            .iter()
            .filter_map(|o| span(o))
            .map(|(s, e)| (e - s) as f64 / 1e6)
            .collect();
        d2i.sort_by(f64::total_cmp);
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
        let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
        let mut examples = Vec::new();
        for o in outcomes {
            if let Some(e) = &o.error {
                if examples.len() < 5 {
                    let at = o
                        .phases
                        .iter()
                        .map(|(_, s, d)| s + d)
                        .max()
                        .map(|us| format!(" (its last phase ended {:.1} s in)", us as f64 / 1e6))
                        .unwrap_or_default();
                    examples.push(format!("machine {}: {e}{at}", o.index));
                }
                // The message without addresses and numbers: one kind.
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
        }
        let mut errors: Vec<(String, usize)> = kinds.into_iter().collect();
        errors.sort_by_key(|e| std::cmp::Reverse(e.1));
        errors.truncate(10);
        Report {
            machines: outcomes.len(),
            booted: booted.len(),
            failed: outcomes.len() - booted.len(),
            makespan: last.saturating_sub(first) as f64 / 1e6,
            phases,
            d2i: (
                quantile(&d2i, 0.5),
                quantile(&d2i, 0.99),
                d2i.last().copied().unwrap_or(f64::NAN),
            ),
            retries: outcomes.iter().map(|o| o.retries as u64).sum(),
            bytes: outcomes.iter().map(|o| o.bytes).sum(),
            stray,
            errors,
            examples,
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
        let _ = writeln!(
            b,
            "DISCOVER to Ignition: p50 {:.3} s p99 {:.3} s max {:.3} s",
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
        for (e, n) in &self.errors {
            let _ = writeln!(b, "  failed x{n}: {e}");
        }
        for e in &self.examples {
            let _ = writeln!(b, "  e.g. {e}");
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
        json!({
            "machines": self.machines, "booted": self.booted, "failed": self.failed,
            "makespan": self.makespan, "perSecond": self.per_second(),
            "d2i": {"p50": self.d2i.0, "p99": self.d2i.1, "max": self.d2i.2},
            "phases": phases, "retries": self.retries, "bytes": self.bytes,
            "strayDhcp": self.stray,
            "errors": self.errors.iter().map(|(e, n)| json!({"error": e, "machines": n})).collect::<Vec<_>>(),
            "examples": self.examples,
        })
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
    }
}
