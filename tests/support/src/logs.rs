//! Log capture for the test binaries that run daemons in process (bootd's
//! `it` and `tftp`, the appliance's `controller`): everything they logged,
//! at `trace` for the appliance's own crates, so tests can prove secrets
//! never reach a log.

use std::sync::{Arc, Mutex, OnceLock};

/// The test binary's log so far. The first call installs the global
/// subscriber that writes into it; every call returns the same buffer.
pub fn logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let w = Arc::clone(&buf);
        let _ = tracing_subscriber::fmt()
            .with_env_filter("trace,hyper=info,hyper_util=info,h2=info,rustls=info")
            .with_ansi(false)
            .with_writer(move || Writer(Arc::clone(&w)))
            .try_init();
        buf
    })
    .clone()
}

struct Writer(Arc<Mutex<Vec<u8>>>);
impl std::io::Write for Writer {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
