//! How many connections a listener holds: at most `max` at once, and at
//! most `per_source` from one address, so that idle or slow clients cannot
//! take every file descriptor (the other listeners, TFTP and the lease
//! file need some) or every slot. A connection over a cap is closed at
//! once and counted. bootd's HTTP(S) and dnsd's TCP use it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

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
    limits: ConnLimits,
    held: Mutex<(usize, HashMap<IpAddr, usize>)>,
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
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut g = self.conns.held.lock().unwrap_or_else(|p| p.into_inner());
        g.0 -= 1;
        if let Some(n) = g.1.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                g.1.remove(&self.ip);
            }
        }
    }
}

impl Conns {
    pub fn new(limits: ConnLimits) -> Arc<Conns> {
        Arc::new(Conns {
            limits,
            held: Mutex::new((0, HashMap::new())),
        })
    }

    /// A slot for a connection from `ip`, or why there is none.
    pub fn take(self: &Arc<Self>, ip: IpAddr) -> Result<Held, Refused> {
        let mut g = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if g.0 >= self.limits.max {
            return Err(Refused::Full);
        }
        let n = g.1.entry(ip).or_insert(0);
        if *n >= self.limits.per_source {
            return Err(Refused::Source);
        }
        *n += 1;
        g.0 += 1;
        Ok(Held {
            conns: Arc::clone(self),
            ip,
        })
    }

    pub fn open(&self) -> usize {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).0
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
}
