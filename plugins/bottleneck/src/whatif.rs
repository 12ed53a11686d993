//! What-if attribution: how much faster would this job's recent steps be if
//! every operation took its typical time, and whose operations make up the
//! difference?
//!
//! The method is the What-if analysis of "Understanding Stragglers in Large
//! Model Training Using What-if Analysis" (OSDI '25), run online over a
//! window of steps:
//!
//! 1. Each operation's *own* duration is measured, without the time it spent
//!    waiting for others (see [`analyze`] for how waiting is taken out of
//!    receives and collectives). An operation inside which a collective of
//!    its rank starts (DDP calls its gradient all-reduce from within
//!    backward, and backward returns once the reduction is done) owns only
//!    the time up to the last such start: the rest was that wait.
//! 2. The *typical* duration of an operation is the median, over the window,
//!    of the same operation (kind, pipeline stage and position in its
//!    micro-batch) on every rank and step. Stages keep their own typical
//!    durations because their layers differ legitimately.
//! 3. Each step is replayed over its dependencies (each rank's operations in
//!    order, a pipeline receive after the matching send, a rendezvous send
//!    after what its receiver did before posting, a collective after the
//!    last member of its group arrives) with the actual own durations,
//!    and again with typical ones. The slowdown is the replayed actual time
//!    over the replayed ideal: replaying both sides cancels what the model
//!    does not capture (gaps between operations, overlap).
//! 4. Attribution replays the window with only one subset made typical (one
//!    rank, one node, one stage, one kind); the gain of that subset is the
//!    share of `actual - ideal` that goes away.
//! 5. Stage imbalance is the same question asked of stages: replay the ideal
//!    with one stage's compute as long as the mean of the other stages'. The
//!    stage whose change gains most gives the *balanced* ideal. (Balancing
//!    all stages to their common mean keeps the total work but lengthens the
//!    short stages, and in a two-stage 1F1B pipeline that costs nearly as
//!    much as it gains: it would hide a stage that is 50 % too long.)
//!
//! Pure: no host calls, no clock, no allocation beyond the window's size. It
//! builds for wasm32-wasip2 and natively. [`analyze`] does the replays
//! ([`Pending`] the same in pieces, for a caller that must return within a
//! time budget and asks between pieces whether to go on),
//! [`diagnose`] turns them into one culprit with its gain and a sentence;
//! [`crate::onset`] reads the per-step slowdowns for a fail-slow's onset.
//!
//! Here: the operations, the thresholds and the answers' types. Beside it:
//! `graph.rs` builds the replay graph and replays it, `attribution.rs` is
//! [`analyze`], `diagnosis.rs` is [`diagnose`].
//!
//! Limits of the model, which the sentence cannot show:
//! - a rank's operations run one after another: work that overlaps on a
//!   rank (communication hidden behind compute) replays longer than it ran;
//! - sends block until their receive is posted (gloo's `send`, NCCL's on
//!   its stream) when, in a step, at least 90 % of the sends whose receive
//!   was posted after they began were still running then (of at least 4 and
//!   a fifth of the step's matched pairs); such a send waits
//!   for what its receiver did before, and owns only the rest. In a step of
//!   buffered sends (isend) a send waits for nothing; a mix of both in one
//!   step is read as the majority;
//! - a slowness every instance of an operation shares is its typical
//!   duration: a node in every data-parallel group of its stage (tp = 1)
//!   slows all of that stage's collectives alike, and only its pipeline
//!   sends can show it;
//! - cost grows with the window: a replay per candidate rank and node, per
//!   stage (twice) and per kind, about 30 for a 4-stage job.

mod attribution;
mod diagnosis;
mod graph;

use serde::{Deserialize, Serialize};

pub use attribution::{Pending, analyze};
pub use diagnosis::{diagnose, split_stage};

/// What an operation does. Compute kinds are what input size changes;
/// communication kinds are what a link changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    Forward,
    Backward,
    PpSend,
    PpRecv,
    DpCollective,
    TpCollective,
    Optimizer,
    Input,
    Other,
}

impl OpKind {
    pub const ALL: [OpKind; 9] = [
        OpKind::Forward,
        OpKind::Backward,
        OpKind::PpSend,
        OpKind::PpRecv,
        OpKind::DpCollective,
        OpKind::TpCollective,
        OpKind::Optimizer,
        OpKind::Input,
        OpKind::Other,
    ];

    /// The name used in JSON and in sentences.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Forward => "forward",
            OpKind::Backward => "backward",
            OpKind::PpSend => "pp_send",
            OpKind::PpRecv => "pp_recv",
            OpKind::DpCollective => "dp_collective",
            OpKind::TpCollective => "tp_collective",
            OpKind::Optimizer => "optimizer",
            OpKind::Input => "input",
            OpKind::Other => "other",
        }
    }

    /// Forward and backward: the layers' work, which is what a pipeline
    /// split distributes and what a micro-batch's length scales.
    pub fn is_compute(self) -> bool {
        matches!(self, OpKind::Forward | OpKind::Backward)
    }

    /// Operations whose own time is a link's time: when they are what is
    /// slow, the fault is the link (or its node's network), not the worker.
    pub fn is_communication(self) -> bool {
        matches!(
            self,
            OpKind::PpSend | OpKind::PpRecv | OpKind::DpCollective | OpKind::TpCollective
        )
    }

    fn is_collective(self) -> bool {
        matches!(self, OpKind::DpCollective | OpKind::TpCollective)
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One operation of one rank, as the job reported it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    pub rank: u32,
    /// The rank's node, as an index the caller keeps (its position in the
    /// caller's list of node names): a slow link is named by it.
    pub node: u32,
    pub dp: u32,
    pub stage: u32,
    pub tp: u32,
    pub step: u64,
    /// The micro-batch; `None` for operations of the whole step (input,
    /// data-parallel collectives, optimizer).
    #[serde(default)]
    pub micro: Option<u32>,
    pub kind: OpKind,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// One operation as a row, the compact form traces are exchanged in
/// (`tests/diagnosis/simulate.py` writes them): `[rank, node, dp, stage, tp,
/// step, micro or null, kind, start_ns, end_ns]`. A 1 024-rank window is
/// half a million operations; rows keep its JSON a third of the size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpRow(
    pub u32,
    pub u32,
    pub u32,
    pub u32,
    pub u32,
    pub u64,
    pub Option<u32>,
    pub OpKind,
    pub u64,
    pub u64,
);

impl From<OpRow> for Op {
    fn from(r: OpRow) -> Op {
        Op {
            rank: r.0,
            node: r.1,
            dp: r.2,
            stage: r.3,
            tp: r.4,
            step: r.5,
            micro: r.6,
            kind: r.7,
            start_ns: r.8,
            end_ns: r.9,
        }
    }
}

/// The thresholds of [`diagnose`], each with why it has its default.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Thresholds {
    /// A straggler is only named when it costs the job at least this factor
    /// (actual / ideal). Natural jitter of
    /// a few percent per operation makes a large job's replayed step a
    /// percent or two longer than its ideal (the slowest of many ranks
    /// sets each barrier), and nothing can be fixed about that; a 1.2x
    /// slower worker, the mildest fault worth reporting, costs 8 % or more
    /// whenever compute fills most of the step. 1.05 sits between.
    pub min_slowdown: f64,
    /// A stage is only named when its length costs the job at least this
    /// factor (ideal / balanced). Both sides are replays of typical
    /// durations, so jitter does not widen the gap as it does the
    /// stragglers' (a healthy job's stages differ by well under 1 %), and a
    /// stage 30 % too long can cost as little as 5 % in a 1F1B pipeline
    /// whose bubbles absorb part of it.
    pub min_stage_slowdown: f64,
    /// The share of the slowdown a single subset (rank, node, op kind) must
    /// recover to be named. At a half, the named subset explains as much as
    /// everything else together. A lone culprit in a small job recovers 90 %
    /// and more; in a job of a thousand ranks the others' jitter alone keeps
    /// the replayed actual 2-3 % above the ideal, a floor no single fix
    /// recovers, so a culprit costing a few percent recovers only 55-65 %.
    pub explains: f64,
    /// The runner-up of the named rank or node recovers at most this share
    /// of the leader's gain. When two ranks or
    /// two nodes recover about the same, neither is "the" culprit: two
    /// replicas whose input varies, two nodes each holding half the job.
    pub dominance: f64,
    /// The share that the compute kinds together must recover, when no
    /// single rank, node or stage does, to say that steps vary with their
    /// input. Lower than `explains` because forward and backward of
    /// different lengths are the whole of this cause but their replay
    /// never quite recovers the barriers' waiting.
    pub input_explains: f64,
    /// The share a node must recover to be named when what exceeds typical
    /// on it is not communication (forward, backward, the optimizer). The
    /// ranks of one machine lose its cores together, so in a healthy job
    /// one node's ranks can carry half of the jitter (a gloo job of four
    /// ranks on two namespaces of one 2-core machine: node a recovering
    /// 51 % and 60 %, "mostly its backward"); a machine that really runs
    /// slow recovers nearly all of it. A slow link shows as communication
    /// and keeps the plain `explains`.
    pub node_compute_explains: f64,
    /// How many ranks and how many nodes are replayed as candidates, taken
    /// by their own excess over typical. Each candidate costs one replay of
    /// the window; a true culprit's excess stands far above the others', so
    /// a few suffice, and the cost stays flat with the job's size.
    pub candidates: usize,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            min_slowdown: 1.05,
            min_stage_slowdown: 1.02,
            explains: 0.5,
            dominance: 0.5,
            input_explains: 0.5,
            node_compute_explains: 0.75,
            candidates: 4,
        }
    }
}

/// What fixing one rank would recover.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerGain {
    pub rank: u32,
    pub node: u32,
    /// Ranks on its node, itself included: a node holding most of the job
    /// is not a link to blame.
    #[serde(default)]
    pub node_ranks: u32,
    /// The stage its node holds whole and alone, if it does: that node and
    /// that stage are the same ranks, which placement cannot tell apart.
    #[serde(default)]
    pub node_whole_stage: Option<u32>,
    pub dp: u32,
    pub stage: u32,
    pub tp: u32,
    /// Share of `actual - ideal` that goes away when only this rank's
    /// operations (and the collectives it takes part in) are typical.
    pub gain: f64,
    /// The kind whose own time exceeds typical the most on this rank.
    pub cause: OpKind,
}

/// What fixing one node, one stage or one kind would recover.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubsetGain {
    /// The node index, the stage, or the kind's index in [`OpKind::ALL`].
    pub id: u32,
    /// Ranks in this subset.
    pub ranks: u32,
    pub gain: f64,
    /// The kind whose own time exceeds typical the most in this subset.
    pub cause: OpKind,
    /// For a node: the stage it holds whole and alone, if it does.
    #[serde(default)]
    pub whole_stage: Option<u32>,
}

/// What one pipeline stage's length costs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageCost {
    pub stage: u32,
    /// Ideal / ideal with this stage's compute as long as the mean of the
    /// other stages', minus one: what the job would gain (negative when the
    /// stage is shorter than the others).
    pub cost: f64,
    /// Its typical compute per rank and step over the other stages' mean,
    /// minus one: "22 % longer than the others".
    pub excess: f64,
    /// Its typical compute (forward and backward) per rank and step, ns.
    pub compute_ns: f64,
}

/// One step's replays.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepTimes {
    pub step: u64,
    /// Last end minus first start, as reported.
    pub measured_ns: f64,
    /// Replayed with actual own durations.
    pub actual_ns: f64,
    /// Replayed with per-stage typical durations.
    pub ideal_ns: f64,
    /// Replayed ideal with the costliest stage like the others.
    pub balanced_ns: f64,
}

impl StepTimes {
    /// This step's slowdown (actual / ideal), the series a fail-slow's onset
    /// is read from.
    pub fn slowdown(&self) -> f64 {
        ratio(self.actual_ns, self.ideal_ns)
    }
}

/// The replays of one window and their attribution.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    pub steps: Vec<StepTimes>,
    /// Steps left out: their dependencies formed a cycle (inconsistent
    /// coordinates), so they cannot be replayed.
    pub skipped_steps: Vec<u64>,
    pub ops: usize,
    pub ranks: usize,
    pub stages: usize,
    /// Sums over the replayed steps.
    pub actual_ns: f64,
    pub ideal_ns: f64,
    pub balanced_ns: f64,
    /// actual / ideal: what stragglers cost.
    pub slowdown: f64,
    /// ideal / balanced: what the pipeline split costs.
    pub stage_slowdown: f64,
    /// Candidate ranks, best gain first.
    pub workers: Vec<WorkerGain>,
    /// Candidate nodes, best gain first.
    pub nodes: Vec<SubsetGain>,
    /// Every stage made typical alone, best gain first.
    pub stages_fixed: Vec<SubsetGain>,
    /// Every kind present made typical alone, best gain first.
    pub kinds: Vec<SubsetGain>,
    /// Forward and backward made typical together.
    pub compute_gain: f64,
    /// Every stage's cost, costliest first.
    pub stage_costs: Vec<StageCost>,
    /// How much single workers explain: the best worker's gain.
    pub worker_share: f64,
    /// How much stage imbalance explains: `(ideal - balanced) / (actual -
    /// balanced)`.
    pub stage_share: f64,
}

/// Who is at fault.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "culprit", rename_all = "snake_case")]
pub enum Culprit {
    None,
    Worker {
        rank: u32,
        dp: u32,
        stage: u32,
        cause: OpKind,
    },
    Stage {
        stage: u32,
        excess: f64,
    },
    Link {
        node: u32,
    },
    OpKind {
        kind: OpKind,
    },
    /// Steps vary with their input: no single worker.
    InputImbalance,
}

/// The answer for one window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    pub culprit: Culprit,
    /// actual / ideal, or ideal / balanced when the culprit is a stage.
    pub slowdown: f64,
    /// The share of that slowdown which fixing the culprit recovers.
    pub gain: f64,
    pub sentence: String,
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 1.0 }
}

/// Share of `from - to` recovered by reaching `fixed`; zero when there is
/// nothing to recover (less than a nanosecond per step is rounding).
fn gain(from: f64, to: f64, fixed: f64, steps: usize) -> f64 {
    let gap = from - to;
    if gap <= steps as f64 { 0.0 } else { (from - fixed) / gap }
}

#[cfg(test)]
mod tests;
