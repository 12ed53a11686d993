//! The plugin's core: DLRover's job master on sonde. It takes the host's
//! samples and the job's events, keeps the nodes, the speed and the runtime
//! statistics, runs the plan loop, the failure scans and the sharding, and
//! keeps in the host's state store everything that must survive a restart.
//!
//! State store layout (this plugin's namespace):
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

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sonde_plugin_sdk::types::{
    Attribute, Decision, EventBatch, MetricDesc, MetricKind, NodeEvent, PointBatch, SampleBatch, Severity,
};
use sonde_plugin_sdk::{SampleView, SeriesTable};

use crate::failures::{self, CheckResult, ExitReason, Failed, OomContext, Relaunch};
use crate::host::Host;
use crate::model::{NS, NodeStat, NodeType, Plan, Resource, RuntimeStat, ns, secs};
use crate::nodes::{Node, Status, origin_node};
use crate::optimizer::brain::{HistoryJob, JobInfo};
use crate::optimizer::{Ctx, Optimizer};
use crate::scaler::{PlanRecord, Scaler, pending_halving};
use crate::settings::Settings;
use crate::sharding::{Dataset, DatasetParams, ReportAnswer, TaskType};
use crate::stats::{PerfMonitor, SampleBuilder, role};

/// Plans kept in memory for the routes (all are in the `plans` stream).
const RECENT_PLANS: usize = 200;
/// Failure and straggler events kept for the routes.
const RECENT_EVENTS: usize = 200;
/// Stream records read per call at start.
const READ_CHUNK: u32 = 1000;

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
    timer: Option<u64>,
    last_stats_ns: u64,
    last_scan_ns: u64,
    nodes_dirty: bool,
    last_nodes_put_ns: u64,
    metric_handles: BTreeMap<String, u32>,
}

fn to_json<T: Serialize>(v: &T) -> Vec<u8> {
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

fn attr_f64(attrs: &[Attribute], keys: &[&str]) -> Option<f64> {
    use sonde_plugin_sdk::types::Value as V;
    attrs
        .iter()
        .find(|a| keys.contains(&a.key.as_str()))
        .and_then(|a| match &a.value {
            V::Int(i) => Some(*i as f64),
            V::Float(f) => Some(*f),
            V::Str(s) => s.parse().ok().or_else(|| crate::settings::parse_quantity_mib(s).ok()),
            V::Boolean(b) => Some(f64::from(u8::from(*b))),
        })
}

fn ctx_of<'a>(
    history: &'a [HistoryJob],
    s: &'a Settings,
    info: JobInfo,
    stats: &'a [RuntimeStat],
    now: u64,
) -> Ctx<'a> {
    Ctx {
        stats,
        history,
        info,
        scenario: &s.scenario,
        now,
    }
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

    fn restore(&mut self, host: &mut dyn Host, now: u64) {
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

    // ------------------------------------------------------------------
    // Persistence
    // ------------------------------------------------------------------

    fn put(&mut self, host: &mut dyn Host, key: &str, bytes: &[u8]) -> Result<(), String> {
        host.state_put(key, bytes).map_err(|e| {
            self.counters.state_errors += 1;
            host.log(Severity::Error, &format!("dlrover: writing `{key}` failed: {e}"));
            format!("the state store refused the write: {e}")
        })
    }

    fn put_scaler(&mut self, host: &mut dyn Host) {
        let b = to_json(&self.scaler);
        let _ = self.put(host, "scaler", &b);
    }

    fn put_misc(&mut self, host: &mut dyn Host) {
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

    fn put_nodes(&mut self, host: &mut dyn Host, now: u64) {
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

    // ------------------------------------------------------------------
    // Nodes
    // ------------------------------------------------------------------

    fn node(&mut self, name: &str) -> &mut Node {
        if !self.nodes.contains_key(name) {
            self.nodes_dirty = true;
        }
        self.nodes.entry(name.to_string()).or_insert_with(|| Node::new(name))
    }

    /// A sign of life from a node (heartbeat, report, route call).
    pub fn alive(&mut self, host: &mut dyn Host, name: &str, now: u64) {
        let n = self.node(name);
        n.last_heartbeat_ns = n.last_heartbeat_ns.max(now);
        let recovered = n.exit_reason == Some(ExitReason::NoHeartBeat) && n.status == Status::Failed;
        if matches!(n.status, Status::Unknown | Status::Pending) || recovered {
            n.status = Status::Running;
            n.started_ns = now;
            n.pending_since_ns = None;
            n.exit_reason = None;
            self.nodes_dirty = true;
        }
        if recovered {
            self.record(
                host,
                "node-recovered",
                name,
                "heartbeats again after it was declared dead",
                json!({}),
            );
        }
    }

    /// Sets a node's type from a reporter's role (the settings' type wins).
    pub fn typed(&mut self, name: &str, kind: NodeType, index: i32) {
        if self.settings.nodes.get(name).is_some_and(|s| s.kind.is_some()) {
            return;
        }
        let n = self.node(name);
        if n.kind.is_none() || (n.kind != Some(kind) && index >= 0) || (n.index < 0 && index >= 0) {
            n.kind = Some(kind);
            n.index = index;
            self.nodes_dirty = true;
        }
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

    pub fn handle_node_event(&mut self, host: &mut dyn Host, name: &str, ev: &NodeEvent, now: u64) {
        self.counters.node_events += 1;
        {
            let n = self.node(name);
            if let Some(c) = attr_f64(&ev.attributes, &["cpu", "dlrover.cpu"]) {
                n.config.cpu = c;
            }
            if let Some(m) = attr_f64(&ev.attributes, &["memory_mib", "dlrover.memory_mib"]) {
                n.config.memory_mib = m;
            }
            if let Some(g) = attr_f64(&ev.attributes, &["gpu", "dlrover.gpu"]) {
                n.gpu = g > 0.0;
            }
        }
        self.nodes_dirty = true;
        let kind = ev.kind.to_ascii_lowercase();
        match kind.as_str() {
            "pending" => {
                let n = self.node(name);
                n.status = Status::Pending;
                n.pending_since_ns.get_or_insert(ev.time.min(now));
            }
            "started" | "running" | "restarted" | "recovered" => {
                let n = self.node(name);
                if kind == "restarted" {
                    n.relaunch_count += 1;
                }
                n.status = Status::Running;
                n.started_ns = now;
                n.last_heartbeat_ns = n.last_heartbeat_ns.max(now);
                n.pending_since_ns = None;
                n.exit_reason = None;
                n.exit_code = None;
                n.hung = false;
                self.scaler.node_running(name);
            }
            _ => {
                if let Some(reason) = failures::exit_reason(&kind, ev.exit_code, &ev.reason) {
                    self.node_ended(host, name, reason, ev.exit_code, &ev.reason, now);
                }
            }
        }
    }

    /// A node ended: its DOING shards go back to TODO (any end: an ended
    /// process cannot finish them), and the relaunch rules decide.
    pub fn node_ended(
        &mut self,
        host: &mut dyn Host,
        name: &str,
        reason: ExitReason,
        code: Option<i32>,
        text: &str,
        now: u64,
    ) {
        let (kind, config, relaunches, gpu) = {
            let n = self.node(name);
            n.status = match reason {
                ExitReason::Succeeded => Status::Succeeded,
                ExitReason::Deleted => Status::Deleted,
                _ => Status::Failed,
            };
            n.exit_reason = Some(reason);
            n.exit_code = code;
            (n.kind, n.effective_config(), n.relaunch_count, n.gpu)
        };
        self.nodes_dirty = true;
        self.release_shards(host, name, reason.name(), now);
        if reason == ExitReason::Succeeded {
            return;
        }
        let kind = kind.unwrap_or(NodeType::Worker);
        let mut oom = OomContext::default();
        if reason == ExitReason::Oom {
            self.misc.oom = true;
            self.put_misc(host);
            let stats: Vec<RuntimeStat> = self.stats.iter().cloned().collect();
            let ctx = ctx_of(&self.history, &self.settings, self.job_info(), &stats, now);
            let (_, note) = self
                .scaler
                .oom_memory(&self.optimizer, &ctx, &self.settings, name, kind, config);
            host.log(Severity::Info, &format!("dlrover: OOM of {name}: {note}"));
            oom = OomContext {
                group_mib: if kind == NodeType::Ps {
                    self.scaler.ps.memory_mib
                } else {
                    self.scaler.worker.memory_mib
                },
                user_mib: if kind == NodeType::Ps {
                    self.settings.user.ps.memory.0
                } else {
                    self.settings.user.worker.memory.0
                },
            };
            self.put_scaler(host);
        }
        let decision = failures::relaunch(
            Failed {
                kind,
                reason,
                relaunch_count: relaunches,
                memory_mib: config.memory_mib,
                gpu,
            },
            self.settings.job_type,
            self.settings.max_relaunch,
            self.settings.relaunch_always,
            oom,
        );
        let detail = if text.is_empty() {
            String::new()
        } else {
            format!(" ({text})")
        };
        match &decision {
            Relaunch::Yes { memory_mib, why } => {
                self.record(
                    host,
                    "relaunch",
                    name,
                    &format!("{}{detail}: relaunch: {why}", reason.name()),
                    json!({"exit_reason": reason.name(), "exit_code": code, "relaunch": true, "memory_mib": memory_mib}),
                );
                if let Some(m) = memory_mib {
                    self.scaler.next_id += 1;
                    let rec = PlanRecord {
                        id: self.scaler.next_id,
                        time_ns: now,
                        strategy: format!("{:?}", self.settings.strategy).to_lowercase(),
                        kind: "oom".into(),
                        stage: self.scaler.stage,
                        reason: why.clone(),
                        plan: Plan::default().node(name, Resource::new(config.cpu, *m)),
                        proposed: Plan::default().node(name, Resource::new(config.cpu, *m)),
                        adjustments: Vec::new(),
                    };
                    self.emit_plan(host, rec);
                    self.put_scaler(host);
                }
            }
            Relaunch::No { why, unrecoverable } => self.record(
                host,
                "no-relaunch",
                name,
                &format!("{}{detail}: not relaunched: {why}", reason.name()),
                json!({"exit_reason": reason.name(), "exit_code": code, "relaunch": false, "unrecoverable": unrecoverable}),
            ),
        }
    }

    /// Every DOING shard of `node`, in every dataset, fails (R9.4).
    fn release_shards(&mut self, host: &mut dyn Host, node: &str, reason: &str, now: u64) {
        let names: Vec<String> = self
            .datasets
            .iter()
            .filter(|(_, d)| d.doing.values().any(|t| t.node == node))
            .map(|(k, _)| k.clone())
            .collect();
        for name in names {
            let mut d = self.datasets[&name].clone();
            let failed = d.fail_node(node, reason, self.settings.max_shard_failures, now);
            self.after_failures(host, &name, node, reason, &failed, &d);
            if let Err(e) = self.commit_dataset(host, d.clone()) {
                host.log(
                    Severity::Error,
                    &format!("dlrover: {e}; the re-queue of {node}'s shards is kept in memory"),
                );
                self.datasets.insert(name, d);
            }
        }
    }

    pub fn after_failures(
        &mut self,
        host: &mut dyn Host,
        dataset: &str,
        node: &str,
        reason: &str,
        failed: &[(u64, ReportAnswer)],
        d: &Dataset,
    ) {
        let requeued: Vec<u64> = failed
            .iter()
            .filter(|(_, a)| matches!(a, ReportAnswer::Requeued { .. }))
            .map(|(id, _)| *id)
            .collect();
        if !requeued.is_empty() {
            self.record(
                host,
                "shards-requeued",
                node,
                &format!("{} DOING shard(s) of {dataset} back to TODO: {reason}", requeued.len()),
                json!({"dataset": dataset, "task_ids": requeued}),
            );
        }
        for (id, a) in failed {
            if let ReportAnswer::DeadLettered { failures } = a {
                let shard = d
                    .dead_letter
                    .iter()
                    .find(|x| x.task_id == *id)
                    .map(|x| (x.shard.start, x.shard.end));
                self.record(
                    host,
                    "shard-dead-letter",
                    dataset,
                    &format!("task {id} failed {failures} times (last: {reason}): moved to the dead-letter list"),
                    json!({"dataset": dataset, "task_id": id, "shard": shard, "node": node}),
                );
            }
        }
    }

    // ------------------------------------------------------------------
    // Hooks
    // ------------------------------------------------------------------

    /// The host's own samples: this node's resources.
    pub fn on_samples(&mut self, host: &mut dyn Host, mut batch: SampleBatch) -> Result<(), String> {
        self.series.absorb(&mut batch);
        let view = SampleView::new(&batch)?;
        let mut b = SampleBuilder::default();
        for s in view.iter() {
            let Some(info) = self.series.get(s.id) else { continue };
            let Some(r) = role(info) else { continue };
            for (t, v) in s.points() {
                b.add(&r, t, v);
            }
        }
        let name = self.settings.node.clone();
        let samples = b.finish(self.settings.cpu_count);
        self.take_samples(&name, "host", samples);
        let _ = host;
        Ok(())
    }

    fn take_samples(&mut self, name: &str, source: &str, samples: Vec<crate::stats::ResourceSample>) {
        if samples.is_empty() {
            return;
        }
        self.counters.samples += samples.len() as u64;
        let n = self.node(name);
        if n.source != source {
            n.source = source.to_string();
        }
        for s in samples {
            if let Some(c) = s.cpu_count {
                n.capacity.cpu = c as f64;
            }
            if let Some(m) = s.memory_limit_mib {
                n.capacity.memory_mib = m;
            }
            if !s.gpus.is_empty() {
                n.gpu = true;
            }
            n.usage.add(s);
        }
    }

    pub fn on_events(&mut self, host: &mut dyn Host, batch: EventBatch) {
        let now = host.now();
        let names: Vec<String> = batch.origins.iter().map(origin_node).collect();
        let ours: Vec<bool> = batch
            .origins
            .iter()
            .map(|o| self.settings.job.is_empty() || o.job == self.settings.job)
            .collect();
        let ok = |i: u32| ours.get(i as usize).copied().unwrap_or(false);
        for (i, o) in batch.origins.iter().enumerate() {
            if ours[i]
                && let Some(k) = NodeType::from_role(&o.role)
            {
                self.typed(&names[i], k, o.index);
            }
        }
        if let Some(p) = &batch.progress {
            let mut appended = false;
            for i in 0..p.origin.len() {
                let name = batch.names.get(p.name[i] as usize).map(String::as_str).unwrap_or("");
                if name != self.settings.step_name {
                    continue;
                }
                if !ok(p.origin[i]) {
                    self.counters.ignored_other_job += 1;
                    continue;
                }
                self.counters.steps += 1;
                self.alive(host, &names[p.origin[i] as usize], now);
                let workers = self.running_trainers() as u32;
                appended |= self.perf.add(p.value[i], p.time[i], workers);
            }
            if appended {
                let b = to_json(&self.perf);
                let _ = self.put(host, "perf", &b);
            }
        }
        if let Some(t) = &batch.timings {
            for i in 0..t.origin.len() {
                let name = batch.names.get(t.name[i] as usize).map(String::as_str).unwrap_or("");
                if name != self.settings.step_timing_name || !ok(t.origin[i]) || t.end[i] < t.start[i] {
                    continue;
                }
                self.counters.step_timings += 1;
                let node = names[t.origin[i] as usize].clone();
                self.alive(host, &node, now);
                let keep = self.settings.straggler_window as usize;
                let n = self.node(&node);
                n.step_times.push_back(secs(t.start[i], t.end[i]));
                n.last_step_ns = now;
                while n.step_times.len() > keep {
                    n.step_times.pop_front();
                }
            }
        }
        if let Some(h) = &batch.heartbeats {
            for i in 0..h.origin.len() {
                if ok(h.origin[i]) {
                    self.counters.heartbeats += 1;
                    self.alive(host, &names[h.origin[i] as usize], now);
                }
            }
        }
        if let Some(p) = &batch.points {
            let mut per_node: BTreeMap<usize, SampleBuilder> = BTreeMap::new();
            let roles: Vec<Option<crate::stats::Role>> = batch.point_series.iter().map(role).collect();
            for i in 0..p.origin.len() {
                let Some(Some(r)) = roles.get(p.series[i] as usize) else {
                    continue;
                };
                per_node
                    .entry(p.origin[i] as usize)
                    .or_default()
                    .add(r, p.time[i], p.value[i]);
                self.counters.gateway_points += 1;
            }
            for (o, b) in per_node {
                let name = names[o].clone();
                self.take_samples(&name, "gateway", b.finish(None));
            }
        }
        for ev in &batch.node_events {
            if !ok(ev.origin) {
                self.counters.ignored_other_job += 1;
                continue;
            }
            let name = names[ev.origin as usize].clone();
            self.handle_node_event(host, &name, ev, now);
        }
        if self.nodes_dirty && now.saturating_sub(self.last_nodes_put_ns) >= NS {
            self.put_nodes(host, now);
        }
    }

    pub fn running_trainers(&self) -> usize {
        self.nodes.values().filter(|n| n.running() && n.trains()).count()
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
            self.maybe_write_history(host, now);
        }
        if now.saturating_sub(self.scaler.last_loop_ns) >= ns(self.settings.optimize_interval_s) {
            self.plan_loop(host, now);
        }
        if self.nodes_dirty && now.saturating_sub(self.last_nodes_put_ns) >= NS {
            self.put_nodes(host, now);
        }
    }

    /// R7.1 heartbeat death.
    pub fn scan_heartbeats(&mut self, host: &mut dyn Host, now: u64) {
        let timeout = ns(self.settings.heartbeat_timeout_s);
        let dead: Vec<(String, u64)> = self
            .nodes
            .values()
            .filter(|n| failures::heartbeat_dead(n.last_heartbeat_ns, n.started_ns, n.running(), now, timeout))
            .map(|n| (n.name.clone(), n.last_heartbeat_ns))
            .collect();
        for (name, hb) in dead {
            let silent = secs(hb, now);
            self.record(
                host,
                "node-dead",
                &name,
                &format!(
                    "no heartbeat for {silent:.1} s (> {} s)",
                    self.settings.heartbeat_timeout_s
                ),
                json!({"last_heartbeat_ns": hb}),
            );
            self.node_ended(host, &name, ExitReason::NoHeartBeat, None, "", now);
        }
    }

    /// DOING shards past the task timeout go back to TODO (any task type: D7).
    pub fn scan_task_timeouts(&mut self, host: &mut dyn Host, now: u64) {
        let timeout = ns(self.settings.task_timeout_s);
        let names: Vec<String> = self
            .datasets
            .iter()
            .filter(|(_, d)| d.doing.values().any(|t| now.saturating_sub(t.start_ns) > timeout))
            .map(|(k, _)| k.clone())
            .collect();
        for name in names {
            let mut d = self.datasets[&name].clone();
            let out = d.time_out(timeout, self.settings.max_shard_failures, now);
            let mut by_node: BTreeMap<String, Vec<(u64, ReportAnswer)>> = BTreeMap::new();
            for (id, node, a) in out {
                by_node.entry(node).or_default().push((id, a));
            }
            for (node, failed) in by_node {
                let reason = format!("task timed out after {} s", self.settings.task_timeout_s);
                self.after_failures(host, &name, &node, &reason, &failed, &d);
            }
            if self.commit_dataset(host, d.clone()).is_err() {
                self.datasets.insert(name, d);
            }
        }
    }

    /// One runtime-statistics record: every running typed node's mean use
    /// over the interval, the global step and the smoothed speed.
    pub fn record_stats(&mut self, host: &mut dyn Host, now: u64) {
        let mut nodes = Vec::new();
        for n in self.nodes.values_mut() {
            if n.usage.latest.is_none() {
                continue;
            }
            let (cpu, mem) = n.usage.take_mean();
            if let (Some(kind), true) = (n.kind, n.running()) {
                nodes.push(NodeStat {
                    name: n.name.clone(),
                    kind,
                    used: Resource::new(cpu, mem),
                    config: n.effective_config(),
                });
            }
        }
        let speed = self.perf.speed(self.settings.speed_window_s);
        let rec = RuntimeStat {
            time_ns: now,
            global_step: self.perf.last_step().unwrap_or(0),
            speed,
            worker_num: self.running_trainers() as u32,
            nodes,
        };
        self.emit_metrics(host, &rec, now);
        if rec.nodes.is_empty() && rec.global_step == 0 {
            return;
        }
        match host.state_append("runtime", &to_json(&rec)) {
            Ok(seq) => {
                let keep = self.settings.stats_keep as u64;
                if seq > keep && seq % 32 == 0 {
                    host.state_trim("runtime", seq + 1 - keep);
                }
            }
            Err(e) => {
                self.counters.state_errors += 1;
                host.log(
                    Severity::Error,
                    &format!("dlrover: appending a runtime record failed: {e}"),
                );
            }
        }
        self.stats.push_back(rec);
        while self.stats.len() > self.settings.stats_keep as usize {
            self.stats.pop_front();
        }
    }

    fn metric(
        &mut self,
        host: &mut dyn Host,
        name: &str,
        unit: &str,
        desc: &str,
        attrs: &[(&str, &str)],
    ) -> Option<u32> {
        let key = format!("{name}{attrs:?}");
        if let Some(h) = self.metric_handles.get(&key) {
            return Some(*h);
        }
        let d = MetricDesc::new(name, MetricKind::Gauge, unit, desc)
            .with_attributes(attrs.iter().map(|(k, v)| Attribute::new(*k, *v)).collect());
        let h = host.declare_metric(&d).ok()?;
        self.metric_handles.insert(key, h);
        Some(h)
    }

    fn emit_metrics(&mut self, host: &mut dyn Host, rec: &RuntimeStat, now: u64) {
        let mut pts = PointBatch::default();
        let mut push = |h: Option<u32>, v: f64| {
            if let Some(h) = h {
                pts.series.push(h);
                pts.time.push(now);
                pts.value.push(v);
            }
        };
        push(
            self.metric(
                host,
                "sonde.training.speed",
                "{step}/s",
                "Global steps per second (smoothed)",
                &[],
            ),
            rec.speed,
        );
        push(
            self.metric(host, "sonde.training.global_step", "{step}", "Latest global step", &[]),
            rec.global_step as f64,
        );
        push(
            self.metric(host, "sonde.dlrover.workers", "{node}", "Running training nodes", &[]),
            rec.worker_num as f64,
        );
        let ds: Vec<(String, [f64; 4])> = self
            .datasets
            .values()
            .map(|d| {
                (
                    d.params.dataset_name.clone(),
                    [
                        d.todo_shards() as f64,
                        d.doing.len() as f64,
                        d.done_shards as f64,
                        d.dead_letter.len() as f64,
                    ],
                )
            })
            .collect();
        for (name, v) in ds {
            for (state, x) in ["todo", "doing", "done", "dead_letter"].iter().zip(v) {
                let h = self.metric(
                    host,
                    "sonde.dlrover.shards",
                    "{shard}",
                    "Shards by state",
                    &[("dlrover.dataset", &name), ("dlrover.shard.state", state)],
                );
                push(h, x);
            }
        }
        if !pts.series.is_empty() {
            host.emit_points(&pts);
        }
    }

    /// Stragglers during training: 2 x median of per-step times.
    pub fn update_stragglers(&mut self, host: &mut dyn Host) {
        let per: Vec<(String, Vec<f64>)> = self
            .nodes
            .values()
            .filter(|n| n.running() && !n.step_times.is_empty())
            .map(|n| (n.name.clone(), n.step_times.iter().copied().collect()))
            .collect();
        let (med, slow) = failures::step_stragglers(
            &per,
            self.settings.straggler_factor,
            self.settings.straggler_min_steps as usize,
        );
        let before: BTreeSet<String> = self.stragglers.iter().map(|(n, _)| n.clone()).collect();
        for (name, t) in &slow {
            if !before.contains(name) {
                self.record(
                    host,
                    "straggler",
                    name,
                    &format!(
                        "median step time {t:.3} s > {} x the median of all nodes ({:.3} s)",
                        self.settings.straggler_factor,
                        med.unwrap_or(0.0)
                    ),
                    json!({"median_step_s": t, "job_median_step_s": med, "source": "training"}),
                );
            }
        }
        self.stragglers = slow;
        self.step_median = med;
    }

    /// R7.4 CPU hang of non-GPU nodes.
    fn check_hangs(&mut self, host: &mut dyn Host, now: u64) {
        let ratio = self.settings.hang_cpu_ratio;
        let after = ns(self.settings.hang_after_s);
        let mut newly = Vec::new();
        for n in self.nodes.values_mut() {
            if !n.running() || n.gpu || n.kind.is_none() {
                continue;
            }
            let Some(cpu) = n.usage.latest.as_ref().and_then(|l| l.cpu) else {
                continue;
            };
            let (since, hung) =
                failures::cpu_hang(cpu, n.effective_config().cpu, n.low_cpu_since_ns, now, ratio, after);
            n.low_cpu_since_ns = since;
            if hung && !n.hung {
                newly.push(n.name.clone());
            }
            n.hung = hung;
        }
        for name in newly {
            self.record(
                host,
                "node-hang",
                &name,
                &format!("CPU below {ratio} of its cores for {} s", self.settings.hang_after_s),
                json!({}),
            );
        }
    }

    /// Facts about the job for the rules.
    pub fn job_info(&self) -> JobInfo {
        let total = self
            .datasets
            .values()
            .find(|d| d.params.task_type == TaskType::Training)
            .map(|d| {
                let steps = d.params.dataset_size as f64 / d.params.batch_size as f64 * d.params.num_epochs as f64;
                if self.settings.max_steps > 0 {
                    steps.min(self.settings.max_steps as f64)
                } else {
                    steps
                }
            })
            .unwrap_or(0.0);
        JobInfo {
            total_steps: total,
            oom: self.misc.oom,
            recv_ops: None,
            last_worker_mem_mib: self.scaler.worker.memory_mib,
        }
    }

    pub fn ctx<'a>(&'a self, stats: &'a [RuntimeStat], now: u64) -> Ctx<'a> {
        ctx_of(&self.history, &self.settings, self.job_info(), stats, now)
    }

    /// The records the rules use: those with a speed (DLRover collects only
    /// those), or all of them for a job without global steps.
    fn rule_stats(&self) -> Vec<RuntimeStat> {
        if self.perf.total == 0 {
            self.stats.iter().cloned().collect()
        } else {
            self.stats.iter().filter(|s| s.speed > 0.0).cloned().collect()
        }
    }

    /// The plan loop (every `optimize_interval_s`).
    pub fn plan_loop(&mut self, host: &mut dyn Host, now: u64) {
        self.scaler.last_loop_ns = now;
        let first_get = self.datasets.values().filter_map(|d| d.first_get_ns).min();
        self.scaler
            .maybe_start(&self.settings, self.perf.total, first_get, self.misc.first_result_ns);
        if !self.scaler.started {
            if now.saturating_sub(self.scaler.last_pending_check_ns) >= ns(self.settings.pending_check_s) {
                self.scaler.last_pending_check_ns = now;
                self.check_pending(host, now);
            }
            self.put_scaler(host);
            return;
        }
        let stats = self.rule_stats();
        let ctx = ctx_of(&self.history, &self.settings, self.job_info(), &stats, now);
        let rec = self.scaler.run(&self.optimizer, &ctx, &self.settings, now);
        if let Some(rec) = rec {
            self.emit_plan(host, rec);
        }
        self.put_scaler(host);
    }

    /// R3.5: non-GPU nodes pending too long are relaunched with less.
    fn check_pending(&mut self, host: &mut dyn Host, now: u64) {
        let limit = ns(self.settings.pending_timeout_s);
        let stuck: Vec<(String, Resource)> = self
            .nodes
            .values()
            .filter(|n| n.status == Status::Pending && !n.gpu)
            .filter(|n| n.pending_since_ns.is_some_and(|t| now.saturating_sub(t) > limit))
            .map(|n| (n.name.clone(), n.effective_config()))
            .collect();
        for (name, cfg) in stuck {
            let Some(new) = pending_halving(cfg) else { continue };
            self.scaler.next_id += 1;
            let plan = Plan::default().node(&name, new);
            let rec = PlanRecord {
                id: self.scaler.next_id,
                time_ns: now,
                strategy: format!("{:?}", self.settings.strategy).to_lowercase(),
                kind: "pending".into(),
                stage: self.scaler.stage,
                reason: format!(
                    "{name} pending for more than {} s: relaunch with {} CPU, {} MiB (was {}, {})",
                    self.settings.pending_timeout_s, new.cpu, new.memory_mib, cfg.cpu, cfg.memory_mib
                ),
                plan: plan.clone(),
                proposed: plan,
                adjustments: Vec::new(),
            };
            if let Some(n) = self.nodes.get_mut(&name) {
                n.config = new;
                n.pending_since_ns = Some(now);
            }
            self.nodes_dirty = true;
            self.emit_plan(host, rec);
        }
    }

    pub fn emit_plan(&mut self, host: &mut dyn Host, rec: PlanRecord) {
        if let Err(e) = host.state_append("plans", &to_json(&rec)) {
            self.counters.state_errors += 1;
            host.log(Severity::Error, &format!("dlrover: appending a plan failed: {e}"));
        }
        let subject = if self.settings.job.is_empty() {
            "job".to_string()
        } else {
            self.settings.job.clone()
        };
        host.log(
            Severity::Info,
            &format!("dlrover: plan {} ({}): {}", rec.id, rec.kind, rec.reason),
        );
        host.emit_decision(&Decision {
            kind: "resource-plan".into(),
            subject,
            reason: format!("{}: {}", rec.kind, rec.reason),
            body: serde_json::to_string(&rec).expect("plan serializes"),
            attributes: vec![
                Attribute::new("dlrover.plan.kind", rec.kind.as_str()),
                Attribute::new("dlrover.strategy", rec.strategy.as_str()),
            ],
        });
        self.plans.push_back(rec);
        while self.plans.len() > RECENT_PLANS {
            self.plans.pop_front();
        }
    }

    /// When every training dataset is complete, the job's summary joins the
    /// Brain's history (once).
    fn maybe_write_history(&mut self, host: &mut dyn Host, now: u64) {
        if self.misc.history_written {
            return;
        }
        let training: Vec<&Dataset> = self
            .datasets
            .values()
            .filter(|d| d.params.task_type == TaskType::Training)
            .collect();
        if training.is_empty() || !training.iter().all(|d| d.completed()) {
            return;
        }
        let stats: Vec<RuntimeStat> = self.stats.iter().cloned().collect();
        let job = if self.settings.job.is_empty() {
            "job"
        } else {
            &self.settings.job
        };
        let h = HistoryJob::summarize(job, &self.settings.scenario, now, true, self.misc.oom, &stats);
        self.add_history(host, h);
        self.misc.history_written = true;
        self.put_misc(host);
    }

    pub fn add_history(&mut self, host: &mut dyn Host, h: HistoryJob) {
        if let Err(e) = host.state_append("history", &to_json(&h)) {
            self.counters.state_errors += 1;
            host.log(Severity::Error, &format!("dlrover: appending history failed: {e}"));
        }
        self.history.push(h);
    }

    // ------------------------------------------------------------------
    // Sharding (called by the routes; each writes before it answers)
    // ------------------------------------------------------------------

    pub fn register(&mut self, host: &mut dyn Host, p: DatasetParams) -> Result<(bool, Value), String> {
        p.validate()?;
        if let Some(d) = self.datasets.get(&p.dataset_name) {
            return Ok((false, d.progress_json(false)));
        }
        let d = Dataset::new(
            p,
            self.settings.default_minibatches_per_shard,
            self.settings.max_shards_per_sub_epoch,
            host.now(),
        );
        let v = d.progress_json(false);
        self.commit_dataset(host, d)?;
        Ok((true, v))
    }

    pub fn first_result(&mut self, host: &mut dyn Host, now: u64) {
        if self.misc.first_result_ns.is_none() {
            self.misc.first_result_ns = Some(now);
            self.put_misc(host);
        } else if !self.scaler.started && self.perf.total == 0 {
            // The no-global-step start rule looks at the latest result.
            self.misc.first_result_ns = Some(now);
        }
    }

    // ------------------------------------------------------------------
    // Node check (R8)
    // ------------------------------------------------------------------

    pub fn node_check_report(&mut self, host: &mut dyn Host, node: &str, ok: bool, time: f64) {
        self.misc
            .node_check
            .entry(node.to_string())
            .or_default()
            .push((ok, time));
        self.put_misc(host);
    }

    pub fn node_check_verdict(&self) -> failures::CheckVerdict {
        let per: Vec<(String, Vec<CheckResult>)> = self
            .misc
            .node_check
            .iter()
            .map(|(n, r)| {
                (
                    n.clone(),
                    r.iter()
                        .map(|(ok, time)| CheckResult { ok: *ok, time: *time })
                        .collect(),
                )
            })
            .collect();
        failures::check_verdict(&per, self.settings.straggler_factor)
    }

    pub fn stop(&mut self, host: &mut dyn Host) {
        let now = host.now();
        self.put_nodes(host, now);
        self.put_scaler(host);
    }
}
