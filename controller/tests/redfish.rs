//! The Redfish provider against a Redfish fake, for the paths a real BMC
//! emulator does not take on demand: a refused password, 5xx with
//! Retry-After, a system that does not exist, a BMC that never powers
//! off, a reply that never comes, a certificate that does not verify, and
//! a crash after the power-on was sent. (tests/controller/bmc-e2e.sh drives
//! sushy-tools and real VMs.)

use controller::providers::redfish::{self, Redfish};
use controller::providers::{Machine, MachineState, NodeRequest, Provider, ProviderError};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use testkit::redfish_fake::*;

fn node(name: &str) -> NodeRequest {
    NodeRequest {
        ip: "10.77.0.60".parse().unwrap(),
        ipxe_url: "http://10.77.0.1:8080/ipxe/x.ipxe".into(),
        firmware: site::Firmware::Bios,
        uefi_http_url: "http://10.77.0.1:8080/boot/ipxe.efi".into(),
        ..NodeRequest::bare(name, "lab")
    }
}

fn spec(url: &str, pw: &Path) -> Value {
    let mut s = json!({ "url": url, "username": "admin", "password": { "file": pw } });
    if url.starts_with("http://") {
        // The fake speaks plain HTTP (the TLS test uses https://).
        s["allowPlainHttp"] = json!(true);
    }
    s
}

fn setup() -> (tempfile::TempDir, std::path::PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let pw = d.path().join("bmc-password");
    std::fs::write(&pw, format!("{PASSWORD}\n")).unwrap();
    (d, pw)
}

fn provider(dir: &Path) -> Redfish {
    redfish::for_tests(
        dir.join("state"),
        dir.to_path_buf(),
        Duration::from_secs(3),
        Duration::from_secs(1),
    )
}

/// create, then start (what the controller does once the MACs are
/// recorded), then the machine as the provider sees it.
async fn up(p: &Redfish, n: &NodeRequest, s: &Value) -> Result<Machine, ProviderError> {
    let m = p.create(n, s).await?;
    assert_eq!(m.state, MachineState::Prepared, "create changes nothing");
    assert!(!m.macs.is_empty());
    p.start(&m.id, n).await?;
    p.start(&m.id, n).await?;
    Ok(p.get(&m.id).await?.expect("a record"))
}

fn no_secret(e: &ProviderError) {
    let s = format!("{e} {e:?}");
    assert!(!s.contains(PASSWORD), "the password leaked: {s}");
}

#[tokio::test]
async fn override_once_one_power_on_macs_read_and_a_delete_that_powers_off() {
    let (d, pw) = setup();
    let bmc = fresh();
    let addr = serve(bmc.clone(), None).await;
    let p = provider(d.path());
    // The service root and a selector by Name.
    let mut s = spec(&format!("http://{addr}"), &pw);
    s["system"] = json!("rack1-u7");
    let n = node("bmc-0");
    assert_eq!(p.find(&n).await.unwrap(), None);
    let m = up(&p, &n, &s).await.unwrap();
    assert_eq!(m.state, MachineState::Active);
    assert_eq!(m.macs, vec!["52:54:00:aa:bb:01", "52:54:00:aa:bb:02"]);
    assert_eq!(m.id, format!("bmc-0@http://{addr}{SYS}"));
    {
        let b = bmc.lock().unwrap();
        assert_eq!(b.resets, vec!["On"]);
        assert_eq!(
            b.patches,
            vec![
                json!({"Boot": {"BootSourceOverrideEnabled": "Once", "BootSourceOverrideTarget": "Pxe", "BootSourceOverrideMode": "Legacy"}})
            ]
        );
    }
    // A restarted controller finds it, and powers nothing again.
    let p2 = provider(d.path());
    let found = p2.find(&n).await.unwrap().unwrap();
    assert_eq!(found.id, m.id);
    assert_eq!(
        p2.get(&m.id).await.unwrap().unwrap().state,
        MachineState::Active
    );
    assert_eq!(bmc.lock().unwrap().resets, vec!["On"]);
    // Delete: a graceful shutdown; once off, the override is cleared and the record goes.
    p2.delete(&m.id).await.unwrap();
    p2.delete(&m.id).await.unwrap();
    assert_eq!(p2.get(&m.id).await.unwrap(), None);
    let b = bmc.lock().unwrap();
    assert_eq!(b.resets, vec!["On", "GracefulShutdown"]);
    assert_eq!(b.enabled, "Disabled");
    assert_eq!(b.power, "Off");
    assert!(std::fs::read_dir(d.path().join("state"))
        .unwrap()
        .next()
        .is_none());
}

#[tokio::test]
async fn a_machine_already_on_is_restarted_and_uefi_http_points_at_this_host() {
    let (d, pw) = setup();
    let bmc = fresh();
    bmc.lock().unwrap().power = "On".into();
    let addr = serve(bmc.clone(), None).await;
    let p = provider(d.path());
    let mut s = spec(&format!("http://{addr}{SYS}"), &pw);
    s["boot"] = json!("uefiHttp");
    let mut n = node("bmc-1");
    n.firmware = site::Firmware::Auto;
    up(&p, &n, &s).await.unwrap();
    let b = bmc.lock().unwrap();
    assert_eq!(b.resets, vec!["ForceRestart"]);
    assert_eq!(
        b.patches[0]["Boot"],
        json!({"BootSourceOverrideEnabled": "Once", "BootSourceOverrideTarget": "UefiHttp",
               "BootSourceOverrideMode": "UEFI", "HttpBootUri": "http://10.77.0.1:8080/boot/ipxe.efi"})
    );
}

#[tokio::test]
async fn wrong_password_unknown_system_and_faults_say_so_without_the_password() {
    let (d, pw) = setup();
    let bmc = fresh();
    let addr = serve(bmc.clone(), None).await;
    let p = provider(d.path());
    let bad = d.path().join("wrong");
    std::fs::write(&bad, "not-it").unwrap();
    let e = up(&p, &node("a"), &spec(&format!("http://{addr}{SYS}"), &bad))
        .await
        .unwrap_err();
    assert!(!e.is_transient());
    assert!(
        e.to_string().contains("refused the username or password"),
        "{e}"
    );
    no_secret(&e);
    let e = up(
        &p,
        &node("a"),
        &spec(&format!("http://{addr}/redfish/v1/Systems/nope"), &pw),
    )
    .await
    .unwrap_err();
    assert!(!e.is_transient());
    assert!(
        e.to_string()
            .contains("/redfish/v1/Systems/nope does not exist"),
        "{e}"
    );
    let mut s = spec(&format!("http://{addr}"), &pw);
    s["system"] = json!("rack9");
    let e = up(&p, &node("a"), &s).await.unwrap_err();
    assert!(e.to_string().contains("no system \"rack9\""), "{e}");
    // Unreadable password file: the path, never content.
    let e = up(
        &p,
        &node("a"),
        &spec(&format!("http://{addr}{SYS}"), &d.path().join("missing")),
    )
    .await
    .unwrap_err();
    assert!(
        e.to_string().contains("missing") && !e.is_transient(),
        "{e}"
    );
    // Unreachable BMC: transient.
    let e = up(
        &p,
        &node("a"),
        &spec("http://127.0.0.1:9/redfish/v1/Systems/1", &pw),
    )
    .await
    .unwrap_err();
    assert!(
        e.is_transient() && e.to_string().contains("connection failed"),
        "{e}"
    );
    // 503 with Retry-After on the override: transient with the delay; nothing powered.
    bmc.lock()
        .unwrap()
        .faults
        .push(("PATCH", SYS, 503, Some(7)));
    let e = up(&p, &node("a"), &spec(&format!("http://{addr}{SYS}"), &pw))
        .await
        .unwrap_err();
    match &e {
        ProviderError::Transient { retry_after, .. } => {
            assert_eq!(*retry_after, Some(Duration::from_secs(7)))
        }
        other => panic!("{other:?}"),
    }
    assert!(bmc.lock().unwrap().resets.is_empty());
    // A refused power-on (500): the next attempt sends it, once.
    bmc.lock().unwrap().faults.push(("POST", SYS, 500, None));
    let e = up(&p, &node("a"), &spec(&format!("http://{addr}{SYS}"), &pw))
        .await
        .unwrap_err();
    assert!(e.is_transient(), "{e}");
    let m = p.find(&node("a")).await.unwrap().unwrap();
    assert_eq!(
        m.state,
        MachineState::Prepared,
        "a refused power-on leaves it prepared"
    );
    p.start(&m.id, &node("a")).await.unwrap();
    // The refused one did nothing (the fake answered before acting).
    assert_eq!(bmc.lock().unwrap().resets, vec!["On"]);
    assert_eq!(bmc.lock().unwrap().power, "On");
    // A BMC that does not answer in time.
    bmc.lock().unwrap().slow = Duration::from_millis(1500);
    let quick = redfish::for_tests(
        d.path().join("q"),
        d.path().to_path_buf(),
        Duration::from_millis(300),
        Duration::from_secs(1),
    );
    let e = up(
        &quick,
        &node("b"),
        &spec(&format!("http://{addr}{SYS}"), &pw),
    )
    .await
    .unwrap_err();
    assert!(
        e.is_transient() && e.to_string().contains("no reply within"),
        "{e}"
    );
}

/// The power-on reached the BMC and the reply was lost (a crash, or a cut
/// connection, at that moment): after a restart the machine is found, and
/// not powered again.
#[tokio::test]
async fn a_power_on_whose_reply_was_lost_is_not_sent_twice() {
    let (d, pw) = setup();
    let bmc = fresh();
    bmc.lock().unwrap().drop_after_reset = true;
    let addr = serve(bmc.clone(), None).await;
    let p = provider(d.path());
    let s = spec(&format!("http://{addr}{SYS}"), &pw);
    let e = up(&p, &node("c"), &s).await.unwrap_err();
    assert!(e.is_transient(), "{e}");
    let p2 = provider(d.path());
    let m = p2
        .find(&node("c"))
        .await
        .unwrap()
        .expect("the record says a power-on was sent");
    assert_eq!(m.state, MachineState::Active);
    assert_eq!(bmc.lock().unwrap().resets, vec!["On"]);
}

#[tokio::test]
async fn a_hung_os_is_forced_off_after_the_timeout() {
    let (d, pw) = setup();
    let bmc = fresh();
    let addr = serve(bmc.clone(), None).await;
    let p = provider(d.path());
    let m = up(&p, &node("d"), &spec(&format!("http://{addr}{SYS}"), &pw))
        .await
        .unwrap();
    bmc.lock().unwrap().hung = true;
    p.delete(&m.id).await.unwrap();
    assert_eq!(
        p.get(&m.id).await.unwrap().unwrap().state,
        MachineState::Deleting
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        p.get(&m.id).await.unwrap().unwrap().state,
        MachineState::Deleting
    );
    assert_eq!(p.get(&m.id).await.unwrap(), None);
    assert_eq!(
        bmc.lock().unwrap().resets,
        vec!["On", "GracefulShutdown", "ForceOff"]
    );
}

#[tokio::test]
async fn the_bmc_certificate_is_verified_unless_told_not_to() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (d, pw) = setup();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let cfg = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    let bmc = fresh();
    let addr = serve(bmc.clone(), Some(Arc::new(cfg))).await;
    let url = format!("https://{addr}{SYS}");
    let p = provider(d.path());
    let e = up(&p, &node("e"), &spec(&url, &pw)).await.unwrap_err();
    assert!(
        e.to_string().contains("certificate does not verify"),
        "{e:?}"
    );
    assert!(!e.is_transient(), "{e}");
    assert!(bmc.lock().unwrap().patches.is_empty());
    let ca_file = d.path().join("bmc-ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let mut s = spec(&url, &pw);
    s["caBundle"] = json!(ca_file);
    up(&p, &node("e"), &s).await.unwrap();
    let mut s = spec(&url, &pw);
    s["insecureSkipVerify"] = json!(true);
    up(&p, &node("f"), &s).await.unwrap();
    assert_eq!(bmc.lock().unwrap().resets, vec!["On", "ForceRestart"]);
}

#[test]
fn specs_are_checked_with_every_problem() {
    let reg = controller::providers::registration("redfish").unwrap();
    let ok = json!({"url": "https://10.0.0.5/redfish/v1/Systems/1", "username": "admin", "password": {"credential": "bmc-r1"}});
    assert_eq!((reg.check_spec)(&ok), Ok(vec![]));
    let bad = json!({"url": "ftp://admin:pw@x/", "username": "", "password": {"file": "rel", "env": "X"},
                     "caBundle": "/ca.pem", "insecureSkipVerify": true, "boot": "floppy", "mode": "BIOS"});
    let p = (reg.check_spec)(&bad).unwrap();
    assert_eq!(p.len(), 6, "{p:#?}");
    assert!(
        p.iter().any(|x| x.starts_with("provider.redfish.url")),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|x| x.contains("exactly one of file, credential, env")),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|x| x.contains("\"floppy\": want pxe, uefiHttp or virtualMedia")),
        "{p:?}"
    );
    // An inline password is not a reference: refused when parsed.
    let inline = json!({"url": "https://b", "username": "a", "password": "hunter2"});
    let e = (reg.check_spec)(&inline).unwrap_err();
    assert!(!e.contains("hunter2"), "{e}");
}

/// A BMC whose reply names a path on another host: not followed, so the
/// credentials never go there.
#[tokio::test]
async fn links_outside_the_bmc_are_not_followed() {
    let (d, pw) = setup();
    let bmc = fresh();
    bmc.lock().unwrap().evil_member = true;
    let addr = serve(bmc.clone(), None).await;
    let mut s = spec(&format!("http://{addr}"), &pw);
    s["system"] = json!("rack1-u7");
    let e = up(&provider(d.path()), &node("g"), &s).await.unwrap_err();
    assert!(!e.is_transient(), "{e}");
    assert!(e.to_string().contains("outside itself"), "{e}");
    assert!(bmc.lock().unwrap().resets.is_empty());
}

/// boot: virtualMedia: the ISO goes into the CD device (found through the
/// manager), a one-time boot from it, power on; `finish` (the node fetched
/// its Ignition) ejects it once; an image left by someone else is ejected
/// before the insert; the ISO URL (it carries a token) is in no error.
#[tokio::test]
async fn virtual_media_is_inserted_booted_once_and_ejected_after_ignition() {
    let (d, pw) = setup();
    let bmc = fresh();
    bmc.lock().unwrap().media = Some("http://old.example/other.iso".into());
    let addr = serve(bmc.clone(), None).await;
    let p = provider(d.path());
    let mut s = spec(&format!("http://{addr}{SYS}"), &pw);
    s["boot"] = json!("virtualMedia");
    let reg = controller::providers::registration("redfish").unwrap();
    assert_eq!((reg.check_spec)(&s), Ok(vec![]));
    assert_eq!((reg.boot_kind)(&s), controller::providers::BootKind::Media);
    let mut n = node("vm");
    let url = "http://10.77.0.1:8080/media/vm.iso?token=123.secret-token";
    n.media_url = site::Secret(url.into());
    let m = up(&p, &n, &s).await.unwrap();
    assert_eq!(m.state, MachineState::Active);
    {
        let b = bmc.lock().unwrap();
        assert_eq!(
            b.media_ops,
            vec!["eject".to_string(), format!("insert {url}")]
        );
        assert_eq!(b.media.as_deref(), Some(url));
        assert_eq!(b.target, "Cd");
        assert_eq!(b.enabled, "Once");
        assert_eq!(b.mode, "Legacy", "the node's firmware hint is bios");
        assert_eq!(b.resets, vec!["On"], "one power-on for two starts");
    }
    p.finish(&m.id).await.unwrap();
    p.finish(&m.id).await.unwrap();
    {
        let b = bmc.lock().unwrap();
        assert_eq!(b.media, None);
        assert_eq!(
            b.media_ops.iter().filter(|o| *o == "eject").count(),
            2,
            "the stranger's image and ours, each once"
        );
    }
    let state = std::fs::read_to_string(d.path().join("state/redfish-vm.json")).unwrap();
    let rec: Value = serde_json::from_str(&state).unwrap();
    assert_eq!(rec["media"]["ejected"], json!(true), "{state}");
    assert!(
        !state.contains("secret-token"),
        "the token is not kept: {state}"
    );
    // No CD device: a clear, permanent error, and no power action.
    let (d2, pw2) = setup();
    let bmc2 = fresh();
    bmc2.lock()
        .unwrap()
        .faults
        .push(("GET", MANAGER, 404, None));
    let addr2 = serve(bmc2.clone(), None).await;
    let p2 = provider(d2.path());
    let mut s2 = spec(&format!("http://{addr2}{SYS}"), &pw2);
    s2["boot"] = json!("virtualMedia");
    let e = up(&p2, &n, &s2).await.unwrap_err();
    assert!(!e.is_transient(), "{e}");
    assert!(e.to_string().contains("HTTP 404"), "{e}");
    assert!(!format!("{e} {e:?}").contains("secret-token"), "{e:?}");
    assert!(bmc2.lock().unwrap().resets.is_empty());
    // Without bootd's ISO URL the start is refused before anything is sent.
    let mut n3 = node("vm3");
    n3.media_url = site::Secret(String::new());
    let e = up(&p, &n3, &s).await.unwrap_err();
    assert!(e.to_string().contains("no ISO"), "{e}");
}

/// Session authentication (DMTF's SessionService) on a BMC that refuses
/// Basic: one login for every operation, the token in `X-Auth-Token`; a
/// session the BMC ended is opened again; closing deletes it. `auth:
/// basic` and `auth: session` say what is wrong on a BMC without them.
#[tokio::test]
async fn sessions_are_opened_once_reused_renewed_and_closed() {
    let (d, pw) = setup();
    let bmc = fresh();
    {
        let mut b = bmc.lock().unwrap();
        b.sessions = true;
        b.no_basic = true;
    }
    // A busy service root at the first login: a transient error, not a
    // BMC without sessions (which would mean Basic, refused here, for good).
    bmc.lock()
        .unwrap()
        .faults
        .push(("GET", "/redfish/v1", 503, None));
    let addr = serve(bmc.clone(), None).await;
    let p = provider(d.path());
    let s = spec(&format!("http://{addr}{SYS}"), &pw);
    let n = node("sess");
    let e = p.create(&n, &s).await.unwrap_err();
    assert!(e.is_transient(), "{e}");
    let m = up(&p, &n, &s).await.unwrap();
    assert_eq!(m.state, MachineState::Active);
    assert_eq!(bmc.lock().unwrap().resets, vec!["On"]);
    assert_eq!(
        bmc.lock().unwrap().logins,
        1,
        "one session for create, two starts and a get"
    );
    // The BMC ends it (timeout): the next request logs in again.
    bmc.lock().unwrap().open.clear();
    p.get(&m.id).await.unwrap().unwrap();
    assert_eq!(bmc.lock().unwrap().logins, 2);
    p.close_sessions(true).await;
    {
        let b = bmc.lock().unwrap();
        assert!(b.open.is_empty(), "closed on the BMC");
        assert_eq!(b.logouts, 1);
    }
    // Basic only, on this BMC: refused, saying so, without the password.
    let mut basic = s.clone();
    basic["auth"] = json!("basic");
    let e = p.create(&node("sess-b"), &basic).await.unwrap_err();
    assert!(e.to_string().contains("HTTP 401"), "{e}");
    no_secret(&e);
    // A session where the BMC has none (the fake without SessionService,
    // as sushy-tools): a clear error; auto falls back to Basic.
    let plain = fresh();
    let addr2 = serve(plain.clone(), None).await;
    let mut sess = spec(&format!("http://{addr2}{SYS}"), &pw);
    sess["auth"] = json!("session");
    let e = p.create(&node("sess-c"), &sess).await.unwrap_err();
    assert!(e.to_string().contains("links no SessionService"), "{e}");
    sess["auth"] = json!("auto");
    p.create(&node("sess-c"), &sess).await.unwrap();
    assert_eq!(plain.lock().unwrap().logins, 0);
}

/// A BMC that refuses If-Match though the ETag is current (a broken
/// conditional PATCH): the override goes again without it, once.
#[tokio::test]
async fn a_bmc_refusing_if_match_gets_the_patch_without_it() {
    let (d, pw) = setup();
    let bmc = fresh();
    bmc.lock().unwrap().etag_mode = EtagMode::Broken;
    let addr = serve(bmc.clone(), None).await;
    let p = provider(d.path());
    let m = up(
        &p,
        &node("etag"),
        &spec(&format!("http://{addr}{SYS}"), &pw),
    )
    .await
    .unwrap();
    assert_eq!(m.state, MachineState::Active);
    let b = bmc.lock().unwrap();
    assert_eq!((b.target.as_str(), b.enabled.as_str()), ("Pxe", "Once"));
    assert_eq!(b.patches.len(), 1);
    assert_eq!(b.resets, vec!["On"]);
}

/// A BMC without UEFI HTTP boot (its allowable targets lack UefiHttp): a
/// node whose firmware hint is uefi-http boots by PXE; a spec that asks
/// for uefiHttp is refused before anything is sent, naming what it offers.
#[tokio::test]
async fn uefi_http_where_the_bmc_has_none() {
    let (d, pw) = setup();
    let bmc = fresh();
    bmc.lock().unwrap().targets = Some(vec!["None", "Pxe", "Hdd", "Cd"]);
    let addr = serve(bmc.clone(), None).await;
    let p = provider(d.path());
    let mut n = node("uh");
    n.firmware = site::Firmware::UefiHttp;
    let s = spec(&format!("http://{addr}{SYS}"), &pw);
    up(&p, &n, &s).await.unwrap();
    assert_eq!(bmc.lock().unwrap().target, "Pxe");
    let mut explicit = s.clone();
    explicit["boot"] = json!("uefiHttp");
    let e = p.create(&node("uh2"), &explicit).await.unwrap_err();
    assert!(!e.is_transient());
    assert_eq!(
        e.to_string(),
        "redfish: the BMC offers no UefiHttp boot override (it offers None, Pxe, Hdd, Cd)"
    );
    assert_eq!(bmc.lock().unwrap().patches.len(), 1, "nothing sent for uh2");
}

/// A BMC whose override is Continuous or Disabled only: Continuous, then
/// cleared once the node fetched its Ignition (else every restart would
/// boot the installer again).
#[tokio::test]
async fn a_continuous_only_override_is_cleared_after_ignition() {
    let (d, pw) = setup();
    let bmc = fresh();
    bmc.lock().unwrap().enabled_values = Some(vec!["Disabled", "Continuous"]);
    let addr = serve(bmc.clone(), None).await;
    let p = provider(d.path());
    let m = up(
        &p,
        &node("cont"),
        &spec(&format!("http://{addr}{SYS}"), &pw),
    )
    .await
    .unwrap();
    assert_eq!(bmc.lock().unwrap().enabled, "Continuous");
    p.finish(&m.id).await.unwrap();
    p.finish(&m.id).await.unwrap();
    let b = bmc.lock().unwrap();
    assert_eq!(b.enabled, "Disabled");
    assert_eq!(b.patches.len(), 2, "set once, cleared once");
}

/// A node that inspects before it installs boots from the network twice:
/// where the BMC has Once, its override is Continuous until the install
/// fetched its Ignition; where the BMC lists no Continuous, Once.
#[tokio::test]
async fn a_node_that_inspects_first_keeps_booting_from_the_network_until_it_installs() {
    let (d, pw) = setup();
    let bmc = fresh();
    let addr = serve(bmc.clone(), None).await;
    let p = provider(d.path());
    let n = NodeRequest {
        inspects_first: true,
        ..node("insp")
    };
    let m = up(&p, &n, &spec(&format!("http://{addr}{SYS}"), &pw))
        .await
        .unwrap();
    assert_eq!(bmc.lock().unwrap().enabled, "Continuous");
    p.finish(&m.id).await.unwrap();
    assert_eq!(bmc.lock().unwrap().enabled, "Disabled");
    // A BMC with Once and Disabled only: Once.
    let bmc = fresh();
    bmc.lock().unwrap().enabled_values = Some(vec!["Disabled", "Once"]);
    let addr = serve(bmc.clone(), None).await;
    let p = provider(d.path());
    up(
        &p,
        &node_inspecting("insp2"),
        &spec(&format!("http://{addr}{SYS}"), &pw),
    )
    .await
    .unwrap();
    assert_eq!(bmc.lock().unwrap().enabled, "Once");
}

fn node_inspecting(name: &str) -> NodeRequest {
    NodeRequest {
        inspects_first: true,
        ..node(name)
    }
}

/// Virtual media under the system (Redfish 1.11 and later) rather than
/// under the manager.
#[tokio::test]
async fn virtual_media_under_the_system() {
    let (d, pw) = setup();
    let bmc = fresh();
    bmc.lock().unwrap().media_on_system = true;
    let addr = serve(bmc.clone(), None).await;
    let p = provider(d.path());
    let mut s = spec(&format!("http://{addr}{SYS}"), &pw);
    s["boot"] = json!("virtualMedia");
    let mut n = node("vms");
    n.media_url = site::Secret("http://10.77.0.1:8080/media/vms.iso?token=t".into());
    up(&p, &n, &s).await.unwrap();
    let b = bmc.lock().unwrap();
    assert_eq!(
        b.media.as_deref(),
        Some("http://10.77.0.1:8080/media/vms.iso?token=t")
    );
    assert_eq!(b.target, "Cd");
}
