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

/// The lab site with the BMC providers and `api` under `host.api`.
fn with_bmc(api: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    lab(|t| {
        t.replace(
            "host:\n",
            &format!(
                "host:\n  api:\n    listen: 127.0.0.1:9443\n    tokens: {{ file: api-tokens }}\n    redfish: {{}}\n    ipmi: {{}}\n    bmcFiles: /etc/bare-metal-boot/bmc\n{api}"
            ),
        )
    })
}

#[test]
fn bmc_passwords_unbound_to_their_bmcs_are_warned_about() {
    let (_d, path) = with_bmc("");
    let site = site::load(&path).unwrap();
    let w = site::exposure::warnings(&site);
    assert_eq!(w.len(), 1, "{w:#?}");
    assert!(w[0].starts_with("host.api.bmcCredentials: not set: any API token holder"));
    let (_d, path) = with_bmc(
        "    bmcCredentials:\n    - password: { credential: bmc-rack1 }\n      origins: [\"https://10.1.0.0/24\", \"ipmi://bmc-r1.example:*\"]\n    - password: { file: /etc/bare-metal-boot/bmc/rack2/* }\n      origins: [\"http://[fd00::/64]:8000\", \"https://bmc-r2.example\"]\n      allowPlainHttp: true\n      insecureSkipVerify: true\n",
    );
    let site = site::load(&path).unwrap();
    assert_eq!(site::exposure::warnings(&site), Vec::<String>::new());
    let c = site.host.api.unwrap().bmc_credentials.unwrap();
    assert_eq!(
        c[0].password,
        site::PasswordPattern::Credential("bmc-rack1".into())
    );
    assert_eq!(
        c[1].password,
        site::PasswordPattern::FilesUnder("/etc/bare-metal-boot/bmc/rack2".into())
    );
    let to = |u: &str| site::BmcTarget::of_url(u).unwrap();
    let rack2 = site::SecretRef::File("/etc/bare-metal-boot/bmc/rack2/u7".into());
    assert_eq!(
        site::bmc_binding(
            &c,
            &rack2,
            &to("http://[fd00::7]:8000/redfish/v1"),
            false,
            true
        ),
        Ok(())
    );
    assert!(site::bmc_binding(&c, &rack2, &to("https://10.1.0.7"), false, false).is_err());
}

#[test]
fn bmc_credentials_are_checked_with_every_problem() {
    let (_d, path) = with_bmc(
        "    bmcCredentials:\n    - password: { credential: bootd-api-tokens }\n      origins: [\"https://10.1.0.1/24\", \"ftp://x\", \"http://10.1.0.2\"]\n      insecureSkipVerify: true\n    - password: { file: /etc/bare-metal-boot/bmc/a, env: BOOTD_BMC_A }\n      origins: []\n    - password: { env: HOME* }\n      origins: [\"ipmi://10.1.0.3\"]\n      allowPlainHttp: true\n    - origins: [\"https://bmc\"]\n    - password: { file: /etc/ca.key }\n      origins: [\"https://bmc:99999\"]\n      colour: blue\n",
    );
    let e = site::load(&path).unwrap_err();
    common::assert_problems(
        &e,
        &[
            "host.api.bmcCredentials[0].password.credential: \"bootd-api-tokens\": a BMC credential's name starts with \"bmc-\"",
            "host.api.bmcCredentials[0].origins[0]: \"https://10.1.0.1/24\": 10.1.0.1/24 has bits set past its prefix",
            "host.api.bmcCredentials[0].origins[1]: \"ftp://x\"",
            "host.api.bmcCredentials[0].origins: an http:// origin sends the password in clear",
            "host.api.bmcCredentials[1].password: give exactly one of file, credential, env",
            "host.api.bmcCredentials[1].origins: required",
            "host.api.bmcCredentials[2].password.env: \"HOME*\"",
            "host.api.bmcCredentials[2].allowPlainHttp: allows nothing",
            "host.api.bmcCredentials[3].password: required",
            "host.api.bmcCredentials[4].password.file: \"/etc/ca.key\" is not in host.api.bmcFiles",
            "host.api.bmcCredentials[4].origins[0]: \"https://bmc:99999\": port",
            "host.api.bmcCredentials[4].colour: unknown key",
        ],
    );
}
