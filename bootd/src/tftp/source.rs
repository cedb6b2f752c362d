//! What a requested name resolves to, and reading blocks from it.

use bytes::Bytes;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// The resolver's answer for a filename.
pub enum Resolved {
    /// An open regular file (from [`crate::files::open_beneath`] for
    /// anything under a root directory).
    File(File),
    /// Generated content (per-node GRUB configs, iPXE scripts).
    Bytes(Bytes),
    /// Answered with ERROR 1.
    NotFound,
    /// Answered with ERROR 2.
    Denied,
}

// Generated content may hold tokens: Debug shows its length only.
impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Resolved::File(file) => f.debug_tuple("File").field(file).finish(),
            Resolved::Bytes(b) => write!(f, "Bytes({} bytes)", b.len()),
            Resolved::NotFound => f.write_str("NotFound"),
            Resolved::Denied => f.write_str("Denied"),
        }
    }
}

/// A resolved file with its length fixed when the transfer starts (the
/// length `tsize` announced and the block count depend on).
pub(crate) enum Source {
    File { file: File, len: u64 },
    Bytes(Bytes),
}

impl Source {
    pub(crate) fn file(file: File) -> io::Result<Source> {
        let len = file.metadata()?.len();
        Ok(Source::File { file, len })
    }

    pub(crate) fn len(&self) -> u64 {
        match self {
            Source::File { len, .. } => *len,
            Source::Bytes(b) => b.len() as u64,
        }
    }

    /// Fills `buf` with the bytes at `offset`. A file that shrank under a
    /// running transfer is an error: sending a short block would end the
    /// transfer early and the client would boot a truncated file.
    ///
    /// `pread` runs on the async worker on purpose: boot files are small
    /// and hot in the page cache, where a read is a memcpy, and a hop to
    /// the blocking pool per window would cost more than it saves.
    pub(crate) fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        match self {
            Source::File { file, .. } => file.read_exact_at(buf, offset),
            Source::Bytes(b) => {
                let start = usize::try_from(offset).map_err(|_| io::ErrorKind::UnexpectedEof)?;
                let src = b.get(start..start + buf.len()).ok_or(io::ErrorKind::UnexpectedEof)?;
                buf.copy_from_slice(src);
                Ok(())
            }
        }
    }
}
