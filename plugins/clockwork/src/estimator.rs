//! INFER5's execution-time estimator (reference A.3): per model and batch
//! size, a sliding window of the last 10 measurements of *work* (duration ×
//! average GPU clock, so a measurement taken at a throttled clock predicts
//! correctly at another), its 99th percentile with linear interpolation, and
//! a prediction at clock c = estimate / c. Seeded from the profiled
//! measurements (`model.measurements`: weights, b1, b2, b4, b8, b16 in ns) ×
//! the default clock; 0.1 ms when a batch size has no profile.
//!
//! Clockwork computes the interpolation in `float` and truncates; this uses
//! `f64` and rounds to the nearest integer, so 0.91·v + 0.09·w is exact to
//! the ns·MHz where float rounding could land one below.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

pub const DEFAULT_CLOCK: u64 = 1380;
pub const WINDOW: usize = 10;
pub const PERCENTILE: f64 = 0.99;
/// The estimate of a batch size without a profile: 0.1 ms.
pub const DEFAULT_ESTIMATE_NS: u64 = 100_000;

/// The last `size` values, with order statistics.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SlidingWindow {
    size: usize,
    fifo: VecDeque<u64>,
    sorted: Vec<u64>,
}

impl SlidingWindow {
    pub fn new(size: usize) -> Self {
        SlidingWindow {
            size: size.max(1),
            fifo: VecDeque::new(),
            sorted: Vec::new(),
        }
    }

    pub fn insert(&mut self, v: u64) {
        self.fifo.push_back(v);
        let at = self.sorted.partition_point(|&x| x <= v);
        self.sorted.insert(at, v);
        if self.fifo.len() > self.size {
            let old = self.fifo.pop_front().expect("non-empty");
            let at = self.sorted.partition_point(|&x| x < old);
            self.sorted.remove(at);
        }
    }

    pub fn len(&self) -> usize {
        self.fifo.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fifo.is_empty()
    }

    /// pos = p·(n−1); v[⌈pos⌉]·(pos−⌊pos⌋) + v[⌊pos⌋]·(⌈pos⌉−pos), or v[pos]
    /// when pos is whole. None when empty.
    pub fn percentile(&self, p: f64) -> Option<u64> {
        let n = self.sorted.len();
        if n == 0 {
            return None;
        }
        let pos = p * (n - 1) as f64;
        let (down, up) = (pos.floor(), pos.ceil());
        if up == down {
            return Some(self.sorted[pos as usize]);
        }
        let v = self.sorted[up as usize] as f64 * (pos - down) + self.sorted[down as usize] as f64 * (up - pos);
        Some(v.round() as u64)
    }
}

/// Limits on the batch sizes a model may use (INFER5's command line).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Limits {
    pub max_exec_time_ns: u64,
    pub max_batch_size: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_exec_time_ns: 250_000_000,
            max_batch_size: 8,
        }
    }
}

/// A model's profile (`model.measurements`): weights load time and exec
/// time per batch size, ns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Profile {
    #[serde(default)]
    pub weights_ns: u64,
    /// (batch size, ns), e.g. [(1, 2900000), (2, 3600000), ...].
    #[serde(default)]
    pub exec_ns: BTreeMap<u32, u64>,
}

/// One model's estimates.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelEstimator {
    /// Supported batch size → work estimate (ns·MHz).
    pub estimates: BTreeMap<u32, u64>,
    windows: BTreeMap<u32, SlidingWindow>,
    pub weights_estimate_ns: u64,
    weights_window: SlidingWindow,
    /// Batch size b1 at the default clock, fixed at creation (slo_factor's base).
    pub b1_exec_ns: u64,
}

impl ModelEstimator {
    /// The profile's batch sizes that pass the limits (batch 1 always does).
    pub fn new(profile: &Profile, limits: Limits) -> Self {
        let mut estimates = BTreeMap::new();
        let mut windows = BTreeMap::new();
        let mut sizes: Vec<u32> = profile.exec_ns.keys().copied().collect();
        if !sizes.contains(&1) {
            sizes.insert(0, 1);
        }
        for b in sizes {
            let est = profile.exec_ns.get(&b).copied().unwrap_or(DEFAULT_ESTIMATE_NS);
            if b == 1 || (est > 0 && est <= limits.max_exec_time_ns && b <= limits.max_batch_size) {
                estimates.insert(b, est * DEFAULT_CLOCK);
                windows.insert(b, SlidingWindow::new(WINDOW));
            }
        }
        let mut m = ModelEstimator {
            estimates,
            windows,
            weights_estimate_ns: profile.weights_ns,
            weights_window: SlidingWindow::new(WINDOW),
            b1_exec_ns: 0,
        };
        m.b1_exec_ns = m.predict(1, DEFAULT_CLOCK as u32);
        m
    }

    pub fn batch_sizes(&self) -> Vec<u32> {
        self.estimates.keys().copied().collect()
    }

    /// The largest supported batch size <= n (0 when n is 0).
    pub fn batch_lookup(&self, n: usize) -> u32 {
        self.estimates
            .keys()
            .rev()
            .find(|&&b| b as usize <= n)
            .copied()
            .unwrap_or(0)
    }

    /// A successful infer: `duration` ns at the average of the clocks
    /// before and after (MHz; the default clock when the worker read none).
    pub fn add_measurement(&mut self, batch: u32, duration: u64, clock_before: u32, clock_after: u32) -> bool {
        let Some(w) = self.windows.get_mut(&batch) else {
            return false;
        };
        let clock = match (clock_before, clock_after) {
            (0, 0) => DEFAULT_CLOCK,
            (0, c) | (c, 0) => c as u64,
            (a, b) => (a as u64 + b as u64) / 2,
        };
        w.insert(duration * clock);
        if let Some(p) = w.percentile(PERCENTILE) {
            self.estimates.insert(batch, p);
        }
        true
    }

    pub fn add_weights_measurement(&mut self, duration: u64) {
        self.weights_window.insert(duration);
        if let Some(p) = self.weights_window.percentile(PERCENTILE) {
            self.weights_estimate_ns = p;
        }
    }

    /// Predicted duration (ns) of batch `b` (rounded down to a supported
    /// size) at `clock` MHz.
    pub fn predict(&self, b: u32, clock: u32) -> u64 {
        let eb = self.batch_lookup(b as usize).max(1);
        let work = self
            .estimates
            .get(&eb)
            .copied()
            .unwrap_or(DEFAULT_ESTIMATE_NS * DEFAULT_CLOCK);
        work / clock.max(1) as u64
    }

    pub fn measurements(&self, b: u32) -> usize {
        self.windows.get(&b).map_or(0, SlidingWindow::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> Profile {
        Profile {
            weights_ns: 8_000_000,
            exec_ns: BTreeMap::from([
                (1, 2_900_000),
                (2, 3_600_000),
                (4, 5_000_000),
                (8, 8_000_000),
                (16, 300_000_000),
            ]),
        }
    }

    #[test]
    fn p99_of_ten_is_91_percent_of_the_largest_plus_9_percent_of_the_next() {
        let mut w = SlidingWindow::new(10);
        for v in [10, 20, 30, 40, 50, 60, 70, 80, 90, 100] {
            w.insert(v * 1000);
        }
        // pos = 0.99 × 9 = 8.91: 0.91 × 100000 + 0.09 × 90000 = 99100
        assert_eq!(w.percentile(0.99), Some(99_100));
        assert_eq!(
            w.percentile(0.5),
            Some(55_000),
            "pos 4.5: halfway between 50000 and 60000"
        );
        assert_eq!(w.percentile(1.0), Some(100_000), "whole position: that rank");
        // An 11th value pushes out the oldest (10000), not the smallest by chance.
        w.insert(5_000);
        assert_eq!(w.len(), 10);
        assert_eq!(w.percentile(0.0), Some(5_000));
        w.insert(200_000); // pushes out 20000
        // sorted: 5,30,40,...,100,200 (k): pos 8.91 → 0.91·200000 + 0.09·100000
        assert_eq!(w.percentile(0.99), Some(191_000));
        let one = {
            let mut w = SlidingWindow::new(10);
            w.insert(7);
            w
        };
        assert_eq!(one.percentile(0.99), Some(7), "n = 1: pos 0");
        assert_eq!(SlidingWindow::new(10).percentile(0.99), None);
    }

    #[test]
    fn seeded_from_the_profile_times_the_default_clock_and_limited() {
        let m = ModelEstimator::new(&profile(), Limits::default());
        assert_eq!(m.batch_sizes(), vec![1, 2, 4, 8], "b16 exceeds 250 ms");
        assert_eq!(m.estimates[&1], 2_900_000 * 1380);
        assert_eq!(m.predict(1, 1380), 2_900_000);
        assert_eq!(m.b1_exec_ns, 2_900_000);
        // At a lower clock the same work takes longer: 2.9 ms × 1380/1000.
        assert_eq!(m.predict(1, 1000), 4_002_000);
        assert_eq!(m.predict(3, 1380), 3_600_000, "3 rounds down to b2");
        let small = ModelEstimator::new(
            &profile(),
            Limits {
                max_exec_time_ns: 250_000_000,
                max_batch_size: 2,
            },
        );
        assert_eq!(small.batch_sizes(), vec![1, 2]);
        let none = ModelEstimator::new(&Profile::default(), Limits::default());
        assert_eq!(none.batch_sizes(), vec![1]);
        assert_eq!(none.predict(1, 1380), 100_000, "0.1 ms without a profile");
    }

    #[test]
    fn measurements_are_clock_normalised_and_replace_the_seed() {
        let mut m = ModelEstimator::new(&profile(), Limits::default());
        // 3 ms at clocks 1200 → 1000 (average 1100): work 3.3e9 ns·MHz.
        assert!(m.add_measurement(1, 3_000_000, 1200, 1000));
        assert_eq!(m.estimates[&1], 3_300_000_000);
        assert_eq!(m.predict(1, 1100), 3_000_000);
        assert_eq!(m.predict(1, 1380), 2_391_304, "3.3e9 / 1380, truncated");
        // Ten measurements: 2.0 .. 2.9 ms at 1380 plus the 3.3e9 one falls out.
        for i in 0..10u64 {
            m.add_measurement(1, 2_000_000 + i * 100_000, 1380, 1380);
        }
        // sorted work: (2.0..2.9 ms)×1380; p99 = 0.91·2.9ms·1380 + 0.09·2.8ms·1380
        // = 3_641_820_000 + 347_760_000
        assert_eq!(m.estimates[&1], 3_989_580_000);
        assert!(
            !m.add_measurement(16, 1, 1380, 1380),
            "unsupported batch sizes are ignored"
        );
        assert_eq!(m.b1_exec_ns, 2_900_000, "b1_exec is fixed at creation");
        m.add_weights_measurement(9_000_000);
        assert_eq!(m.weights_estimate_ns, 9_000_000);
    }
}
