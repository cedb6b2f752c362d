//! What a node is told over IPv6: URLs of its own family, `ip=` kernel
//! arguments and NetworkManager keyfiles with an address per family.

use bootd::render::{self, NodeUrls};

fn dual(edit: impl Fn(String) -> String) -> (tempfile::TempDir, site::Site) {
    let src =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab-dual/site.yaml");
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(&src)
        .unwrap()
        .replace("stateDir: ../../target/lab-state-dual", "stateDir: state")
        .replace(
            "dir: ../lab/ignition",
            &format!(
                "dir: {}",
                src.parent().unwrap().join("../lab/ignition").display()
            ),
        );
    let path = dir.path().join("site.yaml");
    std::fs::write(&path, edit(text)).unwrap();
    let site = site::load(&path).unwrap_or_else(|e| panic!("{e}"));
    (dir, site)
}

#[test]
fn scripts_name_the_url_of_the_clients_family() {
    let (_d, site) = dual(|t| t);
    let http = &site.host.http;
    let v6 = http.base_url(Some("fd00:77::11".parse().unwrap()), None);
    let v4 = http.base_url(Some("::ffff:10.77.0.11".parse().unwrap()), None);
    assert!(render::ipxe::entry(v6)
        .contains("chain --autofree --replace http://[fd00:77::1]:8080/ipxe/node?mac="));
    assert!(render::ipxe::entry(v4).contains("http://10.77.0.1:8080/ipxe/node?mac="));
    let node = site.node("master-0").unwrap();
    let urls = NodeUrls::new(&site, v6, node, "TOKEN");
    assert_eq!(urls.kernel, "http://[fd00:77::1]:8080/images/lab/kernel");
    assert_eq!(
        urls.ignition,
        "http://[fd00:77::1]:8080/ignition/master-0?token=TOKEN"
    );
}

#[test]
fn a_static_dual_stack_node_gets_an_ip_argument_and_a_keyfile_section_per_family() {
    let (_d, site) = dual(|t| {
        t.replace(
            r#"ip: [10.77.0.11, "fd00:77::11"], kernelArgs: [console=ttyS0] }"#,
            r#"ip: [10.77.0.11, "fd00:77::11"], kernelArgs: [console=ttyS0], network: { interface: eth0 } }"#,
        )
    });
    let node = site.node("master-0").unwrap();
    let urls = NodeUrls::new(&site, &site.host.http.url, node, "T");
    let args = render::kernel_args(&site, node, &urls);
    let ips: Vec<&String> = args.iter().filter(|a| a.starts_with("ip=")).collect();
    assert_eq!(
        ips,
        [
            "ip=10.77.0.11::10.77.0.1:255.255.255.0:master-0.lab.example.test:eth0:none",
            "ip=[fd00:77::11]::[fd00:77::1]:64:master-0.lab.example.test:eth0:none",
        ]
    );
    assert!(
        args.contains(&"nameserver=fd00:77::1".to_string()),
        "{args:?}"
    );
    let hn = node.host_network.as_ref().unwrap();
    let keyfile = render::network::keyfile(&site, hn, &hn.interfaces[0]);
    assert_eq!(
        keyfile,
        "[connection]\nid=eth0\ntype=ethernet\ninterface-name=eth0\nautoconnect=true\n\n\
         [ipv4]\nmethod=manual\naddress1=10.77.0.11/24,10.77.0.1\ndns=10.77.0.1;\ndns-search=lab.example.test;\n\n\
         [ipv6]\nmethod=manual\naddress1=fd00:77::11/64,fd00:77::1\ndns=fd00:77::1;\ndns-search=lab.example.test;\n"
    );
}

#[test]
fn an_ipv6_only_static_node_disables_ipv4() {
    let (_d, site) = dual(|t| {
        t.replace(
            r#"ip: [10.77.0.12, "fd00:77::12"], kernelArgs: [console=ttyS0] }"#,
            r#"ip: "fd00:77::12", kernelArgs: [console=ttyS0], network: { interface: eth0, dns: ["fd00:77::1"] } }"#,
        )
    });
    let node = site.node("master-1").unwrap();
    let hn = node.host_network.as_ref().unwrap();
    let keyfile = render::network::keyfile(&site, hn, &hn.interfaces[0]);
    assert!(keyfile.contains("[ipv4]\nmethod=disabled\n\n[ipv6]\nmethod=manual\naddress1=fd00:77::12/64,fd00:77::1\n"), "{keyfile}");
}
