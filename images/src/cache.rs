//! The image cache on disk (layout: [`site::catalog`]): atomic writes,
//! content checks, `list`, `verify`, `gc`, and the check bootd runs before
//! it serves a site.
//!
//! A file's check is its size and sha256 against the set's manifest. To keep
//! bootd's start and a second `fetch` cheap, a successful hash is recorded in
//! `<set>/.verified.json` with the file's size, mtime and inode; a file whose
//! metadata still matches is not hashed again (`verify` always re-hashes).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use site::catalog::{self, Manifest, ManifestFile};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

const STAMPS: &str = ".verified.json";
/// The stream metadata that named a version, kept next to its sets.
pub use site::catalog::STREAM_DOC;

#[derive(Debug, Clone)]
pub struct Cache {
    pub root: PathBuf,
}

/// One set found in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetInfo {
    /// Relative to the root: `<stream>/<version>/<arch>/<platform>`.
    pub dir: String,
    pub manifest: Manifest,
}

/// What is wrong with one cached file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileProblem {
    #[error("{path}: missing")]
    Missing { path: PathBuf },
    #[error("{path}: {got} bytes, the manifest says {want}")]
    Size { path: PathBuf, want: u64, got: u64 },
    #[error("{path}: sha256 {got}, the manifest says {want}")]
    Sha256 {
        path: PathBuf,
        want: String,
        got: String,
    },
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: String },
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Stamp {
    size: u64,
    mtime_ns: i128,
    ino: u64,
    sha256: String,
}

fn stamp_of(md: &std::fs::Metadata, sha256: &str) -> Stamp {
    Stamp {
        size: md.len(),
        mtime_ns: md.mtime() as i128 * 1_000_000_000 + md.mtime_nsec() as i128,
        ino: md.ino(),
        sha256: sha256.to_string(),
    }
}

/// How hard [`Cache::check_set`] looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// Hash only files whose size, mtime or inode changed since they were last hashed.
    Stamped,
    /// Hash every file.
    Full,
}

impl Cache {
    pub fn new(root: impl Into<PathBuf>) -> Cache {
        Cache { root: root.into() }
    }

    pub fn set_path(&self, stream: &str, version: &str, arch: &str, platform: &str) -> PathBuf {
        self.root
            .join(catalog::set_dir(stream, version, arch, platform))
    }

    /// Every set with a readable manifest, sorted by directory.
    pub fn list(&self) -> std::io::Result<Vec<SetInfo>> {
        let mut out = Vec::new();
        for stream in subdirs(&self.root)? {
            for version in subdirs(&self.root.join(&stream))? {
                for arch in subdirs(&self.root.join(&stream).join(&version))? {
                    for platform in subdirs(&self.root.join(&stream).join(&version).join(&arch))? {
                        let dir = catalog::set_dir(&stream, &version, &arch, &platform);
                        if let Ok(manifest) = catalog::read_manifest(&self.root.join(&dir)) {
                            out.push(SetInfo { dir, manifest });
                        }
                    }
                }
            }
        }
        out.sort_by(|a, b| a.dir.cmp(&b.dir));
        Ok(out)
    }

    /// Checks every file of the set in `dir` (relative to the root) against
    /// its manifest; records successful hashes. Empty: all good.
    pub fn check_set(&self, dir: &str, manifest: &Manifest, depth: Depth) -> Vec<FileProblem> {
        let abs = self.root.join(dir);
        let mut stamps = read_stamps(&abs);
        let mut problems = Vec::new();
        let mut changed = false;
        for f in &manifest.files {
            match check_file(
                &abs,
                f,
                stamps.get(&f.name).filter(|_| depth == Depth::Stamped),
            ) {
                Ok(Some(stamp)) => {
                    stamps.insert(f.name.clone(), stamp);
                    changed = true;
                }
                Ok(None) => {}
                Err(p) => {
                    changed |= stamps.remove(&f.name).is_some();
                    problems.push(p);
                }
            }
        }
        if changed {
            // Best effort: a read-only cache (bootd's view) is still checked,
            // only not remembered.
            let _ = write_atomic(
                &abs.join(STAMPS),
                &serde_json::to_vec_pretty(&stamps).unwrap_or_default(),
            );
        }
        problems
    }

    /// Records that `name` in `dir` was just hashed with this result.
    pub(crate) fn record_hash(
        &self,
        abs_dir: &Path,
        name: &str,
        sha256: &str,
    ) -> std::io::Result<()> {
        let md = std::fs::metadata(abs_dir.join(name))?;
        let mut stamps = read_stamps(abs_dir);
        stamps.insert(name.to_string(), stamp_of(&md, sha256));
        write_atomic(&abs_dir.join(STAMPS), &serde_json::to_vec_pretty(&stamps)?)
    }

    /// Points `latest` for one arch/platform of a stream at `version`.
    pub fn set_latest(
        &self,
        stream: &str,
        arch: &str,
        platform: &str,
        version: &str,
    ) -> std::io::Result<()> {
        let mut latest = catalog::read_latest(&self.root, stream).unwrap_or_default();
        let key = format!("{arch}/{platform}");
        if latest.get(&key).map(String::as_str) == Some(version) {
            return Ok(());
        }
        latest.insert(key, version.to_string());
        write_atomic(
            &catalog::latest_path(&self.root, stream),
            &serde_json::to_vec_pretty(&latest)?,
        )
    }

    /// Removes every set that none of `keep` (directories relative to the
    /// root) names, then empty directories, stream documents of versions with
    /// no set left, and `latest` entries pointing at removed sets. Only
    /// directories holding a manifest are ever removed: files a site names by
    /// local path elsewhere below the root are left alone.
    pub fn gc(&self, keep: &BTreeSet<String>, dry_run: bool) -> std::io::Result<Vec<String>> {
        let mut removed = Vec::new();
        for set in self.list()? {
            if keep.contains(&set.dir) {
                continue;
            }
            if !dry_run {
                std::fs::remove_dir_all(self.root.join(&set.dir))?;
            }
            removed.push(set.dir);
        }
        if dry_run {
            return Ok(removed);
        }
        let left: BTreeSet<String> = self.list()?.into_iter().map(|s| s.dir).collect();
        for stream in subdirs(&self.root)? {
            let sdir = self.root.join(&stream);
            for version in subdirs(&sdir)? {
                let vdir = sdir.join(&version);
                let prefix = format!("{stream}/{version}/");
                if !left.iter().any(|d| d.starts_with(&prefix)) && vdir.join(STREAM_DOC).is_file() {
                    std::fs::remove_file(vdir.join(STREAM_DOC))?;
                }
                remove_empty_dirs(&vdir)?;
            }
            if let Ok(mut latest) = catalog::read_latest(&self.root, &stream) {
                let before = latest.len();
                latest.retain(|ap, v| left.contains(&format!("{stream}/{v}/{ap}")));
                if latest.is_empty() {
                    std::fs::remove_file(catalog::latest_path(&self.root, &stream))?;
                } else if latest.len() != before {
                    write_atomic(
                        &catalog::latest_path(&self.root, &stream),
                        &serde_json::to_vec_pretty(&latest)?,
                    )?;
                }
            }
            remove_empty_dirs(&sdir)?;
        }
        Ok(removed)
    }
}

/// The set directories a site needs: resolved `catalog:` sets, and any set
/// directory that a local-path image set points into.
pub fn referenced_sets(site: &site::Site) -> BTreeSet<String> {
    let mut keep = BTreeSet::new();
    for set in site.images.sets.values() {
        match &set.catalog {
            Some(c) => {
                if let Ok(r) = &c.resolved {
                    keep.insert(r.dir.clone());
                }
            }
            None => {
                for p in [Some(&set.kernel), Some(&set.initramfs), set.rootfs.as_ref()]
                    .into_iter()
                    .flatten()
                {
                    // <stream>/<version>/<arch>/<platform>/<file>
                    let parts: Vec<&str> = p.split('/').collect();
                    if parts.len() == 5 {
                        keep.insert(parts[..4].join("/"));
                    }
                }
            }
        }
    }
    keep
}

/// Why bootd must not serve a site's `catalog:` sets.
#[derive(Debug, thiserror::Error)]
#[error("{}", render_site_problems(.problems))]
pub struct SiteImagesError {
    pub problems: Vec<String>,
}

fn render_site_problems(p: &[String]) -> String {
    let mut s = format!(
        "{} image set problem{}:",
        p.len(),
        if p.len() == 1 { "" } else { "s" }
    );
    for line in p {
        s.push_str("\n  ");
        s.push_str(line);
    }
    s
}

/// The exact command that fetches a site's catalog set.
pub fn fetch_command(site: &site::Site, set: &str) -> String {
    let path = std::fs::canonicalize(&site.source).unwrap_or_else(|_| site.source.clone());
    format!("images fetch --site {} --set {set}", path.display())
}

/// Checks that every `catalog:` set of `site` is in the cache and intact
/// (sizes and sha256, see [`Depth::Stamped`]). Every problem names the
/// command that fixes it.
pub fn check_site(site: &site::Site) -> Result<(), SiteImagesError> {
    let cache = Cache::new(&site.images.root);
    let mut problems = Vec::new();
    for (name, set) in &site.images.sets {
        let Some(c) = &set.catalog else { continue };
        match &c.resolved {
            Err(why) => problems.push(format!(
                "images.sets.{name}: {why}; fetch it with: {}",
                fetch_command(site, name)
            )),
            Ok(r) => {
                for p in cache.check_set(&r.dir, &r.manifest, Depth::Stamped) {
                    problems.push(format!(
                        "images.sets.{name}: {p}; fetch it again with: {}",
                        fetch_command(site, name)
                    ));
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(SiteImagesError { problems })
    }
}

/// Checks one file; `Ok(Some(stamp))` when it was hashed (and is good),
/// `Ok(None)` when the stamp vouched for it.
fn check_file(
    dir: &Path,
    f: &ManifestFile,
    stamp: Option<&Stamp>,
) -> Result<Option<Stamp>, FileProblem> {
    let path = dir.join(&f.name);
    let md = match std::fs::metadata(&path) {
        Ok(m) if m.is_file() => m,
        Ok(_) => return Err(FileProblem::Missing { path }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(FileProblem::Missing { path })
        }
        Err(e) => {
            return Err(FileProblem::Io {
                path,
                error: e.to_string(),
            })
        }
    };
    if md.len() != f.size {
        return Err(FileProblem::Size {
            path,
            want: f.size,
            got: md.len(),
        });
    }
    if stamp.is_some_and(|s| *s == stamp_of(&md, &f.sha256)) {
        return Ok(None);
    }
    let got = sha256_file(&path).map_err(|e| FileProblem::Io {
        path: path.clone(),
        error: e.to_string(),
    })?;
    if !got.eq_ignore_ascii_case(&f.sha256) {
        return Err(FileProblem::Sha256 {
            path,
            want: f.sha256.clone(),
            got,
        });
    }
    Ok(Some(stamp_of(&md, &f.sha256)))
}

fn read_stamps(dir: &Path) -> BTreeMap<String, Stamp> {
    std::fs::read(dir.join(STAMPS))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `bytes` to `path` so that readers see the old content or the new,
/// never a mix, and the new content survives a crash: a temporary name in
/// the same directory, fsync, rename, fsync of the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    sync_dir(dir)
}

pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Names of the subdirectories of `dir` that are catalog components (so
/// hidden and temporary entries are skipped); empty when `dir` is missing.
fn subdirs(dir: &Path) -> std::io::Result<Vec<String>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut v = Vec::new();
    for e in rd {
        let e = e?;
        if e.file_type()?.is_dir() {
            if let Some(n) = e.file_name().to_str().filter(|n| catalog::is_component(n)) {
                v.push(n.to_string());
            }
        }
    }
    v.sort();
    Ok(v)
}

/// Removes `dir` and its subdirectories, bottom-up, where they are empty.
fn remove_empty_dirs(dir: &Path) -> std::io::Result<()> {
    if !dir.is_dir() {
        return Ok(());
    }
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            remove_empty_dirs(&e.path())?;
        }
    }
    if std::fs::read_dir(dir)?.next().is_none() {
        std::fs::remove_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(files: &[(&str, &[u8])]) -> Manifest {
        Manifest {
            stream: "s".into(),
            version: "1".into(),
            arch: "x86_64".into(),
            platform: "metal".into(),
            files: files
                .iter()
                .map(|(n, b)| ManifestFile {
                    role: "kernel".into(),
                    format: "pxe".into(),
                    name: n.to_string(),
                    sha256: hex(&Sha256::digest(b)),
                    size: b.len() as u64,
                    location: format!("http://h/{n}"),
                    signature: None,
                })
                .collect(),
        }
    }

    #[test]
    fn stamped_check_rehashes_only_changed_files() {
        let root = tempfile::tempdir().unwrap();
        let cache = Cache::new(root.path());
        let dir = "s/1/x86_64/metal";
        std::fs::create_dir_all(root.path().join(dir)).unwrap();
        std::fs::write(root.path().join(dir).join("k"), b"kernel").unwrap();
        let m = manifest(&[("k", b"kernel")]);
        assert!(cache.check_set(dir, &m, Depth::Stamped).is_empty());
        assert!(root.path().join(dir).join(STAMPS).is_file());
        // Same size, other bytes, new mtime: the stamp no longer matches.
        std::fs::write(root.path().join(dir).join("k"), b"KERNEL").unwrap();
        let p = cache.check_set(dir, &m, Depth::Stamped);
        assert!(
            matches!(p.as_slice(), [FileProblem::Sha256 { .. }]),
            "{p:?}"
        );
        std::fs::remove_file(root.path().join(dir).join("k")).unwrap();
        let p = cache.check_set(dir, &m, Depth::Full);
        assert!(
            matches!(p.as_slice(), [FileProblem::Missing { .. }]),
            "{p:?}"
        );
    }

    #[test]
    fn write_atomic_leaves_no_temporary() {
        let root = tempfile::tempdir().unwrap();
        let p = root.path().join("a/b.json");
        write_atomic(&p, b"{}").unwrap();
        write_atomic(&p, b"[]").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"[]");
        let names: Vec<_> = std::fs::read_dir(root.path().join("a"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("b.json")]);
    }
}
