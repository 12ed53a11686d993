//! The replays and the attribution: typical durations, the window replayed
//! actual and ideal, then with one subset at a time (rank, node, stage,
//! kind) made typical, and the stages balanced.

use super::graph::{Graph, build};
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
            node_ranks: ranks.iter().filter(|o| o.node == ri.node).count() as u32,
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
    let (compute_of, excess_of) = stage_excess(&graph, &typical, stages, ranks.len());
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
            compute_ns: compute_of[s as usize],
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
