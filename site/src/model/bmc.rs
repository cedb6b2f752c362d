//! `host.api.bmcCredentials`: which BMC origins each password a node may
//! reference is sent to, and the pure decision whether a node's reference
//! may go to its BMC ([`bmc_binding`]). No I/O: the providers read the
//! password only once this says yes.

use super::SecretRef;
use std::net::IpAddr;
use std::path::{Component, PathBuf};

/// One `host.api.bmcCredentials` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BmcCredential {
    pub password: PasswordPattern,
    pub origins: Vec<BmcOrigin>,
    /// Nodes may set `allowPlainHttp` (their url at one of the `http://` origins).
    pub allow_plain_http: bool,
    /// Nodes may set `insecureSkipVerify` (their url at one of the `https://` origins).
    pub insecure_skip_verify: bool,
}

/// The password references an entry covers: one, or (a name ending in
/// `*`) every one under a directory or with a name prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PasswordPattern {
    File(PathBuf),
    /// `{file: DIR/*}`: every file below `DIR`.
    FilesUnder(PathBuf),
    Credential(String),
    /// `{credential: PREFIX*}`.
    CredentialPrefix(String),
    Env(String),
    /// `{env: PREFIX*}`.
    EnvPrefix(String),
}

impl PasswordPattern {
    /// Whether a node's reference is one this entry covers. A file path with
    /// `..` is covered by no directory (it could leave it).
    pub fn matches(&self, r: &SecretRef) -> bool {
        match (self, r) {
            (PasswordPattern::File(p), SecretRef::File(f)) => p == f,
            (PasswordPattern::FilesUnder(d), SecretRef::File(f)) => {
                !f.components().any(|c| matches!(c, Component::ParentDir))
                    && f.starts_with(d)
                    && f != d
            }
            (PasswordPattern::Credential(c), SecretRef::Credential(n)) => c == n,
            (PasswordPattern::CredentialPrefix(c), SecretRef::Credential(n)) => n.starts_with(c),
            (PasswordPattern::Env(e), SecretRef::Env(v)) => e == v,
            (PasswordPattern::EnvPrefix(e), SecretRef::Env(v)) => v.starts_with(e),
            _ => false,
        }
    }
}

/// How a BMC is spoken to: the scheme of an origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BmcScheme {
    Https,
    Http,
    Ipmi,
}

impl BmcScheme {
    pub fn as_str(self) -> &'static str {
        match self {
            BmcScheme::Https => "https",
            BmcScheme::Http => "http",
            BmcScheme::Ipmi => "ipmi",
        }
    }
    pub fn default_port(self) -> u16 {
        match self {
            BmcScheme::Https => 443,
            BmcScheme::Http => 80,
            BmcScheme::Ipmi => 623,
        }
    }
}

/// The host part of an origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OriginHost {
    /// A DNS name, lower case: the same name only (never resolved).
    Name(String),
    /// An address (`/32`, `/128`) or a network.
    Net(IpAddr, u8),
}

/// `scheme://host[:port]` of `host.api.bmcCredentials[].origins`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BmcOrigin {
    pub scheme: BmcScheme,
    pub host: OriginHost,
    /// `None`: any port (`:*`); no port written is the scheme's default.
    pub port: Option<u16>,
}

/// Where a node's provider would send the password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BmcTarget {
    pub scheme: BmcScheme,
    /// Lower case, without the brackets of an IPv6 address.
    pub host: String,
    pub port: u16,
}

impl std::fmt::Display for BmcTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(
                f,
                "{}://[{}]:{}",
                self.scheme.as_str(),
                self.host,
                self.port
            )
        } else {
            write!(f, "{}://{}:{}", self.scheme.as_str(), self.host, self.port)
        }
    }
}

impl std::fmt::Display for BmcOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://", self.scheme.as_str())?;
        match &self.host {
            OriginHost::Name(n) => write!(f, "{n}")?,
            OriginHost::Net(a @ IpAddr::V4(_), 32) | OriginHost::Net(a @ IpAddr::V6(_), 128) => {
                if a.is_ipv6() {
                    write!(f, "[{a}]")?
                } else {
                    write!(f, "{a}")?
                }
            }
            OriginHost::Net(a @ IpAddr::V6(_), l) => write!(f, "[{a}/{l}]")?,
            OriginHost::Net(a, l) => write!(f, "{a}/{l}")?,
        }
        match self.port {
            Some(p) => write!(f, ":{p}"),
            None => write!(f, ":*"),
        }
    }
}

impl BmcTarget {
    /// The origin of a Redfish url (`http(s)://host[:port]/…`); `None` when
    /// it is not one.
    pub fn of_url(url: &str) -> Option<BmcTarget> {
        let (scheme, rest) = url.split_once("://")?;
        let scheme = match scheme {
            "https" => BmcScheme::Https,
            "http" => BmcScheme::Http,
            _ => return None,
        };
        let auth = rest.split(['/', '?', '#']).next()?;
        if auth.contains('@') {
            return None;
        }
        let (host, port) = split_host_port(auth)?;
        let port = match port {
            None => scheme.default_port(),
            Some(p) => p.parse().ok()?,
        };
        BmcTarget::new(scheme, host, port)
    }

    /// An IPMI BMC's address and port.
    pub fn ipmi(address: &str, port: u16) -> Option<BmcTarget> {
        BmcTarget::new(BmcScheme::Ipmi, address.trim_matches(['[', ']']), port)
    }

    fn new(scheme: BmcScheme, host: &str, port: u16) -> Option<BmcTarget> {
        if host.is_empty() {
            return None;
        }
        let host = match host.parse::<IpAddr>() {
            Ok(a) => a.to_string(),
            Err(_) => host.trim_end_matches('.').to_ascii_lowercase(),
        };
        Some(BmcTarget { scheme, host, port })
    }
}

/// `host[:port]` or `[v6][:port]`, the port as written.
fn split_host_port(s: &str) -> Option<(&str, Option<&str>)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        return match after {
            "" => Some((h, None)),
            a => Some((h, Some(a.strip_prefix(':')?))),
        };
    }
    match s.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => Some((h, Some(p))),
        Some(_) => None,
        None => Some((s, None)),
    }
}

impl BmcOrigin {
    /// `https://10.1.0.0/24`, `https://bmc-r1.example:443`, `ipmi://[fd00::/64]:*`, …
    pub fn parse(s: &str) -> Result<BmcOrigin, String> {
        let want = "want scheme://host[:port]: https, http or ipmi; host a name, an address or a network (10.1.0.0/24, [fd00::/64]); port a number or *";
        let (scheme, rest) = s.split_once("://").ok_or(want)?;
        let scheme = match scheme {
            "https" => BmcScheme::Https,
            "http" => BmcScheme::Http,
            "ipmi" => BmcScheme::Ipmi,
            _ => return Err(format!("{scheme}://: {want}")),
        };
        if rest.contains(['@', '?', '#']) || rest.chars().any(|c| c.is_whitespace()) {
            return Err(format!("only scheme://host[:port]: {want}"));
        }
        let (host, port) = split_host_port(rest).ok_or(want)?;
        let port = match port {
            None => Some(scheme.default_port()),
            Some("*") => None,
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 => Some(n),
                _ => return Err(format!("port {p:?}: a number 1-65535 or *")),
            },
        };
        let host = match host.split_once('/') {
            Some((a, len)) => {
                let a: IpAddr = a
                    .parse()
                    .map_err(|_| format!("{a:?}: a network is an address/length"))?;
                let max = if a.is_ipv4() { 32 } else { 128 };
                let len: u8 = len
                    .parse()
                    .ok()
                    .filter(|l| *l <= max)
                    .ok_or_else(|| format!("/{len}: a prefix length 0-{max}"))?;
                if masked(a, len) != a {
                    return Err(format!("{a}/{len} has bits set past its prefix"));
                }
                OriginHost::Net(a, len)
            }
            None => match host.parse::<IpAddr>() {
                Ok(a) => OriginHost::Net(a, if a.is_ipv4() { 32 } else { 128 }),
                Err(_) if name_ok(host) => OriginHost::Name(host.to_ascii_lowercase()),
                Err(_) => return Err(format!("{host:?} is not a host name or address")),
            },
        };
        Ok(BmcOrigin { scheme, host, port })
    }

    pub fn matches(&self, t: &BmcTarget) -> bool {
        if self.scheme != t.scheme || self.port.is_some_and(|p| p != t.port) {
            return false;
        }
        match (&self.host, t.host.parse::<IpAddr>()) {
            (OriginHost::Name(n), Err(_)) => *n == t.host,
            (OriginHost::Net(net, len), Ok(a)) => {
                a.is_ipv4() == net.is_ipv4() && masked(a, *len) == *net
            }
            _ => false,
        }
    }
}

fn name_ok(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 253
        && h.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

fn masked(a: IpAddr, len: u8) -> IpAddr {
    match a {
        IpAddr::V4(v) => {
            let m = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            IpAddr::V4((u32::from(v) & m).into())
        }
        IpAddr::V6(v) => {
            let m = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len)
            };
            IpAddr::V6((u128::from(v) & m).into())
        }
    }
}

/// A password reference as a node writes it (`{credential: "bmc-rack1"}`).
pub fn describe_ref(r: &SecretRef) -> String {
    match r {
        SecretRef::File(f) => format!("{{file: {:?}}}", f.display().to_string()),
        SecretRef::Credential(c) => format!("{{credential: {c:?}}}"),
        SecretRef::Env(v) => format!("{{env: {v:?}}}"),
    }
}

/// Whether the password `r` may be sent to `t`, with `insecureSkipVerify`
/// and `allowPlainHttp` as the node sets them: `Err` says why not, naming
/// `host.api.bmcCredentials` (never the password, which is not read yet).
pub fn bmc_binding(
    creds: &[BmcCredential],
    r: &SecretRef,
    t: &BmcTarget,
    insecure_skip_verify: bool,
    allow_plain_http: bool,
) -> Result<(), String> {
    let key = "host.api.bmcCredentials";
    let what = describe_ref(r);
    let entries: Vec<&BmcCredential> = creds.iter().filter(|c| c.password.matches(r)).collect();
    if entries.is_empty() {
        return Err(format!(
            "{key}: no entry names the password {what}: bootd sends it to no BMC (add an entry with its BMC's origins)"
        ));
    }
    let at: Vec<&BmcCredential> = entries
        .iter()
        .copied()
        .filter(|c| c.origins.iter().any(|o| o.matches(t)))
        .collect();
    if at.is_empty() {
        let allowed: Vec<String> = entries
            .iter()
            .flat_map(|c| c.origins.iter().map(|o| o.to_string()))
            .collect();
        return Err(format!(
            "{key}: the password {what} is not for {t}: its entries allow {}",
            if allowed.is_empty() {
                "no origin".to_string()
            } else {
                allowed.join(", ")
            }
        ));
    }
    if insecure_skip_verify && !at.iter().any(|c| c.insecure_skip_verify) {
        return Err(format!(
            "insecureSkipVerify: {key} does not allow it for the password {what} at {t} (its entry's insecureSkipVerify): give caBundle"
        ));
    }
    if allow_plain_http && !at.iter().any(|c| c.allow_plain_http) {
        return Err(format!(
            "allowPlainHttp: {key} does not allow it for the password {what} at {t} (its entry's allowPlainHttp): use https://"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(url: &str) -> BmcTarget {
        BmcTarget::of_url(url).unwrap()
    }

    #[test]
    fn origins_parse_and_match() {
        let net = BmcOrigin::parse("https://10.1.0.0/24").unwrap();
        assert!(net.matches(&t("https://10.1.0.17/redfish/v1/Systems/1")));
        assert!(net.matches(&t("https://10.1.0.17:443")));
        assert!(!net.matches(&t("https://10.1.0.17:8443")));
        assert!(!net.matches(&t("http://10.1.0.17")));
        assert!(!net.matches(&t("https://10.1.1.17")));
        assert!(!net.matches(&t("https://bmc.example")));
        let name = BmcOrigin::parse("https://BMC-r1.example:*").unwrap();
        assert!(name.matches(&t("https://bmc-r1.example:8443/redfish/v1")));
        assert!(!name.matches(&t("https://bmc-r1.example.evil:8443")));
        let v6 = BmcOrigin::parse("ipmi://[fd00::/64]").unwrap();
        assert!(v6.matches(&BmcTarget::ipmi("fd00::20", 623).unwrap()));
        assert!(!v6.matches(&BmcTarget::ipmi("fd00::20", 6230).unwrap()));
        assert_eq!(v6.to_string(), "ipmi://[fd00::/64]:623");
        for bad in [
            "10.1.0.0/24",
            "ftp://x",
            "https://10.1.0.1/24",
            "https://10.1.0.0/33",
            "https://user@bmc",
            "https://bmc:0",
            "https://bmc/redfish",
            "https://bad_name",
        ] {
            assert!(BmcOrigin::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_password_goes_only_where_its_entry_says() {
        let creds = vec![BmcCredential {
            password: PasswordPattern::CredentialPrefix("bmc-rack1".into()),
            origins: vec![BmcOrigin::parse("https://10.1.0.0/24").unwrap()],
            allow_plain_http: false,
            insecure_skip_verify: false,
        }];
        let r1 = SecretRef::Credential("bmc-rack1-a".into());
        let a = t("https://10.1.0.17");
        assert_eq!(bmc_binding(&creds, &r1, &a, false, false), Ok(()));
        let e = bmc_binding(&creds, &r1, &t("https://203.0.113.9"), false, false).unwrap_err();
        assert!(
            e.contains("host.api.bmcCredentials") && e.contains("not for"),
            "{e}"
        );
        let e = bmc_binding(&creds, &r1, &a, true, false).unwrap_err();
        assert!(e.starts_with("insecureSkipVerify"), "{e}");
        let e = bmc_binding(&creds, &r1, &a, false, true).unwrap_err();
        assert!(e.starts_with("allowPlainHttp"), "{e}");
        let other = SecretRef::Credential("bmc-rack2".into());
        assert!(bmc_binding(&creds, &other, &a, false, false)
            .unwrap_err()
            .contains("no entry"));
        let files = PasswordPattern::FilesUnder("/etc/bmc/rack1".into());
        assert!(files.matches(&SecretRef::File("/etc/bmc/rack1/u7".into())));
        assert!(!files.matches(&SecretRef::File("/etc/bmc/rack1/../rack2/u7".into())));
        assert!(!files.matches(&SecretRef::File("/etc/bmc/rack10".into())));
    }
}
