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
//!    receives and collectives).
//! 2. The *typical* duration of an operation is the median, over the window,
//!    of the same operation (kind, pipeline stage and position in its
//!    micro-batch) on every rank and step. Stages keep their own typical
//!    durations because their layers differ legitimately.
//! 3. Each step is replayed over its dependencies (each rank's operations in
//!    order, a pipeline receive after the matching send, a collective after
//!    the last member of its group arrives) with the actual own durations,
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
//! builds for wasm32-wasip2 and natively. [`analyze`] does the replays,
//! [`diagnose`] turns them into one culprit with its gain and a sentence;
//! [`crate::onset`] reads the per-step slowdowns for a fail-slow's onset.
//!
//! Limits of the model, which the sentence cannot show:
//! - a rank's operations run one after another: work that overlaps on a
//!   rank (communication hidden behind compute) replays longer than it ran;
//! - a send does not wait for its receiver (asynchronous sends); a
//!   rendezvous send's waiting counts as its own time;
//! - a slowness every instance of an operation shares is its typical
//!   duration: a node in every data-parallel group of its stage (tp = 1)
//!   slows all of that stage's collectives alike, and only its pipeline
//!   sends can show it;
//! - cost grows with the window: a replay per candidate rank and node, per
//!   stage (twice) and per kind, about 30 for a 4-stage job.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use serde::{Deserialize, Serialize};

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
            candidates: 4,
        }
    }
}

/// What fixing one rank would recover.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerGain {
    pub rank: u32,
    pub node: u32,
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

/// FxHash: the maps here are keyed by small integers on the hot path, and
/// std's SipHash costs several times more for them.
#[derive(Default)]
struct Fx(u64);

impl Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u8(&mut self, n: u8) {
        self.write_u64(n as u64);
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(n as u64);
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<Fx>>;

/// What a replayed node (one operation, or one collective instance shared
/// by its members) is, for typical durations and for choosing subsets.
#[derive(Clone, Copy)]
struct NodeInfo {
    kind: OpKind,
    stage: u32,
    /// Index of (kind, stage, slot) in `Graph::keys`: the operations that
    /// share a typical duration. The slot, (position among the same kind in
    /// its micro-batch, or in the step on its rank for step-wide operations)
    /// << 1 | has micro-batch, says which operation of the model this is.
    key: u32,
}

/// The window as a dependency graph: one node per operation, except that a
/// collective's members share one node (its instance), which starts when the
/// last member arrives and ends for all of them together. Nodes are stored
/// in replay order (each step's in a topological order, step after step), so
/// a replay is one pass over the arrays.
struct Graph {
    info: Vec<NodeInfo>,
    actual: Vec<f64>,
    /// Dense rank indices owning each node (one, or a collective's members).
    owner_start: Vec<u32>,
    owners: Vec<u32>,
    pred_start: Vec<u32>,
    preds: Vec<u32>,
    /// Per replayed step: its range of nodes.
    step_ranges: Vec<(usize, usize)>,
    /// (kind, stage, slot) of each typical-duration key.
    keys: Vec<(OpKind, u32, u32)>,
}

/// The per-rank coordinates of a dense rank index.
#[derive(Clone, Copy)]
struct RankInfo {
    rank: u32,
    node: u32,
    dp: u32,
    stage: u32,
    tp: u32,
}

/// Replays the window and attributes its slowdown. `ops` may come in any
/// order; each rank's operations of a step are ordered by start.
///
/// Own durations, the part of an operation that is its own work:
/// - a pipeline receive: from when both it was posted and its matching send
///   had finished, to its end (before that it waits for the sender);
/// - a collective instance: from the last member's arrival to the last
///   member's end (before that the early members wait);
/// - anything else: end minus start.
///
/// Matching: a send or receive's direction is read from its place among its
/// micro-batch's compute on its rank (a receive before the micro-batch's
/// forward carries activations from the previous stage, one after it
/// gradients from the next; a send after the backward carries gradients to
/// the previous stage); it then matches the operation of the neighbour stage
/// with the same data-parallel rank, tensor-parallel rank, micro-batch and
/// direction. Collectives match by their group (data-parallel: same stage
/// and tp rank; tensor-parallel: same dp rank and stage) and their position
/// among the same kind in the rank's step. A receive without a send, or a
/// collective missing members, keeps what it has.
pub fn analyze(ops: &[Op], th: &Thresholds) -> Analysis {
    let mut out = Analysis {
        ops: ops.len(),
        ..Analysis::default()
    };
    if ops.is_empty() {
        return out;
    }
    let (graph, ranks, steps, measured, skipped) = build(ops);
    out.skipped_steps = skipped;
    out.ranks = ranks.len();
    let n = graph.info.len();
    let n_steps = graph.step_ranges.len();
    if n_steps == 0 {
        return out;
    }

    let (typical, others) = typicals(&graph);
    let stages = ranks.iter().map(|r| r.stage).max().map_or(0, |s| s as usize + 1);
    out.stages = stages;

    let mut end = vec![0.0f64; n];
    let mut per_step = vec![0.0f64; n_steps];
    let mut act_steps = vec![0.0; n_steps];
    let mut ideal_steps = vec![0.0; n_steps];
    let actual = graph.replay(&graph.actual, &mut end, &mut act_steps);
    let ideal = graph.replay(&typical, &mut end, &mut ideal_steps);
    out.actual_ns = actual;
    out.ideal_ns = ideal;
    out.slowdown = ratio(actual, ideal);

    // Excess of each node over typical: the candidates' ranking and each
    // subset's cause.
    let excess: Vec<f64> = (0..n).map(|i| graph.actual[i] - typical[i]).collect();

    // Candidate ranks: own excess, a collective's shared by its members.
    let k = th.candidates.max(1);
    let mut rank_excess = vec![0.0f64; ranks.len()];
    for (i, &e) in excess.iter().enumerate() {
        let own = graph.owners_of(i);
        for &r in own {
            rank_excess[r as usize] += e / own.len() as f64;
        }
    }
    let worker_picks = top(&rank_excess, k);
    let rank_nodes = members(n, &worker_picks, ranks.len(), |i, f| {
        graph.owners_of(i).iter().for_each(|&r| f(r as usize))
    });
    let mut scratch = graph.actual.clone();
    let mut fixed = |subset: &mut dyn Iterator<Item = u32>, end: &mut [f64], per_step: &mut [f64]| -> f64 {
        let touched: Vec<u32> = subset.collect();
        for &i in &touched {
            scratch[i as usize] = typical[i as usize];
        }
        let t = graph.replay(&scratch, end, per_step);
        for &i in &touched {
            scratch[i as usize] = graph.actual[i as usize];
        }
        t
    };
    let cause_of = |nodes: &mut dyn Iterator<Item = u32>| -> OpKind {
        let mut by_kind = [0.0f64; 9];
        for i in nodes {
            by_kind[graph.info[i as usize].kind.index()] += excess[i as usize];
        }
        let best = (0..9).max_by(|&a, &b| by_kind[a].total_cmp(&by_kind[b])).unwrap_or(0);
        OpKind::ALL[best]
    };

    for (j, &r) in worker_picks.iter().enumerate() {
        let t = fixed(&mut rank_nodes[j].iter().copied(), &mut end, &mut per_step);
        let ri = ranks[r];
        out.workers.push(WorkerGain {
            rank: ri.rank,
            node: ri.node,
            dp: ri.dp,
            stage: ri.stage,
            tp: ri.tp,
            gain: gain(actual, ideal, t, n_steps),
            cause: cause_of(&mut rank_nodes[j].iter().copied()),
        });
    }
    sort_by_gain(&mut out.workers, |w| w.gain);

    // Candidate nodes: a node's excess counts each replayed node once and
    // splits a collective's between the distinct nodes of its members.
    let n_hosts = ranks.iter().map(|r| r.node).max().map_or(0, |m| m as usize + 1);
    let mut host_excess = vec![0.0f64; n_hosts];
    let mut hosts_here: Vec<u32> = Vec::new();
    let hosts_of = |i: usize, here: &mut Vec<u32>| {
        here.clear();
        here.extend(graph.owners_of(i).iter().map(|&r| ranks[r as usize].node));
        here.sort_unstable();
        here.dedup();
    };
    for (i, &e) in excess.iter().enumerate() {
        hosts_of(i, &mut hosts_here);
        for &h in &hosts_here {
            host_excess[h as usize] += e / hosts_here.len() as f64;
        }
    }
    let host_picks = top(&host_excess, k);
    let host_nodes = members(n, &host_picks, n_hosts, |i, f| {
        graph
            .owners_of(i)
            .iter()
            .for_each(|&r| f(ranks[r as usize].node as usize))
    });
    for (j, &h) in host_picks.iter().enumerate() {
        let t = fixed(&mut host_nodes[j].iter().copied(), &mut end, &mut per_step);
        out.nodes.push(SubsetGain {
            id: h as u32,
            ranks: ranks.iter().filter(|r| r.node == h as u32).count() as u32,
            gain: gain(actual, ideal, t, n_steps),
            cause: cause_of(&mut host_nodes[j].iter().copied()),
        });
    }
    sort_by_gain(&mut out.nodes, |g| g.gain);

    let mut by_stage: Vec<Vec<u32>> = vec![Vec::new(); stages];
    let mut by_kind: Vec<Vec<u32>> = vec![Vec::new(); 9];
    for (i, inf) in graph.info.iter().enumerate() {
        by_stage[inf.stage as usize].push(i as u32);
        by_kind[inf.kind.index()].push(i as u32);
    }
    for s in 0..stages as u32 {
        let mut of_stage = by_stage[s as usize].iter().copied();
        let t = fixed(&mut of_stage, &mut end, &mut per_step);
        let cause = cause_of(&mut by_stage[s as usize].iter().copied());
        out.stages_fixed.push(SubsetGain {
            id: s,
            ranks: ranks.iter().filter(|r| r.stage == s).count() as u32,
            gain: gain(actual, ideal, t, n_steps),
            cause,
        });
    }
    sort_by_gain(&mut out.stages_fixed, |g| g.gain);

    for kind in OpKind::ALL.into_iter().filter(|k| !by_kind[k.index()].is_empty()) {
        let t = fixed(&mut by_kind[kind.index()].iter().copied(), &mut end, &mut per_step);
        out.kinds.push(SubsetGain {
            id: kind.index() as u32,
            ranks: ranks.len() as u32,
            gain: gain(actual, ideal, t, n_steps),
            cause: kind,
        });
    }
    sort_by_gain(&mut out.kinds, |g| g.gain);
    let mut compute = by_kind[OpKind::Forward.index()]
        .iter()
        .chain(&by_kind[OpKind::Backward.index()])
        .copied();
    let t = fixed(&mut compute, &mut end, &mut per_step);
    out.compute_gain = gain(actual, ideal, t, n_steps);

    // Stage imbalance: each stage alone made like the others, the others at
    // their own typical durations.
    let excess_of = stage_excess(&graph, &typical, stages, ranks.len());
    let mut mixed = typical.clone();
    let mut bal = ideal;
    let mut bal_steps = ideal_steps.clone();
    for s in 0..stages as u32 {
        let of_stage: Vec<usize> = by_stage[s as usize]
            .iter()
            .map(|&i| i as usize)
            .filter(|&i| graph.info[i].kind.is_compute())
            .collect();
        for &i in &of_stage {
            mixed[i] = others[i];
        }
        let t = graph.replay(&mixed, &mut end, &mut per_step);
        for &i in &of_stage {
            mixed[i] = typical[i];
        }
        if t < bal {
            bal = t;
            bal_steps.copy_from_slice(&per_step);
        }
        out.stage_costs.push(StageCost {
            stage: s,
            cost: ratio(ideal, t) - 1.0,
            excess: excess_of[s as usize],
        });
    }
    out.stage_costs.sort_by(|a, b| b.cost.total_cmp(&a.cost));
    out.balanced_ns = bal;
    out.stage_slowdown = ratio(ideal, bal);
    out.steps = (0..n_steps)
        .map(|i| StepTimes {
            step: steps[i],
            measured_ns: measured[i],
            actual_ns: act_steps[i],
            ideal_ns: ideal_steps[i],
            balanced_ns: bal_steps[i],
        })
        .collect();

    out.worker_share = out.workers.first().map_or(0.0, |w| w.gain);
    out.stage_share = if actual - bal <= n_steps as f64 {
        0.0
    } else {
        (ideal - bal) / (actual - bal)
    };
    out
}

/// The replayed nodes of each picked subset (rank or node), in the picks'
/// order: `each(i, f)` calls `f` with every subset node `i` belongs to
/// (repeats allowed).
fn members(n: usize, picks: &[usize], universe: usize, each: impl Fn(usize, &mut dyn FnMut(usize))) -> Vec<Vec<u32>> {
    let mut slot = vec![usize::MAX; universe];
    for (j, &p) in picks.iter().enumerate() {
        slot[p] = j;
    }
    let mut out = vec![Vec::new(); picks.len()];
    for i in 0..n {
        each(i, &mut |x| {
            if slot[x] != usize::MAX && out[slot[x]].last() != Some(&(i as u32)) {
                out[slot[x]].push(i as u32);
            }
        });
    }
    out
}

/// The `k` largest positive values' indices, largest first (ties: lower
/// index first, so the answer does not depend on hashing).
fn top(values: &[f64], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..values.len()).filter(|&i| values[i] > 0.0).collect();
    idx.sort_by(|&a, &b| values[b].total_cmp(&values[a]).then(a.cmp(&b)));
    idx.truncate(k);
    idx
}

/// Best gain first; equal gains keep the excess order they came in.
fn sort_by_gain<T>(v: &mut [T], g: impl Fn(&T) -> f64) {
    v.sort_by(|a, b| g(b).total_cmp(&g(a)));
}

/// Per stage: typical compute per step (each (rank, step) pair's compute at
/// typical durations, averaged) over the mean of the other stages', minus one.
fn stage_excess(graph: &Graph, typical: &[f64], stages: usize, n_ranks: usize) -> Vec<f64> {
    let mut sum = vec![0.0f64; stages];
    let mut count = vec![0.0f64; stages];
    // Per stage, typical compute summed over its nodes and divided by its
    // owners' (rank, step) count: compute nodes have one owner each, and a
    // rank's pair is counted the first time the step shows it.
    let mut last_step = vec![usize::MAX; n_ranks];
    for (si, &(a, b)) in graph.step_ranges.iter().enumerate() {
        for (i, inf) in graph.info.iter().enumerate().take(b).skip(a) {
            if inf.kind.is_compute() {
                let s = inf.stage as usize;
                sum[s] += typical[i];
                let r = graph.owners_of(i)[0] as usize;
                if last_step[r] != si {
                    last_step[r] = si;
                    count[s] += 1.0;
                }
            }
        }
    }
    let per: Vec<f64> = (0..stages)
        .map(|s| if count[s] > 0.0 { sum[s] / count[s] } else { 0.0 })
        .collect();
    (0..stages)
        .map(|s| {
            let others: Vec<f64> = (0..stages)
                .filter(|&o| o != s && count[o] > 0.0)
                .map(|o| per[o])
                .collect();
            if others.is_empty() || per[s] == 0.0 {
                0.0
            } else {
                let mean = others.iter().sum::<f64>() / others.len() as f64;
                if mean > 0.0 { per[s] / mean - 1.0 } else { 0.0 }
            }
        })
        .collect()
}

/// The median, the mean of the two middle values for an even count.
fn median(v: &mut [f64]) -> f64 {
    let n = v.len();
    if n == 0 {
        return 0.0;
    }
    let mid = n / 2;
    let (_, &mut hi, _) = v.select_nth_unstable_by(mid, |a, b| a.total_cmp(b));
    if n % 2 == 1 {
        hi
    } else {
        let lo = v[..mid].iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lo + hi) / 2.0
    }
}

/// Per-stage typical durations, and for compute the mean over the *other*
/// stages of theirs (the same operation elsewhere in the pipeline; a stage
/// alone keeps its own).
fn typicals(graph: &Graph) -> (Vec<f64>, Vec<f64>) {
    let n = graph.info.len();
    let mut groups: Vec<Vec<f64>> = vec![Vec::new(); graph.keys.len()];
    for i in 0..n {
        groups[graph.info[i].key as usize].push(graph.actual[i]);
    }
    let medians: Vec<f64> = groups.iter_mut().map(|v| median(v)).collect();
    let typical: Vec<f64> = (0..n).map(|i| medians[graph.info[i].key as usize]).collect();
    // Per key of a compute kind: the mean of the same (kind, slot) on the
    // other stages.
    let like_others: Vec<f64> = graph
        .keys
        .iter()
        .enumerate()
        .map(|(k, &(kind, stage, slot))| {
            if !kind.is_compute() {
                return medians[k];
            }
            let (sum, count) = graph
                .keys
                .iter()
                .enumerate()
                .filter(|&(_, &(kk, ss, sl))| kk == kind && sl == slot && ss != stage)
                .fold((0.0, 0.0), |(s, c), (o, _)| (s + medians[o], c + 1.0));
            if count > 0.0 { sum / count } else { medians[k] }
        })
        .collect();
    let others = (0..n).map(|i| like_others[graph.info[i].key as usize]).collect();
    (typical, others)
}

impl Graph {
    fn owners_of(&self, i: usize) -> &[u32] {
        &self.owners[self.owner_start[i] as usize..self.owner_start[i + 1] as usize]
    }

    /// Replays every step from time zero with these durations: a node
    /// starts when all its predecessors have ended. Returns the sum of the
    /// steps' makespans and writes each into `per_step`.
    fn replay(&self, dur: &[f64], end: &mut [f64], per_step: &mut [f64]) -> f64 {
        let mut total = 0.0;
        for (s, &(a, b)) in self.step_ranges.iter().enumerate() {
            let mut makespan = 0.0f64;
            for i in a..b {
                let mut start = 0.0f64;
                for &p in &self.preds[self.pred_start[i] as usize..self.pred_start[i + 1] as usize] {
                    // Not f64::max: durations are never NaN, and its NaN
                    // handling costs a tenth of a replay.
                    let e = end[p as usize];
                    if e > start {
                        start = e;
                    }
                }
                let e = start + dur[i];
                end[i] = e;
                if e > makespan {
                    makespan = e;
                }
            }
            per_step[s] = makespan;
            total += makespan;
        }
        total
    }
}

/// Direction of a pipeline transfer: activations go to the next stage,
/// gradients to the previous one.
const FWD: u32 = 0;
const BWD: u32 = 1;

/// A pipeline transfer's identity: dp rank, tp rank, micro-batch, direction,
/// sending stage, and its position among the same on the rank.
type P2pKey = (u32, u32, u32, u32, u32, u32);

type Built = (Graph, Vec<RankInfo>, Vec<u64>, Vec<f64>, Vec<u64>);

/// The part of an [`Op`] the graph is built from, once its rank and step
/// have placed it.
#[derive(Clone, Copy)]
struct Slim {
    start_ns: u64,
    end_ns: u64,
    micro: Option<u32>,
    kind: OpKind,
}

/// Builds the replay graph of the window (see [`analyze`] for the rules).
/// Linear in the window but for each (rank, step)'s own sort by start.
fn build(ops: &[Op]) -> Built {
    // Dense ranks in rank order; a table when rank ids are dense enough.
    let max_rank = ops.iter().map(|o| o.rank).max().unwrap_or(0) as usize;
    let rank_ids: Vec<u32> = if max_rank <= 4 * ops.len() + 4096 {
        let mut seen = vec![false; max_rank + 1];
        ops.iter().for_each(|o| seen[o.rank as usize] = true);
        (0..=max_rank as u32).filter(|&r| seen[r as usize]).collect()
    } else {
        let mut v: Vec<u32> = ops.iter().map(|o| o.rank).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let table: Vec<u32> = if max_rank <= 4 * rank_ids.len() + 4096 {
        let mut t = vec![u32::MAX; max_rank + 1];
        for (i, &r) in rank_ids.iter().enumerate() {
            t[r as usize] = i as u32;
        }
        t
    } else {
        Vec::new()
    };
    let dense = |r: u32| -> usize {
        if table.is_empty() {
            rank_ids.binary_search(&r).expect("a rank seen above")
        } else {
            table[r as usize] as usize
        }
    };
    let mut ranks: Vec<Option<RankInfo>> = vec![None; rank_ids.len()];
    // A window holds a few steps: a sorted list, looked up by bisection.
    let mut steps: Vec<u64> = Vec::new();
    let mut last_step = None;
    for o in ops {
        if last_step != Some(o.step) {
            if let Err(at) = steps.binary_search(&o.step) {
                steps.insert(at, o.step);
            }
            last_step = Some(o.step);
        }
    }
    let nr = ranks.len();
    let mut max_micro = 0u32;
    let buckets: Vec<u32> = ops
        .iter()
        .map(|o| {
            let d = dense(o.rank);
            ranks[d].get_or_insert(RankInfo {
                rank: o.rank,
                node: o.node,
                dp: o.dp,
                stage: o.stage,
                tp: o.tp,
            });
            max_micro = max_micro.max(o.micro.unwrap_or(0));
            let si = steps.binary_search(&o.step).expect("a step seen above");
            (si * nr + d) as u32
        })
        .collect();
    let ranks: Vec<RankInfo> = ranks
        .into_iter()
        .map(|r| r.expect("every dense rank has an op"))
        .collect();

    // Ops bucketed by (step, rank) with a counting sort, each bucket by start.
    let mut bstart = vec![0u32; steps.len() * nr + 1];
    for &b in &buckets {
        bstart[b as usize + 1] += 1;
    }
    for i in 1..bstart.len() {
        bstart[i] += bstart[i - 1];
    }
    let mut fill = bstart.clone();
    // What the graph needs of each op, scattered into bucket order once:
    // everything after reads it in sequence instead of jumping about the
    // caller's array (half a million ops do not fit a cache).
    let mut sorted = vec![
        Slim {
            start_ns: 0,
            end_ns: 0,
            micro: None,
            kind: OpKind::Other
        };
        ops.len()
    ];
    for (o, &b) in ops.iter().zip(&buckets) {
        sorted[fill[b as usize] as usize] = Slim {
            start_ns: o.start_ns,
            end_ns: o.end_ns,
            micro: o.micro,
            kind: o.kind,
        };
        fill[b as usize] += 1;
    }
    drop(buckets);
    let by_start = |o: &Slim| (o.start_ns, o.end_ns);
    for b in 0..steps.len() * nr {
        let bucket = &mut sorted[bstart[b] as usize..bstart[b + 1] as usize];
        // Ranks usually report in order: check before sorting.
        if !bucket.is_sorted_by_key(by_start) {
            bucket.sort_by_key(by_start);
        }
    }

    let mut g = Graph {
        info: Vec::with_capacity(ops.len()),
        actual: Vec::with_capacity(ops.len()),
        owner_start: Vec::with_capacity(ops.len() + 1),
        owners: Vec::with_capacity(ops.len()),
        pred_start: Vec::with_capacity(ops.len() + 1),
        preds: Vec::with_capacity(ops.len() + ops.len() / 4),
        step_ranges: Vec::new(),
        keys: Vec::new(),
    };
    g.owner_start.push(0);
    g.pred_start.push(0);
    let mut key_ids: FxMap<(u8, u32, u32), u32> = FxMap::default();
    // The usual keys without hashing: (stage, kind, slot) within these bounds.
    const KEY_CACHE_SLOTS: usize = 64;
    const KEY_CACHE_STAGES: usize = 64;
    let stages_seen = ranks
        .iter()
        .map(|r| r.stage as usize + 1)
        .max()
        .unwrap_or(0)
        .min(KEY_CACHE_STAGES);
    let mut key_cache = vec![u32::MAX; stages_seen * 9 * KEY_CACHE_SLOTS];
    let mut kept_steps = Vec::new();
    let mut measured = Vec::new();
    let mut skipped = Vec::new();

    // Per-step scratch, reused.
    let mut edges: Vec<(u32, u32)> = Vec::new(); // (node, pred), step-local ids
    let mut owner_pairs: Vec<(u32, u32)> = Vec::new(); // (node, dense rank)
    let mut infos: Vec<NodeInfo> = Vec::new();
    let mut durs: Vec<f64> = Vec::new();
    let mut spans: Vec<(u64, u64)> = Vec::new(); // an instance's (last arrival, last end)
    let mut instances: FxMap<(u32, u32, u32, u32), u32> = FxMap::default();
    let mut sends: FxMap<P2pKey, (u32, u64)> = FxMap::default();
    let mut recvs: Vec<(u32, P2pKey, u64, u64)> = Vec::new();
    // Position counters per (micro-batch, kind): a table for the usual few
    // micro-batches, a list beyond.
    const TABLE_MICROS: u32 = 1024;
    let width = (max_micro.min(TABLE_MICROS) as usize + 2) * 9;
    let mut slot_table = vec![0u32; width];
    let mut slot_list: Vec<(u32, OpKind, u32)> = Vec::new();
    let mut p2p_seen: Vec<(u32, u32, OpKind, u32)> = Vec::new();
    let mut fwd_done: Vec<u32> = Vec::new();
    let mut bwd_done: Vec<u32> = Vec::new();
    let mut pos: Vec<u32> = Vec::new();

    for (si, &step) in steps.iter().enumerate() {
        edges.clear();
        owner_pairs.clear();
        infos.clear();
        durs.clear();
        spans.clear();
        instances.clear();
        sends.clear();
        recvs.clear();
        let (mut first, mut last) = (u64::MAX, 0u64);
        for (r, ri) in ranks.iter().enumerate() {
            let b = si * nr + r;
            let seq = &sorted[bstart[b] as usize..bstart[b + 1] as usize];
            if seq.is_empty() {
                continue;
            }
            slot_table.iter_mut().for_each(|x| *x = 0);
            slot_list.clear();
            p2p_seen.clear();
            fwd_done.clear();
            bwd_done.clear();
            let mut coll_seen = [0u32; 9];
            let mut prev: Option<u32> = None;
            for o in seq {
                first = first.min(o.start_ns);
                last = last.max(o.end_ns);
                let position = match o.micro {
                    Some(m) if m >= TABLE_MICROS => {
                        match slot_list.iter_mut().find(|(mm, k, _)| *mm == m && *k == o.kind) {
                            Some(e) => {
                                e.2 += 1;
                                e.2 - 1
                            }
                            None => {
                                slot_list.push((m, o.kind, 1));
                                0
                            }
                        }
                    }
                    micro => {
                        let row = micro.map_or(0, |m| m as usize + 1);
                        let c = &mut slot_table[row * 9 + o.kind.index()];
                        *c += 1;
                        *c - 1
                    }
                };
                let slot = (position << 1) | o.micro.is_some() as u32;
                let cached = (slot as usize) < KEY_CACHE_SLOTS && (ri.stage as usize) < KEY_CACHE_STAGES;
                let at = (ri.stage as usize * 9 + o.kind.index()) * KEY_CACHE_SLOTS + slot as usize;
                let key = match cached.then(|| key_cache[at]).filter(|&k| k != u32::MAX) {
                    Some(k) => k,
                    None => {
                        let next_key = key_ids.len() as u32;
                        let key = *key_ids
                            .entry((o.kind.index() as u8, ri.stage, slot))
                            .or_insert(next_key);
                        if key == next_key {
                            g.keys.push((o.kind, ri.stage, slot));
                        }
                        if cached {
                            key_cache[at] = key;
                        }
                        key
                    }
                };
                let info = NodeInfo {
                    kind: o.kind,
                    stage: ri.stage,
                    key,
                };
                let node = if o.kind.is_collective() {
                    let occ = coll_seen[o.kind.index()];
                    coll_seen[o.kind.index()] += 1;
                    let group = if o.kind == OpKind::DpCollective {
                        (ri.stage, ri.tp)
                    } else {
                        (ri.dp, ri.stage)
                    };
                    let ikey = (o.kind.index() as u32, group.0, group.1, occ);
                    let id = *instances.entry(ikey).or_insert_with(|| {
                        infos.push(info);
                        durs.push(0.0);
                        spans.push((0, 0));
                        (infos.len() - 1) as u32
                    });
                    let span = &mut spans[id as usize];
                    span.0 = span.0.max(o.start_ns);
                    span.1 = span.1.max(o.end_ns);
                    id
                } else {
                    infos.push(info);
                    durs.push(o.end_ns.saturating_sub(o.start_ns) as f64);
                    spans.push((0, 0));
                    let id = (infos.len() - 1) as u32;
                    if let Some(m) = o.micro {
                        match o.kind {
                            OpKind::Forward if !fwd_done.contains(&m) => fwd_done.push(m),
                            OpKind::Backward if !bwd_done.contains(&m) => bwd_done.push(m),
                            OpKind::PpSend | OpKind::PpRecv => {
                                let dir = match o.kind {
                                    OpKind::PpSend if bwd_done.contains(&m) => BWD,
                                    OpKind::PpRecv if fwd_done.contains(&m) => BWD,
                                    _ => FWD,
                                };
                                let occ = match p2p_seen.iter_mut().find(|e| e.0 == m && e.1 == dir && e.2 == o.kind) {
                                    Some(e) => {
                                        e.3 += 1;
                                        e.3 - 1
                                    }
                                    None => {
                                        p2p_seen.push((m, dir, o.kind, 1));
                                        0
                                    }
                                };
                                if o.kind == OpKind::PpSend {
                                    sends.insert((ri.dp, ri.tp, m, dir, ri.stage, occ), (id, o.end_ns));
                                } else {
                                    let from = if dir == FWD {
                                        ri.stage.checked_sub(1)
                                    } else {
                                        Some(ri.stage + 1)
                                    };
                                    if let Some(from) = from {
                                        recvs.push((id, (ri.dp, ri.tp, m, dir, from, occ), o.start_ns, o.end_ns));
                                    }
                                }
                            }
                            _ => {}
                        }
                    }
                    id
                };
                owner_pairs.push((node, r as u32));
                if let Some(p) = prev
                    && p != node
                {
                    edges.push((node, p));
                }
                prev = Some(node);
            }
        }
        if infos.is_empty() {
            continue;
        }
        for (i, &(max_start, max_end)) in spans.iter().enumerate() {
            if infos[i].kind.is_collective() {
                durs[i] = max_end.saturating_sub(max_start) as f64;
            }
        }
        for &(id, key, start, end) in &recvs {
            if let Some(&(send, send_end)) = sends.get(&key) {
                edges.push((id, send));
                durs[id as usize] = end.saturating_sub(start.max(send_end)) as f64;
            }
        }

        // Step-local CSR of predecessors and successors, then Kahn's order.
        let m = infos.len();
        let csr = |pairs: &[(u32, u32)], by_first: bool| -> (Vec<u32>, Vec<u32>) {
            let mut start = vec![0u32; m + 1];
            for &(a, b) in pairs {
                start[if by_first { a } else { b } as usize + 1] += 1;
            }
            for i in 1..=m {
                start[i] += start[i - 1];
            }
            let mut fill = start.clone();
            let mut out = vec![0u32; pairs.len()];
            for &(a, b) in pairs {
                let (at, val) = if by_first { (a, b) } else { (b, a) };
                out[fill[at as usize] as usize] = val;
                fill[at as usize] += 1;
            }
            (start, out)
        };
        let (pstart, local_preds) = csr(&edges, true);
        let (sstart, succ) = csr(&edges, false);
        let (ostart, local_owners) = csr(&owner_pairs, true);
        let mut indeg: Vec<u32> = (0..m).map(|i| pstart[i + 1] - pstart[i]).collect();
        let mut queue: Vec<u32> = (0..m as u32).filter(|&i| indeg[i as usize] == 0).collect();
        let mut head = 0;
        while head < queue.len() {
            let x = queue[head] as usize;
            head += 1;
            for &s in &succ[sstart[x] as usize..sstart[x + 1] as usize] {
                indeg[s as usize] -= 1;
                if indeg[s as usize] == 0 {
                    queue.push(s);
                }
            }
        }
        if queue.len() != m {
            skipped.push(step);
            continue;
        }

        // Append in replay order, renumbering.
        let base = g.info.len() as u32;
        pos.clear();
        pos.resize(m, 0);
        for (k, &x) in queue.iter().enumerate() {
            pos[x as usize] = base + k as u32;
        }
        for &x in &queue {
            let x = x as usize;
            g.info.push(infos[x]);
            g.actual.push(durs[x]);
            g.owners
                .extend_from_slice(&local_owners[ostart[x] as usize..ostart[x + 1] as usize]);
            g.owner_start.push(g.owners.len() as u32);
            g.preds.extend(
                local_preds[pstart[x] as usize..pstart[x + 1] as usize]
                    .iter()
                    .map(|&p| pos[p as usize]),
            );
            g.pred_start.push(g.preds.len() as u32);
        }
        g.step_ranges.push((base as usize, g.info.len()));
        kept_steps.push(step);
        measured.push(last.saturating_sub(first) as f64);
    }
    (g, ranks, kept_steps, measured, skipped)
}

/// The window's culprit, its slowdown and gain, and the sentence.
///
/// In order:
/// 1. Nothing is named when neither the stragglers' slowdown (actual /
///    ideal) reaches `min_slowdown` nor the split's (ideal / balanced)
///    `min_stage_slowdown`.
/// 2. A stage, when the split costs more than the stragglers: the stage whose
///    length costs most.
/// 3. A worker, when fixing one rank recovers at least `explains` (and the
///    runner-up rank at most `dominance` of that) and what exceeds typical
///    on it is not communication.
/// 4. A link (named by its node), when fixing one node holding at most half
///    the job leads the same way, or when the leading worker's excess is
///    communication: a
///    link's slowness shows on every rank behind it, and a rank whose own
///    communication is slow points at its link.
/// 5. Input imbalance, when forward and backward together recover at least
///    `input_explains`: compute that varies with no rank, node or stage to
///    blame varies with its input.
/// 6. An operation kind, when fixing that kind (other than compute) recovers
///    at least `explains`.
/// 7. That stage after all, when the split reaches `min_stage_slowdown`.
/// 8. Otherwise nothing: the job is slower than its ideal, but spread thin.
pub fn diagnose(a: &Analysis, th: &Thresholds) -> Diagnosis {
    let straggling = a.slowdown >= th.min_slowdown;
    let split = a.stage_slowdown >= th.min_stage_slowdown;
    let stage_pick = a.stage_costs.first();
    let none = |sentence: String| Diagnosis {
        culprit: Culprit::None,
        slowdown: a.slowdown,
        gain: 0.0,
        sentence,
    };
    if a.steps.is_empty() {
        return none("no step to replay".into());
    }
    let stage_answer = |g: &StageCost| Diagnosis {
        culprit: Culprit::Stage {
            stage: g.stage,
            excess: g.excess,
        },
        slowdown: a.stage_slowdown,
        gain: a.stage_share,
        sentence: format!(
            "pipeline stage {} is {:.0} % longer than the others: the steps would be {:.2}x faster with it \
             like them ({:.0} % of the gap to that ideal)",
            g.stage,
            g.excess * 100.0,
            a.stage_slowdown,
            a.stage_share.min(1.0) * 100.0
        ),
    };
    if !straggling && !split {
        return none(format!("{:.2}x its ideal: within natural variation", a.slowdown));
    }
    if split
        && (!straggling || a.ideal_ns - a.balanced_ns >= a.actual_ns - a.ideal_ns)
        && let Some(g) = stage_pick
    {
        return stage_answer(g);
    }
    if straggling {
        let s = a.slowdown;
        // A leader: recovers `explains` and clearly more than the runner-up.
        let leads = |best: f64, next: Option<f64>| best >= th.explains && next.is_none_or(|n| n <= best * th.dominance);
        let worker = a
            .workers
            .first()
            .filter(|w| leads(w.gain, a.workers.get(1).map(|n| n.gain)));
        if let Some(w) = worker.filter(|w| !w.cause.is_communication()) {
            return Diagnosis {
                culprit: Culprit::Worker {
                    rank: w.rank,
                    dp: w.dp,
                    stage: w.stage,
                    cause: w.cause,
                },
                slowdown: s,
                gain: w.gain,
                sentence: format!(
                    "{s:.2}x slower than its ideal; fixing rank {} (dp {}, stage {}, tp {}: its {} is slow) recovers {:.0} % of it",
                    w.rank,
                    w.dp,
                    w.stage,
                    w.tp,
                    w.cause.name(),
                    w.gain.min(1.0) * 100.0
                ),
            };
        }
        let node = a
            .nodes
            .first()
            // A node holding most of the job is not a place: fixing it is
            // fixing the job.
            .filter(|g| 2 * g.ranks as usize <= a.ranks && leads(g.gain, a.nodes.get(1).map(|n| n.gain)))
            .map(|g| (g.id, g.gain, g.cause));
        let link = node.or_else(|| worker.map(|w| (w.node, w.gain, w.cause)));
        if let Some((id, g, cause)) = link {
            return Diagnosis {
                culprit: Culprit::Link { node: id },
                slowdown: s,
                gain: g,
                sentence: format!(
                    "{s:.2}x slower than its ideal; fixing node {id}'s operations (mostly its {}) recovers {:.0} % of it",
                    cause.name(),
                    g.min(1.0) * 100.0
                ),
            };
        }
        if a.compute_gain >= th.input_explains {
            return Diagnosis {
                culprit: Culprit::InputImbalance,
                slowdown: s,
                gain: a.compute_gain,
                sentence: format!(
                    "{s:.2}x slower than its ideal; steps vary with their input: no single worker \
                     (typical compute would recover {:.0} %, the best single rank {:.0} %)",
                    a.compute_gain.min(1.0) * 100.0,
                    a.worker_share.min(1.0) * 100.0
                ),
            };
        }
        if let Some(k) = a.kinds.iter().find(|k| !k.cause.is_compute() && k.gain >= th.explains) {
            return Diagnosis {
                culprit: Culprit::OpKind { kind: k.cause },
                slowdown: s,
                gain: k.gain,
                sentence: format!(
                    "{s:.2}x slower than its ideal; making every {} typical recovers {:.0} % of it",
                    k.cause.name(),
                    k.gain.min(1.0) * 100.0
                ),
            };
        }
    }
    if split && let Some(g) = a.stage_costs.first() {
        return stage_answer(g);
    }
    none(format!(
        "{:.2}x slower than its ideal, spread thin: no rank, node, stage or kind recovers {:.0} % of it",
        a.slowdown,
        th.explains * 100.0
    ))
}

#[cfg(test)]
mod tests;
