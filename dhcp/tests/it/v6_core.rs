//! DHCPv6 `answer` without sockets, on the dual-stack lab site, with
//! golden dumps of the replies in `dhcp/tests/golden/dhcp6-*.txt`.

use dhcp::v6::core::{answer, Outcome, Request};
use dhcp::v6::leases::{LeaseState, Table};
use dhcp::v6::wire::{self, Hop, Msg};
use site::Site;
use std::fmt::Write;
use std::net::Ipv6Addr;

const SERVER_ID: &[u8] = &[0, 4, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];

fn lab() -> Site {
    site::load(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab-dual/site.yaml"),
    )
    .unwrap()
}

/// DUID-LLT of `mac`.
fn duid(mac: &str) -> Vec<u8> {
    let m: site::Mac = mac.parse().unwrap();
    let mut d = vec![0, 1, 0, 1, 0x2a, 0x2b, 0x2c, 0x2d];
    d.extend_from_slice(&m.0);
    d
}

fn msg(t: u8, client: &[u8]) -> Msg {
    let mut m = Msg::new(t, [0x12, 0x34, 0x56]);
    m.push(wire::OPT_CLIENT_ID, client.to_vec());
    m
}

fn ia(m: &mut Msg, addr: Option<&str>) {
    let mut inner = Vec::new();
    if let Some(a) = addr {
        wire::put(
            &mut inner,
            wire::OPT_IAADDR,
            &wire::ia_addr(a.parse().unwrap(), 0, 0),
        );
    }
    m.push(wire::OPT_IA_NA, wire::ia_na(7, 0, 0, &inner));
}

fn server_id(m: &mut Msg) {
    m.push(wire::OPT_SERVER_ID, SERVER_ID.to_vec());
}

/// What UEFI firmware adds: arch (61), vendor class, asks for 59.
fn firmware(m: &mut Msg, arch: u16, class: &str) {
    m.push(wire::OPT_CLIENT_ARCH, arch.to_be_bytes().to_vec());
    let mut vc = 343u32.to_be_bytes().to_vec();
    vc.extend_from_slice(&wire::class_data(&[format!(
        "{class}:Arch:{arch:05}:UNDI:003016"
    )
    .as_bytes()]));
    m.push(wire::OPT_VENDOR_CLASS, vc);
    asks_boot(m);
}

fn asks_boot(m: &mut Msg) {
    m.push(wire::OPT_ORO, vec![0, 59, 0, 23]);
}

fn ipxe(m: &mut Msg) {
    m.push(wire::OPT_USER_CLASS, wire::class_data(&[b"iPXE"]));
}

const LL: &str = "fe80::aaaa:bbff:fecc:dddd";

fn ask(site: &Site, t: &mut Table, m: &Msg, hops: &[Hop], now: u64) -> Outcome {
    // Through the wire and back, as the server sees it.
    let m = Msg::parse(&m.encode()).unwrap();
    let req = Request {
        msg: &m,
        hops,
        src: LL.parse().unwrap(),
    };
    answer(site, t, SERVER_ID, &req, now)
}

/// A stable dump: kind, reason, the reply's options in order, commits.
fn dump(o: &Outcome) -> String {
    let mut s = format!("kind: {}\nreason: {}\n", o.kind, o.reason);
    if let Some(m) = &o.reply {
        let _ = writeln!(s, "type: {}\nxid: {:?}", m.ty, m.xid);
        for (c, v) in &m.opts {
            let text = match *c {
                wire::OPT_BOOTFILE_URL | wire::OPT_STATUS_CODE => {
                    format!("{:?}", String::from_utf8_lossy(v))
                }
                _ => v.iter().map(|b| format!("{b:02x}")).collect::<String>(),
            };
            let _ = writeln!(s, "option {c}: {text}");
            if *c == wire::OPT_IA_NA {
                for (ic, iv) in wire::options(&v[12..]).unwrap() {
                    let _ = writeln!(
                        s,
                        "  option {ic}: {}",
                        iv.iter().map(|b| format!("{b:02x}")).collect::<String>()
                    );
                }
            }
        }
    }
    for l in &o.commit {
        let _ = writeln!(
            s,
            "commit: {} {} {:?} until {}",
            l.ia.duid, l.ip, l.state, l.expires
        );
    }
    s
}

fn golden(name: &str, got: &str) {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("dhcp6-{name}.txt"));
    testkit::golden::check(&p, got);
}

fn opt59(o: &Outcome) -> Option<String> {
    let v = o.reply.as_ref()?.get(wire::OPT_BOOTFILE_URL)?;
    Some(String::from_utf8_lossy(v).into_owned())
}

/// The first address the reply grants (valid lifetime above 0).
fn addr(o: &Outcome) -> Option<Ipv6Addr> {
    let ia = o.reply.as_ref()?.get(wire::OPT_IA_NA)?;
    wire::options(&ia[12..])
        .unwrap()
        .into_iter()
        .find_map(|(c, a)| {
            (c == wire::OPT_IAADDR && a[20..24] != [0, 0, 0, 0]).then(|| {
                let mut o = [0u8; 16];
                o.copy_from_slice(&a[..16]);
                Ipv6Addr::from(o)
            })
        })
}

fn status(o: &Outcome) -> Option<u16> {
    let v = o.reply.as_ref()?.get(wire::OPT_STATUS_CODE)?;
    Some(u16::from_be_bytes([v[0], v[1]]))
}

#[test]
fn uefi_pxe_solicit_gets_its_reservation_and_a_tftp_url_then_request_commits_it() {
    let site = lab();
    let mut t = Table::default();
    let mut m = msg(wire::SOLICIT, &duid("52:54:00:77:00:11"));
    ia(&mut m, None);
    firmware(&mut m, 7, "PXEClient");
    let o = ask(&site, &mut t, &m, &[], 1000);
    golden("uefi-pxe-advertise", &dump(&o));
    assert_eq!(o.reply.as_ref().unwrap().ty, wire::ADVERTISE);
    assert_eq!(addr(&o), Some("fd00:77::11".parse().unwrap()));
    assert_eq!(opt59(&o).as_deref(), Some("tftp://[fd00:77::1]/ipxe.efi"));
    assert!(o.commit.is_empty(), "an Advertise binds nothing");

    let mut r = msg(wire::REQUEST, &duid("52:54:00:77:00:11"));
    server_id(&mut r);
    ia(&mut r, Some("fd00:77::11"));
    firmware(&mut r, 7, "PXEClient");
    let o = ask(&site, &mut t, &r, &[], 1000);
    golden("uefi-pxe-reply", &dump(&o));
    assert_eq!(o.kind, "request");
    assert_eq!(o.node.as_deref(), Some("master-0"));
    assert_eq!(o.commit.len(), 1);
    assert_eq!(o.commit[0].expires, 1000 + 3600);
}

#[test]
fn ipxe_and_uefi_http_get_http_urls_of_the_ipv6_base() {
    let site = lab();
    let mut t = Table::default();
    let mut m = msg(wire::SOLICIT, &duid("52:54:00:77:00:10"));
    ia(&mut m, None);
    asks_boot(&mut m);
    ipxe(&mut m);
    let o = ask(&site, &mut t, &m, &[], 1000);
    golden("ipxe-advertise", &dump(&o));
    assert_eq!(
        opt59(&o).as_deref(),
        Some("http://[fd00:77::1]:8080/boot.ipxe")
    );

    let mut m = msg(wire::SOLICIT, &duid("52:54:00:77:00:10"));
    ia(&mut m, None);
    firmware(&mut m, 16, "HTTPClient");
    let o = ask(&site, &mut t, &m, &[], 1000);
    golden("uefi-http-advertise", &dump(&o));
    assert_eq!(
        opt59(&o).as_deref(),
        Some("http://[fd00:77::1]:8080/boot/ipxe.efi")
    );
    let vc = o.reply.unwrap().class_items(wire::OPT_VENDOR_CLASS);
    assert_eq!(vc, [b"HTTPClient".to_vec()]);
}

#[test]
fn rapid_commit_binds_at_once_and_a_client_without_59_gets_no_boot_url() {
    let site = lab();
    let mut t = Table::default();
    let mut m = msg(wire::SOLICIT, &duid("52:54:00:77:00:20"));
    ia(&mut m, None);
    m.push(wire::OPT_RAPID_COMMIT, vec![]);
    let o = ask(&site, &mut t, &m, &[], 1000);
    golden("rapid-commit", &dump(&o));
    let r = o.reply.as_ref().unwrap();
    assert_eq!(r.ty, wire::REPLY);
    assert!(r.get(wire::OPT_RAPID_COMMIT).is_some());
    assert_eq!(o.commit.len(), 1);
    assert_eq!(opt59(&o), None);
}

#[test]
fn an_unknown_client_gets_a_pool_address_keeps_it_on_renew_and_frees_it_on_release() {
    let site = lab();
    let mut t = Table::default();
    // DUID-UUID and a link-local address that is not EUI-64: no MAC.
    let client = [0u8, 4, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9];
    let mut r = msg(wire::REQUEST, &client);
    server_id(&mut r);
    ia(&mut r, None);
    let req = |m: &Msg, t: &mut Table, now| {
        let m = Msg::parse(&m.encode()).unwrap();
        answer(
            &site,
            t,
            SERVER_ID,
            &Request {
                msg: &m,
                hops: &[],
                src: "fe80::1".parse().unwrap(),
            },
            now,
        )
    };
    let o = req(&r, &mut t, 1000);
    let got = addr(&o).unwrap();
    assert_eq!(got, "fd00:77::1000".parse::<Ipv6Addr>().unwrap());
    assert_eq!(o.node, None);
    let mut renew = msg(wire::RENEW, &client);
    server_id(&mut renew);
    ia(&mut renew, Some("fd00:77::1000"));
    let o = req(&renew, &mut t, 2000);
    assert_eq!(addr(&o), Some(got));
    assert_eq!(o.commit[0].expires, 2000 + 3600);
    // Another client now gets the next address.
    let mut other = msg(wire::REQUEST, &[0, 4, 1]);
    server_id(&mut other);
    ia(&mut other, Some("fd00:77::1000"));
    let o = req(&other, &mut t, 2000);
    assert_eq!(
        addr(&o),
        Some("fd00:77::1001".parse().unwrap()),
        "not the held one"
    );
    let mut rel = msg(wire::RELEASE, &client);
    server_id(&mut rel);
    ia(&mut rel, Some("fd00:77::1000"));
    let o = req(&rel, &mut t, 2001);
    golden("release", &dump(&o));
    assert_eq!(o.commit[0].state, LeaseState::Released);
    assert_eq!(t.holder(got), None);
    assert_eq!(ia_status(&o), None, "released: no status in the IA");
    // Released again: the IA has no binding, and says so.
    let o = req(&rel, &mut t, 2002);
    assert!(o.commit.is_empty());
    assert_eq!(status(&o), Some(wire::STATUS_SUCCESS));
    assert_eq!(ia_status(&o), Some(wire::STATUS_NO_BINDING));
}

/// The status code inside the reply's first IA_NA.
fn ia_status(o: &Outcome) -> Option<u16> {
    let ia = o.reply.as_ref()?.get(wire::OPT_IA_NA)?;
    wire::options(&ia[12..])
        .unwrap()
        .into_iter()
        .find_map(|(c, v)| (c == wire::OPT_STATUS_CODE).then(|| u16::from_be_bytes([v[0], v[1]])))
}

#[test]
fn a_relayed_request_is_matched_by_option_79_on_the_relays_link() {
    let site = lab();
    let mut t = Table::default();
    let client = [0u8, 4, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7];
    let mut m = msg(wire::SOLICIT, &client);
    ia(&mut m, None);
    firmware(&mut m, 7, "PXEClient");
    let inner = m.encode();
    let mut fwd = vec![wire::RELAY_FORW, 0];
    fwd.extend_from_slice(&"fd00:77::fe".parse::<Ipv6Addr>().unwrap().octets());
    fwd.extend_from_slice(&"fe80::2".parse::<Ipv6Addr>().unwrap().octets());
    wire::put(&mut fwd, wire::OPT_INTERFACE_ID, b"port7");
    wire::put(
        &mut fwd,
        wire::OPT_CLIENT_LINKLAYER,
        &[0, 1, 0x52, 0x54, 0, 0x77, 0, 0x12],
    );
    wire::put(&mut fwd, wire::OPT_RELAY_MSG, &inner);
    let (hops, inner) = wire::unwrap(&fwd).unwrap();
    let m = Msg::parse(inner).unwrap();
    let req = Request {
        msg: &m,
        hops: &hops,
        src: "fd00:77::fe".parse().unwrap(),
    };
    let o = answer(&site, &mut t, SERVER_ID, &req, 1000);
    golden("relayed-advertise", &dump(&o));
    assert_eq!(o.node.as_deref(), Some("master-1"));
    assert_eq!(addr(&o), Some("fd00:77::12".parse().unwrap()));
    // A relay on a link in no site network: not answered.
    let mut far = hops.clone();
    far[0].link = "fd00:99::1".parse().unwrap();
    let req = Request {
        msg: &m,
        hops: &far,
        src: "fd00:99::1".parse().unwrap(),
    };
    let o = answer(&site, &mut t, SERVER_ID, &req, 1000);
    assert_eq!(o.kind, "ignored");
    assert!(o.reason.contains("fd00:99::1"), "{}", o.reason);
}

#[test]
fn an_eui64_link_local_address_names_a_duid_uuid_client() {
    // OVMF sends a DUID-UUID: the MAC is in its link-local address.
    let site = lab();
    let mut m = msg(
        wire::SOLICIT,
        &[0, 4, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5],
    );
    ia(&mut m, None);
    firmware(&mut m, 7, "PXEClient");
    let req = Request {
        msg: &m,
        hops: &[],
        src: "fe80::5054:ff:fe77:13".parse().unwrap(),
    };
    let o = answer(&site, &mut Table::default(), SERVER_ID, &req, 1000);
    assert_eq!(o.node.as_deref(), Some("master-2"));
    assert_eq!(addr(&o), Some("fd00:77::13".parse().unwrap()));
}

#[test]
fn decline_holds_the_address_out_of_the_pool() {
    let site = lab();
    let mut t = Table::default();
    let c = [0u8, 4, 3];
    let mut r = msg(wire::REQUEST, &c);
    server_id(&mut r);
    ia(&mut r, None);
    let a = addr(&ask(&site, &mut t, &r, &[], 1000)).unwrap();
    let mut d = msg(wire::DECLINE, &c);
    server_id(&mut d);
    ia(&mut d, Some(&a.to_string()));
    let o = ask(&site, &mut t, &d, &[], 1001);
    assert_eq!(o.commit[0].state, LeaseState::Declined);
    let mut r2 = msg(wire::REQUEST, &[0, 4, 4]);
    server_id(&mut r2);
    ia(&mut r2, Some(&a.to_string()));
    assert_ne!(addr(&ask(&site, &mut t, &r2, &[], 1002)), Some(a));
}

#[test]
fn identifiers_are_checked_as_rfc_8415_says() {
    let site = lab();
    let mut t = Table::default();
    let mut s = msg(wire::SOLICIT, &duid("52:54:00:77:00:11"));
    server_id(&mut s);
    assert_eq!(ask(&site, &mut t, &s, &[], 1).kind, "malformed");
    let mut r = msg(wire::REQUEST, &duid("52:54:00:77:00:11"));
    r.push(wire::OPT_SERVER_ID, vec![0, 4, 0]);
    assert_eq!(ask(&site, &mut t, &r, &[], 1).kind, "not-ours");
    let r = msg(wire::RENEW, &duid("52:54:00:77:00:11"));
    assert_eq!(ask(&site, &mut t, &r, &[], 1).kind, "malformed");
    let mut r = Msg::new(wire::SOLICIT, [1, 2, 3]);
    ia(&mut r, None);
    assert_eq!(
        ask(&site, &mut t, &r, &[], 1).kind,
        "malformed",
        "no Client Identifier"
    );
    let r = msg(wire::ADVERTISE, &duid("52:54:00:77:00:11"));
    assert_eq!(ask(&site, &mut t, &r, &[], 1).kind, "ignored");
}

#[test]
fn confirm_and_information_request() {
    let site = lab();
    let mut t = Table::default();
    let mut c = msg(wire::CONFIRM, &duid("52:54:00:77:00:11"));
    ia(&mut c, Some("fd00:77::11"));
    let o = ask(&site, &mut t, &c, &[], 1);
    assert_eq!(status(&o), Some(wire::STATUS_SUCCESS));
    let mut c = msg(wire::CONFIRM, &duid("52:54:00:77:00:11"));
    ia(&mut c, Some("fd00:99::11"));
    let o = ask(&site, &mut t, &c, &[], 1);
    assert_eq!(status(&o), Some(wire::STATUS_NOT_ON_LINK));
    let mut i = Msg::new(wire::INFORMATION_REQUEST, [9, 9, 9]);
    ipxe(&mut i);
    asks_boot(&mut i);
    let o = ask(&site, &mut t, &i, &[], 1);
    golden("information-request", &dump(&o));
    assert_eq!(
        opt59(&o).as_deref(),
        Some("http://[fd00:77::1]:8080/boot.ipxe")
    );
    assert!(o.commit.is_empty());
    // One with an IA is discarded (RFC 8415 §16.12).
    ia(&mut i, None);
    assert_eq!(ask(&site, &mut t, &i, &[], 1).kind, "malformed");
}

#[test]
fn oversized_duids_and_ia_floods_are_bounded() {
    let site = lab();
    let mut t = Table::default();
    let mut m = msg(wire::SOLICIT, &[0u8; 131]);
    ia(&mut m, None);
    assert_eq!(
        ask(&site, &mut t, &m, &[], 1).kind,
        "malformed",
        "a DUID over 130 octets"
    );
    let mut m = msg(wire::SOLICIT, &[0, 4]);
    ia(&mut m, None);
    assert_eq!(
        ask(&site, &mut t, &m, &[], 1).kind,
        "malformed",
        "a DUID under 3 octets"
    );
    // A Rapid Commit Solicit with 100 IA_NAs: at most MAX_IAS bindings.
    let mut m = msg(wire::SOLICIT, &[0, 4, 8, 8, 8]);
    for id in 0..100u32 {
        m.push(wire::OPT_IA_NA, wire::ia_na(id, 0, 0, &[]));
    }
    m.push(wire::OPT_RAPID_COMMIT, vec![]);
    let o = ask(&site, &mut t, &m, &[], 1);
    assert_eq!(o.commit.len(), dhcp::v6::core::MAX_IAS);
    let answered = o
        .reply
        .unwrap()
        .opts
        .iter()
        .filter(|(c, _)| *c == wire::OPT_IA_NA)
        .count();
    assert_eq!(answered, dhcp::v6::core::MAX_IAS);
}

#[test]
fn a_full_binding_table_serves_nodes_and_renewals_and_refuses_new_clients_until_bindings_expire() {
    let mut site = lab();
    site.host.dhcp6.as_mut().unwrap().max_bindings = 3;
    let mut t = Table::default();
    let rapid = |client: &[u8]| {
        let mut m = msg(wire::SOLICIT, client);
        ia(&mut m, None);
        m.push(wire::OPT_RAPID_COMMIT, vec![]);
        m
    };
    let clients: Vec<Vec<u8>> = (0..4u8).map(|i| vec![0, 4, 7, 7, i]).collect();
    for c in &clients[..3] {
        let o = ask(&site, &mut t, &rapid(c), &[], 1000);
        assert!(addr(&o).is_some(), "{}", o.reason);
    }
    assert_eq!(t.len(), 3);
    // A fourth DUID gets no address, and the Solicit says so.
    let o = ask(&site, &mut t, &rapid(&clients[3]), &[], 1001);
    assert_eq!(addr(&o), None);
    assert!(o.commit.is_empty());
    assert_eq!(status(&o), Some(wire::STATUS_NO_ADDRS_AVAIL));
    assert!(
        o.reason.contains("the binding table is full (3 bindings"),
        "{}",
        o.reason
    );
    // A node's reservation is granted beyond the limit.
    let o = ask(&site, &mut t, &rapid(&duid("52:54:00:77:00:21")), &[], 1001);
    assert_eq!(addr(&o), Some("fd00:77::21".parse().unwrap()));
    // A client that holds a binding renews it.
    let mut renew = msg(wire::RENEW, &clients[0]);
    server_id(&mut renew);
    ia(&mut renew, Some("fd00:77::1000"));
    let o = ask(&site, &mut t, &renew, &[], 2000);
    assert_eq!(addr(&o), Some("fd00:77::1000".parse().unwrap()));
    // Once the other two have expired, the full table forgets them and the
    // fourth client gets an address.
    let o = ask(&site, &mut t, &rapid(&clients[3]), &[], 1000 + 3600 + 1);
    assert!(addr(&o).is_some(), "{}", o.reason);
    assert_eq!(t.len(), 3, "client 0 (renewed), the node, client 3");
}
