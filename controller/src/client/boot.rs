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

/// Where a node made by `nodes import-bmc` or `discovered adopt` installs:
/// the same keys as a node's (`installDisk`, `rootDeviceHints`, `live`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DiskTarget {
    /// Install to this disk (a /dev/disk/by-path/ or by-id/ link stays with it).
    #[arg(long)]
    pub install_disk: Option<String>,
    /// Metal3's root-device hints as JSON, e.g. '{"serialNumber": "S1"}'.
    #[arg(long, value_name = "JSON")]
    pub root_device_hints: Option<String>,
    /// Run the live system, install nothing.
    #[arg(long)]
    pub live: bool,
}

impl DiskTarget {
    /// Adds the keys given to a node body.
    pub fn apply(&self, body: &mut Value) -> anyhow::Result<()> {
        if let Some(d) = &self.install_disk {
            body["installDisk"] = Value::String(d.clone());
        }
        if let Some(h) = &self.root_device_hints {
            body["rootDeviceHints"] = serde_json::from_str(h)
                .with_context(|| format!("--root-device-hints {h:?}: not JSON"))?;
        }
        if self.live {
            body["live"] = Value::Bool(true);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_targets_become_node_keys() {
        let mut b = json!({"name": "w"});
        DiskTarget {
            root_device_hints: Some(r#"{"serialNumber": "S1"}"#.into()),
            ..Default::default()
        }
        .apply(&mut b)
        .unwrap();
        assert_eq!(
            b,
            json!({"name": "w", "rootDeviceHints": {"serialNumber": "S1"}})
        );
        let e = DiskTarget {
            root_device_hints: Some("serialNumber: S1".into()),
            ..Default::default()
        }
        .apply(&mut b)
        .unwrap_err();
        assert!(e.to_string().contains("not JSON"), "{e}");
    }
}
