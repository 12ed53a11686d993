//! The live store behind the dashboard: every metric batch any plugin emits
//! (fed from [`PipelineHandle::subscribe`]), kept per series for a recent
//! window (`api.live_window_ms`: an hour, five minutes on a master) and
//! served downsampled.
//!
//! - A series is (scope, metric name, attributes). Counters (cumulative sums)
//!   are stored as rates per second, which is what a chart shows; gauges and
//!   up-down counters as they come.
//! - Each series keeps its last five minutes at full resolution and older
//!   points in min/max/mean buckets of 0.9 s and 3.6 s, the resolutions of the
//!   dashboard's 15-minute and hour views (`points.rs`): 56 KB for an hour of
//!   100 ms points. At most `api.live_max_series` series are kept
//!   ([`LiveLimits`]); within a series the oldest point or bucket goes first.
//!   Series age out: one that has had no point for the window
//!   is removed (swept once a minute), and when the store is full a new series
//!   takes the place of the one idle longest, if that one has been idle for
//!   [`IDLE_EVICT_MS`]; only when every series is busy is a new one refused
//!   (counted). A long-running sonde, or a master that has seen hundreds of
//!   ranks come and go, keeps showing new jobs. Ids are never reused.
//! - With an embedded history behind it, a series removed that way goes
//!   dormant instead of away: it stays listed under its id, without points,
//!   so its past is still read from the history (a job that ended an hour
//!   ago), and it takes the same id back when points come again. At most
//!   `max_dormant` are kept; past that the longest dormant is forgotten.
//! - Fed lazily: the store takes in what the pipeline's tap holds when it is
//!   read (every read catches up first, so a reader sees everything emitted so
//!   far) and when the tap fills up ([`PipelineHandle::tap_filling`]), not
//!   batch by batch: an idle host with no dashboard open does not wake for it.
//! - Downsampling puts points into fixed buckets aligned to multiples of the
//!   bucket width (so a bucket's identity never changes as data arrives) and
//!   keeps min, max and mean per bucket. The live stream sends a snapshot in
//!   buckets once, then only the buckets from the last one sent onwards.

mod points;

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;
use std::sync::{Arc, Weak};

use parking_lot::RwLock;
use rustc_hash::FxHasher;
use serde::Serialize;

use crate::model::{AttrValue, MetricBatch, MetricKind, MetricSeries, now_ns};
use crate::pipeline::PipelineHandle;

pub use super::config::LiveLimits;
pub use points::{Buckets, MAX_BUCKETS, bucket_width};
use points::{Points, Shape};

/// A full store lets a new series replace one idle at least this long.
pub const IDLE_EVICT_MS: u64 = 60_000;
/// How often series without points are swept out.
const SWEEP_EVERY_MS: u64 = 60_000;

/// What the API lists about one series.
#[derive(Clone, Debug, Serialize)]
pub struct SeriesMeta {
    pub id: u32,
    /// The instrumentation scope: `sonde.plugin.<name>` for plugin output, `sonde.host` for the host's own metrics.
    pub scope: String,
    /// The plugin that emitted it (the scope without `sonde.plugin.`), if any.
    pub plugin: Option<String>,
    pub name: String,
    /// The unit as served: a counter's unit gains `/s` (it is served as a rate).
    pub unit: String,
    /// gauge, counter or updowncounter (the instrument kind as emitted).
    pub kind: &'static str,
    /// True when values are rates per second computed from a counter.
    pub rate: bool,
    pub attributes: serde_json::Map<String, serde_json::Value>,
}

/// One series' newest reading ([`LiveStore::latest`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Latest {
    pub name: String,
    /// The unit as emitted (a counter's, not its rate's).
    pub unit: String,
    pub kind: MetricKind,
    /// The attributes as text.
    pub attributes: Vec<(String, String)>,
    pub time_ms: u64,
    pub value: f64,
}

struct Series {
    meta: SeriesMeta,
    key: SeriesKey,
    /// When a point last arrived (ms since the epoch, wall clock).
    last_write_ms: u64,
    points: Points,
    /// The newest reading as it arrived (ns, value): a counter's for its
    /// rate, and every series' for `GET /metrics`.
    last_raw: Option<(u64, f64)>,
}

impl Series {
    fn new(meta: SeriesMeta, key: SeriesKey, shape: &Shape) -> Self {
        Series {
            meta,
            key,
            last_write_ms: now_ns() / 1_000_000,
            points: Points::new(shape),
            last_raw: None,
        }
    }
}

#[derive(Default)]
struct Store {
    /// Times are stored as u32 offsets from this (moved forward every ~24 days).
    base_ms: u64,
    /// By id; ids only grow, so an id never names two series.
    series: std::collections::BTreeMap<u32, Series>,
    next_id: u32,
    last_sweep_ms: u64,
    index: HashMap<SeriesKey, u32>,
    /// The same lookup by the series' `Arc` address. The `Weak` keeps the
    /// allocation (not the series) alive, so an address is never reused while cached.
    /// Looked up once per point, so FxHash rather than SipHash.
    by_ptr: HashMap<usize, (Weak<MetricSeries>, Option<u32>), BuildHasherDefault<FxHasher>>,
    refused_series: u64,
    /// Series removed: aged out, or replaced while idle in a full store.
    evicted_series: u64,
    /// Removed series still listed (see the module comment), by id, and the
    /// order they went dormant in (ids taken back since are skipped).
    dormant: std::collections::BTreeMap<u32, (SeriesMeta, SeriesKey)>,
    dormant_order: VecDeque<u32>,
    max_dormant: usize,
    out_of_order: u64,
    /// The bounds ([`LiveLimits`]); the shape holds the window and what each
    /// series keeps within it.
    max_series: usize,
    shape: Shape,
}

type SeriesKey = (String, String, Vec<(String, String)>);

/// The store; cheap to share (`Arc`).
pub struct LiveStore {
    inner: RwLock<Store>,
    /// When this store started (ms since the epoch): it holds nothing older.
    started_ms: u64,
    /// The pipeline's tap, drained by `catch_up` (None: fed by `ingest` only).
    tap: parking_lot::Mutex<Option<tokio::sync::broadcast::Receiver<Arc<MetricBatch>>>>,
}

impl Default for LiveStore {
    fn default() -> Self {
        Self::new()
    }
}

/// Counts for `/api/series`.
#[derive(Clone, Debug, Serialize)]
pub struct StoreStats {
    pub series: usize,
    /// Points kept at full resolution.
    pub points: usize,
    /// Older points' min/max/mean buckets.
    pub buckets: usize,
    pub bytes: usize,
    pub refused_series: u64,
    pub evicted_series: u64,
    /// Aged-out series still listed because the history holds their past.
    pub dormant_series: usize,
    pub out_of_order: u64,
    /// The window kept (`api.live_window_ms`) and the series cap (`api.live_max_series`).
    pub retention_ms: u64,
    pub max_series: usize,
}

fn attr_json(v: &AttrValue) -> serde_json::Value {
    match v {
        AttrValue::Str(s) => s.clone().into(),
        AttrValue::Int(i) => (*i).into(),
        AttrValue::Float(f) => (*f).into(),
        AttrValue::Bool(b) => (*b).into(),
    }
}

fn attr_text(v: &AttrValue) -> String {
    match v {
        AttrValue::Str(s) => s.clone(),
        other => attr_json(other).to_string(),
    }
}

impl LiveStore {
    /// A store with the standalone bounds (an hour, 2 048 series).
    pub fn new() -> Self {
        Self::with_limits(LiveLimits::default())
    }

    pub fn with_limits(limits: LiveLimits) -> Self {
        Self {
            inner: RwLock::new(Store::new(limits)),
            started_ms: now_ns() / 1_000_000,
            tap: parking_lot::Mutex::new(None),
        }
    }

    /// A store fed from the pipeline's tap: on every read, and by a task that
    /// wakes only when the tap fills up (see the module comment).
    pub fn spawn(pipeline: &PipelineHandle, limits: LiveLimits) -> Arc<Self> {
        let store = Arc::new(Self::with_limits(limits));
        *store.tap.lock() = Some(pipeline.subscribe());
        let weak = Arc::downgrade(&store);
        let pipeline = pipeline.clone();
        tokio::spawn(async move {
            loop {
                pipeline.tap_filling().await;
                let Some(s) = weak.upgrade() else { return };
                s.catch_up();
            }
        });
        store
    }

    /// Takes in every batch the tap holds now.
    pub fn catch_up(&self) {
        use tokio::sync::broadcast::error::TryRecvError;
        let mut tap = self.tap.lock();
        let Some(rx) = tap.as_mut() else { return };
        loop {
            match rx.try_recv() {
                Ok(batch) => self.ingest(&batch),
                Err(TryRecvError::Lagged(n)) => tracing::debug!("live store fell {n} batches behind"),
                Err(TryRecvError::Empty | TryRecvError::Closed) => return,
            }
        }
    }

    /// Adds a batch's points.
    pub fn ingest(&self, batch: &MetricBatch) {
        let mut st = self.inner.write();
        let now_ms = now_ns() / 1_000_000;
        if now_ms.saturating_sub(st.base_ms) > (1 << 31) {
            let window = st.shape.window_ms;
            st.rebase(now_ms.saturating_sub(window));
        }
        if now_ms.saturating_sub(st.last_sweep_ms) >= SWEEP_EVERY_MS {
            st.last_sweep_ms = now_ms;
            st.sweep(now_ms);
        }
        let scope = batch.scope.name.as_str();
        for p in &batch.points {
            if let Some(id) = st.id_of(scope, &p.series) {
                st.push(id, p.time_ns, p.value, now_ms);
            }
        }
    }

    /// The oldest time this store can hold: its start, or the retention window.
    pub fn covers_from_ms(&self) -> u64 {
        let window = self.inner.read().shape.window_ms;
        self.started_ms.max((now_ns() / 1_000_000).saturating_sub(window))
    }

    /// Makes a series known before it has points here (one the history kept
    /// from before a restart), so that it is listed and keeps one id.
    pub fn declare(&self, scope: &str, s: &MetricSeries) -> Option<u32> {
        self.catch_up();
        self.inner.write().id_for(scope, s)
    }

    /// Every series kept, in id order.
    pub fn list(&self) -> Vec<SeriesMeta> {
        self.catch_up();
        let st = self.inner.read();
        let mut out: Vec<SeriesMeta> = st.series.values().map(|s| s.meta.clone()).collect();
        if !st.dormant.is_empty() {
            out.extend(st.dormant.values().map(|(m, _)| m.clone()));
            out.sort_unstable_by_key(|m| m.id);
        }
        out
    }

    pub fn stats(&self) -> StoreStats {
        self.catch_up();
        let st = self.inner.read();
        let points: usize = st.series.values().map(|s| s.points.raw_len()).sum();
        let buckets: usize = st.series.values().map(|s| s.points.buckets_len()).sum();
        let bytes = st.series.values().map(|s| s.points.bytes()).sum();
        StoreStats {
            series: st.series.len(),
            points,
            buckets,
            bytes,
            refused_series: st.refused_series,
            evicted_series: st.evicted_series,
            dormant_series: st.dormant.len(),
            out_of_order: st.out_of_order,
            retention_ms: st.shape.window_ms,
            max_series: st.max_series,
        }
    }

    /// The newest point's time of a series (ms since the Unix epoch).
    pub fn last_ms(&self, id: u32) -> Option<u64> {
        self.catch_up();
        let st = self.inner.read();
        let s = st.series.get(&id)?;
        s.points.newest().map(|t| st.base_ms + t as u64)
    }

    /// The newest reading of every series with one since `since_ms` (ms
    /// since the Unix epoch), as it arrived: a counter's cumulative value,
    /// not its rate. For `GET /metrics`.
    pub fn latest(&self, since_ms: u64) -> Vec<Latest> {
        self.catch_up();
        let st = self.inner.read();
        st.series
            .values()
            .filter_map(|s| {
                let (t, value) = s.last_raw?;
                if t / 1_000_000 < since_ms {
                    return None;
                }
                let m = &s.meta;
                let (kind, unit) = match m.kind {
                    "counter" => (MetricKind::Counter, m.unit.strip_suffix("/s").unwrap_or(&m.unit)),
                    "updowncounter" => (MetricKind::UpDownCounter, m.unit.as_str()),
                    _ => (MetricKind::Gauge, m.unit.as_str()),
                };
                Some(Latest {
                    name: m.name.clone(),
                    unit: unit.to_string(),
                    kind,
                    attributes: s.key.2.clone(),
                    time_ms: t / 1_000_000,
                    value,
                })
            })
            .collect()
    }

    /// Points of `ids` in `[from_ms, to_ms]`, in buckets of `bucket_ms`
    /// aligned to multiples of it. Unknown ids are left out.
    pub fn query(&self, ids: &[u32], from_ms: u64, to_ms: u64, bucket_ms: u64) -> Vec<Buckets> {
        self.catch_up();
        let st = self.inner.read();
        ids.iter()
            .filter_map(|&id| {
                let s = st.series.get(&id)?;
                Some(s.points.query(id, st.base_ms, from_ms, to_ms, bucket_ms))
            })
            .collect()
    }
}

impl Store {
    fn new(limits: LiveLimits) -> Self {
        Store {
            base_ms: (now_ns() / 1_000_000).saturating_sub(limits.window_ms),
            max_series: limits.max_series,
            shape: Shape::for_window(limits.window_ms),
            max_dormant: limits.max_dormant,
            ..Default::default()
        }
    }

    /// The id of a series, looked up by its `Arc` first (one hash of an address).
    fn id_of(&mut self, scope: &str, s: &Arc<MetricSeries>) -> Option<u32> {
        let ptr = Arc::as_ptr(s) as usize;
        if let Some((_, id)) = self.by_ptr.get(&ptr) {
            return *id;
        }
        let id = self.id_for(scope, s);
        if self.by_ptr.len() >= 4 * self.max_series {
            // Series declared and dropped over and over: start the cache again.
            self.by_ptr.clear();
        }
        self.by_ptr.insert(ptr, (Arc::downgrade(s), id));
        id
    }

    fn id_for(&mut self, scope: &str, s: &MetricSeries) -> Option<u32> {
        let attrs: Vec<(String, String)> = s.attributes.iter().map(|(k, v)| (k.clone(), attr_text(v))).collect();
        let key = (scope.to_string(), s.name.clone(), attrs);
        let known = self.index.get(&key).copied();
        if let Some(id) = known
            && self.series.contains_key(&id)
        {
            return Some(id);
        }
        if self.series.len() >= self.max_series && !self.evict_idle(crate::model::now_ns() / 1_000_000) {
            self.refused_series += 1;
            return None;
        }
        if let Some((meta, key)) = known.and_then(|id| self.dormant.remove(&id)) {
            // A dormant series back again: the same id, points from now on.
            let id = meta.id;
            self.series.insert(id, Series::new(meta, key, &self.shape));
            return Some(id);
        }
        let id = self.next_id;
        self.next_id += 1;
        let rate = s.kind == MetricKind::Counter;
        let meta = SeriesMeta {
            id,
            scope: scope.to_string(),
            plugin: scope.strip_prefix("sonde.plugin.").map(str::to_string),
            name: s.name.clone(),
            unit: if rate { format!("{}/s", s.unit) } else { s.unit.clone() },
            kind: match s.kind {
                MetricKind::Gauge => "gauge",
                MetricKind::Counter => "counter",
                MetricKind::UpDownCounter => "updowncounter",
            },
            rate,
            attributes: s.attributes.iter().map(|(k, v)| (k.clone(), attr_json(v))).collect(),
        };
        self.index.insert(key.clone(), id);
        self.series.insert(id, Series::new(meta, key, &self.shape));
        Some(id)
    }

    fn push(&mut self, id: u32, time_ns: u64, value: f64, now_ms: u64) {
        let base = self.base_ms;
        let Some(s) = self.series.get_mut(&id) else { return };
        s.last_write_ms = now_ms;
        let value = if s.meta.rate {
            let prev = s.last_raw.replace((time_ns, value));
            match prev {
                Some((t0, v0)) if time_ns > t0 && value >= v0 => (value - v0) / ((time_ns - t0) as f64 / 1e9),
                // The first reading, a reset or a repeated timestamp: no rate yet.
                _ => return,
            }
        } else {
            if s.last_raw.is_none_or(|(t0, _)| time_ns >= t0) {
                s.last_raw = Some((time_ns, value));
            }
            value
        };
        let ms = time_ns / 1_000_000;
        if ms < base || ms + self.shape.window_ms < now_ms {
            return;
        }
        let rel = (ms - base).min(u32::MAX as u64) as u32;
        if !s.points.push(&self.shape, rel, ms, value as f32) {
            self.out_of_order += 1;
            return;
        }
        s.points.trim(&self.shape, base, now_ms);
    }

    /// Removes a series and every cached way to its id.
    fn remove(&mut self, id: u32) {
        let Some(s) = self.series.remove(&id) else { return };
        // Refusals cached while the store was full may fit now: forget them too.
        self.by_ptr.retain(|_, (_, cached)| cached.is_some_and(|c| c != id));
        self.evicted_series += 1;
        if self.max_dormant == 0 {
            self.index.remove(&s.key);
            return;
        }
        self.dormant.insert(id, (s.meta, s.key));
        self.dormant_order.push_back(id);
        while self.dormant.len() > self.max_dormant {
            let Some(old) = self.dormant_order.pop_front() else {
                break;
            };
            if let Some((_, key)) = self.dormant.remove(&old) {
                self.index.remove(&key);
            }
        }
        // Ids taken back since they went dormant are stale in the order: drop
        // them now and then so the order stays as short as the map.
        if self.dormant_order.len() > 2 * self.dormant.len() + 64 {
            let dormant = &self.dormant;
            self.dormant_order.retain(|id| dormant.contains_key(id));
        }
    }

    /// In a full store, makes room by removing the series idle longest, if it
    /// has been idle for [`IDLE_EVICT_MS`]. True when there is room now.
    fn evict_idle(&mut self, now_ms: u64) -> bool {
        let idlest = self
            .series
            .iter()
            .min_by_key(|(_, s)| s.last_write_ms)
            .map(|(id, s)| (*id, s.last_write_ms));
        match idlest {
            Some((id, last)) if now_ms.saturating_sub(last) >= IDLE_EVICT_MS => {
                self.remove(id);
                true
            }
            _ => false,
        }
    }

    /// Removes series that have had no point for the whole retention window.
    fn sweep(&mut self, now_ms: u64) {
        let gone: Vec<u32> = self
            .series
            .iter()
            .filter(|(_, s)| now_ms.saturating_sub(s.last_write_ms) > self.shape.window_ms)
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            self.remove(id);
        }
    }

    fn rebase(&mut self, new_base: u64) {
        let delta = new_base.saturating_sub(self.base_ms);
        for s in self.series.values_mut() {
            s.points.rebase(delta.min(u32::MAX as u64) as u32);
        }
        self.base_ms = new_base;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{MetricSeries, Point, Scope};

    fn series(name: &str, kind: MetricKind, attrs: &[(&str, &str)]) -> Arc<MetricSeries> {
        Arc::new(MetricSeries {
            name: name.into(),
            description: String::new(),
            unit: "By".into(),
            kind,
            attributes: attrs
                .iter()
                .map(|(k, v)| (k.to_string(), AttrValue::from(*v)))
                .collect(),
            start_time_ns: 0,
        })
    }

    fn batch(scope: &str, pts: Vec<(Arc<MetricSeries>, u64, f64)>) -> MetricBatch {
        MetricBatch {
            scope: Arc::new(Scope {
                name: scope.into(),
                version: String::new(),
            }),
            points: pts
                .into_iter()
                .map(|(series, time_ns, value)| Point { series, time_ns, value })
                .collect(),
        }
    }

    #[test]
    fn series_are_keyed_by_scope_name_and_attributes() {
        let st = LiveStore::new();
        let now = now_ns();
        let a = series(
            "system.cpu.utilization",
            MetricKind::Gauge,
            &[("cpu.logical_number", "0")],
        );
        let b = series(
            "system.cpu.utilization",
            MetricKind::Gauge,
            &[("cpu.logical_number", "1")],
        );
        st.ingest(&batch(
            "sonde.plugin.sampler",
            vec![(a.clone(), now, 0.5), (b, now, 0.25), (a, now + 100_000_000, 0.75)],
        ));
        let list = st.list();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].plugin.as_deref(), Some("sampler"));
        assert_eq!(list[1].attributes["cpu.logical_number"], "1");
        let now_ms = now / 1_000_000;
        let q = st.query(&[0, 1, 99], now_ms - 1000, now_ms + 1000, 1);
        assert_eq!(q.len(), 2, "unknown ids are left out");
        assert_eq!(q[0].mean, vec![0.5, 0.75]);
    }

    #[tokio::test]
    async fn a_store_fed_from_the_tap_takes_it_in_when_read_and_when_it_fills() {
        let (h, p) = crate::pipeline::Pipeline::start(&Default::default(), vec![]).unwrap();
        let st = LiveStore::spawn(&h, LiveLimits::default());
        let now = now_ns();
        let a = series("a", MetricKind::Gauge, &[]);
        h.submit_metrics(batch("s", vec![(a.clone(), now, 1.0)]));
        // Nothing awaited since: the store's task has not run, the read catches up.
        assert_eq!(st.inner.read().series.len(), 0, "not taken in batch by batch");
        assert_eq!(st.list().len(), 1);
        // A quarter of the tap's capacity wakes the task, with nobody reading.
        for i in 0..crate::pipeline::TAP_FILLING {
            h.submit_metrics(batch("s", vec![(a.clone(), now + (i as u64 + 1) * 1_000_000, 2.0)]));
        }
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!(
            st.inner.read().series[&0].points.raw_len() > 1,
            "the filling tap woke the task"
        );
        p.shutdown(std::time::Duration::from_secs(1)).await;
    }

    #[test]
    fn a_full_series_holds_no_more_memory_than_its_cap() {
        // A 10 s window keeps at most 100 points a series (a window at 100 ms).
        let st = LiveStore::with_limits(LiveLimits {
            window_ms: 10_000,
            ..LiveLimits::default()
        });
        let now = now_ns();
        let a = series("a", MetricKind::Gauge, &[]);
        let pts = (0..1000u64)
            .map(|i| (a.clone(), now - 9_000_000_000 + i * 9_000_000, i as f64))
            .collect();
        st.ingest(&batch("s", pts));
        let stats = st.stats();
        assert_eq!(stats.points, 100);
        assert_eq!(stats.bytes, 100 * 8, "grown to the cap, not to the next power of two");
        let newest = st.last_ms(0).unwrap();
        let q = st.query(&[0], newest, newest, 1);
        assert_eq!(q[0].mean, vec![999.0]);
    }

    #[test]
    fn counters_become_rates() {
        let st = LiveStore::new();
        let now = now_ns();
        let c = series("system.network.io", MetricKind::Counter, &[]);
        st.ingest(&batch(
            "s",
            vec![
                (c.clone(), now, 1000.0),
                (c.clone(), now + 500_000_000, 1500.0),
                (c, now + 1_000_000_000, 2500.0),
            ],
        ));
        let m = &st.list()[0];
        assert!(m.rate);
        assert_eq!(m.unit, "By/s");
        let now_ms = now / 1_000_000;
        let q = st.query(&[0], now_ms, now_ms + 2000, 1);
        assert_eq!(q[0].mean, vec![1000.0, 2000.0]);
    }

    #[test]
    fn an_hour_of_100ms_points_is_bounded_and_downsampled() {
        let st = LiveStore::new();
        let now = now_ns();
        let s = series("g", MetricKind::Gauge, &[]);
        let hour = LiveLimits::default().window_ms;
        let start = now - hour * 1_000_000;
        for chunk in 0..(36_000 + 500) / 100 {
            let pts = (0..100)
                .map(|i| (s.clone(), start + (chunk * 100 + i) * 100_000_000, (i % 10) as f64))
                .collect();
            st.ingest(&batch("s", pts));
        }
        let stats = st.stats();
        assert!(stats.points <= 3_000 && stats.buckets <= 2 * 1_001, "{stats:?}");
        let from = start / 1_000_000;
        let to = now / 1_000_000 + 60_000;
        let w = bucket_width(from, to, 1_000);
        let q = st.query(&[0], from, to, w);
        assert!(q[0].t.len() <= 1_001, "{}", q[0].t.len());
        assert!(q[0].t.len() > 900);
        assert_eq!((q[0].min[5], q[0].max[5]), (0.0, 9.0));
    }

    #[test]
    fn out_of_order_points_are_counted_not_stored() {
        let st = LiveStore::new();
        let now = now_ns();
        let s = series("g", MetricKind::Gauge, &[]);
        st.ingest(&batch("s", vec![(s.clone(), now, 1.0), (s, now - 1_000_000_000, 2.0)]));
        assert_eq!(st.stats().out_of_order, 1);
        assert_eq!(st.stats().points, 1);
    }

    #[test]
    fn a_full_store_replaces_an_idle_series_and_refuses_when_all_are_busy() {
        let mut st = Store::new(LiveLimits::default());
        const MAX_SERIES: usize = 2_048;
        let mk = |i: usize| series(&format!("m{i}"), MetricKind::Gauge, &[]);
        for i in 0..MAX_SERIES {
            assert!(st.id_for("s", &mk(i)).is_some());
        }
        // Every series written just now: a new one is refused.
        assert_eq!(st.id_for("s", &mk(MAX_SERIES)), None);
        assert_eq!(st.refused_series, 1);
        // One goes quiet for longer than IDLE_EVICT_MS: the newcomer takes its place.
        let quiet = *st.series.keys().nth(7).unwrap();
        st.series.get_mut(&quiet).unwrap().last_write_ms -= IDLE_EVICT_MS + 1;
        let id = st.id_for("s", &mk(MAX_SERIES)).expect("room made");
        assert!(id as usize >= MAX_SERIES, "ids are never reused");
        assert!(!st.series.contains_key(&quiet));
        assert_eq!(st.evicted_series, 1);
        // The evicted series, back again, is a new series with a new id.
        assert_eq!(st.id_for("s", &mk(7)), None, "store full of busy series again");
    }

    #[test]
    fn series_without_points_for_the_retention_window_are_swept() {
        let mut st = Store::new(LiveLimits::default());
        let a = st.id_for("s", &series("a", MetricKind::Gauge, &[])).unwrap();
        let b = st.id_for("s", &series("b", MetricKind::Gauge, &[])).unwrap();
        let now = st.series[&b].last_write_ms;
        st.series.get_mut(&a).unwrap().last_write_ms = now - st.shape.window_ms - 1;
        st.sweep(now);
        assert_eq!(st.series.keys().copied().collect::<Vec<_>>(), vec![b]);
        assert_eq!(st.evicted_series, 1);
    }

    #[test]
    fn a_masters_bounds_keep_a_shorter_window_of_more_series() {
        let limits = crate::api::config::ApiConfig::default().live_limits(true);
        assert_eq!((limits.window_ms, limits.max_series), (300_000, 16_384));
        let st = LiveStore::with_limits(LiveLimits {
            window_ms: 300_000,
            max_series: 16,
            max_dormant: 0,
        });
        let now = now_ns();
        // Ten minutes of 100 ms points for 20 series: 16 kept, 3 000 points each.
        let all: Vec<_> = (0..20)
            .map(|i| series(&format!("m{i}"), MetricKind::Gauge, &[]))
            .collect();
        for k in 0..6_000u64 {
            let t = now - (6_000 - k) * 100_000_000;
            st.ingest(&batch("s", all.iter().map(|s| (s.clone(), t, 1.0)).collect()));
        }
        let stats = st.stats();
        assert_eq!((stats.series, stats.max_series, stats.retention_ms), (16, 16, 300_000));
        assert_eq!(
            stats.refused_series, 4,
            "each refused series is counted once (the refusal is cached)"
        );
        assert!(stats.points <= 16 * 3_000, "{stats:?}");
        assert!(stats.points >= 16 * 2_990, "{stats:?}");
        assert!(st.covers_from_ms() >= now / 1_000_000 - 300_000 - 1_000);
    }

    #[test]
    fn with_a_history_aged_out_series_stay_listed_and_come_back_under_their_id() {
        let mut st = Store::new(LiveLimits {
            max_series: 4,
            max_dormant: 2,
            ..LiveLimits::default()
        });
        let mk = |i: usize| series(&format!("m{i}"), MetricKind::Gauge, &[]);
        let ids: Vec<u32> = (0..4).map(|i| st.id_for("s", &mk(i)).unwrap()).collect();
        let now = st.series[&ids[3]].last_write_ms;
        for id in &ids[..3] {
            st.series.get_mut(id).unwrap().last_write_ms = now - st.shape.window_ms - 1;
        }
        st.sweep(now);
        assert_eq!(st.series.len(), 1);
        assert_eq!(st.evicted_series, 3);
        // Two kept (the cap), the first to go dormant forgotten.
        assert_eq!(st.dormant.keys().copied().collect::<Vec<_>>(), vec![ids[1], ids[2]]);
        let listed: Vec<u32> = (ids[1]..=ids[3]).collect();
        let store = LiveStore {
            inner: RwLock::new(st),
            started_ms: 0,
            tap: Default::default(),
        };
        assert_eq!(store.list().iter().map(|m| m.id).collect::<Vec<_>>(), listed);
        assert_eq!(store.stats().dormant_series, 2);
        let mut st = store.inner.into_inner();
        // Points again: the dormant one takes its id back; the forgotten one is new.
        assert_eq!(st.id_for("s", &mk(2)), Some(ids[2]));
        assert!(st.series.contains_key(&ids[2]) && !st.dormant.contains_key(&ids[2]));
        let again = st.id_for("s", &mk(0)).unwrap();
        assert!(again > ids[3], "a forgotten series is new: {again}");
    }

    #[test]
    fn without_a_history_aged_out_series_are_forgotten() {
        let mut st = Store::new(LiveLimits::default());
        let a = st.id_for("s", &series("a", MetricKind::Gauge, &[])).unwrap();
        let now = st.series[&a].last_write_ms;
        st.series.get_mut(&a).unwrap().last_write_ms = now - st.shape.window_ms - 1;
        st.sweep(now);
        assert!(st.dormant.is_empty() && st.index.is_empty());
        assert!(st.id_for("s", &series("a", MetricKind::Gauge, &[])).unwrap() > a);
    }
}
