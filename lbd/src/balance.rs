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
/// candidate is eligible. `start` is a counter that grows by one per
/// connection: round robin takes the `start mod k`-th of the `k` eligible
/// backends, so a backend that is down does not hand its turns to its
/// neighbour in the list (the survivors share them evenly); least
/// connections uses it to rotate ties, so equal loads still spread.
pub fn pick(candidates: &[Candidate], balance: Balance, start: usize) -> Option<usize> {
    let n = candidates.len();
    if n == 0 {
        return None;
    }
    match balance {
        Balance::RoundRobin => {
            let k = candidates.iter().filter(|c| c.eligible).count();
            if k == 0 {
                return None;
            }
            candidates
                .iter()
                .enumerate()
                .filter(|(_, c)| c.eligible)
                .nth(start % k)
                .map(|(i, _)| i)
        }
        Balance::LeastConn => (0..n)
            .map(|i| (start + i) % n)
            .filter(|&i| candidates[i].eligible)
            .min_by_key(|&i| candidates[i].active),
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
        assert_eq!(got, [Some(0), Some(2), Some(0), Some(2), Some(0), Some(2)]);
    }

    /// A dead backend's turns are spread over the survivors, wherever it
    /// sits in the list: 3 000 picks over 3 of 4 backends give 1 000 each.
    #[test]
    fn a_dead_backends_turns_are_shared_evenly() {
        for dead in 0..4 {
            let pool: Vec<Candidate> = (0..4).map(|i| c(i != dead, 0)).collect();
            let mut got = [0u32; 4];
            for s in 0..3000 {
                got[pick(&pool, Balance::RoundRobin, s).unwrap()] += 1;
            }
            let mut want = [1000u32; 4];
            want[dead] = 0;
            assert_eq!(got, want, "backend {dead} down");
        }
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
