//! Fencing between controller leaders (several appliances on one etcd).
//!
//! Leadership alone does not keep two appliances from acting at once: a
//! provider call the old leader sent before it stepped down (2/3 of
//! `leaseTtl` without a renewal) can still be answered, or carried out by
//! the provider, after the next leader was elected (at `leaseTtl`), for as
//! long as one exchange may take (`request_timeout`, 30 s). An Equinix
//! create landing after the new leader looked for the node's device makes
//! a second device; two BMC power actions interleave. So:
//!
//! - **The old leader sends nothing once its term has ended.** Every task of
//!   a term runs [`within`] it; [`current`] gives the term to the one place
//!   every provider exchange goes through (`providers::Http::send`, and the
//!   IPMI provider's `ipmitool` runs), which refuses to send after the term
//!   ended and abandons an exchange in flight when it ends.
//! - **The new leader waits out what the old one may have in flight.** A
//!   term that follows another appliance's ([`Record`], kept in the store
//!   under `controller/cluster/term`) acts only [`wait`] after it began: the
//!   exchange timeout and a second. By then every exchange the old leader
//!   sent has been answered or abandoned, so the new leader's find sees a
//!   machine the old leader's create made. A first term (no earlier
//!   record), a term after this same process's, and the single appliance on
//!   SQLite do not wait.
//! - **Creates are keyed by their intent** where the provider has no
//!   idempotency key: the intent's tag on Equinix devices and Power VS
//!   instances (`bootd-intent:<intent>`), Alibaba's `ClientToken`; a find
//!   prefers the machine its own intent made.
//!
//! What this assumes: the appliances' clocks run at the same rate (etcd's
//! lease and the leader's 2/3 are measured on different hosts), and a
//! provider acts on a request within the exchange timeout or not at all. A
//! provider that carries out a create minutes after the client gave up can
//! still make a second machine; the find then warns of the duplicate (both
//! carry the node's tags) and the operator deletes one.

use std::future::Future;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

tokio::task_local! {
    static TERM: CancellationToken;
}

/// Runs `f` as work of `term`.
pub async fn within<F: Future>(term: CancellationToken, f: F) -> F::Output {
    TERM.scope(term, f).await
}

/// The term of the calling task, when it runs within one.
pub fn current() -> Option<CancellationToken> {
    TERM.try_with(Clone::clone).ok()
}

/// Why an exchange was not sent or was abandoned.
pub const ENDED: &str = "this appliance no longer leads the controller";

/// `fut`, unless the calling task's term has ended or ends first: `Err`
/// then (nothing sent, or the exchange abandoned).
pub async fn guarded<F: Future>(fut: F) -> Result<F::Output, &'static str> {
    let Some(term) = current() else {
        return Ok(fut.await);
    };
    if term.is_cancelled() {
        return Err(ENDED);
    }
    tokio::select! {
        out = fut => Ok(out),
        _ = term.cancelled() => Err(ENDED),
    }
}

/// Which appliance's term the store saw last.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Record {
    pub holder: String,
    /// Milliseconds since the epoch.
    pub began: i64,
}

/// The store key of the last term's [`Record`].
pub const KEY: &str = "term";

/// How long a term that follows `previous` waits before it acts: nothing
/// after none or after this process's own, else the longest exchange the
/// previous leader may have in flight, and a second.
pub fn wait(previous: Option<&Record>, me: &str, request_timeout: Duration) -> Duration {
    match previous {
        Some(r) if r.holder != me => request_timeout + Duration::from_secs(1),
        _ => Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_term_after_another_appliances_waits() {
        let t = Duration::from_secs(30);
        let other = Record {
            holder: "b pid 7".into(),
            began: 1,
        };
        assert_eq!(wait(None, "a pid 1", t), Duration::ZERO);
        assert_eq!(wait(Some(&other), "b pid 7", t), Duration::ZERO);
        assert_eq!(wait(Some(&other), "a pid 1", t), Duration::from_secs(31));
    }

    #[tokio::test]
    async fn nothing_is_sent_after_the_term_and_an_exchange_in_flight_is_abandoned() {
        assert_eq!(guarded(async { 5 }).await, Ok(5), "outside any term");
        let term = CancellationToken::new();
        let t = term.clone();
        let out = within(term.clone(), async move {
            let first = guarded(async { 1 }).await;
            let t2 = t.clone();
            let in_flight = guarded(async move {
                t2.cancel();
                std::future::pending::<u8>().await
            })
            .await;
            let after = guarded(async { 3 }).await;
            (first, in_flight, after)
        })
        .await;
        assert_eq!(out, (Ok(1), Err(ENDED), Err(ENDED)));
    }
}
