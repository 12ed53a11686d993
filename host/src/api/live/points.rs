//! The points of one live series: the recent ones at full resolution, older
//! ones in min/max/mean buckets that get coarser with age.
//!
//! ```text
//!  push(t, v) ──► raw ring (u32 ms offset, f32)      the last 5 min, ≤ 3 000 points   8 B each
//!      ├────────► tier 0: 900 ms buckets             the last 1 000 (15 min)         16 B each
//!      ├────────► tier 1: 3.6 s buckets              the last 1 000 (1 h)            16 B each
//!      └────────► … each 4× coarser and 4× longer, until the window is covered
//!  query(from, to, w) ─► each output bucket from one source: raw where raw
//!                        reaches, else the finest tier that does
//! ```
//! - Why these widths: the dashboard draws 1 000 points a chart, so its
//!   15-minute and hour views ask for 900 ms and 3.6 s buckets. Each reads a
//!   tier at exactly its own resolution, and the 1- and 5-minute views read
//!   raw points. Other widths are served from the finest source that holds
//!   the range; a tier coarser than the width asked for gives one bucket per
//!   tier bucket (the answer is sparser, never made up).
//! - Cost: an hour of a 100 ms series is 24 KB raw + 2 × 16 KB of buckets,
//!   56 KB where 36 000 raw points took 288 KB. A window of five minutes or
//!   less (a master's default) keeps raw points only.
//! - Raw points are capped by count (a faster series keeps a shorter span)
//!   and by age: a series slower than 100 ms keeps five minutes raw too, and
//!   its older points sit one to a 900 ms bucket. A tier bucket is named by its index (start / width as
//!   u32, which holds 900 ms buckets until 2092), so moving the raw ring's
//!   time base leaves the tiers alone. NaN stays raw and out of the tiers.

use std::collections::VecDeque;

use serde::Serialize;

/// The sampling period the raw cap assumes: at 100 ms, [`RAW_MS`] of points.
const POINT_PERIOD_MS: u64 = 100;
/// How far back points are kept at full resolution (less if the window is shorter).
pub const RAW_MS: u64 = 300_000;
/// Buckets per tier: the number of points a dashboard chart draws.
const TIER_BUCKETS: u64 = 1_000;
/// The finest tier's width: the dashboard's 15-minute view at 1 000 points.
const FIRST_TIER_MS: u64 = 900;
/// Each tier is this many times coarser (and longer) than the one before.
const TIER_FACTOR: u64 = 4;
/// Largest number of buckets a query may ask for.
pub const MAX_BUCKETS: usize = 10_000;

/// Downsampled points of one series: bucket start times (ms since the Unix
/// epoch) with min, max and mean of the points in each bucket. Empty buckets
/// are left out.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Buckets {
    pub id: u32,
    pub t: Vec<u64>,
    pub min: Vec<f32>,
    pub max: Vec<f32>,
    pub mean: Vec<f32>,
}

/// The bucket width that serves `[from, to]` in at most `max_points` buckets
/// (whole milliseconds, at least 1).
pub fn bucket_width(from_ms: u64, to_ms: u64, max_points: usize) -> u64 {
    let span = to_ms.saturating_sub(from_ms).max(1);
    span.div_ceil(max_points.clamp(1, MAX_BUCKETS) as u64).max(1)
}

/// What every series of a store keeps, derived from the store's window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    /// The window kept, and how far back of it raw points reach.
    pub window_ms: u64,
    pub raw_ms: u64,
    /// Most raw points a series keeps.
    pub raw_max: usize,
    /// (bucket width in ms, buckets kept) per tier, finest first.
    pub tiers: Vec<(u32, usize)>,
}

impl Shape {
    pub fn for_window(window_ms: u64) -> Self {
        let raw_ms = window_ms.min(RAW_MS);
        let mut tiers = Vec::new();
        let (mut covered, mut width) = (raw_ms, FIRST_TIER_MS);
        while covered < window_ms {
            // One more than the window needs: the newest bucket is still filling.
            let kept = window_ms.div_ceil(width).min(TIER_BUCKETS) + 1;
            tiers.push((width as u32, kept as usize));
            covered = width * TIER_BUCKETS;
            width *= TIER_FACTOR;
        }
        Shape {
            window_ms,
            raw_ms,
            raw_max: (raw_ms / POINT_PERIOD_MS).max(1) as usize,
            tiers,
        }
    }
}

/// One series' points, shaped by a [`Shape`] the caller passes in (every
/// series of a store has the same one, so it is not stored per series).
#[derive(Default)]
pub struct Points {
    /// (ms since the store's base, value), in time order.
    raw: VecDeque<(u32, f32)>,
    tiers: Box<[Tier]>,
}

#[derive(Default)]
struct Tier {
    width: u32,
    /// Points folded into the newest bucket so far (for its running mean).
    newest_n: u32,
    buckets: VecDeque<Bucket>,
}

#[derive(Clone, Copy)]
struct Bucket {
    /// Start / width.
    index: u32,
    min: f32,
    max: f32,
    mean: f32,
}

/// Appends to a ring that grows by doubling but never past `cap`: left to
/// itself a `VecDeque` doubles to 65 536 entries for 36 000.
fn push_capped<T>(ring: &mut VecDeque<T>, cap: usize, item: T) {
    if ring.len() >= cap {
        ring.pop_front();
    }
    if ring.len() == ring.capacity() {
        let want = (ring.capacity() * 2).max(16).min(cap.max(1));
        ring.reserve_exact(want.saturating_sub(ring.len()).max(1));
    }
    ring.push_back(item);
}

impl Points {
    pub fn new(shape: &Shape) -> Self {
        Points {
            raw: VecDeque::new(),
            tiers: shape
                .tiers
                .iter()
                .map(|&(width, _)| Tier {
                    width,
                    ..Tier::default()
                })
                .collect(),
        }
    }

    /// Adds a point at `rel` ms after the store's base (`abs_ms` since the
    /// epoch). False, and nothing kept, when it is older than the newest point.
    pub fn push(&mut self, shape: &Shape, rel: u32, abs_ms: u64, value: f32) -> bool {
        if self.raw.back().is_some_and(|p| p.0 > rel) {
            return false;
        }
        push_capped(&mut self.raw, shape.raw_max, (rel, value));
        if !value.is_nan() {
            for (tier, &(_, kept)) in self.tiers.iter_mut().zip(&shape.tiers) {
                tier.add(abs_ms, value, kept);
            }
        }
        true
    }

    /// Drops what has aged out at `now_ms`: raw points older than the raw
    /// span (the tiers hold them), buckets older than the window.
    pub fn trim(&mut self, shape: &Shape, base_ms: u64, now_ms: u64) {
        let oldest_raw = now_ms.saturating_sub(shape.raw_ms).saturating_sub(base_ms);
        while self.raw.front().is_some_and(|p| (p.0 as u64) < oldest_raw) {
            self.raw.pop_front();
        }
        let oldest_abs_ms = now_ms.saturating_sub(shape.window_ms);
        for tier in self.tiers.iter_mut() {
            let w = tier.width as u64;
            while tier
                .buckets
                .front()
                .is_some_and(|b| (b.index as u64 + 1) * w <= oldest_abs_ms)
            {
                tier.buckets.pop_front();
            }
        }
    }

    /// Moves the raw points' base `delta` ms later, dropping those before it.
    pub fn rebase(&mut self, delta: u32) {
        self.raw.retain(|p| p.0 >= delta);
        for p in self.raw.iter_mut() {
            p.0 -= delta;
        }
    }

    /// Points held at full resolution.
    pub fn raw_len(&self) -> usize {
        self.raw.len()
    }

    /// Tier buckets held.
    pub fn buckets_len(&self) -> usize {
        self.tiers.iter().map(|t| t.buckets.len()).sum()
    }

    /// Bytes of point storage allocated.
    pub fn bytes(&self) -> usize {
        self.raw.capacity() * size_of::<(u32, f32)>()
            + self
                .tiers
                .iter()
                .map(|t| t.buckets.capacity() * size_of::<Bucket>())
                .sum::<usize>()
    }

    /// The newest point's offset from the base.
    pub fn newest(&self) -> Option<u32> {
        self.raw.back().map(|p| p.0)
    }

    /// The points in `[from_ms, to_ms]` in buckets of `bucket_ms` aligned to
    /// multiples of it (see the module comment for which source serves which).
    pub fn query(&self, id: u32, base_ms: u64, from_ms: u64, to_ms: u64, bucket_ms: u64) -> Buckets {
        let w = bucket_ms.max(1);
        let mut out = Buckets {
            id,
            ..Default::default()
        };
        if from_ms > to_ms {
            return out;
        }
        // Sources finest first, each with the earliest time it holds.
        let raw_from = self.raw.front().map(|p| base_ms + p.0 as u64);
        let sources = std::iter::once(raw_from).chain(
            self.tiers
                .iter()
                .map(|t| t.buckets.front().map(|b| b.index as u64 * t.width as u64)),
        );
        let last = self.tiers.len();
        // Served newest first: each source takes the whole buckets it holds
        // below what finer sources took; the coarsest takes everything left.
        let mut pieces: Vec<Buckets> = Vec::new();
        let mut upper = to_ms;
        for (k, start) in sources.enumerate() {
            let Some(start) = start else { continue };
            let lo = if k == last {
                from_ms
            } else {
                from_ms.max(start.div_ceil(w) * w)
            };
            if lo <= upper {
                let piece = match k {
                    0 => downsample(id, &self.raw, base_ms, lo, upper, w),
                    // Below a finer source, only whole buckets: one that
                    // reaches into the finer source's range would count its
                    // points twice.
                    _ => self.tiers[k - 1].downsample(id, lo, upper, w, upper < to_ms),
                };
                pieces.push(piece);
            }
            if lo <= from_ms {
                break;
            }
            upper = upper.min(lo.saturating_sub(1));
        }
        for p in pieces.into_iter().rev() {
            out.t.extend(p.t);
            out.min.extend(p.min);
            out.max.extend(p.max);
            out.mean.extend(p.mean);
        }
        out
    }
}

impl Tier {
    fn add(&mut self, abs_ms: u64, v: f32, kept: usize) {
        let index = (abs_ms / self.width as u64).min(u32::MAX as u64) as u32;
        match self.buckets.back_mut() {
            Some(b) if b.index == index => {
                self.newest_n += 1;
                b.min = b.min.min(v);
                b.max = b.max.max(v);
                b.mean += (v - b.mean) / self.newest_n as f32;
            }
            // Points come in time order (the raw ring refuses others).
            Some(b) if b.index > index => {}
            _ => {
                self.newest_n = 1;
                push_capped(
                    &mut self.buckets,
                    kept,
                    Bucket {
                        index,
                        min: v,
                        max: v,
                        mean: v,
                    },
                );
            }
        }
    }

    /// This tier's buckets that overlap `[from_ms, to_ms]` (with `whole`,
    /// only those that end by `to_ms` + 1), merged into buckets of `w`.
    fn downsample(&self, id: u32, from_ms: u64, to_ms: u64, w: u64, whole: bool) -> Buckets {
        let mut out = Buckets {
            id,
            ..Default::default()
        };
        let width = self.width as u64;
        let start = self
            .buckets
            .partition_point(|b| (b.index as u64 + 1) * width <= from_ms);
        let end = if whole {
            self.buckets
                .partition_point(|b| (b.index as u64 + 1) * width <= to_ms.saturating_add(1))
        } else {
            self.buckets.partition_point(|b| b.index as u64 * width <= to_ms)
        };
        let mut acc = Acc::default();
        for b in self.buckets.range(start..end.max(start)) {
            let bucket = (b.index as u64 * width).max(from_ms) / w * w;
            if acc.bucket != Some(bucket) {
                acc.flush(&mut out);
                acc = Acc {
                    bucket: Some(bucket),
                    ..Acc::default()
                };
            }
            acc.add_bucket(b.min, b.max, b.mean);
        }
        acc.flush(&mut out);
        out
    }
}

/// min/max/mean per bucket of `bucket_ms` over the raw points in `[from_ms, to_ms]`.
fn downsample(
    id: u32,
    points: &VecDeque<(u32, f32)>,
    base_ms: u64,
    from_ms: u64,
    to_ms: u64,
    bucket_ms: u64,
) -> Buckets {
    let mut out = Buckets {
        id,
        ..Default::default()
    };
    if to_ms < base_ms || from_ms > to_ms {
        return out;
    }
    let rel = |ms: u64| ms.saturating_sub(base_ms).min(u32::MAX as u64) as u32;
    let (lo, hi) = (rel(from_ms), rel(to_ms));
    let start = points.partition_point(|p| p.0 < lo);
    let end = points.partition_point(|p| p.0 <= hi);
    if start >= end {
        return out;
    }
    let w = bucket_ms.max(1);
    let n_guess = ((to_ms - from_ms) / w + 1).min((end - start) as u64) as usize;
    out.t.reserve(n_guess);
    out.min.reserve(n_guess);
    out.max.reserve(n_guess);
    out.mean.reserve(n_guess);
    let mut acc = Acc::default();
    // Relative time at which the current bucket ends: divide only when crossing it.
    let mut edge = 0u64;
    for &(t, v) in points.range(start..end) {
        let t = t as u64;
        if acc.bucket.is_none() || t >= edge {
            acc.flush(&mut out);
            let bucket = (base_ms + t) / w * w;
            edge = bucket + w - base_ms;
            acc = Acc {
                bucket: Some(bucket),
                ..Acc::default()
            };
        }
        if !v.is_nan() {
            acc.add_bucket(v, v, v);
        }
    }
    acc.flush(&mut out);
    out
}

/// One output bucket being filled, from raw points or tier buckets (a tier's
/// buckets all hold the same span, so their means weigh the same).
struct Acc {
    bucket: Option<u64>,
    min: f32,
    max: f32,
    sum: f64,
    n: u32,
}

impl Default for Acc {
    fn default() -> Self {
        Acc {
            bucket: None,
            min: f32::INFINITY,
            max: f32::NEG_INFINITY,
            sum: 0.0,
            n: 0,
        }
    }
}

impl Acc {
    fn add_bucket(&mut self, min: f32, max: f32, mean: f32) {
        self.min = self.min.min(min);
        self.max = self.max.max(max);
        self.sum += mean as f64;
        self.n += 1;
    }

    /// Appends the bucket to `out` unless it holds no value.
    fn flush(&self, out: &mut Buckets) {
        if let Some(t) = self.bucket
            && self.n > 0
        {
            out.t.push(t);
            out.min.push(self.min);
            out.max.push(self.max);
            out.mean.push((self.sum / self.n as f64) as f32);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An hour of 100 ms points ending at `end_ms`, through a store-like base.
    fn hour_of(
        shape: &Shape,
        end_ms: u64,
        every_ms: u64,
        value: impl Fn(u64) -> f32,
    ) -> (Points, u64, Vec<(u64, f32)>) {
        let base = end_ms - 3_600_000;
        let mut p = Points::new(shape);
        let mut all = Vec::new();
        let mut t = base + every_ms;
        while t <= end_ms {
            let v = value(t);
            assert!(p.push(shape, (t - base) as u32, t, v));
            all.push((t, v));
            p.trim(shape, base, t);
            t += every_ms;
        }
        (p, base, all)
    }

    /// The buckets `[from, to]` at `w` straight from every point.
    fn brute(all: &[(u64, f32)], from: u64, to: u64, w: u64) -> Buckets {
        let mut out = Buckets::default();
        let mut acc = Acc::default();
        for &(t, v) in all.iter().filter(|p| p.0 >= from && p.0 <= to) {
            let b = t / w * w;
            if acc.bucket != Some(b) {
                acc.flush(&mut out);
                acc = Acc {
                    bucket: Some(b),
                    ..Acc::default()
                };
            }
            acc.add_bucket(v, v, v);
        }
        acc.flush(&mut out);
        out
    }

    #[test]
    fn the_window_sets_the_tiers() {
        let hour = Shape::for_window(3_600_000);
        assert_eq!(hour.raw_max, 3_000);
        assert_eq!(hour.tiers, vec![(900, 1_001), (3_600, 1_001)]);
        let master = Shape::for_window(300_000);
        assert!(master.tiers.is_empty(), "five minutes: raw points only");
        assert_eq!(Shape::for_window(10_000).raw_max, 100);
        let day = Shape::for_window(86_400_000);
        assert_eq!(day.tiers.len(), 5);
        assert_eq!(day.tiers.last(), Some(&(230_400, 376)));
    }

    #[test]
    fn an_hour_of_100ms_points_takes_56_kb_and_each_dashboard_view_reads_its_own_resolution() {
        let shape = Shape::for_window(3_600_000);
        // A multiple of 3.6 s, so each view's window starts on a bucket edge.
        let end = 1_789_999_200_000;
        let (p, base, all) = hour_of(&shape, end, 100, |t| ((t / 100) % 37) as f32 * 0.5);
        assert!(p.bytes() <= 3_000 * 8 + 2 * 1_001 * 16, "{} bytes", p.bytes());
        assert_eq!((p.raw_len(), p.buckets_len()), (3_000, 1_001 + 1_001));
        // The 1-minute, 5-minute, 15-minute and hour views at 1 000 points.
        for window in [60_000, 300_000, 900_000, 3_600_000] {
            let from = end - window;
            let w = bucket_width(from, end, 1_000);
            let got = p.query(7, base, from, end, w);
            let want = brute(&all, from, end, w);
            assert_eq!(got.t, want.t, "window {window}: bucket times");
            // The oldest bucket may hold points from before `from` when a tier
            // coarser than the view serves it (the 5-minute view's first 300 ms
            // comes from a 900 ms bucket); every other bucket is exact.
            let exact = if window == 300_000 { 1 } else { 0 };
            assert_eq!(got.min[exact..], want.min[exact..], "window {window}");
            assert_eq!(got.max[exact..], want.max[exact..], "window {window}");
            for (g, x) in got.mean[exact..].iter().zip(&want.mean[exact..]) {
                assert!((g - x).abs() < 1e-3, "window {window}: mean {g} against {x}");
            }
            assert_eq!(got.id, 7);
        }
    }

    #[test]
    fn a_width_finer_than_a_tier_gets_that_tiers_buckets() {
        let shape = Shape::for_window(3_600_000);
        let end = 1_790_000_000_000;
        let (p, base, _) = hour_of(&shape, end, 100, |_| 1.0);
        // 20 minutes ago, in 100 ms buckets: only 3.6 s buckets are left there.
        let (from, to) = (end - 1_200_000, end - 1_140_000);
        let got = p.query(0, base, from, to, 100);
        assert!(got.t.len() >= 16 && got.t.len() <= 18, "{} buckets", got.t.len());
        // The first is reported at `from` (its bucket starts before it).
        assert!(got.t[1..].windows(2).all(|t| t[1] - t[0] == 3_600), "{:?}", got.t);
        // Across the raw boundary the times still only rise.
        let got = p.query(0, base, end - 600_000, end, 300);
        assert!(got.t.windows(2).all(|t| t[1] > t[0]));
        assert!(got.mean.iter().all(|&m| m == 1.0));
    }

    #[test]
    fn a_slow_series_keeps_five_minutes_raw_and_its_older_points_one_to_a_bucket() {
        let shape = Shape::for_window(3_600_000);
        let end = 1_789_999_200_000;
        let (p, base, all) = hour_of(&shape, end, 1_000, |t| (t % 7_000) as f32);
        assert_eq!(p.raw_len(), 301, "five minutes of 1 s points, both ends");
        // The 15-minute view: 900 ms buckets, each holding at most one point.
        let from = end - 900_000;
        let got = p.query(0, base, from, end, 900);
        assert_eq!(
            got,
            Buckets {
                id: 0,
                ..brute(&all, from, end, 900)
            }
        );
        assert!(p.bytes() <= 512 * 8 + 2 * 1_001 * 16, "{} bytes", p.bytes());
    }

    #[test]
    fn the_widest_range_asked_for_neither_overflows_nor_loses_points() {
        let shape = Shape::for_window(3_600_000);
        let end = 1_789_999_200_000;
        let (p, base, _) = hour_of(&shape, end, 100, |_| 3.0);
        let got = p.query(0, base, 0, u64::MAX, 3_600_000);
        assert_eq!(
            got.t.len(),
            2,
            "the hour falls in two aligned hour buckets: {:?}",
            got.t
        );
        assert!(got.mean.iter().all(|&m| m == 3.0));
    }

    #[test]
    fn nan_stays_raw_and_out_of_the_tiers() {
        let shape = Shape::for_window(3_600_000);
        let end = 1_790_000_000_000;
        let (p, base, _) = hour_of(&shape, end, 100, |t| if t % 1_000 == 0 { f32::NAN } else { 2.0 });
        let got = p.query(0, base, end - 3_600_000, end, 3_600);
        assert!(got.mean.iter().all(|&m| m == 2.0), "{:?}", &got.mean[..5]);
        assert!(got.t.len() > 990);
    }

    #[test]
    fn buckets_keep_min_max_mean_and_are_aligned() {
        let pts: VecDeque<(u32, f32)> = (0..100).map(|i| (i * 10, i as f32)).collect();
        let b = downsample(7, &pts, 1_000, 1_000, 2_000, 100);
        assert_eq!(b.t.len(), 10);
        assert_eq!(b.t[0], 1_000);
        assert_eq!(b.t[1], 1_100);
        assert_eq!((b.min[0], b.max[0], b.mean[0]), (0.0, 9.0, 4.5));
        // A window starting mid-bucket still reports the bucket by its aligned start.
        let b = downsample(7, &pts, 1_000, 1_050, 1_250, 100);
        assert_eq!(b.t, vec![1_000, 1_100, 1_200]);
        assert_eq!(b.min[0], 5.0);
        assert_eq!(bucket_width(0, 3_600_000, 1_000), 3_600);
        assert_eq!(bucket_width(5, 5, 1_000), 1);
    }
}
