//! Golden files, the same way in every crate's tests: [`check`] compares
//! what the code makes now with the file; `UPDATE_GOLDEN=1` writes the file
//! instead (review the diff, then commit).

use std::path::Path;

/// Compares `got` with the golden file at `path`; a difference names the
/// file and shows the first lines that differ.
pub fn check(path: &Path, got: &str) {
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(path, got).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return;
    }
    let want = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create)",
            path.display()
        )
    });
    if got == want {
        return;
    }
    let diff: Vec<String> = got
        .lines()
        .zip(want.lines())
        .enumerate()
        .filter(|(_, (g, w))| g != w)
        .take(10)
        .map(|(i, (g, w))| format!("line {}:\n  got  {g}\n  want {w}", i + 1))
        .collect();
    let (gl, wl) = (got.lines().count(), want.lines().count());
    let lengths = if gl == wl {
        String::new()
    } else {
        format!("\n({gl} lines, want {wl})")
    };
    panic!(
        "{} differs from what the code makes now (UPDATE_GOLDEN=1 to accept it):\n{}{lengths}",
        path.display(),
        diff.join("\n")
    );
}
