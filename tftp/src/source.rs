//! What a requested name resolves to, and reading blocks from it.

use bytes::Bytes;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// The resolver's answer for a filename.
pub enum Resolved {
    /// An open regular file (from a confined open ([`crate::OpenBeneath`]) for
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
                let src = b
                    .get(start..start + buf.len())
                    .ok_or(io::ErrorKind::UnexpectedEof)?;
                buf.copy_from_slice(src);
                Ok(())
            }
        }
    }
}

/// Read-ahead for a transfer: blocks are copied out of one larger read
/// (64 KiB: 44 blocks of 1468 bytes per `pread`), not read one `pread`
/// per block; in lock-step every saved syscall shortens the round trip.
pub(crate) struct ReadAhead {
    buf: Vec<u8>,
    start: u64,
    filled: usize,
}

impl ReadAhead {
    pub(crate) const SIZE: usize = 64 * 1024;

    pub(crate) fn new() -> ReadAhead {
        ReadAhead {
            buf: Vec::new(),
            start: 0,
            filled: 0,
        }
    }

    /// Fills `out` with the bytes of `source` at `offset` (`out` is at most
    /// one block, and blocks are never larger than [`Self::SIZE`]).
    pub(crate) fn read(&mut self, source: &Source, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let Source::File { len, .. } = source else {
            return source.read_exact_at(offset, out);
        };
        let end = offset + out.len() as u64;
        if offset < self.start || end > self.start + self.filled as u64 {
            let want = (*len - offset).min(Self::SIZE.max(out.len()) as u64) as usize;
            if want < out.len() {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            self.buf.resize(want, 0);
            source.read_exact_at(offset, &mut self.buf[..want])?;
            self.start = offset;
            self.filled = want;
        }
        let at = (offset - self.start) as usize;
        out.copy_from_slice(&self.buf[at..at + out.len()]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn read_ahead_returns_the_file_bytes_across_refills_and_detects_shrinking() {
        let data: Vec<u8> = (0..200_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&data).unwrap();
        let source = Source::file(f.try_clone().unwrap()).unwrap();
        let mut ahead = ReadAhead::new();
        let blk = 1468;
        let mut out = vec![0u8; blk];
        let mut offset = 0usize;
        while offset < data.len() {
            let n = blk.min(data.len() - offset);
            ahead.read(&source, offset as u64, &mut out[..n]).unwrap();
            assert_eq!(&out[..n], &data[offset..offset + n], "block at {offset}");
            offset += n;
        }
        // A resend of an earlier block (behind the read-ahead window).
        ahead.read(&source, 0, &mut out).unwrap();
        assert_eq!(&out[..], &data[..blk]);
        // The file shrinks under the transfer: an error, not a short block.
        f.set_len(100_000).unwrap();
        let mut fresh = ReadAhead::new();
        assert!(fresh.read(&source, 150_000, &mut out).is_err());
    }
}
