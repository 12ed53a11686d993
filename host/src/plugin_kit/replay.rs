//! `sonde plugin test FILE.wasm --events RECORDING`: a recording made by
//! `GET /api/record` run through one plugin, with no sonde running.
//!
//! The plugin runs in the host's own runtime, not a copy of it: the same
//! engine and compile cache (`plugin::engine`), the same linker, sandbox,
//! memory cap and call deadlines (`plugin::instance::drive`). What differs
//! is where its input comes from and where its output goes:
//!
//! ```text
//!  RECORDING, line by line ─► the clock moves to the line's time, firing the timers due before it
//!     series ─► the series table          tick ─► SampleAcc (the plugin's own period, metrics, batching) ─► on-samples
//!     events ─► the kinds and tables it subscribed to (manager::events_for) ─► on-events
//!  end of file ─► timers up to the recording's end, then each --route ─► on-request, then stop
//!  emitted ─► points, log records (output::Captured), decisions, files in a scratch sinks dir
//! ```
//!
//! Limits and honest differences: a trap ends the replay (a running host
//! would re-create the instance; here it is the answer). The state store
//! and the sinks directory start empty, in a scratch folder removed at the
//! end. Calls still have their real-time deadlines; only `now` and the
//! timers are on the recording's clock.

use std::collections::BTreeMap;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;

use crate::model::{AttrValue, Attributes, MetricKind, SeriesInfo, Severity};
use crate::plugin::bindings::types;
use crate::plugin::clock::{Clock, ReplayClock};
use crate::plugin::config::{PluginConfig, PluginsConfig, check_plugin_name};
use crate::plugin::engine::PluginEngine;
use crate::plugin::instance::{self, Driven, Shared, Work};
use crate::plugin::manager::{self, events_for};
use crate::plugin::output::{Captured, Output};
use crate::plugin::recording::{Header, Line, Reader};
use crate::plugin::tables::TableRegistry;
use crate::plugin::{DecisionBoard, DecisionEntry, PluginStatus, SamplePlan};

/// What to replay through what.
#[derive(Clone, Debug)]
pub struct TestRun {
    pub wasm: PathBuf,
    pub recording: PathBuf,
    /// The plugin's settings (`[plugin.<name>] settings`), a JSON object.
    pub settings: serde_json::Value,
    /// The plugin's name (default: the file name without `.wasm`).
    pub name: Option<String>,
    /// Requests to the plugin's routes after the replay: `/jobs`, `GET /jobs?job=a`.
    pub routes: Vec<String>,
    /// Where compiled plugins are cached between runs.
    pub cache_dir: PathBuf,
    /// `[plugins]` limits; the host's defaults unless changed.
    pub limits: PluginsConfig,
}

/// Why a replay could not run or did not finish. `Input` is the caller's
/// mistake (a file, a setting); `Plugin` is the plugin's (a refusal, a trap).
#[derive(Debug)]
pub enum TestError {
    Input(String),
    Plugin(String),
}

impl std::fmt::Display for TestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TestError::Input(s) | TestError::Plugin(s) => f.write_str(s),
        }
    }
}

/// Everything a replay shows.
#[derive(Debug, Serialize)]
pub struct Replayed {
    pub plugin: String,
    pub file: String,
    pub recording: RecordingSummary,
    pub delivered: Delivered,
    pub decisions: Vec<DecisionEntry>,
    pub points: Vec<EmittedPoint>,
    /// Log records the plugin emitted (decisions, which the host also
    /// exports as log records, are under `decisions` only).
    pub logs: Vec<EmittedLog>,
    /// Files the plugin wrote through its sinks, by name.
    pub sinks: BTreeMap<String, SinkFile>,
    pub routes: Vec<RouteAnswer>,
    /// The plugin's status at the end: version, contract, self-metrics (calls, memory, errors).
    pub status: PluginStatus,
    /// Set when the plugin trapped: why, and at which line of the recording.
    pub trap: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct RecordingSummary {
    pub file: String,
    pub header: Header,
    /// ns since the Unix epoch of the last line replayed.
    pub replayed_until_ns: u64,
    pub lines: usize,
}

/// What the plugin was handed, after its own subscriptions were applied.
#[derive(Debug, Default, Serialize)]
pub struct Delivered {
    pub sample_batches: u64,
    pub samples: u64,
    pub event_batches: u64,
    pub events: u64,
    pub timer_calls: u64,
}

#[derive(Debug, Serialize)]
pub struct EmittedPoint {
    pub time_ns: u64,
    pub metric: String,
    pub unit: String,
    pub kind: &'static str,
    pub attributes: serde_json::Map<String, serde_json::Value>,
    pub value: f64,
}

#[derive(Debug, Serialize)]
pub struct EmittedLog {
    pub time_ns: u64,
    pub severity: &'static str,
    pub event_name: String,
    pub body: String,
    pub attributes: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Serialize)]
pub struct SinkFile {
    pub bytes: u64,
    /// The file's text; None when it is not UTF-8.
    pub text: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct RouteAnswer {
    pub method: String,
    pub path: String,
    pub status: u16,
    /// The body: JSON when it parses as JSON, else text.
    pub body: serde_json::Value,
}

/// The folder compiled plugins are cached in when `--cache-dir` is not given.
pub fn default_cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("sonde").join("plugin-cache")
}

/// Replays the recording through the plugin.
pub fn run(t: &TestRun) -> Result<Replayed, TestError> {
    let input = |what: &Path, e: &dyn std::fmt::Display| TestError::Input(format!("{}: {e}", what.display()));
    let name = match &t.name {
        Some(n) => n.clone(),
        None => t
            .wasm
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string(),
    };
    check_plugin_name(&name).map_err(|e| TestError::Input(format!("{e}; name it with --name")))?;
    if !t.settings.is_object() {
        return Err(TestError::Input(format!(
            "--settings must be a JSON object, got {}",
            t.settings
        )));
    }
    let file = std::fs::File::open(&t.recording).map_err(|e| input(&t.recording, &e))?;
    let mut reader = Reader::new(BufReader::new(file)).map_err(|e| input(&t.recording, &e))?;
    let bytes = std::fs::read(&t.wasm).map_err(|e| input(&t.wasm, &e))?;

    let scratch = Scratch::new().map_err(|e| TestError::Input(format!("a scratch folder: {e}")))?;
    // wasmtime-wasi's synchronous bindings want an ambient runtime with a
    // worker of its own: a plugin writing to stderr blocks on a flush that
    // the runtime must run (a current-thread runtime would never get to it).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| TestError::Input(format!("starting a runtime: {e}")))?;
    let _rt = rt.enter();
    let clock = ReplayClock::new(reader.header.started_ns);
    let captured = Arc::new(Mutex::new(Captured::default()));
    let decisions = DecisionBoard::default();
    let seen: Arc<Mutex<Vec<DecisionEntry>>> = Default::default();
    {
        let seen = seen.clone();
        decisions.listen(Arc::new(move |d| seen.lock().push(d.clone())));
    }
    let engine = PluginEngine::new(&t.cache_dir).map_err(|e| TestError::Input(format!("{e:#}")))?;
    let linker = manager::linker(&engine).map_err(|e| TestError::Input(format!("{e:#}")))?;
    let state = crate::state::StateStore::open(&scratch.0.join("state.redb"))
        .map_err(|e| TestError::Input(format!("the scratch state store: {e:#}")))?;
    let sinks_dir = scratch.0.join("sinks");
    std::fs::create_dir_all(&sinks_dir).map_err(|e| input(&sinks_dir, &e))?;
    let shared = Shared {
        engine,
        linker: Arc::new(linker),
        output: Output::Capture(captured.clone()),
        clock: Clock::Replay(clock.clone()),
        state,
        decisions,
        // Every sink in the scratch folder, whatever default directory the plugin gives.
        sinks: crate::sinks::config::SinksConfig {
            dir: sinks_dir.clone(),
            plugins: [(
                name.clone(),
                crate::sinks::config::PluginSinkDir {
                    env: String::new(),
                    dir: sinks_dir.clone(),
                },
            )]
            .into(),
        },
        tables: Arc::new(TableRegistry::default()),
        plan: Arc::new(SamplePlan::new(reader.header.period_ms)),
        beat: Default::default(),
        rt: Some(rt.handle().clone()),
    };
    let prepared = manager::prepare(&shared, &name, &t.wasm, &bytes).map_err(|e| input(&t.wasm, &e))?;
    let cfg = PluginConfig {
        settings: t.settings.clone(),
        ..Default::default()
    };
    let mut plugin = instance::drive(prepared, cfg, &t.limits, shared)
        .map_err(|e| TestError::Plugin(format!("plugin {name} did not start: {e}")))?;

    let mut delivered = Delivered::default();
    let mut series: Vec<SeriesInfo> = Vec::new();
    let mut table: Arc<[SeriesInfo]> = Arc::from(Vec::new());
    let mut until = reader.header.started_ns;
    let mut trap = None;
    let mut lines = 0;
    let mut ended = None;
    while let Some(line) = reader.next_line().map_err(|e| input(&t.recording, &e))? {
        lines += 1;
        let at = match &line {
            Line::Header(_) => unreachable!("the reader refuses a second header"),
            Line::Series(s) => s.time_ns,
            Line::Tick(k) => k.time_ns,
            Line::Events(e) => e.time_ns,
            Line::End(end) => end.ended_ns,
        };
        until = until.max(at);
        let fired = advance(&mut plugin, &clock, at);
        delivered.timer_calls += fired;
        if !plugin.is_running() {
            trap = Some(format!("in on-timer before line {}", reader.line_no));
            break;
        }
        let hook = match line {
            Line::Header(_) => unreachable!(),
            Line::Series(s) => {
                for info in s.series.iter() {
                    if info.id as usize != series.len() {
                        return Err(input(
                            &t.recording,
                            &format!(
                                "line {}: series id {} out of order (expected {})",
                                reader.line_no,
                                info.id,
                                series.len()
                            ),
                        ));
                    }
                    series.push(info.clone());
                }
                table = Arc::from(series.clone());
                None
            }
            Line::Tick(k) => plugin.samples(&Arc::new(k.into_owned()), &table).map(|b| {
                delivered.sample_batches += 1;
                delivered.samples += b.values.len() as u64;
                plugin.handle(Work::Samples(b));
                "on-samples"
            }),
            Line::Events(e) => events_for(&e.batch, &plugin.wants_events()).map(|(b, n)| {
                delivered.event_batches += 1;
                delivered.events += n;
                plugin.handle(Work::Events(Box::new(b), n));
                "on-events"
            }),
            Line::End(end) => {
                ended = Some(end.ended_ns);
                None
            }
        };
        if let Some(hook) = hook
            && !plugin.is_running()
        {
            trap = Some(format!("in {hook} at line {}", reader.line_no));
            break;
        }
    }
    if trap.is_none() {
        if ended.is_none() {
            tracing::warn!("the recording has no end line: it was cut short; replayed what it holds");
        }
        delivered.timer_calls += advance(&mut plugin, &clock, until);
        if !plugin.is_running() {
            trap = Some("in on-timer at the end of the recording".into());
        }
    }
    let mut routes = Vec::new();
    if trap.is_none() {
        for r in &t.routes {
            let answer = ask(&mut plugin, r)?;
            routes.push(answer);
            if !plugin.is_running() {
                trap = Some(format!("in on-request for {r}"));
                break;
            }
        }
    }
    if trap.is_none() {
        plugin.stop();
    }
    let status = plugin.status();
    let trap = trap.map(|at| {
        format!(
            "plugin {name} trapped {at}: {}",
            status.last_trap.as_deref().unwrap_or("no reason given")
        )
    });
    drop(plugin);
    let captured = std::mem::take(&mut *captured.lock());
    Ok(Replayed {
        plugin: name,
        file: t.wasm.display().to_string(),
        recording: RecordingSummary {
            file: t.recording.display().to_string(),
            header: reader.header.clone(),
            replayed_until_ns: until,
            lines,
        },
        delivered,
        decisions: std::mem::take(&mut *seen.lock()),
        points: captured.points.iter().map(point).collect(),
        logs: captured
            .logs
            .iter()
            .filter(|l| l.event_name != "sonde.decision")
            .map(log)
            .collect(),
        sinks: sink_files(&sinks_dir),
        routes,
        status,
        trap,
    })
}

/// Moves the clock to `to`, firing each timer at its own time on the way;
/// returns how many timer calls that made. Stops early if the plugin traps.
fn advance(plugin: &mut Driven, clock: &ReplayClock, to: u64) -> u64 {
    let mut calls = 0;
    while let Some(due) = plugin.next_timer() {
        let at = clock.ns_at(due);
        if at > to {
            break;
        }
        clock.advance_to(at);
        let before = plugin.status().metrics.calls;
        plugin.fire_due_timers();
        calls += plugin.status().metrics.calls - before;
        if !plugin.is_running() {
            return calls;
        }
    }
    clock.advance_to(to);
    calls
}

/// One `--route`: `PATH` (a GET) or `METHOD PATH`, the path with its query.
fn ask(plugin: &mut Driven, route: &str) -> Result<RouteAnswer, TestError> {
    let (method, target) = match route.trim().split_once(' ') {
        Some((m, p)) => (m.to_ascii_uppercase(), p.trim().to_string()),
        None => ("GET".to_string(), route.trim().to_string()),
    };
    if !target.starts_with('/') {
        return Err(TestError::Input(format!(
            "--route {route:?}: give the plugin's own path, starting with / (e.g. /jobs, or \"POST /tasks/next\")"
        )));
    }
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    let req = types::HttpRequest {
        method: method.clone(),
        path: path.to_string(),
        query: query.to_string(),
        headers: Vec::new(),
        body: Vec::new(),
    };
    plugin.handle(Work::Request(req, tx));
    let resp = rx
        .try_recv()
        .map_err(|_| TestError::Plugin(format!("{route}: the plugin gave no answer")))?;
    let body = serde_json::from_slice(&resp.body)
        .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(&resp.body).into_owned()));
    Ok(RouteAnswer {
        method,
        path: target,
        status: resp.status,
        body,
    })
}

fn attributes(attrs: &Attributes) -> serde_json::Map<String, serde_json::Value> {
    attrs
        .iter()
        .map(|(k, v)| {
            let v = match v {
                AttrValue::Str(s) => serde_json::Value::from(s.as_str()),
                AttrValue::Int(i) => (*i).into(),
                AttrValue::Float(f) => (*f).into(),
                AttrValue::Bool(b) => (*b).into(),
            };
            (k.clone(), v)
        })
        .collect()
}

fn point(p: &crate::model::Point) -> EmittedPoint {
    EmittedPoint {
        time_ns: p.time_ns,
        metric: p.series.name.clone(),
        unit: p.series.unit.clone(),
        kind: match p.series.kind {
            MetricKind::Gauge => "gauge",
            MetricKind::Counter => "counter",
            MetricKind::UpDownCounter => "updown_counter",
        },
        attributes: attributes(&p.series.attributes),
        value: p.value,
    }
}

fn log(l: &crate::model::LogRecord) -> EmittedLog {
    EmittedLog {
        time_ns: l.time_ns,
        severity: match l.severity {
            Severity::Trace => "trace",
            Severity::Debug => "debug",
            Severity::Info => "info",
            Severity::Warn => "warn",
            Severity::Error => "error",
        },
        event_name: l.event_name.clone(),
        body: l.body.clone(),
        attributes: attributes(&l.attributes),
    }
}

fn sink_files(dir: &Path) -> BTreeMap<String, SinkFile> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        if let Ok(bytes) = std::fs::read(e.path()) {
            out.insert(
                name,
                SinkFile {
                    bytes: bytes.len() as u64,
                    text: String::from_utf8(bytes).ok(),
                },
            );
        }
    }
    out
}

/// A scratch folder for the state store and the sinks, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> std::io::Result<Scratch> {
        let dir = std::env::temp_dir().join(format!(
            "sonde-plugin-test-{}-{}",
            std::process::id(),
            crate::model::now_ns()
        ));
        std::fs::create_dir_all(&dir)?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
