//! The process's live heap, in bytes, when its binary counts it.
//!
//! A binary whose global allocator counts what it hands out (the appliance
//! wraps mimalloc in `cap::Cap`) registers a probe here at start; the
//! metrics endpoint reads it. Resident memory (RSS) is not a leak signal
//! for a multi-threaded allocator: it holds freed pages per thread and
//! moves with load. Live bytes only grow if something keeps what it
//! allocated.

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

#[cfg(test)]
mod tests {
    #[test]
    fn the_first_probe_answers() {
        super::set_probe(|| 42);
        super::set_probe(|| 7);
        assert_eq!(super::allocated(), Some(42));
    }
}
