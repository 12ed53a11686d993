//! Hand-built jobs with known answers. A small executor runs per-rank
//! programs under the same rules the replay assumes (a receive waits for its
//! send, a blocking send for its receiver, a collective for its whole
//! group), so the traces are consistent the way real ones are.

use std::collections::HashMap;

use super::attribution::median;
use super::graph::{BWD, FWD, build};
use super::*;

#[derive(Clone, Copy)]
struct R {
    rank: u32,
    node: u32,
    dp: u32,
    stage: u32,
    tp: u32,
}

/// One instruction of a rank's program for one step.
#[derive(Clone, Copy)]
enum P {
    /// A local operation: kind, micro-batch, duration.
    Local(OpKind, Option<u32>, u64),
    /// A pipeline send: micro-batch, direction (FWD to the next stage, BWD
    /// to the previous), duration.
    Send(u32, u32, u64),
    /// A blocking pipeline send (gloo's, or NCCL's on its stream): it
    /// returns only once the receiver has posted its receive, then the
    /// transfer's duration.
    SendBlocking(u32, u32, u64),
    /// A pipeline receive: micro-batch, direction, own duration.
    Recv(u32, u32, u64),
    /// A collective of the rank's group: kind, own duration.
    Coll(OpKind, u64),
}

/// A collective instance in the executor: group, kind, position.
type CollKey = ((u32, u32, u32), OpKind, u32);

/// Runs every rank's programs, step after step, each rank on its own clock.
fn run(ranks: &[R], steps: u64, prog: impl Fn(u64, &R) -> Vec<P>) -> Vec<Op> {
    let group = |r: &R, k: OpKind| {
        if k == OpKind::DpCollective {
            (0, r.stage, r.tp)
        } else {
            (1, r.dp, r.stage)
        }
    };
    let mut clock = vec![0u64; ranks.len()];
    let mut ops = Vec::new();
    for step in 0..steps {
        let progs: Vec<Vec<P>> = ranks.iter().map(|r| prog(step, r)).collect();
        let mut pc = vec![0usize; ranks.len()];
        let mut coll_n = vec![HashMap::<OpKind, u32>::new(); ranks.len()];
        let mut sends: HashMap<(u32, u32, u32, u32, u32), u64> = HashMap::new();
        // Receives posted, by the same key as their sends: a blocking send waits for one.
        let mut posted: HashMap<(u32, u32, u32, u32, u32), u64> = HashMap::new();
        let mut arrivals: HashMap<CollKey, Vec<(usize, u64)>> = HashMap::new();
        let mut coll_end: HashMap<CollKey, u64> = HashMap::new();
        let mut waiting = vec![false; ranks.len()];
        loop {
            let mut progress = false;
            for (i, r) in ranks.iter().enumerate() {
                while pc[i] < progs[i].len() {
                    let op = |kind, micro, start, end| Op {
                        rank: r.rank,
                        node: r.node,
                        dp: r.dp,
                        stage: r.stage,
                        tp: r.tp,
                        step,
                        micro,
                        kind,
                        start_ns: start,
                        end_ns: end,
                    };
                    let t = clock[i];
                    match progs[i][pc[i]] {
                        P::Local(k, m, d) => {
                            ops.push(op(k, m, t, t + d));
                            clock[i] = t + d;
                        }
                        P::Send(m, dir, d) => {
                            ops.push(op(OpKind::PpSend, Some(m), t, t + d));
                            sends.insert((r.dp, r.tp, m, dir, r.stage), t + d);
                            clock[i] = t + d;
                        }
                        P::SendBlocking(m, dir, d) => {
                            let Some(&rp) = posted.get(&(r.dp, r.tp, m, dir, r.stage)) else {
                                break;
                            };
                            let end = t.max(rp) + d;
                            ops.push(op(OpKind::PpSend, Some(m), t, end));
                            sends.insert((r.dp, r.tp, m, dir, r.stage), end);
                            clock[i] = end;
                        }
                        P::Recv(m, dir, d) => {
                            let from = if dir == FWD { r.stage - 1 } else { r.stage + 1 };
                            let key = (r.dp, r.tp, m, dir, from);
                            if let std::collections::hash_map::Entry::Vacant(e) = posted.entry(key) {
                                e.insert(t);
                                progress = true;
                            }
                            let Some(&se) = sends.get(&key) else {
                                break;
                            };
                            let end = t.max(se) + d;
                            ops.push(op(OpKind::PpRecv, Some(m), t, end));
                            clock[i] = end;
                        }
                        P::Coll(k, d) => {
                            let occ = *coll_n[i].get(&k).unwrap_or(&0);
                            let key = (group(r, k), k, occ);
                            if !waiting[i] {
                                arrivals.entry(key).or_default().push((i, t));
                                waiting[i] = true;
                                let members = ranks.iter().filter(|o| group(o, k) == group(r, k)).count();
                                let arrived = &arrivals[&key];
                                if arrived.len() == members {
                                    let last = arrived.iter().map(|a| a.1).max().unwrap();
                                    coll_end.insert(key, last + d);
                                }
                            }
                            let Some(&end) = coll_end.get(&key) else { break };
                            ops.push(op(k, None, t, end));
                            clock[i] = end;
                            waiting[i] = false;
                            *coll_n[i].entry(k).or_insert(0) += 1;
                        }
                    }
                    pc[i] += 1;
                    progress = true;
                }
            }
            if pc.iter().zip(&progs).all(|(p, g)| *p == g.len()) {
                break;
            }
            assert!(progress, "the test's programs deadlock");
        }
        // Every rank starts the next step together, as after a barrier.
        let top = *clock.iter().max().unwrap();
        clock.iter_mut().for_each(|c| *c = top);
    }
    ops
}

/// dp ranks of one stage, one node each.
fn dp_ranks(dp: u32) -> Vec<R> {
    (0..dp)
        .map(|d| R {
            rank: d,
            node: d,
            dp: d,
            stage: 0,
            tp: 0,
        })
        .collect()
}

fn dp_step(fwd: u64, bwd: u64) -> Vec<P> {
    vec![
        P::Local(OpKind::Forward, Some(0), fwd),
        P::Local(OpKind::Backward, Some(0), bwd),
        P::Coll(OpKind::DpCollective, 5),
    ]
}

fn diagnosis(ops: &[Op]) -> (Analysis, Diagnosis) {
    let th = Thresholds::default();
    let a = analyze(ops, &th);
    let d = diagnose(&a, &th);
    (a, d)
}

#[test]
fn healthy_job_is_its_own_ideal() {
    let ops = run(&dp_ranks(4), 3, |_, _| dp_step(10, 20));
    let (a, d) = diagnosis(&ops);
    assert_eq!(a.steps.len(), 3);
    assert_eq!(a.actual_ns, 3.0 * 35.0);
    assert_eq!(a.ideal_ns, a.actual_ns);
    assert_eq!(a.slowdown, 1.0);
    assert!(
        a.steps.iter().all(|s| s.measured_ns == s.actual_ns),
        "the replay reproduces the trace"
    );
    assert_eq!(d.culprit, Culprit::None);
}

#[test]
fn slow_worker_is_named_with_its_cause_and_full_gain() {
    let ops = run(&dp_ranks(4), 3, |_, r| dp_step(if r.rank == 2 { 20 } else { 10 }, 20));
    let (a, d) = diagnosis(&ops);
    // Rank 2 takes 20 + 20 + 5 while the ideal is 10 + 20 + 5; the others wait.
    assert_eq!(a.actual_ns, 3.0 * 45.0);
    assert_eq!(a.ideal_ns, 3.0 * 35.0);
    assert!((a.slowdown - 45.0 / 35.0).abs() < 1e-12);
    assert_eq!(a.workers[0].rank, 2);
    assert!((a.workers[0].gain - 1.0).abs() < 1e-12);
    assert!((a.worker_share - 1.0).abs() < 1e-12);
    assert_eq!(
        d.culprit,
        Culprit::Worker {
            rank: 2,
            dp: 2,
            stage: 0,
            cause: OpKind::Forward
        }
    );
    assert!((d.gain - 1.0).abs() < 1e-12);
    assert!(d.sentence.contains("rank 2"), "{}", d.sentence);
}

#[test]
fn a_small_slowdown_is_not_blamed() {
    // 2 % on one rank: the barrier makes it everyone's, but it is below the
    // threshold.
    let ops = run(&dp_ranks(4), 3, |_, r| dp_step(10, if r.rank == 1 { 20 } else { 19 }));
    let (a, d) = diagnosis(&ops);
    assert!(a.slowdown > 1.0 && a.slowdown < 1.05, "{}", a.slowdown);
    assert_eq!(d.culprit, Culprit::None);
}

#[test]
fn slow_dataloader_is_a_worker_with_input_as_cause() {
    let ops = run(&dp_ranks(4), 4, |_, r| {
        let mut p = vec![P::Local(OpKind::Input, None, if r.rank == 3 { 30 } else { 2 })];
        p.extend(dp_step(10, 20));
        p
    });
    let (_, d) = diagnosis(&ops);
    assert_eq!(
        d.culprit,
        Culprit::Worker {
            rank: 3,
            dp: 3,
            stage: 0,
            cause: OpKind::Input
        }
    );
}

#[test]
fn varying_input_blames_no_single_worker() {
    // Each step a different replica gets the long micro-batch.
    let ops = run(&dp_ranks(4), 4, |step, r| {
        if step as u32 == r.rank {
            dp_step(20, 40)
        } else {
            dp_step(10, 20)
        }
    });
    let (a, d) = diagnosis(&ops);
    assert!(a.slowdown > 1.5);
    assert!(a.worker_share < 0.3, "{}", a.worker_share);
    assert!((a.compute_gain - 1.0).abs() < 1e-12);
    assert_eq!(d.culprit, Culprit::InputImbalance);
}

/// dp x pp ranks, GPipe over `micro` micro-batches, one rank per node.
fn pipeline(dp: u32, pp: u32, micro: u32, fwd: impl Fn(&R) -> u64, send: impl Fn(&R) -> u64) -> Vec<Op> {
    pipeline_sending(dp, pp, micro, fwd, send, false)
}

/// The same, with sends that block until their receive is posted when `blocking`.
fn pipeline_sending(
    dp: u32,
    pp: u32,
    micro: u32,
    fwd: impl Fn(&R) -> u64,
    send: impl Fn(&R) -> u64,
    blocking: bool,
) -> Vec<Op> {
    let sent = |m, dir, d| {
        if blocking {
            P::SendBlocking(m, dir, d)
        } else {
            P::Send(m, dir, d)
        }
    };
    let ranks: Vec<R> = (0..dp)
        .flat_map(|d| {
            (0..pp).map(move |s| R {
                rank: d * pp + s,
                node: d * pp + s,
                dp: d,
                stage: s,
                tp: 0,
            })
        })
        .collect();
    run(&ranks, 4, |_, r| {
        let last = pp - 1;
        let mut p = Vec::new();
        for m in 0..micro {
            if r.stage > 0 {
                p.push(P::Recv(m, FWD, 1));
            }
            p.push(P::Local(OpKind::Forward, Some(m), fwd(r)));
            if r.stage < last {
                p.push(sent(m, FWD, send(r)));
            }
        }
        for m in 0..micro {
            if r.stage < last {
                p.push(P::Recv(m, BWD, 1));
            }
            p.push(P::Local(OpKind::Backward, Some(m), 2 * fwd(r)));
            if r.stage > 0 {
                p.push(sent(m, BWD, send(r)));
            }
        }
        p.push(P::Coll(OpKind::DpCollective, 5));
        p.push(P::Local(OpKind::Optimizer, None, 3));
        p
    })
}

#[test]
fn receives_match_sends_by_direction() {
    // One replica, two stages, one micro-batch: stage 0's gradient receive
    // comes after its forward, so it waits for stage 1's backward send.
    let ops = pipeline(1, 2, 1, |_| 10, |_| 1);
    let (g, ..) = build(&ops);
    let (a, b) = g.step_ranges[0];
    let recv_on = |stage: u32| {
        (a..b)
            .find(|&i| g.info[i].kind == OpKind::PpRecv && g.info[i].stage == stage)
            .unwrap()
    };
    let preds = |i: usize| {
        g.preds[g.pred_start[i] as usize..g.pred_start[i + 1] as usize]
            .iter()
            .map(|&p| (g.info[p as usize].kind, g.info[p as usize].stage))
            .collect::<Vec<_>>()
    };
    let (rb, rf) = (recv_on(0), recv_on(1));
    // Own durations: the waiting is taken out, 1 ns each is left.
    assert_eq!(g.actual[rb], 1.0);
    assert_eq!(g.actual[rf], 1.0);
    assert!(preds(rb).contains(&(OpKind::PpSend, 1)), "{:?}", preds(rb));
    assert!(preds(rf).contains(&(OpKind::PpSend, 0)), "{:?}", preds(rf));
    // Replay order: every predecessor comes first.
    for i in a..b {
        assert!(
            g.preds[g.pred_start[i] as usize..g.pred_start[i + 1] as usize]
                .iter()
                .all(|&p| (p as usize) < i)
        );
    }
}

#[test]
fn a_long_stage_is_the_split_not_a_straggler() {
    let ops = pipeline(2, 4, 4, |r| if r.stage == 3 { 16 } else { 10 }, |_| 1);
    let (a, d) = diagnosis(&ops);
    assert!(
        a.steps.iter().all(|s| s.measured_ns == s.actual_ns),
        "the replay reproduces the trace"
    );
    assert_eq!(a.slowdown, 1.0, "both replicas alike: nothing straggles");
    assert!(a.stage_slowdown > 1.1, "{}", a.stage_slowdown);
    assert_eq!(a.stage_costs[0].stage, 3);
    assert!((a.stage_costs[0].excess - 0.6).abs() < 1e-9, "{:?}", a.stage_costs);
    // Four micro-batches of forward and backward (twice the forward) a step.
    assert_eq!(a.stage_costs[0].compute_ns, 4.0 * 48.0);
    assert!(a.stage_costs[1..].iter().all(|c| c.compute_ns == 4.0 * 30.0));
    assert!(
        a.stage_costs[1..].iter().all(|c| c.cost < 0.0),
        "the others are shorter: {:?}",
        a.stage_costs
    );
    assert!(a.stage_share > 0.99);
    match d.culprit {
        Culprit::Stage { stage, excess } => {
            assert_eq!(stage, 3);
            assert!((excess - 0.6).abs() < 1e-9);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_long_stage_behind_blocking_sends_is_the_split_not_the_sends() {
    // gloo's send returns once its receive is posted: stage 0's sends last
    // as long as stage 1 takes to come for them. The stage excess counts
    // compute only, so this holds with or without the rendezvous reading;
    // it guards that reading the sends as blocking keeps the stage named
    // (the slow worker below is the case the rendezvous decides).
    let ops = pipeline_sending(2, 4, 4, |r| if r.stage == 1 { 30 } else { 10 }, |_| 1, true);
    let sends_waited = ops
        .iter()
        .filter(|o| o.kind == OpKind::PpSend && o.stage == 0)
        .any(|o| o.end_ns - o.start_ns > 10);
    assert!(sends_waited, "the trace has stage 0's sends waiting");
    let (a, d) = diagnosis(&ops);
    assert!(
        a.steps.iter().all(|s| s.measured_ns == s.actual_ns),
        "the replay reproduces the trace"
    );
    assert_eq!(a.stage_costs[0].stage, 1, "{:?}", a.stage_costs);
    match d.culprit {
        Culprit::Stage { stage, excess } => {
            assert_eq!(stage, 1);
            assert!((excess - 2.0).abs() < 1e-9, "{excess}");
        }
        other => panic!("{other:?}: {}", d.sentence),
    }
}

#[test]
fn a_slow_worker_behind_blocking_sends_is_named_not_its_senders() {
    // The same slow worker, but every send waits for its receiver: rank 8
    // (stage 0 of its replica) sends to rank 9 and so waits as long as 9 is
    // late. Read as its own time, that wait made rank 8's sends the culprit.
    let ops = pipeline_sending(4, 4, 4, |r| if r.rank == 9 { 25 } else { 10 }, |_| 1, true);
    let (a, d) = diagnosis(&ops);
    assert!(
        a.steps.iter().all(|s| s.measured_ns == s.actual_ns),
        "the replay reproduces the trace"
    );
    assert!(a.slowdown > 1.2, "{}", a.slowdown);
    assert_eq!(
        d.culprit,
        Culprit::Worker {
            rank: 9,
            dp: 2,
            stage: 1,
            cause: OpKind::Backward
        },
        "{}",
        d.sentence
    );
    assert!(d.gain > 0.9, "{}", d.gain);
}

#[test]
fn slow_sends_of_one_node_are_its_link() {
    // Four replicas of two stages; node 5 (dp 2, stage 1) sends 30 times
    // slower than the others.
    let ops = pipeline(4, 2, 4, |_| 10, |r| if r.node == 5 { 30 } else { 1 });
    let (a, d) = diagnosis(&ops);
    assert!(a.slowdown > 1.05, "{}", a.slowdown);
    assert_eq!(a.workers[0].cause, OpKind::PpSend);
    assert_eq!(d.culprit, Culprit::Link { node: 5 });
}

#[test]
fn slow_worker_in_a_pipeline_is_found_behind_its_neighbours() {
    let ops = pipeline(4, 4, 4, |r| if r.rank == 9 { 25 } else { 10 }, |_| 1);
    let (a, d) = diagnosis(&ops);
    assert!(a.slowdown > 1.2, "{}", a.slowdown);
    assert_eq!(
        d.culprit,
        Culprit::Worker {
            rank: 9,
            dp: 2,
            stage: 1,
            cause: OpKind::Backward
        }
    );
    assert!(d.gain > 0.95, "{}", d.gain);
}

#[test]
fn an_analysis_in_pieces_is_the_analysis_at_once() {
    // 32 ranks of 4 stages, 4 steps: two pieces of building a step (16
    // ranks each), then the replays, one piece per call.
    let ops = pipeline(8, 4, 4, |r| if r.rank == 9 { 25 } else { 10 }, |_| 1);
    let whole = analyze(&ops, &Thresholds::default());
    let mut pending = Pending::new(ops.clone(), &Thresholds::default());
    let mut calls = 0;
    let pieces = loop {
        calls += 1;
        assert!(calls < 1000, "an analysis that never ends");
        // Each call may do one piece: the first `more()` says stop.
        if let Some(a) = pending.advance(&mut || false) {
            break a;
        }
    };
    assert_eq!(pieces, whole);
    // Eight pieces of building, then 4 + 4 + 4 + the kinds + 1 + 4 replays.
    assert!(calls > 20, "{calls} calls");
    assert!(matches!(
        diagnose(&pieces, &Thresholds::default()).culprit,
        Culprit::Worker { rank: 9, .. }
    ));
}

#[test]
fn broken_traces_are_replayed_as_far_as_they_go() {
    assert_eq!(diagnosis(&[]).1.culprit, Culprit::None);
    // A receive with no send anywhere, and a collective missing a member.
    let mut ops = run(&dp_ranks(2), 2, |_, _| dp_step(10, 20));
    ops.push(Op {
        rank: 0,
        node: 0,
        dp: 0,
        stage: 1,
        tp: 0,
        step: 0,
        micro: Some(0),
        kind: OpKind::PpRecv,
        start_ns: 100,
        end_ns: 110,
    });
    ops.retain(|o| !(o.rank == 1 && o.step == 1 && o.kind == OpKind::DpCollective));
    let (a, _) = diagnosis(&ops);
    assert_eq!(a.steps.len(), 2);
    assert!(a.actual_ns > 0.0);
}

#[test]
fn median_of_even_counts_is_the_middle_mean() {
    assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    assert_eq!(median(&mut [5.0, 1.0, 3.0]), 3.0);
    assert_eq!(median(&mut []), 0.0);
}

#[test]
fn diagnosis_serializes_with_a_tag() {
    let d = Diagnosis {
        culprit: Culprit::Worker {
            rank: 1,
            dp: 0,
            stage: 2,
            cause: OpKind::Input,
        },
        slowdown: 2.0,
        gain: 0.98,
        sentence: String::new(),
    };
    let v = serde_json::to_value(&d).unwrap();
    assert_eq!(v["culprit"]["culprit"], "worker");
    assert_eq!(v["culprit"]["cause"], "input");
}

/// DDP's shape: the gradient all-reduce is called from within backward
/// (its bucket ready), and backward returns only once the reduction is done.
/// Rank 2's input takes 60 ms: the others' backward lasts until rank 2's
/// all-reduce call, which the replay must not count as their own compute.
#[test]
fn a_collective_called_inside_backward_is_its_wait_not_compute() {
    const MS: u64 = 1_000_000;
    let mut ops = Vec::new();
    for step in 0..8u64 {
        let t0 = step * 200 * MS;
        let input = |r: u32| if r == 2 { 60 * MS } else { MS };
        // Everyone's all-reduce ends 2 ms after rank 2's call (its input,
        // then 10 ms forward and 10 ms of backward until its call).
        let last_call = t0 + input(2) + 20 * MS;
        let reduced = last_call + 2 * MS;
        for r in 0..4u32 {
            let fwd = t0 + input(r);
            let call = fwd + 20 * MS;
            let op = |kind, start_ns, end_ns| Op {
                rank: r,
                node: r,
                dp: r,
                stage: 0,
                tp: 0,
                step,
                micro: None,
                kind,
                start_ns,
                end_ns,
            };
            ops.push(op(OpKind::Input, t0, fwd));
            ops.push(op(OpKind::Forward, fwd, fwd + 10 * MS));
            ops.push(op(OpKind::Backward, fwd + 10 * MS, reduced));
            ops.push(op(OpKind::DpCollective, call, reduced));
            ops.push(op(OpKind::Optimizer, reduced, reduced + MS));
        }
    }
    let (a, d) = diagnosis(&ops);
    assert!(a.slowdown > 1.5, "the input's 59 ms over a 33 ms ideal: {}", a.slowdown);
    match d.culprit {
        Culprit::Worker { rank, cause, .. } => {
            assert_eq!(rank, 2);
            assert_eq!(cause, OpKind::Input);
        }
        other => panic!("{other:?}: {}", d.sentence),
    }
    assert!(d.gain > 0.9, "{}", d.gain);
}

#[test]
fn slow_sends_on_a_machine_holding_the_whole_job_are_no_link() {
    // The same slow sender, but all eight ranks share one machine: its
    // "link" is that machine's memory, and naming the machine names the job.
    let mut ops = pipeline(4, 2, 4, |_| 10, |r| if r.rank == 5 { 30 } else { 1 });
    ops.iter_mut().for_each(|o| o.node = 0);
    let (a, d) = diagnosis(&ops);
    assert_eq!(a.workers[0].rank, 5);
    assert_eq!(a.workers[0].node_ranks, 8);
    assert!(!matches!(d.culprit, Culprit::Link { .. }), "{d:?}");
}

#[test]
fn a_node_holding_one_whole_long_stage_is_named_as_the_stage() {
    // Two replicas of two stages on two machines, each machine one whole
    // stage: stage 1 has three times stage 0's layers, and as on a busy
    // machine its long operations jitter (every other step a quarter
    // longer), on the critical path. Fixing node 1 recovers most of the
    // jitter, but node 1 is stage 1: the split is the cause.
    let (pp, micro) = (2u32, 4u32);
    let ranks: Vec<R> = (0..2)
        .flat_map(|d| {
            (0..pp).map(move |s| R {
                rank: d * pp + s,
                node: s,
                dp: d,
                stage: s,
                tp: 0,
            })
        })
        .collect();
    let ops = run(&ranks, 8, |step, r| {
        let jitter = [1, 4, 6].contains(&step);
        let fwd = match (r.stage, jitter) {
            (1, true) => 90 + 10 * r.dp as u64,
            (1, false) => 30,
            _ => 10,
        };
        let mut p = Vec::new();
        for m in 0..micro {
            if r.stage > 0 {
                p.push(P::Recv(m, FWD, 1));
            }
            p.push(P::Local(OpKind::Forward, Some(m), fwd));
            if r.stage == 0 {
                p.push(P::SendBlocking(m, FWD, 1));
            }
        }
        for m in 0..micro {
            if r.stage == 0 {
                p.push(P::Recv(m, BWD, 1));
            }
            p.push(P::Local(OpKind::Backward, Some(m), 2 * fwd));
            if r.stage > 0 {
                p.push(P::SendBlocking(m, BWD, 1));
            }
        }
        p.push(P::Coll(OpKind::DpCollective, if r.stage == 1 { 15 } else { 5 }));
        p
    });
    let (a, d) = diagnosis(&ops);
    assert_eq!(a.nodes[0].id, 1, "{:?}", a.nodes);
    assert_eq!(a.nodes[0].whole_stage, Some(1), "{:?}", a.nodes);
    assert!(
        a.actual_ns - a.ideal_ns > a.ideal_ns - a.balanced_ns,
        "the jitter's gap is the larger, so the split alone would not be named first: {} {} {}",
        a.actual_ns,
        a.ideal_ns,
        a.balanced_ns
    );
    match d.culprit {
        Culprit::Stage { stage, .. } => assert_eq!(stage, 1, "{}", d.sentence),
        other => panic!("{other:?}: {}", d.sentence),
    }
}

/// Four replicas on two machines, two ranks each (ranks 0, 1 on node 0).
fn two_machines() -> Vec<R> {
    (0..4)
        .map(|d| R {
            rank: d,
            node: d / 2,
            dp: d,
            stage: 0,
            tp: 0,
        })
        .collect()
}

#[test]
fn a_machine_whose_ranks_all_compute_slowly_is_named() {
    // Both ranks of node 0 run their backward at 1.5x, every step: a slow
    // machine. No single rank leads (each recovers nothing alone), the node
    // recovers everything.
    let ops = run(&two_machines(), 4, |_, r| {
        dp_step(10, if r.node == 0 { 30 } else { 20 })
    });
    let (a, d) = diagnosis(&ops);
    assert_eq!(a.nodes[0].id, 0, "{:?}", a.nodes);
    assert!(a.nodes[0].gain > 0.99, "{:?}", a.nodes);
    assert_eq!(d.culprit, Culprit::Link { node: 0 }, "{}", d.sentence);
    assert!(d.sentence.contains("mostly its backward"), "{}", d.sentence);
}

#[test]
fn jitter_shared_by_one_machines_ranks_names_no_node() {
    // Some steps one rank runs its backward long, the varying input of a
    // healthy job; in the two longest, both ranks of node 0 lose its cores
    // together (+10), in two others one rank of node 1 runs a little long
    // (+4). Node 0 recovers 20 of the 28 (71 %): more than half of the gap,
    // and clearly more than node 1, but not what a slow machine recovers.
    let ops = run(&two_machines(), 6, |step, r| {
        let extra = match step {
            0 | 3 if r.node == 0 => 10,
            1 if r.rank == 2 => 4,
            4 if r.rank == 3 => 4,
            _ => 0,
        };
        dp_step(10, 20 + extra)
    });
    let (a, d) = diagnosis(&ops);
    let node0 = a.nodes.iter().find(|n| n.id == 0).expect("node 0");
    assert!((0.7..0.72).contains(&node0.gain), "{:?}", a.nodes);
    assert!(
        !matches!(d.culprit, Culprit::Link { .. } | Culprit::Worker { .. }),
        "{}",
        d.sentence
    );
}
