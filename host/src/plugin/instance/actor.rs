//! The actor: one plugin instance and its store, the calls into it under a
//! deadline, what it emitted handed on after each call, and what a trap
//! does (a backoff and a new instance, or quarantine). `spawn` runs it on a
//! thread of its own; `Driven` calls it from the caller's thread.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use parking_lot::Mutex;
use wasmtime::Store;

use super::{
    NEXT_INSTANCE, Prepared, SampleAcc, Shared, Subscription, Work, event_kind_name, json_response, trap_reason,
};
use crate::model::{LogBatch, LogRecord, MetricBatch, Severity, now_ns};
use crate::plugin::beat::TimerDue;
use crate::plugin::bindings::types;
use crate::plugin::config::{PluginConfig, PluginsConfig};
use crate::plugin::deadline::CallTimer;
use crate::plugin::host_api::{MetricRegistry, PluginState};
use crate::plugin::limits::{self, Limited, Limits};
use crate::plugin::mailbox::{Receiver, RecvError};
use crate::plugin::metrics::{LongestCall, PluginMetrics};
use crate::plugin::sandbox::wasi_ctx;
use crate::plugin::tables::{Owner, TableDecl};
use crate::plugin::world::{World, WorldPre};
use crate::plugin::{PluginStatus, RunState};

pub(super) struct Live {
    pub(super) store: Store<PluginState>,
    plugin: World,
}

pub(super) struct Actor {
    /// This actor's id in the table registry: a replacement has another.
    pub(super) owner: Owner,
    pub(super) name: String,
    pre: WorldPre,
    cfg: PluginConfig,
    pub(super) limits: Limits,
    pub(super) shared: Shared,
    /// Armed around every guest call: what stops a call past its deadline.
    timer: CallTimer,
    pub(super) metrics: Arc<PluginMetrics>,
    pub(super) status: Arc<Mutex<PluginStatus>>,
    pub(super) wants_samples: Arc<std::sync::atomic::AtomicBool>,
    pub(super) wants_events: Arc<Mutex<Subscription>>,
    pub(super) live: Option<Live>,
    /// Taken into the store while an instance lives, given back when it dies.
    registry: Option<MetricRegistry>,
    restarts: u32,
    traps: VecDeque<Instant>,
    backoff_until: Option<Instant>,
    /// Whether a trap is followed by a new instance after a backoff (false when driven).
    restarts_after_trap: bool,
    pub(super) acc: Arc<Mutex<SampleAcc>>,
    pub(super) timer_due: Arc<TimerDue>,
    last_stderr: crate::plugin::sandbox::LastLines,
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
    pub(super) fn started(
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
            contract_version: crate::plugin::engine::CONTRACT_VERSION.to_string(),
            settings: self.cfg.settings.to_string(),
            restarts: self.restarts,
        };
        match self.call("start", |p, s| p.start(s, &info)) {
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
        self.status.lock().samples = req.as_ref().map(|r| crate::plugin::SampleSub {
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
        hook: &'static str,
        f: impl FnOnce(&World, &mut Store<PluginState>) -> wasmtime::Result<R>,
    ) -> Result<R, CallFailure> {
        let Some(live) = self.live.as_mut() else {
            return Err(CallFailure::NotRunning);
        };
        limits::start_call(&mut live.store);
        let queued0 = limits::thread_run_delay();
        let t0 = Instant::now();
        let result = {
            let _armed = self.timer.arm(self.limits.call_timeout);
            f(&live.plugin, &mut live.store)
        };
        let wall = t0.elapsed();
        self.metrics.record_call(wall.as_nanos() as u64);
        let io = *live.store.data_mut().io();
        if let Some(began) = io.began {
            let cpu = limits::thread_cpu().saturating_sub(began);
            self.metrics.record_call_cpu(cpu.as_nanos() as u64);
            self.metrics.record_longest(LongestCall {
                hook,
                wall_us: wall.as_secs_f64() * 1e6,
                cpu_us: cpu.as_secs_f64() * 1e6,
                host_io_us: io.spent.as_secs_f64() * 1e6,
                queued_us: queued0
                    .zip(limits::thread_run_delay())
                    .map(|(a, b)| b.saturating_sub(a).as_secs_f64() * 1e6),
            });
        }
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

    pub(super) fn run(mut self, rx: Receiver<Work>) {
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

    pub(super) fn fire_timers(&mut self) {
        loop {
            let now = self.shared.clock.instant();
            let Some(id) = self.live.as_mut().and_then(|l| l.store.data_mut().timers.pop_due(now)) else {
                return;
            };
            if let Ok(Err(e)) = self.call("on-timer", |p, s| p.on_timer(s, id)) {
                self.hook_error("on-timer", &e);
            }
        }
    }

    pub(super) fn handle(&mut self, work: Work) {
        match work {
            Work::Samples(batch) => {
                if self.live.is_none() {
                    return;
                }
                self.metrics.items.fetch_add(batch.values.len() as u64, Relaxed);
                if let Ok(Err(e)) = self.call("on-samples", |p, s| p.on_samples(s, &batch)) {
                    self.hook_error("on-samples", &e);
                }
            }
            Work::Events(batch, count) => {
                if self.live.is_none() {
                    self.metrics.dropped.fetch_add(count, Relaxed);
                    return;
                }
                self.metrics.items.fetch_add(count, Relaxed);
                if let Ok(Err(e)) = self.call("on-events", move |p, s| p.on_events(s, *batch)) {
                    self.hook_error("on-events", &e);
                }
            }
            Work::Request(req, reply) => {
                let resp = match self.call("on-request", |p, s| p.on_request(s, &req)) {
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
                let r = match self.call("configure", |p, s| p.configure(s, &settings)) {
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

    pub(super) fn stop(&mut self) {
        if self.live.is_some() {
            let _ = self.call("stop", |p, s| p.stop(s));
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
