//! `bootd nodes wait [NAMES] [--for ready|joined]`: polls the API until
//! every node wanted has the condition, one fails, or the time is up.

use super::*;

/// What `nodes wait` waits for: the node condition of that name True.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitFor {
    Ready,
    Joined,
}

impl WaitFor {
    /// The condition (`GET /v1/nodes`, `conditions[].type`).
    pub fn condition(self) -> &'static str {
        match self {
            WaitFor::Ready => crate::conditions::READY,
            WaitFor::Joined => crate::conditions::JOINED,
        }
    }
}

/// Whether node `n` (as `GET /v1/nodes` lists it) has condition `kind` True.
fn has(n: &Value, kind: &str) -> bool {
    n["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

/// Polls until every wanted node has `until`'s condition True (0), one is
/// Failed (1) or the timeout passes (2), printing a line whenever a node's
/// phase changes (waiting for Joined: or its Joined condition's message).
pub async fn wait(
    client: &Client,
    names: &[String],
    until: WaitFor,
    timeout: Duration,
    interval: f64,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let start = Instant::now();
    let mut last: std::collections::BTreeMap<String, String> = Default::default();
    let interval = Duration::from_secs_f64(interval.clamp(0.05, 60.0));
    loop {
        let (st, v) = client.call(Method::GET, "/v1/nodes", None).await?;
        ok_or_bail(st, &v)?;
        let nodes: Vec<&Value> = v["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|n| names.is_empty() || names.iter().any(|w| w == s(n, "name")))
            .collect();
        for w in names {
            if !nodes.iter().any(|n| s(n, "name") == w) {
                writeln!(out, "FAILED {w}: no such node")?;
                return Ok(1);
            }
        }
        let elapsed = start.elapsed().as_secs();
        let want = until.condition();
        let done = |n: &Value| match until {
            WaitFor::Ready => s(n, "phase") == "Ready",
            WaitFor::Joined => has(n, want),
        };
        // Waiting for Joined, a Ready node's line says what Joined waits for.
        let message = |n: &Value| -> String {
            match until {
                WaitFor::Joined if s(n, "phase") == "Ready" => n["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| c["type"] == want)
                    .map(|c| format!("{want}: {}", s(c, "message")))
                    .unwrap_or_default(),
                _ => s(n, "message").to_string(),
            }
        };
        for n in &nodes {
            let line = format!("{} {}", s(n, "phase"), message(n));
            if last.get(s(n, "name")) != Some(&line) {
                writeln!(
                    out,
                    "[{:>4}s] {:<16} {:<7} {:<13} {}",
                    elapsed,
                    s(n, "name"),
                    s(n, "bootKind"),
                    if done(n) && until == WaitFor::Joined {
                        want
                    } else {
                        s(n, "phase")
                    },
                    message(n)
                )?;
                last.insert(s(n, "name").to_string(), line);
            }
        }
        out.flush()?;
        if let Some(f) = nodes.iter().find(|n| s(n, "phase") == "Failed") {
            writeln!(out, "FAILED {}: {}", s(f, "name"), s(f, "message"))?;
            return Ok(1);
        }
        // With no names, the roles the cluster counts must be whole too.
        let mut short = Vec::new();
        if names.is_empty() {
            let (st, c) = client.call(Method::GET, "/v1/cluster", None).await?;
            ok_or_bail(st, &c)?;
            for (role, r) in c["roles"].as_object().into_iter().flatten() {
                let want = r["replicas"].as_u64().unwrap_or(0);
                let have = r["present"].as_u64().unwrap_or(0);
                if have < want {
                    short.push(format!("{} more {role} node(s)", want - have));
                }
            }
            let line = short.join(", ");
            if last.get("") != Some(&line) && !line.is_empty() {
                writeln!(out, "[{:>4}s] waiting for {line} (replicas)", elapsed)?;
            }
            last.insert(String::new(), line);
        }
        if short.is_empty() && !nodes.is_empty() && nodes.iter().all(|n| done(n)) {
            writeln!(out, "all {} node(s) {want} after {}s", nodes.len(), elapsed)?;
            return Ok(0);
        }
        if start.elapsed() >= timeout {
            let mut waiting: Vec<String> = nodes
                .iter()
                .filter(|n| !done(n))
                .map(|n| format!("{} ({})", s(n, "name"), s(n, "phase")))
                .collect();
            waiting.extend(short);
            writeln!(
                out,
                "TIMEOUT after {}s waiting for {}",
                elapsed,
                waiting.join(", ")
            )?;
            return Ok(2);
        }
        tokio::time::sleep(interval).await;
    }
}
