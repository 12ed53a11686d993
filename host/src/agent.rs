//! The in-process Rust API: Determined's ProfilerAgent for Rust training
//! loops, with no network hop.
//!
//! ```no_run
//! use sonde::agent::{ProfilerAgent, Timing};
//! let agent = ProfilerAgent::builder("mnist").rank(0).local_rank(0).start().unwrap();
//! let _running = agent.running(); // ends collection when dropped (or call agent.end())
//! for batch_idx in 0..100u64 {
//!     agent.update_batch_idx(batch_idx);
//!     let mut t = Timing::new("train_batch");
//!     t.start();
//!     // ... the work ...
//!     t.end();
//!     agent.record_timing(&t);
//! }
//! ```
//!
//! `start()` runs a whole sonde host inside the process (sampler on its own
//! thread, the plugins from `plugins.dir`, export, optionally the API); a
//! profiler plugin holds the active/ended state machine
//! and says where it stands in `profiler.state` decisions. `attach()` joins
//! a host that already runs in this process (and is what the benchmark uses).
//! Whether profiling is on at all is the application's to say, as
//! Determined's ProfilerAgent takes it (`Builder::profiling`); the host
//! reads no plugin's settings.
//!
//! The hot path (`record_timing`, `update_batch_idx`) is one uncontended lock
//! and a push into a bounded buffer (beyond `capacity` rows the call is dropped
//! and counted); the hub drains the buffer every `ingest.flush_ms`. Timings are
//! tied to the batch index current when they are recorded.
//! `is_active()` mirrors the latest `profiler.state` decision a plugin made
//! about this job (its subject), so it lags an `update_batch_idx` by up to a
//! flush interval.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use crate::config::Config;
use crate::ingest::{IngestHub, Lane, Origin, Progress, Report};
use crate::model::now_ns;
use crate::plugin::DecisionBoard;

/// The kind of decision `is_active()` mirrors: a body with `active` and
/// `ended` flags, about the job its subject names.
pub const PROFILER_STATE: &str = "profiler.state";

/// A span of work: `start()`, `end()`, then hand it to `record_timing`.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    pub name: Cow<'static, str>,
    pub start_ns: u64,
    pub end_ns: u64,
}

impl Timing {
    pub fn new(name: impl Into<Cow<'static, str>>) -> Self {
        Timing {
            name: name.into(),
            start_ns: 0,
            end_ns: 0,
        }
    }
    pub fn start(&mut self) {
        self.start_ns = now_ns();
    }
    pub fn end(&mut self) {
        self.end_ns = now_ns();
    }
    /// Seconds between start and end.
    pub fn duration_s(&self) -> f64 {
        self.end_ns.saturating_sub(self.start_ns) as f64 / 1e9
    }
}

const UNKNOWN: u8 = 0;
const ACTIVE: u8 = 1;
const INACTIVE: u8 = 2;
const ENDED: u8 = 3;

struct Row {
    name: Cow<'static, str>,
    start: u64,
    end: u64,
    step: i64,
}

#[derive(Default)]
struct Buf {
    progress: Vec<(u64, u64)>,
    timings: Vec<Row>,
}

impl Buf {
    fn rows(&self) -> usize {
        self.progress.len() + self.timings.len()
    }
}

struct Inner {
    origin: Origin,
    buf: Mutex<Buf>,
    /// Swapped with `buf` at each hand-over, so the hot path writes into memory
    /// that is already allocated and touched (no regrowth, no page faults).
    spare: Mutex<Buf>,
    /// The hot path's one check each: enabled for this rank and not ended.
    timings_open: AtomicBool,
    progress_open: AtomicBool,
    capacity: usize,
    dropped: AtomicU64,
    batch_idx: AtomicU64,
    state: AtomicU8,
    profiling_enabled: bool,
}

impl Inner {
    fn close(&self) {
        self.timings_open.store(false, Relaxed);
        self.progress_open.store(false, Relaxed);
    }
}

impl Lane for Inner {
    fn drain(&self, report: &mut Report) {
        let mut b = self.spare.lock();
        b.progress.clear();
        b.timings.clear();
        std::mem::swap(&mut *b, &mut *self.buf.lock());
        report.origin = self.origin.clone();
        report.progress = b
            .progress
            .drain(..)
            .map(|(time, value)| Progress {
                name: "batch_idx".into(),
                time,
                value,
            })
            .collect();
        report.timings = b
            .timings
            .drain(..)
            .map(|r| crate::ingest::Timing {
                name: r.name.into_owned(),
                start: r.start,
                end: r.end,
                step: r.step,
            })
            .collect();
    }
}

/// Builds an agent: who this process is, and the host config to run.
pub struct Builder {
    origin: Origin,
    config: Option<Config>,
    capacity: usize,
    api: bool,
    profiling: bool,
}

impl Builder {
    pub fn rank(mut self, rank: i32) -> Self {
        self.origin.rank = rank;
        self
    }
    pub fn local_rank(mut self, local_rank: i32) -> Self {
        self.origin.local_rank = local_rank;
        self
    }
    pub fn node(mut self, node: impl Into<String>) -> Self {
        self.origin.node = node.into();
        self
    }
    pub fn role(mut self, role: impl Into<String>) -> Self {
        self.origin.role = role.into();
        self
    }
    /// The host configuration (default: `Config::load(None, &[])`, i.e. the
    /// environment's `SONDE_*` / `OTEL_*` settings over the defaults).
    pub fn config(mut self, cfg: Config) -> Self {
        self.config = Some(cfg);
        self
    }
    /// Whether this job is profiled at all (Determined's `profiling_is_enabled`;
    /// default on). Off: nothing is recorded and `is_enabled()` is false.
    pub fn profiling(mut self, on: bool) -> Self {
        self.profiling = on;
        self
    }
    /// Rows buffered between hand-overs at most (default 100 000).
    pub fn capacity(mut self, rows: usize) -> Self {
        self.capacity = rows.max(1);
        self
    }
    /// Also serve the HTTP API and dashboard (`api.listen`); off by default.
    pub fn serve_api(mut self, on: bool) -> Self {
        self.api = on;
        self
    }

    fn agent(self, profiling_enabled: bool, hub: &Arc<IngestHub>, decisions: &DecisionBoard) -> ProfilerAgent {
        let timings = profiling_enabled && matches!(self.origin.rank, 0 | -1);
        let system_metrics = profiling_enabled && matches!(self.origin.local_rank, 0 | -1);
        let inner = Arc::new(Inner {
            origin: self.origin,
            buf: Mutex::new(Buf::default()),
            spare: Mutex::new(Buf::default()),
            timings_open: AtomicBool::new(timings),
            progress_open: AtomicBool::new(timings || system_metrics),
            capacity: self.capacity,
            dropped: AtomicU64::new(0),
            batch_idx: AtomicU64::new(0),
            state: AtomicU8::new(UNKNOWN),
            profiling_enabled,
        });
        let lane: Arc<dyn Lane> = inner.clone();
        hub.add_lane(Arc::downgrade(&lane));
        let weak: Weak<Inner> = Arc::downgrade(&inner);
        let job = inner.origin.job.clone();
        decisions.listen(Arc::new(move |d| {
            if d.kind != PROFILER_STATE || d.subject != job {
                return;
            }
            let Some(inner) = weak.upgrade() else { return };
            let flag = |k: &str| d.body.get(k).and_then(|v| v.as_bool()).unwrap_or(false);
            let state = if flag("ended") {
                ENDED
            } else if flag("active") {
                ACTIVE
            } else {
                INACTIVE
            };
            inner.state.store(state, Relaxed);
            if state == ENDED {
                inner.close();
            }
        }));
        ProfilerAgent {
            inner,
            hub: hub.clone(),
            embedded: Mutex::new(None),
            ended: AtomicBool::new(false),
        }
    }

    /// Joins a host already running in this process.
    pub fn attach(self, hub: &Arc<IngestHub>, decisions: &DecisionBoard) -> ProfilerAgent {
        let on = self.profiling;
        self.agent(on, hub, decisions)
    }

    /// Starts an embedded sonde host on its own threads and joins it.
    pub fn start(mut self) -> anyhow::Result<ProfilerAgent> {
        let cfg = match self.config.take() {
            Some(c) => c,
            None => Config::load(None, &std::env::vars().collect(), &[])?,
        };
        if let Err(errs) = cfg.validate() {
            anyhow::bail!(crate::config::ConfigErrors(errs));
        }
        let profiling_enabled = self.profiling;
        let opts = crate::run::HostOptions {
            api: self.api,
            otlp: false,
        };
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new().name("sonde-agent".into()).spawn(move || {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("sonde-agent-rt")
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(anyhow::anyhow!("starting the agent's runtime: {e}")));
                    return;
                }
            };
            rt.block_on(async move {
                match crate::run::Host::start(cfg, opts).await {
                    Ok(host) => {
                        let _ = ready_tx.send(Ok((host.hub.clone(), host.plugins.decisions().clone())));
                        let _ = stop_rx.await;
                        host.shutdown(false).await;
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            });
        })?;
        let (hub, decisions) = ready_rx
            .recv()
            .map_err(|_| anyhow::anyhow!("the agent's host thread ended while starting"))??;
        let agent = self.agent(profiling_enabled, &hub, &decisions);
        *agent.embedded.lock() = Some(Embedded { stop_tx, thread });
        Ok(agent)
    }
}

struct Embedded {
    stop_tx: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

/// The agent. Cheap to share by reference across threads (`&self` everywhere).
pub struct ProfilerAgent {
    inner: Arc<Inner>,
    hub: Arc<IngestHub>,
    embedded: Mutex<Option<Embedded>>,
    ended: AtomicBool,
}

/// Ends collection when dropped (Determined's context manager).
pub struct Running<'a>(&'a ProfilerAgent);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.end();
    }
}

impl ProfilerAgent {
    pub fn builder(job: impl Into<String>) -> Builder {
        Builder {
            origin: Origin {
                job: job.into(),
                node: crate::export::resource::machine_hostname(),
                ..Default::default()
            },
            config: None,
            capacity: 100_000,
            api: false,
            profiling: true,
        }
    }

    /// A guard that calls [`end`](Self::end) when it goes out of scope.
    pub fn running(&self) -> Running<'_> {
        Running(self)
    }

    /// Profiling on (`Builder::profiling`) and this process is global rank 0
    /// or local rank 0 (unknown ranks count as 0).
    pub fn is_enabled(&self) -> bool {
        self.sysmetrics_is_enabled() || self.timings_is_enabled()
    }
    /// System metrics are collected once per machine: local rank 0. (The
    /// name is the one Determined's ProfilerAgent gives this question.)
    pub fn sysmetrics_is_enabled(&self) -> bool {
        self.inner.profiling_enabled && matches!(self.inner.origin.local_rank, 0 | -1)
    }
    /// Timings come from global rank 0 only.
    pub fn timings_is_enabled(&self) -> bool {
        self.inner.profiling_enabled && matches!(self.inner.origin.rank, 0 | -1)
    }
    /// Collecting now, as the latest `profiler.state` decision about this job said.
    pub fn is_active(&self) -> bool {
        self.is_enabled() && self.inner.state.load(Relaxed) == ACTIVE
    }
    /// Collection has ended for good (batch past `end_after_batch`, the time cap, or `end()`).
    pub fn has_ended(&self) -> bool {
        self.ended.load(Relaxed) || self.inner.state.load(Relaxed) == ENDED
    }

    /// The training loop calls this whenever the batch index advances.
    #[inline]
    pub fn update_batch_idx(&self, idx: u64) {
        if !self.inner.progress_open.load(Relaxed) {
            return;
        }
        self.inner.batch_idx.store(idx, Relaxed);
        self.push(|b| b.progress.push((now_ns(), idx)));
    }

    /// Records a finished timing, tied to the current batch index.
    #[inline]
    pub fn record_timing(&self, t: &Timing) {
        if !self.inner.timings_open.load(Relaxed) {
            return;
        }
        let step = self.inner.batch_idx.load(Relaxed) as i64;
        self.push(|b| {
            b.timings.push(Row {
                name: t.name.clone(),
                start: t.start_ns,
                end: t.end_ns,
                step,
            })
        });
    }

    #[inline]
    fn push(&self, f: impl FnOnce(&mut Buf)) {
        let mut b = self.inner.buf.lock();
        if b.rows() >= self.inner.capacity {
            drop(b);
            self.inner.dropped.fetch_add(1, Relaxed);
            return;
        }
        f(&mut b);
    }

    /// Rows dropped because the buffer was full.
    pub fn dropped(&self) -> u64 {
        self.inner.dropped.load(Relaxed)
    }

    /// The hub this agent reports to.
    pub fn hub(&self) -> &Arc<IngestHub> {
        &self.hub
    }

    /// Ends collection: hands over what waits and, for an embedded host, stops
    /// it (plugins flush per their `at_shutdown`, export drains within
    /// `host.shutdown_timeout_ms`). Idempotent; never blocks longer than the
    /// host's shutdown deadline plus a margin.
    pub fn end(&self) {
        if self.ended.swap(true, Relaxed) {
            return;
        }
        self.inner.close();
        self.hub.flush();
        if let Some(e) = self.embedded.lock().take() {
            let _ = e.stop_tx.send(());
            // Bounded join: a host that hangs must not keep the trainer alive.
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _ = e.thread.join();
                let _ = tx.send(());
            });
            let _ = rx.recv_timeout(Duration::from_secs(15));
        }
    }
}

impl Drop for ProfilerAgent {
    fn drop(&mut self) {
        self.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::bindings::types;

    fn hub() -> (Arc<IngestHub>, Arc<Mutex<Vec<types::EventBatch>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        (
            IngestHub::new(
                1000,
                Arc::new(move |b: &types::EventBatch| {
                    s.lock().push(b.clone());
                    1
                }),
            ),
            seen,
        )
    }

    fn decision(job: &str, body: serde_json::Value) -> types::Decision {
        types::Decision {
            kind: PROFILER_STATE.into(),
            subject: job.into(),
            reason: String::new(),
            body: body.to_string(),
            attributes: vec![],
        }
    }

    #[test]
    fn timings_are_tied_to_the_batch_index_current_when_recorded() {
        let (hub, seen) = hub();
        let board = DecisionBoard::default();
        let agent = ProfilerAgent::builder("j").rank(0).local_rank(0).attach(&hub, &board);
        for idx in [3u64, 4] {
            agent.update_batch_idx(idx);
            let mut t = Timing::new("train_batch");
            t.start();
            t.end();
            agent.record_timing(&t);
        }
        assert_eq!(hub.flush(), 4);
        let b = &seen.lock()[0];
        assert_eq!(b.origins[0].job, "j");
        assert_eq!(b.progress.as_ref().unwrap().value, vec![3, 4]);
        assert_eq!(b.timings.as_ref().unwrap().step, vec![3, 4]);
    }

    #[test]
    fn ranks_decide_what_is_enabled() {
        let (hub, _) = hub();
        let board = DecisionBoard::default();
        let a = |rank, local| {
            ProfilerAgent::builder("j")
                .rank(rank)
                .local_rank(local)
                .attach(&hub, &board)
        };
        let r0 = a(0, 0);
        assert!(r0.sysmetrics_is_enabled() && r0.timings_is_enabled());
        let l0 = a(3, 0);
        assert!(l0.sysmetrics_is_enabled() && !l0.timings_is_enabled());
        let other = a(3, 1);
        assert!(!other.is_enabled(), "neither rank: as if profiling were off");
        let off = ProfilerAgent::builder("j")
            .rank(0)
            .local_rank(0)
            .profiling(false)
            .attach(&hub, &board);
        assert!(!off.is_enabled(), "the application turned profiling off");
        off.update_batch_idx(1);
        let mut t = Timing::new("x");
        t.start();
        t.end();
        other.update_batch_idx(1);
        other.record_timing(&t);
        l0.record_timing(&t);
        assert_eq!(
            hub.flush(),
            0,
            "nothing from a disabled rank, no timings from local-rank-only"
        );
    }

    #[test]
    fn is_active_mirrors_the_plugin_and_end_is_final() {
        let (hub, _) = hub();
        let board = DecisionBoard::default();
        let agent = ProfilerAgent::builder("j").rank(0).local_rank(0).attach(&hub, &board);
        assert!(!agent.is_active());
        board.record(
            "any-plugin",
            &decision("other-job", serde_json::json!({"active": true})),
        );
        assert!(!agent.is_active(), "another job's state");
        board.record("any-plugin", &decision("j", serde_json::json!({"active": true})));
        assert!(agent.is_active());
        board.record(
            "any-plugin",
            &decision("j", serde_json::json!({"active": false, "ended": true})),
        );
        assert!(!agent.is_active() && agent.has_ended());
        agent.update_batch_idx(9);
        assert_eq!(hub.flush(), 0, "nothing recorded after the end");
    }

    #[test]
    fn a_full_buffer_drops_and_counts() {
        let (hub, _) = hub();
        let board = DecisionBoard::default();
        let agent = ProfilerAgent::builder("j").capacity(2).attach(&hub, &board);
        for i in 0..5 {
            agent.update_batch_idx(i);
        }
        assert_eq!(agent.dropped(), 3);
        assert_eq!(hub.flush(), 2);
        agent.update_batch_idx(6);
        assert_eq!(agent.dropped(), 3, "room again after the hand-over");
        {
            let _running = agent.running();
        }
        assert!(agent.has_ended(), "the guard ended collection");
        agent.end();
    }
}
