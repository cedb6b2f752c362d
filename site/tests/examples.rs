//! Every example site parses; a broken site reports every problem at once.

mod common;

use common::assert_problems;
use std::path::{Path, PathBuf};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// The openshift example's Ignition files copied into `dir/ignition`; the
/// example's folder.
fn copy_openshift(dir: &Path) -> PathBuf {
    let ex = examples().join("openshift");
    std::fs::create_dir(dir.join("ignition")).unwrap();
    for r in ["bootstrap", "master", "worker"] {
        std::fs::copy(
            ex.join(format!("ignition/{r}.ign")),
            dir.join(format!("ignition/{r}.ign")),
        )
        .unwrap();
    }
    ex
}

#[test]
fn every_example_parses() {
    let mut seen = 0;
    for entry in std::fs::read_dir(examples()).unwrap() {
        let path = entry.unwrap().path().join("site.yaml");
        if !path.exists() {
            continue;
        }
        match site::load(&path) {
            Ok(s) => assert!(!s.nodes.is_empty(), "{} has no nodes", path.display()),
            Err(e) => panic!("{e}"),
        }
        seen += 1;
    }
    assert!(
        seen >= 4,
        "expected lab, openshift, compact, ppc64le; saw {seen}"
    );
}

#[test]
fn lab_site_is_what_the_tests_expect() {
    let s = site::load(&examples().join("lab/site.yaml")).unwrap();
    assert_eq!(s.cluster.domain(), "lab.example.test");
    let names: Vec<_> = s.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "bootstrap",
            "master-0",
            "master-1",
            "master-2",
            "worker-0",
            "worker-1",
            "p9-0"
        ]
    );
    let p9 = s.node("p9-0").unwrap();
    assert_eq!(p9.macs[0].to_string(), "52:54:00:77:00:30");
    assert_eq!(p9.arch, site::Arch::Ppc64le);
    assert_eq!(s.image_of(p9).kernel, "lab-ppc64le/vmlinux");
    assert_eq!(
        s.node_by_mac(&"52:54:00:77:00:21".parse().unwrap())
            .unwrap()
            .name,
        "worker-1"
    );
}

#[test]
fn install_config_supplies_cluster_facts() {
    let s = site::load(&examples().join("openshift/site.yaml")).unwrap();
    assert_eq!(s.cluster.name, "ocp");
    assert_eq!(s.cluster.base_domain, "example.com");
    assert_eq!(s.cluster.replicas.get("master"), Some(&3));
    assert_eq!(s.cluster.replicas.get("worker"), Some(&2));
    assert!(
        s.ssh_keys.iter().any(|k| k.ends_with("admin@bastion")),
        "sshKey read: {:?}",
        s.ssh_keys
    );
    // The secret-bearing Ignition never shows in Debug output.
    let dbg = format!("{s:?}");
    assert!(dbg.contains("<redacted>"));
    assert!(
        !dbg.contains("TEFCLVBVTEwtU0VDUkVULUNBTkFSWQ"),
        "pull secret leaked into Debug"
    );
}

#[test]
fn conflicting_install_config_names_both_places() {
    let dir = tempfile::tempdir().unwrap();
    let ex = copy_openshift(dir.path());
    std::fs::copy(
        ex.join("install-config.yaml"),
        dir.path().join("install-config.yaml"),
    )
    .unwrap();
    let text = std::fs::read_to_string(ex.join("site.yaml"))
        .unwrap()
        .replace(
            "installConfig: install-config.yaml",
            "installConfig: install-config.yaml\n  name: other",
        );
    let path = dir.path().join("site.yaml");
    std::fs::write(&path, text).unwrap();
    let err = site::load(&path).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("cluster.name: \"other\" conflicts with metadata.name \"ocp\""),
        "{msg}"
    );
    assert!(msg.contains("install-config.yaml"), "{msg}");
}

#[test]
fn every_problem_is_reported_at_once() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/bad.yaml");
    let err = site::load(&path).unwrap_err();
    let expect = [
        "cluster.colour: unknown key",
        "nodes[2].speed: unknown key",
        "cluster.name: \"Bad_Name\" is not a DNS label",
        "host.http.listen: \"not-an-address\" is not an address:port",
        "networks[0].gateway: 10.0.1.1 is outside subnet 10.0.0.0/24",
        "vips.ingress: required",
        "images.sets.x.kernel: \"../etc/passwd\" must be a plain relative path",
        "nodes[1].name: duplicate node name \"a\" (also nodes[0])",
        "nodes[1].macs[0]: duplicate MAC 52:54:00:00:00:01 (also in nodes[0])",
        "nodes[1].ip: duplicate IP 10.0.0.10 (also nodes[0])",
        "nodes[2].macs[0]: malformed MAC address \"52:54:00:00:00\"",
        "nodes[2].ip: 10.9.0.10 is outside every network (10.0.0.0/24)",
        "nodes[2].image: no image set named \"nope\"",
        "nodes[3].kernelArgs[0]: \"a b\": one argument per entry",
        "ignition.roles.master: role \"master\"",
        "ignition: role \"infra\" (nodes d) has no Ignition",
    ];
    assert_problems(&err, &expect);
    for p in &err.problems {
        assert_eq!(p.file, path, "every problem names its file");
    }
}

#[test]
fn yaml_type_error_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("site.yaml");
    std::fs::write(&path, "cluster: {name: a, baseDomain: b.c}\nhost: {http: {listen: 1.2.3.4:1, url: http://x}}\nnodes: {oops: 1}\n")
        .unwrap();
    let err = site::load(&path).unwrap_err();
    assert_eq!(err.problems.len(), 1, "{err}");
    assert_eq!(err.problems[0].key, "nodes");
}

#[test]
fn missing_file_is_a_clear_error() {
    let err = site::load(Path::new("/nonexistent/site.yaml")).unwrap_err();
    assert!(
        err.to_string()
            .contains("/nonexistent/site.yaml: cannot read site file"),
        "{err}"
    );
}

/// A Power VS install-config: its platform, machine pools, replicas and SSH
/// key are read; its pull secret is skipped by the parser and appears in
/// nothing the site keeps; more nodes of a role than its replicas is refused.
#[test]
fn powervs_install_config_facts_and_never_the_pull_secret() {
    const CANARY: &str = "PULL-SECRET-CANARY-8f3a1c";
    let dir = tempfile::tempdir().unwrap();
    let ex = copy_openshift(dir.path());
    let ic = format!(
        r#"apiVersion: v1
baseDomain: example.com
metadata: {{ name: ocp }}
networking: {{ machineNetwork: [ {{ cidr: 192.168.111.0/24 }} ] }}
controlPlane:
  name: master
  replicas: 3
  platform: {{ powervs: {{ sysType: s922, procType: shared, processors: "0.5", memoryGiB: 32 }} }}
compute:
  - name: worker
    replicas: 1
    platform: {{ powervs: {{ sysType: e980, procType: dedicated, processors: 2, memoryGiB: 64 }} }}
platform:
  powervs:
    userID: someone@example.com
    powervsResourceGroup: rg
    region: lon
    zone: lon04
    serviceInstanceGUID: 0aa1bb2c-workspace
pullSecret: '{{"auths":{{"quay.io":{{"auth":"{CANARY}"}}}}}}'
sshKey: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPowerKey ops@bastion
"#
    );
    std::fs::write(dir.path().join("install-config.yaml"), &ic).unwrap();
    std::fs::write(dir.path().join("ibm.key"), "k\n").unwrap();
    let text = std::fs::read_to_string(ex.join("site.yaml")).unwrap().replace(
        "  stateDir: /var/lib/bootd\n",
        "  stateDir: state\n  api:\n    listen: 127.0.0.1:9443\n    tokens: { file: ibm.key }\n    powervs: { baseUrl: \"https://lon.power-iaas.cloud.ibm.com\", crn: \"crn:v1:bluemix:public:power-iaas:lon04:a/acc:0aa1bb2c-workspace::\", apiKey: { file: ibm.key } }\n",
    );
    let path = dir.path().join("site.yaml");
    std::fs::write(&path, &text).unwrap();
    // The example lists two workers; this install-config says one.
    let err = site::load(&path).unwrap_err().to_string();
    assert!(
        err.contains("cluster.replicas.worker: 2 nodes have role worker, more than the 1"),
        "{err}"
    );
    assert!(!err.contains(CANARY));
    std::fs::write(
        dir.path().join("install-config.yaml"),
        ic.replace("replicas: 1", "replicas: 2"),
    )
    .unwrap();
    let s = site::load(&path).unwrap();
    let pv = s.cluster.powervs.as_ref().expect("platform.powervs read");
    assert_eq!(pv.region.as_deref(), Some("lon"));
    assert_eq!(pv.zone.as_deref(), Some("lon04"));
    assert_eq!(pv.service_instance.as_deref(), Some("0aa1bb2c-workspace"));
    let m = &pv.pools["master"];
    assert_eq!(
        (
            m.sys_type.as_deref(),
            m.proc_type.as_deref(),
            m.processors,
            m.memory
        ),
        (Some("s922"), Some("shared"), Some(0.5), Some(32))
    );
    let w = &pv.pools["worker"];
    assert_eq!(
        (w.sys_type.as_deref(), w.processors, w.memory),
        (Some("e980"), Some(2.0), Some(64))
    );
    assert_eq!(
        s.host
            .api
            .as_ref()
            .unwrap()
            .powervs
            .as_ref()
            .unwrap()
            .cloud_instance_id,
        "0aa1bb2c-workspace",
        "the workspace is the CRN's"
    );
    assert!(s.ssh_keys.iter().any(|k| k.ends_with("ops@bastion")));
    assert!(
        !format!("{s:?}").contains(CANARY),
        "pull secret in the site"
    );
    // A site value that differs from the install-config names both places.
    std::fs::write(
        &path,
        text.replace(
            "  installConfig: install-config.yaml",
            "  installConfig: install-config.yaml\n  replicas: { master: 5 }",
        ),
    )
    .unwrap();
    let err = site::load(&path).unwrap_err().to_string();
    assert!(
        err.contains("cluster.replicas.master: 5 conflicts with 3 in"),
        "{err}"
    );
    assert!(!err.contains(CANARY));
    // The CRN names another workspace than the installer's.
    std::fs::write(
        &path,
        text.replace(":0aa1bb2c-workspace::", ":0aa1bb2c-other::"),
    )
    .unwrap();
    let err = site::load(&path).unwrap_err().to_string();
    assert!(
        err.contains("host.api.powervs.crn: names workspace 0aa1bb2c-other, the install-config's platform.powervs names 0aa1bb2c-workspace"),
        "{err}"
    );
}
