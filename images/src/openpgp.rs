//! Detached OpenPGP signatures (`<artifact>.sig`, as Fedora CoreOS and
//! RHCOS publish them) checked against the site's keys
//! ([`site::Signing`], `images.signingKeys`): before an artifact enters the
//! cache ([`crate::fetch`]) and again by `images verify`.
//!
//! A signature counts when it is of a binary document, with a digest that
//! is not broken (not MD5, SHA-1 or RIPEMD-160), made by a primary key of a
//! key file or by a subkey bound to one for signing, and verifies over
//! every byte of the file.
//! Key expiry and revocation are not looked at: the key files are the
//! operator's statement of trust, and removing a file withdraws it.

use pgp::composed::{Deserializable, DetachedSignature, SignedPublicKey};
use pgp::crypto::hash::HashAlgorithm;
use pgp::packet::{PublicKey, PublicSubkey, Signature, SignatureType};
use pgp::types::{Fingerprint, KeyDetails, KeyId, KeyVersion};
use site::{key_id, openpgp_blocks, Signing};
use std::path::Path;

/// Why an artifact's signature does not vouch for it. The messages name
/// key ids as gpg prints them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("no signature: the stream metadata names none, and signatures are required (images.requireSignatures)")]
    Missing,
    #[error("signature by unknown key {} (not in images.signingKeys)", .0.join(", "))]
    UnknownKey(Vec<String>),
    #[error("bad signature by key {key}: {why}")]
    Bad { key: String, why: String },
    #[error("bad signature: {0}")]
    Malformed(String),
    #[error("{0}")]
    Io(String),
}

/// Who signed: the key id (a subkey's, when a subkey signed) and the
/// primary key's first user id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signer {
    pub key_id: String,
    pub user: String,
}

/// A key that may have made a data signature, with its certificate.
struct Candidate<'a> {
    cert: &'a SignedPublicKey,
    key: Key<'a>,
    id: KeyId,
    fpr: Fingerprint,
}

enum Key<'a> {
    Primary(&'a PublicKey),
    Subkey(&'a PublicSubkey),
}

impl Candidate<'_> {
    fn verify(&self, sig: &Signature, data: impl std::io::Read) -> pgp::errors::Result<()> {
        match self.key {
            Key::Primary(k) => sig.verify(k, data),
            Key::Subkey(k) => sig.verify(k, data),
        }
    }
}

/// The primary key and the subkeys validly bound to it for signing.
fn candidates(cert: &SignedPublicKey) -> Vec<Candidate<'_>> {
    let p = &cert.primary_key;
    let mut v = vec![Candidate {
        cert,
        key: Key::Primary(p),
        id: p.legacy_key_id(),
        fpr: p.fingerprint(),
    }];
    for sub in &cert.public_subkeys {
        let signs = sub.signatures.iter().any(|s| s.key_flags().sign());
        if signs && sub.verify_bindings(p).is_ok() {
            v.push(Candidate {
                cert,
                key: Key::Subkey(&sub.key),
                id: sub.key.legacy_key_id(),
                fpr: sub.key.fingerprint(),
            });
        }
    }
    v
}

fn user_of(cert: &SignedPublicKey) -> String {
    cert.details
        .users
        .first()
        .map(|u| String::from_utf8_lossy(u.id.id()).into_owned())
        .unwrap_or_default()
}

/// The signatures in a `.sig` file (armored or binary).
fn parse(sig: &[u8]) -> Result<Vec<Signature>, SignatureError> {
    let bad = |e: pgp::errors::Error| {
        SignatureError::Malformed(format!("not an OpenPGP signature ({e})"))
    };
    let mut sigs = Vec::new();
    for block in openpgp_blocks(sig) {
        let (many, _) = DetachedSignature::from_reader_many(block).map_err(bad)?;
        for s in many {
            sigs.push(s.map_err(bad)?.signature);
        }
    }
    if sigs.is_empty() {
        return Err(SignatureError::Malformed("holds no signature".into()));
    }
    Ok(sigs)
}

/// Why a signature cannot vouch for a file whatever its bytes: not a
/// binary-document signature, or over a broken digest (MD5, SHA-1,
/// RIPEMD-160: a collision could carry the vendor's signature to other bytes).
fn unacceptable(sig: &Signature) -> Option<String> {
    if sig.typ() != Some(SignatureType::Binary) {
        return Some(format!(
            "a {:?} signature, not one of a binary document",
            sig.typ()
        ));
    }
    match sig.hash_alg() {
        Some(
            h @ (HashAlgorithm::None
            | HashAlgorithm::Md5
            | HashAlgorithm::Sha1
            | HashAlgorithm::Ripemd160),
        ) => Some(format!("made with {h}, a digest too weak to trust")),
        Some(_) => None,
        None => Some("of an unknown digest".into()),
    }
}

fn issuers(sig: &Signature) -> Vec<String> {
    let mut ids: Vec<String> = sig.issuer_key_id().into_iter().map(key_id).collect();
    for f in sig.issuer_fingerprint() {
        // A v4 key's id is its fingerprint's last 8 bytes; v6 keys' the first 8.
        let b = f.as_bytes();
        let id = if f.version() == Some(KeyVersion::V6) {
            &b[..8.min(b.len())]
        } else {
            &b[b.len().saturating_sub(8)..]
        };
        let id: String = id.iter().map(|b| format!("{b:02X}")).collect();
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    ids
}

/// The keys of `signing` that `sig` says made it (every key when it names
/// no issuer).
fn makers<'a>(signing: &'a Signing, sig: &Signature) -> Vec<Candidate<'a>> {
    let ids = sig.issuer_key_id();
    let fprs = sig.issuer_fingerprint();
    let anyone = ids.is_empty() && fprs.is_empty();
    signing
        .certs()
        .flat_map(candidates)
        .filter(|c| anyone || ids.contains(&&c.id) || fprs.contains(&&c.fpr))
        .collect()
}

/// Refuses, before anything is downloaded, a signature that no key of
/// `signing` could have made (or that is not a signature at all).
pub fn precheck(signing: &Signing, sig: &[u8]) -> Result<(), SignatureError> {
    let sigs = parse(sig)?;
    if sigs.iter().any(|s| !makers(signing, s).is_empty()) {
        return Ok(());
    }
    Err(SignatureError::UnknownKey(
        sigs.iter().flat_map(issuers).collect(),
    ))
}

/// Checks the detached signature `sig` of the file at `path` against
/// `signing`'s keys; `Ok` names who signed.
pub fn check_file(signing: &Signing, sig: &[u8], path: &Path) -> Result<Signer, SignatureError> {
    let sigs = parse(sig)?;
    let mut first_bad = None;
    for s in &sigs {
        for c in makers(signing, s) {
            let key = key_id(&c.id);
            let user = user_of(c.cert);
            let named = if user.is_empty() {
                key.clone()
            } else {
                format!("{key} ({user})")
            };
            if let Some(why) = unacceptable(s) {
                first_bad.get_or_insert(SignatureError::Bad { key: named, why });
                continue;
            }
            let file = std::fs::File::open(path)
                .map_err(|e| SignatureError::Io(format!("{}: {e}", path.display())))?;
            match c.verify(s, std::io::BufReader::with_capacity(1 << 20, file)) {
                Ok(()) => return Ok(Signer { key_id: key, user }),
                Err(e) => {
                    let why = match e {
                        pgp::errors::Error::Unsupported { message, .. } => message,
                        // A digest that differs, or a value that does not
                        // verify: rPGP's words for both name internals.
                        _ => "it does not verify over these bytes".into(),
                    };
                    first_bad.get_or_insert(SignatureError::Bad { key: named, why });
                }
            }
        }
    }
    Err(first_bad
        .unwrap_or_else(|| SignatureError::UnknownKey(sigs.iter().flat_map(issuers).collect())))
}

/// What `images verify` finds about one cached set's signatures.
#[derive(Debug, Default)]
pub struct SetSignatures {
    /// One per file whose signature verified.
    pub signers: Vec<Signer>,
    /// Files the stream metadata named no signature for (allowed when
    /// signatures are not required).
    pub unsigned: usize,
    /// One line per file whose signature is missing or does not verify.
    pub problems: Vec<String>,
}

/// Checks every file of the set in `dir` (absolute) against its kept
/// `<name>.sig` (missing files are the sha256 check's to report).
pub fn check_set(signing: &Signing, dir: &Path, m: &site::catalog::Manifest) -> SetSignatures {
    let mut out = SetSignatures::default();
    for f in &m.files {
        let path = dir.join(&f.name);
        if !path.is_file() {
            continue;
        }
        let sig_path = dir.join(format!("{}.sig", f.name));
        match (std::fs::read(&sig_path), &f.signature) {
            (Ok(sig), _) => match check_file(signing, &sig, &path) {
                Ok(s) => out.signers.push(s),
                Err(e) => out.problems.push(format!("{}: {e}", path.display())),
            },
            (Err(_), Some(_)) => out.problems.push(format!(
                "{}: missing: the stream metadata names a signature (fetched before the keys were \
                 given? fetch the set again)",
                sig_path.display()
            )),
            (Err(_), None) if signing.require => {
                out.problems
                    .push(format!("{}: {}", path.display(), SignatureError::Missing))
            }
            (Err(_), None) => out.unsigned += 1,
        }
    }
    out
}
