//! Response rate limiting (in the spirit of BIND's and NSD's RRL): a token
//! bucket per client network (/24 for IPv4, /56 for IPv6) refilled at the
//! configured responses per second, with that as the burst. Beyond it,
//! every `slip`-th response goes out truncated (TC, no records: a real
//! client retries over TCP, a spoofed victim gets a small packet) and the
//! rest are dropped. UDP only.
//!
//! Each UDP worker has its own table (no locks on the hot path); with N
//! workers a client spread over several sockets may get up to N times the
//! limit. The table is cleared when it grows past [`MAX_ENTRIES`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Instant;

pub const MAX_ENTRIES: usize = 65536;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// Responses per second per client network; 0: no limit.
    pub per_second: u32,
    pub slip: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Send,
    Slip,
    Drop,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
    limited: u32,
}

#[derive(Debug)]
pub struct Rrl {
    limit: Limit,
    table: HashMap<u64, Bucket, foldhash::fast::FixedState>,
}

fn prefix(ip: IpAddr) -> u64 {
    match ip {
        IpAddr::V4(a) => u64::from(u32::from(a) & 0xFFFF_FF00),
        IpAddr::V6(a) => (u128::from(a) >> 72) as u64 | 1 << 63,
    }
}

impl Rrl {
    pub fn new(limit: Limit) -> Rrl {
        Rrl {
            limit,
            table: HashMap::default(),
        }
    }

    pub fn check(&mut self, ip: IpAddr, now: Instant) -> Verdict {
        if self.limit.per_second == 0 {
            return Verdict::Send;
        }
        if self.table.len() >= MAX_ENTRIES {
            self.table.clear();
        }
        let rate = f64::from(self.limit.per_second);
        let b = self.table.entry(prefix(ip)).or_insert(Bucket {
            tokens: rate,
            at: now,
            limited: 0,
        });
        let dt = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + dt * rate).min(rate);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            return Verdict::Send;
        }
        b.limited = b.limited.wrapping_add(1);
        if self.limit.slip > 0 && b.limited % self.limit.slip == 0 {
            Verdict::Slip
        } else {
            Verdict::Drop
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn limits_per_network_and_refills() {
        let mut r = Rrl::new(Limit {
            per_second: 10,
            slip: 2,
        });
        let t0 = Instant::now();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let same_net: IpAddr = "192.0.2.200".parse().unwrap();
        let other: IpAddr = "198.51.100.1".parse().unwrap();
        let sent = (0..10).filter(|_| r.check(a, t0) == Verdict::Send).count();
        assert_eq!(sent, 10);
        // the /24 shares the bucket: limited now, every second one slips
        let v: Vec<Verdict> = (0..4).map(|_| r.check(same_net, t0)).collect();
        assert_eq!(
            v,
            [Verdict::Drop, Verdict::Slip, Verdict::Drop, Verdict::Slip]
        );
        assert_eq!(r.check(other, t0), Verdict::Send);
        // 100 ms later one token is back
        assert_eq!(r.check(a, t0 + Duration::from_millis(100)), Verdict::Send);
        assert_ne!(r.check(a, t0 + Duration::from_millis(100)), Verdict::Send);
    }

    #[test]
    fn zero_means_off() {
        let mut r = Rrl::new(Limit {
            per_second: 0,
            slip: 2,
        });
        let t0 = Instant::now();
        assert!((0..100_000).all(|_| r.check("192.0.2.1".parse().unwrap(), t0) == Verdict::Send));
    }
}
