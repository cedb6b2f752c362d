//! What every daemon does the same way at run time, written once: the
//! model crate `site` stays free of it.
//!
//! Modules:
//! - [`service`]: the systemd protocol (sd_notify READY/RELOADING/STOPPING,
//!   watchdog), the signal loop, the tokio runtime, and the tail every
//!   daemon's main shares (`serve_until_stopped`).
//! - [`reload`]: the reload loop (SIGHUP, or a watched file's change).
//! - [`feed`]: the site feed: the validated site, loaded once per change,
//!   published to every daemon in the process.
//! - [`clock`]: calendar time that a step of the system clock does not move.
//! - [`fs`]: files written atomically (a crash leaves the old or the new).
//! - [`heap`]: the process's live heap bytes, when its binary counts them;
//!   transparent huge pages off for the allocator's arenas.
//! - [`net`]: socket reads the data paths share.
//! - [`http1`]: the HTTP/1.1 connection rules every HTTP listener shares
//!   (limits, refused framings, why a connection was closed).
//! - [`logging`]: tracing setup.
//! - [`paths`]: where the configuration is by default (`/etc/bare-metal-boot/`),
//!   and the old place honoured while only it exists.
//! - [`privileges`]: started as root, becoming what the systemd unit makes the daemon.
//!
//! Invariant: nothing here knows a daemon; daemons know this crate.

pub mod clock;
pub mod conns;
pub mod feed;
pub mod fs;
pub mod heap;
pub mod http1;
pub mod logging;
pub mod net;
pub mod paths;
pub mod privileges;
pub mod reload;
pub mod service;
pub mod sync;

pub use feed::{Published, SiteFeed};
pub use reload::Triggers;
