//! Every hook's logic, with the host passed in as the SDK's [`Host`] so it
//! runs in native tests against `FakeHost`.
//!
//! Flow: samples go to the node's ticks; events register jobs and ranks and
//! queue steps, phases, CPU readings and MPI bins; a step is judged once
//! `lag_ms` has passed since it ended (so the samples covering it are in),
//! becomes a row, feeds its rank's dominant verdict (a decision when it
//! changes) and its batch's straggler (a decision when the persistent one
//! changes). Every `emit_every_ms` the share of steps per verdict of each
//! job is emitted as metrics.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde_json::json;
use sonde_plugin_sdk::types::{
    Attribute, Decision, EventBatch, MetricDesc, MetricKind, PointBatch, SampleBatch, Severity,
};

use crate::MPI_SAMPLES;
use crate::job::{Job, Persistent, Row};
use crate::node::NodeSamples;
use crate::onset::{OnsetSettings, episodes};
use crate::rank::{Rank, Run, classify};
use crate::settings::Settings;
use crate::verdict::{Verdict, judge};
use crate::whatif::{Analysis, Culprit, Diagnosis, Pending, Thresholds, diagnose};
use sonde_plugin_sdk::agents::{AgentSeries, host_series};
use sonde_plugin_sdk::{Finding, Host};

/// Progress names that carry the batch index.
const BATCH_NAMES: [&str; 2] = ["batch_idx", "batch"];

/// The process's cumulative CPU time, as OpenTelemetry names it.
const PROCESS_CPU_TIME: &str = "process.cpu.time";

pub const VERDICT_METRIC: &str = "bottleneck.steps";

/// What the plugin did with what it was given.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct Counters {
    pub steps_judged: u64,
    pub windows_judged: u64,
    pub ignored_jobs_over_limit: u64,
    pub ignored_ranks_over_limit: u64,
    pub malformed: u64,
}

pub struct Bottleneck {
    pub settings: Settings,
    /// This host's own samples.
    pub node: NodeSamples,
    /// On a cluster master: the nodes whose agents forward their samples,
    /// and those samples per node (index: node id − 1).
    agents: AgentSeries,
    agent_nodes: Vec<NodeSamples>,
    pub jobs: BTreeMap<String, Job>,
    pub counters: Counters,
    handles: HashMap<(String, usize), u32>,
    /// The emit timer (0: not running yet, see `follow_jobs`).
    timer: u64,
    /// The one-shot timer that goes on with a What-if analysis left
    /// unfinished (0: none set).
    replay_timer: u64,
    /// [`REPLAY_BUDGET_NS`]; a test sets 0 to have each call do one piece.
    pub(crate) replay_budget_ns: u64,
    /// Judging waits until then for the samples gathered before the first
    /// job, which come with the next delivery (see `follow_jobs`).
    hold_judging_until: Option<u64>,
    /// Per job, the saved rows' chunks (`crate::persist`).
    pub(crate) chunks: HashMap<String, crate::persist::Chunks>,
    /// When the jobs were last saved (host time), and whether that failed.
    pub(crate) saved_at: u64,
    pub(crate) save_failing: bool,
}

/// How long one hook call works on What-if analyses before it leaves the
/// rest to the next. A 1 024-rank job's window (one step of 48 000
/// operations, see `ops::MAX_OPS`) takes about 40 ms of CPU in the sandbox
/// and no hook call should take over 25 ms (the call deadline is 100 ms).
/// The budget is checked between pieces (a few ranks' operations, one
/// replay; the largest, placing the window's operations or ordering a
/// step, near 10 ms there), so a call ends within about the budget and
/// one piece: `./dev bench-diagnosis-load`.
const REPLAY_BUDGET_NS: u64 = 6_000_000;
/// When the rest of an unfinished analysis goes on: a one-shot timer, which
/// the host fires at its next sample tick (within 100 ms).
const REPLAY_CONTINUE_MS: u64 = 10;

/// The longest judging waits for the first delivery after the first job
/// (one delivery period, and a margin): a host that samples nothing does
/// not hold it up for good.
const FIRST_DELIVERY_WAIT_NS: u64 = 2_000_000_000;

fn rank_of(o: &sonde_plugin_sdk::types::Origin) -> i32 {
    if o.rank >= 0 { o.rank } else { o.index.max(0) }
}

impl Bottleneck {
    /// A plugin with the jobs an earlier run saved (`crate::persist`).
    pub fn start(host: &mut dyn Host, settings: Settings) -> Bottleneck {
        let mut b = Bottleneck {
            node: NodeSamples::new(settings.min_peak_bytes_per_s),
            agents: AgentSeries::default(),
            agent_nodes: Vec::new(),
            settings,
            jobs: BTreeMap::new(),
            counters: Counters::default(),
            handles: HashMap::new(),
            timer: 0,
            replay_timer: 0,
            replay_budget_ns: REPLAY_BUDGET_NS,
            hold_judging_until: None,
            chunks: HashMap::new(),
            saved_at: 0,
            save_failing: false,
        };
        let restored = b.restore(host);
        if restored > 0 {
            host.log(
                Severity::Info,
                &format!("bottleneck: {restored} jobs restored from the state store"),
            );
        }
        b
    }

    /// No emit timer without a job: the verdict shares it emits are per
    /// job, so it starts with the first job's first report (jobs are kept
    /// for good). The node's samples still come in meanwhile, every
    /// [`crate::IDLE_DELIVER_EVERY_MS`]: a job's first steps are judged
    /// against them. The first job asks for them every second; the host
    /// keeps the ticks gathered when only the pacing changes and hands them
    /// over at the next whole second, and judging waits for that delivery.
    fn follow_jobs(&mut self, host: &mut dyn Host) {
        if self.timer == 0 && !self.jobs.is_empty() {
            self.timer = host.set_timer(self.settings.emit_every_ms, true);
            host.request_samples(Some(&crate::sample_request(true)));
            self.hold_judging_until = Some(host.now().saturating_add(FIRST_DELIVERY_WAIT_NS));
        }
    }

    pub fn configure(&mut self, host: &mut dyn Host, settings: Settings) {
        if settings.emit_every_ms != self.settings.emit_every_ms && self.timer != 0 {
            host.cancel_timer(self.timer);
            self.timer = host.set_timer(settings.emit_every_ms, true);
        }
        self.settings = settings;
    }

    pub fn on_samples(&mut self, host: &mut dyn Host, batch: SampleBatch) -> Result<(), String> {
        self.node.read(batch)?;
        self.hold_judging_until = None;
        self.judge_due(host);
        Ok(())
    }

    /// The rank an origin reports for, created if the limits allow.
    fn rank(&mut self, o: &sonde_plugin_sdk::types::Origin) -> Option<&mut Rank> {
        if o.job.is_empty() {
            return None;
        }
        if !self.jobs.contains_key(&o.job) {
            if self.jobs.len() >= self.settings.max_jobs {
                self.counters.ignored_jobs_over_limit += 1;
                return None;
            }
            self.jobs.insert(o.job.clone(), Job::default());
        }
        let job = self.jobs.get_mut(&o.job).expect("inserted");
        let r = rank_of(o);
        if !job.ranks.contains_key(&r) && job.ranks.len() >= self.settings.max_ranks {
            self.counters.ignored_ranks_over_limit += 1;
            return None;
        }
        let rank = job.ranks.entry(r).or_default();
        if rank.node.is_empty() {
            rank.node = o.node.clone();
        }
        Some(rank)
    }

    pub fn on_events(&mut self, host: &mut dyn Host, batch: &EventBatch) {
        let name = |i: u32| batch.names.get(i as usize).map(String::as_str);
        if let Some(c) = &batch.progress {
            for i in 0..c.origin.len() {
                if !name(c.name[i]).is_some_and(|n| BATCH_NAMES.contains(&n)) {
                    continue;
                }
                let Some(o) = batch.origins.get(c.origin[i] as usize) else {
                    continue;
                };
                if let Some(rank) = self.rank(o) {
                    rank.progress(c.time[i], c.value[i].min(i64::MAX as u64) as i64);
                }
            }
        }
        if let Some(c) = &batch.timings {
            for i in 0..c.origin.len() {
                let (start, end) = (c.start[i], c.end[i]);
                let (Some(o), Some(n)) = (batch.origins.get(c.origin[i] as usize), name(c.name[i])) else {
                    self.counters.malformed += 1;
                    continue;
                };
                if end < start {
                    self.counters.malformed += 1;
                    continue;
                }
                let is_step = self.settings.step_names.iter().any(|s| s == n);
                let class = classify(n, &self.settings);
                let step = c.step[i];
                if let Some(rank) = self.rank(o) {
                    if is_step {
                        rank.step(start, end, step);
                    } else {
                        rank.phase(class, start, end, step);
                    }
                }
            }
        }
        // Agents' forwarded samples (a cluster master): each to its node's ticks.
        for (id, samples) in self.agents.read(batch, |i| host_series(i, &crate::NODE_METRICS)) {
            let i = id as usize - 1;
            if self.agent_nodes.len() <= i {
                let peak = self.settings.min_peak_bytes_per_s;
                self.agent_nodes.resize_with(i + 1, || NodeSamples::new(peak));
            }
            if let Err(e) = self.agent_nodes[i].read(samples) {
                host.log(Severity::Warn, &format!("node {}'s samples: {e}", self.agents.node(id)));
            }
        }
        if let Some(c) = &batch.points {
            for i in 0..c.origin.len() {
                let Some(info) = batch.point_series.get(c.series[i] as usize) else {
                    continue;
                };
                if info.metric != PROCESS_CPU_TIME {
                    continue;
                }
                let Some(o) = batch.origins.get(c.origin[i] as usize) else {
                    continue;
                };
                let key: String = info
                    .attributes
                    .iter()
                    .map(|a| format!("{}={:?};", a.key, a.value))
                    .collect();
                if let Some(rank) = self.rank(o) {
                    rank.cpu.add(&key, c.time[i], c.value[i]);
                }
            }
        }
        // Operations with their parallel coordinates: each to its job's window.
        let (rows, bad) = crate::ops::read(batch);
        self.counters.malformed += bad;
        let keep = self.settings.ops_window_steps;
        // A sender's rows come together: its job, rank and node are looked
        // up once per run of them, not per row (a master takes tens of
        // thousands of rows a second from a large job).
        for run in rows.chunk_by(|a, b| std::ptr::eq(a.0, b.0)) {
            let o = run[0].0;
            let rank = rank_of(o).max(0) as u32;
            if self.rank(o).is_none() {
                continue;
            }
            if let Some(job) = self.jobs.get_mut(&o.job) {
                let node = job.ops.node(&o.node);
                for (_, row) in run {
                    job.ops.add_at(node, rank, row, keep);
                }
            }
        }
        for t in batch.table(MPI_SAMPLES) {
            // Per (origin, flush time): ns per state, and the main thread's total.
            let mut flushes: BTreeMap<(u32, u64), ([f64; 3], f64)> = BTreeMap::new();
            let columns = (|| {
                Ok::<_, String>((
                    t.u8s("state")?,
                    t.u32s("count")?,
                    t.u64s("period_ns")?,
                    t.timestamps("time_ns")?,
                    t.u32s("thread")?,
                ))
            })();
            let Ok((state, count, period_ns, time, thread)) = columns else {
                // The mpi plugin declared the table otherwise: nothing here can be read.
                self.counters.malformed += t.len() as u64;
                continue;
            };
            for (i, &origin) in t.origin().iter().enumerate() {
                let s = state[i] as usize;
                if s > 2 {
                    self.counters.malformed += 1;
                    continue;
                }
                let ns = count[i] as f64 * period_ns[i] as f64;
                let f = flushes.entry((origin, time[i])).or_default();
                f.0[s] += ns;
                if thread[i] == 0 {
                    f.1 += ns;
                }
            }
            for ((origin, time), (states, main)) in flushes {
                let Some(o) = batch.origins.get(origin as usize) else {
                    continue;
                };
                let window_ms = self.settings.mpi_window_ms;
                let first_window = {
                    let Some(rank) = self.rank(o) else { continue };
                    rank.mpi.add(time, states, main);
                    let first = rank.mpi.first();
                    if rank.next_window.is_none()
                        && let Some(f) = first
                    {
                        // The first whole window after the rank's first bin.
                        let w = window_ms * 1_000_000;
                        rank.next_window = Some((f / w + 1) * w);
                    }
                    rank.next_window
                };
                let job = self.jobs.get_mut(&o.job).expect("rank exists");
                if job.first_window.is_none() {
                    job.first_window = first_window;
                }
            }
        }
        self.follow_jobs(host);
        self.judge_due(host);
    }

    pub fn on_timer(&mut self, host: &mut dyn Host, id: u64) {
        if id != 0 && id == self.replay_timer {
            self.replay_timer = 0;
            let now = host.now();
            self.replay_ops(host, now);
            return;
        }
        if id != self.timer {
            return;
        }
        self.judge_due(host);
        let now = host.now();
        // A save's encoding (milliseconds of CPU at 1 024 ranks) and an
        // analysis' slice (up to REPLAY_BUDGET_NS) would add up in one call:
        // a call that saves leaves the analysis to the one-shot timer.
        if self.save_due(now) {
            if self.replay_timer == 0 {
                self.replay_timer = host.set_timer(REPLAY_CONTINUE_MS, false);
            }
        } else {
            self.replay_ops(host, now);
        }
        let mut points = PointBatch {
            series: Vec::new(),
            time: Vec::new(),
            value: Vec::new(),
        };
        let names: Vec<String> = self.jobs.keys().cloned().collect();
        for name in names {
            let Some(shares) = self.jobs.get_mut(&name).and_then(|j| j.take_shares(now)) else {
                continue;
            };
            for v in Verdict::ALL {
                let Some(h) = self.handle(host, &name, v) else { continue };
                points.series.push(h);
                points.time.push(now);
                points.value.push(shares[v.index()]);
            }
        }
        if !points.series.is_empty() {
            host.emit_points(&points);
        }
        self.save(host, false);
    }

    /// The What-if diagnosis of every job that reports its operations and
    /// completed a step since the last replay: a finding when its culprit
    /// or its slowdown (by 10 %) changed, and one when a fail-slow began.
    /// An analysis goes on for [`REPLAY_BUDGET_NS`] per call; what is left
    /// continues at the next call (a one-shot timer), so a large window is
    /// spread over several short calls instead of one long one.
    fn replay_ops(&mut self, host: &mut dyn Host, now: u64) {
        let lag = self.settings.lag_ms * 1_000_000;
        let th = Thresholds::default();
        let deadline = host.now().saturating_add(self.replay_budget_ns);
        let (mut unfinished, mut worked) = (false, false);
        for (name, job) in &mut self.jobs {
            // `advance` always does one piece: past the budget, a job's
            // analysis waits for the next call, unless no job had a piece
            // yet (a call makes progress however long what came before it).
            if worked && host.now() >= deadline {
                unfinished |= job.replaying.is_some() || job.ops.has_complete(now, lag);
                continue;
            }
            if job.replaying.is_none() {
                let Some(ops) = job.ops.complete(now, lag) else {
                    continue;
                };
                let first_ns = ops[0].start_ns;
                job.replaying = Some((Pending::new(ops, &th), first_ns));
            }
            worked = true;
            let (pending, first_ns) = job.replaying.as_mut().expect("set above");
            let first_ns = *first_ns;
            let Some(a) = pending.advance(&mut || host.now() < deadline) else {
                unfinished = true;
                continue;
            };
            job.replaying = None;
            // Named before confirming: an unconfirmed link's sentence is kept, with its node's name.
            let d = diagnose(&a, &th);
            let d = Diagnosis {
                sentence: named_sentence(&d, &job.ops.node_names),
                ..d
            };
            let d = job.seen.confirm(&a, d, &th);
            for st in &a.steps {
                if job.slowdowns.back().is_none_or(|&(s, _)| s < st.step) {
                    job.slowdowns.push_back((st.step, st.slowdown()));
                }
            }
            while job.slowdowns.len() > 512 {
                job.slowdowns.pop_front();
            }
            let key = serde_json::to_string(&d.culprit).unwrap_or_default();
            let moved = job
                .whatif_said
                .as_ref()
                .is_none_or(|(k, s)| *k != key || (d.slowdown / s - 1.0).abs() >= 0.1);
            if moved {
                job.whatif_said = Some((key, d.slowdown));
                host.emit_decision(&whatif_finding(
                    name,
                    &a,
                    &d,
                    &job.ops.node_names,
                    (first_ns, job.ops.newest_ns),
                ));
            }
            job.whatif = Some((a, d));
            job.unsaved = true;
            let series: Vec<f64> = job.slowdowns.iter().map(|&(_, s)| s).collect();
            if let Some(e) = episodes(&series, &OnsetSettings::default()).last() {
                let onset_step = job.slowdowns[e.onset].0;
                if job.onset_said != Some(onset_step) && e.end.is_none() {
                    job.onset_said = Some(onset_step);
                    let detected = job.slowdowns[e.detected].0;
                    let d = Finding::new(
                        name.as_str(),
                        "fail-slow",
                        format!(
                            "a fail-slow began at step {onset_step}: steps since take {:.2}× the ones before (seen at step {detected}, {} step{} later)",
                            e.factor,
                            detected - onset_step,
                            if detected - onset_step == 1 { "" } else { "s" }
                        ),
                    )
                    .evidence(json!({"onset step": onset_step, "detected at step": detected, "factor": (e.factor * 100.0).round() / 100.0}))
                    .decision();
                    host.emit_decision(&d);
                }
            }
        }
        if unfinished && self.replay_timer == 0 {
            self.replay_timer = host.set_timer(REPLAY_CONTINUE_MS, false);
        }
    }

    fn handle(&mut self, host: &mut dyn Host, job: &str, v: Verdict) -> Option<u32> {
        if let Some(&h) = self.handles.get(&(job.to_string(), v.index())) {
            return Some(h);
        }
        let desc = MetricDesc {
            name: VERDICT_METRIC.into(),
            description: "Share of the job's steps judged in the interval with this verdict".into(),
            unit: "1".into(),
            kind: MetricKind::Gauge,
            attributes: vec![
                Attribute::new("sonde.job", job),
                Attribute::new("bottleneck.verdict", v.name()),
            ],
        };
        match host.declare_metric(&desc) {
            Ok(h) => {
                self.handles.insert((job.to_string(), v.index()), h);
                Some(h)
            }
            Err(e) => {
                host.log(Severity::Warn, &format!("declaring {VERDICT_METRIC}: {e}"));
                None
            }
        }
    }

    /// Judges every step and MPI window whose lag has passed.
    pub fn judge_due(&mut self, host: &mut dyn Host) {
        let now = host.now();
        if self.hold_judging_until.is_some_and(|until| now < until) {
            return;
        }
        let lag = self.settings.lag_ms * 1_000_000;
        let s = &self.settings;
        let mut decisions = Vec::new();
        for (job_name, job) in &mut self.jobs {
            let mut rows = Vec::new();
            for (&r, rank) in &mut job.ranks {
                let node = node_of(&self.agents, &self.agent_nodes, &self.node, &rank.node);
                for step in rank.due(now, lag) {
                    let (start_ns, end_ns) = rank.iteration(&step);
                    let e = rank.evidence((start_ns, end_ns), node);
                    let (v, reason) = judge(&e, s);
                    rank.remember(&e, s);
                    self.counters.steps_judged += 1;
                    if let Some(prev) = rank.dominance(step.batch, v, s) {
                        let since = run_start(&job.rows, r, rank, start_ns);
                        decisions.push(run_decision(job_name, r, rank, prev.as_ref(), &reason, (since, end_ns)));
                    }
                    rows.push(Row {
                        batch: step.batch,
                        rank: r,
                        node: rank.node.clone(),
                        unit: "step",
                        start_ns,
                        end_ns,
                        verdict: v,
                        reason,
                        last: false,
                        evidence: e,
                    });
                }
                // Ranks without steps: one row per MPI window.
                if rank.timed {
                    rank.prune(now.saturating_sub(lag));
                    continue;
                }
                let w = s.mpi_window_ms * 1_000_000;
                while let Some(start) = rank.next_window
                    && start + w + lag <= now
                    && rank.mpi.until() >= start + w
                {
                    rank.next_window = Some(start + w);
                    let e = rank.window_evidence(start, start + w, node);
                    if e.mpi.is_none() {
                        continue;
                    }
                    let (v, reason) = judge(&e, s);
                    let batch = ((start - job.first_window.unwrap_or(start)) / w) as i64;
                    self.counters.windows_judged += 1;
                    if let Some(prev) = rank.dominance(batch, v, s) {
                        let since = run_start(&job.rows, r, rank, start);
                        decisions.push(run_decision(
                            job_name,
                            r,
                            rank,
                            prev.as_ref(),
                            &reason,
                            (since, start + w),
                        ));
                    }
                    rows.push(Row {
                        batch,
                        rank: r,
                        node: rank.node.clone(),
                        unit: "window",
                        start_ns: start,
                        end_ns: start + w,
                        verdict: v,
                        reason,
                        last: false,
                        evidence: e,
                    });
                }
                rank.prune(now.saturating_sub(lag));
            }
            rows.sort_by_key(|r| (r.batch, r.rank));
            for row in rows {
                if let Some(change) = job.add(row, s, now) {
                    decisions.push(straggler_decision(job_name, change.as_ref(), job));
                }
            }
            if let Some(change) = job.close_due(s, now) {
                decisions.push(straggler_decision(job_name, change.as_ref(), job));
            }
        }
        for d in decisions {
            host.emit_decision(&d);
        }
    }
}

/// The What-if diagnosis as the job's headline finding (ended when nothing
/// stands out), about its culprit.
fn whatif_finding(job: &str, a: &Analysis, d: &Diagnosis, nodes: &[String], span: (u64, u64)) -> Decision {
    let node = |i: u32| nodes.get(i as usize).map_or("?", String::as_str);
    let (about, id) = match &d.culprit {
        Culprit::Worker { rank, .. } => ("rank", rank.to_string()),
        Culprit::Stage { stage, .. } => ("stage", stage.to_string()),
        Culprit::Link { node: n } => ("link", node(*n).to_string()),
        Culprit::OpKind { kind } => ("op", kind.name().to_string()),
        Culprit::InputImbalance | Culprit::None => ("job", String::new()),
    };
    let sentence = named_sentence(d, nodes);
    let mut f = Finding::new(job, "what-if", sentence)
        .about(about, id)
        .subject(format!("{job}/what-if"))
        .during(span.0, span.1)
        .headline()
        .evidence(json!({
            "steps over their ideal (×)": (a.slowdown * 100.0).round() / 100.0,
            "stage imbalance (×)": (a.stage_slowdown * 100.0).round() / 100.0,
            "recovered by fixing it (%)": (d.gain * 100.0).round(),
            "single workers explain (%)": (a.worker_share * 100.0).round(),
            "stage imbalance explains (%)": (a.stage_share * 100.0).round(),
            "steps": a.steps.len(),
            "operations": a.ops,
            "ranks": a.ranks,
        }));
    if matches!(d.culprit, Culprit::None) {
        f = f.ended();
    }
    f.decision()
}

/// The diagnosis' sentence with a link's node named, not numbered.
pub fn named_sentence(d: &Diagnosis, nodes: &[String]) -> String {
    match &d.culprit {
        Culprit::Link { node: n } => d.sentence.replace(
            &format!("node {n}'s"),
            &format!("node {}'s", nodes.get(*n as usize).map_or("?", String::as_str)),
        ),
        _ => d.sentence.clone(),
    }
}

/// The samples a rank is judged against: its node's agent's where that node
/// forwards them (a cluster master), else this host's own.
fn node_of<'a>(agents: &AgentSeries, nodes: &'a [NodeSamples], local: &'a NodeSamples, node: &str) -> &'a NodeSamples {
    agents
        .id(node)
        .and_then(|id| nodes.get(id as usize - 1))
        .unwrap_or(local)
}

/// When a rank's new dominant run began: its first step's start among the
/// job's rows, else `fallback` (the step that made it dominant).
fn run_start(rows: &VecDeque<Row>, rank_id: i32, rank: &Rank, fallback: u64) -> u64 {
    let Some(first) = rank.run.as_ref().map(|r| r.first) else {
        return fallback;
    };
    rows.iter()
        .rev()
        .find(|row| row.rank == rank_id && row.batch == first)
        .map_or(fallback, |row| row.start_ns.min(fallback))
}

fn steps_words(unit: &str, first: i64, last: i64) -> String {
    let unit = if unit == "window" { "windows" } else { "steps" };
    if first == last {
        format!("{} {first}", &unit[..unit.len() - 1])
    } else {
        format!("{unit} {first}–{last}")
    }
}

/// "steps 1200–1207 on rank 3 are input-bound: the dataloader takes 61 % of
/// the step; ...; before: steps 0–1199 compute-bound": a finding about the
/// rank, over the time from its run's first step (`since_ns`) to `until_ns`.
fn run_decision(job: &str, rank: i32, r: &Rank, previous: Option<&Run>, why: &str, span: (u64, u64)) -> Decision {
    let run = r.run.as_ref().expect("a change sets the run");
    let unit = if r.timed { "step" } else { "window" };
    let mut reason = format!(
        "{} on rank {rank} are {}: {why}",
        steps_words(unit, run.first, run.last),
        run.verdict.name()
    );
    if let Some(p) = previous {
        reason.push_str(&format!(
            "; before: {} {}",
            steps_words(unit, p.first, p.last),
            p.verdict.name()
        ));
    }
    Finding::new(job, "bottleneck", reason)
        .about("rank", rank)
        .during(span.0, span.1)
        .evidence(json!({
            "rank": rank,
            "node": r.node,
            "verdict": run.verdict.name(),
            "unit": unit,
            "first": run.first,
            "last": run.last,
            "why": why,
            "previous": previous.map(|p| json!({"verdict": p.verdict.name(), "first": p.first, "last": p.last})),
        }))
        .attribute("sonde.rank", rank as i64)
        .attribute("bottleneck.verdict", run.verdict.name())
        .decision()
}

/// The job's headline finding: the rank the others wait for, and why.
/// "rank 3 (node n1) holds the job back: last to finish in 20 of the last
/// 20 batches, 250 ms after the next rank on average; its steps there are
/// input-bound".
fn straggler_decision(job_name: &str, p: Option<&Persistent>, job: &Job) -> Decision {
    let Some(p) = p else {
        return Finding::new(job_name, "straggler", "no rank holds the job back any more")
            .headline()
            .ended()
            .evidence(json!({"job": job_name, "straggler": null}))
            .decision();
    };
    let node = job.ranks.get(&p.rank).map_or("", |r| r.node.as_str());
    let on = if node.is_empty() {
        String::new()
    } else {
        format!(" (node {node})")
    };
    let mut reason = format!(
        "rank {}{on} holds the job back: last to finish in {} of the last {} batches, {:.0} ms after the next \
         rank on average; its steps there are {}",
        p.rank,
        p.batches,
        p.of,
        p.late_by_s * 1e3,
        p.verdict.name()
    );
    // What fixing it would gain, by replaying the window's steps.
    let gain = crate::gain::of_rank(job, p.rank, p.first_batch, p.last_batch).filter(|g| g.slowdown >= 1.05);
    if let Some(g) = gain {
        reason.push_str(&format!(
            "; the job's steps take {:.1}× their ideal, and making rank {}'s steps typical recovers {:.0} % of that",
            g.slowdown,
            p.rank,
            g.gain * 100.0
        ));
    }
    // The time of the window it was named over, from the rank's rows.
    let rows = job
        .rows
        .iter()
        .filter(|r| r.rank == p.rank && (p.first_batch..=p.last_batch).contains(&r.batch));
    let range = rows.fold(None, |acc: Option<(u64, u64)>, r| {
        Some(acc.map_or((r.start_ns, r.end_ns), |(a, b)| (a.min(r.start_ns), b.max(r.end_ns))))
    });
    let mut f = Finding::new(job_name, "straggler", reason)
        .about("rank", p.rank)
        .subject(job_name)
        .headline()
        .evidence(json!({
            "rank": p.rank,
            "node": node,
            "last in": format!("{} of {} batches", p.batches, p.of),
            "batches": format!("{}–{}", p.first_batch, p.last_batch),
            "late by (ms)": (p.late_by_s * 1e4).round() / 10.0,
            "verdict": p.verdict.name(),
            "steps over their ideal (×)": gain.map(|g| (g.slowdown * 100.0).round() / 100.0),
            "recovered by fixing it (%)": gain.map(|g| (g.gain * 100.0).round()),
        }))
        .attribute("bottleneck.verdict", p.verdict.name());
    if let Some((a, b)) = range {
        f = f.during(a, b);
    }
    f.decision()
}
