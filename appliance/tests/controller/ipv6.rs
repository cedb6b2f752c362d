//! A dual-stack site: what a provider is given for a node follows the
//! node's address family. A node with only an IPv6 address gets the IPv6
//! script URL and an IPv6 Ignition source; one with an IPv4 address keeps
//! the site's first (IPv4) URLs.

use super::*;

/// The lab site made dual stack: both families on the lab network, and
/// one HTTP and one HTTPS URL per family.
fn dual_stack_site(dir: &Path, f: &Fake) -> PathBuf {
    let path = write_site(dir, &f.url(), &f.url(), &f.url(), "127.0.0.1:0");
    let text = std::fs::read_to_string(&path).unwrap();
    let edits = [
        ("listen: 0.0.0.0:8080", "listen: \"[::]:8080\""),
        (
            "url: http://10.77.0.1:8080",
            "url: [http://10.77.0.1:8080, \"http://[fd00:77::1]:8080\"]",
        ),
        ("listen: 0.0.0.0:8443", "listen: \"[::]:8443\""),
        (
            "url: https://10.77.0.1:8443",
            "url: [https://10.77.0.1:8443, \"https://[fd00:77::1]:8443\"]",
        ),
        (
            "subnet: 10.77.0.0/24",
            "subnet: [10.77.0.0/24, fd00:77::/64]",
        ),
        ("gateway: 10.77.0.1", "gateway: [10.77.0.1, fd00:77::1]"),
        (
            "dnsServers: [10.77.0.1]",
            "dnsServers: [10.77.0.1, fd00:77::1]",
        ),
    ];
    let mut text = text;
    for (from, to) in edits {
        assert!(text.contains(from), "the lab site has no {from:?}");
        text = text.replacen(from, to, 1);
    }
    std::fs::write(&path, text).unwrap();
    path
}

/// The script URL and the Ignition source the fake was given for `name`.
fn given(f: &Fake, name: &str) -> (String, String) {
    let s = f.st();
    let d = s
        .devices
        .values()
        .find(|d| d["hostname"] == name)
        .unwrap_or_else(|| panic!("no device for {name}: {:?}", s.devices));
    let ud: Value = serde_json::from_str(d["userdata"].as_str().unwrap()).unwrap();
    let src = ud["ignition"]["config"]["merge"][0]["source"]
        .as_str()
        .unwrap()
        .to_string();
    (d["ipxe_script_url"].as_str().unwrap().to_string(), src)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_only_an_ipv6_address_is_given_ipv6_urls() {
    let f = Fake::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dual_stack_site(dir.path(), &f);
    let b = Bootd::start_site(dir, &path, tuning()).await;
    for (name, ip, mac) in [
        ("worker-6", "fd00:77::26", "52:54:00:77:00:26"),
        ("worker-4", "10.77.0.24", "52:54:00:77:00:24"),
    ] {
        let (st, v) = b.create(equinix_node(name, ip, mac)).await;
        assert_eq!(st, 201, "{v:#}");
        b.wait_node(name, 20, |_, v| cond(v, "Provisioned")["status"] == "True")
            .await;
    }
    for (name, base) in [("worker-6", "[fd00:77::1]"), ("worker-4", "10.77.0.1")] {
        let (script, ignition) = given(&f, name);
        assert!(
            script.starts_with(&format!("http://{base}:8080/ipxe/{name}.ipxe?token=")),
            "{script}"
        );
        assert!(
            ignition.starts_with(&format!("https://{base}:8443/ignition/{name}?token=")),
            "{ignition}"
        );
    }
    b.stop().await;
}
