//! The seed corpora, as `quick --seed-corpus` writes them into
//! `fuzz/corpus/<target>/`: real packets and documents, built the way the
//! repository's own tests build them (DHCP as tests/support/src/dhcp.rs (testkit::dhcp),
//! DNS queries as dnsd/tests/it.rs, TFTP and HTTP heads as the tftp and
//! bootd tests write them), and the repository's own files (the example
//! sites, dnsd's and the site crate's test sites, the RHCOS stream fixture).
//! The files are committed; this only regenerates them.

use crate::repo_path;
use dhcp::v4::leases::{Lease, LeaseState};
use dhcproto::v4::{Architecture, DhcpOption, HType, Message, MessageType, Opcode, OptionCode};
use dhcproto::{Encodable, Encoder};
use hickory_proto::op::{Edns, Message as Dns, MessageType as DnsType, OpCode, Query};
use hickory_proto::rr::{DNSClass, Name, RecordType};
use std::net::Ipv4Addr;

/// One seed: its target, its file name, its bytes.
pub type Seed = (&'static str, String, Vec<u8>);

/// Every generated seed of every target.
pub fn all() -> Vec<Seed> {
    let mut out = Vec::new();
    let mut add = |t: &'static str, list: Vec<(String, Vec<u8>)>| {
        out.extend(list.into_iter().map(|(n, b)| (t, n, b)));
    };
    add("dhcp_request", dhcp());
    add("dhcp6_request", crate::seeds6::dhcp6());
    add("dns_query", dns());
    add("tftp_request", tftp());
    add("http_head", http());
    add("api_json", api());
    add("site_yaml", sites());
    add("stream_json", streams());
    add("lease_file", lease_files());
    out
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo_path(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// A DHCP request as tests/support/src/dhcp.rs (testkit::dhcp) builds one, plus options.
fn dhcp_msg(mac: [u8; 6], t: MessageType, relayed: bool, opts: Vec<DhcpOption>) -> Vec<u8> {
    let mut m = Message::default();
    m.set_opcode(Opcode::BootRequest)
        .set_htype(HType::Eth)
        .set_xid(0x1234_5678)
        .set_chaddr(&mac);
    if relayed {
        // (The tests relay from 127.0.0.1 to a loopback network; the lab
        // site's relay would be on its own network.)
        m.set_giaddr(Ipv4Addr::new(10, 77, 0, 254)).set_hops(1);
    }
    m.opts_mut().insert(DhcpOption::MessageType(t));
    for o in opts {
        m.opts_mut().insert(o);
    }
    let mut b = Vec::new();
    m.encode(&mut Encoder::new(&mut b))
        .expect("a request encodes");
    b
}

/// What PXE firmware sends: vendor class, architecture, UUID, NIC type,
/// the options it asks for.
fn pxe(arch: u16, class: &str) -> Vec<DhcpOption> {
    vec![
        DhcpOption::ClassIdentifier(class.as_bytes().to_vec()),
        DhcpOption::ClientSystemArchitecture(Architecture::from(arch)),
        DhcpOption::ClientNetworkInterface(1, 2, 1),
        DhcpOption::ClientMachineIdentifier([0u8; 17].to_vec()),
        DhcpOption::MaxMessageSize(1260),
        DhcpOption::ParameterRequestList(
            [
                1u8, 2, 3, 4, 5, 6, 12, 13, 15, 17, 18, 22, 23, 28, 40, 41, 42, 43, 50, 51,
            ]
            .iter()
            .chain(&[54u8, 58, 59, 60, 66, 67, 97, 128, 129, 130, 131, 132, 133])
            .map(|&c| OptionCode::from(c))
            .collect(),
        ),
    ]
}

fn dhcp() -> Vec<(String, Vec<u8>)> {
    let node = [0x52, 0x54, 0x00, 0x77, 0x00, 0x10];
    let p9 = [0x52, 0x54, 0x00, 0x77, 0x00, 0x30];
    let unknown = [0x52, 0x54, 0x00, 0x99, 0x00, 0x01];
    let bios = "PXEClient:Arch:00000:UNDI:002001";
    let efi = "PXEClient:Arch:00007:UNDI:003016";
    let ipxe = |mut v: Vec<DhcpOption>| {
        v.push(DhcpOption::UserClass(b"iPXE".to_vec()));
        v
    };
    let req = vec![
        DhcpOption::RequestedIpAddress(Ipv4Addr::new(10, 77, 0, 10)),
        DhcpOption::ServerIdentifier(Ipv4Addr::new(10, 77, 0, 1)),
    ];
    let mut out = vec![
        (
            "discover-bios-pxe",
            dhcp_msg(node, MessageType::Discover, false, pxe(0, bios)),
        ),
        (
            "discover-uefi-pxe",
            dhcp_msg(node, MessageType::Discover, false, pxe(7, efi)),
        ),
        (
            "discover-ipxe",
            dhcp_msg(node, MessageType::Discover, false, ipxe(pxe(0, bios))),
        ),
        (
            "discover-ipxe-efi",
            dhcp_msg(node, MessageType::Discover, false, ipxe(pxe(7, efi))),
        ),
        (
            "discover-arm64",
            dhcp_msg(
                node,
                MessageType::Discover,
                false,
                pxe(11, "PXEClient:Arch:00011:UNDI:003000"),
            ),
        ),
        (
            "discover-http-boot",
            dhcp_msg(
                node,
                MessageType::Discover,
                false,
                pxe(16, "HTTPClient:Arch:00016:UNDI:003001"),
            ),
        ),
        (
            "discover-ieee1275",
            dhcp_msg(
                p9,
                MessageType::Discover,
                false,
                pxe(14, "PXEClient:Arch:00014:UNDI:002001"),
            ),
        ),
        (
            "discover-unknown-mac",
            dhcp_msg(unknown, MessageType::Discover, false, pxe(0, bios)),
        ),
        (
            "discover-relayed",
            dhcp_msg(node, MessageType::Discover, true, pxe(0, bios)),
        ),
        (
            "request-relayed",
            dhcp_msg(node, MessageType::Request, true, req.clone()),
        ),
        (
            "request-ipxe",
            dhcp_msg(
                node,
                MessageType::Request,
                false,
                ipxe([req.clone(), pxe(7, efi)].concat()),
            ),
        ),
        (
            "inform",
            dhcp_msg(
                node,
                MessageType::Inform,
                false,
                vec![DhcpOption::ParameterRequestList(vec![
                    OptionCode::DomainNameServer,
                ])],
            ),
        ),
        (
            "release",
            dhcp_msg(
                node,
                MessageType::Release,
                false,
                vec![DhcpOption::ServerIdentifier(Ipv4Addr::new(10, 77, 0, 1))],
            ),
        ),
        (
            "decline",
            dhcp_msg(node, MessageType::Decline, false, req.clone()),
        ),
        (
            "discover-hostname-clientid",
            dhcp_msg(
                unknown,
                MessageType::Discover,
                false,
                vec![
                    DhcpOption::Hostname("host-\u{0}\"x".into()),
                    DhcpOption::ClientIdentifier([&[1u8][..], &unknown].concat()),
                ],
            ),
        ),
        (
            "discover-plain",
            dhcp_msg(node, MessageType::Discover, false, vec![]),
        ),
    ];
    // A relay agent's option 82 (circuit ID "eth0", remote ID a MAC), as
    // raw bytes before the end option.
    let mut relayed = dhcp_msg(node, MessageType::Discover, true, pxe(0, bios));
    if let Some(end) = relayed.iter().rposition(|&b| b == 255) {
        relayed.truncate(end);
        relayed.extend_from_slice(&[82, 14, 1, 4, b'e', b't', b'h', b'0', 2, 6]);
        relayed.extend_from_slice(&node);
        relayed.push(255);
        out.push(("discover-option82", relayed));
    }
    out.into_iter().map(|(n, b)| (n.to_string(), b)).collect()
}

/// A query as dnsd/tests/it.rs builds one; `edns`: with an OPT record.
fn dns_msg(id: u16, name: &str, t: RecordType, rd: bool, edns: bool) -> Vec<u8> {
    let mut m = Dns::new();
    m.set_id(id)
        .set_message_type(DnsType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(rd);
    m.add_query(Query::query(Name::from_ascii(name).expect("a name"), t));
    if edns {
        let mut e = Edns::new();
        e.set_max_payload(4096).set_dnssec_ok(true);
        m.set_edns(e);
    }
    m.to_vec().expect("a query encodes")
}

fn dns() -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = [
        ("soa", "lab.example.test.", RecordType::SOA, false, false),
        (
            "a-node",
            "master-0.lab.example.test.",
            RecordType::A,
            false,
            false,
        ),
        ("a-api", "api.lab.example.test.", RecordType::A, true, false),
        (
            "a-apps-wildcard",
            "console.apps.lab.example.test.",
            RecordType::A,
            false,
            true,
        ),
        (
            "aaaa",
            "registry.lab.example.test.",
            RecordType::AAAA,
            false,
            false,
        ),
        (
            "cname-chain",
            "www.lab.example.test.",
            RecordType::A,
            false,
            false,
        ),
        (
            "cname-out-of-zone",
            "elsewhere.lab.example.test.",
            RecordType::A,
            true,
            false,
        ),
        ("mx", "lab.example.test.", RecordType::MX, false, false),
        (
            "txt-big",
            "big.lab.example.test.",
            RecordType::TXT,
            false,
            false,
        ),
        (
            "txt-big-edns",
            "big.lab.example.test.",
            RecordType::TXT,
            false,
            true,
        ),
        (
            "srv",
            "_etcd-server-ssl._tcp.lab.example.test.",
            RecordType::SRV,
            false,
            false,
        ),
        (
            "ptr",
            "11.0.77.10.in-addr.arpa.",
            RecordType::PTR,
            false,
            false,
        ),
        (
            "ns-delegation",
            "host.sub.lab.example.test.",
            RecordType::A,
            false,
            false,
        ),
        (
            "nxdomain",
            "nope.lab.example.test.",
            RecordType::A,
            false,
            true,
        ),
        ("any", "lab.example.test.", RecordType::ANY, false, false),
        ("axfr", "lab.example.test.", RecordType::AXFR, false, false),
        ("ixfr", "lab.example.test.", RecordType::IXFR, false, false),
        ("forward", "www.example.org.", RecordType::A, true, true),
        ("refused", "www.example.org.", RecordType::A, false, false),
        ("root", ".", RecordType::NS, false, false),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (n, name, t, rd, edns))| {
        (n.to_string(), dns_msg(0x1000 + i as u16, name, t, rd, edns))
    })
    .collect();
    // CHAOS TXT version.bind, and a NOTIFY (opcode 4) for the zone.
    let mut m = Dns::new();
    let mut q = Query::query(
        Name::from_ascii("version.bind.").expect("a name"),
        RecordType::TXT,
    );
    q.set_query_class(DNSClass::CH);
    m.set_id(0x2001).add_query(q);
    out.push(("chaos-version".into(), m.to_vec().expect("encodes")));
    let mut m = Dns::new();
    m.set_id(0x2002)
        .set_op_code(OpCode::Notify)
        .set_authoritative(true);
    m.add_query(Query::query(
        Name::from_ascii("lab.example.test.").expect("a name"),
        RecordType::SOA,
    ));
    out.push(("notify".into(), m.to_vec().expect("encodes")));
    out
}

fn tftp() -> Vec<(String, Vec<u8>)> {
    let v: &[(&str, &[u8])] = &[
        ("rrq-pxelinux-tsize-blksize", b"\x00\x01pxelinux.0\x00octet\x00tsize\x000\x00BLKSIZE\x001432\x00"),
        ("rrq-ipxe-efi-window", b"\x00\x01ipxe.efi\x00octet\x00blksize\x001468\x00windowsize\x008\x00timeout\x005\x00tsize\x000\x00"),
        ("rrq-undionly", b"\x00\x01undionly.kpxe\x00octet\x00"),
        ("rrq-grub-core", b"\x00\x01boot/grub/powerpc-ieee1275/core.elf\x00octet\x00blksize\x001024\x00"),
        ("rrq-grub-cfg", b"\x00\x01grub/grub.cfg-01-52-54-00-77-00-30\x00octet\x00"),
        ("rrq-netascii", b"\x00\x01f\x00NETASCII\x00"),
        ("rrq-mixed-case", b"\x00\x01f\x00OcTeT\x00"),
        ("rrq-trailing-nuls", b"\x00\x01f\x00octet\x00blksize\x001024\x00\x00\x00"),
        ("rrq-unknown-option", b"\x00\x01f\x00octet\x00multicast\x00\x00blksize\x0065464\x00"),
        ("wrq", b"\x00\x02upload\x00octet\x00"),
        ("data", b"\x00\x03\x00\x01hello"),
        ("ack", b"\x00\x04\x00\x01"),
        ("error", b"\x00\x05\x00\x00tsize probe\x00"),
        ("oack", b"\x00\x06blksize\x001432\x00tsize\x0012345\x00"),
    ];
    v.iter().map(|(n, b)| (n.to_string(), b.to_vec())).collect()
}

fn http() -> Vec<(String, Vec<u8>)> {
    let v: &[(&str, &str)] = &[
        ("boot-ipxe", "GET /boot.ipxe HTTP/1.1\r\nHost: 10.77.0.1:8080\r\nUser-Agent: iPXE/1.21.1+ (g3cf8)\r\nConnection: keep-alive\r\n\r\n"),
        ("ipxe-node", "GET /ipxe/52:54:00:77:00:10.ipxe?mac=52%3A54%3A00%3A77%3A00%3A10&buildarch=x86_64&platform=pcbios HTTP/1.1\r\nHost: 10.77.0.1\r\nUser-Agent: iPXE/1.21.1\r\n\r\n"),
        ("image-kernel", "GET /images/lab/kernel HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("image-range", "GET /images/lab/initramfs HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1023\r\n\r\n"),
        ("image-conditional", "GET /images/lab/shortcut-k HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"not-it\"\r\nIf-Modified-Since: Tue, 01 Oct 2024 00:00:00 GMT\r\n\r\n"),
        ("image-query", "GET /images/lab/shortcut-k?x=1 HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("image-encoded-slash", "GET /images/lab%2Fshortcut-k HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("image-close", "GET /images/lab/shortcut-k HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
        ("head-image", "HEAD /images/lab/kernel HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("pipelined", "GET /images/lab/kernel HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\nHEAD /images/lab/kernel HTTP/1.1\r\nHost: x\r\n\r\nGET /boot.ipxe HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("post-with-body", "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhiGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("ignition", "GET /ignition/master-0?token=abc.def HTTP/1.1\r\nHost: 10.77.0.1:8080\r\nAccept: application/vnd.coreos.ignition+json;version=3.4.0, */*;q=0.1\r\nUser-Agent: Ignition/2.17.0\r\nAccept-Encoding: gzip\r\n\r\n"),
        ("grub-cfg", "GET /grub/grub.cfg-01-52-54-00-77-00-30 HTTP/1.1\r\nHost: 10.77.0.1\r\n\r\n"),
        ("http10", "GET /x HTTP/1.0\r\n\r\n"),
        ("keepalive-close-both", "HEAD / HTTP/1.1\r\nConnection: keep-alive, Close\r\nContent-Length: 0\r\n\r\n"),
        ("absolute-form", "GET http://10.77.0.1/boot.ipxe HTTP/1.1\r\nHost: 10.77.0.1\r\n\r\n"),
        ("partial", "GET /boot.ipxe HTTP/1.1\r\nHost: a\r\n"),
        ("ctl-in-header", "GET /images/k HTTP/1.1\r\nX: a\x01b\r\n\r\n"),
        ("chunked", "GET /images/k HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    ];
    v.iter()
        .map(|(n, s)| (n.to_string(), s.as_bytes().to_vec()))
        .collect()
}

fn api() -> Vec<(String, Vec<u8>)> {
    let v: &[(&str, &str)] = &[
        (
            "node-no-provider",
            r#"{"name":"worker-2","role":"worker","ip":"10.77.0.22","macs":["52:54:00:77:00:22"],"kernelArgs":["console=ttyS0"]}"#,
        ),
        (
            "node-all-keys",
            r#"{"name":"worker-3","role":"worker","ip":"10.77.0.23","macs":["52:54:00:77:00:23","52:54:00:77:01:23"],"arch":"x86_64","firmware":"uefi","image":"lab-x86_64","installDisk":"/dev/sda","kernelArgs":["console=ttyS0","ip=dhcp"],"ipxeBinary":"ipxe.efi","fetchFrom":"nodeAddress"}"#,
        ),
        (
            "local",
            r#"{"name":"vm-0","role":"worker","provider":{"local":{}}}"#,
        ),
        (
            "local-firmware",
            r#"{"name":"vm-1","role":"worker","ip":"10.77.0.31","provider":{"local":{"firmware":"ovmf-ipxe","memory":256}}}"#,
        ),
        (
            "local-bad-memory",
            r#"{"name":"vm-2","role":"worker","provider":{"local":{"firmware":"slof","memory":1}}}"#,
        ),
        (
            "equinix-image",
            r#"{"name":"worker-0","role":"worker","provider":{"equinix":{"metro":"da","plan":"m3.small.x86","operatingSystem":"rhcos_4_14"}}}"#,
        ),
        (
            "equinix-pxe",
            r#"{"name":"master-0","role":"master","provider":{"equinix":{"metro":"sv","plan":"c3.small.x86","alwaysPxe":true,"hardwareReservationId":"next-available"}}}"#,
        ),
        (
            "powervs",
            r#"{"name":"p-0","role":"master","arch":"ppc64le","firmware":"ieee1275","provider":{"powervs":{"imageID":"rhcos-417","processors":0.5,"memory":16,"procType":"shared","sysType":"s922","networkID":"net-7","metadataService":true}}}"#,
        ),
        (
            "redfish",
            r#"{"name":"rack-1","role":"worker","ip":"10.77.0.61","provider":{"redfish":{"url":"http://127.0.0.1:8000/redfish/v1/Systems/1","username":"admin","password":{"file":"/run/secrets/rack-1"},"allowPlainHttp":true,"mode":"Legacy"}}}"#,
        ),
        (
            "ipmi",
            r#"{"name":"rack-3","role":"worker","ip":"10.77.0.63","macs":["52:54:00:aa:bb:03"],"provider":{"ipmi":{"address":"10.0.0.9","port":623,"username":"admin","password":{"file":"/run/secrets/rack-3"},"mode":"UEFI","cipherSuite":17}}}"#,
        ),
        (
            "alibaba",
            r#"{"name":"worker-a","role":"worker","provider":{"alibaba":{}}}"#,
        ),
        (
            "provider-null",
            r#"{"name":"worker-4","role":"worker","ip":"10.77.0.24","macs":["52:54:00:77:00:24"],"provider":null}"#,
        ),
        (
            "unknown-provider",
            r#"{"name":"x","role":"worker","provider":{"openstack":{}}}"#,
        ),
        (
            "two-providers",
            r#"{"name":"x","role":"worker","provider":{"local":{},"equinix":{}}}"#,
        ),
        (
            "unknown-key",
            r#"{"name":"x","role":"worker","colour":"blue"}"#,
        ),
        (
            "adopt-body",
            r#"{"name":"found-1","role":"worker","ip":"10.77.0.40"}"#,
        ),
        (
            "destroy-body",
            r#"{"provider":"alibaba","machines":["i-1","i-2"]}"#,
        ),
        ("not-an-object", r#"["name","worker"]"#),
        (
            "escapes",
            "{\"name\":\"w\\u00e9\\ud83d\\ude00\",\"role\":\"worker\\n\",\"ip\":\"\",\"macs\":[]}",
        ),
    ];
    v.iter()
        .map(|(n, s)| (n.to_string(), s.as_bytes().to_vec()))
        .collect()
}

/// The site files, as at examples/lab/site.yaml (the target's path): the
/// files they name are rewritten to the lab's or to relative paths that
/// reach the originals.
fn sites() -> Vec<(String, Vec<u8>)> {
    let lab = read("examples/lab/site.yaml");
    let mut out = vec![
        ("lab".to_string(), lab.clone()),
        ("compact".into(), read("examples/compact/site.yaml")),
        ("ppc64le".into(), read("examples/ppc64le/site.yaml")),
        (
            "openshift".into(),
            read("examples/openshift/site.yaml").replace(
                "installConfig: install-config.yaml",
                "installConfig: ../openshift/install-config.yaml",
            ),
        ),
        (
            "dnsd-test".into(),
            read("dnsd/tests/data/site.yaml").replace("worker: worker.ign", "worker: ignition/worker.ign"),
        ),
        ("bad".into(), read("site/tests/data/bad.yaml")),
        // tests/support/src/dhcp.rs (testkit::dhcp)'s loopback network with a pool.
        (
            "lab-loopback-pool".into(),
            lab.replace(
                "    dnsServers: [10.77.0.1]\n",
                "    dnsServers: [10.77.0.1]\n  - name: lo\n    subnet: 127.0.0.0/8\n    gateway: 127.0.0.1\n    pool: { start: 127.0.1.0, end: 127.0.9.255 }\n",
            )
            .replace("ip: 10.77.0.21", "ip: 127.0.0.21"),
        ),
        // site/tests/overlay.rs's API section, and exposure.rs's bad values.
        (
            "lab-api".into(),
            lab.replace(
                "host:\n",
                "host:\n  api:\n    listen: 127.0.0.1:9443\n    tokens: { credential: bootd-api-tokens }\n    deadline: 45m\n    equinix: { projectId: p1, apiKey: { file: metal.key } }\n",
            ),
        ),
        (
            "lab-api-bad".into(),
            lab.replace(
                "ip: 10.77.0.20, kernelArgs: [console=ttyS0] }",
                "ip: 10.77.0.20, kernelArgs: [console=ttyS0], fetchFrom: anywhere, addresses: [not-an-ip] }",
            )
            .replace(
                "host:\n",
                "host:\n  statusFrom: [10.77.0.1/24, nonsense]\n  api:\n    listen: 127.0.0.1:9443\n    tokens: { file: api-tokens }\n    fetchFrom: { nosuch: anyAddress, equinix: anyAddress, local: everywhere }\n    local: { bridge: br0 }\n",
            ),
        ),
        // docs/site.md: lb services, discovery, a catalog image set.
        (
            "lab-lb-discovery-catalog".into(),
            lab.replace(
                "    dnsServers: [10.77.0.1]\n",
                "    dnsServers: [10.77.0.1]\n    pool: { start: 10.77.0.100, end: 10.77.0.199 }\n",
            )
            .replace(
                "    lab-ppc64le:\n",
                "    fcos:\n      arch: aarch64\n      catalog: { stream: stable, version: latest, platform: metal }\n    lab-ppc64le:\n",
            ) + "discovery: { enabled: true, action: wait, retry: 30s }\n\
                 lb:\n  adminListen: 127.0.0.1:8404\n  balance: leastConn\n  bootstrap: { autoCompleteAfter: 10m, drainTimeout: 2m }\n  \
                 frontends:\n    ingressHttps:\n      check: { type: http, port: 1936, path: /healthz/ready }\n  \
                 services:\n    - { name: registry, listen: \"10.77.0.1:5000\", backends: [\"10.77.0.20:5000\", \"10.77.0.21:5000\"] }\n",
        ),
    ];
    // YAML's own corners, on the lab site.
    out.push((
        "lab-anchors".into(),
        lab.replace("cluster:\n  name: lab", "cluster: &c\n  name: lab"),
    ));
    out.into_iter().map(|(n, s)| (n, s.into_bytes())).collect()
}

fn streams() -> Vec<(String, Vec<u8>)> {
    let rhcos = read("images/tests/fixtures/rhcos-4.14-stream.json");
    let v: serde_json::Value = serde_json::from_str(&rhcos).expect("the fixture is JSON");
    let sha = "6b46ea0dc2db3428495c6c4f46ca61eeb4dbfe50d1dfd8cf09b6943e64ee8d83";
    // images/tests/it/main.rs's generated stream, and one with every kind of cloud image.
    let test = serde_json::json!({
        "stream": "teststream",
        "metadata": {"last-modified": "2024-01-01T00:00:00Z"},
        "architectures": {"x86_64": {
            "artifacts": {"metal": {"release": "40.1", "formats": {"pxe": {
                "kernel": {"location": "http://127.0.0.1:1/40.1/kernel", "signature": "http://127.0.0.1:1/40.1/kernel.sig", "sha256": sha},
                "initramfs": {"location": "http://127.0.0.1:1/40.1/initramfs.img", "sha256": sha},
                "rootfs": {"location": "http://127.0.0.1:1/40.1/rootfs.img?x=1#f", "sha256": sha, "uncompressed-sha256": sha}
            }}}},
            "images": {"aliyun": {"regions": {"eu-central-1": {"release": "40.1", "image": "m-40.1"}}}}
        }}
    });
    let clouds = serde_json::json!({
        "stream": "stable",
        "architectures": {
            "arm64": {"images": {
                "aws": {"regions": {"us-east-1": {"release": "1", "image": "ami-1"}}},
                "gcp": {"release": "1", "project": "fedora-coreos-cloud", "family": "fedora-coreos-stable", "name": "fedora-coreos-1"}
            }},
            "ppc64le": {
                "artifacts": {"powervs": {"release": "1", "formats": {"ova.gz": {"disk": {"location": "https://x/rhcos.ova.gz", "sha256": sha}}}}},
                "images": {
                    "powervs": {"regions": {"dal10": {"release": "1", "object": "rhcos.ova.gz", "bucket": "b", "url": "https://s3"}}},
                    "ibmcloud": {"regions": {"us-south": {"release": "1", "object": "o", "bucket": "b", "url": ""}}}
                }
            }
        }
    });
    let pretty = |v: &serde_json::Value| serde_json::to_vec_pretty(v).expect("serializes");
    vec![
        ("rhcos-4.14".into(), rhcos.into_bytes()),
        (
            "rhcos-4.14-compact".into(),
            serde_json::to_vec(&v).expect("serializes"),
        ),
        ("teststream".into(), pretty(&test)),
        ("clouds".into(), pretty(&clouds)),
        (
            "bad-sha".into(),
            serde_json::to_string_pretty(&test)
                .expect("serializes")
                .replace(sha, "6b46ea0dc2db")
                .into_bytes(),
        ),
    ]
}

fn lease(mac: &str, ip: [u8; 4], expires: u64, host: Option<&str>, state: LeaseState) -> Lease {
    Lease {
        mac: mac.into(),
        ip: Ipv4Addr::from(ip),
        expires,
        hostname: host.map(Into::into),
        state,
    }
}

/// Lease files as bootd writes them: one JSON record per line, appended.
fn lease_files() -> Vec<(String, Vec<u8>)> {
    use LeaseState::*;
    let file = |ls: &[Lease], tail: &str| {
        let mut b = Vec::new();
        for l in ls {
            b.extend(serde_json::to_vec(l).expect("a lease serializes"));
            b.push(b'\n');
        }
        b.extend_from_slice(tail.as_bytes());
        b
    };
    let a = "52:54:00:77:00:20";
    let b = "52:54:00:99:00:01";
    let c = "52:54:00:99:00:02";
    vec![
        ("empty".into(), Vec::new()),
        (
            "one".into(),
            file(
                &[lease(a, [10, 77, 0, 20], 1_700_003_600, None, Active)],
                "",
            ),
        ),
        (
            "renewals".into(),
            file(
                &[
                    lease(b, [10, 77, 0, 100], 1_700_000_000, Some("node-b"), Active),
                    lease(c, [10, 77, 0, 101], 1_700_000_100, None, Active),
                    lease(b, [10, 77, 0, 100], 1_700_003_600, Some("node-b"), Active),
                    lease(c, [10, 77, 0, 101], 0, None, Released),
                ],
                "",
            ),
        ),
        (
            "decline-then-new".into(),
            file(
                &[
                    lease(b, [10, 77, 0, 100], 1_700_000_000, None, Active),
                    lease(b, [10, 77, 0, 100], 1_700_086_400, None, Declined),
                    lease(b, [10, 77, 0, 102], 1_700_003_600, None, Active),
                ],
                "",
            ),
        ),
        (
            "hostname-escapes".into(),
            file(
                &[lease(
                    a,
                    [10, 77, 0, 20],
                    100,
                    Some("a\u{0}\n\"b\u{7f}é"),
                    Active,
                )],
                "",
            ),
        ),
        (
            "torn-tail".into(),
            file(
                &[
                    lease(a, [10, 77, 0, 20], 100, None, Active),
                    lease(b, [10, 77, 0, 100], 100, None, Active),
                ],
                "{\"mac\":\"52:54:00:00:00:03\",\"ip\":\"10.0.",
            ),
        ),
        (
            "mac-forms".into(),
            file(
                &[
                    lease("52-54-00-99-00-03", [10, 77, 0, 103], 100, None, Active),
                    lease("5254.0099.0004", [10, 77, 0, 104], 100, None, Active),
                    lease("not-a-mac", [10, 77, 0, 105], 100, None, Active),
                ],
                "\n\n",
            ),
        ),
    ]
}
