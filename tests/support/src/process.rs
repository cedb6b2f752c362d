//! A child process a test started (a daemon under test, a fake, a peer such
//! as etcd or Prism): stopped by its PID and reaped when dropped, also when
//! the test panics, so that none outlives its test; and the wait until it is
//! ready, which ends at once, showing its log, when it exits instead; and
//! what a finished command printed ([`output_text`]).
//!
//! Stopping is SIGKILL (what the crash tests mean by kill -9), or SIGTERM
//! for a process that takes its own children down with it. A process that
//! has been reaped is never signalled again: its PID may be another's.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::PathBuf;
use std::process::{Child, ExitStatus, Output};
use std::time::{Duration, Instant};

/// What a finished command printed: its stdout, then its stderr (lossy UTF-8).
pub fn output_text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A child process, stopped and reaped when dropped.
pub struct Process {
    child: Child,
    log: Option<PathBuf>,
    terminate_on_drop: bool,
}

impl Process {
    /// Takes `child` over; SIGKILL when dropped.
    pub fn new(child: Child) -> Process {
        Process {
            child,
            log: None,
            terminate_on_drop: false,
        }
    }

    /// The file the process writes its log to, shown when it does not
    /// become ready.
    pub fn with_log(mut self, log: impl Into<PathBuf>) -> Process {
        self.log = Some(log.into());
        self
    }

    /// Stopped with SIGTERM, not SIGKILL, when dropped.
    pub fn terminate_on_drop(mut self) -> Process {
        self.terminate_on_drop = true;
        self
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, by PID, then reaped. Nothing when it has been reaped.
    pub fn kill(&mut self) {
        // std sends no signal to a child it has reaped.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, by PID, then reaped (waits until it exits). Nothing when it
    /// has exited.
    pub fn terminate(&mut self) {
        if self.exited().is_some() {
            return;
        }
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM);
        let _ = self.child.wait();
    }

    /// Its exit status, once it has exited (reaped then).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Its exit status, if it exits within `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if let Some(s) = self.exited() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// Asks `ready` every `every` until it gives a value (a port it wrote,
    /// a connection, an answer), and returns that. Panics, naming `what`
    /// and showing the log, when the process exits first or `limit` passes.
    pub fn wait_ready<T>(
        &mut self,
        what: &str,
        limit: Duration,
        every: Duration,
        mut ready: impl FnMut() -> Option<T>,
    ) -> T {
        let end = Instant::now() + limit;
        loop {
            if let Some(v) = ready() {
                return v;
            }
            if let Some(status) = self.exited() {
                panic!("{what} exited ({status}): {}", self.log_text());
            }
            assert!(
                Instant::now() < end,
                "{what} was not ready in {limit:?}: {}",
                self.log_text()
            );
            std::thread::sleep(every);
        }
    }

    /// What the process logged (empty without a log file).
    pub fn log_text(&self) -> String {
        self.log
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.terminate_on_drop {
            self.terminate();
        } else {
            self.kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn sleeper() -> Process {
        Process::new(Command::new("sleep").arg("30").spawn().unwrap())
    }

    fn alive(pid: u32) -> bool {
        // A zombie still has /proc/<pid>; a reaped child has none.
        std::path::Path::new(&format!("/proc/{pid}")).exists()
    }

    #[test]
    fn dropped_is_killed_and_reaped() {
        let p = sleeper();
        let pid = p.id();
        assert!(alive(pid));
        drop(p);
        assert!(!alive(pid));
    }

    #[test]
    fn terminate_is_sigterm_and_reaps_once() {
        use std::os::unix::process::ExitStatusExt;
        let mut p = sleeper().terminate_on_drop();
        p.terminate();
        let status = p.exited().expect("reaped");
        assert_eq!(status.signal(), Some(Signal::SIGTERM as i32));
        // Reaped: no second signal (the PID may be another process's now).
        p.terminate();
    }

    #[test]
    fn wait_exit_gives_the_status_in_time() {
        let mut p = Process::new(Command::new("true").spawn().unwrap());
        assert!(p.wait_exit(Duration::from_secs(10)).unwrap().success());
        let mut q = sleeper();
        assert_eq!(q.wait_exit(Duration::from_millis(100)), None);
    }

    #[test]
    fn wait_ready_returns_what_ready_gives() {
        let mut p = sleeper();
        let mut n = 0;
        let v = p.wait_ready(
            "sleep",
            Duration::from_secs(5),
            Duration::from_millis(1),
            || {
                n += 1;
                (n == 3).then_some(n)
            },
        );
        assert_eq!(v, 3);
    }

    #[test]
    #[should_panic(expected = "sh exited (exit status: 3): it failed")]
    fn wait_ready_stops_when_the_process_exits() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let child = Command::new("sh")
            .args(["-c", "echo it failed >&2; exit 3"])
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut p = Process::new(child).with_log(&log);
        p.wait_ready(
            "sh",
            Duration::from_secs(10),
            Duration::from_millis(10),
            || None::<()>,
        );
    }
}
