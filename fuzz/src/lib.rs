//! The fuzz targets' bodies: one plain function per target, taking any
//! bytes. libFuzzer calls them through `fuzz_targets/<name>.rs`
//! (`cargo +nightly fuzz run <name>`); `quick` (src/bin/quick.rs) calls them
//! on stable Rust with random mutations of the seed corpus. A target
//! "finds" something by panicking: the product's own panic, or one of the
//! assertions here, each of which states a property the product promises.
//!
//! Every parser that reads the network or the operator has a target:
//! DHCP, TFTP, HTTP heads and DNS queries (the network), the controller
//! API's JSON bodies (an API client), the site file and CoreOS stream
//! metadata (the operator, or a download), bootd's lease file (what a
//! crash left on disk), and the cluster's CertificateSigningRequests (what
//! anyone holding the bootstrap token may send).

pub mod mutate;
pub mod seeds;
mod seeds6;

use dhcp::v4::{core, leases, wire};
use dhcproto::{v4::Message, Decodable, Decoder, Encodable, Encoder};
use dnsd::core::{Action, Catalog, Options, Transport};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A fuzz target: any bytes in; a panic is a finding.
pub type Target = fn(&[u8]);

/// Every target, by the name of its `fuzz_targets/` file and corpus.
pub const TARGETS: &[(&str, Target)] = &[
    ("dhcp_request", dhcp_request),
    ("dhcp6_request", dhcp6_request),
    ("tftp_request", tftp_request),
    ("http_head", http_head),
    ("dns_query", dns_query),
    ("api_json", api_json),
    ("site_yaml", site_yaml),
    ("stream_json", stream_json),
    ("lease_file", lease_file),
    ("csr_object", csr_object),
    ("inventory_report", inventory_report),
];

/// A file of the repository, by its path from the repository's root.
pub fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

/// The lab site (examples/lab), which the DHCP and API targets answer with.
fn lab_site() -> &'static site::Site {
    static SITE: OnceLock<site::Site> = OnceLock::new();
    SITE.get_or_init(|| site::load(&repo_path("examples/lab/site.yaml")).expect("lab site"))
}

/// Any datagram through bootd's DHCP path: the structural check, the
/// decoder, and the decision against the lab site. No panic; an answer is
/// only ever produced for a packet that passed the check, and it encodes.
pub fn dhcp_request(data: &[u8]) {
    if wire::check(data).is_err() {
        return;
    }
    let Ok(mut msg) = Message::decode(&mut Decoder::new(data)) else {
        return;
    };
    // As the server does: option 82 kept as the relay wrote it.
    let agent = wire::relay_agent_info(data);
    if let Some(raw) = &agent {
        let _ = wire::relay_ids(raw);
        core::put_relay_info(&mut msg, raw.clone());
    }
    let rx = core::Rx {
        src: "0.0.0.0:68".parse().unwrap(),
        local_port: 67,
        link: None,
    };
    let out = core::answer(
        lab_site(),
        &mut leases::Table::default(),
        &msg,
        rx,
        1_000_000,
    );
    if let Some((reply, _)) = out.reply {
        let mut buf = Vec::new();
        reply
            .encode(&mut Encoder::new(&mut buf))
            .expect("replies encode");
        // Option 82 comes back exactly, once.
        assert_eq!(wire::relay_agent_info(&buf), agent, "option 82 echoed as received");
    }
}

/// The dual-stack lab site (examples/lab-dual), which the DHCPv6 target
/// answers with.
fn lab_dual_site() -> &'static site::Site {
    static SITE: OnceLock<site::Site> = OnceLock::new();
    SITE.get_or_init(|| {
        site::load(&repo_path("examples/lab-dual/site.yaml")).expect("lab-dual site")
    })
}

/// Any datagram through bootd's DHCPv6 path: relay envelopes off, the
/// message parsed, the decision against the dual-stack lab site. No
/// panic; a reply parses back to itself, and wrapped for the relays it
/// came through, unwraps to the same hops and reply.
pub fn dhcp6_request(data: &[u8]) {
    use dhcp::v6::{core as core6, leases as leases6, wire as wire6};
    let Ok((hops, inner)) = wire6::unwrap(data) else {
        return;
    };
    let Ok(msg) = wire6::Msg::parse(inner) else {
        return;
    };
    let req = core6::Request {
        msg: &msg,
        hops: &hops,
        src: "fe80::5054:ff:fe77:11".parse().unwrap(),
    };
    let server_id = [
        0u8, 4, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
    ];
    let out = core6::answer(
        lab_dual_site(),
        &mut leases6::Table::default(),
        &server_id,
        &req,
        1_000_000,
    );
    if let Some(reply) = out.reply {
        let bytes = reply.encode();
        assert_eq!(
            wire6::Msg::parse(&bytes).as_ref(),
            Ok(&reply),
            "a reply parses back to itself"
        );
        let wrapped = wire6::wrap(&hops, bytes.clone());
        if hops.is_empty() {
            assert_eq!(wrapped, bytes);
        }
    }
}

/// Any datagram into the TFTP parser: no panic, and whatever parses
/// re-encodes to bytes that parse to the same packet; negotiated options
/// stay inside the server's limits.
pub fn tftp_request(data: &[u8]) {
    use tftp::packet::{self, Limits, Packet};
    let Ok(p) = packet::parse(data) else { return };
    let mut out = Vec::new();
    p.encode(&mut out);
    assert_eq!(packet::parse(&out).as_ref(), Ok(&p));
    if let Packet::Rrq(r) | Packet::Wrq(r) = &p {
        assert!(!r.filename.is_empty());
        let n = packet::negotiate(
            &r.options,
            Limits {
                max_blksize: 1468,
                max_windowsize: 64,
                max_timeout: 5,
            },
        );
        assert!((8..=1468).contains(&n.block_size()) || n.block_size() == 512);
        assert!((1..=64).contains(&n.window_size()));
        if let Some(t) = n.timeout {
            assert!((1..=5).contains(&t));
        }
    }
}

/// Any bytes into bootd's plain-HTTP head parser (`bootd::fast_get::parse`):
/// no panic; a head it serves itself is a GET or HEAD in origin form whose
/// length lies inside the input, and the bytes before that length parse to
/// the same request again (so pipelined requests split where they should).
/// A whole-image GET (`Head::Image`) names its path inside the head, and
/// when the shortcut would serve that path, the general parse of the same
/// bytes is a GET of the same path (so both ways serve the same file).
pub fn http_head(data: &[u8]) {
    use bootd::http::whole_image_rel;
    use bootd::fast_get::{parse, parse_general, Head};
    if let Head::Image { path, len, close } = parse(data) {
        assert!(path.end <= len && len <= data.len());
        let p = std::str::from_utf8(&data[path.clone()]).expect("the path is text");
        assert!(p.starts_with("/images/"));
        if let Some(rel) = whole_image_rel(p) {
            match parse_general(&data[..len]) {
                Head::Simple {
                    req,
                    len: l2,
                    close: c2,
                } => {
                    assert_eq!((l2, c2), (len, close));
                    assert_eq!(req.method(), "GET");
                    assert_eq!(req.uri().path(), p);
                    assert_eq!(req.uri().path().strip_prefix("/images/"), Some(rel));
                }
                other => panic!("the shortcut would serve {p:?}, the general parse gave {other:?}"),
            }
        }
        return;
    }
    if let Head::Simple { req, len, close } = parse(data) {
        assert!(len <= data.len());
        assert!(req.method() == "GET" || req.method() == "HEAD");
        assert!(req.uri().path().starts_with('/'));
        assert!(req.uri().scheme().is_none());
        match parse(&data[..len]) {
            Head::Simple {
                req: again,
                len: l2,
                close: c2,
            } => {
                assert_eq!((l2, c2), (len, close));
                assert_eq!(again.uri(), req.uri());
                assert_eq!(again.headers(), req.headers());
            }
            other => panic!("the head alone parsed as {other:?}"),
        }
    }
}

/// dnsd's catalog for its test site (dnsd/tests/data/site.yaml).
fn dns_catalog() -> &'static Catalog {
    static C: OnceLock<Catalog> = OnceLock::new();
    C.get_or_init(|| {
        let site = site::load(&repo_path("dnsd/tests/data/site.yaml")).expect("test site");
        let zones = dnsd::zone::from_site(&site, 1).expect("zones");
        Catalog::build(
            zones,
            Options {
                allow_transfer: vec!["127.0.0.0/8".parse().unwrap()],
                forward: true,
                allow_forward: vec!["127.0.0.0/8".parse().unwrap()],
            },
        )
        .expect("catalog")
    })
}

/// Any datagram or TCP message through dnsd's core: the strict parser and
/// the answer from the test site's catalog. No panic; every reply carries
/// the request's ID, fits the transport's limit and decodes (hickory-proto).
pub fn dns_query(data: &[u8]) {
    // (dnsd's parser may accept what hickory-proto refuses: it does not
    // interpret the RDATA of records other than SOA and OPT in a request,
    // e.g. an unknown type with class 256. So no equivalence is asserted.)
    let mut out = Vec::new();
    for (t, limit) in [(Transport::Udp, 1232), (Transport::Tcp, 65535)] {
        if let Action::Reply { .. } =
            dns_catalog().answer(data, t, "127.0.0.1".parse().unwrap(), &mut out)
        {
            assert!(out.len() >= 12 && out.len() <= limit);
            assert_eq!(out[..2], data[..2]);
            hickory_proto::op::Message::from_vec(&out).expect("replies decode");
        }
    }
}

/// Any bytes as the body of `POST /v1/nodes` (and so of an adopt, which
/// ends in the same parse): `controller::parse_create` on the bytes as
/// they come, and on the JSON the handler makes of them (the provider
/// section's defaults from the site filled in first). No panic; a body it
/// accepts round-trips: the NodeSpec serialized parses to the same value,
/// and the spec with its provider, serialized, is accepted again as the
/// same node and provider (the store keeps exactly that form).
///
/// `POST /v1/cluster/destroy`'s body has no parse function of its own (a
/// private serde struct inside the handler), so it has no target.
/// A CertificateSigningRequest object as the cluster lists it: parsed and
/// decided for a node that has every fact the rules ask for (booted here,
/// its Ignition fetched from its own address 10.77.0.20). No panic; an
/// approval only for a kubelet signer, a subject naming that node, and, for
/// serving, SANs that are its names or its address.
pub fn csr_object(data: &[u8]) {
    use controller::cluster::csr::{decide, parse_request, Csr, Decision, Ignition, NodeFacts};
    let _ = parse_request(&String::from_utf8_lossy(data));
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let Some(csr) = Csr::parse(&v) else {
        return;
    };
    let domain = "lab.example.test";
    let address: std::net::IpAddr = [10, 77, 0, 20].into();
    let facts = |name: &str| {
        Some(NodeFacts {
            name: name.to_string(),
            addresses: vec![address],
            ignition: Ignition::FromNode,
        })
    };
    if let Decision::Approve { node, .. } = decide(&csr, domain, facts) {
        let r = csr.request.as_ref().expect("approved: its request was read");
        let claimed = csr.claimed().expect("approved: its subject names a node");
        assert_eq!(
            controller::cluster::csr::node_name(claimed, domain),
            node,
            "approved for another node than its subject names"
        );
        assert!(
            csr.signer == "kubernetes.io/kube-apiserver-client-kubelet"
                || csr.signer == "kubernetes.io/kubelet-serving",
            "approved for signer {}",
            csr.signer
        );
        let fqdn = format!("{node}.{domain}");
        assert!(
            r.dns.iter().all(|d| *d == node || *d == fqdn),
            "approved with a foreign DNS SAN: {:?}",
            r.dns
        );
        assert!(
            r.ips.iter().all(|ip| *ip == address),
            "approved with a foreign IP SAN: {:?}",
            r.ips
        );
        assert!(r.other_sans.is_empty(), "approved with {:?}", r.other_sans);
    }
}

pub fn api_json(data: &[u8]) {
    create_body(data);
    if let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(data) {
        controller::providers::fill_defaults(&mut v, lab_site());
        create_body(&serde_json::to_vec(&v).expect("a JSON value serializes"));
    }
}

fn create_body(body: &[u8]) {
    use controller::{parse_create, providers::BootKind, NodeSpec};
    let Ok((spec, provider)) = parse_create(body) else {
        return;
    };
    let text = serde_json::to_vec(&spec).expect("a NodeSpec serializes");
    let again: NodeSpec = serde_json::from_slice(&text).expect("a serialized NodeSpec parses");
    assert_eq!(again, spec, "the NodeSpec does not round-trip");
    let mut whole = serde_json::to_value(&spec).expect("a NodeSpec serializes");
    if let Some(p) = &provider {
        let p = serde_json::to_value(p).expect("a provider spec serializes");
        BootKind::of_provider(&p);
        whole["provider"] = p;
    }
    let body = serde_json::to_vec(&whole).expect("a JSON value serializes");
    match parse_create(&body) {
        Ok((s, p)) => {
            assert_eq!(s, spec, "the node changed on a second parse");
            assert_eq!(p, provider, "the provider changed on a second parse");
        }
        Err(e) => panic!("an accepted body, serialized again, is refused: {e}"),
    }
}

/// Any bytes as a site file at examples/lab/site.yaml (so the files a site
/// names, relative to it, are the lab's: its Ignition, install-configs
/// named `../openshift/...`). No panic; an error always names at least one
/// problem, and every problem has a reason. A site that validates also
/// gives dnsd its zones (or a clean error).
pub fn site_yaml(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match site::load_text(&repo_path("examples/lab/site.yaml"), &text) {
        Ok(s) => {
            let _ = dnsd::zone::from_site(&s, 1);
        }
        Err(e) => {
            assert!(!e.problems.is_empty(), "an error without a problem");
            for p in &e.problems {
                assert!(
                    !p.reason.trim().is_empty(),
                    "a problem without a reason: {p:?}"
                );
            }
        }
    }
}

/// Any bytes as CoreOS stream metadata (what `images fetch` downloads, or
/// the operator's `streamUrl` file). No panic; what parses serializes and
/// parses to the same document; selecting every format of every platform
/// either fails cleanly or gives plain file names and 64-hex-digit sums;
/// every cloud image the document lists is found again by its own keys.
pub fn stream_json(data: &[u8]) {
    use images::cloud::CloudCatalog;
    use images::stream::{is_sha256, Stream};
    let Ok(s) = Stream::parse(data) else { return };
    let text = serde_json::to_vec(&s).expect("a stream serializes");
    let again = Stream::parse(&text).expect("a serialized stream parses");
    assert_eq!(again, s, "the stream document does not round-trip");
    for (arch, a) in &s.architectures {
        for (platform, p) in &a.artifacts {
            let formats: Vec<String> = p.formats.keys().cloned().collect();
            if let Ok(selected) = s.select(arch, platform, &formats) {
                for x in selected {
                    assert!(site::catalog::is_component(x.artifact.file_name()));
                    assert!(is_sha256(&x.artifact.sha256));
                }
            }
        }
    }
    let catalog = CloudCatalog::from_stream(&s);
    for i in &catalog.images {
        if let Err(e) = catalog.image_id(&i.provider, &i.region, &i.version, &i.arch) {
            panic!("a listed image is not found by its own keys: {e}");
        }
    }
    for provider in ["aws", "aliyun", "powervs", "ibmcloud", "gcp"] {
        let _ = catalog.to_cloud_profile_config(provider, "v1alpha1");
    }
}

/// Any bytes as bootd's lease file (`leases.jsonl`, as a crash may leave
/// it). No panic; the table it recovers, written back as bootd compacts it
/// and recovered again, is the same table: the same file, no unreadable
/// line, and every address held by the same MAC.
pub fn lease_file(data: &[u8]) {
    let (t, _) = leases::recover(data).expect("reading memory does not fail");
    let written = leases::render(&t).expect("a table renders");
    let (t2, bad) = leases::recover(&written[..]).expect("reading memory does not fail");
    assert_eq!(bad, 0, "the compacted file has unreadable lines");
    let rewritten = leases::render(&t2).expect("a table renders");
    assert_eq!(
        String::from_utf8_lossy(&rewritten),
        String::from_utf8_lossy(&written),
        "the recovered table, compacted and recovered again, differs"
    );
    for l in t.leases().chain(t.declined()) {
        assert_eq!(
            t2.holder(l.ip),
            t.holder(l.ip),
            "{} is held by another MAC after compaction",
            l.ip
        );
    }
}

/// An inspection agent's report (`POST /inventory/<node>`, any bytes from
/// the provisioning network) and a wipe report: a report bootd accepts
/// round-trips, and the boot it leads to, for hints of every kind, names
/// an install disk the machine reported, by a name that is one kernel
/// argument; never a panic.
pub fn inventory_report(data: &[u8]) {
    let _ = bootd::inventory::parse_wipe(data);
    let Ok(inv) = bootd::inventory::parse_inventory(data) else {
        return;
    };
    let again = serde_json::to_vec(&inv).expect("an inventory serializes");
    assert_eq!(
        bootd::inventory::parse_inventory(&again).expect("an accepted inventory parses again"),
        inv
    );
    let _ = bootd::inventory::summary(&inv);
    let site = lab_site();
    let mut node = site.node("worker-0").expect("the lab's worker-0").clone();
    let first = inv.disks.first();
    let hints = [
        site::hardware::RootDeviceHints::device("/dev/sda"),
        site::hardware::RootDeviceHints {
            serial_number: first.map(|d| d.serial.clone()),
            min_size_gigabytes: Some(1),
            ..Default::default()
        },
        site::hardware::RootDeviceHints {
            model: Some(String::new()),
            rotational: first.map(|d| d.rotational),
            ..Default::default()
        },
    ];
    for h in hints {
        node.root_device_hints = Some(h);
        let mut with_agent = site.clone();
        with_agent.inspection.agents = vec![(node.arch, "agent".into())];
        if let bootd::plan::Plan::Install { device, .. } =
            bootd::plan::plan(&with_agent, &node, Some(&inv), None)
        {
            assert!(
                inv.disks.iter().any(|d| [&d.name, &d.by_id, &d.by_path].contains(&&device))
                    || node.root_device_hints.as_ref().and_then(|h| h.device_name.as_ref()) == Some(&device),
                "installs to {device:?}, which the machine did not report"
            );
            assert!(
                !device.is_empty() && !device.contains(char::is_whitespace),
                "{device:?} is not one kernel argument"
            );
        }
    }
}
