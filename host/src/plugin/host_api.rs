//! What a plugin's store holds, and the host functions it may call
//! (the `host` interface of the contract).
//!
//! Host functions never block on the network and never trap the guest on
//! purpose: emitted data goes into an outbox that the plugin's thread hands
//! to the pipeline after the call returns.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::sonde::plugin::host;
use super::bindings::types;
use super::clock::Clock;
use super::limits::{HostIo, Limited, MemoryCap};
use super::metrics::PluginMetrics;
use crate::model::{AttrValue, Attributes, LogRecord, MetricKind, MetricSeries, Point, Scope, Severity, now_ns};
use crate::sinks::config::SinksConfig;
use crate::sinks::{Column, DefaultDir, Sink, SinkFormat, SinkMode};
use crate::state::PluginState as StateNs;

/// Store data of one plugin instance.
pub struct PluginState {
    pub name: String,
    pub scope: Arc<Scope>,
    wasi: WasiCtx,
    table: ResourceTable,
    pub memory: MemoryCap,
    pub outbox: Outbox,
    /// Declared metric series; carried over when the instance is replaced
    /// after a trap, so counters keep their start time.
    pub registry: MetricRegistry,
    pub timers: Timers,
    /// What `now` answers and timers count in: the wall clock, or a recording's under `sonde plugin test`.
    pub clock: Clock,
    /// Set when the plugin called `request-samples`.
    pub samples_changed: Option<Option<types::SampleRequest>>,
    pub state: StateNs,
    /// `[sinks]`: where sinks go unless the plugin gives a default (`crate::sinks::resolve`).
    pub sinks_cfg: SinksConfig,
    sinks: Vec<Sink>,
    pub metrics: Arc<PluginMetrics>,
    /// Time the current call spent in host I/O (state store, sinks), credited to its deadline.
    pub io: HostIo,
}

impl PluginState {
    /// Runs host I/O, counting its time for the call's deadline (see [`HostIo`]).
    fn timed<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        let t0 = Instant::now();
        let r = f(self);
        self.io.spent += t0.elapsed();
        r
    }

    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: &str,
        wasi: WasiCtx,
        memory_limit: usize,
        registry: MetricRegistry,
        state: StateNs,
        sinks_cfg: SinksConfig,
        metrics: Arc<PluginMetrics>,
        clock: Clock,
    ) -> Self {
        Self {
            name: name.to_string(),
            scope: Arc::new(Scope {
                name: format!("sonde.plugin.{name}"),
                version: String::new(),
            }),
            wasi,
            table: ResourceTable::new(),
            memory: MemoryCap {
                limit: memory_limit,
                current: 0,
            },
            outbox: Outbox::default(),
            registry,
            timers: Timers::default(),
            clock,
            samples_changed: None,
            state,
            sinks_cfg,
            sinks: Vec::new(),
            metrics,
            io: HostIo::default(),
        }
    }
}

impl Limited for PluginState {
    fn memory(&mut self) -> &mut MemoryCap {
        &mut self.memory
    }
    fn io(&mut self) -> &mut HostIo {
        &mut self.io
    }
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// What a call emitted, drained after it returns.
#[derive(Default)]
pub struct Outbox {
    pub points: Vec<Point>,
    pub logs: Vec<LogRecord>,
    pub decisions: Vec<types::Decision>,
    /// Points with unknown handles or mismatched column lengths.
    pub bad_points: u64,
    /// Sinks opened (or refused) by the call: where each went, for the status.
    pub sinks: Vec<super::SinkStatus>,
}

/// Declared series by handle, deduplicated by (name, attributes).
#[derive(Default)]
pub struct MetricRegistry {
    series: Vec<Arc<MetricSeries>>,
    index: HashMap<(String, String), u32>,
}

impl MetricRegistry {
    pub fn declare(&mut self, desc: types::MetricDesc) -> Result<u32, String> {
        if desc.name.trim().is_empty() {
            return Err("metric name must not be empty".into());
        }
        let kind = match desc.kind {
            types::MetricKind::Gauge => MetricKind::Gauge,
            types::MetricKind::Counter => MetricKind::Counter,
            types::MetricKind::UpdownCounter => MetricKind::UpDownCounter,
        };
        let attributes = convert_attrs(desc.attributes);
        let key = (desc.name.clone(), format!("{attributes:?}"));
        if let Some(&h) = self.index.get(&key) {
            let existing = &self.series[h as usize];
            if existing.kind != kind {
                return Err(format!(
                    "metric {} was declared as {:?} before; it cannot also be {:?}",
                    desc.name, existing.kind, kind
                ));
            }
            return Ok(h);
        }
        if let Some(other) = self.series.iter().find(|s| s.name == desc.name && s.kind != kind) {
            return Err(format!(
                "metric {} was declared as {:?} before; it cannot also be {:?}",
                desc.name, other.kind, kind
            ));
        }
        if self.series.len() >= 100_000 {
            return Err("too many metric series (100000); is an unbounded value in the attributes?".into());
        }
        let h = self.series.len() as u32;
        self.series.push(Arc::new(MetricSeries {
            name: desc.name,
            description: desc.description,
            unit: desc.unit,
            kind,
            attributes,
            start_time_ns: now_ns(),
        }));
        self.index.insert(key, h);
        Ok(h)
    }

    pub fn get(&self, handle: u32) -> Option<&Arc<MetricSeries>> {
        self.series.get(handle as usize)
    }

    pub fn len(&self) -> usize {
        self.series.len()
    }

    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }
}

/// The plugin's timers, fired by its thread. A repeating timer fires on
/// multiples of its period on the monotonic clock, the grid the sampler's
/// deadlines lie on: a 1 s timer falls on a sampler tick, and that tick wakes
/// the plugin's thread for it (`super::beat`), so the thread has no wake-up of
/// its own (the first time at least its period after it was set, then every
/// period).
#[derive(Default)]
pub struct Timers {
    next_id: u64,
    /// (deadline, id); cancelled ids are skipped when they come up.
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    live: HashMap<u64, Option<Duration>>,
}

impl Timers {
    /// A timer due `after` from `now` (the plugin's clock), repeating or not.
    /// `on_sampler_grid`: a repeating timer is put on the monotonic clock's
    /// grid (the wall clock's timers; a replay's recorded clock has no
    /// sampler to meet, and its timers must fire at the same recorded times
    /// in every replay).
    pub fn set(&mut self, now: Instant, after: Duration, repeat: bool, on_sampler_grid: bool) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        // A repeating timer of 0 ms would spin: give it at least 1 ms.
        let after = if repeat {
            after.max(Duration::from_millis(1))
        } else {
            after
        };
        self.live.insert(id, repeat.then_some(after));
        let at = if repeat && on_sampler_grid {
            on_grid(now, after)
        } else {
            now + after
        };
        self.heap.push(Reverse((at, id)));
        id
    }

    pub fn cancel(&mut self, id: u64) {
        self.live.remove(&id);
    }

    pub fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(Reverse((at, id))) = self.heap.peek().copied() {
            if self.live.contains_key(&id) {
                return Some(at);
            }
            self.heap.pop();
        }
        None
    }

    /// Pops one timer that is due, rescheduling it if it repeats.
    pub fn pop_due(&mut self, now: Instant) -> Option<u64> {
        let at = self.next_deadline()?;
        if at > now {
            return None;
        }
        let Reverse((at, id)) = self.heap.pop()?;
        match self.live.get(&id).copied() {
            Some(Some(every)) => {
                // Next deadline from the scheduled one, skipping any missed ones.
                let mut next = at + every;
                while next <= now {
                    next += every;
                }
                self.heap.push(Reverse((next, id)));
            }
            Some(None) => {
                self.live.remove(&id);
            }
            None => return self.pop_due(now),
        }
        Some(id)
    }

    /// When the plugin's thread must wake for its timers, given the sampling
    /// period while the sampler ticks (`beat`). Returns (the earliest timer the
    /// sampler's tick wakes the thread for, when the thread wakes on its own).
    /// A repeating timer at least as long as the sampling period is the
    /// tick's to wake: the thread's own wake-up for it waits two periods more,
    /// in case the sampler stalls (`beat` explains why).
    pub fn wakes(&self, sampling: Option<Duration>) -> (Option<Instant>, Option<Instant>) {
        let (mut driven, mut own) = (None::<Instant>, None::<Instant>);
        for Reverse((at, id)) in &self.heap {
            let Some(repeat) = self.live.get(id) else { continue };
            match (sampling, repeat) {
                (Some(p), Some(every)) if *every >= p => {
                    driven = Some(driven.map_or(*at, |d| d.min(*at)));
                    own = Some(own.map_or(*at + 2 * p, |o| o.min(*at + 2 * p)));
                }
                _ => own = Some(own.map_or(*at, |o| o.min(*at))),
            }
        }
        (driven, own)
    }

    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }
}

/// The first multiple of `every` on CLOCK_MONOTONIC (what `Instant` counts
/// in on Linux) that is at least `every` after `now`.
fn on_grid(now: Instant, every: Duration) -> Instant {
    if !cfg!(target_os = "linux") {
        return now + every;
    }
    let mono = u128::from(super::beat::monotonic_ns());
    let step = every.as_nanos().max(1);
    let due = (mono + step).div_ceil(step) * step;
    now + Duration::from_nanos((due - mono) as u64)
}

pub fn convert_attrs(attrs: Vec<types::Attribute>) -> Attributes {
    attrs
        .into_iter()
        .map(|a| {
            let v = match a.value {
                types::Value::Str(s) => AttrValue::Str(s),
                types::Value::Int(i) => AttrValue::Int(i),
                types::Value::Float(f) => AttrValue::Float(f),
                types::Value::Boolean(b) => AttrValue::Bool(b),
            };
            (a.key, v)
        })
        .collect()
}

pub fn convert_severity(s: types::Severity) -> Severity {
    match s {
        types::Severity::Trace => Severity::Trace,
        types::Severity::Debug => Severity::Debug,
        types::Severity::Info => Severity::Info,
        types::Severity::Warn => Severity::Warn,
        types::Severity::Error => Severity::Error,
    }
}

impl types::Host for PluginState {}

impl host::Host for PluginState {
    fn log(&mut self, level: types::Severity, message: String) {
        let plugin = self.name.as_str();
        match level {
            types::Severity::Trace => tracing::trace!(plugin, "{message}"),
            types::Severity::Debug => tracing::debug!(plugin, "{message}"),
            types::Severity::Info => tracing::info!(plugin, "{message}"),
            types::Severity::Warn => tracing::warn!(plugin, "{message}"),
            types::Severity::Error => tracing::error!(plugin, "{message}"),
        }
    }

    fn now(&mut self) -> u64 {
        self.clock.now_ns()
    }

    fn set_timer(&mut self, after_ms: u64, repeat: bool) -> u64 {
        self.timers.set(
            self.clock.instant(),
            Duration::from_millis(after_ms),
            repeat,
            matches!(self.clock, Clock::Wall),
        )
    }

    fn cancel_timer(&mut self, id: u64) {
        self.timers.cancel(id)
    }

    fn request_samples(&mut self, request: Option<types::SampleRequest>) {
        self.samples_changed = Some(request);
    }

    fn declare_metric(&mut self, desc: types::MetricDesc) -> Result<u32, String> {
        self.registry.declare(desc)
    }

    fn emit_points(&mut self, points: types::PointBatch) {
        let n = points.series.len();
        if points.time.len() != n || points.value.len() != n {
            self.outbox.bad_points += n as u64;
            return;
        }
        self.outbox.points.reserve(n);
        for i in 0..n {
            match self.registry.get(points.series[i]) {
                Some(s) => self.outbox.points.push(Point {
                    series: s.clone(),
                    time_ns: points.time[i],
                    value: points.value[i],
                }),
                None => self.outbox.bad_points += 1,
            }
        }
    }

    fn emit_logs(&mut self, records: Vec<types::LogRecord>) {
        self.outbox.logs.extend(records.into_iter().map(|r| LogRecord {
            time_ns: r.time,
            severity: convert_severity(r.severity),
            event_name: r.event_name,
            body: r.body,
            attributes: convert_attrs(r.attributes),
        }));
    }

    fn emit_decision(&mut self, d: types::Decision) {
        self.outbox.decisions.push(d);
    }

    fn open_sink(&mut self, spec: types::SinkSpec) -> Result<u32, String> {
        let format = match spec.format {
            types::SinkFormat::Tsv => SinkFormat::Tsv,
            types::SinkFormat::Csv => SinkFormat::Csv,
            types::SinkFormat::Raw => SinkFormat::Raw,
        };
        let mode = match spec.mode {
            types::SinkMode::Append => SinkMode::Append,
            types::SinkMode::Replace => SinkMode::Replace,
        };
        if self.sinks.len() >= 64 {
            return Err("too many sinks open (64)".into());
        }
        let default = match spec.default_dir {
            Some(d) => Some(DefaultDir::new(d.env, d.dir).map_err(|e| e.to_string())?),
            None => None,
        };
        let dir = crate::sinks::resolve(&self.sinks_cfg, &self.name, default.as_ref(), |k| std::env::var(k).ok());
        let opened = Sink::open(&dir.path, &spec.name, format, mode, spec.columns).map_err(|e| e.to_string());
        self.outbox.sinks.push(super::SinkStatus {
            name: spec.name,
            dir: dir.path.display().to_string(),
            from: dir.source,
            error: opened.as_ref().err().cloned(),
        });
        let sink = opened?;
        tracing::info!(plugin = %self.name, path = %sink.path().display(), "sink opened");
        self.sinks.push(sink);
        Ok(self.sinks.len() as u32 - 1)
    }

    fn write_rows(&mut self, sink: u32, columns: Vec<types::Column>) -> Result<(), String> {
        let s = self
            .sinks
            .get_mut(sink as usize)
            .ok_or_else(|| format!("no sink with handle {sink}"))?;
        let cols: Vec<Column> = columns
            .into_iter()
            .map(|c| match c {
                types::Column::U64s(v) => Column::U64(v),
                types::Column::S64s(v) => Column::S64(v),
                types::Column::F64s(v) => Column::F64(v),
                types::Column::Strings(v) => Column::Str(v),
            })
            .collect();
        let t0 = Instant::now();
        let r = s.write_rows(&cols).map_err(|e| e.to_string());
        self.io.spent += t0.elapsed();
        r
    }

    fn write_bytes(&mut self, sink: u32, data: Vec<u8>) -> Result<(), String> {
        let s = self
            .sinks
            .get_mut(sink as usize)
            .ok_or_else(|| format!("no sink with handle {sink}"))?;
        let t0 = Instant::now();
        let r = s.write_bytes(&data).map_err(|e| e.to_string());
        self.io.spent += t0.elapsed();
        r
    }

    fn state_get(&mut self, key: String) -> Option<Vec<u8>> {
        self.timed(|me| {
            me.state.get(&key).unwrap_or_else(|e| {
                tracing::warn!(plugin = %me.name, "state-get {key:?} failed: {e:#}");
                None
            })
        })
    }

    fn state_put(&mut self, key: String, value: Vec<u8>) -> Result<(), String> {
        self.timed(|me| me.state.put(&key, &value).map_err(|e| format!("{e:#}")))
    }

    fn state_delete(&mut self, key: String) {
        self.timed(|me| {
            if let Err(e) = me.state.delete(&key) {
                tracing::warn!(plugin = %me.name, "state-delete {key:?} failed: {e:#}");
            }
        })
    }

    fn state_keys(&mut self, prefix: String) -> Vec<String> {
        self.timed(|me| {
            me.state.keys(&prefix).unwrap_or_else(|e| {
                tracing::warn!(plugin = %me.name, "state-keys failed: {e:#}");
                Vec::new()
            })
        })
    }

    fn state_append(&mut self, stream: String, record: Vec<u8>) -> Result<u64, String> {
        self.timed(|me| me.state.append(&stream, &record).map_err(|e| format!("{e:#}")))
    }

    fn state_read(&mut self, stream: String, from: u64, max: u32) -> Vec<(u64, Vec<u8>)> {
        self.timed(|me| {
            me.state.read(&stream, from, max.min(10_000)).unwrap_or_else(|e| {
                tracing::warn!(plugin = %me.name, "state-read failed: {e:#}");
                Vec::new()
            })
        })
    }

    fn state_trim(&mut self, stream: String, before: u64) {
        self.timed(|me| {
            if let Err(e) = me.state.trim(&stream, before) {
                tracing::warn!(plugin = %me.name, "state-trim failed: {e:#}");
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(name: &str, kind: types::MetricKind, attr: Option<(&str, &str)>) -> types::MetricDesc {
        types::MetricDesc {
            name: name.into(),
            description: String::new(),
            unit: "1".into(),
            kind,
            attributes: attr
                .map(|(k, v)| {
                    vec![types::Attribute {
                        key: k.into(),
                        value: types::Value::Str(v.into()),
                    }]
                })
                .unwrap_or_default(),
        }
    }

    #[test]
    fn registry_dedups_and_checks_kinds() {
        let mut r = MetricRegistry::default();
        let a = r
            .declare(desc("m", types::MetricKind::Gauge, Some(("k", "1"))))
            .unwrap();
        let b = r
            .declare(desc("m", types::MetricKind::Gauge, Some(("k", "2"))))
            .unwrap();
        assert_ne!(a, b);
        assert_eq!(
            r.declare(desc("m", types::MetricKind::Gauge, Some(("k", "1"))))
                .unwrap(),
            a
        );
        assert!(
            r.declare(desc("m", types::MetricKind::Counter, Some(("k", "3"))))
                .is_err()
        );
        assert!(r.declare(desc(" ", types::MetricKind::Gauge, None)).is_err());
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn repeating_timers_fire_on_the_grid_of_their_period() {
        let mut t = Timers::default();
        let a = t.set(Instant::now(), Duration::from_millis(100), true, true);
        std::thread::sleep(Duration::from_millis(7));
        let set_b = Instant::now();
        t.set(Instant::now(), Duration::from_millis(100), true, true);
        let first = t.next_deadline().unwrap();
        let due: Vec<Instant> = t.heap.iter().map(|r| r.0.0).collect();
        // Both on the same 100 ms grid, whenever they were set (unless the
        // 7 ms straddled a grid line), and never sooner than asked. (Within
        // 1 ms: an Instant is placed from the raw clock read a moment apart.)
        let apart = (due[0].max(due[1]) - due[0].min(due[1])).as_micros();
        assert!(apart < 1_000 || (99_000..101_000).contains(&apart), "{apart} µs apart");
        assert!(
            due.iter()
                .all(|d| *d >= set_b + Duration::from_millis(100) - Duration::from_millis(7))
        );
        assert!(first <= set_b + Duration::from_millis(200));
        // Then every period, on the same grid.
        let id = t.pop_due(first).unwrap();
        assert!(id == a || id == a + 1);
        assert!(t.heap.iter().any(|r| r.0.0 == first + Duration::from_millis(100)));
    }

    #[test]
    fn timers_fire_in_order_repeat_and_cancel() {
        let mut t = Timers::default();
        let t0 = Instant::now();
        let once = t.set(t0, Duration::from_millis(0), false, false);
        let every = t.set(t0, Duration::from_millis(10), true, false);
        let gone = t.set(t0, Duration::from_millis(5), false, false);
        t.cancel(gone);
        let now = t0 + Duration::from_millis(25);
        let mut fired = Vec::new();
        while let Some(id) = t.pop_due(now) {
            fired.push(id);
        }
        // The repeating timer fires once per pop and is then rescheduled past `now`.
        assert_eq!(fired, vec![once, every]);
        assert_eq!(t.len(), 1);
        assert!(t.next_deadline().unwrap() > now);
        t.cancel(every);
        assert_eq!(t.next_deadline(), None);
    }

    #[test]
    fn the_sampler_wakes_the_thread_for_long_repeating_timers_only() {
        let mut t = Timers::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        t.set(t0, ms(500), true, false);
        t.set(t0, ms(50), true, false);
        // Without a sampler, or sampling slower than the 50 ms timer: all its own.
        assert_eq!(t.wakes(None), (None, Some(t0 + ms(50))));
        assert_eq!(t.wakes(Some(ms(1000))), (None, Some(t0 + ms(50))));
        // Sampling every 100 ms: the 500 ms timer is the tick's, the 50 ms one the thread's.
        assert_eq!(t.wakes(Some(ms(100))), (Some(t0 + ms(500)), Some(t0 + ms(50))));
        // Only the 500 ms timer left: the thread's own wake-up is two periods after it.
        let mut only_slow = Timers::default();
        only_slow.set(t0, ms(500), true, false);
        assert_eq!(only_slow.wakes(Some(ms(100))), (Some(t0 + ms(500)), Some(t0 + ms(700))));
        // A one-shot timer is never the tick's, however long.
        only_slow.set(t0, ms(600), false, false);
        assert_eq!(only_slow.wakes(Some(ms(100))), (Some(t0 + ms(500)), Some(t0 + ms(600))));
    }
}
