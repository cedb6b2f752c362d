//! The store's behaviour, the same on every backend: each test runs on
//! SQLite (a temporary directory) and on etcd (a member started for the
//! test, stopped by its PID).

use super::*;

/// Opens a store on the same data each time (a second open is a restart).
trait Fixture {
    fn open(&self) -> Store;
}

struct OnSqlite(tempfile::TempDir);

impl Fixture for OnSqlite {
    fn open(&self) -> Store {
        Store::sqlite(self.0.path()).unwrap()
    }
}

struct OnEtcd(::etcd::testing::Server);

impl Fixture for OnEtcd {
    fn open(&self) -> Store {
        on(&self.0)
    }
}

/// `#[test]`s running `$name` on each backend.
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod sqlite_backend {
            $(#[test]
            fn $name() {
                super::$name(&super::OnSqlite(tempfile::tempdir().unwrap()));
            })*
        }
        mod etcd_backend {
            $(#[test]
            fn $name() {
                super::$name(&super::OnEtcd(::etcd::testing::Server::start()));
            })*
        }
    };
}

on_both!(
    phase_and_condition_change_together,
    nodes_intents_and_reopen,
    conditions_keep_their_transition_time_and_events_are_bounded,
    two_writers_lose_nothing,
);

pub(crate) fn row(name: &str) -> NodeRow {
    NodeRow {
        name: name.into(),
        spec: serde_json::json!({"name": name}),
        provider: serde_json::Value::Null,
        created_at: 1,
        deleting: false,
        phase: "Pending".into(),
        message: String::new(),
        updated_at: 1,
    }
}

/// A reader (the API: the row, then its conditions) never sees a phase
/// without the Ready condition written with it.
fn phase_and_condition_change_together(f: &dyn Fixture) {
    let s = std::sync::Arc::new(f.open());
    assert!(s.insert_node(&row("a")).unwrap());
    let ready = |reason: &str| Condition {
        kind: "Ready".into(),
        status: "False".into(),
        reason: reason.into(),
        message: String::new(),
        at: 1,
    };
    let writer = {
        let s = std::sync::Arc::clone(&s);
        std::thread::spawn(move || {
            for _ in 0..200 {
                s.set_phase_and_conditions(
                    "a",
                    "Provisioned",
                    "",
                    &[ready("WaitingForNetworkBoot")],
                )
                .unwrap();
                s.set_phase_and_conditions("a", "Failed", "", &[ready("Failed")])
                    .unwrap();
            }
        })
    };
    let check = || {
        let (row, conds) = s.node_and_conditions("a").unwrap();
        let phase = row.unwrap().phase;
        let reason = conds
            .into_iter()
            .find(|c| c.kind == "Ready")
            .map(|c| c.reason);
        let want = match phase.as_str() {
            "Pending" => None, // before the first write
            "Failed" => Some("Failed"),
            _ => Some("WaitingForNetworkBoot"),
        };
        assert_eq!(
            reason.as_deref(),
            want,
            "phase {phase} with Ready {reason:?}"
        );
    };
    let mut reads = 0;
    while !writer.is_finished() {
        check();
        reads += 1;
    }
    writer.join().unwrap();
    check();
    assert_eq!(s.node("a").unwrap().unwrap().phase, "Failed");
    assert!(reads > 0);
}

fn nodes_intents_and_reopen(f: &dyn Fixture) {
    {
        let s = f.open();
        assert!(s.insert_node(&row("a")).unwrap());
        assert!(
            !s.insert_node(&row("a")).unwrap(),
            "a second insert of the same name changes nothing"
        );
        let i = s.begin_intent("a", "create", "equinix").unwrap();
        assert_eq!(s.open_intents("a").unwrap(), vec![i.clone()]);
        s.put_resource(
            "a",
            &Resource {
                provider: "equinix".into(),
                external_id: "d1".into(),
                state: "queued".into(),
                addresses: vec![],
                updated_at: 2,
            },
        )
        .unwrap();
    }
    // Reopened as after a crash: the open intent and the resource are there.
    let s = f.open();
    let open = s.open_intents("a").unwrap();
    assert_eq!(open.len(), 1);
    s.finish_intent(open[0].id, "created d1").unwrap();
    assert!(s.open_intents("a").unwrap().is_empty());
    assert_eq!(s.resource("a").unwrap().unwrap().external_id, "d1");
    assert!(s.mark_deleting("a").unwrap());
    assert!(s.node("a").unwrap().unwrap().deleting);
    s.remove_node("a").unwrap();
    assert!(s.node("a").unwrap().is_none());
    assert!(s.resource("a").unwrap().is_none());
}

fn conditions_keep_their_transition_time_and_events_are_bounded(f: &dyn Fixture) {
    let s = f.open();
    let c = |status: &str, at| Condition {
        kind: "Ready".into(),
        status: status.into(),
        reason: "R".into(),
        message: String::new(),
        at,
    };
    s.set_condition("a", &c("False", 10)).unwrap();
    s.set_condition("a", &c("False", 20)).unwrap();
    assert_eq!(
        s.conditions("a").unwrap()[0].at,
        10,
        "same status: time unchanged"
    );
    s.set_condition("a", &c("True", 30)).unwrap();
    assert_eq!(s.conditions("a").unwrap()[0].at, 30);
    let batch: Vec<_> = (0..EVENTS_PER_NODE + 20)
        .map(|i| {
            (
                "a".to_string(),
                Event {
                    at: i,
                    kind: "k".into(),
                    message: String::new(),
                },
            )
        })
        .collect();
    s.add_events(&batch).unwrap();
    let ev = s.events("a").unwrap();
    assert_eq!(ev.len() as i64, EVENTS_PER_NODE);
    assert_eq!(ev.last().unwrap().at, EVENTS_PER_NODE + 19);
    assert_eq!(
        s.set_cluster_once("bootstrapComplete", "true").unwrap(),
        s.set_cluster_once("bootstrapComplete", "true").unwrap()
    );
}

/// Two stores on the same data (two appliances on one etcd; two
/// connections to one SQLite file) writing at once: each node inserted
/// once, every intent its own id, no condition or event lost.
fn two_writers_lose_nothing(f: &dyn Fixture) {
    let (a, b) = (std::sync::Arc::new(f.open()), std::sync::Arc::new(f.open()));
    let run = |s: std::sync::Arc<Store>, who: &'static str| {
        std::thread::spawn(move || {
            let mut inserted = 0;
            let mut ids = Vec::new();
            for i in 0..40 {
                inserted += s.insert_node(&row(&format!("n{}", i % 20))).unwrap() as usize;
                ids.push(s.begin_intent("n0", "create", who).unwrap().id);
                let cond = Condition {
                    kind: format!("{who}{i}"),
                    status: "True".into(),
                    reason: "R".into(),
                    message: String::new(),
                    at: i,
                };
                s.set_condition("n0", &cond).unwrap();
                let e = Event {
                    at: i,
                    kind: who.into(),
                    message: String::new(),
                };
                s.add_events(&[("n0".to_string(), e)]).unwrap();
            }
            (inserted, ids)
        })
    };
    let (ta, tb) = (run(a.clone(), "a"), run(b.clone(), "b"));
    let ((ia, mut ids), (ib, idb)) = (ta.join().unwrap(), tb.join().unwrap());
    assert_eq!(ia + ib, 20, "each of the 20 names inserted once");
    assert_eq!(a.nodes().unwrap().len(), 20);
    ids.extend(idb);
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 80, "every intent has its own id");
    assert_eq!(b.open_intents("n0").unwrap().len(), 80);
    assert_eq!(a.conditions("n0").unwrap().len(), 80, "no condition lost");
    let ev = b.events("n0").unwrap();
    assert_eq!(ev.iter().filter(|e| e.kind == "a").count(), 40);
    assert_eq!(ev.iter().filter(|e| e.kind == "b").count(), 40);
}

/// etcd down: an error that says so (the API answers 503), within the
/// request deadline; back once etcd is.
#[test]
fn etcd_down_is_unavailable_and_nothing_is_half_written() {
    let mut server = ::etcd::testing::Server::start();
    let s = on(&server);
    assert!(s.insert_node(&row("a")).unwrap());
    server.kill();
    let t = std::time::Instant::now();
    let e = s.set_phase("a", "Provisioning", "").unwrap_err();
    assert!(e.unavailable(), "{e}");
    assert!(unavailable(&e), "{e}");
    assert!(!disk_full(&e), "{e}");
    assert!(
        t.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        t.elapsed()
    );
    server.restart();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while s.node("a").is_err() {
        assert!(std::time::Instant::now() < end, "etcd did not come back");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(
        s.node("a").unwrap().unwrap().phase,
        "Pending",
        "the failed write changed nothing"
    );
}

/// A value the controller did not write is an error naming its key, never
/// read as empty.
#[test]
fn a_foreign_value_in_etcd_is_named_not_ignored() {
    let server = ::etcd::testing::Server::start();
    let raw = ::etcd::Etcd::connect(&server.config("/test/")).unwrap();
    raw.put("controller/nodes/a", b"not json".to_vec()).unwrap();
    let s = on(&server);
    let e = s.node("a").unwrap_err().to_string();
    assert!(
        e.contains("/test/controller/nodes/a") && e.contains("not what bootd writes"),
        "{e}"
    );
    assert!(s.nodes().is_err());
}

/// A store on `server`'s keys under `/test/`.
fn on(server: &::etcd::testing::Server) -> Store {
    let c = ::etcd::Etcd::connect(&server.config("/test/")).unwrap();
    Store::with(etcd::Etcd::new(c))
}
