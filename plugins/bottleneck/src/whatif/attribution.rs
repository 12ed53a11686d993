//! The replays and the attribution: typical durations, the window replayed
//! actual and ideal, then with one subset at a time (rank, node, stage,
//! kind) made typical, and the stages balanced; at once ([`analyze`]) or a
//! piece at a time ([`Pending`]).

use super::graph::{Builder, Built, Graph, RankInfo};
use super::{Analysis, Op, OpKind, StageCost, StepTimes, SubsetGain, Thresholds, WorkerGain, gain, ratio};

/// Replays the window and attributes its slowdown. `ops` may come in any
/// order; each rank's operations of a step are ordered by start.
///
/// Own durations, the part of an operation that is its own work:
/// - a pipeline receive: from when both it was posted and its matching send
///   had finished, to its end (before that it waits for the sender);
/// - a pipeline send that was still running when its receive was posted,
///   after the send began, in a step whose sends block (a rendezvous:
///   gloo's send returns only once the receiver is there; see `graph.rs`):
///   from that posting to its end; the replay has it wait for what the
///   receiving rank did before the receive;
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
    Pending::new(ops.to_vec(), th)
        .advance(&mut || true)
        .expect("an analysis never told to stop ends")
}

/// One window's [`analyze`] in pieces, for a caller that must return within
/// a time budget (a plugin's hook call): the operations are placed by step
/// and rank, the graph is built a few ranks at a time and ordered a step at
/// a time, the actual and ideal replays and the candidates are one piece,
/// then each subset's replay is one. The answer is the same as [`analyze`]'s.
pub struct Pending {
    th: Thresholds,
    ops: usize,
    state: State,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Placing(_) => "placing",
            State::Building(_) => "building",
            State::Replaying(_) => "replaying",
            State::Done => "done",
        };
        f.debug_struct("Pending")
            .field("ops", &self.ops)
            .field("state", &state)
            .finish()
    }
}

enum State {
    /// The operations, not yet placed by step and rank.
    Placing(Vec<Op>),
    Building(Box<Builder>),
    Replaying(Box<Replays>),
    Done,
}

impl Pending {
    /// The window's analysis, not begun: [`Pending::advance`] does it.
    pub fn new(ops: Vec<Op>, th: &Thresholds) -> Pending {
        Pending {
            th: th.clone(),
            ops: ops.len(),
            state: if ops.is_empty() {
                State::Done
            } else {
                State::Placing(ops)
            },
        }
    }

    /// Goes on, asking `more()` between pieces whether to continue: the
    /// analysis once it is complete, else `None` (call again).
    pub fn advance(&mut self, more: &mut dyn FnMut() -> bool) -> Option<Analysis> {
        loop {
            match &mut self.state {
                State::Placing(ops) => {
                    let b = Builder::new(ops);
                    self.state = State::Building(Box::new(b));
                    if !more() {
                        return None;
                    }
                }
                State::Building(b) => {
                    // Ordering the last step was a piece: the replays begin in a call of their own if need be.
                    if !b.done() && (!b.advance(more) || !more()) {
                        return None;
                    }
                    let State::Building(b) = std::mem::replace(&mut self.state, State::Done) else {
                        unreachable!()
                    };
                    match Replays::new(b.finish(), self.ops, &self.th) {
                        Ok(r) => self.state = State::Replaying(Box::new(r)),
                        Err(out) => return Some(*out),
                    }
                    if !more() {
                        return None;
                    }
                }
                State::Replaying(r) => {
                    while r.next < r.tasks.len() {
                        r.run(r.tasks[r.next]);
                        r.next += 1;
                        if r.next < r.tasks.len() && !more() {
                            return None;
                        }
                    }
                    let State::Replaying(r) = std::mem::replace(&mut self.state, State::Done) else {
                        unreachable!()
                    };
                    return Some(r.finish());
                }
                State::Done => {
                    return Some(Analysis {
                        ops: self.ops,
                        ..Analysis::default()
                    });
                }
            }
        }
    }
}

/// One replay of the window with a subset made typical (or a stage made
/// like the others).
#[derive(Clone, Copy)]
enum Task {
    /// The j-th candidate rank.
    Worker(usize),
    /// The j-th candidate node.
    Node(usize),
    Stage(u32),
    Kind(OpKind),
    /// Forward and backward together.
    Compute,
    /// Stage s's compute as long as the others'.
    Balance(u32),
}

/// The built window, its actual and ideal replays, and the subsets still to
/// replay.
struct Replays {
    graph: Graph,
    ranks: Vec<RankInfo>,
    steps: Vec<u64>,
    measured: Vec<f64>,
    typical: Vec<f64>,
    others: Vec<f64>,
    excess: Vec<f64>,
    out: Analysis,
    actual: f64,
    ideal: f64,
    act_steps: Vec<f64>,
    ideal_steps: Vec<f64>,
    end: Vec<f64>,
    per_step: Vec<f64>,
    scratch: Vec<f64>,
    mixed: Vec<f64>,
    bal: f64,
    bal_steps: Vec<f64>,
    worker_picks: Vec<usize>,
    rank_nodes: Vec<Vec<u32>>,
    host_picks: Vec<usize>,
    host_nodes: Vec<Vec<u32>>,
    by_stage: Vec<Vec<u32>>,
    by_kind: Vec<Vec<u32>>,
    excess_of: Vec<f64>,
    compute_of: Vec<f64>,
    tasks: Vec<Task>,
    next: usize,
}

impl Replays {
    /// Typical durations, the actual and ideal replays and the candidates;
    /// `Err` with the answer when there is no step to replay.
    fn new(built: Built, ops: usize, th: &Thresholds) -> Result<Replays, Box<Analysis>> {
        let (graph, ranks, steps, measured, skipped) = built;
        let mut out = Analysis {
            ops,
            skipped_steps: skipped,
            ranks: ranks.len(),
            ..Analysis::default()
        };
        let n = graph.info.len();
        let n_steps = graph.step_ranges.len();
        if n_steps == 0 {
            return Err(Box::new(out));
        }

        let (typical, others) = typicals(&graph);
        let stages = ranks.iter().map(|r| r.stage).max().map_or(0, |s| s as usize + 1);
        out.stages = stages;

        let mut end = vec![0.0f64; n];
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

        let mut by_stage: Vec<Vec<u32>> = vec![Vec::new(); stages];
        let mut by_kind: Vec<Vec<u32>> = vec![Vec::new(); 9];
        for (i, inf) in graph.info.iter().enumerate() {
            by_stage[inf.stage as usize].push(i as u32);
            by_kind[inf.kind.index()].push(i as u32);
        }
        let (compute_of, excess_of) = stage_excess(&graph, &typical, stages, ranks.len());

        // The replays still to do, in the order `analyze` always did them.
        let mut tasks: Vec<Task> = (0..worker_picks.len()).map(Task::Worker).collect();
        tasks.extend((0..host_picks.len()).map(Task::Node));
        tasks.extend((0..stages as u32).map(Task::Stage));
        tasks.extend(
            OpKind::ALL
                .into_iter()
                .filter(|k| !by_kind[k.index()].is_empty())
                .map(Task::Kind),
        );
        tasks.push(Task::Compute);
        tasks.extend((0..stages as u32).map(Task::Balance));

        Ok(Replays {
            scratch: graph.actual.clone(),
            mixed: typical.clone(),
            bal: ideal,
            bal_steps: ideal_steps.clone(),
            per_step: vec![0.0f64; n_steps],
            graph,
            ranks,
            steps,
            measured,
            typical,
            others,
            excess,
            out,
            actual,
            ideal,
            act_steps,
            ideal_steps,
            end,
            worker_picks,
            rank_nodes,
            host_picks,
            host_nodes,
            by_stage,
            by_kind,
            excess_of,
            compute_of,
            tasks,
            next: 0,
        })
    }

    /// The window replayed with `subset` at typical durations.
    fn fixed(&mut self, subset: &[u32]) -> f64 {
        for &i in subset {
            self.scratch[i as usize] = self.typical[i as usize];
        }
        let t = self.graph.replay(&self.scratch, &mut self.end, &mut self.per_step);
        for &i in subset {
            self.scratch[i as usize] = self.graph.actual[i as usize];
        }
        t
    }

    /// The kind whose own time exceeds typical the most among `nodes`.
    fn cause_of(&self, nodes: &[u32]) -> OpKind {
        let mut by_kind = [0.0f64; 9];
        for &i in nodes {
            by_kind[self.graph.info[i as usize].kind.index()] += self.excess[i as usize];
        }
        let best = (0..9).max_by(|&a, &b| by_kind[a].total_cmp(&by_kind[b])).unwrap_or(0);
        OpKind::ALL[best]
    }

    /// The stage `node` holds whole and alone: every rank on the node is of
    /// that stage, and every rank of the stage is on the node.
    fn whole_stage(&self, node: u32) -> Option<u32> {
        let on_node = || self.ranks.iter().filter(move |r| r.node == node);
        let stage = on_node().next()?.stage;
        let alone = on_node().all(|r| r.stage == stage);
        let whole = self.ranks.iter().filter(|r| r.stage == stage).all(|r| r.node == node);
        (alone && whole).then_some(stage)
    }

    fn gain(&self, t: f64) -> f64 {
        gain(self.actual, self.ideal, t, self.graph.step_ranges.len())
    }

    fn run(&mut self, task: Task) {
        match task {
            Task::Worker(j) => {
                let nodes = std::mem::take(&mut self.rank_nodes[j]);
                let t = self.fixed(&nodes);
                let ri = self.ranks[self.worker_picks[j]];
                self.out.workers.push(WorkerGain {
                    rank: ri.rank,
                    node: ri.node,
                    node_ranks: self.ranks.iter().filter(|o| o.node == ri.node).count() as u32,
                    node_whole_stage: self.whole_stage(ri.node),
                    dp: ri.dp,
                    stage: ri.stage,
                    tp: ri.tp,
                    gain: self.gain(t),
                    cause: self.cause_of(&nodes),
                });
                self.rank_nodes[j] = nodes;
            }
            Task::Node(j) => {
                let nodes = std::mem::take(&mut self.host_nodes[j]);
                let t = self.fixed(&nodes);
                let h = self.host_picks[j];
                self.out.nodes.push(SubsetGain {
                    id: h as u32,
                    ranks: self.ranks.iter().filter(|r| r.node == h as u32).count() as u32,
                    gain: self.gain(t),
                    cause: self.cause_of(&nodes),
                    whole_stage: self.whole_stage(h as u32),
                });
                self.host_nodes[j] = nodes;
            }
            Task::Stage(s) => {
                let nodes = std::mem::take(&mut self.by_stage[s as usize]);
                let t = self.fixed(&nodes);
                self.out.stages_fixed.push(SubsetGain {
                    id: s,
                    ranks: self.ranks.iter().filter(|r| r.stage == s).count() as u32,
                    gain: self.gain(t),
                    cause: self.cause_of(&nodes),
                    whole_stage: None,
                });
                self.by_stage[s as usize] = nodes;
            }
            Task::Kind(kind) => {
                let nodes = std::mem::take(&mut self.by_kind[kind.index()]);
                let t = self.fixed(&nodes);
                self.out.kinds.push(SubsetGain {
                    id: kind.index() as u32,
                    ranks: self.ranks.len() as u32,
                    gain: self.gain(t),
                    cause: kind,
                    whole_stage: None,
                });
                self.by_kind[kind.index()] = nodes;
            }
            Task::Compute => {
                let compute: Vec<u32> = self.by_kind[OpKind::Forward.index()]
                    .iter()
                    .chain(&self.by_kind[OpKind::Backward.index()])
                    .copied()
                    .collect();
                let t = self.fixed(&compute);
                self.out.compute_gain = self.gain(t);
            }
            // Stage imbalance: each stage alone made like the others, the
            // others at their own typical durations.
            Task::Balance(s) => {
                let of_stage: Vec<usize> = self.by_stage[s as usize]
                    .iter()
                    .map(|&i| i as usize)
                    .filter(|&i| self.graph.info[i].kind.is_compute())
                    .collect();
                for &i in &of_stage {
                    self.mixed[i] = self.others[i];
                }
                let t = self.graph.replay(&self.mixed, &mut self.end, &mut self.per_step);
                for &i in &of_stage {
                    self.mixed[i] = self.typical[i];
                }
                if t < self.bal {
                    self.bal = t;
                    self.bal_steps.copy_from_slice(&self.per_step);
                }
                self.out.stage_costs.push(StageCost {
                    stage: s,
                    cost: ratio(self.ideal, t) - 1.0,
                    excess: self.excess_of[s as usize],
                    compute_ns: self.compute_of[s as usize],
                });
            }
        }
    }

    fn finish(self) -> Analysis {
        let mut out = self.out;
        let (actual, ideal, bal) = (self.actual, self.ideal, self.bal);
        let n_steps = self.graph.step_ranges.len();
        sort_by_gain(&mut out.workers, |w| w.gain);
        sort_by_gain(&mut out.nodes, |g| g.gain);
        sort_by_gain(&mut out.stages_fixed, |g| g.gain);
        sort_by_gain(&mut out.kinds, |g| g.gain);
        out.stage_costs.sort_by(|a, b| b.cost.total_cmp(&a.cost));
        out.balanced_ns = bal;
        out.stage_slowdown = ratio(ideal, bal);
        out.steps = (0..n_steps)
            .map(|i| StepTimes {
                step: self.steps[i],
                measured_ns: self.measured[i],
                actual_ns: self.act_steps[i],
                ideal_ns: self.ideal_steps[i],
                balanced_ns: self.bal_steps[i],
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
/// Per stage: its typical compute per rank and step (ns), and how much
/// longer that is than the other stages' mean (a share; 0 alone).
fn stage_excess(graph: &Graph, typical: &[f64], stages: usize, n_ranks: usize) -> (Vec<f64>, Vec<f64>) {
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
    let excess = (0..stages)
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
        .collect();
    (per, excess)
}

/// The median, the mean of the two middle values for an even count.
pub(super) fn median(v: &mut [f64]) -> f64 {
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
