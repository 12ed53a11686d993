//! testbed: one component for the host's tests and benchmarks, whose
//! behaviour is chosen by the `mode` setting or by its plugin name
//! (see `config::Mode::from_plugin_name`).
//!
//! - noop: asks for nothing, every hook returns at once (call overhead).
//! - sum: sums every sampled value, emits `testbed.sum` (per-item cost).
//! - echo: calls every host import; routes over the state store (host checks);
//!   declares the event table `testbed_rows` and counts its rows with the rest.
//! - spin: loops forever in on-samples, on-timer and on-request (deadlines).
//! - membomb: allocates 1 MiB chunks forever in on-samples (memory cap).
//! - trap: panics in every hook but start (trap containment, quarantine).
//! - failstart: start refuses (start failures).
//! - passthrough: re-emits every received point as its own metric series
//!   (the OTLP pipeline benchmark: receive -> plugin -> export).
//!
//! `config` and `routes` are plain Rust with native tests; this file is the
//! glue that calls the host.

pub mod config;
pub mod routes;

use std::hint::black_box;
use std::sync::atomic::{AtomicU8, Ordering};

use sonde_plugin_sdk::types::SeriesKind;
use sonde_plugin_sdk::types::{
    Column, Decision, EventBatch, HttpRequest, HttpResponse, LogRecord, Manifest, MetricDesc, MetricKind, PointBatch,
    SampleBatch, Severity, SinkFormat, SinkMode, SinkSpec, StartInfo, Timestamp,
};
use sonde_plugin_sdk::{Guest, InstanceCell, MetricRegistry, PointBuffer, SampleView, host};

use crate::config::{Mode, Settings, resolve_mode};
use crate::routes::{Route, count_events, parse_count, records_json, route};

/// The mode, outside the state lock so noop's hooks cost one load (0 = not started).
static MODE: AtomicU8 = AtomicU8::new(0);
static STATE: InstanceCell<Testbed> = InstanceCell::new();

const TRAP_MESSAGE: &str = "testbed trap mode: deliberate trap";
/// Key in the host's state store counting echo's timer firings.
const TIMER_COUNT_KEY: &str = "timer_count";

fn mode() -> Option<Mode> {
    Mode::from_u8(MODE.load(Ordering::Relaxed))
}

struct Testbed {
    mode: Mode,
    restarts: u32,
    settings: Settings,
    /// Output handles; which ones exist depends on the mode.
    samples_metric: Option<u32>,
    events_metric: Option<u32>,
    sum_metric: Option<u32>,
    /// Echo's sink, or why it could not be opened (reported by on-samples).
    sink: Option<Result<u32, String>>,
    timer: Option<u64>,
    /// Passthrough's declared series (by name and attributes) and its output.
    registry: MetricRegistry,
    points: PointBuffer,
}

fn gauge(name: &str, unit: &str, description: &str) -> Result<u32, String> {
    host::declare_metric(&MetricDesc::new(name, MetricKind::Gauge, unit, description))
}

fn open_sink(name: &str) -> Result<u32, String> {
    host::open_sink(&SinkSpec {
        name: name.to_string(),
        format: SinkFormat::Tsv,
        mode: SinkMode::Append,
        columns: vec!["t".into(), "name".into(), "value".into()],
        default_dir: None,
    })
    .map_err(|e| format!("sink `{name}`: {e}"))
}

fn emit_one(handle: u32, time: Timestamp, value: f64) {
    host::emit_points(&PointBatch {
        series: vec![handle],
        time: vec![time],
        value: vec![value],
    });
}

fn spin_forever() -> ! {
    let mut x: u64 = 0;
    loop {
        // black_box keeps the loop from being proven side-effect free.
        x = black_box(x.wrapping_add(1));
    }
}

fn membomb() -> ! {
    const MIB: usize = 1 << 20;
    const PAGE: usize = 4096;
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        // Fresh wasm pages are already zero, so the zeroed allocation alone may
        // never touch them; writing one byte per page commits them for real.
        let mut chunk = vec![0u8; MIB];
        for i in (0..MIB).step_by(PAGE) {
            chunk[i] = 0xA5;
        }
        hoard.push(black_box(chunk));
    }
}

fn trap() -> ! {
    panic!("{TRAP_MESSAGE}")
}

impl Testbed {
    fn start(mode: Mode, info: &StartInfo, settings: Settings) -> Result<Testbed, String> {
        let mut tb = Testbed {
            mode,
            restarts: info.restarts,
            settings,
            samples_metric: None,
            events_metric: None,
            sum_metric: None,
            sink: None,
            timer: None,
            registry: MetricRegistry::new(),
            points: PointBuffer::new(),
        };
        match mode {
            Mode::Sum => {
                tb.sum_metric = Some(gauge(
                    "testbed.sum",
                    "1",
                    "Sum of every value in the last sample batch",
                )?);
            }
            Mode::Echo => {
                tb.samples_metric = Some(gauge("testbed.samples", "{tick}", "Ticks in the last sample batch")?);
                tb.events_metric = Some(gauge("testbed.events", "{event}", "Events in the last event batch")?);
                tb.sink = Some(open_sink(&tb.settings.sink));
            }
            _ => {}
        }
        // noop asks for nothing at all, timers included.
        if mode != Mode::Noop {
            tb.set_timer();
        }
        Ok(tb)
    }

    fn set_timer(&mut self) {
        if let Some(id) = self.timer.take() {
            host::cancel_timer(id);
        }
        if self.settings.timer_ms > 0 {
            self.timer = Some(host::set_timer(self.settings.timer_ms, true));
        }
    }

    fn manifest(&self) -> Manifest {
        Manifest {
            version: env!("CARGO_PKG_VERSION").to_string(),
            description: format!("sonde testbed in {} mode", self.mode.name()),
            samples: self.mode.sample_request(&self.settings),
            events: self.mode.event_kinds(),
            tables: self.mode.tables(&self.settings),
            reads: Vec::new(),
        }
    }

    fn configure(&mut self, new: Settings) -> Result<(), String> {
        if let Some(asked) = new.mode.filter(|&m| m != self.mode) {
            return Err(format!(
                "setting `mode`: cannot change from {} to {} while running (reload the plugin)",
                self.mode.name(),
                asked.name()
            ));
        }
        let old = std::mem::replace(&mut self.settings, new);
        if self.mode.sample_request(&old) != self.mode.sample_request(&self.settings) {
            host::request_samples(self.mode.sample_request(&self.settings).as_ref());
        }
        if old.timer_ms != self.settings.timer_ms {
            self.set_timer();
        }
        if self.mode == Mode::Echo && old.sink != self.settings.sink {
            self.sink = Some(open_sink(&self.settings.sink));
        }
        Ok(())
    }

    fn on_samples(&mut self, batch: &SampleBatch) -> Result<(), String> {
        match self.mode {
            Mode::Sum => {
                let sum: f64 = batch.values.iter().copied().filter(|v| !v.is_nan()).sum();
                let time = batch.timestamps.last().copied().unwrap_or_else(host::now);
                emit_one(self.sum_metric.expect("declared in start"), time, sum);
                Ok(())
            }
            Mode::Echo => {
                // Checking the layout lets host tests see a malformed batch as an error.
                let view = SampleView::new(batch)?;
                let ticks = view.ticks() as f64;
                let time = batch.timestamps.last().copied().unwrap_or_else(host::now);
                emit_one(self.samples_metric.expect("declared in start"), time, ticks);
                let sink = self.sink.clone().expect("opened in start")?;
                host::write_rows(
                    sink,
                    &[
                        Column::U64s(vec![time]),
                        Column::Strings(vec!["samples".into()]),
                        Column::F64s(vec![ticks]),
                    ],
                )
                .map_err(|e| format!("sink `{}`: {e}", self.settings.sink))
            }
            _ => Ok(()),
        }
    }

    fn on_events(&mut self, batch: &EventBatch) -> Result<(), String> {
        if self.mode == Mode::Passthrough {
            return self.pass_points(batch);
        }
        if self.mode != Mode::Echo {
            return Ok(());
        }
        emit_one(
            self.events_metric.expect("declared in start"),
            host::now(),
            count_events(batch) as f64,
        );
        let records: Vec<LogRecord> = batch
            .custom
            .iter()
            .map(|ev| LogRecord {
                time: ev.time,
                severity: Severity::Info,
                event_name: "testbed.custom".to_string(),
                body: ev.name.clone(),
                attributes: ev.attributes.clone(),
            })
            .collect();
        if !records.is_empty() {
            host::emit_logs(&records);
        }
        Ok(())
    }

    /// Every received point out again under its own metric name, unit and attributes.
    fn pass_points(&mut self, batch: &EventBatch) -> Result<(), String> {
        let Some(points) = &batch.points else { return Ok(()) };
        let mut handles = Vec::with_capacity(batch.point_series.len());
        for s in &batch.point_series {
            let kind = match s.kind {
                SeriesKind::Gauge => MetricKind::Gauge,
                SeriesKind::Counter => MetricKind::Counter,
            };
            let desc =
                MetricDesc::new(s.metric.clone(), kind, s.unit.clone(), "").with_attributes(s.attributes.clone());
            handles.push(self.registry.declare(&desc)?);
        }
        for ((&series, &time), &value) in points.series.iter().zip(&points.time).zip(&points.value) {
            let handle = *handles
                .get(series as usize)
                .ok_or("a point names a series the batch lacks")?;
            self.points.push(handle, time, value);
        }
        self.points.flush();
        Ok(())
    }

    fn on_timer(&mut self, id: u64) -> Result<(), String> {
        if self.mode != Mode::Echo {
            return Ok(());
        }
        // Kept in the host's store so the count survives re-instantiation.
        let count = parse_count(host::state_get(TIMER_COUNT_KEY).as_deref()) + 1;
        host::state_put(TIMER_COUNT_KEY, count.to_string().as_bytes())?;
        host::emit_decision(&Decision {
            kind: "timer".to_string(),
            subject: "testbed".to_string(),
            reason: format!("timer {id} fired"),
            body: format!("{{\"count\":{count}}}"),
            attributes: Vec::new(),
        });
        Ok(())
    }

    fn on_request(&mut self, req: &HttpRequest) -> HttpResponse {
        match route(&req.method, &req.path) {
            Route::GetState(key) => match host::state_get(key) {
                Some(value) => HttpResponse::with_body(200, "application/octet-stream", value),
                None => HttpResponse::error(404, &format!("no state key {key:?}")),
            },
            Route::PutState(key) => match host::state_put(key, &req.body) {
                Ok(()) => HttpResponse::empty(204),
                Err(e) => HttpResponse::error(500, &e),
            },
            Route::Append(stream) => match host::state_append(stream, &req.body) {
                Ok(seq) => HttpResponse::json(200, seq.to_string()),
                Err(e) => HttpResponse::error(500, &e),
            },
            Route::Read(stream) => {
                let number = |name: &str, default: u64| match req.query_param(name) {
                    None => Ok(default),
                    Some(v) => v
                        .parse::<u64>()
                        .map_err(|_| format!("query `{name}` must be an integer, got {v:?}")),
                };
                match (number("from", 0), number("max", 1000)) {
                    (Ok(from), Ok(max)) => {
                        let records = host::state_read(stream, from, max.min(u32::MAX as u64) as u32);
                        HttpResponse::json(200, records_json(&records))
                    }
                    (Err(e), _) | (_, Err(e)) => HttpResponse::error(400, &e),
                }
            }
            Route::Now => HttpResponse::json(200, host::now().to_string()),
            Route::Restarts => HttpResponse::json(200, self.restarts.to_string()),
            Route::Decision => match String::from_utf8(req.body.clone()) {
                Ok(body) => {
                    host::emit_decision(&Decision {
                        kind: req.query_param("kind").map_or("testbed".into(), |k| k.into_owned()),
                        subject: req.query_param("subject").map_or("testbed".into(), |s| s.into_owned()),
                        reason: "requested over HTTP".to_string(),
                        body,
                        attributes: Vec::new(),
                    });
                    HttpResponse::empty(204)
                }
                Err(_) => HttpResponse::error(400, "decision body must be UTF-8"),
            },
            Route::Config => HttpResponse::json(200, self.settings.raw.clone()),
            // Probes of the WASI sandbox: what the host granted, seen from inside.
            Route::WasiEnv(name) => match std::env::var(name) {
                Ok(v) => HttpResponse::text(200, &v),
                Err(e) => HttpResponse::error(403, &format!("env {name}: {e}")),
            },
            Route::WasiDir(path) => match std::fs::read_dir(path) {
                Ok(entries) => {
                    let mut names: Vec<String> = entries
                        .filter_map(|e| e.ok())
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect();
                    names.sort();
                    HttpResponse::json(200, serde_json::json!(names).to_string())
                }
                Err(e) => HttpResponse::error(403, &format!("dir {path}: {e}")),
            },
            Route::NotFound => HttpResponse::error(404, &format!("no route {} {}", req.method, req.path)),
        }
    }
}

struct TestbedPlugin;

impl Guest for TestbedPlugin {
    fn start(info: StartInfo) -> Result<Manifest, String> {
        let settings = Settings::parse(&info.settings)?;
        let mode = resolve_mode(&settings, &info.name);
        if mode == Mode::Failstart {
            return Err("testbed failstart mode: refusing to start".to_string());
        }
        let testbed = Testbed::start(mode, &info, settings)?;
        let manifest = testbed.manifest();
        STATE.set(testbed);
        MODE.store(mode as u8, Ordering::Relaxed);
        Ok(manifest)
    }

    fn configure(settings: String) -> Result<(), String> {
        match mode() {
            Some(Mode::Noop) => Ok(()),
            Some(Mode::Trap) => trap(),
            _ => {
                let new = Settings::parse(&settings)?;
                STATE.with(|tb| tb.configure(new))?
            }
        }
    }

    fn on_samples(batch: SampleBatch) -> Result<(), String> {
        match mode() {
            Some(Mode::Noop) => {
                // Touch the data so the host really lifts the batch.
                black_box(batch.values.len());
                Ok(())
            }
            Some(Mode::Spin) => spin_forever(),
            Some(Mode::Membomb) => membomb(),
            Some(Mode::Trap) => trap(),
            _ => STATE.with(|tb| tb.on_samples(&batch))?,
        }
    }

    fn on_events(batch: EventBatch) -> Result<(), String> {
        match mode() {
            Some(Mode::Noop) => Ok(()),
            Some(Mode::Trap) => trap(),
            _ => STATE.with(|tb| tb.on_events(&batch))?,
        }
    }

    fn on_timer(id: u64) -> Result<(), String> {
        match mode() {
            Some(Mode::Noop) => Ok(()),
            Some(Mode::Spin) => spin_forever(),
            Some(Mode::Trap) => trap(),
            _ => STATE.with(|tb| tb.on_timer(id))?,
        }
    }

    fn on_request(request: HttpRequest) -> HttpResponse {
        match mode() {
            Some(Mode::Noop) => HttpResponse::empty(204),
            Some(Mode::Spin) => spin_forever(),
            Some(Mode::Trap) => trap(),
            _ => STATE
                .with(|tb| tb.on_request(&request))
                .unwrap_or_else(|e| HttpResponse::error(503, &e)),
        }
    }

    fn stop() {
        if mode() == Some(Mode::Trap) {
            trap();
        }
        // Everything is emitted as it happens: nothing to flush.
    }
}

sonde_plugin_sdk::export!(TestbedPlugin);
