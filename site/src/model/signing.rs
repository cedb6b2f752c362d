//! `images.signingKeys`, `images.requireSignatures`: the OpenPGP keys whose
//! detached signatures (`<artifact>.sig`, as Fedora CoreOS and RHCOS
//! publish them) an artifact must carry before the image cache takes it.
//! The keys are parsed here, once, when the site is validated; the `images`
//! crate checks signatures with them.

use pgp::composed::{Deserializable, SignedPublicKey};
use pgp::types::KeyDetails;
use std::path::{Path, PathBuf};

/// What the image cache trusts (docs/images.md, "Signatures").
#[derive(Debug, Clone, Default)]
pub struct Signing {
    /// Every key file, in the site's order. Empty: signatures are not checked.
    pub keys: Vec<SigningKey>,
    /// An artifact the stream metadata names no signature for is refused.
    /// True by default when keys are given.
    pub require: bool,
}

impl Signing {
    /// Whether artifacts are checked at all.
    pub fn enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    /// Every certificate of every file.
    pub fn certs(&self) -> impl Iterator<Item = &SignedPublicKey> {
        self.keys.iter().flat_map(|k| k.certs.iter())
    }
}

/// One key file: armored or binary, one or more public keys (a keyring, as
/// Fedora's `fedora.gpg` and Red Hat's `RPM-GPG-KEY-redhat-release` are).
#[derive(Debug, Clone)]
pub struct SigningKey {
    pub path: PathBuf,
    pub certs: Vec<SignedPublicKey>,
}

impl SigningKey {
    /// Reads and parses a key file; the error says why it is not one.
    pub fn read(path: &Path) -> Result<SigningKey, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
        let not_key = |e: pgp::errors::Error| {
            format!("not an OpenPGP public key file (armored or binary): {e}")
        };
        let mut certs = Vec::new();
        for block in openpgp_blocks(&bytes) {
            let (many, _) = SignedPublicKey::from_reader_many(block).map_err(not_key)?;
            for c in many {
                certs.push(c.map_err(not_key)?);
            }
        }
        if certs.is_empty() {
            return Err("holds no OpenPGP public key".into());
        }
        Ok(SigningKey {
            path: path.to_path_buf(),
            certs,
        })
    }

    /// The primary keys' ids, as gpg prints them (`0123456789ABCDEF`).
    pub fn ids(&self) -> Vec<String> {
        self.certs
            .iter()
            .map(|c| key_id(&c.legacy_key_id()))
            .collect()
    }
}

/// The armored blocks of an OpenPGP file (from `-----BEGIN PGP ` to its
/// `-----END PGP ...-----` line), or the whole of a binary one. Each block
/// is parsed on its own: rPGP reads one block of several concatenated ones,
/// and vendors' key files (Red Hat's `RPM-GPG-KEY-redhat-release`) are such.
pub fn openpgp_blocks(bytes: &[u8]) -> Vec<&[u8]> {
    // Binary OpenPGP starts with a packet tag, whose top bit is set.
    if bytes.first().is_some_and(|b| b & 0x80 != 0) {
        return vec![bytes];
    }
    let find = |from: usize, what: &[u8]| {
        bytes[from..]
            .windows(what.len())
            .position(|w| w == what)
            .map(|i| from + i)
    };
    let mut blocks = Vec::new();
    let mut at = 0;
    while let Some(start) = find(at, b"-----BEGIN PGP ") {
        let Some(end) = find(start, b"-----END PGP ") else {
            // Unterminated: the parser says what is wrong with it.
            blocks.push(&bytes[start..]);
            break;
        };
        at = find(end, b"\n").map_or(bytes.len(), |n| n + 1);
        blocks.push(&bytes[start..at]);
    }
    if blocks.is_empty() {
        blocks.push(bytes);
    }
    blocks
}

/// A key id in gpg's spelling: 16 upper-case hex digits.
pub fn key_id(id: &pgp::types::KeyId) -> String {
    id.as_ref().iter().map(|b| format!("{b:02X}")).collect()
}

#[cfg(test)]
mod tests {
    use super::openpgp_blocks;

    #[test]
    fn each_armored_block_on_its_own_binary_whole() {
        let two = b"comment\n-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nAAAA\n-----END PGP PUBLIC KEY BLOCK-----\n\
                    -----BEGIN PGP PUBLIC KEY BLOCK-----\nBBBB\n-----END PGP PUBLIC KEY BLOCK-----";
        let b = openpgp_blocks(two);
        assert_eq!(b.len(), 2);
        assert!(b[0].starts_with(b"-----BEGIN") && b[0].ends_with(b"BLOCK-----\n"));
        assert!(
            b[1].starts_with(b"-----BEGIN")
                && b[1].ends_with(b"BBBB\n-----END PGP PUBLIC KEY BLOCK-----")
        );
        assert_eq!(
            openpgp_blocks(b"\x99\x01\x0d-----BEGIN PGP "),
            [&b"\x99\x01\x0d-----BEGIN PGP "[..]]
        );
        assert_eq!(openpgp_blocks(b"not openpgp"), [&b"not openpgp"[..]]);
        let open = b"-----BEGIN PGP SIGNATURE-----\nAAAA";
        assert_eq!(openpgp_blocks(open), [&open[..]]);
    }
}
