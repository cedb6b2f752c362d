//! `quick`: a bounded fuzz run on stable Rust, for the test command.
//!
//! For each target (every one, or those named): runs every file of the
//! committed seed corpus `fuzz/corpus/<target>/`, then random mutations of
//! those seeds (bit flips, byte insert/delete/overwrite with interesting
//! values, tokens of the text formats, splices of two seeds, truncation;
//! `bootd_fuzz::mutate`) for `--seconds` per target. An input already run is
//! not run again (of the first 2^21 distinct inputs: past that, repeats are
//! no longer detected, and the summary says so).
//!
//! This is random mutation, NOT coverage-guided fuzzing: nothing tells it
//! which inputs reached new code, so it finds what lies a few mutations
//! from the seeds and little beyond. Deep runs are libFuzzer's:
//! `cargo +nightly fuzz run <target> fuzz/corpus/<target>` (README.md,
//! "Fuzzing"). It does not link libFuzzer.
//!
//! A panic (the product's, or a target's assertion) is caught; the input is
//! written to `fuzz/artifacts/<target>/crash-<FNV-1a hash>`, the target,
//! the panic message and the file are printed, and once that target's time
//! is up `quick` exits 1 (with `--keep-going`: after every target). An
//! input that runs longer than `--timeout` of CPU time (or ten times that
//! of wall time) is written as `timeout-<hash>` and ends the run at once
//! (exit 1). A run is reproducible from its
//! printed `--rng-seed`, up to the time limit.
//!
//! Usage: quick [--seconds N] [--rng-seed N] [--max-len BYTES]
//!              [--timeout SECONDS] [--keep-going] [--list] [TARGET...]
//!        quick --seed-corpus   (regenerates the generated seed files)

use bootd_fuzz::mutate::{fnv1a, Mutator, Rng};
use bootd_fuzz::{Target, TARGETS};
use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Distinct inputs remembered per target (16 MiB or so of hashes); past
/// this, a repeat of an input not remembered runs again (and is counted).
const SEEN_CAP: usize = 1 << 21;

struct Args {
    seconds: u64,
    rng_seed: u64,
    max_len: usize,
    timeout: u64,
    keep_going: bool,
    targets: Vec<(&'static str, Target)>,
}

fn usage() -> &'static str {
    "usage: quick [--seconds N] [--rng-seed N] [--max-len BYTES] [--timeout SECONDS] \
     [--keep-going] [--list] [TARGET...]\n       quick --seed-corpus"
}

fn parse_args() -> Result<Option<Args>, String> {
    let mut a = Args {
        seconds: 10,
        rng_seed: SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
        max_len: 64 * 1024,
        timeout: 20,
        keep_going: false,
        targets: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut num = |name: &str| -> Result<u64, String> {
            let v = it.next().ok_or(format!("{name} needs a value"))?;
            v.parse().map_err(|_| format!("{name} {v:?}: not a number"))
        };
        match arg.as_str() {
            "--seconds" => a.seconds = num("--seconds")?,
            "--rng-seed" => a.rng_seed = num("--rng-seed")?,
            "--max-len" => a.max_len = num("--max-len")? as usize,
            "--timeout" => a.timeout = num("--timeout")?.max(1),
            "--keep-going" => a.keep_going = true,
            "--list" => {
                for (name, _) in TARGETS {
                    println!("{name}");
                }
                return Ok(None);
            }
            "--seed-corpus" => {
                write_seed_corpus().map_err(|e| format!("--seed-corpus: {e}"))?;
                return Ok(None);
            }
            "-h" | "--help" => {
                println!("{}", usage());
                return Ok(None);
            }
            name if !name.starts_with('-') => match TARGETS.iter().find(|(n, _)| *n == name) {
                Some(t) => a.targets.push(*t),
                None => return Err(format!("no target {name:?} (--list)")),
            },
            other => return Err(format!("unknown option {other:?}\n{}", usage())),
        }
    }
    if a.targets.is_empty() {
        a.targets = TARGETS.to_vec();
    }
    Ok(Some(a))
}

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Writes the generated seeds (`bootd_fuzz::seeds`) into the corpora;
/// other files there (regressions, libFuzzer's finds) are left alone.
fn write_seed_corpus() -> std::io::Result<()> {
    let mut per: BTreeMap<&str, usize> = BTreeMap::new();
    for (target, name, bytes) in bootd_fuzz::seeds::all() {
        let dir = fuzz_dir().join("corpus").join(target);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(&name), bytes)?;
        *per.entry(target).or_default() += 1;
    }
    for (t, n) in per {
        println!("{t}: {n} seeds written to fuzz/corpus/{t}/");
    }
    Ok(())
}

/// The corpus files of a target, sorted by name.
fn corpus(target: &str) -> std::io::Result<Vec<(PathBuf, Vec<u8>)>> {
    let dir = fuzz_dir().join("corpus").join(target);
    let mut files = Vec::new();
    for e in std::fs::read_dir(&dir)? {
        let p = e?.path();
        if p.is_file() {
            let b = std::fs::read(&p)?;
            files.push((p, b));
        }
    }
    files.sort();
    Ok(files)
}

/// A caught panic: where (file:line:column) and what it said.
struct Panic {
    at: String,
    msg: String,
}

/// The last panic, as the hook saw it.
static LAST_PANIC: Mutex<Option<Panic>> = Mutex::new(None);

fn quiet_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let msg = match info.payload().downcast_ref::<&str>() {
            Some(s) => s.to_string(),
            None => match info.payload().downcast_ref::<String>() {
                Some(s) => s.clone(),
                None => "(a panic without a message)".into(),
            },
        };
        let at = info
            .location()
            .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()))
            .unwrap_or_default();
        *LAST_PANIC.lock().unwrap_or_else(|p| p.into_inner()) = Some(Panic { at, msg });
    }));
}

/// What the watchdog needs to see of the input being run.
struct Running {
    target: Mutex<&'static str>,
    input: Mutex<Vec<u8>>,
    /// Bumped once an input has finished.
    done: AtomicU64,
    active: AtomicBool,
}

fn artifact(target: &str, kind: &str, input: &[u8]) -> std::io::Result<PathBuf> {
    let dir = fuzz_dir().join("artifacts").join(target);
    std::fs::create_dir_all(&dir)?;
    let p = dir.join(format!("{kind}-{:016x}", fnv1a(input)));
    std::fs::write(&p, input)?;
    Ok(p)
}

/// Ends the process when one input runs longer than `limit` of CPU time
/// (the fuzzing thread's: a loop that never ends burns it, while a machine
/// busy with other work only slows the wall clock; the test command runs
/// `quick` at nice 19 beside other checks), or ten times `limit` of wall
/// time (an input that blocks).
fn watchdog(running: Arc<Running>, limit: Duration) {
    std::thread::spawn(move || {
        let mut last = (u64::MAX, Instant::now(), main_thread_cpu());
        loop {
            std::thread::sleep(Duration::from_millis(250));
            let done = running.done.load(Ordering::Relaxed);
            if !running.active.load(Ordering::Relaxed) || done != last.0 {
                last = (done, Instant::now(), main_thread_cpu());
                continue;
            }
            let cpu = main_thread_cpu().saturating_sub(last.2);
            let wall = last.1.elapsed();
            if cpu >= limit || wall >= limit * 10 {
                let target = *running.target.lock().unwrap_or_else(|p| p.into_inner());
                let input = running
                    .input
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                let path = artifact(target, "timeout", &input)
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|e| format!("(not written: {e})"));
                println!(
                    "{target}: TIMEOUT: one input ran {cpu:?} of CPU time, {wall:?} of wall \
                     time (limits {limit:?}, {:?}); input: {path}",
                    limit * 10
                );
                let _ = std::io::stdout().flush();
                std::process::exit(1);
            }
        }
    });
}

/// CPU time of the process's main thread (the one that runs the inputs):
/// the first field of /proc/self/schedstat, in nanoseconds. Without it
/// (no procfs), zero: then only the wall-time limit applies.
fn main_thread_cpu() -> Duration {
    std::fs::read_to_string("/proc/self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .map(Duration::from_nanos)
        .unwrap_or_default()
}

#[derive(Default)]
struct Stats {
    runs: u64,
    repeats: u64,
    crashes: u64,
    /// The longest one input ran (wall time).
    slowest: Duration,
    /// Panic location → the first input's artifact.
    distinct: BTreeMap<String, String>,
}

/// Runs one input, catching a panic; `Some` if it panicked.
fn run_one(f: Target, input: &[u8], running: &Running, st: &mut Stats) -> Option<Panic> {
    {
        let mut held = running.input.lock().unwrap_or_else(|p| p.into_inner());
        held.clear();
        held.extend_from_slice(input);
    }
    let t = Instant::now();
    let r = catch_unwind(AssertUnwindSafe(|| f(input)));
    st.slowest = st.slowest.max(t.elapsed());
    running.done.fetch_add(1, Ordering::Relaxed);
    r.err().map(|_| {
        LAST_PANIC
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or_else(|| Panic {
                at: "(unknown)".into(),
                msg: "(no message)".into(),
            })
    })
}

fn record(target: &str, input: &[u8], p: Panic, seed: Option<String>, st: &mut Stats) {
    st.crashes += 1;
    // One artifact per panic location: the same bug found again by other
    // inputs (an assertion's message differs with the values) is counted.
    if st.distinct.contains_key(&p.at) {
        return;
    }
    let path = artifact(target, "crash", input)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|e| format!("(not written: {e})"));
    let from = seed.map(|s| format!(" (seed {s})")).unwrap_or_default();
    println!(
        "{target}: CRASH at {}{from}:\n{}\n{target}:   input: {path}",
        p.at, p.msg
    );
    st.distinct.insert(p.at, path);
}

/// One target: its corpus, then mutations until `seconds` have passed.
/// `Ok(true)`: nothing crashed.
fn fuzz(name: &'static str, f: Target, a: &Args, running: &Running) -> Result<bool, String> {
    let files = corpus(name).map_err(|e| format!("{name}: corpus: {e}"))?;
    if files.is_empty() {
        return Err(format!("{name}: fuzz/corpus/{name}/ has no seeds"));
    }
    *running.target.lock().unwrap_or_else(|p| p.into_inner()) = name;
    let mut st = Stats::default();
    let mut seen: HashSet<u64> = HashSet::new();
    let start = Instant::now();
    for (p, b) in &files {
        seen.insert(fnv1a(b));
        st.runs += 1;
        if let Some(panic) = run_one(f, b, running, &mut st) {
            let shown = p
                .strip_prefix(fuzz_dir())
                .unwrap_or(p)
                .display()
                .to_string();
            record(name, b, panic, Some(shown), &mut st);
        }
    }
    let seeds: Vec<Vec<u8>> = files.into_iter().map(|(_, b)| b).collect();
    let mut m = Mutator {
        rng: Rng::new(a.rng_seed ^ fnv1a(name.as_bytes())),
        max_len: a.max_len,
    };
    let budget = Duration::from_secs(a.seconds);
    let mut tick = 0u32;
    loop {
        tick = tick.wrapping_add(1);
        if tick.is_multiple_of(64) && start.elapsed() >= budget {
            break;
        }
        let input = m.input(&seeds);
        let h = fnv1a(&input);
        if seen.len() < SEEN_CAP {
            if !seen.insert(h) {
                st.repeats += 1;
                continue;
            }
        } else if seen.contains(&h) {
            st.repeats += 1;
            continue;
        }
        st.runs += 1;
        if let Some(panic) = run_one(f, &input, running, &mut st) {
            record(name, &input, panic, None, &mut st);
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let distinct = if seen.len() >= SEEN_CAP {
        format!("distinct up to the first {SEEN_CAP}, repeats after that not detected")
    } else {
        "all distinct".to_string()
    };
    println!(
        "{name}: {} inputs run ({} seeds; {distinct}; {} repeats skipped) in {secs:.1} s: \
         {:.0} crash-free execs/s; slowest input {:.1} ms; {}",
        st.runs,
        seeds.len(),
        st.repeats,
        (st.runs - st.crashes) as f64 / secs.max(1e-9),
        st.slowest.as_secs_f64() * 1e3,
        if st.crashes == 0 {
            "no crash".to_string()
        } else {
            format!(
                "{} crashing inputs, {} distinct panic locations",
                st.crashes,
                st.distinct.len()
            )
        }
    );
    Ok(st.crashes == 0)
}

fn main() -> ExitCode {
    let a = match parse_args() {
        Ok(Some(a)) => a,
        Ok(None) => return ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quick: {e}");
            return ExitCode::from(2);
        }
    };
    println!(
        "quick: random mutation (not coverage-guided), {} s per target, --rng-seed {}",
        a.seconds, a.rng_seed
    );
    quiet_panic_hook();
    let running = Arc::new(Running {
        target: Mutex::new(""),
        input: Mutex::new(Vec::new()),
        done: AtomicU64::new(0),
        active: AtomicBool::new(true),
    });
    watchdog(Arc::clone(&running), Duration::from_secs(a.timeout));
    let mut failed = Vec::new();
    for (name, f) in &a.targets {
        match fuzz(name, *f, &a, &running) {
            Ok(true) => {}
            Ok(false) => {
                failed.push(*name);
                if !a.keep_going {
                    break;
                }
            }
            Err(e) => {
                eprintln!("quick: {e}");
                return ExitCode::from(2);
            }
        }
    }
    running.active.store(false, Ordering::Relaxed);
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        println!(
            "quick: crashes in {} (inputs in fuzz/artifacts/<target>/); add each to \
             fuzz/corpus/<target>/ as regress-<name> once understood",
            failed.join(", ")
        );
        ExitCode::FAILURE
    }
}
