//! The live state every request reads: the current site and the revoked
//! nodes, swapped atomically on reload (a request sees the old or the new
//! snapshot, never a mix). Also the state directory's small files.

use arc_swap::ArcSwap;
use site::Site;
use std::collections::BTreeSet;
use std::io;
use std::path::Path;
use std::sync::Arc;

#[derive(Debug)]
pub struct Snapshot {
    /// The site from the feed (shared, not copied, by every snapshot that serves it).
    pub site: Arc<Site>,
    /// Nodes whose Ignition, metadata and userdata are no longer served
    /// (the bootstrap node's, once the cluster is up).
    pub revoked: BTreeSet<String>,
}

pub type Live = ArcSwap<Snapshot>;

pub fn new_live(snap: Snapshot) -> Arc<Live> {
    Arc::new(ArcSwap::from_pointee(snap))
}

pub const REVOKED_FILE: &str = "revoked.json";

/// Reads `<state_dir>/revoked.json`; a missing file revokes nobody. A file
/// that does not parse is refused, never taken as empty: that would serve
/// the revoked nodes' Ignition (the bootstrap node's secrets) again.
pub fn load_revoked(state_dir: &Path) -> io::Result<BTreeSet<String>> {
    match std::fs::read(state_dir.join(REVOKED_FILE)) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{REVOKED_FILE}: {e}: the file is corrupt (it lists the nodes whose Ignition, \
                     metadata and userdata are no longer served, as a JSON array of names). \
                     Restore it from a backup, or write the list again (e.g. [\"bootstrap\"] \
                     once the cluster is up); removing it serves every node again"
                ),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(BTreeSet::new()),
        Err(e) => Err(e),
    }
}

/// Adds (or removes) `node` to the revoked set on disk, durably.
pub fn set_revoked(state_dir: &Path, node: &str, revoked: bool) -> io::Result<BTreeSet<String>> {
    let mut set = load_revoked(state_dir)?;
    if revoked {
        set.insert(node.to_string());
    } else {
        set.remove(node);
    }
    let json = serde_json::to_vec_pretty(&set).map_err(io::Error::other)?;
    write_atomic(&state_dir.join(REVOKED_FILE), &json, 0o644)?;
    Ok(set)
}

/// Writes a file readable only by its owner, atomically.
pub fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic(path, bytes, 0o600)
}

/// Write to a temporary name, fsync, rename, fsync the directory (in
/// `runtime`, shared with the lease files).
pub use runtime::fs::write_atomic;

#[cfg(test)]
mod tests {
    use super::*;

    /// A corrupt list is refused naming the file and what to do, and left
    /// as it was; a missing one revokes nobody.
    #[test]
    fn a_corrupt_revoked_list_is_refused_saying_what_to_do() {
        let d = tempfile::tempdir().unwrap();
        assert!(load_revoked(d.path()).unwrap().is_empty());
        assert_eq!(
            set_revoked(d.path(), "bootstrap", true).unwrap(),
            BTreeSet::from(["bootstrap".to_string()])
        );
        let p = d.path().join(REVOKED_FILE);
        for bad in [&b"[\"bootstrap\""[..], b"{}", b"", b"\x00\x01"] {
            std::fs::write(&p, bad).unwrap();
            let e = load_revoked(d.path()).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            let e = e.to_string();
            assert!(
                e.starts_with("revoked.json: ")
                    && e.contains("the file is corrupt")
                    && e.contains("Restore it from a backup, or write the list again"),
                "{e}"
            );
            // Neither emptied nor rewritten, also by a revoke.
            assert!(set_revoked(d.path(), "master-0", true).is_err());
            assert_eq!(std::fs::read(&p).unwrap(), bad);
        }
    }
}
