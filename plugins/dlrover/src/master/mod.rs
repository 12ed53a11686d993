//! The plugin's core: DLRover's job master on sonde. It takes the host's
//! samples and the job's events, keeps the nodes, the speed and the runtime
//! statistics, runs the plan loop, the failure scans and the sharding, and
//! keeps in the host's state store everything that must survive a restart.
//!
//! `Master` is defined here with its life cycle (start, configure, the timer,
//! stop) and the job's event log; its other work is split by job:
//!
//! | file | what |
//! |---|---|
//! | `store.rs` | the state store layout, saving and restoring |
//! | `events.rs` | what the host hands in: samples, progress, timings, heartbeats, gateway points, node events |
//! | `health.rs` | node ends and relaunches, heartbeat death, task timeouts, hangs, stragglers, the node check |
//! | `datasets.rs` | datasets for the sharding routes, and a failed node's shards |
//! | `metrics.rs` | the runtime-statistics record and the metrics emitted from it |
//! | `plans.rs` | the plan loop, pending nodes, plans and the Brain's history |

mod datasets;
mod events;
mod health;
mod metrics;
mod plans;
mod store;

use plans::ctx_of;

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sonde_plugin_sdk::SeriesTable;
use sonde_plugin_sdk::types::{Attribute, Decision, Severity};

use crate::model::{NS, RuntimeStat, ns};
use crate::nodes::Node;
use crate::optimizer::Optimizer;
use crate::optimizer::brain::HistoryJob;
use crate::scaler::{PlanRecord, Scaler};
use crate::settings::Settings;
use crate::sharding::Dataset;
use crate::stats::PerfMonitor;
use sonde_plugin_sdk::Host;

/// Failure and straggler events kept for the routes.
const RECENT_EVENTS: usize = 200;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Misc {
    pub oom: bool,
    pub first_result_ns: Option<u64>,
    pub history_written: bool,
    pub node_check: BTreeMap<String, Vec<(bool, f64)>>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Counters {
    pub samples: u64,
    pub gateway_points: u64,
    pub steps: u64,
    pub step_timings: u64,
    pub heartbeats: u64,
    pub node_events: u64,
    pub ignored_other_job: u64,
    pub state_errors: u64,
}

pub struct Master {
    pub settings: Settings,
    pub optimizer: Optimizer,
    pub restarts: u32,
    pub started_ns: u64,
    pub nodes: BTreeMap<String, Node>,
    pub perf: PerfMonitor,
    pub stats: VecDeque<RuntimeStat>,
    pub scaler: Scaler,
    pub plans: VecDeque<PlanRecord>,
    pub datasets: BTreeMap<String, Dataset>,
    pub history: Vec<HistoryJob>,
    pub series: SeriesTable,
    pub stragglers: Vec<(String, f64)>,
    pub step_median: Option<f64>,
    pub events: VecDeque<Value>,
    pub misc: Misc,
    pub counters: Counters,
    /// Jobs whose processes this master counts as its own: their pages get the panel.
    pub jobs_seen: std::collections::BTreeSet<String>,
    timer: Option<u64>,
    last_stats_ns: u64,
    last_scan_ns: u64,
    nodes_dirty: bool,
    last_nodes_put_ns: u64,
    metric_handles: BTreeMap<String, u32>,
}

impl Master {
    pub fn new(settings: Settings, restarts: u32, now: u64) -> Master {
        Master {
            optimizer: Optimizer::new(&settings),
            perf: PerfMonitor::new(settings.perf_records as usize),
            settings,
            restarts,
            started_ns: now,
            nodes: BTreeMap::new(),
            stats: VecDeque::new(),
            scaler: Scaler::default(),
            plans: VecDeque::new(),
            datasets: BTreeMap::new(),
            history: Vec::new(),
            series: SeriesTable::new(),
            stragglers: Vec::new(),
            step_median: None,
            events: VecDeque::new(),
            misc: Misc::default(),
            counters: Counters::default(),
            jobs_seen: Default::default(),
            timer: None,
            last_stats_ns: now,
            last_scan_ns: now,
            nodes_dirty: false,
            last_nodes_put_ns: 0,
            metric_handles: BTreeMap::new(),
        }
    }

    /// Starts (or restarts) from what the state store holds.
    pub fn start(host: &mut dyn Host, settings: Settings, restarts: u32) -> Master {
        let now = host.now();
        let mut m = Master::new(settings, restarts, now);
        m.restore(host, now);
        m.timer = Some(host.set_timer(m.settings.tick_ms, true));
        if m.scaler.stage == crate::scaler::Stage::Create {
            let stats: Vec<RuntimeStat> = m.stats.iter().cloned().collect();
            let ctx = ctx_of(&m.history, &m.settings, m.job_info(), &stats, now);
            let rec = m.scaler.init(&m.optimizer, &ctx, &m.settings, now);
            if let Some(rec) = rec {
                m.emit_plan(host, rec);
            }
            m.put_scaler(host);
        }
        host.log(
            Severity::Info,
            &format!(
                "dlrover: started ({} strategy; {} nodes, {} datasets, {} runtime records, {} plans restored)",
                format!("{:?}", m.settings.strategy).to_lowercase(),
                m.nodes.len(),
                m.datasets.len(),
                m.stats.len(),
                m.plans.len()
            ),
        );
        m
    }

    fn apply_node_specs(&mut self) {
        for (name, spec) in &self.settings.nodes {
            let n = self.nodes.entry(name.clone()).or_insert_with(|| Node::new(name));
            if let Some(k) = spec.kind {
                n.kind = Some(k);
            }
            if spec.cpu > 0.0 {
                n.config.cpu = spec.cpu;
            }
            if spec.memory.0 > 0.0 {
                n.config.memory_mib = spec.memory.0;
            }
            n.gpu |= spec.gpu;
        }
    }

    pub fn configure(&mut self, host: &mut dyn Host, new: Settings) -> Result<(), String> {
        let old = std::mem::replace(&mut self.settings, new);
        self.optimizer = Optimizer::new(&self.settings);
        self.perf.keep = self.settings.perf_records as usize;
        if old.tick_ms != self.settings.tick_ms {
            if let Some(t) = self.timer.take() {
                host.cancel_timer(t);
            }
            self.timer = Some(host.set_timer(self.settings.tick_ms, true));
        }
        if old.sample_request() != self.settings.sample_request() {
            host.request_samples(Some(&self.settings.sample_request()));
        }
        self.apply_node_specs();
        Ok(())
    }

    fn record(&mut self, host: &mut dyn Host, kind: &str, subject: &str, reason: &str, body: Value) {
        let now = host.now();
        let mut ev = json!({"time_ns": now, "kind": kind, "subject": subject, "reason": reason});
        if let (Value::Object(e), Value::Object(b)) = (&mut ev, body.clone()) {
            e.extend(b);
        }
        self.events.push_back(ev);
        while self.events.len() > RECENT_EVENTS {
            self.events.pop_front();
        }
        host.log(Severity::Info, &format!("dlrover: {kind} {subject}: {reason}"));
        host.emit_decision(&Decision {
            kind: kind.to_string(),
            subject: subject.to_string(),
            reason: reason.to_string(),
            body: body.to_string(),
            attributes: vec![Attribute::new("dlrover.node", subject)],
        });
    }

    pub fn on_timer(&mut self, host: &mut dyn Host) {
        let now = host.now();
        if now.saturating_sub(self.last_scan_ns) >= ns(self.settings.heartbeat_scan_s) {
            self.last_scan_ns = now;
            self.scan_heartbeats(host, now);
            self.scan_task_timeouts(host, now);
        }
        if now.saturating_sub(self.last_stats_ns) >= ns(self.settings.stats_interval_s) {
            self.last_stats_ns = now;
            self.record_stats(host, now);
            self.update_stragglers(host);
            self.check_hangs(host, now);
            self.check_gpu_hangs(host, now);
            self.maybe_write_history(host, now);
        }
        if now.saturating_sub(self.scaler.last_loop_ns) >= ns(self.settings.optimize_interval_s) {
            self.plan_loop(host, now);
        }
        if self.nodes_dirty && now.saturating_sub(self.last_nodes_put_ns) >= NS {
            self.put_nodes(host, now);
        }
    }

    pub fn stop(&mut self, host: &mut dyn Host) {
        let now = host.now();
        self.put_nodes(host, now);
        self.put_scaler(host);
    }
}
