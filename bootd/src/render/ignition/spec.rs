//! Which Ignition spec version a config needs: the fields and values each
//! 3.x spec introduced.
//!
//! The table was derived from the published JSON schemas
//! (`config/v3_N/schema/ignition.json` in coreos/ignition, 3.0 to 3.6) by
//! walking each schema's properties into paths (`[]` for array items) and
//! taking the difference between consecutive versions
//! (`tests/tools/ignition-spec-diff.py` does it on a checkout); only the
//! topmost new path is listed, since its children cannot appear without it.
//! What a schema cannot show (a new URL scheme, hash function, filesystem
//! format or mode bit) comes from the same repository's
//! `docs/migrating-configs.md` and is in [`needs_for_value`]. Spec 3.6 and
//! 3.7 (experimental) added no field.

use serde_json::Value;
use std::fmt;

/// A spec version, e.g. 3.2.0. A `-experimental` suffix is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(pub u32, pub u32, pub u32);

impl Version {
    pub const V3_0: Version = Version(3, 0, 0);

    /// Parses `3.2.0`, `3.2`, `3` or `3.5.0-experimental`.
    pub fn parse(v: &str) -> Option<Version> {
        let v = v.trim().split('-').next()?;
        let mut it = v.split('.');
        let major = it.next()?.parse().ok()?;
        let mut num = || it.next().map(str::parse::<u32>).transpose().ok();
        let minor = num()?.unwrap_or(0);
        let patch = num()?.unwrap_or(0);
        Some(Version(major, minor, patch))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// Paths (from the config's root, `[]` for any array item) first valid in
/// the given spec version. Everything else is valid since 3.0.0.
const NEW_FIELDS: &[(&str, Version)] = &[
    // 3.1.0
    (".ignition.config.merge[].compression", Version(3, 1, 0)),
    (".ignition.config.merge[].httpHeaders", Version(3, 1, 0)),
    (".ignition.config.replace.compression", Version(3, 1, 0)),
    (".ignition.config.replace.httpHeaders", Version(3, 1, 0)),
    (".ignition.proxy", Version(3, 1, 0)),
    (
        ".ignition.security.tls.certificateAuthorities[].compression",
        Version(3, 1, 0),
    ),
    (
        ".ignition.security.tls.certificateAuthorities[].httpHeaders",
        Version(3, 1, 0),
    ),
    (".storage.files[].append[].httpHeaders", Version(3, 1, 0)),
    (".storage.files[].contents.httpHeaders", Version(3, 1, 0)),
    (".storage.filesystems[].mountOptions", Version(3, 1, 0)),
    // 3.2.0
    (".passwd.groups[].shouldExist", Version(3, 2, 0)),
    (".passwd.users[].shouldExist", Version(3, 2, 0)),
    (".storage.disks[].partitions[].resize", Version(3, 2, 0)),
    (".storage.luks", Version(3, 2, 0)),
    // 3.3.0
    (".kernelArguments", Version(3, 3, 0)),
    // 3.4.0
    (
        ".storage.luks[].clevis.tang[].advertisement",
        Version(3, 4, 0),
    ),
    (".storage.luks[].discard", Version(3, 4, 0)),
    (".storage.luks[].openOptions", Version(3, 4, 0)),
    // 3.5.0
    (".storage.luks[].cex", Version(3, 5, 0)),
];

/// The version a value at `path` needs beyond its field's own.
fn needs_for_value(path: &str, v: &Value) -> Version {
    let key = path.rsplit('.').next().unwrap_or_default();
    match (key, v) {
        // Resource sources: gs:// arrived in 3.2.0, S3 access point ARNs in 3.4.0.
        ("source", Value::String(s)) if s.starts_with("arn:") => Version(3, 4, 0),
        ("source", Value::String(s)) if s.starts_with("gs://") => Version(3, 2, 0),
        // verification.hash: sha256 arrived in 3.1.0 (3.0.0 knew sha512 only).
        ("hash", Value::String(s)) if s.starts_with("sha256-") => Version(3, 1, 0),
        ("format", Value::String(s)) if s == "none" && path == ".storage.filesystems[].format" => {
            Version(3, 3, 0)
        }
        // setuid, setgid and sticky bits are honoured from 3.6.0 (ignored before).
        ("mode", Value::Number(n))
            if (path == ".storage.files[].mode" || path == ".storage.directories[].mode")
                && n.as_u64().is_some_and(|m| m & 0o7000 != 0) =>
        {
            Version(3, 6, 0)
        }
        _ => Version::V3_0,
    }
}

/// The lowest 3.x spec version that has every field and value `cfg` uses.
pub fn min_version(cfg: &Value) -> Version {
    fn walk(v: &Value, path: &mut String, min: &mut Version) {
        match v {
            Value::Object(m) => {
                for (k, child) in m {
                    let len = path.len();
                    path.push('.');
                    path.push_str(k);
                    if let Some((_, need)) = NEW_FIELDS.iter().find(|(p, _)| p == path) {
                        *min = (*min).max(*need);
                    }
                    *min = (*min).max(needs_for_value(path, child));
                    walk(child, path, min);
                    path.truncate(len);
                }
            }
            Value::Array(a) => {
                let len = path.len();
                path.push_str("[]");
                for child in a {
                    walk(child, path, min);
                }
                path.truncate(len);
            }
            _ => {}
        }
    }
    let mut min = Version::V3_0;
    walk(cfg, &mut String::new(), &mut min);
    min
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn versions_parse() {
        assert_eq!(Version::parse("3.2.0"), Some(Version(3, 2, 0)));
        assert_eq!(Version::parse(" 3.4 "), Some(Version(3, 4, 0)));
        assert_eq!(Version::parse("3.5.0-experimental"), Some(Version(3, 5, 0)));
        assert_eq!(Version::parse("1"), Some(Version(1, 0, 0)));
        assert_eq!(Version::parse("x.1"), None);
        assert_eq!(Version::parse("3.x"), None);
        assert_eq!(Version(3, 10, 1).to_string(), "3.10.1");
    }

    /// One config per version boundary: each uses exactly one thing that
    /// spec introduced, and needs exactly that spec.
    #[test]
    fn each_boundary() {
        let cases: Vec<(Value, Version)> = vec![
            (
                json!({"storage": {"files": [{"path": "/a", "mode": 420}]}}),
                Version(3, 0, 0),
            ),
            (
                json!({"storage": {"files": [{"path": "/a", "contents": {"verification": {"hash": "sha512-00"}}}]}}),
                Version(3, 0, 0),
            ),
            (
                json!({"ignition": {"proxy": {"httpProxy": "http://p"}}}),
                Version(3, 1, 0),
            ),
            (
                json!({"ignition": {"config": {"merge": [{"source": "http://x", "httpHeaders": []}]}}}),
                Version(3, 1, 0),
            ),
            (
                json!({"ignition": {"config": {"replace": {"source": "http://x", "compression": "gzip"}}}}),
                Version(3, 1, 0),
            ),
            (
                json!({"storage": {"filesystems": [{"device": "/dev/sda", "mountOptions": ["ro"]}]}}),
                Version(3, 1, 0),
            ),
            (
                json!({"storage": {"files": [{"path": "/a", "contents": {"verification": {"hash": "sha256-00"}}}]}}),
                Version(3, 1, 0),
            ),
            (
                json!({"storage": {"luks": [{"name": "root"}]}}),
                Version(3, 2, 0),
            ),
            (
                json!({"passwd": {"users": [{"name": "u", "shouldExist": false}]}}),
                Version(3, 2, 0),
            ),
            (
                json!({"storage": {"disks": [{"device": "/dev/sda", "partitions": [{"resize": true}]}]}}),
                Version(3, 2, 0),
            ),
            (
                json!({"storage": {"files": [{"path": "/a", "contents": {"source": "gs://b/o"}}]}}),
                Version(3, 2, 0),
            ),
            (
                json!({"kernelArguments": {"shouldExist": ["a"]}}),
                Version(3, 3, 0),
            ),
            (
                json!({"storage": {"filesystems": [{"device": "/dev/sda", "format": "none"}]}}),
                Version(3, 3, 0),
            ),
            (
                json!({"storage": {"filesystems": [{"device": "/dev/sda", "format": "xfs"}]}}),
                Version(3, 0, 0),
            ),
            (
                json!({"storage": {"luks": [{"name": "r", "discard": true}]}}),
                Version(3, 4, 0),
            ),
            (
                json!({"storage": {"luks": [{"name": "r", "openOptions": []}]}}),
                Version(3, 4, 0),
            ),
            (
                json!({"storage": {"luks": [{"name": "r", "clevis": {"tang": [{"url": "u", "advertisement": "{}"}]}}]}}),
                Version(3, 4, 0),
            ),
            (
                json!({"storage": {"files": [{"path": "/a", "contents": {"source": "arn:aws:s3:r:1:accesspoint/a/object/b"}}]}}),
                Version(3, 4, 0),
            ),
            (
                json!({"storage": {"luks": [{"name": "r", "cex": {"enabled": true}}]}}),
                Version(3, 5, 0),
            ),
            (
                json!({"storage": {"files": [{"path": "/a", "mode": 0o4755}]}}),
                Version(3, 6, 0),
            ),
            (
                json!({"storage": {"directories": [{"path": "/d", "mode": 0o1777}]}}),
                Version(3, 6, 0),
            ),
        ];
        for (cfg, want) in cases {
            assert_eq!(min_version(&cfg), want, "{cfg}");
        }
    }

    /// A key is new only at its own path: `shouldExist` under
    /// `kernelArguments` is 3.3's, `resize` elsewhere is nobody's.
    #[test]
    fn fields_are_matched_by_path() {
        assert_eq!(
            min_version(&json!({"storage": {"files": [{"path": "/resize", "resize": 1}]}})),
            Version(3, 0, 0)
        );
        assert_eq!(
            min_version(&json!({"storage": {"files": [{"path": "/a", "cex": true}]}})),
            Version(3, 0, 0)
        );
        assert_eq!(
            min_version(
                &json!({"systemd": {"units": [{"name": "a", "contents": "[Unit]\nmode=4755"}]}})
            ),
            Version(3, 0, 0)
        );
    }

    /// Every listed path starts at the root and names a field (no array
    /// marker at its end), and the list is in version order.
    #[test]
    fn table_is_well_formed() {
        for w in NEW_FIELDS.windows(2) {
            assert!(w[0].1 <= w[1].1, "{} after {}", w[1].0, w[0].0);
        }
        for (p, v) in NEW_FIELDS {
            assert!(p.starts_with('.') && !p.ends_with("[]"), "{p}");
            assert!(*v > Version::V3_0);
        }
    }
}
