//! `bootd nodes inventory|inspect|reinstall NAME`: what a node's machine
//! reported and what its next network boot does, and the two ways to
//! change that (inspect again, install again).

use super::*;

/// `method` on the node's `what` route; the reply, or the API's error.
async fn node_call(
    client: &Client,
    method: Method,
    name: &str,
    what: &str,
) -> anyhow::Result<Value> {
    let (st, v) = client
        .call(method, &format!("/v1/nodes/{}/{what}", seg(name)), None)
        .await?;
    ok_or_bail(st, &v)?;
    Ok(v)
}

pub(super) async fn inventory(
    client: &Client,
    name: &str,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let v = node_call(client, Method::GET, name, "inventory").await?;
    writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    Ok(())
}

pub(super) async fn inspect(
    client: &Client,
    name: &str,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    node_call(client, Method::POST, name, "inspect").await?;
    writeln!(
        out,
        "node {name}: the next network boot inspects the machine again"
    )?;
    Ok(())
}

pub(super) async fn reinstall(
    client: &Client,
    name: &str,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let v = node_call(client, Method::POST, name, "reinstall").await?;
    let was = if v["wasInstalled"].as_bool() == Some(true) {
        "it had installed"
    } else {
        "it had not installed"
    };
    writeln!(out, "node {name}: the next network boot installs ({was})")?;
    Ok(())
}
