//! The image cache's on-disk contract, in one place: the `images` crate
//! writes it (`images fetch`), the site crate reads it to turn a `catalog:`
//! image set into files below `images.root`, and bootd serves those files.
//!
//! Layout below `images.root`:
//! ```text
//! <stream>/<version>/<arch>/<platform>/<file>      the artifacts, names as upstream
//! <stream>/<version>/<arch>/<platform>/manifest.json  what the set holds (written last)
//! <stream>/<version>/stream.json                   the stream metadata that named this version
//! <stream>/latest.json                             {"<arch>/<platform>": "<version>"}
//! ```
//! A set exists only once its `manifest.json` does; the manifest is written
//! after every file it lists has been verified and renamed into place, so a
//! reader never sees a set with a half-written file.
//!
//! Invariant: every name component (stream, version, arch, platform, file)
//! passes [`is_component`], so a set directory never escapes the root.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The set's manifest file name.
pub const MANIFEST: &str = "manifest.json";
/// Per-stream pointer to the newest version fetched as "latest".
pub const LATEST: &str = "latest.json";
/// The version keyword that follows the stream.
pub const VERSION_LATEST: &str = "latest";

/// What a site names: a stream, a version (or "latest"), an architecture
/// and a platform (`metal` for network boot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogRef {
    pub stream: String,
    pub version: String,
    pub arch: String,
    pub platform: String,
    /// Where the stream metadata comes from (URL or file); `None`: the
    /// default for the stream name (Fedora CoreOS's published streams).
    pub stream_url: Option<String>,
}

/// One file of a set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestFile {
    /// `kernel`, `initramfs`, `rootfs` or `disk`.
    pub role: String,
    /// The stream metadata's format key, e.g. `pxe`, `raw.xz`, `ova.gz`.
    pub format: String,
    /// File name inside the set directory.
    pub name: String,
    pub sha256: String,
    pub size: u64,
    /// Where it was downloaded from.
    pub location: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub stream: String,
    pub version: String,
    pub arch: String,
    pub platform: String,
    pub files: Vec<ManifestFile>,
}

impl Manifest {
    /// The first file with this role (kernel, initramfs, rootfs).
    pub fn file(&self, role: &str) -> Option<&ManifestFile> {
        self.files.iter().find(|f| f.role == role)
    }
}

/// A name usable as one path component: ASCII letters, digits, `.`, `_`,
/// `-`, not starting with `.`, at most 128 bytes.
pub fn is_component(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'+'))
}

/// `<stream>/<version>/<arch>/<platform>`, relative to the image root.
pub fn set_dir(stream: &str, version: &str, arch: &str, platform: &str) -> String {
    format!("{stream}/{version}/{arch}/{platform}")
}

pub fn latest_path(root: &Path, stream: &str) -> PathBuf {
    root.join(stream).join(LATEST)
}

/// `<root>/<stream>/latest.json`: "<arch>/<platform>" → version.
pub fn read_latest(root: &Path, stream: &str) -> Result<BTreeMap<String, String>, String> {
    let p = latest_path(root, stream);
    let bytes = std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", p.display()))
}

pub fn read_manifest(dir: &Path) -> Result<Manifest, String> {
    let p = dir.join(MANIFEST);
    let bytes = std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    let m: Manifest =
        serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", p.display()))?;
    if let Some(bad) = m.files.iter().find(|f| !is_component(&f.name)) {
        return Err(format!(
            "{}: file name {:?} is not a plain name",
            p.display(),
            bad.name
        ));
    }
    Ok(m)
}

/// A catalog reference resolved against the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The concrete version ("latest" looked up).
    pub version: String,
    /// Set directory relative to the root.
    pub dir: String,
    pub manifest: Manifest,
}

impl Resolved {
    /// Path of a role's file relative to the root, as served under `/images/`.
    pub fn rel(&self, role: &str) -> Option<String> {
        self.manifest
            .file(role)
            .map(|f| format!("{}/{}", self.dir, f.name))
    }
}

/// Looks a reference up in the cache below `root`. The error says what is
/// missing (not fetched yet, no "latest" recorded, no kernel in the set).
pub fn resolve(root: &Path, r: &CatalogRef) -> Result<Resolved, String> {
    let version = if r.version == VERSION_LATEST {
        let latest = read_latest(root, &r.stream)
            .map_err(|e| format!("no \"latest\" recorded for stream {} ({e})", r.stream))?;
        let key = format!("{}/{}", r.arch, r.platform);
        match latest.get(&key) {
            Some(v) if is_component(v) => v.clone(),
            _ => return Err(format!("no \"latest\" recorded for {} {key}", r.stream)),
        }
    } else {
        r.version.clone()
    };
    let dir = set_dir(&r.stream, &version, &r.arch, &r.platform);
    let manifest = read_manifest(&root.join(&dir)).map_err(|e| {
        format!(
            "{} {version} {}/{} is not in the cache ({e})",
            r.stream, r.arch, r.platform
        )
    })?;
    for role in ["kernel", "initramfs"] {
        if manifest.file(role).is_none() {
            return Err(format!(
                "{dir}/{MANIFEST} lists no {role} (fetch the pxe format)"
            ));
        }
    }
    Ok(Resolved {
        version,
        dir,
        manifest,
    })
}

/// The stream metadata kept beside a version's sets.
pub const STREAM_DOC: &str = "stream.json";

/// A cloud image ID the cached stream metadata of `stream` `version` lists:
/// `architectures.<arch>.images.<provider>.regions.<region>.image` (the
/// shape of CoreOS stream metadata for `aws` and `aliyun`). The error names
/// what is missing, and the regions it has.
pub fn cloud_image(
    root: &Path,
    stream: &str,
    version: &str,
    arch: &str,
    provider: &str,
    region: &str,
) -> Result<String, String> {
    let p = root.join(stream).join(version).join(STREAM_DOC);
    let bytes = std::fs::read(&p).map_err(|e| {
        format!(
            "{}: {e} (fetch {stream} {version} with `images fetch`)",
            p.display()
        )
    })?;
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", p.display()))?;
    let regions = &v["architectures"][arch]["images"][provider]["regions"];
    if let Some(id) = regions[region]["image"].as_str().filter(|i| !i.is_empty()) {
        return Ok(id.to_string());
    }
    let known: Vec<&str> = regions
        .as_object()
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default();
    Err(if known.is_empty() {
        format!("{stream} {version} ({arch}) lists no {provider} images")
    } else {
        format!(
            "{stream} {version} ({arch}) has no {provider} image in region {region} (it has: {})",
            known.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cloud_images_by_region() {
        let root = tempfile::tempdir().unwrap();
        let d = root.path().join("rhcos-4.18/418.94.1/");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join(STREAM_DOC),
            r#"{"architectures": {"x86_64": {"images": {"aliyun": {"regions": {
                 "cn-hangzhou": {"release": "418.94.1", "image": "m-bp1abc"},
                 "ap-southeast-1": {"release": "418.94.1", "image": "m-t4xyz"}}}}}}}"#,
        )
        .unwrap();
        let r = |region: &str| {
            cloud_image(
                root.path(),
                "rhcos-4.18",
                "418.94.1",
                "x86_64",
                "aliyun",
                region,
            )
        };
        assert_eq!(r("cn-hangzhou").unwrap(), "m-bp1abc");
        let e = r("eu-central-1").unwrap_err();
        assert!(
            e.contains("no aliyun image in region eu-central-1")
                && e.contains("ap-southeast-1, cn-hangzhou"),
            "{e}"
        );
        assert!(
            cloud_image(root.path(), "rhcos-4.18", "1", "x86_64", "aliyun", "x")
                .unwrap_err()
                .contains("images fetch")
        );
    }

    #[test]
    fn components() {
        assert!(is_component("39.20231101.3.0"));
        assert!(is_component("rhcos-4.14"));
        assert!(!is_component(".."));
        assert!(!is_component("a/b"));
        assert!(!is_component(""));
        assert!(!is_component(".hidden"));
    }

    #[test]
    fn resolves_latest_through_the_pointer() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("stable/39.1/x86_64/metal");
        std::fs::create_dir_all(&dir).unwrap();
        let f = |role: &str, name: &str| ManifestFile {
            role: role.into(),
            format: "pxe".into(),
            name: name.into(),
            sha256: "00".into(),
            size: 1,
            location: "http://x/".into(),
            signature: None,
        };
        let m = Manifest {
            stream: "stable".into(),
            version: "39.1".into(),
            arch: "x86_64".into(),
            platform: "metal".into(),
            files: vec![f("kernel", "k"), f("initramfs", "i.img")],
        };
        let r = CatalogRef {
            stream: "stable".into(),
            version: "latest".into(),
            arch: "x86_64".into(),
            platform: "metal".into(),
            stream_url: None,
        };
        assert!(resolve(root.path(), &r)
            .unwrap_err()
            .contains("no \"latest\""));
        std::fs::write(dir.join(MANIFEST), serde_json::to_vec(&m).unwrap()).unwrap();
        std::fs::write(
            latest_path(root.path(), "stable"),
            r#"{"x86_64/metal":"39.1"}"#,
        )
        .unwrap();
        let got = resolve(root.path(), &r).unwrap();
        assert_eq!(got.version, "39.1");
        assert_eq!(got.rel("kernel").unwrap(), "stable/39.1/x86_64/metal/k");
        assert_eq!(got.rel("rootfs"), None);
    }
}
