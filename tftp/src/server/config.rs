//! What a TFTP server is told: its limits, and who hears how each
//! transfer ended.

use super::Outcome;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct TftpConfig {
    /// Largest `blksize` granted. 1468 keeps a DATA packet inside a
    /// 1500-byte MTU (1468 bytes of data, 4 of TFTP, 8 of UDP, 20 of IP):
    /// larger blocks would be IP-fragmented, and some firmware drops
    /// fragments.
    pub max_blksize: u16,
    /// Largest `windowsize` granted; one window is at most this many
    /// blocks in flight per transfer.
    pub max_windowsize: u16,
    /// Transfers running at once. A request beyond them waits its turn
    /// (first come, first served) for at most `queue_wait`, up to
    /// `max_queued` requests; past those it is dropped unanswered and
    /// counted busy: its client asks again after its timeout, when the
    /// queue may have room (a PXE ROM gives its boot up on an error, so a
    /// rack powering on at once is queued or left to retry, not refused).
    pub max_transfers: usize,
    /// Requests waiting for a transfer slot at most.
    pub max_queued: usize,
    /// How long a request waits for a transfer slot; then it is dropped
    /// without an answer (its client asks again, or has given up).
    pub queue_wait: Duration,
    /// Retransmissions of an unacknowledged window before giving up.
    pub retries: u32,
    /// Retransmission timeout unless the client negotiates `timeout`.
    pub default_timeout: Duration,
    /// Largest `timeout` a client may negotiate, in seconds.
    pub max_timeout: u8,
    /// Transfers one source address may run at once (a PXE client needs
    /// two or three); more are refused as busy, so one host (or one
    /// spoofed address) cannot take every slot.
    pub max_per_source: usize,
    /// Told how every transfer ended (bootd's timeline); called on the
    /// transfer's task, so it must not block.
    pub observer: Option<Observer>,
}

/// How one transfer ended, for [`TftpConfig::observer`].
#[derive(Debug, Clone)]
pub struct Report<'a> {
    pub peer: SocketAddr,
    /// As requested (client-chosen: escape it before logging).
    pub file: &'a str,
    pub outcome: Outcome,
    /// File bytes, when the transfer completed.
    pub bytes: Option<u64>,
    pub took: Duration,
    /// Why it failed, when it did.
    pub reason: Option<String>,
}

#[derive(Clone)]
pub struct Observer(pub Arc<dyn Fn(&Report<'_>) + Send + Sync>);

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
}

impl Default for TftpConfig {
    fn default() -> Self {
        TftpConfig {
            max_blksize: 1468,
            max_windowsize: 64,
            max_transfers: 256,
            max_queued: 16_384,
            queue_wait: QUEUE_WAIT,
            retries: 5,
            default_timeout: Duration::from_secs(1),
            max_timeout: 5,
            max_per_source: 8,
            observer: None,
        }
    }
}

/// The default `queue_wait`.
pub const QUEUE_WAIT: Duration = Duration::from_secs(30);

/// Retransmissions of the first window before the client has acknowledged
/// anything.
pub(super) const UNPROVEN_RETRIES: u32 = 2;

/// How long a transfer's thread waits in `recv` before it looks at its
/// cancellation token (and its retransmission deadline) again.
pub(super) const CANCEL_POLL: Duration = Duration::from_millis(100);

/// Receive buffer of the request socket: larger than any valid request, so
/// an oversized one is seen as too long rather than silently cut.
pub(super) const RECV_BUF: usize = 2048;
