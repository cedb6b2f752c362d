//! Virtual media: a small bootable ISO per node, for BMCs that boot a
//! machine from an image they mount (Redfish `VirtualMedia.InsertMedia`)
//! instead of the network.
//!
//! The ISO holds GRUB for both BIOS (El Torito, i386-pc) and UEFI (an EFI
//! system partition image, x86_64-efi), the node's live kernel and
//! initramfs, and a `grub.cfg` with the node's kernel arguments: the same
//! arguments its network boot gets ([`crate::render::kernel_args`]), so
//! the Ignition URL (with the token the ISO was asked for with), the
//! install disk and static networking are those of the network path. The
//! machine needs no DHCP or PXE from this host to start its installer.
//!
//! Built by `grub-mkrescue` (GRUB's own tool; it runs xorriso and mtools):
//! see docs/design-notes.md for why that and not a crate or iPXE.
//! Builds are cached under `<stateDir>/media/`, named by a hash of
//! everything that went into it. They run one at a time on a thread of
//! their own, fed by a queue of [`QUEUE`] (past it, and for a node whose
//! build is under way, [`MediaError::Busy`]), so that no flood of requests
//! holds the blocking pool TFTP, image reads and lease commits share. A
//! node's ISO that was served within [`KEEP_UNUSED`] is never removed when
//! another is built (a BMC reads its ISO in ranges, by name), and a node
//! keeps at most [`KEEP_MAX`].

use sha2::{Digest, Sha256};
use site::{Arch, Node, Site};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The longest a `grub-mkrescue` run may take before it is killed.
const BUILD_TIMEOUT: Duration = Duration::from_secs(120);
/// Builds waiting for the builder thread, at most.
pub const QUEUE: usize = 4;
/// A node's ISO served within this long is kept when another is built.
pub const KEEP_UNUSED: Duration = Duration::from_secs(3600);
/// A node's ISOs kept at most (the most recently served).
pub const KEEP_MAX: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    #[error("virtual media is built for x86_64 nodes only (this node is {0})")]
    Arch(String),
    #[error("{what}: {err}")]
    Io { what: String, err: io::Error },
    #[error("grub-mkrescue failed ({status}): {tail}")]
    Tool { status: String, tail: String },
    /// Not built now: the node's build is under way, or the queue is full.
    #[error("{0}")]
    Busy(&'static str),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> MediaError {
    let what = what.into();
    move |err| MediaError::Io { what, err }
}

/// The ISOs of one bootd: where they are kept and how they are built.
#[derive(Debug)]
pub struct Media {
    builder: std::sync::Arc<Builder>,
    /// The builder thread's queue, started at the first build.
    queue: std::sync::OnceLock<std::sync::mpsc::SyncSender<Job>>,
    /// Nodes whose build is queued or running.
    building: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

/// Where ISOs are kept and the tool that builds them.
#[derive(Debug)]
struct Builder {
    dir: PathBuf,
    tool: PathBuf,
}

struct Job {
    spec: Spec,
    done: tokio::sync::oneshot::Sender<Result<String, MediaError>>,
}

/// What goes into one node's ISO.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    pub node: String,
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    /// `boot/grub/grub.cfg` ([`grub_cfg`]).
    pub cfg: String,
}

impl Media {
    /// ISOs under `<state_dir>/media`, built with `grub-mkrescue` from `PATH`.
    pub fn new(state_dir: &Path) -> Media {
        Media::with_tool(state_dir, "grub-mkrescue")
    }

    pub fn with_tool(state_dir: &Path, tool: impl Into<PathBuf>) -> Media {
        Media {
            builder: std::sync::Arc::new(Builder {
                dir: state_dir.join("media"),
                tool: tool.into(),
            }),
            queue: std::sync::OnceLock::new(),
            building: Default::default(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.builder.dir
    }

    /// What the ISO of `node` holds when its Ignition URL carries `token`.
    /// `boot`: what [`crate::plan`] decided for the node now (the ISO is
    /// one per decision: inspecting, then installing, are two ISOs).
    pub fn spec(
        site: &Site,
        node: &Node,
        token: &str,
        boot: crate::render::Boot,
    ) -> Result<Spec, MediaError> {
        if node.arch != Arch::X86_64 {
            return Err(MediaError::Arch(node.arch.to_string()));
        }
        // The node, not its BMC, fetches what the kernel line names.
        let base = site.host.http.base_url(None, Some(node));
        let mut urls = crate::render::NodeUrls::with_boot(site, base, node, token, boot);
        // Its BMC boots this same ISO until another is inserted: the agent
        // powers the machine off when done, and the controller inserts the
        // ISO of the next step (docs/bmc.md, "Virtual media").
        if urls.boot == crate::render::Boot::Agent {
            urls.ignition.push_str("&then=poweroff");
        }
        let img = site.image_of(node);
        Ok(Spec {
            node: node.name.clone(),
            kernel: site.images.root.join(&img.kernel),
            initramfs: site.images.root.join(&img.initramfs),
            cfg: grub_cfg(site, node, &crate::render::kernel_args(site, node, &urls)),
        })
    }

    /// The ISO for `spec` (a file name under [`Media::dir`]), built on the
    /// builder thread unless an identical one exists (which is marked as
    /// just served). [`MediaError::Busy`] when the node's build is under
    /// way or [`QUEUE`] builds wait already.
    pub async fn get(&self, spec: Spec) -> Result<String, MediaError> {
        let name = file_name(&spec)?;
        if touch(&self.builder.dir.join(&name)) {
            return Ok(name);
        }
        {
            let mut b = self.building.lock().unwrap_or_else(|p| p.into_inner());
            if !b.insert(spec.node.clone()) {
                return Err(MediaError::Busy("this node's ISO is being built"));
            }
        }
        let node = spec.node.clone();
        let (done, result) = tokio::sync::oneshot::channel();
        if self.queue().try_send(Job { spec, done }).is_err() {
            self.building
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&node);
            return Err(MediaError::Busy("too many ISOs are waiting to be built"));
        }
        result
            .await
            .unwrap_or(Err(MediaError::Busy("the ISO builder stopped")))
    }

    fn queue(&self) -> &std::sync::mpsc::SyncSender<Job> {
        self.queue.get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Job>(QUEUE);
            let builder = std::sync::Arc::clone(&self.builder);
            let building = std::sync::Arc::clone(&self.building);
            std::thread::Builder::new()
                .name("bootd-media".into())
                .spawn(move || {
                    // Ends when the last sender (this Media) is dropped.
                    for job in rx {
                        let r = builder.get(&job.spec);
                        building
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .remove(&job.spec.node);
                        let _ = job.done.send(r);
                    }
                })
                .expect("a thread for ISO builds");
            tx
        })
    }
}

impl Builder {
    /// The ISO for `spec`, built unless an identical one exists. Blocking.
    fn get(&self, spec: &Spec) -> Result<String, MediaError> {
        let name = file_name(spec)?;
        let path = self.dir.join(&name);
        if touch(&path) {
            return Ok(name);
        }
        std::fs::create_dir_all(&self.dir).map_err(io_err(self.dir.display().to_string()))?;
        let staging = self.dir.join(format!(".build-{}", spec.node));
        let _ = std::fs::remove_dir_all(&staging);
        let built = self.build_in(spec, &staging, &path);
        let _ = std::fs::remove_dir_all(&staging);
        built?;
        self.prune(&spec.node, &name);
        Ok(name)
    }

    fn build_in(&self, spec: &Spec, staging: &Path, path: &Path) -> Result<(), MediaError> {
        let grub = staging.join("boot/grub");
        std::fs::create_dir_all(&grub).map_err(io_err(grub.display().to_string()))?;
        crate::state::write_private(&grub.join("grub.cfg"), spec.cfg.as_bytes())
            .map_err(io_err("grub.cfg"))?;
        copy(&spec.kernel, &staging.join("vmlinuz"))?;
        copy(&spec.initramfs, &staging.join("initrd.img"))?;
        let tmp = self.dir.join(format!(".{}.iso.tmp", spec.node));
        let mut child = Command::new(&self.tool)
            .arg("-o")
            .arg(&tmp)
            .arg(staging)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io_err(format!("running {}", self.tool.display())))?;
        let mut stderr = child.stderr.take();
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(e) = stderr.as_mut() {
                let _ = e.take(1 << 20).read_to_string(&mut s);
            }
            s
        });
        let start = Instant::now();
        let status = loop {
            match child
                .try_wait()
                .map_err(io_err("waiting for grub-mkrescue"))?
            {
                Some(st) => break st,
                None if start.elapsed() > BUILD_TIMEOUT => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let _ = std::fs::remove_file(&tmp);
                    return Err(MediaError::Tool {
                        status: format!("killed after {BUILD_TIMEOUT:?}"),
                        tail: String::new(),
                    });
                }
                None => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        let out = reader.join().unwrap_or_default();
        if !status.success() {
            let _ = std::fs::remove_file(&tmp);
            let tail: String = out.lines().rev().take(3).collect::<Vec<_>>().join(" / ");
            return Err(MediaError::Tool {
                status: status.to_string(),
                tail,
            });
        }
        std::fs::rename(&tmp, path).map_err(io_err(path.display().to_string()))
    }

    /// Removes `node`'s ISOs other than `keep` that were not served
    /// within [`KEEP_UNUSED`], and the least recently served beyond
    /// [`KEEP_MAX`].
    fn prune(&self, node: &str, keep: &str) {
        let prefix = format!("{node}-");
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let now = std::time::SystemTime::now();
        let mut kept: Vec<(std::time::SystemTime, PathBuf)> = Vec::new();
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n == keep || !n.starts_with(&prefix) || !n.ends_with(".iso") || !is_ours(node, &n) {
                continue;
            }
            let used = e
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH);
            if now.duration_since(used).unwrap_or_default() > KEEP_UNUSED {
                let _ = std::fs::remove_file(e.path());
            } else {
                kept.push((used, e.path()));
            }
        }
        kept.sort();
        let over = (kept.len() + 1).saturating_sub(KEEP_MAX);
        for (_, p) in kept.into_iter().take(over) {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Marks the ISO at `path` as served now (its modification time), if it
/// exists: what [`Builder::prune`] keeps.
fn touch(path: &Path) -> bool {
    match std::fs::File::options().write(true).open(path) {
        Ok(f) => {
            let _ = f.set_modified(std::time::SystemTime::now());
            true
        }
        Err(_) => false,
    }
}

/// `<node>-<16 hex>.iso` belongs to `node` (and not to `node-1`, whose files
/// also start with `node-`).
fn is_ours(node: &str, file: &str) -> bool {
    let rest = file
        .get(node.len() + 1..file.len().saturating_sub(".iso".len()))
        .unwrap_or("");
    rest.len() == 16 && rest.bytes().all(|b| b.is_ascii_hexdigit())
}

fn copy(from: &Path, to: &Path) -> Result<(), MediaError> {
    std::fs::copy(from, to)
        .map(|_| ())
        .map_err(io_err(format!("copying {}", from.display())))
}

/// `<node>-<hash>.iso`: the hash covers the config (kernel arguments and
/// token) and the kernel and initramfs as they are now (path, size, mtime).
fn file_name(spec: &Spec) -> Result<String, MediaError> {
    let mut h = Sha256::new();
    h.update(spec.cfg.as_bytes());
    for f in [&spec.kernel, &spec.initramfs] {
        let md = std::fs::metadata(f).map_err(io_err(f.display().to_string()))?;
        let mtime = md
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        h.update(f.as_os_str().as_encoded_bytes());
        h.update(md.len().to_be_bytes());
        h.update(mtime.to_be_bytes());
    }
    let d = h.finalize();
    let hex: String = d[..8].iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{}-{hex}.iso", spec.node))
}

/// The ISO's `grub.cfg`: one entry, the node's kernel and initramfs from
/// the medium itself, its arguments quoted for GRUB's lexer.
pub fn grub_cfg(site: &Site, node: &Node, args: &[String]) -> String {
    let args: Vec<String> = args.iter().map(|a| grub_word(a)).collect();
    format!(
        "# bootd: {name} (role {role}), virtual media, cluster {cluster}\n\
set timeout=1\n\
set default=0\n\
serial --unit=0 --speed=115200\n\
terminal_input console serial\n\
terminal_output console serial\n\
menuentry 'bootd: {name} ({role}) from virtual media' {{\n\
\x20   echo 'bootd: {name}: loading kernel'\n\
\x20   linux /vmlinuz {args}\n\
\x20   echo 'bootd: {name}: loading initramfs'\n\
\x20   initrd /initrd.img\n\
}}\n",
        name = node.name,
        role = node.role,
        cluster = site.cluster.name,
        args = args.join(" "),
    )
}

/// One word for GRUB's script lexer: bare when it holds nothing the lexer
/// reads specially, else quoted.
fn grub_word(a: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "._:/=,+-@%".contains(c);
    if !a.is_empty() && a.chars().all(plain) {
        a.to_string()
    } else if !a.contains('\'') {
        format!("'{a}'")
    } else {
        let mut s = String::from("\"");
        for c in a.chars() {
            if matches!(c, '"' | '\\' | '$') {
                s.push('\\');
            }
            s.push(c);
        }
        s.push('"');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grub_words_are_quoted_only_when_needed() {
        assert_eq!(grub_word("console=ttyS0"), "console=ttyS0");
        assert_eq!(
            grub_word("ignition.config.url=http://h/i?token=1.a"),
            "'ignition.config.url=http://h/i?token=1.a'"
        );
        assert_eq!(grub_word("a b"), "'a b'");
        assert_eq!(grub_word("it's $x"), "\"it's \\$x\"");
        assert_eq!(grub_word(""), "''");
    }

    #[test]
    fn a_nodes_files_are_told_apart_from_a_longer_named_node() {
        assert!(is_ours("m", "m-0123456789abcdef.iso"));
        assert!(!is_ours("m", "m-1-0123456789abcdef.iso"));
        assert!(!is_ours("m", "m-short.iso"));
    }
}
