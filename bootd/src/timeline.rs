//! The per-node boot timeline: every step a machine takes on its way from
//! firmware to cluster member, as each daemon saw it, joined by MAC and IP
//! into one timeline per node.
//!
//! Recording ([`Recorder::record`]) is a `try_send` on a bounded channel:
//! the DHCP, TFTP and HTTP paths never wait on it; when the channel is full
//! the event is dropped and counted (`bootd_timeline_events_dropped_total`).
//! One writer task ([`writer`]) joins events to nodes against the live site
//! and keeps them in memory ([`Book`], bounded per node and in the number of
//! unknown clients), and observes each finished phase's duration in
//! `bootd_node_phase_seconds{phase}`.
//!
//! The pure parts ([`join`], [`Book::add`], [`spans`], [`summary`],
//! [`redact`]) take the site and the clock as arguments and are unit-tested.
//!
//! Invariants:
//! - Event details never carry a query string or a token: every detail goes
//!   through [`redact`] in [`Recorder::record`].
//! - Phases of one boot attempt are the first occurrences, in time order, of
//!   each [`Phase`]; their durations are start-to-next-start (the last one to
//!   its last event), so they add up to the attempt's wall-clock time.
//! - A firmware DHCP DISCOVER after the node got as far as its kernel starts a
//!   new attempt (the machine rebooted into its firmware).

use prometheus_client::metrics::counter::Counter;
use serde::{Deserialize, Serialize};
use site::{Mac, Site};
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub mod ha;
mod recorder;
pub use recorder::{writer, Recorder, CAPACITY, FEED_CAPACITY};

/// The phases of a network boot, in the order a healthy boot goes through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The node's machine as its provider reports it (made, active, its
    /// addresses and MACs recorded): written by the controller.
    Machine,
    /// DHCP DISCOVER/OFFER/REQUEST/ACK, with the boot decision.
    Dhcp,
    /// The firmware fetching its boot file (iPXE, GRUB) over TFTP.
    Tftp,
    /// The iPXE script (or GRUB config) for the node.
    Script,
    Kernel,
    Initramfs,
    Rootfs,
    /// The node's Ignition config (or its pointer config).
    Ignition,
    /// The metal image an install writes, sent to the node (its last
    /// byte sent: the node counts as installed).
    Install,
    /// First connection from the node through lbd to the Machine Config Server (22623).
    MachineConfig,
    /// The node's API server backend turning up in lbd's checks (6443).
    Api,
    /// The node's kubelet joined: its client and serving certificates
    /// approved (written by the controller, which follows the cluster).
    Joined,
}

impl Phase {
    pub const ALL: [Phase; 12] = [
        Phase::Machine,
        Phase::Dhcp,
        Phase::Tftp,
        Phase::Script,
        Phase::Kernel,
        Phase::Initramfs,
        Phase::Rootfs,
        Phase::Ignition,
        Phase::Install,
        Phase::MachineConfig,
        Phase::Api,
        Phase::Joined,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Machine => "machine",
            Phase::Dhcp => "dhcp",
            Phase::Tftp => "tftp",
            Phase::Script => "script",
            Phase::Kernel => "kernel",
            Phase::Initramfs => "initramfs",
            Phase::Rootfs => "rootfs",
            Phase::Ignition => "ignition",
            Phase::Install => "install",
            Phase::MachineConfig => "machine_config",
            Phase::Api => "api",
            Phase::Joined => "joined",
        }
    }
}

/// RFC 3339 (UTC) for unix milliseconds.
pub fn rfc3339(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

/// Unix microseconds of the appliance's clock (`runtime::clock`): phase
/// durations are differences of a monotonic clock.
pub fn now_us() -> i64 {
    runtime::clock::unix_us()
}

/// One thing that happened to a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// When it happened (a transfer: when it ended), unix microseconds.
    #[serde(rename = "atUs")]
    pub at_us: i64,
    /// How long it took (transfers); it started at `at_us - took_us`.
    #[serde(rename = "tookUs")]
    pub took_us: i64,
    pub phase: Phase,
    /// `discover`, `offer`, `ack`, `nak`, `ignored`, `served`, `start`,
    /// `done`, `aborted`, `failed`, `denied`, `local_boot`, `first_connection`,
    /// `backend_up` (owned: an event another appliance shared).
    pub what: std::borrow::Cow<'static, str>,
    pub error: bool,
    pub detail: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<IpAddr>,
    /// Which boot attempt of the node (a reboot into firmware starts another).
    pub attempt: u32,
    /// The appliance that saw it, where several share the store
    /// (`host.store: etcd`): shown on the status page beside each step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

impl Event {
    pub fn start_us(&self) -> i64 {
        self.at_us - self.took_us
    }
}

/// An event joined to a site node, as subscribers ([`Recorder::subscribe`])
/// receive it: the controller's conditions follow these.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeEvent {
    pub node: String,
    pub at_us: i64,
    pub phase: Phase,
    pub what: std::borrow::Cow<'static, str>,
    pub error: bool,
    /// Redacted like every timeline detail.
    pub detail: String,
}

/// Who an event is about, as far as the daemon that saw it knows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subject {
    /// A node name the request named (unchecked: it may be client-supplied).
    pub node: Option<String>,
    pub mac: Option<Mac>,
    pub ip: Option<IpAddr>,
    /// `node` is vouched for (a valid token of that node) though the site
    /// does not serve it yet: the event goes on that name's timeline, not
    /// the source address's.
    pub vouched: bool,
}

impl Subject {
    pub fn node(name: &str) -> Subject {
        Subject {
            node: Some(name.to_string()),
            ..Default::default()
        }
    }
    pub fn ip(ip: IpAddr) -> Subject {
        Subject {
            ip: Some(ip),
            ..Default::default()
        }
    }
    pub fn mac(mac: Mac) -> Subject {
        Subject {
            mac: Some(mac),
            ..Default::default()
        }
    }
    pub fn with_ip(mut self, ip: IpAddr) -> Subject {
        self.ip = Some(ip);
        self
    }
    /// A node the site does not serve yet, named by a valid token of it
    /// (an API node whose provider has not said where its machine is).
    pub fn vouched(name: &str) -> Subject {
        Subject {
            vouched: true,
            ..Subject::node(name)
        }
    }
}

/// What goes over the channel: the event before it is joined to a node.
#[derive(Debug, Clone)]
pub struct Raw {
    pub subject: Subject,
    pub at_us: i64,
    pub took_us: i64,
    pub phase: Phase,
    pub what: &'static str,
    pub error: bool,
    pub detail: String,
    pub bytes: Option<u64>,
    /// A DHCP request from firmware (it got a boot file): may start a new attempt.
    pub firmware: bool,
    /// A DHCP OFFER/ACK binding this address to the subject's MAC.
    pub binds: Option<(IpAddr, Mac)>,
}

impl Raw {
    pub fn new(
        subject: Subject,
        phase: Phase,
        what: &'static str,
        detail: impl Into<String>,
    ) -> Raw {
        Raw {
            subject,
            at_us: now_us(),
            took_us: 0,
            phase,
            what,
            error: false,
            detail: detail.into(),
            bytes: None,
            firmware: false,
            binds: None,
        }
    }
    pub fn error(mut self) -> Raw {
        self.error = true;
        self
    }
    pub fn bytes(mut self, n: u64) -> Raw {
        self.bytes = Some(n);
        self
    }
    pub fn took(mut self, d: Duration) -> Raw {
        self.took_us = d.as_micros().min(i64::MAX as u128) as i64;
        self
    }
    pub fn at(mut self, at_us: i64) -> Raw {
        self.at_us = at_us;
        self
    }
}

/// Removes secrets from an event's text: any `token=` value (query strings,
/// Ignition URLs).
pub fn redact(s: &str) -> String {
    crate::token::redact_tokens(s, "REDACTED")
}

/// The key a node's timeline is kept under, and whether it is a site node.
/// Order of evidence: a node name the site knows; the MAC; the IP (the
/// site's reservation, or an address DHCP gave a MAC). Clients no site node
/// matches are kept under `mac <MAC>` or `ip <IP>` (or `unknown`), so a
/// machine with a mistyped MAC shows up too.
pub fn join(site: &Site, learned: &HashMap<IpAddr, Mac>, s: &Subject) -> (String, bool) {
    if let Some(n) = s.node.as_deref().and_then(|n| site.node(n)) {
        return (n.name.clone(), true);
    }
    if let (true, Some(n)) = (s.vouched, &s.node) {
        return (n.clone(), false);
    }
    if let Some(m) = &s.mac {
        return match site.node_by_mac(m) {
            Some(n) => (n.name.clone(), true),
            None => (format!("mac {m}"), false),
        };
    }
    if let Some(ip) = s.ip {
        if let Some(n) = site.node_by_ip(ip) {
            return (n.name.clone(), true);
        }
        if let Some(m) = learned.get(&ip) {
            return match site.node_by_mac(m) {
                Some(n) => (n.name.clone(), true),
                None => (format!("mac {m}"), false),
            };
        }
        return (format!("ip {ip}"), false);
    }
    ("unknown".to_string(), false)
}

/// One node's (or unknown client's) timeline.
#[derive(Debug, Clone, Serialize)]
pub struct Track {
    pub key: String,
    #[serde(rename = "siteNode")]
    pub site_node: bool,
    pub mac: Option<String>,
    pub ip: Option<IpAddr>,
    pub attempt: u32,
    pub events: VecDeque<Event>,
    /// The current attempt's phases and their starts, kept up to date by
    /// [`Book::add`] (`None`: work it out again from `events`).
    #[serde(skip)]
    pub(crate) starts: Option<PhaseStarts>,
}

impl Track {
    /// The events of the current boot attempt.
    pub fn current(&self) -> Vec<&Event> {
        self.events
            .iter()
            .filter(|e| e.attempt == self.attempt)
            .collect()
    }

    fn phase_starts(&mut self) -> PhaseStarts {
        *self
            .starts
            .get_or_insert_with(|| PhaseStarts::of(&self.events, self.attempt))
    }

    /// Keeps `starts` right after `old`, the oldest event, was dropped. If
    /// it was of the current attempt it was the first of its phase, which
    /// now starts at that phase's next event: unless that reorders the
    /// phases (then `starts` is worked out again), only its start moves.
    fn evicted(&mut self, old: &Event) {
        if old.attempt != self.attempt {
            return;
        }
        let Some(c) = &mut self.starts else { return };
        let Some(i) = c.as_slice().iter().position(|&(p, _)| p == old.phase) else {
            self.starts = None;
            return;
        };
        match self
            .events
            .iter()
            .find(|e| e.attempt == self.attempt && e.phase == old.phase)
        {
            None => c.remove(i),
            Some(next) if i + 1 == c.len || next.start_us() < c.seen[i + 1].1 => {
                c.seen[i].1 = next.start_us()
            }
            Some(_) => self.starts = None,
        }
    }
}

/// Every timeline, in memory.
#[derive(Debug, Default)]
pub struct Book {
    pub tracks: HashMap<String, Track>,
    /// IP → MAC from DHCP offers and acks, for joining later IP-only events.
    learned: HashMap<IpAddr, Mac>,
    /// Whether events of site nodes are shared with other appliances:
    /// [`Book::add`] then also puts each in `outbox`.
    pub(crate) share: bool,
    pub(crate) outbox: Vec<(String, Event)>,
}

/// Events kept per node; the oldest go first.
pub const EVENTS_PER_NODE: usize = 400;
/// Unknown clients kept (each with its own timeline); the stalest go first.
pub const UNKNOWN_CLIENTS: usize = 256;

impl Book {
    /// Adds one event; returns the phase it closed and that phase's
    /// duration, when the event starts a new phase of the attempt.
    pub fn add(&mut self, site: &Site, raw: Raw) -> Option<(Phase, Duration)> {
        self.add_joined(site, raw).1
    }

    /// As [`Book::add`], and also the site node the event was joined to
    /// (`None`: an unknown client).
    pub fn add_joined(
        &mut self,
        site: &Site,
        raw: Raw,
    ) -> (Option<String>, Option<(Phase, Duration)>) {
        if let Some((ip, mac)) = raw.binds {
            if self.learned.len() < 65536 || self.learned.contains_key(&ip) {
                self.learned.insert(ip, mac);
            }
        }
        let (key, site_node) = join(site, &self.learned, &raw.subject);
        if !site_node && !self.tracks.contains_key(&key) {
            self.evict_unknown();
        }
        let site_node_of = site.node(&key);
        let site_mac = || {
            site_node_of
                .and_then(|n| n.macs.first())
                .map(|m| m.to_string())
        };
        let joined = site_node.then(|| key.clone());
        let t = self.tracks.entry(key.clone()).or_insert_with(|| Track {
            key,
            site_node,
            mac: site_mac(),
            ip: site_node_of.map(|n| n.ip()),
            attempt: 1,
            events: VecDeque::new(),
            starts: None,
        });
        // A vouched-for name the site now serves: its track is the node's.
        if site_node && !t.site_node {
            t.site_node = true;
            t.mac = site_mac();
            t.ip = site_node_of.map(|n| n.ip());
        }
        // A site node keeps its own MAC and address (a request from elsewhere
        // naming it says nothing about them); DHCP's binding is the truth.
        if let Some((ip, mac)) = raw.binds {
            t.mac = Some(mac.to_string());
            t.ip = Some(ip);
        } else if !t.site_node {
            if let Some(m) = raw.subject.mac {
                t.mac = Some(m.to_string());
            }
            if let Some(ip) = raw.subject.ip {
                t.ip = Some(ip);
            }
        }
        let before = t.phase_starts();
        if raw.phase == Phase::Dhcp
            && raw.what == "discover"
            && raw.firmware
            && before.iter().any(|&(p, _)| p >= Phase::Kernel)
        {
            t.attempt += 1;
            t.starts = None;
        }
        let ev = Event {
            at_us: raw.at_us,
            took_us: raw.took_us,
            phase: raw.phase,
            what: std::borrow::Cow::Borrowed(raw.what),
            error: raw.error,
            detail: raw.detail,
            bytes: raw.bytes,
            mac: raw.subject.mac.map(|m| m.to_string()),
            ip: raw.subject.ip,
            attempt: t.attempt,
            by: None,
        };
        if self.share && site_node {
            self.outbox.push((t.key.clone(), ev.clone()));
        }
        // Keep time order (lbd's events carry lbd's own, earlier, times).
        let pos = t
            .events
            .iter()
            .rposition(|e| e.start_us() <= ev.start_us())
            .map(|p| p + 1)
            .unwrap_or(0);
        let (phase, start) = (ev.phase, ev.start_us());
        let at_end = pos == t.events.len();
        t.events.insert(pos, ev);
        match &mut t.starts {
            // Appended: it can only add a phase, last in order.
            Some(c) if at_end => c.note(phase, start),
            _ => t.starts = None,
        }
        while t.events.len() > EVENTS_PER_NODE {
            if let Some(old) = t.events.pop_front() {
                t.evicted(&old);
            }
        }
        let after = t.phase_starts();
        // A phase closes when a later one appears after it.
        let (before, after) = (before.as_slice(), after.as_slice());
        if after.len() >= 2 && before.len() == after.len() - 1 {
            let (phase, start) = after[after.len() - 2];
            let (_, next_start) = after[after.len() - 1];
            if phase == before[before.len() - 1].0 {
                return (
                    joined,
                    Some((
                        phase,
                        Duration::from_micros((next_start - start).max(0) as u64),
                    )),
                );
            }
        }
        (joined, None)
    }

    fn evict_unknown(&mut self) {
        let unknown = self.tracks.values().filter(|t| !t.site_node).count();
        if unknown < UNKNOWN_CLIENTS {
            return;
        }
        let stalest = self
            .tracks
            .values()
            .filter(|t| !t.site_node)
            .min_by_key(|t| t.events.back().map(|e| e.at_us).unwrap_or(0))
            .map(|t| t.key.clone());
        if let Some(k) = stalest {
            self.tracks.remove(&k);
        }
    }
}

/// One phase of an attempt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Span {
    pub phase: Phase,
    #[serde(rename = "startUs")]
    pub start_us: i64,
    /// The next phase's start, or (the last phase) its last event's time.
    #[serde(rename = "endUs")]
    pub end_us: i64,
    /// The last event in this phase that was an error, if any.
    #[serde(rename = "lastError", skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The appliances that saw this phase's events, in order of first
    /// event (where several share the store).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub by: Vec<String>,
}

impl Span {
    pub fn seconds(&self) -> f64 {
        (self.end_us - self.start_us) as f64 / 1e6
    }
}

/// What [`Book::add`] needs of [`spans`] on every event (each phase of the
/// current attempt and its start, in order of first appearance), without
/// allocating or cloning: it runs for every request that names a node, and
/// a track holds up to [`EVENTS_PER_NODE`] events.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PhaseStarts {
    seen: [(Phase, i64); PHASES],
    len: usize,
}

const PHASES: usize = Phase::Joined as usize + 1;

impl PhaseStarts {
    fn of(events: &VecDeque<Event>, attempt: u32) -> PhaseStarts {
        let mut p = PhaseStarts {
            seen: [(Phase::Dhcp, 0); PHASES],
            len: 0,
        };
        for e in events.iter().filter(|e| e.attempt == attempt) {
            p.note(e.phase, e.start_us());
        }
        p
    }

    /// A phase's first event (nothing if the phase was seen already).
    fn note(&mut self, phase: Phase, start: i64) {
        if !self.as_slice().iter().any(|&(p, _)| p == phase) {
            self.seen[self.len] = (phase, start);
            self.len += 1;
        }
    }

    fn remove(&mut self, i: usize) {
        self.seen.copy_within(i + 1..self.len, i);
        self.len -= 1;
    }

    fn as_slice(&self) -> &[(Phase, i64)] {
        &self.seen[..self.len]
    }

    fn iter(&self) -> impl Iterator<Item = &(Phase, i64)> {
        self.as_slice().iter()
    }
}

/// The phases of `events` (one attempt, in time order): each phase from its
/// first event, in the order they first appear.
pub fn spans(events: &[&Event]) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::new();
    for e in events {
        match out.iter_mut().find(|s| s.phase == e.phase) {
            Some(s) => {
                if e.error {
                    s.last_error = Some(e.detail.clone());
                }
                if let Some(by) = &e.by {
                    if !s.by.contains(by) {
                        s.by.push(by.clone());
                    }
                }
            }
            None => out.push(Span {
                phase: e.phase,
                start_us: e.start_us(),
                end_us: e.start_us(),
                last_error: e.error.then(|| e.detail.clone()),
                by: e.by.iter().cloned().collect(),
            }),
        }
    }
    let last_at = events.iter().map(|e| e.at_us).max().unwrap_or(0);
    let n = out.len();
    for i in 0..n {
        out[i].end_us = if i + 1 < n {
            out[i + 1].start_us
        } else {
            last_at.max(out[i].start_us)
        };
    }
    out
}

/// What the status page and the API show for a node.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub node: String,
    #[serde(rename = "siteNode")]
    pub site_node: bool,
    pub mac: Option<String>,
    pub ip: Option<IpAddr>,
    pub attempt: u32,
    /// The latest phase reached (`None`: nothing seen yet).
    pub phase: Option<Phase>,
    #[serde(rename = "phaseSinceUs")]
    pub phase_since_us: Option<i64>,
    #[serde(rename = "lastEvent")]
    pub last_event: Option<Event>,
    #[serde(rename = "lastError")]
    pub last_error: Option<Event>,
    /// Every phase in the canonical order.
    #[serde(rename = "inOrder")]
    pub in_order: bool,
    pub phases: Vec<Span>,
    /// First event's start to last event, microseconds.
    #[serde(rename = "totalUs")]
    pub total_us: i64,
    /// How the node's machine starts its OS: `network` (through this host:
    /// the default) or `image` (a provider's image with the pointer config
    /// as user data), as whoever made the machine said ([`Recorder::set_boot`]).
    pub boot: &'static str,
}

pub fn summary(t: &Track) -> Summary {
    let cur = t.current();
    let sp = spans(&cur);
    let in_order = sp.windows(2).all(|w| w[0].phase < w[1].phase);
    let total_us = match (sp.first(), sp.last()) {
        (Some(a), Some(b)) => b.end_us - a.start_us,
        _ => 0,
    };
    Summary {
        node: t.key.clone(),
        site_node: t.site_node,
        mac: t.mac.clone(),
        ip: t.ip,
        attempt: t.attempt,
        phase: sp.last().map(|s| s.phase),
        phase_since_us: sp.last().map(|s| s.start_us),
        last_event: cur.last().map(|e| (*e).clone()),
        last_error: t.events.iter().rev().find(|e| e.error).cloned(),
        in_order,
        phases: sp,
        total_us,
        boot: BOOT_NETWORK,
    }
}

/// The `what` of the event lbd's watcher records when lbd takes the
/// bootstrap node out of its pools.
pub const BOOTSTRAP_REMOVED: &str = "bootstrap_removed";

/// [`Summary::boot`] values.
pub const BOOT_NETWORK: &str = "network";
pub const BOOT_IMAGE: &str = "image";

#[cfg(test)]
mod tests {
    use super::*;

    fn lab() -> Site {
        site::load(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab/site.yaml"),
        )
        .unwrap()
    }
    fn mac(s: &str) -> Mac {
        s.parse().unwrap()
    }
    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }
    fn ev(subject: Subject, phase: Phase, what: &'static str, at_ms: i64) -> Raw {
        Raw::new(subject, phase, what, format!("{what} at {at_ms}")).at(at_ms * 1000)
    }

    #[test]
    fn join_by_name_mac_ip_and_learned_lease() {
        let site = lab();
        let mut learned = HashMap::new();
        assert_eq!(
            join(&site, &learned, &Subject::node("master-0")),
            ("master-0".into(), true)
        );
        assert_eq!(
            join(&site, &learned, &Subject::mac(mac("52:54:00:77:00:10"))),
            ("bootstrap".into(), true)
        );
        assert_eq!(
            join(&site, &learned, &Subject::ip(ip("10.77.0.20"))),
            ("worker-0".into(), true)
        );
        // An unknown MAC, and an address DHCP gave it.
        let stray = mac("52:54:00:99:99:99");
        assert_eq!(
            join(&site, &learned, &Subject::mac(stray)),
            ("mac 52:54:00:99:99:99".into(), false)
        );
        assert_eq!(
            join(&site, &learned, &Subject::ip(ip("10.77.0.99"))),
            ("ip 10.77.0.99".into(), false)
        );
        learned.insert(ip("10.77.0.99"), stray);
        assert_eq!(
            join(&site, &learned, &Subject::ip(ip("10.77.0.99"))),
            ("mac 52:54:00:99:99:99".into(), false)
        );
        // A node address learned from DHCP (a pool address) joins to the node.
        learned.insert(ip("10.77.0.150"), mac("52:54:00:77:00:11"));
        assert_eq!(
            join(&site, &learned, &Subject::ip(ip("10.77.0.150"))),
            ("master-0".into(), true)
        );
        // An unknown name from a client falls back to its address.
        let s = Subject {
            node: Some("nope".into()),
            ip: Some(ip("10.77.0.13")),
            mac: None,
            vouched: false,
        };
        assert_eq!(join(&site, &learned, &s), ("master-2".into(), true));
        assert_eq!(
            join(&site, &learned, &Subject::node("<script>")),
            ("unknown".into(), false)
        );
    }

    #[test]
    fn phases_in_order_with_durations_that_add_up() {
        let site = lab();
        let mut book = Book::default();
        let m = mac("52:54:00:77:00:10");
        let node_ip = ip("10.77.0.10");
        let mut closed = Vec::new();
        let steps = [
            (Subject::mac(m), Phase::Dhcp, "discover", 1000),
            (Subject::mac(m), Phase::Dhcp, "offer", 1001),
            (Subject::mac(m), Phase::Dhcp, "ack", 1050),
            (Subject::ip(node_ip), Phase::Script, "served", 1300),
            (Subject::ip(node_ip), Phase::Kernel, "start", 1400),
            (Subject::ip(node_ip), Phase::Kernel, "done", 2400),
            (Subject::ip(node_ip), Phase::Initramfs, "start", 2410),
            (Subject::ip(node_ip), Phase::Initramfs, "done", 2900),
            // The guest OS asks DHCP again: no new phase, no new attempt.
            (Subject::mac(m), Phase::Dhcp, "ack", 5000),
            (
                Subject::node("bootstrap").with_ip(node_ip),
                Phase::Ignition,
                "served",
                6000,
            ),
        ];
        for (s, p, w, at) in steps {
            if let Some(c) = book.add(&site, ev(s, p, w, at)) {
                closed.push(c);
            }
        }
        let t = &book.tracks["bootstrap"];
        let sum = summary(t);
        let phases: Vec<Phase> = sum.phases.iter().map(|s| s.phase).collect();
        assert_eq!(
            phases,
            [
                Phase::Dhcp,
                Phase::Script,
                Phase::Kernel,
                Phase::Initramfs,
                Phase::Ignition
            ]
        );
        assert!(sum.in_order);
        assert_eq!(sum.phase, Some(Phase::Ignition));
        let secs: Vec<f64> = sum.phases.iter().map(Span::seconds).collect();
        assert_eq!(secs, [0.3, 0.1, 1.01, 3.59, 0.0]);
        assert_eq!(sum.total_us, 5_000_000);
        let total: f64 = secs.iter().sum();
        assert!((total - 5.0).abs() < 1e-9, "{total}");
        // Each closed phase observed once, with its duration.
        assert_eq!(
            closed,
            [
                (Phase::Dhcp, Duration::from_millis(300)),
                (Phase::Script, Duration::from_millis(100)),
                (Phase::Kernel, Duration::from_millis(1010)),
                (Phase::Initramfs, Duration::from_millis(3590)),
            ]
        );
        assert_eq!(t.mac.as_deref(), Some("52:54:00:77:00:10"));
    }

    #[test]
    fn transfers_start_when_they_started_and_out_of_order_events_are_sorted() {
        let site = lab();
        let mut book = Book::default();
        let m = mac("52:54:00:77:00:20");
        book.add(&site, ev(Subject::mac(m), Phase::Dhcp, "ack", 1000));
        // A TFTP transfer reported when it ended, 2 s after it started.
        book.add(
            &site,
            ev(Subject::ip(ip("10.77.0.20")), Phase::Tftp, "served", 3500)
                .took(Duration::from_secs(2)),
        );
        // lbd's event arrives late but happened earlier than the next one.
        book.add(
            &site,
            ev(
                Subject::ip(ip("10.77.0.20")),
                Phase::Api,
                "backend_up",
                9000,
            ),
        );
        book.add(
            &site,
            ev(
                Subject::ip(ip("10.77.0.20")),
                Phase::MachineConfig,
                "first_connection",
                8000,
            ),
        );
        let sum = summary(&book.tracks["worker-0"]);
        let got: Vec<(Phase, i64)> = sum
            .phases
            .iter()
            .map(|s| (s.phase, s.start_us / 1000))
            .collect();
        assert_eq!(
            got,
            [
                (Phase::Dhcp, 1000),
                (Phase::Tftp, 1500),
                (Phase::MachineConfig, 8000),
                (Phase::Api, 9000)
            ]
        );
        assert!(sum.in_order);
    }

    #[test]
    fn a_reboot_into_firmware_starts_a_new_attempt_and_disorder_is_reported() {
        let site = lab();
        let mut book = Book::default();
        let m = mac("52:54:00:77:00:11");
        let nip = ip("10.77.0.11");
        let mut fw = ev(Subject::mac(m), Phase::Dhcp, "discover", 1000);
        fw.firmware = true;
        book.add(&site, fw.clone());
        book.add(&site, ev(Subject::ip(nip), Phase::Ignition, "served", 1100));
        book.add(&site, ev(Subject::ip(nip), Phase::Kernel, "start", 1200));
        let s = summary(&book.tracks["master-0"]);
        assert!(!s.in_order, "ignition before kernel is out of order");
        // Firmware DHCP again, after the kernel: attempt 2, a fresh timeline.
        book.add(&site, fw.at(5_000_000));
        let s = summary(&book.tracks["master-0"]);
        assert_eq!(s.attempt, 2);
        assert_eq!(s.phases.len(), 1);
        assert_eq!(
            book.tracks["master-0"].events.len(),
            4,
            "older attempts are kept"
        );
    }

    #[test]
    fn failures_show_the_failing_phase_and_reason() {
        let site = lab();
        let mut book = Book::default();
        let stray = mac("52:54:00:99:00:01");
        book.add(
            &site,
            ev(Subject::mac(stray), Phase::Dhcp, "ignored", 10).error(),
        );
        let s = summary(&book.tracks["mac 52:54:00:99:00:01"]);
        assert_eq!(s.phase, Some(Phase::Dhcp));
        assert!(s.last_error.unwrap().detail.contains("ignored"));
        assert!(!s.site_node);
        book.add(
            &site,
            Raw::new(
                Subject::node("worker-1").with_ip(ip("10.77.0.21")),
                Phase::Ignition,
                "denied",
                "denied: token_invalid",
            )
            .error(),
        );
        let s = summary(&book.tracks["worker-1"]);
        assert_eq!(
            s.phases[0].last_error.as_deref(),
            Some("denied: token_invalid")
        );
    }

    #[test]
    fn a_vouched_name_the_site_does_not_serve_yet_has_its_own_timeline() {
        let before = lab();
        let mut book = Book::default();
        // An unknown name with no token: the source address's track.
        book.add(
            &before,
            ev(
                Subject::node("worker-9").with_ip(ip("10.77.0.99")),
                Phase::Ignition,
                "denied",
                10,
            ),
        );
        assert!(book.tracks.contains_key("ip 10.77.0.99"));
        // The same name vouched for by its token: the name's own track.
        book.add(
            &before,
            ev(
                Subject::vouched("worker-9").with_ip(ip("10.77.0.99")),
                Phase::Ignition,
                "awaited",
                20,
            ),
        );
        let t = &book.tracks["worker-9"];
        assert!(!t.site_node);
        assert_eq!(t.events.len(), 1);
        // Served: its events join that track, now the site node's.
        let after = site::load_with_overlay(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab/site.yaml"),
            "nodes:\n  - { name: worker-9, role: worker, live: true, macs: [\"52:54:00:77:00:29\"], ip: 10.77.0.29 }\n",
        )
        .unwrap();
        book.add(
            &after,
            ev(
                Subject::node("worker-9").with_ip(ip("10.77.0.29")),
                Phase::Ignition,
                "served",
                30,
            ),
        );
        let t = &book.tracks["worker-9"];
        assert!(t.site_node);
        assert_eq!(t.mac.as_deref(), Some("52:54:00:77:00:29"));
        assert_eq!(t.ip, Some(ip("10.77.0.29")));
        let whats: Vec<&str> = t.events.iter().map(|e| e.what.as_ref()).collect();
        assert_eq!(whats, ["awaited", "served"]);
    }

    #[test]
    fn bounded_per_node_and_in_unknown_clients() {
        let site = lab();
        let mut book = Book::default();
        for i in 0..(EVENTS_PER_NODE + 50) {
            book.add(
                &site,
                ev(Subject::node("worker-0"), Phase::Dhcp, "discover", i as i64),
            );
        }
        assert_eq!(book.tracks["worker-0"].events.len(), EVENTS_PER_NODE);
        for i in 0..(UNKNOWN_CLIENTS + 10) {
            let m = Mac([2, 0, 0, 0, (i >> 8) as u8, i as u8]);
            book.add(&site, ev(Subject::mac(m), Phase::Dhcp, "ignored", i as i64));
        }
        assert_eq!(
            book.tracks.values().filter(|t| !t.site_node).count(),
            UNKNOWN_CLIENTS
        );
        assert!(
            book.tracks.contains_key("worker-0"),
            "site nodes are never evicted"
        );
    }

    /// The phases `Book::add` keeps up to date event by event are always
    /// what a fresh look at the events gives: events out of time order,
    /// reboots into firmware, and eviction of the oldest.
    #[test]
    fn kept_phase_starts_match_a_fresh_count() {
        let site = lab();
        let mut book = Book::default();
        let phases = [
            Phase::Dhcp,
            Phase::Tftp,
            Phase::Script,
            Phase::Kernel,
            Phase::Initramfs,
            Phase::Ignition,
        ];
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut at = 0i64;
        let mut kept_count = 0;
        for _ in 0..5000 {
            at += next(20) as i64;
            let phase = phases[next(phases.len() as u64) as usize];
            // Mostly in order; now and then an event from the past.
            let when = if next(10) == 0 {
                at - next(200) as i64
            } else {
                at
            };
            let mut raw = ev(
                Subject::node("worker-0"),
                phase,
                if phase == Phase::Dhcp {
                    "discover"
                } else {
                    "x"
                },
                when,
            );
            raw.firmware = phase == Phase::Dhcp && next(4) == 0;
            book.add(&site, raw);
            let t = book.tracks.get_mut("worker-0").unwrap();
            let kept = t.starts;
            let fresh = PhaseStarts::of(&t.events, t.attempt);
            if let Some(k) = kept {
                assert_eq!(k.as_slice(), fresh.as_slice());
                kept_count += 1;
            }
            let spans: Vec<(Phase, i64)> = spans(&t.current())
                .iter()
                .map(|s| (s.phase, s.start_us))
                .collect();
            assert_eq!(fresh.as_slice(), &spans[..]);
        }
        assert_eq!(book.tracks["worker-0"].events.len(), EVENTS_PER_NODE);
        // The kept value was there to compare most of the time.
        assert!(kept_count > 2500, "kept {kept_count} of 5000");
    }

    #[test]
    fn redaction() {
        assert_eq!(
            redact("GET /ignition/bootstrap?token=abc.def&x=1 then token=zzz"),
            "GET /ignition/bootstrap?token=REDACTED&x=1 then token=REDACTED"
        );
        assert_eq!(
            redact("{\"source\":\"http://h/ignition/n?token=s3cr3t\"}"),
            "{\"source\":\"http://h/ignition/n?token=REDACTED\"}"
        );
        assert_eq!(redact("nothing here"), "nothing here");
    }

    #[test]
    fn a_full_channel_drops_and_counts() {
        let r = Recorder::new(2, Counter::default());
        for _ in 0..5 {
            r.record(Raw::new(
                Subject::node("x"),
                Phase::Dhcp,
                "discover",
                "token=1",
            ));
        }
        assert_eq!(r.dropped.get(), 3);
        let mut rx = r.take_receiver().unwrap();
        assert_eq!(rx.try_recv().unwrap().detail, "token=REDACTED");
    }
}
