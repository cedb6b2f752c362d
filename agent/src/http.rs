//! A minimal HTTP/1.1 client for one thing: POST a JSON body to the URL
//! bootd handed the machine, over plain TCP (bootd serves the agent and
//! takes its reports on its HTTP port; the URL's single-use token is the
//! authentication). [`Url::parse`] and [`parse_response`] are pure;
//! [`post_json`] does the I/O, with a bounded retry.
//!
//! The URL's query (where the token is) never reaches a message:
//! [`Url::redacted`] is what errors print.

use std::io::{Read, Write};
use std::net::{Ipv6Addr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::Error;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// A name, an IPv4 address, or an IPv6 address without brackets.
    pub host: String,
    pub port: u16,
    /// `host[:port]` as written (brackets kept): the Host header.
    pub authority: String,
    /// Path and query: the request target, `/` at least.
    pub target: String,
}

impl Url {
    /// `http://host[:port][/path][?query]`; `#fragment` is dropped.
    pub fn parse(s: &str) -> Result<Url, Error> {
        let bad = |m: &str| Error::Url(format!("{m} (want http://host[:port]/path?query)"));
        let (scheme, rest) = s.split_once("://").ok_or_else(|| bad("no scheme"))?;
        if !scheme.eq_ignore_ascii_case("http") {
            return Err(bad(&format!(
                "{scheme:?}: only plain http (the token in the URL is what authenticates)"
            )));
        }
        let rest = rest.split('#').next().unwrap_or_default();
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, target) = rest.split_at(end);
        if authority.contains('@') {
            return Err(bad("credentials in the URL"));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (addr, after) = v6
                .split_once(']')
                .ok_or_else(|| bad("an IPv6 address without its closing bracket"))?;
            addr.parse::<Ipv6Addr>()
                .map_err(|_| bad(&format!("[{addr}] is not an IPv6 address")))?;
            let port = match after {
                "" => None,
                p => Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| bad("text after the IPv6 address"))?,
                ),
            };
            (addr, port)
        } else {
            match authority.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        if !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._:".contains(&b))
        {
            return Err(bad(&format!("{host:?} is not a host name or address")));
        }
        let port = match port {
            None => 80,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|&p| p > 0)
                .ok_or_else(|| bad(&format!("port {p:?}")))?,
        };
        if target.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(bad("a space or control character in the path"));
        }
        let target = if target.starts_with('/') {
            target.to_string()
        } else {
            format!("/{target}")
        };
        Ok(Url {
            host: host.to_string(),
            port,
            authority: authority.to_string(),
            target,
        })
    }

    /// The URL without its query: the token stays out of messages.
    pub fn redacted(&self) -> String {
        match self.target.split_once('?') {
            Some((path, _)) => format!("http://{}{path}?…", self.authority),
            None => format!("http://{}{}", self.authority, self.target),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// `HTTP/1.1 404 Not Found`.
    pub status_line: String,
    pub body: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    Complete(Response),
    /// Needs more bytes (none is an error before `eof`).
    Incomplete,
}

/// A response from the bytes read so far; `eof`: the server has closed.
/// Interim 1xx responses are skipped; the body is delimited by
/// Content-Length, chunked encoding, or the end of the connection.
pub fn parse_response(buf: &[u8], eof: bool) -> Result<Parsed, String> {
    let mut buf = buf;
    // Each turn drops one interim response head: bounded by the length.
    loop {
        let Some(head_end) = find(buf, b"\r\n\r\n") else {
            return incomplete(eof, "the response head");
        };
        let head = String::from_utf8_lossy(&buf[..head_end]);
        let rest = &buf[head_end + 4..];
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or_default().trim().to_string();
        let mut words = status_line.split(' ');
        let (version, code) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        let status = code
            .parse::<u16>()
            .ok()
            .filter(|s| version.starts_with("HTTP/1.") && code.len() == 3 && (100..600).contains(s))
            .ok_or_else(|| format!("not an HTTP/1.x status line: {status_line:?}"))?;
        if (100..200).contains(&status) {
            buf = rest;
            continue;
        }
        let (mut length, mut chunked) = (None, false);
        for l in lines {
            let Some((name, value)) = l.split_once(':') else {
                continue;
            };
            let (name, value) = (name.trim(), value.trim());
            if name.eq_ignore_ascii_case("content-length") {
                length = Some(
                    value
                        .parse::<usize>()
                        .map_err(|_| format!("Content-Length {value:?}"))?,
                );
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.to_ascii_lowercase().ends_with("chunked");
            }
        }
        let body = if status == 204 || status == 304 {
            Some(Vec::new())
        } else if chunked {
            dechunk(rest)?
        } else if let Some(n) = length {
            rest.get(..n).map(<[u8]>::to_vec)
        } else if eof {
            Some(rest.to_vec())
        } else {
            None
        };
        return match body {
            Some(body) => Ok(Parsed::Complete(Response {
                status,
                status_line,
                body,
            })),
            None => incomplete(eof, "the response body"),
        };
    }
}

fn incomplete(eof: bool, what: &str) -> Result<Parsed, String> {
    if eof {
        Err(format!("the connection closed before the end of {what}"))
    } else {
        Ok(Parsed::Incomplete)
    }
}

/// A chunked body, or None while its last chunk has not arrived.
fn dechunk(mut b: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let mut out = Vec::new();
    // Each turn consumes a size line: bounded by the length.
    loop {
        let Some(eol) = find(b, b"\r\n") else {
            return Ok(None);
        };
        let line = String::from_utf8_lossy(&b[..eol]);
        let size = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size, 16).map_err(|_| format!("chunk size {size:?}"))?;
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(Some(out));
        }
        let Some(chunk) = b.get(..size) else {
            return Ok(None);
        };
        out.extend_from_slice(chunk);
        let Some(after) = b.get(size..size + 2) else {
            return Ok(None);
        };
        if after != b"\r\n" {
            return Err("a chunk not followed by CRLF".into());
        }
        b = &b[size + 2..];
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// How often and how far apart to try again after a connection error or
/// a 5xx (bootd restarting, a proxy in between).
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    pub retries: u32,
    pub delay: Duration,
}

/// The agent's: 5 retries 2 s apart, about 10 s of bootd being away.
pub const RETRY: Retry = Retry {
    retries: 5,
    delay: Duration::from_secs(2),
};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// One attempt, connection to last byte.
const ATTEMPT_DEADLINE: Duration = Duration::from_secs(60);
/// bootd's answers are a line or two; more is not bootd.
const MAX_RESPONSE: usize = 1 << 20;

/// POST `body` as JSON; Ok on 2xx. A 3xx or 4xx ends it at once
/// ([`Error::Refused`], with the status line and body); connection
/// errors, malformed responses and 5xx are tried again per `retry`.
pub fn post_json(url: &Url, body: &[u8], retry: Retry) -> Result<Response, Error> {
    let mut last = String::new();
    for attempt in 0..=retry.retries {
        if attempt > 0 {
            eprintln!(
                "bootd-agent: POST {}: {last}; trying again in {} s ({attempt}/{})",
                url.redacted(),
                retry.delay.as_secs_f32(),
                retry.retries
            );
            std::thread::sleep(retry.delay);
        }
        match attempt_post(url, body) {
            Ok(r) if (200..300).contains(&r.status) => return Ok(r),
            Ok(r) if r.status >= 500 => last = r.status_line,
            Ok(r) => {
                return Err(Error::Refused {
                    url: url.redacted(),
                    status_line: r.status_line,
                    body: String::from_utf8_lossy(&r.body).trim().to_string(),
                })
            }
            Err(e) => last = e,
        }
    }
    Err(Error::GaveUp {
        url: url.redacted(),
        attempts: retry.retries + 1,
        last,
    })
}

fn attempt_post(url: &Url, body: &[u8]) -> Result<Response, String> {
    let started = Instant::now();
    let addrs = (url.host.as_str(), url.port)
        .to_socket_addrs()
        .map_err(|e| format!("resolving {}: {e}", url.host))?;
    let mut stream = None;
    let mut why = format!("{} has no address", url.host);
    for a in addrs {
        match TcpStream::connect_timeout(&a, CONNECT_TIMEOUT) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => why = format!("connecting to {a}: {e}"),
        }
    }
    let mut s = stream.ok_or(why)?;
    let io = |e: std::io::Error| e.to_string();
    s.set_read_timeout(Some(IO_TIMEOUT)).map_err(io)?;
    s.set_write_timeout(Some(IO_TIMEOUT)).map_err(io)?;
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: bootd-agent/{}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        url.target,
        url.authority,
        env!("CARGO_PKG_VERSION"),
        body.len()
    );
    s.write_all(head.as_bytes()).map_err(io)?;
    s.write_all(body).map_err(io)?;
    s.flush().map_err(io)?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if started.elapsed() > ATTEMPT_DEADLINE {
            return Err(format!(
                "no whole response in {} s",
                ATTEMPT_DEADLINE.as_secs()
            ));
        }
        let n = s
            .read(&mut chunk)
            .map_err(|e| format!("reading the response: {e}"))?;
        buf.extend_from_slice(&chunk[..n]);
        if let Parsed::Complete(r) = parse_response(&buf, n == 0)? {
            return Ok(r);
        }
        if buf.len() > MAX_RESPONSE {
            return Err(format!("a response over {MAX_RESPONSE} bytes"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> (String, u16, String, String) {
        let u = Url::parse(s).unwrap();
        (u.host, u.port, u.authority, u.target)
    }

    #[test]
    fn urls() {
        let t = |h: &str, p, a: &str, tg: &str| (h.to_string(), p, a.to_string(), tg.to_string());
        assert_eq!(
            url("http://192.0.2.1:8080/inspect/n1?token=abc"),
            t("192.0.2.1", 8080, "192.0.2.1:8080", "/inspect/n1?token=abc")
        );
        assert_eq!(
            url("http://bootd.lab"),
            t("bootd.lab", 80, "bootd.lab", "/")
        );
        assert_eq!(url("HTTP://h?x=1#frag"), t("h", 80, "h", "/?x=1"));
        assert_eq!(
            url("http://[2001:db8::5]:81/a"),
            t("2001:db8::5", 81, "[2001:db8::5]:81", "/a")
        );
        assert_eq!(url("http://[::1]/"), t("::1", 80, "[::1]", "/"));
        for bad in [
            "https://h/",
            "h/path",
            "http:///x",
            "http://h:0/",
            "http://h:99999/",
            "http://h:/",
            "http://u:p@h/",
            "http://[::1/",
            "http://[zz]/",
            "http://[::1]x/",
            "http://::1/",
            "http://h/a b",
            "http://h/\r\nX: y",
            "http://h o/",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_token_stays_out_of_messages() {
        let u = Url::parse("http://b:8080/inspect?token=s3cret").unwrap();
        assert_eq!(u.redacted(), "http://b:8080/inspect?…");
        assert_eq!(Url::parse("http://b/x").unwrap().redacted(), "http://b/x");
    }

    fn complete(b: &[u8], eof: bool) -> Response {
        match parse_response(b, eof).unwrap() {
            Parsed::Complete(r) => r,
            Parsed::Incomplete => panic!("incomplete: {:?}", String::from_utf8_lossy(b)),
        }
    }

    #[test]
    fn responses() {
        let r = complete(
            b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nokEXTRA",
            false,
        );
        assert_eq!(
            (r.status, r.status_line.as_str(), &r.body[..]),
            (201, "HTTP/1.1 201 Created", &b"ok"[..])
        );
        let r = complete(b"HTTP/1.0 403 Forbidden\r\n\r\nbad token\n", true);
        assert_eq!((r.status, &r.body[..]), (403, &b"bad token\n"[..]));
        let r = complete(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            false,
        );
        assert_eq!(r.status, 200);
        let r = complete(
            b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n4;x=y\r\nwell\r\n3\r\n...\r\n0\r\n\r\n",
            false,
        );
        assert_eq!((r.status, &r.body[..]), (500, &b"well..."[..]));
        assert_eq!(
            complete(b"HTTP/1.1 204 No Content\r\n\r\n", false).body,
            b""
        );
    }

    #[test]
    fn partial_responses_wait_then_fail_at_eof() {
        for partial in [
            &b""[..],
            b"HTTP/1.1 200 OK\r\nContent-Len",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabc",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n",
            b"HTTP/1.1 200 OK\r\n\r\nuntil close",
        ] {
            assert_eq!(parse_response(partial, false), Ok(Parsed::Incomplete));
        }
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabc", true).is_err());
        assert!(parse_response(b"HTTP/1.1 200", true).is_err());
    }

    #[test]
    fn garbage_responses_are_errors() {
        for bad in [
            &b"SSH-2.0-OpenSSH_9.2\r\n\r\n"[..],
            b"HTTP/1.1 2000 OK\r\n\r\n",
            b"HTTP/1.1 099 Low\r\n\r\n",
            b"HTTP/2 200\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY",
        ] {
            assert!(
                parse_response(bad, false).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
