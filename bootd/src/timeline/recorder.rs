//! Recording without blocking, and the one writer: events go over a
//! bounded channel to [`writer`], which joins them to nodes, keeps them in
//! the [`Book`], observes phase durations and publishes joined events to
//! subscribers (the controller).

use super::*;
use tokio::sync::broadcast;

/// The handle every request path records through; never blocks.
#[derive(Debug)]
pub struct Recorder {
    tx: mpsc::Sender<Raw>,
    rx: Mutex<Option<mpsc::Receiver<Raw>>>,
    /// Events dropped because the channel was full (also in /metrics).
    pub dropped: Counter,
    /// Read by the status page and the API; written by [`writer`] only.
    pub book: Arc<Mutex<Book>>,
    /// Events joined to site nodes, for [`Recorder::subscribe`].
    feed: broadcast::Sender<Arc<NodeEvent>>,
    /// Nodes whose machine boots an image ([`Recorder::set_boot`]).
    image_boot: Mutex<std::collections::BTreeSet<String>>,
    /// Where several appliances share the store: this one's name, and
    /// where the writer sends the events it shares ([`Recorder::share`]).
    sharing: std::sync::OnceLock<(String, mpsc::Sender<(String, Event)>)>,
    /// The other appliances' events, per site node ([`super::ha::follow`]).
    others: Mutex<HashMap<String, VecDeque<Event>>>,
    /// When lbd's status was last read (ms since the epoch; 0: never):
    /// until then, no machine-config connection seen means nothing.
    lbd_read_ms: std::sync::atomic::AtomicI64,
}

/// How many joined events a subscriber may fall behind before it is told
/// it lagged (it then reads [`Recorder::track`] to catch up).
pub const FEED_CAPACITY: usize = 4096;

/// Capacity of the channel to the writer.
pub const CAPACITY: usize = 8192;

impl Recorder {
    /// `dropped` is usually `Metrics::timeline_dropped`.
    pub fn new(capacity: usize, dropped: Counter) -> Recorder {
        let (tx, rx) = mpsc::channel(capacity);
        let (feed, _) = broadcast::channel(FEED_CAPACITY);
        Recorder {
            tx,
            rx: Mutex::new(Some(rx)),
            dropped,
            book: Default::default(),
            feed,
            image_boot: Default::default(),
            sharing: Default::default(),
            others: Default::default(),
            lbd_read_ms: Default::default(),
        }
    }

    /// lbd's status was read just now: its machine-config and API phases
    /// are being followed.
    pub fn lbd_read(&self) {
        self.lbd_read_ms
            .store(super::now_us() / 1000, std::sync::atomic::Ordering::Relaxed);
    }

    /// When lbd's status was last read, if ever (ms since the epoch).
    pub fn lbd_read_at(&self) -> Option<i64> {
        Some(self.lbd_read_ms.load(std::sync::atomic::Ordering::Relaxed)).filter(|&ms| ms > 0)
    }

    /// Shares the events of site nodes from now on, as appliance `me`:
    /// the receiver is for [`super::ha::publish`]. Once.
    pub fn share(&self, me: &str) -> Option<mpsc::Receiver<(String, Event)>> {
        let (tx, rx) = mpsc::channel(super::ha::BACKLOG);
        self.sharing.set((me.to_string(), tx)).ok()?;
        self.book.lock().unwrap_or_else(|p| p.into_inner()).share = true;
        Some(rx)
    }

    /// Forgets the other appliances' events (they are all read again).
    pub fn others_reset(&self) {
        self.others
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Keeps an event another appliance saw of site node `node`.
    pub fn add_other(&self, node: String, ev: Event) {
        let mut others = self.others.lock().unwrap_or_else(|p| p.into_inner());
        let q = others.entry(node).or_default();
        let pos = q
            .iter()
            .rposition(|e| e.start_us() <= ev.start_us())
            .map(|p| p + 1)
            .unwrap_or(0);
        q.insert(pos, ev);
        if q.len() > EVENTS_PER_NODE {
            q.pop_front();
        }
    }

    /// `local` (this appliance's track of `key`, if any) with the other
    /// appliances' events of it, where they are shared.
    fn view(
        &self,
        key: &str,
        local: Option<&Track>,
        absent: impl FnOnce() -> Track,
    ) -> Option<Track> {
        let Some((me, _)) = self.sharing.get() else {
            return local.cloned();
        };
        let others = self.others.lock().unwrap_or_else(|p| p.into_inner());
        let theirs = others.get(key);
        if local.is_none() && theirs.is_none() {
            return None;
        }
        let base = local.cloned().unwrap_or_else(absent);
        Some(super::ha::merge(base, me, theirs.into_iter().flatten()))
    }

    /// Whether `node`'s machine boots an image from its provider (`true`)
    /// or network-boots through this host (`false`, the default): said by
    /// the controller for the machines it makes, shown on the status page.
    pub fn set_boot(&self, node: &str, image: bool) {
        let mut set = self.image_boot.lock().unwrap_or_else(|p| p.into_inner());
        if image {
            set.insert(node.to_string());
        } else {
            set.remove(node);
        }
    }

    /// Every event the writer joins to a site node from now on, in the
    /// order it joins them. This is the one record of what nodes do: the
    /// controller's conditions are made from it.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<NodeEvent>> {
        self.feed.subscribe()
    }

    pub fn record(&self, mut raw: Raw) {
        // Most details carry no token: no copy for them.
        if raw.detail.contains("token=") {
            raw.detail = redact(&raw.detail);
        }
        if self.tx.try_send(raw).is_err() {
            self.dropped.inc();
        }
    }

    /// As [`Recorder::record`], but never dropped: when the channel is full
    /// the event waits for room in a task of its own. For the few events a
    /// decision rests on (an Ignition served to another address than the
    /// node's: the controller then approves none of its kubelet's CSRs),
    /// which a flood of other events must not push out. Each needs a
    /// successful fetch on a valid token, so they cannot pile up.
    pub fn record_surely(&self, mut raw: Raw) {
        if raw.detail.contains("token=") {
            raw.detail = redact(&raw.detail);
        }
        match self.tx.try_send(raw) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(raw)) => {
                let tx = self.tx.clone();
                tokio::spawn(async move {
                    let _ = tx.send(raw).await;
                });
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.dropped.inc();
            }
        }
    }

    /// The receiving end, once (for [`writer`]).
    pub fn take_receiver(&self) -> Option<mpsc::Receiver<Raw>> {
        self.rx.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Summaries of every timeline: site nodes in site order (those not seen
    /// yet too), then unknown clients by key.
    pub fn summaries(&self, site: &Site) -> Vec<Summary> {
        let book = self.book.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<Summary> = site
            .nodes
            .iter()
            .map(|n| {
                let unseen = || Track {
                    key: n.name.clone(),
                    site_node: true,
                    mac: n.macs.first().map(|m| m.to_string()),
                    ip: Some(n.ip()),
                    attempt: 1,
                    events: VecDeque::new(),
                    starts: None,
                };
                match self.view(&n.name, book.tracks.get(&n.name), unseen) {
                    Some(t) => summary(&t),
                    None => summary(&unseen()),
                }
            })
            .collect();
        let mut others: Vec<&Track> = book
            .tracks
            .values()
            .filter(|t| site.node(&t.key).is_none())
            .collect();
        others.sort_by(|a, b| a.key.cmp(&b.key));
        out.extend(others.into_iter().map(summary));
        let image = self.image_boot.lock().unwrap_or_else(|p| p.into_inner());
        for s in &mut out {
            if image.contains(&s.node) {
                s.boot = super::BOOT_IMAGE;
            }
        }
        out
    }

    /// One node's timeline (every attempt kept), by key; with the other
    /// appliances' events of it where they are shared.
    pub fn track(&self, key: &str) -> Option<Track> {
        let book = self.book.lock().unwrap_or_else(|p| p.into_inner());
        self.view(key, book.tracks.get(key), || Track {
            key: key.to_string(),
            site_node: true,
            mac: None,
            ip: None,
            attempt: 1,
            events: VecDeque::new(),
            starts: None,
        })
    }
}

/// Joins and stores events until `shutdown`; observes closed phases and
/// publishes events joined to site nodes to [`Recorder::subscribe`]rs.
pub async fn writer(
    recorder: Arc<Recorder>,
    live: Arc<crate::state::Live>,
    phase_seconds: crate::metrics::PhaseSeconds,
    mut rx: mpsc::Receiver<Raw>,
    shutdown: CancellationToken,
) {
    let mut batch = Vec::with_capacity(256);
    loop {
        batch.clear();
        tokio::select! {
            _ = shutdown.cancelled() => return,
            n = rx.recv_many(&mut batch, 256) => if n == 0 { return },
        }
        let snap = live.load();
        let mut closed = Vec::new();
        let mut joined = Vec::new();
        let shared_out;
        {
            let mut book = recorder.book.lock().unwrap_or_else(|p| p.into_inner());
            for raw in batch.drain(..) {
                let (at_us, phase, what, error) = (raw.at_us, raw.phase, raw.what, raw.error);
                let detail = (recorder.feed.receiver_count() > 0).then(|| raw.detail.clone());
                let (node, c) = book.add_joined(&snap.site, raw);
                closed.extend(c);
                if let (Some(node), Some(detail)) = (node, detail) {
                    joined.push(Arc::new(NodeEvent {
                        node,
                        at_us,
                        phase,
                        what: std::borrow::Cow::Borrowed(what),
                        error,
                        detail,
                    }));
                }
            }
            shared_out = std::mem::take(&mut book.outbox);
        }
        if let Some((_, tx)) = recorder.sharing.get() {
            let mut full = 0;
            for e in shared_out {
                if tx.try_send(e).is_err() {
                    full += 1;
                }
            }
            if full > 0 {
                tracing::warn!(
                    events = full,
                    "timeline events not shared: the queue to the store is full"
                );
            }
        }
        for ev in joined {
            // No subscriber (no controller): nothing to tell.
            let _ = recorder.feed.send(ev);
        }
        for (phase, d) in closed {
            phase_seconds
                .get_or_create(&crate::metrics::PhaseLabel {
                    phase: phase.as_str(),
                })
                .observe(d.as_secs_f64());
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(PACE) => {}
        }
    }
}

/// After a batch the writer rests this long: events sent meanwhile wait in
/// the channel (no waker is registered, so sending wakes nobody) and are
/// taken in one batch. Without the rest, every image request woke the
/// writer task once; with a client fetching small files back to back that
/// was about a tenth of bootd's CPU per request. The timeline lags by at
/// most this much; the channel ([`CAPACITY`]) holds far more than arrives
/// in it.
const PACE: Duration = Duration::from_millis(10);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::{Phase, Raw, Subject};

    fn raw(what: &'static str) -> Raw {
        Raw::new(Subject::node("w"), Phase::Ignition, what, "d")
    }

    #[tokio::test]
    async fn a_decisive_event_is_not_dropped_when_the_channel_is_full() {
        let r = Recorder::new(1, Counter::default());
        let mut rx = r.take_receiver().unwrap();
        r.record(raw("first"));
        r.record(raw("dropped"));
        assert_eq!(r.dropped.get(), 1, "record drops when full");
        r.record_surely(raw("other_address"));
        assert_eq!(r.dropped.get(), 1, "record_surely does not");
        let got = [rx.recv().await.unwrap(), rx.recv().await.unwrap()];
        assert_eq!(
            got.iter().map(|r| r.what).collect::<Vec<&str>>(),
            ["first", "other_address"]
        );
    }
}
