//! One rank of one job: its steps waiting for judgement, the phases reported
//! inside them, its batch-index reports, its own CPU time and MPI state
//! samples, and its history (usual compute time and CPU rate).
//!
//! [`Rank::evidence`] joins a step with all of that and with its node's
//! samples in the step's window.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::node::NodeSamples;
use crate::settings::Settings;
use crate::verdict::{Evidence, Verdict};

/// What a phase's name says it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhaseClass {
    Input,
    Comm,
    Compute,
    Other,
}

pub fn classify(name: &str, s: &Settings) -> PhaseClass {
    let lower = name.to_ascii_lowercase();
    let has = |list: &[String]| list.iter().any(|p| lower.contains(&p.to_ascii_lowercase()));
    if has(&s.input_phases) {
        PhaseClass::Input
    } else if has(&s.comm_phases) {
        PhaseClass::Comm
    } else if has(&s.compute_phases) {
        PhaseClass::Compute
    } else {
        PhaseClass::Other
    }
}

/// A timing of the rank that is not a step. `batch` is the batch index the
/// reporter attached (-1: none): a phase beside the step, not inside it
/// (Determined's and this project's own `dataloader_next`), belongs to the
/// step of the same batch.
#[derive(Debug, Clone, Copy)]
pub struct Phase {
    pub class: PhaseClass,
    pub start: u64,
    pub end: u64,
    pub batch: i64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    pub batch: i64,
    pub start: u64,
    pub end: u64,
}

/// Bounds per rank (a rank reporting faster than it is judged loses its oldest).
const MAX_PHASES: usize = 8192;
const MAX_PENDING: usize = 4096;
const MAX_PROGRESS: usize = 1024;
const MAX_READINGS: usize = 4096;
const MAX_MPI_SPANS: usize = 4096;
/// Step spans kept to bound where a step's sibling phases may lie.
const MAX_STEP_SPANS: usize = 256;

/// A phase without a batch index that ends this close to a step's start is
/// the wait that led into it (a loop that times its dataloader but attaches
/// no index): clocks read twice in a row differ by far less.
const TOUCH_NS: u64 = 5_000_000;

/// How long phases and readings outlive the judgement of their window.
const KEEP_NS: u64 = 5_000_000_000;

/// Steps between two computations of a rank's usual values.
const REFERENCE_EVERY: usize = 8;

/// The process's cumulative CPU seconds (`process.cpu.time`), per series
/// (one per `cpu.mode`), read at the times the job's SDK collected them.
#[derive(Debug, Default)]
pub struct ProcessCpu {
    series: HashMap<String, VecDeque<(u64, f64)>>,
}

impl ProcessCpu {
    pub fn add(&mut self, series: &str, time: u64, seconds: f64) {
        if !seconds.is_finite() {
            return;
        }
        let readings = self.series.entry(series.to_string()).or_default();
        // Out of order, or a cumulative value going back (a restarted
        // process, or two processes reporting as one): not this series.
        if readings.back().is_some_and(|&(t, v)| t >= time || seconds < v) {
            return;
        }
        readings.push_back((time, seconds));
        if readings.len() > MAX_READINGS {
            readings.pop_front();
        }
    }

    /// Cores used on average over [start, end], interpolating each series'
    /// cumulative seconds; `None` unless every series has readings around both ends.
    pub fn cores(&self, start: u64, end: u64) -> Option<f64> {
        if self.series.is_empty() || end <= start {
            return None;
        }
        let mut seconds = 0.0;
        for readings in self.series.values() {
            seconds += at(readings, end)? - at(readings, start)?;
        }
        Some(seconds.max(0.0) / ((end - start) as f64 / 1e9))
    }

    pub fn prune(&mut self, before: u64) {
        for r in self.series.values_mut() {
            // Keep one reading at or before `before` for interpolation.
            while r.len() > 1 && r[1].0 <= before {
                r.pop_front();
            }
        }
    }
}

/// A cumulative series' value at `t`, linear between the readings around it.
fn at(readings: &VecDeque<(u64, f64)>, t: u64) -> Option<f64> {
    let i = readings.partition_point(|&(rt, _)| rt < t);
    let (t1, v1) = *readings.get(i)?;
    if t1 == t {
        return Some(v1);
    }
    let (t0, v0) = *readings.get(i.checked_sub(1)?)?;
    Some(v0 + (v1 - v0) * (t - t0) as f64 / (t1 - t0) as f64)
}

/// The MPI probe's bins of one rank as spans: each flush at `to` covers the
/// time since the rank's previous flush, with ns per state.
#[derive(Debug, Default)]
pub struct MpiSpans {
    spans: VecDeque<(u64, u64, [f64; 3])>,
}

impl MpiSpans {
    /// One flush: every bin of the rank stamped `time`, as ns per state.
    /// The span starts where the main thread's sampled time says it does.
    pub fn add(&mut self, time: u64, per_state_ns: [f64; 3], main_thread_ns: f64) {
        let from = time.saturating_sub(main_thread_ns as u64);
        let from = self.spans.back().map_or(from, |s| s.1.max(from).min(time));
        if time <= from {
            return;
        }
        self.spans.push_back((from, time, per_state_ns));
        if self.spans.len() > MAX_MPI_SPANS {
            self.spans.pop_front();
        }
    }

    pub fn first(&self) -> Option<u64> {
        self.spans.front().map(|s| s.0)
    }

    pub fn until(&self) -> u64 {
        self.spans.back().map_or(0, |s| s.1)
    }

    /// Shares (not in MPI, work, stall) of the sampled time in [start, end].
    pub fn shares(&self, start: u64, end: u64) -> Option<[f64; 3]> {
        let mut acc = [0.0; 3];
        for &(from, to, ns) in &self.spans {
            if to <= start || from >= end {
                continue;
            }
            let f = (to.min(end) - from.max(start)) as f64 / (to - from) as f64;
            for k in 0..3 {
                acc[k] += ns[k] * f;
            }
        }
        let total: f64 = acc.iter().sum();
        (total > 0.0).then(|| acc.map(|x| x / total))
    }

    pub fn prune(&mut self, before: u64) {
        while self.spans.front().is_some_and(|s| s.1 < before) {
            self.spans.pop_front();
        }
    }
}

/// A rank's verdicts in a row: the dominant one since `first`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Run {
    pub verdict: Verdict,
    pub first: i64,
    pub last: i64,
}

#[derive(Debug, Default)]
pub struct Rank {
    pub node: String,
    /// Ordered by start, so a step's phases are found by binary search
    /// (a burst of many thousand timings is judged in one call).
    pub phases: VecDeque<Phase>,
    /// The longest phase kept, which bounds how far before a window a phase
    /// overlapping it can start.
    longest_phase: u64,
    pub pending: VecDeque<Step>,
    progress: VecDeque<(u64, i64)>,
    next_batch: i64,
    pub cpu: ProcessCpu,
    pub mpi: MpiSpans,
    /// Compute seconds and CPU cores of the last `reference_steps` steps.
    compute_history: VecDeque<f64>,
    cpu_history: VecDeque<f64>,
    /// The usual compute seconds and CPU cores, recomputed every
    /// `REFERENCE_EVERY` steps (a quantile sorts the history).
    usual: (Option<f64>, Option<f64>),
    since_reference: usize,
    /// The rank reports steps (else it is judged per MPI window).
    pub timed: bool,
    /// The spans of its latest steps, by start: a step's siblings lie
    /// between its neighbours (batch indices repeat each epoch).
    step_spans: VecDeque<(u64, u64)>,
    /// Whether it reports a step timing (a name in `step_names`).
    named_steps: bool,
    /// Until it does: per batch index, the span of its phases, which
    /// becomes the batch's step once `lag` has passed (a loop that times
    /// forward and backward but no step around them).
    unstepped: BTreeMap<i64, (u64, u64)>,
    /// Start of the next MPI window to judge (ranks without steps).
    pub next_window: Option<u64>,
    /// The last `dominant_steps` verdicts, and the dominant run.
    pub recent: VecDeque<(i64, Verdict)>,
    pub run: Option<Run>,
    pub runs: VecDeque<Run>,
}

/// Seconds of the merged intervals (nested spans count once).
fn merged(spans: &mut [(u64, u64)]) -> f64 {
    spans.sort_unstable();
    let mut total = 0u64;
    let mut cur: Option<(u64, u64)> = None;
    for &(a, b) in spans.iter() {
        match cur {
            Some((ca, cb)) if a <= cb => cur = Some((ca, cb.max(b))),
            Some((ca, cb)) => {
                total += cb - ca;
                cur = Some((a, b));
            }
            None => cur = Some((a, b)),
        }
    }
    if let Some((a, b)) = cur {
        total += b - a;
    }
    total as f64 / 1e9
}

/// Seconds of input, communication, compute and any named phase inside
/// [start, end], in one pass over the phases that may overlap it.
fn inside(phases: &VecDeque<Phase>, longest: u64, start: u64, end: u64) -> [f64; 4] {
    let mut per_class: [Vec<(u64, u64)>; 4] = Default::default();
    for p in starting_within(phases, start.saturating_sub(longest), end).filter(|p| p.end > start) {
        let span = (p.start.max(start), p.end.min(end));
        let k = match p.class {
            PhaseClass::Input => 0,
            PhaseClass::Comm => 1,
            PhaseClass::Compute => 2,
            PhaseClass::Other => 3,
        };
        if k < 3 {
            per_class[k].push(span);
        }
        // Any named phase, for the time outside them all.
        per_class[3].push(span);
    }
    per_class.map(|mut v| merged(&mut v))
}

/// The phases (ordered by start) that start in [from, to).
fn starting_within(phases: &VecDeque<Phase>, from: u64, to: u64) -> impl Iterator<Item = &Phase> {
    let lo = phases.partition_point(|p| p.start < from);
    let hi = phases.partition_point(|p| p.start < to).max(lo);
    phases.range(lo..hi)
}

fn quantile(values: &VecDeque<f64>, q: f64) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().collect();
    v.sort_unstable_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

impl Rank {
    pub fn progress(&mut self, time: u64, batch: i64) {
        if self.progress.back().is_some_and(|&(t, _)| t > time) {
            // Late report: insert in order.
            let i = self.progress.partition_point(|&(t, _)| t <= time);
            self.progress.insert(i, (time, batch));
        } else {
            self.progress.push_back((time, batch));
        }
        if self.progress.len() > MAX_PROGRESS {
            self.progress.pop_front();
        }
    }

    /// A step timing; `step` < 0 takes the batch index current at its start.
    pub fn step(&mut self, start: u64, end: u64, step: i64) {
        let batch = if step >= 0 {
            step
        } else {
            let i = self.progress.partition_point(|&(t, _)| t <= start);
            match i.checked_sub(1).map(|i| self.progress[i].1) {
                Some(b) => b,
                None => self.next_batch,
            }
        };
        if !self.named_steps {
            self.named_steps = true;
            self.unstepped.clear();
        }
        self.push_step(batch, start, end);
    }

    fn push_step(&mut self, batch: i64, start: u64, end: u64) {
        self.next_batch = batch + 1;
        self.timed = true;
        let i = self.step_spans.partition_point(|&(s, _)| s <= start);
        self.step_spans.insert(i, (start, end));
        if self.step_spans.len() > MAX_STEP_SPANS {
            self.step_spans.pop_front();
        }
        self.pending.push_back(Step { batch, start, end });
        if self.pending.len() > MAX_PENDING {
            self.pending.pop_front();
        }
    }

    pub fn phase(&mut self, class: PhaseClass, start: u64, end: u64, batch: i64) {
        let p = Phase {
            class,
            start,
            end,
            batch,
        };
        // Reports arrive mostly in order: a late one is put in its place.
        if self.phases.back().is_some_and(|b| b.start > start) {
            let i = self.phases.partition_point(|q| q.start <= start);
            self.phases.insert(i, p);
        } else {
            self.phases.push_back(p);
        }
        self.longest_phase = self.longest_phase.max(end - start);
        if !self.named_steps && batch >= 0 {
            let span = self.unstepped.entry(batch).or_insert((start, end));
            // The same index far later is the next epoch's batch: the one
            // before is complete.
            let far = span.1 + (span.1 - span.0).saturating_mul(4).max(1_000_000_000);
            if start > far {
                let (a, z) = *span;
                self.unstepped.remove(&batch);
                self.push_step(batch, a, z);
                self.unstepped.insert(batch, (start, end));
            } else {
                *span = (span.0.min(start), span.1.max(end));
            }
            if self.unstepped.len() > MAX_PENDING {
                self.unstepped.pop_first();
            }
        }
        if self.phases.len() > MAX_PHASES {
            self.phases.pop_front();
        }
    }

    /// Steps whose judgement is due at `now`, oldest first.
    pub fn due(&mut self, now: u64, lag_ns: u64) -> Vec<Step> {
        let ready: Vec<i64> = self
            .unstepped
            .iter()
            .filter(|&(_, &(_, end))| end + lag_ns <= now)
            .map(|(&b, _)| b)
            .collect();
        for b in ready {
            let (start, end) = self.unstepped.remove(&b).expect("listed above");
            self.push_step(b, start, end);
        }
        let mut out = Vec::new();
        while let Some(s) = self.pending.front()
            && s.end + lag_ns <= now
        {
            out.push(self.pending.pop_front().expect("front exists"));
        }
        out.sort_by_key(|s| s.end);
        out
    }

    /// Drops what no pending or future step can need. Phases and readings
    /// are kept `KEEP_NS` longer: a parent span may arrive after its children.
    pub fn prune(&mut self, judged_until: u64) {
        let judged_until = judged_until.saturating_sub(KEEP_NS);
        let keep_from = self
            .pending
            .iter()
            .map(|s| s.start)
            .min()
            .unwrap_or(judged_until)
            .min(judged_until)
            // An MPI window not yet judged keeps its spans.
            .min(self.next_window.unwrap_or(u64::MAX));
        while self.phases.front().is_some_and(|p| p.end < keep_from) {
            self.phases.pop_front();
        }
        self.cpu.prune(keep_from);
        self.mpi.prune(keep_from);
    }

    /// The step's whole iteration: the step span widened by the phases
    /// reported beside it rather than inside it. Two shapes are common: a
    /// phase with the step's batch index (Determined's `dataloader_next`
    /// beside `train_batch`; the Python client's `StepClock`, which times
    /// the wait for data from the last step's end to this step's begin), and
    /// a phase with no index that ends where the step starts. Either must lie
    /// between the step's neighbours, so an index repeated the next epoch is
    /// not taken, and on this step's side of the gap between them. Nested
    /// phases (OpenTelemetry child spans) change nothing.
    pub fn iteration(&self, step: &Step) -> (u64, u64) {
        let before = self
            .step_spans
            .iter()
            .filter(|&&(s, e)| e <= step.start && (s, e) != (step.start, step.end))
            .map(|&(_, e)| e)
            .max()
            .unwrap_or(0);
        let after = self
            .step_spans
            .iter()
            .filter(|&&(s, e)| s >= step.end && (s, e) != (step.start, step.end))
            .map(|&(s, _)| s)
            .min()
            .unwrap_or(u64::MAX);
        let (mut start, mut end) = (step.start, step.end);
        // Where a sibling can start: no earlier than the previous step's end
        // (nor than a phase ending near this step's start could), and before
        // the next step's start; while the next step is unknown, within one
        // more step's length after this one.
        let from = before.max(step.start.saturating_sub(self.longest_phase + TOUCH_NS));
        let to = if after == u64::MAX {
            step.end.saturating_add(step.end - step.start).saturating_add(TOUCH_NS)
        } else {
            after
        };
        for p in starting_within(&self.phases, from, to) {
            if p.start < before || p.end > after {
                continue;
            }
            // In a gap between two steps, a phase belongs to the step on its
            // side of the gap's middle (the dataloader of the next step ends
            // at its start; an optimizer of this one starts at its end).
            let this_side = if p.end <= step.start {
                before == 0 || p.end - before >= step.start - p.end
            } else if p.start >= step.end {
                after == u64::MAX || p.start - step.end <= after - p.start
            } else {
                true
            };
            let sibling = this_side
                && if p.batch >= 0 {
                    p.batch == step.batch
                } else {
                    p.end <= step.start + TOUCH_NS && p.end + TOUCH_NS >= step.start
                };
            if sibling {
                start = start.min(p.start);
                end = end.max(p.end);
            }
        }
        (start, end)
    }

    /// A step's evidence over its iteration (`span`, from
    /// [`Rank::iteration`]): its phases, the process's CPU, MPI, and the node.
    pub fn evidence(&self, span: (u64, u64), node: &NodeSamples) -> Evidence {
        let (start, end) = span;
        let end = end.max(start + 1);
        let wall = (end - start) as f64 / 1e9;
        let [input, comm, compute_named, named] = inside(&self.phases, self.longest_phase, start, end);
        let phased = named > 0.0;
        let other = (wall - named).max(0.0);
        // Without named compute phases, compute is what is neither input nor communication.
        let compute = if compute_named > 0.0 {
            compute_named
        } else {
            (wall - input - comm).max(0.0)
        };
        let w = node.window(start, end);
        let mut e = Evidence {
            wall_s: wall,
            phased,
            input_share: input / wall,
            comm_share: comm / wall,
            compute_share: if phased { compute / wall } else { 0.0 },
            compute_named: compute_named > 0.0,
            other_share: other / wall,
            compute_s: compute,
            process_cpu: self.cpu.cores(start, end),
            node_cpu: w.cpu,
            cores: w.cores,
            memory_available: w.memory_available,
            net: w.net,
            disk_read: w.disk_read,
            gpu: w.gpu,
            mpi: self.mpi.shares(start, end),
            ..Evidence::default()
        };
        e.usual_compute_s = self.usual.0;
        e.usual_cpu = self.usual.1;
        e
    }

    /// The evidence of an MPI window of a rank without steps.
    pub fn window_evidence(&self, start: u64, end: u64, node: &NodeSamples) -> Evidence {
        let w = node.window(start, end);
        let mpi = self.mpi.shares(start, end);
        let wall = (end - start) as f64 / 1e9;
        Evidence {
            wall_s: wall,
            compute_share: mpi.map_or(0.0, |m| m[0]),
            compute_s: mpi.map_or(0.0, |m| m[0] * wall),
            other_share: 1.0,
            node_cpu: w.cpu,
            cores: w.cores,
            memory_available: w.memory_available,
            net: w.net,
            disk_read: w.disk_read,
            gpu: w.gpu,
            mpi,
            ..Evidence::default()
        }
    }

    /// Adds a judged step to the rank's history (a step whose compute the
    /// host slowed down counts too: the quantile keeps the usual value).
    pub fn remember(&mut self, e: &Evidence, s: &Settings) {
        self.since_reference += 1;
        let young = self.compute_history.len() < 2 * s.min_reference_steps;
        if young || self.since_reference >= REFERENCE_EVERY {
            self.since_reference = 0;
            let n = s.min_reference_steps;
            self.usual = (
                (self.compute_history.len() >= n).then(|| quantile(&self.compute_history, s.reference_quantile)),
                (self.cpu_history.len() >= n).then(|| quantile(&self.cpu_history, 1.0 - s.reference_quantile)),
            );
        }
        self.compute_history.push_back(e.compute_s);
        if self.compute_history.len() > s.reference_steps {
            self.compute_history.pop_front();
        }
        if let Some(c) = e.process_cpu {
            self.cpu_history.push_back(c);
            if self.cpu_history.len() > s.reference_steps {
                self.cpu_history.pop_front();
            }
        }
    }

    /// Adds a verdict; returns the previous run when the dominant verdict changed.
    pub fn dominance(&mut self, batch: i64, v: Verdict, s: &Settings) -> Option<Option<Run>> {
        self.recent.push_back((batch, v));
        if self.recent.len() > s.dominant_steps {
            self.recent.pop_front();
        }
        if let Some(run) = &mut self.run
            && run.verdict == v
        {
            run.last = batch;
        }
        if self.recent.len() < s.dominant_steps {
            return None;
        }
        let mut counts = [0usize; 6];
        for (_, v) in &self.recent {
            counts[v.index()] += 1;
        }
        let (best, &n) = counts.iter().enumerate().max_by_key(|(_, n)| **n).expect("six");
        let best = Verdict::ALL[best];
        if (n as f64) < s.dominant_share * self.recent.len() as f64
            || self.run.as_ref().is_some_and(|r| r.verdict == best)
        {
            return None;
        }
        let first = self.recent.iter().find(|(_, v)| *v == best).map_or(batch, |(b, _)| *b);
        let last = self
            .recent
            .iter()
            .rev()
            .find(|(_, v)| *v == best)
            .map_or(batch, |(b, _)| *b);
        let previous = self.run.replace(Run {
            verdict: best,
            first,
            last,
        });
        if let Some(p) = &previous {
            self.runs.push_back(p.clone());
            if self.runs.len() > 64 {
                self.runs.pop_front();
            }
        }
        Some(previous)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn phases_count_once_inside_the_step_and_names_classify() {
        let s = Settings::default();
        assert_eq!(classify("dataloader_next", &s), PhaseClass::Input);
        assert_eq!(classify("train_batch.backward", &s), PhaseClass::Compute);
        assert_eq!(classify("AllReduce", &s), PhaseClass::Comm);
        assert_eq!(classify("checkpoint", &s), PhaseClass::Other);
        let mut r = Rank::default();
        r.phase(PhaseClass::Input, 0, 30 * MS, 7);
        r.phase(PhaseClass::Compute, 30 * MS, 80 * MS, 7);
        // Nested inside the compute phase: no double count.
        r.phase(PhaseClass::Compute, 40 * MS, 50 * MS, -1);
        // Outside the step.
        r.phase(PhaseClass::Input, 200 * MS, 300 * MS, 8);
        r.step(0, 100 * MS, 7);
        let step = r.due(10_000 * MS, 0)[0];
        assert_eq!(step.batch, 7);
        let e = r.evidence(r.iteration(&step), &NodeSamples::new(1e6));
        assert!((e.input_share - 0.3).abs() < 1e-9, "{e:?}");
        assert!((e.compute_share - 0.5).abs() < 1e-9, "{e:?}");
        assert!((e.other_share - 0.2).abs() < 1e-9, "{e:?}");
        assert!(e.phased && e.process_cpu.is_none() && e.node_cpu.is_none());
    }

    /// The shapes real loops send for one iteration of 150 ms waiting for
    /// data and 80 ms of training step: each gives the same shares.
    #[test]
    fn sibling_and_nested_shapes_give_the_same_iteration() {
        let s = Settings::default();
        let input = classify("dataloader_next", &s);
        let node = NodeSamples::new(1e6);
        let judge = |r: &mut Rank, batch: i64| {
            let steps = r.due(u64::MAX, 0);
            let step = steps.iter().find(|st| st.batch == batch).copied().expect("the step");
            (r.iteration(&step), r.evidence(r.iteration(&step), &node))
        };
        let base = 1_000 * MS;
        // StepClock / Determined: the dataloader beside the step, same index.
        let mut sib = Rank::default();
        sib.step(base - 300 * MS, base - 150 * MS, 2);
        sib.phase(input, base - 150 * MS, base, 3);
        sib.step(base, base + 80 * MS, 3);
        // The next epoch starts its indices over: its batch 3 is not this one's.
        sib.phase(input, base + 500 * MS, base + 600 * MS, 3);
        sib.step(base + 600 * MS, base + 700 * MS, 3);
        let (span, e) = judge(&mut sib, 3);
        assert_eq!(span, (base - 150 * MS, base + 80 * MS));
        assert!((e.input_share - 150.0 / 230.0).abs() < 1e-9, "{e:?}");
        assert!((e.compute_s - 0.080).abs() < 1e-9, "{e:?}");
        // No index on the dataloader: it ends where the step starts.
        let mut bare = Rank::default();
        bare.phase(input, base - 150 * MS, base, -1);
        bare.phase(input, base - 900 * MS, base - 800 * MS, -1);
        bare.step(base, base + 80 * MS, 3);
        let (span, e2) = judge(&mut bare, 3);
        assert_eq!(span, (base - 150 * MS, base + 80 * MS));
        assert!((e2.input_share - e.input_share).abs() < 1e-9);
        // OpenTelemetry's shape: the dataloader a child of the step span.
        let mut nested = Rank::default();
        nested.phase(input, base, base + 150 * MS, -1);
        nested.step(base, base + 230 * MS, 3);
        let (_, e3) = judge(&mut nested, 3);
        assert!((e3.input_share - e.input_share).abs() < 1e-9);
        assert!((e3.compute_s - e.compute_s).abs() < 1e-9);
    }

    /// A loop that times forward and backward with their batch index but no
    /// step around them: each batch's phases make its step.
    #[test]
    fn phases_without_a_step_timing_make_the_batchs_step() {
        let s = Settings::default();
        let fwd = classify("forward", &s);
        let mut r = Rank::default();
        for b in 0..3u64 {
            let t = b * 100 * MS;
            r.phase(fwd, t, t + 60 * MS, b as i64);
            r.phase(classify("backward", &s), t + 60 * MS, t + 90 * MS, b as i64);
        }
        assert!(r.due(300 * MS, 1000 * MS).is_empty(), "not before the lag");
        let due = r.due(2000 * MS, 1000 * MS);
        assert_eq!(
            due,
            [0, 1, 2].map(|b| Step {
                batch: b,
                start: b as u64 * 100 * MS,
                end: b as u64 * 100 * MS + 90 * MS
            })
        );
        let e = r.evidence(r.iteration(&due[1]), &NodeSamples::new(1e6));
        assert!(e.compute_named && (e.compute_share - 1.0).abs() < 1e-9, "{e:?}");
        // The next epoch's batch 0, a minute later, is a step of its own.
        r.phase(fwd, 60_000 * MS, 60_050 * MS, 0);
        r.phase(fwd, 120_000 * MS, 120_050 * MS, 0);
        let due = r.due(200_000 * MS, 1000 * MS);
        assert_eq!(due.len(), 2, "{due:?}");
        // Once a step timing comes, phases no longer make steps.
        r.step(300_000 * MS, 300_100 * MS, 9);
        r.phase(fwd, 300_000 * MS, 300_050 * MS, 9);
        assert_eq!(r.due(400_000 * MS, 1000 * MS).len(), 1);
    }

    #[test]
    fn a_step_without_index_takes_the_current_batch_and_waits_for_the_lag() {
        let mut r = Rank::default();
        r.progress(0, 41);
        r.progress(150 * MS, 42);
        r.step(160 * MS, 250 * MS, -1);
        r.step(260 * MS, 350 * MS, -1);
        assert!(r.due(1000 * MS, 1000 * MS).is_empty());
        let due = r.due(1400 * MS, 1000 * MS);
        assert_eq!(due.iter().map(|s| s.batch).collect::<Vec<_>>(), [42, 42]);
    }

    #[test]
    fn process_cpu_interpolates_cumulative_seconds_over_modes() {
        let mut c = ProcessCpu::default();
        for (k, t) in [0u64, 100, 200, 300].iter().enumerate() {
            c.add("user", t * MS, k as f64 * 0.08);
            c.add("system", t * MS, k as f64 * 0.01);
        }
        let cores = c.cores(50 * MS, 250 * MS).unwrap();
        assert!((cores - 0.9).abs() < 1e-9, "{cores}");
        assert_eq!(c.cores(250 * MS, 350 * MS), None, "no reading after the end yet");
    }

    #[test]
    fn mpi_spans_give_state_shares_of_a_window() {
        let mut m = MpiSpans::default();
        // 500 ms flushes: first mostly stall, then all work outside MPI.
        m.add(500 * MS, [100e6, 0.0, 400e6], 500e6);
        m.add(1000 * MS, [500e6, 0.0, 0.0], 500e6);
        let sh = m.shares(0, 500 * MS).unwrap();
        assert!((sh[2] - 0.8).abs() < 1e-9);
        let sh = m.shares(250 * MS, 750 * MS).unwrap();
        assert!((sh[2] - 0.4).abs() < 1e-9, "{sh:?}");
        assert_eq!(m.shares(2000 * MS, 3000 * MS), None);
    }

    #[test]
    fn the_dominant_verdict_changes_only_with_a_majority() {
        let s = Settings::default();
        let mut r = Rank::default();
        let mut changes = Vec::new();
        for b in 0..40 {
            // Every 10th step idle, steps 20.. input-bound.
            let v = if b >= 20 {
                Verdict::InputBound
            } else if b % 10 == 9 {
                Verdict::Idle
            } else {
                Verdict::ComputeBound
            };
            if let Some(prev) = r.dominance(b, v, &s) {
                changes.push((b, r.run.clone().unwrap(), prev));
            }
        }
        assert_eq!(changes.len(), 2, "{changes:?}");
        assert_eq!(changes[0].1.verdict, Verdict::ComputeBound);
        let (at, run, prev) = &changes[1];
        assert_eq!((run.verdict, run.first), (Verdict::InputBound, 20));
        assert!(*at >= 24 && *at <= 25, "{at}");
        assert_eq!(prev.as_ref().unwrap().last, 18);
    }
}
