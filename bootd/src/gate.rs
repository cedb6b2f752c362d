//! Admission limits: a gate lets at most `limit` holders through at once;
//! the next ones wait their turn (first come, first served) up to
//! `queue` of them, each for at most `wait`; beyond the queue, or past the
//! wait, they are refused. What is behind a gate (image transfers, provider
//! creates) then runs at a bounded concurrency instead of sharing the link
//! or the provider's rate limit among everyone at once: under a storm the
//! first machines finish early instead of all finishing late together.
//!
//! A gate is resized live (a site reload): a larger limit lets waiting
//! holders through at once; a smaller one takes effect as holders leave.
//! Every gate shows in the metrics (`bootd_admission_*{gate}`) and on the
//! status page.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GateLabel {
    pub gate: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GateReason {
    pub gate: String,
    pub reason: &'static str,
}

/// The gates' metrics, registered once (`bootd_admission_*`).
#[derive(Debug, Default)]
pub struct GateMetrics {
    pub in_use: Family<GateLabel, Gauge>,
    pub waiting: Family<GateLabel, Gauge>,
    pub limit: Family<GateLabel, Gauge>,
    /// Holders that had to wait (and then got through).
    pub waited: Family<GateLabel, Counter>,
    /// Holders turned away: `queue_full`, `wait_expired` or `per_source`.
    pub refused: Family<GateReason, Counter>,
}

impl GateMetrics {
    pub fn register(&self, r: &mut prometheus_client::registry::Registry) {
        r.register(
            "admission_in_use",
            "Holders through an admission gate now",
            self.in_use.clone(),
        );
        r.register(
            "admission_waiting",
            "Holders waiting at an admission gate now",
            self.waiting.clone(),
        );
        r.register(
            "admission_limit",
            "An admission gate's limit (holders through at once)",
            self.limit.clone(),
        );
        r.register(
            "admission_waited",
            "Holders that waited at an admission gate, then got through",
            self.waited.clone(),
        );
        r.register(
            "admission_refused",
            "Holders refused at an admission gate (queue_full, wait_expired, per_source)",
            self.refused.clone(),
        );
    }
}

/// Why a holder was not let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// `queue` holders were waiting already.
    QueueFull,
    /// It waited `wait` and no place freed.
    WaitExpired,
    /// Its source address holds its share of places already.
    PerSource,
}

impl Refused {
    pub fn reason(self) -> &'static str {
        match self {
            Refused::QueueFull => "queue_full",
            Refused::WaitExpired => "wait_expired",
            Refused::PerSource => "per_source",
        }
    }
}

/// One gate's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Holders through at once; 0: no limit.
    pub limit: usize,
    /// Holders waiting at most.
    pub queue: usize,
    /// How long one holder waits at most.
    pub wait: Duration,
}

/// What the status page shows of a gate.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct View {
    pub gate: String,
    pub in_use: usize,
    pub limit: usize,
    pub waiting: usize,
    /// `None`: no bound (provider creates wait as long as their deadline).
    pub queue: Option<usize>,
}

pub struct Gate {
    name: String,
    sem: Arc<Semaphore>,
    /// The limits, and the places the semaphore was last sized for (kept
    /// while the limit is 0: holders then pass without a place).
    limits: Mutex<(Limits, usize)>,
    /// Holders through now (counted here: while a limit shrinks, permits
    /// taken back are held by nobody).
    in_use: Arc<AtomicUsize>,
    waiting: AtomicUsize,
    m: Arc<GateMetrics>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("name", &self.name)
            .field("limits", &self.limits())
            .finish()
    }
}

/// A place through a gate: dropped, the place is free.
#[derive(Debug)]
pub struct Pass {
    _permit: Option<OwnedSemaphorePermit>,
    in_use: Arc<AtomicUsize>,
    gauge: Gauge,
}

impl Drop for Pass {
    fn drop(&mut self) {
        self.in_use.fetch_sub(1, Ordering::Relaxed);
        self.gauge.dec();
    }
}

impl Gate {
    pub fn new(name: impl Into<String>, limits: Limits, m: Arc<GateMetrics>) -> Arc<Gate> {
        let name = name.into();
        m.limit
            .get_or_create(&GateLabel { gate: name.clone() })
            .set(limits.limit as i64);
        let places = limits.limit.max(1);
        Arc::new(Gate {
            name,
            sem: Arc::new(Semaphore::new(places)),
            limits: Mutex::new((limits, places)),
            in_use: Arc::new(AtomicUsize::new(0)),
            waiting: AtomicUsize::new(0),
            m,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn limits(&self) -> Limits {
        self.limits.lock().unwrap_or_else(|p| p.into_inner()).0
    }

    fn label(&self) -> GateLabel {
        GateLabel {
            gate: self.name.clone(),
        }
    }

    /// New limits, live: more places are free at once; fewer are taken
    /// back as holders leave (a task holds the difference until then). A
    /// limit of 0 lets everyone through from now on (holders that passed
    /// that way are not counted against a limit set later).
    pub fn resize(&self, limits: Limits) {
        let (old, new) = {
            let mut l = self.limits.lock().unwrap_or_else(|p| p.into_inner());
            if l.0 == limits {
                return;
            }
            let old = l.1;
            let new = if limits.limit == 0 { old } else { limits.limit };
            *l = (limits, new);
            (old, new)
        };
        self.m
            .limit
            .get_or_create(&self.label())
            .set(limits.limit as i64);
        match new.cmp(&old) {
            std::cmp::Ordering::Greater => self.sem.add_permits(new - old),
            std::cmp::Ordering::Less => {
                let sem = Arc::clone(&self.sem);
                let n = u32::try_from(old - new).unwrap_or(u32::MAX);
                tokio::spawn(async move {
                    if let Ok(p) = sem.acquire_many_owned(n).await {
                        p.forget();
                    }
                });
            }
            std::cmp::Ordering::Equal => {}
        }
    }

    fn pass(&self, permit: Option<OwnedSemaphorePermit>) -> Pass {
        self.in_use.fetch_add(1, Ordering::Relaxed);
        let gauge = self.m.in_use.get_or_create(&self.label()).clone();
        gauge.inc();
        Pass {
            _permit: permit,
            in_use: Arc::clone(&self.in_use),
            gauge,
        }
    }

    /// A place if one is free now, without waiting (and without
    /// overtaking anyone waiting: the semaphore is fair).
    pub fn try_enter(&self) -> Option<Pass> {
        if self.limits().limit == 0 {
            return Some(self.pass(None));
        }
        Arc::clone(&self.sem)
            .try_acquire_owned()
            .ok()
            .map(|p| self.pass(Some(p)))
    }

    /// A place, waiting for one if none is free.
    pub async fn enter(&self) -> Result<Pass, Refused> {
        if let Some(p) = self.try_enter() {
            return Ok(p);
        }
        let Limits { queue, wait, .. } = self.limits();
        let label = self.label();
        // Join the queue only if it has room (a compare-and-swap loop: the
        // count never goes past `queue`).
        let mut n = self.waiting.load(Ordering::Relaxed);
        loop {
            if n >= queue {
                self.refuse(Refused::QueueFull);
                return Err(Refused::QueueFull);
            }
            match self
                .waiting
                .compare_exchange(n, n + 1, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => n = now,
            }
        }
        let waiting = self.m.waiting.get_or_create(&label).clone();
        waiting.inc();
        let got = tokio::time::timeout(wait, Arc::clone(&self.sem).acquire_owned()).await;
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        waiting.dec();
        match got {
            Ok(Ok(p)) => {
                self.m.waited.get_or_create(&label).inc();
                Ok(self.pass(Some(p)))
            }
            _ => {
                self.refuse(Refused::WaitExpired);
                Err(Refused::WaitExpired)
            }
        }
    }

    fn refuse(&self, r: Refused) {
        self.m
            .refused
            .get_or_create(&GateReason {
                gate: self.name.clone(),
                reason: r.reason(),
            })
            .inc();
    }

    pub fn view(&self) -> View {
        let l = self.limits();
        View {
            gate: self.name.clone(),
            in_use: self.in_use.load(Ordering::Relaxed),
            limit: l.limit,
            waiting: self.waiting.load(Ordering::Relaxed),
            queue: (l.queue != usize::MAX).then_some(l.queue),
        }
    }
}

/// A place to send an image: through the image gate, and one of its
/// source address's share.
#[derive(Debug)]
pub struct ImagePass {
    _pass: Pass,
    _source: SourcePass,
}

/// One of a source address's image places; dropped, it is free.
#[derive(Debug)]
pub struct SourcePass {
    all: Arc<Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>,
    ip: std::net::IpAddr,
}

impl Drop for SourcePass {
    fn drop(&mut self) {
        let mut all = self.all.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = all.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                all.remove(&self.ip);
            }
        }
    }
}

/// The site's gates (`host.admission`): image transfers, and provider
/// creates per provider. bootd applies each new site's limits to them
/// ([`Admission::apply`]) wherever it starts serving a site.
#[derive(Debug)]
pub struct Admission {
    m: Arc<GateMetrics>,
    images: Arc<Gate>,
    /// Image places held per source address (`imagePerSource`).
    image_sources: Arc<Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>,
    provisions: Mutex<std::collections::BTreeMap<String, Arc<Gate>>>,
    /// The HTTP(S) listeners' connection caps (`httpConnections`).
    conns: Mutex<Vec<Arc<runtime::conns::Conns>>>,
}

/// The connection caps of an HTTP(S) listener at the site's
/// `httpConnections` (one source address: 512 at most).
pub fn conn_limits(a: &site::Admission) -> runtime::conns::ConnLimits {
    runtime::conns::ConnLimits {
        max: a.http_connections,
        ..Default::default()
    }
}

/// Provider creates wait without a bound of their own: the node's deadline
/// ends the wait (its loop is dropped).
const PROVISION_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

fn image_limits(a: &site::Admission) -> Limits {
    Limits {
        limit: a.image_transfers.unwrap_or(0),
        queue: a.image_queue,
        wait: a.queue_wait,
    }
}

fn provision_limits(a: &site::Admission) -> Limits {
    Limits {
        limit: a.provisions,
        queue: usize::MAX,
        wait: PROVISION_WAIT,
    }
}

impl Admission {
    pub fn new(site: &site::Site, m: Arc<GateMetrics>) -> Admission {
        let images = Gate::new("images", image_limits(&site.host.admission), Arc::clone(&m));
        Admission {
            m,
            images,
            image_sources: Default::default(),
            provisions: Mutex::new(Default::default()),
            conns: Mutex::new(Vec::new()),
        }
    }

    /// A listener whose connection cap follows the site's
    /// `httpConnections` from now on.
    pub fn follow_conns(&self, c: Arc<runtime::conns::Conns>) {
        self.conns.lock().unwrap_or_else(|p| p.into_inner()).push(c);
    }

    /// The image-transfer gate (at the served site's limits: bootd applies
    /// each new site's to it, [`Admission::apply`]).
    pub fn images(&self) -> &Gate {
        &self.images
    }

    /// A place to send an image to `source`: at most `imagePerSource`
    /// per address (beyond: refused at once, so that one address reading
    /// slowly cannot hold every place), then the image gate (waiting).
    pub async fn image_pass(
        &self,
        site: &site::Site,
        source: std::net::IpAddr,
    ) -> Result<ImagePass, Refused> {
        let src = self.source_pass(site, source)?;
        let pass = self.images.enter().await?;
        Ok(ImagePass {
            _pass: pass,
            _source: src,
        })
    }

    /// [`Admission::image_pass`] without waiting: `None` when no place
    /// is free now (or the source holds its share).
    pub fn try_image_pass(&self, site: &site::Site, source: std::net::IpAddr) -> Option<ImagePass> {
        let src = self.source_pass_quiet(site, source)?;
        let pass = self.images.try_enter()?;
        Some(ImagePass {
            _pass: pass,
            _source: src,
        })
    }

    fn source_pass_quiet(&self, site: &site::Site, ip: std::net::IpAddr) -> Option<SourcePass> {
        let per = site.host.admission.image_per_source;
        let mut all = self.image_sources.lock().unwrap_or_else(|p| p.into_inner());
        let n = all.entry(ip).or_default();
        if per.is_some_and(|per| *n >= per) {
            return None;
        }
        *n += 1;
        Some(SourcePass {
            all: Arc::clone(&self.image_sources),
            ip,
        })
    }

    fn source_pass(&self, site: &site::Site, ip: std::net::IpAddr) -> Result<SourcePass, Refused> {
        self.source_pass_quiet(site, ip).ok_or_else(|| {
            self.images.refuse(Refused::PerSource);
            Refused::PerSource
        })
    }

    /// The gate of `provider`'s creates, made at `site`'s limits the first
    /// time (later sites' reach it through [`Admission::apply`]).
    pub fn provisions(&self, site: &site::Site, provider: &str) -> Arc<Gate> {
        let mut all = self.provisions.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(all.entry(provider.to_string()).or_insert_with(|| {
            let l = provision_limits(&site.host.admission);
            Gate::new(format!("provisions:{provider}"), l, Arc::clone(&self.m))
        }))
    }

    /// `site`'s limits to every gate, at once (a reload): work waiting at
    /// a gate whose limit grew goes through now.
    pub fn apply(&self, site: &site::Site) {
        self.images.resize(image_limits(&site.host.admission));
        let l = provision_limits(&site.host.admission);
        let all = self.provisions.lock().unwrap_or_else(|p| p.into_inner());
        for g in all.values() {
            g.resize(l);
        }
        let c = conn_limits(&site.host.admission);
        for conns in self.conns.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            conns.set_limits(c);
        }
    }

    /// Every gate, for the status page.
    pub fn views(&self) -> Vec<View> {
        let mut v = vec![self.images.view()];
        let all = self.provisions.lock().unwrap_or_else(|p| p.into_inner());
        v.extend(all.values().map(|g| g.view()));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(limit: usize, queue: usize, wait_ms: u64) -> Arc<Gate> {
        Gate::new(
            "t",
            Limits {
                limit,
                queue,
                wait: Duration::from_millis(wait_ms),
            },
            Arc::new(GateMetrics::default()),
        )
    }

    #[tokio::test]
    async fn beyond_the_limit_holders_wait_in_order_and_beyond_the_queue_are_refused() {
        let g = gate(2, 2, 5_000);
        let a = g.enter().await.unwrap();
        let _b = g.enter().await.unwrap();
        assert_eq!(g.view().in_use, 2);
        let (g1, g2) = (Arc::clone(&g), Arc::clone(&g));
        let first = tokio::spawn(async move { g1.enter().await.map(|_| 1) });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let second = tokio::spawn(async move { g2.enter().await.map(|_| 2) });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(g.view().waiting, 2);
        assert_eq!(g.enter().await.unwrap_err(), Refused::QueueFull);
        drop(a);
        assert_eq!(first.await.unwrap(), Ok(1), "the first waiting goes first");
        assert_eq!(second.await.unwrap(), Ok(2));
        assert_eq!(g.view().waiting, 0);
        let m = &g.m;
        let l = GateLabel { gate: "t".into() };
        assert_eq!(m.waited.get_or_create(&l).get(), 2);
        let full = GateReason {
            gate: "t".into(),
            reason: "queue_full",
        };
        assert_eq!(m.refused.get_or_create(&full).get(), 1);
    }

    #[tokio::test]
    async fn a_holder_waits_at_most_its_wait() {
        let g = gate(1, 8, 100);
        let _a = g.enter().await.unwrap();
        let t = std::time::Instant::now();
        assert_eq!(g.enter().await.unwrap_err(), Refused::WaitExpired);
        assert!(t.elapsed() >= Duration::from_millis(100));
        assert_eq!(g.view().waiting, 0);
    }

    #[tokio::test]
    async fn a_resize_lets_waiting_holders_through_or_takes_places_back_as_they_free() {
        let g = gate(1, 8, 5_000);
        let a = g.enter().await.unwrap();
        let g1 = Arc::clone(&g);
        let waiter = tokio::spawn(async move { g1.enter().await.is_ok() });
        tokio::time::sleep(Duration::from_millis(20)).await;
        g.resize(Limits {
            limit: 2,
            queue: 8,
            wait: Duration::from_secs(5),
        });
        assert!(waiter.await.unwrap(), "the larger limit let it through");
        assert_eq!(g.view().in_use, 1, "the waiter's pass was dropped");
        // Shrink to 1 while `a` holds a place: nobody else gets one until
        // `a` leaves.
        g.resize(Limits {
            limit: 1,
            queue: 8,
            wait: Duration::from_secs(5),
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(g.try_enter().is_none(), "the limit is 1 and `a` holds it");
        drop(a);
        let b = g.enter().await.unwrap();
        assert!(g.try_enter().is_none());
        drop(b);
        assert!(g.try_enter().is_some());
        assert_eq!(g.view().limit, 1);
    }
}
