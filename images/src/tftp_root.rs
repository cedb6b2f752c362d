//! `tftp-root`: bootd's TFTP root (host.tftp.root), assembled from the
//! network-boot binaries of each architecture instead of copied by hand.
//!
//! | arch | files | from |
//! |---|---|---|
//! | x86_64 | `ipxe.efi`, `snponly.efi`, `undionly.kpxe` | Debian's `ipxe` package (`/usr/lib/ipxe`) or `--ipxe-dir` |
//! | aarch64 | `ipxe-arm64.efi` | `--ipxe-arm64 FILE` (Debian's `ipxe` ships x86 builds only) |
//! | ppc64le | `core.elf`, `grub/powerpc-ieee1275/*.{mod,lst}` | `grub-mkimage` (grub-common) with the powerpc-ieee1275 modules of the *ppc64el* `grub-ieee1275-bin` (`--grub-ieee1275-dir`) |
//!
//! `core.elf` carries a memdisk with `ofnet.mod` and the netboot script
//! (`images/boot/grub-netboot.cfg`): Debian's GRUB 2.06 registers SLOF's NIC
//! only after ofnet is loaded a second or third time, so the script loads,
//! tries `net_bootp`, reloads, bounded; then points `$prefix` at the DHCP
//! next-server and runs `normal`, which asks bootd for `grub.cfg-01-<mac>`.
//!
//! Idempotent: a file whose bytes are already in place is not rewritten
//! (mtimes stay), and `core.elf` is reproducible (same inputs, same bytes).
//! bootd generates `boot.ipxe` and the GRUB configs itself: nothing here writes them.

use site::Arch;
use std::path::{Path, PathBuf};
use std::process::Command;

const NETBOOT_CFG: &str = include_str!("../boot/grub-netboot.cfg");
const EMBED_CFG: &str = "set prefix=(memdisk)\nnormal (memdisk)/netboot.cfg\n";
/// Built into core.elf. ofnet is not among them: it is loaded from the
/// memdisk so that it can be unloaded and loaded again until it finds the NIC.
const GRUB_MODULES: &[&str] = &[
    "net",
    "tftp",
    "http",
    "normal",
    "echo",
    "configfile",
    "linux",
    "test",
    "sleep",
    "reboot",
    "halt",
    "ls",
    "cat",
    "regexp",
    "elf",
    "boot",
    "minicmd",
    "memdisk",
    "tar",
];
const IPXE_X86: &[&str] = &["ipxe.efi", "snponly.efi", "undionly.kpxe"];

#[derive(Debug, Clone)]
pub struct Sources {
    pub ipxe_dir: PathBuf,
    pub ipxe_arm64: Option<PathBuf>,
    /// `.../usr/lib/grub/powerpc-ieee1275` of the ppc64el grub-ieee1275-bin.
    pub grub_ieee1275_dir: Option<PathBuf>,
    pub grub_mkimage: PathBuf,
    /// How often the netboot script tries to bring the NIC up (1-99).
    pub grub_net_tries: u32,
}

impl Default for Sources {
    fn default() -> Sources {
        Sources {
            ipxe_dir: PathBuf::from("/usr/lib/ipxe"),
            ipxe_arm64: None,
            grub_ieee1275_dir: None,
            grub_mkimage: PathBuf::from("grub-mkimage"),
            grub_net_tries: 8,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TftpRootError {
    #[error("{arch}: {msg}")]
    Missing { arch: Arch, msg: String },
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{cmd}: {msg}")]
    Command { cmd: String, msg: String },
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Files written (relative to the root).
    pub updated: Vec<String>,
    pub unchanged: usize,
}

/// Puts every boot file the arches need into `dir`.
pub fn assemble(dir: &Path, arches: &[Arch], src: &Sources) -> Result<Report, TftpRootError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |error| TftpRootError::Io { path, error }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let mut report = Report::default();
    let mut put = |rel: &str, bytes: &[u8]| -> Result<(), TftpRootError> {
        let dst = dir.join(rel);
        if std::fs::read(&dst).is_ok_and(|old| old == bytes) {
            report.unchanged += 1;
            return Ok(());
        }
        crate::cache::write_atomic(&dst, bytes).map_err(io(&dst))?;
        report.updated.push(rel.to_string());
        Ok(())
    };
    for arch in arches {
        match arch {
            Arch::X86_64 => {
                for f in IPXE_X86 {
                    let from = src.ipxe_dir.join(f);
                    let bytes = std::fs::read(&from).map_err(|e| TftpRootError::Missing {
                        arch: *arch,
                        msg: format!(
                            "{}: {e} (install Debian's ipxe package, or give --ipxe-dir)",
                            from.display()
                        ),
                    })?;
                    put(f, &bytes)?;
                }
            }
            Arch::Aarch64 => {
                let from = src
                    .ipxe_arm64
                    .clone()
                    .unwrap_or_else(|| src.ipxe_dir.join("ipxe-arm64.efi"));
                let bytes = std::fs::read(&from).map_err(|e| TftpRootError::Missing {
                    arch: *arch,
                    msg: format!(
                        "{}: {e} (give --ipxe-arm64 FILE: an arm64 EFI build of iPXE)",
                        from.display()
                    ),
                })?;
                put("ipxe-arm64.efi", &bytes)?;
            }
            Arch::Ppc64le => {
                let Some(moddir) = &src.grub_ieee1275_dir else {
                    return Err(TftpRootError::Missing {
                        arch: *arch,
                        msg: "give --grub-ieee1275-dir: usr/lib/grub/powerpc-ieee1275 of the ppc64el grub-ieee1275-bin package \
                              (apt-get download grub-ieee1275-bin:ppc64el; dpkg-deb -x)"
                            .into(),
                    });
                };
                if !moddir.join("kernel.img").is_file() {
                    return Err(TftpRootError::Missing {
                        arch: *arch,
                        msg: format!(
                            "{}: no kernel.img (not a powerpc-ieee1275 module directory)",
                            moddir.display()
                        ),
                    });
                }
                let core = build_core_elf(moddir, src)?;
                put("core.elf", &core)?;
                let mut entries: Vec<PathBuf> = std::fs::read_dir(moddir)
                    .map_err(io(moddir))?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == "mod" || x == "lst"))
                    .collect();
                entries.sort();
                for p in entries {
                    let bytes = std::fs::read(&p).map_err(io(&p))?;
                    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                    put(&format!("grub/powerpc-ieee1275/{name}"), &bytes)?;
                }
            }
        }
    }
    Ok(report)
}

/// The netboot script with its retry count filled in.
pub fn netboot_script(tries: u32) -> String {
    let tries = tries.clamp(1, 99);
    NETBOOT_CFG.replace(
        "@TRIES@",
        &(1..=tries)
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(" "),
    )
}

fn build_core_elf(moddir: &Path, src: &Sources) -> Result<Vec<u8>, TftpRootError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |error| TftpRootError::Io { path, error }
    };
    let build = tempfile::Builder::new()
        .prefix("images-core-elf.")
        .tempdir()
        .map_err(io(&std::env::temp_dir()))?;
    let b = build.path();
    let mem = b.join("memdisk");
    std::fs::create_dir_all(mem.join("powerpc-ieee1275")).map_err(io(&mem))?;
    let ofnet = moddir.join("ofnet.mod");
    std::fs::copy(&ofnet, mem.join("powerpc-ieee1275/ofnet.mod")).map_err(io(&ofnet))?;
    std::fs::write(mem.join("netboot.cfg"), netboot_script(src.grub_net_tries))
        .map_err(io(&mem))?;
    std::fs::write(b.join("embed.cfg"), EMBED_CFG).map_err(io(b))?;
    // Reproducible: sorted names, fixed mtimes and owners.
    run(Command::new("tar")
        .arg("-C")
        .arg(&mem)
        .args([
            "--sort=name",
            "--mtime=@0",
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "-cf",
        ])
        .arg(b.join("memdisk.tar"))
        .args(["powerpc-ieee1275", "netboot.cfg"]))?;
    let out = b.join("core.elf");
    run(Command::new(&src.grub_mkimage)
        .args(["-O", "powerpc-ieee1275", "-d"])
        .arg(moddir)
        .args(["-p", "(memdisk)", "-m"])
        .arg(b.join("memdisk.tar"))
        .arg("-c")
        .arg(b.join("embed.cfg"))
        .arg("-o")
        .arg(&out)
        .args(GRUB_MODULES))?;
    std::fs::read(&out).map_err(io(&out))
}

fn run(cmd: &mut Command) -> Result<(), TftpRootError> {
    let name = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd.output().map_err(|e| TftpRootError::Command {
        cmd: name.clone(),
        msg: format!("cannot run: {e} (package grub-common / tar)"),
    })?;
    if !out.status.success() {
        return Err(TftpRootError::Command {
            cmd: name,
            msg: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netboot_script_tries() {
        let s = netboot_script(3);
        assert!(s.contains("for try in 1 2 3; do"), "{s}");
        assert!(!s.contains("@TRIES@"));
        assert!(netboot_script(0).contains("for try in 1; do"));
    }
}
