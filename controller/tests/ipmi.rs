//! The IPMI provider's use of ipmitool, against a stand-in ipmitool (a
//! script that logs its argv and environment and answers like the real
//! one) for the paths the virtualbmc end-to-end test does not take: the
//! argument vector, the password kept out of it, refusals and timeouts.
//! (tests/controller/bmc-e2e.sh drives virtualbmc and a real VM.)

use controller::providers::ipmi::Ipmi;
use controller::providers::{MachineState, NodeRequest, Provider};
use serde_json::json;
use std::path::Path;
use std::time::Duration;

const PASSWORD: &str = "ipmi-Pa55-word";

/// The tests here one at a time: a stand-in is written while the other
/// test's thread may fork to run its own, and a child that has not yet
/// exec'd holds the new file's write descriptor for a moment: executing
/// the stand-in then fails with ETXTBSY ("Text file busy").
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A stand-in ipmitool: the chassis power state in `power`, every call in
/// `calls` (argv, then IPMI_PASSWORD); `mode` = ok | refuse | hang.
fn stand_in(dir: &Path, mode: &str) -> std::path::PathBuf {
    let p = dir.join("ipmitool");
    std::fs::write(
        &p,
        format!(
            r#"#!/bin/sh
d={d}
echo "$* | pw=$IPMI_PASSWORD" >> $d/calls
case {mode} in
  refuse) echo "Error: Unable to establish IPMI v2 / RMCP+ session" >&2; echo "RAKP 2 HMAC is invalid" >&2; exit 1 ;;
  hang) sleep 5 ;;
esac
[ -f $d/power ] || echo off > $d/power
for a in "$@"; do last3="$prev2 $prev1 $a"; prev2=$prev1; prev1=$a; done
case "$last3" in
  "chassis power status") echo "Chassis Power is $(cat $d/power)" ;;
  "chassis power on"|"chassis power reset") echo on > $d/power; echo "Chassis Power Control: Up/On" ;;
  "chassis power soft"|"chassis power off") echo off > $d/power; echo "Chassis Power Control: Down/Off" ;;
  *) echo "Set Boot Device to $a" ;;
esac
"#,
            d = dir.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn provider(dir: &Path, mode: &str, timeout: Duration) -> Ipmi {
    Ipmi {
        ipmitool: stand_in(dir, mode),
        timeout,
        power_off_timeout: Duration::from_secs(60),
        dir: dir.join("records"),
        files: dir.to_path_buf(),
        credentials: None,
    }
}

fn node(macs: &[&str]) -> NodeRequest {
    NodeRequest {
        ip: "10.77.0.61".parse().unwrap(),
        macs: macs.iter().map(|m| m.to_string()).collect(),
        firmware: site::Firmware::Uefi,
        ..NodeRequest::bare("rack-3", "lab")
    }
}

fn spec(dir: &Path) -> serde_json::Value {
    let pw = dir.join("pw");
    std::fs::write(&pw, PASSWORD).unwrap();
    json!({"address": "127.0.0.1", "port": 6230, "username": "admin", "password": {"file": pw}})
}

#[tokio::test]
async fn bootdev_then_power_on_with_the_password_in_the_environment_only() {
    let _one = ONE_AT_A_TIME.lock().await;
    let d = tempfile::tempdir().unwrap();
    let p = provider(d.path(), "ok", Duration::from_secs(5));
    let s = spec(d.path());
    let m = p.create(&node(&["52:54:00:77:00:61"]), &s).await.unwrap();
    assert_eq!(m.state, MachineState::Prepared, "create changes nothing");
    p.start(&m.id, &node(&["52:54:00:77:00:61"])).await.unwrap();
    p.start(&m.id, &node(&["52:54:00:77:00:61"])).await.unwrap();
    assert_eq!(
        p.get(&m.id).await.unwrap().unwrap().state,
        MachineState::Active
    );
    assert_eq!(m.id, "rack-3@ipmi://127.0.0.1:6230");
    let calls = std::fs::read_to_string(d.path().join("calls")).unwrap();
    let lines: Vec<&str> = calls.lines().collect();
    let pre = "-I lanplus -H 127.0.0.1 -p 6230 -U admin -E -N 2 -R 2";
    assert_eq!(
        lines,
        vec![
            format!("{pre} chassis power status | pw={PASSWORD}"),
            format!("{pre} chassis power status | pw={PASSWORD}"),
            format!("{pre} chassis bootdev pxe options=efiboot | pw={PASSWORD}"),
            format!("{pre} chassis power on | pw={PASSWORD}"),
            format!("{pre} chassis power status | pw={PASSWORD}"),
        ]
    );
    // A restart finds it without a second power action; delete is a soft off.
    let p2 = provider(d.path(), "ok", Duration::from_secs(5));
    assert!(p2
        .find(&node(&["52:54:00:77:00:61"]))
        .await
        .unwrap()
        .is_some());
    p2.delete(&m.id).await.unwrap();
    assert_eq!(p2.get(&m.id).await.unwrap(), None);
    let calls = std::fs::read_to_string(d.path().join("calls")).unwrap();
    assert_eq!(calls.matches("chassis power on").count(), 1, "{calls}");
    assert!(calls.contains("chassis power soft"), "{calls}");
    assert!(calls.contains("chassis bootdev none"), "{calls}");
}

/// A node that inspects before it installs boots from the network twice:
/// its boot device is set persistent, and cleared once the install fetched
/// its Ignition (`finish`), once.
#[tokio::test]
async fn a_node_that_inspects_first_keeps_booting_from_the_network_until_it_installs() {
    let _one = ONE_AT_A_TIME.lock().await;
    let d = tempfile::tempdir().unwrap();
    let p = provider(d.path(), "ok", Duration::from_secs(5));
    let s = spec(d.path());
    let n = NodeRequest {
        inspects_first: true,
        ..node(&["52:54:00:77:00:61"])
    };
    let m = p.create(&n, &s).await.unwrap();
    p.start(&m.id, &n).await.unwrap();
    p.finish(&m.id).await.unwrap();
    p.finish(&m.id).await.unwrap();
    let calls = std::fs::read_to_string(d.path().join("calls")).unwrap();
    assert!(
        calls.contains("chassis bootdev pxe options=persistent,efiboot |"),
        "{calls}"
    );
    assert_eq!(calls.matches("chassis bootdev none").count(), 1, "{calls}");
    let bootdev = calls.find("bootdev pxe").unwrap();
    assert!(calls.find("bootdev none").unwrap() > bootdev, "{calls}");
}

#[tokio::test]
async fn refusals_timeouts_and_missing_macs_say_so_without_the_password() {
    let _one = ONE_AT_A_TIME.lock().await;
    let d = tempfile::tempdir().unwrap();
    let s = spec(d.path());
    let e = provider(d.path(), "ok", Duration::from_secs(5))
        .create(&node(&[]), &s)
        .await
        .unwrap_err();
    assert!(
        !e.is_transient() && e.to_string().contains("give the node's macs"),
        "{e}"
    );
    let e = provider(d.path(), "refuse", Duration::from_secs(5))
        .create(&node(&["52:54:00:77:00:61"]), &s)
        .await
        .unwrap_err();
    assert!(!e.is_transient(), "{e}");
    assert!(
        e.to_string().contains("refused the username, password"),
        "{e}"
    );
    assert!(!format!("{e:?}").contains(PASSWORD));
    let e = provider(d.path(), "hang", Duration::from_millis(300))
        .create(&node(&["52:54:00:77:00:61"]), &s)
        .await
        .unwrap_err();
    assert!(
        e.is_transient() && e.to_string().contains("no answer"),
        "{e}"
    );
    let reg = controller::providers::registration("ipmi").unwrap();
    let p = (reg.check_spec)(&json!({"address": "-oProxyCommand", "username": "", "password": {"env": "BOOTD_BMC_R3"}, "mode": "bios"})).unwrap();
    assert_eq!(p.len(), 3, "{p:?}");
}

/// `host.api.bmcCredentials` binds a password to the BMCs it may go to:
/// an IPMI node at another address is refused before ipmitool runs (the
/// password never leaves in its environment), naming the key; at an
/// address the entry allows, the same password is used.
#[tokio::test]
async fn a_password_goes_only_to_the_ipmi_addresses_its_entry_allows() {
    let _one = ONE_AT_A_TIME.lock().await;
    let d = tempfile::tempdir().unwrap();
    let s = spec(d.path());
    let only = |origin: &str| {
        Some(vec![site::BmcCredential {
            password: site::PasswordPattern::File(d.path().join("pw")),
            origins: vec![site::BmcOrigin::parse(origin).unwrap()],
            allow_plain_http: false,
            insecure_skip_verify: false,
        }])
    };
    let n = node(&["52:54:00:77:00:61"]);
    // Rack 1's password; this node's BMC (127.0.0.1:6230) is not in rack 1.
    let p = Ipmi {
        credentials: only("ipmi://10.1.0.0/24"),
        ..provider(d.path(), "ok", Duration::from_secs(5))
    };
    let e = match p.create(&n, &s).await {
        Ok(m) => p.start(&m.id, &n).await.unwrap_err(),
        Err(e) => e,
    };
    let msg = e.to_string();
    assert!(msg.contains("host.api.bmcCredentials"), "{msg}");
    assert!(!msg.contains(PASSWORD), "{msg}");
    assert!(
        !d.path().join("calls").exists(),
        "ipmitool ran: {}",
        std::fs::read_to_string(d.path().join("calls")).unwrap_or_default()
    );
    // An entry that allows it: the BMC is driven.
    let p = Ipmi {
        credentials: only("ipmi://127.0.0.1:6230"),
        ..provider(d.path(), "ok", Duration::from_secs(5))
    };
    let m = p.create(&n, &s).await.unwrap();
    p.start(&m.id, &n).await.unwrap();
    let calls = std::fs::read_to_string(d.path().join("calls")).unwrap();
    assert!(calls.contains("chassis power on"), "{calls}");
}
