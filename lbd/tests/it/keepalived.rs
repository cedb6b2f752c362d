//! keepalived's configuration for the site's VIPs (`vips.vrrp`), pinned in
//! `lbd/tests/golden/keepalived*.conf`, and run by the real keepalived
//! (Debian's, tests/lab/deps.sh) in a network namespace of its own: it
//! must take every instance, script and option without a complaint.
//! The failover itself, over unicast with multicast dropped, is
//! tests/ha/vrrp-unicast.sh.

use super::golden::{golden, repo};
use lbd::keepalived::{render, unicast_sources, Local, Programs, Vip};
use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use testkit::process::Process;

/// Where the programs are on an appliance, as the golden files have them.
fn installed() -> Programs<'static> {
    Programs {
        lbd: Path::new("/usr/local/bin/lbd"),
        bootd: Path::new("/usr/local/bin/bootd"),
    }
}

/// The OpenShift example with `vips.boot` and `vips.vrrp` (`extra` added
/// to its keys), in a temporary directory.
fn openshift(vrrp_extra: &str) -> (tempfile::TempDir, site::Site) {
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
            &format!("  ingress: 192.168.111.6            # and here for 80 and 443\n  boot: 192.168.111.7\n  vrrp: {{ interface: ens3, routerIds: {{ api: 61, ingress: 62, boot: 63 }}{vrrp_extra} }}\n"),
        )
        .replace("url: http://192.168.111.1:8080", "url: http://192.168.111.7:8080")
        .replace("url: https://192.168.111.1:8443", "url: https://192.168.111.7:8443")
        .replace("listen: 192.168.111.1:", "listen: 0.0.0.0:");
    assert!(text.contains("vrrp:"));
    std::fs::write(dir.path().join("site.yaml"), text).unwrap();
    let site = site::load(&dir.path().join("site.yaml")).unwrap_or_else(|e| panic!("{e}"));
    (dir, site)
}

/// The text as `bootd render keepalived` prints it, pinned without the
/// temporary directory's path.
fn pinned(dir: &Path, site: &site::Site, local: &Local) -> String {
    render(site, &installed(), local, &[])
        .unwrap()
        .replace(&dir.display().to_string(), "<site dir>")
}

/// Three VIPs, three instances: lbd's check for api and ingress, bootd's
/// for the boot address; multicast, as without the newer keys.
#[test]
fn keepalived_configuration_for_the_vips() {
    let (dir, site) = openshift("");
    golden(
        "keepalived.conf",
        &pinned(dir.path(), &site, &Local::default()),
    );
    let text = run_by_keepalived(&site, &["check_api", "check_ingress", "check_boot"]);
    assert!(text.contains("multicast, address(224.0.0.18)"), "{text}");
    // Without vips.vrrp: said.
    let plain = site::load(&repo().join("examples/openshift/site.yaml")).unwrap();
    let e = render(&plain, &installed(), &Local::default(), &[]).unwrap_err();
    assert!(e.contains("vips.vrrp is not set"), "{e}");
}

/// `--only boot`: the boot address's instance alone, with bootd's check
/// and no lbd (a site whose API is behind another load balancer, or a
/// host running no lbd); `lb.adminListen` is not needed for it.
#[test]
fn only_the_boot_address() {
    let (_dir, mut site) = openshift("");
    site.lb.admin_listen = None;
    let e = render(&site, &installed(), &Local::default(), &[]).unwrap_err();
    assert!(e.contains("lb.adminListen is off"), "{e}");
    let text = render(&site, &installed(), &Local::default(), &[Vip::Boot]).unwrap();
    assert_eq!(text.matches("vrrp_instance ").count(), 1, "{text}");
    assert_eq!(text.matches("vrrp_script ").count(), 1, "{text}");
    assert!(text.contains("vrrp_script check_boot {"), "{text}");
    assert!(!text.contains(" ready --vip "), "{text}");
    let ran = run_only_by_keepalived(&site, &[Vip::Boot], &["check_boot"]);
    assert!(!ran.contains("check_api"), "{ran}");
    // API and ingress only: no boot instance.
    let (_d, site) = openshift("");
    let text = render(
        &site,
        &installed(),
        &Local::default(),
        &[Vip::Api, Vip::Ingress],
    )
    .unwrap();
    assert!(
        text.contains("check_api {") && text.contains("check_ingress {"),
        "{text}"
    );
    assert!(!text.contains("check_boot"), "{text}");
    // A boot address the site does not have: said.
    let plain = site::load(&repo().join("examples/openshift/site.yaml")).unwrap();
    let mut plain = plain;
    plain.vips.vrrp = site.vips.vrrp.clone();
    let e = render(&plain, &installed(), &Local::default(), &[Vip::Boot]).unwrap_err();
    assert!(e.contains("no vips.boot"), "{e}");
}

/// `unicastPeers` listing every appliance: this one's (192.168.111.2)
/// becomes the source and leaves the peers, in every instance.
#[test]
fn unicast_peers_instead_of_multicast() {
    let (dir, site) = openshift(", unicastPeers: [192.168.111.2, 192.168.111.3, 192.168.111.4]");
    let me: IpAddr = "192.168.111.2".parse().unwrap();
    let local = Local {
        unicast_src: vec![me],
    };
    let text = pinned(dir.path(), &site, &local);
    golden("keepalived-unicast.conf", &text);
    assert_eq!(text.matches("unicast_src_ip 192.168.111.2\n").count(), 3);
    assert_eq!(text.matches("        192.168.111.2\n").count(), 0);
    let text = run_by_keepalived(&site, &["check_api", "check_ingress", "check_boot"]);
    assert!(text.contains("unicast, address(192.168.111.10)"), "{text}");
    assert!(!text.contains("224.0.0.18"), "{text}");
    // Without a source address of the VIPs' family: said, not guessed.
    let e = render(&site, &installed(), &Local::default(), &[]).unwrap_err();
    assert!(
        e.contains("no IPv4 source address of this appliance"),
        "{e}"
    );
    // Only itself left: said.
    let (_d, alone) = openshift(", unicastPeers: [192.168.111.2]");
    let e = render(&alone, &installed(), &local, &[]).unwrap_err();
    assert!(
        e.contains("no IPv4 peer but this appliance's own address 192.168.111.2"),
        "{e}"
    );
}

/// A dual-stack site: each family's instances advertise from this
/// appliance's address of that family to the peers of that family.
#[test]
fn unicast_per_family_on_a_dual_stack_site() {
    let dir = repo().join("examples/lab-dual");
    let text = std::fs::read_to_string(dir.join("site.yaml")).unwrap().replace(
        "  ingress: [10.77.0.1, \"fd00:77::1\"]\n",
        "  ingress: [10.77.0.1, \"fd00:77::1\"]\n  vrrp: { interface: br0, unicastPeers: [10.77.0.2, \"fd00:77::2\", 10.77.0.3, \"fd00:77::3\"] }\n",
    );
    assert!(text.contains("unicastPeers"));
    // Beside the example, so that its relative paths hold.
    let file = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile_in(&dir)
        .unwrap();
    std::fs::write(file.path(), text).unwrap();
    let site = site::load(file.path()).unwrap_or_else(|e| panic!("{e}"));
    let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
    let here = [
        ip("10.77.0.3"),
        ip("fe80::3"),
        ip("fd00:77::3"),
        ip("fd00:77::1"),
    ];
    let src = unicast_sources(&site, &[], &here).unwrap();
    assert_eq!(src, vec![ip("10.77.0.3"), ip("fd00:77::3")]);
    let conf = render(&site, &installed(), &Local { unicast_src: src }, &[]).unwrap();
    let block = |name: &str| {
        let start = conf.find(&format!("vrrp_instance lab_{name} {{")).unwrap();
        conf[start..].split("\n}\n").next().unwrap().to_string()
    };
    let api = block("api");
    assert!(
        api.contains(
            "    unicast_src_ip 10.77.0.3\n    unicast_peer {\n        10.77.0.2\n    }\n"
        ),
        "{api}"
    );
    let api6 = block("api6");
    assert!(
        api6.contains(
            "    unicast_src_ip fd00:77::3\n    unicast_peer {\n        fd00:77::2\n    }\n"
        ),
        "{api6}"
    );
}

/// Which source address is this appliance's: the flag's, else the
/// interface's address the peers list, else its only address (a VIP it
/// holds now is not one).
#[test]
fn the_source_address_is_found_or_the_reason_said() {
    let (_d, site) = openshift(", unicastPeers: [192.168.111.2, 192.168.111.3]");
    let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
    let find = |given: &[&str], here: &[&str]| {
        let g: Vec<IpAddr> = given.iter().map(|s| ip(s)).collect();
        let h: Vec<IpAddr> = here.iter().map(|s| ip(s)).collect();
        unicast_sources(&site, &g, &h)
    };
    let vip = "192.168.111.5";
    let ll = "fe80::1";
    assert_eq!(
        find(&[], &["192.168.111.3", vip, ll]),
        Ok(vec![ip("192.168.111.3")])
    );
    assert_eq!(
        find(&[], &["192.168.111.9", "192.168.111.2"]),
        Ok(vec![ip("192.168.111.2")]),
        "the listed one of two"
    );
    assert_eq!(
        find(&[], &["192.168.111.9", vip]),
        Ok(vec![ip("192.168.111.9")]),
        "the only one that is no VIP, listed or not"
    );
    assert_eq!(
        find(&["192.168.111.8"], &["192.168.111.2"]),
        Ok(vec![ip("192.168.111.8")])
    );
    let e = find(&[], &["192.168.111.8", "192.168.111.9"]).unwrap_err();
    assert!(
        e.contains(
            "ens3 holds several IPv4 addresses (192.168.111.8, 192.168.111.9): give --unicast-src"
        ),
        "{e}"
    );
    let e = find(&[], &[vip, ll]).unwrap_err();
    assert!(e.contains("ens3 has no IPv4 address here"), "{e}");
    let e = find(&[vip], &[]).unwrap_err();
    assert!(e.contains("--unicast-src: no IPv4 address"), "{e}");
    // Multicast: nothing to find.
    let (_d, multicast) = openshift("");
    assert_eq!(unicast_sources(&multicast, &[], &[]), Ok(vec![]));
}

/// `notify` (and `notifyUser`): every instance runs the program with its
/// VIP first, as that user; keepalived takes it (it exists, is root's,
/// and nobody else can write it or its directories).
#[test]
fn notify_program_on_every_instance() {
    let (dir, site) = openshift(", notify: /usr/local/libexec/vip-moved, notifyUser: nobody");
    let text = pinned(dir.path(), &site, &Local::default());
    golden("keepalived-notify.conf", &text);
    for vip in ["192.168.111.5", "192.168.111.6", "192.168.111.7"] {
        assert!(
            text.contains(&format!(
                "    notify \"/usr/local/libexec/vip-moved {vip}\" nobody\n"
            )),
            "{text}"
        );
    }
    run_by_keepalived(&site, &["check_api", "check_ingress", "check_boot"]);
}

/// What `bootd render keepalived` warns of where it renders: a notify
/// program that is missing, not executable, or that keepalived's script
/// security would refuse (under /tmp, which anyone can write).
#[test]
fn notify_program_warnings() {
    let (_d, site) = openshift(", notify: /usr/local/libexec/vip-moved-nowhere");
    let w = lbd::keepalived::notify_warnings(&site);
    assert!(
        w.len() == 1
            && w[0]
                .contains("vips.vrrp.notify: /usr/local/libexec/vip-moved-nowhere: No such file"),
        "{w:?}"
    );
    let tmp = tempfile::tempdir().unwrap();
    let set = |path: &Path| {
        let mut s = site.clone();
        s.vips.vrrp.as_mut().unwrap().notify.as_mut().unwrap().path = path.to_path_buf();
        lbd::keepalived::notify_warnings(&s)
    };
    let plain = tmp.path().join("plain");
    std::fs::write(&plain, "").unwrap();
    let w = set(&plain);
    assert!(
        w.len() == 1 && w[0].contains("not an executable file"),
        "{w:?}"
    );
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o755)).unwrap();
    let w = set(&plain);
    assert!(
        w.iter()
            .any(|w| w.contains("/tmp is writable by someone other than root")),
        "{w:?}"
    );
    // Root's, in root's directories: nothing to say.
    assert_eq!(set(Path::new("/bin/true")), Vec::<String>::new());
    let (_d, none) = openshift("");
    assert!(lbd::keepalived::notify_warnings(&none).is_empty());
}

/// Runs the site's configuration by the real keepalived in a network
/// namespace of its own with an ens3 (a veth, 192.168.111.10/24), lbd's
/// check pointing at this build's lbd, until every check in `checks` has
/// reported (15 s at most); returns its log, checked clean: it started,
/// kept every instance and script (a script it cannot run as its user
/// it would remove, saying so), and ran them (lbd is not running: status
/// 2; bootd's check stands in for bootd, not built here: a program that
/// exits 2 like `bootd ready` when nothing answers). A notify program in
/// the site runs as a stand-in of the same directory.
/// (`keepalived --config-test` cannot be used: 2.2.7 kills itself
/// checking scripts as another user.)
fn run_by_keepalived(site: &site::Site, checks: &[&str]) -> String {
    run_only_by_keepalived(site, &[], checks)
}

/// [`run_by_keepalived`] with the addresses `only` names.
fn run_only_by_keepalived(site: &site::Site, only: &[Vip], checks: &[&str]) -> String {
    // Every program in a directory `nobody` can reach and only root can
    // write, outside the checkout: keepalived refuses a script under a
    // directory others can write (/tmp), and the checkout may be where
    // `nobody` cannot go (under /root, mode 0700, on a fresh machine).
    let scripts = tempfile::Builder::new()
        .prefix("lbd-keepalived-")
        .tempdir_in("/run")
        .expect("a directory under /run (root's, mode 0755)");
    let dir = scripts.path();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let lbd = dir.join("lbd");
    std::fs::copy(env!("CARGO_BIN_EXE_lbd"), &lbd).unwrap();
    let program = |name: &str, text: &str| -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    };
    let bootd = program("bootd-ready-stand-in", "#!/bin/sh\nexit 2\n");
    let mut site = site.clone();
    if let Some(n) = site.vips.vrrp.as_mut().and_then(|v| v.notify.as_mut()) {
        n.path = program("notify-stand-in", "#!/bin/sh\nexit 0\n");
    }
    let here = Programs {
        lbd: &lbd,
        bootd: &bootd,
    };
    let local = Local {
        unicast_src: vec!["192.168.111.10".parse().unwrap()],
    };
    let conf = render(&site, &here, &local, only).unwrap();
    let file = dir.join("keepalived.conf");
    std::fs::write(&file, &conf).unwrap();
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let ns = format!("kacheck-{}-{run}", std::process::id());
    let ip = |args: &[&str]| {
        let st = std::process::Command::new("ip")
            .args(args)
            .status()
            .unwrap();
        assert!(st.success(), "ip {args:?}");
    };
    ip(&["netns", "add", &ns]);
    // Deleted however the test ends; declared before keepalived, so dropped after it.
    let _ns = Netns(ns.clone());
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
    let log = dir.join("keepalived.log");
    let pid = |n: &str| dir.join(n).display().to_string();
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
    let reported = |t: &str, c: &str| t.contains(&format!("Script `{c}` now returning"));
    let end = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let text = loop {
        let t = std::fs::read_to_string(&log).unwrap_or_default();
        if checks.iter().all(|c| reported(&t, c)) || std::time::Instant::now() > end {
            break t;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    child.terminate();
    assert!(text.contains("Startup complete"), "{text}");
    for ran in checks {
        assert!(
            text.contains(&format!("Script `{ran}` now returning 2")),
            "{text}"
        );
    }
    for bad in [
        "Unable to",
        "- removing",
        "not found",
        "WARNING",
        "rror",
        "nsafe",
    ] {
        assert!(!text.contains(bad), "keepalived said {bad:?}: {text}");
    }
    text
}

/// A network namespace this test made, deleted when dropped.
struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.0])
            .status();
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).into_iter().flatten().flatten() {
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}
