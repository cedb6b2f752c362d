//! The body type every HTTP response of bootd has (routes, the status
//! page, files), in a module of its own so that the modules that build
//! responses need not import each other for it.

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use std::io;

pub type Body = BoxBody<Bytes, io::Error>;
