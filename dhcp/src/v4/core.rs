//! The DHCP decision, pure: given the site, the lease table, a request and
//! where it came from, what do we answer, what must be durable first, and
//! why. No sockets, no clock (the caller passes `now`).

use super::boot::{self, ClientInfo, IPXE_NO_PXEDHCP, OPT_IPXE};
use super::leases::{Lease, LeaseState, Table};
use dhcproto::v4::{DhcpOption, HType, Message, MessageType, Opcode, OptionCode, UnknownOption};
use dhcproto::{Encodable, Encoder};
use ipnet::IpNet;
use site::{DhcpMode, Mac, Network, Node, Site, Subnet};
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
    /// This appliance's address on the link the request arrived on, when
    /// it is in another site network than `serverAddress` (an appliance of
    /// another rack, its serverAddress the site's boot address): a client
    /// that is not relayed is on that address's network.
    pub link: Option<Ipv4Addr>,
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

    /// A DHCPNAK for `requested`, saying `why` (option 56, and the log).
    fn nak(
        req: &Message,
        server: Ipv4Addr,
        requested: Ipv4Addr,
        mac: Mac,
        who: &str,
        why: String,
    ) -> Outcome {
        let mut m = base_reply(req, MessageType::Nak, server);
        m.opts_mut().insert(DhcpOption::Message(why.clone()));
        Outcome {
            reply: Some((m, dest_for(req, requested, mac, true))),
            commit: None,
            kind: "nak",
            reason: format!("{who}: NAK: {why}"),
        }
    }
}

/// A site network's IPv4 subnet: what DHCPv4 hands out on it.
#[derive(Clone, Copy)]
struct Net4<'a> {
    net: &'a Network,
    sub: &'a Subnet,
}

fn network_of(site: &Site, ip: Ipv4Addr) -> Option<Net4<'_>> {
    site.networks
        .iter()
        .find_map(|net| net.subnet_of(IpAddr::V4(ip)).map(|sub| Net4 { net, sub }))
}

/// The subnet the client is on: chosen by link selection (option 118), the
/// relay's address (giaddr), or our own address on the local link.
fn client_network<'a>(
    site: &'a Site,
    req: &Message,
    server: Ipv4Addr,
    link: Option<Ipv4Addr>,
) -> Result<Net4<'a>, String> {
    if let Some(DhcpOption::SubnetSelection(sel)) = req.opts().get(OptionCode::SubnetSelection) {
        return network_of(site, *sel)
            .ok_or_else(|| format!("link selection {sel} is in no site network"));
    }
    let gi = req.giaddr();
    if !gi.is_unspecified() {
        return network_of(site, gi)
            .ok_or_else(|| format!("relayed from giaddr {gi}, which is in no site network"));
    }
    let here = link.unwrap_or(server);
    network_of(site, here)
        .ok_or_else(|| format!("this server's address {here} is in no site network"))
}

/// The address this client should have on `net`, if any. `requested` is
/// the address a REQUEST names: a free pool address the client asks for is
/// granted (RFC 2131 §4.3.2) rather than NAKed because another was computed.
fn address_for(
    site: &Site,
    table: &mut Table,
    net: Net4<'_>,
    node: Option<&Node>,
    mac: &Mac,
    now: u64,
    requested: Option<Ipv4Addr>,
) -> Result<Ipv4Addr, String> {
    // A node with no IPv4 address reserved takes one from the pool.
    if let Some((n, ip)) = node.and_then(|n| n.ip4.map(|ip| (n, ip))) {
        if !net.sub.net.contains(&IpAddr::V4(ip)) {
            return Err(format!(
                "node {} is reserved {ip} which is not on the client's subnet {}",
                n.name, net.sub.net
            ));
        }
        return Ok(ip);
    }
    let Some((IpAddr::V4(start), IpAddr::V4(end))) = net.sub.pool else {
        return Err("unknown MAC and no dynamic pool on this subnet".into());
    };
    let in_pool = |ip: Ipv4Addr| (start..=end).contains(&ip);
    if let Some(l) = table.held_by(mac) {
        if in_pool(l.ip) {
            return Ok(l.ip);
        }
    }
    let held = site.node_ips_in(start.into(), end.into());
    let reserved = |ip: Ipv4Addr| held.contains(&IpAddr::V4(ip));
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

/// The seconds left of the lease `mac` holds when a REQUEST for `want`
/// may be answered with it as it stands: the same address and hostname,
/// active, granted less than `threshold` of `lease_secs` ago (Kea's lease
/// caching: a machine's PXE ROM and then iPXE ask within seconds). `None`:
/// write `want`.
fn cached_secs(
    table: &Table,
    mac: &Mac,
    want: &Lease,
    now: u64,
    lease_secs: u32,
    threshold: f64,
) -> Option<u32> {
    if threshold <= 0.0 {
        return None;
    }
    let held = table.held_by(mac)?;
    let left = held.expires.checked_sub(now)?;
    let fresh = (f64::from(lease_secs) * (1.0 - threshold)) as u64;
    // The table's lease, on disk: not one whose write is in flight or failed.
    let same = held.ip == want.ip
        && held.state == LeaseState::Active
        && held.hostname == want.hostname
        && table.is_durable(held);
    (same && left >= fresh.max(1) && left <= u64::from(lease_secs)).then_some(left as u32)
}

/// Option 82 as the relay sent it. The server puts the packet's own bytes
/// in the message ([`super::wire::relay_agent_info`]: decoding would sort
/// the sub-options and drop repeated ones); a message built otherwise has
/// its decoded form encoded again.
pub fn relay_info(req: &Message) -> Option<Vec<u8>> {
    match req.opts().get(OptionCode::RelayAgentInformation)? {
        DhcpOption::Unknown(u) => Some(u.data().to_vec()),
        DhcpOption::RelayAgentInformation(info) => {
            let mut buf = Vec::new();
            info.encode(&mut Encoder::new(&mut buf)).ok()?;
            Some(buf)
        }
        _ => None,
    }
}

/// The site node `req` comes from: by its MAC, else by the switch port
/// option 82 names, when a trusted relay (`host.dhcp.trustedRelays`)
/// forwarded it: replies go back through that relay, to that port.
pub fn node_of<'a>(site: &'a Site, req: &Message, mac: &Mac) -> Option<&'a Node> {
    site.node_by_mac(mac).or_else(|| {
        let trusted = &site.host.dhcp.as_ref()?.trusted_relays;
        if !trusted.contains(&req.giaddr()) {
            return None;
        }
        let raw = relay_info(req)?;
        let (circuit, remote) = super::wire::relay_ids(&raw)?;
        site.node_by_relay(circuit, remote)
    })
}

/// A BOOTREPLY to `req`: its transaction, flags, relay and client, and the
/// relay's option 82 echoed unchanged (RFC 3046 §2.2: relays drop, or
/// cannot route, replies without it).
fn reply_header(req: &Message) -> Message {
    let mut m = Message::default();
    m.set_opcode(Opcode::BootReply)
        .set_htype(HType::Eth)
        .set_xid(req.xid())
        .set_flags(req.flags())
        .set_giaddr(req.giaddr())
        .set_chaddr(req.chaddr());
    if let Some(raw) = relay_info(req) {
        put_relay_info(&mut m, raw);
    }
    m
}

/// Puts option 82's raw bytes in `m`, to be encoded as they are.
///
/// dhcproto keys an `Unknown` option by `OptionCode::Unknown(82)`, which
/// its encoder does not recognise as option 82 and writes twice (once in
/// code order, once as the final option 82). A decoded option first sets
/// the key to `RelayAgentInformation`; inserting again replaces the value
/// and keeps that key (a map keeps the first of equal keys), so the raw
/// bytes are written once, last.
pub fn put_relay_info(m: &mut Message, raw: Vec<u8>) {
    let o = m.opts_mut();
    o.remove(OptionCode::RelayAgentInformation);
    o.insert(DhcpOption::RelayAgentInformation(Default::default()));
    o.insert(DhcpOption::Unknown(UnknownOption::new(
        OptionCode::RelayAgentInformation,
        raw,
    )));
}

fn base_reply(req: &Message, t: MessageType, server: Ipv4Addr) -> Message {
    let mut m = reply_header(req);
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
    net: Net4<'_>,
    node: Option<&Node>,
    lease_secs: Option<u32>,
) {
    let dhcp = site.host.dhcp.as_ref().expect("caller checked");
    let o = m.opts_mut();
    o.insert(DhcpOption::SubnetMask(netmask(&net.sub.net)));
    if let Some(IpAddr::V4(gw)) = net.sub.gateway {
        o.insert(DhcpOption::Router(vec![gw]));
    }
    let dns: Vec<Ipv4Addr> = net
        .net
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
    if let Some(cfg) = &b.pxelinux {
        m.opts_mut().insert(DhcpOption::Unknown(UnknownOption::new(
            OptionCode::Unknown(boot::OPT_PXELINUX_CONFIG),
            cfg.clone().into_bytes(),
        )));
        m.opts_mut().insert(DhcpOption::Unknown(UnknownOption::new(
            OptionCode::Unknown(boot::OPT_PXELINUX_PREFIX),
            format!("{}/", site.host.http.url_for(false)).into_bytes(),
        )));
    }
    if b.filename.is_empty() {
        return;
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

/// A plain BOOTP request (no DHCP message type: PowerVM LPAR firmware's
/// network boot). Served to nodes only, with their fixed address and no
/// lease (RFC 951/1542): address, netmask, router, DNS, host name and the
/// boot file the node's firmware gets (GRUB's core.elf for Open Firmware).
fn bootp(site: &Site, req: &Message, mac: Mac, link: Option<Ipv4Addr>) -> Outcome {
    let Some(dhcp) = &site.host.dhcp else {
        return Outcome::drop("disabled", "DHCP is not configured in the site");
    };
    if dhcp.mode == DhcpMode::Proxy {
        return Outcome::drop("ignored", "BOOTP: proxyDHCP gives no addresses");
    }
    let Some(node) = node_of(site, req, &mac) else {
        return Outcome::drop(
            "ignored",
            "BOOTP from a MAC no node has (BOOTP is served to nodes only)",
        );
    };
    let server = dhcp.server_address;
    let net = match client_network(site, req, server, link) {
        Ok(n) => n,
        Err(why) => return Outcome::drop("ignored", format!("BOOTP: {why}")),
    };
    let Some(ip) = node.ip4 else {
        return Outcome::drop(
            "ignored",
            format!("BOOTP: node {} has no IPv4 address reserved", node.name),
        );
    };
    if !net.sub.net.contains(&IpAddr::V4(ip)) {
        return Outcome::drop(
            "ignored",
            format!(
                "BOOTP: node {} is reserved {ip} which is not on the client's subnet {}",
                node.name, net.sub.net
            ),
        );
    }
    let mut m = reply_header(req);
    m.set_yiaddr(ip).set_siaddr(server);
    add_config(&mut m, site, net, Some(node), None);
    let client = ClientInfo::from_message(req);
    let boot = boot::decide(site, Some(node), &client);
    let note = match &boot {
        Ok(b) => {
            add_boot(&mut m, site, b);
            b.reason.clone()
        }
        Err(why) => format!("no boot file: {why}"),
    };
    let dest = dest_for(req, ip, mac, false);
    Outcome {
        reply: Some((m, dest)),
        commit: None,
        kind: "bootp",
        reason: format!("{}: BOOTP {ip}; {note}", node.name),
    }
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
        if rx.local_port == 4011 {
            return Outcome::drop("ignored", "BOOTP on the proxyDHCP port");
        }
        return bootp(site, req, mac, rx.link);
    };
    let server = dhcp.server_address;
    let node = node_of(site, req, &mac);
    let client = ClientInfo::from_message(req);
    let boot = boot::decide(site, node, &client);
    let net = match client_network(site, req, server, rx.link) {
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
                            .any(|n| n.contains(IpAddr::V4(requested))) =>
                {
                    return Outcome::drop("ignored", why);
                }
                Err(why) => return Outcome::nak(req, server, requested, mac, who, why),
            };
            if requested != ip {
                let why = format!("requested {requested}, but this client's address is {ip}");
                return Outcome::nak(req, server, requested, mac, who, why);
            }
            let lease = Lease {
                mac: mac.to_string(),
                ip,
                expires: now + u64::from(lease_secs),
                hostname: hostname_of(req),
                state: LeaseState::Active,
            };
            // The lease this client was granted moments ago (a PXE ROM's,
            // then iPXE's exchange seconds later): answered as it stands,
            // with its remaining time, and nothing written.
            let cached = cached_secs(table, &mac, &lease, now, lease_secs, dhcp.cache_threshold);
            let mut m = base_reply(req, MessageType::Ack, server);
            m.set_yiaddr(ip);
            m.set_ciaddr(req.ciaddr());
            add_config(&mut m, site, net, node, Some(cached.unwrap_or(lease_secs)));
            if let Ok(b) = &boot {
                add_boot(&mut m, site, b);
            }
            let dest = dest_for(req, ip, mac, false);
            Outcome {
                reply: Some((m, dest)),
                commit: cached.is_none().then_some(lease),
                kind: "ack",
                reason: format!(
                    "{who}: ack {ip}{}; {}",
                    if cached.is_some() {
                        " (its lease as it stands: nothing written)"
                    } else {
                        ""
                    },
                    boot_note(&boot)
                ),
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
            // Only the client holding the address may say it is taken: a
            // DECLINE from anyone else (a forged one) would take any address
            // out of the pool.
            if table.held_by(&mac).is_none_or(|l| l.ip != ip) {
                return Outcome::drop(
                    "ignored",
                    format!("{who}: DECLINE of {ip}, which it does not hold"),
                );
            }
            // A reserved address is the site's to fix: say so loudly. A pool
            // address is quarantined for the decline hold time.
            let lease = Lease {
                mac: mac.to_string(),
                ip,
                expires: now + dhcp.decline_hold.as_secs(),
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

// Tests: dhcp/tests/it/v4_core.rs (`answer` without sockets, golden dumps).
