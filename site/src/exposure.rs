//! What a valid site still exposes: the settings that relax who may fetch
//! a node's secrets, each with what it opens. `bootd --check-config`
//! prints them as warnings.

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
    for (i, n) in site.host.status_from.iter().enumerate() {
        if !n.addr().is_loopback() {
            out.push(format!(
                "host.statusFrom[{i}]: {n}: the status page (node names, MACs, addresses, boot \
                 events) is readable from there without a token"
            ));
        }
    }
    out
}
