//! The DHCP decision, pure: given the site, the lease table, a request and
//! where it came from, what do we answer, what must be durable first, and
//! why. No sockets, no clock (the caller passes `now`).

use super::boot::{self, ClientInfo, IPXE_NO_PXEDHCP, OPT_IPXE};
use super::leases::{Lease, LeaseState, Table};
use dhcproto::v4::{DhcpOption, HType, Message, MessageType, Opcode, OptionCode, UnknownOption};
use ipnet::IpNet;
use site::{DhcpMode, Mac, Network, Node, Site};
use std::net::{IpAddr, Ipv4Addr};

/// Where a reply goes (RFC 2131 §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    /// To the relay agent (giaddr), server port.
    Relay(Ipv4Addr),
    /// To the client's address (it has one: ciaddr), client port.
    Unicast(Ipv4Addr),
    /// To 255.255.255.255, client port.
    Broadcast,
    /// To yiaddr at the client's hardware address, which has no address yet.
    Hardware { ip: Ipv4Addr, mac: Mac },
    /// Back to where it came from (proxyDHCP on 4011).
    Source,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rx {
    pub src: std::net::SocketAddrV4,
    /// 67, or 4011 for proxyDHCP requests.
    pub local_port: u16,
}

#[derive(Debug)]
pub struct Outcome {
    pub reply: Option<(Message, Dest)>,
    /// Must be on disk before the reply is sent.
    pub commit: Option<Lease>,
    /// For the log and the metrics label.
    pub kind: &'static str,
    pub reason: String,
}

impl Outcome {
    fn drop(kind: &'static str, reason: impl Into<String>) -> Outcome {
        Outcome {
            reply: None,
            commit: None,
            kind,
            reason: reason.into(),
        }
    }
}

fn network_of(site: &Site, ip: Ipv4Addr) -> Option<&Network> {
    site.networks
        .iter()
        .find(|n| n.subnet.contains(&IpAddr::V4(ip)))
}

/// The subnet the client is on: chosen by link selection (option 118), the
/// relay's address (giaddr), or our own address on the local link.
fn client_network<'a>(
    site: &'a Site,
    req: &Message,
    server: Ipv4Addr,
) -> Result<&'a Network, String> {
    if let Some(DhcpOption::SubnetSelection(sel)) = req.opts().get(OptionCode::SubnetSelection) {
        return network_of(site, *sel)
            .ok_or_else(|| format!("link selection {sel} is in no site network"));
    }
    let gi = req.giaddr();
    if !gi.is_unspecified() {
        return network_of(site, gi)
            .ok_or_else(|| format!("relayed from giaddr {gi}, which is in no site network"));
    }
    network_of(site, server)
        .ok_or_else(|| format!("this server's address {server} is in no site network"))
}

/// The address this client should have on `net`, if any. `requested` is
/// the address a REQUEST names: a free pool address the client asks for is
/// granted (RFC 2131 §4.3.2) rather than NAKed because another was computed.
fn address_for(
    site: &Site,
    table: &mut Table,
    net: &Network,
    node: Option<&Node>,
    mac: &Mac,
    now: u64,
    requested: Option<Ipv4Addr>,
) -> Result<Ipv4Addr, String> {
    if let Some(n) = node {
        if !net.subnet.contains(&IpAddr::V4(n.ip)) {
            return Err(format!(
                "node {} is reserved {} which is not on the client's subnet {}",
                n.name, n.ip, net.subnet
            ));
        }
        return Ok(n.ip);
    }
    let Some((IpAddr::V4(start), IpAddr::V4(end))) = net.pool else {
        return Err("unknown MAC and no dynamic pool on this subnet".into());
    };
    let in_pool = |ip: Ipv4Addr| (start..=end).contains(&ip);
    if let Some(l) = table.held_by(mac) {
        if in_pool(l.ip) {
            return Ok(l.ip);
        }
    }
    let reserved = |ip: Ipv4Addr| site.nodes.iter().any(|n| n.ip == ip);
    if let Some(r) = requested {
        if in_pool(r) && !reserved(r) && table.is_free_for(r, mac, now) {
            return Ok(r);
        }
    }
    table
        .allocate(start, end, mac, now, reserved)
        .ok_or_else(|| format!("dynamic pool {start}-{end} is exhausted"))
}

fn hostname_of(req: &Message) -> Option<String> {
    match req.opts().get(OptionCode::Hostname) {
        Some(DhcpOption::Hostname(h)) => Some(h.clone()),
        _ => None,
    }
}

fn base_reply(req: &Message, t: MessageType, server: Ipv4Addr) -> Message {
    let mut m = Message::default();
    m.set_opcode(Opcode::BootReply)
        .set_htype(HType::Eth)
        .set_xid(req.xid())
        .set_flags(req.flags())
        .set_giaddr(req.giaddr())
        .set_chaddr(req.chaddr());
    m.opts_mut().insert(DhcpOption::MessageType(t));
    m.opts_mut().insert(DhcpOption::ServerIdentifier(server));
    m
}

fn netmask(subnet: &IpNet) -> Ipv4Addr {
    match subnet {
        IpNet::V4(n) => n.netmask(),
        IpNet::V6(_) => Ipv4Addr::UNSPECIFIED,
    }
}

/// Options every address-bearing reply carries.
fn add_config(
    m: &mut Message,
    site: &Site,
    net: &Network,
    node: Option<&Node>,
    lease_secs: Option<u32>,
) {
    let dhcp = site.host.dhcp.as_ref().expect("caller checked");
    let o = m.opts_mut();
    o.insert(DhcpOption::SubnetMask(netmask(&net.subnet)));
    if let Some(IpAddr::V4(gw)) = net.gateway {
        o.insert(DhcpOption::Router(vec![gw]));
    }
    let dns: Vec<Ipv4Addr> = net
        .dns_servers
        .iter()
        .filter_map(|d| {
            if let IpAddr::V4(a) = d {
                Some(*a)
            } else {
                None
            }
        })
        .collect();
    if !dns.is_empty() {
        o.insert(DhcpOption::DomainNameServer(dns));
    }
    o.insert(DhcpOption::DomainName(dhcp.domain_name.clone()));
    if !dhcp.ntp_servers.is_empty() {
        o.insert(DhcpOption::NtpServers(dhcp.ntp_servers.clone()));
    }
    if let Some(n) = node {
        o.insert(DhcpOption::Hostname(n.name.clone()));
    }
    if let Some(secs) = lease_secs {
        o.insert(DhcpOption::AddressLeaseTime(secs));
        o.insert(DhcpOption::Renewal(secs / 2));
        o.insert(DhcpOption::Rebinding(secs / 8 * 7));
    }
    // Site options, then the node's (which win).
    for opt in dhcp
        .options
        .iter()
        .chain(node.map(|n| n.dhcp_options.iter()).into_iter().flatten())
    {
        o.insert(DhcpOption::Unknown(UnknownOption::new(
            OptionCode::from(opt.code),
            opt.value.clone(),
        )));
    }
}

fn add_boot(m: &mut Message, site: &Site, b: &boot::BootAnswer) {
    let dhcp = site.host.dhcp.as_ref().expect("caller checked");
    if b.tftp {
        m.set_siaddr(dhcp.server_address);
        m.opts_mut().insert(DhcpOption::TFTPServerName(
            dhcp.server_address.to_string().into_bytes(),
        ));
    }
    if b.filename.len() < 128 {
        m.set_fname_str(&b.filename);
    }
    m.opts_mut()
        .insert(DhcpOption::BootfileName(b.filename.clone().into_bytes()));
    if let Some(vc) = &b.vendor_class {
        m.opts_mut()
            .insert(DhcpOption::ClassIdentifier(vc.clone().into_bytes()));
    }
    if b.ipxe_options {
        m.opts_mut().insert(DhcpOption::Unknown(UnknownOption::new(
            OptionCode::Unknown(OPT_IPXE),
            vec![IPXE_NO_PXEDHCP, 1, 1],
        )));
    }
}

fn dest_for(req: &Message, yiaddr: Ipv4Addr, mac: Mac, nak: bool) -> Dest {
    let gi = req.giaddr();
    if !gi.is_unspecified() {
        return Dest::Relay(gi);
    }
    if nak {
        return Dest::Broadcast;
    }
    if !req.ciaddr().is_unspecified() {
        return Dest::Unicast(req.ciaddr());
    }
    if req.flags().broadcast() || yiaddr.is_unspecified() {
        return Dest::Broadcast;
    }
    Dest::Hardware { ip: yiaddr, mac }
}

/// Decides the answer to one request.
pub fn answer(site: &Site, table: &mut Table, req: &Message, rx: Rx, now: u64) -> Outcome {
    let Some(dhcp) = &site.host.dhcp else {
        return Outcome::drop("disabled", "DHCP is not configured in the site");
    };
    if req.opcode() != Opcode::BootRequest {
        return Outcome::drop("malformed", "not a BOOTREQUEST");
    }
    if req.htype() != HType::Eth || req.chaddr().len() < 6 {
        return Outcome::drop("malformed", "not an Ethernet client");
    }
    let mut raw = [0u8; 6];
    raw.copy_from_slice(&req.chaddr()[..6]);
    let mac = Mac(raw);
    let Some(mtype) = req.opts().msg_type() else {
        return Outcome::drop("malformed", "no message type (BOOTP is not served)");
    };
    let server = dhcp.server_address;
    let node = site.node_by_mac(&mac);
    let client = ClientInfo::from_message(req);
    let boot = boot::decide(site, node, &client);
    let net = match client_network(site, req, server) {
        Ok(n) => n,
        Err(why) => return Outcome::drop("ignored", why),
    };
    let lease_secs = u32::try_from(dhcp.lease_time.as_secs()).unwrap_or(u32::MAX);
    let who = node.map(|n| n.name.as_str()).unwrap_or("unknown");

    if dhcp.mode == DhcpMode::Proxy || rx.local_port == 4011 {
        // proxyDHCP: boot information only, never an address.
        let b = match boot {
            Ok(b) => b,
            Err(why) => return Outcome::drop("ignored", format!("proxyDHCP: {why}")),
        };
        let t = match mtype {
            MessageType::Discover => MessageType::Offer,
            MessageType::Request | MessageType::Inform => MessageType::Ack,
            _ => return Outcome::drop("ignored", format!("proxyDHCP ignores {mtype:?}")),
        };
        let mut m = base_reply(req, t, server);
        m.set_ciaddr(req.ciaddr());
        add_boot(&mut m, site, &b);
        if b.vendor_class.is_none() {
            m.opts_mut()
                .insert(DhcpOption::ClassIdentifier(b"PXEClient".to_vec()));
        }
        // PXE discovery control: boot from `file`, skip boot server discovery.
        m.opts_mut()
            .insert(DhcpOption::VendorExtensions(vec![6, 1, 8, 255]));
        let dest = if rx.local_port == 4011 {
            Dest::Source
        } else {
            dest_for(req, Ipv4Addr::UNSPECIFIED, mac, false)
        };
        return Outcome {
            reply: Some((m, dest)),
            commit: None,
            kind: "proxy",
            reason: format!("{who}: proxyDHCP {}", b.reason),
        };
    }

    let boot_note = |b: &Result<boot::BootAnswer, String>| match b {
        Ok(b) => b.reason.clone(),
        Err(why) => format!("no boot file: {why}"),
    };
    match mtype {
        MessageType::Discover => {
            let ip = match address_for(site, table, net, node, &mac, now, None) {
                Ok(ip) => ip,
                Err(why) => return Outcome::drop("ignored", why),
            };
            let mut m = base_reply(req, MessageType::Offer, server);
            m.set_yiaddr(ip);
            add_config(&mut m, site, net, node, Some(lease_secs));
            if let Ok(b) = &boot {
                add_boot(&mut m, site, b);
            }
            let dest = dest_for(req, ip, mac, false);
            Outcome {
                reply: Some((m, dest)),
                commit: None,
                kind: "offer",
                reason: format!("{who}: offer {ip}; {}", boot_note(&boot)),
            }
        }
        MessageType::Request => {
            if let Some(DhcpOption::ServerIdentifier(sid)) =
                req.opts().get(OptionCode::ServerIdentifier)
            {
                if *sid != server {
                    return Outcome::drop(
                        "ignored",
                        format!("client chose another server ({sid})"),
                    );
                }
            }
            let requested = match req.opts().get(OptionCode::RequestedIpAddress) {
                Some(DhcpOption::RequestedIpAddress(a)) => *a,
                _ => req.ciaddr(),
            };
            let ip = match address_for(
                site,
                table,
                net,
                node,
                &mac,
                now,
                Some(requested).filter(|r| !r.is_unspecified()),
            ) {
                Ok(ip) => ip,
                Err(why)
                    if node.is_none()
                        && !site
                            .networks
                            .iter()
                            .any(|n| n.subnet.contains(&IpAddr::V4(requested))) =>
                {
                    return Outcome::drop("ignored", why);
                }
                Err(why) => {
                    let mut m = base_reply(req, MessageType::Nak, server);
                    m.opts_mut().insert(DhcpOption::Message(why.clone()));
                    return Outcome {
                        reply: Some((m, dest_for(req, requested, mac, true))),
                        commit: None,
                        kind: "nak",
                        reason: format!("{who}: NAK: {why}"),
                    };
                }
            };
            if requested != ip {
                let why = format!("requested {requested}, but this client's address is {ip}");
                let mut m = base_reply(req, MessageType::Nak, server);
                m.opts_mut().insert(DhcpOption::Message(why.clone()));
                return Outcome {
                    reply: Some((m, dest_for(req, requested, mac, true))),
                    commit: None,
                    kind: "nak",
                    reason: format!("{who}: NAK: {why}"),
                };
            }
            let mut m = base_reply(req, MessageType::Ack, server);
            m.set_yiaddr(ip);
            m.set_ciaddr(req.ciaddr());
            add_config(&mut m, site, net, node, Some(lease_secs));
            if let Ok(b) = &boot {
                add_boot(&mut m, site, b);
            }
            let lease = Lease {
                mac: mac.to_string(),
                ip,
                expires: now + u64::from(lease_secs),
                hostname: hostname_of(req),
                state: LeaseState::Active,
            };
            let dest = dest_for(req, ip, mac, false);
            Outcome {
                reply: Some((m, dest)),
                commit: Some(lease),
                kind: "ack",
                reason: format!("{who}: ack {ip}; {}", boot_note(&boot)),
            }
        }
        MessageType::Inform => {
            // Configuration only: no address, no lease time (RFC 2131 §3.4).
            let mut m = base_reply(req, MessageType::Ack, server);
            m.set_ciaddr(req.ciaddr());
            add_config(&mut m, site, net, node, None);
            let dest = if req.ciaddr().is_unspecified() {
                Dest::Broadcast
            } else {
                Dest::Unicast(req.ciaddr())
            };
            let dest = if req.giaddr().is_unspecified() {
                dest
            } else {
                Dest::Relay(req.giaddr())
            };
            Outcome {
                reply: Some((m, dest)),
                commit: None,
                kind: "inform",
                reason: format!("{who}: inform"),
            }
        }
        MessageType::Release => match table.get(&mac) {
            Some(l) if l.ip == req.ciaddr() => {
                let lease = Lease {
                    expires: 0,
                    state: LeaseState::Released,
                    ..l.clone()
                };
                Outcome {
                    reply: None,
                    commit: Some(lease),
                    kind: "release",
                    reason: format!("{who}: released {}", req.ciaddr()),
                }
            }
            _ => Outcome::drop(
                "ignored",
                format!("{who}: release of {} which it does not hold", req.ciaddr()),
            ),
        },
        MessageType::Decline => {
            let ip = match req.opts().get(OptionCode::RequestedIpAddress) {
                Some(DhcpOption::RequestedIpAddress(a)) => *a,
                _ => return Outcome::drop("malformed", "DECLINE without a requested address"),
            };
            // A reserved address is the site's to fix: say so loudly. A pool
            // address is quarantined until its lease time passes.
            let lease = Lease {
                mac: mac.to_string(),
                ip,
                expires: now + u64::from(lease_secs),
                hostname: None,
                state: LeaseState::Declined,
            };
            Outcome {
                reply: None,
                commit: Some(lease),
                kind: "decline",
                reason: format!("{who}: DECLINE {ip}: another machine uses this address"),
            }
        }
        other => Outcome::drop("ignored", format!("{other:?} is not for a server")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dhcproto::v4::{Architecture, Flags};
    use std::fmt::Write;
    use std::net::SocketAddrV4;

    fn lab() -> Site {
        site::load(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab/site.yaml"),
        )
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

    fn rx() -> Rx {
        Rx {
            src: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 68),
            local_port: 67,
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
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&p, got).unwrap();
        }
        let want = std::fs::read_to_string(&p)
            .unwrap_or_else(|_| panic!("{} missing (UPDATE_GOLDEN=1)", p.display()));
        assert_eq!(want, got, "{name}");
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
        let mut m = req("52:54:00:77:00:11", MessageType::Request);
        m.opts_mut()
            .insert(DhcpOption::RequestedIpAddress(Ipv4Addr::new(10, 77, 0, 11)));
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
        let mut rel = req("52:54:00:77:00:20", MessageType::Release);
        rel.set_ciaddr(Ipv4Addr::new(10, 77, 0, 20));
        let o = answer(&site, &mut t, &rel, rx(), 1000);
        assert!(o.reply.is_none());
        assert_eq!(o.commit.unwrap().state, LeaseState::Released);

        let mut dec = req("52:54:00:77:00:20", MessageType::Decline);
        dec.opts_mut()
            .insert(DhcpOption::RequestedIpAddress(Ipv4Addr::new(10, 77, 0, 20)));
        let o = answer(&site, &mut t, &dec, rx(), 1000);
        assert_eq!(o.commit.unwrap().state, LeaseState::Declined);
    }

    #[test]
    fn dynamic_pool_allocates_and_skips_reservations() {
        let dir = tempfile::tempdir().unwrap();
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab/site.yaml"),
        )
        .unwrap()
        .replace(
            "dnsServers: [10.77.0.1]",
            "dnsServers: [10.77.0.1]\n    pool: { start: 10.77.0.10, end: 10.77.0.12 }",
        )
        .replace(
            "dir: ignition",
            &format!(
                "dir: {}/ignition",
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../examples/lab")
                    .display()
            ),
        );
        std::fs::write(dir.path().join("site.yaml"), text).unwrap();
        let site = site::load(&dir.path().join("site.yaml")).unwrap();
        let mut t = Table::default();
        // .10 and .11 are reserved by nodes: skipped; .12 too; so .13 is... also a node: exhausted.
        let o = answer(
            &site,
            &mut t,
            &req("52:54:00:de:ad:01", MessageType::Discover),
            rx(),
            1000,
        );
        assert!(
            o.reply.is_none() && o.reason.contains("exhausted"),
            "{}",
            o.reason
        );
        // A pool beside the reservations.
        let site2 = {
            let text = std::fs::read_to_string(dir.path().join("site.yaml"))
                .unwrap()
                .replace(
                    "start: 10.77.0.10, end: 10.77.0.12",
                    "start: 10.77.0.100, end: 10.77.0.101",
                );
            std::fs::write(dir.path().join("site.yaml"), text).unwrap();
            site::load(&dir.path().join("site.yaml")).unwrap()
        };
        for (mac, want) in [
            ("52:54:00:de:ad:01", Some("10.77.0.100")),
            ("52:54:00:de:ad:02", Some("10.77.0.101")),
            ("52:54:00:de:ad:03", None),
        ] {
            let mut r = req(mac, MessageType::Request);
            r.opts_mut()
                .insert(DhcpOption::RequestedIpAddress(Ipv4Addr::new(
                    10, 77, 0, 100,
                )));
            let d = answer(&site2, &mut t, &req(mac, MessageType::Discover), rx(), 1000);
            match want {
                Some(ip) => {
                    let ip: Ipv4Addr = ip.parse().unwrap();
                    assert_eq!(d.reply.as_ref().unwrap().0.yiaddr(), ip);
                    let mut r = req(mac, MessageType::Request);
                    r.opts_mut().insert(DhcpOption::RequestedIpAddress(ip));
                    let a = answer(&site2, &mut t, &r, rx(), 1000);
                    t.apply(a.commit.unwrap());
                }
                None => assert!(d.reply.is_none(), "{mac} should find the pool exhausted"),
            }
        }
        // After the leases expire the addresses are reusable.
        let d = answer(
            &site2,
            &mut t,
            &req("52:54:00:de:ad:03", MessageType::Discover),
            rx(),
            1000 + 3601,
        );
        assert_eq!(d.reply.unwrap().0.yiaddr(), Ipv4Addr::new(10, 77, 0, 100));
    }

    /// A site with a dynamic pool of `start..=end` on the lab network.
    fn pool_site(dir: &std::path::Path, start: &str, end: &str) -> Site {
        let lab = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab");
        let text = std::fs::read_to_string(lab.join("site.yaml"))
            .unwrap()
            .replace(
                "dnsServers: [10.77.0.1]",
                &format!("dnsServers: [10.77.0.1]\n    pool: {{ start: {start}, end: {end} }}"),
            )
            .replace("dir: ignition", &format!("dir: {}/ignition", lab.display()));
        std::fs::write(dir.join("site.yaml"), text).unwrap();
        site::load(&dir.join("site.yaml")).unwrap()
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
            .map(|m| {
                answer(&site, &mut t, &req(m, MessageType::Discover), rx(), 1000)
                    .reply
                    .unwrap()
                    .0
                    .yiaddr()
            })
            .collect();
        let distinct: std::collections::HashSet<_> = offers.iter().collect();
        assert_eq!(distinct.len(), 50, "offers: {offers:?}");
        // Their REQUESTs arrive in reverse order; every one is ACKed with its offer.
        for (m, ip) in macs.iter().zip(&offers).rev() {
            let mut r = req(m, MessageType::Request);
            r.opts_mut().insert(DhcpOption::RequestedIpAddress(*ip));
            let a = answer(&site, &mut t, &r, rx(), 1000);
            assert_eq!(a.kind, "ack", "{m}: {}", a.reason);
            t.apply(a.commit.unwrap());
        }
        // A client asking for an address another holds is NAKed.
        let mut r = req("52:54:00:aa:01:00", MessageType::Request);
        r.opts_mut()
            .insert(DhcpOption::RequestedIpAddress(offers[0]));
        assert_eq!(answer(&site, &mut t, &r, rx(), 1000).kind, "nak");
        // Asking for a free one (INIT-REBOOT after our restart lost nothing) is granted.
        let mut r = req("52:54:00:aa:01:00", MessageType::Request);
        r.opts_mut()
            .insert(DhcpOption::RequestedIpAddress(Ipv4Addr::new(
                10, 77, 0, 199,
            )));
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
            let mut r = req(m, MessageType::Request);
            r.opts_mut()
                .insert(DhcpOption::RequestedIpAddress(want.parse().unwrap()));
            let a = answer(&site, &mut t, &r, rx(), 1000);
            t.apply(a.commit.unwrap());
        }
        let o = answer(
            &site,
            &mut t,
            &req("52:54:00:aa:00:03", MessageType::Discover),
            rx(),
            1000,
        );
        assert!(
            o.reply.is_none() && o.reason.contains("exhausted"),
            "{}",
            o.reason
        );
        // Again in the same second: the same answer (without a walk).
        assert!(answer(
            &site,
            &mut t,
            &req("52:54:00:aa:00:03", MessageType::Discover),
            rx(),
            1000
        )
        .reply
        .is_none());
        // A release frees an address at once.
        let mut rel = req("52:54:00:aa:00:02", MessageType::Release);
        rel.set_ciaddr(Ipv4Addr::new(10, 77, 0, 201));
        let l = answer(&site, &mut t, &rel, rx(), 1000).commit.unwrap();
        t.apply(l);
        let o = answer(
            &site,
            &mut t,
            &req("52:54:00:aa:00:03", MessageType::Discover),
            rx(),
            1000,
        );
        assert_eq!(o.reply.unwrap().0.yiaddr(), Ipv4Addr::new(10, 77, 0, 201));
        // After 00:01's lease expires, 00:04 takes its address; 00:01 coming
        // back must not be offered the address it no longer holds.
        let later = 1000 + 3601;
        let mut r = req("52:54:00:aa:00:04", MessageType::Request);
        r.opts_mut()
            .insert(DhcpOption::RequestedIpAddress(Ipv4Addr::new(
                10, 77, 0, 200,
            )));
        let a = answer(&site, &mut t, &r, rx(), later);
        assert_eq!(a.kind, "ack", "{}", a.reason);
        t.apply(a.commit.unwrap());
        let o = answer(
            &site,
            &mut t,
            &req("52:54:00:aa:00:01", MessageType::Discover),
            rx(),
            later,
        );
        assert_ne!(
            o.reply.map(|r| r.0.yiaddr()),
            Some(Ipv4Addr::new(10, 77, 0, 200))
        );
    }

    #[test]
    fn proxy_dhcp_gives_boot_information_only() {
        let dir = tempfile::tempdir().unwrap();
        let lab = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab");
        let text = std::fs::read_to_string(lab.join("site.yaml"))
            .unwrap()
            .replace(
                "    serverAddress: 10.77.0.1\n",
                "    serverAddress: 10.77.0.1\n    mode: proxy\n",
            )
            .replace("dir: ignition", &format!("dir: {}/ignition", lab.display()));
        std::fs::write(dir.path().join("site.yaml"), text).unwrap();
        let site = site::load(&dir.path().join("site.yaml")).unwrap();
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
}
