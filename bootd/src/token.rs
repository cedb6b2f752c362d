//! Who may fetch a node's Ignition, metadata and userdata.
//!
//! A request is granted when it comes from the node's own address, or when
//! it carries a token that bootd put in that node's boot script or userdata.
//! Tokens are `<expiry>.<mac>`: an HMAC-SHA256 over the node name and the
//! expiry (unix seconds) under a key kept in the state directory, so they
//! need no server-side table and survive restarts.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac as _};
use sha2::Sha256;
use std::io;
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

type HmacSha256 = Hmac<Sha256>;

/// Bytes of the HMAC kept in a token (128 bits).
const TAG_LEN: usize = 16;

pub struct TokenKey([u8; 32]);

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(<redacted>)")
    }
}

impl TokenKey {
    /// Reads `token.key` from the state directory, creating it (0600,
    /// written then renamed) on first start.
    pub fn load_or_create(state_dir: &Path) -> io::Result<TokenKey> {
        let path = state_dir.join("token.key");
        match std::fs::read(&path) {
            Ok(b) if b.len() == 32 => {
                let mut k = [0u8; 32];
                k.copy_from_slice(&b);
                return Ok(TokenKey(k));
            }
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: not a 32-byte key", path.display()),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let mut k = [0u8; 32];
        rand::Rng::fill(&mut rand::rngs::OsRng, &mut k);
        crate::state::write_private(&path, &k)?;
        Ok(TokenKey(k))
    }

    pub fn from_bytes(k: [u8; 32]) -> TokenKey {
        TokenKey(k)
    }

    fn tag(&self, node: &str, expiry: u64) -> HmacSha256 {
        let mut m = HmacSha256::new_from_slice(&self.0).expect("HMAC takes any key length");
        m.update(b"bootd-node-token\0");
        m.update(node.as_bytes());
        m.update(b"\0");
        m.update(&expiry.to_be_bytes());
        m
    }

    pub fn issue(&self, node: &str, now: SystemTime, ttl: Duration) -> String {
        let expiry = (now + ttl)
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let tag = self.tag(node, expiry).finalize().into_bytes();
        format!("{expiry}.{}", URL_SAFE_NO_PAD.encode(&tag[..TAG_LEN]))
    }

    pub fn verify(&self, node: &str, token: &str, now: SystemTime) -> Result<(), Deny> {
        let (exp, tag) = token.split_once('.').ok_or(Deny::TokenInvalid)?;
        let expiry: u64 = exp.parse().map_err(|_| Deny::TokenInvalid)?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| Deny::TokenInvalid)?;
        if tag.len() != TAG_LEN {
            return Err(Deny::TokenInvalid);
        }
        // Constant-time comparison of the truncated tag.
        self.tag(node, expiry)
            .verify_truncated_left(&tag)
            .map_err(|_| Deny::TokenInvalid)?;
        let now = now
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(u64::MAX);
        if now >= expiry {
            return Err(Deny::TokenExpired);
        }
        Ok(())
    }
}

/// Why a request for a node's secrets was refused. The client always sees
/// the same 404; this goes to the log and to the denials metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Deny {
    UnknownNode,
    Revoked,
    NotFromNode,
    TokenInvalid,
    TokenExpired,
}

impl Deny {
    pub fn as_str(&self) -> &'static str {
        match self {
            Deny::UnknownNode => "unknown_node",
            Deny::Revoked => "revoked",
            Deny::NotFromNode => "not_from_node",
            Deny::TokenInvalid => "token_invalid",
            Deny::TokenExpired => "token_expired",
        }
    }
}

/// How a request was let through (logged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granted {
    SourceAddress,
    Token,
}

/// `s` with the value of every `token=` parameter (up to `&`, a quote or
/// white space) replaced by `with`: what keeps tokens out of logs, the
/// timeline and provider error texts.
pub fn redact_tokens(s: &str, with: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("token=") {
        out.push_str(&rest[..i + "token=".len()]);
        out.push_str(with);
        let tail = &rest[i + "token=".len()..];
        let end = tail
            .find(|c: char| c == '&' || c == '"' || c == '\'' || c.is_whitespace())
            .unwrap_or(tail.len());
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// The whole access decision, pure. `node_addrs` are the addresses the node
/// is known by (its reservation, and later its lease).
pub fn authorize(
    key: &TokenKey,
    node: &str,
    node_addrs: &[IpAddr],
    revoked: bool,
    source: IpAddr,
    token: Option<&str>,
    now: SystemTime,
) -> Result<Granted, Deny> {
    if revoked {
        return Err(Deny::Revoked);
    }
    let source = match source {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    };
    if node_addrs.contains(&source) {
        return Ok(Granted::SourceAddress);
    }
    match token {
        None => Err(Deny::NotFromNode),
        Some(t) => key.verify(node, t, now).map(|()| Granted::Token),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> TokenKey {
        TokenKey::from_bytes([7; 32])
    }

    #[test]
    fn tokens_bind_node_and_expire() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let t = key().issue("master-0", now, Duration::from_secs(60));
        assert_eq!(key().verify("master-0", &t, now), Ok(()));
        assert_eq!(key().verify("master-1", &t, now), Err(Deny::TokenInvalid));
        assert_eq!(
            key().verify("master-0", &t, now + Duration::from_secs(60)),
            Err(Deny::TokenExpired)
        );
        assert_eq!(
            TokenKey::from_bytes([8; 32]).verify("master-0", &t, now),
            Err(Deny::TokenInvalid)
        );
        // Moving the expiry invalidates the tag.
        let (_, tag) = t.split_once('.').unwrap();
        assert_eq!(
            key().verify("master-0", &format!("9999999999.{tag}"), now),
            Err(Deny::TokenInvalid)
        );
        for junk in ["", ".", "x.y", "1.", "1.AAAA"] {
            assert_eq!(
                key().verify("master-0", junk, now),
                Err(Deny::TokenInvalid),
                "{junk}"
            );
        }
    }

    #[test]
    fn source_or_token() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let k = key();
        let addrs = ["10.0.0.5".parse().unwrap()];
        let other: IpAddr = "10.0.0.6".parse().unwrap();
        assert_eq!(
            authorize(&k, "n", &addrs, false, addrs[0], None, now),
            Ok(Granted::SourceAddress)
        );
        let mapped: IpAddr = "::ffff:10.0.0.5".parse().unwrap();
        assert_eq!(
            authorize(&k, "n", &addrs, false, mapped, None, now),
            Ok(Granted::SourceAddress)
        );
        assert_eq!(
            authorize(&k, "n", &addrs, false, other, None, now),
            Err(Deny::NotFromNode)
        );
        let t = k.issue("n", now, Duration::from_secs(5));
        assert_eq!(
            authorize(&k, "n", &addrs, false, other, Some(&t), now),
            Ok(Granted::Token)
        );
        assert_eq!(
            authorize(&k, "n", &addrs, true, addrs[0], Some(&t), now),
            Err(Deny::Revoked)
        );
    }
}
