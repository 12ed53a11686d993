//! The profiler: every hook's logic, with the host passed in as a
//! [`Host`] so it runs in native tests.
//!
//! Flow: samples and events become pending measurements; each waits until
//! `lag_ms` has passed since it was taken (so late batch-index reports are
//! in), then is resolved per job: counted only inside the job's active
//! window, tied to the batch index current at its timestamp, emitted as
//! points at once and kept as a row until the next flush, which writes one
//! Determined-format batch log record per series.
//!
//! `Profiler` is defined here with its life cycle (start, restore,
//! configure, timers, stop) and what the routes read; the rest, one job per
//! file:
//!
//! | file | what |
//! |---|---|
//! | `job.rs` | one job: its enabled/active state machine applied, its state record and decisions, its cap timer |
//! | `intake.rs` | the hooks' input: samples and event batches become pending measurements |
//! | `resolve.rs` | pending measurements past the lag, tied to a batch index inside the active window |
//! | `series.rs` | where resolved measurements go: declared series, points now, rows until the flush |
//! | `flush.rs` | every `flush_every_s`: Determined-format batch records, drop counters, persisted counters |

mod flush;
mod intake;
mod job;
mod resolve;
mod series;

pub use job::{Job, JobKind, RankInfo};
pub use series::TimingRow;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sonde_plugin_sdk::types::{SampleRequest, Severity};

use crate::agents::{AgentSamples, Source};
use crate::machine::{Machine, Persisted, Phase};
use crate::samples::{SampleReader, SysMeasurement};
use crate::settings::{AtShutdown, IDLE_DELIVER_EVERY_MS, Settings};
use intake::JobMeasurement;
use job::limits;
use series::Resolved;
use sonde_plugin_sdk::Host;

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
    /// Agents' series refused for the bounds on nodes and series per node
    /// (once per event batch each).
    pub ignored_node_overflow: u64,
    /// Batch-index reports that arrived more than `lag_ms` after their own
    /// time, for a node this host samples: its measurements taken after such
    /// a report were already judged without it (often ignored as inactive).
    /// A job whose reports are this late needs a larger `lag_ms`.
    pub late_batch_reports: u64,
}

/// A system measurement waiting for the lag, with where it was sampled.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PendingSys {
    pub source: Source,
    /// When the lag starts: the measurement's time for this host's samples,
    /// its arrival for an agent's.
    pub ready: u64,
    pub m: SysMeasurement,
}

impl PendingSys {
    pub(crate) fn new(source: Source, ready: u64, m: SysMeasurement) -> PendingSys {
        PendingSys { source, ready, m }
    }
}

pub struct Profiler {
    pub settings: Settings,
    reader: SampleReader,
    /// Agents' samples, per node (on a cluster master).
    agents: AgentSamples,
    pub jobs: BTreeMap<Arc<str>, Job>,
    pending_sys: VecDeque<PendingSys>,
    pending_job: VecDeque<JobMeasurement>,
    out: Resolved,
    dropped_handles: Vec<Option<u32>>,
    flush_timer: Option<u64>,
    /// The resolve timer: running only while a job could use it (see `follow_jobs`).
    tick_timer: Option<u64>,
    /// What was last asked of the host (the manifest or `request-samples`).
    samples_asked: Option<SampleRequest>,
    /// Counters at the previous flush (to log what changed).
    flushed_counters: Counters,
    persisted_counters: Option<Counters>,
    pub restarts: u32,
    /// Every measurement of this host's samples taken before this time (ns)
    /// has been resolved: counted, or not, in its job's window. The host
    /// delivers samples in time order, so it is the lesser of the lag's
    /// horizon and the newest sample received. `GET /state` says it.
    pub resolved_until: u64,
    /// The newest of this host's measurements received (ns).
    sampled_until: u64,
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

impl Profiler {
    /// Starts the profiler: restores what the state store holds (jobs and
    /// counters from before a restart) and sets the flush and resolve timers.
    pub fn start(host: &mut dyn Host, settings: Settings, restarts: u32) -> Profiler {
        let mut p = Profiler {
            settings,
            reader: SampleReader::default(),
            agents: AgentSamples::default(),
            jobs: BTreeMap::new(),
            pending_sys: VecDeque::new(),
            pending_job: VecDeque::new(),
            out: Resolved::default(),
            dropped_handles: Vec::new(),
            flush_timer: None,
            tick_timer: None,
            samples_asked: None,
            flushed_counters: Counters::default(),
            persisted_counters: None,
            restarts,
            resolved_until: 0,
            sampled_until: 0,
        };
        p.restore(host);
        p.set_flush_timer(host);
        // The manifest `start` returns asks for this; no call needed.
        p.samples_asked = p.samples_wanted();
        p.follow_jobs(host);
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

    /// No resolve tick without a job: the resolve timer runs only while
    /// some job has not ended, or timings wait for the lag. Without one, a
    /// sample can only be tied to a job whose first report is still on its
    /// way (that is what the lag is for), and the next sample delivery's
    /// `settle` resolves it just as well, at most one delivery later. An
    /// idle host's determined thread then wakes for its sample deliveries
    /// and the flush timer only.
    ///
    /// Why not stop the samples too: a job's reports may arrive up to
    /// `lag_ms` after they were made (an OpenTelemetry SDK exports every few
    /// seconds), and the samples taken since then must still be here. They
    /// are only delivered less often: every [`IDLE_DELIVER_EVERY_MS`] instead
    /// of `deliver_every_ms`. The host keeps the ticks gathered when only the
    /// pacing changes, so a job's first report brings them all at the next
    /// whole second.
    pub(crate) fn follow_jobs(&mut self, host: &mut dyn Host) {
        let resolving = self.resolving();
        match (resolving, self.tick_timer) {
            (true, None) => self.set_tick_timer(host),
            (false, Some(id)) => {
                host.cancel_timer(id);
                self.tick_timer = None;
            }
            _ => {}
        }
        let wanted = self.samples_for(resolving);
        if wanted != self.samples_asked {
            host.request_samples(wanted.as_ref());
            self.samples_asked = wanted;
        }
    }

    /// Whether some job has not ended, or timings wait for the lag.
    fn resolving(&self) -> bool {
        self.jobs.values().any(|j| !j.machine.is_ended()) || !self.pending_job.is_empty()
    }

    /// What to ask the host for now: the settings' request, delivered every
    /// [`IDLE_DELIVER_EVERY_MS`] (or the setting, if longer) while no job
    /// is being resolved.
    pub fn samples_wanted(&self) -> Option<SampleRequest> {
        self.samples_for(self.resolving())
    }

    fn samples_for(&self, resolving: bool) -> Option<SampleRequest> {
        let mut req = self.settings.wanted_samples()?;
        if !resolving {
            req.deliver_every_ms = req.deliver_every_ms.max(IDLE_DELIVER_EVERY_MS);
        }
        Some(req)
    }

    /// New settings from a live `configure`.
    pub fn configure(&mut self, host: &mut dyn Host, new: Settings) {
        let old = std::mem::replace(&mut self.settings, new);
        let now = host.now();
        if old.flush_every_ms() != self.settings.flush_every_ms() {
            self.set_flush_timer(host);
        }
        if old.tick_ms() != self.settings.tick_ms() && self.tick_timer.is_some() {
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
        self.follow_jobs(host);
    }

    pub fn on_timer(&mut self, host: &mut dyn Host, id: u64) {
        if Some(id) == self.flush_timer {
            self.check_caps(host);
            self.resolve(host, false);
            self.flush(host);
            self.emit_points(host);
            self.follow_jobs(host);
        } else {
            // The resolve tick, or a job's cap: both are covered by settle.
            self.settle(host);
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

    /// Whether `node` has an agent whose samples arrive here.
    pub fn has_agent(&self, node: &str) -> bool {
        self.agents.has(node)
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
