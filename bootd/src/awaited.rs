//! Nodes made through the API whose provider has not yet said where their
//! machine is. Such a node is not in the served site (nothing can be
//! reserved, resolved or balanced for it; `controller::facts`), yet its
//! machine may already run: a cloud instance boots its image and Ignition
//! fetches the config its user data points at, possibly before the
//! controller has polled the instance (every `poll`) or while no appliance
//! leads the controller (an election and its fence: tens of seconds).
//!
//! Ignition takes any answer below 500 as final: a 404 there ends the
//! machine's boot for good. So an Ignition fetch for an awaited node, on a
//! token issued to that node, is answered 503 with `Retry-After`: Ignition
//! tries again (its backoff reaches 5 s) until the address is known and
//! the node is served, from that address only. Nothing of the node is
//! given before; a request without such a token gets the 404 every
//! unknown name gets.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Name → epoch (the node's token subject's, `token::subject`) of each
/// awaited node; replaced whole by the controller at each overlay export.
#[derive(Clone, Default, Debug)]
pub struct Awaited(Arc<Mutex<HashMap<String, u64>>>);

impl Awaited {
    pub fn set(&self, nodes: HashMap<String, u64>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = nodes;
    }
    /// The awaited node's epoch.
    pub fn epoch(&self, name: &str) -> Option<u64> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .copied()
    }
    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_replaces_the_last() {
        let a = Awaited::default();
        a.set(HashMap::from([("w1".to_string(), 7)]));
        assert_eq!(a.epoch("w1"), Some(7));
        a.set(HashMap::from([("w2".to_string(), 9)]));
        assert_eq!(a.epoch("w1"), None, "served now, or gone");
        assert_eq!(a.epoch("w2"), Some(9));
        assert_eq!(a.len(), 1);
    }
}
