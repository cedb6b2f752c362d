//! Structural checks on a raw DHCP packet before it is decoded, so that
//! malformed input is refused with a reason instead of half-parsed:
//! minimum length, BOOTP header sanity, the magic cookie, every option's
//! length inside the packet, an END, option overload (52) pointing only
//! at well-formed `file`/`sname` areas, and the lengths that options of a
//! fixed shape must have ([`shape_ok`]). Overload is honoured from the
//! options field only, so it cannot loop.

const HEADER: usize = 236;
const COOKIE: [u8; 4] = [99, 130, 83, 99];
const SNAME: std::ops::Range<usize> = 44..108;
const FILE: std::ops::Range<usize> = 108..236;

/// Options whose value has a fixed shape: the length their RFC gives.
/// dhcproto (0.14) checks these only with `debug_assert!` (a panic in debug
/// builds, found by the `dhcp_request` fuzz target) or subtracts from the
/// length without a check, so such a packet is refused before it is decoded.
fn shape_ok(code: u8, len: usize) -> bool {
    match code {
        80 => len == 0,        // Rapid Commit (RFC 4039)
        81 => len >= 3,        // Client FQDN: flags, RCODE1, RCODE2, name (RFC 4702)
        94 => len == 3,        // Client Network Interface Identifier (RFC 4578)
        151 => len >= 1,       // BLQ status code, then a message (RFC 6926)
        152..=155 => len == 4, // BLQ times (RFC 6926)
        _ => true,
    }
}

/// Walks one option area; `Ok(overload)` is option 52's value if present.
/// Options of one code given back to back (no PAD between) are one value,
/// concatenated (RFC 3396), and that is what the decoder builds: the shape
/// ([`shape_ok`]) is judged on each such run, and on each piece alone.
fn walk(area: &[u8], must_end: bool) -> Result<Option<u8>, &'static str> {
    const MISFIT: &str = "option length does not fit the option's type";
    let mut i = 0;
    let mut overload = None;
    // The current run of one code: (code, total length).
    let mut run: Option<(u8, usize)> = None;
    let flush = |run: &mut Option<(u8, usize)>| match run.take() {
        Some((code, total)) if !shape_ok(code, total) => Err(MISFIT),
        _ => Ok(()),
    };
    while i < area.len() {
        match area[i] {
            0 => {
                flush(&mut run)?;
                i += 1
            }
            255 => {
                flush(&mut run)?;
                return Ok(overload);
            }
            code => {
                let len = *area.get(i + 1).ok_or("option length past the end")? as usize;
                let val = area
                    .get(i + 2..i + 2 + len)
                    .ok_or("option value past the end")?;
                if code == 52 {
                    if len != 1 || !(1..=3).contains(&val[0]) {
                        return Err("bad option overload value");
                    }
                    overload = Some(val[0]);
                }
                if code == 53 && len != 1 {
                    return Err("bad message type length");
                }
                if !shape_ok(code, len) {
                    return Err(MISFIT);
                }
                match &mut run {
                    Some((c, total)) if *c == code => *total += len,
                    _ => {
                        flush(&mut run)?;
                        run = Some((code, len));
                    }
                }
                i += 2 + len;
            }
        }
    }
    flush(&mut run)?;
    if must_end {
        Err("options not terminated by END")
    } else {
        Ok(overload)
    }
}

/// Option 82 (Relay Agent Information) exactly as the relay wrote it: its
/// sub-options in their order, every byte kept (pieces of a long option
/// joined, RFC 3396). From the options field only, where a relay appends
/// it (RFC 3046 §2.1). `p` has passed [`check`].
pub fn relay_agent_info(p: &[u8]) -> Option<Vec<u8>> {
    let area = p.get(HEADER + 4..)?;
    let mut out: Option<Vec<u8>> = None;
    let mut i = 0;
    while i < area.len() {
        match area[i] {
            0 => i += 1,
            255 => break,
            code => {
                let len = *area.get(i + 1)? as usize;
                let val = area.get(i + 2..i + 2 + len)?;
                if code == 82 {
                    out.get_or_insert_with(Vec::new).extend_from_slice(val);
                }
                i += 2 + len;
            }
        }
    }
    // An empty option 82 holds no sub-option to echo (nor can an empty
    // option be encoded back).
    out.filter(|v| !v.is_empty())
}

/// Option 82's circuit-id and remote-id, each when the relay sent it.
pub type RelayIds<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// Option 82's circuit-id (1) and remote-id (2) sub-options, from its
/// value. `None` when the value is not a well-formed list of sub-options
/// (then nothing is matched on it, though it is still echoed).
pub fn relay_ids(v: &[u8]) -> Option<RelayIds<'_>> {
    let (mut circuit, mut remote) = (None, None);
    let mut i = 0;
    while i < v.len() {
        let code = v[i];
        let len = *v.get(i + 1)? as usize;
        let val = v.get(i + 2..i + 2 + len)?;
        match code {
            1 => circuit = circuit.or(Some(val)),
            2 => remote = remote.or(Some(val)),
            _ => {}
        }
        i += 2 + len;
    }
    Some((circuit, remote))
}

pub fn check(p: &[u8]) -> Result<(), &'static str> {
    if p.len() < HEADER + 4 {
        return Err("shorter than a BOOTP header and magic cookie");
    }
    if p[0] != 1 {
        return Err("not a BOOTREQUEST");
    }
    if p[1] != 1 || p[2] != 6 {
        return Err("not Ethernet (htype 1, hlen 6)");
    }
    if p[3] > 16 {
        return Err("relay hop count over 16");
    }
    if p[HEADER..HEADER + 4] != COOKIE {
        return Err("bad magic cookie");
    }
    let overload = walk(&p[HEADER + 4..], true)?;
    match overload {
        Some(1) => walk(&p[FILE], false).map(|_| ()),
        Some(2) => walk(&p[SNAME], false).map(|_| ()),
        Some(3) => walk(&p[FILE], false)
            .and_then(|_| walk(&p[SNAME], false))
            .map(|_| ()),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Vec<u8> {
        let mut p = vec![0u8; 240];
        p[0] = 1;
        p[1] = 1;
        p[2] = 6;
        p[236..240].copy_from_slice(&COOKIE);
        p
    }

    #[test]
    fn option_82_is_read_as_written() {
        // A long option 82 in two pieces (RFC 3396), with PAD and another
        // option between them: joined, in order, nothing else.
        let mut p = base();
        let first: Vec<u8> = std::iter::once(1)
            .chain(std::iter::once(255))
            .chain([b'a'; 253])
            .collect();
        p.extend_from_slice(&[53, 1, 1, 82, 255]);
        p.extend_from_slice(&first);
        p.extend_from_slice(&[0, 82, 4]);
        p.extend_from_slice(&[b'a', b'a', 2, 0]);
        p.extend_from_slice(&[12, 1, b'h', 255]);
        assert_eq!(check(&p), Ok(()));
        let got = relay_agent_info(&p).unwrap();
        assert_eq!(got.len(), 259);
        assert_eq!(
            relay_ids(&got),
            Some((Some(&[b'a'; 255][..]), Some(&[][..])))
        );
        let mut none = base();
        none.extend_from_slice(&[53, 1, 1, 255]);
        assert_eq!(relay_agent_info(&none), None);
        let mut empty = base();
        empty.extend_from_slice(&[53, 1, 1, 82, 0, 255]);
        assert_eq!(relay_agent_info(&empty), None);
        // Sub-options that overrun: echoed, but naming no port.
        assert_eq!(relay_ids(&[1, 5, b'x']), None);
        assert_eq!(
            relay_ids(&[9, 1, 0, 1, 1, b'p']),
            Some((Some(&b"p"[..]), None))
        );
    }

    #[test]
    fn accepts_and_refuses() {
        let mut ok = base();
        ok.extend_from_slice(&[53, 1, 1, 255]);
        assert_eq!(check(&ok), Ok(()));
        for (bad, why) in [
            (vec![], "shorter"),
            (
                {
                    let mut p = ok.clone();
                    p[236] = 0;
                    p
                },
                "cookie",
            ),
            (
                {
                    let mut p = base();
                    p.extend_from_slice(&[53, 1, 1, 12, 200, b'x']);
                    p
                },
                "past the end",
            ),
            (
                {
                    let mut p = base();
                    p.extend_from_slice(&[53, 1, 1]);
                    p
                },
                "END",
            ),
            (
                {
                    let mut p = base();
                    p.extend_from_slice(&[53, 1, 1, 52, 1, 9, 255]);
                    p
                },
                "overload",
            ),
            (
                {
                    let mut p = base();
                    p.extend_from_slice(&[53, 1, 1, 52, 1, 1, 255]);
                    p[108] = 12;
                    p[109] = 250;
                    p
                },
                "past the end",
            ),
            (
                {
                    let mut p = ok.clone();
                    p[0] = 2;
                    p
                },
                "BOOTREQUEST",
            ),
            (
                {
                    let mut p = ok.clone();
                    p[3] = 17;
                    p
                },
                "hop",
            ),
        ] {
            let e = check(&bad).unwrap_err();
            assert!(e.contains(why), "{e} vs {why}");
        }
        // Options of a fixed shape with another length are refused; with
        // their own length they pass and decode (this test runs with debug
        // assertions, which is where dhcproto's own checks would panic).
        for (code, bad, good) in [
            (80u8, 1u8, 0u8),
            (81, 2, 3),
            (94, 2, 3),
            (151, 0, 1),
            (152, 3, 4),
            (153, 5, 4),
            (154, 0, 4),
            (155, 8, 4),
        ] {
            let with = |len: u8| {
                let mut p = base();
                p.extend_from_slice(&[53, 1, 1, code, len]);
                p.extend(std::iter::repeat_n(0u8, len as usize));
                p.push(255);
                p
            };
            let e = check(&with(bad)).unwrap_err();
            assert!(e.contains("fit"), "option {code} length {bad}: {e}");
            let p = with(good);
            assert_eq!(check(&p), Ok(()), "option {code} length {good}");
            let _ = dhcproto::v4::Message::decode(&mut dhcproto::Decoder::new(&p));
        }
        // Given back to back, an option is one concatenated value (RFC
        // 3396), and that is what must fit: 94 as 3 + 3 bytes is refused
        // (the fuzz target's regress-option94-split). Each piece must fit
        // too (a PAD or another option between makes two values, each
        // decoded alone: 154 of length 0, then 127, then 154 of 4).
        use dhcproto::{Decodable, Decoder};
        let twice = |a: u8, b: u8| {
            let mut p = base();
            p.extend_from_slice(&[53, 1, 1, 94, a]);
            p.extend(std::iter::repeat_n(1u8, a as usize));
            p.extend_from_slice(&[94, b]);
            p.extend(std::iter::repeat_n(2u8, b as usize));
            p.push(255);
            p
        };
        assert!(check(&twice(3, 3)).unwrap_err().contains("fit"));
        assert!(check(&twice(1, 2)).unwrap_err().contains("fit"));
        let mut p = base();
        p.extend_from_slice(&[
            53, 1, 1, 154, 0, 0, 127, 4, 0, 0, 0, 1, 154, 4, 0, 0, 0, 2, 255,
        ]);
        assert!(check(&p).unwrap_err().contains("fit"), "a piece alone");
        // Each fitting, apart: two values, the later one kept; decodes.
        let mut p = base();
        p.extend_from_slice(&[53, 1, 1, 94, 3, 1, 2, 3, 0, 94, 3, 4, 5, 6, 255]);
        assert_eq!(check(&p), Ok(()));
        let _ = dhcproto::v4::Message::decode(&mut Decoder::new(&p));
        // Overload into a file area with an option and an END is fine.
        let mut p = base();
        p.extend_from_slice(&[53, 1, 1, 52, 1, 1, 255]);
        p[108..112].copy_from_slice(&[67, 1, b'x', 255]);
        assert_eq!(check(&p), Ok(()));
    }
}
