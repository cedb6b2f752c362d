//! Every rendered iPXE script, GRUB config, Ignition and metadata document,
//! pinned in `bootd/tests/golden/`. `UPDATE_GOLDEN=1 cargo test` rewrites
//! them; review the diff. Every Ignition also passes `ignition-validate`.

use bootd::render::{self, NodeUrls};
use std::path::{Path, PathBuf};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn check(name: &str, got: &str) {
    testkit::golden::check(&golden_dir().join(name), got);
}

/// `ignition-validate` from Debian's `ignition` package, on a rendered config.
pub fn ignition_validate(json: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("config.ign");
    std::fs::write(&f, json).unwrap();
    let out = std::process::Command::new("ignition-validate")
        .arg(&f)
        .output()
        .expect("ignition-validate not found: install Debian's 'ignition' package (the README's test command does)");
    assert!(
        out.status.success(),
        "ignition-validate rejected the config: {}",
        testkit::process::output_text(&out)
    );
}

fn render_site(example: &str) {
    let site = site::load(&examples().join(example).join("site.yaml")).unwrap();
    check(
        &format!("{example}-boot.ipxe"),
        &render::ipxe::entry(&site.host.http.url),
    );
    check(
        &format!("{example}-grub.cfg"),
        &render::grub::selector(&site),
    );
    check(
        &format!("{example}-unknown.ipxe"),
        &render::ipxe::unknown(
            &site,
            &site.host.http.url,
            Some(&"52:54:00:00:00:99".parse().unwrap()),
        ),
    );
    for node in &site.nodes {
        let urls = NodeUrls::new(&site, &site.host.http.url, node, "TOKEN");
        check(
            &format!("{example}-{}.ipxe", node.name),
            &render::ipxe::node(&site, node, &urls),
        );
        check(
            &format!("{example}-{}.grub.cfg", node.name),
            &render::grub::node(&site, node, &urls),
        );
        let cfg = render::ignition::node_config(&site, node).unwrap();
        let bytes = serde_json::to_vec_pretty(&cfg).unwrap();
        check(
            &format!("{example}-{}.ign", node.name),
            &String::from_utf8(bytes.clone()).unwrap(),
        );
        // As served to the validator's own Ignition (2.14, spec 3.3.0 at
        // most): a 3.4.0 config that uses nothing newer goes relabelled.
        let served = render::ignition::negotiate(
            cfg,
            Some("application/vnd.coreos.ignition+json;version=3.3.0, */*;q=0.1"),
        )
        .unwrap();
        ignition_validate(&serde_json::to_vec(&served).unwrap());
        let md = serde_json::to_string_pretty(&render::metadata::metadata(&site, node)).unwrap();
        check(&format!("{example}-{}.metadata.json", node.name), &md);
    }
}

#[test]
fn lab_renders() {
    render_site("lab");
}

#[test]
fn openshift_renders() {
    render_site("openshift");
}

#[test]
fn ppc64le_renders() {
    render_site("ppc64le");
}

#[test]
fn pointer_config_validates() {
    let ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    let p = render::ignition::pointer("https://10.0.0.1:8443/ignition/n?token=T", Some(ca));
    let bytes = serde_json::to_vec_pretty(&p).unwrap();
    check("pointer.ign", &String::from_utf8(bytes.clone()).unwrap());
    ignition_validate(&bytes);
}

#[test]
fn grub_selector_lists_both_cases_for_letters() {
    let site = site::load(&examples().join("ppc64le/site.yaml")).unwrap();
    let cfg = render::grub::selector(&site);
    assert!(cfg.contains("\"fa:16:3e:00:10:10\""), "{cfg}");
    assert!(cfg.contains("\"FA:16:3E:00:10:10\""), "{cfg}");
    assert!(
        cfg.contains("configfile \"$prefix/grub.cfg-01-fa-16-3e-00-10-10\""),
        "{cfg}"
    );
}

/// A node's `rootDeviceHints.deviceName` is its install device, as
/// `installDisk` is; a `live: true` node gets the live config URL.
#[test]
fn a_device_name_hint_is_the_install_device() {
    let lab = examples().join("lab");
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(lab.join("site.yaml"))
        .unwrap()
        .replace("dir: ignition", &format!("dir: {}/ignition", lab.display()))
        // worker-0 installs and worker-1 says live itself, not as in the lab.
        .replace(
            "live: true, macs: [\"52:54:00:77:00:20\"]",
            "macs: [\"52:54:00:77:00:20\"]",
        )
        .replace(
            "live: true, macs: [\"52:54:00:77:00:21\"]",
            "macs: [\"52:54:00:77:00:21\"]",
        )
        .replace(
            "ip: 10.77.0.20, kernelArgs: [console=ttyS0] }",
            "ip: 10.77.0.20, kernelArgs: [console=ttyS0], rootDeviceHints: { deviceName: \"/dev/disk/by-path/pci-0000:00:1f.2-ata-2\" } }",
        )
        .replace("ip: 10.77.0.21, kernelArgs: [console=ttyS0] }", "ip: 10.77.0.21, kernelArgs: [console=ttyS0], live: true }");
    std::fs::write(dir.path().join("site.yaml"), text).unwrap();
    let site = site::load(&dir.path().join("site.yaml")).unwrap_or_else(|e| panic!("{e}"));
    let args = |name: &str| {
        let node = site.node(name).unwrap();
        render::kernel_args(
            &site,
            node,
            &NodeUrls::new(&site, &site.host.http.url, node, "T"),
        )
    };
    let w0 = args("worker-0");
    assert!(
        w0.contains(
            &"coreos.inst.install_dev=/dev/disk/by-path/pci-0000:00:1f.2-ata-2".to_string()
        ),
        "{w0:?}"
    );
    assert!(
        w0.iter()
            .any(|a| a.starts_with("coreos.inst.ignition_url=")),
        "{w0:?}"
    );
    let w1 = args("worker-1");
    assert!(
        w1.iter().any(|a| a.starts_with("ignition.config.url=")),
        "{w1:?}"
    );
    assert!(!w1.iter().any(|a| a.starts_with("coreos.inst")), "{w1:?}");
}
