//! The verdict: an `Analysis` read in a fixed order of questions into one
//! culprit, its gain and a sentence.

use super::{Analysis, Culprit, Diagnosis, StageCost, Thresholds};

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
///    communication and its node holds at most half the job: a link's
///    slowness shows on every rank behind it, and a rank whose own
///    communication is slow points at its link. But when that node holds
///    one whole stage and nothing else, and the split costs at least
///    `min_stage_slowdown`, the stage: node and stage are the same ranks,
///    the stage's length is the steady cause, and what exceeds typical on
///    its ranks is the long stage's jitter on the critical path (two
///    stages of two ranks on two machines, a gloo pipeline on a quiet
///    machine, got "node b's dp_collective" before this rule). A node
///    whose excess is not communication (compute, its optimizer) must
///    recover `node_compute_explains`: one machine's ranks share its jitter.
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
    let stage_answer = |g: &StageCost| stage_diagnosis(a, g);
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
        // A node holding most of the job is not a place: fixing it is fixing
        // the job, and its "link" is the machine's own memory.
        let a_place = |ranks: u32| 2 * ranks as usize <= a.ranks;
        let node = a
            .nodes
            .first()
            .filter(|g| a_place(g.ranks) && leads(g.gain, a.nodes.get(1).map(|n| n.gain)))
            .map(|g| (g.id, g.gain, g.cause, g.whole_stage));
        let link = node.or_else(|| {
            worker
                .filter(|w| a_place(w.node_ranks))
                .map(|w| (w.node, w.gain, w.cause, w.node_whole_stage))
        });
        if let Some((_, _, _, Some(whole))) = link
            && split
            && let Some(g) = stage_pick.filter(|g| g.stage == whole)
        {
            return stage_answer(g);
        }
        if let Some((id, g, cause, _)) = link.filter(|l| l.2.is_communication() || l.1 >= th.node_compute_explains) {
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
    if let Some(stage) = split_stage(a, th) {
        return stage;
    }
    none(format!(
        "{:.2}x slower than its ideal, spread thin: no rank, node, stage or kind recovers {:.0} % of it",
        a.slowdown,
        th.explains * 100.0
    ))
}

/// The costliest stage's answer.
fn stage_diagnosis(a: &Analysis, g: &StageCost) -> Diagnosis {
    Diagnosis {
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
    }
}

/// The stage, when the split alone costs at least `min_stage_slowdown`:
/// rule 7 above, and what a window says once the straggler it points at is
/// not confirmed (`crate::confirm`).
pub fn split_stage(a: &Analysis, th: &Thresholds) -> Option<Diagnosis> {
    let g = a.stage_costs.first()?;
    (a.stage_slowdown >= th.min_stage_slowdown).then(|| stage_diagnosis(a, g))
}
