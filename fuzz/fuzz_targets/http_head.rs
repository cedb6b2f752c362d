//! Any bytes into bootd's plain-HTTP head parser (`bootd::plain::parse`):
//! no panic; a head it serves itself is a GET or HEAD in origin form whose
//! length lies inside the input, and the bytes before that length parse to
//! the same request again (so pipelined requests split where they should).
#![no_main]

use bootd::plain::{parse, Head};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Head::Simple { req, len, close } = parse(data) {
        assert!(len <= data.len());
        assert!(req.method() == "GET" || req.method() == "HEAD");
        assert!(req.uri().path().starts_with('/'));
        assert!(req.uri().scheme().is_none());
        match parse(&data[..len]) {
            Head::Simple { req: again, len: l2, close: c2 } => {
                assert_eq!((l2, c2), (len, close));
                assert_eq!(again.uri(), req.uri());
                assert_eq!(again.headers(), req.headers());
            }
            other => panic!("the head alone parsed as {other:?}"),
        }
    }
});
