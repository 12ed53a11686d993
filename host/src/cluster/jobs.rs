//! Jobs as first-class things: every job any report names, the nodes and
//! ranks it runs on, when it was first and last heard from, and its steps:
//! per batch index, each rank's phases (the Timings view of every rank).
//!
//! The registry keeps what was reported and judges nothing: which rank holds
//! a job back, and why, is the diagnosis plugin's finding (`plugin::findings`),
//! shown beside this view. A rank's step is the span of every timing of its
//! batch; a timing that encloses the others of its batch (the step span of
//! nested phases) is that span, not one more phase, so phases add up to the
//! step in both shapes jobs send: nested and side by side.
//!
//! ```text
//!  IngestHub ──(every accepted report)──► JobRegistry::observe
//!                                            │ job ─► ranks ─► batch ─► phases
//!  GET /api/jobs, /api/jobs/{job} ◄──────────┘
//! ```
//! Limits: `cluster.max_jobs` jobs (past it the job idle longest is dropped,
//! counted), `cluster.max_steps_per_rank` batches per rank (the oldest go,
//! counted), 4 096 ranks and 64 phase names per job (more are counted and
//! left out). A report with no job name belongs to no job (a sonde agent's
//! own telemetry) and is not kept here. Works in every role: standalone sees
//! its own machine's jobs, a master every node's. A master and a standalone
//! sonde keep their jobs in the state store too, written with the request
//! that changed them and read back at start (`jobs/store.rs`); an agent's
//! are its master's to keep.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use parking_lot::Mutex;
use serde::Serialize;

use crate::ingest::{Report, ReportTap};

pub mod store;

/// The node event that ends a job (`POST /api/jobs/{job}/end` sends it; it
/// travels from an agent to its master like any node event).
pub const JOB_ENDED: &str = "job-ended";

const MAX_RANKS_PER_JOB: usize = 4_096;
const MAX_PHASES_PER_STEP: usize = 64;
/// The progress name that carries the batch index.
const BATCH_IDX: &str = "batch_idx";

/// The kinds of work a job's reports show: "training" (timings, batch indices),
/// "parameter-server" (a process whose role is a server's), and the name of
/// every event table it sent rows of (the plugins that declare a table say
/// what it is).
fn kinds_of(r: &Report) -> impl Iterator<Item = &str> {
    let role = r.origin.role.to_ascii_lowercase().replace('_', "-");
    [
        (
            !r.timings.is_empty() || r.progress.iter().any(|p| p.name == BATCH_IDX),
            "training",
        ),
        (
            matches!(role.as_str(), "ps" | "server" | "parameter-server"),
            "parameter-server",
        ),
    ]
    .into_iter()
    .filter_map(|(has, k)| has.then_some(k))
    .chain(r.tables.iter().filter(|t| !t.rows.is_empty()).map(|t| t.table.as_str()))
}

/// One rank's time in one batch.
#[derive(Clone, Debug, Default)]
struct Step {
    start: u64,
    end: u64,
    /// Phase name → (total ns in this batch, when it first started, when it
    /// last ended).
    phases: Vec<(String, u64, u64, u64)>,
}

impl Step {
    /// Names of the timings that enclose another, shorter timing of the
    /// batch: the step span when phases are nested in it (whether or not a
    /// dataloader is also timed beside it). Timings side by side enclose
    /// none, and each is a phase.
    fn enclosing(&self) -> Vec<&str> {
        self.phases
            .iter()
            .filter(|(name, _, first, last)| {
                self.phases.iter().any(|(other, _, f, l)| {
                    other != name && f >= first && l <= last && l.saturating_sub(*f) < last.saturating_sub(*first)
                })
            })
            .map(|(n, ..)| n.as_str())
            .collect()
    }
}

#[derive(Clone, Debug, Default)]
struct Rank {
    node: String,
    local_rank: i32,
    role: String,
    last_batch: Option<u64>,
    last_ns: u64,
    steps: BTreeMap<u64, Step>,
    steps_dropped: u64,
}

#[derive(Clone, Debug, Default)]
struct Job {
    first_ns: u64,
    last_ns: u64,
    rows: u64,
    kinds: BTreeSet<String>,
    /// Node → last time it reported for this job.
    nodes: BTreeMap<String, u64>,
    /// By (global rank, role, index): a process without a rank (a parameter
    /// server's worker or server) is told apart by its role and index.
    ranks: BTreeMap<(i32, String, i32), Rank>,
    ranks_refused: u64,
    phases_refused: u64,
    /// When the job was ended ([`JOB_ENDED`]) and why; None while it runs.
    ended: Option<(u64, String)>,
}

/// What `GET /api/jobs` lists about one job.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct JobSummary {
    pub job: String,
    /// training, serving, mpi, parameter-server: what its reports contained.
    pub kinds: Vec<String>,
    pub nodes: Vec<String>,
    /// How many ranks have reported.
    pub rank_count: usize,
    pub first_ns: u64,
    pub last_ns: u64,
    pub rows: u64,
    /// "running", or "ended" once something ended it (its scheduler's
    /// epilog, `POST /api/jobs/{job}/end`): an end as planned, not a failure
    /// and not a lost node. A report from after the end runs it again (a
    /// name used twice).
    pub state: &'static str,
    /// When it was ended (ns since the epoch), and the reason given.
    pub ended_ns: Option<u64>,
    pub end_reason: Option<String>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RankView {
    /// The global rank (-1 when the job did not say).
    pub rank: i32,
    /// Index within its role (worker 3, ps 1) for a process without a rank; -1 otherwise.
    pub index: i32,
    pub node: String,
    pub local_rank: i32,
    pub role: String,
    pub last_batch: Option<u64>,
    pub last_ns: u64,
    /// Batches dropped from this rank's step view (`cluster.max_steps_per_rank`).
    pub steps_dropped: u64,
}

/// One rank's step: phases in seconds, start and end in ns since the epoch.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RankStep {
    pub rank: i32,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The step's length: from its first timing's start to its last one's
    /// end, in seconds.
    pub total_s: f64,
    /// Seconds per phase: every timing of the batch but the ones that
    /// enclose the others (see `span`).
    pub phases: BTreeMap<String, f64>,
    /// When each phase first started in this batch, ns since the epoch.
    pub phase_start_ns: BTreeMap<String, u64>,
    /// The timings that enclose others of the batch (the step span of
    /// nested phases), in seconds: the step itself, not a part of it.
    pub span: BTreeMap<String, f64>,
}

/// One batch index across ranks.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct BatchView {
    pub batch: u64,
    pub ranks: Vec<RankStep>,
}

/// `GET /api/jobs/{job}`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct JobView {
    #[serde(flatten)]
    pub summary: JobSummary,
    pub node_last_ns: BTreeMap<String, u64>,
    pub ranks: Vec<RankView>,
    /// The last `batches` batch indices any rank reported, oldest first.
    pub steps: Vec<BatchView>,
    /// The phases of the steps shown, in the order they run within a step
    /// (by their mean start offset), so charts stack them as they happen
    /// rather than alphabetically.
    pub phase_order: Vec<String>,
    pub ranks_refused: u64,
    pub phases_refused: u64,
}

/// Counters for `/api/status`.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct JobStats {
    pub jobs: usize,
    /// Jobs dropped to stay within `cluster.max_jobs`.
    pub jobs_evicted: u64,
    /// Whether jobs are kept in the state store (`jobs/store.rs`).
    pub persisted: bool,
    /// Jobs and steps changed since they were last written (0: all on disk).
    pub unsaved: usize,
}

/// A rank's key in a job: (global rank, role, index).
type RankKey = (i32, String, i32);

pub struct JobRegistry {
    inner: Mutex<Jobs>,
    max_jobs: usize,
    max_steps: usize,
}

#[derive(Default)]
struct Jobs {
    map: HashMap<String, Job>,
    evicted: u64,
    /// What changed since the last write, when a store is attached.
    dirty: Option<Dirty>,
}

/// Changes not yet written to the state store.
#[derive(Default)]
struct Dirty {
    /// Jobs whose summary or ranks changed.
    jobs: BTreeSet<String>,
    /// Steps added or changed: (job, rank, batch).
    steps: BTreeSet<(String, RankKey, u64)>,
    /// Steps dropped for room.
    gone_steps: BTreeSet<(String, RankKey, u64)>,
    /// Jobs dropped for room: every key of theirs goes.
    gone_jobs: BTreeSet<String>,
}

impl Dirty {
    fn len(&self) -> usize {
        self.jobs.len() + self.steps.len() + self.gone_steps.len() + self.gone_jobs.len()
    }
}

impl JobRegistry {
    pub fn new(max_jobs: usize, max_steps_per_rank: usize) -> Self {
        JobRegistry {
            inner: Mutex::new(Jobs::default()),
            max_jobs: max_jobs.max(1),
            max_steps: max_steps_per_rank.max(1),
        }
    }

    pub fn stats(&self) -> JobStats {
        let j = self.inner.lock();
        JobStats {
            jobs: j.map.len(),
            jobs_evicted: j.evicted,
            persisted: j.dirty.is_some(),
            unsaved: j.dirty.as_ref().map_or(0, Dirty::len),
        }
    }

    /// Whether a job of this name is kept.
    pub fn knows(&self, name: &str) -> bool {
        self.inner.lock().map.contains_key(name)
    }

    /// Every job, the most recently active first.
    pub fn list(&self) -> Vec<JobSummary> {
        let j = self.inner.lock();
        let mut v: Vec<JobSummary> = j.map.iter().map(|(name, job)| summary(name, job)).collect();
        v.sort_by(|a, b| b.last_ns.cmp(&a.last_ns).then_with(|| a.job.cmp(&b.job)));
        v
    }

    /// One job with its last `batches` batch indices.
    pub fn view(&self, name: &str, batches: usize) -> Option<JobView> {
        let j = self.inner.lock();
        let job = j.map.get(name)?;
        let mut indices: BTreeSet<u64> = BTreeSet::new();
        for r in job.ranks.values() {
            indices.extend(r.steps.keys().rev().take(batches).copied());
        }
        let keep: Vec<u64> = indices.into_iter().rev().take(batches).collect();
        // Phase → (sum of its start offsets within its steps, count).
        let mut order: BTreeMap<&str, (f64, u64)> = BTreeMap::new();
        let steps = keep
            .into_iter()
            .rev()
            .map(|batch| {
                let ranks: Vec<RankStep> = job
                    .ranks
                    .iter()
                    .filter_map(|((rank, ..), r)| {
                        let s = r.steps.get(&batch)?;
                        let span = s.enclosing();
                        let parts = s.phases.iter().filter(|(n, ..)| !span.contains(&n.as_str()));
                        for (name, _, first, _) in parts.clone() {
                            let o = order.entry(name.as_str()).or_insert((0.0, 0u64));
                            o.0 += first.saturating_sub(s.start) as f64;
                            o.1 += 1;
                        }
                        Some(RankStep {
                            rank: *rank,
                            start_ns: s.start,
                            end_ns: s.end,
                            total_s: s.end.saturating_sub(s.start) as f64 / 1e9,
                            phases: parts.clone().map(|(n, d, ..)| (n.clone(), *d as f64 / 1e9)).collect(),
                            phase_start_ns: parts.map(|(n, _, first, _)| (n.clone(), *first)).collect(),
                            span: s
                                .phases
                                .iter()
                                .filter(|(n, ..)| span.contains(&n.as_str()))
                                .map(|(n, d, ..)| (n.clone(), *d as f64 / 1e9))
                                .collect(),
                        })
                    })
                    .collect();
                BatchView { batch, ranks }
            })
            .collect();
        let mut phase_order: Vec<(&str, f64)> = order.into_iter().map(|(n, (sum, k))| (n, sum / k as f64)).collect();
        phase_order.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(b.0)));
        Some(JobView {
            summary: summary(name, job),
            node_last_ns: job.nodes.clone(),
            ranks: job
                .ranks
                .iter()
                .map(|((rank, _, index), r)| RankView {
                    rank: *rank,
                    index: *index,
                    node: r.node.clone(),
                    local_rank: r.local_rank,
                    role: r.role.clone(),
                    last_batch: r.last_batch,
                    last_ns: r.last_ns,
                    steps_dropped: r.steps_dropped,
                })
                .collect(),
            steps,
            phase_order: phase_order.into_iter().map(|(n, _)| n.to_string()).collect(),
            ranks_refused: job.ranks_refused,
            phases_refused: job.phases_refused,
        })
    }

    fn take(&self, r: &Report) {
        if r.origin.job.is_empty() {
            return;
        }
        let (earliest, latest) = report_span(r);
        let mut guard = self.inner.lock();
        let jobs = &mut *guard;
        if !jobs.map.contains_key(&r.origin.job) && jobs.map.len() >= self.max_jobs {
            // Make room: the job heard from longest ago goes.
            if let Some(oldest) = jobs.map.iter().min_by_key(|(_, j)| j.last_ns).map(|(k, _)| k.clone()) {
                jobs.map.remove(&oldest);
                jobs.evicted += 1;
                if let Some(d) = &mut jobs.dirty {
                    d.jobs.remove(&oldest);
                    d.steps.retain(|(j, ..)| *j != oldest);
                    d.gone_steps.retain(|(j, ..)| *j != oldest);
                    d.gone_jobs.insert(oldest);
                }
            }
        }
        let mut dirty = jobs.dirty.as_mut();
        if let Some(d) = dirty.as_deref_mut() {
            d.gone_jobs.remove(&r.origin.job);
            if !d.jobs.contains(&r.origin.job) {
                d.jobs.insert(r.origin.job.clone());
            }
        }
        let job = jobs.map.entry(r.origin.job.clone()).or_insert_with(|| Job {
            first_ns: latest,
            ..Default::default()
        });
        job.first_ns = job.first_ns.min(earliest);
        job.last_ns = job.last_ns.max(latest);
        // An end is no process of the job: it ends the job and adds no rank.
        let end = r.node_events.iter().rev().find(|e| e.kind == JOB_ENDED);
        if let Some(e) = end {
            if job.ended.as_ref().is_none_or(|(t, _)| e.time >= *t) {
                job.ended = Some((e.time, e.reason.clone()));
            }
            if r.rows() == r.node_events.iter().filter(|e| e.kind == JOB_ENDED).count() {
                return;
            }
        } else if job.ended.as_ref().is_some_and(|(t, _)| latest > *t) {
            job.ended = None;
        }
        job.rows += r.rows() as u64;
        for k in kinds_of(r) {
            // Bounded: a job's table names are as many as plugins declare.
            if job.kinds.len() < 64 && !job.kinds.contains(k) {
                job.kinds.insert(k.to_string());
            }
        }
        if !r.origin.node.is_empty() {
            let seen = job.nodes.entry(r.origin.node.clone()).or_default();
            *seen = (*seen).max(latest);
        }
        let key = if r.origin.rank >= 0 {
            (r.origin.rank, String::new(), -1)
        } else {
            (-1, r.origin.role.clone(), r.origin.index)
        };
        if !job.ranks.contains_key(&key) && job.ranks.len() >= MAX_RANKS_PER_JOB {
            job.ranks_refused += 1;
            return;
        }
        let rank = job.ranks.entry(key.clone()).or_default();
        if !r.origin.node.is_empty() {
            rank.node.clone_from(&r.origin.node);
        }
        rank.local_rank = r.origin.local_rank;
        rank.role.clone_from(&r.origin.role);
        rank.last_ns = rank.last_ns.max(latest);
        // Progress first: a timing without its own batch index belongs to the
        // batch that was current when it started.
        let mut progress: Vec<(u64, u64)> = r
            .progress
            .iter()
            .filter(|p| p.name == BATCH_IDX)
            .map(|p| (p.time, p.value))
            .collect();
        progress.sort_unstable();
        for t in &r.timings {
            let batch = if t.step >= 0 {
                Some(t.step as u64)
            } else {
                progress
                    .iter()
                    .rev()
                    .find(|(time, _)| *time <= t.start)
                    .map(|(_, v)| *v)
                    .or(rank.last_batch)
            };
            let Some(batch) = batch else { continue };
            if let Some(d) = dirty.as_deref_mut() {
                d.steps.insert((r.origin.job.clone(), key.clone(), batch));
            }
            let step = rank.steps.entry(batch).or_insert_with(|| Step {
                start: t.start,
                end: t.end,
                phases: Vec::new(),
            });
            step.start = step.start.min(t.start);
            step.end = step.end.max(t.end);
            let d = t.end.saturating_sub(t.start);
            match step.phases.iter().position(|(n, ..)| *n == t.name) {
                Some(i) => {
                    step.phases[i].1 += d;
                    step.phases[i].2 = step.phases[i].2.min(t.start);
                    step.phases[i].3 = step.phases[i].3.max(t.end);
                }
                None if step.phases.len() < MAX_PHASES_PER_STEP => {
                    step.phases.push((t.name.clone(), d, t.start, t.end))
                }
                None => job.phases_refused += 1,
            }
        }
        if let Some(&(_, v)) = progress.last() {
            rank.last_batch = Some(rank.last_batch.map_or(v, |b| b.max(v)));
        }
        for t in r.timings.iter().filter(|t| t.step >= 0) {
            rank.last_batch = Some(rank.last_batch.map_or(t.step as u64, |b| b.max(t.step as u64)));
        }
        while rank.steps.len() > self.max_steps {
            let Some((batch, _)) = rank.steps.pop_first() else {
                break;
            };
            rank.steps_dropped += 1;
            if let Some(d) = dirty.as_deref_mut() {
                let k = (r.origin.job.clone(), key.clone(), batch);
                d.steps.remove(&k);
                d.gone_steps.insert(k);
            }
        }
    }
}

impl ReportTap for JobRegistry {
    fn observe(&self, reports: &[Report]) {
        for r in reports {
            self.take(r);
        }
    }
}

fn summary(name: &str, job: &Job) -> JobSummary {
    JobSummary {
        job: name.to_string(),
        kinds: job.kinds.iter().cloned().collect(),
        nodes: job.nodes.keys().cloned().collect(),
        rank_count: job.ranks.len(),
        first_ns: job.first_ns,
        last_ns: job.last_ns,
        rows: job.rows,
        state: if job.ended.is_some() { "ended" } else { "running" },
        ended_ns: job.ended.as_ref().map(|(t, _)| *t),
        end_reason: job.ended.as_ref().map(|(_, why)| why.clone()),
    }
}

/// Every time a report carries, for its job's span.
fn report_times(r: &Report) -> impl Iterator<Item = u64> + '_ {
    r.progress
        .iter()
        .map(|p| p.time)
        .chain(r.timings.iter().flat_map(|t| [t.start, t.end]))
        .chain(r.points.iter().map(|p| p.time))
        .chain(r.heartbeats.iter().copied())
        .chain(r.node_events.iter().map(|e| e.time))
        .chain(r.custom.iter().map(|e| e.time))
        .chain(r.tables.iter().flat_map(|t| t.received.iter().copied()))
        .filter(|t| *t > 0)
}

/// (earliest, latest) time a report carries, in one pass; now for a report without times.
fn report_span(r: &Report) -> (u64, u64) {
    let span = report_times(r).fold(None, |acc: Option<(u64, u64)>, t| {
        Some(acc.map_or((t, t), |(lo, hi)| (lo.min(t), hi.max(t))))
    });
    span.unwrap_or_else(|| {
        let now = crate::model::now_ns();
        (now, now)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::{Origin, Progress, Timing};

    fn report(job: &str, node: &str, rank: i32, timings: &[(&str, u64, u64, i64)]) -> Report {
        Report {
            origin: Origin {
                job: job.into(),
                node: node.into(),
                rank,
                ..Default::default()
            },
            timings: timings
                .iter()
                .map(|(n, s, e, step)| Timing {
                    name: n.to_string(),
                    start: *s,
                    end: *e,
                    step: *step,
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_parameter_server_job_lists_each_process_and_is_not_training() {
        let reg = JobRegistry::new(8, 100);
        let proc = |role: &str, index: i32| {
            let mut r = report("ps-job", "n1", -1, &[]);
            r.origin.role = role.into();
            r.origin.index = index;
            r.progress.push(Progress {
                name: "clock".into(),
                value: 3,
                time: 1_000,
            });
            r
        };
        reg.observe(&[
            proc("worker", 0),
            proc("worker", 1),
            proc("ps", 0),
            proc("parameter_server", 1),
        ]);
        let v = reg.view("ps-job", 10).unwrap();
        let who: Vec<(String, i32)> = v.ranks.iter().map(|r| (r.role.clone(), r.index)).collect();
        assert_eq!(who.len(), 4, "worker 0 and ps 0 are two processes: {who:?}");
        assert!(v.ranks.iter().all(|r| r.rank == -1));
        assert_eq!(
            v.summary.kinds,
            vec!["parameter-server"],
            "a clock is not a batch index"
        );
    }

    #[test]
    fn steps_of_every_rank_line_up_by_batch() {
        let reg = JobRegistry::new(8, 100);
        reg.observe(&[
            report(
                "j",
                "n1",
                0,
                &[("forward", 1_000, 3_000, 5), ("backward", 3_000, 4_000, 5)],
            ),
            report("j", "n2", 1, &[("forward", 1_000, 9_000, 5)]),
        ]);
        let v = reg.view("j", 10).unwrap();
        assert_eq!(v.summary.nodes, vec!["n1", "n2"]);
        assert_eq!(v.summary.kinds, vec!["training"]);
        assert_eq!(v.steps.len(), 1);
        let b = &v.steps[0];
        assert_eq!(b.batch, 5);
        assert_eq!(b.ranks.len(), 2);
        assert_eq!(b.ranks[0].phases["forward"], 2e-6);
        assert_eq!(b.ranks[0].phases["backward"], 1e-6);
        assert_eq!(b.ranks[0].total_s, 3e-6);
        assert_eq!(b.ranks[1].total_s, 8e-6);
        assert_eq!(
            v.phase_order,
            vec!["forward", "backward"],
            "as they run, not alphabetically"
        );
    }

    /// 100 ms of dataloader and 400 ms of step: 0.5 s, whether the step
    /// span encloses its phases or the dataloader is timed beside it.
    #[test]
    fn a_step_is_its_span_in_both_shapes() {
        const MS: u64 = 1_000_000;
        let reg = JobRegistry::new(8, 100);
        let nested = [
            ("train_batch", 0, 500 * MS, 3),
            ("dataloader_next", 0, 100 * MS, 3),
            ("forward", 100 * MS, 300 * MS, 3),
            ("backward", 300 * MS, 500 * MS, 3),
        ];
        let beside = [
            ("dataloader_next", 0, 100 * MS, 3),
            ("train_batch", 100 * MS, 500 * MS, 3),
        ];
        // Both at once: the dataloader beside the step, forward and backward in it.
        let mixed = [
            ("dataloader_next", 0, 100 * MS, 3),
            ("train_batch", 100 * MS, 500 * MS, 3),
            ("forward", 100 * MS, 300 * MS, 3),
            ("backward", 300 * MS, 500 * MS, 3),
        ];
        reg.observe(&[
            report("nested", "n1", 0, &nested),
            report("beside", "n1", 0, &beside),
            report("mixed", "n1", 0, &mixed),
        ]);
        for (job, span, parts, span_s) in [
            ("nested", vec!["train_batch"], 3, 0.5),
            ("beside", vec![], 2, 0.0),
            ("mixed", vec!["train_batch"], 3, 0.4),
        ] {
            let v = reg.view(job, 10).unwrap();
            let r = &v.steps[0].ranks[0];
            assert_eq!(r.total_s, 0.5, "{job}");
            assert_eq!(r.span.keys().collect::<Vec<_>>(), span, "{job}");
            assert!(
                r.span.values().all(|&d| d == span_s),
                "{job}: the step span's own length"
            );
            assert_eq!(r.phases.len(), parts, "{job}");
            let sum: f64 = r.phases.values().sum();
            assert!((sum - 0.5).abs() < 1e-9, "{job}: phases add up to the step, {sum}");
            assert_eq!(
                v.phase_order.contains(&"train_batch".to_string()),
                job == "beside",
                "{job}"
            );
        }
    }

    #[test]
    fn a_timing_without_index_joins_the_current_batch() {
        let reg = JobRegistry::new(8, 100);
        let mut r = report("j", "n1", 0, &[("dataloader", 2_000, 2_500, -1)]);
        r.progress.push(Progress {
            name: "batch_idx".into(),
            time: 1_000,
            value: 7,
        });
        reg.observe(&[r]);
        let v = reg.view("j", 10).unwrap();
        assert_eq!(v.steps[0].batch, 7);
        assert_eq!(v.ranks[0].last_batch, Some(7));
    }

    #[test]
    fn limits_drop_the_oldest_and_count() {
        let reg = JobRegistry::new(2, 3);
        for b in 0..5 {
            reg.observe(&[report("a", "n", 0, &[("step", 10 + b, 20 + b, b as i64)])]);
        }
        let v = reg.view("a", 100).unwrap();
        assert_eq!(v.steps.iter().map(|s| s.batch).collect::<Vec<_>>(), vec![2, 3, 4]);
        assert_eq!(v.ranks[0].steps_dropped, 2);
        reg.observe(&[report("b", "n", 0, &[("step", 100, 200, 0)])]);
        reg.observe(&[report("c", "n", 0, &[("step", 300, 400, 0)])]);
        let names: Vec<String> = reg.list().into_iter().map(|j| j.job).collect();
        assert_eq!(names, vec!["c", "b"]);
        assert_eq!(reg.stats().jobs_evicted, 1);
    }

    #[test]
    fn an_end_ends_the_job_without_a_rank_and_a_later_report_runs_it_again() {
        let reg = JobRegistry::new(8, 100);
        reg.observe(&[report("j", "n1", 0, &[("forward", 10, 20, 1)])]);
        assert_eq!(reg.list()[0].state, "running");
        let mut end = report("j", "n1", -1, &[]);
        end.origin.role = "sonde-api".into();
        end.node_events.push(crate::ingest::NodeEvent {
            time: 30,
            kind: JOB_ENDED.into(),
            exit_code: None,
            reason: "Slurm epilog".into(),
            attributes: Vec::new(),
        });
        reg.observe(std::slice::from_ref(&end));
        let s = &reg.list()[0];
        assert_eq!(
            (s.state, s.ended_ns, s.end_reason.as_deref()),
            ("ended", Some(30), Some("Slurm epilog"))
        );
        assert_eq!(s.rank_count, 1, "the end is no process of the job");
        // What a rank sent before the end, arriving late, leaves it ended.
        reg.observe(&[report("j", "n1", 0, &[("forward", 21, 29, 2)])]);
        assert_eq!(reg.list()[0].state, "ended");
        // A report from after the end: the name runs again.
        reg.observe(&[report("j", "n1", 0, &[("forward", 40, 50, 3)])]);
        let s = &reg.list()[0];
        assert_eq!((s.state, s.ended_ns), ("running", None));
    }

    #[test]
    fn reports_without_a_job_are_not_jobs() {
        let reg = JobRegistry::new(8, 100);
        reg.observe(&[report("", "n1", -1, &[("x", 1, 2, 0)])]);
        assert!(reg.list().is_empty());
    }
}
