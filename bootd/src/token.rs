//! Who may fetch a node's boot script, Ignition, metadata and userdata.
//!
//! The node's own address (its reservation, its provider's addresses) is
//! what identifies it. A token
//! is the fallback for the Ignition fetch from another address: bootd puts
//! one in the node's boot script (served only to the node) and in its
//! provider userdata.
//!
//! Tokens are `<expiry>.<scope>.<nonce>.<tag>`: an HMAC-SHA256 over the
//! node name, the expiry (unix seconds), the scope and a random nonce under
//! a key kept in the state directory, so they need no server-side table to
//! be checked and survive restarts. The nonce makes every token distinct:
//! a spent one ([`crate::spent`]) is told apart from the next one issued.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac as _};
use sha2::Sha256;
use site::FetchFrom;
use std::io;
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

type HmacSha256 = Hmac<Sha256>;

/// Whom a node's tokens are issued to and checked against: its name, and
/// in its epoch ([`site::Node::epoch`]) past 0, `name@epoch` (no node name
/// holds `@`). A token of an earlier incarnation of the node (deleted and
/// made again, or reinstalled through the API) does not verify.
pub fn subject(name: &str, epoch: u64) -> std::borrow::Cow<'_, str> {
    if epoch == 0 {
        name.into()
    } else {
        format!("{name}@{epoch}").into()
    }
}

/// [`subject`] of `node`.
pub fn subject_of(node: &site::Node) -> std::borrow::Cow<'_, str> {
    subject(&node.name, node.epoch)
}

/// Bytes of the HMAC kept in a token (128 bits).
const TAG_LEN: usize = 16;
/// Bytes of the nonce (96 bits).
const NONCE_LEN: usize = 12;

pub struct TokenKey([u8; 32]);

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(<redacted>)")
    }
}

/// Where a token was handed out, which decides where it works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// In a boot script, pointer config or ISO that bootd served: the node
    /// had it from its own address; it works from any address (once, for
    /// the Ignition).
    Script,
    /// In the userdata given to a provider when it makes the machine: it
    /// works only from the node's addresses once the provider reported
    /// them (anyone who can read the userdata has it), unless the node's
    /// `fetchFrom` is `anyAddress`.
    Provider,
    /// In the URL of a node's virtual-media ISO, which the controller mints
    /// only for a node that boots virtual media and hands only to its BMC:
    /// the one scope `/media/<node>.iso` takes. On the ISO's kernel line,
    /// for the Ignition, it works as a provider token does.
    Media,
}

impl Scope {
    fn letter(self) -> &'static str {
        match self {
            Scope::Script => "s",
            Scope::Provider => "p",
            Scope::Media => "m",
        }
    }
}

/// A token that verified: what it grants and how to spend it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub scope: Scope,
    /// Unix seconds.
    pub expiry: u64,
    /// Its nonce (not secret: the tag is); what [`crate::spent`] records.
    pub nonce: String,
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

    /// Settles `token.key` with the appliances sharing `shared` (the
    /// shared key wins; the file is written when absent, a different one
    /// stops the start).
    pub fn agree(shared: &dyn crate::ha::Shared, state_dir: &Path) -> io::Result<()> {
        let path = state_dir.join("token.key");
        crate::ha::agree(
            shared,
            "token-key",
            state_dir,
            "token.key",
            || match std::fs::read(&path) {
                Ok(b) => Ok(Some(b)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e),
            },
            || {
                let mut k = [0u8; 32];
                rand::Rng::fill(&mut rand::rngs::OsRng, &mut k);
                Ok(k.to_vec())
            },
            |v| {
                if v.len() != 32 {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "the shared token key is not 32 bytes",
                    ));
                }
                crate::state::write_private(&path, v)
            },
        )
    }

    pub fn from_bytes(k: [u8; 32]) -> TokenKey {
        TokenKey(k)
    }

    fn tag(&self, node: &str, expiry: u64, scope: Scope, nonce: &str) -> HmacSha256 {
        let mut m = HmacSha256::new_from_slice(&self.0).expect("HMAC takes any key length");
        m.update(b"bootd-node-token-2\0");
        m.update(node.as_bytes());
        m.update(b"\0");
        m.update(&expiry.to_be_bytes());
        m.update(scope.letter().as_bytes());
        m.update(nonce.as_bytes());
        m
    }

    /// A fresh token for `node`: a new nonce every call.
    pub fn issue(&self, node: &str, scope: Scope, now: SystemTime, ttl: Duration) -> String {
        let expiry = (now + ttl)
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut n = [0u8; NONCE_LEN];
        rand::Rng::fill(&mut rand::rngs::OsRng, &mut n);
        let nonce = URL_SAFE_NO_PAD.encode(n);
        let tag = self
            .tag(node, expiry, scope, &nonce)
            .finalize()
            .into_bytes();
        format!(
            "{expiry}.{}.{nonce}.{}",
            scope.letter(),
            URL_SAFE_NO_PAD.encode(&tag[..TAG_LEN])
        )
    }

    pub fn verify(&self, node: &str, token: &str, now: SystemTime) -> Result<Verified, Deny> {
        let mut parts = token.split('.');
        let (Some(exp), Some(scope), Some(nonce), Some(tag), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(Deny::TokenInvalid);
        };
        let expiry: u64 = exp.parse().map_err(|_| Deny::TokenInvalid)?;
        let scope = match scope {
            "s" => Scope::Script,
            "p" => Scope::Provider,
            "m" => Scope::Media,
            _ => return Err(Deny::TokenInvalid),
        };
        if nonce.len() != 16
            || !nonce
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(Deny::TokenInvalid);
        }
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| Deny::TokenInvalid)?;
        if tag.len() != TAG_LEN {
            return Err(Deny::TokenInvalid);
        }
        // Constant-time comparison of the truncated tag.
        self.tag(node, expiry, scope, nonce)
            .verify_truncated_left(&tag)
            .map_err(|_| Deny::TokenInvalid)?;
        let now = now
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(u64::MAX);
        if now >= expiry {
            return Err(Deny::TokenExpired);
        }
        Ok(Verified {
            scope,
            expiry,
            nonce: nonce.to_string(),
        })
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
    /// A single-use token presented again from another address than the node's.
    TokenReused,
}

impl Deny {
    pub fn as_str(&self) -> &'static str {
        match self {
            Deny::UnknownNode => "unknown_node",
            Deny::Revoked => "revoked",
            Deny::NotFromNode => "not_from_node",
            Deny::TokenInvalid => "token_invalid",
            Deny::TokenExpired => "token_expired",
            Deny::TokenReused => "token_reused",
        }
    }
}

/// How a request was let through (logged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Granted {
    /// From one of the node's addresses; the token it carried, if valid
    /// (spent all the same, so that nobody can replay it).
    SourceAddress(Option<Verified>),
    /// From another address, on a token.
    Token(Verified),
    /// From another address, the node's `fetchFrom` being `anyAddress`.
    AnyAddress,
}

impl Granted {
    /// The scope of the tokens what it granted may carry (a script's, a
    /// pointer's): a provider token's grant mints provider tokens, which
    /// work only where the provider says the node is, so that a provider
    /// token never turns into a script token that works from anywhere;
    /// anything else, script tokens.
    pub fn mints(&self) -> Scope {
        match self {
            Granted::Token(v) if v.scope != Scope::Script => Scope::Provider,
            Granted::Token(_) | Granted::SourceAddress(_) | Granted::AnyAddress => Scope::Script,
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Granted::SourceAddress(_) => "node address",
            Granted::Token(_) => "token",
            Granted::AnyAddress => "any address (fetchFrom: anyAddress)",
        }
    }
}

/// What the access decision knows of a node.
#[derive(Debug, Clone, Copy)]
pub struct NodeAccess<'a> {
    pub name: &'a str,
    /// Its epoch: tokens are checked against [`subject`].
    pub epoch: u64,
    /// Its reservation and its provider's addresses.
    pub addrs: &'a [IpAddr],
    pub fetch_from: FetchFrom,
    /// Its provider reported its addresses (`nodes[].addresses` is set).
    pub provider_reported: bool,
    /// Its Ignition is no longer served (`bootd revoke`).
    pub revoked: bool,
}

impl NodeAccess<'_> {
    fn is_own(&self, source: IpAddr) -> bool {
        self.addrs.contains(&source.to_canonical())
    }

    /// A provider token from `source`: refused once the provider said where
    /// the node is and `source` is not there (unless `anyAddress`).
    fn provider_token_ok(&self, source: IpAddr) -> bool {
        self.fetch_from == FetchFrom::AnyAddress || !self.provider_reported || self.is_own(source)
    }
}

/// Routes that hand out a token (the node's boot script by MAC or name, its
/// GRUB and pxelinux configs, metadata, userdata): the node's own address;
/// any, with `fetchFrom: anyAddress`; or a provider token (what a provider's
/// iPXE script URL carries) from where the provider says the node is.
pub fn authorize_script(
    key: &TokenKey,
    node: &NodeAccess<'_>,
    source: IpAddr,
    token: Option<&str>,
    now: SystemTime,
) -> Result<Granted, Deny> {
    if node.is_own(source) {
        return Ok(Granted::SourceAddress(None));
    }
    if node.fetch_from == FetchFrom::AnyAddress {
        return Ok(Granted::AnyAddress);
    }
    match token.map(|t| key.verify(&subject(node.name, node.epoch), t, now)) {
        Some(Ok(v)) if v.scope == Scope::Provider && node.provider_token_ok(source) => {
            Ok(Granted::Token(v))
        }
        Some(Err(d)) => Err(d),
        _ => Err(Deny::NotFromNode),
    }
}

/// The node's Ignition: from its own address, or with a token that is
/// valid for it (and, with single-use tokens, not spent: the caller
/// checks [`Granted::Token`] against [`crate::spent`]).
pub fn authorize_ignition(
    key: &TokenKey,
    node: &NodeAccess<'_>,
    source: IpAddr,
    token: Option<&str>,
    now: SystemTime,
) -> Result<Granted, Deny> {
    if node.revoked {
        return Err(Deny::Revoked);
    }
    let verified = token.map(|t| key.verify(&subject(node.name, node.epoch), t, now));
    if node.is_own(source) {
        return Ok(Granted::SourceAddress(verified.and_then(Result::ok)));
    }
    match verified {
        None => Err(Deny::NotFromNode),
        Some(Err(d)) => Err(d),
        Some(Ok(v)) if v.scope != Scope::Script && !node.provider_token_ok(source) => {
            Err(Deny::NotFromNode)
        }
        Some(Ok(v)) => Ok(Granted::Token(v)),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> TokenKey {
        TokenKey::from_bytes([7; 32])
    }

    fn at() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_000_000)
    }

    #[test]
    fn tokens_bind_node_scope_and_expiry() {
        let now = at();
        let t = key().issue("master-0", Scope::Script, now, Duration::from_secs(60));
        let v = key().verify("master-0", &t, now).unwrap();
        assert_eq!((v.scope, v.expiry), (Scope::Script, 1_000_060));
        // Every token is distinct, even within the same second.
        let t2 = key().issue("master-0", Scope::Script, now, Duration::from_secs(60));
        assert_ne!(t, t2);
        assert_ne!(v.nonce, key().verify("master-0", &t2, now).unwrap().nonce);
        assert_eq!(key().verify("master-1", &t, now), Err(Deny::TokenInvalid));
        assert_eq!(
            key().verify("master-0", &t, now + Duration::from_secs(60)),
            Err(Deny::TokenExpired)
        );
        assert_eq!(
            TokenKey::from_bytes([8; 32]).verify("master-0", &t, now),
            Err(Deny::TokenInvalid)
        );
        let parts: Vec<&str> = t.split('.').collect();
        // Moving the expiry, changing the scope or the nonce invalidates the tag.
        for forged in [
            format!("9999999999.{}.{}.{}", parts[1], parts[2], parts[3]),
            format!("{}.p.{}.{}", parts[0], parts[2], parts[3]),
            format!("{}.s.AAAAAAAAAAAAAAAA.{}", parts[0], parts[3]),
        ] {
            assert_eq!(
                key().verify("master-0", &forged, now),
                Err(Deny::TokenInvalid),
                "{forged}"
            );
        }
        for junk in [
            "",
            ".",
            "x.y",
            "1.",
            "1.AAAA",
            "1.s.a.b",
            "1.x.AAAAAAAAAAAAAAAA.AAAA",
            &format!("{t}.x"),
        ] {
            assert_eq!(
                key().verify("master-0", junk, now),
                Err(Deny::TokenInvalid),
                "{junk}"
            );
        }
    }

    #[test]
    fn a_token_is_for_one_epoch_of_its_node() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let t = key().issue(
            &subject("m", 7),
            Scope::Script,
            now,
            Duration::from_secs(60),
        );
        assert!(key().verify(&subject("m", 7), &t, now).is_ok());
        assert_eq!(
            key().verify(&subject("m", 8), &t, now),
            Err(Deny::TokenInvalid)
        );
        assert_eq!(key().verify("m", &t, now), Err(Deny::TokenInvalid));
        // Epoch 0 is the bare name: tokens of nodes without one are as before.
        assert_eq!(subject("m", 0), "m");
    }

    fn node<'a>(addrs: &'a [IpAddr], fetch_from: FetchFrom, reported: bool) -> NodeAccess<'a> {
        NodeAccess {
            name: "n",
            epoch: 0,
            addrs,
            fetch_from,
            provider_reported: reported,
            revoked: false,
        }
    }

    #[test]
    fn scripts_go_to_the_node_address_only() {
        let k = key();
        let addrs = ["10.0.0.5".parse().unwrap()];
        let other: IpAddr = "10.0.0.6".parse().unwrap();
        let strict = node(&addrs, FetchFrom::NodeAddress, false);
        assert_eq!(
            authorize_script(&k, &strict, addrs[0], None, at()),
            Ok(Granted::SourceAddress(None))
        );
        let mapped: IpAddr = "::ffff:10.0.0.5".parse().unwrap();
        assert!(authorize_script(&k, &strict, mapped, None, at()).is_ok());
        assert_eq!(
            authorize_script(&k, &strict, other, None, at()),
            Err(Deny::NotFromNode)
        );
        // A script token does not open the script route...
        let s = k.issue("n", Scope::Script, at(), Duration::from_secs(5));
        assert_eq!(
            authorize_script(&k, &strict, other, Some(&s), at()),
            Err(Deny::NotFromNode)
        );
        // ...a provider token does, until the provider says where the node is.
        let p = k.issue("n", Scope::Provider, at(), Duration::from_secs(5));
        assert!(matches!(
            authorize_script(&k, &strict, other, Some(&p), at()),
            Ok(Granted::Token(_))
        ));
        let reported = node(&addrs, FetchFrom::NodeAddress, true);
        assert_eq!(
            authorize_script(&k, &reported, other, Some(&p), at()),
            Err(Deny::NotFromNode)
        );
        let any = node(&addrs, FetchFrom::AnyAddress, true);
        assert_eq!(
            authorize_script(&k, &any, other, None, at()),
            Ok(Granted::AnyAddress)
        );
    }

    #[test]
    fn ignition_from_the_node_or_on_a_token() {
        let k = key();
        let addrs = ["10.0.0.5".parse().unwrap()];
        let other: IpAddr = "10.0.0.6".parse().unwrap();
        let strict = node(&addrs, FetchFrom::NodeAddress, false);
        let s = k.issue("n", Scope::Script, at(), Duration::from_secs(5));
        let vs = k.verify("n", &s, at()).unwrap();
        assert_eq!(
            authorize_ignition(&k, &strict, addrs[0], Some(&s), at()),
            Ok(Granted::SourceAddress(Some(vs.clone())))
        );
        assert_eq!(
            authorize_ignition(&k, &strict, addrs[0], Some("junk"), at()),
            Ok(Granted::SourceAddress(None))
        );
        assert_eq!(
            authorize_ignition(&k, &strict, other, None, at()),
            Err(Deny::NotFromNode)
        );
        assert_eq!(
            authorize_ignition(&k, &strict, other, Some(&s), at()),
            Ok(Granted::Token(vs))
        );
        assert_eq!(
            authorize_ignition(
                &k,
                &strict,
                other,
                Some("1.s.AAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAA"),
                at()
            ),
            Err(Deny::TokenInvalid)
        );
        // A provider token: from anywhere until the provider reported the
        // node's addresses, then only from them (unless anyAddress).
        let p = k.issue("n", Scope::Provider, at(), Duration::from_secs(5));
        assert!(matches!(
            authorize_ignition(&k, &strict, other, Some(&p), at()),
            Ok(Granted::Token(_))
        ));
        let reported = node(&addrs, FetchFrom::NodeAddress, true);
        assert_eq!(
            authorize_ignition(&k, &reported, other, Some(&p), at()),
            Err(Deny::NotFromNode)
        );
        assert!(matches!(
            authorize_ignition(&k, &reported, other, Some(&s), at()),
            Ok(Granted::Token(_))
        ));
        let any = node(&addrs, FetchFrom::AnyAddress, true);
        assert!(matches!(
            authorize_ignition(&k, &any, other, Some(&p), at()),
            Ok(Granted::Token(_))
        ));
        // anyAddress opens scripts, never the Ignition without a token.
        assert_eq!(
            authorize_ignition(&k, &any, other, None, at()),
            Err(Deny::NotFromNode)
        );
        let revoked = NodeAccess {
            revoked: true,
            ..strict
        };
        assert_eq!(
            authorize_ignition(&k, &revoked, addrs[0], Some(&s), at()),
            Err(Deny::Revoked)
        );
    }
}
