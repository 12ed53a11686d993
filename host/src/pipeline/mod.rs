//! pipeline/: what plugins emit, on its way out.
//!
//! ```text
//!  submit_metrics / submit_logs            (any thread; never blocks, never awaits)
//!     │  ├──► broadcast tap (subscribe()): every batch, export on or off
//!     ▼
//!  buffer   ≤ max_batch_points × queue_capacity points (and as many log records);
//!     │     beyond it the NEW batch is dropped and counted (points_dropped)
//!     ▼  batcher task: every interval_ms while it holds data, or early once
//!     │  max_batch_points are waiting (it sleeps while the buffer is empty)
//!  encode   requests of ≤ max_batch_points points / records, protobuf-encoded once
//!     ▼
//!  queue    ≤ queue_capacity encoded requests; when full the OLDEST is dropped
//!     │     and counted (fresh data is worth more to a profiler)
//!     ▼  sender: up to max_in_flight requests at once, started in queue order
//!  send     per-request timeout; retryable errors retried with exponential
//!           backoff (retry_initial_ms doubling to retry_max_ms, jittered) until
//!           retry_max_elapsed_ms, then given up (points_failed); non-retryable
//!           errors and partial-success rejections are failed at once. While a
//!           request waits to be retried, no new one starts.
//! ```
//!
//! Memory is bounded whatever the collector does: at most
//! `max_batch_points × queue_capacity` points waiting in the buffer (including
//! the flush being encoded), `queue_capacity` encoded requests, and
//! `max_in_flight` requests in flight. Every point submitted while export is on ends up in exactly one of
//! `points_exported`, `points_dropped`, `points_failed`, `buffered_points` or
//! `queued_points` (likewise for log records, which have no pending gauges).
//! Points submitted while export is off (`endpoint == None`) only reach
//! `subscribe()` receivers and `points_in`.
//!
//! With `export.spool_max_bytes > 0` the queue is on disk instead (see
//! `spool.rs`): each encoded or forwarded request is appended and synced
//! before it counts as queued (a forwarded one before the gateway answers
//! its sender); the sender reads the oldest one back and removes it only
//! once the collector answered (accepted, partly rejected, or a non-retryable
//! error: counted as failed). Retryable errors are retried until delivered
//! (`retry_max_elapsed_ms` does not apply: the spool's size bounds an outage),
//! and what is unsent at shutdown stays spooled for the next start, which
//! counts it in `*_in` again and sends it first. When appending would pass
//! `spool_max_bytes`, the NEW request is dropped and counted: what is spooled
//! was promised to survive. A forwarded request (`forward`: a gateway's, an
//! agent's job reports) is never dropped: a full queue or spool, or a spool
//! that cannot write, refuses it (`Refused`) and its sender is told to retry.
//! `queue_len` / `queued_points` then count the
//! spool, the requests in flight included; its cursor moves only past
//! requests answered in order, so whatever was in flight at a crash is sent
//! again.
//!
//! Every request gets this process's identity and next number when it is
//! queued (`export/sequence.rs`); a forwarded one keeps the one it came with.
//! It is sent with every attempt and kept in its spool record, so a sonde
//! receiver takes it once however often it is sent.
//!
//! The sender never dies: every error is counted and kept in `last_error`. It
//! logs one warning when the collector starts failing and one info line when it
//! recovers, not a line per retry. This file holds the handle, the buffer and
//! the queue; the batcher (buffer to encoded requests to queue) is in
//! `batcher.rs`, the sender and its retry loop in `sender.rs`, the disk queue
//! in `spool.rs`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use opentelemetry_proto::tonic::resource::v1::Resource;
use parking_lot::Mutex;
use tokio::sync::{Notify, broadcast, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::export::client::{Client, Signal};
use crate::export::config::ExportConfig;
use crate::export::otlp;
use crate::export::sequence::{RequestId, Sequencer};
use crate::model::{AttrValue, LogBatch, MetricBatch};

mod batcher;
mod sender;
mod spool;
#[cfg(test)]
mod tests;

use batcher::batcher_task;
use spool::Spool;

/// Batches kept for `subscribe()` receivers; a receiver further behind loses the oldest.
const TAP_CAPACITY: usize = 1024;
/// Batches waiting in the tap that wake [`PipelineHandle::tap_filling`].
pub const TAP_FILLING: usize = TAP_CAPACITY / 4;
/// Points sent to the tap that wake [`PipelineHandle::tap_filling`] even with
/// fewer batches: the tap holds every batch until its slowest receiver
/// reads it, so under an OTLP load of 1 000-point batches a quarter of the
/// capacity was 256 000 points (about 16 MB of heap) waiting for the live
/// store. A host's own sampling (a few hundred points a second) stays under
/// it and wakes no more often than before.
pub const TAP_FILLING_POINTS: usize = 16_384;

/// Free spool bytes below which [`PipelineHandle::room_to_forward`] says no.
pub const FORWARD_ROOM: u64 = 256 << 10;

/// Counters and gauges of the export pipeline, for the API, the dashboard and self-metrics.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ExportStats {
    /// Points submitted (export on or off).
    pub points_in: u64,
    /// Points the collector accepted.
    pub points_exported: u64,
    /// Points dropped for room: buffer full (newest dropped), queue full (oldest
    /// dropped) or spool full (newest dropped), or discarded because export was
    /// switched off while they waited (without the spool).
    pub points_dropped: u64,
    /// Points given up on: retries exhausted, a non-retryable error, rejected by
    /// the collector (partial success), or still unsent at shutdown's deadline
    /// (with the spool on, what is unsent stays spooled for the next start).
    pub points_failed: u64,
    pub logs_in: u64,
    pub logs_exported: u64,
    pub logs_dropped: u64,
    pub logs_failed: u64,
    /// Spans forwarded in gateway mode (`ingest.forward`); same accounting as points.
    pub spans_in: u64,
    pub spans_exported: u64,
    pub spans_dropped: u64,
    pub spans_failed: u64,
    /// Requests the collector accepted (possibly partially).
    pub requests_ok: u64,
    /// Requests given up on (each counted once, however many attempts it took).
    pub requests_failed: u64,
    /// Attempts beyond the first, over all requests.
    pub retries: u64,
    /// Encoded requests waiting to be sent (not counting those in flight;
    /// with the spool on, the spooled requests, in flight included).
    pub queue_len: usize,
    /// Points accepted but not yet encoded into a request.
    pub buffered_points: usize,
    /// Points in encoded requests: queued plus those in flight. (Addition to
    /// the original contract: with it the conservation law above can be checked.)
    pub queued_points: usize,
    /// Requests being sent now (at most `export.max_in_flight`).
    pub in_flight: usize,
    pub last_error: Option<String>,
    /// Wall clock of the last accepted request, ns since the Unix epoch (0: never).
    pub last_success_ns: u64,
    /// Export is on (an endpoint is configured).
    pub enabled: bool,
    /// The queue is on disk (`export.spool_max_bytes > 0`).
    pub spool_enabled: bool,
    /// Disk the spool takes: its segment files, answered records of the oldest included.
    pub spooled_bytes: u64,
    /// Requests in the spool not yet answered by the collector (in flight included).
    pub spooled_requests: usize,
    /// Damaged spool records found (cut short or failing their checksum); each
    /// ends its segment, whose remaining bytes are counted in `spool_corrupt_bytes`.
    pub spool_corrupt_records: u64,
    pub spool_corrupt_bytes: u64,
    /// Forwarded requests (gateway, an agent's job reports) refused rather
    /// than dropped: the queue or spool was full, or the spool could not
    /// write. Their senders were told to retry; not counted in `*_in`.
    pub forward_refused: u64,
}

/// The submitting side of the pipeline. Cheap to clone; usable from any thread.
#[derive(Clone)]
pub struct PipelineHandle {
    shared: Arc<Shared>,
}

/// The running pipeline's tasks; [`Pipeline::shutdown`] stops them.
pub struct Pipeline {
    shared: Arc<Shared>,
    batcher: Option<JoinHandle<()>>,
    sender: Option<JoinHandle<()>>,
    stop_tx: watch::Sender<bool>,
}

#[derive(Default)]
struct Counters {
    points_in: AtomicU64,
    points_exported: AtomicU64,
    points_dropped: AtomicU64,
    points_failed: AtomicU64,
    logs_in: AtomicU64,
    logs_exported: AtomicU64,
    logs_dropped: AtomicU64,
    logs_failed: AtomicU64,
    spans_in: AtomicU64,
    spans_exported: AtomicU64,
    spans_dropped: AtomicU64,
    spans_failed: AtomicU64,
    requests_ok: AtomicU64,
    requests_failed: AtomicU64,
    retries: AtomicU64,
    last_success_ns: AtomicU64,
}

#[derive(Default)]
struct Buffer {
    metrics: Vec<Arc<MetricBatch>>,
    /// Points in `metrics` plus points taken by a flush and not yet enqueued.
    points: usize,
    logs: Vec<LogBatch>,
    records: usize,
}

struct Encoded {
    signal: Signal,
    body: Bytes,
    items: usize,
    /// Sent with every attempt, so the receiver takes it once.
    id: Option<RequestId>,
}

/// Why [`PipelineHandle::forward`] did not take a request: the caller
/// answers its sender with a retryable error, so the sender keeps it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("export is off or stopping")]
    Off,
    /// The memory queue is at `export.queue_capacity`.
    #[error("the export queue is full ({0} requests)")]
    QueueFull(usize),
    /// The spool is at `export.spool_max_bytes`, or its disk cannot write.
    #[error("{0}")]
    Spool(String),
}

#[derive(Default)]
struct Queue {
    items: VecDeque<Encoded>,
    points: usize,
    records: usize,
    /// Spans in forwarded trace requests (gateway mode).
    spans: usize,
    /// Items in the requests being sent, by signal (metrics, logs, traces), and how many requests.
    inflight: [usize; 3],
    inflight_requests: usize,
}

fn sig_index(s: Signal) -> usize {
    match s {
        Signal::Metrics => 0,
        Signal::Logs => 1,
        Signal::Traces => 2,
    }
}

impl Queue {
    /// Takes the oldest request; its items count as in flight until [`landed`](Self::landed).
    fn take_next(&mut self) -> Option<Encoded> {
        let it = self.items.pop_front()?;
        match it.signal {
            Signal::Metrics => self.points -= it.items,
            Signal::Logs => self.records -= it.items,
            Signal::Traces => self.spans -= it.items,
        }
        self.inflight[sig_index(it.signal)] += it.items;
        self.inflight_requests += 1;
        Some(it)
    }

    /// A request taken by `take_next` was answered (its items are counted elsewhere now).
    fn landed(&mut self, signal: Signal, items: usize) {
        self.inflight[sig_index(signal)] -= items;
        self.inflight_requests -= 1;
    }
}

/// Settings the tasks read at each use, so `reconfigure` takes effect live.
#[derive(Clone, Copy)]
struct Tuning {
    interval: Duration,
    max_batch: usize,
    queue_capacity: usize,
    max_in_flight: usize,
    retry_initial: Duration,
    retry_max: Duration,
    retry_max_elapsed: Duration,
}

impl Tuning {
    fn from(cfg: &ExportConfig) -> Self {
        Tuning {
            interval: Duration::from_millis(cfg.interval_ms.max(1)),
            max_batch: cfg.max_batch_points.max(1),
            queue_capacity: cfg.queue_capacity.max(1),
            max_in_flight: cfg.in_flight().max(1),
            retry_initial: Duration::from_millis(cfg.retry_initial_ms.max(1)),
            retry_max: Duration::from_millis(cfg.retry_max_ms.max(cfg.retry_initial_ms).max(1)),
            retry_max_elapsed: Duration::from_millis(cfg.retry_max_elapsed_ms),
        }
    }
    /// Points (or records) the buffer may hold.
    fn bound(&self) -> usize {
        self.max_batch.saturating_mul(self.queue_capacity)
    }
}

struct Shared {
    c: Counters,
    buf: Mutex<Buffer>,
    queue: Mutex<Queue>,
    tuning: Mutex<Tuning>,
    /// Mirrors of tuning for the submit path (no lock besides the buffer's).
    bound: AtomicUsize,
    max_batch: AtomicUsize,
    enabled: AtomicBool,
    accepting: AtomicBool,
    batcher_done: AtomicBool,
    client: Mutex<Option<Arc<Client>>>,
    /// Bumped on every reconfigure: the sender cuts a retry backoff short and uses the new client.
    client_gen: watch::Sender<u64>,
    last_error: Mutex<Option<String>>,
    batcher_wake: Notify,
    sender_wake: Notify,
    /// Notified when the tap holds `TAP_FILLING` batches for its slowest
    /// receiver, or `TAP_FILLING_POINTS` points were sent since the last time.
    tap_filling: Notify,
    /// Points sent to the tap since `tap_filling` was last notified.
    tap_points: AtomicUsize,
    /// Requests in flight waiting to be retried: while any is, no new one starts.
    retrying: AtomicUsize,
    /// The last attempt succeeded (one log line when that changes).
    healthy: AtomicBool,
    /// When a partial rejection was last logged as a warning.
    last_reject_warn: Mutex<Option<Instant>>,
    tap: broadcast::Sender<Arc<MetricBatch>>,
    resource: Resource,
    rt: tokio::runtime::Handle,
    /// The queue on disk, when `spool_max_bytes > 0`.
    spool: Option<Spool>,
    /// Highest spool ticket appended and not yet synced.
    unsynced: AtomicU64,
    /// The last append found the spool full (one warning per episode).
    spool_full: AtomicBool,
    /// Numbers this process's requests (`export/sequence.rs`).
    sequencer: Sequencer,
    /// Forwarded requests refused (queue or spool full, spool not writable).
    forward_refused: AtomicU64,
}

impl PipelineHandle {
    /// Hands a batch to the pipeline. Never blocks or awaits: a lock held for a
    /// push, an `Arc` and a broadcast send. Beyond the buffer bound the batch is
    /// dropped and counted.
    pub fn submit_metrics(&self, batch: MetricBatch) {
        let n = batch.points.len();
        if n == 0 {
            return;
        }
        let s = &*self.shared;
        s.c.points_in.fetch_add(n as u64, Ordering::Relaxed);
        let batch = Arc::new(batch);
        s.send_tap(batch.clone());
        if !s.enabled.load(Ordering::Acquire) {
            return;
        }
        if !s.accepting.load(Ordering::Acquire) {
            s.c.points_dropped.fetch_add(n as u64, Ordering::Relaxed);
            return;
        }
        let max = s.max_batch.load(Ordering::Relaxed);
        let mut b = s.buf.lock();
        if b.points + n > s.bound.load(Ordering::Relaxed) {
            drop(b);
            s.c.points_dropped.fetch_add(n as u64, Ordering::Relaxed);
            return;
        }
        let before = b.points;
        b.points += n;
        b.metrics.push(batch);
        drop(b);
        // The batcher sleeps while the buffer is empty: wake it for the first
        // batch (it flushes at its next interval), and when a request is full.
        if before == 0 || (before < max && before + n >= max) {
            s.batcher_wake.notify_one();
        }
    }

    /// Hands log records to the pipeline; same rules as [`submit_metrics`](Self::submit_metrics)
    /// (log batches do not go to the `subscribe()` tap).
    pub fn submit_logs(&self, batch: LogBatch) {
        let n = batch.records.len();
        if n == 0 {
            return;
        }
        let s = &*self.shared;
        s.c.logs_in.fetch_add(n as u64, Ordering::Relaxed);
        if !s.enabled.load(Ordering::Acquire) {
            return;
        }
        if !s.accepting.load(Ordering::Acquire) {
            s.c.logs_dropped.fetch_add(n as u64, Ordering::Relaxed);
            return;
        }
        let max = s.max_batch.load(Ordering::Relaxed);
        let mut b = s.buf.lock();
        if b.records + n > s.bound.load(Ordering::Relaxed) {
            drop(b);
            s.c.logs_dropped.fetch_add(n as u64, Ordering::Relaxed);
            return;
        }
        let before = b.records;
        b.records += n;
        b.logs.push(batch);
        drop(b);
        if before == 0 || (before < max && before + n >= max) {
            s.batcher_wake.notify_one();
        }
    }

    pub fn stats(&self) -> ExportStats {
        self.shared.stats()
    }

    /// Gateway mode, and an agent's job reports: queues an OTLP request,
    /// already encoded, to be sent on unchanged (same queue and retry rules
    /// as our own requests). `items` is its point / record / span count; `id`
    /// the identity it came with (a gateway passes it on), or None for a new
    /// one of this process's.
    ///
    /// Unlike our own samples it is never dropped once taken: when the queue
    /// or the spool is full, or the spool cannot write, it is refused (and
    /// counted in `forward_refused`, not in `*_in`), for the caller to answer
    /// its sender with a retryable error. Ok means queued, and with the spool
    /// on, durable.
    pub fn forward(&self, signal: Signal, body: Bytes, items: usize, id: Option<RequestId>) -> Result<(), Refused> {
        let s = &*self.shared;
        if !s.enabled.load(Ordering::Acquire) || !s.accepting.load(Ordering::Acquire) {
            return Err(Refused::Off);
        }
        let tuning = *s.tuning.lock();
        {
            // `enqueue` takes the items off the buffer's tally; put them there first.
            let mut b = s.buf.lock();
            match signal {
                Signal::Metrics => b.points += items,
                Signal::Logs => b.records += items,
                Signal::Traces => {}
            }
        }
        let id = Some(id.unwrap_or_else(|| s.sequencer.next()));
        let queued = s.enqueue(
            signal,
            items,
            Some(Encoded {
                signal,
                body,
                items,
                id,
            }),
            &tuning,
            true,
        );
        if queued.is_ok() {
            let c = &s.c;
            s.count(signal, items, [&c.points_in, &c.logs_in, &c.spans_in]);
        }
        // Durable before the caller answers its sender. Queued but not synced,
        // it is still sent; the sender is told to retry all the same, and
        // its retry carries the same identity, which the receiver drops.
        let done = queued.and_then(|()| s.sync_spool().map_err(Refused::Spool));
        if done.is_err() {
            s.forward_refused.fetch_add(1, Ordering::Relaxed);
        }
        done
    }

    /// Whether a forwarded request would be taken now: export on, and room
    /// in the memory queue or at least `FORWARD_ROOM` bytes in the spool. A
    /// check ahead of the fact (the request's size is not known yet): a
    /// source asks it to refuse early, [`forward`](Self::forward) still
    /// refuses what does not fit.
    pub fn room_to_forward(&self) -> Result<(), Refused> {
        let s = &*self.shared;
        if !s.enabled.load(Ordering::Acquire) || !s.accepting.load(Ordering::Acquire) {
            return Err(Refused::Off);
        }
        match &s.spool {
            Some(sp) => {
                let st = sp.stats();
                if st.bytes + FORWARD_ROOM > sp.max_bytes() {
                    return Err(Refused::Spool(format!(
                        "export spool full ({} of {} bytes)",
                        st.bytes,
                        sp.max_bytes()
                    )));
                }
            }
            None => {
                let cap = s.tuning.lock().queue_capacity;
                let len = s.queue.lock().items.len();
                if len >= cap {
                    return Err(Refused::QueueFull(len));
                }
            }
        }
        Ok(())
    }

    /// Every submitted metric batch, export on or off. A receiver more than
    /// 1024 batches behind loses the oldest (`RecvError::Lagged`).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<MetricBatch>> {
        self.shared.tap.subscribe()
    }

    /// Returns once the tap holds a quarter of its capacity for its slowest
    /// receiver, or [`TAP_FILLING_POINTS`] points came since it last
    /// returned: a receiver that drains with `try_recv` when it is read (the
    /// live store) waits for this instead of waking for every batch.
    pub async fn tap_filling(&self) {
        self.shared.tap_filling.notified().await
    }

    /// Hands a batch to the `subscribe()` tap only, never to export: what a
    /// master received from its agents, shown and kept here but owned by them.
    pub fn publish_live(&self, batch: MetricBatch) {
        if !batch.points.is_empty() {
            self.shared.send_tap(Arc::new(batch));
        }
    }

    /// Applies a new (validated) export config live: endpoint, protocol,
    /// headers, timeout, interval, batch and queue sizes, retry settings. A
    /// request waiting to be retried is resent to the new endpoint at once; an
    /// attempt already in flight finishes first (bounded by the old timeout),
    /// so nothing is delivered twice.
    /// On error (a header the client cannot carry) nothing changes. Switching
    /// export off discards what waits (counted as dropped). The resource
    /// (`service_name`, `resource`) is fixed at start and not changed here.
    pub fn reconfigure(&self, cfg: &ExportConfig) -> anyhow::Result<()> {
        let s = &*self.shared;
        let client = match cfg.endpoint {
            Some(_) => {
                let _rt = s.rt.enter(); // tonic's lazy channel spawns its worker on the runtime
                Some(Arc::new(Client::new(cfg).context("export config")?))
            }
            None => None,
        };
        let tuning = Tuning::from(cfg);
        *s.tuning.lock() = tuning;
        s.max_batch.store(tuning.max_batch, Ordering::Relaxed);
        s.bound.store(tuning.bound(), Ordering::Relaxed);
        let enabled = client.is_some();
        match &client {
            Some(c) => tracing::info!(collector = %c.describe(), "export reconfigured"),
            None => tracing::info!("export switched off"),
        }
        *s.client.lock() = client;
        s.enabled.store(enabled, Ordering::Release);
        s.client_gen.send_modify(|g| *g += 1);
        s.batcher_wake.notify_one();
        s.sender_wake.notify_one();
        Ok(())
    }
}

impl Pipeline {
    /// Must be called inside a tokio runtime; spawns the batcher and sender tasks.
    /// `resource` is converted once and sent with every request.
    pub fn start(cfg: &ExportConfig, resource: Vec<(String, AttrValue)>) -> anyhow::Result<(PipelineHandle, Pipeline)> {
        let rt = tokio::runtime::Handle::try_current()
            .map_err(|_| anyhow::anyhow!("Pipeline::start must be called inside a tokio runtime"))?;
        let client = match cfg.endpoint {
            Some(_) => Some(Arc::new(Client::new(cfg).context("export config")?)),
            None => None,
        };
        let tuning = Tuning::from(cfg);
        let spool = match (cfg.spool_max_bytes, &cfg.spool_dir) {
            (0, _) => None,
            (max, dir) => {
                let dir = dir.clone().unwrap_or_else(|| "spool".into());
                let sp =
                    Spool::open(&dir, max).with_context(|| format!("opening the export spool {}", dir.display()))?;
                let st = sp.stats();
                tracing::info!(
                    dir = %dir.display(),
                    max_bytes = max,
                    requests = st.requests,
                    points = st.items[0],
                    bytes = st.bytes,
                    "export spool on"
                );
                Some(sp)
            }
        };
        let (tap, _) = broadcast::channel(TAP_CAPACITY);
        let (client_gen, _) = watch::channel(0u64);
        match &client {
            Some(c) => tracing::info!(collector = %c.describe(), "export on"),
            None => tracing::info!("export off (no endpoint configured)"),
        }
        let shared = Arc::new(Shared {
            c: Counters::default(),
            buf: Mutex::new(Buffer::default()),
            queue: Mutex::new(Queue::default()),
            tuning: Mutex::new(tuning),
            bound: AtomicUsize::new(tuning.bound()),
            max_batch: AtomicUsize::new(tuning.max_batch),
            enabled: AtomicBool::new(client.is_some()),
            accepting: AtomicBool::new(true),
            batcher_done: AtomicBool::new(false),
            client: Mutex::new(client),
            client_gen,
            last_error: Mutex::new(None),
            batcher_wake: Notify::new(),
            sender_wake: Notify::new(),
            tap_filling: Notify::new(),
            tap_points: AtomicUsize::new(0),
            retrying: AtomicUsize::new(0),
            healthy: AtomicBool::new(true),
            last_reject_warn: Mutex::new(None),
            tap,
            resource: otlp::resource(&resource),
            rt: rt.clone(),
            spool,
            unsynced: AtomicU64::new(0),
            spool_full: AtomicBool::new(false),
            sequencer: Sequencer::new(crate::export::resource::instance_id()),
            forward_refused: AtomicU64::new(0),
        });
        if let Some(sp) = &shared.spool {
            // What an earlier run left: in again, to be sent first.
            let st = sp.stats();
            let c = &shared.c;
            for (sig, n) in [Signal::Metrics, Signal::Logs, Signal::Traces]
                .into_iter()
                .zip(st.items)
            {
                shared.count(sig, n, [&c.points_in, &c.logs_in, &c.spans_in]);
            }
        }
        let (stop_tx, stop_rx) = watch::channel(false);
        let batcher = rt.spawn(batcher_task(shared.clone(), stop_rx));
        let sender = rt.spawn(sender::sender_task(shared.clone()));
        Ok((
            PipelineHandle { shared: shared.clone() },
            Pipeline {
                shared,
                batcher: Some(batcher),
                sender: Some(sender),
                stop_tx,
            },
        ))
    }

    /// Stops accepting, flushes buffered data and sends what it can before `deadline`; never hangs past it.
    /// Whatever is still unsent at the deadline is counted in `points_failed` / `logs_failed`.
    pub async fn shutdown(mut self, deadline: Duration) -> ExportStats {
        let end = Instant::now() + deadline;
        let s = self.shared.clone();
        s.accepting.store(false, Ordering::Release);
        let _ = self.stop_tx.send(true);
        if let Some(mut h) = self.batcher.take()
            && tokio::time::timeout_at(end, &mut h).await.is_err()
        {
            h.abort();
            // A flush is synchronous: let one that is running finish its accounting.
            let _ = tokio::time::timeout(Duration::from_millis(200), h).await;
        }
        s.batcher_done.store(true, Ordering::Release);
        s.sender_wake.notify_one();
        if let Some(mut h) = self.sender.take()
            && tokio::time::timeout_at(end, &mut h).await.is_err()
        {
            h.abort();
            // Cancellation lands at the sender's next await point, i.e. at once.
            let _ = tokio::time::timeout(Duration::from_millis(200), h).await;
        }
        s.abandon_pending();
        if let Some(sp) = &s.spool {
            sp.close();
        }
        let st = s.stats();
        tracing::info!(
            exported = st.points_exported,
            dropped = st.points_dropped,
            failed = st.points_failed,
            logs_exported = st.logs_exported,
            spooled = if st.spool_enabled { st.queued_points } else { 0 },
            "export pipeline stopped"
        );
        st
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        // Dropped without shutdown(): stop the tasks rather than leak them.
        for h in [self.batcher.take(), self.sender.take()].into_iter().flatten() {
            h.abort();
        }
    }
}

impl Shared {
    fn send_tap(&self, batch: Arc<MetricBatch>) {
        if self.tap.receiver_count() > 0 {
            let n = batch.points.len();
            let _ = self.tap.send(batch);
            let points = self.tap_points.fetch_add(n, Ordering::Relaxed) + n;
            if points >= TAP_FILLING_POINTS || self.tap.len() >= TAP_FILLING {
                self.tap_points.store(0, Ordering::Relaxed);
                self.tap_filling.notify_one();
            }
        }
    }

    fn stats(&self) -> ExportStats {
        let sp = self.spool.as_ref().map(|sp| {
            // Under the queue lock, like an append, so items are never seen twice.
            let _q = self.queue.lock();
            sp.stats()
        });
        let (queue_len, queued_points, in_flight) = {
            let q = self.queue.lock();
            match &sp {
                Some(sp) => (sp.requests, sp.items[0], q.inflight_requests),
                None => (q.items.len(), q.points + q.inflight[0], q.inflight_requests),
            }
        };
        let sp = sp.unwrap_or_default();
        let buffered_points = self.buf.lock().points;
        let c = &self.c;
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ExportStats {
            points_in: ld(&c.points_in),
            points_exported: ld(&c.points_exported),
            points_dropped: ld(&c.points_dropped),
            points_failed: ld(&c.points_failed),
            logs_in: ld(&c.logs_in),
            logs_exported: ld(&c.logs_exported),
            logs_dropped: ld(&c.logs_dropped),
            logs_failed: ld(&c.logs_failed),
            spans_in: ld(&c.spans_in),
            spans_exported: ld(&c.spans_exported),
            spans_dropped: ld(&c.spans_dropped),
            spans_failed: ld(&c.spans_failed),
            requests_ok: ld(&c.requests_ok),
            requests_failed: ld(&c.requests_failed),
            retries: ld(&c.retries),
            queue_len,
            buffered_points,
            queued_points,
            in_flight,
            last_error: self.last_error.lock().clone(),
            last_success_ns: ld(&c.last_success_ns),
            enabled: self.enabled.load(Ordering::Acquire),
            spool_enabled: self.spool.is_some(),
            spooled_bytes: sp.bytes,
            spooled_requests: sp.requests,
            spool_corrupt_records: sp.corrupt_records,
            spool_corrupt_bytes: sp.corrupt_bytes,
            forward_refused: ld(&self.forward_refused),
        }
    }

    /// Makes what was appended to the spool durable (no-op without a spool).
    /// On error what was appended is still queued and sent; only a power cut
    /// could now lose it, but it is not durable: a forwarded request is refused.
    fn sync_spool(&self) -> Result<(), String> {
        let Some(sp) = &self.spool else {
            return Ok(());
        };
        let ticket = self.unsynced.load(Ordering::Acquire);
        if ticket == 0 {
            return Ok(());
        }
        sp.sync(ticket).map_err(|e| {
            tracing::warn!("export spool: fdatasync failed: {e}");
            let msg = format!("export spool sync: {e}");
            *self.last_error.lock() = Some(msg.clone());
            msg
        })
    }

    /// The counter of `signal` among (points, logs, spans).
    fn count(&self, signal: Signal, items: usize, [points, logs, spans]: [&AtomicU64; 3]) {
        match signal {
            Signal::Metrics => points,
            Signal::Logs => logs,
            Signal::Traces => spans,
        }
        .fetch_add(items as u64, Ordering::Relaxed);
    }
    fn dropped(&self, signal: Signal, items: usize) {
        let c = &self.c;
        self.count(signal, items, [&c.points_dropped, &c.logs_dropped, &c.spans_dropped]);
    }
    fn failed(&self, signal: Signal, items: usize) {
        let c = &self.c;
        self.count(signal, items, [&c.points_failed, &c.logs_failed, &c.spans_failed]);
    }
    fn exported(&self, signal: Signal, items: usize) {
        let c = &self.c;
        self.count(signal, items, [&c.points_exported, &c.logs_exported, &c.spans_exported]);
    }

    /// At shutdown's end: whatever is still buffered, queued or in flight is given up.
    fn abandon_pending(&self) {
        let (metrics, logs) = {
            let mut b = self.buf.lock();
            let r = (b.points, b.records);
            *b = Buffer::default();
            r
        };
        let (qp, qr, inflight) = {
            let mut q = self.queue.lock();
            let r = (q.points, q.records, q.inflight);
            if q.spans > 0 {
                self.failed(Signal::Traces, q.spans);
            }
            *q = Queue::default();
            r
        };
        let enabled = self.enabled.load(Ordering::Acquire);
        if enabled {
            self.failed(Signal::Metrics, metrics + qp);
            self.failed(Signal::Logs, logs + qr);
        } else {
            self.dropped(Signal::Metrics, metrics + qp);
            self.dropped(Signal::Logs, logs + qr);
        }
        for (sig, n) in [Signal::Metrics, Signal::Logs, Signal::Traces]
            .into_iter()
            .zip(inflight)
        {
            if n > 0 {
                self.failed(sig, n);
            }
        }
    }
}
