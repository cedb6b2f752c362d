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
        let macs: Vec<&str> = m["macs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let product = [s(m, "manufacturer"), s(m, "product")]
            .into_iter()
            .filter(|x| !x.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        writeln!(
            out,
            "{:<38} {:<40} {:<24} {:<16} {:<24} {}",
            s(m, "key"),
            macs.join(","),
            product,
            s(m, "ip"),
            hardware(m),
            m["reports"]
        )?;
    }
    Ok(())
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
}
