//! onset: when a fail-slow began and when it ended, from a job's per-step
//! slowdown series (each step's replayed actual over its ideal, see
//! [`crate::whatif::StepTimes::slowdown`]).
//!
//! Method: CUSUM (Page's cumulative sum), the change-point test that
//! accumulates evidence step by step and so trades a few steps of delay for
//! ignoring lone spikes:
//! - healthy: `up = max(0, up + min(x - base - drift, cap))`; an onset is
//!   declared when `up > threshold`, and dated to the step after `up` was
//!   last zero (where the shift began, not where it became certain);
//! - slow: the slow level is the median of the steps since the onset, and
//!   `down = max(0, down + min(mid - x, cap))` with `mid` halfway between
//!   the slow level and the baseline; the end is declared when `down >
//!   threshold` and dated the same way.
//!
//! - re-dated: the CUSUM dates a shift from where its evidence began to pile
//!   up, so a burst of jitter just before the real change would date it
//!   early; once declared, the onset is the step that best splits the
//!   episode's steps so far into the baseline and one level (least squares),
//!   moved only later, and detection is counted from there.
//!
//! `x` is the log of the slowdown, so that 1.2x over 1.0x weighs the same as
//! 2.4x over 2.0x. Pure, no clock: the caller maps indices to steps.

use serde::{Deserialize, Serialize};

/// The test's parameters, each with why it has its default.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct OnsetSettings {
    /// Steps whose median is the healthy baseline. Five is short enough to be
    /// had a few seconds into a job and long enough for a median to ignore
    /// one odd step.
    pub baseline_steps: usize,
    /// Log-slowdown a step must exceed the baseline by to count (ln 1.05):
    /// the same 5 % under which `whatif` names no straggler, so the jitter
    /// of a large job (2-3 %) adds nothing.
    pub drift: f64,
    /// Evidence needed to declare a change (ln 1.25). A step 1.5x slower
    /// than usual brings 0.36 and crosses it in the next step; a 1.1x
    /// fail-slow brings 0.05 a step and crosses it in five.
    pub threshold: f64,
    /// The most one step may add (ln 1.2): below `threshold`, so one spike,
    /// however large (a checkpoint, a garbage collection), is never enough,
    /// and two slow steps are.
    pub cap: f64,
}

impl Default for OnsetSettings {
    fn default() -> Self {
        OnsetSettings {
            baseline_steps: 5,
            drift: 1.05f64.ln(),
            threshold: 1.25f64.ln(),
            cap: 1.2f64.ln(),
        }
    }
}

/// One slow period.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Episode {
    /// Index of the first slow step.
    pub onset: usize,
    /// Index of the step at which the onset was declared: `detected - onset`
    /// is the time to detect, in steps.
    pub detected: usize,
    /// Index of the first step back to normal, once declared.
    pub end: Option<usize>,
    pub end_detected: Option<usize>,
    /// Median slowdown over the episode's steps, against the baseline.
    pub factor: f64,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// The slow episodes of a per-step slowdown series, in order. Steps before
/// `baseline_steps` are only the baseline; a series that starts slow has that
/// slowness as its baseline (there is no earlier step to compare with).
pub fn episodes(slowdowns: &[f64], s: &OnsetSettings) -> Vec<Episode> {
    let x: Vec<f64> = slowdowns.iter().map(|v| v.max(1e-9).ln()).collect();
    let n0 = s.baseline_steps.max(1);
    if x.len() <= n0 {
        return Vec::new();
    }
    let base = median(&x[..n0]);
    let mut out: Vec<Episode> = Vec::new();
    let mut up = 0.0f64;
    let mut up_zero = n0 - 1; // last index where `up` was zero
    let mut i = n0;
    while i < x.len() {
        up = (up + (x[i] - base - s.drift).min(s.cap)).max(0.0);
        if up == 0.0 {
            up_zero = i;
        }
        if up > s.threshold {
            let onset = up_zero + 1;
            let mut ep = Episode {
                onset,
                detected: i,
                end: None,
                end_detected: None,
                factor: 1.0,
            };
            // Slow: look for the way back.
            let mut down = 0.0f64;
            let mut down_zero = i;
            let mut j = i + 1;
            while j < x.len() {
                let level = median(&x[onset..j]);
                let mid = (level + base) / 2.0;
                down = (down + (mid - x[j]).min(s.cap)).max(0.0);
                if down == 0.0 {
                    down_zero = j;
                }
                if down > s.threshold {
                    ep.end = Some(down_zero + 1);
                    ep.end_detected = Some(j);
                    break;
                }
                j += 1;
            }
            let last = ep.end.unwrap_or(x.len());
            // Re-dated by the best split of the episode so far: a burst of
            // jitter just before the real change starts the evidence early
            // (a real gloo job read 1.2x at steps 7-8, and its link was
            // throttled at step 10: dated 7 before this).
            let best = best_split(&x, base, onset, last);
            if best > onset {
                ep.onset = best;
                ep.detected = first_crossing(&x, base, best, s).unwrap_or(ep.detected).max(best);
            }
            let onset = ep.onset;
            ep.factor = (median(&x[onset..last.max(onset + 1)]) - base).exp();
            let end = ep.end;
            out.push(ep);
            // Healthy again from the end on, against the same baseline.
            let Some(e) = end else { break };
            i = e;
            up = 0.0;
            up_zero = e - 1;
            continue;
        }
        i += 1;
    }
    out
}

/// The step in `[from, to - 2]` that best splits `x[from..to]` into the
/// baseline before it and one level from it on (least squares, the earliest
/// of equals): where the episode's steps change, as opposed to where the
/// CUSUM's evidence began.
fn best_split(x: &[f64], base: f64, from: usize, to: usize) -> usize {
    let mut best = (f64::INFINITY, from);
    for k in from..to.saturating_sub(1) {
        let level = x[k..to].iter().sum::<f64>() / (to - k) as f64;
        let before: f64 = x[from..k].iter().map(|v| (v - base).powi(2)).sum();
        let after: f64 = x[k..to].iter().map(|v| (v - level).powi(2)).sum();
        if before + after < best.0 - 1e-12 {
            best = (before + after, k);
        }
    }
    best.1
}

/// Where the CUSUM started at `from` first passes the threshold.
fn first_crossing(x: &[f64], base: f64, from: usize, s: &OnsetSettings) -> Option<usize> {
    let mut up = 0.0f64;
    (from..x.len()).find(|&i| {
        up = (up + (x[i] - base - s.drift).min(s.cap)).max(0.0);
        up > s.threshold
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A healthy job's series: 1.0-1.04 with a fixed pseudo-random pattern
    /// (the replayed max over many ranks is never exactly its ideal).
    fn healthy(n: usize) -> Vec<f64> {
        let mut state = 12345u64;
        (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                1.0 + ((state >> 33) % 1000) as f64 / 1000.0 * 0.04
            })
            .collect()
    }

    fn with(mut v: Vec<f64>, from: usize, to: usize, factor: f64) -> Vec<f64> {
        for x in &mut v[from..to] {
            *x *= factor;
        }
        v
    }

    #[test]
    fn healthy_jitter_and_lone_spikes_are_no_episode() {
        let s = OnsetSettings::default();
        assert!(episodes(&healthy(200), &s).is_empty());
        let mut spiky = healthy(60);
        spiky[20] = 3.0;
        spiky[40] = 1.8;
        assert!(episodes(&spiky, &s).is_empty(), "{:?}", episodes(&spiky, &s));
        // A lasting shift smaller than the drift is not a fail-slow either.
        assert!(episodes(&with(healthy(80), 30, 80, 1.01), &s).is_empty());
    }

    #[test]
    fn a_fail_slow_is_dated_and_detected_within_five_steps() {
        let s = OnsetSettings::default();
        for factor in [1.12, 1.3, 1.6, 2.5] {
            let series = with(healthy(80), 30, 80, factor);
            let eps = episodes(&series, &s);
            assert_eq!(eps.len(), 1, "x{factor}: {eps:?}");
            let e = &eps[0];
            assert!(e.onset.abs_diff(30) <= 1, "x{factor}: onset {}", e.onset);
            assert!(
                e.detected >= 30 && e.detected - 30 <= 5,
                "x{factor}: detected at {}",
                e.detected
            );
            assert_eq!(e.end, None);
            assert!((e.factor / factor - 1.0).abs() < 0.05, "x{factor}: factor {}", e.factor);
        }
    }

    #[test]
    fn the_end_is_dated_and_a_second_episode_found() {
        let s = OnsetSettings::default();
        let series = with(with(healthy(120), 20, 45, 1.8), 80, 100, 1.4);
        let eps = episodes(&series, &s);
        assert_eq!(eps.len(), 2, "{eps:?}");
        assert!(eps[0].onset.abs_diff(20) <= 1, "{eps:?}");
        assert!(eps[0].end.unwrap().abs_diff(45) <= 1, "{eps:?}");
        assert!(eps[0].end_detected.unwrap().saturating_sub(45) <= 5, "{eps:?}");
        assert!(eps[1].onset.abs_diff(80) <= 1, "{eps:?}");
        assert!(eps[1].end.unwrap().abs_diff(100) <= 1, "{eps:?}");
    }

    #[test]
    fn jitter_just_before_the_change_does_not_date_it_early() {
        // Two steps of 1.25x jitter at 7 and 8, then the real change at 10
        // (a throttled link: 5x). The CUSUM declares at 8 from 7; the
        // episode's steps say 10.
        let s = OnsetSettings::default();
        let mut series = with(healthy(30), 10, 30, 5.0);
        series[7] *= 1.25;
        series[8] *= 1.25;
        let eps = episodes(&series, &s);
        assert_eq!(eps.len(), 1, "{eps:?}");
        assert_eq!(eps[0].onset, 10, "{eps:?}");
        assert_eq!(eps[0].detected, 11, "{eps:?}");
        assert!((eps[0].factor / 5.0 - 1.0).abs() < 0.05, "{eps:?}");
    }

    #[test]
    fn too_short_a_series_has_no_baseline() {
        assert!(episodes(&[1.0, 2.0, 2.0], &OnsetSettings::default()).is_empty());
    }
}
