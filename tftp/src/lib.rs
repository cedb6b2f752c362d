//! A read-only TFTP server (RFC 1350, with the blksize, tsize, timeout and
//! windowsize options of RFC 2347-2349 and RFC 7440) for the firmware that
//! cannot speak HTTP: PXE ROMs and EDK2 fetching iPXE, SLOF and GRUB
//! fetching GRUB's files and per-node configs.
//!
//! Modules:
//! - [`packet`]: parse and encode packets, negotiate options (pure).
//! - [`window`]: which blocks to send after each ACK, rollover (pure).
//! - [`server`]: the request loop and one task per transfer.
//! - [`metrics`]: Prometheus counters.
//! - `source`, `udp`: reading blocks; per-packet local addresses.
//!
//! Invariants:
//! - Nothing is ever written: every WRQ is refused with ERROR 2.
//! - A name maps to content only through the [`Resolver`]; the one that
//!   reads a directory ([`root_resolver`]) opens through the confined open
//!   it is given (bootd's `files::open_beneath`: `openat2(RESOLVE_BENEATH)`),
//!   so `..`, absolute names and symlinks out of the root fail in the
//!   kernel, not in a string check.
//!
//! The crate knows nothing of bootd: it reaches the rest only through the
//! [`Resolver`] and the [`Observer`] closures.
//! - One transfer per client address and port: a new RRQ from the same
//!   port replaces the running one (EDK2 and SLOF abort and re-ask from the
//!   port they used before).
//! - At most `max_transfers` transfers run; more requests wait their turn
//!   (at most `max_queued` of them, each at most 30 s); beyond, "busy".
//! - Filenames reach logs only escaped, and never metric labels; file
//!   contents reach neither.

pub mod metrics;
pub mod packet;
pub mod server;
mod source;
mod udp;
pub mod window;

pub use metrics::{Outcome, TftpMetrics};
pub use server::{run, Observer, Report, TftpConfig};
pub use source::Resolved;

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// Maps a requested filename to content. The name arrives with one leading
/// `/` removed (firmware asks for both `/grub.cfg` and `grub.cfg`), never
/// empty, and UTF-8; the peer lets generated files depend on the client.
/// Called on the transfer's task: it should not block for long.
pub type Resolver = Arc<dyn Fn(&str, SocketAddr) -> Resolved + Send + Sync>;

/// A confined open: the regular file `name` below `root`, refusing anything
/// that would resolve outside it.
pub type OpenBeneath = fn(&std::path::Path, &str) -> io::Result<std::fs::File>;

/// Serves the regular files below `root`, and nothing else.
pub fn root_resolver(root: PathBuf, open: OpenBeneath) -> Resolver {
    Arc::new(move |name: &str, _peer: SocketAddr| resolve_in(open, &root, name))
}

/// `open`, with its errors sorted into the two answers TFTP has.
pub fn resolve_in(open: OpenBeneath, root: &std::path::Path, name: &str) -> Resolved {
    match open(root, name) {
        Ok(f) => Resolved::File(f),
        Err(e) => {
            let not_found = e.kind() == io::ErrorKind::NotFound
                || matches!(
                    e.raw_os_error(),
                    Some(nix::libc::ENOTDIR | nix::libc::ENAMETOOLONG)
                );
            // EXDEV is an escape (`..`, absolute symlink), ELOOP a magic
            // link, EACCES/EPERM permissions: all "access violation".
            tracing::debug!(file = %packet::Escaped(name), error = %e, "tftp open");
            if not_found {
                Resolved::NotFound
            } else {
                Resolved::Denied
            }
        }
    }
}
