//! What lbd derives from the example configurations, pinned in
//! `lbd/tests/golden/`. `UPDATE_GOLDEN=1 cargo test -p lbd` rewrites them.

use std::path::{Path, PathBuf};
use testkit::process::Process;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn golden(name: &str, got: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    testkit::golden::check(&path, got);
}

#[test]
fn openshift_site_frontends() {
    let site =
        site::load(&repo().join("examples/openshift/site.yaml")).unwrap_or_else(|e| panic!("{e}"));
    golden(
        "openshift.plan",
        &lbd::plan::render(&lbd::plan::from_site(&site, false)),
    );
    // After the bootstrap completes: the same without the bootstrap node.
    golden(
        "openshift-bootstrap-complete.plan",
        &lbd::plan::render(&lbd::plan::from_site(&site, true)),
    );
}

#[test]
fn compact_site_sends_ingress_to_masters() {
    let site =
        site::load(&repo().join("examples/compact/site.yaml")).unwrap_or_else(|e| panic!("{e}"));
    golden(
        "compact.plan",
        &lbd::plan::render(&lbd::plan::from_site(&site, false)),
    );
}

#[test]
fn standalone_example() {
    let lb = site::load_lb(&repo().join("examples/lbd/lb.yaml")).unwrap_or_else(|e| panic!("{e}"));
    golden(
        "standalone.plan",
        &lbd::plan::render(&lbd::plan::from_lb(&lb)),
    );
}

/// The shape of `GET /status` (JSON crossing a process boundary: bootd's
/// timeline reads it), from a fixed value.
#[test]
fn status_json_shape() {
    use lbd::status::{BackendStatus, ClientStatus, FrontendStatus, Status};
    let s = Status {
        bootstrap: lbd::state::BootstrapPhase::Draining,
        connections: 3,
        frontends: vec![FrontendStatus {
            name: "api".into(),
            listen: "10.77.0.1:6443".parse().unwrap(),
            balance: "RoundRobin".into(),
            backends: vec![BackendStatus {
                name: "master-0".into(),
                addr: "10.77.0.11:6443".parse().unwrap(),
                role: "master".into(),
                state: "up".into(),
                reason: "2 consecutive probes passed".into(),
                active: 1,
                connections: 7,
                connect_failures: 0,
                unanswered_failures: 0,
                bytes_to: 1200,
                bytes_from: 5300,
                check_latency_ms: 1.5,
                up_since_ms: Some(1_795_550_000_123),
            }],
            clients: vec![ClientStatus {
                ip: "10.77.0.11".parse().unwrap(),
                first_ms: 1_795_550_000_456,
            }],
        }],
    };
    let mut got = serde_json::to_string_pretty(&s).unwrap();
    got.push('\n');
    golden("status.json", &got);
    assert_eq!(
        serde_json::from_str::<Status>(&got).unwrap(),
        s,
        "what lbd sends, a reader reads back"
    );
}

/// keepalived's configuration for the OpenShift example with `vips.vrrp`
/// and `vips.boot` (three VIPs, three instances: lbd's check for api and
/// ingress, bootd's for the boot address), and the real keepalived runs it.
#[test]
fn keepalived_configuration_for_the_vips() {
    let dir = tempfile::tempdir().unwrap();
    let src = repo().join("examples/openshift");
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), dir.path().join(e.file_name())).unwrap();
        }
    }
    copy_dir(&src.join("ignition"), &dir.path().join("ignition"));
    let text = std::fs::read_to_string(dir.path().join("site.yaml"))
        .unwrap()
        .replace(
            "  ingress: 192.168.111.6            # and here for 80 and 443\n",
            "  ingress: 192.168.111.6            # and here for 80 and 443\n  boot: 192.168.111.7\n  vrrp: { interface: ens3, routerIds: { api: 61, ingress: 62, boot: 63 } }\n",
        )
        .replace("url: http://192.168.111.1:8080", "url: http://192.168.111.7:8080")
        .replace("url: https://192.168.111.1:8443", "url: https://192.168.111.7:8443")
        .replace("listen: 192.168.111.1:", "listen: 0.0.0.0:");
    assert!(text.contains("vrrp:"));
    std::fs::write(dir.path().join("site.yaml"), text).unwrap();
    let site = site::load(&dir.path().join("site.yaml")).unwrap_or_else(|e| panic!("{e}"));
    let installed = lbd::keepalived::Programs {
        lbd: Path::new("/usr/local/bin/lbd"),
        bootd: Path::new("/usr/local/bin/bootd"),
    };
    let conf = lbd::keepalived::render(&site, &installed).unwrap();
    // The site's path is a temporary directory's: pinned without it.
    let pinned = conf.replace(&dir.path().display().to_string(), "<site dir>");
    golden("keepalived.conf", &pinned);
    // Run by the real keepalived, in a network namespace of its own with
    // an ens3 (a veth, with an address in the VIPs' network), the check
    // pointing at this build's lbd: it starts, keeps both instances and
    // every track script (a script it cannot run as `nobody` it would
    // remove, saying so), and runs them (lbd is not running: status 2;
    // bootd's check stands in for bootd, which is not built here: a
    // program that exits 2 like `bootd ready` when nothing answers).
    // (`keepalived --config-test` cannot be used: 2.2.7 kills itself
    // checking scripts as another user.)
    // Both scripts in a directory `nobody` can reach and only root can
    // write, outside the checkout: keepalived refuses a script under a
    // directory others can write (/tmp), and the checkout may be where
    // `nobody` cannot go (under /root, mode 0700, on a fresh machine).
    use std::os::unix::fs::PermissionsExt;
    let scripts = tempfile::Builder::new()
        .prefix("lbd-keepalived-")
        .tempdir_in("/run")
        .expect("a directory under /run (root's, mode 0755)");
    std::fs::set_permissions(scripts.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let lbd = scripts.path().join("lbd");
    std::fs::copy(env!("CARGO_BIN_EXE_lbd"), &lbd).unwrap();
    let bootd = scripts.path().join("bootd-ready-stand-in");
    std::fs::write(&bootd, "#!/bin/sh\nexit 2\n").unwrap();
    std::fs::set_permissions(&bootd, std::fs::Permissions::from_mode(0o755)).unwrap();
    let here = lbd::keepalived::Programs {
        lbd: &lbd,
        bootd: &bootd,
    };
    let conf = lbd::keepalived::render(&site, &here).unwrap();
    let file = dir.path().join("keepalived.conf");
    std::fs::write(&file, &conf).unwrap();
    let ns = format!("kacheck-{}", std::process::id());
    let ip = |args: &[&str]| {
        let st = std::process::Command::new("ip")
            .args(args)
            .status()
            .unwrap();
        assert!(st.success(), "ip {args:?}");
    };
    ip(&["netns", "add", &ns]);
    let inns = |args: &[&str]| ip(&[&["netns", "exec", &ns, "ip"][..], args].concat());
    inns(&[
        "link",
        "add",
        "ens3",
        "type",
        "veth",
        "peer",
        "name",
        "ens3-peer",
    ]);
    inns(&["addr", "add", "192.168.111.10/24", "dev", "ens3"]);
    inns(&["link", "set", "ens3", "up"]);
    inns(&["link", "set", "ens3-peer", "up"]);
    let log = dir.path().join("keepalived.log");
    let pid = |n: &str| dir.path().join(n).display().to_string();
    let child = std::process::Command::new("ip")
        .args(["netns", "exec", &ns, "keepalived", "-n", "-l", "-D", "-f"])
        .arg(&file)
        .args([
            "-p",
            &pid("k.pid"),
            "-r",
            &pid("v.pid"),
            "-c",
            &pid("c.pid"),
        ])
        .stderr(std::fs::File::create(&log).unwrap())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("keepalived (Debian's keepalived: tests/lab/deps.sh)");
    // Stopped by PID with SIGTERM: it takes its VRRP children with it.
    let mut child = Process::new(child).terminate_on_drop();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let text = loop {
        let t = std::fs::read_to_string(&log).unwrap_or_default();
        if (t.contains("Script `check_api` now returning")
            && t.contains("Script `check_ingress` now returning")
            && t.contains("Script `check_boot` now returning"))
            || std::time::Instant::now() > end
        {
            break t;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    child.terminate();
    ip(&["netns", "del", &ns]);
    assert!(text.contains("Startup complete"), "{text}");
    for ran in ["check_api", "check_ingress", "check_boot"] {
        assert!(
            text.contains(&format!("Script `{ran}` now returning 2")),
            "{text}"
        );
    }
    for bad in ["Unable to", "- removing", "not found", "WARNING", "rror"] {
        assert!(!text.contains(bad), "keepalived said {bad:?}: {text}");
    }
    // Without vips.vrrp: said.
    let plain = site::load(&src.join("site.yaml")).unwrap();
    let e = lbd::keepalived::render(&plain, &installed).unwrap_err();
    assert!(e.contains("vips.vrrp is not set"), "{e}");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).into_iter().flatten().flatten() {
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}
