//! `host.api.bmcCredentials` against an API caller who names a BMC
//! password and a URL of their choosing: the provider refuses before any
//! request leaves, so a listener at that URL sees nothing; the same
//! reference at its own BMC works. An install-config host's password goes
//! only to that host's `bmc.address`.

use controller::providers::redfish::{self, Redfish};
use controller::providers::{MachineState, NodeRequest, Provider, ProviderError};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use testkit::redfish_fake::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn node(name: &str) -> NodeRequest {
    NodeRequest {
        ip: "10.77.0.60".parse().unwrap(),
        firmware: site::Firmware::Bios,
        ..NodeRequest::bare(name, "lab")
    }
}

/// The attacker's BMC: every connection and the head of what it sent.
async fn listener() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let l = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            let mut buf = vec![0u8; 8192];
            let n = tokio::time::timeout(Duration::from_secs(2), c.read(&mut buf))
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or(0);
            s.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            let _ = c
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
                .await;
        }
    });
    (addr, seen)
}

fn setup() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let pw = d.path().join("rack1");
    std::fs::write(&pw, format!("{PASSWORD}\n")).unwrap();
    (d, pw)
}

fn provider(dir: &Path, creds: Option<Vec<site::BmcCredential>>) -> Redfish {
    redfish::for_tests(
        dir.join("state"),
        dir.to_path_buf(),
        Duration::from_secs(3),
        Duration::from_secs(1),
    )
    .with_credentials(creds)
}

/// Rack 1's password, for `origins` only.
fn rack1(pw: &Path, origins: &[String], plain: bool) -> Option<Vec<site::BmcCredential>> {
    Some(vec![site::BmcCredential {
        password: site::PasswordPattern::File(pw.to_path_buf()),
        origins: origins
            .iter()
            .map(|o| site::BmcOrigin::parse(o).unwrap())
            .collect(),
        allow_plain_http: plain,
        insecure_skip_verify: false,
    }])
}

fn spec(url: &str, password: Value) -> Value {
    json!({ "url": url, "username": "admin", "password": password,
            "allowPlainHttp": true, "auth": "basic" })
}

/// The attacker's listener saw no connection (else: its requests'
/// Authorization lines).
async fn nothing_reached(seen: &Mutex<Vec<String>>) {
    tokio::time::sleep(Duration::from_millis(200)).await;
    let got = seen.lock().unwrap().clone();
    let auth: Vec<&str> = got
        .iter()
        .flat_map(|r| r.lines())
        .filter(|l| l.to_ascii_lowercase().starts_with("authorization"))
        .collect();
    assert!(
        got.is_empty(),
        "the attacker's listener got {} request(s), with {auth:?}",
        got.len()
    );
}

fn refused(e: &ProviderError, key: &str) {
    let s = e.to_string();
    assert!(!e.is_transient(), "{s}");
    assert!(s.contains(key), "{s}");
    assert!(!s.contains(PASSWORD), "{s}");
}

#[tokio::test]
async fn a_password_is_never_sent_to_an_origin_its_entry_does_not_allow() {
    let (d, pw) = setup();
    let bmc = fresh();
    let a = serve(bmc.clone(), None).await;
    let (b, seen) = listener().await;
    let p = provider(d.path(), rack1(&pw, &[format!("http://{a}")], true));

    // The attack: rack 1's password, the attacker's URL.
    let r = p
        .create(
            &node("evil"),
            &spec(&format!("http://{b}{SYS}"), json!({ "file": pw })),
        )
        .await;
    nothing_reached(&seen).await;
    refused(&r.unwrap_err(), "host.api.bmcCredentials");
    assert!(!d.path().join("state/bmc/redfish-evil.json").exists());

    // The same reference at its own BMC works.
    let n = node("good");
    let m = p
        .create(
            &n,
            &spec(&format!("http://{a}{SYS}"), json!({ "file": pw })),
        )
        .await
        .unwrap();
    assert_eq!(m.state, MachineState::Prepared);
    p.start(&m.id, &n).await.unwrap();
    assert_eq!(bmc.lock().unwrap().resets, vec!["On"]);
    assert!(seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn plain_http_and_skipped_verification_only_where_the_entry_allows_them() {
    let (d, pw) = setup();
    let bmc = fresh();
    let a = serve(bmc.clone(), None).await;
    // Rack 1's BMC over HTTPS only: a node asking for http:// is refused,
    // and nothing reaches the BMC in clear.
    let p = provider(d.path(), rack1(&pw, &[format!("https://{a}")], false));
    let e = p
        .create(
            &node("plain"),
            &spec(&format!("http://{a}{SYS}"), json!({ "file": pw })),
        )
        .await
        .unwrap_err();
    refused(&e, "host.api.bmcCredentials");
    let mut s = spec(&format!("https://{a}{SYS}"), json!({ "file": pw }));
    s["allowPlainHttp"] = json!(true);
    let e = p.create(&node("plain2"), &s).await.unwrap_err();
    refused(&e, "allowPlainHttp");
    s["allowPlainHttp"] = json!(false);
    s["insecureSkipVerify"] = json!(true);
    let e = p.create(&node("insecure"), &s).await.unwrap_err();
    refused(&e, "insecureSkipVerify");
    let b = bmc.lock().unwrap();
    assert!(b.resets.is_empty() && b.patches.is_empty() && b.logins == 0);
}

#[tokio::test]
async fn an_install_config_password_goes_only_to_its_hosts_address() {
    let d = tempfile::tempdir().unwrap();
    let bmc = fresh();
    let a = serve(bmc.clone(), None).await;
    let (b, seen) = listener().await;
    let ic = d.path().join("install-config.yaml");
    std::fs::write(
        &ic,
        format!(
            "platform:\n  baremetal:\n    hosts:\n    - name: worker-0\n      role: worker\n      \
             bmc: {{ address: \"redfish+http://{a}{SYS}\", username: admin, password: \"{PASSWORD}\" }}\n"
        ),
    )
    .unwrap();
    let pw = json!({ "file": ic, "installConfigHost": "worker-0" });
    // Without host.api.bmcCredentials, and with a list that names nothing:
    // the file binds its host's password to its address either way.
    for creds in [None, Some(vec![])] {
        let p = provider(d.path(), creds);
        let r = p
            .create(
                &node("evil"),
                &spec(&format!("http://{b}{SYS}"), pw.clone()),
            )
            .await;
        nothing_reached(&seen).await;
        refused(&r.unwrap_err(), "goes only to its own bmc.address");
        let n = node("worker-0");
        let m = p
            .create(&n, &spec(&format!("http://{a}{SYS}"), pw.clone()))
            .await
            .unwrap();
        assert_eq!(m.state, MachineState::Prepared);
        std::fs::remove_dir_all(d.path().join("state")).unwrap();
    }
    nothing_reached(&seen).await;
}

#[tokio::test]
async fn without_the_key_any_reference_goes_anywhere_as_before() {
    let (d, pw) = setup();
    let (b, seen) = listener().await;
    let p = provider(d.path(), None);
    let _ = p
        .create(
            &node("anywhere"),
            &spec(&format!("http://{b}{SYS}"), json!({ "file": pw })),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let got = seen.lock().unwrap().clone();
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].to_ascii_lowercase().contains("authorization: basic"));
}
