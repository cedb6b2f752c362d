//! The DHCPv6 decision, pure: a client message (with the relays it came
//! through) and the site in, the reply and the bindings to make durable
//! out. No sockets, no clock: the caller passes `now`.
//!
//! RFC 8415 as a stateful server answers: Solicit → Advertise (Reply with
//! Rapid Commit when the client asks and the site allows), Request, Renew,
//! Rebind → Reply with the IA_NA bindings, Release and Decline → Reply,
//! Confirm → Success or NotOnLink, Information-request → Reply with the
//! configuration. Boot URLs (option 59) come from the same decision as
//! DHCPv4's ([`crate::v4::boot::decide_with`]), from option 61 (client
//! architecture), 16 (vendor class) and 15 (user class "iPXE").

use super::leases::{Ia, Lease6, Table};
use super::wire::{self, Hop, Msg};
use crate::bindings::LeaseState;
use crate::v4::boot::{decide_with, BootAnswer, ClientInfo};
use site::{Dhcp6, Mac, Network, Node, Site};
use std::net::{IpAddr, Ipv6Addr};

/// IANA's enterprise number for the vendor class UEFI firmware sends
/// (Intel's, 343), echoed with "HTTPClient".
const ENTERPRISE_INTEL: u32 = 343;

/// IA_NAs answered per message; more are left out of the reply.
pub const MAX_IAS: usize = 8;

/// One request as the server received it.
pub struct Request<'a> {
    pub msg: &'a Msg,
    /// The relays it came through, outermost first (empty: direct).
    pub hops: &'a [Hop],
    /// The UDP source: the client's link-local address, or a relay's.
    pub src: Ipv6Addr,
}

/// What to do about one request.
#[derive(Debug)]
pub struct Outcome {
    pub reply: Option<Msg>,
    /// Bindings that must be on disk before the reply is sent.
    pub commit: Vec<Lease6>,
    /// For metrics: `solicit`, `request`, …, or why it was dropped.
    pub kind: &'static str,
    pub reason: String,
    pub node: Option<String>,
    pub mac: Option<Mac>,
}

impl Outcome {
    fn drop(kind: &'static str, reason: impl Into<String>) -> Outcome {
        Outcome {
            reply: None,
            commit: Vec::new(),
            kind,
            reason: reason.into(),
            node: None,
            mac: None,
        }
    }
}

/// The client's MAC: from its DUID (LLT or LL), the nearest relay's
/// option 79 (RFC 6939), else the EUI-64 of the address it sent from.
pub fn client_mac(msg: &Msg, hops: &[Hop], src: Ipv6Addr) -> Option<Mac> {
    msg.get(wire::OPT_CLIENT_ID)
        .and_then(wire::duid_mac)
        .or_else(|| hops.last().and_then(|h| h.client_linklayer))
        .or_else(|| wire::eui64_mac(hops.last().map_or(src, |h| h.peer)))
}

/// What the client says about itself, in DHCPv4's terms.
pub fn client_info(msg: &Msg) -> ClientInfo {
    let arch = msg.get(wire::OPT_CLIENT_ARCH).and_then(wire::client_arch);
    let vendor_class = msg
        .class_items(wire::OPT_VENDOR_CLASS)
        .first()
        .map(|d| String::from_utf8_lossy(d).into_owned())
        // Firmware that names its architecture but no class boots as its
        // architecture says.
        .or_else(|| match arch? {
            6 | 7 | 9 | 11 => Some("PXEClient".into()),
            15 | 16 | 19 => Some("HTTPClient".into()),
            _ => None,
        });
    let ipxe = msg
        .class_items(wire::OPT_USER_CLASS)
        .iter()
        .any(|d| d.windows(4).any(|w| w == b"iPXE"));
    ClientInfo {
        arch,
        vendor_class,
        ipxe,
        pxelinux: false,
    }
}

/// The network the client is on: the nearest relay's link address, else
/// this server's own (a direct client is on the server's link).
fn client_network<'a>(site: &'a Site, d: &Dhcp6, hops: &[Hop]) -> Result<&'a Network, String> {
    let at = hops
        .iter()
        .rev()
        .map(|h| h.link)
        .find(|l| !l.is_unspecified() && !is_link_local(*l));
    let a = at.unwrap_or(d.server_address);
    site.networks
        .iter()
        .find(|n| n.v6().is_some_and(|s| s.net.contains(&IpAddr::V6(a))))
        .ok_or_else(|| match at {
            Some(l) => {
                format!("relayed from link address {l}, which is in no site network's IPv6 subnet")
            }
            None => format!("this server's address {a} is in no site network's IPv6 subnet"),
        })
}

fn is_link_local(a: Ipv6Addr) -> bool {
    a.segments()[0] & 0xffc0 == 0xfe80
}

/// Decides the answer to one request. `server_id` is this server's DUID.
pub fn answer(
    site: &Site,
    table: &mut Table,
    server_id: &[u8],
    req: &Request,
    now: u64,
) -> Outcome {
    let Some(d) = &site.host.dhcp6 else {
        return Outcome::drop("ignored", "DHCPv6 is not configured");
    };
    table.sweep_due(now);
    let msg = req.msg;
    let client_id = msg.get(wire::OPT_CLIENT_ID).filter(|c| !c.is_empty());
    let server = msg.get(wire::OPT_SERVER_ID);
    // RFC 8415 §11.1: a DUID is 3 to 130 octets (its type and at least one
    // more); a longer one would be kept and logged at any length.
    if [client_id, server]
        .into_iter()
        .flatten()
        .any(|d| !(3..=130).contains(&d.len()))
    {
        return Outcome::drop(
            "malformed",
            "a DUID shorter than 3 or longer than 130 octets",
        );
    }
    // RFC 8415 §16: which messages carry which identifiers.
    let (kind, need_server) = match msg.ty {
        wire::SOLICIT => ("solicit", Some(false)),
        wire::REQUEST => ("request", Some(true)),
        wire::RENEW => ("renew", Some(true)),
        wire::REBIND => ("rebind", Some(false)),
        wire::RELEASE => ("release", Some(true)),
        wire::DECLINE => ("decline", Some(true)),
        wire::CONFIRM => ("confirm", Some(false)),
        wire::INFORMATION_REQUEST => ("information-request", None),
        other => {
            return Outcome::drop(
                "ignored",
                format!("message type {other} is not one a server answers"),
            )
        }
    };
    if let Some(s) = server {
        if need_server == Some(false) {
            return Outcome::drop("malformed", format!("{kind} with a Server Identifier"));
        }
        if s != server_id {
            return Outcome::drop("not-ours", format!("{kind} for another server"));
        }
    } else if need_server == Some(true) {
        return Outcome::drop("malformed", format!("{kind} without a Server Identifier"));
    }
    // RFC 8415 §16.12: an Information-request asks for configuration only.
    if msg.ty == wire::INFORMATION_REQUEST
        && [wire::OPT_IA_NA, wire::OPT_IA_TA, wire::OPT_IA_PD]
            .into_iter()
            .any(|c| msg.get(c).is_some())
    {
        return Outcome::drop("malformed", "information-request with an IA option");
    }
    let client_id = match client_id {
        Some(c) => c.to_vec(),
        None if msg.ty == wire::INFORMATION_REQUEST => Vec::new(),
        None => return Outcome::drop("malformed", format!("{kind} without a Client Identifier")),
    };
    let net = match client_network(site, d, req.hops) {
        Ok(n) => n,
        Err(why) => return Outcome::drop("ignored", why),
    };
    let Some(sub) = net.v6() else {
        return Outcome::drop("ignored", "the client's network has no IPv6 subnet");
    };
    let mac = client_mac(msg, req.hops, req.src);
    let node = mac.as_ref().and_then(|m| site.node_by_mac(m));
    let who = node.map_or_else(
        || {
            mac.map_or_else(
                || format!("DUID {}", super::leases::hex(&client_id)),
                |m| m.to_string(),
            )
        },
        |n| n.name.clone(),
    );

    let rapid =
        msg.ty == wire::SOLICIT && d.rapid_commit && msg.get(wire::OPT_RAPID_COMMIT).is_some();
    let reply_type = if msg.ty == wire::SOLICIT && !rapid {
        wire::ADVERTISE
    } else {
        wire::REPLY
    };
    let mut m = Msg::new(reply_type, msg.xid);
    if !client_id.is_empty() {
        m.push(wire::OPT_CLIENT_ID, client_id.clone());
    }
    m.push(wire::OPT_SERVER_ID, server_id.to_vec());
    let mut commit = Vec::new();
    let mut notes = Vec::new();
    let lifetime = d.lease_time.as_secs().min(u64::from(u32::MAX - 1)) as u32;
    // At most MAX_IAS identity associations are answered per message: a
    // client needs one per interface address, and each is a binding made
    // durable before the Reply.
    let mut ias = msg.ia_nas();
    ias.truncate(MAX_IAS);
    let binds = |l: Lease6, table: &mut Table, commit: &mut Vec<Lease6>| {
        table.apply(l.clone());
        commit.push(l);
    };
    match msg.ty {
        wire::SOLICIT | wire::REQUEST | wire::RENEW | wire::REBIND => {
            let binding = reply_type == wire::REPLY;
            let mut any = false;
            for ia in &ias {
                let key = Ia::new(&client_id, ia.id);
                let asked = ia.addrs.first().copied();
                let mut inner = Vec::new();
                match address_for(site, table, sub, node, &key, asked, now, d.max_bindings) {
                    Ok(ip) => {
                        any = true;
                        wire::put(
                            &mut inner,
                            wire::OPT_IAADDR,
                            &wire::ia_addr(ip, lifetime, lifetime),
                        );
                        // Addresses it names that it may not keep:
                        // lifetimes 0, so it stops using them (§18.3.4).
                        for a in ia.addrs.iter().filter(|a| **a != ip && binding) {
                            wire::put(&mut inner, wire::OPT_IAADDR, &wire::ia_addr(*a, 0, 0));
                        }
                        notes.push(format!("IA {} {ip}", ia.id));
                        if binding {
                            let l = Lease6 {
                                ia: key,
                                ip,
                                expires: now + u64::from(lifetime),
                                state: LeaseState::Active,
                                mac: mac.map(|m| m.to_string()),
                            };
                            binds(l, table, &mut commit);
                        }
                    }
                    Err(why) => {
                        wire::put(
                            &mut inner,
                            wire::OPT_STATUS_CODE,
                            &wire::status(wire::STATUS_NO_ADDRS_AVAIL, &why),
                        );
                        notes.push(format!("IA {}: {why}", ia.id));
                    }
                }
                let t2 = (u64::from(lifetime) * 4 / 5) as u32;
                m.push(
                    wire::OPT_IA_NA,
                    wire::ia_na(ia.id, lifetime / 2, t2, &inner),
                );
            }
            if !ias.is_empty() && !any && msg.ty == wire::SOLICIT {
                m.push(
                    wire::OPT_STATUS_CODE,
                    wire::status(wire::STATUS_NO_ADDRS_AVAIL, "no address for any IA"),
                );
            }
            if rapid {
                m.push(wire::OPT_RAPID_COMMIT, Vec::new());
            }
        }
        wire::RELEASE | wire::DECLINE => {
            for ia in &ias {
                let key = Ia::new(&client_id, ia.id);
                // An IA none of whose addresses is bound to it is answered
                // NoBinding (RFC 8415 §18.3.7, §18.3.8).
                if !ia.addrs.iter().any(|a| table.holder(*a) == Some(&key)) {
                    let mut inner = Vec::new();
                    wire::put(
                        &mut inner,
                        wire::OPT_STATUS_CODE,
                        &wire::status(wire::STATUS_NO_BINDING, "no binding for this IA"),
                    );
                    m.push(wire::OPT_IA_NA, wire::ia_na(ia.id, 0, 0, &inner));
                }
                for &a in &ia.addrs {
                    // Only its holder gives an address up.
                    if table.holder(a) != Some(&key) {
                        notes.push(format!("IA {}: {a} is not its own", ia.id));
                        continue;
                    }
                    let (state, expires) = if msg.ty == wire::DECLINE {
                        (LeaseState::Declined, now + d.decline_hold.as_secs())
                    } else {
                        (LeaseState::Released, 0)
                    };
                    let l = Lease6 {
                        ia: key.clone(),
                        ip: a,
                        expires,
                        state,
                        mac: mac.map(|m| m.to_string()),
                    };
                    binds(l, table, &mut commit);
                    notes.push(format!("IA {} {a}", ia.id));
                }
            }
            m.push(
                wire::OPT_STATUS_CODE,
                wire::status(wire::STATUS_SUCCESS, ""),
            );
        }
        wire::CONFIRM => {
            let addrs: Vec<Ipv6Addr> = ias.iter().flat_map(|ia| ia.addrs.iter().copied()).collect();
            if addrs.is_empty() {
                return Outcome::drop("ignored", "confirm without addresses");
            }
            let on_link = addrs.iter().all(|a| sub.net.contains(&IpAddr::V6(*a)));
            let code = if on_link {
                wire::STATUS_SUCCESS
            } else {
                wire::STATUS_NOT_ON_LINK
            };
            m.push(wire::OPT_STATUS_CODE, wire::status(code, ""));
            notes.push(if on_link { "on link" } else { "not on link" }.into());
        }
        _ => {}
    }
    add_config(&mut m, site, net);
    let boot = add_boot(&mut m, site, d, node, msg);
    let boot_note = match &boot {
        Some(Ok(b)) => b.reason.clone(),
        Some(Err(why)) => format!("no boot URL: {why}"),
        None => "no boot URL asked".into(),
    };
    Outcome {
        reply: Some(m),
        commit,
        kind,
        reason: format!("{who}: {kind} [{}]; {boot_note}", notes.join(", ")),
        node: node.map(|n| n.name.clone()),
        mac,
    }
}

/// The address `ia` gets on `sub`: the node's reservation, else what it
/// holds, else the free pool address it asks for, else the next free one
/// (a new binding only while the table holds fewer than `max`).
#[allow(clippy::too_many_arguments)]
fn address_for(
    site: &Site,
    table: &mut Table,
    sub: &site::Subnet,
    node: Option<&Node>,
    ia: &Ia,
    asked: Option<Ipv6Addr>,
    now: u64,
    max: usize,
) -> Result<Ipv6Addr, String> {
    if let Some((n, ip)) = node.and_then(|n| n.ip6.map(|ip| (n, ip))) {
        if !sub.net.contains(&IpAddr::V6(ip)) {
            return Err(format!(
                "node {} is reserved {ip}, which is not on the client's subnet {}",
                n.name, sub.net
            ));
        }
        return Ok(ip);
    }
    let Some((IpAddr::V6(start), IpAddr::V6(end))) = sub.pool else {
        return Err(format!(
            "no reservation for this client and no pool in {}",
            sub.net
        ));
    };
    let in_pool = |a: Ipv6Addr| (start..=end).contains(&a);
    if let Some(l) = table.held_by(ia) {
        if in_pool(l.ip) {
            return Ok(l.ip);
        }
    }
    if table.get(ia).is_none() && table.len() >= max {
        // Forget what has expired, once a while: a flood of new DUIDs
        // would otherwise make every request walk the table.
        table.sweep_full(now);
        if table.len() >= max {
            return Err(format!(
                "the binding table is full ({max} bindings, host.dhcp6.maxBindings)"
            ));
        }
    }
    let held = site.node_ips_in(start.into(), end.into());
    let reserved = |a: Ipv6Addr| held.contains(&IpAddr::V6(a));
    if let Some(a) = asked {
        if in_pool(a) && !reserved(a) && table.is_free_for(a, ia, now) {
            return Ok(a);
        }
    }
    table
        .allocate(start, end, ia, now, reserved)
        .ok_or_else(|| format!("pool {start}-{end} has no free address"))
}

/// DNS servers (23) and the cluster's domain as search list (24).
fn add_config(m: &mut Msg, site: &Site, net: &Network) {
    let dns: Vec<u8> = net
        .dns_servers
        .iter()
        .filter_map(|a| match a {
            IpAddr::V6(a) => Some(a.octets()),
            IpAddr::V4(_) => None,
        })
        .flatten()
        .collect();
    if !dns.is_empty() {
        m.push(wire::OPT_DNS_SERVERS, dns);
    }
    m.push(
        wire::OPT_DOMAIN_LIST,
        wire::dns_name(&site.cluster.domain()),
    );
}

/// Option 59 (and 16 for UEFI HTTP Boot) when the client asks for 59 in
/// its Option Request; `None` when it does not.
fn add_boot(
    m: &mut Msg,
    site: &Site,
    d: &Dhcp6,
    node: Option<&Node>,
    req: &Msg,
) -> Option<Result<BootAnswer, String>> {
    if !req.requested().contains(&wire::OPT_BOOTFILE_URL) {
        return None;
    }
    let client = client_info(req);
    let answer = decide_with(node, &client, &d.boot_files, site.host.http.url_for(true));
    if let Ok(b) = &answer {
        let url = if b.tftp {
            format!("tftp://[{}]/{}", d.server_address, b.filename)
        } else {
            b.filename.clone()
        };
        if b.filename.is_empty() {
            return Some(Err("nothing to boot over DHCPv6 for this client".into()));
        }
        m.push(wire::OPT_BOOTFILE_URL, url.into_bytes());
        if let Some(vc) = &b.vendor_class {
            let mut v = ENTERPRISE_INTEL.to_be_bytes().to_vec();
            v.extend_from_slice(&wire::class_data(&[vc.as_bytes()]));
            m.push(wire::OPT_VENDOR_CLASS, v);
        }
    }
    Some(answer)
}
