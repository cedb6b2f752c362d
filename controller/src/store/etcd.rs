//! The store on etcd: every appliance of the site reads and writes the
//! same keys, under the site's prefix (`host.store.etcd.prefix`):
//!
//! | key | value |
//! |---|---|
//! | `controller/nodes/<name>` | the node's row (JSON) |
//! | `controller/conditions/<name>` | its conditions, by type (JSON) |
//! | `controller/resources/<name>` | its provider machine (JSON) |
//! | `controller/facts/<name>` | what the provider says of it (JSON) |
//! | `controller/events/<name>` | its newest events, oldest first (JSON list) |
//! | `controller/intents/<name>/<id>` | a provider call about to be made, and its outcome once made |
//! | `controller/intent-ids/<id>` | the node of intent `<id>` |
//! | `controller/intent-seq` | the last intent id handed out |
//! | `controller/cluster/<key>` | a cluster fact and its time |
//!
//! A write that depends on what is there (a condition's transition time,
//! a phase, an event list) is a compare-and-swap on the key's revision,
//! retried when another appliance wrote in between; a write of several
//! keys is one transaction; a read of several keys (a node with its
//! conditions) is one transaction too, so it sees one revision.

use super::*;
use ::etcd::{Compare, CompareOp, Transaction, TxnOp, TxnOpResponse};
use serde::de::DeserializeOwned;
use std::collections::{BTreeMap, HashMap};

/// The controller's keys on a connection to the site's etcd.
#[derive(Debug, Clone)]
pub struct Etcd {
    etcd: ::etcd::Etcd,
}

/// Attempts of a compare-and-swap before giving up: other writers of one
/// key are the few appliances of a site.
const CAS_ATTEMPTS: usize = 32;

fn node_key(name: &str) -> String {
    format!("controller/nodes/{name}")
}
fn conditions_key(name: &str) -> String {
    format!("controller/conditions/{name}")
}
fn resource_key(name: &str) -> String {
    format!("controller/resources/{name}")
}
fn facts_key(name: &str) -> String {
    format!("controller/facts/{name}")
}
fn events_key(name: &str) -> String {
    format!("controller/events/{name}")
}
fn intents_prefix(name: &str) -> String {
    format!("controller/intents/{name}/")
}
fn intent_key(name: &str, id: i64) -> String {
    // Zero-padded: keys sort as the ids do.
    format!("controller/intents/{name}/{id:020}")
}
fn intent_id_key(id: i64) -> String {
    format!("controller/intent-ids/{id:020}")
}
const INTENT_SEQ: &str = "controller/intent-seq";
fn cluster_key(key: &str) -> String {
    format!("controller/cluster/{key}")
}

/// An intent as stored: open until `outcome` is set.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredIntent {
    #[serde(flatten)]
    intent: Intent,
    done_at: Option<i64>,
    outcome: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Fact {
    value: String,
    at: i64,
}

type Conditions = BTreeMap<String, Condition>;

/// A value read and its revision.
type Read = Option<(Vec<u8>, i64)>;

impl Etcd {
    pub fn new(etcd: ::etcd::Etcd) -> Etcd {
        Etcd { etcd }
    }

    fn decode<T: DeserializeOwned>(&self, rel: &str, bytes: &[u8]) -> Result<T> {
        serde_json::from_slice(bytes).map_err(|e| StoreError::Value {
            key: self.etcd.key(rel),
            why: format!("not what bootd writes ({e}): restore it, or delete it"),
        })
    }

    fn encode<T: Serialize>(v: &T) -> Vec<u8> {
        serde_json::to_vec(v).expect("store values serialize")
    }

    /// The value at `rel` and its revision (0: absent).
    fn read<T: DeserializeOwned>(&self, rel: &str) -> Result<(Option<T>, i64)> {
        match self.etcd.get(rel)? {
            Some(v) => Ok((Some(self.decode(rel, &v.value)?), v.mod_revision)),
            None => Ok((None, 0)),
        }
    }

    fn get<T: DeserializeOwned>(&self, rel: &str) -> Result<Option<T>> {
        Ok(self.read(rel)?.0)
    }

    fn put<T: Serialize>(&self, rel: &str, v: &T) -> Result<()> {
        self.etcd.put(rel, Self::encode(v))?;
        Ok(())
    }

    /// A compare on `rel`'s revision: unchanged since it was read (`rev`,
    /// 0 for absent).
    fn unchanged(&self, rel: &str, rev: i64) -> Compare {
        Compare::mod_revision(self.etcd.key(rel), CompareOp::Equal, rev)
    }

    fn put_op<T: Serialize>(&self, rel: &str, v: &T) -> TxnOp {
        TxnOp::put(self.etcd.key(rel), Self::encode(v), None)
    }

    fn delete_op(&self, rel: &str) -> TxnOp {
        TxnOp::delete(self.etcd.key(rel), None)
    }

    /// Reads `rel`, lets `f` change it (`None`: leave it as it is), and
    /// writes it if nobody wrote it in between; else again. What `f`
    /// returned with the value written.
    fn update<T, R>(&self, rel: &str, mut f: impl FnMut(Option<T>) -> (Option<T>, R)) -> Result<R>
    where
        T: Serialize + DeserializeOwned,
    {
        for _ in 0..CAS_ATTEMPTS {
            let (old, rev) = self.read::<T>(rel)?;
            let (new, out) = f(old);
            let Some(new) = new else { return Ok(out) };
            let t = Transaction::new()
                .when([self.unchanged(rel, rev)])
                .and_then([self.put_op(rel, &new)]);
            if self
                .etcd
                .txn(&format!("update {}", self.etcd.key(rel)), t)?
                .succeeded()
            {
                return Ok(out);
            }
        }
        Err(self.contended(rel))
    }

    fn contended(&self, rel: &str) -> StoreError {
        StoreError::Value {
            key: self.etcd.key(rel),
            why: format!("changed by another writer {CAS_ATTEMPTS} times in a row: try again"),
        }
    }

    /// The values of a read-only transaction's gets, in order.
    fn read_many(&self, rels: &[&str]) -> Result<Vec<Read>> {
        let t = Transaction::new().and_then(
            rels.iter()
                .map(|r| TxnOp::get(self.etcd.key(r), None))
                .collect::<Vec<_>>(),
        );
        let r = self.etcd.txn("read", t)?;
        Ok(r.op_responses()
            .into_iter()
            .map(|op| match op {
                TxnOpResponse::Get(g) => g
                    .kvs()
                    .first()
                    .map(|kv| (kv.value().to_vec(), kv.mod_revision())),
                _ => None,
            })
            .collect())
    }

    fn list<T: DeserializeOwned>(&self, rel: &str) -> Result<Vec<(String, T)>> {
        self.etcd
            .list(rel)?
            .into_iter()
            .map(|v| Ok((v.key.clone(), self.decode(&v.key, &v.value)?)))
            .collect()
    }

    /// Merges `conds` into `have` as a condition's time moves: only when
    /// its status changes.
    fn merge(have: &mut Conditions, conds: &[Condition]) {
        for c in conds {
            let at = match have.get(&c.kind) {
                Some(old) if old.status == c.status => old.at,
                _ => c.at,
            };
            have.insert(c.kind.clone(), Condition { at, ..c.clone() });
        }
    }

    fn with_phase(row: &mut NodeRow, phase: &str, message: &str) {
        row.phase = phase.into();
        row.message = message.into();
        row.updated_at = now_ms();
    }
}

impl Backend for Etcd {
    fn insert_node(&self, row: &NodeRow) -> Result<bool> {
        let rel = node_key(&row.name);
        let t = Transaction::new()
            .when([Compare::create_revision(
                self.etcd.key(&rel),
                CompareOp::Equal,
                0,
            )])
            .and_then([self.put_op(&rel, row)]);
        Ok(self.etcd.txn("insert node", t)?.succeeded())
    }

    fn node(&self, name: &str) -> Result<Option<NodeRow>> {
        self.get(&node_key(name))
    }

    fn node_and_conditions(&self, name: &str) -> Result<(Option<NodeRow>, Vec<Condition>)> {
        let (nk, ck) = (node_key(name), conditions_key(name));
        let got = self.read_many(&[&nk, &ck])?;
        let row = match &got[0] {
            Some((b, _)) => Some(self.decode(&nk, b)?),
            None => None,
        };
        let conds: Conditions = match &got[1] {
            Some((b, _)) => self.decode(&ck, b)?,
            None => Conditions::new(),
        };
        Ok((row, conds.into_values().collect()))
    }

    fn nodes(&self) -> Result<Vec<NodeRow>> {
        // Keys sort as names do.
        Ok(self
            .list::<NodeRow>("controller/nodes/")?
            .into_iter()
            .map(|(_, r)| r)
            .collect())
    }

    fn set_phase(&self, name: &str, phase: &str, message: &str) -> Result<()> {
        self.update(&node_key(name), |row: Option<NodeRow>| {
            (
                row.map(|mut r| {
                    Self::with_phase(&mut r, phase, message);
                    r
                }),
                (),
            )
        })
    }

    fn set_phase_and_conditions(
        &self,
        name: &str,
        phase: &str,
        message: &str,
        conds: &[Condition],
    ) -> Result<()> {
        let (nk, ck) = (node_key(name), conditions_key(name));
        for _ in 0..CAS_ATTEMPTS {
            let got = self.read_many(&[&nk, &ck])?;
            let mut have: Conditions = match &got[1] {
                Some((b, _)) => self.decode(&ck, b)?,
                None => Conditions::new(),
            };
            Self::merge(&mut have, conds);
            let rev = |i: usize| got[i].as_ref().map_or(0, |(_, r)| *r);
            let mut ops = vec![self.put_op(&ck, &have)];
            if let Some((b, _)) = &got[0] {
                let mut row: NodeRow = self.decode(&nk, b)?;
                Self::with_phase(&mut row, phase, message);
                ops.push(self.put_op(&nk, &row));
            }
            let t = Transaction::new()
                .when([self.unchanged(&nk, rev(0)), self.unchanged(&ck, rev(1))])
                .and_then(ops);
            if self.etcd.txn("set phase and conditions", t)?.succeeded() {
                return Ok(());
            }
        }
        Err(self.contended(&nk))
    }

    fn mark_deleting(&self, name: &str) -> Result<bool> {
        self.update(&node_key(name), |row: Option<NodeRow>| match row {
            Some(mut r) => {
                r.deleting = true;
                Self::with_phase(&mut r, "Deleting", "");
                (Some(r), true)
            }
            None => (None, false),
        })
    }

    fn remove_node(&self, name: &str) -> Result<()> {
        let intents = self.list::<StoredIntent>(&intents_prefix(name))?;
        let mut ops = vec![
            self.delete_op(&node_key(name)),
            self.delete_op(&resource_key(name)),
            self.delete_op(&conditions_key(name)),
            self.delete_op(&events_key(name)),
            self.delete_op(&facts_key(name)),
        ];
        for (k, i) in &intents {
            ops.push(self.delete_op(k));
            ops.push(self.delete_op(&intent_id_key(i.intent.id)));
        }
        self.etcd
            .txn("remove node", Transaction::new().and_then(ops))?;
        Ok(())
    }

    fn put_facts(&self, node: &str, value: &serde_json::Value) -> Result<()> {
        self.put(&facts_key(node), value)
    }

    fn all_facts(&self) -> Result<HashMap<String, serde_json::Value>> {
        Ok(self
            .list::<serde_json::Value>("controller/facts/")?
            .into_iter()
            .map(|(k, v)| (k.trim_start_matches("controller/facts/").to_string(), v))
            .collect())
    }

    fn resource(&self, node: &str) -> Result<Option<Resource>> {
        self.get(&resource_key(node))
    }

    fn put_resource(&self, node: &str, res: &Resource) -> Result<()> {
        self.put(&resource_key(node), res)
    }

    fn drop_resource(&self, node: &str) -> Result<()> {
        self.etcd.txn(
            "drop resource",
            Transaction::new().and_then([self.delete_op(&resource_key(node))]),
        )?;
        Ok(())
    }

    fn begin_intent(&self, node: &str, op: &str, provider: &str) -> Result<Intent> {
        let at = now_ms();
        for _ in 0..CAS_ATTEMPTS {
            let (last, rev) = self.read::<i64>(INTENT_SEQ)?;
            let id = last.unwrap_or(0) + 1;
            let intent = Intent {
                id,
                node: node.into(),
                op: op.into(),
                provider: provider.into(),
                created_at: at,
            };
            let stored = StoredIntent {
                intent: intent.clone(),
                done_at: None,
                outcome: None,
            };
            let t = Transaction::new()
                .when([self.unchanged(INTENT_SEQ, rev)])
                .and_then([
                    self.put_op(INTENT_SEQ, &id),
                    self.put_op(&intent_key(node, id), &stored),
                    self.put_op(&intent_id_key(id), &node),
                ]);
            if self.etcd.txn("begin intent", t)?.succeeded() {
                return Ok(intent);
            }
        }
        Err(self.contended(INTENT_SEQ))
    }

    fn finish_intent(&self, id: i64, outcome: &str) -> Result<()> {
        let Some(node) = self.get::<String>(&intent_id_key(id))? else {
            return Ok(()); // its node was removed
        };
        self.update(&intent_key(&node, id), |i: Option<StoredIntent>| {
            (
                i.map(|mut i| {
                    i.done_at = Some(now_ms());
                    i.outcome = Some(outcome.into());
                    i
                }),
                (),
            )
        })
    }

    fn open_intents(&self, node: &str) -> Result<Vec<Intent>> {
        Ok(self
            .list::<StoredIntent>(&intents_prefix(node))?
            .into_iter()
            .filter(|(_, i)| i.done_at.is_none())
            .map(|(_, i)| i.intent)
            .collect())
    }

    fn add_events(&self, batch: &[(String, Event)]) -> Result<()> {
        let mut by_node: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
        for (n, e) in batch {
            by_node.entry(n).or_default().push(e);
        }
        for (node, events) in by_node {
            self.update(&events_key(node), |have: Option<Vec<Event>>| {
                let mut all = have.unwrap_or_default();
                all.extend(events.iter().map(|e| (*e).clone()));
                let over = all.len().saturating_sub(EVENTS_PER_NODE as usize);
                all.drain(..over);
                (Some(all), ())
            })?;
        }
        Ok(())
    }

    fn events(&self, node: &str) -> Result<Vec<Event>> {
        Ok(self.get(&events_key(node))?.unwrap_or_default())
    }

    fn set_condition(&self, node: &str, cond: &Condition) -> Result<()> {
        self.update(&conditions_key(node), |have: Option<Conditions>| {
            let mut have = have.unwrap_or_default();
            Self::merge(&mut have, std::slice::from_ref(cond));
            (Some(have), ())
        })
    }

    fn conditions(&self, node: &str) -> Result<Vec<Condition>> {
        Ok(self
            .get::<Conditions>(&conditions_key(node))?
            .unwrap_or_default()
            .into_values()
            .collect())
    }

    fn set_cluster_once(&self, key: &str, value: &str) -> Result<i64> {
        let rel = cluster_key(key);
        let fact = Fact {
            value: value.into(),
            at: now_ms(),
        };
        let t = Transaction::new()
            .when([Compare::create_revision(
                self.etcd.key(&rel),
                CompareOp::Equal,
                0,
            )])
            .and_then([self.put_op(&rel, &fact)])
            .or_else([TxnOp::get(self.etcd.key(&rel), None)]);
        let r = self.etcd.txn("set cluster fact once", t)?;
        if r.succeeded() {
            return Ok(fact.at);
        }
        for op in r.op_responses() {
            if let TxnOpResponse::Get(g) = op {
                if let Some(kv) = g.kvs().first() {
                    return Ok(self.decode::<Fact>(&rel, kv.value())?.at);
                }
            }
        }
        Err(StoreError::Value {
            key: self.etcd.key(&rel),
            why: "present, then absent: deleted meanwhile".into(),
        })
    }

    fn set_cluster(&self, key: &str, value: &str) -> Result<()> {
        self.update(&cluster_key(key), |have: Option<Fact>| match have {
            Some(f) if f.value == value => (None, ()),
            _ => (
                Some(Fact {
                    value: value.into(),
                    at: now_ms(),
                }),
                (),
            ),
        })
    }

    fn cluster(&self, key: &str) -> Result<Option<(String, i64)>> {
        Ok(self
            .get::<Fact>(&cluster_key(key))?
            .map(|f| (f.value, f.at)))
    }

    fn clusters(&self) -> Result<Vec<(String, String, i64)>> {
        Ok(self
            .list::<Fact>("controller/cluster/")?
            .into_iter()
            .map(|(k, f)| {
                let key = k.trim_start_matches("controller/cluster/").to_string();
                (key, f.value, f.at)
            })
            .collect())
    }

    fn restore_cluster(&self, key: &str, value: &str, at: i64) -> Result<()> {
        let fact = Fact {
            value: value.into(),
            at,
        };
        self.put(&cluster_key(key), &fact)
    }

    fn shared(&self) -> Option<::etcd::Etcd> {
        Some(self.etcd.clone())
    }
}
