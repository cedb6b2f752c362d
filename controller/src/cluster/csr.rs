//! Which kubelet CSRs the controller approves: one pure decision over a
//! CSR and what this appliance knows of the node it names ([`decide`]), and
//! whether a node's kubelet has both its certificates ([`joined`]). No
//! socket, clock or store in here.
//!
//! Approved: a pending `kubernetes.io/kube-apiserver-client-kubelet` CSR
//! whose request (PKCS#10, signature checked) has the subject
//! `CN=system:node:<name>, O=system:nodes`, no SAN, client usages, from a
//! bootstrapper or the node itself, where `<name>` is a node of the served
//! site whose Ignition this appliance served, only ever to the node's own
//! address; and a pending `kubernetes.io/kubelet-serving` CSR with the same
//! subject, server usages, from `system:node:<name>`, whose every DNS SAN
//! is the node's name (short, or `<name>.<cluster domain>`) and every IP
//! SAN one of its addresses. Anything else that looks like a kubelet's CSR
//! is left pending with a [`Reason`]; never denied.

use base64::Engine;
use serde_json::Value;
use std::net::IpAddr;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;

pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
pub const NODE_PREFIX: &str = "system:node:";
pub const NODES_GROUP: &str = "system:nodes";
/// Who asks for a new node's first client certificate: OpenShift's
/// bootstrap service account, or (kubeadm) a bootstrap token's group.
pub const OPENSHIFT_BOOTSTRAPPER: &str =
    "system:serviceaccount:openshift-machine-config-operator:node-bootstrapper";
pub const BOOTSTRAPPERS_GROUP: &str = "system:bootstrappers";

/// Where a CSR is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Pending,
    Approved,
    /// Approved and signed: `status.certificate` is there.
    Issued,
    Denied,
    Failed,
}

/// What a CSR's PKCS#10 request says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub common_names: Vec<String>,
    pub organizations: Vec<String>,
    pub dns: Vec<String>,
    pub ips: Vec<IpAddr>,
    /// E-mail, URI and other SANs, as text (a kubelet asks for none).
    pub other_sans: Vec<String>,
}

/// A CSR as the cluster lists it, its request parsed.
#[derive(Debug, Clone)]
pub struct Csr {
    pub name: String,
    pub signer: String,
    pub usages: Vec<String>,
    pub username: String,
    pub groups: Vec<String>,
    pub state: State,
    /// The request, or why it cannot be read.
    pub request: Result<Request, String>,
}

impl Csr {
    /// A listed CSR object; `None` without a name.
    pub fn parse(item: &Value) -> Option<Csr> {
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        };
        let spec = &item["spec"];
        let status = &item["status"];
        let has = |t: &str| {
            status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == t && c["status"] == "True")
        };
        let state = if has("Denied") {
            State::Denied
        } else if has("Failed") {
            State::Failed
        } else if status["certificate"]
            .as_str()
            .is_some_and(|c| !c.is_empty())
        {
            State::Issued
        } else if has("Approved") {
            State::Approved
        } else {
            State::Pending
        };
        Some(Csr {
            name: item["metadata"]["name"].as_str()?.to_string(),
            signer: spec["signerName"].as_str().unwrap_or_default().to_string(),
            usages: strings(&spec["usages"]),
            username: spec["username"].as_str().unwrap_or_default().to_string(),
            groups: strings(&spec["groups"]),
            state,
            request: spec["request"]
                .as_str()
                .ok_or_else(|| "no spec.request".to_string())
                .and_then(parse_request),
        })
    }

    /// The node name its subject claims (`system:node:<name>`), if any.
    pub fn claimed(&self) -> Option<&str> {
        let r = self.request.as_ref().ok()?;
        match r.common_names.as_slice() {
            [cn] => cn.strip_prefix(NODE_PREFIX).filter(|n| !n.is_empty()),
            _ => None,
        }
    }

    fn kind(&self) -> Option<Kind> {
        match self.signer.as_str() {
            CLIENT_SIGNER => Some(Kind::Client),
            SERVING_SIGNER => Some(Kind::Serving),
            _ => None,
        }
    }
}

/// `spec.request`: base64 of a PEM `CERTIFICATE REQUEST`; its signature
/// must verify with the key it carries.
pub fn parse_request(b64: &str) -> Result<Request, String> {
    let pem = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|_| "spec.request is not base64".to_string())?;
    let (_, pem) = x509_parser::pem::parse_x509_pem(&pem)
        .map_err(|_| "spec.request holds no PEM block".to_string())?;
    if pem.label != "CERTIFICATE REQUEST" && pem.label != "NEW CERTIFICATE REQUEST" {
        return Err(format!(
            "spec.request holds a PEM {:?}, not a CERTIFICATE REQUEST",
            pem.label
        ));
    }
    let (_, csr) = X509CertificationRequest::from_der(&pem.contents)
        .map_err(|_| "spec.request is not a PKCS#10 certificate request".to_string())?;
    csr.verify_signature()
        .map_err(|_| "the request's signature does not verify with its own key".to_string())?;
    let info = &csr.certification_request_info;
    let text = |a: &x509_parser::x509::AttributeTypeAndValue| {
        a.as_str()
            .map(str::to_string)
            .unwrap_or_else(|_| "<not text>".into())
    };
    let mut r = Request {
        common_names: info.subject.iter_common_name().map(text).collect(),
        organizations: info.subject.iter_organization().map(text).collect(),
        dns: Vec::new(),
        ips: Vec::new(),
        other_sans: Vec::new(),
    };
    for ext in csr.requested_extensions().into_iter().flatten() {
        let ParsedExtension::SubjectAlternativeName(san) = ext else {
            continue;
        };
        for g in &san.general_names {
            match g {
                GeneralName::DNSName(d) => r.dns.push(d.to_string()),
                GeneralName::IPAddress(b) => match <[u8; 4]>::try_from(*b) {
                    Ok(v4) => r.ips.push(IpAddr::from(v4)),
                    Err(_) => match <[u8; 16]>::try_from(*b) {
                        Ok(v6) => r.ips.push(IpAddr::from(v6)),
                        Err(_) => r.other_sans.push("a malformed IP address".into()),
                    },
                },
                other => r.other_sans.push(format!("{other}")),
            }
        }
    }
    Ok(r)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `kubernetes.io/kube-apiserver-client-kubelet`: the kubelet's identity.
    Client,
    /// `kubernetes.io/kubelet-serving`: the kubelet's TLS server.
    Serving,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Client => "client",
            Kind::Serving => "serving",
        }
    }
}

/// Whether the node's Ignition was served, and to whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ignition {
    /// Not served by this appliance (or not yet).
    NotServed,
    /// Served, every time to one of the node's own addresses.
    FromNode,
    /// Served (also) to another address; the words say which.
    FromOther(String),
}

/// What the appliance knows of a node named in a CSR.
#[derive(Debug, Clone)]
pub struct NodeFacts {
    /// Its name in the site.
    pub name: String,
    /// Its reserved addresses and those its provider reported.
    pub addresses: Vec<IpAddr>,
    pub ignition: Ignition,
}

/// Why a CSR is left for a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// `spec.request` is not a readable, self-signed PKCS#10 request.
    BadRequest,
    /// The subject is not `CN=system:node:<name>, O=system:nodes`.
    BadSubject,
    /// The subject names a node, but the signer is not a kubelet's.
    WrongSigner,
    /// Usages other than a kubelet's for that signer.
    WrongUsages,
    /// No node of the served site has that name.
    UnknownNode,
    /// This appliance has not served the node's Ignition.
    NotBootedHere,
    /// The node's Ignition was fetched from an address not the node's.
    IgnitionFromOtherAddress,
    /// Not asked by a bootstrapper (client) or by the node itself.
    UnexpectedRequester,
    /// A SAN that is not the node's name or one of its addresses.
    ForeignSAN,
}

impl Reason {
    pub const ALL: [Reason; 9] = [
        Reason::BadRequest,
        Reason::BadSubject,
        Reason::WrongSigner,
        Reason::WrongUsages,
        Reason::UnknownNode,
        Reason::NotBootedHere,
        Reason::IgnitionFromOtherAddress,
        Reason::UnexpectedRequester,
        Reason::ForeignSAN,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::BadRequest => "BadRequest",
            Reason::BadSubject => "BadSubject",
            Reason::WrongSigner => "WrongSigner",
            Reason::WrongUsages => "WrongUsages",
            Reason::UnknownNode => "UnknownNode",
            Reason::NotBootedHere => "NotBootedHere",
            Reason::IgnitionFromOtherAddress => "IgnitionFromOtherAddress",
            Reason::UnexpectedRequester => "UnexpectedRequester",
            Reason::ForeignSAN => "ForeignSAN",
        }
    }
}

/// What to do with one CSR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Not a pending kubelet CSR: none of the controller's business.
    Ignore,
    Approve {
        node: String,
        kind: Kind,
    },
    /// Left for a person; `node`: the site node it names, when it names one.
    Pending {
        node: Option<String>,
        reason: Reason,
        message: String,
    },
}

fn allowed_usages(kind: Kind) -> (&'static [&'static str], &'static str) {
    match kind {
        Kind::Client => (
            &["digital signature", "key encipherment", "client auth"],
            "client auth",
        ),
        Kind::Serving => (
            &["digital signature", "key encipherment", "server auth"],
            "server auth",
        ),
    }
}

/// The site node a CSR's name means: `<name>` or `<name>.<domain>`.
pub fn node_name<'a>(claimed: &'a str, domain: &str) -> &'a str {
    claimed
        .strip_suffix(domain)
        .and_then(|s| s.strip_suffix('.'))
        .filter(|s| !s.is_empty() && !domain.is_empty())
        .unwrap_or(claimed)
}

/// The decision for `csr`; `domain` is the cluster's (`<name>.<baseDomain>`),
/// `node` what the appliance knows of a site node by name.
pub fn decide(csr: &Csr, domain: &str, node: impl Fn(&str) -> Option<NodeFacts>) -> Decision {
    if csr.state != State::Pending {
        return Decision::Ignore;
    }
    let kind = csr.kind();
    let req = match &csr.request {
        Ok(r) => r,
        // Only a kubelet signer's requests are ours to look into.
        Err(e) if kind.is_some() => return pending(None, Reason::BadRequest, e.clone()),
        Err(_) => return Decision::Ignore,
    };
    let claimed = csr.claimed();
    let Some(claimed) = claimed else {
        return match kind {
            Some(_) => pending(
                None,
                Reason::BadSubject,
                format!(
                    "its subject's CN is {:?}, not system:node:<name>",
                    req.common_names
                ),
            ),
            None => Decision::Ignore,
        };
    };
    let facts = node(node_name(claimed, domain));
    let at = facts.as_ref().map(|f| f.name.clone());
    let Some(kind) = kind else {
        return pending(
            at,
            Reason::WrongSigner,
            format!(
                "it names node {claimed} but asks signer {:?}, not {CLIENT_SIGNER} or {SERVING_SIGNER}",
                csr.signer
            ),
        );
    };
    if req.organizations != [NODES_GROUP] {
        return pending(
            at,
            Reason::BadSubject,
            format!(
                "its subject's O is {:?}, not [\"{NODES_GROUP}\"]",
                req.organizations
            ),
        );
    }
    let (allowed, needed) = allowed_usages(kind);
    if !csr.usages.iter().any(|u| u == needed)
        || csr.usages.iter().any(|u| !allowed.contains(&u.as_str()))
    {
        return pending(
            at,
            Reason::WrongUsages,
            format!(
                "usages {:?}: a kubelet {} certificate has {needed:?} and at most {allowed:?}",
                csr.usages,
                kind.as_str()
            ),
        );
    }
    let Some(facts) = facts else {
        return pending(
            None,
            Reason::UnknownNode,
            format!("no node of this site is called {claimed}"),
        );
    };
    match &facts.ignition {
        Ignition::FromNode => {}
        Ignition::NotServed => {
            return pending(
                at,
                Reason::NotBootedHere,
                format!("this appliance has not served {}'s Ignition", facts.name),
            )
        }
        Ignition::FromOther(why) => {
            return pending(
                at,
                Reason::IgnitionFromOtherAddress,
                format!(
                    "{}'s Ignition was fetched from another address than the node's: {why}",
                    facts.name
                ),
            )
        }
    }
    let own = format!("{NODE_PREFIX}{claimed}");
    let requester_ok = match kind {
        Kind::Client => {
            csr.username == OPENSHIFT_BOOTSTRAPPER
                || csr.groups.iter().any(|g| g == BOOTSTRAPPERS_GROUP)
                || csr.username == own
        }
        Kind::Serving => csr.username == own,
    };
    if !requester_ok {
        return pending(
            at,
            Reason::UnexpectedRequester,
            format!(
                "asked by {:?}, not {}",
                csr.username,
                match kind {
                    Kind::Client => "a node bootstrapper or the node itself",
                    Kind::Serving => "the node itself",
                }
            ),
        );
    }
    if let Some(why) = foreign_san(kind, req, &facts, domain) {
        return pending(at, Reason::ForeignSAN, why);
    }
    Decision::Approve {
        node: facts.name,
        kind,
    }
}

fn pending(node: Option<String>, reason: Reason, message: String) -> Decision {
    Decision::Pending {
        node,
        reason,
        message,
    }
}

/// The first SAN that is not the node's, in words; `None`: all are.
fn foreign_san(kind: Kind, req: &Request, facts: &NodeFacts, domain: &str) -> Option<String> {
    if let Some(o) = req.other_sans.first() {
        return Some(format!(
            "SAN {o}: a kubelet asks for DNS names and IP addresses only"
        ));
    }
    if kind == Kind::Client {
        return (!req.dns.is_empty() || !req.ips.is_empty())
            .then(|| "a kubelet client certificate carries no SAN".to_string());
    }
    if req.dns.is_empty() && req.ips.is_empty() {
        return Some(
            "a kubelet serving certificate names the node in its SANs; it has none".into(),
        );
    }
    let fqdn = format!("{}.{domain}", facts.name);
    if let Some(d) = req
        .dns
        .iter()
        .find(|d| !d.eq_ignore_ascii_case(&facts.name) && !d.eq_ignore_ascii_case(&fqdn))
    {
        return Some(format!(
            "DNS SAN {d:?} is neither {} nor {fqdn}",
            facts.name
        ));
    }
    if let Some(ip) = req
        .ips
        .iter()
        .find(|ip| !facts.addresses.contains(&ip.to_canonical()))
    {
        let have: Vec<String> = facts.addresses.iter().map(|a| a.to_string()).collect();
        return Some(format!(
            "IP SAN {ip} is not one of {}'s addresses ({})",
            facts.name,
            have.join(", ")
        ));
    }
    None
}

/// Whether `node`'s kubelet has a client and a serving certificate among
/// `csrs`: approved (by anyone) or issued.
pub fn joined(csrs: &[Csr], node: &str, domain: &str) -> (bool, bool) {
    let has = |signer: &str| {
        csrs.iter().any(|c| {
            c.signer == signer
                && matches!(c.state, State::Approved | State::Issued)
                && c.claimed().is_some_and(|n| node_name(n, domain) == node)
        })
    };
    (has(CLIENT_SIGNER), has(SERVING_SIGNER))
}

#[cfg(test)]
mod tests {
    use super::*;
    use testkit::kube_fake::{kubelet_csr, KubeletCsr};

    const DOMAIN: &str = "lab.example.test";

    fn csr(c: KubeletCsr<'_>) -> Csr {
        Csr::parse(&kubelet_csr(&c)).unwrap()
    }

    /// worker-0 booted here (its Ignition to its own address), worker-1
    /// served to another address, worker-2 not served; nothing else exists.
    fn nodes(name: &str) -> Option<NodeFacts> {
        let ignition = match name {
            "worker-0" => Ignition::FromNode,
            "worker-1" => Ignition::FromOther("fetched from 10.9.9.9".into()),
            "worker-2" => Ignition::NotServed,
            _ => return None,
        };
        Some(NodeFacts {
            name: name.into(),
            addresses: vec!["10.77.0.20".parse().unwrap(), "fd00::20".parse().unwrap()],
            ignition,
        })
    }

    fn reason(c: KubeletCsr<'_>) -> (Option<String>, Reason) {
        match decide(&csr(c), DOMAIN, nodes) {
            Decision::Pending { node, reason, .. } => (node, reason),
            d => panic!("{d:?}"),
        }
    }

    const W0: &str = "system:node:worker-0";

    #[test]
    fn a_booted_nodes_client_and_serving_csrs_are_approved() {
        let approve = |kind| Decision::Approve {
            node: "worker-0".into(),
            kind,
        };
        assert_eq!(
            decide(&csr(KubeletCsr::client("a", W0)), DOMAIN, nodes),
            approve(Kind::Client)
        );
        let sans = [
            "worker-0",
            "worker-0.lab.example.test",
            "10.77.0.20",
            "fd00::20",
        ];
        assert_eq!(
            decide(&csr(KubeletCsr::serving("b", W0, &sans)), DOMAIN, nodes),
            approve(Kind::Serving)
        );
        // The node named by its FQDN (a kubelet whose hostname is the PTR name).
        let fq = "system:node:worker-0.lab.example.test";
        assert_eq!(
            decide(&csr(KubeletCsr::client("c", fq)), DOMAIN, nodes),
            approve(Kind::Client)
        );
        // The node renewing its own client certificate.
        let renew = KubeletCsr {
            username: W0,
            groups: &["system:nodes"],
            ..KubeletCsr::client("d", W0)
        };
        assert_eq!(decide(&csr(renew), DOMAIN, nodes), approve(Kind::Client));
        // Older kubelets also ask for key encipherment.
        let older = KubeletCsr {
            usages: &["digital signature", "key encipherment", "client auth"],
            ..KubeletCsr::client("e", W0)
        };
        assert_eq!(decide(&csr(older), DOMAIN, nodes), approve(Kind::Client));
    }

    #[test]
    fn unknown_names_and_nodes_not_booted_from_their_address_are_left() {
        assert_eq!(
            reason(KubeletCsr::client("a", "system:node:intruder")),
            (None, Reason::UnknownNode)
        );
        // A name that only ends like a node's is not that node.
        assert_eq!(
            reason(KubeletCsr::client("a", "system:node:xworker-0")),
            (None, Reason::UnknownNode)
        );
        assert_eq!(
            reason(KubeletCsr::client("b", "system:node:worker-1")),
            (Some("worker-1".into()), Reason::IgnitionFromOtherAddress)
        );
        assert_eq!(
            reason(KubeletCsr::serving(
                "c",
                "system:node:worker-1",
                &["worker-1"]
            )),
            (Some("worker-1".into()), Reason::IgnitionFromOtherAddress)
        );
        assert_eq!(
            reason(KubeletCsr::client("d", "system:node:worker-2")),
            (Some("worker-2".into()), Reason::NotBootedHere)
        );
    }

    #[test]
    fn serving_csrs_name_only_the_node_and_its_addresses() {
        let w0 = Some("worker-0".to_string());
        for sans in [
            &["worker-0", "evil.example.com"][..],
            &["worker-0", "10.77.0.99"],
            &["worker-0.other.test"],
            &["worker-1"],
            &[],
        ] {
            assert_eq!(
                reason(KubeletCsr::serving("a", W0, sans)),
                (w0.clone(), Reason::ForeignSAN),
                "{sans:?}"
            );
        }
        // A client certificate carries no SAN at all.
        let with_san = KubeletCsr {
            sans: &["worker-0"],
            ..KubeletCsr::client("b", W0)
        };
        assert_eq!(reason(with_san), (w0, Reason::ForeignSAN));
    }

    #[test]
    fn signer_subject_usages_and_requester_are_checked() {
        let w0 = Some("worker-0".to_string());
        let wrong_signer = KubeletCsr {
            signer: "kubernetes.io/kube-apiserver-client",
            ..KubeletCsr::client("a", W0)
        };
        assert_eq!(reason(wrong_signer), (w0.clone(), Reason::WrongSigner));
        let legacy = KubeletCsr {
            signer: "kubernetes.io/legacy-unknown",
            ..KubeletCsr::serving("a", W0, &["worker-0"])
        };
        assert_eq!(reason(legacy), (w0.clone(), Reason::WrongSigner));
        let masters = KubeletCsr {
            orgs: &["system:masters"],
            ..KubeletCsr::client("b", W0)
        };
        assert_eq!(reason(masters), (w0.clone(), Reason::BadSubject));
        let two = KubeletCsr {
            orgs: &["system:nodes", "system:masters"],
            ..KubeletCsr::client("b", W0)
        };
        assert_eq!(reason(two), (w0.clone(), Reason::BadSubject));
        let not_node = KubeletCsr::client("c", "worker-0");
        assert_eq!(reason(not_node), (None, Reason::BadSubject));
        let server_usage = KubeletCsr {
            usages: &["digital signature", "server auth"],
            ..KubeletCsr::client("d", W0)
        };
        assert_eq!(reason(server_usage), (w0.clone(), Reason::WrongUsages));
        let extra = KubeletCsr {
            usages: &["digital signature", "server auth", "client auth"],
            ..KubeletCsr::serving("e", W0, &["worker-0"])
        };
        assert_eq!(reason(extra), (w0.clone(), Reason::WrongUsages));
        let by_other_node = KubeletCsr {
            username: "system:node:worker-1",
            ..KubeletCsr::serving("f", W0, &["worker-0"])
        };
        assert_eq!(
            reason(by_other_node),
            (w0.clone(), Reason::UnexpectedRequester)
        );
        let by_user = KubeletCsr {
            username: "alice",
            groups: &["system:authenticated"],
            ..KubeletCsr::client("g", W0)
        };
        assert_eq!(reason(by_user), (w0, Reason::UnexpectedRequester));
    }

    #[test]
    fn unreadable_requests_decided_and_foreign_csrs_are_not_ours() {
        let mut v = kubelet_csr(&KubeletCsr::client("a", W0));
        v["spec"]["request"] = serde_json::json!("bm90IGEgcmVxdWVzdA==");
        assert!(matches!(
            decide(&Csr::parse(&v).unwrap(), DOMAIN, nodes),
            Decision::Pending {
                reason: Reason::BadRequest,
                ..
            }
        ));
        // A request whose signature does not verify (a byte of its subject changed).
        let mut v = kubelet_csr(&KubeletCsr::client("a", W0));
        let pem = String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(v["spec"]["request"].as_str().unwrap())
                .unwrap(),
        )
        .unwrap();
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let mut der = base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap();
        let at = der.windows(8).position(|w| w == b"worker-0").unwrap();
        der[at] = b'W';
        let forged = format!(
            "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
            base64::engine::general_purpose::STANDARD.encode(der)
        );
        v["spec"]["request"] =
            serde_json::json!(base64::engine::general_purpose::STANDARD.encode(forged));
        let c = Csr::parse(&v).unwrap();
        assert_eq!(
            c.request.as_ref().unwrap_err(),
            "the request's signature does not verify with its own key"
        );
        assert!(matches!(
            decide(&c, DOMAIN, nodes),
            Decision::Pending {
                reason: Reason::BadRequest,
                ..
            }
        ));
        // Someone's own client certificate, and decided CSRs: not ours.
        let user = KubeletCsr {
            signer: "kubernetes.io/kube-apiserver-client",
            ..KubeletCsr::client("u", "alice")
        };
        assert_eq!(decide(&csr(user), DOMAIN, nodes), Decision::Ignore);
        for (t, state) in [
            ("Approved", State::Approved),
            ("Denied", State::Denied),
            ("Failed", State::Failed),
        ] {
            let mut v = kubelet_csr(&KubeletCsr::client("a", "system:node:intruder"));
            v["status"]["conditions"] = serde_json::json!([{ "type": t, "status": "True" }]);
            let c = Csr::parse(&v).unwrap();
            assert_eq!(
                (c.state, decide(&c, DOMAIN, nodes)),
                (state, Decision::Ignore)
            );
        }
    }

    #[test]
    fn joined_takes_approved_or_issued_client_and_serving_csrs_by_anyone() {
        let mut client = kubelet_csr(&KubeletCsr::client(
            "a",
            "system:node:worker-0.lab.example.test",
        ));
        let mut serving = kubelet_csr(&KubeletCsr::serving("b", W0, &["worker-0"]));
        let pending = vec![Csr::parse(&client).unwrap(), Csr::parse(&serving).unwrap()];
        assert_eq!(joined(&pending, "worker-0", DOMAIN), (false, false));
        client["status"]["conditions"] = serde_json::json!([{ "type": "Approved", "status": "True", "reason": "KubectlApprove" }]);
        serving["status"]["certificate"] = serde_json::json!("LS0tLS1CRUdJTg==");
        let done = vec![Csr::parse(&client).unwrap(), Csr::parse(&serving).unwrap()];
        assert_eq!(joined(&done, "worker-0", DOMAIN), (true, true));
        assert_eq!(joined(&done, "worker-1", DOMAIN), (false, false));
        serving["status"]["conditions"] =
            serde_json::json!([{ "type": "Denied", "status": "True" }]);
        let denied = vec![Csr::parse(&client).unwrap(), Csr::parse(&serving).unwrap()];
        assert_eq!(joined(&denied, "worker-0", DOMAIN), (true, false));
    }
}
