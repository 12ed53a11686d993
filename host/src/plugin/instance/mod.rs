//! One running plugin: its thread, its store, and what happens when it traps.
//!
//! Each plugin lives on its own OS thread that owns its `Store` (one store per
//! plugin; no locks around guest calls). Work arrives on a bounded queue: the
//! sampler and the API only ever `try_send`, so a slow or stuck plugin can
//! delay nobody but itself. Every call runs under an epoch deadline and a
//! memory cap; a trap discards the instance, which is rebuilt from its
//! `InstancePre` after a backoff, and too many traps in a window quarantine it.
//!
//! Here: what the rest of the host hands every plugin (`Shared`), the work it
//! queues, its handle on a running plugin, and `spawn`. Beside it:
//! - `actor.rs`: the instance itself, its calls, and what a trap does;
//! - `driven.rs`: the same actor called from the caller's thread (replays);
//! - `pacing.rs`: the sample batches a plugin asked for.

mod actor;
mod driven;
mod pacing;

pub use driven::{Driven, drive};
pub use pacing::{SampleAcc, to_wit_series};

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use wasmtime::component::Linker;

use super::beat::{SamplerBeat, TimerDue};
use super::bindings::types;
use super::clock::Clock;
use super::config::{PluginConfig, PluginsConfig};
use super::engine::PluginEngine;
use super::host_api::PluginState;
use super::mailbox::{self, SendError, Sender};
use super::metrics::PluginMetrics;
use super::output::Output;
use super::tables::TableRegistry;
use super::world::WorldPre;
use super::{DecisionBoard, PluginStatus, SamplePlan};
use crate::state::StateStore;
use actor::Actor;

/// What the rest of the host hands to every plugin.
#[derive(Clone)]
pub struct Shared {
    pub engine: PluginEngine,
    pub linker: Arc<Linker<PluginState>>,
    /// Where emitted points and log records go.
    pub output: Output,
    /// The plugins' clock (`now`, timers): the wall clock but under `sonde plugin test`.
    pub clock: Clock,
    pub state: StateStore,
    pub decisions: DecisionBoard,
    /// `sinks.dir` and the per-plugin directories (`crate::sinks::resolve`).
    pub sinks: crate::sinks::config::SinksConfig,
    /// The event tables running plugins declared (read by the ingest).
    pub tables: Arc<TableRegistry>,
    pub plan: Arc<SamplePlan>,
    /// When the sampler last ticked: while it ticks, it wakes plugin threads
    /// for their timers (`super::beat`).
    pub beat: Arc<SamplerBeat>,
    /// The host's tokio runtime, entered around guest calls. Without an
    /// ambient runtime, wasmtime-wasi's synchronous bindings (a plugin writing
    /// to stderr, e.g. a panic message) start a private multi-threaded runtime
    /// of their own on first use, whose threads and fds never go away.
    pub rt: Option<tokio::runtime::Handle>,
}

/// Work for a plugin's thread.
pub enum Work {
    /// A complete sample batch: ticks are collected on the sampler's thread
    /// (see `SampleAcc`) so a plugin thread wakes once per delivery, not per tick.
    Samples(types::SampleBatch),
    Events(Box<types::EventBatch>, u64),
    Request(types::HttpRequest, tokio::sync::oneshot::Sender<types::HttpResponse>),
    Configure(String, tokio::sync::oneshot::Sender<Result<(), String>>),
    /// Nothing to do but fire the timers that are due: the sampler's tick
    /// waking the thread for them (`super::beat`).
    Wake,
    /// Unload: call `stop`, then end the thread; the sender learns when it is done.
    Stop(tokio::sync::oneshot::Sender<()>),
}

/// A compiled plugin file, ready to instantiate.
pub struct Prepared {
    pub name: String,
    pub pre: WorldPre,
    pub sha256: String,
    pub contract: String,
    pub file: PathBuf,
    pub from_cache: bool,
    /// When loading this file began, for `load_ms`.
    pub began: Instant,
}

/// What a plugin's manifest asked to be delivered of the event batches.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Subscription {
    pub kinds: Vec<types::EventKind>,
    /// Tables it declares or reads, by name.
    pub tables: Vec<String>,
}

/// Gives every actor an id of its own for the table registry ([`Owner`]).
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

/// The host's handle on a running plugin thread.
pub struct PluginHandle {
    pub name: String,
    pub sha256: String,
    tx: Sender<Work>,
    pub status: Arc<Mutex<PluginStatus>>,
    pub metrics: Arc<PluginMetrics>,
    /// Whether the sampler should send ticks at all (a cheap check on its thread).
    pub wants_samples: Arc<std::sync::atomic::AtomicBool>,
    pub wants_events: Arc<Mutex<Subscription>>,
    /// Ticks waiting to make up this plugin's next batch; filled by the sampler thread.
    pub acc: Arc<Mutex<SampleAcc>>,
    /// The earliest timer the sampler's tick wakes this plugin for.
    pub timer_due: Arc<TimerDue>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PluginHandle {
    /// Queues work without ever blocking; counts what does not fit.
    pub fn offer(&self, work: Work) -> bool {
        match self.tx.try_send(work) {
            Ok(()) => true,
            Err(SendError::Full(w)) | Err(SendError::Closed(w)) => {
                self.metrics.dropped.fetch_add(1, Relaxed);
                if let Work::Request(_, reply) = w {
                    let _ = reply.send(json_response(
                        503,
                        &serde_json::json!({"error": "plugin is busy: its queue is full"}),
                    ));
                }
                false
            }
        }
    }

    /// Wakes the thread for its due timers (`super::beat`). A full queue is
    /// not a loss: the thread is awake and fires them after that work.
    pub fn poke(&self) {
        let _ = self.tx.try_send(Work::Wake);
    }

    /// Calls `stop` and waits (bounded) for the thread to end.
    pub fn shutdown(mut self, wait: Duration) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.tx.send_until(Work::Stop(tx), Instant::now() + wait).is_ok() {
            let deadline = Instant::now() + wait;
            let mut rx = rx;
            while Instant::now() < deadline {
                match rx.try_recv() {
                    Ok(()) | Err(tokio::sync::oneshot::error::TryRecvError::Closed) => break,
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        }
        if let Some(t) = self.thread.take()
            && t.is_finished()
        {
            let _ = t.join();
        }
        // Otherwise the thread is stuck in a guest call; its deadline will
        // end the call and the closed queue ends the thread. Never block on it.
    }
}

/// Starts a plugin: instantiates it and calls `start` on the caller's thread
/// (so a failure is reported before anything is replaced), then moves the
/// instance to its own thread.
pub fn spawn(prep: Prepared, cfg: PluginConfig, pcfg: &PluginsConfig, shared: Shared) -> Result<PluginHandle, String> {
    let (name, sha256) = (prep.name.clone(), prep.sha256.clone());
    let actor = Actor::started(prep, cfg, pcfg, shared, true)?;
    let (status, metrics) = (actor.status.clone(), actor.metrics.clone());
    let (tx, rx) = mailbox::mailbox(actor.limits.queue);
    let wants_samples = actor.wants_samples.clone();
    let wants_events = actor.wants_events.clone();
    let acc = actor.acc.clone();
    let timer_due = actor.timer_due.clone();
    let owner = actor.owner.clone();
    let tables = actor.shared.tables.clone();
    let thread = std::thread::Builder::new()
        .name(format!("plugin-{name}"))
        .stack_size(4 << 20)
        .spawn(move || {
            // Not niced: call deadlines are wall-clock, so a niced plugin on a busy
            // node misses them and traps (seen in a soak). The sampler protects
            // itself with real-time priority instead (sample::driver).
            let rt = actor.shared.rt.clone();
            let _rt = rt.as_ref().map(|h| h.enter());
            actor.run(rx)
        })
        .map_err(|e| {
            tables.withdraw(&owner);
            format!("spawning thread: {e}")
        })?;
    Ok(PluginHandle {
        name,
        sha256,
        tx,
        status,
        metrics,
        wants_samples,
        wants_events,
        acc,
        timer_due,
        thread: Some(thread),
    })
}

/// An event kind as the WIT spells it.
pub fn event_kind_name(k: types::EventKind) -> &'static str {
    use types::EventKind as K;
    match k {
        K::Progress => "progress",
        K::Timings => "timings",
        K::Heartbeats => "heartbeats",
        K::Points => "points",
        K::NodeEvents => "node-events",
        K::Custom => "custom",
    }
}

/// A readable reason from a wasmtime error: the trap kind or the root cause,
/// then the innermost guest frame when the component has names for it.
pub fn trap_reason(e: &wasmtime::Error) -> String {
    let mut s = match e.downcast_ref::<wasmtime::Trap>() {
        Some(trap) => format!("wasm trap: {trap}"),
        None => e.root_cause().to_string(),
    };
    if let Some(bt) = e.downcast_ref::<wasmtime::WasmBacktrace>()
        && let Some(name) = bt.frames().first().and_then(|f| f.func_name())
    {
        s.push_str(&format!(" (in {name})"));
    }
    if s.len() > 600 {
        let cut = (0..=600).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
        s.truncate(cut);
        s.push('…');
    }
    s
}

pub fn json_response(status: u16, body: &serde_json::Value) -> types::HttpResponse {
    types::HttpResponse {
        status,
        headers: vec![("content-type".into(), "application/json".into())],
        body: body.to_string().into_bytes(),
    }
}
