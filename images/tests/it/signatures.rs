//! Signatures: every artifact's detached `.sig` is checked against the
//! site's `images.signingKeys` before it enters the cache, and again by
//! `images verify`. Keys and signatures are made by Debian's gpg (GnuPG, an
//! implementation independent of the one that checks them) in a temporary
//! GNUPGHOME; the stream document and its artifacts are served by
//! `server::Server` on 127.0.0.1; `images` is the real command, with a
//! site file, as an operator runs it.
//!
//! The attacker of these tests controls the mirror and the stream document
//! (so every sha256 matches what is served), but not the vendor's key.

use super::*;
use std::path::PathBuf;
use std::process::Command;

/// A GnuPG home of its own; its agent is stopped on drop.
struct Gpg {
    home: tempfile::TempDir,
}

impl Gpg {
    fn new() -> Gpg {
        let ok = Command::new("gpg").arg("--version").output().is_ok();
        assert!(
            ok,
            "gpg not found: these tests need GnuPG (apt-get install gnupg; tests/lab/deps.sh)"
        );
        Gpg {
            home: tempfile::tempdir().unwrap(),
        }
    }

    fn run(&self, args: &[&str]) -> Vec<u8> {
        let out = Command::new("gpg")
            .env("GNUPGHOME", self.home.path())
            .args(["--batch", "--yes", "--pinentry-mode", "loopback"])
            .args(["--passphrase", ""])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "gpg {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// A new signing key (`rsa4096` as Fedora's and Red Hat's are, or
    /// `ed25519`); its fingerprint.
    fn key(&self, uid: &str, algo: &str) -> String {
        self.run(&["--quick-gen-key", uid, algo, "sign", "never"]);
        self.fingerprints(uid)[0].clone()
    }

    /// A signing subkey of `primary`; its fingerprint.
    fn subkey(&self, primary: &str, uid: &str) -> String {
        self.run(&["--quick-add-key", primary, "ed25519", "sign", "never"]);
        self.fingerprints(uid)[1].clone()
    }

    /// The primary key's then the subkeys' fingerprints.
    fn fingerprints(&self, uid: &str) -> Vec<String> {
        let out = self.run(&["--with-colons", "--list-keys", uid]);
        String::from_utf8(out)
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("fpr:"))
            .map(|l| l.split(':').nth(9).unwrap().to_string())
            .collect()
    }

    /// The public key file, armored or binary.
    fn export(&self, fpr: &str, armor: bool) -> Vec<u8> {
        let mut args = vec!["--export"];
        if armor {
            args.push("--armor");
        }
        args.push(fpr);
        self.run(&args)
    }

    /// A detached signature of `data` by exactly this (sub)key (binary
    /// unless `extra` says `--armor`).
    fn sign(&self, fpr: &str, data: &[u8], extra: &[&str]) -> Vec<u8> {
        let input = self.home.path().join("to-sign");
        std::fs::write(&input, data).unwrap();
        let who = format!("{fpr}!");
        let mut args = vec!["-u", &who, "--detach-sign", "--output", "-"];
        args.extend(extra);
        args.push(input.to_str().unwrap());
        let out = self.run(&args);
        assert!(!out.is_empty());
        out
    }
}

impl Drop for Gpg {
    fn drop(&mut self) {
        let _ = Command::new("gpgconf")
            .env("GNUPGHOME", self.home.path())
            .args(["--kill", "gpg-agent"])
            .output();
    }
}

/// gpg's key id: the fingerprint's last 16 hex digits.
fn key_id(fpr: &str) -> &str {
    &fpr[fpr.len() - 16..]
}

/// What the attacker does to one artifact (by role) before serving it.
#[derive(Clone, Copy, PartialEq)]
enum Attack {
    None,
    /// Other bytes, with the stream document's sha256 of those bytes.
    FlipArtifact,
    /// One byte of the signature changed.
    FlipSignature,
    /// Signed by a key the site does not name.
    OtherKey,
    /// The stream document names no signature for it.
    Unsigned,
    /// Signed by the right key over SHA-1 (a digest open to collisions).
    Sha1,
    /// No attack: an armored signature, as some mirrors publish.
    Armored,
}

struct Release {
    url: String,
    /// (role, file name, bytes as published by the vendor).
    files: Vec<(&'static str, String, Vec<u8>)>,
}

/// Serves a release whose pxe files and metal disk image are each signed by
/// `signer` (a fingerprint in `gpg`), with `attack` done to `target`.
fn publish_signed(
    srv: &Server,
    gpg: &Gpg,
    signer: &str,
    version: &str,
    target: &str,
    attack: Attack,
    other: Option<&str>,
) -> Release {
    let mut files = artifacts(version);
    files.push((
        "disk",
        format!("test-{version}-metal.x86_64.raw.xz"),
        b"\xfd7zXZ\x00 a disk image, as far as hashes go".repeat(1000),
    ));
    let (mut pxe, mut raw) = (serde_json::Map::new(), serde_json::Map::new());
    for (role, name, bytes) in &files {
        let path = format!("/builds/{version}/x86_64/{name}");
        let attacked = *role == target;
        let mut sig = gpg.sign(signer, bytes, &[]);
        let mut served = bytes.clone();
        match attack {
            Attack::FlipArtifact if attacked => served[bytes.len() / 2] ^= 0x01,
            // The last byte is inside the signature's value (its MPI).
            Attack::FlipSignature if attacked => *sig.last_mut().unwrap() ^= 0x01,
            Attack::OtherKey if attacked => sig = gpg.sign(other.unwrap(), bytes, &[]),
            Attack::Sha1 if attacked => sig = gpg.sign(signer, bytes, &["--digest-algo", "SHA1"]),
            Attack::Armored if attacked => sig = gpg.sign(signer, bytes, &["--armor"]),
            _ => {}
        }
        srv.put(&path, &served);
        srv.put(&format!("{path}.sig"), &sig);
        let mut entry = serde_json::json!({"location": srv.url(&path), "sha256": sha(&served)});
        if !(attacked && attack == Attack::Unsigned) {
            entry["signature"] = srv.url(&format!("{path}.sig")).into();
        }
        if *role == "disk" {
            raw.insert("disk".into(), entry);
        } else {
            pxe.insert(role.to_string(), entry);
        }
    }
    let doc = serde_json::json!({
        "stream": STREAM,
        "metadata": {"last-modified": "2024-01-01T00:00:00Z"},
        "architectures": {"x86_64": {"artifacts": {"metal": {"release": version, "formats": {
            "pxe": pxe, "raw.xz": raw
        }}}}}
    });
    srv.put(
        "/streams/teststream.json",
        &serde_json::to_vec(&doc).unwrap(),
    );
    Release {
        url: srv.url("/streams/teststream.json"),
        files,
    }
}

/// The lab site in `dir` with a catalog set of `version` read from `url`,
/// and `keys` (file names in `dir/keys`) plus `extra` lines under `images`.
fn signed_site(dir: &Path, version: &str, url: &str, keys: &[&str], extra: &str) -> PathBuf {
    write_site(dir, version);
    let path = dir.join("site.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let set = format!("catalog: {{ stream: {STREAM}, version: \"{version}\", arch: x86_64 }}");
    assert!(text.contains(&set), "write_site changed shape");
    let keys: Vec<String> = keys.iter().map(|k| format!("keys/{k}")).collect();
    let text = text
        .replace(
            &set,
            &format!("catalog: {{ stream: {STREAM}, version: \"{version}\", arch: x86_64, streamUrl: \"{url}\" }}"),
        )
        .replace(
            "  root: images\n",
            &format!("  root: images\n  signingKeys: [{}]\n{extra}", keys.join(", ")),
        );
    std::fs::write(&path, text).unwrap();
    path
}

/// A site in a fresh directory that trusts `signer`'s key (`release.asc`)
/// for `rel`'s set `version`.
fn site_trusting(
    gpg: &Gpg,
    signer: &str,
    version: &str,
    rel: &Release,
) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    write_key(dir.path(), "release.asc", &gpg.export(signer, true));
    let site = signed_site(dir.path(), version, &rel.url, &["release.asc"], "");
    (dir, site)
}

fn write_key(dir: &Path, name: &str, key: &[u8]) {
    std::fs::create_dir_all(dir.join("keys")).unwrap();
    std::fs::write(dir.join("keys").join(name), key).unwrap();
}

/// `images <args>` with the site; (success, stdout + stderr).
async fn images_cmd(site: &Path, args: &[&str]) -> (bool, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_images"))
        .arg("--site")
        .arg(site)
        .args(args)
        .output()
        .await
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

async fn fetch(site: &Path) -> (bool, String) {
    images_cmd(site, &["fetch", "--format", "pxe", "--format", "raw.xz"]).await
}

/// Checks that the fetch was refused naming `name` and `why`, and that
/// nothing of `name` (file, part, signature) nor the set's manifest is in
/// the cache.
fn assert_refused(out: &(bool, String), root: &Path, name: &str, why: &str) {
    let (ok, text) = out;
    assert!(!ok, "the fetch succeeded:\n{text}");
    assert!(
        text.contains(&format!("{name}: {why}")),
        "want \"{name}: {why}\" in:\n{text}"
    );
    let files = tree(root);
    assert!(
        !files.iter().any(|p| p.contains(name)),
        "something of {name} is in the cache: {files:?}"
    );
    assert!(
        !files.iter().any(|p| p.ends_with(catalog::MANIFEST)),
        "a manifest was written: {files:?}"
    );
}

#[tokio::test]
async fn a_good_signature_is_accepted_and_the_artifact_cached() {
    let gpg = Gpg::new();
    let uid = "Test Release <release@example.test>";
    let signer = gpg.key(uid, "rsa4096");
    let srv = Server::start().await;
    let rel = publish_signed(&srv, &gpg, &signer, "20.0", "kernel", Attack::Armored, None);
    let dir = tempfile::tempdir().unwrap();
    // Armored and binary key files both work; a file of the other key too.
    write_key(dir.path(), "release.asc", &gpg.export(&signer, true));
    let other = gpg.key("Other <other@example.test>", "ed25519");
    write_key(dir.path(), "other.gpg", &gpg.export(&other, false));
    let site = signed_site(
        dir.path(),
        "20.0",
        &rel.url,
        &["other.gpg", "release.asc"],
        "",
    );
    let s = site::load(&site).unwrap_or_else(|e| panic!("{e}"));
    assert!(s.images.signing.require, "keys given: required by default");
    assert_eq!(site::exposure::warnings(&s), Vec::<String>::new());

    let out = fetch(&site).await;
    assert!(out.0, "{}", out.1);
    let set = dir.path().join("images/teststream/20.0/x86_64/metal");
    for (role, name, bytes) in &rel.files {
        assert_eq!(&std::fs::read(set.join(name)).unwrap(), bytes, "{name}");
        // Kept beside it, as served: for coreos-installer (the disk image)
        // and `verify`. The kernel's is armored, the others binary.
        let sig = std::fs::read(set.join(format!("{name}.sig"))).unwrap();
        let armored = sig.starts_with(b"-----BEGIN PGP SIGNATURE-----");
        assert_eq!(armored, *role == "kernel", "{name}.sig");
    }
    let m = catalog::read_manifest(&set).unwrap();
    assert_eq!(m.files.len(), 4);
    let (ok, text) = images_cmd(&site, &["verify"]).await;
    assert!(ok, "{text}");
    assert!(text.contains("ok   teststream/20.0/x86_64/metal"), "{text}");
    assert!(
        text.contains(&format!("4 signatures by {}", key_id(&signer))),
        "{text}"
    );

    // A signing subkey of a named key signs as well as its primary key.
    let sub = gpg.subkey(&signer, uid);
    let srv = Server::start().await;
    let rel = publish_signed(&srv, &gpg, &sub, "21.0", "", Attack::None, None);
    write_key(dir.path(), "release.asc", &gpg.export(&signer, true));
    let site = signed_site(dir.path(), "21.0", &rel.url, &["release.asc"], "");
    let out = fetch(&site).await;
    assert!(out.0, "{}", out.1);
}

#[tokio::test]
async fn a_flipped_byte_in_the_artifact_is_refused() {
    let gpg = Gpg::new();
    let signer = gpg.key("Test Release <release@example.test>", "rsa4096");
    let srv = Server::start().await;
    let rel = publish_signed(
        &srv,
        &gpg,
        &signer,
        "22.0",
        "rootfs",
        Attack::FlipArtifact,
        None,
    );
    let (dir, site) = site_trusting(&gpg, &signer, "22.0", &rel);
    let out = fetch(&site).await;
    let name = &rel.files[2].1;
    assert_refused(
        &out,
        &dir.path().join("images"),
        name,
        &format!("bad signature by key {}", key_id(&signer)),
    );
}

#[tokio::test]
async fn a_flipped_byte_in_the_signature_is_refused() {
    let gpg = Gpg::new();
    let signer = gpg.key("Test Release <release@example.test>", "rsa4096");
    let srv = Server::start().await;
    let rel = publish_signed(
        &srv,
        &gpg,
        &signer,
        "23.0",
        "disk",
        Attack::FlipSignature,
        None,
    );
    let (dir, site) = site_trusting(&gpg, &signer, "23.0", &rel);
    let out = fetch(&site).await;
    assert_refused(
        &out,
        &dir.path().join("images"),
        &rel.files[3].1,
        &format!("bad signature by key {}", key_id(&signer)),
    );

    // The right key's signature, over SHA-1: a collision could carry it to
    // other bytes, so it vouches for none.
    let srv = Server::start().await;
    let rel = publish_signed(&srv, &gpg, &signer, "23.1", "disk", Attack::Sha1, None);
    let site = signed_site(dir.path(), "23.1", &rel.url, &["release.asc"], "");
    let out = fetch(&site).await;
    assert_refused(
        &out,
        &dir.path().join("images"),
        &rel.files[3].1,
        &format!("bad signature by key {}", key_id(&signer)),
    );
    assert!(out.1.contains("made with SHA1"), "{}", out.1);
}

#[tokio::test]
async fn a_signature_by_another_key_is_refused() {
    let gpg = Gpg::new();
    let signer = gpg.key("Test Release <release@example.test>", "rsa4096");
    let other = gpg.key("Mallory <mallory@example.test>", "ed25519");
    let srv = Server::start().await;
    let rel = publish_signed(
        &srv,
        &gpg,
        &signer,
        "24.0",
        "kernel",
        Attack::OtherKey,
        Some(&other),
    );
    let (dir, site) = site_trusting(&gpg, &signer, "24.0", &rel);
    let out = fetch(&site).await;
    assert_refused(
        &out,
        &dir.path().join("images"),
        &rel.files[0].1,
        &format!("signature by unknown key {}", key_id(&other)),
    );
}

#[tokio::test]
async fn an_unsigned_artifact_is_refused_when_signatures_are_required() {
    let gpg = Gpg::new();
    let signer = gpg.key("Test Release <release@example.test>", "rsa4096");
    let srv = Server::start().await;
    let rel = publish_signed(
        &srv,
        &gpg,
        &signer,
        "25.0",
        "initramfs",
        Attack::Unsigned,
        None,
    );
    let dir = tempfile::tempdir().unwrap();
    write_key(dir.path(), "release.asc", &gpg.export(&signer, true));
    let name = &rel.files[1].1;
    for extra in ["  requireSignatures: true\n", ""] {
        let site = signed_site(dir.path(), "25.0", &rel.url, &["release.asc"], extra);
        let out = fetch(&site).await;
        assert_refused(&out, &dir.path().join("images"), name, "no signature");
    }

    // An operator may take unsigned artifacts: they are fetched, the signed
    // ones still checked, and `--check-config` says what that allows.
    let site = signed_site(
        dir.path(),
        "25.0",
        &rel.url,
        &["release.asc"],
        "  requireSignatures: false\n",
    );
    let w = site::exposure::warnings(&site::load(&site).unwrap());
    assert!(
        w.iter()
            .any(|w| w.starts_with("images.requireSignatures: false")),
        "{w:?}"
    );
    let out = fetch(&site).await;
    assert!(out.0, "{}", out.1);
    let set = dir.path().join("images/teststream/25.0/x86_64/metal");
    assert!(set.join(name).is_file());
    assert!(!set.join(format!("{name}.sig")).exists());
    assert!(set.join(format!("{}.sig", rel.files[0].1)).is_file());
}

#[tokio::test]
async fn verify_finds_a_cached_artifact_changed_afterwards() {
    let gpg = Gpg::new();
    let signer = gpg.key("Test Release <release@example.test>", "rsa4096");
    let srv = Server::start().await;
    let rel = publish_signed(&srv, &gpg, &signer, "26.0", "", Attack::None, None);
    let (dir, site) = site_trusting(&gpg, &signer, "26.0", &rel);
    let out = fetch(&site).await;
    assert!(out.0, "{}", out.1);
    let set = dir.path().join("images/teststream/26.0/x86_64/metal");
    let name = &rel.files[2].1;

    // One byte changed in place: the sha256 and the signature both say so.
    let mut bytes = std::fs::read(set.join(name)).unwrap();
    bytes[1000] ^= 0x01;
    std::fs::write(set.join(name), &bytes).unwrap();
    let (ok, text) = images_cmd(&site, &["verify"]).await;
    assert!(!ok, "{text}");
    assert!(text.contains("BAD  teststream/26.0/x86_64/metal"), "{text}");
    assert!(text.contains(&format!("{name}: sha256 ")), "{text}");
    assert!(
        text.contains(&format!("{name}: bad signature by key {}", key_id(&signer))),
        "{text}"
    );

    // Whoever can write the cache can rewrite its manifest too: the sha256
    // then matches, the signature still does not.
    let mut m = catalog::read_manifest(&set).unwrap();
    m.files.iter_mut().find(|f| &f.name == name).unwrap().sha256 = sha(&bytes);
    std::fs::write(
        set.join(catalog::MANIFEST),
        serde_json::to_vec_pretty(&m).unwrap(),
    )
    .unwrap();
    let (ok, text) = images_cmd(&site, &["verify"]).await;
    assert!(!ok, "{text}");
    assert!(!text.contains("sha256 "), "{text}");
    assert!(
        text.contains(&format!("{name}: bad signature by key {}", key_id(&signer))),
        "{text}"
    );
}

#[tokio::test]
async fn a_set_fetched_before_the_keys_were_given_is_checked_at_the_next_fetch() {
    let gpg = Gpg::new();
    let signer = gpg.key("Test Release <release@example.test>", "rsa4096");
    let srv = Server::start().await;
    let rel = publish_signed(
        &srv,
        &gpg,
        &signer,
        "27.0",
        "rootfs",
        Attack::FlipArtifact,
        None,
    );
    let dir = tempfile::tempdir().unwrap();
    write_key(dir.path(), "release.asc", &gpg.export(&signer, true));
    // No keys: the other bytes are taken on the stream's sha256, and the
    // site says so.
    let site = signed_site(dir.path(), "27.0", &rel.url, &[], "");
    let out = fetch(&site).await;
    assert!(out.0, "{}", out.1);
    assert!(
        out.1.contains("warning: ") && out.1.contains("images.signingKeys: none"),
        "{}",
        out.1
    );
    let set = dir.path().join("images/teststream/27.0/x86_64/metal");
    let name = &rel.files[2].1;
    assert!(set.join(name).is_file());

    // With the key, the cached set lacks its signatures: the next fetch
    // checks what is in place (downloading nothing again) and removes what
    // fails.
    let site = signed_site(dir.path(), "27.0", &rel.url, &["release.asc"], "");
    let before = srv.count();
    let out = fetch(&site).await;
    assert!(!out.0, "{}", out.1);
    assert!(
        out.1
            .contains(&format!("{name}: bad signature by key {}", key_id(&signer))),
        "{}",
        out.1
    );
    assert!(!set.join(name).exists() && !set.join(format!("{name}.sig")).exists());
    assert!(
        !srv.seen()[before..]
            .iter()
            .any(|s| !s.path.ends_with(".sig") && !s.path.ends_with(".json")),
        "an artifact was downloaded again: {:?}",
        &srv.seen()[before..]
    );
    let (ok, text) = images_cmd(&site, &["verify"]).await;
    assert!(!ok && text.contains(&format!("{name}: missing")), "{text}");
}

#[test]
fn the_vendors_keys_are_read() {
    // coreos-installer 0.27.0's src/signing-keys.asc (crates.io): the keys
    // it checks RHCOS and Fedora CoreOS disk images with, as the vendors
    // publish them (one armored block per key, RSA 4096, Red Hat's from 2009).
    let keys = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/coreos-installer-signing-keys.asc"),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_key(dir.path(), "vendors.asc", &keys);
    let url = "http://127.0.0.1:9/stream.json";
    let site = signed_site(dir.path(), "1.0", url, &["vendors.asc"], "");
    let s = site::load(&site).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        s.images.signing.keys[0].ids(),
        [
            "199E2F91FD431D51", // Red Hat, Inc. (release key 2)
            "DBFCF71C6D9F90A6", // Fedora (44)
            "655A4B02F577861E", // Fedora (45)
            "96E7E91491211FCE", // Fedora (46)
        ]
    );
}
