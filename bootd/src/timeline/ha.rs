//! Timelines across appliances that share a store (`host.store: etcd`):
//! each appliance shares the events it sees of site nodes and shows the
//! others' beside its own, each marked with the appliance that saw it
//! ([`Event::by`]). Any appliance's status page then tells a node's whole
//! boot, also when its steps were served by several (the appliance that
//! answered DHCP powered off, the next one serving Ignition).
//!
//! - [`publish`]: the events [`Book::add`] put in its outbox go to the
//!   store ([`Shared::share_events`]) at most every [`PACE`], [`BATCH`] to
//!   a write; while the store cannot be reached up to [`BACKLOG`] wait,
//!   the oldest dropped first (the local timeline has them all).
//! - [`follow`]: the other appliances' events ([`Shared::others_events`])
//!   kept per site node in the [`Recorder`], [`EVENTS_PER_NODE`] at most.
//! - [`merge`] (pure): a node's own and the others' events as one track,
//!   with boot attempts counted across them.

use super::*;
use crate::ha::{Others, Shared};

/// Events in one write to the store.
pub const BATCH: usize = 100;
/// Events waiting while the store cannot be reached.
pub const BACKLOG: usize = 8192;
/// Between two writes: events seen meanwhile go together.
pub const PACE: Duration = Duration::from_millis(500);
/// Attempt starts (a firmware DHCP request after the kernel) that two
/// appliances saw within this long of each other are one reboot.
pub const SAME_REBOOT_US: i64 = 60_000_000;

/// Starts sharing `app`'s timeline events through `shared` and following
/// the others', when the store names this appliance.
pub fn start(
    app: &crate::App,
    shared: &Arc<dyn Shared>,
    tracker: &tokio_util::task::TaskTracker,
    shutdown: &CancellationToken,
) {
    let Some(out) = shared.name().and_then(|me| app.timeline.share(me)) else {
        return;
    };
    tracker.spawn(publish(out, Arc::clone(shared), shutdown.clone()));
    tracker.spawn(follow(
        Arc::clone(&app.timeline),
        Arc::clone(&app.live),
        Arc::clone(shared),
        shutdown.clone(),
    ));
}

/// Sends the events from `rx` (the writer's outbox) to the store until
/// `shutdown`.
pub async fn publish(
    mut rx: mpsc::Receiver<(String, Event)>,
    shared: Arc<dyn Shared>,
    shutdown: CancellationToken,
) {
    let mut pending: VecDeque<(String, Vec<u8>)> = VecDeque::new();
    let mut batch = Vec::with_capacity(BATCH);
    let mut failing = false;
    let mut dropped = 0u64;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            n = rx.recv_many(&mut batch, BACKLOG), if pending.is_empty() => if n == 0 { return },
            _ = tokio::time::sleep(Duration::from_secs(1)), if !pending.is_empty() => {}
        }
        while let Ok(x) = rx.try_recv() {
            batch.push(x);
        }
        for (node, ev) in batch.drain(..) {
            if let Ok(json) = serde_json::to_vec(&ev) {
                pending.push_back((node, json));
            }
        }
        while pending.len() > BACKLOG {
            pending.pop_front();
            dropped += 1;
        }
        while !pending.is_empty() {
            let n = pending.len().min(BATCH);
            let chunk: Vec<(String, Vec<u8>)> = pending.iter().take(n).cloned().collect();
            let s = shared.clone();
            match tokio::task::spawn_blocking(move || s.share_events(&chunk)).await {
                Ok(Ok(())) => {
                    pending.drain(..n);
                    if failing {
                        tracing::info!(
                            dropped,
                            "timeline events shared with the other appliances again"
                        );
                        failing = false;
                        dropped = 0;
                    }
                }
                Ok(Err(e)) => {
                    if !failing {
                        tracing::warn!(error = %e, "timeline events not shared with the other appliances yet (kept, at most {BACKLOG})");
                        failing = true;
                    }
                    break;
                }
                Err(_) => return,
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(PACE) => {}
        }
    }
}

/// Keeps the other appliances' events of site nodes in `recorder` until
/// `shutdown`.
pub async fn follow(
    recorder: Arc<Recorder>,
    live: Arc<crate::state::Live>,
    shared: Arc<dyn Shared>,
    shutdown: CancellationToken,
) {
    let Some(mut rx) = shared.others_events(shutdown.clone()) else {
        return;
    };
    let mut unreadable = 0u64;
    loop {
        let o = tokio::select! {
            _ = shutdown.cancelled() => return,
            o = rx.recv() => o,
        };
        match o {
            None => return,
            Some(Others::Reset) => recorder.others_reset(),
            Some(Others::Event { node, by, json }) => {
                if live.load().site.node(&node).is_none() {
                    continue;
                }
                match serde_json::from_slice::<Event>(&json) {
                    Ok(mut ev) => {
                        ev.by = Some(by);
                        recorder.add_other(node, ev);
                    }
                    Err(e) => {
                        unreadable += 1;
                        if unreadable.is_power_of_two() {
                            tracing::warn!(error = %e, by, unreadable, "a timeline event shared by another appliance is unreadable: skipped");
                        }
                    }
                }
            }
        }
    }
}

/// `base` (this appliance's track of a node, its events seen by `me`)
/// with `theirs` (the others' events of the node, each with its `by`):
/// every event in time order, the newest [`EVENTS_PER_NODE`] kept; boot
/// attempts numbered across them: each appliance's own count says where
/// a reboot began, and reboots seen by several within [`SAME_REBOOT_US`]
/// count once.
pub fn merge<'a>(base: Track, me: &str, theirs: impl IntoIterator<Item = &'a Event>) -> Track {
    let mut starts = Vec::new();
    let mut sources: HashMap<&str, Vec<&Event>> = HashMap::new();
    let theirs: Vec<&Event> = theirs.into_iter().collect();
    for e in &theirs {
        sources
            .entry(e.by.as_deref().unwrap_or(""))
            .or_default()
            .push(e);
    }
    sources.insert(me, base.events.iter().collect());
    for events in sources.values_mut() {
        events.sort_by_key(|e| e.start_us());
        let mut seen = 0;
        for (i, e) in events.iter().enumerate() {
            if i > 0 && e.attempt > seen {
                starts.push(e.start_us());
            }
            seen = seen.max(e.attempt);
        }
    }
    starts.sort_unstable();
    let mut kept: Vec<i64> = Vec::new();
    for s in starts {
        if kept.last().is_none_or(|&k| s - k > SAME_REBOOT_US) {
            kept.push(s);
        }
    }
    let mut all: Vec<Event> = base
        .events
        .iter()
        .map(|e| Event {
            by: Some(me.to_string()),
            ..e.clone()
        })
        .chain(theirs.iter().map(|e| (*e).clone()))
        .collect();
    all.sort_by_key(|e| e.start_us());
    for e in &mut all {
        e.attempt = 1 + kept.iter().filter(|&&s| s <= e.start_us()).count() as u32;
    }
    let skip = all.len().saturating_sub(EVENTS_PER_NODE);
    let mac = base
        .mac
        .clone()
        .or_else(|| all.iter().rev().find_map(|e| e.mac.clone()));
    let ip = base.ip.or_else(|| all.iter().rev().find_map(|e| e.ip));
    Track {
        mac,
        ip,
        attempt: 1 + kept.len() as u32,
        events: all.into_iter().skip(skip).collect(),
        starts: None,
        ..base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(at_ms: i64, phase: Phase, what: &'static str, attempt: u32, by: Option<&str>) -> Event {
        Event {
            at_us: at_ms * 1000,
            took_us: 0,
            phase,
            what: what.into(),
            error: false,
            detail: String::new(),
            bytes: None,
            mac: None,
            ip: None,
            attempt,
            by: by.map(str::to_string),
        }
    }

    fn track(events: Vec<Event>, attempt: u32) -> Track {
        Track {
            key: "bootstrap".into(),
            site_node: true,
            mac: None,
            ip: None,
            attempt,
            events: events.into(),
            starts: None,
        }
    }

    /// A boots a node as far as its kernel and goes; B serves Ignition:
    /// B's view is one attempt, each phase by whoever served it.
    #[test]
    fn one_boot_served_by_two() {
        let a = [
            ev(1000, Phase::Dhcp, "discover", 1, Some("A")),
            ev(1001, Phase::Dhcp, "ack", 1, Some("A")),
            ev(1300, Phase::Script, "served", 1, Some("A")),
            ev(1400, Phase::Kernel, "start", 1, Some("A")),
        ];
        // B counted its first event as attempt 1 too.
        let b = track(vec![ev(9000, Phase::Ignition, "served", 1, None)], 1);
        let m = merge(b, "B", a.iter());
        assert_eq!(m.attempt, 1);
        let by: Vec<(Phase, &str)> = m
            .events
            .iter()
            .map(|e| (e.phase, e.by.as_deref().unwrap()))
            .collect();
        assert_eq!(
            by,
            [
                (Phase::Dhcp, "A"),
                (Phase::Dhcp, "A"),
                (Phase::Script, "A"),
                (Phase::Kernel, "A"),
                (Phase::Ignition, "B")
            ]
        );
        let s = summary(&m);
        assert!(s.in_order);
        let spans: Vec<(Phase, Vec<String>)> =
            s.phases.iter().map(|p| (p.phase, p.by.clone())).collect();
        assert_eq!(spans[0], (Phase::Dhcp, vec!["A".to_string()]));
        assert_eq!(spans[3], (Phase::Ignition, vec!["B".to_string()]));
        assert_eq!(s.total_us, 8_000_000);
    }

    /// A reboot both appliances saw is one new attempt; one only the other
    /// saw counts too, and later events belong to it.
    #[test]
    fn reboots_counted_once_across_appliances() {
        let a = [
            ev(1_000, Phase::Dhcp, "discover", 1, Some("A")),
            ev(2_000, Phase::Kernel, "start", 1, Some("A")),
            ev(100_000, Phase::Dhcp, "discover", 2, Some("A")),
            ev(101_000, Phase::Kernel, "start", 2, Some("A")),
        ];
        let mine = track(
            vec![
                ev(1_500, Phase::Script, "served", 1, None),
                // B saw the same reboot 200 ms later.
                ev(100_200, Phase::Dhcp, "discover", 2, None),
                // A later one only B saw (A was gone).
                ev(500_000, Phase::Dhcp, "discover", 3, None),
                ev(501_000, Phase::Ignition, "served", 3, None),
            ],
            3,
        );
        let m = merge(mine, "B", a.iter());
        assert_eq!(m.attempt, 3);
        let attempts: Vec<(i64, u32)> = m
            .events
            .iter()
            .map(|e| (e.at_us / 1000, e.attempt))
            .collect();
        assert_eq!(
            attempts,
            [
                (1_000, 1),
                (1_500, 1),
                (2_000, 1),
                (100_000, 2),
                (100_200, 2),
                (101_000, 2),
                (500_000, 3),
                (501_000, 3)
            ]
        );
        let cur: Vec<Phase> = summary(&m).phases.iter().map(|p| p.phase).collect();
        assert_eq!(cur, [Phase::Dhcp, Phase::Ignition]);
    }

    #[test]
    fn bounded_and_addresses_from_the_others() {
        let mut theirs: Vec<Event> = (0..EVENTS_PER_NODE as i64 + 10)
            .map(|i| ev(i, Phase::Dhcp, "ack", 1, Some("A")))
            .collect();
        theirs[5].mac = Some("52:54:00:77:00:10".into());
        let m = merge(track(vec![], 1), "B", theirs.iter());
        assert_eq!(m.events.len(), EVENTS_PER_NODE);
        assert_eq!(m.events[0].at_us, 10_000, "the oldest go first");
        assert_eq!(m.mac.as_deref(), Some("52:54:00:77:00:10"));
    }

    /// What one appliance writes, another reads back as the same event.
    #[test]
    fn events_cross_as_json() {
        let mut e = ev(5, Phase::Ignition, "pointer_served", 2, None);
        e.bytes = Some(12);
        e.ip = Some("10.77.0.10".parse().unwrap());
        let back: Event = serde_json::from_slice(&serde_json::to_vec(&e).unwrap()).unwrap();
        assert_eq!(back, e);
    }
}
