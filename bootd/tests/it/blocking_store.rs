//! A shared store that answers slowly (etcd electing a leader after one
//! member died; a request to a dead member waiting for `etcd.timeout`)
//! must hold only the fetch that waits for it, never the server.

use super::harness::Bootd;
use http::StatusCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Agrees at once; every spend takes `delay`.
#[derive(Debug)]
struct SlowStore {
    delay: Duration,
}

impl bootd::ha::Shared for SlowStore {
    fn agree(&self, _name: &str, offer: &[u8]) -> std::io::Result<Vec<u8>> {
        Ok(offer.to_vec())
    }
    fn spend(&self, _nonce: &str, _expiry: u64) -> std::io::Result<bool> {
        std::thread::sleep(self.delay);
        Ok(true)
    }
}

/// On a one-thread runtime (an appliance given one CPU runs one): while
/// an Ignition fetch waits 2 s for its spend, `/healthz` (keepalived's
/// check) and a script answer at once, and the fetch then gets its config.
/// With the spend on the server's thread, both waited the 2 s, and three
/// such checks in a row moved the boot address away.
#[tokio::test(flavor = "current_thread")]
async fn a_slow_spend_holds_its_fetch_not_the_server() {
    let b = Arc::new(
        Bootd::start_config(super::harness::strict, None, |c| {
            c.shared = Some(Arc::new(SlowStore {
                delay: Duration::from_secs(2),
            }))
        })
        .await,
    );
    let token = b.token("master-0");
    let t0 = Instant::now();
    let waiting = {
        let b = Arc::clone(&b);
        tokio::spawn(async move {
            let (s, _, body) = b.get(&format!("/ignition/master-0?token={token}")).await;
            (s, body, t0.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    for path in ["/healthz", "/metrics", "/boot.ipxe"] {
        let (s, _, _) = b.get(path).await;
        assert_eq!(s, StatusCode::OK, "{path}");
        // Answered while the spend still waits (it ends 2 s after t0).
        assert!(
            t0.elapsed() < Duration::from_millis(1500),
            "{path} answered {:?} after the fetch began: it waited behind the spend",
            t0.elapsed()
        );
        assert!(!waiting.is_finished(), "the fetch still waits");
    }
    let (s, body, took) = waiting.await.unwrap();
    assert_eq!(s, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    assert!(
        String::from_utf8_lossy(&body).contains("\"ignition\""),
        "a config"
    );
    assert!(
        took >= Duration::from_secs(2),
        "the spend was waited for: {took:?}"
    );
    Arc::into_inner(b).expect("one owner").stop().await;
}
