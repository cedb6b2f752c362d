//! A listener and the base URLs nodes reach it by, and the one choice of
//! which base URL a client gets ([`Listen::base_url`]): bootd's scripts,
//! GRUB configs, Ignition pointers and discovery replies, and the URLs the
//! controller gives a provider, all go through it.

use super::Node;
use std::net::{IpAddr, SocketAddr};

/// A listener and the base URL nodes use to reach it (they differ behind NAT,
/// or when listening on 0.0.0.0).
#[derive(Debug, Clone)]
pub struct Listen {
    pub listen: SocketAddr,
    /// Without a trailing slash: the first of `urls`.
    pub url: String,
    /// Every URL given (one per address family at most), each without a
    /// trailing slash.
    pub urls: Vec<String>,
}

impl Listen {
    /// Which base URL a client gets:
    /// - the source address of its request known (`peer`): the URL of that
    ///   address's family (an IPv4-mapped IPv6 address is IPv4);
    /// - else a `node` with addresses of one family only: that family's URL
    ///   (a node with only an IPv6 address cannot fetch from an IPv4 URL);
    /// - else (a dual-stack node, or nothing known): the first URL.
    ///
    /// In each case a site without a URL of the family gives its first.
    pub fn base_url(&self, peer: Option<IpAddr>, node: Option<&Node>) -> &str {
        let v6 = match (peer, node) {
            (Some(p), _) => p.to_canonical().is_ipv6(),
            (None, Some(n)) => match (n.ip4, n.ip6) {
                (Some(_), None) => false,
                (None, Some(_)) => true,
                _ => return &self.url,
            },
            (None, None) => return &self.url,
        };
        self.url_for(v6)
    }

    /// The base URL for an address family: the URL whose host is an
    /// address of the family, else the first (a name, or the only URL).
    /// DHCP, which knows only the family it answers on, asks this; a
    /// client with an address or a node goes through [`Listen::base_url`].
    pub fn url_for(&self, v6: bool) -> &str {
        self.urls
            .iter()
            .find(|u| {
                url_host(u)
                    .parse::<IpAddr>()
                    .is_ok_and(|a| a.is_ipv6() == v6)
            })
            .unwrap_or(&self.url)
    }

    /// The host part of the URL (an IP address or a DNS name), for TLS SANs.
    pub fn url_host(&self) -> &str {
        url_host(&self.url)
    }
}

/// The host part of a URL (an IP address without brackets, or a name).
pub fn url_host(url: &str) -> &str {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let authority = rest.split('/').next().unwrap_or(rest);
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split(']').next().unwrap_or(v6);
    }
    authority
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or(authority)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Arch, FetchFrom, Firmware};

    const V4: &str = "http://10.77.0.1:8080";
    const V6: &str = "http://[fd00:77::1]:8080";

    fn listen(urls: &[&str]) -> Listen {
        Listen {
            listen: "0.0.0.0:8080".parse().unwrap(),
            url: urls[0].to_string(),
            urls: urls.iter().map(|u| u.to_string()).collect(),
        }
    }

    fn node(ip4: Option<&str>, ip6: Option<&str>) -> Node {
        Node {
            name: "n".into(),
            role: "worker".into(),
            macs: vec![],
            ip4: ip4.map(|a| a.parse().unwrap()),
            ip6: ip6.map(|a| a.parse().unwrap()),
            network: 0,
            arch: Arch::X86_64,
            firmware: Firmware::Auto,
            image: "i".into(),
            install_disk: None,
            root_device_hints: None,
            live: false,
            kernel_args: vec![],
            host_network: None,
            ipxe_binary: None,
            dhcp_options: vec![],
            fetch_from: FetchFrom::NodeAddress,
            addresses: None,
            relay: None,
            epoch: 0,
        }
    }

    #[test]
    fn a_known_peer_gets_the_url_of_its_family() {
        for l in [listen(&[V4, V6]), listen(&[V6, V4])] {
            let dual = node(Some("10.77.0.11"), Some("fd00:77::11"));
            for n in [None, Some(&dual)] {
                assert_eq!(l.base_url(Some("10.77.0.50".parse().unwrap()), n), V4);
                assert_eq!(
                    l.base_url(Some("::ffff:10.77.0.50".parse().unwrap()), n),
                    V4
                );
                assert_eq!(l.base_url(Some("fd00:77::50".parse().unwrap()), n), V6);
            }
            // The peer wins over the node's family.
            let v4_only = node(Some("10.77.0.11"), None);
            assert_eq!(
                l.base_url(Some("fd00:77::50".parse().unwrap()), Some(&v4_only)),
                V6
            );
        }
    }

    #[test]
    fn without_a_peer_a_single_family_node_gets_its_familys_url() {
        for l in [listen(&[V4, V6]), listen(&[V6, V4])] {
            let v6_only = node(None, Some("fd00:77::11"));
            let v4_only = node(Some("10.77.0.11"), None);
            assert_eq!(l.base_url(None, Some(&v6_only)), V6);
            assert_eq!(l.base_url(None, Some(&v4_only)), V4);
            // Dual stack, or nothing known: the first URL.
            let dual = node(Some("10.77.0.11"), Some("fd00:77::11"));
            assert_eq!(l.base_url(None, Some(&dual)), l.url);
            assert_eq!(l.base_url(None, None), l.url);
        }
    }

    #[test]
    fn a_site_without_a_url_of_the_family_gives_its_first() {
        let l = listen(&[V4]);
        assert_eq!(l.base_url(Some("fd00:77::50".parse().unwrap()), None), V4);
        assert_eq!(l.base_url(None, Some(&node(None, Some("fd00:77::11")))), V4);
        let named = listen(&["http://boot.example:8080"]);
        assert_eq!(
            named.base_url(Some("fd00:77::50".parse().unwrap()), None),
            "http://boot.example:8080"
        );
    }

    #[test]
    fn url_hosts() {
        assert_eq!(url_host(V4), "10.77.0.1");
        assert_eq!(url_host(V6), "fd00:77::1");
        assert_eq!(url_host("https://boot.example/x"), "boot.example");
    }
}
