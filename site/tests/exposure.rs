//! The keys that decide who may fetch a node's secrets: validated like
//! every key, and each relaxation warned about by `--check-config`
//! (`site::exposure::warnings`).

mod common;
use common::lab;

#[test]
fn the_defaults_bind_every_node_and_warn_of_nothing() {
    let (_d, path) = lab(|t| t);
    let site = site::load(&path).unwrap();
    assert!(site
        .nodes
        .iter()
        .all(|n| n.fetch_from == site::FetchFrom::NodeAddress && n.addresses.is_none()));
    assert!(site.ignition.single_use_tokens);
    assert_eq!(
        site.host
            .status_from
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>(),
        ["127.0.0.0/8", "::1/128"]
    );
    assert_eq!(site::exposure::warnings(&site), Vec::<String>::new());
}

#[test]
fn fetch_from_relaxations_are_warned() {
    let (_d, path) = lab(|t| {
        t.replace(
            "ip: 10.77.0.20, kernelArgs: [console=ttyS0] }",
            "ip: 10.77.0.20, kernelArgs: [console=ttyS0], fetchFrom: anyAddress, addresses: [203.0.113.7, \"2001:db8::7\"] }",
        )
        .replace("  tokenTtl: 1h\n", "  tokenTtl: 1h\n  singleUseTokens: false\n")
        .replace("host:\n", "host:\n  statusFrom: [127.0.0.1, 10.77.0.0/24]\n")
    });
    let site = site::load(&path).unwrap();
    let w = site.node("worker-0").unwrap();
    assert_eq!(w.fetch_from, site::FetchFrom::AnyAddress);
    assert_eq!(
        w.addresses
            .as_ref()
            .unwrap()
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>(),
        ["203.0.113.7", "2001:db8::7"]
    );
    let warnings = site::exposure::warnings(&site);
    assert_eq!(warnings.len(), 3, "{warnings:#?}");
    assert!(warnings[0].starts_with("nodes[4].fetchFrom: anyAddress: for node worker-0, anyone"));
    assert!(warnings[0].contains("MAC or name"));
    assert!(warnings[1].starts_with("ignition.singleUseTokens: false"));
    assert!(warnings[2].starts_with("host.statusFrom[1]: 10.77.0.0/24"));
}

#[test]
fn proxy_dhcp_is_warned_about() {
    let (_d, path) = lab(|t| {
        t.replace(
            "    leaseTime: 1h\n",
            "    leaseTime: 1h\n    mode: proxy\n",
        )
    });
    let site = site::load(&path).unwrap();
    let warnings = site::exposure::warnings(&site);
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].starts_with("host.dhcp.mode: proxy"),
        "{}",
        warnings[0]
    );
}

#[test]
fn bad_values_are_refused_with_their_keys_all_at_once() {
    let (_d, path) = lab(|t| {
        t.replace(
            "ip: 10.77.0.20, kernelArgs: [console=ttyS0] }",
            "ip: 10.77.0.20, kernelArgs: [console=ttyS0], fetchFrom: anywhere, addresses: [not-an-ip] }",
        )
        .replace(
            "host:\n",
            "host:\n  statusFrom: [10.77.0.1/24, nonsense]\n  api:\n    listen: 127.0.0.1:9443\n    tokens: { file: api-tokens }\n    fetchFrom: { nosuch: anyAddress, equinix: anyAddress, local: everywhere }\n    local: { bridge: br0 }\n",
        )
    });
    let e = site::load(&path).unwrap_err().to_string();
    for needle in [
        "nodes[4].fetchFrom: \"anywhere\": want nodeAddress (the default) or anyAddress",
        "nodes[4].addresses[0]: \"not-an-ip\" is not an IP address",
        "host.statusFrom[0]: \"10.77.0.1/24\": host bits set (did you mean 10.77.0.0/24?)",
        "host.statusFrom[1]: \"nonsense\" is not an address or a CIDR",
        "host.api.fetchFrom.nosuch: not a provider",
        "host.api.fetchFrom.equinix: provider equinix is not configured (host.api.equinix)",
        "host.api.fetchFrom.local: \"everywhere\": want nodeAddress or anyAddress",
    ] {
        assert!(e.contains(needle), "{needle}\n{e}");
    }
}
