//! A copy of the controller's state from one store to another
//! (`bootd store migrate`): nodes with their machines, provider facts,
//! conditions (with their transition times), events, open intents and
//! cluster facts. Closed intents are history and stay behind. Open
//! intents get new ids in the target (they are numbered per store).

use super::*;

/// What was copied.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Copied {
    pub nodes: usize,
    pub machines: usize,
    pub events: usize,
    pub open_intents: usize,
    pub cluster_facts: usize,
}

/// Copies everything from `from` into `to`, which must hold no node (a
/// copy never merges two stores' nodes).
pub fn copy(from: &dyn Backend, to: &dyn Backend) -> std::result::Result<Copied, String> {
    let have = to.nodes().map_err(|e| e.to_string())?.len();
    if have > 0 {
        return Err(format!(
            "the target store already holds {have} node(s): nothing copied (a copy never merges two stores)"
        ));
    }
    let mut n = Copied::default();
    let nodes = from.nodes().map_err(|e| e.to_string())?;
    let facts = from.all_facts().map_err(|e| e.to_string())?;
    for row in &nodes {
        let e = |e: StoreError| format!("node {}: {e}", row.name);
        to.insert_node(row).map_err(e)?;
        if let Some(r) = from.resource(&row.name).map_err(e)? {
            to.put_resource(&row.name, &r).map_err(e)?;
            n.machines += 1;
        }
        if let Some(f) = facts.get(&row.name) {
            to.put_facts(&row.name, f).map_err(e)?;
        }
        for c in from.conditions(&row.name).map_err(e)? {
            to.set_condition(&row.name, &c).map_err(e)?;
        }
        let events: Vec<(String, Event)> = from
            .events(&row.name)
            .map_err(e)?
            .into_iter()
            .map(|ev| (row.name.clone(), ev))
            .collect();
        n.events += events.len();
        to.add_events(&events).map_err(e)?;
        for i in from.open_intents(&row.name).map_err(e)? {
            to.begin_intent(&i.node, &i.op, &i.provider).map_err(e)?;
            n.open_intents += 1;
        }
        n.nodes += 1;
    }
    for (k, v, at) in from.clusters().map_err(|e| e.to_string())? {
        to.restore_cluster(&k, &v, at)
            .map_err(|e| format!("cluster fact {k}: {e}"))?;
        n.cluster_facts += 1;
    }
    Ok(n)
}
