//! A job's batch-index timeline: when each batch index was reported, so a
//! measurement can be tied to the batch index current at its own timestamp
//! even when the report arrives after the measurement (within the lag).

use std::collections::VecDeque;

/// (time, batch index) reports, ascending by time.
#[derive(Debug, Default, Clone)]
pub struct Timeline {
    entries: VecDeque<(u64, u64)>,
}

/// Entries kept at most; beyond it the oldest go (a timing that started
/// before the oldest kept report then gets that report's batch index).
const MAX_ENTRIES: usize = 100_000;

impl Timeline {
    /// Records that `batch` was current from `time` on. Reports may arrive
    /// out of order; they are kept sorted by time. A report at the same time
    /// as an earlier one replaces it (the later report wins).
    pub fn record(&mut self, time: u64, batch: u64) {
        match self.entries.back() {
            Some(&(last, _)) if time > last => self.entries.push_back((time, batch)),
            None => self.entries.push_back((time, batch)),
            _ => {
                let i = self.entries.partition_point(|&(t, _)| t < time);
                match self.entries.get_mut(i) {
                    Some(e) if e.0 == time => e.1 = batch,
                    _ => self.entries.insert(i, (time, batch)),
                }
            }
        }
        if self.entries.len() > MAX_ENTRIES {
            self.entries.pop_front();
        }
    }

    /// The batch index current at `time`: the latest report at or before
    /// it; `None` when every report is later.
    pub fn at(&self, time: u64) -> Option<u64> {
        let i = self.entries.partition_point(|&(t, _)| t <= time);
        (i > 0).then(|| self.entries[i - 1].1)
    }

    /// Forgets reports no measurement at or after `horizon` can need,
    /// keeping the latest one at or before it.
    pub fn prune_before(&mut self, horizon: u64) {
        let i = self.entries.partition_point(|&(t, _)| t <= horizon);
        if i > 1 {
            self.entries.drain(..i - 1);
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_is_the_latest_report_at_or_before() {
        let mut tl = Timeline::default();
        assert_eq!(tl.at(5), None);
        tl.record(10, 0);
        tl.record(20, 1);
        tl.record(30, 2);
        let table = [
            (5, None),
            (10, Some(0)),
            (15, Some(0)),
            (20, Some(1)),
            (29, Some(1)),
            (99, Some(2)),
        ];
        for (t, want) in table {
            assert_eq!(tl.at(t), want, "t={t}");
        }
    }

    #[test]
    fn late_reports_are_inserted_in_time_order() {
        let mut tl = Timeline::default();
        tl.record(10, 0);
        tl.record(30, 2);
        tl.record(20, 1); // arrived late
        tl.record(30, 3); // same time: replaces
        assert_eq!(tl.at(25), Some(1));
        assert_eq!(tl.at(30), Some(3));
        assert_eq!(tl.len(), 3);
    }

    #[test]
    fn pruning_keeps_the_report_current_at_the_horizon() {
        let mut tl = Timeline::default();
        for i in 0..10 {
            tl.record(i * 10, i);
        }
        tl.prune_before(55);
        assert_eq!(tl.at(55), Some(5));
        assert_eq!(tl.at(49), None);
        assert_eq!(tl.len(), 5);
        tl.prune_before(0);
        assert_eq!(tl.len(), 5);
    }
}
