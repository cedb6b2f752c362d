//! The API on a state directory whose disk fills up (a real tmpfs): a write
//! that cannot be stored is refused with 507 and a clear reason, nothing of
//! it is kept, what was acknowledged before stays, and writes work again
//! once there is room.

use super::*;
use testkit::tmpfs::Tmpfs;

fn node(name: &str, last: u8) -> Value {
    json!({
        "name": name, "role": "worker", "macs": [format!("52:54:00:77:01:{last:02x}")],
        "ip": format!("10.77.0.{last}"), "kernelArgs": ["console=ttyS0"], "live": true
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_state_disk_refuses_api_writes_with_507_and_recovers() {
    let f = Fake::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = write_site(dir.path(), &f.url(), &f.url(), &f.url(), "127.0.0.1:0");
    let state = dir.path().join("state");
    let fs = Tmpfs::mount(&state, "2m");
    let b = Bootd::start_site(dir, &path, tuning()).await;
    let (st, v) = b.create(node("worker-7", 57)).await;
    assert_eq!(st, 201, "{v:#}");

    let filler = fs.fill();
    let (st, v) = b.create(node("worker-8", 58)).await;
    assert_eq!(st, 507, "{v:#}");
    let msg = v["error"].as_str().unwrap_or_default();
    assert!(
        msg.contains("state disk is full") && msg.contains("nothing was stored"),
        "{msg}"
    );
    // Nothing of the refused node, everything of the acknowledged one.
    assert_eq!(b.call("GET", "/v1/nodes/worker-8", None).await.0, 404);
    assert!(b.app.live.load().site.node("worker-8").is_none());
    assert_eq!(b.call("GET", "/v1/nodes/worker-7", None).await.0, 200);
    // A delete that cannot be stored is refused the same way.
    let (st, v) = b.call("DELETE", "/v1/nodes/worker-7", None).await;
    assert_eq!(st, 507, "{v:#}");
    let (st, v) = b.call("GET", "/v1/nodes/worker-7", None).await;
    assert_eq!(
        (st, v["phase"].as_str() == Some("Deleting")),
        (200, false),
        "{v:#}"
    );
    let m = b.app.metrics.encode();
    for want in [
        "bootd_api_requests_total{route=\"nodes\",status=\"507\"} 1",
        "bootd_api_requests_total{route=\"node\",status=\"507\"} 1",
    ] {
        assert!(m.contains(want), "{want} not in\n{m}");
    }
    let logs = String::from_utf8_lossy(&logs().lock().unwrap()).into_owned();
    assert!(
        logs.lines()
            .any(|l| l.contains("the state directory's disk is full")
                && l.contains(&state.join("controller.db").display().to_string())
                && l.contains("database or disk is full")),
        "no log line with the database file and SQLite's reason"
    );

    // Room again: the same request succeeds, and the store holds both.
    std::fs::remove_file(&filler).unwrap();
    let (st, v) = b.create(node("worker-8", 58)).await;
    assert_eq!(st, 201, "{v:#}");
    let store = controller::store::Store::sqlite(&state).unwrap();
    let mut names: Vec<String> = store.nodes().unwrap().into_iter().map(|r| r.name).collect();
    names.sort();
    assert_eq!(names, ["worker-7", "worker-8"]);
    drop(store);
    b.stop().await;
    drop(fs);
}
