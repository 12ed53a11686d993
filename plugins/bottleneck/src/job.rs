//! One job: its ranks, the per-step rows the route serves, the verdict counts
//! since the last emission, and, across ranks per batch, the rank that
//! finished last (the straggler) and whether one rank keeps being it.
//!
//! "Finished last" is measured on each rank's own time in the batch: the
//! step minus its time in collectives and MPI stall (for a rank judged per
//! MPI window, its time outside MPI). Ranks that meet in a collective end
//! their steps together; the one the others waited for is the one with the
//! most time of its own. For ranks that never meet, it is the longest step.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::rank::Rank;
use crate::settings::Settings;
use crate::verdict::{Evidence, Verdict};

/// One judged step (or MPI window) of one rank.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub batch: i64,
    pub rank: i32,
    pub node: String,
    /// "step", or "window" for a rank judged per MPI window.
    pub unit: &'static str,
    pub start_ns: u64,
    pub end_ns: u64,
    pub verdict: Verdict,
    pub reason: String,
    /// Whether this rank finished last in its batch.
    pub last: bool,
    pub evidence: Evidence,
}

/// A batch's last rank is a straggler only when it ends this much later
/// than the next one, absolutely and as a share of its own step: below
/// both, the ranks finished together.
const TIE_S: f64 = 0.001;
const TIE_SHARE: f64 = 0.02;

/// The rank that finished last in one batch (-1: none, the ranks tied).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BatchStraggler {
    pub batch: i64,
    pub rank: i32,
    /// Its own time minus the next slowest rank's, seconds.
    pub late_by_s: f64,
    pub verdict: Verdict,
}

/// A rank that finished last in most recent batches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Persistent {
    pub rank: i32,
    pub batches: usize,
    pub of: usize,
    pub late_by_s: f64,
    pub verdict: Verdict,
    /// The batches of the window it was named over.
    pub first_batch: i64,
    pub last_batch: i64,
}

/// Batches waiting for every rank are cut off beyond this many.
const MAX_OPEN_BATCHES: usize = 256;
/// How long a batch waits for the ranks that have not been judged in it
/// (host time since its first rank was). On a master each rank's steps come
/// through its own agent, some later than others; a rank not heard from yet
/// is not known yet, so a batch waits for two ranks at least, or this long.
const BATCH_WAIT_NS: u64 = 10_000_000_000;

/// A batch's judged ranks, waiting for the others.
#[derive(Debug)]
struct OpenBatch {
    /// When its first rank was judged (host time).
    opened: u64,
    /// (rank, own seconds, verdict).
    ranks: Vec<(i32, f64, Verdict)>,
}

#[derive(Debug, Default)]
pub struct Job {
    pub ranks: BTreeMap<i32, Rank>,
    pub rows: VecDeque<Row>,
    /// Batches not yet compared across ranks.
    open: BTreeMap<i64, OpenBatch>,
    pub stragglers: VecDeque<BatchStraggler>,
    pub persistent: Option<Persistent>,
    /// Steps judged per verdict since the last emission.
    pub counts: [u32; 6],
    /// (time, share per verdict) per emission, for the route.
    pub shares: VecDeque<(u64, [f64; 6])>,
    /// Totals since the job was first seen.
    pub totals: [u64; 6],
    /// The first MPI window of the job (batch 0 of its windows).
    pub first_window: Option<u64>,
    /// Its operations, when it reports them (the `ops` table).
    pub ops: crate::ops::OpsWindow,
    /// Per step, its replayed slowdown (for a fail-slow's onset).
    pub slowdowns: VecDeque<(u64, f64)>,
    /// The What-if finding last published: its culprit and slowdown.
    pub whatif_said: Option<(String, f64)>,
    /// The onset of the fail-slow last published (its first slow step).
    pub onset_said: Option<u64>,
    /// The last What-if replay of its operations, for the panel.
    pub whatif: Option<(crate::whatif::Analysis, crate::whatif::Diagnosis)>,
    /// The subjects its recent windows named (`crate::confirm`).
    pub seen: crate::confirm::Seen,
    /// Rows judged since the last save (the newest of `rows`), and whether
    /// anything else changed (`crate::persist`).
    pub rows_unsaved: usize,
    pub unsaved: bool,
    /// The What-if analysis under way, spread over hook calls, and its
    /// window's first start.
    pub replaying: Option<(crate::whatif::Pending, u64)>,
}

impl Job {
    /// Records a judged row (at host time `now`); returns the persistent
    /// straggler when it changed (another rank, or another verdict of its
    /// steps).
    pub fn add(&mut self, row: Row, s: &Settings, now: u64) -> Option<Option<Persistent>> {
        self.counts[row.verdict.index()] += 1;
        self.totals[row.verdict.index()] += 1;
        let own = row.evidence.wall_s
            * match row.unit {
                "window" => row.evidence.mpi.map_or(1.0, |m| m[0]),
                _ => (1.0 - row.evidence.comm_share - row.evidence.mpi.map_or(0.0, |m| m[2])).max(0.0),
            };
        let batch = row.batch;
        let entry = self.open.entry(batch).or_insert(OpenBatch {
            opened: now,
            ranks: Vec::new(),
        });
        entry.ranks.push((row.rank, own, row.verdict));
        self.rows.push_back(row);
        self.rows_unsaved += 1;
        self.unsaved = true;
        while self.rows.len() > s.max_rows_per_job {
            self.rows.pop_front();
        }
        self.close_due(s, now)
    }

    /// Compares the batches every known rank (two at least) was judged in,
    /// and those that waited `BATCH_WAIT_NS` for the rest; returns the
    /// persistent straggler when it changed.
    pub fn close_due(&mut self, s: &Settings, now: u64) -> Option<Option<Persistent>> {
        let ranks = self.ranks.len().max(2);
        let mut changed = None;
        let complete: Vec<i64> = self
            .open
            .iter()
            .filter(|(_, v)| v.ranks.len() >= ranks || now.saturating_sub(v.opened) >= BATCH_WAIT_NS)
            .map(|(b, _)| *b)
            .collect();
        for b in complete {
            if let Some(c) = self.close(b, s) {
                changed = Some(c);
            }
        }
        while self.open.len() > MAX_OPEN_BATCHES {
            let b = *self.open.keys().next().expect("not empty");
            if let Some(c) = self.close(b, s) {
                changed = Some(c);
            }
        }
        changed
    }

    /// Names the batch's straggler (with two ranks or more) and updates the
    /// persistent one; returns it when it changed.
    fn close(&mut self, batch: i64, s: &Settings) -> Option<Option<Persistent>> {
        let mut ranks = self.open.remove(&batch)?.ranks;
        if ranks.len() < 2 {
            return None;
        }
        ranks.sort_by(|a, b| b.1.total_cmp(&a.1));
        let (rank, own, verdict) = ranks[0];
        let late_by_s = own - ranks[1].1;
        // Ranks of a synchronous job end their steps together: who is "last"
        // by a hair is a tie, not a straggler. Nobody (rank -1) is named then.
        let rank = if late_by_s < TIE_S.max(TIE_SHARE * own) {
            -1
        } else {
            rank
        };
        if let Some(row) = self
            .rows
            .iter_mut()
            .rev()
            .take(4 * self.ranks.len() + 64)
            .find(|r| r.batch == batch && r.rank == rank)
        {
            row.last = true;
        }
        self.stragglers.push_back(BatchStraggler {
            batch,
            rank,
            late_by_s,
            verdict,
        });
        while self.stragglers.len() > s.straggler_batches {
            self.stragglers.pop_front();
        }
        let now = self.persistent_straggler(s);
        // A new rank, or the same rank for another reason: the finding
        // names both, so either change is news.
        let same = match (&now, &self.persistent) {
            (Some(a), Some(b)) => a.rank == b.rank && a.verdict == b.verdict,
            (None, None) => true,
            _ => false,
        };
        self.persistent = now.clone();
        (!same).then_some(now)
    }

    fn persistent_straggler(&self, s: &Settings) -> Option<Persistent> {
        if self.stragglers.len() < s.straggler_batches {
            return None;
        }
        let mut per_rank: BTreeMap<i32, (usize, f64, [u32; 6])> = BTreeMap::new();
        for b in self.stragglers.iter().filter(|b| b.rank >= 0) {
            let e = per_rank.entry(b.rank).or_default();
            e.0 += 1;
            e.1 += b.late_by_s;
            e.2[b.verdict.index()] += 1;
        }
        let (&rank, &(n, late, verdicts)) = per_rank.iter().max_by_key(|(_, e)| e.0)?;
        let of = self.stragglers.len();
        if (n as f64) < s.straggler_share * of as f64 {
            return None;
        }
        let v = (0..6).max_by_key(|&k| verdicts[k]).expect("six");
        Some(Persistent {
            rank,
            batches: n,
            of,
            late_by_s: late / n as f64,
            verdict: Verdict::ALL[v],
            first_batch: self.stragglers.front().map_or(0, |b| b.batch),
            last_batch: self.stragglers.back().map_or(0, |b| b.batch),
        })
    }

    /// The shares of the verdicts judged since the last call (`None` when none).
    pub fn take_shares(&mut self, time: u64) -> Option<[f64; 6]> {
        let total: u32 = self.counts.iter().sum();
        if total == 0 {
            return None;
        }
        let shares = self.counts.map(|c| c as f64 / total as f64);
        self.counts = [0; 6];
        self.shares.push_back((time, shares));
        if self.shares.len() > 600 {
            self.shares.pop_front();
        }
        Some(shares)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(batch: i64, rank: i32, wall_s: f64, comm_share: f64, v: Verdict) -> Row {
        Row {
            batch,
            rank,
            node: "n".into(),
            unit: "step",
            start_ns: 0,
            end_ns: 0,
            verdict: v,
            reason: String::new(),
            last: false,
            evidence: Evidence {
                wall_s,
                comm_share,
                ..Evidence::default()
            },
        }
    }

    #[test]
    fn the_rank_others_wait_for_is_last_and_becomes_persistent() {
        let s = Settings::default();
        let mut job = Job::default();
        for r in 0..3 {
            job.ranks.insert(r, Rank::default());
        }
        let mut changes = Vec::new();
        for b in 0..30 {
            // All steps last 100 ms; ranks 0 and 1 wait 40 ms in the
            // collective, rank 2 only 5 ms: rank 2 is the one waited for.
            for (rank, comm) in [(0, 0.4), (1, 0.4), (2, 0.05)] {
                if let Some(c) = job.add(row(b, rank, 0.1, comm, Verdict::ComputeBound), &s, 0) {
                    changes.push((b, c));
                }
            }
        }
        assert_eq!(changes.len(), 1, "{changes:?}");
        let (b, p) = &changes[0];
        assert_eq!(*b, 19, "named once the window of 20 batches is full");
        let p = p.as_ref().unwrap();
        assert_eq!((p.rank, p.batches, p.of), (2, 20, 20));
        assert!((p.late_by_s - 0.035).abs() < 1e-9, "{p:?}");
        assert!(job.rows.iter().filter(|r| r.last).all(|r| r.rank == 2));
        assert_eq!(job.rows.iter().filter(|r| r.last).count(), 30);
        let shares = job.take_shares(1).unwrap();
        assert_eq!(shares[Verdict::ComputeBound.index()], 1.0);
        assert!(job.take_shares(2).is_none());
    }

    #[test]
    fn ranks_that_end_together_name_no_straggler() {
        let s = Settings::default();
        let mut job = Job::default();
        for r in 0..4 {
            job.ranks.insert(r, Rank::default());
        }
        for b in 0..30 {
            // A synchronous job: every rank's own time within a hair of the others'.
            for rank in 0..4 {
                let c = job.add(
                    row(b, rank, 0.1, 0.2 + 0.001 * rank as f64, Verdict::ComputeBound),
                    &s,
                    0,
                );
                assert!(c.as_ref().is_none_or(|p| p.is_none()), "batch {b}: {c:?}");
            }
        }
        assert!(job.persistent.is_none(), "{:?}", job.persistent);
        assert!(job.rows.iter().all(|r| !r.last), "a tie marked someone last");
    }

    #[test]
    fn a_rank_heard_from_late_is_still_compared() {
        // On a master: rank 0's agent delivers all 30 batches before rank 1
        // is known at all; rank 1, 15 ms slower each batch, comes 4 s later.
        let s = Settings::default();
        let mut job = Job::default();
        job.ranks.insert(0, Rank::default());
        for b in 0..30 {
            assert!(job.add(row(b, 0, 0.1, 0.2, Verdict::ComputeBound), &s, 0).is_none());
        }
        job.ranks.insert(1, Rank::default());
        let mut named = None;
        for b in 0..30 {
            if let Some(c) = job.add(row(b, 1, 0.115, 0.0, Verdict::ComputeBound), &s, 4_000_000_000) {
                named = c;
            }
        }
        let p = named.expect("rank 1 named once its batches met rank 0's");
        assert_eq!((p.rank, p.of), (1, 20));
        // A batch that one rank never reports is compared without it once it waited long enough.
        job.ranks.insert(2, Rank::default());
        job.add(row(30, 0, 0.1, 0.0, Verdict::ComputeBound), &s, 5_000_000_000);
        job.add(row(30, 1, 0.1, 0.0, Verdict::ComputeBound), &s, 5_000_000_000);
        assert!(job.open.contains_key(&30), "waits for rank 2");
        job.close_due(&s, 5_000_000_000 + BATCH_WAIT_NS);
        assert!(job.open.is_empty());
    }
}
