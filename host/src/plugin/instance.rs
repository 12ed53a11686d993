//! One running plugin: its thread, its store, and what happens when it traps.
//!
//! Each plugin lives on its own OS thread that owns its `Store` (one store per
//! plugin; no locks around guest calls). Work arrives on a bounded queue: the
//! sampler and the API only ever `try_send`, so a slow or stuck plugin can
//! delay nobody but itself. Every call runs under an epoch deadline and a
//! memory cap; a trap discards the instance, which is rebuilt from its
//! `InstancePre` after a backoff, and too many traps in a window quarantine it.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use wasmtime::Store;
use wasmtime::component::Linker;

use super::beat::{SamplerBeat, TimerDue};
use super::bindings::types;
use super::clock::Clock;
use super::config::{PluginConfig, PluginsConfig};
use super::deadline::CallTimer;
use super::engine::PluginEngine;
use super::host_api::{MetricRegistry, PluginState};
use super::limits::{self, Limits};
use super::mailbox::{self, Receiver, RecvError, SendError, Sender};
use super::metrics::PluginMetrics;
use super::output::Output;
use super::sandbox::wasi_ctx;
use super::tables::{Owner, TableDecl, TableRegistry};
use super::world::{World, WorldPre};
use super::{DecisionBoard, PluginStatus, RunState, SamplePlan};
use crate::model::{LogBatch, LogRecord, MetricBatch, SeriesInfo, Severity, Tick, now_ns};
use crate::state::StateStore;

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

/// A plugin driven by its caller, one call at a time on the caller's thread:
/// what `sonde plugin test` replays a recording through. The same instance,
/// store, sandbox, limits and trap handling as [`spawn`], without the thread
/// and its queue; after a trap the instance is not re-created (the caller
/// reports the trap instead). Timers fire on `shared.clock`.
pub struct Driven {
    actor: Actor,
}

/// Instantiates the plugin and calls `start`; Err says why it did not start.
pub fn drive(prep: Prepared, cfg: PluginConfig, pcfg: &PluginsConfig, shared: Shared) -> Result<Driven, String> {
    Ok(Driven {
        actor: Actor::started(prep, cfg, pcfg, shared, false)?,
    })
}

impl Driven {
    /// One hook call for `work` (a `Stop` is refused: use [`stop`](Self::stop)).
    pub fn handle(&mut self, work: Work) {
        if !matches!(work, Work::Stop(_)) {
            self.actor.handle(work);
        }
    }

    /// The sample batch this plugin would be handed after `tick`, if its
    /// request (manifest or `request-samples`) makes one complete now. A
    /// replay has no sampler clock: batches follow the ticks' own times.
    pub fn samples(&self, tick: &Arc<Tick>, series: &Arc<[SeriesInfo]>) -> Option<types::SampleBatch> {
        if !self.actor.wants_samples.load(Relaxed) {
            return None;
        }
        self.actor.acc.lock().push(tick, series, tick.time_ns)
    }

    /// The event kinds and tables the plugin subscribed to.
    pub fn wants_events(&self) -> Subscription {
        self.actor.wants_events.lock().clone()
    }

    /// When the next timer is due, on the plugin's clock.
    pub fn next_timer(&mut self) -> Option<Instant> {
        self.actor
            .live
            .as_mut()
            .and_then(|l| l.store.data_mut().timers.next_deadline())
    }

    /// Calls `on-timer` for every timer due by the plugin's clock.
    pub fn fire_due_timers(&mut self) {
        self.actor.fire_timers();
    }

    /// Whether an instance is alive (false after a trap or a refused start).
    pub fn is_running(&self) -> bool {
        self.actor.live.is_some()
    }

    /// Its status as `/api/plugins` would show it, with its self-metrics.
    pub fn status(&self) -> PluginStatus {
        let mut s = self.actor.status.lock().clone();
        s.metrics = self.actor.metrics.snapshot();
        s
    }

    /// Calls `stop` (the plugin flushes what it holds) and ends the instance.
    pub fn stop(&mut self) {
        self.actor.stop();
    }
}

struct Live {
    store: Store<PluginState>,
    plugin: World,
}

struct Actor {
    /// This actor's id in the table registry: a replacement has another.
    owner: Owner,
    name: String,
    pre: WorldPre,
    cfg: PluginConfig,
    limits: Limits,
    shared: Shared,
    /// Armed around every guest call: what stops a call past its deadline.
    timer: CallTimer,
    metrics: Arc<PluginMetrics>,
    status: Arc<Mutex<PluginStatus>>,
    wants_samples: Arc<std::sync::atomic::AtomicBool>,
    wants_events: Arc<Mutex<Subscription>>,
    live: Option<Live>,
    /// Taken into the store while an instance lives, given back when it dies.
    registry: Option<MetricRegistry>,
    restarts: u32,
    traps: VecDeque<Instant>,
    backoff_until: Option<Instant>,
    /// Whether a trap is followed by a new instance after a backoff (false when driven).
    restarts_after_trap: bool,
    acc: Arc<Mutex<SampleAcc>>,
    timer_due: Arc<TimerDue>,
    last_stderr: super::sandbox::LastLines,
}

/// Why a call did not produce a value.
enum CallFailure {
    /// The guest trapped: the instance is gone.
    Trapped,
    /// No instance is running.
    NotRunning,
}

impl Actor {
    /// A plugin's actor with its first instance started; Err holds why it did not start.
    fn started(
        prep: Prepared,
        cfg: PluginConfig,
        pcfg: &PluginsConfig,
        shared: Shared,
        restarts_after_trap: bool,
    ) -> Result<Actor, String> {
        let status = PluginStatus::new(&prep.name, &prep.file, &prep.sha256, &prep.contract);
        let timer = shared.engine.call_timer().map_err(|e| format!("{e:#}"))?;
        let mut actor = Actor {
            owner: Owner {
                plugin: prep.name.clone(),
                instance: NEXT_INSTANCE.fetch_add(1, Relaxed),
            },
            name: prep.name,
            pre: prep.pre,
            limits: Limits::from(pcfg, &cfg),
            cfg,
            shared,
            timer,
            metrics: Arc::new(PluginMetrics::default()),
            status: Arc::new(Mutex::new(status)),
            wants_samples: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            wants_events: Arc::new(Mutex::new(Subscription::default())),
            live: None,
            registry: Some(MetricRegistry::default()),
            restarts: 0,
            traps: VecDeque::new(),
            backoff_until: None,
            restarts_after_trap,
            acc: Default::default(),
            timer_due: Default::default(),
            last_stderr: Default::default(),
        };
        actor.status.lock().compiled_from_cache = prep.from_cache;
        actor.instantiate()?;
        actor.status.lock().load_ms = prep.began.elapsed().as_secs_f64() * 1000.0;
        Ok(actor)
    }

    /// Creates a store and instance and calls `start`. Err holds the reason.
    fn instantiate(&mut self) -> Result<(), String> {
        // The first start runs on the loader's thread, which may be outside the runtime.
        let rt = self.shared.rt.clone();
        let _rt = rt.as_ref().map(|h| h.enter());
        let wasi = wasi_ctx(&self.name, &self.cfg.grants, self.last_stderr.clone()).map_err(|e| format!("{e:#}"))?;
        let data = PluginState::new(
            &self.name,
            wasi,
            self.limits.memory,
            self.registry.take().unwrap_or_default(),
            self.shared.state.namespace(&self.name),
            self.shared.sinks.clone(),
            self.metrics.clone(),
            self.shared.clock.clone(),
        );
        let mut store = Store::new(&self.shared.engine.engine, data);
        limits::enforce(&mut store, self.limits.call_timeout);
        let plugin = {
            let _armed = self.timer.arm(self.limits.call_timeout);
            match self.pre.instantiate(&mut store) {
                Ok(p) => p,
                Err(e) => {
                    self.registry = Some(std::mem::take(&mut store.data_mut().registry));
                    return Err(format!("instantiation failed: {}", trap_reason(&e)));
                }
            }
        };
        self.live = Some(Live { store, plugin });
        let info = types::StartInfo {
            name: self.name.clone(),
            host_version: env!("CARGO_PKG_VERSION").to_string(),
            contract_version: super::engine::CONTRACT_VERSION.to_string(),
            settings: self.cfg.settings.to_string(),
            restarts: self.restarts,
        };
        match self.call(|p, s| p.start(s, &info)) {
            Ok(Ok(manifest)) => {
                if let Err(refusal) = self.apply_manifest(manifest) {
                    self.kill_instance();
                    return Err(format!("start refused: {refusal}"));
                }
                let mut st = self.status.lock();
                st.state = RunState::Running;
                st.reason = None;
                st.restarts = self.restarts;
                st.started_at_ns = now_ns();
                Ok(())
            }
            Ok(Err(refusal)) => {
                self.kill_instance();
                Err(format!("start refused: {refusal}"))
            }
            Err(_) => Err(self
                .status
                .lock()
                .last_trap
                .clone()
                .unwrap_or_else(|| "trapped in start".into())),
        }
    }

    /// Acts on what `start` returned; `Err` (a table declaration that is
    /// invalid or differs from another plugin's) refuses the start.
    fn apply_manifest(&mut self, m: types::Manifest) -> Result<(), String> {
        let tables = m
            .tables
            .into_iter()
            .map(TableDecl::from_wit)
            .collect::<Result<Vec<_>, _>>()?;
        self.shared.tables.declare(&self.owner, &tables)?;
        let mut names: Vec<String> = tables.iter().map(|t| t.name.clone()).collect();
        {
            let mut st = self.status.lock();
            st.version = Some(m.version.clone());
            st.description = Some(m.description.clone());
            st.events = m.events.iter().map(|&e| event_kind_name(e).to_string()).collect();
            st.tables = names.clone();
            st.reads = m.reads.clone();
        }
        names.extend(m.reads);
        *self.wants_events.lock() = Subscription {
            kinds: m.events,
            tables: names,
        };
        self.set_samples(m.samples);
        Ok(())
    }

    fn set_samples(&mut self, req: Option<types::SampleRequest>) {
        let req = req.map(|mut r| {
            r.period_ms = r.period_ms.max(10);
            r.deliver_every_ms = r.deliver_every_ms.max(r.period_ms);
            r
        });
        self.shared.plan.set(&self.name, req.as_ref().map(|r| r.period_ms));
        self.status.lock().samples = req.as_ref().map(|r| super::SampleSub {
            period_ms: r.period_ms,
            deliver_every_ms: r.deliver_every_ms,
            metrics: r.metrics.clone(),
        });
        self.acc.lock().request(req.clone());
        self.wants_samples.store(req.is_some(), Relaxed);
    }

    /// Runs one guest call under the deadline, then hands on what it emitted.
    fn call<R>(
        &mut self,
        f: impl FnOnce(&World, &mut Store<PluginState>) -> wasmtime::Result<R>,
    ) -> Result<R, CallFailure> {
        let Some(live) = self.live.as_mut() else {
            return Err(CallFailure::NotRunning);
        };
        limits::start_call(&mut live.store);
        let t0 = Instant::now();
        let result = {
            let _armed = self.timer.arm(self.limits.call_timeout);
            f(&live.plugin, &mut live.store)
        };
        self.metrics.record_call(t0.elapsed().as_nanos() as u64);
        self.metrics.set_memory(live.store.data().memory.current as u64);
        self.flush_outbox();
        match result {
            Ok(v) => Ok(v),
            Err(e) => {
                self.on_trap(&e);
                Err(CallFailure::Trapped)
            }
        }
    }

    /// Hands points, logs and decisions to the pipeline; applies sample requests.
    fn flush_outbox(&mut self) {
        let Some(live) = self.live.as_mut() else { return };
        let data = live.store.data_mut();
        let scope = data.scope.clone();
        let out = &mut data.outbox;
        if out.bad_points > 0 {
            self.metrics.dropped.fetch_add(out.bad_points, Relaxed);
            out.bad_points = 0;
        }
        if !out.points.is_empty() {
            let points = std::mem::take(&mut out.points);
            self.metrics.points_emitted.fetch_add(points.len() as u64, Relaxed);
            self.shared.output.submit_metrics(MetricBatch {
                scope: scope.clone(),
                points,
            });
        }
        let mut logs = std::mem::take(&mut out.logs);
        let now = self.shared.clock.now_ns();
        for d in std::mem::take(&mut out.decisions) {
            self.shared.decisions.record_at(&self.name, &d, now);
            logs.push(LogRecord {
                time_ns: now,
                severity: Severity::Info,
                event_name: "sonde.decision".into(),
                body: d.body.clone(),
                attributes: vec![
                    ("sonde.decision.kind".into(), d.kind.clone().into()),
                    ("sonde.decision.subject".into(), d.subject.clone().into()),
                    ("sonde.decision.reason".into(), d.reason.clone().into()),
                ],
            });
        }
        if !logs.is_empty() {
            self.shared.output.submit_logs(LogBatch { scope, records: logs });
        }
        if !out.sinks.is_empty() {
            let mut st = self.status.lock();
            for s in std::mem::take(&mut out.sinks) {
                st.sinks.retain(|k| k.name != s.name);
                if st.sinks.len() < 64 {
                    st.sinks.push(s);
                }
            }
        }
        if let Some(req) = data.samples_changed.take() {
            self.set_samples(req);
        }
    }

    fn on_trap(&mut self, e: &wasmtime::Error) {
        let timeout = limits::is_deadline(e);
        let reason = if timeout {
            format!(
                "call exceeded its {} ms deadline (plugins.call_timeout_ms)",
                self.limits.call_timeout.as_millis()
            )
        } else {
            trap_reason(e)
        };
        // What the guest printed last (a Rust panic message) says why it trapped.
        let said: Vec<String> = self.last_stderr.lock().drain(..).collect();
        let reason = if said.is_empty() {
            reason
        } else {
            format!("{reason}; plugin stderr: {}", said.join(" / "))
        };
        self.metrics.traps.fetch_add(1, Relaxed);
        if timeout {
            self.metrics.timeouts.fetch_add(1, Relaxed);
        }
        self.kill_instance();
        let now = Instant::now();
        self.traps.push_back(now);
        while self
            .traps
            .front()
            .is_some_and(|t| now.duration_since(*t) > self.limits.trap_window)
        {
            self.traps.pop_front();
        }
        let mut st = self.status.lock();
        st.last_trap = Some(reason.clone());
        st.last_trap_at_ns = now_ns();
        st.traps = self.metrics.traps.load(Relaxed);
        if !self.restarts_after_trap {
            // Driven (`sonde plugin test`): the trap is the answer; nothing restarts.
            st.state = RunState::Failed;
            st.reason = Some(format!("trapped: {reason}"));
            self.backoff_until = None;
        } else if self.traps.len() >= self.limits.max_traps {
            st.state = RunState::Quarantined;
            st.reason = Some(format!(
                "quarantined after {} traps within {} s; last: {reason}",
                self.traps.len(),
                self.limits.trap_window.as_secs()
            ));
            self.backoff_until = None;
            tracing::error!(plugin = %self.name, "{}", st.reason.as_deref().unwrap_or(""));
        } else {
            let n = self.traps.len().saturating_sub(1).min(20) as u32;
            let delay = (self.limits.backoff_initial * 2u32.pow(n)).min(self.limits.backoff_max);
            self.backoff_until = Some(now + delay);
            st.state = RunState::Backoff;
            st.reason = Some(format!("trapped ({reason}); restarting in {} ms", delay.as_millis()));
            tracing::warn!(plugin = %self.name, "trap: {reason}; re-instantiating in {} ms", delay.as_millis());
        }
    }

    fn kill_instance(&mut self) {
        if let Some(live) = self.live.take() {
            let data = live.store.into_data();
            self.registry = Some(data.registry);
            self.metrics.set_memory(0);
        }
        self.wants_samples.store(false, Relaxed);
    }

    fn run(mut self, rx: Receiver<Work>) {
        loop {
            let deadline = self.next_wake();
            let work = rx.recv_until(deadline);
            match work {
                Ok(Work::Stop(done)) => {
                    self.stop();
                    let _ = done.send(());
                    return;
                }
                Ok(w) => self.handle(w),
                Err(RecvError::Timeout) => {}
                Err(RecvError::Closed) => {
                    self.stop();
                    return;
                }
            }
            self.fire_timers();
            if self.backoff_until.is_some_and(|t| Instant::now() >= t) {
                self.backoff_until = None;
                self.restarts += 1;
                if let Err(reason) = self.instantiate() {
                    let mut st = self.status.lock();
                    if st.state != RunState::Quarantined && st.state != RunState::Backoff {
                        st.state = RunState::Failed;
                        st.reason = Some(reason);
                    }
                }
            }
        }
    }

    /// When the thread must wake on its own, for a timer or the end of a
    /// backoff; publishes the timers the sampler's tick wakes it for.
    fn next_wake(&mut self) -> Option<Instant> {
        // A replay's beat never ticks: its timers stay the thread's own.
        let beat = &self.shared.beat;
        let sampling = beat.live_period(Instant::now());
        let (driven, own) = self
            .live
            .as_ref()
            .map_or((None, None), |l| l.store.data().timers.wakes(sampling));
        self.timer_due.publish(beat, driven);
        // A tick between reading the timers and publishing them saw nothing to
        // wake: wait for that timer itself.
        let timer = match driven {
            Some(d) if beat.ticked_since(d) => Some(own.map_or(d, |o| o.min(d))),
            _ => own,
        };
        match (timer, self.backoff_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn fire_timers(&mut self) {
        loop {
            let now = self.shared.clock.instant();
            let Some(id) = self.live.as_mut().and_then(|l| l.store.data_mut().timers.pop_due(now)) else {
                return;
            };
            if let Ok(Err(e)) = self.call(|p, s| p.on_timer(s, id)) {
                self.hook_error("on-timer", &e);
            }
        }
    }

    fn handle(&mut self, work: Work) {
        match work {
            Work::Samples(batch) => {
                if self.live.is_none() {
                    return;
                }
                self.metrics.items.fetch_add(batch.values.len() as u64, Relaxed);
                if let Ok(Err(e)) = self.call(|p, s| p.on_samples(s, &batch)) {
                    self.hook_error("on-samples", &e);
                }
            }
            Work::Events(batch, count) => {
                if self.live.is_none() {
                    self.metrics.dropped.fetch_add(count, Relaxed);
                    return;
                }
                self.metrics.items.fetch_add(count, Relaxed);
                if let Ok(Err(e)) = self.call(move |p, s| p.on_events(s, *batch)) {
                    self.hook_error("on-events", &e);
                }
            }
            Work::Request(req, reply) => {
                let resp = match self.call(|p, s| p.on_request(s, &req)) {
                    Ok(r) => r,
                    Err(CallFailure::Trapped) => json_response(
                        500,
                        &serde_json::json!({"error": "the plugin trapped while handling the request",
                                            "reason": self.status.lock().last_trap}),
                    ),
                    Err(CallFailure::NotRunning) => self.not_running(),
                };
                let _ = reply.send(resp);
            }
            Work::Configure(settings, reply) => {
                let r = match self.call(|p, s| p.configure(s, &settings)) {
                    Ok(Ok(())) => {
                        if let Ok(v) = serde_json::from_str(&settings) {
                            self.cfg.settings = v;
                        }
                        Ok(())
                    }
                    Ok(Err(e)) => Err(e),
                    Err(CallFailure::Trapped) => Err("the plugin trapped in configure".into()),
                    Err(CallFailure::NotRunning) => {
                        // Applied at the next start.
                        if let Ok(v) = serde_json::from_str(&settings) {
                            self.cfg.settings = v;
                        }
                        Ok(())
                    }
                };
                let _ = reply.send(r);
            }
            // The loop fires the due timers after any work.
            Work::Wake => {}
            Work::Stop(_) => unreachable!("handled in run"),
        }
    }

    fn not_running(&self) -> types::HttpResponse {
        let st = self.status.lock();
        json_response(
            503,
            &serde_json::json!({"error": format!("plugin is {}", st.state.as_str()), "reason": st.reason}),
        )
    }

    fn hook_error(&self, hook: &str, e: &str) {
        self.metrics.errors.fetch_add(1, Relaxed);
        tracing::debug!(plugin = %self.name, "{hook} returned an error: {e}");
        self.status.lock().last_error = Some(format!("{hook}: {e}"));
    }

    fn stop(&mut self) {
        if self.live.is_some() {
            let _ = self.call(|p, s| p.stop(s));
        }
        self.kill_instance();
        self.shared.tables.withdraw(&self.owner);
        self.shared.plan.set(&self.name, None);
        let mut st = self.status.lock();
        if st.state == RunState::Running || st.state == RunState::Backoff {
            st.state = RunState::Stopped;
        }
    }
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
    /// work comes (determined, without a job) loses no tick to the switch, and
    /// they come with the next call. Anything else starts afresh. Either way
    /// the series are described again, as the contract says.
    fn request(&mut self, req: Option<types::SampleRequest>) {
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
