//! The site CA and bootd's serving certificate.
//!
//! On first start bootd generates a CA (ECDSA P-256) and keeps it in the
//! state directory (`ca.pem`, `ca.key` 0600). On every start it issues a
//! fresh serving certificate for the hosts in the site's URLs, signed by
//! that CA, and writes it beside (`server.pem`, `server.key`). Pointer
//! configs and userdata embed `ca.pem` so Ignition can fetch over HTTPS.
//!
//! TLS 1.2 with ECDHE + AES-GCM stays enabled beside 1.3: iPXE has no 1.3.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, KeyUsagePurpose,
    SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::io;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("state directory {path}: {source}")]
    Io { path: String, source: io::Error },
    #[error("certificate generation: {0}")]
    Gen(#[from] rcgen::Error),
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// One of the CA's files is there and the other is not, or cannot be
    /// read: a new CA would break the trust of every node that installed.
    #[error("the site CA in {dir} is incomplete or unreadable (ca.pem: {pem}; ca.key: {key}); every installed node trusts it, so bootd will not make a new one: restore both files, or remove both to start a new CA (nodes then need new Ignition)")]
    CaIncomplete {
        dir: String,
        pem: String,
        key: String,
    },
}

pub struct Tls {
    pub ca_pem: String,
    pub server_config: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> TlsError + '_ {
    move |source| TlsError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn validity(p: &mut CertificateParams, days: i64) {
    let now = time::OffsetDateTime::now_utc();
    // An hour of slack for machines whose clock is behind (firmware RTCs).
    p.not_before = now - time::Duration::hours(1);
    p.not_after = now + time::Duration::days(days);
}

fn ca_params() -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "bootd site CA");
    dn.push(DnType::OrganizationName, "bootd");
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut p, 3650);
    p
}

/// Loads the site CA from `state_dir`, or creates it. Returns the CA's PEM
/// as stored (what clients trust), and a signer for issuing.
fn load_or_create_ca(state_dir: &Path) -> Result<(String, rcgen::Certificate, KeyPair), TlsError> {
    let cert_path = state_dir.join("ca.pem");
    let key_path = state_dir.join("ca.key");
    match (
        std::fs::read_to_string(&cert_path),
        std::fs::read_to_string(&key_path),
    ) {
        (Ok(pem), Ok(key_pem)) => {
            let key = KeyPair::from_pem(&key_pem)?;
            // Re-create a signer with the stored CA's name and key: what it
            // signs verifies against the stored ca.pem.
            let params = CertificateParams::from_ca_cert_pem(&pem)?;
            let signer = params.self_signed(&key)?;
            Ok((pem, signer, key))
        }
        (Err(p), Err(k))
            if p.kind() == io::ErrorKind::NotFound && k.kind() == io::ErrorKind::NotFound =>
        {
            std::fs::create_dir_all(state_dir).map_err(io_err(state_dir))?;
            let key = KeyPair::generate()?;
            let cert = ca_params().self_signed(&key)?;
            let pem = cert.pem();
            crate::state::write_private(&key_path, key.serialize_pem().as_bytes())
                .map_err(io_err(&key_path))?;
            crate::state::write_atomic(&cert_path, pem.as_bytes(), 0o644)
                .map_err(io_err(&cert_path))?;
            Ok((pem, cert, key))
        }
        (p, k) => {
            let say = |r: &Result<String, io::Error>| match r {
                Ok(_) => "present".to_string(),
                Err(e) => e.to_string(),
            };
            Err(TlsError::CaIncomplete {
                dir: state_dir.display().to_string(),
                pem: say(&p),
                key: say(&k),
            })
        }
    }
}

/// Settles the site CA with the appliances sharing `shared`: the shared
/// one (key and certificate, PEM) wins and is written to `ca.key` and
/// `ca.pem` when they are absent; different files stop the start.
pub fn agree_ca(shared: &dyn crate::ha::Shared, state_dir: &Path) -> Result<(), TlsError> {
    let (cert_path, key_path) = (state_dir.join("ca.pem"), state_dir.join("ca.key"));
    let io = io_err(state_dir);
    crate::ha::agree(
        shared,
        "site-ca",
        state_dir,
        "ca.pem and ca.key",
        || match (
            std::fs::read_to_string(&key_path),
            std::fs::read_to_string(&cert_path),
        ) {
            (Ok(k), Ok(c)) => Ok(Some(format!("{k}{c}").into_bytes())),
            (Err(a), Err(b))
                if a.kind() == io::ErrorKind::NotFound && b.kind() == io::ErrorKind::NotFound =>
            {
                Ok(None)
            }
            (Err(e), _) | (_, Err(e)) => Err(e),
        },
        || {
            let key = KeyPair::generate().map_err(io::Error::other)?;
            let cert = ca_params().self_signed(&key).map_err(io::Error::other)?;
            Ok(format!("{}{}", key.serialize_pem(), cert.pem()).into_bytes())
        },
        |v| {
            let text = String::from_utf8_lossy(v);
            let at = text.find("-----BEGIN CERTIFICATE-----").ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the shared site CA has no certificate",
                )
            })?;
            crate::state::write_private(&key_path, text[..at].as_bytes())?;
            crate::state::write_atomic(&cert_path, text[at..].as_bytes(), 0o644)
        },
    )
    .map_err(io)
}

/// CA (loaded or created) and a serving certificate for `hosts` (IP
/// addresses or DNS names), plus `localhost` and loopback.
pub fn load_or_create(state_dir: &Path, hosts: &[String]) -> Result<Tls, TlsError> {
    let (ca_pem, ca, ca_key) = load_or_create_ca(state_dir)?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        hosts.first().map(String::as_str).unwrap_or("bootd"),
    );
    params.distinguished_name = dn;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    validity(&mut params, 365);
    let mut sans: Vec<SanType> = Vec::new();
    let mut all: Vec<String> = hosts.to_vec();
    all.extend([
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ]);
    all.sort();
    all.dedup();
    for h in &all {
        match h.parse::<IpAddr>() {
            Ok(ip) => sans.push(SanType::IpAddress(ip)),
            Err(_) => sans.push(SanType::DnsName(h.clone().try_into()?)),
        }
    }
    params.subject_alt_names = sans;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &ca, &ca_key)?;
    let server_pem = format!("{}{}", cert.pem(), ca_pem);
    let cert_path = state_dir.join("server.pem");
    let key_path = state_dir.join("server.key");
    crate::state::write_atomic(&cert_path, server_pem.as_bytes(), 0o644)
        .map_err(io_err(&cert_path))?;
    crate::state::write_private(&key_path, key.serialize_pem().as_bytes())
        .map_err(io_err(&key_path))?;

    // The leaf alone: clients hold the CA (ca.pem), and the re-created
    // signer is not byte-identical to it.
    let chain = vec![CertificateDer::from(cert.der().to_vec())];
    let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Tls {
        ca_pem,
        server_config: Arc::new(config),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A missing or unreadable half of the CA stops bootd instead of
    /// silently replacing the CA every installed node trusts.
    #[test]
    fn an_incomplete_ca_is_refused_not_replaced() {
        let d = tempfile::tempdir().unwrap();
        let first = load_or_create(d.path(), &["10.77.0.1".into()])
            .unwrap()
            .ca_pem;
        let again = load_or_create(d.path(), &["10.77.0.1".into()])
            .unwrap()
            .ca_pem;
        assert_eq!(first, again, "the stored CA is reused");
        std::fs::remove_file(d.path().join("ca.key")).unwrap();
        let e = load_or_create(d.path(), &[]).unwrap_err().to_string();
        assert!(
            e.contains("incomplete or unreadable") && e.contains("ca.key: No such file"),
            "{e}"
        );
        assert_eq!(
            std::fs::read_to_string(d.path().join("ca.pem")).unwrap(),
            first
        );
        assert!(!d.path().join("ca.key").exists(), "no new key written");
        // Unreadable (a directory where the key should be).
        std::fs::create_dir(d.path().join("ca.key")).unwrap();
        let e = load_or_create(d.path(), &[]).unwrap_err().to_string();
        assert!(e.contains("ca.pem: present"), "{e}");
        // Both gone: a new CA, as on first start.
        std::fs::remove_dir(d.path().join("ca.key")).unwrap();
        std::fs::remove_file(d.path().join("ca.pem")).unwrap();
        let fresh = load_or_create(d.path(), &[]).unwrap().ca_pem;
        assert_ne!(fresh, first);
    }
}
