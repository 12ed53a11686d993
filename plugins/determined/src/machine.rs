//! One job's enabled/active state machine, after Determined's ProfilerAgent.
//!
//! - enabled is fixed for the job's life: profiling on in the settings when
//!   the job was first seen, AND (system metrics: an origin with local rank
//!   0; timings: an origin with global rank 0). The rank flags latch on when
//!   such an origin first reports.
//! - active changes over time: inactive while batch_idx < begin_on_batch;
//!   active from the first report with batch_idx >= begin_on_batch (from that
//!   report's time); inactive again, for good, once batch_idx >
//!   end_after_batch or once active for the cap. Never active when not
//!   enabled; once ended it never restarts.
//! - after a restart of the plugin, a job that was active resumes (with the
//!   cap budget it has left) at its next batch report, or, when resuming is
//!   off, ends with an explicit reason.
//!
//! Pure: times are passed in, changes are returned for the caller to report
//! and persist.

use serde::{Deserialize, Serialize};

/// The settings that bound a job's active window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub begin_on_batch: u64,
    pub end_after_batch: Option<u64>,
    /// Active time allowed, ns; `None` = no cap.
    pub cap_ns: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// A batch index beyond `end_after_batch` was reported.
    EndAfterBatch,
    /// Active for `max_active_s`.
    MaxActive,
    /// Active before a restart of the plugin, and `resume_after_restart` is off.
    NotResumed,
}

impl EndReason {
    pub fn code(self) -> &'static str {
        match self {
            EndReason::EndAfterBatch => "end_after_batch",
            EndReason::MaxActive => "max_active_s",
            EndReason::NotResumed => "not_resumed_after_restart",
        }
    }

    pub fn from_code(code: &str) -> Option<EndReason> {
        [EndReason::EndAfterBatch, EndReason::MaxActive, EndReason::NotResumed]
            .into_iter()
            .find(|r| r.code() == code)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Not active yet (batch_idx < begin_on_batch, or no report yet).
    Waiting,
    /// Collecting since `start` (this instance's activation or resumption);
    /// `used_before` is active time spent before a restart.
    Active { start: u64, used_before: u64 },
    /// Was active before a restart; resumes at the job's next batch report.
    Resuming { used: u64 },
    /// Collection is over for good. `start`/`at` bound what this instance
    /// collected (`start` is `None` when it ended before this instance).
    Ended {
        reason: EndReason,
        start: Option<u64>,
        at: Option<u64>,
        used: u64,
    },
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Waiting => "waiting",
            Phase::Active { .. } => "active",
            Phase::Resuming { .. } => "resuming",
            Phase::Ended { .. } => "ended",
        }
    }
}

/// A change of state the caller reports (decision, log) and persists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Activated { at: u64 },
    Resumed { at: u64 },
    Ended { reason: EndReason, at: u64 },
}

impl Change {
    /// The `reason` field of the decision body.
    pub fn code(self) -> &'static str {
        match self {
            Change::Activated { .. } => "begin_on_batch",
            Change::Resumed { .. } => "resumed_after_restart",
            Change::Ended { reason, .. } => reason.code(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// `enabled` in the settings when the job was first seen.
    pub profiling: bool,
    /// An origin with local rank 0 reported (system metrics are collected).
    pub sys_rank: bool,
    /// An origin with global rank 0 reported (timings are collected).
    pub timing_rank: bool,
    pub phase: Phase,
    /// The first activation (kept across restarts).
    pub activated_at: Option<u64>,
    /// The latest batch index reported by an eligible origin.
    pub last_batch: Option<u64>,
}

/// What survives a restart of the plugin, per job (`host::state_put`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Persisted {
    pub activated_at_ns: Option<u64>,
    pub active_used_ns: u64,
    pub ended: bool,
    pub end_reason: Option<String>,
    pub ended_at_ns: Option<u64>,
    pub last_batch_idx: Option<u64>,
}

impl Machine {
    pub fn new(profiling: bool) -> Machine {
        Machine {
            profiling,
            sys_rank: false,
            timing_rank: false,
            phase: Phase::Waiting,
            activated_at: None,
            last_batch: None,
        }
    }

    pub fn sys_enabled(&self) -> bool {
        self.profiling && self.sys_rank
    }

    pub fn timings_enabled(&self) -> bool {
        self.profiling && self.timing_rank
    }

    /// Determined's `is_enabled`: profiling on and some rank eligible.
    pub fn enabled(&self) -> bool {
        self.sys_enabled() || self.timings_enabled()
    }

    pub fn is_active(&self) -> bool {
        matches!(self.phase, Phase::Active { .. })
    }

    pub fn is_ended(&self) -> bool {
        matches!(self.phase, Phase::Ended { .. })
    }

    /// When the cap ends the current active period.
    pub fn cap_end(&self, limits: &Limits) -> Option<u64> {
        match (self.phase, limits.cap_ns) {
            (Phase::Active { start, used_before }, Some(cap)) => {
                Some(start.saturating_add(cap.saturating_sub(used_before)))
            }
            _ => None,
        }
    }

    /// A batch index `batch` reported at `time` by an eligible origin.
    /// Returns the changes it caused, in order (an activation can be
    /// followed at once by an end).
    pub fn on_batch(&mut self, time: u64, batch: u64, limits: &Limits) -> Vec<Change> {
        let mut changes = Vec::new();
        if !self.enabled() {
            return changes;
        }
        if self.reorder(time, batch, limits) || self.is_ended() {
            return changes;
        }
        self.last_batch = Some(batch);
        match self.phase {
            Phase::Waiting if batch >= limits.begin_on_batch => {
                self.phase = Phase::Active {
                    start: time,
                    used_before: 0,
                };
                self.activated_at.get_or_insert(time);
                changes.push(Change::Activated { at: time });
            }
            Phase::Resuming { used } => {
                self.phase = Phase::Active {
                    start: time,
                    used_before: used,
                };
                changes.push(Change::Resumed { at: time });
            }
            _ => {}
        }
        if let Phase::Active { start, .. } = self.phase {
            // The cap came first in time if it has passed by this report.
            if let Some(cap_end) = self.cap_end(limits).filter(|&end| time >= end) {
                changes.push(self.end(EndReason::MaxActive, cap_end));
            } else if limits.end_after_batch.is_some_and(|end| batch > end) {
                changes.push(self.end(EndReason::EndAfterBatch, time.max(start)));
            }
        }
        changes
    }

    /// A report that arrives after a later one but is earlier in time (two
    /// sources, or an SDK's metric export racing its span export) moves the
    /// window's edges to where they were in time: activation to the earliest
    /// report at or past `begin_on_batch`, the end-after-batch end to the
    /// earliest report past `end_after_batch`. Measurements wait `lag_ms`
    /// before they are judged, so a report later by less than that is fully
    /// honoured. Returns true when the report was such a correction.
    fn reorder(&mut self, time: u64, batch: u64, limits: &Limits) -> bool {
        let in_range = batch >= limits.begin_on_batch && limits.end_after_batch.is_none_or(|e| batch <= e);
        match &mut self.phase {
            // Only a first activation moves: a resumed period's start is its resumption.
            Phase::Active { start, used_before: 0 } if time < *start && in_range => {
                *start = time;
                self.activated_at = Some(time);
                true
            }
            Phase::Ended {
                reason,
                start: Some(start),
                at: Some(at),
                ..
            } if time < *at => {
                if *reason == EndReason::EndAfterBatch
                    && limits.end_after_batch.is_some_and(|e| batch > e)
                    && time >= *start
                {
                    *at = time;
                } else if in_range && time < *start && self.activated_at == Some(*start) {
                    *start = time;
                    self.activated_at = Some(time);
                }
                true
            }
            _ => false,
        }
    }

    /// Ends an active period whose cap has passed by `now` (the cap timer, or
    /// any hook call): collection must stop without waiting for a report.
    pub fn check_cap(&mut self, now: u64, limits: &Limits) -> Option<Change> {
        let cap_end = self.cap_end(limits).filter(|&end| now >= end)?;
        Some(self.end(EndReason::MaxActive, cap_end))
    }

    /// New limits from a live `configure`, for a job that has not ended: a
    /// smaller cap or end_after_batch that has already passed ends it now.
    pub fn apply_limits(&mut self, now: u64, limits: &Limits) -> Option<Change> {
        let Phase::Active { start, .. } = self.phase else {
            return None;
        };
        if self.cap_end(limits).is_some_and(|end| now >= end) {
            return Some(self.end(EndReason::MaxActive, now.max(start)));
        }
        if let (Some(end), Some(batch)) = (limits.end_after_batch, self.last_batch)
            && batch > end
        {
            return Some(self.end(EndReason::EndAfterBatch, now.max(start)));
        }
        None
    }

    fn end(&mut self, reason: EndReason, at: u64) -> Change {
        let (start, used) = match self.phase {
            Phase::Active { start, used_before } => (Some(start), used_before + at.saturating_sub(start)),
            Phase::Resuming { used } => (None, used),
            Phase::Waiting => (None, 0),
            Phase::Ended { .. } => unreachable!("an ended job never ends again"),
        };
        self.phase = Phase::Ended {
            reason,
            start,
            at: Some(at),
            used,
        };
        Change::Ended { reason, at }
    }

    /// The time span [start, end) in which measurements count, if any.
    pub fn window(&self) -> Option<(u64, u64)> {
        match self.phase {
            Phase::Active { start, .. } => Some((start, u64::MAX)),
            Phase::Ended {
                start: Some(start),
                at: Some(at),
                ..
            } => Some((start, at)),
            _ => None,
        }
    }

    /// Whether a measurement taken at `time`, computed from readings since
    /// `since` (== `time` except for rates), counts: the window must hold
    /// both, so a rate's first reading after activation is discarded.
    pub fn counts(&self, since: u64, time: u64) -> bool {
        self.window()
            .is_some_and(|(start, end)| since >= start && time >= start && time < end)
    }

    /// Whether a measurement that carries its own batch index (a timing
    /// with a step) counts. Determined's window is defined on batch indices,
    /// so the index decides, not when the measurement started relative to
    /// the report that moved the window: a step's timing often starts before
    /// its own report reaches sonde (both sent in one body at the step's
    /// end). An end that was decided by time (the cap, no resumption) still
    /// bounds it by time, and a job that never became active in this
    /// instance collects nothing.
    pub fn counts_batch(&self, batch: u64, time: u64, limits: &Limits) -> bool {
        let in_range = batch >= limits.begin_on_batch && limits.end_after_batch.is_none_or(|e| batch <= e);
        in_range
            && match self.phase {
                Phase::Active { .. } => true,
                Phase::Ended {
                    reason: EndReason::EndAfterBatch,
                    start: Some(_),
                    ..
                } => true,
                Phase::Ended {
                    start: Some(_),
                    at: Some(at),
                    ..
                } => time < at,
                _ => false,
            }
    }

    /// Active time spent so far.
    pub fn used_ns(&self, now: u64) -> u64 {
        match self.phase {
            Phase::Waiting => 0,
            Phase::Active { start, used_before } => used_before + now.saturating_sub(start),
            Phase::Resuming { used } | Phase::Ended { used, .. } => used,
        }
    }

    pub fn to_persisted(&self, now: u64) -> Persisted {
        let (ended, end_reason, ended_at_ns) = match self.phase {
            Phase::Ended { reason, at, .. } => (true, Some(reason.code().to_string()), at),
            _ => (false, None, None),
        };
        Persisted {
            activated_at_ns: self.activated_at,
            active_used_ns: self.used_ns(now),
            ended,
            end_reason,
            ended_at_ns,
            last_batch_idx: self.last_batch,
        }
    }

    /// A job as it was before a restart. Ended stays ended; active resumes
    /// (at its next report) with what is left of the cap when `resume`, and
    /// otherwise ends now with `NotResumed`; waiting stays waiting. The
    /// change, if any, is to be reported and persisted.
    pub fn restore(
        p: &Persisted,
        profiling: bool,
        resume: bool,
        limits: &Limits,
        now: u64,
    ) -> (Machine, Option<Change>) {
        let mut m = Machine::new(profiling);
        m.activated_at = p.activated_at_ns;
        m.last_batch = p.last_batch_idx;
        let used = p.active_used_ns;
        let ended = |reason, at| Phase::Ended {
            reason,
            start: None,
            at,
            used,
        };
        let mut change = None;
        m.phase = if p.ended {
            let reason = p
                .end_reason
                .as_deref()
                .and_then(EndReason::from_code)
                .unwrap_or(EndReason::MaxActive);
            ended(reason, p.ended_at_ns)
        } else if p.activated_at_ns.is_none() {
            Phase::Waiting
        } else if !resume {
            change = Some(Change::Ended {
                reason: EndReason::NotResumed,
                at: now,
            });
            ended(EndReason::NotResumed, Some(now))
        } else if limits.cap_ns.is_some_and(|cap| used >= cap) {
            change = Some(Change::Ended {
                reason: EndReason::MaxActive,
                at: now,
            });
            ended(EndReason::MaxActive, Some(now))
        } else {
            Phase::Resuming { used }
        };
        (m, change)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    /// (setting, reports as (time s, batch), expected changes as (time s, reason)).
    type Case<'a, T> = (T, &'a [(u64, u64)], &'a [(u64, &'a str)]);

    fn limits(begin: u64, end_after: Option<u64>, cap_s: Option<u64>) -> Limits {
        Limits {
            begin_on_batch: begin,
            end_after_batch: end_after,
            cap_ns: cap_s.map(|s| s * S),
        }
    }

    fn enabled() -> Machine {
        let mut m = Machine::new(true);
        m.sys_rank = true;
        m.timing_rank = true;
        m
    }

    /// Feeds (time s, batch) reports and returns the changes, as
    /// (time s, reason code).
    fn run(m: &mut Machine, l: &Limits, reports: &[(u64, u64)]) -> Vec<(u64, &'static str)> {
        let mut out = Vec::new();
        for &(t, b) in reports {
            for c in m.on_batch(t * S, b, l) {
                let at = match c {
                    Change::Activated { at } | Change::Resumed { at } | Change::Ended { at, .. } => at,
                };
                out.push((at / S, c.code()));
            }
        }
        out
    }

    #[test]
    fn enabled_by_setting_and_ranks() {
        // (profiling setting, local rank 0 seen, global rank 0 seen) -> (sys, timings, enabled)
        let table = [
            (true, true, true, (true, true, true)),
            (true, true, false, (true, false, true)),
            (true, false, true, (false, true, true)),
            (true, false, false, (false, false, false)),
            (false, true, true, (false, false, false)),
        ];
        for (profiling, sys, timing, want) in table {
            let mut m = Machine::new(profiling);
            m.sys_rank = sys;
            m.timing_rank = timing;
            assert_eq!(
                (m.sys_enabled(), m.timings_enabled(), m.enabled()),
                want,
                "{profiling} {sys} {timing}"
            );
            // Not enabled: never active, whatever is reported.
            if !want.2 {
                assert!(run(&mut m, &limits(0, None, None), &[(1, 0), (2, 5)]).is_empty());
                assert!(!m.is_active());
                assert_eq!(m.window(), None);
            }
        }
    }

    #[test]
    fn begin_on_batch() {
        // (begin, reports) -> changes
        let table: [Case<u64>; 4] = [
            (0, &[(1, 0), (2, 1)], &[(1, "begin_on_batch")]),
            (3, &[(1, 0), (2, 2), (3, 3), (4, 4)], &[(3, "begin_on_batch")]),
            (3, &[(1, 0), (2, 7)], &[(2, "begin_on_batch")]), // jumped past begin
            (3, &[(1, 0), (2, 1)], &[]),
        ];
        for (begin, reports, want) in table {
            let mut m = enabled();
            assert_eq!(run(&mut m, &limits(begin, None, None), reports), want, "begin {begin}");
            assert_eq!(m.is_active(), !want.is_empty());
        }
        let mut m = enabled();
        run(&mut m, &limits(3, None, None), &[(1, 0), (5, 3)]);
        assert_eq!(
            m.window(),
            Some((5 * S, u64::MAX)),
            "active from the activating report's time"
        );
        assert_eq!(m.activated_at, Some(5 * S));
        assert!(!m.counts(4 * S, 4 * S) && m.counts(5 * S, 5 * S));
    }

    #[test]
    fn reports_arriving_out_of_order_set_the_window_by_their_own_times() {
        // (reports in arrival order as (time, batch), the window they must give)
        type Reports = &'static [(u64, u64)];
        let table: [(Reports, Option<(u64, u64)>); 5] = [
            (&[(11, 3), (10, 3)], Some((10, u64::MAX))),     // activation moves back
            (&[(11, 4), (10, 2)], Some((11, u64::MAX))),     // below begin_on_batch: no move
            (&[(10, 3), (20, 10), (18, 9)], Some((10, 18))), // the end moves back
            (&[(10, 3), (20, 10), (25, 9)], Some((10, 20))), // later in time: no move
            (&[(12, 3), (20, 10), (11, 3)], Some((11, 20))), // activation moves back after the end
        ];
        for (reports, want) in table {
            let mut m = enabled();
            run(&mut m, &limits(3, Some(8), None), reports);
            let got = m.window().map(|(a, b)| (a / S, if b == u64::MAX { b } else { b / S }));
            assert_eq!(got, want, "{reports:?}");
        }
    }

    #[test]
    fn end_after_batch() {
        let table: [Case<Option<u64>>; 4] = [
            (
                Some(2),
                &[(1, 0), (2, 2), (3, 3)],
                &[(1, "begin_on_batch"), (3, "end_after_batch")],
            ),
            (Some(2), &[(1, 0), (2, 2)], &[(1, "begin_on_batch")]), // == end_after: still active
            (Some(0), &[(1, 5)], &[(1, "begin_on_batch"), (1, "end_after_batch")]), // both at once
            (None, &[(1, 0), (2, 999)], &[(1, "begin_on_batch")]),
        ];
        for (end_after, reports, want) in table {
            let mut m = enabled();
            assert_eq!(run(&mut m, &limits(0, end_after, None), reports), want, "{end_after:?}");
        }
        let mut m = enabled();
        run(&mut m, &limits(0, Some(2), None), &[(1, 0), (3, 3)]);
        assert_eq!(m.window(), Some((S, 3 * S)));
        assert!(m.counts(2 * S, 2 * S) && !m.counts(3 * S, 3 * S), "end is exclusive");
    }

    #[test]
    fn cap_by_report_and_by_clock() {
        // A report after the cap ends the job at the cap, not at the report.
        let mut m = enabled();
        let l = limits(0, None, Some(10));
        assert_eq!(
            run(&mut m, &l, &[(1, 0), (5, 1), (30, 2)]),
            [(1, "begin_on_batch"), (11, "max_active_s")]
        );
        assert_eq!(m.window(), Some((S, 11 * S)));
        assert_eq!(m.used_ns(99 * S), 10 * S);

        // Without reports, the clock (timer) ends it.
        let mut m = enabled();
        run(&mut m, &l, &[(1, 0)]);
        assert_eq!(m.cap_end(&l), Some(11 * S));
        assert_eq!(m.check_cap(10 * S, &l), None);
        assert_eq!(
            m.check_cap(12 * S, &l),
            Some(Change::Ended {
                reason: EndReason::MaxActive,
                at: 11 * S
            })
        );
        assert_eq!(m.check_cap(13 * S, &l), None, "ending is idempotent");

        // No cap: never ends by time.
        let mut m = enabled();
        let l = limits(0, None, None);
        run(&mut m, &l, &[(1, 0)]);
        assert_eq!(m.check_cap(u64::MAX, &l), None);
    }

    #[test]
    fn a_batch_index_decides_by_itself_where_the_end_was_by_index() {
        let l = limits(3, Some(8), Some(100));
        // (reports, (batch, time s) -> counts)
        let mut m = enabled();
        let waiting = [(2, 10, false), (3, 10, false)];
        for (b, t, want) in waiting {
            assert_eq!(m.counts_batch(b, t * S, &l), want, "waiting: batch {b}");
        }
        run(&mut m, &l, &[(10, 3)]);
        // Active from 10 s: batch 3 started at 9 s counts by its index; 2 never does.
        let active = [(2, 11, false), (3, 9, true), (8, 12, true), (9, 12, false)];
        for (b, t, want) in active {
            assert_eq!(m.counts_batch(b, t * S, &l), want, "active: batch {b} at {t}");
        }
        run(&mut m, &l, &[(20, 9)]);
        // Ended by index at 20 s: batch 8 counts even after that time, batch 9 never.
        let ended = [(8, 19, true), (8, 21, true), (9, 19, false)];
        for (b, t, want) in ended {
            assert_eq!(m.counts_batch(b, t * S, &l), want, "ended: batch {b} at {t}");
        }
        // Ended by the cap: the cap's time still bounds an in-range index.
        let mut m = enabled();
        run(&mut m, &limits(3, Some(8), Some(5)), &[(10, 3), (16, 4)]);
        assert!(m.is_ended());
        assert!(m.counts_batch(4, 14 * S, &l));
        assert!(!m.counts_batch(4, 15 * S, &l), "at the cap's end");
    }

    #[test]
    fn no_restart_after_end() {
        let mut m = enabled();
        let l = limits(0, Some(1), None);
        run(&mut m, &l, &[(1, 0), (2, 2)]);
        assert!(m.is_ended());
        let last = m.last_batch;
        // Later reports (even below end_after, even a new "begin") change nothing.
        assert!(run(&mut m, &l, &[(3, 0), (4, 1), (5, 100)]).is_empty());
        assert!(m.is_ended());
        assert_eq!(m.last_batch, last, "reports after the end are ignored");
        assert_eq!(m.apply_limits(6 * S, &limits(0, None, None)), None);
    }

    #[test]
    fn live_limits() {
        // A lower end_after that already passed ends the job now.
        let mut m = enabled();
        run(&mut m, &limits(0, None, None), &[(1, 0), (2, 5)]);
        assert_eq!(
            m.apply_limits(3 * S, &limits(0, Some(4), None)),
            Some(Change::Ended {
                reason: EndReason::EndAfterBatch,
                at: 3 * S
            })
        );
        // A lower cap that already passed ends it now; one still ahead does not.
        let mut m = enabled();
        run(&mut m, &limits(0, None, None), &[(1, 0)]);
        assert_eq!(m.apply_limits(5 * S, &limits(0, None, Some(10))), None);
        assert_eq!(m.cap_end(&limits(0, None, Some(10))), Some(11 * S));
        assert_eq!(
            m.apply_limits(5 * S, &limits(0, None, Some(2))),
            Some(Change::Ended {
                reason: EndReason::MaxActive,
                at: 5 * S
            })
        );
        // A waiting job is not changed by configure; its next report decides.
        let mut m = enabled();
        run(&mut m, &limits(10, None, None), &[(1, 5)]);
        assert_eq!(m.apply_limits(2 * S, &limits(3, None, None)), None);
        assert_eq!(run(&mut m, &limits(3, None, None), &[(3, 6)]), [(3, "begin_on_batch")]);
    }

    #[test]
    fn restore_after_restart() {
        let l = limits(0, None, Some(100));
        let active = Persisted {
            activated_at_ns: Some(S),
            active_used_ns: 40 * S,
            ended: false,
            end_reason: None,
            ended_at_ns: None,
            last_batch_idx: Some(7),
        };
        // (persisted, resume) -> (phase after restore, change)
        let ended = Persisted {
            ended: true,
            end_reason: Some("end_after_batch".into()),
            ended_at_ns: Some(9 * S),
            ..active.clone()
        };
        let waiting = Persisted {
            activated_at_ns: None,
            active_used_ns: 0,
            ..active.clone()
        };
        let spent = Persisted {
            active_used_ns: 100 * S,
            ..active.clone()
        };
        let table = [
            (&active, true, "resuming", None),
            (&active, false, "ended", Some("not_resumed_after_restart")),
            (&ended, true, "ended", None),
            (&ended, false, "ended", None),
            (&waiting, true, "waiting", None),
            (&spent, true, "ended", Some("max_active_s")),
        ];
        for (p, resume, phase, change) in table {
            let (m, c) = Machine::restore(p, true, resume, &l, 500 * S);
            assert_eq!(m.phase.name(), phase, "{p:?} resume={resume}");
            assert_eq!(c.map(Change::code), change, "{p:?} resume={resume}");
            assert_eq!(m.last_batch, Some(7));
        }

        // Resuming: active again from the next report, with the cap budget left (60 s).
        let (mut m, _) = Machine::restore(&active, true, true, &l, 500 * S);
        m.sys_rank = true;
        assert!(
            !m.is_active() && m.window().is_none(),
            "nothing counts until the job reports"
        );
        assert_eq!(run(&mut m, &l, &[(600, 8)]), [(600, "resumed_after_restart")]);
        assert_eq!(m.cap_end(&l), Some(660 * S));
        assert_eq!(m.activated_at, Some(S), "first activation is kept");
        assert_eq!(run(&mut m, &l, &[(700, 9)]), [(660, "max_active_s")]);
        assert_eq!(m.used_ns(800 * S), 100 * S);

        // Ended stays ended: no report brings it back.
        let (mut m, _) = Machine::restore(&ended, true, true, &l, 500 * S);
        m.sys_rank = true;
        assert!(run(&mut m, &l, &[(600, 0)]).is_empty());
        assert_eq!(m.to_persisted(700 * S), ended);
    }

    #[test]
    fn persisted_round_trip() {
        let l = limits(0, None, Some(100));
        let mut m = enabled();
        run(&mut m, &l, &[(10, 3)]);
        let p = m.to_persisted(25 * S);
        assert_eq!(p.activated_at_ns, Some(10 * S));
        assert_eq!(p.active_used_ns, 15 * S);
        assert!(!p.ended);
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<Persisted>(&json).unwrap(), p);
        assert_eq!(
            json,
            r#"{"activated_at_ns":10000000000,"active_used_ns":15000000000,"ended":false,"end_reason":null,"ended_at_ns":null,"last_batch_idx":3}"#
        );
    }
}
