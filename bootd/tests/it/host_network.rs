//! A node's host network rendered: the keyfiles of a bond of two NICs with
//! a VLAN on it, and the dracut arguments, pinned in a golden file; the
//! dracut arguments read back by NetworkManager's own initrd generator
//! (what the live system's initramfs runs) must describe the same
//! connections as the keyfiles.

use bootd::render::{self, NodeUrls};
use std::collections::BTreeMap;
use std::path::Path;

/// The lab site with worker-1 on site/tests/data/bond-vlan.yaml.
fn bond_vlan_site() -> (tempfile::TempDir, site::Site) {
    let lab = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab");
    let cfg = std::fs::read_to_string(lab.join("../../site/tests/data/bond-vlan.yaml")).unwrap();
    let indented: String = cfg
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("      {l}\n"))
        .collect();
    let text = std::fs::read_to_string(lab.join("site.yaml"))
        .unwrap()
        .replace("stateDir: ../../target/lab-state", "stateDir: state")
        .replace("dir: ignition", &format!("dir: {}/ignition", lab.display()))
        .replace(
            "  - { name: worker-1,  role: worker,    live: true, macs: [\"52:54:00:77:00:21\"], ip: 10.77.0.21, kernelArgs: [console=ttyS0] }\n",
            &format!("  - name: worker-1\n    role: worker\n    live: true\n    macs: [\"52:54:00:77:00:21\"]\n    ip: 10.77.0.21\n    networkConfig:\n{indented}"),
        );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("site.yaml"), text).unwrap();
    let site = site::load(&dir.path().join("site.yaml")).unwrap_or_else(|e| panic!("{e}"));
    (dir, site)
}

/// Sections of a keyfile: section → key → value (comments, `[user]` and
/// empty sections left out).
type Keyfile = BTreeMap<String, BTreeMap<String, String>>;

fn parse(text: &str) -> Keyfile {
    let mut out = Keyfile::new();
    let mut section = String::new();
    for l in text.lines().map(str::trim) {
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        if let Some(s) = l.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = s.to_string();
        } else if let Some((k, v)) = l.split_once('=') {
            out.entry(section.clone())
                .or_default()
                .insert(k.to_string(), v.to_string());
        }
    }
    out
}

#[test]
fn a_bond_and_a_vlan_render_as_keyfiles_and_dracut_arguments() {
    let (_d, site) = bond_vlan_site();
    let node = site.node("worker-1").unwrap();
    let hn = node.host_network.as_ref().unwrap();
    let mut got = String::new();
    for (path, text) in render::network::keyfiles(&site, hn) {
        got.push_str(&format!("### {path}\n{text}\n"));
    }
    let urls = NodeUrls::new(&site, &site.host.http.url, node, "TOKEN");
    got.push_str("### kernel arguments\n");
    for a in render::kernel_args(&site, node, &urls) {
        got.push_str(&format!("{a}\n"));
    }
    testkit::golden::check(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/host-network-bond-vlan.txt"),
        &got,
    );
    // The node's Ignition carries every keyfile, mode 0600, and no
    // resolver drop-in (the keyfiles name the resolvers).
    let ign = render::ignition::node_config(&site, node).unwrap();
    let files: Vec<(&str, u64)> = ign["storage"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["path"].as_str().unwrap(), f["mode"].as_u64().unwrap()))
        .collect();
    for i in ["eno1", "eno2", "bond0", "bond0.77"] {
        let path = format!("/etc/NetworkManager/system-connections/{i}.nmconnection");
        assert!(
            files.contains(&(path.as_str(), 0o600)),
            "{path} in {files:?}"
        );
    }
    assert!(
        !files.iter().any(|(p, _)| p.contains("conf.d")),
        "{files:?}"
    );
    // As Debian's Ignition (spec 3.3 at most) fetches it.
    let served = render::ignition::negotiate(
        ign,
        Some("application/vnd.coreos.ignition+json;version=3.3.0, */*;q=0.1"),
    )
    .unwrap();
    crate::golden::ignition_validate(&serde_json::to_vec(&served).unwrap());
}

/// NetworkManager's initrd generator: Debian's `network-manager` puts it
/// in /usr/lib/NetworkManager, Fedora and RHCOS in /usr/libexec.
fn nm_initrd_generator() -> &'static str {
    ["/usr/lib/NetworkManager/nm-initrd-generator", "/usr/libexec/nm-initrd-generator"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("nm-initrd-generator not found: install Debian's 'network-manager' package (the README's test command does)")
}

#[test]
fn nm_initrd_generator_reads_the_dracut_arguments_as_the_keyfiles_say() {
    let (_d, site) = bond_vlan_site();
    let node = site.node("worker-1").unwrap();
    let hn = node.host_network.as_ref().unwrap();
    let args = render::network::dracut_args(&site, node, hn);
    let out = std::process::Command::new(nm_initrd_generator())
        .arg("-s")
        .arg("--")
        .args(&args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        testkit::process::output_text(&out)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    // "*** Connection 'NAME' ***" then the keyfile, up to the next "***".
    let mut theirs: BTreeMap<String, Keyfile> = BTreeMap::new();
    for block in text.split("\n*** Connection '").skip(1) {
        let (name, rest) = block.split_once("' ***").unwrap();
        let body = rest.split("\n*** ").next().unwrap();
        theirs.insert(name.to_string(), parse(body));
    }
    let uuid_to_id: BTreeMap<String, String> = theirs
        .iter()
        .map(|(n, k)| (k["connection"]["uuid"].clone(), n.clone()))
        .collect();
    let ours: BTreeMap<String, Keyfile> = hn
        .interfaces
        .iter()
        .map(|i| {
            (
                i.name.clone(),
                parse(&render::network::keyfile(&site, hn, i)),
            )
        })
        .collect();
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>(),
        "{text}"
    );
    // What each connection is and does, key by key (the generator adds
    // timeouts, priorities and UUIDs; routes from dracut carry no metric).
    let compared = [
        ("connection", "type"),
        ("connection", "interface-name"),
        ("connection", "slave-type"),
        ("ethernet", "mtu"),
        ("bond", "mode"),
        ("bond", "miimon"),
        ("bond", "lacp_rate"),
        ("bond", "xmit_hash_policy"),
        ("vlan", "id"),
        ("vlan", "parent"),
        ("ipv4", "method"),
        ("ipv4", "address1"),
        ("ipv4", "dns"),
        ("ipv6", "method"),
    ];
    let mut checked = 0;
    for (name, mine) in &ours {
        let other = &theirs[name];
        let get = |k: &Keyfile, s: &str, key: &str| k.get(s).and_then(|m| m.get(key)).cloned();
        for (s, key) in compared {
            assert_eq!(
                get(mine, s, key),
                get(other, s, key),
                "{name}: [{s}] {key}\n{text}"
            );
            checked += usize::from(get(mine, s, key).is_some());
        }
        // A port's controller: our bond's name, their bond's UUID.
        let master = get(other, "connection", "master").map(|u| uuid_to_id[&u].clone());
        assert_eq!(get(mine, "connection", "master"), master, "{name}");
        // Routes: destination and next hop.
        let route = |k: &Keyfile| {
            get(k, "ipv4", "route1").map(|r| r.split(',').take(2).collect::<Vec<_>>().join(","))
        };
        assert_eq!(route(mine), route(other), "{name}: route1\n{text}");
    }
    assert!(checked >= 20, "only {checked} keys compared");
}
