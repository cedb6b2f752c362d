//! `host.admission`.

use std::time::Duration;

/// `host.admission`: admission limits. Work beyond a limit waits its turn
/// (first come, first served) in a bounded queue for at most `queue_wait`;
/// beyond the queue it is refused (TFTP "server busy", HTTP 503).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    /// TFTP transfers at once (read at start).
    pub tftp_transfers: usize,
    /// TFTP requests waiting for a transfer at most (read at start).
    pub tftp_queue: usize,
    /// TFTP transfers one source address may run at once (read at start).
    pub tftp_per_source: usize,
    /// Image responses (kernel, initramfs, rootfs: `/images/…`) being
    /// sent at once, HTTP and HTTPS together; `None`: no limit.
    pub image_transfers: Option<usize>,
    /// Image responses one source address may have in flight at once
    /// (beyond: 503 at once); `None`: no limit.
    pub image_per_source: Option<usize>,
    /// Image requests waiting at most.
    pub image_queue: usize,
    /// Connections each HTTP(S) listener holds at once (a waiting image
    /// request holds one).
    pub http_connections: usize,
    /// How long a TFTP or image request waits at most.
    pub queue_wait: Duration,
    /// Machines each provider is creating or powering on at once; the
    /// rest wait (for as long as their deadline allows).
    pub provisions: usize,
}

impl Default for Admission {
    fn default() -> Self {
        Admission {
            tftp_transfers: 256,
            tftp_queue: 16_384,
            tftp_per_source: 8,
            image_transfers: Some(64),
            image_per_source: Some(8),
            image_queue: 65_536,
            http_connections: 16_384,
            queue_wait: Duration::from_secs(30),
            provisions: 20,
        }
    }
}
