//! TFTP packets (RFC 1350) and option negotiation (RFC 2347 option
//! extension, RFC 2348 blksize, RFC 2349 timeout and tsize, RFC 7440
//! windowsize). Pure: bytes in, values out, no I/O.
//!
//! Parsing borrows from the datagram, so a request costs one small `Vec`
//! (its options) and nothing else.

use std::borrow::Cow;
use std::fmt;

pub const OP_RRQ: u16 = 1;
pub const OP_WRQ: u16 = 2;
pub const OP_DATA: u16 = 3;
pub const OP_ACK: u16 = 4;
pub const OP_ERROR: u16 = 5;
pub const OP_OACK: u16 = 6;

/// RFC 2347: a request, options included, "must not exceed 512 octets".
/// Every client we know stays far below; anything longer is refused rather
/// than truncated.
pub const MAX_REQUEST: usize = 512;
/// RFC 1350's block size, used when no `blksize` is negotiated.
pub const DEFAULT_BLKSIZE: u16 = 512;
/// RFC 2348's bounds for `blksize`.
pub const MIN_BLKSIZE: u16 = 8;
pub const MAX_BLKSIZE: u16 = 65464;

/// ERROR codes of RFC 1350 (0-7) and RFC 2347 (8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum ErrorCode {
    /// "Not defined, see error message": used for "server busy".
    NotDefined = 0,
    FileNotFound = 1,
    AccessViolation = 2,
    DiskFull = 3,
    IllegalOperation = 4,
    UnknownTid = 5,
    FileExists = 6,
    NoSuchUser = 7,
    OptionNegotiation = 8,
}

/// Transfer mode. `netascii` is served byte for byte, as `octet`: every
/// file we serve is a binary or an ASCII script with LF line ends, which
/// boot loaders read either way (tftpd-hpa without `-r` and many appliance
/// servers do the same), and translating would break `tsize`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Octet,
    Netascii,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Octet => "octet",
            Mode::Netascii => "netascii",
        }
    }
}

/// An RRQ or WRQ. Options are kept as sent (names in the client's case);
/// [`negotiate`] interprets them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    pub filename: &'a str,
    pub mode: Mode,
    pub options: Vec<(&'a str, &'a str)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet<'a> {
    Rrq(Request<'a>),
    Wrq(Request<'a>),
    Data {
        block: u16,
        data: &'a [u8],
    },
    Ack {
        block: u16,
    },
    /// The message is decoded leniently: a client's ERROR ends a transfer
    /// whatever its text looks like.
    Error {
        code: u16,
        message: Cow<'a, str>,
    },
    Oack {
        options: Vec<(&'a str, &'a str)>,
    },
}

/// Why a datagram is not a valid TFTP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("shorter than its header")]
    TooShort,
    #[error("longer than allowed ({MAX_REQUEST} bytes for a request)")]
    TooLong,
    #[error("unknown opcode {0}")]
    UnknownOpcode(u16),
    #[error("last field not terminated by NUL")]
    Unterminated,
    #[error("no transfer mode")]
    MissingMode,
    #[error("empty filename")]
    EmptyFilename,
    #[error("field is not UTF-8")]
    NotUtf8,
    #[error("unsupported transfer mode")]
    BadMode,
    #[error("option without value")]
    OptionWithoutValue,
}

impl ParseError {
    /// A short fixed label for metrics.
    pub fn reason(self) -> &'static str {
        match self {
            ParseError::TooShort => "too_short",
            ParseError::TooLong => "too_long",
            ParseError::UnknownOpcode(_) => "unknown_opcode",
            ParseError::Unterminated => "unterminated",
            ParseError::MissingMode => "missing_mode",
            ParseError::EmptyFilename => "empty_filename",
            ParseError::NotUtf8 => "not_utf8",
            ParseError::BadMode => "bad_mode",
            ParseError::OptionWithoutValue => "option_without_value",
        }
    }
}

/// Parses one datagram.
pub fn parse(buf: &[u8]) -> Result<Packet<'_>, ParseError> {
    if buf.len() < 2 {
        return Err(ParseError::TooShort);
    }
    let opcode = u16::from_be_bytes([buf[0], buf[1]]);
    let body = &buf[2..];
    match opcode {
        OP_RRQ | OP_WRQ => {
            if buf.len() > MAX_REQUEST {
                return Err(ParseError::TooLong);
            }
            let req = parse_request(body)?;
            Ok(if opcode == OP_RRQ {
                Packet::Rrq(req)
            } else {
                Packet::Wrq(req)
            })
        }
        OP_DATA => {
            let block = u16_at(body)?;
            let data = &body[2..];
            if data.len() > usize::from(MAX_BLKSIZE) {
                return Err(ParseError::TooLong);
            }
            Ok(Packet::Data { block, data })
        }
        OP_ACK => Ok(Packet::Ack {
            block: u16_at(body)?,
        }),
        OP_ERROR => {
            let code = u16_at(body)?;
            // Some clients leave out the final NUL; take the text up to the
            // first NUL or the end.
            let text = &body[2..];
            let text = text.split(|b| *b == 0).next().unwrap_or_default();
            Ok(Packet::Error {
                code,
                message: String::from_utf8_lossy(text),
            })
        }
        OP_OACK => {
            let fields = nul_fields(body)?;
            Ok(Packet::Oack {
                options: pairs(&fields)?,
            })
        }
        other => Err(ParseError::UnknownOpcode(other)),
    }
}

fn u16_at(body: &[u8]) -> Result<u16, ParseError> {
    match body {
        [a, b, ..] => Ok(u16::from_be_bytes([*a, *b])),
        _ => Err(ParseError::TooShort),
    }
}

/// NUL-terminated UTF-8 strings; the body must end with a NUL.
fn nul_fields(body: &[u8]) -> Result<Vec<&str>, ParseError> {
    match body.split_last() {
        Some((0, _)) => {}
        Some(_) => return Err(ParseError::Unterminated),
        // An empty body has no fields; callers decide if that is an error.
        None => return Ok(Vec::new()),
    }
    body[..body.len() - 1]
        .split(|b| *b == 0)
        .map(|f| std::str::from_utf8(f).map_err(|_| ParseError::NotUtf8))
        .collect()
}

fn pairs<'a>(fields: &[&'a str]) -> Result<Vec<(&'a str, &'a str)>, ParseError> {
    let mut out = Vec::with_capacity(fields.len() / 2);
    let mut it = fields.iter();
    while let Some(name) = it.next() {
        // Some firmware pads its request with NULs after the last option:
        // an empty name ends the list (tftpd-hpa reads it the same way).
        if name.is_empty() {
            break;
        }
        let value = it.next().ok_or(ParseError::OptionWithoutValue)?;
        out.push((*name, *value));
    }
    Ok(out)
}

fn parse_request(body: &[u8]) -> Result<Request<'_>, ParseError> {
    if body.is_empty() {
        return Err(ParseError::Unterminated);
    }
    let fields = nul_fields(body)?;
    let (filename, mode) = match fields.as_slice() {
        [f, m, ..] => (*f, *m),
        _ => return Err(ParseError::MissingMode),
    };
    if filename.is_empty() {
        return Err(ParseError::EmptyFilename);
    }
    let mode = if mode.eq_ignore_ascii_case("octet") {
        Mode::Octet
    } else if mode.eq_ignore_ascii_case("netascii") {
        Mode::Netascii
    } else {
        // "mail" (obsolete since RFC 1350) and anything else.
        return Err(ParseError::BadMode);
    };
    Ok(Request {
        filename,
        mode,
        options: pairs(&fields[2..])?,
    })
}

impl Packet<'_> {
    /// Appends the wire form to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Packet::Rrq(r) | Packet::Wrq(r) => {
                let op = if matches!(self, Packet::Rrq(_)) {
                    OP_RRQ
                } else {
                    OP_WRQ
                };
                out.extend_from_slice(&op.to_be_bytes());
                put_str(out, r.filename);
                put_str(out, r.mode.as_str());
                put_options(out, &r.options);
            }
            Packet::Data { block, data } => {
                out.extend_from_slice(&data_header(*block));
                out.extend_from_slice(data);
            }
            Packet::Ack { block } => out.extend_from_slice(&ack(*block)),
            Packet::Error { code, message } => {
                out.extend_from_slice(&OP_ERROR.to_be_bytes());
                out.extend_from_slice(&code.to_be_bytes());
                put_str(out, message);
            }
            Packet::Oack { options } => {
                out.extend_from_slice(&OP_OACK.to_be_bytes());
                put_options(out, options);
            }
        }
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(s.as_bytes());
    out.push(0);
}

fn put_options(out: &mut Vec<u8>, options: &[(&str, &str)]) {
    for (k, v) in options {
        put_str(out, k);
        put_str(out, v);
    }
}

/// The 4-byte header of a DATA packet; the payload follows it.
pub fn data_header(block: u16) -> [u8; 4] {
    let [a, b] = OP_DATA.to_be_bytes();
    let [c, d] = block.to_be_bytes();
    [a, b, c, d]
}

pub fn ack(block: u16) -> [u8; 4] {
    let [a, b] = OP_ACK.to_be_bytes();
    let [c, d] = block.to_be_bytes();
    [a, b, c, d]
}

pub fn error(code: ErrorCode, message: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + message.len());
    Packet::Error {
        code: code as u16,
        message: Cow::Borrowed(message),
    }
    .encode(&mut out);
    out
}

/// The server's limits for negotiated options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_blksize: u16,
    pub max_windowsize: u16,
    /// Largest `timeout` (seconds) honoured; a larger one is not
    /// acknowledged (RFC 2349 lets a server decline it, not lower it), so
    /// one client cannot hold a transfer slot for minutes.
    pub max_timeout: u8,
}

/// What the server agreed to. `None` means the option was not asked for (or
/// its value was unusable, which RFC 2347 lets a server treat the same way):
/// it is left out of the OACK and the RFC 1350 default applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Negotiated {
    pub blksize: Option<u16>,
    pub windowsize: Option<u16>,
    /// Seconds (RFC 2349: 1-255), acknowledged with the client's value.
    pub timeout: Option<u8>,
    /// The client asked for the transfer size.
    pub tsize: bool,
}

impl Negotiated {
    pub fn block_size(&self) -> u16 {
        self.blksize.unwrap_or(DEFAULT_BLKSIZE)
    }

    pub fn window_size(&self) -> u16 {
        self.windowsize.unwrap_or(1)
    }

    /// An OACK is owed when at least one option was accepted; otherwise
    /// the transfer starts with DATA 1 as in RFC 1350.
    pub fn needs_oack(&self) -> bool {
        self.blksize.is_some() || self.windowsize.is_some() || self.timeout.is_some() || self.tsize
    }

    /// The OACK for a file of `size` bytes, appended to `out`.
    pub fn encode_oack(&self, size: u64, out: &mut Vec<u8>) {
        out.extend_from_slice(&OP_OACK.to_be_bytes());
        let mut num = |name: &str, v: u64| {
            put_str(out, name);
            put_str(out, &v.to_string());
        };
        if let Some(b) = self.blksize {
            num("blksize", b.into());
        }
        if self.tsize {
            num("tsize", size);
        }
        if let Some(t) = self.timeout {
            num("timeout", t.into());
        }
        if let Some(w) = self.windowsize {
            num("windowsize", w.into());
        }
    }
}

/// Interprets a request's options against the server's limits. Names are
/// case-insensitive; the first occurrence of a name wins; unknown names and
/// values out of their RFC range are ignored (not acknowledged). A
/// `blksize` or `windowsize` above the server's limit is acknowledged at
/// the limit, as RFC 2348 and RFC 7440 allow; a smaller one is honoured.
pub fn negotiate(options: &[(&str, &str)], limits: Limits) -> Negotiated {
    let max_blksize = limits.max_blksize.clamp(MIN_BLKSIZE, MAX_BLKSIZE);
    let max_windowsize = limits.max_windowsize.max(1);
    let mut n = Negotiated::default();
    let mut seen = [false; 4];
    for (name, value) in options {
        let slot = ["blksize", "tsize", "timeout", "windowsize"]
            .iter()
            .position(|k| name.eq_ignore_ascii_case(k));
        let Some(slot) = slot else { continue };
        if std::mem::replace(&mut seen[slot], true) {
            continue;
        }
        let Some(v) = number(value) else { continue };
        match slot {
            0 if (u64::from(MIN_BLKSIZE)..=u64::from(MAX_BLKSIZE)).contains(&v) => {
                n.blksize = Some((v as u16).min(max_blksize));
            }
            1 => n.tsize = true,
            2 if (1..=u64::from(limits.max_timeout.max(1))).contains(&v) => {
                n.timeout = Some(v as u8)
            }
            3 if (1..=65535).contains(&v) => n.windowsize = Some((v as u16).min(max_windowsize)),
            _ => {}
        }
    }
    n
}

/// Decimal digits only (no sign, no spaces), at most u64.
fn number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Displays a client-supplied name safely for logs (control characters and
/// quotes escaped).
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}\"", self.0.escape_debug())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(p: &Packet<'_>) -> Vec<u8> {
        let mut v = Vec::new();
        p.encode(&mut v);
        v
    }

    const LIMITS: Limits = Limits {
        max_blksize: 1468,
        max_windowsize: 64,
        max_timeout: 255,
    };

    #[test]
    fn rrq_with_options() {
        let p = parse(b"\x00\x01pxelinux.0\x00octet\x00tsize\x000\x00BLKSIZE\x001432\x00").unwrap();
        let Packet::Rrq(r) = p else { panic!("{p:?}") };
        assert_eq!(r.filename, "pxelinux.0");
        assert_eq!(r.mode, Mode::Octet);
        assert_eq!(r.options, vec![("tsize", "0"), ("BLKSIZE", "1432")]);
    }

    #[test]
    fn mode_is_case_insensitive_and_netascii_accepted() {
        let Packet::Rrq(r) = parse(b"\x00\x01f\x00OcTeT\x00").unwrap() else {
            panic!()
        };
        assert_eq!(r.mode, Mode::Octet);
        let Packet::Rrq(r) = parse(b"\x00\x01f\x00NETASCII\x00").unwrap() else {
            panic!()
        };
        assert_eq!(r.mode, Mode::Netascii);
        assert_eq!(parse(b"\x00\x01f\x00mail\x00"), Err(ParseError::BadMode));
    }

    #[test]
    fn trailing_nul_padding_is_tolerated() {
        let Packet::Rrq(r) = parse(b"\x00\x01f\x00octet\x00blksize\x001024\x00\x00\x00").unwrap()
        else {
            panic!()
        };
        assert_eq!(r.options, vec![("blksize", "1024")]);
    }

    #[test]
    fn malformed_requests() {
        let cases: &[(&[u8], ParseError)] = &[
            (b"", ParseError::TooShort),
            (b"\x00", ParseError::TooShort),
            (b"\x00\x01", ParseError::Unterminated),
            (b"\x00\x01file", ParseError::Unterminated),
            (b"\x00\x01file\x00octet", ParseError::Unterminated),
            (b"\x00\x01file\x00", ParseError::MissingMode),
            (b"\x00\x01\x00octet\x00", ParseError::EmptyFilename),
            (b"\x00\x01f\xffe\x00octet\x00", ParseError::NotUtf8),
            (
                b"\x00\x01f\x00octet\x00blksize\x00",
                ParseError::OptionWithoutValue,
            ),
            (b"\x00\x09f\x00octet\x00", ParseError::UnknownOpcode(9)),
            (b"\x00\x00", ParseError::UnknownOpcode(0)),
            (b"\x00\x04\x00", ParseError::TooShort),
            (b"\x00\x03", ParseError::TooShort),
        ];
        for (bytes, want) in cases {
            assert_eq!(parse(bytes), Err(*want), "{bytes:?}");
        }
        let mut long = b"\x00\x01".to_vec();
        long.extend(std::iter::repeat_n(b'a', 600));
        long.extend_from_slice(b"\x00octet\x00");
        assert_eq!(parse(&long), Err(ParseError::TooLong));
        let mut wrq = long.clone();
        wrq[1] = 2;
        assert_eq!(parse(&wrq), Err(ParseError::TooLong));
    }

    #[test]
    fn round_trips() {
        let packets = [
            Packet::Rrq(Request {
                filename: "grub/grub.cfg-01-52-54-00-77-00-10",
                mode: Mode::Octet,
                options: vec![],
            }),
            Packet::Wrq(Request {
                filename: "x",
                mode: Mode::Netascii,
                options: vec![("blksize", "8")],
            }),
            Packet::Rrq(Request {
                filename: "ipxe.efi",
                mode: Mode::Octet,
                options: vec![
                    ("tsize", "0"),
                    ("blksize", "1468"),
                    ("windowsize", "16"),
                    ("timeout", "3"),
                ],
            }),
            Packet::Data {
                block: 0,
                data: b"",
            },
            Packet::Data {
                block: 65535,
                data: &[7u8; 1468],
            },
            Packet::Ack { block: 0 },
            Packet::Ack { block: 513 },
            Packet::Error {
                code: 1,
                message: "file not found".into(),
            },
            Packet::Error {
                code: 0,
                message: "".into(),
            },
            Packet::Oack {
                options: vec![("tsize", "123"), ("blksize", "1468")],
            },
            Packet::Oack { options: vec![] },
        ];
        for p in packets {
            assert_eq!(parse(&enc(&p)).unwrap(), p);
        }
    }

    #[test]
    fn error_without_final_nul_or_utf8() {
        assert_eq!(
            parse(b"\x00\x05\x00\x08abort").unwrap(),
            Packet::Error {
                code: 8,
                message: "abort".into()
            }
        );
        let Packet::Error { code: 0, message } = parse(b"\x00\x05\x00\x00\xffx\x00").unwrap()
        else {
            panic!()
        };
        assert_eq!(message, "\u{fffd}x");
    }

    #[test]
    fn helpers_match_encode() {
        assert_eq!(ack(0x0102), *enc(&Packet::Ack { block: 0x0102 }));
        assert_eq!(
            data_header(9)[..],
            enc(&Packet::Data {
                block: 9,
                data: b""
            })[..]
        );
        assert_eq!(
            error(ErrorCode::AccessViolation, "no"),
            b"\x00\x05\x00\x02no\x00"
        );
    }

    #[test]
    fn negotiation_clamps_and_honours() {
        let n = negotiate(
            &[
                ("blksize", "65464"),
                ("windowsize", "1000"),
                ("tsize", "0"),
                ("timeout", "5"),
            ],
            LIMITS,
        );
        assert_eq!(
            n,
            Negotiated {
                blksize: Some(1468),
                windowsize: Some(64),
                timeout: Some(5),
                tsize: true
            }
        );
        let n = negotiate(&[("BlkSize", "1428"), ("WINDOWSIZE", "16")], LIMITS);
        assert_eq!((n.block_size(), n.window_size()), (1428, 16));
        assert!(n.needs_oack());
    }

    #[test]
    fn negotiation_ignores_bad_values_and_unknown_names() {
        let n = negotiate(
            &[
                ("blksize", "7"),
                ("timeout", "0"),
                ("windowsize", "0"),
                ("utimeout", "100"),
                ("tsize", "-1"),
                ("multicast", ""),
            ],
            LIMITS,
        );
        assert_eq!(n, Negotiated::default());
        assert!(!n.needs_oack());
        assert_eq!((n.block_size(), n.window_size()), (512, 1));
        let n = negotiate(
            &[
                ("blksize", "65465"),
                ("timeout", "256"),
                ("windowsize", "65536"),
                ("blksize", "1024"),
            ],
            LIMITS,
        );
        // The first blksize counts even when unusable.
        assert_eq!(n, Negotiated::default());
        let n = negotiate(
            &[("blksize", " 512"), ("blksize", "99999999999999999999999")],
            LIMITS,
        );
        assert_eq!(n.blksize, None);
    }

    #[test]
    fn negotiation_bounds_the_limits_themselves() {
        let n = negotiate(
            &[("blksize", "9000"), ("windowsize", "4")],
            Limits {
                max_blksize: 1,
                max_windowsize: 0,
                max_timeout: 5,
            },
        );
        assert_eq!((n.blksize, n.windowsize), (Some(MIN_BLKSIZE), Some(1)));
    }

    /// `timeout=255` would hold a slot for over 20 minutes of retries: a
    /// timeout above the server's cap is not acknowledged (the default applies).
    #[test]
    fn a_timeout_above_the_cap_is_not_acknowledged() {
        let l = Limits {
            max_timeout: 5,
            ..LIMITS
        };
        assert_eq!(negotiate(&[("timeout", "255")], l).timeout, None);
        assert_eq!(negotiate(&[("timeout", "5")], l).timeout, Some(5));
        assert_eq!(negotiate(&[("timeout", "1")], l).timeout, Some(1));
    }

    #[test]
    fn oack_lists_accepted_options_with_file_size() {
        let n = negotiate(&[("tsize", "0"), ("blksize", "1432")], LIMITS);
        let mut out = Vec::new();
        n.encode_oack(4_294_967_296, &mut out);
        assert_eq!(
            parse(&out).unwrap(),
            Packet::Oack {
                options: vec![("blksize", "1432"), ("tsize", "4294967296")]
            }
        );
    }

    /// A cheap stand-in for the fuzz target that runs with every `cargo
    /// test`: mutated valid packets never panic the parser, and what parses
    /// re-encodes to the same packet.
    #[test]
    fn mutated_datagrams_never_panic_and_round_trip() {
        let seeds: [&[u8]; 5] = [
            b"\x00\x01grub/grub.cfg\x00octet\x00tsize\x000\x00blksize\x001428\x00",
            b"\x00\x02f\x00netascii\x00",
            b"\x00\x04\x12\x34",
            b"\x00\x05\x00\x08User aborted the transfer\x00",
            b"\x00\x06tsize\x0012\x00windowsize\x0016\x00",
        ];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut parsed = 0;
        for i in 0..100_000 {
            let mut d = seeds[i % seeds.len()].to_vec();
            for _ in 0..=(rand() % 4) {
                let at = (rand() as usize) % (d.len() + 1);
                match rand() % 4 {
                    0 => d.truncate(at),
                    1 => d.insert(at, rand() as u8),
                    2 => d.insert(at, 0),
                    _ if at < d.len() => d[at] = rand() as u8,
                    _ => {}
                }
            }
            if let Ok(p) = parse(&d) {
                parsed += 1;
                assert_eq!(parse(&enc(&p)), Ok(p), "{d:?}");
            }
        }
        assert!(parsed > 10_000, "mutations too destructive: {parsed}");
    }

    #[test]
    fn escaped_names() {
        assert_eq!(Escaped("a\nb\"\u{7}").to_string(), r#""a\nb\"\u{7}""#);
    }
}
