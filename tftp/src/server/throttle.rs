//! One log line a second at most for a kind of event, with the number of
//! events since the last line.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

#[derive(Default)]
pub(super) struct Throttle(Mutex<(Option<Instant>, u64)>);

impl Throttle {
    /// Counts one event. `Some(n)`: log a line now, for the `n` events
    /// since the last line (this one included).
    pub(super) fn note(&self) -> Option<u64> {
        let mut l = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        l.1 += 1;
        match l.0 {
            Some(t) if t.elapsed() < Duration::from_secs(1) => None,
            _ => {
                l.0 = Some(Instant::now());
                Some(std::mem::take(&mut l.1))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Throttle;

    #[test]
    fn one_line_a_second_counting_the_events_between() {
        let t = Throttle::default();
        assert_eq!(t.note(), Some(1));
        assert_eq!(t.note(), None);
        assert_eq!(t.note(), None);
        std::thread::sleep(std::time::Duration::from_millis(1100));
        assert_eq!(t.note(), Some(3));
    }
}
