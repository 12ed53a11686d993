//! Consistency progress: per-worker clocks under BSP, SSP or ASP, staleness,
//! the time each worker spent blocked waiting for the slowest, stragglers.
//!
//! Definitions (all from clock reports; a report "worker w, clock c at t"
//! means w finished iteration c at t):
//!
//! - **staleness** of w = the largest clock of any worker − w's clock.
//! - **blocked**: the model's bound is s (BSP 0, SSP its staleness bound,
//!   ASP none). After reporting c at t, w may start iteration c+1 only when
//!   every participating worker's clock is >= c − s. If that already holds at
//!   t, w is not blocked. Otherwise w waits from t until the report at t'
//!   that lifts the slowest clock to c − s: w was blocked for t' − t, and the
//!   worker whose report released it is credited with causing that wait.
//!   Under ASP nobody is ever blocked. A worker that reports its next clock
//!   while still waiting (its release was never reported, e.g. it arrived
//!   out of order) has that wait dropped and counted in `overtaken`.
//! - **participating**: every worker that reported a clock, except those that
//!   left (the empty-data node quits before the barrier). A dead worker
//!   still participates: its last clock holds the barrier, as in the seed.
//! - **straggler**: a worker whose staleness is >= the straggler threshold.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Model {
    Bsp,
    Ssp(u64),
    Asp,
}

impl Model {
    /// How far ahead of the slowest a worker may run, in clocks; `None` = unbounded.
    pub fn bound(self) -> Option<u64> {
        match self {
            Model::Bsp => Some(0),
            Model::Ssp(s) => Some(s),
            Model::Asp => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Model::Bsp => "bsp",
            Model::Ssp(_) => "ssp",
            Model::Asp => "asp",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Wait {
    since: u64,
    /// The slowest clock that releases it.
    need: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerClock {
    pub clock: u64,
    /// When the clock was reported.
    pub time: u64,
    pub reports: u64,
    waiting: Option<Wait>,
    /// Total completed blocked time.
    pub blocked_ns: u64,
    /// Waits that ended with a real block (> 0 ns).
    pub blocks: u64,
    /// Blocked time of others that this worker's reports released.
    pub caused_ns: u64,
    pub overtaken: u64,
    /// Left the job (empty-data node); no longer participates.
    pub left: bool,
}

impl WorkerClock {
    /// Blocked time including a wait still open at `now`.
    pub fn blocked_at(&self, now: u64) -> u64 {
        self.blocked_ns + self.waiting.map_or(0, |w| now.saturating_sub(w.since))
    }

    pub fn waiting_since(&self) -> Option<u64> {
        self.waiting.map(|w| w.since)
    }
}

/// A wait that ended, for the outputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    pub worker: String,
    pub since: u64,
    pub until: u64,
    /// Whose report released it.
    pub by: String,
}

#[derive(Debug, Clone)]
pub struct Clocks {
    pub model: Model,
    pub workers: BTreeMap<String, WorkerClock>,
}

impl Clocks {
    pub fn new(model: Model) -> Clocks {
        Clocks {
            model,
            workers: BTreeMap::new(),
        }
    }

    fn participating(&self) -> impl Iterator<Item = (&String, &WorkerClock)> {
        self.workers.iter().filter(|(_, w)| !w.left)
    }

    pub fn min_clock(&self) -> Option<u64> {
        self.participating().map(|(_, w)| w.clock).min()
    }

    pub fn max_clock(&self) -> Option<u64> {
        self.participating().map(|(_, w)| w.clock).max()
    }

    /// max clock − this worker's clock.
    pub fn staleness(&self, worker: &str) -> Option<u64> {
        let w = self.workers.get(worker).filter(|w| !w.left)?;
        Some(self.max_clock()? - w.clock)
    }

    /// Workers at least `threshold` clocks behind the fastest, slowest first.
    pub fn stragglers(&self, threshold: u64) -> Vec<String> {
        let mut v: Vec<(u64, &String)> = self
            .participating()
            .filter_map(|(k, _)| Some((self.staleness(k)?, k)))
            .filter(|(s, _)| *s >= threshold.max(1))
            .collect();
        v.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        v.into_iter().map(|(_, k)| k.clone()).collect()
    }

    /// A clock report. Reports must come in time order (the caller sorts a
    /// batch by time). Returns the waits it ended.
    pub fn report(&mut self, worker: &str, time: u64, clock: u64) -> Vec<Release> {
        let bound = self.model.bound();
        let w = self.workers.entry(worker.to_string()).or_default();
        if w.waiting.take().is_some() {
            w.overtaken += 1;
        }
        w.left = false;
        w.clock = clock;
        w.time = time;
        w.reports += 1;
        if let Some(s) = bound {
            w.waiting = Some(Wait {
                since: time,
                need: clock.saturating_sub(s),
            });
        }
        self.release(worker, time)
    }

    /// The worker left the job (the empty-data node): it no longer holds anyone.
    pub fn leave(&mut self, worker: &str, time: u64) -> Vec<Release> {
        let w = self.workers.entry(worker.to_string()).or_default();
        w.left = true;
        w.waiting = None;
        self.release(worker, time)
    }

    /// Ends every wait the current slowest clock satisfies, at `time`.
    fn release(&mut self, by: &str, time: u64) -> Vec<Release> {
        let Some(min) = self.min_clock() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut caused = 0;
        for (k, w) in self.workers.iter_mut() {
            let Some(wait) = w.waiting else { continue };
            if w.left || wait.need > min {
                continue;
            }
            w.waiting = None;
            let d = time.saturating_sub(wait.since);
            if d > 0 {
                w.blocked_ns += d;
                w.blocks += 1;
                caused += d;
                out.push(Release {
                    worker: k.clone(),
                    since: wait.since,
                    until: time,
                    by: by.to_string(),
                });
            }
        }
        if let Some(b) = self.workers.get_mut(by) {
            b.caused_ns += caused;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    /// One scripted step: (time s, worker, clock) and what must hold after it:
    /// staleness of a, b, c and blocked seconds (closed waits) of a, b, c.
    type Step = (u64, &'static str, u64, [u64; 3], [u64; 3]);

    fn run(model: Model, steps: &[Step]) -> Clocks {
        let mut c = Clocks::new(model);
        for (i, &(t, w, clock, stale, blocked)) in steps.iter().enumerate() {
            c.report(w, t * S, clock);
            let got_stale: Vec<u64> = ["a", "b", "c"]
                .iter()
                .map(|k| c.staleness(k).unwrap_or(u64::MAX))
                .collect();
            let got_blocked: Vec<u64> = ["a", "b", "c"]
                .iter()
                .map(|k| c.workers.get(*k).map_or(0, |w| w.blocked_ns) / S)
                .collect();
            assert_eq!(got_stale, stale, "step {i} ({t} s {w}={clock}): staleness");
            assert_eq!(got_blocked, blocked, "step {i} ({t} s {w}={clock}): blocked s");
        }
        c
    }

    const X: u64 = u64::MAX; // not reported yet

    #[test]
    fn ssp_with_bound_one() {
        // a is fast, c is slow. Under SSP(1), a may run at most one clock
        // ahead of the slowest.
        let c = run(
            Model::Ssp(1),
            &[
                (0, "a", 0, [0, X, X], [0, 0, 0]),
                (0, "b", 0, [0, 0, X], [0, 0, 0]),
                (0, "c", 0, [0, 0, 0], [0, 0, 0]),
                (1, "a", 1, [0, 1, 1], [0, 0, 0]), // 1 - 1 = 0 <= min 0: goes on
                (2, "a", 2, [0, 2, 2], [0, 0, 0]), // needs min >= 1: waits from 2 s
                (3, "b", 1, [0, 1, 2], [0, 0, 0]), // b needs 0: goes on; min still 0
                (4, "b", 2, [0, 0, 2], [0, 0, 0]), // b waits from 4 s for min >= 1
                (7, "c", 1, [0, 0, 1], [5, 3, 0]), // min 1: a waited 2..7, b 4..7
                (8, "c", 2, [0, 0, 0], [5, 3, 0]), // c needs 1: goes on
            ],
        );
        assert_eq!(c.workers["c"].caused_ns, 8 * S, "c's report released both");
        assert_eq!(c.stragglers(1), Vec::<String>::new());
    }

    #[test]
    fn bsp_waits_for_everyone_at_every_clock() {
        let c = run(
            Model::Bsp,
            &[
                (0, "a", 1, [0, X, X], [0, 0, 0]),
                (0, "b", 1, [0, 0, X], [0, 0, 0]),
                (0, "c", 1, [0, 0, 0], [0, 0, 0]),
                (1, "a", 2, [0, 1, 1], [0, 0, 0]), // waits for min >= 2
                (2, "b", 2, [0, 0, 1], [0, 0, 0]), // waits too
                (5, "c", 2, [0, 0, 0], [4, 3, 0]), // the barrier opens at 5 s
            ],
        );
        assert_eq!(c.workers["a"].blocks, 1);
    }

    #[test]
    fn asp_never_blocks_and_names_stragglers() {
        let mut c = run(
            Model::Asp,
            &[
                (0, "a", 5, [0, X, X], [0, 0, 0]),
                (0, "b", 3, [0, 2, X], [0, 0, 0]),
                (1, "c", 1, [0, 2, 4], [0, 0, 0]),
            ],
        );
        assert_eq!(c.stragglers(2), vec!["c".to_string(), "b".to_string()]);
        assert_eq!(c.stragglers(3), vec!["c".to_string()]);
        // The empty-data node leaves: it is no longer anyone's straggler.
        c.leave("c", 2 * S);
        assert_eq!(c.staleness("c"), None);
        assert_eq!(c.stragglers(2), vec!["b".to_string()]);
    }

    #[test]
    fn a_leaving_worker_releases_the_barrier_and_a_wait_can_be_overtaken() {
        let mut c = Clocks::new(Model::Bsp);
        c.report("b", 0, 0);
        c.report("a", 0, 1);
        assert_eq!(c.workers["a"].waiting_since(), Some(0));
        assert_eq!(c.workers["a"].blocked_at(3 * S), 3 * S, "an open wait counts up to now");
        let r = c.leave("b", 4 * S);
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].worker.as_str(), r[0].by.as_str(), r[0].until), ("a", "b", 4 * S));
        assert_eq!(c.workers["a"].blocked_ns, 4 * S);
        // a waits again for a worker that reports later; a reports first.
        c.report("b", 5 * S, 1);
        c.report("a", 5 * S, 2);
        c.report("a", 6 * S, 3);
        assert_eq!(c.workers["a"].overtaken, 1);
    }
}
