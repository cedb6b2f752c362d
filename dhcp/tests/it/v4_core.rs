//! `answer` without sockets: every DHCP behaviour, with golden dumps of
//! the replies in `dhcp/tests/golden/dhcp-*.txt`.

use dhcp::v4::core::*;
use dhcp::v4::leases::{Lease, LeaseState, Table};
use dhcproto::v4::{Architecture, Flags};
use dhcproto::v4::{DhcpOption, HType, Message, MessageType, Opcode, OptionCode, UnknownOption};
use site::{Mac, Site};
use std::fmt::Write;
use std::net::Ipv4Addr;
use std::net::SocketAddrV4;

fn lab() -> Site {
    site::load(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab/site.yaml"))
        .unwrap()
}

fn req(mac: &str, t: MessageType) -> Message {
    let mac: Mac = mac.parse().unwrap();
    let mut m = Message::default();
    m.set_opcode(Opcode::BootRequest)
        .set_htype(HType::Eth)
        .set_xid(0x1234)
        .set_chaddr(&mac.0);
    m.opts_mut().insert(DhcpOption::MessageType(t));
    m
}

/// A REQUEST from `mac` asking for `ip`.
fn requesting(mac: &str, ip: Ipv4Addr) -> Message {
    let mut m = req(mac, MessageType::Request);
    m.opts_mut().insert(DhcpOption::RequestedIpAddress(ip));
    m
}

/// `answer` to a plain DISCOVER from `mac`, arriving directly at `now`.
fn discover(site: &Site, t: &mut Table, mac: &str, now: u64) -> Outcome {
    answer(site, t, &req(mac, MessageType::Discover), rx(), now)
}

fn rx() -> Rx {
    Rx {
        src: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 68),
        local_port: 67,
        link: None,
    }
}

fn pxe(m: &mut Message, arch: u16) {
    m.opts_mut()
        .insert(DhcpOption::ClientSystemArchitecture(Architecture::from(
            arch,
        )));
    m.opts_mut().insert(DhcpOption::ClassIdentifier(
        format!("PXEClient:Arch:{arch:05}:UNDI:003016").into_bytes(),
    ));
}

/// A stable text dump of a reply: fixed fields, then options by code.
fn dump(o: &Outcome) -> String {
    let mut s = format!("kind: {}\nreason: {}\n", o.kind, o.reason);
    if let Some((m, dest)) = &o.reply {
        let _ = writeln!(
            s,
            "dest: {dest:?}\nyiaddr: {}\nsiaddr: {}\nciaddr: {}\ngiaddr: {}",
            m.yiaddr(),
            m.siaddr(),
            m.ciaddr(),
            m.giaddr()
        );
        let _ = writeln!(
            s,
            "file: {:?}",
            m.fname_str().and_then(|r| r.ok()).unwrap_or("")
        );
        let mut opts: Vec<_> = m
            .opts()
            .iter()
            .map(|(c, o)| (u8::from(*c), format!("{o:?}")))
            .collect();
        opts.sort();
        for (c, o) in opts {
            let _ = writeln!(s, "option {c:3}: {o}");
        }
    }
    if let Some(l) = &o.commit {
        let _ = writeln!(s, "commit: {} {} {:?}", l.mac, l.ip, l.state);
    }
    s
}

fn golden(name: &str, got: &str) {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("dhcp-{name}.txt"));
    testkit::golden::check(&p, got);
}

#[test]
fn ipxe_gets_the_http_script_and_no_binary() {
    let site = lab();
    let mut m = req("52:54:00:77:00:10", MessageType::Discover);
    pxe(&mut m, 0);
    m.opts_mut().insert(DhcpOption::UserClass(b"iPXE".to_vec()));
    m.opts_mut().insert(DhcpOption::Unknown(UnknownOption::new(
        OptionCode::Unknown(175),
        vec![19, 1, 1],
    )));
    let o = answer(&site, &mut Table::default(), &m, rx(), 1000);
    golden("ipxe-offer", &dump(&o));
    let (r, dest) = o.reply.unwrap();
    assert_eq!(r.yiaddr(), Ipv4Addr::new(10, 77, 0, 10));
    assert_eq!(
        r.fname_str().unwrap().unwrap(),
        "http://10.77.0.1:8080/boot.ipxe"
    );
    assert_eq!(
        dest,
        Dest::Hardware {
            ip: r.yiaddr(),
            mac: "52:54:00:77:00:10".parse().unwrap()
        }
    );
}

#[test]
fn firmware_families() {
    let site = lab();
    // (golden name, MAC, client arch, vendor class, expected boot file)
    type Case<'a> = (&'a str, &'a str, Option<u16>, Option<&'a str>, &'a str);
    let cases: [Case; 6] = [
        ("bios", "52:54:00:77:00:11", Some(0), None, "undionly.kpxe"),
        ("uefi-x64", "52:54:00:77:00:12", Some(7), None, "ipxe.efi"),
        (
            "uefi-arm64",
            "52:54:00:77:00:13",
            Some(11),
            None,
            "ipxe-arm64.efi",
        ),
        (
            "uefi-http",
            "52:54:00:77:00:20",
            Some(16),
            Some("HTTPClient:Arch:00016:UNDI:003001"),
            "http://10.77.0.1:8080/boot/ipxe.efi",
        ),
        ("slof", "52:54:00:77:00:30", None, None, "core.elf"),
        (
            "udhcpc",
            "52:54:00:77:00:21",
            None,
            Some("udhcp 1.35.0"),
            "",
        ),
    ];
    for (name, mac, arch, vendor, file) in cases {
        let mut m = req(mac, MessageType::Discover);
        m.set_flags(Flags::default().set_broadcast());
        if let Some(a) = arch {
            pxe(&mut m, a);
        }
        if let Some(v) = vendor {
            m.opts_mut()
                .insert(DhcpOption::ClassIdentifier(v.as_bytes().to_vec()));
        }
        let o = answer(&site, &mut Table::default(), &m, rx(), 1000);
        golden(name, &dump(&o));
        let (r, dest) = o.reply.expect(name);
        assert_eq!(dest, Dest::Broadcast, "{name}");
        assert_eq!(
            r.fname_str().and_then(|x| x.ok()).unwrap_or(""),
            file,
            "{name}"
        );
        if name == "uefi-http" {
            assert_eq!(
                r.opts().get(OptionCode::ClassIdentifier),
                Some(&DhcpOption::ClassIdentifier(b"HTTPClient".to_vec()))
            );
        }
        if file.ends_with(".kpxe")
            || file.ends_with(".efi") && !file.starts_with("http")
            || file == "core.elf"
        {
            assert_eq!(
                r.siaddr(),
                Ipv4Addr::new(10, 77, 0, 1),
                "{name}: next-server"
            );
        }
    }
}

#[test]
fn request_ack_nak_and_other_server() {
    let site = lab();
    let mut m = requesting("52:54:00:77:00:11", Ipv4Addr::new(10, 77, 0, 11));
    m.opts_mut()
        .insert(DhcpOption::ServerIdentifier(Ipv4Addr::new(10, 77, 0, 1)));
    m.opts_mut()
        .insert(DhcpOption::Hostname("evil\n\u{1b}[31mname".into()));
    let o = answer(&site, &mut Table::default(), &m, rx(), 1000);
    golden("ack", &dump(&o));
    assert_eq!(o.kind, "ack");
    let l = o.commit.unwrap();
    assert_eq!(
        (l.ip, l.expires, l.hostname.as_deref()),
        (
            Ipv4Addr::new(10, 77, 0, 11),
            1000 + 3600,
            Some("evil\n\u{1b}[31mname")
        )
    );

    let mut wrong = req("52:54:00:77:00:11", MessageType::Request);
    wrong
        .opts_mut()
        .insert(DhcpOption::RequestedIpAddress(Ipv4Addr::new(10, 77, 0, 99)));
    let o = answer(&site, &mut Table::default(), &wrong, rx(), 1000);
    golden("nak", &dump(&o));
    assert_eq!(o.kind, "nak");
    assert_eq!(o.reply.unwrap().1, Dest::Broadcast);

    let mut other = req("52:54:00:77:00:11", MessageType::Request);
    other
        .opts_mut()
        .insert(DhcpOption::ServerIdentifier(Ipv4Addr::new(10, 77, 0, 2)));
    other
        .opts_mut()
        .insert(DhcpOption::RequestedIpAddress(Ipv4Addr::new(10, 77, 0, 11)));
    assert!(answer(&site, &mut Table::default(), &other, rx(), 1000)
        .reply
        .is_none());
}

#[test]
fn unknown_mac_without_pool_gets_nothing() {
    let o = answer(
        &lab(),
        &mut Table::default(),
        &req("52:54:00:de:ad:00", MessageType::Discover),
        rx(),
        1000,
    );
    assert!(o.reply.is_none());
    assert!(o.reason.contains("no dynamic pool"), "{}", o.reason);
}

#[test]
fn relays_and_forged_giaddr() {
    let site = lab();
    let mut m = req("52:54:00:77:00:12", MessageType::Discover);
    m.set_giaddr(Ipv4Addr::new(10, 77, 0, 254));
    let o = answer(&site, &mut Table::default(), &m, rx(), 1000);
    assert_eq!(
        o.reply.unwrap().1,
        Dest::Relay(Ipv4Addr::new(10, 77, 0, 254))
    );
    let mut forged = req("52:54:00:77:00:12", MessageType::Discover);
    forged.set_giaddr(Ipv4Addr::new(192, 0, 2, 1));
    let o = answer(&site, &mut Table::default(), &forged, rx(), 1000);
    assert!(o.reply.is_none());
    assert!(o.reason.contains("in no site network"), "{}", o.reason);
}

#[test]
fn inform_release_decline() {
    let site = lab();
    let mut m = req("52:54:00:77:00:20", MessageType::Inform);
    m.set_ciaddr(Ipv4Addr::new(10, 77, 0, 20));
    let o = answer(&site, &mut Table::default(), &m, rx(), 1000);
    let (r, dest) = o.reply.unwrap();
    assert_eq!(dest, Dest::Unicast(Ipv4Addr::new(10, 77, 0, 20)));
    assert!(r.yiaddr().is_unspecified());
    assert!(r.opts().get(OptionCode::AddressLeaseTime).is_none());

    let mut t = Table::default();
    t.apply(Lease {
        mac: "52:54:00:77:00:20".into(),
        ip: Ipv4Addr::new(10, 77, 0, 20),
        expires: 5000,
        hostname: None,
        state: LeaseState::Active,
    });
    // The holder declines (before a release): taken, held for declineHold.
    let mut dec = req("52:54:00:77:00:20", MessageType::Decline);
    dec.opts_mut()
        .insert(DhcpOption::RequestedIpAddress(Ipv4Addr::new(10, 77, 0, 20)));
    let o = answer(&site, &mut t, &dec, rx(), 1000);
    let d = o.commit.unwrap();
    assert_eq!(d.state, LeaseState::Declined);
    assert_eq!(d.expires, 1000 + 24 * 3600, "declineHold defaults to 24h");

    let mut rel = req("52:54:00:77:00:20", MessageType::Release);
    rel.set_ciaddr(Ipv4Addr::new(10, 77, 0, 20));
    let o = answer(&site, &mut t, &rel, rx(), 1000);
    assert!(o.reply.is_none());
    assert_eq!(o.commit.unwrap().state, LeaseState::Released);
}

/// The probe: DECLINEs forged from MACs that hold nothing took every pool
/// address out for good. Now only the holder's DECLINE counts, and a
/// declined address comes back after declineHold, across a restart.
#[test]
fn forged_declines_cannot_poison_the_pool_and_holds_expire() {
    let dir = tempfile::tempdir().unwrap();
    let site = pool_site(dir.path(), "10.77.0.100", "10.77.0.109");
    let mut t = Table::default();
    for i in 0..10u8 {
        let mut dec = req(&format!("02:00:00:00:00:{i:02x}"), MessageType::Decline);
        dec.opts_mut()
            .insert(DhcpOption::RequestedIpAddress(Ipv4Addr::new(
                10,
                77,
                0,
                100 + i,
            )));
        let o = answer(&site, &mut t, &dec, rx(), 1000);
        assert_eq!(o.kind, "ignored", "{}", o.reason);
        assert!(o.commit.is_none());
    }
    // All ten pool addresses are still offered.
    let mut got = std::collections::HashSet::new();
    for i in 0..10u8 {
        let m = format!("52:54:00:bb:00:{i:02x}");
        let o = discover(&site, &mut t, &m, 1000);
        let ip = o.reply.unwrap().0.yiaddr();
        let r = requesting(&m, ip);
        let a = answer(&site, &mut t, &r, rx(), 1000);
        assert_eq!(a.kind, "ack", "{}", a.reason);
        t.apply(a.commit.unwrap());
        got.insert(ip);
    }
    assert_eq!(got.len(), 10);
    // The holder of .100 declines it: out of the pool, and its client gets
    // another address; nobody else gets .100 until the hold ends.
    let holder = t
        .leases()
        .find(|l| l.ip == Ipv4Addr::new(10, 77, 0, 100))
        .unwrap()
        .mac
        .clone();
    let mut dec = req(&holder, MessageType::Decline);
    dec.opts_mut()
        .insert(DhcpOption::RequestedIpAddress(Ipv4Addr::new(
            10, 77, 0, 100,
        )));
    let o = answer(&site, &mut t, &dec, rx(), 1000);
    assert_eq!(o.kind, "decline", "{}", o.reason);
    let declined = o.commit.unwrap();
    t.apply(declined.clone());
    let late = "52:54:00:bb:01:00";
    let o = discover(&site, &mut t, late, 2000);
    assert!(
        o.reply.is_none(),
        "the only free address is held out: {}",
        o.reason
    );
    // Persisted: a lease file with the decline and later leases, replayed
    // and compacted by a restart, still holds .100 out.
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let mut lines = String::new();
    for l in t.leases().chain(std::iter::once(&declined)) {
        lines.push_str(&serde_json::to_string(l).unwrap());
        lines.push('\n');
    }
    std::fs::write(state.join("leases.jsonl"), lines).unwrap();
    drop(dhcp::v4::leases::Store::open(&state).unwrap());
    let (mut t2, bad) = dhcp::v4::leases::load(&state.join("leases.jsonl")).unwrap();
    assert_eq!(bad, 0);
    let o = discover(&site, &mut t2, late, 2000);
    assert!(
        o.reply.is_none(),
        "still held after a restart: {}",
        o.reason
    );
    // After the hold (24 h), .100 is offered again.
    let o = answer(
        &site,
        &mut t2,
        &req(late, MessageType::Discover),
        rx(),
        1000 + 24 * 3600 + 1,
    );
    assert_eq!(o.reply.unwrap().0.yiaddr(), Ipv4Addr::new(10, 77, 0, 100));
}

#[test]
fn dynamic_pool_allocates_and_skips_reservations() {
    let dir = tempfile::tempdir().unwrap();
    let site = pool_site(dir.path(), "10.77.0.10", "10.77.0.12");
    let mut t = Table::default();
    // .10 and .11 are reserved by nodes: skipped; .12 too; so .13 is... also a node: exhausted.
    let o = discover(&site, &mut t, "52:54:00:de:ad:01", 1000);
    assert!(
        o.reply.is_none() && o.reason.contains("exhausted"),
        "{}",
        o.reason
    );
    // A pool beside the reservations.
    let site2 = pool_site(dir.path(), "10.77.0.100", "10.77.0.101");
    for (mac, want) in [
        ("52:54:00:de:ad:01", Some("10.77.0.100")),
        ("52:54:00:de:ad:02", Some("10.77.0.101")),
        ("52:54:00:de:ad:03", None),
    ] {
        let d = discover(&site2, &mut t, mac, 1000);
        match want {
            Some(ip) => {
                let ip: Ipv4Addr = ip.parse().unwrap();
                assert_eq!(d.reply.as_ref().unwrap().0.yiaddr(), ip);
                let r = requesting(mac, ip);
                let a = answer(&site2, &mut t, &r, rx(), 1000);
                t.apply(a.commit.unwrap());
            }
            None => assert!(d.reply.is_none(), "{mac} should find the pool exhausted"),
        }
    }
    // After the leases expire the addresses are reusable.
    let d = discover(&site2, &mut t, "52:54:00:de:ad:03", 1000 + 3601);
    assert_eq!(d.reply.unwrap().0.yiaddr(), Ipv4Addr::new(10, 77, 0, 100));
}

/// A site with a dynamic pool of `start..=end` on the lab network.
fn pool_site(dir: &std::path::Path, start: &str, end: &str) -> Site {
    lab_site(dir, |t| {
        t.replace(
            "dnsServers: [10.77.0.1]",
            &format!("dnsServers: [10.77.0.1]\n    pool: {{ start: {start}, end: {end} }}"),
        )
    })
}

/// The lab site written to `dir` after `edit`, its Ignition still the
/// example's, loaded.
fn lab_site(dir: &std::path::Path, edit: impl FnOnce(String) -> String) -> Site {
    let lab = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab");
    let text = edit(std::fs::read_to_string(lab.join("site.yaml")).unwrap())
        .replace("dir: ignition", &format!("dir: {}/ignition", lab.display()));
    std::fs::write(dir.join("site.yaml"), text).unwrap();
    site::load(&dir.join("site.yaml")).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn concurrent_discovers_get_distinct_offers_and_requests_are_granted() {
    let dir = tempfile::tempdir().unwrap();
    let site = pool_site(dir.path(), "10.77.0.100", "10.77.0.199");
    let mut t = Table::default();
    // 50 clients DISCOVER before any REQUESTs (a rack powering on).
    let macs: Vec<String> = (0..50).map(|i| format!("52:54:00:aa:00:{i:02x}")).collect();
    let offers: Vec<Ipv4Addr> = macs
        .iter()
        .map(|m| discover(&site, &mut t, m, 1000).reply.unwrap().0.yiaddr())
        .collect();
    let distinct: std::collections::HashSet<_> = offers.iter().collect();
    assert_eq!(distinct.len(), 50, "offers: {offers:?}");
    // Their REQUESTs arrive in reverse order; every one is ACKed with its offer.
    for (m, ip) in macs.iter().zip(&offers).rev() {
        let r = requesting(m, *ip);
        let a = answer(&site, &mut t, &r, rx(), 1000);
        assert_eq!(a.kind, "ack", "{m}: {}", a.reason);
        t.apply(a.commit.unwrap());
    }
    // A client asking for an address another holds is NAKed.
    let r = requesting("52:54:00:aa:01:00", offers[0]);
    assert_eq!(answer(&site, &mut t, &r, rx(), 1000).kind, "nak");
    // Asking for a free one (INIT-REBOOT after our restart lost nothing) is granted.
    let r = requesting("52:54:00:aa:01:00", Ipv4Addr::new(10, 77, 0, 199));
    assert_eq!(answer(&site, &mut t, &r, rx(), 1000).kind, "ack");
}

#[test]
fn exhausted_pool_and_an_expired_lease_whose_address_moved() {
    let dir = tempfile::tempdir().unwrap();
    let site = pool_site(dir.path(), "10.77.0.200", "10.77.0.201");
    let mut t = Table::default();
    for (m, want) in [
        ("52:54:00:aa:00:01", "10.77.0.200"),
        ("52:54:00:aa:00:02", "10.77.0.201"),
    ] {
        let r = requesting(m, want.parse().unwrap());
        let a = answer(&site, &mut t, &r, rx(), 1000);
        t.apply(a.commit.unwrap());
    }
    let o = discover(&site, &mut t, "52:54:00:aa:00:03", 1000);
    assert!(
        o.reply.is_none() && o.reason.contains("exhausted"),
        "{}",
        o.reason
    );
    // Again in the same second: the same answer (without a walk).
    assert!(discover(&site, &mut t, "52:54:00:aa:00:03", 1000)
        .reply
        .is_none());
    // A release frees an address at once.
    let mut rel = req("52:54:00:aa:00:02", MessageType::Release);
    rel.set_ciaddr(Ipv4Addr::new(10, 77, 0, 201));
    let l = answer(&site, &mut t, &rel, rx(), 1000).commit.unwrap();
    t.apply(l);
    let o = discover(&site, &mut t, "52:54:00:aa:00:03", 1000);
    assert_eq!(o.reply.unwrap().0.yiaddr(), Ipv4Addr::new(10, 77, 0, 201));
    // After 00:01's lease expires, 00:04 takes its address; 00:01 coming
    // back must not be offered the address it no longer holds.
    let later = 1000 + 3601;
    let r = requesting("52:54:00:aa:00:04", Ipv4Addr::new(10, 77, 0, 200));
    let a = answer(&site, &mut t, &r, rx(), later);
    assert_eq!(a.kind, "ack", "{}", a.reason);
    t.apply(a.commit.unwrap());
    let o = discover(&site, &mut t, "52:54:00:aa:00:01", later);
    assert_ne!(
        o.reply.map(|r| r.0.yiaddr()),
        Some(Ipv4Addr::new(10, 77, 0, 200))
    );
}

#[test]
fn proxy_dhcp_gives_boot_information_only() {
    let dir = tempfile::tempdir().unwrap();
    let site = lab_site(dir.path(), |t| {
        t.replace(
            "    serverAddress: 10.77.0.1\n",
            "    serverAddress: 10.77.0.1\n    mode: proxy\n",
        )
    });
    // A BIOS PXE client's DISCOVER on 67: an OFFER with no address.
    let mut m = req("52:54:00:77:00:11", MessageType::Discover);
    pxe(&mut m, 0);
    let o = answer(&site, &mut Table::default(), &m, rx(), 1000);
    golden("proxy-offer", &dump(&o));
    let (r, _) = o.reply.unwrap();
    assert!(
        r.yiaddr().is_unspecified(),
        "proxyDHCP never hands out an address"
    );
    assert_eq!(r.fname_str().unwrap().unwrap(), "undionly.kpxe");
    assert_eq!(
        r.opts().get(OptionCode::ClassIdentifier),
        Some(&DhcpOption::ClassIdentifier(b"PXEClient".to_vec()))
    );
    assert!(o.commit.is_none());
    // Its REQUEST to port 4011: an ACK back to where it came from.
    let mut q = req("52:54:00:77:00:11", MessageType::Request);
    pxe(&mut q, 0);
    q.set_ciaddr(Ipv4Addr::new(10, 77, 0, 11));
    let src = SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 11), 68);
    let o = answer(
        &site,
        &mut Table::default(),
        &q,
        Rx {
            src,
            local_port: 4011,
            link: None,
        },
        1000,
    );
    let (r, dest) = o.reply.unwrap();
    assert_eq!(
        (r.opts().msg_type(), dest),
        (Some(MessageType::Ack), Dest::Source)
    );
    // A client with nothing to boot gets no proxy answer at all.
    let mut u = req("52:54:00:77:00:21", MessageType::Discover);
    u.opts_mut()
        .insert(DhcpOption::ClassIdentifier(b"udhcp 1.35.0".to_vec()));
    assert!(answer(&site, &mut Table::default(), &u, rx(), 1000)
        .reply
        .is_none());
}

/// Plain BOOTP (PowerVM LPAR firmware: no DHCP message type): a node gets
/// its fixed address and boot file, with no lease and no DHCP-only options;
/// an unknown MAC gets nothing.
#[test]
fn bootp_is_served_to_nodes() {
    let site = lab();
    let mut table = Table::default();
    let bootp = |mac: &str| {
        let mac: Mac = mac.parse().unwrap();
        let mut m = Message::default();
        m.set_opcode(Opcode::BootRequest)
            .set_htype(HType::Eth)
            .set_xid(0x4242)
            .set_chaddr(&mac.0);
        m
    };
    let o = answer(&site, &mut table, &bootp("52:54:00:77:00:30"), rx(), 1000);
    golden("bootp-powervm", &dump(&o));
    let (m, _) = o.reply.as_ref().unwrap();
    assert_eq!(m.opts().msg_type(), None);
    assert_eq!(m.yiaddr(), Ipv4Addr::new(10, 77, 0, 30));
    assert!(m.opts().get(OptionCode::AddressLeaseTime).is_none());
    assert!(m.opts().get(OptionCode::ServerIdentifier).is_none());
    assert!(o.commit.is_none());
    let o = answer(&site, &mut table, &bootp("52:54:00:de:ad:99"), rx(), 1000);
    assert!(o.reply.is_none() && o.kind == "ignored", "{}", o.reason);
}

/// Petitboot (OpenPOWER) runs udhcpc asking for options 209 and 210: it gets
/// the node's pxelinux config name and bootd's HTTP base, no boot file.
#[test]
fn petitboot_gets_its_pxelinux_config() {
    let site = lab();
    let mut table = Table::default();
    let mut m = req("52:54:00:77:00:30", MessageType::Discover);
    m.opts_mut()
        .insert(DhcpOption::ClassIdentifier(b"udhcp 1.35.0".to_vec()));
    m.opts_mut().insert(DhcpOption::ParameterRequestList(vec![
        OptionCode::SubnetMask,
        OptionCode::Router,
        OptionCode::Unknown(209),
        OptionCode::Unknown(210),
    ]));
    let o = answer(&site, &mut table, &m, rx(), 1000);
    golden("petitboot-discover", &dump(&o));
    let (r, _) = o.reply.as_ref().unwrap();
    let opt = |c: u8| match r.opts().get(OptionCode::Unknown(c)) {
        Some(DhcpOption::Unknown(u)) => String::from_utf8(u.data().to_vec()).unwrap(),
        other => panic!("option {c}: {other:?}"),
    };
    assert_eq!(opt(209), "pxelinux.cfg/01-52-54-00-77-00-30");
    assert_eq!(opt(210), "http://10.77.0.1:8080/");
    assert!(r.opts().get(OptionCode::BootfileName).is_none());
}

/// SLOF asks for options 209/210 too (in its REQUEST, with no vendor
/// class): it is Open Firmware first, and gets GRUB, not a pxelinux config.
#[test]
fn slof_asking_for_209_and_210_still_gets_grub() {
    let site = lab();
    let mut table = Table::default();
    let mut m = req("52:54:00:77:00:30", MessageType::Request);
    m.opts_mut().insert(DhcpOption::ParameterRequestList(vec![
        OptionCode::SubnetMask,
        OptionCode::Unknown(209),
        OptionCode::Unknown(210),
    ]));
    m.opts_mut()
        .insert(DhcpOption::RequestedIpAddress(Ipv4Addr::new(10, 77, 0, 30)));
    let o = answer(&site, &mut table, &m, rx(), 1000);
    assert!(o.reason.contains("GRUB over TFTP"), "{}", o.reason);
    let (r, _) = o.reply.as_ref().unwrap();
    assert!(r.opts().get(OptionCode::Unknown(209)).is_none());
}

/// An appliance of another rack: its serverAddress is the site's boot
/// address (another network), its own address on the link (`Rx::link`)
/// says which network its direct clients are on.
#[test]
fn a_direct_client_is_on_the_links_network_when_the_server_address_is_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let site = lab_site(dir.path(), |t| {
        t.replace(
            "    dnsServers: [10.77.0.1]\n",
            "    dnsServers: [10.77.0.1]\n  - name: rack3\n    subnet: 10.81.0.0/24\n    gateway: 10.81.0.254\n",
        )
        .replace(
            "  - { name: worker-1,",
            "  - { name: worker-2,  role: worker,    live: true, macs: [\"52:54:00:77:00:22\"], ip: 10.81.0.22 }\n  - { name: worker-1,",
        )
    });
    let q = req("52:54:00:77:00:22", MessageType::Discover);
    // Without the link: the client is taken to be on serverAddress's network.
    let o = answer(&site, &mut Table::default(), &q, rx(), 1000);
    assert!(o.reply.is_none());
    assert!(
        o.reason.contains("not on the client's subnet 10.77.0.0/24"),
        "{}",
        o.reason
    );
    let here = Rx {
        link: Some("10.81.0.2".parse().unwrap()),
        ..rx()
    };
    let o = answer(&site, &mut Table::default(), &q, here, 1000);
    let (m, _) = o.reply.expect("offered");
    assert_eq!(m.yiaddr(), "10.81.0.22".parse::<Ipv4Addr>().unwrap());
    assert_eq!(
        m.opts().get(OptionCode::Router),
        Some(&DhcpOption::Router(vec!["10.81.0.254".parse().unwrap()]))
    );
}

/// Option 82 as a relay writes it: remote-id before circuit-id, an
/// unknown sub-option 9 (what a decoder keyed by code would reorder).
const AGENT: &[u8] = &[
    2, 3, b's', b'w', b'1', 1, 6, b'e', b't', b'h', b'1', b'/', b'7', 9, 2, 0xde, 0xad,
];

fn relayed(mut m: Message, giaddr: [u8; 4], agent: &[u8]) -> Message {
    m.set_giaddr(Ipv4Addr::from(giaddr));
    m.opts_mut().insert(DhcpOption::Unknown(UnknownOption::new(
        OptionCode::RelayAgentInformation,
        agent.to_vec(),
    )));
    m
}

/// The bytes of option 82 in the encoded reply (what the relay receives),
/// `None` without it.
fn agent_in(o: &Outcome) -> Option<Vec<u8>> {
    use dhcproto::{Encodable, Encoder};
    let (m, _) = o.reply.as_ref().expect("a reply");
    let mut wire = Vec::new();
    m.encode(&mut Encoder::new(&mut wire)).unwrap();
    dhcp::v4::wire::relay_agent_info(&wire)
}

#[test]
fn option_82_is_echoed_byte_for_byte_in_every_reply() {
    let site = lab();
    let mut t = Table::default();
    // OFFER, then ACK, to a relayed node.
    let d = relayed(
        req("52:54:00:77:00:12", MessageType::Discover),
        [10, 77, 0, 254],
        AGENT,
    );
    let o = answer(&site, &mut t, &d, rx(), 1000);
    assert_eq!(o.kind, "offer", "{}", o.reason);
    assert_eq!(agent_in(&o).as_deref(), Some(AGENT));
    let r = relayed(
        requesting("52:54:00:77:00:12", Ipv4Addr::new(10, 77, 0, 12)),
        [10, 77, 0, 254],
        AGENT,
    );
    let o = answer(&site, &mut t, &r, rx(), 1000);
    assert_eq!(o.kind, "ack", "{}", o.reason);
    assert_eq!(agent_in(&o).as_deref(), Some(AGENT));
    // A NAK carries it too (the relay routes it back to the port).
    let wrong = relayed(
        requesting("52:54:00:77:00:12", Ipv4Addr::new(10, 77, 0, 99)),
        [10, 77, 0, 254],
        AGENT,
    );
    let o = answer(&site, &mut t, &wrong, rx(), 1000);
    assert_eq!(o.kind, "nak", "{}", o.reason);
    assert_eq!(agent_in(&o).as_deref(), Some(AGENT));
    // Malformed sub-options (a length past the end) are echoed as they came.
    let odd = [1, 9, b'x'];
    let d = relayed(
        req("52:54:00:77:00:12", MessageType::Discover),
        [10, 77, 0, 254],
        &odd,
    );
    assert_eq!(
        agent_in(&answer(&site, &mut t, &d, rx(), 1000)).as_deref(),
        Some(&odd[..])
    );
    // Without option 82 in the request, none in the reply.
    let o = discover(&site, &mut t, "52:54:00:77:00:12", 1000);
    assert_eq!(agent_in(&o), None);
    // A decoded option 82 (a message built by hand) is encoded again.
    let mut info = dhcproto::v4::relay::RelayAgentInformation::default();
    info.insert(dhcproto::v4::relay::RelayInfo::AgentCircuitId(
        b"p1".to_vec(),
    ));
    let mut d = req("52:54:00:77:00:12", MessageType::Discover);
    d.set_giaddr(Ipv4Addr::new(10, 77, 0, 254));
    d.opts_mut().insert(DhcpOption::RelayAgentInformation(info));
    assert_eq!(
        agent_in(&answer(&site, &mut t, &d, rx(), 1000)).as_deref(),
        Some(&[1, 2, b'p', b'1'][..])
    );
}

#[test]
fn a_trusted_relays_port_names_its_node() {
    let dir = tempfile::tempdir().unwrap();
    let site = lab_site(dir.path(), |t| {
        t.replace("    leaseTime: 1h\n", "    leaseTime: 1h\n    trustedRelays: [10.77.0.254]\n")
            .replacen(
                "\nnodes:\n",
                "\nnodes:\n  - { name: rack-7, role: worker, live: true, ip: 10.77.0.47, relay: { circuitId: eth1/7, remoteId: sw1 } }\n",
                1,
            )
    });
    let unknown = "52:54:00:99:00:07";
    let mut t = Table::default();
    let o = answer(
        &site,
        &mut t,
        &relayed(req(unknown, MessageType::Discover), [10, 77, 0, 254], AGENT),
        rx(),
        1000,
    );
    assert_eq!(o.kind, "offer", "{}", o.reason);
    let (m, dest) = o.reply.as_ref().unwrap();
    assert_eq!(m.yiaddr(), Ipv4Addr::new(10, 77, 0, 47));
    assert_eq!(*dest, Dest::Relay(Ipv4Addr::new(10, 77, 0, 254)));
    assert!(
        o.reason.starts_with("rack-7: offer 10.77.0.47"),
        "{}",
        o.reason
    );
    assert!(
        matches!(m.opts().get(OptionCode::Hostname), Some(DhcpOption::Hostname(h)) if h == "rack-7")
    );
    let o = answer(
        &site,
        &mut t,
        &relayed(
            requesting(unknown, Ipv4Addr::new(10, 77, 0, 47)),
            [10, 77, 0, 254],
            AGENT,
        ),
        rx(),
        1000,
    );
    assert_eq!(o.kind, "ack", "{}", o.reason);
    assert_eq!(o.commit.as_ref().unwrap().mac, unknown);
    // The same option 82 from anyone else names nobody: an untrusted relay,
    // or the client itself (no giaddr): no pool here, so no answer.
    for gi in [[10, 77, 0, 253], [0, 0, 0, 0]] {
        let o = answer(
            &site,
            &mut t,
            &relayed(req(unknown, MessageType::Discover), gi, AGENT),
            rx(),
            1000,
        );
        assert!(o.reply.is_none(), "giaddr {gi:?}: {}", o.reason);
    }
    // Another port, or the same port on another switch: nobody.
    let other_port = [
        2, 3, b's', b'w', b'1', 1, 6, b'e', b't', b'h', b'1', b'/', b'8',
    ];
    let other_switch = [
        2, 3, b's', b'w', b'2', 1, 6, b'e', b't', b'h', b'1', b'/', b'7',
    ];
    for agent in [&other_port[..], &other_switch[..]] {
        let o = answer(
            &site,
            &mut t,
            &relayed(req(unknown, MessageType::Discover), [10, 77, 0, 254], agent),
            rx(),
            1000,
        );
        assert!(o.reply.is_none(), "{}", o.reason);
    }
    // A known MAC is its own node whatever port it is on.
    let o = answer(
        &site,
        &mut t,
        &relayed(
            req("52:54:00:77:00:12", MessageType::Discover),
            [10, 77, 0, 254],
            AGENT,
        ),
        rx(),
        1000,
    );
    assert_eq!(o.reply.unwrap().0.yiaddr(), Ipv4Addr::new(10, 77, 0, 12));
}

/// The seconds of option 51 in a reply.
fn lease_time_of(o: &Outcome) -> Option<u32> {
    match o.reply.as_ref()?.0.opts().get(OptionCode::AddressLeaseTime) {
        Some(DhcpOption::AddressLeaseTime(s)) => Some(*s),
        _ => None,
    }
}

/// A machine's PXE ROM and then iPXE ask for the same lease seconds apart:
/// the second REQUEST is answered with the lease as it stands (its
/// remaining time) and nothing is written, while less than
/// `cacheThreshold` (0.25) of the lease time has passed; a changed
/// hostname, a later REQUEST, a lease not yet on disk, or
/// `cacheThreshold: 0` writes it again.
#[test]
fn a_lease_granted_moments_ago_is_answered_as_it_stands_without_a_write() {
    let site = lab();
    let ip = Ipv4Addr::new(10, 77, 0, 11);
    let mac = "52:54:00:77:00:11";
    let mut t = Table::default();
    let o = answer(&site, &mut t, &requesting(mac, ip), rx(), 1000);
    assert_eq!(lease_time_of(&o), Some(3600));
    t.apply(o.commit.expect("the first grant is written"));

    let o = answer(&site, &mut t, &requesting(mac, ip), rx(), 1010);
    assert_eq!(o.kind, "ack");
    assert!(o.commit.is_none(), "{}", o.reason);
    assert_eq!(
        lease_time_of(&o),
        Some(3590),
        "the time left, not a new hour"
    );
    assert!(o.reason.contains("nothing written"), "{}", o.reason);

    // Another hostname: written.
    let mut named = requesting(mac, ip);
    named
        .opts_mut()
        .insert(DhcpOption::Hostname("master-0".into()));
    let o = answer(&site, &mut t, &named, rx(), 1020);
    assert_eq!(o.commit.as_ref().map(|l| l.expires), Some(1020 + 3600));

    // A quarter of the hour later: written, a new hour.
    let o = answer(&site, &mut t, &requesting(mac, ip), rx(), 1000 + 901);
    assert_eq!(lease_time_of(&o), Some(3600));
    assert_eq!(o.commit.map(|l| l.expires), Some(1901 + 3600));

    // A lease whose write has not been synced (in flight, or failed) is
    // never answered as it stands: the ACK would promise what is not on disk.
    let mut u = Table::default();
    let first = answer(&site, &mut u, &requesting(mac, ip), rx(), 1000);
    u.apply_unwritten(first.commit.unwrap());
    let o = answer(&site, &mut u, &requesting(mac, ip), rx(), 1010);
    assert_eq!(o.commit.map(|l| l.expires), Some(1010 + 3600));

    // Turned off: every REQUEST written.
    let dir = tempfile::tempdir().unwrap();
    let off = lab_site(dir.path(), |s| {
        s.replacen("leaseTime: 1h", "leaseTime: 1h\n    cacheThreshold: 0", 1)
    });
    let mut t = Table::default();
    let first = answer(&off, &mut t, &requesting(mac, ip), rx(), 1000);
    t.apply(first.commit.unwrap());
    let o = answer(&off, &mut t, &requesting(mac, ip), rx(), 1010);
    assert_eq!(o.commit.map(|l| l.expires), Some(1010 + 3600));
}
