//! IPv6 in the site: a network with a subnet per family, nodes with an
//! address per family, and every mistake in them reported at once.

mod common;
use common::{assert_problems, lab};
use std::net::IpAddr;

const DUAL: &str = "networks:
  - name: lab
    subnet: [10.77.0.0/24, fd00:77::/64]
    gateway: [10.77.0.1, fd00:77::1]
    dnsServers: [10.77.0.1, fd00:77::1]
    pool:
      - { start: 10.77.0.100, end: 10.77.0.199 }
      - { start: 'fd00:77::1000', end: 'fd00:77::1fff' }
";

fn dual(nodes: impl Fn(String) -> String) -> (tempfile::TempDir, std::path::PathBuf) {
    lab(|t| {
        let start = t.find("networks:").unwrap();
        let end = t.find("vips:").unwrap();
        nodes(format!("{}{DUAL}\n{}", &t[..start], &t[end..]))
    })
}

#[test]
fn a_dual_stack_network_and_node() {
    let (_d, path) = dual(|t| {
        t.replace("ip: 10.77.0.11,", "ip: [10.77.0.11, 'fd00:77::11'],")
            .replace("ip: 10.77.0.12,", "ip: 'fd00:77::12',")
    });
    let site = site::load(&path).unwrap();
    let net = &site.networks[0];
    let v4 = net.v4().unwrap();
    let v6 = net.v6().unwrap();
    assert_eq!(v4.net.to_string(), "10.77.0.0/24");
    assert_eq!(v6.net.to_string(), "fd00:77::/64");
    assert_eq!(v6.gateway, Some("fd00:77::1".parse().unwrap()));
    assert_eq!(
        v6.pool,
        Some((
            "fd00:77::1000".parse().unwrap(),
            "fd00:77::1fff".parse().unwrap()
        ))
    );
    let m0 = site.node("master-0").unwrap();
    assert_eq!(m0.ip4, Some("10.77.0.11".parse().unwrap()));
    assert_eq!(m0.ip6, Some("fd00:77::11".parse().unwrap()));
    assert!(m0.has_ip("fd00:77::11".parse().unwrap()));
    // An IPv4-mapped source is the IPv4 address.
    assert!(m0.has_ip("::ffff:10.77.0.11".parse().unwrap()));
    assert_eq!(m0.ip(), "10.77.0.11".parse::<IpAddr>().unwrap());
    let m1 = site.node("master-1").unwrap();
    assert_eq!(
        (m1.ip4, m1.ip6),
        (None, Some("fd00:77::12".parse().unwrap()))
    );
    assert_eq!(
        site.node_by_ip("fd00:77::12".parse().unwrap())
            .map(|n| n.name.as_str()),
        Some("master-1")
    );
}

#[test]
fn an_ipv6_only_network() {
    let (_d, path) = lab(|t| {
        t.replace("subnet: 10.77.0.0/24", "subnet: fd00:77::/64")
            .replace("gateway: 10.77.0.1\n", "gateway: 'fd00:77::1'\n")
            .replace("dnsServers: [10.77.0.1]", "dnsServers: ['fd00:77::1']")
            .replace("ip: 10.77.0.", "ip: fd00:77::")
            .replace(
                "api: 10.77.0.1\n  ingress: 10.77.0.1",
                "api: 'fd00:77::1'\n  ingress: 'fd00:77::1'",
            )
    });
    let site = match site::load(&path) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    assert!(site.networks[0].v4().is_none());
    assert!(site
        .nodes
        .iter()
        .all(|n| n.ip4.is_none() && n.ip6.is_some()));
}

#[test]
fn every_ipv6_mistake_is_reported_at_once() {
    let (_d, path) = lab(|t| {
        let start = t.find("networks:").unwrap();
        let end = t.find("vips:").unwrap();
        let nets = "networks:
  - name: lab
    subnet: [10.77.0.0/24, fd00:77::/64, 10.78.0.0/24]
    gateway: [10.77.0.1, 'fd00:78::1']
    pool:
      - { start: 10.77.0.100, end: 'fd00:77::10' }
      - { start: 'fd00:77::20', end: 'fd00:77::10' }
  - name: other
    subnet: 'fd00:79::1/64'
  - name: third
    subnet: 'fd00:7a::/64'
";
        format!("{}{nets}\n{}", &t[..start], &t[end..])
            .replace(
                "ip: 10.77.0.11,",
                "ip: [10.77.0.11, 'fd00:77::11', 'fd00:77::12'],",
            )
            .replace("ip: 10.77.0.12,", "ip: [10.77.0.12, 'fd00:7a::12'],")
            .replace("ip: 10.77.0.13,", "ip: [10.77.0.13, 'fd00:77::11'],")
            .replace("ip: 10.77.0.20,", "ip: [],")
    });
    let err = site::load(&path).unwrap_err();
    let expect = [
        "networks[0].subnet[2]: a second IPv4 subnet (10.78.0.0/24)",
        "networks[0].gateway[1]: fd00:78::1 is outside subnet 10.77.0.0/24, fd00:77::/64",
        "networks[0].pool[0]: start 10.77.0.100 and end fd00:77::10 are in different subnets",
        "networks[0].pool[1]: start fd00:77::20 is after end fd00:77::10",
        "networks[1].subnet: \"fd00:79::1/64\" has host bits set; did you mean fd00:79::/64?",
        "nodes[1].ip[2]: a second address of fd00:77::12's family",
        "nodes[2].ip: its addresses are in different networks (lab, third)",
        "nodes[3].ip[1]: duplicate IP fd00:77::11 (also nodes[1])",
        "nodes[4].ip: an empty list",
    ];
    assert_problems(&err, &expect);
}

#[test]
fn dhcp6_and_a_url_per_family() {
    let (_d, path) = dual(|t| {
        t.replace(
            "    url: http://10.77.0.1:8080    # what nodes are told",
            "    url: [http://10.77.0.1:8080, 'http://[fd00:77::1]:8080']",
        )
        .replace(
            "  tftp:\n",
            "  dhcp6:\n    interface: br0\n    leaseTime: 2h\n  tftp:\n",
        )
    });
    let site = match site::load(&path) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    let http = &site.host.http;
    assert_eq!(http.url, "http://10.77.0.1:8080");
    assert_eq!(http.url_for(true), "http://[fd00:77::1]:8080");
    assert_eq!(http.url_for(false), "http://10.77.0.1:8080");
    assert_eq!(
        http.base_url(Some("::ffff:10.77.0.50".parse().unwrap()), None),
        "http://10.77.0.1:8080"
    );
    let d = site.host.dhcp6.as_ref().unwrap();
    // The server address defaults to the IPv6 URL's host.
    assert_eq!(
        d.server_address,
        "fd00:77::1".parse::<std::net::Ipv6Addr>().unwrap()
    );
    assert_eq!(d.listen, "[::]:547".parse().unwrap());
    assert_eq!(d.lease_time, std::time::Duration::from_secs(7200));
    assert!(d.rapid_commit);
    assert_eq!(d.boot_files.uefi_x86_64, "ipxe.efi");
}

#[test]
fn dhcp6_mistakes_are_reported_with_their_keys() {
    let (_d, path) = dual(|t| {
        t.replace(
            "    url: http://10.77.0.1:8080    # what nodes are told",
            "    url: [http://10.77.0.1:8080, 'http://fd00:77::1:8080', http://10.77.0.2:8080]",
        )
        .replace(
            "  tftp:\n",
            "  dhcp6:\n    listen: 0.0.0.0:547\n    serverAddress: 'fd00:99::1'\n    leaseTime: 10s\n    bootFiles: { uefiX86_64: 'a b.efi' }\n  tftp:\n",
        )
    });
    let err = site::load(&path).unwrap_err();
    assert_problems(
        &err,
        &[
            "host.http.url[1]: \"http://fd00:77::1:8080\": an IPv6 address in a URL is written in brackets",
            "host.http.url[2]: \"http://10.77.0.2:8080\": a list gives one URL per family",
            "host.dhcp6.listen: \"0.0.0.0:547\" is not an IPv6 address:port",
            "host.dhcp6.interface: required",
            "host.dhcp6.leaseTime: \"10s\" is not a duration from 1m",
            "host.dhcp6.bootFiles.uefiX86_64:",
        ],
    );
    // The server address is checked against the networks once the rest
    // of host.dhcp6 is whole.
    let (_d, path) = dual(|t| {
        t.replace(
            "  tftp:\n",
            "  dhcp6:\n    interface: br0\n    serverAddress: 'fd00:99::1'\n  tftp:\n",
        )
    });
    let err = site::load(&path).unwrap_err();
    assert_problems(
        &err,
        &["host.dhcp6.serverAddress: fd00:99::1 is in no site network's IPv6 subnet"],
    );
}

#[test]
fn a_vip_per_family_gives_lbd_a_frontend_per_family() {
    let (_d, path) = dual(|t| {
        t.replace(
            "api: 10.77.0.1\n  ingress: 10.77.0.1",
            "api: ['fd00:77::1', 10.77.0.1]\n  ingress: [10.77.0.1, 'fd00:77::1']",
        )
    });
    let site = match site::load(&path) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    // IPv4 first, whatever the order written.
    assert_eq!(site.vips.api, "10.77.0.1".parse::<IpAddr>().unwrap());
    assert_eq!(site.vips.api_v6, Some("fd00:77::1".parse().unwrap()));
    let fronts: Vec<String> = site
        .lb
        .frontends
        .iter()
        .map(|f| format!("{} {}", f.name, f.listen))
        .collect();
    assert_eq!(
        fronts,
        [
            "api 10.77.0.1:6443",
            "machine-config 10.77.0.1:22623",
            "ingress-http 10.77.0.1:80",
            "ingress-https 10.77.0.1:443",
            "api-v6 [fd00:77::1]:6443",
            "machine-config-v6 [fd00:77::1]:22623",
            "ingress-http-v6 [fd00:77::1]:80",
            "ingress-https-v6 [fd00:77::1]:443",
        ]
    );
    assert_eq!(site::site_frontend("machine-config-v6"), "machine-config");
    assert!(site.lb.limits.retries_unanswered("api-v6"));

    let (_d, path) = dual(|t| {
        t.replace(
            "api: 10.77.0.1\n  ingress: 10.77.0.1",
            "api: [10.77.0.1, 10.77.0.2]\n  ingress: []",
        )
    });
    let err = site::load(&path).unwrap_err();
    assert_problems(
        &err,
        &[
            "vips.api[1]: a second address of 10.77.0.2's family",
            "vips.ingress: an empty list",
        ],
    );

    // A frontend moved to another port: its IPv6 twin moves with it.
    let dual_vips = |t: String, lb: &str| {
        format!(
            "{}\nlb:\n{lb}",
            t.replace(
                "api: 10.77.0.1\n  ingress: 10.77.0.1",
                "api: [10.77.0.1, 'fd00:77::1']\n  ingress: [10.77.0.1, 'fd00:77::1']",
            )
        )
    };
    let (_d, path) = dual(|t| dual_vips(t, "  frontends:\n    api: { listen: 10.77.0.1:7443 }\n"));
    let site = match site::load(&path) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    let api: Vec<String> = site
        .lb
        .frontends
        .iter()
        .filter(|f| f.name.starts_with("api"))
        .map(|f| format!("{} {}", f.name, f.listen))
        .collect();
    assert_eq!(api, ["api 10.77.0.1:7443", "api-v6 [fd00:77::1]:7443"]);
    // One IPv4 address for every frontend leaves the IPv6 VIPs without one.
    let (_d, path) = dual(|t| dual_vips(t, "  listen: 0.0.0.0\n"));
    let err = site::load(&path).unwrap_err();
    assert_problems(
        &err,
        &["lb.listen: 0.0.0.0 takes IPv4 only, and this site has IPv6 VIPs (fd00:77::1)"],
    );
    let (_d, path) = dual(|t| dual_vips(t, "  listen: '::'\n"));
    if let Err(e) = site::load(&path) {
        panic!("{e}");
    }
}

#[test]
fn pools_that_hold_a_service_and_subnets_that_are_no_link_are_refused() {
    let (_d, path) = lab(|t| {
        let start = t.find("networks:").unwrap();
        let end = t.find("vips:").unwrap();
        let nets = "networks:
  - name: lab
    subnet: [10.77.0.0/24, fd00:77::/64]
    gateway: [10.77.0.1, 'fd00:77::1']
    dnsServers: ['fd00:77::53']
    pool:
      - { start: 10.77.0.100, end: 10.77.0.199 }
      - { start: 'fd00:77::1', end: 'fd00:77::ffff' }
  - name: ll
    subnet: 'fe80::/64'
  - name: mc
    subnet: [224.0.0.0/24, 'ff02::/16']
";
        format!("{}{nets}\n{}", &t[..start], &t[end..])
            .replace(
                "    url: http://10.77.0.1:8080    # what nodes are told",
                "    url: [http://10.77.0.1:8080, 'http://[fd00:77::1]:8080']",
            )
            .replace(
                "  tftp:\n",
                "  dhcp6:\n    interface: br0\n    maxBindings: 0\n  tftp:\n",
            )
    });
    let err = site::load(&path).unwrap_err();
    assert_problems(
        &err,
        &[
            "networks[0].pool: fd00:77::1-fd00:77::ffff holds fd00:77::1 (host.dhcp6.serverAddress)",
            "networks[0].pool: fd00:77::1-fd00:77::ffff holds fd00:77::53 (networks[0].dnsServers)",
            "networks[0].pool: fd00:77::1-fd00:77::ffff holds fd00:77::1 (networks[0].gateway)",
            "networks[1].subnet: fe80::/64 is link-local",
            "networks[2].subnet[0]: 224.0.0.0/24 is multicast",
            "networks[2].subnet[1]: ff02::/16 is multicast",
            "host.dhcp6.maxBindings: 0 is not from 1 to 1048576",
        ],
    );
    // A VIP in the pool, and DHCPv6 whose boot URLs are all IPv4.
    let (_d, path) = dual(|t| {
        t.replace(
            "  tftp:\n",
            "  dhcp6:\n    interface: br0\n    serverAddress: 'fd00:77::1'\n  tftp:\n",
        )
        .replace("  ingress: 10.77.0.1\n", "  ingress: 10.77.0.150\n")
    });
    let err = site::load(&path).unwrap_err();
    assert_problems(
        &err,
        &[
            "host.dhcp6: every host.http.url (and https.url) is an IPv4 address",
            "networks[0].pool: 10.77.0.100-10.77.0.199 holds 10.77.0.150 (vips.ingress)",
        ],
    );
}
