//! Where the appliance's configuration is when no flag or key says: one
//! place for every binary, `/etc/bare-metal-boot/`. Installs from before
//! kept it in `/etc/bootd/`; while only the old place exists, it is used and
//! a warning names both.

use std::path::{Path, PathBuf};

/// The site description (`--site` of every daemon).
pub const SITE: &str = "/etc/bare-metal-boot/site.yaml";
/// Where [`SITE`] was before.
pub const OLD_SITE: &str = "/etc/bootd/site.yaml";
/// The one directory a BMC's password file and CA bundle may be in
/// (`host.api.bmcFiles`, docs/bmc.md).
pub const BMC_FILES: &str = "/etc/bare-metal-boot/bmc";
/// Where [`BMC_FILES`] was before.
pub const OLD_BMC_FILES: &str = "/etc/bootd/bmc";

/// Which of a default path and its old place is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chosen {
    Default,
    Old,
}

/// `Old` only when `default` is certainly absent and `old` exists; a
/// `default` that cannot be looked at (permissions) counts as there, so
/// its own error is what gets reported.
pub fn choose(default: &Path, old: &Path) -> Chosen {
    if matches!(default.try_exists(), Ok(false)) && old.exists() {
        Chosen::Old
    } else {
        Chosen::Default
    }
}

/// `default`, or `old` while only it exists, with a deprecation warning
/// naming both; `what` says what it is (a flag or key).
pub fn default_or_old(default: &Path, old: &Path, what: &str) -> PathBuf {
    match choose(default, old) {
        Chosen::Default => default.to_path_buf(),
        Chosen::Old => {
            tracing::warn!(
                old = %old.display(),
                new = %default.display(),
                "{what}: {} does not exist, using {}, the old default location (deprecated: move it to {})",
                default.display(),
                old.display(),
                default.display()
            );
            old.to_path_buf()
        }
    }
}

/// The site description: `given` (`--site`), else [`SITE`], or
/// [`OLD_SITE`] while only it exists. Call it once logging is set up.
pub fn site(given: Option<PathBuf>) -> PathBuf {
    given.unwrap_or_else(|| default_or_old(Path::new(SITE), Path::new(OLD_SITE), "--site"))
}

/// The BMC files directory when `host.api.bmcFiles` is not set:
/// [`BMC_FILES`], or [`OLD_BMC_FILES`] while only it exists.
pub fn bmc_files() -> PathBuf {
    default_or_old(
        Path::new(BMC_FILES),
        Path::new(OLD_BMC_FILES),
        "host.api.bmcFiles",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_old_place_only_while_the_new_one_is_missing() {
        let d = tempfile::tempdir().unwrap();
        let (new, old) = (
            d.path().join("new/site.yaml"),
            d.path().join("old/site.yaml"),
        );
        // Neither: the default (its absence is what gets reported).
        assert_eq!(choose(&new, &old), Chosen::Default);
        assert_eq!(default_or_old(&new, &old, "--site"), new);
        std::fs::create_dir_all(old.parent().unwrap()).unwrap();
        std::fs::write(&old, "old").unwrap();
        assert_eq!(choose(&new, &old), Chosen::Old);
        assert_eq!(default_or_old(&new, &old, "--site"), old);
        std::fs::create_dir_all(new.parent().unwrap()).unwrap();
        std::fs::write(&new, "new").unwrap();
        // Both: the new one wins.
        assert_eq!(choose(&new, &old), Chosen::Default);
        std::fs::remove_file(&old).unwrap();
        assert_eq!(choose(&new, &old), Chosen::Default);
        // A directory, as host.api.bmcFiles is.
        let (new_dir, old_dir) = (d.path().join("bmc-new"), d.path().join("bmc-old"));
        std::fs::create_dir(&old_dir).unwrap();
        assert_eq!(choose(&new_dir, &old_dir), Chosen::Old);
    }

    #[test]
    fn a_given_site_is_taken_as_given() {
        assert_eq!(
            site(Some("/x/site.yaml".into())),
            PathBuf::from("/x/site.yaml")
        );
    }
}
