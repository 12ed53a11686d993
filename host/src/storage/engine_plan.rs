//! How a range read from an engine is asked for, and how its answer becomes
//! buckets in the live store's shape (bucket start, min, max, mean).
//!
//! ```text
//!  (from, to, bucket_ms)            bucket_ms: what the live store would use
//!     │ plan
//!     ├─ span ≤ RAW_SPAN_MAX_MS ─► Raw: `sel[<span>ms]` at `to`, the samples as stored
//!     │                               └─ bucket_raw: aligned buckets, exactly as the live store makes them
//!     └─ longer ─────────────────► Steps: query_range of `min/max/avg_over_time(sel[<step>ms])`,
//!                                     step ≥ bucket_ms and ≤ MAX_POINTS_PER_SERIES evaluations
//!                                     └─ from_steps: the value at `e` describes the bucket (e − step, e]
//! ```
//! Counters (served as rates per second, like the live store): raw samples
//! become rates point by point; stepped ones from consecutive buckets' maxima.
//!
//! Limits: a raw read brings every sample of the span (at 100 ms, 36 000 for
//! the hour); bucket edges of the stepped read are the engine's (its windows
//! are open on the left), so a sample on an edge may sit one bucket later than
//! the live store would put it.

/// Prometheus refuses a `query_range` with more evaluations than this per series.
pub const MAX_POINTS_PER_SERIES: u64 = 11_000;
/// Longest span read as raw samples; longer spans are read in steps.
pub const RAW_SPAN_MAX_MS: u64 = 3_600_000;

/// How to ask the engine for one range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// An instant query of `sel[range_ms ms]` at `at_ms`: the stored samples.
    Raw { range_ms: u64, at_ms: u64, bucket_ms: u64 },
    /// `query_range` from `start_ms` to `end_ms` every `step_ms`; each value
    /// describes the `step_ms` before its evaluation time.
    Steps { start_ms: u64, end_ms: u64, step_ms: u64 },
}

impl Plan {
    /// The bucket width the answer comes in.
    pub fn bucket_ms(&self) -> u64 {
        match *self {
            Plan::Raw { bucket_ms, .. } => bucket_ms,
            Plan::Steps { step_ms, .. } => step_ms,
        }
    }

    /// How many values per series the engine computes (1 for a raw read).
    pub fn evaluations(&self) -> u64 {
        match *self {
            Plan::Raw { .. } => 1,
            Plan::Steps {
                start_ms,
                end_ms,
                step_ms,
            } => (end_ms - start_ms) / step_ms + 1,
        }
    }
}

/// The plan for `[from_ms, to_ms]` in buckets of (at least) `bucket_ms`.
pub fn plan(from_ms: u64, to_ms: u64, bucket_ms: u64) -> Plan {
    let bucket_ms = bucket_ms.max(1);
    let span = to_ms.saturating_sub(from_ms);
    if span <= RAW_SPAN_MAX_MS {
        // `sel[r]` at `t` holds [t - r, t] (Prometheus 2) or (t - r, t]
        // (Prometheus 3, VictoriaMetrics): one ms more keeps `from` inside both.
        return Plan::Raw {
            range_ms: span + 1,
            at_ms: to_ms,
            bucket_ms,
        };
    }
    // Evaluations at the end of every aligned bucket that touches the range:
    // at most span/step + 2 of them, so keep two in hand.
    let step_ms = bucket_ms.max(span.div_ceil(MAX_POINTS_PER_SERIES - 2)).max(1);
    Plan::Steps {
        start_ms: from_ms / step_ms * step_ms + step_ms,
        end_ms: to_ms / step_ms * step_ms + step_ms,
        step_ms,
    }
}

/// Buckets of one series: start times (ms) with min, max and mean.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Bucketed {
    pub t: Vec<u64>,
    pub min: Vec<f64>,
    pub max: Vec<f64>,
    pub mean: Vec<f64>,
}

impl Bucketed {
    fn push(&mut self, t: u64, min: f64, max: f64, mean: f64) {
        self.t.push(t);
        self.min.push(min);
        self.max.push(max);
        self.mean.push(mean);
    }
}

/// Rates per second between consecutive samples (time-ordered); a reset or a
/// repeated time gives no rate, as in the live store.
pub fn rates(samples: &[(i64, f64)]) -> Vec<(i64, f64)> {
    samples
        .windows(2)
        .filter_map(|w| {
            let ((t0, v0), (t1, v1)) = (w[0], w[1]);
            (t1 > t0 && v1 >= v0).then(|| (t1, (v1 - v0) / ((t1 - t0) as f64 / 1e3)))
        })
        .collect()
}

/// Raw samples in `[from_ms, to_ms]`, in buckets of `bucket_ms` aligned to
/// multiples of it; NaN samples count for nothing, empty buckets are left out.
pub fn bucket_raw(samples: &[(i64, f64)], from_ms: u64, to_ms: u64, bucket_ms: u64) -> Bucketed {
    let w = bucket_ms.max(1);
    let mut out = Bucketed::default();
    // (bucket, min, max, sum, n)
    let mut cur: Option<(u64, f64, f64, f64, u32)> = None;
    for &(t, v) in samples {
        let Ok(t) = u64::try_from(t) else { continue };
        if t < from_ms || t > to_ms || v.is_nan() {
            continue;
        }
        let b = t / w * w;
        match &mut cur {
            Some((cb, mn, mx, sum, n)) if *cb == b => {
                *mn = mn.min(v);
                *mx = mx.max(v);
                *sum += v;
                *n += 1;
            }
            _ => {
                if let Some((cb, mn, mx, sum, n)) = cur {
                    out.push(cb, mn, mx, sum / f64::from(n));
                }
                cur = Some((b, v, v, v, 1));
            }
        }
    }
    if let Some((cb, mn, mx, sum, n)) = cur {
        out.push(cb, mn, mx, sum / f64::from(n));
    }
    out
}

/// Stepped answers (evaluation time ms, value) of `min_over_time`,
/// `max_over_time` and `avg_over_time` as buckets starting one step before
/// each evaluation; a time missing from one of the three is left out.
pub fn from_steps(min: &[(i64, f64)], max: &[(i64, f64)], mean: &[(i64, f64)], step_ms: u64) -> Bucketed {
    let at = |s: &[(i64, f64)], t: i64| s.binary_search_by_key(&t, |p| p.0).ok().map(|i| s[i].1);
    let mut out = Bucketed::default();
    for &(t, lo) in min {
        let (Some(hi), Some(avg)) = (at(max, t), at(mean, t)) else {
            continue;
        };
        let Ok(end) = u64::try_from(t) else { continue };
        out.push(end.saturating_sub(step_ms), lo, hi, avg);
    }
    out
}

/// Rates per second from stepped buckets of a counter's maxima: the increase
/// between consecutive buckets over the time between them.
pub fn step_rates(max: &[(i64, f64)], step_ms: u64) -> Bucketed {
    let mut out = Bucketed::default();
    for (t, r) in rates(max) {
        let Ok(end) = u64::try_from(t) else { continue };
        out.push(end.saturating_sub(step_ms), r, r, r);
    }
    out
}

/// Samples of several series (one series stored under more than one label
/// set, e.g. written by successive master starts) as one time-ordered run;
/// of samples at the same time the first is kept.
pub fn merge(mut runs: Vec<Vec<(i64, f64)>>) -> Vec<(i64, f64)> {
    if runs.len() == 1 {
        return runs.pop().unwrap_or_default();
    }
    let mut all: Vec<(i64, f64)> = runs.into_iter().flatten().collect();
    all.sort_by_key(|p| p.0);
    all.dedup_by_key(|p| p.0);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_spans_read_raw_and_long_ones_step_within_the_engine_limit() {
        assert_eq!(
            plan(1_000, 11_000, 1),
            Plan::Raw {
                range_ms: 10_001,
                at_ms: 11_000,
                bucket_ms: 1
            }
        );
        // 30 days at the dashboard's default 1 000 buckets.
        let (from, to) = (0u64, 30 * 86_400_000u64);
        let w = to.div_ceil(1_000);
        let p = plan(from, to, w);
        let Plan::Steps {
            start_ms,
            end_ms,
            step_ms,
        } = p
        else {
            panic!("{p:?}")
        };
        assert_eq!(step_ms, w);
        assert!(p.evaluations() <= MAX_POINTS_PER_SERIES);
        assert!(
            start_ms > from && start_ms - step_ms <= from,
            "the first bucket holds `from`"
        );
        assert!(end_ms > to && end_ms - step_ms <= to, "the last bucket holds `to`");
        // Asked for 1 ms buckets over 30 days: the step grows to the limit.
        for (from, to) in [
            (0, 30 * 86_400_000),
            (7, 3_600_008),
            (123_456, 123_456 + 50 * 86_400_000),
        ] {
            let p = plan(from, to, 1);
            let Plan::Steps { step_ms, .. } = p else {
                panic!("{p:?}")
            };
            assert!(
                p.evaluations() <= MAX_POINTS_PER_SERIES && p.evaluations() * step_ms >= to - from,
                "{from}..{to}: {p:?}"
            );
            assert_eq!(p.bucket_ms(), step_ms);
        }
    }

    #[test]
    fn raw_samples_bucket_like_the_live_store() {
        let s = [
            (1_000, 1.0),
            (1_050, 3.0),
            (1_100, f64::NAN),
            (1_150, 5.0),
            (2_000, 9.0),
        ];
        let b = bucket_raw(&s, 1_000, 1_999, 100);
        assert_eq!(b.t, vec![1_000, 1_100]);
        assert_eq!((b.min[0], b.max[0], b.mean[0]), (1.0, 3.0, 2.0));
        assert_eq!(b.mean[1], 5.0);
        let b = bucket_raw(&s, 0, 5_000, 1);
        assert_eq!(b.t, vec![1_000, 1_050, 1_150, 2_000]);
    }

    #[test]
    fn steps_become_buckets_that_start_one_step_earlier() {
        let min = [(2_000, 1.0), (3_000, 2.0), (4_000, 0.0)];
        let max = [(2_000, 5.0), (3_000, 6.0)];
        let avg = [(2_000, 3.0), (3_000, 4.0), (4_000, 0.0)];
        let b = from_steps(&min, &max, &avg, 1_000);
        assert_eq!(b.t, vec![1_000, 2_000]);
        assert_eq!((b.min[1], b.max[1], b.mean[1]), (2.0, 6.0, 4.0));
    }

    #[test]
    fn counters_become_rates_and_resets_are_skipped() {
        let s = [(0, 10.0), (500, 20.0), (1_500, 40.0), (2_000, 5.0), (3_000, 15.0)];
        assert_eq!(rates(&s), vec![(500, 20.0), (1_500, 20.0), (3_000, 10.0)]);
        let b = step_rates(&[(1_000, 0.0), (2_000, 100.0)], 1_000);
        assert_eq!((b.t.clone(), b.mean.clone()), (vec![1_000], vec![100.0]));
    }

    #[test]
    fn runs_of_one_series_merge_in_time_order() {
        let m = merge(vec![vec![(1, 1.0), (3, 3.0)], vec![(2, 2.0), (3, 9.0)]]);
        assert_eq!(m, vec![(1, 1.0), (2, 2.0), (3, 3.0)]);
    }
}
