//! cluster/: one sonde that sees the whole distributed job.
//!
//! The same binary takes one of three roles (`cluster.role`, `--role`):
//!
//! ```text
//!  agent (one per node)                              master (one per job or cluster)
//!  ┌─────────────────────────────┐  OTLP/gRPC        ┌──────────────────────────────────────┐
//!  │ sampler ─► plugins ─► export ├─ sampled series ─►│ receivers ─► IngestHub ─► plugins     │
//!  │ jobs ─► IngestHub ─► forward ├─ job reports ────►│               │ taps:                  │
//!  │ heartbeat (direct, no queue) ├─ alive, version ─►│               ├─► nodes.rs  lost/back  │
//!  └─────────────────────────────┘   clock, plugins  │               ├─► jobs.rs   per rank   │
//!                                                    │               └─► remote_points.rs     │
//!                                                    │                    ─► live store, API  │
//!                                                    └──────────────────────────────────────┘
//! ```
//!
//! - `config.rs`: `[cluster]`, the role and its limits.
//! - `forward.rs`: an agent's reports as OTLP, the exact inverse of the receiver's mapping.
//! - `heartbeat.rs`: an agent's liveness signal, sent outside the export queue.
//! - `nodes.rs`: the master's nodes: last seen, lost/back, clock skew, duplicate names.
//! - `jobs.rs`: jobs in every role: nodes, ranks, time span, steps per rank;
//!   `jobs/store.rs` keeps a master's and a standalone sonde's in the state store.
//! - `remote_points.rs`: a master shows its agents' series as its own, labelled by node.
//!
//! A standalone sonde runs only the job registry (its own jobs). Depends on
//! `ingest` (the hub's taps), `pipeline` and `export`; `api` and `run` depend on it.

pub mod config;
pub mod forward;
pub mod heartbeat;
pub mod jobs;
pub mod nodes;
pub mod remote_points;

use std::sync::Arc;
use std::time::Duration;

use crate::ingest::IngestHub;
use crate::model::{AttrValue, LogBatch, LogRecord, Scope, Severity, now_ns};
use crate::pipeline::PipelineHandle;
use crate::plugin::DecisionBoard;
use crate::plugin::bindings::types::Decision;

pub use config::{ClusterConfig, Role};

/// The name decisions of the cluster machinery carry in `/api/decisions`.
pub const DECISION_SOURCE: &str = "sonde.cluster";

/// What the rest of the host needs to know about the cluster side.
pub struct Cluster {
    pub role: Role,
    /// This host's node name (`host.name`).
    pub node: String,
    pub jobs: Arc<jobs::JobRegistry>,
    /// A master's nodes.
    pub nodes: Option<Arc<nodes::NodeRegistry>>,
    /// An agent's forwarder.
    pub forwarder: Option<Arc<forward::Forwarder>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// What starting the cluster side takes from the host.
pub struct Parts<'a> {
    pub cfg: &'a ClusterConfig,
    pub export_interval_ms: u64,
    /// This host's node name (`host.name`).
    pub node: String,
    pub hub: &'a Arc<IngestHub>,
    pub pipeline: &'a PipelineHandle,
    pub decisions: DecisionBoard,
    /// An agent's client to its master, for the heartbeat.
    pub master_client: Option<crate::export::client::Client>,
    pub resource: Vec<(String, AttrValue)>,
    pub plugin_names: heartbeat::PluginNames,
    /// The host's state store: a master and a standalone sonde keep their
    /// jobs in it (`jobs/store.rs`).
    pub state: Option<crate::state::StateStore>,
    /// A master's embedded history: its agents' points are appended to it
    /// before they are answered (`remote_points.rs`).
    pub history: Option<Arc<crate::history::History>>,
    pub stop: tokio::sync::watch::Receiver<bool>,
}

impl Cluster {
    /// Hooks the registries onto the hub and starts the role's tasks. Call
    /// inside the runtime.
    pub fn start(p: Parts<'_>) -> Cluster {
        let jobs = Arc::new(jobs::JobRegistry::new(p.cfg.max_jobs, p.cfg.max_steps_per_rank));
        if let Some(state) = p.state.as_ref().filter(|_| p.cfg.role != Role::Agent) {
            let restored = jobs.restore_from(&state.namespace(jobs::store::NAMESPACE));
            if restored > 0 {
                tracing::info!(jobs = restored, "jobs of earlier runs restored");
            }
            // Written with the dedup windows, before a sonde's request is answered.
            p.hub.commits.add(jobs.clone());
        }
        p.hub.add_tap(jobs.clone());
        let mut c = Cluster {
            role: p.cfg.role,
            node: p.node.clone(),
            jobs,
            nodes: None,
            forwarder: None,
            tasks: Vec::new(),
        };
        match p.cfg.role {
            Role::Standalone => {}
            Role::Agent => {
                let f = Arc::new(forward::Forwarder::new(p.pipeline.clone(), p.node.clone()));
                p.hub.add_tap(f.clone());
                c.forwarder = Some(f);
                if let Some(client) = p.master_client {
                    c.tasks.push(tokio::spawn(heartbeat::run(
                        client,
                        p.resource,
                        p.plugin_names,
                        Duration::from_millis(p.cfg.heartbeat(p.export_interval_ms)),
                        p.stop,
                    )));
                }
            }
            Role::Master => {
                let n = Arc::new(nodes::NodeRegistry::new(
                    p.cfg.node_timeout(p.export_interval_ms),
                    p.cfg.max_clock_skew_ms,
                    p.cfg.max_nodes,
                ));
                p.hub.add_tap(n.clone());
                p.hub.add_tap(Arc::new(remote_points::RemotePoints::new(
                    p.pipeline.clone(),
                    p.history,
                )));
                c.tasks.push(tokio::spawn(watch_nodes(
                    n.clone(),
                    p.pipeline.clone(),
                    p.decisions,
                    p.stop,
                )));
                c.nodes = Some(n);
            }
        }
        c
    }

    pub fn stop(&self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Every 500 ms: nodes gone silent become lost; every change becomes a
/// decision (in `/api/decisions` and exported as a `sonde.decision` log record).
async fn watch_nodes(
    nodes: Arc<nodes::NodeRegistry>,
    pipeline: PipelineHandle,
    decisions: DecisionBoard,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let scope = Arc::new(Scope {
        name: DECISION_SOURCE.into(),
        version: env!("CARGO_PKG_VERSION").into(),
    });
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            r = stop.changed() => if r.is_err() || *stop.borrow() { break },
        }
        let changes = nodes.tick(now_ns());
        if changes.is_empty() {
            continue;
        }
        let mut records = Vec::new();
        for t in &changes {
            let kind = t.event_name().trim_start_matches("sonde.cluster.").replace('_', "-");
            let (sentence, reason) = (t.describe(), t.reason());
            match t {
                nodes::Transition::Lost { .. } | nodes::Transition::DuplicateName { .. } => {
                    tracing::warn!("{sentence}")
                }
                _ => tracing::info!("{sentence}"),
            }
            let body = serde_json::json!({"node": t.node(), "event": kind}).to_string();
            decisions.record(
                DECISION_SOURCE,
                &Decision {
                    kind: kind.clone(),
                    subject: t.node().to_string(),
                    reason: reason.clone(),
                    body: body.clone(),
                    attributes: Vec::new(),
                },
            );
            records.push(LogRecord {
                time_ns: now_ns(),
                severity: match t {
                    nodes::Transition::Back { .. } => Severity::Info,
                    _ => Severity::Warn,
                },
                event_name: "sonde.decision".into(),
                body,
                attributes: vec![
                    ("sonde.decision.kind".into(), AttrValue::Str(kind)),
                    ("sonde.decision.subject".into(), AttrValue::Str(t.node().to_string())),
                    ("sonde.decision.reason".into(), AttrValue::Str(reason)),
                ],
            });
        }
        pipeline.submit_logs(LogBatch {
            scope: scope.clone(),
            records,
        });
    }
}
