//! Any bytes into bootd's plain-HTTP head parser (`bootd::plain::parse`):
//! no panic; a head it serves itself is a GET or HEAD in origin form whose
//! length lies inside the input, and the bytes before that length parse to
//! the same request again (so pipelined requests split where they should).
//! A whole-image GET (`Head::Image`) names its path inside the head, and
//! when the shortcut would serve that path, the general parse of the same
//! bytes is a GET of the same path (so both ways serve the same file).
#![no_main]

use bootd::http::whole_image_rel;
use bootd::plain::{parse, parse_general, Head};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Head::Image { path, len, close } = parse(data) {
        assert!(path.end <= len && len <= data.len());
        let p = std::str::from_utf8(&data[path.clone()]).expect("the path is text");
        assert!(p.starts_with("/images/"));
        if let Some(rel) = whole_image_rel(p) {
            match parse_general(&data[..len]) {
                Head::Simple {
                    req,
                    len: l2,
                    close: c2,
                } => {
                    assert_eq!((l2, c2), (len, close));
                    assert_eq!(req.method(), "GET");
                    assert_eq!(req.uri().path(), p);
                    assert_eq!(req.uri().path().strip_prefix("/images/"), Some(rel));
                }
                other => panic!("the shortcut would serve {p:?}, the general parse gave {other:?}"),
            }
        }
        return;
    }
    if let Head::Simple { req, len, close } = parse(data) {
        assert!(len <= data.len());
        assert!(req.method() == "GET" || req.method() == "HEAD");
        assert!(req.uri().path().starts_with('/'));
        assert!(req.uri().scheme().is_none());
        match parse(&data[..len]) {
            Head::Simple {
                req: again,
                len: l2,
                close: c2,
            } => {
                assert_eq!((l2, c2), (len, close));
                assert_eq!(again.uri(), req.uri());
                assert_eq!(again.headers(), req.headers());
            }
            other => panic!("the head alone parsed as {other:?}"),
        }
    }
});
