//! A single-member etcd for tests: Debian's `etcd` (package etcd-server),
//! its data directory in a temporary directory (on /dev/shm when there is
//! one: no disk syncs to wait for), listening on 127.0.0.1 only, stopped by
//! its PID when dropped.

use crate::{Config, Etcd};
use std::process::{Command, Stdio};
use std::time::Duration;
use testkit::process::Process;

/// testkit's port picker: the member's ports and the test's own come from
/// one counter.
pub use testkit::ports::free_port;

pub struct Server {
    child: Option<Process>,
    /// `http://127.0.0.1:<port>`
    pub endpoint: String,
    peer: String,
    dir: tempfile::TempDir,
}

/// The etcd binary: `$ETCD` or Debian's.
fn binary() -> String {
    std::env::var("ETCD").unwrap_or_else(|_| "/usr/bin/etcd".into())
}

impl Server {
    /// Starts a member and waits (at most 20 s) until it answers.
    pub fn start() -> Server {
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            tempfile::Builder::new()
                .prefix("etcd-test.")
                .tempdir_in("/dev/shm")
        } else {
            tempfile::Builder::new().prefix("etcd-test.").tempdir()
        }
        .expect("a temporary directory for etcd");
        let mut s = Server {
            child: None,
            endpoint: format!("http://127.0.0.1:{}", free_port()),
            peer: format!("http://127.0.0.1:{}", free_port()),
            dir: base,
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let data = self.dir.path().join("data");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("etcd.log"))
            .expect("etcd log file");
        let child = Command::new(binary())
            .args([
                "--name=test",
                &format!("--data-dir={}", data.display()),
                &format!("--listen-client-urls={}", self.endpoint),
                &format!("--advertise-client-urls={}", self.endpoint),
                &format!("--listen-peer-urls={}", self.peer),
                &format!("--initial-advertise-peer-urls={}", self.peer),
                &format!("--initial-cluster=test={}", self.peer),
                "--initial-cluster-state=new",
                "--logger=zap",
                "--log-outputs=stderr",
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "{}: {e} (install Debian's etcd-server: tests/lab/deps.sh)",
                    binary()
                )
            });
        let child = Process::new(child).with_log(self.dir.path().join("etcd.log"));
        let etcd = Etcd::connect(&self.config("/ready/")).expect("etcd client");
        let child = self.child.insert(child);
        child.wait_ready(
            "etcd",
            Duration::from_secs(20),
            Duration::from_millis(50),
            || etcd.get("probe").ok(),
        );
    }

    /// A client configuration for this member, keys under `prefix`.
    pub fn config(&self, prefix: &str) -> Config {
        Config {
            endpoints: vec![self.endpoint.clone()],
            prefix: prefix.into(),
            tls: None,
            timeout: Duration::from_secs(3),
            site: None,
        }
    }

    /// What etcd logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }

    /// The member's PID, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// SIGKILL, by PID, and reaped.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill();
        }
    }

    /// Started again on the same data and ports.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}
