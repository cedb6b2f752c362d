//! The `lbd` binary: `--check-config`, the admin CLI, and accept backoff
//! when out of file descriptors (a real process under a small RLIMIT_NOFILE).

use crate::harness::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use testkit::ports::free_port;
use testkit::process::Process;
use tokio::net::TcpStream;

fn lbd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lbd"))
}

#[test]
fn check_config_lists_every_problem_with_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "lb.yaml",
        "balance: random\nlimits: { maxConnsPerSource: 0, idleTimeout: 5 }\nservices:\n  - name: Web\n    listen: 127.0.0.1\n    backends: []\n    check: { type: tcp, path: /x, rise: 0, colour: red }\n",
    );
    let out = lbd()
        .arg("--check-config")
        .arg(&p)
        .arg("--standalone")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for want in [
        "services[0].check.colour: unknown key",
        "balance: \"random\": want roundRobin or leastConn",
        "limits.maxConnsPerSource: 0: want 1 to maxConns",
        "limits.idleTimeout: \"5\" is not a duration",
        "services[0].name: \"Web\" is not a name",
        "services[0].listen: \"127.0.0.1\" is not an address:port",
        "services[0].backends: at least one backend",
        "services[0].check.rise: 0: want 1 to 100",
        "services[0].check.path: only for http and https checks",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
    assert!(
        err.contains(&format!("{}: ", p.display())),
        "problems do not name the file:\n{err}"
    );
}

#[test]
fn check_config_prints_the_derived_frontends() {
    let site =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/openshift/site.yaml");
    let out = lbd().arg("--check-config").arg(&site).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("frontend api listen 192.168.111.5:6443"),
        "{text}"
    );
    assert!(
        text.contains("backend bootstrap    192.168.111.10:6443"),
        "{text}"
    );
}

#[tokio::test]
async fn out_of_descriptors_backs_off_and_recovers() {
    let a = Backend::start("a", "127.0.0.1:0".parse().unwrap()).await;
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    let text =
        format!("adminListen: 127.0.0.1:{admin}\nservices:\n  - name: web\n    listen: 127.0.0.1:{port}\n    backends: [\"{}\"]\n", a.addr);
    let cfg = write(dir.path(), "lb.yaml", &text);
    let log = std::fs::File::create(dir.path().join("lbd.log")).unwrap();
    // 48 descriptors: about a dozen go to the runtime and listeners, each
    // relayed connection takes two.
    let child = Command::new("prlimit")
        .args(["--nofile=48:48", "--"])
        .arg(env!("CARGO_BIN_EXE_lbd"))
        .args(["--threads", "1", "--state-dir"])
        .arg(dir.path())
        .arg("--config")
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let _child = Process::new(child);
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let t0 = Instant::now();
    while get(addr).await.is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "lbd did not come up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Hold 40 connections open: more than the descriptors allow.
    let mut held = Vec::new();
    for _ in 0..40 {
        held.push(TcpStream::connect(addr).await.unwrap());
    }
    let logf = dir.path().join("lbd.log");
    let t0 = Instant::now();
    while !std::fs::read_to_string(&logf)
        .unwrap()
        .contains("out of resources; backing off")
    {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "no backoff logged:\n{}",
            std::fs::read_to_string(&logf).unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(held);
    // Recovers by itself: the held connections are closed, new ones are served.
    let t0 = Instant::now();
    loop {
        if let Ok(body) = get(addr).await {
            assert_eq!(body, "a");
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "not serving again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The admin CLI against the same process.
    let out = lbd()
        .arg("--config")
        .arg(&cfg)
        .arg("status")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["frontends"][0]["backends"][0]["state"], "up");
    let out = lbd()
        .arg("--config")
        .arg(&cfg)
        .arg("bootstrap-complete")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("no bootstrap node"));
    let m = std::process::Command::new("curl")
        .args(["-sf", &format!("http://127.0.0.1:{admin}/metrics")])
        .output()
        .unwrap();
    let m = String::from_utf8_lossy(&m.stdout);
    let errors: u64 = m
        .lines()
        .find_map(|l| l.strip_prefix("lbd_accept_errors_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    assert!(errors > 0, "{m}");
}
