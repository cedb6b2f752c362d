//! The body type every HTTP response of bootd has (routes, the status
//! page, files), in a module of its own so that the modules that build
//! responses need not import each other for it.

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use std::io;

pub type Body = BoxBody<Bytes, io::Error>;

/// An answer of `content_type` that caches must not keep.
pub fn no_store_reply(
    status: StatusCode,
    content_type: &'static str,
    body: Vec<u8>,
) -> Response<Body> {
    let mut r = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// A JSON answer (pretty, with a final newline) that caches must not keep:
/// the status page's JSON and the controller API's replies.
pub fn json_reply(status: StatusCode, v: &serde_json::Value) -> Response<Body> {
    let mut body = serde_json::to_vec_pretty(v).unwrap_or_default();
    body.push(b'\n');
    no_store_reply(status, "application/json", body)
}
