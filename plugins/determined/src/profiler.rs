//! The profiler: every hook's logic, with the host passed in as a
//! [`Host`] so it runs in native tests.
//!
//! Flow: samples and events become pending measurements; each waits until
//! `lag_ms` has passed since it was taken (so late batch-index reports are
//! in), then is resolved per job: counted only inside the job's active
//! window, tied to the batch index current at its timestamp, emitted as
//! points at once and kept as a row until the next flush, which writes one
//! Determined-format batch log record per series.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sonde_plugin_sdk::PointBuffer;
use sonde_plugin_sdk::types::{Attribute, Decision, EventBatch, LogRecord, Origin, SampleBatch, Severity};

use crate::host::Host;
use crate::machine::{Change, EndReason, Limits, Machine, Persisted, Phase};
use crate::outputs::{
    self, BatchBody, DROP_REASONS, MetricType, SAMPLES_PER_SECOND, Spec, SysMetric, TIMING, is_samples_per_second,
};
use crate::samples::{NO_GPU, SampleReader, SysMeasurement};
use crate::settings::{AtShutdown, Settings};
use crate::timeline::Timeline;

/// Progress name that carries the batch index.
pub const BATCH_IDX: &str = "batch_idx";
/// Distinct timing names kept per job.
pub const MAX_TIMING_NAMES: usize = 256;
/// Resolved timings kept for `GET /timings`.
pub const RECENT_TIMINGS: usize = 10_000;
/// Rows per batch log record; a larger series is split over several records.
pub const MAX_ROWS_PER_RECORD: usize = 5_000;
/// How far before the oldest pending measurement batch-index reports are kept.
const TIMELINE_MARGIN_NS: u64 = 60_000_000_000;
pub const JOB_KEY_PREFIX: &str = "job/";
pub const COUNTERS_KEY: &str = "counters";
pub const BATCH_EVENT: &str = "determined.profiler.batch";
pub const DECISION_KIND: &str = "profiler.state";

/// What the plugin did with what it was given (kept across restarts).
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Counters {
    /// Measurement rows tied to a batch index and emitted (one per job).
    pub resolved: u64,
    /// Rows written in batch log records.
    pub flushed: u64,
    /// Oldest pending or unflushed measurements dropped for `max_pending`.
    pub dropped_queue_full: u64,
    /// Measurements outside a job's active window (or of a job with profiling off).
    pub ignored_inactive: u64,
    /// Reports from origins that are neither global rank 0 nor local rank 0
    /// (timings and throughput: not global rank 0).
    pub ignored_ineligible_rank: u64,
    /// Timings beyond the per-job cap on distinct names.
    pub dropped_too_many_names: u64,
    /// Reports of jobs other than the `job` setting names.
    pub ignored_other_job: u64,
    /// Timings and throughput of jobs that never reported a batch index.
    pub ignored_unknown_job: u64,
    /// Timings that end before they start.
    pub malformed: u64,
    /// Measurements discarded by `stop` with at_shutdown = drop.
    pub discarded_at_shutdown: u64,
}

impl Counters {
    fn dropped(&self, reason: &str) -> u64 {
        match reason {
            "queue_full" => self.dropped_queue_full,
            "inactive" => self.ignored_inactive,
            "ineligible_rank" => self.ignored_ineligible_rank,
            "too_many_names" => self.dropped_too_many_names,
            _ => 0,
        }
    }
}

#[derive(Debug, Clone)]
pub enum JobKind {
    /// A timed section; `step` is the batch index given with it, or -1.
    Timing {
        name: Arc<str>,
        step: i64,
    },
    SamplesPerSecond,
}

/// A timing or a throughput point, waiting for the lag.
#[derive(Debug, Clone)]
pub struct JobMeasurement {
    pub job: Arc<str>,
    pub kind: JobKind,
    /// The timing's start, or the point's time.
    pub time: u64,
    /// Seconds, or samples per second.
    pub value: f64,
}

/// A resolved timing, as `GET /timings` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimingRow {
    #[serde(serialize_with = "arc_str")]
    pub job: Arc<str>,
    #[serde(serialize_with = "arc_str")]
    pub name: Arc<str>,
    pub batch_idx: u64,
    pub start_ns: u64,
    pub duration_s: f64,
}

fn arc_str<S: serde::Serializer>(s: &Arc<str>, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_str(s)
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Output {
    Sys(SysMetric),
    Timing(Arc<str>),
    Misc,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SeriesKey {
    job: Arc<str>,
    output: Output,
    gpu: u16,
}

/// One (job, Determined metric, GPU) series.
#[derive(Debug)]
struct SeriesDef {
    job: Arc<str>,
    determined: Arc<str>,
    spec: Spec,
    gpu_uuid: String,
    /// `None` when the host refused the declaration (logged once).
    handle: Option<u32>,
}

/// A resolved measurement waiting for the next flush.
#[derive(Debug, Clone, Copy)]
struct Row {
    series: u32,
    time: u64,
    batch: u64,
    /// In the metric's unit (converted to Determined's at flush).
    value: f64,
}

pub struct Job {
    pub name: Arc<str>,
    pub machine: Machine,
    pub timeline: Timeline,
    /// Node of the origin that enabled system metrics / timings (the batch's `agent`).
    pub node_sys: String,
    pub node_timing: String,
    timing_names: HashSet<Arc<str>>,
    names_overflow_logged: bool,
    /// `sonde.batch.index` handle per metric type (`Some(None)`: refused).
    batch_handles: [Option<Option<u32>>; 3],
    /// Timestamp of the last `sonde.batch.index` point per metric type.
    last_batch_point: [Option<u64>; 3],
    cap_timer: Option<u64>,
    persisted: Option<Persisted>,
}

impl Job {
    fn new(name: Arc<str>, machine: Machine) -> Job {
        Job {
            name,
            machine,
            timeline: Timeline::default(),
            node_sys: String::new(),
            node_timing: String::new(),
            timing_names: HashSet::new(),
            names_overflow_logged: false,
            batch_handles: [None; 3],
            last_batch_point: [None; 3],
            cap_timer: None,
            persisted: None,
        }
    }

    /// The batch index current at `time`.
    fn batch_at(&self, time: u64) -> u64 {
        self.timeline.at(time).or(self.machine.last_batch).unwrap_or(0)
    }

    fn state_body(&self, reason: &str) -> String {
        #[derive(Serialize)]
        struct Body<'a> {
            job: &'a str,
            enabled: bool,
            sysmetrics_enabled: bool,
            timings_enabled: bool,
            active: bool,
            ended: bool,
            reason: &'a str,
            batch_idx: Option<u64>,
        }
        let m = &self.machine;
        serde_json::to_string(&Body {
            job: &self.name,
            enabled: m.enabled(),
            sysmetrics_enabled: m.sys_enabled(),
            timings_enabled: m.timings_enabled(),
            active: m.is_active(),
            ended: m.is_ended(),
            reason,
            batch_idx: m.last_batch,
        })
        .expect("state body serializes")
    }

    /// A `profiler.state` decision and the same sentence in the host's log.
    fn report(&self, host: &mut dyn Host, level: Severity, reason: &str, sentence: String) {
        host.log(level, &sentence);
        host.emit_decision(&Decision {
            kind: DECISION_KIND.to_string(),
            subject: self.name.to_string(),
            reason: sentence,
            body: self.state_body(reason),
            attributes: vec![Attribute::new("determined.trial", &*self.name)],
        });
    }

    fn persist(&mut self, host: &mut dyn Host, now: u64) {
        let p = self.machine.to_persisted(now);
        if self.persisted.as_ref() == Some(&p) {
            return;
        }
        let json = serde_json::to_vec(&p).expect("persisted state serializes");
        match host.state_put(&format!("{JOB_KEY_PREFIX}{}", self.name), &json) {
            Ok(()) => self.persisted = Some(p),
            Err(e) => host.log(
                Severity::Warn,
                &format!("job {}: could not persist its state: {e}", self.name),
            ),
        }
    }

    fn schedule_cap(&mut self, host: &mut dyn Host, limits: &Limits, now: u64) {
        if let Some(id) = self.cap_timer.take() {
            host.cancel_timer(id);
        }
        if let Some(end) = self.machine.cap_end(limits) {
            let ms = end.saturating_sub(now).div_ceil(1_000_000);
            self.cap_timer = Some(host.set_timer(ms, false));
        }
    }

    /// Reports, persists and arms/disarms timers for a change of state.
    fn apply(&mut self, host: &mut dyn Host, change: Change, settings: &Settings, now: u64) {
        let name = self.name.clone();
        let batch = self.machine.last_batch.map_or("none".to_string(), |b| b.to_string());
        let limits = limits(settings);
        let (level, sentence) = match change {
            Change::Activated { .. } => (
                Severity::Info,
                format!(
                    "job {name}: profiling active from batch {batch} (begin_on_batch {})",
                    settings.begin_on_batch
                ),
            ),
            Change::Resumed { at } => (
                Severity::Info,
                format!(
                    "job {name}: profiling resumed after a restart at batch {batch}{}",
                    match self.machine.cap_end(&limits) {
                        Some(end) => format!(" with {} s of max_active_s left", seconds(end - at)),
                        None => String::new(),
                    }
                ),
            ),
            Change::Ended { reason, .. } => {
                let why = match reason {
                    EndReason::EndAfterBatch => format!(
                        "batch {batch} is past end_after_batch {}",
                        settings.end_after_batch.map_or("-".into(), |e| e.to_string())
                    ),
                    EndReason::MaxActive => {
                        format!("active for max_active_s ({} s)", json_number(settings.max_active_s))
                    }
                    EndReason::NotResumed => {
                        "it was active before the plugin restarted and resume_after_restart is false".to_string()
                    }
                };
                let level = if reason == EndReason::NotResumed {
                    Severity::Warn
                } else {
                    Severity::Info
                };
                (level, format!("job {name}: profiling ended for good: {why}"))
            }
        };
        self.report(host, level, change.code(), sentence);
        match change {
            Change::Activated { .. } | Change::Resumed { .. } => self.schedule_cap(host, &limits, now),
            Change::Ended { .. } => {
                if let Some(id) = self.cap_timer.take() {
                    host.cancel_timer(id);
                }
            }
        }
        self.persist(host, now);
    }

    fn batch_point(&mut self, host: &mut dyn Host, points: &mut PointBuffer, t: MetricType, time: u64, batch: u64) {
        let i = t.index();
        if self.last_batch_point[i] == Some(time) {
            return;
        }
        self.last_batch_point[i] = Some(time);
        let handle =
            *self.batch_handles[i].get_or_insert_with(|| declare(host, &outputs::batch_index_desc(&self.name, t)));
        if let Some(h) = handle {
            points.push(h, time, batch as f64);
        }
    }
}

/// `ns` as seconds with one decimal, without pulling in core's float
/// formatting (serde_json brings its own; the component stays smaller).
fn seconds(ns: u64) -> String {
    let tenths = ns.saturating_add(50_000_000) / 100_000_000;
    format!("{}.{}", tenths / 10, tenths % 10)
}

/// A float as JSON writes it (e.g. `300.0`, `0.5`).
fn json_number(x: f64) -> String {
    serde_json::Value::from(x).to_string()
}

fn declare(host: &mut dyn Host, desc: &sonde_plugin_sdk::types::MetricDesc) -> Option<u32> {
    match host.declare_metric(desc) {
        Ok(h) => Some(h),
        Err(e) => {
            host.log(
                Severity::Warn,
                &format!("declare-metric {}: {e}; its points are not emitted", desc.name),
            );
            None
        }
    }
}

pub fn limits(s: &Settings) -> Limits {
    Limits {
        begin_on_batch: s.begin_on_batch,
        end_after_batch: s.end_after_batch,
        cap_ns: s.cap_ns(),
    }
}

/// Where resolved measurements go: points now, rows until the flush.
#[derive(Default)]
struct Outputs {
    series: Vec<SeriesDef>,
    index: HashMap<SeriesKey, u32>,
    unflushed: VecDeque<Row>,
    points: PointBuffer,
    recent: VecDeque<TimingRow>,
    counters: Counters,
}

impl Outputs {
    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        host: &mut dyn Host,
        key: SeriesKey,
        spec: Spec,
        determined: &Arc<str>,
        gpu_uuid: &str,
        time: u64,
        batch: u64,
        value: f64,
    ) {
        let idx = match self.index.get(&key) {
            Some(&i) => i,
            None => {
                let desc = outputs::metric_desc(&spec, &key.job, determined, gpu_uuid);
                let handle = declare(host, &desc);
                let i = self.series.len() as u32;
                self.series.push(SeriesDef {
                    job: key.job.clone(),
                    determined: determined.clone(),
                    spec,
                    gpu_uuid: gpu_uuid.to_string(),
                    handle,
                });
                self.index.insert(key, i);
                i
            }
        };
        if let Some(h) = self.series[idx as usize].handle {
            self.points.push(h, time, value);
        }
        self.unflushed.push_back(Row {
            series: idx,
            time,
            batch,
            value,
        });
        self.counters.resolved += 1;
    }
}

/// What an origin of the current event batch may do.
#[derive(Clone)]
struct OriginView {
    /// `None`: filtered out by the `job` setting.
    job: Option<Arc<str>>,
    sys: bool,
    timing: bool,
}

pub struct Profiler {
    pub settings: Settings,
    reader: SampleReader,
    pub jobs: BTreeMap<Arc<str>, Job>,
    pending_sys: VecDeque<SysMeasurement>,
    pending_job: VecDeque<JobMeasurement>,
    out: Outputs,
    dropped_handles: Vec<Option<u32>>,
    flush_timer: Option<u64>,
    tick_timer: Option<u64>,
    /// Counters at the previous flush (to log what changed).
    flushed_counters: Counters,
    persisted_counters: Option<Counters>,
    pub restarts: u32,
}

impl Profiler {
    /// Starts the profiler: restores what the state store holds (jobs and
    /// counters from before a restart) and sets the flush and resolve timers.
    pub fn start(host: &mut dyn Host, settings: Settings, restarts: u32) -> Profiler {
        let mut p = Profiler {
            settings,
            reader: SampleReader::default(),
            jobs: BTreeMap::new(),
            pending_sys: VecDeque::new(),
            pending_job: VecDeque::new(),
            out: Outputs::default(),
            dropped_handles: Vec::new(),
            flush_timer: None,
            tick_timer: None,
            flushed_counters: Counters::default(),
            persisted_counters: None,
            restarts,
        };
        p.restore(host);
        p.set_flush_timer(host);
        p.set_tick_timer(host);
        p
    }

    fn restore(&mut self, host: &mut dyn Host) {
        let now = host.now();
        if let Some(bytes) = host.state_get(COUNTERS_KEY) {
            match serde_json::from_slice::<Counters>(&bytes) {
                Ok(c) => {
                    self.out.counters = c.clone();
                    self.flushed_counters = c.clone();
                    self.persisted_counters = Some(c);
                }
                Err(e) => host.log(
                    Severity::Warn,
                    &format!("stored counters unreadable, starting from 0: {e}"),
                ),
            }
        }
        let limits = limits(&self.settings);
        for key in host.state_keys(JOB_KEY_PREFIX) {
            let Some(name) = key.strip_prefix(JOB_KEY_PREFIX) else {
                continue;
            };
            let Some(bytes) = host.state_get(&key) else { continue };
            let persisted: Persisted = match serde_json::from_slice(&bytes) {
                Ok(p) => p,
                Err(e) => {
                    host.log(
                        Severity::Warn,
                        &format!("job {name}: stored state unreadable, ignored: {e}"),
                    );
                    continue;
                }
            };
            let (machine, change) = Machine::restore(
                &persisted,
                self.settings.enabled,
                self.settings.resume_after_restart,
                &limits,
                now,
            );
            let name: Arc<str> = name.into();
            let mut job = Job::new(name.clone(), machine);
            job.persisted = Some(persisted);
            match change {
                Some(c) => job.apply(host, c, &self.settings, now),
                None if matches!(job.machine.phase, Phase::Resuming { .. }) => host.log(
                    Severity::Info,
                    &format!(
                        "job {name}: was active when the plugin last stopped (restarts={}); profiling resumes at its next batch report",
                        self.restarts
                    ),
                ),
                None => {}
            }
            self.jobs.insert(name, job);
        }
    }

    fn set_flush_timer(&mut self, host: &mut dyn Host) {
        if let Some(id) = self.flush_timer.take() {
            host.cancel_timer(id);
        }
        self.flush_timer = Some(host.set_timer(self.settings.flush_every_ms(), true));
    }

    fn set_tick_timer(&mut self, host: &mut dyn Host) {
        if let Some(id) = self.tick_timer.take() {
            host.cancel_timer(id);
        }
        self.tick_timer = Some(host.set_timer(self.settings.tick_ms(), true));
    }

    /// New settings from a live `configure`.
    pub fn configure(&mut self, host: &mut dyn Host, new: Settings) {
        let old = std::mem::replace(&mut self.settings, new);
        let now = host.now();
        if old.sample_request() != self.settings.sample_request() {
            host.request_samples(Some(&self.settings.sample_request()));
        }
        if old.flush_every_ms() != self.settings.flush_every_ms() {
            self.set_flush_timer(host);
        }
        if old.tick_ms() != self.settings.tick_ms() {
            self.set_tick_timer(host);
        }
        let limits = limits(&self.settings);
        if limits != self::limits(&old) {
            for job in self.jobs.values_mut() {
                match job.machine.apply_limits(now, &limits) {
                    Some(change) => job.apply(host, change, &self.settings, now),
                    None if job.machine.is_active() => job.schedule_cap(host, &limits, now),
                    None => {}
                }
            }
        }
        self.enforce_bound();
    }

    // ------------------------------------------------------------------
    // Inputs
    // ------------------------------------------------------------------

    pub fn on_samples(&mut self, host: &mut dyn Host, batch: SampleBatch) -> Result<(), String> {
        let measurements = self.reader.read(batch)?;
        self.pending_sys.extend(measurements);
        self.settle(host);
        Ok(())
    }

    /// The origin's view: its job (after the `job` filter) and what its
    /// ranks allow. Unknown ranks (-1) count as 0 unless overridden.
    fn origin_view(&self, o: &Origin) -> OriginView {
        let job =
            (self.settings.job.is_empty() || self.settings.job == o.job).then(|| Arc::<str>::from(o.job.as_str()));
        let rank = self.settings.global_rank.unwrap_or(o.rank);
        let local = self.settings.local_rank.unwrap_or(o.local_rank);
        OriginView {
            job,
            sys: local <= 0,
            timing: rank <= 0,
        }
    }

    /// Finds or creates the job an origin reports for and latches its rank
    /// flags, reporting what changed.
    fn register(&mut self, host: &mut dyn Host, origin: &Origin, view: &OriginView) {
        let Some(name) = &view.job else { return };
        let created = !self.jobs.contains_key(name);
        let job = self
            .jobs
            .entry(name.clone())
            .or_insert_with(|| Job::new(name.clone(), Machine::new(self.settings.enabled)));
        let mut gained = Vec::new();
        if view.sys && !job.machine.sys_rank {
            job.machine.sys_rank = true;
            job.node_sys = origin.node.clone();
            gained.push("system metrics");
        }
        if view.timing && !job.machine.timing_rank {
            job.machine.timing_rank = true;
            job.node_timing = origin.node.clone();
            gained.push("timings");
        }
        if !created && gained.is_empty() {
            return;
        }
        let m = &job.machine;
        let what = if !m.profiling {
            "profiling off (enabled = false)".to_string()
        } else if !m.enabled() {
            "profiling off for its origins so far (neither global rank 0 nor local rank 0)".to_string()
        } else {
            format!(
                "profiling enabled: system metrics {}, timings {}",
                if m.sys_enabled() { "on" } else { "off" },
                if m.timings_enabled() { "on" } else { "off" }
            )
        };
        let (reason, sentence) = if created {
            ("seen", format!("job {name}: first seen; {what}"))
        } else {
            (
                "enabled",
                format!(
                    "job {name}: {} enabled by an origin on node \"{}\"; {what}",
                    gained.join(" and "),
                    origin.node
                ),
            )
        };
        job.report(host, Severity::Info, reason, sentence);
    }

    pub fn on_events(&mut self, host: &mut dyn Host, batch: EventBatch) {
        let now = host.now();
        let limits = limits(&self.settings);
        // Per origin of this batch: its view, and whether it was registered
        // with its job. A batch index report creates the job; timings and
        // throughput only count for a job that has reported one (so spans of
        // an unrelated application do not become jobs).
        let mut views: Vec<Option<(OriginView, bool)>> = vec![None; batch.origins.len()];
        let mut view_of = |p: &mut Profiler, host: &mut dyn Host, i: u32, create: bool| -> Option<OriginView> {
            let i = i as usize;
            let origin = batch.origins.get(i)?;
            let (view, registered) = views[i].get_or_insert_with(|| (p.origin_view(origin), false));
            let known = view.job.as_ref().is_some_and(|j| p.jobs.contains_key(j));
            if !*registered && (create || known) {
                p.register(host, origin, view);
                *registered = true;
            }
            Some(view.clone())
        };
        let name_of = |i: u32| batch.names.get(i as usize).map(String::as_str);

        if let Some(c) = &batch.progress {
            for i in 0..c.origin.len() {
                if name_of(c.name[i]) != Some(BATCH_IDX) {
                    continue;
                }
                let Some(view) = view_of(self, host, c.origin[i], true) else {
                    continue;
                };
                let Some(name) = &view.job else {
                    self.out.counters.ignored_other_job += 1;
                    continue;
                };
                if !view.sys && !view.timing {
                    self.out.counters.ignored_ineligible_rank += 1;
                    continue;
                }
                let job = self.jobs.get_mut(name).expect("registered");
                if !job.machine.enabled() {
                    continue;
                }
                let (time, batch_idx) = (c.time[i], c.value[i]);
                // After the end only a report from before it (arriving late) matters.
                if job.machine.window().is_some_and(|(_, end)| time >= end) && job.machine.is_ended() {
                    continue;
                }
                job.timeline.record(time, batch_idx);
                for change in job.machine.on_batch(time, batch_idx, &limits) {
                    job.apply(host, change, &self.settings, now);
                }
            }
        }

        if let Some(c) = &batch.timings {
            for i in 0..c.origin.len() {
                let Some(view) = view_of(self, host, c.origin[i], false) else {
                    continue;
                };
                let Some(job_name) = self.eligible_for_timings(&view) else {
                    continue;
                };
                let (start, end) = (c.start[i], c.end[i]);
                let Some(name) = name_of(c.name[i]).filter(|_| end >= start) else {
                    self.out.counters.malformed += 1;
                    continue;
                };
                let job = self.jobs.get_mut(&job_name).expect("registered");
                let name: Arc<str> = match job.timing_names.get(name) {
                    Some(n) => n.clone(),
                    None if job.timing_names.len() < MAX_TIMING_NAMES => {
                        let n: Arc<str> = name.into();
                        job.timing_names.insert(n.clone());
                        n
                    }
                    None => {
                        self.out.counters.dropped_too_many_names += 1;
                        if !job.names_overflow_logged {
                            job.names_overflow_logged = true;
                            host.log(
                                Severity::Warn,
                                &format!(
                                    "job {job_name}: more than {MAX_TIMING_NAMES} distinct timing names; \
                                     timings with new names (first: \"{name}\") are dropped and counted"
                                ),
                            );
                        }
                        continue;
                    }
                };
                self.pending_job.push_back(JobMeasurement {
                    job: job_name,
                    kind: JobKind::Timing { name, step: c.step[i] },
                    time: start,
                    value: (end - start) as f64 / 1e9,
                });
            }
        }

        if let Some(c) = &batch.points {
            for i in 0..c.origin.len() {
                let is_sps = batch
                    .point_series
                    .get(c.series[i] as usize)
                    .is_some_and(|s| is_samples_per_second(&s.metric));
                if !is_sps || c.value[i].is_nan() {
                    continue;
                }
                let Some(view) = view_of(self, host, c.origin[i], false) else {
                    continue;
                };
                let Some(job) = self.eligible_for_timings(&view) else {
                    continue;
                };
                self.pending_job.push_back(JobMeasurement {
                    job,
                    kind: JobKind::SamplesPerSecond,
                    time: c.time[i],
                    value: c.value[i],
                });
            }
        }
        self.settle(host);
    }

    /// The job of a timing or throughput report, if the job is known (it
    /// reported a batch index) and the origin may report them (global rank
    /// 0, profiling on); otherwise counted and `None`.
    fn eligible_for_timings(&mut self, view: &OriginView) -> Option<Arc<str>> {
        let Some(name) = &view.job else {
            self.out.counters.ignored_other_job += 1;
            return None;
        };
        if !view.timing {
            self.out.counters.ignored_ineligible_rank += 1;
            return None;
        }
        match self.jobs.get(name) {
            None => {
                self.out.counters.ignored_unknown_job += 1;
                return None;
            }
            Some(j) if !j.machine.timings_enabled() => {
                self.out.counters.ignored_inactive += 1;
                return None;
            }
            Some(_) => {}
        }
        Some(name.clone())
    }

    pub fn on_timer(&mut self, host: &mut dyn Host, id: u64) {
        if Some(id) == self.flush_timer {
            self.check_caps(host);
            self.resolve(host, false);
            self.flush(host);
            self.emit_points(host);
        } else {
            // The resolve tick, or a job's cap: both are covered by settle.
            self.settle(host);
        }
    }

    /// Every hook's common tail: end jobs whose cap passed, resolve what the
    /// lag allows, bound the queues, emit the points.
    fn settle(&mut self, host: &mut dyn Host) {
        self.check_caps(host);
        self.resolve(host, false);
        self.enforce_bound();
        self.emit_points(host);
    }

    fn check_caps(&mut self, host: &mut dyn Host) {
        let now = host.now();
        let limits = limits(&self.settings);
        for job in self.jobs.values_mut() {
            if let Some(change) = job.machine.check_cap(now, &limits) {
                job.apply(host, change, &self.settings, now);
            }
        }
    }

    fn emit_points(&mut self, host: &mut dyn Host) {
        if !self.out.points.is_empty() {
            host.emit_points(&self.out.points.take());
        }
    }

    // ------------------------------------------------------------------
    // Resolution
    // ------------------------------------------------------------------

    /// Resolves every pending measurement taken at least `lag_ms` ago (all
    /// of them when `force`).
    fn resolve(&mut self, host: &mut dyn Host, force: bool) {
        let now = host.now();
        let horizon = if force {
            u64::MAX
        } else {
            now.saturating_sub(self.settings.lag_ns())
        };
        while self.pending_sys.front().is_some_and(|m| m.time <= horizon) {
            let m = self.pending_sys.pop_front().expect("checked");
            self.resolve_sys(host, &m);
        }
        while self.pending_job.front().is_some_and(|m| m.time <= horizon) {
            let m = self.pending_job.pop_front().expect("checked");
            self.resolve_job(host, m);
        }
        // Reports older than anything still pending (with a margin for
        // timings reported long after they started) are no longer needed.
        let oldest = [
            self.pending_sys.front().map(|m| m.time),
            self.pending_job.front().map(|m| m.time),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(horizon)
        .min(horizon);
        let keep_from = oldest.saturating_sub(TIMELINE_MARGIN_NS);
        for job in self.jobs.values_mut() {
            job.timeline.prune_before(keep_from);
        }
    }

    fn resolve_sys(&mut self, host: &mut dyn Host, m: &SysMeasurement) {
        let spec = m.metric.spec();
        let determined: Arc<str> = spec.determined.into();
        let gpu_uuid = if m.gpu == NO_GPU {
            ""
        } else {
            self.reader.gpu_uuid(m.gpu)
        };
        let only = self.settings.job.as_str();
        for job in self.jobs.values_mut() {
            // A job the `job` setting no longer selects gets no more samples.
            if !job.machine.sys_enabled() || (!only.is_empty() && *job.name != *only) {
                continue;
            }
            if !job.machine.counts(m.since, m.time) {
                // Before activation (or while waiting to resume) it is
                // ignored-while-inactive; a rate whose first reading is
                // before activation, or anything after the end, is not counted.
                let before = match job.machine.window() {
                    Some((start, _)) => m.time < start,
                    None => !job.machine.is_ended(),
                };
                if before {
                    self.out.counters.ignored_inactive += 1;
                }
                continue;
            }
            let batch = job.batch_at(m.time);
            let key = SeriesKey {
                job: job.name.clone(),
                output: Output::Sys(m.metric),
                gpu: m.gpu,
            };
            self.out
                .push(host, key, spec, &determined, gpu_uuid, m.time, batch, m.value);
            job.batch_point(host, &mut self.out.points, MetricType::System, m.time, batch);
        }
    }

    fn resolve_job(&mut self, host: &mut dyn Host, m: JobMeasurement) {
        let Some(job) = self.jobs.get_mut(&m.job) else { return };
        if !job.machine.counts(m.time, m.time) {
            self.out.counters.ignored_inactive += 1;
            return;
        }
        let (output, spec, determined, metric_type, batch) = match &m.kind {
            JobKind::Timing { name, step } => {
                let batch = if *step >= 0 { *step as u64 } else { job.batch_at(m.time) };
                (
                    Output::Timing(name.clone()),
                    TIMING,
                    name.clone(),
                    MetricType::Timing,
                    batch,
                )
            }
            JobKind::SamplesPerSecond => (
                Output::Misc,
                SAMPLES_PER_SECOND,
                Arc::from(SAMPLES_PER_SECOND.determined),
                MetricType::Misc,
                job.batch_at(m.time),
            ),
        };
        let key = SeriesKey {
            job: job.name.clone(),
            output,
            gpu: NO_GPU,
        };
        self.out.push(host, key, spec, &determined, "", m.time, batch, m.value);
        job.batch_point(host, &mut self.out.points, metric_type, m.time, batch);
        if let JobKind::Timing { name, .. } = m.kind {
            if self.out.recent.len() >= RECENT_TIMINGS {
                self.out.recent.pop_front();
            }
            self.out.recent.push_back(TimingRow {
                job: m.job,
                name,
                batch_idx: batch,
                start_ns: m.time,
                duration_s: m.value,
            });
        }
    }

    /// Keeps pending + unflushed within `max_pending`, dropping the oldest:
    /// unflushed rows first (they were resolved earliest), then whichever
    /// pending measurement was taken first.
    fn enforce_bound(&mut self) {
        let total = self.pending_sys.len() + self.pending_job.len() + self.out.unflushed.len();
        let excess = total.saturating_sub(self.settings.max_pending);
        for _ in 0..excess {
            if self.out.unflushed.pop_front().is_none() {
                let sys = self.pending_sys.front().map(|m| m.time);
                let job = self.pending_job.front().map(|m| m.time);
                match (sys, job) {
                    (Some(s), Some(j)) if j < s => drop(self.pending_job.pop_front()),
                    (Some(_), _) => drop(self.pending_sys.pop_front()),
                    _ => drop(self.pending_job.pop_front()),
                }
            }
            self.out.counters.dropped_queue_full += 1;
        }
    }

    // ------------------------------------------------------------------
    // Flush and stop
    // ------------------------------------------------------------------

    /// Writes one `determined.profiler.batch` log record per series with rows
    /// since the last flush, emits the drop counters and persists what changed.
    pub fn flush(&mut self, host: &mut dyn Host) {
        let now = host.now();
        let rows = std::mem::take(&mut self.out.unflushed);
        if !rows.is_empty() {
            let mut by_series: BTreeMap<u32, Vec<Row>> = BTreeMap::new();
            for row in &rows {
                by_series.entry(row.series).or_default().push(*row);
            }
            let mut records = Vec::new();
            for (idx, rows) in by_series {
                let def = &self.out.series[idx as usize];
                let agent = self.jobs.get(&def.job).map_or("", |j| match def.spec.metric_type {
                    MetricType::System => j.node_sys.as_str(),
                    _ => j.node_timing.as_str(),
                });
                for chunk in rows.chunks(MAX_ROWS_PER_RECORD) {
                    records.push(batch_record(def, agent, chunk, now));
                }
            }
            self.out.counters.flushed += rows.len() as u64;
            host.emit_logs(&records);
        }
        let c = &self.out.counters;
        if c.dropped_queue_full > self.flushed_counters.dropped_queue_full {
            host.log(
                Severity::Warn,
                &format!(
                    "{} measurements dropped since the last flush: more than max_pending ({}) were held",
                    c.dropped_queue_full - self.flushed_counters.dropped_queue_full,
                    self.settings.max_pending
                ),
            );
        }
        self.flushed_counters = c.clone();
        self.emit_dropped(host, now);
        self.persist(host, now);
    }

    fn emit_dropped(&mut self, host: &mut dyn Host, now: u64) {
        if self.dropped_handles.is_empty() {
            self.dropped_handles = DROP_REASONS
                .iter()
                .map(|r| declare(host, &outputs::dropped_desc(r)))
                .collect();
        }
        for (reason, handle) in DROP_REASONS.iter().zip(&self.dropped_handles) {
            if let Some(h) = handle {
                self.out.points.push(*h, now, self.out.counters.dropped(reason) as f64);
            }
        }
    }

    fn persist(&mut self, host: &mut dyn Host, now: u64) {
        for job in self.jobs.values_mut() {
            job.persist(host, now);
        }
        if self.persisted_counters.as_ref() != Some(&self.out.counters) {
            let json = serde_json::to_vec(&self.out.counters).expect("counters serialize");
            match host.state_put(COUNTERS_KEY, &json) {
                Ok(()) => self.persisted_counters = Some(self.out.counters.clone()),
                Err(e) => host.log(Severity::Warn, &format!("could not persist counters: {e}")),
            }
        }
    }

    /// The `stop` hook: with at_shutdown = flush, resolve everything pending
    /// (ignoring the lag) and flush it; with drop, discard the partial batch.
    pub fn stop(&mut self, host: &mut dyn Host) {
        self.check_caps(host);
        match self.settings.at_shutdown {
            AtShutdown::Flush => {
                self.resolve(host, true);
            }
            AtShutdown::Drop => {
                let n = self.pending_sys.len() + self.pending_job.len() + self.out.unflushed.len();
                self.pending_sys.clear();
                self.pending_job.clear();
                self.out.unflushed.clear();
                self.out.counters.discarded_at_shutdown += n as u64;
                host.log(
                    Severity::Info,
                    &format!("stopping with at_shutdown = drop: discarded {n} measurements of the partial batch"),
                );
            }
        }
        self.flush(host);
        self.emit_points(host);
    }

    // ------------------------------------------------------------------
    // For the routes
    // ------------------------------------------------------------------

    pub fn counters(&self) -> &Counters {
        &self.out.counters
    }

    pub fn pending(&self) -> usize {
        self.pending_sys.len() + self.pending_job.len()
    }

    pub fn unflushed(&self) -> usize {
        self.out.unflushed.len()
    }

    pub fn recent_timings(&self) -> &VecDeque<TimingRow> {
        &self.out.recent
    }

    /// Forgets a job (memory and state store) so the next report of that name
    /// starts afresh, e.g. a new trial with the same name. Returns whether
    /// it was known.
    pub fn reset_job(&mut self, host: &mut dyn Host, name: &str) -> bool {
        let key = format!("{JOB_KEY_PREFIX}{name}");
        let stored = host.state_get(&key).is_some();
        host.state_delete(&key);
        self.pending_job.retain(|m| &*m.job != name);
        let Some(job) = self.jobs.remove(name) else {
            return stored;
        };
        if let Some(id) = job.cap_timer {
            host.cancel_timer(id);
        }
        // Reported with the state the job starts from again.
        Job::new(job.name.clone(), Machine::new(self.settings.enabled)).report(
            host,
            Severity::Info,
            "reset",
            format!("job {name}: state reset on request; its next report starts it afresh"),
        );
        true
    }
}

/// One Determined-format batch for `rows` of a series.
fn batch_record(def: &SeriesDef, agent: &str, rows: &[Row], now: u64) -> LogRecord {
    let spec = &def.spec;
    let body = BatchBody {
        trial: &def.job,
        agent,
        gpu_uuid: &def.gpu_uuid,
        metric: &def.determined,
        metric_type: spec.metric_type.label(),
        unit: spec.determined_unit,
        values: rows.iter().map(|r| spec.to_determined(r.value)).collect(),
        batch_indices: rows.iter().map(|r| r.batch).collect(),
        timestamps: rows.iter().map(|r| r.time).collect(),
    };
    let mut attributes = vec![
        Attribute::new("determined.trial", &*def.job),
        Attribute::new("determined.metric", &*def.determined),
        Attribute::new("determined.metric_type", spec.metric_type.attr()),
    ];
    if !def.gpu_uuid.is_empty() {
        attributes.push(Attribute::new("hw.id", def.gpu_uuid.as_str()));
    }
    LogRecord {
        time: now,
        severity: Severity::Info,
        event_name: BATCH_EVENT.to_string(),
        body: serde_json::to_string(&body).expect("batch serializes"),
        attributes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_in_sentences() {
        let table = [
            (0, "0.0"),
            (60_000_000_000, "60.0"),
            (1_249_000_000, "1.2"),
            (1_250_000_000, "1.3"),
        ];
        for (ns, want) in table {
            assert_eq!(seconds(ns), want, "{ns}");
        }
        assert_eq!(
            (json_number(300.0).as_str(), json_number(0.5).as_str()),
            ("300.0", "0.5")
        );
    }
}
