//! `bootd cluster destroy --provider P [--yes]`: lists the provider's
//! machines that carry the cluster's ownership tag; deletes them only with
//! `--yes`.

use super::*;

/// `bootd cluster destroy --provider P [--yes]`.
pub(super) async fn destroy(client: &Client, provider: &str, yes: bool) -> anyhow::Result<i32> {
    let path = format!(
        "/v1/cluster/machines?provider={}",
        percent_encoding::utf8_percent_encode(provider, crate::providers::COMPONENT)
    );
    let (st, v) = client.call(Method::GET, &path, None).await?;
    ok_or_bail(st, &v)?;
    let machines = v["machines"].as_array().cloned().unwrap_or_default();
    if machines.is_empty() {
        println!("no {provider} machine carries this cluster's ownership tag: nothing to delete");
        return Ok(0);
    }
    println!("{:<26} {:<20} {:<12} NODE", "ID", "NAME", "STATE");
    for m in &machines {
        println!(
            "{:<26} {:<20} {:<12} {}",
            s(m, "id"),
            s(m, "name"),
            s(m, "state"),
            m["node"].as_str().unwrap_or("-")
        );
    }
    if !yes {
        eprintln!(
            "{} machine(s) would be deleted; nothing was: run again with --yes",
            machines.len()
        );
        return Ok(1);
    }
    let ids: Vec<&str> = machines.iter().filter_map(|m| m["id"].as_str()).collect();
    let body = serde_json::to_vec(&serde_json::json!({"provider": provider, "machines": ids}))?;
    let (st, v) = client
        .call(Method::POST, "/v1/cluster/destroy", Some(body))
        .await?;
    ok_or_bail(st, &v)?;
    let mut failed = 0;
    for d in v["deleting"].as_array().into_iter().flatten() {
        match d["error"].as_str() {
            Some(e) => {
                failed += 1;
                println!("{}: not deleted: {e}", s(d, "id"));
            }
            None if d["via"] == "node" => {
                println!("{}: deleting with node {}", s(d, "id"), s(d, "node"))
            }
            None => println!("{}: deleted", s(d, "id")),
        }
    }
    for d in v["skipped"].as_array().into_iter().flatten() {
        println!("{}: skipped: {}", s(d, "id"), s(d, "reason"));
    }
    Ok(if failed == 0 { 0 } else { 1 })
}
