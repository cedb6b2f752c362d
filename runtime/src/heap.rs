//! The process's heap: its live bytes, when its binary counts them, and
//! the size of the pages its allocator is given.
//!
//! A binary whose global allocator counts what it hands out (the appliance
//! wraps mimalloc in `cap::Cap`) registers a probe here at start; the
//! metrics endpoint reads it. Resident memory (RSS) is not a leak signal
//! for a multi-threaded allocator: it holds freed pages per thread and
//! moves with load. Live bytes only grow if something keeps what it
//! allocated.
//!
//! [`small_pages`] keeps the allocator's memory on 4 KiB pages.

use std::sync::OnceLock;

static PROBE: OnceLock<fn() -> usize> = OnceLock::new();

/// Registers the function that returns the live heap bytes. The first
/// registration wins; later ones are ignored.
pub fn set_probe(probe: fn() -> usize) {
    let _ = PROBE.set(probe);
}

/// The live heap bytes, if the binary counts them.
pub fn allocated() -> Option<usize> {
    PROBE.get().map(|probe| probe())
}

/// Keeps the process on small (4 KiB) pages: transparent huge pages off
/// for it (`PR_SET_THP_DISABLE`), as mimalloc's own `MIMALLOC_ALLOW_THP=0`
/// would, which it reads from the environment only.
///
/// Why: mimalloc advises huge pages on its arenas (`MADV_HUGEPAGE`), which
/// the kernel honours under THP `madvise` as under `always`, and every
/// thread allocates from pages of its own. With the
/// hundreds of threads a storm puts on the blocking pool (TFTP transfers,
/// big sends), each 2 MiB of arena a thread touched became resident whole:
/// at 1 000 machines booting, 250 MiB of huge pages for a live heap of
/// 15-16 MiB (docs/performance.md, "Memory per booting machine").
///
/// Call it first thing in `main`: memory touched before keeps its huge
/// pages. Children inherit the setting (fork and exec).
pub fn small_pages() {
    // Fails only where the kernel has no such prctl (no THP to turn off).
    let _ = rustix::thread::disable_transparent_huge_pages(true);
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_first_probe_answers() {
        super::set_probe(|| 42);
        super::set_probe(|| 7);
        assert_eq!(super::allocated(), Some(42));
    }

    #[test]
    fn small_pages_turns_huge_pages_off_for_the_process() {
        super::small_pages();
        // A kernel without the prctl has no huge pages to turn off.
        if let Ok(off) = rustix::thread::transparent_huge_pages_are_disabled() {
            assert!(off);
        }
    }
}
