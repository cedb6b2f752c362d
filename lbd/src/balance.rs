//! Which backend gets the next connection: pure, over a view of the pool.

use site::Balance;

/// One backend as the picker sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// Up, not draining, and not already tried for this connection.
    pub eligible: bool,
    pub active: u64,
}

/// Index of the backend for the next connection, or `None` when no
/// candidate is eligible. `start` rotates the scan (round robin's counter;
/// least connections' tie-break, so equal loads still spread).
pub fn pick(candidates: &[Candidate], balance: Balance, start: usize) -> Option<usize> {
    let n = candidates.len();
    if n == 0 {
        return None;
    }
    let order = (0..n)
        .map(|i| (start + i) % n)
        .filter(|&i| candidates[i].eligible);
    match balance {
        Balance::RoundRobin => order.into_iter().next(),
        Balance::LeastConn => order.min_by_key(|&i| candidates[i].active),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(eligible: bool, active: u64) -> Candidate {
        Candidate { eligible, active }
    }

    #[test]
    fn round_robin_rotates_and_skips_ineligible() {
        let pool = [c(true, 0), c(false, 0), c(true, 0)];
        let got: Vec<_> = (0..6)
            .map(|s| pick(&pool, Balance::RoundRobin, s))
            .collect();
        assert_eq!(got, [Some(0), Some(2), Some(2), Some(0), Some(2), Some(2)]);
    }

    #[test]
    fn least_conn_takes_the_least_loaded_and_rotates_ties() {
        let pool = [c(true, 5), c(true, 2), c(false, 0), c(true, 2)];
        assert_eq!(pick(&pool, Balance::LeastConn, 0), Some(1));
        assert_eq!(pick(&pool, Balance::LeastConn, 2), Some(3));
        assert_eq!(pick(&pool, Balance::LeastConn, 3), Some(3));
    }

    #[test]
    fn nothing_eligible_is_none() {
        assert_eq!(pick(&[], Balance::RoundRobin, 0), None);
        assert_eq!(
            pick(&[c(false, 0), c(false, 1)], Balance::LeastConn, 1),
            None
        );
        assert_eq!(
            pick(&[c(false, 0), c(false, 1)], Balance::RoundRobin, 1),
            None
        );
    }
}
