//! The pure core against the test site (`tests/data/site.yaml`): every kind
//! of answer, pinned as golden dumps in `tests/golden/answers.txt`
//! (`UPDATE_GOLDEN=1` rewrites them), plus properties the dumps cannot show.

use super::*;

use crate::text;
use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
use hickory_proto::rr::{DNSClass, RecordType};
use std::path::Path;

fn data(p: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

pub(crate) fn test_catalog() -> Catalog {
    let site = site::load(&data("tests/data/site.yaml")).expect("test site");
    let zones = crate::zone::from_site(&site, 2024010101).unwrap();
    Catalog::build(
        zones,
        Options {
            allow_transfer: vec!["127.0.0.0/8".parse().unwrap()],
            forward: false,
            allow_forward: vec![],
        },
    )
    .unwrap()
}

pub(crate) fn query(name: &str, t: RecordType, edns: Option<u16>) -> Vec<u8> {
    let mut m = Message::new();
    m.set_id(0x4242)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(true);
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), t));
    if let Some(size) = edns {
        let mut e = Edns::new();
        e.set_max_payload(size);
        m.set_edns(e);
    }
    m.to_vec().unwrap()
}

fn ask(c: &Catalog, q: &[u8], tr: Transport) -> (Action, Vec<u8>) {
    let mut out = Vec::new();
    let a = c.answer(q, tr, "127.0.0.1".parse().unwrap(), &mut out);
    (a, out)
}

const CASES: &[(&str, &str, RecordType, Option<u16>, Transport)] = &[
    (
        "api A",
        "api.lab.example.test.",
        RecordType::A,
        None,
        Transport::Udp,
    ),
    (
        "mixed case keeps the question's case",
        "API.Lab.Example.TEST.",
        RecordType::A,
        Some(1232),
        Transport::Udp,
    ),
    (
        "api-int",
        "api-int.lab.example.test.",
        RecordType::A,
        None,
        Transport::Udp,
    ),
    (
        "wildcard",
        "console-openshift-console.apps.lab.example.test.",
        RecordType::A,
        None,
        Transport::Udp,
    ),
    (
        "wildcard, two labels below",
        "a.b.apps.lab.example.test.",
        RecordType::A,
        None,
        Transport::Udp,
    ),
    (
        "wildcard NODATA",
        "x.apps.lab.example.test.",
        RecordType::TXT,
        None,
        Transport::Udp,
    ),
    (
        "wildcard AAAA (the ingress VIP's IPv6 address)",
        "x.apps.lab.example.test.",
        RecordType::AAAA,
        None,
        Transport::Udp,
    ),
    (
        "a node's AAAA",
        "master-0.lab.example.test.",
        RecordType::AAAA,
        None,
        Transport::Udp,
    ),
    (
        "ip6.arpa PTR of a node",
        "1.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.7.7.0.0.0.0.d.f.ip6.arpa.",
        RecordType::PTR,
        None,
        Transport::Udp,
    ),
    (
        "the wildcard's parent is an empty non-terminal",
        "apps.lab.example.test.",
        RecordType::A,
        None,
        Transport::Udp,
    ),
    (
        "NXDOMAIN",
        "nope.lab.example.test.",
        RecordType::A,
        Some(4096),
        Transport::Udp,
    ),
    (
        "NODATA",
        "master-0.lab.example.test.",
        RecordType::TXT,
        None,
        Transport::Udp,
    ),
    (
        "node",
        "master-0.lab.example.test.",
        RecordType::A,
        None,
        Transport::Udp,
    ),
    (
        "apex SOA",
        "lab.example.test.",
        RecordType::SOA,
        None,
        Transport::Udp,
    ),
    (
        "apex NS with glue",
        "lab.example.test.",
        RecordType::NS,
        None,
        Transport::Udp,
    ),
    (
        "apex MX with additional",
        "lab.example.test.",
        RecordType::MX,
        None,
        Transport::Udp,
    ),
    (
        "apex TXT",
        "lab.example.test.",
        RecordType::TXT,
        None,
        Transport::Udp,
    ),
    (
        "SRV (target in additional)",
        "_etcd-server-ssl._tcp.lab.example.test.",
        RecordType::SRV,
        None,
        Transport::Udp,
    ),
    (
        "empty non-terminal",
        "_tcp.lab.example.test.",
        RecordType::SRV,
        None,
        Transport::Udp,
    ),
    (
        "CNAME chain",
        "www.lab.example.test.",
        RecordType::A,
        None,
        Transport::Udp,
    ),
    (
        "CNAME chain, NODATA at the end",
        "www.lab.example.test.",
        RecordType::MX,
        None,
        Transport::Udp,
    ),
    (
        "CNAME asked for",
        "www.lab.example.test.",
        RecordType::CNAME,
        None,
        Transport::Udp,
    ),
    (
        "CNAME to a missing name: NXDOMAIN (RFC 6604)",
        "dangling.lab.example.test.",
        RecordType::A,
        None,
        Transport::Udp,
    ),
    (
        "CNAME out of the zones",
        "elsewhere.lab.example.test.",
        RecordType::A,
        None,
        Transport::Udp,
    ),
    (
        "referral",
        "host.sub.lab.example.test.",
        RecordType::A,
        None,
        Transport::Udp,
    ),
    (
        "referral at the cut",
        "sub.lab.example.test.",
        RecordType::NS,
        None,
        Transport::Udp,
    ),
    (
        "DS at the cut: the parent's NODATA",
        "sub.lab.example.test.",
        RecordType::DS,
        None,
        Transport::Udp,
    ),
    (
        "glue is occluded",
        "ns.sub.lab.example.test.",
        RecordType::A,
        None,
        Transport::Udp,
    ),
    (
        "PTR",
        "11.0.77.10.in-addr.arpa.",
        RecordType::PTR,
        None,
        Transport::Udp,
    ),
    (
        "PTR of the api VIP",
        "2.0.77.10.in-addr.arpa.",
        RecordType::PTR,
        None,
        Transport::Udp,
    ),
    (
        "PTR from dns.records",
        "5.0.77.10.in-addr.arpa.",
        RecordType::PTR,
        None,
        Transport::Udp,
    ),
    (
        "reverse NXDOMAIN",
        "99.0.77.10.in-addr.arpa.",
        RecordType::PTR,
        None,
        Transport::Udp,
    ),
    (
        "ANY over UDP: one RRset (RFC 8482)",
        "lab.example.test.",
        RecordType::ANY,
        None,
        Transport::Udp,
    ),
    (
        "ANY over TCP: one RRset too",
        "lab.example.test.",
        RecordType::ANY,
        None,
        Transport::Tcp,
    ),
    (
        "large TXT without EDNS: TC",
        "big.lab.example.test.",
        RecordType::TXT,
        None,
        Transport::Udp,
    ),
    (
        "large TXT with EDNS 1232",
        "big.lab.example.test.",
        RecordType::TXT,
        Some(1232),
        Transport::Udp,
    ),
    (
        "large TXT over TCP",
        "big.lab.example.test.",
        RecordType::TXT,
        None,
        Transport::Tcp,
    ),
    (
        "outside every zone: REFUSED",
        "www.example.org.",
        RecordType::A,
        None,
        Transport::Udp,
    ),
    (
        "IXFR over UDP: the SOA",
        "lab.example.test.",
        RecordType::IXFR,
        None,
        Transport::Udp,
    ),
    (
        "AXFR over UDP: FORMERR",
        "lab.example.test.",
        RecordType::AXFR,
        None,
        Transport::Udp,
    ),
    (
        "AXFR of a name that is not an apex",
        "api.lab.example.test.",
        RecordType::AXFR,
        None,
        Transport::Tcp,
    ),
];

#[test]
fn golden_answers() {
    let c = test_catalog();
    let mut got = String::new();
    for (what, name, t, edns, tr) in CASES {
        let (a, out) = ask(&c, &query(name, *t, *edns), *tr);
        assert!(matches!(a, Action::Reply { .. }), "{what}: {a:?}");
        got.push_str(&format!(
            "### {what}: {name} {t} edns={edns:?} {tr:?}\n{}\n",
            text::message(&out)
        ));
    }
    testkit::golden::check(&data("tests/golden/answers.txt"), &got);
}

fn decode(b: &[u8]) -> Message {
    Message::from_vec(b).unwrap()
}

#[test]
fn answers_keep_the_question_bytes_and_case() {
    let c = test_catalog();
    let q = query("ApI.lAb.ExAmPlE.tEsT.", RecordType::A, None);
    let (_, out) = ask(&c, &q, Transport::Udp);
    let m = decode(&out);
    assert_eq!(m.queries()[0].name().to_ascii(), "ApI.lAb.ExAmPlE.tEsT.");
    assert_eq!(m.answers()[0].name().to_ascii(), "ApI.lAb.ExAmPlE.tEsT.");
    assert_eq!(m.id(), 0x4242);
    assert!(m.authoritative() && m.recursion_desired() && !m.recursion_available());
}

#[test]
fn wildcard_answers_carry_the_query_name() {
    let c = test_catalog();
    for name in [
        "x.apps.lab.example.test.",
        "a-much-longer-name-than-the-others.apps.lab.example.test.",
        "a.b.c.apps.lab.example.test.",
    ] {
        let (_, out) = ask(&c, &query(name, RecordType::A, None), Transport::Udp);
        let m = decode(&out);
        assert_eq!(m.answers().len(), 1, "{name}");
        assert_eq!(m.answers()[0].name().to_ascii(), name);
        assert_eq!(m.answers()[0].data().to_string(), "10.77.0.3");
    }
}

#[test]
fn negative_answers_use_the_negative_ttl() {
    let c = test_catalog();
    for (name, rcode) in [
        ("nope.lab.example.test.", 3),
        ("master-0.lab.example.test.", 0),
    ] {
        let (_, out) = ask(&c, &query(name, RecordType::TXT, None), Transport::Udp);
        let m = decode(&out);
        assert_eq!(u16::from(m.response_code()), rcode);
        assert_eq!(m.name_servers().len(), 1);
        assert_eq!(m.name_servers()[0].record_type(), RecordType::SOA);
        assert_eq!(
            m.name_servers()[0].ttl(),
            30,
            "min(SOA TTL 300, minimum 30)"
        );
    }
}

#[test]
fn edns_badvers_and_do_bit() {
    let c = test_catalog();
    let mut m = Message::new();
    m.set_id(7).add_query(Query::query(
        Name::from_ascii("api.lab.example.test.").unwrap(),
        RecordType::A,
    ));
    let mut e = Edns::new();
    e.set_version(1);
    e.set_dnssec_ok(true);
    m.set_edns(e);
    let (_, out) = ask(&c, &m.to_vec().unwrap(), Transport::Udp);
    let r = decode(&out);
    assert_eq!(u16::from(r.response_code()), 16, "BADVERS");
    assert!(r.answers().is_empty());
    let edns = r.extensions().as_ref().unwrap();
    assert_eq!(edns.version(), 0);
    assert!(edns.flags().dnssec_ok);
}

#[test]
fn no_version_disclosure() {
    let c = test_catalog();
    let mut m = Message::new();
    let mut q = Query::query(Name::from_ascii("version.bind.").unwrap(), RecordType::TXT);
    q.set_query_class(DNSClass::CH);
    m.set_id(9).add_query(q);
    let (_, out) = ask(&c, &m.to_vec().unwrap(), Transport::Udp);
    let r = decode(&out);
    assert_eq!(r.response_code(), hickory_proto::op::ResponseCode::Refused);
    assert!(r.answers().is_empty());
}

/// RFC 1034 §5.3.2 (and NSD): an answer to a query of class ANY is not
/// authoritative; the same question in class IN is.
#[test]
fn class_any_answers_are_not_authoritative() {
    let c = test_catalog();
    for (class, aa) in [(DNSClass::IN, true), (DNSClass::ANY, false)] {
        let mut m = Message::new();
        let mut q = Query::query(
            Name::from_ascii("api.lab.example.test.").unwrap(),
            RecordType::A,
        );
        q.set_query_class(class);
        m.set_id(7).add_query(q);
        let (_, out) = ask(&c, &m.to_vec().unwrap(), Transport::Udp);
        let r = decode(&out);
        assert_eq!(r.response_code(), hickory_proto::op::ResponseCode::NoError);
        assert_eq!(r.answers().len(), 1, "{class:?}");
        assert_eq!(r.authoritative(), aa, "{class:?}");
    }
}

#[test]
fn transfers_follow_the_acl() {
    let c = test_catalog();
    let q = query("lab.example.test.", RecordType::AXFR, None);
    let mut out = Vec::new();
    assert_eq!(
        c.answer(&q, Transport::Tcp, "127.0.0.1".parse().unwrap(), &mut out),
        Action::Transfer {
            zone: 0,
            ixfr_serial: None
        }
    );
    let a = c.answer(&q, Transport::Tcp, "192.0.2.1".parse().unwrap(), &mut out);
    assert_eq!(
        a,
        Action::Reply {
            rcode: codec::RCODE_REFUSED,
            truncated: false
        }
    );
}

/// The probe: with upstreams, dnsd forwarded anyone's queries (an open
/// amplifier). Only the allowed networks are forwarded; anyone else asking
/// for a name outside the zones is REFUSED.
#[test]
fn only_allowed_networks_are_forwarded() {
    let site = site::load(&data("tests/data/site.yaml")).expect("test site");
    let zones = crate::zone::from_site(&site, 2024010101).unwrap();
    let c = Catalog::build(
        zones,
        Options {
            allow_transfer: vec![],
            forward: true,
            allow_forward: vec![
                "10.77.0.0/24".parse().unwrap(),
                "127.0.0.0/8".parse().unwrap(),
            ],
        },
    )
    .unwrap();
    let q = query("example.org.", RecordType::A, None);
    let mut out = Vec::new();
    for ok in ["10.77.0.20", "127.0.0.1"] {
        assert_eq!(
            c.answer(&q, Transport::Udp, ok.parse().unwrap(), &mut out),
            Action::Forward,
            "{ok}"
        );
    }
    assert_eq!(
        c.answer(
            &q,
            Transport::Udp,
            "198.51.100.7".parse().unwrap(),
            &mut out
        ),
        Action::Reply {
            rcode: codec::RCODE_REFUSED,
            truncated: false
        }
    );
    // The site's own default: its networks and loopback.
    let d = &site.dns;
    assert!(d
        .allow_forward
        .iter()
        .any(|n| n.contains(&"127.0.0.1".parse::<std::net::IpAddr>().unwrap())));
    assert!(!d
        .allow_forward
        .iter()
        .any(|n| n.contains(&"198.51.100.7".parse::<std::net::IpAddr>().unwrap())));
}

#[test]
fn other_opcodes_are_not_implemented() {
    let c = test_catalog();
    let mut q = query("lab.example.test.", RecordType::SOA, None);
    q[2] = (q[2] & 0x87) | (5 << 3); // UPDATE
    let (a, _) = ask(&c, &q, Transport::Udp);
    assert_eq!(
        a,
        Action::Reply {
            rcode: codec::RCODE_NOTIMP,
            truncated: false
        }
    );
}

#[test]
fn malformed_input_never_panics() {
    let c = test_catalog();
    let base = query("api.lab.example.test.", RecordType::A, Some(1232));
    let mut rng = 0x2545F4914F6CDD1Du64;
    let mut out = Vec::new();
    for i in 0..20000 {
        let mut q = base.clone();
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let flips = 1 + (rng % 4) as usize;
        for k in 0..flips {
            let at = ((rng >> (8 * k)) as usize) % q.len();
            q[at] ^= (rng >> (16 + k)) as u8 | 1;
        }
        if i % 7 == 0 {
            q.truncate((rng as usize) % q.len());
        }
        match c.answer(&q, Transport::Udp, "127.0.0.1".parse().unwrap(), &mut out) {
            Action::Reply { .. } => {
                assert!(out.len() >= 12 && out.len() <= 1232);
                assert_eq!(out[..2], q[..2], "answers carry the query's id");
            }
            Action::Drop | Action::Forward | Action::Transfer { .. } => {}
        }
    }
}

#[test]
fn compression_pointers_are_all_backwards_and_decodable_for_every_template() {
    // Every node and type, in a long and a short spelling.
    let c = test_catalog();
    let names = [
        "lab.example.test.",
        "master-0.lab.example.test.",
        "www.lab.example.test.",
        "x.apps.lab.example.test.",
        "sub.lab.example.test.",
    ];
    for n in names {
        for t in [
            RecordType::A,
            RecordType::AAAA,
            RecordType::MX,
            RecordType::NS,
            RecordType::SOA,
            RecordType::TXT,
            RecordType::SRV,
            RecordType::ANY,
        ] {
            let (_, out) = ask(&c, &query(n, t, Some(1232)), Transport::Tcp);
            let m = Message::from_vec(&out).unwrap_or_else(|e| panic!("{n} {t}: {e}"));
            assert_eq!(m.queries()[0].name().to_ascii(), n);
        }
    }
}
