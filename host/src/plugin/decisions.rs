//! The decision board: the latest decision of each plugin per (kind,
//! subject), and among them each job's **findings**, which outlive a restart.
//!
//! ```text
//!  plugin thread ──emit-decision──► DecisionBoard::record_at ──► listeners (live stream, in-process agent)
//!                                      │ latest per (plugin, kind, subject), ≤ 10 000
//!                                      │ a job's decision (attribute sonde.job) ─► writer thread ─► state store
//!  GET /api/decisions[?job=] ◄─────────┤                                          (namespace "@findings")
//!  GET /api/jobs/{job} .findings ◄─────┘  DecisionBoard::persist_to reads them back at start
//! ```
//!
//! A decision is a job's finding when its attributes name the job
//! (`sonde.job`); the `sonde.finding.*` attributes say what it is about and
//! when (the convention is written down in the WIT file, beside `decision`).
//! The host reads only these generic keys: it names no plugin, and a page
//! about one job shows that job's findings and no other's.
//!
//! Limits: 10 000 entries (a new subject past it is dropped, counted in the
//! log); a job's decision is written to disk by one thread, in order, so a
//! plugin's call never waits on a disk; writes that fail are logged and the
//! entry stays in memory.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::mpsc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::bindings::types::{self, Value};
use crate::state::PluginState;

/// (plugin, kind, subject)
type DecisionKey = (String, String, String);

/// The state store's namespace for findings: `@` cannot start a plugin's
/// name (a plugin's file name), so no plugin can read or overwrite them.
pub const FINDINGS_NAMESPACE: &str = "@findings";

/// Called for every decision as it is recorded (on the plugin's thread: keep it short).
pub type DecisionListener = Arc<dyn Fn(&DecisionEntry) + Send + Sync>;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DecisionEntry {
    pub plugin: String,
    pub kind: String,
    pub subject: String,
    pub reason: String,
    pub body: serde_json::Value,
    pub time_ns: u64,
    /// The job it is about (attribute `sonde.job`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// What in the job it is about, and when (attributes `sonde.finding.*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finding: Option<Finding>,
}

/// A finding's place in its job: what it is about, over which time, whether
/// it still holds, and whether it answers "why is this job slow" (the
/// sentence a job's page opens with).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Finding {
    /// `job`, `rank`, `node`, `stage`, `link`, `op` (operation kind), or
    /// another word a plugin chose.
    pub about: String,
    /// Which one: the rank's number, the node's name, ...; empty for the job.
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ns: Option<u64>,
    /// The condition it describes is over (the job ended, the rank caught up).
    pub ended: bool,
    pub headline: bool,
}

impl Finding {
    /// The `sonde.finding.*` attributes of a decision; `None` without `sonde.finding.about`.
    fn from_attributes(attrs: &[types::Attribute]) -> Option<Finding> {
        let get = |k: &str| attrs.iter().find(|a| a.key == k).map(|a| &a.value);
        let text = |k: &str| match get(k) {
            Some(Value::Str(s)) => Some(s.clone()),
            Some(Value::Int(i)) => Some(i.to_string()),
            _ => None,
        };
        let time = |k: &str| match get(k) {
            Some(Value::Int(i)) if *i >= 0 => Some(*i as u64),
            _ => None,
        };
        let flag = |k: &str| matches!(get(k), Some(Value::Boolean(true)));
        Some(Finding {
            about: text("sonde.finding.about")?,
            id: text("sonde.finding.id").unwrap_or_default(),
            start_ns: time("sonde.finding.start_ns"),
            end_ns: time("sonde.finding.end_ns"),
            ended: flag("sonde.finding.ended"),
            headline: flag("sonde.finding.headline"),
        })
    }
}

fn job_of(attrs: &[types::Attribute]) -> Option<String> {
    attrs
        .iter()
        .find(|a| a.key == "sonde.job")
        .and_then(|a| match &a.value {
            Value::Str(s) if !s.is_empty() => Some(s.clone()),
            _ => None,
        })
}

/// The latest decision per (plugin, kind, subject), for the API and dashboard.
#[derive(Clone, Default)]
pub struct DecisionBoard {
    inner: Arc<Mutex<BTreeMap<DecisionKey, DecisionEntry>>>,
    listeners: Arc<Mutex<Vec<DecisionListener>>>,
    /// Where a job's decisions are written (see `persist_to`).
    writer: Arc<Mutex<Option<Writer>>>,
}

/// The thread that writes a job's decisions, and its queue: (key, JSON).
struct Writer {
    queue: mpsc::Sender<(String, Vec<u8>)>,
    thread: std::thread::JoinHandle<()>,
}

impl DecisionBoard {
    const MAX: usize = 10_000;

    /// Keeps every job's decisions in `store` from now on, and takes back
    /// those kept there before (a restart). Returns how many came back.
    pub fn persist_to(&self, store: PluginState) -> usize {
        let mut restored = 0;
        match store.keys("") {
            Ok(keys) => {
                let mut m = self.inner.lock();
                for key in keys {
                    let entry = store
                        .get(&key)
                        .ok()
                        .flatten()
                        .and_then(|v| serde_json::from_slice::<DecisionEntry>(&v).ok());
                    let Some(e) = entry else {
                        tracing::warn!(key, "a kept finding cannot be read; left out");
                        continue;
                    };
                    if m.len() < Self::MAX {
                        m.insert((e.plugin.clone(), e.kind.clone(), e.subject.clone()), e);
                        restored += 1;
                    }
                }
            }
            Err(e) => tracing::warn!("cannot read the kept findings: {e:#}"),
        }
        let (queue, rx) = mpsc::channel::<(String, Vec<u8>)>();
        let spawned = std::thread::Builder::new()
            .name("sonde-findings".into())
            .spawn(move || {
                for (key, value) in rx {
                    if let Err(e) = store.put(&key, &value) {
                        tracing::warn!(key, "keeping a finding failed (it stays in memory): {e:#}");
                    }
                }
            });
        match spawned {
            Ok(thread) => *self.writer.lock() = Some(Writer { queue, thread }),
            Err(e) => tracing::warn!("findings are not kept across restarts: {e}"),
        }
        restored
    }

    pub fn record(&self, plugin: &str, d: &types::Decision) {
        self.record_at(plugin, d, crate::model::now_ns());
    }

    /// The same, made at `time_ns` (the plugin's clock).
    pub fn record_at(&self, plugin: &str, d: &types::Decision, time_ns: u64) {
        let body = serde_json::from_str(&d.body).unwrap_or_else(|_| serde_json::Value::String(d.body.clone()));
        let entry = DecisionEntry {
            plugin: plugin.to_string(),
            kind: d.kind.clone(),
            subject: d.subject.clone(),
            reason: d.reason.clone(),
            body,
            time_ns,
            job: job_of(&d.attributes),
            finding: Finding::from_attributes(&d.attributes),
        };
        let listeners = self.listeners.lock().clone();
        for l in &listeners {
            l(&entry);
        }
        let key = (plugin.to_string(), d.kind.clone(), d.subject.clone());
        if entry.job.is_some()
            && let Some(w) = self.writer.lock().as_ref()
            && let Ok(value) = serde_json::to_vec(&entry)
        {
            // The key is the JSON of (plugin, kind, subject): any names, one key each.
            let _ = w.queue.send((serde_json::to_string(&key).unwrap_or_default(), value));
        }
        let mut m = self.inner.lock();
        if m.len() >= Self::MAX && !m.contains_key(&key) {
            return;
        }
        m.insert(key, entry);
    }

    /// Stops keeping decisions, once every one recorded so far is on disk
    /// (at shutdown: the store can then be closed).
    pub fn close(&self) {
        let writer = self.writer.lock().take();
        if let Some(Writer { queue, thread }) = writer {
            drop(queue);
            let _ = thread.join();
        }
    }

    /// Registers `f` to see every decision from now on.
    pub fn listen(&self, f: DecisionListener) {
        self.listeners.lock().push(f);
    }

    pub fn list(&self, plugin: Option<&str>) -> Vec<DecisionEntry> {
        self.inner
            .lock()
            .values()
            .filter(|e| plugin.is_none_or(|p| e.plugin == p))
            .cloned()
            .collect()
    }

    /// One job's decisions: its headline findings first, then the findings
    /// that still hold, the newest first within each.
    pub fn of_job(&self, job: &str) -> Vec<DecisionEntry> {
        let mut v: Vec<DecisionEntry> = self
            .inner
            .lock()
            .values()
            .filter(|e| e.job.as_deref() == Some(job))
            .cloned()
            .collect();
        let rank = |e: &DecisionEntry| match &e.finding {
            Some(f) if f.headline && !f.ended => 0,
            Some(f) if !f.ended => 1,
            None => 2,
            Some(_) => 3,
        };
        v.sort_by(|a, b| rank(a).cmp(&rank(b)).then(b.time_ns.cmp(&a.time_ns)));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::StateStore;

    fn decision(job: Option<&str>, kind: &str, subject: &str, finding: &[(&str, Value)]) -> types::Decision {
        let mut attributes: Vec<types::Attribute> = finding
            .iter()
            .map(|(k, v)| types::Attribute {
                key: k.to_string(),
                value: v.clone(),
            })
            .collect();
        if let Some(j) = job {
            attributes.push(types::Attribute {
                key: "sonde.job".into(),
                value: Value::Str(j.into()),
            });
        }
        types::Decision {
            kind: kind.into(),
            subject: subject.into(),
            reason: format!("{kind} of {subject}"),
            body: "{\"evidence\": 1}".into(),
            attributes,
        }
    }

    #[test]
    fn a_job_sees_its_own_findings_headline_first_and_they_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        {
            let store = StateStore::open(&path).unwrap();
            let board = DecisionBoard::default();
            assert_eq!(board.persist_to(store.namespace(FINDINGS_NAMESPACE)), 0);
            let rank = |id: i64, headline: bool| {
                vec![
                    ("sonde.finding.about", Value::Str("rank".into())),
                    ("sonde.finding.id", Value::Int(id)),
                    ("sonde.finding.start_ns", Value::Int(1_000)),
                    ("sonde.finding.headline", Value::Boolean(headline)),
                ]
            };
            board.record_at("diag", &decision(Some("a"), "verdict", "a/rank-1", &rank(1, false)), 10);
            board.record_at("diag", &decision(Some("a"), "straggler", "a", &rank(2, true)), 5);
            board.record_at("diag", &decision(Some("b"), "straggler", "b", &rank(0, true)), 7);
            board.record_at("other", &decision(None, "plan", "cluster", &[]), 8);
            let a = board.of_job("a");
            assert_eq!(
                a.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(),
                ["straggler", "verdict"]
            );
            let f = a[0].finding.as_ref().unwrap();
            assert_eq!(
                (f.about.as_str(), f.id.as_str(), f.headline, f.start_ns),
                ("rank", "2", true, Some(1_000))
            );
            assert_eq!(board.of_job("b").len(), 1);
            assert_eq!(board.list(None).len(), 4);
            board.close();
        }
        let store = StateStore::open(&path).unwrap();
        let board = DecisionBoard::default();
        assert_eq!(
            board.persist_to(store.namespace(FINDINGS_NAMESPACE)),
            3,
            "the three job decisions"
        );
        let a = board.of_job("a");
        assert_eq!(a.len(), 2);
        assert_eq!(a[0].reason, "straggler of a");
        assert_eq!(a[0].body["evidence"], 1);
        assert!(board.list(Some("other")).is_empty(), "a decision of no job is not kept");
    }
}
