//! How many connections a listener holds: at most `max` at once, and at
//! most `per_source` from one address, so that idle or slow clients cannot
//! take every file descriptor (the other listeners, TFTP and the lease
//! file need some) or every slot. A connection over a cap is closed at
//! once and counted. bootd's HTTP(S) and dnsd's TCP use it.
//!
//! A listener may mark a connection idle ([`Held::set_idle`]: it has sent
//! nothing of its next request). When the listener is full, a new
//! connection takes the slot of the oldest idle one, which is told to
//! close ([`Held::evicted`]) — as nginx reuses its idle connections when
//! `worker_connections` run out — so a crowd of connections that send
//! nothing cannot lock out the clients that talk. Only when none is idle
//! is the newcomer refused.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// The caps of one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    pub max: usize,
    pub per_source: usize,
}

impl Default for ConnLimits {
    /// Room for a rack booting at once (a few connections per machine) with
    /// the daemon's 65 536 descriptors (`LimitNOFILE`) far from exhausted.
    fn default() -> Self {
        ConnLimits {
            max: 8192,
            per_source: 512,
        }
    }
}

#[derive(Debug)]
pub struct Conns {
    held: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    limits: ConnLimits,
    open: usize,
    per_source: HashMap<IpAddr, usize>,
    /// Idle connections by age (ids only grow), with what tells each to close.
    idle: BTreeMap<u64, CancellationToken>,
    next_id: u64,
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Full,
    Source,
}

impl Refused {
    pub fn as_str(self) -> &'static str {
        match self {
            Refused::Full => "max_connections",
            Refused::Source => "per_source",
        }
    }
}

/// Held while a connection is open.
#[derive(Debug)]
pub struct Held {
    conns: Arc<Conns>,
    ip: IpAddr,
    id: u64,
    evict: CancellationToken,
}

impl Held {
    /// Marks the connection idle (nothing of a request received: it may be
    /// evicted for a newcomer when the listener is full) or not.
    pub fn set_idle(&self, idle: bool) {
        let mut g = self.conns.lock();
        if idle && !self.evict.is_cancelled() {
            g.idle.insert(self.id, self.evict.clone());
        } else {
            g.idle.remove(&self.id);
        }
    }

    /// Resolves when the connection's slot was given to a newcomer: close it.
    pub fn evicted(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.evict.cancelled()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut g = self.conns.lock();
        g.open -= 1;
        g.idle.remove(&self.id);
        if let Some(n) = g.per_source.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                g.per_source.remove(&self.ip);
            }
        }
    }
}

impl Conns {
    pub fn new(limits: ConnLimits) -> Arc<Conns> {
        Arc::new(Conns {
            held: Mutex::new(State {
                limits,
                ..State::default()
            }),
        })
    }

    /// New caps, live: connections over a lower cap are not closed, the
    /// next newcomers wait for them (are refused or evict an idle one)
    /// until the count is under it.
    pub fn set_limits(&self, limits: ConnLimits) {
        self.lock().limits = limits;
    }

    pub fn limits(&self) -> ConnLimits {
        self.lock().limits
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a connection from `ip`, or why there is none. When the
    /// listener is full, the oldest idle connection is told to close and
    /// the newcomer has its slot (the count is over `max` until the evicted
    /// one has gone: by one per eviction in flight).
    pub fn take(self: &Arc<Self>, ip: IpAddr) -> Result<Held, Refused> {
        let mut g = self.lock();
        if g.per_source.get(&ip).copied().unwrap_or(0) >= g.limits.per_source {
            return Err(Refused::Source);
        }
        if g.open >= g.limits.max {
            match g.idle.pop_first() {
                Some((_, evict)) => evict.cancel(),
                None => return Err(Refused::Full),
            }
        }
        *g.per_source.entry(ip).or_insert(0) += 1;
        g.open += 1;
        g.next_id += 1;
        Ok(Held {
            conns: Arc::clone(self),
            ip,
            id: g.next_id,
            evict: CancellationToken::new(),
        })
    }

    pub fn open(&self) -> usize {
        self.lock().open
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_per_listener_and_per_source_and_slots_come_back() {
        let c = Conns::new(ConnLimits {
            max: 3,
            per_source: 2,
        });
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let h1 = c.take(a).unwrap();
        let _h2 = c.take(a).unwrap();
        assert_eq!(c.take(a).unwrap_err(), Refused::Source);
        let _h3 = c.take(b).unwrap();
        assert_eq!(c.take(b).unwrap_err(), Refused::Full);
        drop(h1);
        assert_eq!(c.open(), 2);
        assert!(c.take(a).is_ok());
    }

    #[test]
    fn caps_change_live_and_open_connections_stay() {
        let c = Conns::new(ConnLimits {
            max: 2,
            per_source: 2,
        });
        let ip = |n| IpAddr::from([10, 0, 0, n]);
        let (_h1, h2) = (c.take(ip(1)).unwrap(), c.take(ip(2)).unwrap());
        assert_eq!(c.take(ip(3)).unwrap_err(), Refused::Full);
        c.set_limits(ConnLimits {
            max: 3,
            per_source: 2,
        });
        let h3 = c.take(ip(3)).unwrap();
        assert_eq!(c.take(ip(4)).unwrap_err(), Refused::Full);
        // Lower than what is open: nothing is closed, newcomers wait for
        // the count to fall under the cap.
        c.set_limits(ConnLimits {
            max: 1,
            per_source: 2,
        });
        assert_eq!(c.open(), 3);
        drop(h3);
        assert_eq!(c.take(ip(4)).unwrap_err(), Refused::Full);
        drop(h2);
        assert_eq!(c.take(ip(4)).unwrap_err(), Refused::Full);
        assert_eq!(c.limits().max, 1);
    }

    #[tokio::test]
    async fn a_full_listener_evicts_its_oldest_idle_connection() {
        let c = Conns::new(ConnLimits {
            max: 3,
            per_source: 3,
        });
        let ip = |n| IpAddr::from([10, 0, 0, n]);
        let (h1, h2, h3) = (
            c.take(ip(1)).unwrap(),
            c.take(ip(2)).unwrap(),
            c.take(ip(3)).unwrap(),
        );
        // None idle: refused.
        assert_eq!(c.take(ip(4)).unwrap_err(), Refused::Full);
        h3.set_idle(true);
        h2.set_idle(true);
        h1.set_idle(true);
        h1.set_idle(false);
        // The oldest idle one (h2) is told to close; the newcomer is in.
        let h4 = c.take(ip(4)).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(1), h2.evicted())
            .await
            .unwrap();
        assert!(!h3.evict.is_cancelled() && !h1.evict.is_cancelled());
        assert_eq!(c.open(), 4);
        drop(h2);
        assert_eq!(c.open(), 3);
        let _h5 = c.take(ip(5)).unwrap();
        assert!(h3.evict.is_cancelled());
        // Nobody idle any more.
        assert_eq!(c.take(ip(6)).unwrap_err(), Refused::Full);
        drop((h1, h4));
    }
}
