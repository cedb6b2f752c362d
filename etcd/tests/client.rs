//! The client against a real etcd member (Debian's etcd-server, started by
//! the test, stopped by PID).

use etcd::testing::Server;
use etcd::{Compare, CompareOp, Etcd, Transaction, TxnOp};

#[test]
fn keys_live_under_the_prefix_and_a_compare_and_swap_has_one_winner() {
    let server = Server::start();
    let a = Etcd::connect(&server.config("/site-a/")).unwrap();
    let b = Etcd::connect(&server.config("/site-b/")).unwrap();
    assert!(a.get("k").unwrap().is_none());
    let rev = a.put("k", b"one".to_vec()).unwrap();
    let v = a.get("k").unwrap().unwrap();
    assert_eq!(
        (v.key.as_str(), v.value.as_slice(), v.mod_revision),
        ("k", &b"one"[..], rev)
    );
    assert!(b.get("k").unwrap().is_none(), "another prefix sees nothing");
    a.put("dir/x", b"1".to_vec()).unwrap();
    a.put("dir/y", b"2".to_vec()).unwrap();
    let keys: Vec<String> = a.list("dir/").unwrap().into_iter().map(|v| v.key).collect();
    assert_eq!(keys, ["dir/x", "dir/y"]);

    // Two writers compare the same revision: exactly one succeeds.
    let cas = |e: &Etcd, val: &str| {
        let key = e.key("k");
        let t = Transaction::new()
            .when([Compare::mod_revision(key.clone(), CompareOp::Equal, rev)])
            .and_then([TxnOp::put(key, val, None)]);
        e.txn("cas", t).unwrap().succeeded()
    };
    let c = Etcd::connect(&server.config("/site-a/")).unwrap();
    let wins = [cas(&a, "two"), cas(&c, "three")];
    assert_eq!(wins, [true, false]);
    assert_eq!(a.get("k").unwrap().unwrap().value, b"two");
}

#[test]
fn a_stopped_cluster_is_unavailable_in_bounded_time_and_back_after() {
    let mut server = Server::start();
    let e = Etcd::connect(&server.config("/p/")).unwrap();
    e.put("k", b"v".to_vec()).unwrap();
    server.kill();
    let t = std::time::Instant::now();
    let err = e.get("k").unwrap_err();
    assert!(err.unavailable(), "{err}");
    assert!(
        t.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        t.elapsed()
    );
    assert!(err.to_string().contains(&server.endpoint), "{err}");
    server.restart();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        match e.get("k") {
            Ok(v) => {
                assert_eq!(v.unwrap().value, b"v", "the write survived the kill");
                break;
            }
            Err(err) => assert!(std::time::Instant::now() < end, "{err}"),
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// One endpoint whose member is gone (nothing listens), one that serves:
/// the first request that finds the dead one takes it out of the
/// balancer, and the rest go to the live member. Before, the balancer
/// kept choosing the dead endpoint: about half of 60 puts failed with
/// "tcp connect error". (Putting a member back once it answers again is
/// not tested here: it needs a member of the same cluster on that port.)
#[test]
fn a_member_that_does_not_answer_leaves_the_balancer() {
    let server = Server::start();
    let dead = format!("http://127.0.0.1:{}", etcd::testing::free_port());
    let mut config = server.config("/p/");
    config.endpoints = vec![dead.clone(), server.endpoint.clone()];
    let e = Etcd::connect(&config).unwrap();
    let mut failed = Vec::new();
    for i in 0..60 {
        if let Err(err) = e.put(&format!("k{i}"), b"v".to_vec()) {
            assert!(err.unavailable(), "{err}");
            failed.push(i);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        failed.len() <= 3 && failed.iter().all(|&i| i < 20),
        "puts that failed: {failed:?}"
    );
    assert_eq!(e.list("k").unwrap().len(), 60 - failed.len());
}

/// Called from a thread of another runtime (as the controller's store is).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callable_from_inside_another_runtime() {
    let server = Server::start();
    let e = Etcd::connect(&server.config("/p/")).unwrap();
    e.put("k", b"v".to_vec()).unwrap();
    let v = e
        .run("get", |mut c| async move { c.get("/p/k", None).await })
        .await
        .unwrap();
    assert_eq!(v.kvs()[0].value(), b"v");
    drop(e); // dropping its runtime here must not panic
}

/// One leader at a time: the second candidate is elected when the first
/// resigns (at once) or dies (once its lease's time to live has passed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_and_the_next_after_resign_or_death() {
    use std::time::{Duration, Instant};
    use tokio_util::sync::CancellationToken;
    let server = Server::start();
    let a = Etcd::connect(&server.config("/p/")).unwrap();
    let b = Etcd::connect(&server.config("/p/")).unwrap();
    let c = Etcd::connect(&server.config("/p/")).unwrap();
    let stop = CancellationToken::new();
    let ttl = Duration::from_secs(3);
    let la = a.campaign("ctl", "a", ttl, &stop).await.unwrap().unwrap();
    assert_eq!(a.leader("ctl").await.unwrap().as_deref(), Some("a"));
    let (b2, stop2) = (b.clone(), stop.clone());
    let mut pending_b = tokio::spawn(async move { b2.campaign("ctl", "b", ttl, &stop2).await });
    // b waits longer than a request's deadline (3 s) while a leads.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(!pending_b.is_finished(), "b elected while a leads");
    assert!(!la.lost().is_cancelled(), "a's lease is kept alive");
    let t = Instant::now();
    la.resign().await;
    let lb = tokio::time::timeout(Duration::from_secs(5), &mut pending_b)
        .await
        .expect("b elected after a resigned")
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(c.leader("ctl").await.unwrap().as_deref(), Some("b"));

    // b dies without resigning (its keep-alive stops): c is elected once
    // b's lease has expired, not before.
    let (c2, stop3) = (c.clone(), stop.clone());
    let pending_c = tokio::spawn(async move { c2.campaign("ctl", "c", ttl, &stop3).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t = Instant::now();
    drop(lb);
    let lc = tokio::time::timeout(Duration::from_secs(10), pending_c)
        .await
        .expect("c elected after b's lease expired")
        .unwrap()
        .unwrap()
        .unwrap();
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_secs(1) && waited < Duration::from_secs(6),
        "{waited:?}"
    );
    assert_eq!(a.leader("ctl").await.unwrap().as_deref(), Some("c"));
    // A candidate told to stop gives up.
    let stop4 = CancellationToken::new();
    let (a2, s4) = (a.clone(), stop4.clone());
    let pending_a = tokio::spawn(async move { a2.campaign("ctl", "a", ttl, &s4).await });
    stop4.cancel();
    assert!(pending_a.await.unwrap().unwrap().is_none());
    drop(lc);
}

/// The leader stops acting when etcd is gone for 2/3 of its lease's time
/// to live: before etcd could elect another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_etcd_steps_down_in_time() {
    use std::time::{Duration, Instant};
    let mut server = Server::start();
    let a = Etcd::connect(&server.config("/p/")).unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let ttl = Duration::from_secs(3);
    let la = a.campaign("ctl", "a", ttl, &stop).await.unwrap().unwrap();
    let lost = la.lost();
    server.kill();
    let t = Instant::now();
    tokio::time::timeout(Duration::from_secs(6), lost.cancelled())
        .await
        .expect("leadership given up");
    assert!(
        t.elapsed() <= ttl,
        "stepped down after {:?}, lease {ttl:?}",
        t.elapsed()
    );
}

async fn next(w: &mut tokio::sync::mpsc::Receiver<etcd::Change>) -> etcd::Change {
    tokio::time::timeout(std::time::Duration::from_secs(10), w.recv())
        .await
        .expect("a change within 10 s")
        .expect("the watch goes on")
}

/// A watch reports each changed key, stays open past a request's deadline,
/// and after etcd restarts says Resync and goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_reports_keys_and_resyncs_after_a_restart() {
    use etcd::Change;
    use std::time::Duration;
    let mut server = Server::start();
    let e = Etcd::connect(&server.config("/p/")).unwrap();
    let mut w = e.watch("nodes/");
    assert_eq!(next(&mut w).await, Change::Resync);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let e2 = e.clone();
    tokio::task::spawn_blocking(move || e2.put("nodes/a", b"1".to_vec()).unwrap())
        .await
        .unwrap();
    assert_eq!(next(&mut w).await, Change::Key("nodes/a".into()));
    tokio::time::sleep(Duration::from_secs(4)).await;
    let e2 = e.clone();
    tokio::task::spawn_blocking(move || {
        e2.put("other", b"x".to_vec()).unwrap();
        e2.put("nodes/b", b"2".to_vec()).unwrap();
    })
    .await
    .unwrap();
    assert_eq!(
        next(&mut w).await,
        Change::Key("nodes/b".into()),
        "past the deadline, other keys not reported"
    );
    tokio::task::spawn_blocking(move || server.restart())
        .await
        .unwrap();
    assert_eq!(next(&mut w).await, Change::Resync);
}

/// A connection of `site` (its identity's id and cluster) on `prefix`.
fn of_site(server: &Server, prefix: &str, id: &str) -> Etcd {
    let mut c = server.config(prefix);
    c.site = Some(etcd::SiteIdentity {
        id: id.into(),
        cluster: "lab.example.test".into(),
    });
    Etcd::connect(&c).unwrap()
}

/// Every key under the prefix with its last change's revision.
fn keys(e: &Etcd) -> Vec<(String, i64)> {
    e.list("")
        .unwrap()
        .into_iter()
        .map(|v| (v.key, v.mod_revision))
        .collect()
}

/// The first connection of a site stores its identity under the prefix;
/// another site's connection there fails every request (reads, writes,
/// transactions, a campaign, a watch) with the refusal, reads and writes
/// nothing; one of the same site, started later, works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_is_one_sites_and_another_site_gets_nothing_from_it() {
    use std::time::Duration;
    let server = Server::start();
    let raw = Etcd::connect(&server.config("/bare-metal-boot/lab/")).unwrap();
    let a = of_site(&server, "/bare-metal-boot/lab/", "lab.example.test");
    tokio::task::block_in_place(|| a.put("bootd/secrets/token-key", b"k".to_vec())).unwrap();
    let stored = raw
        .get("site-identity")
        .unwrap()
        .expect("stored at the first use");
    let (id, by) = etcd::claim::parse(&stored.value).expect("a record");
    assert_eq!(id.id, "lab.example.test");
    assert!(by.contains("pid"), "{by}");
    let before = keys(&raw);

    let b = of_site(&server, "/bare-metal-boot/lab/", "lab.other.test");
    let err = tokio::task::block_in_place(|| b.get("bootd/secrets/token-key")).unwrap_err();
    let other = err.other_site().expect("refused as another site's");
    assert!(!err.unavailable());
    assert_eq!(other.prefix, "/bare-metal-boot/lab/");
    let text = err.to_string();
    assert!(
        text.contains("belongs to another site")
            && text.contains("\"lab.example.test\"")
            && text.contains("\"lab.other.test\""),
        "{text}"
    );
    assert!(tokio::task::block_in_place(|| b.put("x", b"y".to_vec()))
        .unwrap_err()
        .other_site()
        .is_some());
    let stop = tokio_util::sync::CancellationToken::new();
    let campaign = b.campaign("controller", "b", Duration::from_secs(2), &stop);
    let r = tokio::time::timeout(Duration::from_secs(10), campaign)
        .await
        .expect("refused, not waiting");
    assert!(r.unwrap_err().other_site().is_some());
    let mut w = b.watch("");
    assert_eq!(next(&mut w).await, etcd::Change::Resync);
    tokio::task::block_in_place(|| a.put("controller/nodes/n", b"{}".to_vec())).unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(2), w.recv()).await;
    assert!(
        !matches!(seen, Ok(Some(etcd::Change::Key(_)))),
        "another site's watch saw {seen:?}"
    );
    let mut after = keys(&raw);
    after.retain(|(k, _)| k != "controller/nodes/n");
    assert_eq!(after, before, "nothing written by the other site");
    assert_eq!(raw.leader("controller").await.unwrap(), None);

    // An appliance of the same site (its own connection, later) works.
    let c = of_site(&server, "/bare-metal-boot/lab/", "lab.example.test");
    let v = tokio::task::block_in_place(|| c.get("bootd/secrets/token-key")).unwrap();
    assert_eq!(v.unwrap().value, b"k");
    tokio::task::block_in_place(|| c.check_site()).unwrap();

    // A value bootd does not write there is refused, named.
    raw.put("site-identity", b"hello".to_vec()).unwrap();
    let d = of_site(&server, "/bare-metal-boot/lab/", "lab.example.test");
    let err = tokio::task::block_in_place(|| d.check_site()).unwrap_err();
    assert!(
        err.other_site().is_some() && err.to_string().contains("not a site identity"),
        "{err}"
    );
}

/// A site's first connection made while etcd is down checks once etcd
/// answers: unavailable until then, never refused.
#[test]
fn the_check_waits_for_etcd_like_any_request() {
    let mut server = Server::start();
    let a = of_site(&server, "/p/", "lab.example.test");
    a.put("k", b"v".to_vec()).unwrap();
    server.kill();
    let b = of_site(&server, "/p/", "lab.example.test");
    let err = b.check_site().unwrap_err();
    assert!(err.unavailable() && err.other_site().is_none(), "{err}");
    server.restart();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while let Err(e) = b.get("k") {
        assert!(std::time::Instant::now() < end, "{e}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
