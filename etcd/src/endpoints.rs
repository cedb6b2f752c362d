//! Members that stopped answering leave the client's balancer until they
//! answer again.
//!
//! The client spreads requests over every endpoint (tonic's balancer). It
//! keeps choosing an endpoint whose connection is gone: with one member of
//! three killed mid-storm, a fifth of the appliances' requests failed at
//! once with "tcp connect error" while two members served (measured,
//! bench/storm `bootd-ha-etcd-kill`). So a request that fails as
//! unreachable (and a lease renewal that fails, or a watch that ends)
//! wakes [`supervise`], which asks each member for its status
//! on a connection of its own (half a second each) and takes the silent
//! ones out of the balancer; while any is out it asks again every second
//! and puts back those that answer. A silent one leaves only while one
//! that answered stays: with none answering, all stay and requests fail
//! with etcd's own error. The status request needs no leader, so members
//! answer it during an election. Nothing is
//! asked while every member serves.

use etcd_client::{Client, ConnectOptions};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// How long a member has to answer a status request.
const ANSWER_WITHIN: Duration = Duration::from_millis(500);
/// How often members out of the balancer are asked again.
const AGAIN_EVERY: Duration = Duration::from_secs(1);

/// Runs for the client's life (its runtime's), woken by `wake`.
pub(crate) async fn supervise(
    client: Client,
    endpoints: Vec<String>,
    options: ConnectOptions,
    wake: Arc<Notify>,
) {
    if endpoints.len() < 2 {
        return;
    }
    // One client per member, for the status requests alone.
    let mut probes = Vec::with_capacity(endpoints.len());
    for ep in &endpoints {
        match Client::connect([ep.as_str()], Some(options.clone())).await {
            Ok(c) => probes.push(Some(c)),
            Err(e) => {
                tracing::warn!(endpoint = %ep, error = %e, "etcd member's status cannot be asked: it stays in the balancer");
                probes.push(None);
            }
        }
    }
    let mut out: BTreeSet<usize> = BTreeSet::new();
    loop {
        if out.is_empty() {
            wake.notified().await;
        } else {
            tokio::select! {
                _ = wake.notified() => {}
                _ = tokio::time::sleep(AGAIN_EVERY) => {}
            }
        }
        let mut answered = Vec::with_capacity(probes.len());
        for p in &probes {
            answered.push(match p {
                None => true,
                Some(c) => {
                    let mut m = c.maintenance_client();
                    matches!(
                        tokio::time::timeout(ANSWER_WITHIN, m.status()).await,
                        Ok(Ok(_))
                    )
                }
            });
        }
        // Those that answer back first; then the silent ones out, but only
        // while one that answered stays in (with none answering, all stay:
        // requests then fail with etcd's own error).
        for (i, ep) in endpoints.iter().enumerate() {
            if answered[i] && out.contains(&i) && client.add_endpoint(ep).await.is_ok() {
                tracing::info!(endpoint = %ep, "etcd member answers again: back among those asked");
                out.remove(&i);
            }
        }
        let answering_in = (0..endpoints.len()).any(|i| answered[i] && !out.contains(&i));
        for (i, ep) in endpoints.iter().enumerate() {
            if !answered[i]
                && !out.contains(&i)
                && answering_in
                && client.remove_endpoint(ep).await.is_ok()
            {
                tracing::warn!(endpoint = %ep, "etcd member does not answer: requests go to the others until it does");
                out.insert(i);
            }
        }
    }
}
