//! Started as root (outside systemd, or by a unit that leaves it root), a
//! daemon puts itself where its systemd unit would: an unprivileged user
//! holding only the capabilities the unit grants (`AmbientCapabilities=`,
//! `CapabilityBoundingSet=`, `NoNewPrivileges=`). It does so first thing,
//! while the process has one thread besides the log writer, so every thread
//! the runtime starts afterwards inherits exactly that; it binds its
//! sockets afterwards with those capabilities, as under systemd.
//!
//! The user is `--user NAME`; by default the daemon's own name when such a
//! user exists, else `nobody`. Its state directories are handed to that
//! user first (as systemd's `StateDirectory=` does).

pub use rustix::thread::CapabilitySet;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    #[error("--user {0}: no such user")]
    NoSuchUser(String),
    #[error("looking up user {0}: {1}")]
    Lookup(String, nix::Error),
    #[error("handing {0} to {1}: {2}")]
    Chown(PathBuf, String, std::io::Error),
    #[error("dropping to user {0}: {1}: {2}")]
    Drop(String, &'static str, std::io::Error),
    #[error("dropping to user {0}: root could be regained")]
    NotDropped(String),
}

/// What [`drop_root`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dropped {
    /// Not started as root: nothing to drop.
    NotRoot,
    /// `--user root`: kept, as asked.
    KeptRoot,
    /// Now `user` (uid, gid), with `caps` only.
    To {
        user: String,
        uid: u32,
        gid: u32,
        caps: CapabilitySet,
    },
}

/// Whether the process runs as root.
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The capabilities this thread holds now (empty when they cannot be read).
pub fn effective() -> CapabilitySet {
    rustix::thread::capabilities(None)
        .map(|c| c.effective)
        .unwrap_or(CapabilitySet::empty())
}

/// Who to become: `asked` (`--user`), else `daemon` if such a user
/// exists, else `nobody`.
pub fn choose_user(asked: Option<&str>, daemon: &str) -> String {
    if let Some(u) = asked {
        return u.to_string();
    }
    match nix::unistd::User::from_name(daemon) {
        Ok(Some(_)) => daemon.to_string(),
        _ => "nobody".to_string(),
    }
}

/// Becomes `user` with only `keep`, when running as root; hands `own`
/// (created if missing) to that user first.
pub fn drop_root(
    user: &str,
    keep: CapabilitySet,
    own: &[&Path],
) -> Result<Dropped, PrivilegeError> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(Dropped::NotRoot);
    }
    if user == "root" {
        return Ok(Dropped::KeptRoot);
    }
    let u = nix::unistd::User::from_name(user)
        .map_err(|e| PrivilegeError::Lookup(user.into(), e))?
        .ok_or_else(|| PrivilegeError::NoSuchUser(user.into()))?;
    for dir in own {
        std::fs::create_dir_all(dir)
            .and_then(|()| chown_tree(dir, u.uid.as_raw(), u.gid.as_raw()))
            .map_err(|e| PrivilegeError::Chown(dir.to_path_buf(), user.into(), e))?;
    }
    let fail =
        |what: &'static str| move |e: std::io::Error| PrivilegeError::Drop(user.into(), what, e);
    let errno = |e: nix::Error| std::io::Error::from_raw_os_error(e as i32);
    // The bounding set: nothing outside `keep` can ever come back, not even
    // through a setuid or file-capability executable.
    for bit in 0..64u32 {
        let cap = CapabilitySet::from_bits_retain(1 << bit);
        if keep.contains(cap) || CapabilitySet::all().intersection(cap).is_empty() {
            continue;
        }
        match rustix::thread::remove_capability_from_bounding_set(cap) {
            Ok(()) => {}
            // A capability this kernel does not know.
            Err(rustix::io::Errno::INVAL) => {}
            Err(e) => return Err(fail("bounding set")(e.into())),
        }
    }
    rustix::thread::set_keep_capabilities(true).map_err(|e| fail("keep capabilities")(e.into()))?;
    // glibc applies these to every thread of the process.
    nix::unistd::setgroups(&[u.gid]).map_err(|e| fail("setgroups")(errno(e)))?;
    nix::unistd::setresgid(u.gid, u.gid, u.gid).map_err(|e| fail("setresgid")(errno(e)))?;
    nix::unistd::setresuid(u.uid, u.uid, u.uid).map_err(|e| fail("setresuid")(errno(e)))?;
    rustix::thread::set_keep_capabilities(false)
        .map_err(|e| fail("keep capabilities")(e.into()))?;
    rustix::thread::set_capabilities(
        None,
        rustix::thread::CapabilitySets {
            effective: keep,
            permitted: keep,
            inheritable: keep,
        },
    )
    .map_err(|e| fail("capset")(e.into()))?;
    // Ambient: children (QEMU for the local provider) get them too.
    for cap in keep.iter() {
        rustix::thread::configure_capability_in_ambient_set(cap, true)
            .map_err(|e| fail("ambient capabilities")(e.into()))?;
    }
    rustix::thread::set_no_new_privs(true).map_err(|e| fail("no_new_privs")(e.into()))?;
    if nix::unistd::setuid(nix::unistd::Uid::from_raw(0)).is_ok() {
        return Err(PrivilegeError::NotDropped(user.into()));
    }
    Ok(Dropped::To {
        user: user.into(),
        uid: u.uid.as_raw(),
        gid: u.gid.as_raw(),
        caps: keep,
    })
}

/// `chown -hR uid:gid dir`, touching only what is not theirs already.
fn chown_tree(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(dir)?;
    if meta.uid() != uid || meta.gid() != gid {
        std::os::unix::fs::lchown(dir, Some(uid), Some(gid))?;
    }
    if meta.is_dir() {
        for e in std::fs::read_dir(dir)? {
            chown_tree(&e?.path(), uid, gid)?;
        }
    }
    Ok(())
}

/// Started as root, becomes what `daemon`'s unit makes it, in one call:
/// the user ([`choose_user`]: `asked`, else `daemon`'s own, else
/// `nobody`), the drop to it keeping `keep` only with `own` handed over
/// ([`drop_root`]), and the log line ([`report`], naming the `watched`
/// files the user cannot read). Call it before the runtime starts threads.
pub fn drop_for(
    daemon: &str,
    asked: Option<&str>,
    keep: CapabilitySet,
    own: &[&Path],
    watched: &[PathBuf],
) -> Result<Dropped, PrivilegeError> {
    let user = choose_user(asked, daemon);
    let d = drop_root(&user, keep, own)?;
    report(&d, watched);
    Ok(d)
}

/// Log line for what [`drop_root`] did; `watched` are the files a reload
/// re-reads: those the new user cannot read are named (a reload would fail
/// on them and keep the old site).
pub fn report(d: &Dropped, watched: &[PathBuf]) {
    match d {
        Dropped::NotRoot => {}
        Dropped::KeptRoot => {
            tracing::warn!(
                "running as root (--user root): every request is served with root's privileges"
            )
        }
        Dropped::To {
            user,
            uid,
            gid,
            caps,
        } => {
            tracing::info!(user, uid, gid, capabilities = ?caps, "dropped root");
            for f in watched {
                if let Err(e) = std::fs::File::open(f) {
                    tracing::warn!(file = %f.display(), user, error = %e, "not readable after dropping root: a reload will fail on it (make it readable by the user)");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_is_the_asked_one_else_the_daemons_else_nobody() {
        assert_eq!(choose_user(Some("alice"), "bootd"), "alice");
        assert_eq!(choose_user(None, "root"), "root");
        assert_eq!(choose_user(None, "no-such-daemon-user-x"), "nobody");
    }
}
