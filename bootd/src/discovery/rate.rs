//! How often discovery reports are taken: a token bucket per source
//! address and one per reported boot MAC, [`BURST`] reports at once, then
//! one every [`EVERY`]. A waiting machine reports once per `discovery.retry`
//! (5 s at least), well inside it; a flood from one address, or naming one
//! MAC from many, is answered 429 before it costs more than a lookup.
//!
//! The table is bounded ([`MAX_KEYS`]): when full, buckets that have filled
//! up again (their source went quiet) are dropped; if none has, the report
//! is refused, so a flood from many addresses cannot grow memory.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

pub const BURST: f64 = 5.0;
pub const EVERY: Duration = Duration::from_secs(2);
pub const MAX_KEYS: usize = 8192;

/// What a bucket is for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Key {
    Source(IpAddr),
    Mac(String),
}

#[derive(Debug, Default)]
pub struct Rate {
    buckets: HashMap<Key, (f64, Instant)>,
}

fn refilled(tokens: f64, at: Instant, now: Instant) -> f64 {
    let dt = now.saturating_duration_since(at).as_secs_f64();
    (tokens + dt / EVERY.as_secs_f64()).min(BURST)
}

impl Rate {
    /// Takes one report from each key's bucket when every one has one;
    /// `false` (nothing taken) when any is empty or the table is full.
    pub fn admit(&mut self, keys: &[Key], now: Instant) -> bool {
        let new = keys
            .iter()
            .filter(|k| !self.buckets.contains_key(k))
            .count();
        if self.buckets.len() + new > MAX_KEYS {
            self.buckets
                .retain(|_, (t, at)| refilled(*t, *at, now) < BURST);
            if self.buckets.len() + new > MAX_KEYS {
                return false;
            }
        }
        let level = |b: Option<&(f64, Instant)>| b.map_or(BURST, |(t, at)| refilled(*t, *at, now));
        if keys.iter().any(|k| level(self.buckets.get(k)) < 1.0) {
            return false;
        }
        for k in keys {
            let t = level(self.buckets.get(k));
            self.buckets.insert(k.clone(), (t - 1.0, now));
        }
        true
    }

    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_one_every_two_seconds_per_source_and_per_mac() {
        let mut r = Rate::default();
        let t0 = Instant::now();
        let a = Key::Source("10.0.0.7".parse().unwrap());
        let m = |s: &str| Key::Mac(s.into());
        let took = (0..100)
            .filter(|_| r.admit(&[a.clone(), m("52:54:00:00:00:01")], t0))
            .count();
        assert_eq!(took, 5, "the burst");
        // Another source is not held back by the first...
        let b = Key::Source("10.0.0.8".parse().unwrap());
        assert!(r.admit(&[b.clone(), m("52:54:00:00:00:02")], t0));
        // ...but one naming the first's MAC is: that MAC's bucket is empty.
        assert!(!r.admit(&[b, m("52:54:00:00:00:01")], t0));
        // One more every two seconds.
        let later = t0 + Duration::from_secs(2);
        assert!(r.admit(&[a.clone(), m("52:54:00:00:00:01")], later));
        assert!(!r.admit(&[a.clone(), m("52:54:00:00:00:01")], later));
        // Long quiet: the burst again, never more.
        let much_later = t0 + Duration::from_secs(3600);
        let took = (0..100)
            .filter(|_| r.admit(&[a.clone(), m("52:54:00:00:00:01")], much_later))
            .count();
        assert_eq!(took, 5);
    }

    #[test]
    fn the_table_is_bounded_and_quiet_buckets_make_room() {
        let mut r = Rate::default();
        let t0 = Instant::now();
        let src = |i: usize| Key::Source(std::net::Ipv4Addr::from(0x0a00_0000 + i as u32).into());
        for i in 0..MAX_KEYS {
            assert!(r.admit(&[src(i)], t0));
        }
        // Full of busy buckets: a new source is refused, memory stays put.
        assert!(!r.admit(&[src(MAX_KEYS)], t0));
        assert_eq!(r.len(), MAX_KEYS);
        // Once they have filled up again, they make room.
        assert!(r.admit(&[src(MAX_KEYS)], t0 + Duration::from_secs(10)));
        assert_eq!(r.len(), 1);
    }
}
