//! `images.signingKeys` and `images.requireSignatures`: key files are read
//! and parsed when the site is validated, every problem reported at once;
//! catalog sets without a signature check are warned about by
//! `--check-config` (`site::exposure::warnings`). Keys that parse, and the
//! checks they make, are tested with gpg's keys in images/tests/it/signatures.rs.

mod common;
use common::{assert_problems, lab};

/// The lab site with `images` keys added, and a catalog set.
fn with(keys: &str, catalog: bool) -> (tempfile::TempDir, std::path::PathBuf) {
    lab(|t| {
        let t = t.replace(
            "  root: ../../target/lab-images\n",
            &format!("  root: ../../target/lab-images\n{keys}"),
        );
        if catalog {
            t.replace(
                "      kernel: lab/kernel\n      initramfs: lab/initramfs\n",
                "      catalog: { stream: stable }\n",
            )
        } else {
            t
        }
    })
}

#[test]
fn unreadable_and_broken_key_files_and_require_without_keys_are_refused_at_once() {
    let (dir, path) = with(
        "  signingKeys: [keys/missing.gpg, keys/not-a-key.asc, /dev/null]\n",
        false,
    );
    std::fs::create_dir_all(dir.path().join("keys")).unwrap();
    std::fs::write(
        dir.path().join("keys/not-a-key.asc"),
        "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nbm90IGEga2V5\n-----END PGP PUBLIC KEY BLOCK-----\n",
    )
    .unwrap();
    let err = site::load(&path).unwrap_err();
    assert_problems(
        &err,
        &[
            // Relative to the site file's directory, like its other paths.
            &format!(
                "images.signingKeys[0]: {}: cannot read",
                dir.path().join("keys/missing.gpg").display()
            ),
            &format!(
                "images.signingKeys[1]: {}: not an OpenPGP public key file",
                dir.path().join("keys/not-a-key.asc").display()
            ),
            "images.signingKeys[2]: /dev/null: ",
        ],
    );
    assert!(err.problems.iter().all(|p| p.file == path), "{err}");

    let (_d, path) = with("  requireSignatures: true\n", true);
    let err = site::load(&path).unwrap_err();
    assert_problems(
        &err,
        &["images.requireSignatures: true needs images.signingKeys"],
    );
    assert_eq!(err.problems.len(), 1, "{err}");
}

#[test]
fn catalog_sets_without_keys_are_warned_about() {
    let (_d, path) = with("", false);
    let s = site::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert!(!s.images.signing.enabled() && !s.images.signing.require);
    assert_eq!(site::exposure::warnings(&s), Vec::<String>::new());

    let (_d, path) = with("", true);
    let s = site::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let w = site::exposure::warnings(&s);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].starts_with("images.signingKeys: none: the catalog sets' artifacts (lab-x86_64)"),
        "{w:?}"
    );
    // Saying so explicitly changes nothing.
    let (_d, path) = with("  signingKeys: []\n  requireSignatures: false\n", true);
    let s = site::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(site::exposure::warnings(&s), w);
}
