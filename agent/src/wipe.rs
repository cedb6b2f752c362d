//! Metadata wiping, as Ironic's metadata cleaning does it: no file system,
//! RAID member, LVM or partition table signature is left for the next
//! install (or for Ignition's "does this disk have a partition table?")
//! to find. For each partition its first and last MiB (where file systems
//! and RAID superblocks live), then the disk's first and last MiB (MBR
//! and GPT header, and GPT's backup header at the end). [`plan`] is pure;
//! [`wipe`] writes the zeros with O_SYNC and an fsync at the end.

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use crate::probe::{Partition, SECTOR};

pub const MIB: u64 = 1 << 20;

/// A byte range to zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub offset: u64,
    pub len: u64,
}

/// The ranges to zero on a disk of `size` bytes with these partitions:
/// each partition's first and last MiB (less when it is smaller), then
/// the disk's; nothing past the disk's end, ranges may overlap.
pub fn plan(size: u64, partitions: &[Partition]) -> Vec<Range> {
    let mut out = Vec::new();
    let mut ends = |start: u64, len: u64| {
        let end = start.saturating_add(len).min(size);
        if start >= end {
            return;
        }
        let n = (end - start).min(MIB);
        out.push(Range {
            offset: start,
            len: n,
        });
        if end - n != start {
            out.push(Range {
                offset: end - n,
                len: n,
            });
        }
    };
    for p in partitions {
        ends(
            p.start.saturating_mul(SECTOR),
            p.sectors.saturating_mul(SECTOR),
        );
    }
    ends(0, size);
    out
}

/// Zero `ranges` of the device (or, in tests, file) at `path`. It must
/// exist: nothing is created or truncated.
pub fn wipe(path: &Path, ranges: &[Range]) -> io::Result<()> {
    let f = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_SYNC)
        .open(path)?;
    let zeros = vec![0u8; MIB as usize];
    for r in ranges {
        // Ranges are at most a MiB (plan), the buffer's size.
        let n = usize::try_from(r.len)
            .unwrap_or(usize::MAX)
            .min(zeros.len());
        f.write_all_at(&zeros[..n], r.offset)?;
    }
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(offset: u64, len: u64) -> Range {
        Range { offset, len }
    }

    #[test]
    fn a_gpt_disk_with_two_partitions() {
        let size = 64 * MIB;
        let parts = [
            Partition {
                start: 2048,
                sectors: 16384,
            }, // 1 MiB .. 9 MiB
            Partition {
                start: 18432,
                sectors: 1024,
            }, // 9 MiB, half a MiB
        ];
        assert_eq!(
            plan(size, &parts),
            [
                r(MIB, MIB),
                r(8 * MIB, MIB),
                r(9 * MIB, MIB / 2),
                r(0, MIB),
                r(63 * MIB, MIB),
            ]
        );
    }

    #[test]
    fn small_and_odd_sizes_stay_inside() {
        assert_eq!(plan(4096, &[]), [r(0, 4096)]);
        assert_eq!(plan(0, &[]), []);
        let size = 3 * MIB + 512;
        assert_eq!(plan(size, &[]), [r(0, MIB), r(2 * MIB + 512, MIB)]);
        // A partition the kernel says runs past the end: cut at the end.
        let p = Partition {
            start: 4096,
            sectors: u64::MAX,
        };
        assert_eq!(
            plan(size, &[p]),
            [
                r(2 * MIB, MIB),
                r(2 * MIB + 512, MIB),
                r(0, MIB),
                r(2 * MIB + 512, MIB)
            ]
        );
        let beyond = Partition {
            start: 1 << 40,
            sectors: 8,
        };
        assert_eq!(plan(size, &[beyond]).len(), 2);
    }

    #[test]
    fn wipe_zeroes_exactly_the_ranges() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("disk");
        std::fs::write(&path, vec![0xa5u8; 3 * MIB as usize]).unwrap();
        wipe(&path, &[r(0, 512), r(MIB, MIB)]).unwrap();
        let b = std::fs::read(&path).unwrap();
        assert_eq!(b.len(), 3 * MIB as usize, "not extended or truncated");
        assert!(b[..512].iter().all(|&x| x == 0));
        assert!(b[512..MIB as usize].iter().all(|&x| x == 0xa5));
        assert!(b[MIB as usize..2 * MIB as usize].iter().all(|&x| x == 0));
        assert!(b[2 * MIB as usize..].iter().all(|&x| x == 0xa5));
        assert!(wipe(&t.path().join("absent"), &[r(0, 1)]).is_err());
    }
}
