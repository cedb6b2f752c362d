//! The `dns:` section: defaults, names made absolute, and every problem
//! reported at once with its key path.

mod common;

use common::assert_problems;
use std::path::Path;

fn load(dns: &str) -> Result<site::Site, site::SiteError> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("w.ign"),
        r#"{"ignition":{"version":"3.2.0"}}"#,
    )
    .unwrap();
    let text = format!(
        "cluster: {{ name: lab, baseDomain: example.test }}\n\
         host: {{ http: {{ listen: 127.0.0.1:8080, url: http://10.77.0.1:8080 }} }}\n\
         networks: [ {{ subnet: 10.77.0.0/24, dnsServers: [10.77.0.1] }} ]\n\
         vips: {{ api: 10.77.0.2, ingress: 10.77.0.3 }}\n\
         images: {{ sets: {{ x: {{ arch: x86_64, kernel: k, initramfs: i }} }} }}\n\
         nodes: [ {{ name: m0, role: worker, live: true, macs: [\"52:54:00:00:00:01\"], ip: 10.77.0.10 }} ]\n\
         ignition: {{ roles: {{ worker: w.ign }} }}\n{dns}"
    );
    let path = dir.path().join("site.yaml");
    std::fs::write(&path, text).unwrap();
    site::load(Path::new(&path))
}

#[test]
fn defaults_without_a_dns_section() {
    let s = load("").unwrap();
    assert_eq!(s.dns.listen, vec!["0.0.0.0:53".parse().unwrap()]);
    assert_eq!(
        s.dns.nameservers,
        vec![site::dns::Nameserver {
            name: "ns1.lab.example.test".into(),
            ip: "10.77.0.1".parse().unwrap()
        }]
    );
    assert_eq!(s.dns.ttl.as_secs(), 300);
    assert_eq!(s.dns.negative_ttl.as_secs(), 30);
    assert!(s.dns.records.is_empty() && s.dns.upstreams.is_empty());
}

#[test]
fn records_are_made_absolute() {
    let s = load(
        "dns:\n  listen: [127.0.0.1:5353]\n  ttl: 1m\n  allowTransfer: [10.77.0.9]\n  notify: [10.77.0.9]\n  records:\n\
         \x20   - { name: registry, type: a, value: 10.77.0.5, ttl: 30s }\n\
         \x20   - { name: _etcd._tcp, type: SRV, value: \"0 10 2380 m0\" }\n\
         \x20   - { name: \"@\", type: MX, value: \"10 mail.example.org.\" }\n\
         \x20   - { name: 10.77.0.5, type: PTR, value: registry }\n\
         \x20   - { name: sub, type: NS, value: ns.sub }\n",
    )
    .unwrap();
    use site::dns::RData;
    let r = &s.dns.records;
    assert_eq!(r[0].name, "registry.lab.example.test");
    assert_eq!(r[0].data, RData::A("10.77.0.5".parse().unwrap()));
    assert_eq!(r[0].ttl.unwrap().as_secs(), 30);
    assert_eq!(
        r[1].data,
        RData::Srv {
            priority: 0,
            weight: 10,
            port: 2380,
            target: "m0.lab.example.test".into()
        }
    );
    assert_eq!(r[2].name, "lab.example.test");
    assert_eq!(
        r[2].data,
        RData::Mx {
            preference: 10,
            exchange: "mail.example.org".into()
        }
    );
    assert_eq!(r[3].name, "5.0.77.10.in-addr.arpa");
    assert_eq!(r[4].data, RData::Ns("ns.sub.lab.example.test".into()));
    assert_eq!(
        s.dns.allow_transfer,
        vec!["10.77.0.9/32".parse::<ipnet::IpNet>().unwrap()]
    );
    assert_eq!(s.dns.notify, vec!["10.77.0.9:53".parse().unwrap()]);
    assert_eq!(s.dns.ttl.as_secs(), 60);
}

#[test]
fn every_dns_problem_at_once() {
    let err = load(
        "dns:\n  listen: [nope]\n  ttl: forever\n  colour: red\n  upstreams: [x]\n  allowTransfer: [10.0.0.0/99]\n  records:\n\
         \x20   - { name: api, type: CNAME, value: elsewhere }\n\
         \x20   - { name: www.example.org., type: A, value: 10.0.0.1 }\n\
         \x20   - { name: x, type: A, value: not-an-ip }\n\
         \x20   - { name: y, type: HINFO, value: a }\n\
         \x20   - { name: \"@\", type: NS, value: ns9 }\n\
         \x20   - { name: c, type: CNAME, value: a }\n\
         \x20   - { name: c, type: TXT, value: hi }\n\
         \x20   - { name: bad..name, type: A, value: 10.0.0.1 }\n",
    )
    .unwrap_err();
    let expect = [
        "dns.colour: unknown key",
        "dns.listen[0]: \"nope\" is not an address:port",
        "dns.ttl: \"forever\" is not a duration",
        "dns.upstreams[0]: \"x\" is not an address",
        "dns.allowTransfer[0]: \"10.0.0.0/99\" is not an address or CIDR",
        "dns.records[0].name: a CNAME cannot share its name api.lab.example.test with the api record",
        "dns.records[1].name: www.example.org is outside every zone dnsd serves (lab.example.test, 0.77.10.in-addr.arpa)",
        "dns.records[2].value: \"not-an-ip\" is not an IPv4 address",
        "dns.records[3].type: \"HINFO\" is not one of",
        "dns.records[4].name: the zone apex's NS records come from dns.nameservers",
        "dns.records[6].name: c.lab.example.test: a CNAME cannot share its name with other records (dns.records[5])",
        "dns.records[7].name: \"bad..name\" is not a DNS name",
    ];
    assert_problems(&err, &expect);
    assert_eq!(err.problems.len(), expect.len(), "{err}");
    assert!(err.problems.iter().all(|p| p.file.ends_with("site.yaml")));
}
