//! The store on SQLite in WAL mode, `<stateDir>/controller.db`: one
//! appliance (`host.store: sqlite`, the default).
//!
//! Tables: `nodes` (API-created nodes: the site-format spec, the provider
//! spec, phase and message, a `deleting` mark), `resources` (the provider's
//! machine for a node: its id, state, learned addresses), `intents` (a
//! provider call about to be made; written and committed *before* the call,
//! closed after its reply), `events` (the per-node timeline), `conditions`
//! (Cluster-API-style, one row per node and type) and `cluster` (facts such
//! as bootstrap-complete).
//!
//! The connection sits behind a std mutex: every method is one short
//! transaction and never holds the lock across an await.

use super::*;
use rusqlite::{params, Connection, OptionalExtension};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub const DB_FILE: &str = "controller.db";

#[derive(Debug)]
pub struct Sqlite {
    path: PathBuf,
    conn: Mutex<Connection>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS nodes(
  name TEXT PRIMARY KEY,
  spec TEXT NOT NULL,
  provider TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  deleting INTEGER NOT NULL DEFAULT 0,
  phase TEXT NOT NULL,
  message TEXT NOT NULL DEFAULT '',
  updated_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS resources(
  node TEXT PRIMARY KEY,
  provider TEXT NOT NULL,
  external_id TEXT NOT NULL,
  state TEXT NOT NULL,
  addresses TEXT NOT NULL DEFAULT '[]',
  updated_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS intents(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  node TEXT NOT NULL,
  op TEXT NOT NULL,
  provider TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  done_at INTEGER,
  outcome TEXT
);
CREATE TABLE IF NOT EXISTS events(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  node TEXT NOT NULL,
  at INTEGER NOT NULL,
  kind TEXT NOT NULL,
  message TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_node ON events(node, id);
CREATE TABLE IF NOT EXISTS conditions(
  node TEXT NOT NULL,
  type TEXT NOT NULL,
  status TEXT NOT NULL,
  reason TEXT NOT NULL,
  message TEXT NOT NULL,
  at INTEGER NOT NULL,
  PRIMARY KEY(node, type)
);
CREATE TABLE IF NOT EXISTS facts(
  node TEXT PRIMARY KEY,
  value TEXT NOT NULL,
  at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS cluster(
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL,
  at INTEGER NOT NULL
);
";

fn json_col(s: String) -> serde_json::Value {
    serde_json::from_str(&s).unwrap_or(serde_json::Value::Null)
}

impl Sqlite {
    pub fn open(state_dir: &Path) -> Result<Sqlite> {
        let path = state_dir.join(DB_FILE);
        let err = |source| StoreError::Sqlite {
            path: path.clone(),
            source,
        };
        let corrupt = |why: String| StoreError::Sqlite {
            path: path.clone(),
            source: rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
                Some(why),
            ),
        };
        // A database bootd made is never empty: it is created under another
        // name and renamed once its schema is in. An empty file here was cut
        // short (a full disk, a bad copy), and opening it would start an
        // empty store, forgetting every API node: refused instead.
        match std::fs::metadata(&path) {
            Ok(m) if m.len() == 0 => {
                return Err(corrupt(
                    "empty file (0 bytes), not a database bootd wrote: restore it from a backup; \
                     remove it only to start with no API nodes (their machines are then \
                     unmanaged: `bootd cluster destroy --provider P` lists them)"
                        .into(),
                ))
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Self::create(&path).map_err(err)?
            }
            Err(e) => return Err(corrupt(e.to_string())),
        }
        let conn = Connection::open(&path).map_err(err)?;
        // A truncated or damaged file: said now, with what to do, not at
        // the first query that touches a bad page.
        let check: String = conn
            .query_row("PRAGMA quick_check", [], |r| r.get(0))
            .map_err(|e| corrupt(format!("{e}: restore it from a backup")))?;
        if check != "ok" {
            return Err(corrupt(format!(
                "integrity check failed ({check}): restore it from a backup"
            )));
        }
        // WAL: readers never block the writer; synchronous=FULL: a committed
        // intent survives power loss, not only a crash of bootd.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(err)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(err)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(err)?;
        conn.execute_batch(SCHEMA).map_err(err)?;
        Ok(Sqlite {
            path,
            conn: Mutex::new(conn),
        })
    }

    /// A new database at `path`: made as `<path>.new` with its schema,
    /// synced, then renamed into place.
    fn create(path: &Path) -> rusqlite::Result<()> {
        let tmp = path.with_extension("db.new");
        let _ = std::fs::remove_file(&tmp);
        let conn = Connection::open(&tmp)?;
        conn.execute_batch(SCHEMA)?;
        drop(conn);
        let io = |e: std::io::Error| {
            rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR),
                Some(e.to_string()),
            )
        };
        std::fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)?;
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io)?;
        }
        Ok(())
    }

    fn with<T>(&self, f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>) -> Result<T> {
        let mut c = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut c).map_err(|source| StoreError::Sqlite {
            path: self.path.clone(),
            source,
        })
    }
}

impl Backend for Sqlite {
    /// Inserts a node; `false` if one of that name exists (nothing changed).
    fn insert_node(&self, row: &NodeRow) -> Result<bool> {
        self.with(|c| {
            let n = c.execute(
                "INSERT OR IGNORE INTO nodes(name, spec, provider, created_at, deleting, phase, message, updated_at) VALUES(?1,?2,?3,?4,?5,?6,?7,?8)",
                params![row.name, row.spec.to_string(), row.provider.to_string(), row.created_at, row.deleting, row.phase, row.message, row.updated_at],
            )?;
            Ok(n == 1)
        })
    }

    fn node(&self, name: &str) -> Result<Option<NodeRow>> {
        self.with(|c| query_node(c, name))
    }

    /// A node's row and its conditions, read together: what the API shows
    /// (a write of phase and condition between two reads would mix states).
    fn node_and_conditions(&self, name: &str) -> Result<(Option<NodeRow>, Vec<Condition>)> {
        self.with(|c| Ok((query_node(c, name)?, query_conditions(c, name)?)))
    }

    fn nodes(&self) -> Result<Vec<NodeRow>> {
        self.with(|c| {
            let mut st =
                c.prepare("SELECT name, spec, provider, created_at, deleting, phase, message, updated_at FROM nodes ORDER BY name")?;
            let rows = st.query_map([], row_to_node)?;
            rows.collect()
        })
    }

    fn set_phase(&self, name: &str, phase: &str, message: &str) -> Result<()> {
        self.with(|c| update_phase(c, name, phase, message))
    }

    /// Sets a node's phase and conditions in one transaction, so no reader
    /// sees the phase without the conditions that go with it (phase `Failed`
    /// with Ready still "waiting", Provisioned True while still
    /// `Provisioning`).
    fn set_phase_and_conditions(
        &self,
        name: &str,
        phase: &str,
        message: &str,
        conds: &[Condition],
    ) -> Result<()> {
        self.with(|c| {
            let tx = c.transaction()?;
            for cond in conds {
                upsert_condition(&tx, name, cond)?;
            }
            update_phase(&tx, name, phase, message)?;
            tx.commit()
        })
    }

    /// Marks a node for deletion and records the delete intent, in one
    /// transaction. `false` if there is no such node.
    fn mark_deleting(&self, name: &str) -> Result<bool> {
        self.with(|c| {
            let tx = c.transaction()?;
            let n = tx.execute(
                "UPDATE nodes SET deleting=1, phase='Deleting', message='', updated_at=?2 WHERE name=?1",
                params![name, now_ms()],
            )?;
            tx.commit()?;
            Ok(n == 1)
        })
    }

    /// Removes a node and everything about it (after its machine is gone).
    fn remove_node(&self, name: &str) -> Result<()> {
        self.with(|c| {
            let tx = c.transaction()?;
            for t in ["nodes WHERE name", "resources WHERE node", "conditions WHERE node", "events WHERE node", "facts WHERE node"] {
                tx.execute(&format!("DELETE FROM {t}=?1"), [name])?;
            }
            tx.execute("UPDATE intents SET done_at=?2, outcome='node removed' WHERE node=?1 AND done_at IS NULL", params![name, now_ms()])?;
            tx.commit()
        })
    }

    /// Records what the provider says of a node's machine (JSON).
    fn put_facts(&self, node: &str, value: &serde_json::Value) -> Result<()> {
        self.with(|c| {
            c.execute(
                "INSERT INTO facts(node, value, at) VALUES(?1,?2,?3) \
                 ON CONFLICT(node) DO UPDATE SET value=excluded.value, at=excluded.at",
                params![node, value.to_string(), now_ms()],
            )
            .map(|_| ())
        })
    }

    /// Every node's recorded provider facts.
    fn all_facts(&self) -> Result<std::collections::HashMap<String, serde_json::Value>> {
        self.with(|c| {
            let mut st = c.prepare("SELECT node, value FROM facts")?;
            let rows = st.query_map([], |r| Ok((r.get::<_, String>(0)?, json_col(r.get(1)?))))?;
            rows.collect()
        })
    }

    fn resource(&self, node: &str) -> Result<Option<Resource>> {
        self.with(|c| {
            c.query_row("SELECT provider, external_id, state, addresses, updated_at FROM resources WHERE node=?1", [node], |r| {
                Ok(Resource {
                    provider: r.get(0)?,
                    external_id: r.get(1)?,
                    state: r.get(2)?,
                    addresses: serde_json::from_str(&r.get::<_, String>(3)?).unwrap_or_default(),
                    updated_at: r.get(4)?,
                })
            })
            .optional()
        })
    }

    fn put_resource(&self, node: &str, res: &Resource) -> Result<()> {
        self.with(|c| {
            c.execute(
                "INSERT INTO resources(node, provider, external_id, state, addresses, updated_at) VALUES(?1,?2,?3,?4,?5,?6)
                 ON CONFLICT(node) DO UPDATE SET provider=?2, external_id=?3, state=?4, addresses=?5, updated_at=?6",
                params![
                    node,
                    res.provider,
                    res.external_id,
                    res.state,
                    serde_json::to_string(&res.addresses).unwrap_or_default(),
                    res.updated_at
                ],
            )?;
            Ok(())
        })
    }

    fn drop_resource(&self, node: &str) -> Result<()> {
        self.with(|c| {
            c.execute("DELETE FROM resources WHERE node=?1", [node])
                .map(|_| ())
        })
    }

    /// Records (and commits) that a provider call is about to be made.
    fn begin_intent(&self, node: &str, op: &str, provider: &str) -> Result<Intent> {
        let at = now_ms();
        self.with(|c| {
            c.execute(
                "INSERT INTO intents(node, op, provider, created_at) VALUES(?1,?2,?3,?4)",
                params![node, op, provider, at],
            )?;
            Ok(Intent {
                id: c.last_insert_rowid(),
                node: node.into(),
                op: op.into(),
                provider: provider.into(),
                created_at: at,
            })
        })
    }

    fn finish_intent(&self, id: i64, outcome: &str) -> Result<()> {
        self.with(|c| {
            c.execute(
                "UPDATE intents SET done_at=?2, outcome=?3 WHERE id=?1",
                params![id, now_ms(), outcome],
            )
            .map(|_| ())
        })
    }

    /// Intents recorded but never closed: a crash came between the record
    /// and the provider's reply.
    fn open_intents(&self, node: &str) -> Result<Vec<Intent>> {
        self.with(|c| {
            let mut st =
                c.prepare("SELECT id, node, op, provider, created_at FROM intents WHERE node=?1 AND done_at IS NULL ORDER BY id")?;
            let rows = st.query_map([node], |r| {
                Ok(Intent { id: r.get(0)?, node: r.get(1)?, op: r.get(2)?, provider: r.get(3)?, created_at: r.get(4)? })
            })?;
            rows.collect()
        })
    }

    /// Appends events (one transaction for the batch), trimming each node's
    /// timeline to the newest [`EVENTS_PER_NODE`].
    fn add_events(&self, batch: &[(String, Event)]) -> Result<()> {
        self.with(|c| {
            let tx = c.transaction()?;
            for (node, e) in batch {
                tx.execute("INSERT INTO events(node, at, kind, message) VALUES(?1,?2,?3,?4)", params![node, e.at, e.kind, e.message])?;
                tx.execute(
                    "DELETE FROM events WHERE node=?1 AND id <= (SELECT id FROM events WHERE node=?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
                    params![node, EVENTS_PER_NODE],
                )?;
            }
            tx.commit()
        })
    }

    fn events(&self, node: &str) -> Result<Vec<Event>> {
        self.with(|c| {
            let mut st =
                c.prepare("SELECT at, kind, message FROM events WHERE node=?1 ORDER BY id")?;
            let rows = st.query_map([node], |r| {
                Ok(Event {
                    at: r.get(0)?,
                    kind: r.get(1)?,
                    message: r.get(2)?,
                })
            })?;
            rows.collect()
        })
    }

    /// Sets a condition; its time changes only when its status does
    /// (Cluster API's lastTransitionTime).
    fn set_condition(&self, node: &str, cond: &Condition) -> Result<()> {
        self.with(|c| upsert_condition(c, node, cond))
    }

    fn conditions(&self, node: &str) -> Result<Vec<Condition>> {
        self.with(|c| query_conditions(c, node))
    }

    /// Sets a cluster fact once; returns its (first) time.
    fn set_cluster_once(&self, key: &str, value: &str) -> Result<i64> {
        self.with(|c| {
            c.execute(
                "INSERT OR IGNORE INTO cluster(key, value, at) VALUES(?1,?2,?3)",
                params![key, value, now_ms()],
            )?;
            c.query_row("SELECT at FROM cluster WHERE key=?1", [key], |r| r.get(0))
        })
    }

    /// Sets a cluster fact, replacing what was there (with a new time when
    /// the value changes).
    fn set_cluster(&self, key: &str, value: &str) -> Result<()> {
        self.with(|c| {
            c.execute(
                "INSERT INTO cluster(key, value, at) VALUES(?1,?2,?3) \
                 ON CONFLICT(key) DO UPDATE SET value=excluded.value, at=excluded.at \
                 WHERE value != excluded.value",
                params![key, value, now_ms()],
            )
            .map(|_| ())
        })
    }

    fn cluster(&self, key: &str) -> Result<Option<(String, i64)>> {
        self.with(|c| {
            c.query_row("SELECT value, at FROM cluster WHERE key=?1", [key], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()
        })
    }

    fn clusters(&self) -> Result<Vec<(String, String, i64)>> {
        self.with(|c| {
            let mut st = c.prepare("SELECT key, value, at FROM cluster ORDER BY key")?;
            let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
            rows.collect()
        })
    }

    fn restore_cluster(&self, key: &str, value: &str, at: i64) -> Result<()> {
        self.with(|c| {
            c.execute(
                "INSERT INTO cluster(key, value, at) VALUES(?1,?2,?3) \
                 ON CONFLICT(key) DO UPDATE SET value=excluded.value, at=excluded.at",
                params![key, value, at],
            )
            .map(|_| ())
        })
    }
}

fn row_to_node(r: &rusqlite::Row<'_>) -> rusqlite::Result<NodeRow> {
    Ok(NodeRow {
        name: r.get(0)?,
        spec: json_col(r.get(1)?),
        provider: json_col(r.get(2)?),
        created_at: r.get(3)?,
        deleting: r.get(4)?,
        phase: r.get(5)?,
        message: r.get(6)?,
        updated_at: r.get(7)?,
    })
}

fn query_node(c: &Connection, name: &str) -> rusqlite::Result<Option<NodeRow>> {
    c.query_row(
        "SELECT name, spec, provider, created_at, deleting, phase, message, updated_at FROM nodes WHERE name=?1",
        [name],
        row_to_node,
    )
    .optional()
}

fn query_conditions(c: &Connection, node: &str) -> rusqlite::Result<Vec<Condition>> {
    let mut st =
        c.prepare("SELECT type, status, reason, message, at FROM conditions WHERE node=?1")?;
    let rows = st.query_map([node], |r| {
        Ok(Condition {
            kind: r.get(0)?,
            status: r.get(1)?,
            reason: r.get(2)?,
            message: r.get(3)?,
            at: r.get(4)?,
        })
    })?;
    rows.collect()
}

fn update_phase(c: &Connection, name: &str, phase: &str, message: &str) -> rusqlite::Result<()> {
    c.execute(
        "UPDATE nodes SET phase=?2, message=?3, updated_at=?4 WHERE name=?1",
        params![name, phase, message, now_ms()],
    )?;
    Ok(())
}

/// A condition's `at` moves only when its status changes.
fn upsert_condition(c: &Connection, node: &str, cond: &Condition) -> rusqlite::Result<()> {
    c.execute(
        "INSERT INTO conditions(node, type, status, reason, message, at) VALUES(?1,?2,?3,?4,?5,?6)
         ON CONFLICT(node, type) DO UPDATE SET reason=?4, message=?5,
           at=CASE WHEN conditions.status=?3 THEN conditions.at ELSE ?6 END, status=?3",
        params![
            node,
            cond.kind,
            cond.status,
            cond.reason,
            cond.message,
            cond.at
        ],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::row;

    /// An empty, truncated or foreign file is refused at open, naming the
    /// file and what to do; it is never started over as an empty store.
    #[test]
    fn a_damaged_database_is_refused_not_emptied() {
        let dir = tempfile::tempdir().unwrap();
        let s = Sqlite::open(dir.path()).unwrap();
        assert!(!dir.path().join("controller.db.new").exists());
        for i in 0..200 {
            s.insert_node(&row(&format!("n{i}"))).unwrap();
        }
        drop(s);
        let path = dir.path().join(DB_FILE);
        // Checkpointed on close: the whole store is in the file.
        let whole = std::fs::read(&path).unwrap();
        assert!(whole.len() > 8192, "{}", whole.len());
        for (what, bytes) in [
            ("empty", Vec::new()),
            ("cut in half", whole[..whole.len() / 2].to_vec()),
            ("not a database", vec![0x5a; whole.len()]),
        ] {
            std::fs::write(&path, &bytes).unwrap();
            let _ = std::fs::remove_file(dir.path().join("controller.db-wal"));
            let _ = std::fs::remove_file(dir.path().join("controller.db-shm"));
            let e = Sqlite::open(dir.path())
                .err()
                .unwrap_or_else(|| panic!("{what}: opened"))
                .to_string();
            assert!(e.contains("controller.db"), "{what}: {e}");
            assert!(e.contains("restore it from a backup"), "{what}: {e}");
            assert_eq!(
                std::fs::read(&path).unwrap(),
                bytes,
                "{what}: the file was changed"
            );
        }
    }

    /// A full disk is told apart, also under the store's error, from
    /// other failures.
    #[test]
    fn disk_full_is_told_apart() {
        let sqlite = |code| {
            rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(code),
                Some("database or disk is full".into()),
            )
        };
        let full = StoreError::Sqlite {
            path: "x/controller.db".into(),
            source: sqlite(rusqlite::ffi::SQLITE_FULL),
        };
        assert!(disk_full(&full));
        let busy = StoreError::Sqlite {
            path: "x/controller.db".into(),
            source: sqlite(rusqlite::ffi::SQLITE_BUSY),
        };
        assert!(!disk_full(&busy));
        let enospc = std::io::Error::from_raw_os_error(28);
        assert!(disk_full(&enospc));
        assert!(!disk_full(&std::io::Error::from_raw_os_error(13)));
    }
}
