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
