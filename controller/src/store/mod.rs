//! The controller's persistent store, behind one interface ([`Backend`])
//! with two implementations, chosen by the site's `host.store`:
//!
//! - [`sqlite`]: SQLite in `<stateDir>/controller.db`, one appliance (the
//!   default);
//! - [`etcd`]: keys under the site's prefix in an etcd cluster, shared by
//!   every appliance of the site.
//!
//! Both pass the same tests (`tests.rs`). Every method is one short
//! transaction, synchronous, never held across an await: on SQLite a
//! commit (fsync), on etcd a round trip to a Raft quorum.
//!
//! Invariant: the store is the source of truth for API nodes; the overlay
//! file (`nodes.yaml`) is an export of it, rewritten from it on start.

mod copy;
pub mod etcd;
pub mod sqlite;

pub use copy::{copy, Copied};
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub use sqlite::DB_FILE;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("controller store {path}: {source}")]
    Sqlite {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("controller store: {0}")]
    Etcd(#[from] ::etcd::Error),
    /// A value in etcd that is not what the controller wrote.
    #[error("controller store: etcd key {key}: {why}")]
    Value { key: String, why: String },
    /// A file in bootd's state directory the controller writes beside its
    /// store (a release mark).
    #[error("state directory: {0}")]
    State(#[from] std::io::Error),
}

impl StoreError {
    /// The shared store cannot be reached or has no quorum: nothing was
    /// stored, and the same request may succeed later.
    pub fn unavailable(&self) -> bool {
        matches!(self, StoreError::Etcd(e) if e.unavailable())
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// Whether `e`, or an error under it, is a full disk: SQLite's
/// `SQLITE_FULL`, or ENOSPC / EDQUOT from a file write.
pub fn disk_full(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(e) = cur {
        if let Some(rusqlite::Error::SqliteFailure(f, _)) = e.downcast_ref::<rusqlite::Error>() {
            if f.code == rusqlite::ErrorCode::DiskFull {
                return true;
            }
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::StorageFull
                || io.kind() == std::io::ErrorKind::QuotaExceeded
            {
                return true;
            }
        }
        cur = e.source();
    }
    false
}

/// Whether `e`, or an error under it, is the shared store being
/// unreachable or without quorum.
pub fn unavailable(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(e) = cur {
        if let Some(s) = e.downcast_ref::<StoreError>() {
            return s.unavailable();
        }
        if let Some(s) = e.downcast_ref::<::etcd::Error>() {
            return s.unavailable();
        }
        cur = e.source();
    }
    false
}

/// Unix milliseconds.
pub fn now_ms() -> i64 {
    runtime::clock::unix_ms()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRow {
    pub name: String,
    /// The node in the site's wire format (JSON).
    pub spec: serde_json::Value,
    /// The provider spec as given (JSON), `null` for none.
    pub provider: serde_json::Value,
    pub created_at: i64,
    pub deleting: bool,
    pub phase: String,
    pub message: String,
    pub updated_at: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resource {
    pub provider: String,
    pub external_id: String,
    pub state: String,
    pub addresses: Vec<String>,
    pub updated_at: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Intent {
    pub id: i64,
    pub node: String,
    pub op: String,
    pub provider: String,
    pub created_at: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub at: i64,
    pub kind: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    pub at: i64,
}

/// Events kept per node; older ones are dropped (a looping machine must not
/// grow the store without bound).
pub const EVENTS_PER_NODE: i64 = 500;

/// What the controller keeps. Every method is one transaction: a reader
/// never sees half of a write.
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Inserts a node; `false` if one of that name exists (nothing changed).
    fn insert_node(&self, row: &NodeRow) -> Result<bool>;
    fn node(&self, name: &str) -> Result<Option<NodeRow>>;
    /// A node's row and its conditions, read together: what the API shows
    /// (a write of phase and condition between two reads would mix states).
    fn node_and_conditions(&self, name: &str) -> Result<(Option<NodeRow>, Vec<Condition>)>;
    /// Every node, by name.
    fn nodes(&self) -> Result<Vec<NodeRow>>;
    fn set_phase(&self, name: &str, phase: &str, message: &str) -> Result<()>;
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
    ) -> Result<()>;
    /// Marks a node for deletion (phase `Deleting`). `false` if there is no
    /// such node.
    fn mark_deleting(&self, name: &str) -> Result<bool>;
    /// Removes a node and everything about it (after its machine is gone);
    /// its open intents are closed.
    fn remove_node(&self, name: &str) -> Result<()>;
    /// Records what the provider says of a node's machine (JSON).
    fn put_facts(&self, node: &str, value: &serde_json::Value) -> Result<()>;
    /// Every node's recorded provider facts.
    fn all_facts(&self) -> Result<std::collections::HashMap<String, serde_json::Value>>;
    fn resource(&self, node: &str) -> Result<Option<Resource>>;
    fn put_resource(&self, node: &str, res: &Resource) -> Result<()>;
    fn drop_resource(&self, node: &str) -> Result<()>;
    /// Records (and commits) that a provider call is about to be made.
    fn begin_intent(&self, node: &str, op: &str, provider: &str) -> Result<Intent>;
    fn finish_intent(&self, id: i64, outcome: &str) -> Result<()>;
    /// Intents recorded but never closed: a crash came between the record
    /// and the provider's reply. Oldest first.
    fn open_intents(&self, node: &str) -> Result<Vec<Intent>>;
    /// Appends events (one transaction per node), trimming each node's
    /// timeline to the newest [`EVENTS_PER_NODE`].
    fn add_events(&self, batch: &[(String, Event)]) -> Result<()>;
    /// A node's events, oldest first.
    fn events(&self, node: &str) -> Result<Vec<Event>>;
    /// Sets a condition; its time changes only when its status does
    /// (Cluster API's lastTransitionTime).
    fn set_condition(&self, node: &str, cond: &Condition) -> Result<()>;
    fn conditions(&self, node: &str) -> Result<Vec<Condition>>;
    /// Sets a cluster fact once; returns its (first) time.
    fn set_cluster_once(&self, key: &str, value: &str) -> Result<i64>;
    /// Sets a cluster fact, replacing what was there (with a new time when
    /// the value changes).
    fn set_cluster(&self, key: &str, value: &str) -> Result<()>;
    fn cluster(&self, key: &str) -> Result<Option<(String, i64)>>;
    /// Every cluster fact: key, value, time (for a copy to another store).
    fn clusters(&self) -> Result<Vec<(String, String, i64)>>;
    /// Sets a cluster fact with its time as it was (a copy from another store).
    fn restore_cluster(&self, key: &str, value: &str, at: i64) -> Result<()>;
    /// The etcd connection when the store is shared by several appliances.
    fn shared(&self) -> Option<::etcd::Etcd> {
        None
    }
}

/// The store the site chose.
#[derive(Debug)]
pub struct Store(Box<dyn Backend>);

impl std::ops::Deref for Store {
    type Target = dyn Backend;
    fn deref(&self) -> &(dyn Backend + 'static) {
        &*self.0
    }
}

impl Store {
    /// The site's store: SQLite in `state_dir`, or etcd.
    pub fn open(state_dir: &Path, choice: &site::Store) -> Result<Store> {
        match choice {
            site::Store::Sqlite => Self::sqlite(state_dir),
            site::Store::Etcd(e) => {
                let etcd = ::etcd::Etcd::connect(&::etcd::Config::from_site(e))?;
                Ok(Store(Box::new(etcd::Etcd::new(etcd))))
            }
        }
    }

    pub fn sqlite(state_dir: &Path) -> Result<Store> {
        Ok(Store(Box::new(sqlite::Sqlite::open(state_dir)?)))
    }

    pub fn with(backend: impl Backend + 'static) -> Store {
        Store(Box::new(backend))
    }
}
