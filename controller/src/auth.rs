//! Bearer-token authentication for the controller API.
//!
//! Tokens come from a file or a systemd credential (one per line; blank
//! lines and `#` comments ignored), re-read on every request so a rotated
//! file takes effect at once. Comparison is in constant time: both sides
//! are hashed (equal lengths) and every configured token is compared, with
//! no early exit. A refusal never says why.

use sha2::{Digest, Sha256};
use site::SecretRef;
use subtle::ConstantTimeEq;

/// Proof that a request carried a valid token; handlers take it as a parameter.
#[derive(Debug, Clone, Copy)]
pub struct Caller(());

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// No `Authorization: Bearer` header.
    Missing,
    /// A token that matches none.
    Wrong,
    /// The token file cannot be read (nobody gets in; logged).
    Unavailable,
}

impl Refused {
    pub fn as_str(&self) -> &'static str {
        match self {
            Refused::Missing => "missing",
            Refused::Wrong => "wrong",
            Refused::Unavailable => "tokens_unavailable",
        }
    }
}

pub fn tokens(r: &SecretRef) -> Result<Vec<Vec<u8>>, String> {
    let text = crate::providers::read_secret(r)?;
    Ok(text
        .expose()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.as_bytes().to_vec())
        .collect())
}

/// Checks `Authorization: Bearer <token>` against the configured tokens.
pub fn authenticate(headers: &http::HeaderMap, configured: &SecretRef) -> Result<Caller, Refused> {
    let presented = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or(Refused::Missing)?;
    let list = tokens(configured).map_err(|e| {
        tracing::error!(error = %e, "API tokens unreadable: every request is refused");
        Refused::Unavailable
    })?;
    if matches(presented.as_bytes(), &list) {
        Ok(Caller(()))
    } else {
        Err(Refused::Wrong)
    }
}

fn matches(presented: &[u8], list: &[Vec<u8>]) -> bool {
    let p = Sha256::digest(presented);
    let mut ok = subtle::Choice::from(0u8);
    for t in list {
        ok |= Sha256::digest(t).ct_eq(&p);
    }
    ok.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tokens");
        std::fs::write(&f, "# operators\nalpha-token\n\n  beta-token  \n").unwrap();
        let r = SecretRef::File(f.clone());
        let h = |v: Option<&str>| {
            let mut m = http::HeaderMap::new();
            if let Some(v) = v {
                m.insert(http::header::AUTHORIZATION, v.parse().unwrap());
            }
            m
        };
        assert!(authenticate(&h(Some("Bearer alpha-token")), &r).is_ok());
        assert!(authenticate(&h(Some("Bearer beta-token")), &r).is_ok());
        assert_eq!(authenticate(&h(None), &r).unwrap_err(), Refused::Missing);
        assert_eq!(
            authenticate(&h(Some("Basic YWxwaGE=")), &r).unwrap_err(),
            Refused::Missing
        );
        assert_eq!(
            authenticate(&h(Some("Bearer alpha")), &r).unwrap_err(),
            Refused::Wrong
        );
        assert_eq!(
            authenticate(&h(Some("Bearer # operators")), &r).unwrap_err(),
            Refused::Wrong
        );
        std::fs::remove_file(&f).unwrap();
        assert_eq!(
            authenticate(&h(Some("Bearer alpha-token")), &r).unwrap_err(),
            Refused::Unavailable
        );
    }
}
