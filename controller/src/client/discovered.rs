//! `bootd discovered list`: machines in no node that reported themselves,
//! with what their inspection found (`discovery.inspect`).

use super::*;

/// `4 CPUs, 16 GiB, 2 disks`, or `-` before the machine was inspected.
fn hardware(m: &Value) -> String {
    let inv = &m["inventory"];
    if inv.is_null() {
        return "-".into();
    }
    format!(
        "{} CPUs, {} GiB, {} disks",
        inv["cpu"]["count"],
        inv["memoryMib"].as_u64().unwrap_or(0) / 1024,
        inv["disks"].as_array().map_or(0, Vec::len)
    )
}

pub(super) async fn list(client: &Client, out: &mut impl Write) -> anyhow::Result<()> {
    let (st, v) = client.call(Method::GET, "/v1/discovered", None).await?;
    ok_or_bail(st, &v)?;
    if v["enabled"] != Value::Bool(true) {
        writeln!(out, "# discovery is off (discovery.enabled in the site)")?;
    }
    writeln!(
        out,
        "{:<38} {:<40} {:<24} {:<16} {:<24} REPORTS",
        "KEY", "MACS", "PRODUCT", "ADDRESS", "HARDWARE"
    )?;
    for m in v["machines"].as_array().into_iter().flatten() {
        let listed = macs(m);
        let product = [s(m, "manufacturer"), s(m, "product")]
            .into_iter()
            .filter(|x| !x.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        writeln!(
            out,
            "{:<38} {:<40} {:<24} {:<16} {:<24} {}",
            s(m, "key"),
            listed,
            product,
            s(m, "ip"),
            hardware(m),
            m["reports"]
        )?;
        for c in m["conflicts"].as_array().into_iter().flatten() {
            writeln!(
                out,
                "  CONFLICT: also claimed by {} from {} ({} reports): adopt by the MAC it booted from",
                macs(c),
                s(c, "ip"),
                c["reports"]
            )?;
        }
    }
    Ok(())
}

/// A claim's MACs, the unverified ones marked `?` (reported, not proven:
/// an adopt does not give them to the node).
fn macs(claim: &Value) -> String {
    let verified: Vec<&str> = claim["verified"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    claim["macs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|m| {
            if verified.contains(&m) {
                m.to_string()
            } else {
                format!("{m}?")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hardware_says_what_the_inspection_found() {
        assert_eq!(hardware(&json!({"key": "k"})), "-");
        let m = json!({"inventory": {"cpu": {"count": 8}, "memoryMib": 32768, "disks": [{}, {}]}});
        assert_eq!(hardware(&m), "8 CPUs, 32 GiB, 2 disks");
    }

    #[test]
    fn unverified_macs_are_marked() {
        let c = json!({"macs": ["52:54:00:00:00:01", "52:54:00:00:00:02"], "verified": ["52:54:00:00:00:01"]});
        assert_eq!(macs(&c), "52:54:00:00:00:01,52:54:00:00:00:02?");
    }
}
