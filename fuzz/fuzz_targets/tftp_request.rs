//! Any datagram into the TFTP parser: no panic, and whatever parses
//! re-encodes to bytes that parse to the same packet; negotiated options
//! stay inside the server's limits.
#![no_main]

use tftp::packet::{self, Limits, Packet};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(p) = packet::parse(data) else { return };
    let mut out = Vec::new();
    p.encode(&mut out);
    assert_eq!(packet::parse(&out).as_ref(), Ok(&p));
    if let Packet::Rrq(r) | Packet::Wrq(r) = &p {
        assert!(!r.filename.is_empty());
        let n = packet::negotiate(
            &r.options,
            Limits {
                max_blksize: 1468,
                max_windowsize: 64,
                max_timeout: 5,
            },
        );
        assert!((8..=1468).contains(&n.block_size()) || n.block_size() == 512);
        assert!((1..=64).contains(&n.window_size()));
        if let Some(t) = n.timeout {
            assert!((1..=5).contains(&t));
        }
    }
});
