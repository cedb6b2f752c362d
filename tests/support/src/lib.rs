//! What the workspace's tests share, as one crate that each crate's tests
//! take as a dev-dependency (and etcd's `testing` feature as an optional
//! dependency).
//!
//! Always there:
//! - [`ports`]: ports for a child process to bind, never handed out twice
//!   in one test process;
//! - [`golden`]: golden files, compared or rewritten (`UPDATE_GOLDEN=1`);
//! - [`process`]: a child process killed and reaped when dropped, the
//!   wait until it is ready, and what a finished command printed;
//! - [`tmpfs`]: a real small filesystem for full-disk tests;
//! - [`repo`] and [`specs`]: where the repository and the providers' API
//!   specs are.
//!
//! Behind features, for the few crates whose tests use them:
//! - `dhcp`: [`dhcp`], the lab site copied for a test and relayed DHCP;
//! - `logs`: [`logs`], everything the test binary logged;
//! - `fakes`: [`redfish_fake`] and [`ecs_fake`], the providers' fakes;
//!   [`kube_fake`], a Kubernetes API server's CSRs and bootstrap ConfigMap,
//!   every request checked by [`openapi`] against Kubernetes' own document;
//!   and [`http_fake`], the accept loop an HTTP fake runs;
//! - `net`: [`net`], a TLS client trusting a test CA and a raw exchange
//!   with a listener.
//!
//! Invariants: testkit depends on no crate of the workspace (every one of
//! them may use it in its tests); a static here (the port counter, the log
//! buffer) exists once per test binary, however many crates of that binary
//! use it.

use std::path::{Path, PathBuf};

#[cfg(feature = "dhcp")]
pub mod dhcp;
#[cfg(feature = "fakes")]
pub mod ecs_fake;
pub mod golden;
#[cfg(feature = "fakes")]
pub mod http_fake;
#[cfg(feature = "fakes")]
pub mod kube_fake;
#[cfg(feature = "logs")]
pub mod logs;
#[cfg(feature = "net")]
pub mod net;
#[cfg(feature = "fakes")]
pub mod openapi;
pub mod ports;
pub mod process;
#[cfg(feature = "fakes")]
pub mod redfish_fake;
pub mod tmpfs;

/// The repository's root directory (this crate is `tests/support`).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The providers' API specs: `$SPECS_DIR`, else `../shared/specs` beside
/// the repository. They are test data the repository does not carry.
pub fn specs() -> PathBuf {
    std::env::var_os("SPECS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("../shared/specs"))
}
