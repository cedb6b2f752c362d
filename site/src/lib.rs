//! The site description: one YAML file from which every daemon derives its
//! configuration (DHCP reservations, DNS records, LB pools, boot scripts,
//! Ignition), so they can never disagree.
//!
//! Modules:
//! - [`wire`]: stage one, the file as written (serde, no judgement).
//! - [`model`]: stage two, the validated [`Site`].
//! - [`load`](crate::load()): reads, parses, validates; reports *every* problem at
//!   once with file, key path and reason.
//! - [`mac`]: MAC addresses in one canonical form.
//! - [`dns`]: the `dns:` section (dnsd), wire and model.
//! - [`exposure`]: what the settings that relax node-secret access expose.
//!
//! Invariants: a [`Site`] only exists if validation found no problem; node
//! names, MACs and IPs are unique; every node's IP is inside one of the
//! site's networks; every node's image and role Ignition exist.

pub mod catalog;
pub mod dns;
pub mod exposure;
pub mod hardware;
pub mod mac;
pub mod model;
pub mod nmstate;
mod validate;
pub mod wire;

pub use mac::Mac;
pub use model::*;
pub use validate::load_lb;
pub use validate::{alibaba_disk_problems, alibaba_id_ok, region_id_ok, zone_in_region};
pub use validate::{load, load_with_overlay, loads, OVERLAY_FILE};

use std::fmt;
use std::path::PathBuf;

static STATE_DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// A process's `--state-dir`: overrides `host.stateDir` in every site this
/// process loads from now on, its reloads included, so the node overlay
/// (`<stateDir>/nodes.yaml`) is read and written where the rest of its
/// state is (several appliances run one site file, each with its own state
/// directory). Made absolute against the current directory. Set once, before
/// the first load; `Err` when it was already set to another directory.
pub fn override_state_dir(dir: &std::path::Path) -> Result<(), String> {
    let dir = std::path::absolute(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    match STATE_DIR.get() {
        Some(d) if *d == dir => Ok(()),
        Some(d) => Err(format!("the state directory is already {}", d.display())),
        None => STATE_DIR
            .set(dir)
            .map_err(|d| format!("the state directory is already {}", d.display())),
    }
}

/// The `--state-dir` override, if this process set one.
pub(crate) fn state_dir_override() -> Option<&'static std::path::Path> {
    STATE_DIR.get().map(PathBuf::as_path)
}

/// As [`load`], with `text` as the site file's content instead of what is
/// at `path` (the files it names are still read, relative to `path`'s
/// directory): the site's validation on text alone, for the fuzz target.
pub fn load_text(path: &std::path::Path, text: &str) -> Result<Site, SiteError> {
    validate::load_inner(path, None, Some(text.to_string()))
}

/// One thing wrong with a site file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub file: PathBuf,
    /// Key path in the YAML, e.g. `nodes[2].macs[0]`; empty for the whole file.
    pub key: String,
    pub reason: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}: {}", self.file.display(), self.reason)
        } else {
            write!(f, "{}: {}: {}", self.file.display(), self.key, self.reason)
        }
    }
}

/// Every problem found in a site file; never empty.
#[derive(Debug, Clone, thiserror::Error)]
pub struct SiteError {
    pub problems: Vec<Problem>,
}

impl fmt::Display for SiteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        writeln!(
            f,
            "invalid site ({n} problem{}):",
            if n == 1 { "" } else { "s" }
        )?;
        for p in &self.problems {
            writeln!(f, "  {p}")?;
        }
        Ok(())
    }
}

/// A value that must never be printed: its `Debug` is `<redacted>`.
/// Ignition configs hold pull secrets and keys.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret<T>(pub T);

impl<T> Secret<T> {
    pub fn expose(&self) -> &T {
        &self.0
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}
