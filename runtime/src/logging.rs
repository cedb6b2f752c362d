//! Logging setup, the same for every executable.

/// Logs to stderr through a separate thread, so a request never waits on
/// write(2) to a slow terminal or journal. Not lossy: when the queue is
/// full, logging waits rather than dropping a decision's record. The level
/// comes from `RUST_LOG` (default `info`). Keep the guard until exit: it
/// flushes what is queued.
pub fn init() -> tracing_appender::non_blocking::WorkerGuard {
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(false)
        .finish(std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(writer)
        .init();
    guard
}

/// Lets through at most `per_second` log lines a second from one place in
/// the code, so a flood of refused requests cannot become a flood of log
/// lines (30 000 probes made 30 000 lines). Lines left out are counted and
/// the count goes with the next line let through.
///
/// ```
/// static REFUSED: runtime::logging::Throttle = runtime::logging::Throttle::new(10);
/// if let Some(suppressed) = REFUSED.allow() {
///     tracing::warn!(suppressed, "request refused");
/// }
/// ```
#[derive(Debug)]
pub struct Throttle {
    per_second: u32,
    /// (the second, lines let through in it, lines left out since the last one let through)
    state: std::sync::Mutex<(u64, u32, u64)>,
}

impl Throttle {
    pub const fn new(per_second: u32) -> Throttle {
        Throttle {
            per_second,
            state: std::sync::Mutex::new((0, 0, 0)),
        }
    }

    /// `Some(n)`: log this line, and say that `n` were left out before it.
    pub fn allow(&self) -> Option<u64> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        self.allow_at(now)
    }

    fn allow_at(&self, second: u64) -> Option<u64> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.0 != second {
            s.0 = second;
            s.1 = 0;
        }
        if s.1 < self.per_second {
            s.1 += 1;
            Some(std::mem::take(&mut s.2))
        } else {
            s.2 += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_cut_to_the_rate_and_the_rest_counted() {
        let t = Throttle::new(3);
        let let_through: Vec<Option<u64>> = (0..1000).map(|_| t.allow_at(7)).collect();
        assert_eq!(let_through.iter().filter(|x| x.is_some()).count(), 3);
        // The next second: the first line carries the count.
        assert_eq!(t.allow_at(8), Some(997));
        assert_eq!(t.allow_at(8), Some(0));
    }
}
