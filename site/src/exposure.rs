//! What a valid site still exposes: the settings that relax who may fetch
//! a node's secrets, and catalog images taken without a signature check,
//! each with what it opens. `bootd --check-config` prints them as warnings;
//! [`store_warnings`] are also logged at every start.

use crate::{DhcpMode, FetchFrom, Site};

/// One line per relaxed setting, naming its key and what it exposes.
pub fn warnings(site: &Site) -> Vec<String> {
    let mut out = Vec::new();
    let script =
        "anyone on the provisioning network who knows its MAC or name gets its boot script, \
                  and with it a token for its Ignition (pull secret, cluster keys)";
    let by_provider = site.host.api.as_ref().map(|a| &a.fetch_from);
    for (p, f) in by_provider.into_iter().flatten() {
        if *f == FetchFrom::AnyAddress {
            out.push(format!(
                "host.api.fetchFrom.{p}: anyAddress: for every {p} node, {script}; \
                 its provider token works from any address too"
            ));
        }
    }
    for (i, n) in site.nodes.iter().enumerate() {
        if n.fetch_from == FetchFrom::AnyAddress {
            out.push(format!(
                "nodes[{i}].fetchFrom: anyAddress: for node {}, {script}",
                n.name
            ));
        }
    }
    if site
        .host
        .dhcp
        .as_ref()
        .is_some_and(|d| d.mode == DhcpMode::Proxy)
        && site
            .nodes
            .iter()
            .any(|n| n.fetch_from == FetchFrom::NodeAddress)
    {
        out.push(
            "host.dhcp.mode: proxy: another DHCP server hands out the addresses, and a node's boot \
             script goes only to its `ip`: have that server reserve each node's `ip` for its MACs, \
             or set the node's fetchFrom: anyAddress (which exposes its script)"
                .into(),
        );
    }
    if !site.ignition.single_use_tokens {
        out.push(
            "ignition.singleUseTokens: false: a token seen once (on the wire, in a log, in a \
             provider's userdata) keeps opening the node's Ignition from any address until it expires"
                .into(),
        );
    }
    out.extend(store_warnings(site));
    if site
        .host
        .api
        .as_ref()
        .is_some_and(|a| (a.redfish.is_some() || a.ipmi.is_some()) && a.bmc_credentials.is_none())
    {
        out.push(
            "host.api.bmcCredentials: not set: any API token holder can have bootd send any BMC \
             password it can read (any file in host.api.bmcFiles, any bmc- credential, any \
             BOOTD_BMC_ variable) to a URL of their choosing: bind each password to its BMCs' \
             origins with host.api.bmcCredentials"
                .into(),
        );
    }
    for (i, n) in site.host.status_from.iter().enumerate() {
        if !n.addr().is_loopback() {
            out.push(format!(
                "host.statusFrom[{i}]: {n}: the status page (node names, MACs, addresses, boot \
                 events) is readable from there without a token"
            ));
        }
    }
    out.extend(unsigned_images(site));
    out
}

/// Catalog sets without a signature check (docs/images.md, "Signatures");
/// the `images` command prints it too.
pub fn unsigned_images(site: &Site) -> Option<String> {
    let catalog: Vec<&str> = site
        .images
        .sets
        .iter()
        .filter(|(_, s)| s.catalog.is_some())
        .map(|(n, _)| n.as_str())
        .collect();
    let sig = &site.images.signing;
    if catalog.is_empty() || (sig.enabled() && sig.require) {
        return None;
    }
    let sets = catalog.join(", ");
    Some(if sig.enabled() {
        format!(
            "images.requireSignatures: false: an artifact of the catalog sets ({sets}) that its \
             stream metadata names no signature for is taken on its sha256 alone, so whoever can \
             change that document can drop the signature and serve other bytes"
        )
    } else {
        format!(
            "images.signingKeys: none: the catalog sets' artifacts ({sets}) are trusted by the \
             sha256 their stream metadata names, not by the vendor's signature: whoever can \
             change that document (its server, or a mirror it is read from) chooses the bytes \
             nodes boot; give the vendor's keys (docs/images.md)"
        )
    })
}

/// What `host.store.etcd` leaves open: etcd holds the token key and the
/// site CA's key, so whoever reads the prefix can mint any node's token
/// and issue certificates the nodes trust.
pub fn store_warnings(site: &Site) -> Vec<String> {
    let crate::Store::Etcd(e) = &site.host.store else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if e.endpoints.iter().any(|u| u.starts_with("http://")) {
        out.push(format!(
            "host.store.etcd.endpoints: http://: the token key, the site CA's private key and \
             every node's record cross the network in the clear, and etcd cannot tell who asks: \
             anyone who reaches its client port can read and write {} (mint a token for any \
             node's Ignition, issue certificates the nodes trust, add nodes). Use https:// with \
             a client certificate per appliance and a role per site (docs/ha.md)",
            e.prefix
        ));
    } else if e.tls.as_ref().is_some_and(|t| t.cert.is_none()) {
        out.push(format!(
            "host.store.etcd.tls: no client certificate (cert, key): etcd cannot tell this \
             site's appliances from anyone else who reaches its client port, so it cannot keep \
             them to {} nor others out of it (the token key, the site CA's private key). Give \
             each appliance a client certificate, and etcd --client-cert-auth with a role per \
             site (docs/ha.md)",
            e.prefix
        ));
    }
    out
}
