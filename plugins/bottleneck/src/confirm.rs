//! A culprit is said only once two windows of different steps name it.
//!
//! A fault holds from one window of steps to the next. A spike does not:
//! a rank that lost its core for one step, or an all-reduce that waited on a
//! descheduled peer, can hold most of one window's gap, and every window
//! that contains that step may name whoever it hit. Fifty healthy gloo jobs
//! on a 2-core machine named such a spike in 5 runs when each window was
//! read alone (docs/benchmarks.md).
//!
//! So a rank, a node or a kind of operation is the job's culprit only when
//! the newest earlier window that shares no step with this one named the
//! same subject (its cause may differ: a slow rank's excess can move from
//! forward to backward). Until then the diagnosis names the stage when the
//! split alone is costly (as `diagnose` would without the straggler), else
//! says what this window alone points at and names no culprit. A stage is
//! not held back: its cost is replayed from typical durations, which one
//! step does not move.
//!
//! Cost: a culprit is named a window later (8 steps at the default
//! `ops_window_steps`; one step per window at 1 024 ranks, where a window
//! holds a single step). Kept in memory only: after a restart the first
//! window waits for a second again.

use std::collections::VecDeque;

use crate::whatif::{Analysis, Culprit, Diagnosis, Thresholds, split_stage};

/// Windows remembered: enough to reach back past a window's own length
/// when analyses run every step.
const KEPT: usize = 64;

/// The recent windows of one job: (first step, last step, subject named).
#[derive(Debug, Default)]
pub struct Seen {
    windows: VecDeque<(u64, u64, Option<String>)>,
}

/// Who a culprit blames, its cause left out; `None` for no one or a stage.
fn subject(c: &Culprit) -> Option<String> {
    match c {
        Culprit::Worker { rank, .. } => Some(format!("rank {rank}")),
        Culprit::Link { node } => Some(format!("node {node}")),
        Culprit::OpKind { kind } => Some(format!("kind {}", kind.name())),
        Culprit::None | Culprit::InputImbalance | Culprit::Stage { .. } => None,
    }
}

impl Seen {
    /// Records this window's answer and returns the one to say: `d` itself,
    /// or, for a subject no disjoint earlier window named, the stage when
    /// the split alone is costly (what `diagnose` falls back to), else no
    /// culprit.
    pub fn confirm(&mut self, a: &Analysis, d: Diagnosis, th: &Thresholds) -> Diagnosis {
        let (Some(first), Some(last)) = (a.steps.first().map(|s| s.step), a.steps.last().map(|s| s.step)) else {
            return d;
        };
        let who = subject(&d.culprit);
        let earlier = self.windows.iter().rev().find(|w| w.1 < first).map(|w| &w.2);
        let confirmed = who.is_none() || earlier.is_some_and(|e| *e == who);
        self.windows.push_back((first, last, who.clone()));
        while self.windows.len() > KEPT {
            self.windows.pop_front();
        }
        if confirmed {
            return d;
        }
        if let Some(stage) = split_stage(a, th) {
            return stage;
        }
        Diagnosis {
            culprit: Culprit::None,
            slowdown: d.slowdown,
            gain: 0.0,
            sentence: format!(
                "{}; steps {first}–{last} alone point there, so no culprit until a window of other steps does too",
                d.sentence
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::whatif::{OpKind, StageCost, StepTimes};

    fn window(first: u64, last: u64) -> Analysis {
        Analysis {
            steps: (first..=last)
                .map(|step| StepTimes {
                    step,
                    measured_ns: 1.0,
                    actual_ns: 1.0,
                    ideal_ns: 1.0,
                    balanced_ns: 1.0,
                })
                .collect(),
            ..Analysis::default()
        }
    }

    fn rank(rank: u32, cause: OpKind) -> Diagnosis {
        Diagnosis {
            culprit: Culprit::Worker {
                rank,
                dp: rank,
                stage: 0,
                cause,
            },
            slowdown: 1.5,
            gain: 0.9,
            sentence: format!("1.50x slower than its ideal; fixing rank {rank}"),
        }
    }

    #[test]
    fn a_rank_is_named_once_a_window_of_other_steps_names_it_too() {
        let mut seen = Seen::default();
        let th = Thresholds::default();
        let first = seen.confirm(&window(0, 7), rank(2, OpKind::Forward), &th);
        assert_eq!(first.culprit, Culprit::None, "{}", first.sentence);
        assert!(first.sentence.contains("fixing rank 2") && first.sentence.contains("steps 0–7 alone"));
        // Overlapping windows do not confirm it: they share the spike.
        assert_eq!(
            seen.confirm(&window(4, 11), rank(2, OpKind::Forward), &th).culprit,
            Culprit::None
        );
        // A window after step 7 does, whatever the cause now.
        let d = seen.confirm(&window(8, 15), rank(2, OpKind::Backward), &th);
        assert_eq!(d, rank(2, OpKind::Backward));
    }

    #[test]
    fn spikes_on_different_ranks_name_no_one() {
        let mut seen = Seen::default();
        let th = Thresholds::default();
        for (i, r) in [1, 3, 1, 0, 2].into_iter().enumerate() {
            let s = 8 * i as u64;
            let d = seen.confirm(&window(s, s + 7), rank(r, OpKind::Backward), &th);
            assert_eq!(d.culprit, Culprit::None, "window {i}: {}", d.sentence);
        }
    }

    #[test]
    fn an_unconfirmed_rank_in_a_costly_split_leaves_the_stage() {
        let mut seen = Seen::default();
        let th = Thresholds::default();
        let mut a = window(0, 7);
        a.stage_slowdown = 1.25;
        a.stage_costs = vec![StageCost {
            stage: 1,
            cost: 0.25,
            excess: 0.4,
            compute_ns: 1.0,
        }];
        let d = seen.confirm(&a, rank(3, OpKind::Backward), &th);
        assert_eq!(d.culprit, Culprit::Stage { stage: 1, excess: 0.4 }, "{}", d.sentence);
    }

    #[test]
    fn a_stage_and_no_culprit_are_said_at_once() {
        let mut seen = Seen::default();
        let th = Thresholds::default();
        let stage = Diagnosis {
            culprit: Culprit::Stage { stage: 1, excess: 0.3 },
            slowdown: 1.2,
            gain: 1.0,
            sentence: "pipeline stage 1".into(),
        };
        assert_eq!(seen.confirm(&window(0, 7), stage.clone(), &th), stage);
        let calm = Diagnosis {
            culprit: Culprit::InputImbalance,
            ..stage
        };
        assert_eq!(seen.confirm(&window(1, 8), calm.clone(), &th), calm);
    }
}
