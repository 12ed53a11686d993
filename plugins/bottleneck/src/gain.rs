//! What fixing the straggler would gain: the job's recent judged steps as
//! operations, replayed by [`crate::whatif`].
//!
//! A judged row knows each rank's step split into input, compute and
//! collective time (its evidence's shares). Laid end to end from the step's
//! start (input, then compute, then the collective that ends with the step)
//! they are a data-parallel job's operations: the replay takes the waiting
//! out of the collective, replays every step with typical durations, and says
//! how much of the slowdown goes when only the straggler's operations are
//! made typical. Operation-level reports (pipeline stages, micro-batches)
//! would say more; these are what every training loop already sends.
//!
//! Limits: only jobs of at most [`MAX_RANKS`] ranks (the replay runs inside a
//! hook call), and only when every rank has a row of every batch compared.

use std::collections::BTreeMap;

use crate::job::Job;
use crate::whatif::{Op, OpKind, Thresholds, analyze};

/// Largest job whose gain is computed in a hook call.
pub const MAX_RANKS: usize = 256;

/// The straggler's share of the job's slowdown over a window of batches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gain {
    /// The steps' replayed time over their ideal (every operation typical).
    pub slowdown: f64,
    /// The share of `slowdown − 1` that goes when the rank's operations are typical.
    pub gain: f64,
}

/// The gain of making `rank` typical over batches `first..=last`; `None`
/// when it cannot be told, or `rank` is not among the ranks whose
/// operations stand out most (the replay tries those only).
pub fn of_rank(job: &Job, rank: i32, first: i64, last: i64) -> Option<Gain> {
    if job.ranks.len() < 2 || job.ranks.len() > MAX_RANKS {
        return None;
    }
    let mut nodes: BTreeMap<&str, u32> = BTreeMap::new();
    let mut ops = Vec::new();
    for row in job
        .rows
        .iter()
        .filter(|r| r.unit == "step" && (first..=last).contains(&r.batch) && r.rank >= 0)
    {
        let next = nodes.len() as u32;
        let node = *nodes.entry(row.node.as_str()).or_insert(next);
        let e = &row.evidence;
        let wall = row.end_ns.saturating_sub(row.start_ns);
        let input = (e.input_share * wall as f64) as u64;
        let comm = (e.comm_share * wall as f64) as u64;
        let compute = wall.saturating_sub(input + comm);
        let mut at = row.start_ns;
        for (kind, ns) in [
            (OpKind::Input, input),
            (OpKind::Forward, compute),
            (OpKind::DpCollective, comm),
        ] {
            ops.push(Op {
                rank: row.rank as u32,
                node,
                dp: row.rank as u32,
                stage: 0,
                tp: 0,
                step: row.batch as u64,
                micro: None,
                kind,
                start_ns: at,
                end_ns: at + ns,
            });
            at += ns;
        }
    }
    if ops.is_empty() {
        return None;
    }
    let a = analyze(&ops, &Thresholds::default());
    let worker = a.workers.iter().find(|w| w.rank == rank as u32)?;
    (a.slowdown.is_finite() && a.slowdown > 0.0).then_some(Gain {
        slowdown: a.slowdown,
        gain: worker.gain.clamp(0.0, 1.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::Row;
    use crate::rank::Rank;
    use crate::verdict::{Evidence, Verdict};

    /// Four ranks meeting in an all-reduce every 110 ms: rank 2's dataloader
    /// takes 60 ms where the others' take 5, so every rank's step is as long
    /// as rank 2's, and all of the slowdown is rank 2's.
    #[test]
    fn the_waited_for_ranks_dataloader_is_the_whole_gain() {
        let ms = 1_000_000u64;
        let mut job = Job::default();
        for r in 0..4 {
            job.ranks.insert(r, Rank::default());
        }
        for b in 0..20i64 {
            for rank in 0..4 {
                let load = if rank == 2 { 60.0 } else { 5.0 };
                let start = b as u64 * 110 * ms;
                job.rows.push_back(Row {
                    batch: b,
                    rank,
                    node: format!("n{}", rank / 2),
                    unit: "step",
                    start_ns: start,
                    end_ns: start + 110 * ms,
                    verdict: Verdict::ComputeBound,
                    reason: String::new(),
                    last: false,
                    evidence: Evidence {
                        wall_s: 0.11,
                        input_share: load / 110.0,
                        comm_share: (110.0 - load - 40.0) / 110.0,
                        ..Evidence::default()
                    },
                });
            }
        }
        let g = of_rank(&job, 2, 0, 19).expect("a gain");
        // Ideal: 5 + 40 + the all-reduce's own 10 ms (after rank 2 arrives
        // at 100 ms) = 55 ms against 110.
        assert!((g.slowdown - 2.0).abs() < 0.02, "{g:?}");
        assert!(g.gain > 0.95, "{g:?}");
        // Another rank is no candidate, or one that gains nothing.
        assert!(of_rank(&job, 0, 0, 19).is_none_or(|o| o.gain < 0.05));
    }
}
