//! Sample pacing: the ticks a plugin asked for (its period and metrics),
//! gathered on the sampler's thread until its `deliver-every` is due, then
//! handed over as one series-major batch.

use std::sync::Arc;

use crate::model::{SeriesInfo, Tick};
use crate::plugin::bindings::types;

/// Collects ticks for one plugin until its `deliver-every` is reached, then
/// builds the series-major batch of the series it asked for.
///
/// Both the ticks kept and the deliveries go by a clock the caller passes
/// (`at_ns`), on the multiples of the plugin's period and `deliver-every`:
/// a tick is kept when it is the first on or after a multiple of the period,
/// and a batch is handed over at the first kept tick on or after a multiple
/// of `deliver-every`. The host passes CLOCK_MONOTONIC, the clock its
/// sampler's deadlines and the plugins' repeating timers lie on, so a
/// delivery every second comes at the same tick as a 1 s timer and every
/// plugin's delivery at the same tick as the others': one wake-up each, not
/// two. A replay passes the recorded tick times, which lie anywhere around
/// the multiples: a tick up to [`EARLY_NS`] before one counts as on it, so
/// ticks jittering across a multiple are neither dropped nor kept twice.
#[derive(Default)]
pub struct SampleAcc {
    req: Option<types::SampleRequest>,
    ticks: Vec<Arc<Tick>>,
    /// The multiple of the period the last kept tick counted for.
    kept_at: Option<u64>,
    /// The multiple of `deliver-every` the batch being filled began after.
    batch_after: Option<u64>,
    /// Per series id: selected by the metric filter / already described to the plugin.
    selected: Vec<bool>,
    told: Vec<bool>,
    series_len: usize,
}

/// How early a tick may come and still count for the multiple after it (at
/// most half the period): the sampler's ticks come after their deadlines, a
/// replay's recorded ones on either side.
const EARLY_NS: u64 = 5_000_000;

/// Which multiple of `step` the time `at` counts for: the last one at or
/// before it, or the next one when that is at most `early` away.
fn multiple_index(at: u64, step: u64, early: u64) -> u64 {
    (at + early) / step
}

impl SampleAcc {
    /// Takes a new request (the manifest's, or a `request-samples` call).
    /// One that changes only `deliver-every` keeps the ticks gathered so far:
    /// a plugin that slows its deliveries while idle and speeds them up when
    /// work comes (a profiler without a job) loses no tick to the switch, and
    /// they come with the next call. Anything else starts afresh. Either way
    /// the series are described again, as the contract says.
    pub(super) fn request(&mut self, req: Option<types::SampleRequest>) {
        let pacing_only = match (&self.req, &req) {
            (Some(old), Some(new)) => old.period_ms == new.period_ms && old.metrics == new.metrics,
            _ => false,
        };
        if !pacing_only {
            *self = SampleAcc {
                req,
                ..Default::default()
            };
            return;
        }
        self.req = req;
        // The batch being filled ends at the first multiple of the new
        // deliver-every on or after the next tick.
        self.batch_after = None;
        self.told.iter_mut().for_each(|t| *t = false);
    }

    /// Takes the tick taken at `at_ns` on the caller's clock; returns the
    /// batch when this tick completes one.
    pub fn push(&mut self, tick: &Arc<Tick>, series: &Arc<[SeriesInfo]>, at_ns: u64) -> Option<types::SampleBatch> {
        let req = self.req.as_ref()?;
        let period_ns = u64::from(req.period_ms.max(1)) * 1_000_000;
        let every_ns = u64::from(req.deliver_every_ms.max(1)) * 1_000_000;
        let early = EARLY_NS.min(period_ns / 2);
        let kept_at = multiple_index(at_ns, period_ns, early);
        if self.kept_at.is_some_and(|k| kept_at <= k) {
            return None;
        }
        self.kept_at = Some(kept_at);
        // The first batch ends at the first multiple on or after its first tick
        // (a tick on a multiple is delivered at once).
        let batch_after = *self
            .batch_after
            .get_or_insert_with(|| at_ns.saturating_sub(early) / every_ns);
        if series.len() != self.series_len {
            for s in &series[self.series_len..] {
                let want = req.metrics.is_empty() || req.metrics.iter().any(|p| s.metric.starts_with(p.as_str()));
                self.selected.push(want);
                self.told.push(false);
            }
            self.series_len = series.len();
        }
        self.ticks.push(tick.clone());
        let delivered_at = multiple_index(at_ns, every_ns, early);
        if delivered_at <= batch_after {
            return None;
        }
        self.batch_after = Some(delivered_at);
        // The next batch holds as many ticks: room for them now, not regrown from one.
        let room = self.ticks.len();
        let ticks = std::mem::replace(&mut self.ticks, Vec::with_capacity(room));
        let ids: Vec<u32> = (0..self.series_len as u32)
            .filter(|&i| self.selected[i as usize])
            .collect();
        let t = ticks.len();
        let mut values = Vec::with_capacity(ids.len() * t);
        for &id in &ids {
            values.extend(
                ticks
                    .iter()
                    .map(|k| k.values.get(id as usize).copied().unwrap_or(f64::NAN)),
            );
        }
        let new_series = ids
            .iter()
            .filter(|&&id| !std::mem::replace(&mut self.told[id as usize], true))
            .map(|&id| to_wit_series(&series[id as usize]))
            .collect();
        Some(types::SampleBatch {
            new_series,
            timestamps: ticks.iter().map(|k| k.time_ns).collect(),
            series: ids,
            values,
        })
    }
}

pub fn to_wit_series(s: &SeriesInfo) -> types::SeriesInfo {
    types::SeriesInfo {
        id: s.id,
        metric: s.metric.clone(),
        unit: s.unit.clone(),
        kind: match s.kind {
            crate::model::SeriesKind::Gauge => types::SeriesKind::Gauge,
            crate::model::SeriesKind::Counter => types::SeriesKind::Counter,
        },
        attributes: s
            .attributes
            .iter()
            .map(|(k, v)| types::Attribute {
                key: k.clone(),
                value: match v {
                    crate::model::AttrValue::Str(s) => types::Value::Str(s.clone()),
                    crate::model::AttrValue::Int(i) => types::Value::Int(*i),
                    crate::model::AttrValue::Float(f) => types::Value::Float(*f),
                    crate::model::AttrValue::Bool(b) => types::Value::Boolean(*b),
                },
            })
            .collect(),
    }
}

#[cfg(test)]
#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SeriesKind;

    fn series(n: usize) -> Arc<[SeriesInfo]> {
        (0..n)
            .map(|i| SeriesInfo {
                id: i as u32,
                metric: if i % 2 == 0 {
                    "system.cpu.utilization".into()
                } else {
                    "system.memory.usage".into()
                },
                unit: "1".into(),
                kind: SeriesKind::Gauge,
                attributes: vec![],
            })
            .collect()
    }

    fn tick(ms: u64, n: usize) -> Arc<Tick> {
        Arc::new(Tick {
            time_ns: ms * 1_000_000,
            values: (0..n).map(|i| (ms * 10 + i as u64) as f64).collect(),
        })
    }

    /// An accumulator for one plugin's sample request.
    fn accumulator(period_ms: u32, deliver_every_ms: u32, metrics: &[&str]) -> SampleAcc {
        let mut acc = SampleAcc::default();
        acc.request(Some(types::SampleRequest {
            period_ms,
            deliver_every_ms,
            metrics: metrics.iter().map(|m| m.to_string()).collect(),
        }));
        acc
    }

    /// What the replay does: the tick's own time is the clock.
    fn push(acc: &mut SampleAcc, t: &Arc<Tick>, s: &Arc<[SeriesInfo]>) -> Option<types::SampleBatch> {
        acc.push(t, s, t.time_ns)
    }

    #[test]
    fn batches_are_series_major_and_filtered() {
        let mut acc = accumulator(100, 300, &["system.cpu."]);
        let s = series(4);
        assert!(push(&mut acc, &tick(1000, 4), &s).is_none());
        assert!(push(&mut acc, &tick(1100, 4), &s).is_none());
        let b = push(&mut acc, &tick(1200, 4), &s).unwrap();
        assert_eq!(b.series, vec![0, 2]);
        assert_eq!(b.timestamps, vec![1_000_000_000, 1_100_000_000, 1_200_000_000]);
        // series 0 over 3 ticks, then series 2 over 3 ticks
        assert_eq!(b.values, vec![10000.0, 11000.0, 12000.0, 10002.0, 11002.0, 12002.0]);
        assert_eq!(b.new_series.len(), 2);
        for ms in [1300, 1400] {
            assert!(push(&mut acc, &tick(ms, 4), &s).is_none());
        }
        let b = push(&mut acc, &tick(1500, 4), &s).unwrap();
        assert!(b.new_series.is_empty(), "series are described once");
    }

    #[test]
    fn slower_plugins_get_every_nth_tick_and_new_series() {
        let mut acc = accumulator(500, 500, &[]);
        let mut got = Vec::new();
        for i in 0..12u64 {
            let n = if i < 6 { 2 } else { 3 };
            if let Some(b) = push(&mut acc, &tick(1000 + i * 100, n), &series(n)) {
                got.push((b.timestamps[0] / 1_000_000, b.series.len(), b.new_series.len()));
            }
        }
        assert_eq!(got, vec![(1000, 2, 2), (1500, 2, 0), (2000, 3, 1)]);
    }

    #[test]
    fn recorded_ticks_jittering_across_a_multiple_are_each_kept_once() {
        // A replay's wall-clock ticks lying on the multiples, alternately 0.2 ms
        // early and late: every one is kept, and each batch holds five.
        let mut acc = accumulator(100, 500, &[]);
        let s = series(1);
        let mut kept = 0;
        let mut batches = Vec::new();
        for n in 1..=40u64 {
            let at = if n % 2 == 0 {
                n * 100_000_000 + 200_000
            } else {
                n * 100_000_000 - 200_000
            };
            let t = Arc::new(Tick {
                time_ns: at,
                values: vec![1.0],
            });
            if let Some(b) = acc.push(&t, &s, at) {
                kept += b.timestamps.len();
                batches.push(b.timestamps.len());
            }
        }
        assert_eq!(batches[1..], [5; 7], "{batches:?}");
        assert_eq!(kept, 40, "{batches:?}");
    }

    #[test]
    fn a_request_changing_only_deliver_every_keeps_the_ticks_gathered() {
        // Called every second, then every 10 s (idle), then every second again:
        // the ticks gathered at 10 s come with the next whole second, and the
        // series are described again. A change of metrics starts afresh.
        let at = |n: u64| n * 100_000_000 + 300_000;
        let s = series(2);
        let request = |every, metrics: &[&str]| {
            Some(types::SampleRequest {
                period_ms: 100,
                deliver_every_ms: every,
                metrics: metrics.iter().map(|m| m.to_string()).collect(),
            })
        };
        let mut acc = accumulator(100, 1000, &[]);
        let mut delivered = Vec::new();
        let mut run = |acc: &mut SampleAcc, ticks: std::ops::RangeInclusive<u64>| {
            for n in ticks {
                let t = Arc::new(Tick {
                    time_ns: at(n),
                    values: vec![1.0, 2.0],
                });
                if let Some(b) = acc.push(&t, &s, at(n)) {
                    delivered.push((n, b.timestamps.len(), b.new_series.len(), b.series.len()));
                }
            }
        };
        run(&mut acc, 101..=110);
        acc.request(request(10_000, &[]));
        run(&mut acc, 111..=125);
        acc.request(request(1000, &[]));
        run(&mut acc, 126..=135);
        acc.request(request(1000, &["system.cpu."]));
        run(&mut acc, 136..=150);
        // (tick it came at, ticks, series described, series delivered)
        assert_eq!(
            delivered,
            [(110, 10, 2, 2), (130, 20, 2, 2), (140, 5, 1, 1), (150, 10, 0, 1)]
        );
    }

    #[test]
    fn deliveries_fall_on_multiples_of_deliver_every_whenever_the_plugin_started() {
        // Ticks 0.3 ms after each 100 ms line (how the sampler wakes); two
        // plugins subscribe at different ticks, one samples at 1 s.
        let at = |n: u64| n * 100_000_000 + 300_000;
        let s = series(2);
        let mut fast = accumulator(100, 1000, &[]);
        let mut slow = accumulator(1000, 1000, &[]);
        let (mut fast_at, mut slow_at) = (Vec::new(), Vec::new());
        for n in 3..45 {
            let t = Arc::new(Tick {
                time_ns: at(n),
                values: vec![1.0, 2.0],
            });
            if let Some(b) = fast.push(&t, &s, at(n)) {
                fast_at.push((n, b.timestamps.len()));
            }
            if n >= 7
                && let Some(b) = slow.push(&t, &s, at(n))
            {
                slow_at.push((n, b.timestamps.len()));
            }
        }
        // The first batch ends at the first whole second; then ten ticks a batch.
        assert_eq!(fast_at, vec![(10, 8), (20, 10), (30, 10), (40, 10)]);
        // One tick a second (and the one it started with), delivered at the
        // same ticks as the other plugin's.
        assert_eq!(slow_at, vec![(10, 2), (20, 1), (30, 1), (40, 1)]);
    }
}
