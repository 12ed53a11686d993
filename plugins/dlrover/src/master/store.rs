//! What the master keeps in the host's state store (this plugin's namespace),
//! and how it is written and read back at start.
//!
//! | key / stream | what | written |
//! |---|---|---|
//! | `ds/<dataset>` | one dataset's shards (sharding::Dataset, JSON) | before answering any route call that changes it; on failures and timeouts |
//! | `nodes` | the nodes (type, status, given resources, relaunches, last heartbeat) | at most once a second when changed |
//! | `scaler` | the plan loop's stage and timers | after each loop pass and plan |
//! | `perf` | the global-step records | when one is appended |
//! | `misc` | OOM flag, first task result, node-check results | when changed |
//! | stream `runtime` | one runtime-statistics record per interval | each interval; trimmed to `stats_keep` |
//! | stream `plans` | every emitted plan with its reason | each plan |
//! | stream `history` | finished jobs' summaries (the Brain's history) | at the job's end or POST /history |

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::Serialize;
use serde::de::DeserializeOwned;
use sonde_plugin_sdk::types::Severity;

use super::Master;
use super::plans::RECENT_PLANS;
use crate::nodes::{Node, Status};
use crate::sharding::Dataset;
use crate::stats::PerfMonitor;
use sonde_plugin_sdk::Host;

/// Stream records read per call at start.
const READ_CHUNK: u32 = 1000;

pub(super) fn to_json<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("plugin state serializes")
}

fn get_json<T: DeserializeOwned>(host: &mut dyn Host, key: &str) -> Option<T> {
    let bytes = host.state_get(key)?;
    match serde_json::from_slice(&bytes) {
        Ok(v) => Some(v),
        Err(e) => {
            host.log(
                Severity::Warn,
                &format!("dlrover: state `{key}` is unreadable ({e}); starting it afresh"),
            );
            None
        }
    }
}

fn read_stream<T: DeserializeOwned>(host: &mut dyn Host, stream: &str, keep: usize) -> (VecDeque<T>, u64) {
    let mut out = VecDeque::new();
    let mut from = 0;
    let mut last = 0;
    loop {
        let chunk = host.state_read(stream, from, READ_CHUNK);
        let Some((seq, _)) = chunk.last() else { break };
        from = seq + 1;
        last = *seq;
        for (_, bytes) in chunk {
            if let Ok(v) = serde_json::from_slice(&bytes) {
                out.push_back(v);
                if out.len() > keep {
                    out.pop_front();
                }
            }
        }
    }
    (out, last)
}

impl Master {
    pub(super) fn restore(&mut self, host: &mut dyn Host, now: u64) {
        if let Some(nodes) = get_json::<BTreeMap<String, Node>>(host, "nodes") {
            self.nodes = nodes;
        }
        // A restarted sonde gives every node a fresh heartbeat timeout: the
        // heartbeats sent while it was down were lost, not missed.
        for n in self.nodes.values_mut() {
            if n.last_heartbeat_ns > 0 {
                n.last_heartbeat_ns = n.last_heartbeat_ns.max(now);
            }
        }
        self.apply_node_specs();
        if let Some(s) = get_json(host, "scaler") {
            self.scaler = s;
        }
        if let Some(mut p) = get_json::<PerfMonitor>(host, "perf") {
            p.keep = self.settings.perf_records as usize;
            self.perf = p;
        }
        if let Some(m) = get_json(host, "misc") {
            self.misc = m;
        }
        for key in host.state_keys("ds/") {
            if let Some(d) = get_json::<Dataset>(host, &key) {
                self.datasets.insert(d.params.dataset_name.clone(), d);
            }
        }
        // A node holding DOING shards is watched for heartbeats even if the
        // registry missed it, so a dead one's shards are re-queued.
        let holders: BTreeSet<String> = self
            .datasets
            .values()
            .flat_map(|d| d.doing.values().map(|t| t.node.clone()))
            .collect();
        for name in holders {
            let n = self.nodes.entry(name.clone()).or_insert_with(|| Node::new(&name));
            if !n.status.ended() {
                n.status = Status::Running;
                n.last_heartbeat_ns = n.last_heartbeat_ns.max(now);
                n.started_ns = n.started_ns.min(now);
            }
        }
        self.stats = read_stream(host, "runtime", self.settings.stats_keep as usize).0;
        self.plans = read_stream(host, "plans", RECENT_PLANS).0;
        self.history = read_stream(host, "history", 10_000).0.into();
    }

    pub(super) fn put(&mut self, host: &mut dyn Host, key: &str, bytes: &[u8]) -> Result<(), String> {
        host.state_put(key, bytes).map_err(|e| {
            self.counters.state_errors += 1;
            host.log(Severity::Error, &format!("dlrover: writing `{key}` failed: {e}"));
            format!("the state store refused the write: {e}")
        })
    }

    pub(super) fn put_scaler(&mut self, host: &mut dyn Host) {
        let b = to_json(&self.scaler);
        let _ = self.put(host, "scaler", &b);
    }

    pub(super) fn put_misc(&mut self, host: &mut dyn Host) {
        let b = to_json(&self.misc);
        let _ = self.put(host, "misc", &b);
    }

    /// Writes the nodes when one appeared or changed status (before a route answers).
    pub fn put_nodes_if_changed(&mut self, host: &mut dyn Host) {
        if self.nodes_dirty {
            let now = host.now();
            self.put_nodes(host, now);
        }
    }

    pub(super) fn put_nodes(&mut self, host: &mut dyn Host, now: u64) {
        let b = to_json(&self.nodes);
        if self.put(host, "nodes", &b).is_ok() {
            self.nodes_dirty = false;
            self.last_nodes_put_ns = now;
        }
    }

    /// Writes a dataset, then keeps it: the in-memory state never runs ahead
    /// of what a restart would find.
    pub fn commit_dataset(&mut self, host: &mut dyn Host, d: Dataset) -> Result<(), String> {
        let key = format!("ds/{}", d.params.dataset_name);
        self.put(host, &key, &to_json(&d))?;
        self.datasets.insert(d.params.dataset_name.clone(), d);
        Ok(())
    }
}
