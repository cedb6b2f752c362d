//! The lab example site copied into a temporary directory, edited.

use std::path::{Path, PathBuf};

/// `examples/lab` with its state directory inside the copy, its site text
/// passed through `edit`.
#[allow(dead_code)]
pub fn lab(edit: impl FnOnce(String) -> String) -> (tempfile::TempDir, PathBuf) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab");
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(src.join("site.yaml"))
        .unwrap()
        .replace("stateDir: ../../target/lab-state", "stateDir: state");
    std::fs::write(dir.path().join("site.yaml"), edit(text)).unwrap();
    std::fs::create_dir_all(dir.path().join("ignition")).unwrap();
    for e in std::fs::read_dir(src.join("ignition")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.path().join("ignition").join(e.file_name())).unwrap();
    }
    let site = dir.path().join("site.yaml");
    (dir, site)
}

/// Asserts that `err` names every problem in `expect` (each the start of
/// a `key: reason` line).
#[allow(dead_code)]
pub fn assert_problems(err: &site::SiteError, expect: &[&str]) {
    let got: Vec<String> = err
        .problems
        .iter()
        .map(|p| format!("{}: {}", p.key, p.reason))
        .collect();
    for e in expect {
        assert!(
            got.iter().any(|g| g.starts_with(e)),
            "missing problem {e:?}\n got:\n{}",
            got.join("\n")
        );
    }
}

/// Asserts that `err` has a problem at each of `keys` (key paths).
#[allow(dead_code)]
pub fn assert_keys(err: &site::SiteError, keys: &[&str]) {
    let got: Vec<_> = err.problems.iter().map(|p| p.key.as_str()).collect();
    for k in keys {
        assert!(got.contains(k), "{k} missing in {err}");
    }
}
