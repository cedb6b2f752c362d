//! A real small filesystem for full-disk tests: a tmpfs mounted over a
//! directory, filled on demand, unmounted when dropped (also when the test
//! panics). Mounting needs root, as the test command runs.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=`, e.g. "1m") at `path`
    /// (created if missing).
    pub fn mount(path: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(path).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0755")])
            .arg("full-disk-test")
            .arg(path)
            .output()
            .expect("mount not found");
        assert!(
            out.status.success(),
            "mounting a tmpfs at {} (this test needs root): {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs {
            path: path.to_path_buf(),
        }
    }

    /// Fills the filesystem with `<path>/filler` until a write fails with
    /// ENOSPC; returns the filler's path (remove it to give the space back).
    pub fn fill(&self) -> PathBuf {
        let p = self.path.join("filler");
        let mut f = std::fs::File::create(&p).unwrap();
        for chunk in [vec![0x5a_u8; 64 * 1024], vec![0x5a_u8; 4096], vec![0x5a]] {
            loop {
                match f.write(&chunk) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(28) => break,
                    Err(e) => panic!("filling {}: {e}", p.display()),
                }
            }
        }
        p
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: the daemon under test may still hold files open.
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}
