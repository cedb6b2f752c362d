//! TFTP counters. The one label is a fixed word (the outcome): never a
//! filename, which is client-chosen and unbounded.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

/// How a request ended; the `result` label of `tftp_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The client acknowledged the final block.
    Ok,
    NotFound,
    /// The resolver refused it (an escape from the root, a symlink out,
    /// permissions).
    Denied,
    /// Any WRQ: the server is read-only.
    WriteRefused,
    /// An RRQ/WRQ that did not parse; answered with ERROR 4.
    Malformed,
    /// Refused: `max_transfers` running and `max_queued` waiting, or `max_per_source`.
    Busy,
    /// The client sent ERROR (EDK2 does after its `tsize` probe).
    ClientAbort,
    /// No ACK after every retry.
    Timeout,
    /// A new RRQ from the same address and port took its place.
    Replaced,
    Shutdown,
    /// A socket or file error on our side, or the client went away (ICMP).
    Error,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::NotFound => "not_found",
            Outcome::Denied => "denied",
            Outcome::WriteRefused => "write_refused",
            Outcome::Malformed => "malformed",
            Outcome::Busy => "busy",
            Outcome::ClientAbort => "client_abort",
            Outcome::Timeout => "timeout",
            Outcome::Replaced => "replaced",
            Outcome::Shutdown => "shutdown",
            Outcome::Error => "error",
        }
    }
}

/// Cloned handles are shared with the registry they are registered in.
#[derive(Debug, Default)]
pub struct TftpMetrics {
    /// Every RRQ/WRQ, by how it ended.
    pub requests: Family<ResultLabel, Counter>,
    /// Datagrams on the request port that are not a valid request, those
    /// dropped without an answer included (the log line has the reason).
    pub malformed: Counter,
    pub busy: Counter,
    /// Requests that waited for a transfer slot; retransmissions of a
    /// waiting request (dropped); waits that ran out; turns skipped because
    /// the client had stopped sending its request (it gave up).
    pub queued: Counter,
    pub queued_again: Counter,
    pub queue_expired: Counter,
    pub queue_abandoned: Counter,
    /// DATA payload bytes put on the wire, retransmissions included.
    pub bytes_sent: Counter,
    /// DATA packets sent again (timeouts, partial windows).
    pub retransmits: Counter,
    /// ACKs a transfer sent nothing for: `duplicate` (a repeated or older
    /// ACK, normal after a retransmission) or `not_sent` (a block the
    /// server never sent).
    pub ignored_acks: Family<ReasonLabel, Counter>,
    pub transfers_active: Gauge,
    /// Requests waiting for a transfer slot now.
    pub waiting: Gauge,
}

impl TftpMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "tftp_requests",
            "TFTP requests by result",
            self.requests.clone(),
        );
        registry.register(
            "tftp_malformed",
            "Datagrams on the TFTP port that are not a valid request",
            self.malformed.clone(),
        );
        registry.register(
            "tftp_busy",
            "TFTP requests turned away: dropped with max_transfers running and max_queued waiting, or refused beyond max_per_source",
            self.busy.clone(),
        );
        registry.register(
            "tftp_queued",
            "TFTP requests that waited for a transfer slot",
            self.queued.clone(),
        );
        registry.register(
            "tftp_queued_again",
            "Retransmitted TFTP requests of a client already waiting (dropped)",
            self.queued_again.clone(),
        );
        registry.register(
            "tftp_queue_expired",
            "TFTP requests dropped after waiting queue_wait (default 30 s) for a slot",
            self.queue_expired.clone(),
        );
        registry.register(
            "tftp_queue_abandoned",
            "Waiting TFTP requests skipped at their turn: the client had stopped sending the request (silent three of its gaps, at least 2 s), so it gave up",
            self.queue_abandoned.clone(),
        );
        registry.register(
            "tftp_waiting",
            "TFTP requests waiting for a transfer slot now",
            self.waiting.clone(),
        );
        registry.register(
            "tftp_bytes_sent",
            "TFTP DATA payload bytes sent, retransmissions included",
            self.bytes_sent.clone(),
        );
        registry.register(
            "tftp_retransmits",
            "TFTP DATA packets sent again",
            self.retransmits.clone(),
        );
        registry.register(
            "tftp_ignored_acks",
            "TFTP ACKs that caused nothing to be sent, by reason (duplicate, not_sent)",
            self.ignored_acks.clone(),
        );
        registry.register(
            "tftp_transfers_active",
            "TFTP transfers in progress",
            self.transfers_active.clone(),
        );
    }

    pub fn request(&self, outcome: Outcome) {
        self.requests
            .get_or_create(&ResultLabel {
                result: outcome.as_str(),
            })
            .inc();
    }

    /// Counts an ACK that caused nothing to be sent.
    pub fn ignored_ack(&self, reason: &'static str) {
        self.ignored_acks
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    pub fn ignored_acks_with(&self, reason: &'static str) -> u64 {
        self.ignored_acks
            .get_or_create(&ReasonLabel { reason })
            .get()
    }

    pub fn requests_with(&self, outcome: Outcome) -> u64 {
        self.requests
            .get_or_create(&ResultLabel {
                result: outcome.as_str(),
            })
            .get()
    }
}
