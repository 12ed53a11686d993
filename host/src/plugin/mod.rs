//! plugin/: the Wasm plugin runtime.
//!
//! - `bundled`:  the plugins the binary carries, written into a plugins directory
//! - `config`:   `[plugins]` and `[plugin.<name>]` settings, grants, plugin names
//! - `engine`:   the wasmtime engine, compile cache, contract check
//! - `deadline`: the clock of call deadlines (advances the epoch only when a call is late)
//! - `bindings`: host-side types generated from `wit/sonde-plugin.wit` (contract 0.2)
//! - `v0_1`:     contract 0.1 (the frozen `wit/0.1/`): its bindings and the adapter
//! - `world`:    a plugin of either version behind one set of calls
//! - `tables`:   event tables plugins declare, and the registry the ingest reads
//! - `host_api`: store data and the `host` functions plugins call
//! - `beat`:     the sampler's tick waking plugin threads for their timers
//! - `clock`:    the time plugins see (wall clock, or a recording's under `sonde plugin test`)
//! - `output`:   where emitted points and log records go (the pipeline, or a capture)
//! - `limits`:   what the host enforces (the WIT manual's section): memory cap, call deadlines, trap and queue limits
//! - `mailbox`:  a plugin thread's bounded queue of work, which sleeps without spinning
//! - `sandbox`:  WASI capabilities (denied unless granted) and stdio capture
//! - `instance`: one plugin's thread: calls, traps, backoff, quarantine, samples
//! - `manager`:  the set of plugins: directory loading and watching, fan-out, routes
//! - `recording`: the tap behind `GET /api/record` and the recording's file format
//! - `metrics`:  per-plugin self-metrics
//! - `decisions`: the latest decision per subject, and a job's findings, kept across restarts
//!
//! Depends on `sample` (tick types), `pipeline` (where output goes), `state`
//! and `sinks`; nothing here depends on `api`.

pub mod beat;
pub mod bindings;
pub mod bundled;
pub mod clock;
pub mod config;
pub mod deadline;
pub mod decisions;
pub mod engine;
pub mod host_api;
pub mod instance;
pub mod limits;
pub mod mailbox;
pub mod manager;
pub mod metrics;
pub mod output;
pub mod recording;
pub mod sandbox;
pub mod tables;
pub mod v0_1;
pub mod world;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use parking_lot::Mutex;
use serde::Serialize;

pub use decisions::{DecisionBoard, DecisionEntry, DecisionListener, Finding};
pub use manager::PluginManager;

/// Where a plugin is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    Running,
    /// Trapped; will be re-instantiated when the backoff ends.
    Backoff,
    /// Trapped too often; stays off until reloaded or its file changes.
    Quarantined,
    /// Could not be loaded or refused to start; see `reason`.
    Failed,
    Disabled,
    Stopped,
}

impl RunState {
    pub fn as_str(&self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Backoff => "backoff",
            RunState::Quarantined => "quarantined",
            RunState::Failed => "failed",
            RunState::Disabled => "disabled",
            RunState::Stopped => "stopped",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SampleSub {
    pub period_ms: u32,
    pub deliver_every_ms: u32,
    pub metrics: Vec<String>,
}

/// One file sink a plugin opened: its directory and where that came from
/// (`crate::sinks::resolve`), or why it did not open.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SinkStatus {
    pub name: String,
    pub dir: String,
    pub from: String,
    pub error: Option<String>,
}

/// What the API shows about one plugin.
#[derive(Clone, Debug, Serialize)]
pub struct PluginStatus {
    pub name: String,
    pub file: String,
    pub sha256: String,
    /// The contract version the component was built against.
    pub contract: String,
    pub state: RunState,
    /// Why it is not running (failed, backoff, quarantined).
    pub reason: Option<String>,
    pub version: Option<String>,
    pub description: Option<String>,
    pub samples: Option<SampleSub>,
    pub events: Vec<String>,
    /// Event tables it declares, and tables of other plugins it reads.
    pub tables: Vec<String>,
    pub reads: Vec<String>,
    /// Its file sinks: where each went, or why it could not open.
    pub sinks: Vec<SinkStatus>,
    pub restarts: u32,
    pub traps: u64,
    pub last_trap: Option<String>,
    pub last_trap_at_ns: u64,
    /// The latest `err` a hook returned.
    pub last_error: Option<String>,
    /// Set when a newer file for this plugin was rejected; the old one keeps running.
    pub update_rejected: Option<String>,
    pub started_at_ns: u64,
    /// Whether the compiled code came from the on-disk cache, and how long
    /// compiling (or loading) and starting took.
    pub compiled_from_cache: bool,
    pub load_ms: f64,
    pub metrics: metrics::MetricsSnapshot,
}

impl PluginStatus {
    pub fn new(name: &str, file: &Path, sha256: &str, contract: &str) -> Self {
        Self {
            name: name.to_string(),
            file: file.display().to_string(),
            sha256: sha256.to_string(),
            contract: contract.to_string(),
            state: RunState::Stopped,
            reason: None,
            version: None,
            description: None,
            samples: None,
            events: Vec::new(),
            tables: Vec::new(),
            reads: Vec::new(),
            sinks: Vec::new(),
            restarts: 0,
            traps: 0,
            last_trap: None,
            last_trap_at_ns: 0,
            last_error: None,
            update_rejected: None,
            started_at_ns: 0,
            compiled_from_cache: false,
            load_ms: 0.0,
            metrics: Default::default(),
        }
    }

    pub fn failed(name: &str, file: &Path, sha256: &str, reason: String) -> Self {
        let mut s = Self::new(name, file, sha256, "");
        s.state = RunState::Failed;
        s.reason = Some(reason);
        s
    }
}

/// The host samples once, at the fastest period anyone asked for.
pub struct SamplePlan {
    /// The configured period (`sampler.period_ms`); changed live by `set_base`.
    base_ms: AtomicU32,
    wanted: Mutex<HashMap<String, u32>>,
    /// Read by the sampler thread before each sleep.
    pub period_ms: Arc<AtomicU32>,
}

impl SamplePlan {
    pub fn new(base_ms: u32) -> Self {
        Self {
            base_ms: AtomicU32::new(base_ms),
            wanted: Mutex::new(HashMap::new()),
            period_ms: Arc::new(AtomicU32::new(base_ms)),
        }
    }

    /// Records what one plugin wants (None: nothing) and recomputes the period.
    pub fn set(&self, plugin: &str, period_ms: Option<u32>) {
        let mut w = self.wanted.lock();
        match period_ms {
            Some(p) => w.insert(plugin.to_string(), p),
            None => w.remove(plugin),
        };
        let base = self.base_ms.load(Ordering::Relaxed);
        let p = w.values().copied().chain(std::iter::once(base)).min().unwrap_or(base);
        self.period_ms.store(p, Ordering::Relaxed);
    }

    /// Changes the configured period (live config change).
    pub fn set_base(&self, base_ms: u32) -> u32 {
        let w = self.wanted.lock();
        self.base_ms.store(base_ms, Ordering::Relaxed);
        let p = w
            .values()
            .copied()
            .chain(std::iter::once(base_ms))
            .min()
            .unwrap_or(base_ms);
        self.period_ms.store(p, Ordering::Relaxed);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_takes_the_fastest_period() {
        let p = SamplePlan::new(100);
        assert_eq!(p.period_ms.load(Ordering::Relaxed), 100);
        p.set("a", Some(500));
        assert_eq!(p.period_ms.load(Ordering::Relaxed), 100);
        p.set("b", Some(50));
        assert_eq!(p.period_ms.load(Ordering::Relaxed), 50);
        p.set("b", None);
        assert_eq!(p.period_ms.load(Ordering::Relaxed), 100);
        assert_eq!(p.set_base(1000), 500);
        p.set("a", None);
        assert_eq!(p.period_ms.load(Ordering::Relaxed), 1000, "the new base holds");
    }
}
