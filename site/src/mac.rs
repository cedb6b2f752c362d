//! MAC addresses: parsed from any common spelling, shown in one canonical form.

use std::fmt;
use std::str::FromStr;

/// A 48-bit Ethernet address. Displays as lower-case, colon-separated hex,
/// the form every rendered file and every lookup uses, so `52:54:00:AA:..`
/// from PowerVM and `52-54-00-aa-..` from GRUB meet the same node.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Mac(pub [u8; 6]);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("malformed MAC address {0:?}: want six hex octets separated by ':' or '-' (e.g. 52:54:00:12:34:56)")]
pub struct MacError(pub String);

impl FromStr for Mac {
    type Err = MacError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || MacError(s.to_string());
        let sep = if s.contains(':') { ':' } else { '-' };
        let mut out = [0u8; 6];
        let mut parts = s.split(sep);
        for b in out.iter_mut() {
            let p = parts.next().ok_or_else(err)?;
            if p.len() != 2 {
                return Err(err());
            }
            *b = u8::from_str_radix(p, 16).map_err(|_| err())?;
        }
        if parts.next().is_some() {
            return Err(err());
        }
        Ok(Mac(out))
    }
}

impl Mac {
    /// `52-54-00-77-00-10`: the spelling GRUB and PXELINUX use in file names.
    pub fn dashed(&self) -> String {
        self.to_string().replace(':', "-")
    }
    /// `52:54:00:77:00:10` in upper case, as some PowerVM firmware reports it.
    pub fn upper(&self) -> String {
        self.to_string().to_ascii_uppercase()
    }
}

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

impl fmt::Debug for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_any_case_and_separator() {
        let a: Mac = "52:54:00:AA:00:10".parse().unwrap();
        let b: Mac = "52-54-00-aa-00-10".parse().unwrap();
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "52:54:00:aa:00:10");
        assert_eq!(a.dashed(), "52-54-00-aa-00-10");
        assert_eq!(a.upper(), "52:54:00:AA:00:10");
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "52:54:00:aa:00",
            "52:54:00:aa:00:10:11",
            "5:54:00:aa:00:10",
            "zz:54:00:aa:00:10",
            "52:54-00:aa:00:10",
        ] {
            assert!(bad.parse::<Mac>().is_err(), "{bad}");
        }
    }
}
