//! Which nodes have installed: a node is installed once its Ignition config
//! was served (the installer or the installed system fetched it). With
//! `ignition.afterInstall: disk` (the default), an installed node that
//! network-boots again gets a script that boots its local disk instead of
//! the installer, until a reinstall is asked for (`POST
//! /v1/nodes/{name}/reinstall`, `bootd nodes reinstall NAME`): a machine
//! whose boot order puts the network first does not install in a loop, and
//! the boot is flagged on its timeline ("check the boot order").
//!
//! Only a fetch from the node's own address (its site address or its DHCP
//! lease) counts: anyone else holding the node's token fetching its config
//! does not make the real node skip its install. A node's mark is cleared
//! when it is (re)created or deleted through the API.
//!
//! Kept in `<stateDir>/installed.json` (name → milliseconds since the
//! epoch), written atomically before memory changes: a restart forgets
//! nothing, and a failed write changes nothing.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub const FILE: &str = "installed.json";

#[derive(Debug)]
pub struct Installed {
    path: PathBuf,
    nodes: Mutex<BTreeMap<String, i64>>,
}

impl Installed {
    /// Reads `<state_dir>/installed.json`; a missing file is nobody.
    pub fn open(state_dir: &Path) -> io::Result<Installed> {
        let path = state_dir.join(FILE);
        let nodes = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{FILE}: {e}: the file is corrupt (it records which nodes installed, \
                         so that they boot their disk instead of installing again). Restore it \
                         from a backup; moving it aside makes every installed node that \
                         network-boots install again"
                    ),
                )
            })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(e),
        };
        Ok(Installed {
            path,
            nodes: Mutex::new(nodes),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, i64>> {
        self.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn save(&self, nodes: &BTreeMap<String, i64>) -> io::Result<()> {
        let json = serde_json::to_vec_pretty(nodes).map_err(io::Error::other)?;
        crate::state::write_atomic(&self.path, &json, 0o644)
    }

    /// When `node` installed (ms since the epoch), if it did.
    pub fn at(&self, node: &str) -> Option<i64> {
        self.lock().get(node).copied()
    }

    /// Records that `node` installed now; `true` if it had not before.
    pub fn mark(&self, node: &str, now_ms: i64) -> io::Result<bool> {
        let mut n = self.lock();
        if n.contains_key(node) {
            return Ok(false);
        }
        // On disk first: memory never says what a restart would forget.
        let mut next = n.clone();
        next.insert(node.to_string(), now_ms);
        self.save(&next)?;
        *n = next;
        Ok(true)
    }

    /// Forgets that `node` installed (its next network boot installs);
    /// `true` if it had.
    pub fn clear(&self, node: &str) -> io::Result<bool> {
        let mut n = self.lock();
        if !n.contains_key(node) {
            return Ok(false);
        }
        let mut next = n.clone();
        next.remove(node);
        self.save(&next)?;
        *n = next;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_survive_a_reopen_and_clear() {
        let d = tempfile::tempdir().unwrap();
        let i = Installed::open(d.path()).unwrap();
        assert_eq!(i.at("m0"), None);
        assert!(i.mark("m0", 5).unwrap());
        assert!(!i.mark("m0", 9).unwrap());
        let i = Installed::open(d.path()).unwrap();
        assert_eq!(i.at("m0"), Some(5));
        assert!(i.clear("m0").unwrap());
        assert!(!i.clear("m0").unwrap());
        assert_eq!(Installed::open(d.path()).unwrap().at("m0"), None);
        std::fs::write(d.path().join(FILE), b"{").unwrap();
        let e = Installed::open(d.path()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let e = e.to_string();
        assert!(
            e.starts_with("installed.json: ")
                && e.contains("the file is corrupt")
                && e.contains(
                    "Restore it from a backup; moving it aside makes every installed node"
                ),
            "{e}"
        );
        assert_eq!(std::fs::read(d.path().join(FILE)).unwrap(), b"{");
    }
}
