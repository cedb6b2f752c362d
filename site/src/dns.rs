//! The site's `dns:` section (dnsd): the file as written ([`wire`]) and the
//! validated form ([`Dns`]). Validation is in `validate/dns.rs`.
//!
//! Names in the model are absolute, without the trailing dot, in the case
//! the site wrote them (DNS compares names case-insensitively and answers
//! preserve case).

use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// Stage one: `dns:` as written.
pub mod wire {
    use serde::Deserialize;

    #[derive(Debug, Default, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Dns {
        #[serde(default)]
        pub listen: Vec<String>,
        pub http: Option<String>,
        #[serde(default)]
        pub serve_base_domain: bool,
        #[serde(default)]
        pub nameservers: Vec<Nameserver>,
        pub ttl: Option<String>,
        pub negative_ttl: Option<String>,
        #[serde(default)]
        pub upstreams: Vec<String>,
        #[serde(default)]
        pub notify: Vec<String>,
        #[serde(default)]
        pub allow_transfer: Vec<String>,
        pub allow_forward: Option<Vec<String>>,
        pub rate_limit: Option<RateLimit>,
        #[serde(default)]
        pub records: Vec<Record>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Nameserver {
        pub name: Option<String>,
        pub ip: Option<String>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct RateLimit {
        pub responses_per_second: Option<u32>,
        pub slip: Option<u32>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Record {
        pub name: Option<String>,
        #[serde(rename = "type")]
        pub rtype: Option<String>,
        pub value: Option<String>,
        pub ttl: Option<String>,
    }
}

pub const DEFAULT_TTL: Duration = Duration::from_secs(300);
pub const DEFAULT_NEGATIVE_TTL: Duration = Duration::from_secs(30);
pub const DEFAULT_RATE_LIMIT: u32 = 1000;
pub const DEFAULT_SLIP: u32 = 2;

/// Stage two: dnsd's validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dns {
    /// UDP and TCP listeners (default `0.0.0.0:53`).
    pub listen: Vec<SocketAddr>,
    /// `/metrics` and `/healthz`; `None`: no HTTP listener.
    pub http: Option<SocketAddr>,
    /// Also be authoritative for `cluster.baseDomain` itself (one zone at the
    /// base domain holding the cluster's names).
    pub serve_base_domain: bool,
    /// NS records (with glue) of every zone. Empty only when the site has
    /// no `dns:` section and no address to default to; dnsd refuses to
    /// start then.
    pub nameservers: Vec<Nameserver>,
    pub ttl: Duration,
    /// SOA minimum, and the TTL of the SOA in negative answers.
    pub negative_ttl: Duration,
    /// Resolvers that names outside dnsd's zones are forwarded to (queries
    /// with RD set); empty: such queries are REFUSED.
    pub upstreams: Vec<SocketAddr>,
    /// Secondaries sent a NOTIFY when the zones change.
    pub notify: Vec<SocketAddr>,
    /// Who may AXFR/IXFR.
    pub allow_transfer: Vec<IpNet>,
    /// Whose queries are forwarded to `upstreams` (others outside the zones
    /// are REFUSED): by default the site's networks and loopback, so dnsd
    /// is no open resolver for the rest of the world to amplify through.
    pub allow_forward: Vec<IpNet>,
    /// Responses per second per client network (/24, /56); 0: off.
    pub rate_limit: u32,
    /// Every `slip`-th limited response is sent truncated (TC) instead of
    /// dropped, so real clients retry over TCP; 0: drop all.
    pub slip: u32,
    pub records: Vec<Record>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nameserver {
    /// Absolute name.
    pub name: String,
    pub ip: IpAddr,
}

/// An extra record from `dns.records`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Absolute owner name.
    pub name: String,
    pub ttl: Option<Duration>,
    pub data: RData,
}

/// Record data; every name absolute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RData {
    A(Ipv4Addr),
    Aaaa(Ipv6Addr),
    Cname(String),
    Ns(String),
    Ptr(String),
    Mx {
        preference: u16,
        exchange: String,
    },
    Srv {
        priority: u16,
        weight: u16,
        port: u16,
        target: String,
    },
    Txt(String),
}

impl RData {
    pub fn type_name(&self) -> &'static str {
        match self {
            RData::A(_) => "A",
            RData::Aaaa(_) => "AAAA",
            RData::Cname(_) => "CNAME",
            RData::Ns(_) => "NS",
            RData::Ptr(_) => "PTR",
            RData::Mx { .. } => "MX",
            RData::Srv { .. } => "SRV",
            RData::Txt(_) => "TXT",
        }
    }
}

/// The reverse zones dnsd serves for `subnets`, as absolute names
/// (`0.77.10.in-addr.arpa`, nibble zones under `ip6.arpa`). A prefix that is
/// not on an octet (nibble) boundary becomes the zones of the next boundary
/// below it when that is at most 16 zones (a /22 is four /24 zones), else
/// the zone of the boundary above (a /26 is served as its /24).
pub fn reverse_zones(subnets: &[IpNet]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for net in subnets {
        let (step, bits) = match net {
            IpNet::V4(_) => (8u8, 32u8),
            IpNet::V6(_) => (4u8, 128u8),
        };
        let p = net.prefix_len();
        let down = p.div_ceil(step) * step;
        let zones: Vec<IpNet> = if down == p || down - p > 4 || down > bits {
            let up = (p / step) * step;
            vec![IpNet::new(net.network(), up)
                .map(|n| n.trunc())
                .unwrap_or(*net)]
        } else {
            net.subnets(down).map(|s| s.collect()).unwrap_or_default()
        };
        for z in zones {
            let name = reverse_zone_name(&z);
            if !out.contains(&name) {
                out.push(name);
            }
        }
    }
    out
}

/// `10.77.0.0/24` → `0.77.10.in-addr.arpa`; the prefix must be on an octet
/// (IPv4) or nibble (IPv6) boundary.
pub fn reverse_zone_name(net: &IpNet) -> String {
    match net {
        IpNet::V4(n) => {
            let o = n.network().octets();
            let k = (n.prefix_len() / 8) as usize;
            let mut labels: Vec<String> = o[..k].iter().rev().map(|b| b.to_string()).collect();
            labels.push("in-addr.arpa".into());
            labels.join(".")
        }
        IpNet::V6(n) => {
            let k = (n.prefix_len() / 4) as usize;
            ip6_arpa(&ipv6_nibbles(n.network())[..k])
        }
    }
}

/// `10.77.0.5` → `5.0.77.10.in-addr.arpa`.
pub fn reverse_name(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            format!("{}.{}.{}.{}.in-addr.arpa", o[3], o[2], o[1], o[0])
        }
        IpAddr::V6(a) => ip6_arpa(&ipv6_nibbles(a)),
    }
}

/// The `ip6.arpa` name of the leading `nibbles` of an address (all 32 for
/// the address, fewer for a zone): most significant last.
fn ip6_arpa(nibbles: &[u8]) -> String {
    let mut labels: Vec<String> = nibbles.iter().rev().map(|d| format!("{d:x}")).collect();
    labels.push("ip6.arpa".into());
    labels.join(".")
}

fn ipv6_nibbles(a: Ipv6Addr) -> Vec<u8> {
    a.octets().iter().flat_map(|b| [b >> 4, b & 0xf]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reverse_zone_names() {
        let z = |s: &str| reverse_zones(&[s.parse().unwrap()]);
        assert_eq!(z("10.77.0.0/24"), ["0.77.10.in-addr.arpa"]);
        assert_eq!(z("10.0.0.0/8"), ["10.in-addr.arpa"]);
        assert_eq!(
            z("10.0.4.0/22"),
            [
                "4.0.10.in-addr.arpa",
                "5.0.10.in-addr.arpa",
                "6.0.10.in-addr.arpa",
                "7.0.10.in-addr.arpa"
            ]
        );
        assert_eq!(z("10.0.0.64/26"), ["0.0.10.in-addr.arpa"]);
        assert_eq!(z("10.0.0.0/12").len(), 16);
        assert_eq!(z("10.0.0.0/9"), ["10.in-addr.arpa"]);
        assert_eq!(z("fd00:1:2::/48"), ["2.0.0.0.1.0.0.0.0.0.d.f.ip6.arpa"]);
        assert_eq!(
            reverse_name("10.77.0.5".parse().unwrap()),
            "5.0.77.10.in-addr.arpa"
        );
        assert!(reverse_name("fd00::1".parse().unwrap()).starts_with("1.0.0.0.0.0.0.0"));
    }
}
