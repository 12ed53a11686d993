//! Nodes as first-class things on a master: every machine heard from, when,
//! running what, and whether it is still there.
//!
//! ```text
//!  IngestHub ──(every accepted report)──► NodeRegistry::observe
//!     any report naming a node (resource host.name): last seen
//!     `sonde.agent.heartbeat` events: version, plugins, health, clock, instance
//!  every 500 ms ──► NodeRegistry::tick ──► transitions (lost, back,
//!     duplicate name, clock skew) ──► decisions (log records) + node events
//!  GET /api/cluster/nodes ◄── NodeRegistry::list
//! ```
//! - **lost / back**: a node whose own sonde (an agent's telemetry, which
//!   names no job) is not heard from for `cluster.node_timeout_ms` (default
//!   3 export intervals) is `lost`; the next report makes it `back`, after
//!   the outage as observed (from its last report before, to this one). A
//!   node only jobs name has no sonde to lose: when its jobs end it goes
//!   quiet, which is an ending, not a failure.
//! - **clock skew**: heartbeat send time minus the master's receive time; past
//!   `cluster.max_clock_skew_ms` the node is flagged. Its points keep their
//!   own timestamps: the skew is shown, never silently corrected.
//! - **duplicate names**: two processes (heartbeat instance ids) taking turns
//!   under one node name. A restarted agent is not a duplicate: its old
//!   instance never sends again after the new one started.
//! - Limits: `cluster.max_nodes` nodes, 8 instances per node; a new node past
//!   the limit is refused and counted (`nodes_refused`).

use std::collections::BTreeMap;

use parking_lot::Mutex;
use serde::Serialize;

use super::heartbeat::{AgentHeartbeat, HEARTBEAT_EVENT};
use crate::ingest::{Report, ReportTap};
use crate::model::now_ns;

const MAX_INSTANCES: usize = 8;

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    Up,
    Lost,
}

/// A change worth a decision record.
#[derive(Clone, Debug, PartialEq)]
pub enum Transition {
    Lost { node: String, silent_ms: u64 },
    Back { node: String, lost_ms: u64 },
    DuplicateName { node: String, instances: Vec<String> },
    ClockSkew { node: String, skew_ms: i64 },
}

impl Transition {
    /// The decision's event name.
    pub fn event_name(&self) -> &'static str {
        match self {
            Transition::Lost { .. } => "sonde.cluster.node_lost",
            Transition::Back { .. } => "sonde.cluster.node_back",
            Transition::DuplicateName { .. } => "sonde.cluster.duplicate_node_name",
            Transition::ClockSkew { .. } => "sonde.cluster.clock_skew",
        }
    }

    pub fn node(&self) -> &str {
        match self {
            Transition::Lost { node, .. }
            | Transition::Back { node, .. }
            | Transition::DuplicateName { node, .. }
            | Transition::ClockSkew { node, .. } => node,
        }
    }

    /// A whole sentence, for the log.
    pub fn describe(&self) -> String {
        let node = self.node();
        match self {
            Transition::Lost { .. } => format!("node {node} lost: {}", self.reason()),
            Transition::Back { .. } => format!("node {node} back: {}", self.reason()),
            Transition::DuplicateName { .. } => format!("node name {node} is {}", self.reason()),
            Transition::ClockSkew { .. } => format!("node {node}'s clock is {}", self.reason()),
        }
    }

    /// The why of the decision, without the node (its subject, which the
    /// dashboard's sentence already names).
    pub fn reason(&self) -> String {
        match self {
            Transition::Lost { silent_ms, .. } => {
                format!("nothing heard for {:.1} s", *silent_ms as f64 / 1e3)
            }
            Transition::Back { lost_ms, .. } => format!("lost for {:.1} s", *lost_ms as f64 / 1e3),
            Transition::DuplicateName { instances, .. } => format!(
                "used by {} processes at once ({}): give each machine its own host.name",
                instances.len(),
                instances.join(", ")
            ),
            Transition::ClockSkew { skew_ms, .. } => format!(
                "{:.1} s {} the master's; its points keep their own timestamps",
                skew_ms.unsigned_abs() as f64 / 1e3,
                if *skew_ms > 0 { "ahead of" } else { "behind" }
            ),
        }
    }
}

#[derive(Clone, Debug)]
struct Node {
    first_seen_ns: u64,
    last_seen_ns: u64,
    state: NodeState,
    /// A sonde of its own reported from it (telemetry with no job): only
    /// then can it be lost.
    own: bool,
    reports: u64,
    rows: u64,
    heartbeat: Option<AgentHeartbeat>,
    last_heartbeat_ns: u64,
    /// instance id → (first, last heartbeat), master clock.
    instances: BTreeMap<String, (u64, u64)>,
    duplicate: bool,
    skew_ms: Option<i64>,
    skewed: bool,
    transitions: u64,
}

/// What `GET /api/cluster/nodes` shows about one node.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct NodeView {
    pub node: String,
    pub state: NodeState,
    pub first_seen_ns: u64,
    pub last_seen_ns: u64,
    /// Milliseconds since the node was last heard from.
    pub silent_ms: u64,
    /// True when a sonde agent runs there (it sends heartbeats); false for a
    /// node only named by what jobs or collectors sent.
    pub agent: bool,
    pub version: Option<String>,
    pub plugins: Vec<String>,
    /// Plugins in quarantine or failing to load.
    pub unhealthy: Vec<String>,
    pub health: &'static str,
    pub clock_skew_ms: Option<i64>,
    pub clock_skewed: bool,
    /// Two or more processes report under this node name.
    pub duplicate_name: bool,
    pub instances: Vec<String>,
    pub reports: u64,
    pub rows: u64,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct NodeStats {
    pub nodes: usize,
    pub up: usize,
    pub lost: usize,
    /// New nodes refused past `cluster.max_nodes`.
    pub nodes_refused: u64,
}

pub struct NodeRegistry {
    inner: Mutex<Nodes>,
    timeout_ns: u64,
    max_skew_ms: i64,
    max_nodes: usize,
}

#[derive(Default)]
struct Nodes {
    map: BTreeMap<String, Node>,
    pending: Vec<Transition>,
    refused: u64,
}

impl NodeRegistry {
    pub fn new(timeout_ms: u64, max_skew_ms: u64, max_nodes: usize) -> Self {
        NodeRegistry {
            inner: Mutex::new(Nodes::default()),
            timeout_ns: timeout_ms.saturating_mul(1_000_000),
            max_skew_ms: max_skew_ms as i64,
            max_nodes: max_nodes.max(1),
        }
    }

    /// Takes reports received at `now` (master clock).
    pub fn observe_at(&self, reports: &[Report], now: u64) {
        let mut n = self.inner.lock();
        for r in reports.iter().filter(|r| !r.origin.node.is_empty()) {
            let nodes = &mut *n;
            if !nodes.map.contains_key(&r.origin.node) && nodes.map.len() >= self.max_nodes {
                nodes.refused += 1;
                continue;
            }
            let node = nodes.map.entry(r.origin.node.clone()).or_insert_with(|| Node {
                first_seen_ns: now,
                last_seen_ns: now,
                state: NodeState::Up,
                own: false,
                reports: 0,
                rows: 0,
                heartbeat: None,
                last_heartbeat_ns: 0,
                instances: BTreeMap::new(),
                duplicate: false,
                skew_ms: None,
                skewed: false,
                transitions: 0,
            });
            let silent_since = node.last_seen_ns;
            node.last_seen_ns = node.last_seen_ns.max(now);
            node.reports += 1;
            node.rows += r.rows() as u64;
            node.own |= r.origin.job.is_empty();
            if node.state == NodeState::Lost {
                node.state = NodeState::Up;
                node.transitions += 1;
                nodes.pending.push(Transition::Back {
                    node: r.origin.node.clone(),
                    lost_ms: now.saturating_sub(silent_since) / 1_000_000,
                });
            }
            for e in r.custom.iter().filter(|e| e.name == HEARTBEAT_EVENT) {
                let Ok(hb) = serde_json::from_str::<AgentHeartbeat>(&e.body) else {
                    continue;
                };
                let name = &r.origin.node;
                // Duplicate: another instance sent a heartbeat since this one's last.
                let previous = node.instances.get(&hb.instance).map(|(_, last)| *last);
                if let Some(prev) = previous {
                    let interleaved = node
                        .instances
                        .iter()
                        .any(|(id, (_, last))| *id != hb.instance && *last > prev);
                    if interleaved && !node.duplicate {
                        node.duplicate = true;
                        nodes.pending.push(Transition::DuplicateName {
                            node: name.clone(),
                            instances: node.instances.keys().cloned().collect(),
                        });
                    }
                }
                if previous.is_none() && node.instances.len() >= MAX_INSTANCES {
                    // Keep the most recent ones.
                    if let Some(old) = node
                        .instances
                        .iter()
                        .min_by_key(|(_, (_, l))| *l)
                        .map(|(k, _)| k.clone())
                    {
                        node.instances.remove(&old);
                    }
                }
                node.instances.entry(hb.instance.clone()).or_insert((now, now)).1 = now;
                let skew = (hb.sent_ns as i128 - now as i128) / 1_000_000;
                let skew = skew.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
                node.skew_ms = Some(skew);
                let skewed = skew.abs() > self.max_skew_ms;
                if skewed && !node.skewed {
                    nodes.pending.push(Transition::ClockSkew {
                        node: name.clone(),
                        skew_ms: skew,
                    });
                }
                node.skewed = skewed;
                node.last_heartbeat_ns = now;
                node.heartbeat = Some(hb);
            }
        }
    }

    /// Marks silent nodes lost and returns every transition since the last tick.
    pub fn tick(&self, now: u64) -> Vec<Transition> {
        let mut n = self.inner.lock();
        let nodes = &mut *n;
        for (name, node) in nodes.map.iter_mut() {
            let silent = now.saturating_sub(node.last_seen_ns);
            if node.own && node.state == NodeState::Up && silent > self.timeout_ns {
                node.state = NodeState::Lost;
                node.transitions += 1;
                nodes.pending.push(Transition::Lost {
                    node: name.clone(),
                    silent_ms: silent / 1_000_000,
                });
            }
            // An instance silent past the timeout is gone: a name shared
            // with a process that stopped is no longer a duplicate.
            node.instances
                .retain(|_, (_, last)| now.saturating_sub(*last) <= self.timeout_ns);
            if node.instances.len() <= 1 {
                node.duplicate = false;
            }
        }
        std::mem::take(&mut nodes.pending)
    }

    pub fn list_at(&self, now: u64) -> Vec<NodeView> {
        let n = self.inner.lock();
        n.map
            .iter()
            .map(|(name, node)| {
                let hb = node.heartbeat.as_ref();
                let unhealthy = hb.map(|h| h.unhealthy.clone()).unwrap_or_default();
                NodeView {
                    node: name.clone(),
                    state: node.state,
                    first_seen_ns: node.first_seen_ns,
                    last_seen_ns: node.last_seen_ns,
                    silent_ms: now.saturating_sub(node.last_seen_ns) / 1_000_000,
                    agent: hb.is_some(),
                    version: hb.map(|h| h.version.clone()),
                    plugins: hb.map(|h| h.plugins.clone()).unwrap_or_default(),
                    health: match (node.state, unhealthy.is_empty()) {
                        (NodeState::Lost, _) => "lost",
                        (NodeState::Up, true) => "ok",
                        (NodeState::Up, false) => "degraded",
                    },
                    unhealthy,
                    clock_skew_ms: node.skew_ms,
                    clock_skewed: node.skewed,
                    duplicate_name: node.duplicate,
                    instances: node.instances.keys().cloned().collect(),
                    reports: node.reports,
                    rows: node.rows,
                }
            })
            .collect()
    }

    pub fn list(&self) -> Vec<NodeView> {
        self.list_at(now_ns())
    }

    pub fn stats(&self) -> NodeStats {
        let n = self.inner.lock();
        let lost = n.map.values().filter(|x| x.state == NodeState::Lost).count();
        NodeStats {
            nodes: n.map.len(),
            up: n.map.len() - lost,
            lost,
            nodes_refused: n.refused,
        }
    }
}

impl ReportTap for NodeRegistry {
    fn observe(&self, reports: &[Report]) {
        self.observe_at(reports, now_ns());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::{CustomEvent, Origin};

    const S: u64 = 1_000_000_000;

    fn from(node: &str) -> Report {
        Report {
            origin: Origin {
                node: node.into(),
                ..Default::default()
            },
            heartbeats: vec![1],
            ..Default::default()
        }
    }

    fn heartbeat(node: &str, instance: &str, sent_ns: u64) -> Report {
        let hb = AgentHeartbeat {
            version: "0.1.0".into(),
            instance: instance.into(),
            plugins: vec!["sampler".into()],
            sent_ns,
            period_ms: 1000,
            ..Default::default()
        };
        Report {
            origin: Origin {
                node: node.into(),
                ..Default::default()
            },
            custom: vec![CustomEvent {
                time: sent_ns,
                name: HEARTBEAT_EVENT.into(),
                body: serde_json::to_string(&hb).unwrap(),
                attributes: vec![],
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_silent_node_is_lost_then_back() {
        let reg = NodeRegistry::new(3_000, 2_000, 16);
        reg.observe_at(&[from("a"), from("b")], 10 * S);
        assert!(reg.tick(12 * S).is_empty());
        reg.observe_at(&[from("a")], 12 * S);
        let t = reg.tick(14 * S);
        assert_eq!(
            t,
            vec![Transition::Lost {
                node: "b".into(),
                silent_ms: 4_000
            }]
        );
        assert_eq!(reg.stats().lost, 1);
        assert!(reg.tick(15 * S).is_empty(), "lost is said once");
        reg.observe_at(&[from("a"), from("b")], 20 * S);
        assert_eq!(
            reg.tick(20 * S),
            vec![Transition::Back {
                node: "b".into(),
                lost_ms: 10_000
            }],
            "the outage as observed: from its last report at 10 s"
        );
        let views = reg.list_at(20 * S);
        assert!(views.iter().all(|v| v.state == NodeState::Up));
    }

    #[test]
    fn a_node_only_a_job_named_is_never_lost() {
        let reg = NodeRegistry::new(3_000, 2_000, 16);
        let mut job = from("vm");
        job.origin.job = "mpi-1".into();
        reg.observe_at(&[job, from("a")], 10 * S);
        reg.observe_at(&[from("a")], 20 * S);
        assert!(
            reg.tick(20 * S).is_empty(),
            "the job ended: its node goes quiet, not lost"
        );
        assert_eq!(reg.stats().lost, 0);
    }

    #[test]
    fn clock_skew_is_measured_and_flagged_once() {
        let reg = NodeRegistry::new(3_000, 2_000, 16);
        reg.observe_at(&[heartbeat("a", "i1", 110 * S)], 100 * S);
        let t = reg.tick(100 * S);
        assert_eq!(
            t,
            vec![Transition::ClockSkew {
                node: "a".into(),
                skew_ms: 10_000
            }]
        );
        reg.observe_at(&[heartbeat("a", "i1", 111 * S)], 101 * S);
        assert!(reg.tick(101 * S).is_empty());
        let v = &reg.list_at(101 * S)[0];
        assert_eq!(v.clock_skew_ms, Some(10_000));
        assert!(v.clock_skewed && v.agent);
        assert_eq!(v.version.as_deref(), Some("0.1.0"));
        assert_eq!(v.plugins, vec!["sampler"]);
    }

    #[test]
    fn two_processes_under_one_name_are_a_duplicate_a_restart_is_not() {
        let reg = NodeRegistry::new(3_000, 2_000, 16);
        // A restart: old instance stops, new one starts.
        reg.observe_at(&[heartbeat("a", "old", 10 * S)], 10 * S);
        reg.observe_at(&[heartbeat("a", "new", 11 * S)], 11 * S);
        reg.observe_at(&[heartbeat("a", "new", 12 * S)], 12 * S);
        assert!(reg.tick(12 * S).is_empty());
        // Two at once: they take turns.
        reg.observe_at(&[heartbeat("b", "x", 10 * S)], 10 * S);
        reg.observe_at(&[heartbeat("b", "y", 10 * S + 1)], 10 * S + 1);
        reg.observe_at(&[heartbeat("b", "x", 11 * S)], 11 * S);
        let t = reg.tick(11 * S);
        assert_eq!(t.len(), 1);
        assert!(matches!(&t[0], Transition::DuplicateName { node, instances } if node == "b" && instances.len() == 2));
        assert!(
            reg.list_at(11 * S)
                .iter()
                .find(|v| v.node == "b")
                .unwrap()
                .duplicate_name
        );
    }

    #[test]
    fn nodes_past_the_limit_are_refused_and_counted() {
        let reg = NodeRegistry::new(3_000, 2_000, 2);
        reg.observe_at(&[from("a"), from("b"), from("c")], S);
        assert_eq!(reg.stats().nodes, 2);
        assert_eq!(reg.stats().nodes_refused, 1);
    }
}
