//! The writer: a bounded sample queue filled by [`RemoteWriter::push`] and
//! drained by one background task that batches, encodes and POSTs.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::config::RemoteWriteConfig;
use super::http;
use super::names::series_labels;
use super::wire::{self, Label, Sample, TimeSeries, WriteRequest};
use crate::config::check::Check;
use crate::model::{AttrValue, MetricBatch, MetricKind};

/// The most of an error answer's body that is read (and logged).
const ERROR_BODY_MAX: usize = 4 << 10;

/// One series to write, named the OpenTelemetry way; [`RemoteWriter::push`]
/// translates it (see the module doc for the rules).
#[derive(Clone, Debug, PartialEq)]
pub struct RemoteSeries {
    /// OpenTelemetry metric name, e.g. `system.cpu.utilization`.
    pub name: String,
    /// UCUM unit as OpenTelemetry writes it (`s`, `By`, `1`, `{request}`), or empty.
    pub unit: String,
    pub kind: MetricKind,
    /// The point's attributes.
    pub attributes: Vec<(String, String)>,
    /// The sender's resource attributes: `job`, `instance` and the promoted ones come from here.
    pub resource: Vec<(String, String)>,
}

/// A translated label set, ready to push samples under without translating again.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SeriesLabels(Arc<[Label]>);

impl SeriesLabels {
    /// The labels, sorted by name, `__name__` included.
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|l| (l.name.as_str(), l.value.as_str()))
    }
    /// The value of `__name__`.
    pub fn metric_name(&self) -> &str {
        self.0
            .iter()
            .find(|l| l.name == "__name__")
            .map_or("", |l| l.value.as_str())
    }
}

/// Counters since start. Every pushed sample ends up in exactly one of
/// `sent_samples`, `failed_samples`, `dropped_samples`, or is still `queued_samples`
/// (or being sent: `in_flight_samples`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RemoteWriteStats {
    /// Accepted by the engine (2xx).
    pub sent_samples: u64,
    /// In requests the engine refused (4xx other than 429), or that still failed
    /// after `retry_max_elapsed_ms`, or failed while shutting down.
    pub failed_samples: u64,
    /// Pushed out of a full queue (oldest first), or left in the queue at shutdown.
    pub dropped_samples: u64,
    /// Refused at push: the series has no usable metric name.
    pub invalid_samples: u64,
    pub queued_samples: u64,
    pub in_flight_samples: u64,
    /// Requests answered 2xx.
    pub requests_ok: u64,
    /// Requests given up (each after its retries).
    pub requests_failed: u64,
    /// Attempts that failed and were tried again.
    pub retries: u64,
    /// The most recent failure, kept after a later success.
    pub last_error: Option<String>,
}

#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
    invalid: AtomicU64,
    in_flight: AtomicU64,
    requests_ok: AtomicU64,
    requests_failed: AtomicU64,
    retries: AtomicU64,
}

struct Entry {
    labels: SeriesLabels,
    samples: Vec<Sample>,
}

#[derive(Default)]
struct Queue {
    entries: VecDeque<Entry>,
    samples: usize,
    /// When the oldest waiting sample arrived: the flush clock.
    oldest_at: Option<Instant>,
    /// [`RemoteWriter::flush`] asked to send what waits now.
    force: bool,
}

struct Shared {
    cfg: RemoteWriteConfig,
    queue: Mutex<Queue>,
    wake: Notify,
    closed: AtomicBool,
    counters: Counters,
    last_error: Mutex<Option<String>>,
}

/// Closes the writer when the last handle goes.
struct CloseOnDrop(Arc<Shared>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

impl Shared {
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.wake.notify_one();
    }
}

/// The handle: cheap to clone, all methods non-blocking. When the last clone is
/// dropped (or [`close`](Self::close) is called) the task sends what is queued,
/// once, and ends.
#[derive(Clone)]
pub struct RemoteWriter {
    shared: Arc<Shared>,
    _close: Arc<CloseOnDrop>,
}

impl std::fmt::Debug for RemoteWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteWriter")
            .field("url", &self.shared.cfg.url)
            .finish_non_exhaustive()
    }
}

impl RemoteWriter {
    /// Validates `cfg` (which must have a `url`), and spawns the sending task on
    /// the current tokio runtime. Nothing connects until the first request.
    pub fn start(cfg: RemoteWriteConfig) -> Result<(RemoteWriter, JoinHandle<()>), String> {
        Check::run("storage.remote_write", |c| cfg.validate(c))?;
        if !cfg.enabled() {
            return Err("remote_write.url is not set".into());
        }
        let http = HttpSender::new(&cfg)?;
        let shared = Arc::new(Shared {
            cfg,
            queue: Mutex::new(Queue::default()),
            wake: Notify::new(),
            closed: AtomicBool::new(false),
            counters: Counters::default(),
            last_error: Mutex::new(None),
        });
        let task = tokio::spawn(run(shared.clone(), http));
        let close = Arc::new(CloseOnDrop(shared.clone()));
        Ok((RemoteWriter { shared, _close: close }, task))
    }

    /// Translates a series into its Prometheus label set (None: no usable name).
    /// Keep the result to push under it often without translating each time.
    pub fn labels_for(&self, series: &RemoteSeries) -> Option<SeriesLabels> {
        let labels = series_labels(
            &series.name,
            &series.unit,
            series.kind,
            &series.attributes,
            &series.resource,
            &self.shared.cfg.promote_resource_attributes,
        )?;
        Some(SeriesLabels(
            labels.into_iter().map(|(name, value)| Label { name, value }).collect(),
        ))
    }

    /// Queues samples `(time ns since the Unix epoch, value)` of one series;
    /// times are cut to milliseconds. Never blocks: a full queue drops its oldest
    /// samples. Returns false (and counts `invalid_samples`) when the series'
    /// name translates to nothing.
    pub fn push(&self, series: &RemoteSeries, samples: &[(u64, f64)]) -> bool {
        match self.labels_for(series) {
            Some(l) => {
                self.push_labeled(&l, samples);
                true
            }
            None => {
                self.shared
                    .counters
                    .invalid
                    .fetch_add(samples.len() as u64, Ordering::Relaxed);
                false
            }
        }
    }

    /// [`push`](Self::push) for an already translated series.
    pub fn push_labeled(&self, labels: &SeriesLabels, samples: &[(u64, f64)]) {
        if samples.is_empty() {
            return;
        }
        self.enqueue(vec![Entry {
            labels: labels.clone(),
            samples: samples.iter().map(|&(t, v)| to_sample(t, v)).collect(),
        }]);
    }

    /// Queues every point of a batch (one lock for the whole batch); `resource`
    /// is the sender's resource. Returns how many points were refused (no usable name).
    pub fn push_batch(&self, batch: &MetricBatch, resource: &[(String, AttrValue)]) -> usize {
        let resource: Vec<(String, String)> = resource.iter().map(|(k, v)| (k.clone(), v.text())).collect();
        // Translate each distinct series of the batch once.
        let mut index: HashMap<*const crate::model::MetricSeries, Option<usize>> = HashMap::new();
        let mut entries: Vec<Entry> = Vec::new();
        let mut refused = 0;
        for p in &batch.points {
            let key = Arc::as_ptr(&p.series);
            let slot = *index.entry(key).or_insert_with(|| {
                let s = &p.series;
                let attributes: Vec<(String, String)> =
                    s.attributes.iter().map(|(k, v)| (k.clone(), v.text())).collect();
                let labels = series_labels(
                    &s.name,
                    &s.unit,
                    s.kind,
                    &attributes,
                    &resource,
                    &self.shared.cfg.promote_resource_attributes,
                )?;
                entries.push(Entry {
                    labels: SeriesLabels(labels.into_iter().map(|(name, value)| Label { name, value }).collect()),
                    samples: Vec::new(),
                });
                Some(entries.len() - 1)
            });
            match slot {
                Some(i) => entries[i].samples.push(to_sample(p.time_ns, p.value)),
                None => refused += 1,
            }
        }
        if refused > 0 {
            self.shared
                .counters
                .invalid
                .fetch_add(refused as u64, Ordering::Relaxed);
        }
        self.enqueue(entries);
        refused
    }

    fn enqueue(&self, entries: Vec<Entry>) {
        let cfg = &self.shared.cfg;
        let dropped = &self.shared.counters.dropped;
        let wake;
        {
            // Counters that account for samples change under the queue lock, so that
            // `stats()` always adds up.
            let mut q = self.shared.queue.lock();
            if self.shared.closed.load(Ordering::Acquire) {
                let n: usize = entries.iter().map(|e| e.samples.len()).sum();
                dropped.fetch_add(n as u64, Ordering::Relaxed);
                return;
            }
            for e in entries {
                if e.samples.is_empty() {
                    continue;
                }
                q.samples += e.samples.len();
                q.entries.push_back(e);
            }
            // The task sleeps without a deadline while the queue is empty: the first
            // sample starts its flush clock.
            let was_empty = q.oldest_at.is_none();
            if q.samples > 0 {
                q.oldest_at.get_or_insert_with(Instant::now);
            }
            while q.samples > cfg.queue_capacity {
                let excess = q.samples - cfg.queue_capacity;
                let front = q.entries.front_mut().expect("samples > 0 means an entry");
                let n = if front.samples.len() <= excess {
                    let n = front.samples.len();
                    q.entries.pop_front();
                    n
                } else {
                    front.samples.drain(..excess);
                    excess
                };
                q.samples -= n;
                dropped.fetch_add(n as u64, Ordering::Relaxed);
            }
            wake = (was_empty && q.samples > 0) || q.samples >= cfg.batch_max_samples;
        }
        if wake {
            self.shared.wake.notify_one();
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> RemoteWriteStats {
        let c = &self.shared.counters;
        let q = self.shared.queue.lock();
        let queued = q.samples as u64;
        RemoteWriteStats {
            sent_samples: c.sent.load(Ordering::Relaxed),
            failed_samples: c.failed.load(Ordering::Relaxed),
            dropped_samples: c.dropped.load(Ordering::Relaxed),
            invalid_samples: c.invalid.load(Ordering::Relaxed),
            queued_samples: queued,
            in_flight_samples: c.in_flight.load(Ordering::Relaxed),
            requests_ok: c.requests_ok.load(Ordering::Relaxed),
            requests_failed: c.requests_failed.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            last_error: self.shared.last_error.lock().clone(),
        }
    }

    /// Sends everything queued now instead of at the next flush interval.
    pub fn flush(&self) {
        self.shared.queue.lock().force = true;
        self.shared.wake.notify_one();
    }

    /// Stops taking samples; the task sends what is queued without retrying,
    /// stops at the first failure, and ends. What it could not send is counted
    /// (failed or dropped), and so are later pushes (dropped).
    pub fn close(&self) {
        self.shared.close();
    }
}

fn to_sample(t_ns: u64, value: f64) -> Sample {
    Sample {
        value,
        timestamp: (t_ns / 1_000_000) as i64,
    }
}

/// Takes up to `max` samples off the front, grouped by series, each series'
/// samples sorted by time (the engines refuse out-of-order samples within a series).
fn take_batch(q: &mut Queue, max: usize) -> (WriteRequest, usize) {
    let mut series: Vec<TimeSeries> = Vec::new();
    let mut index: HashMap<SeriesLabels, usize> = HashMap::new();
    let mut taken = 0;
    while taken < max {
        let Some(front) = q.entries.front_mut() else { break };
        let room = max - taken;
        let samples = if front.samples.len() <= room {
            let e = q.entries.pop_front().expect("front exists");
            (e.labels, e.samples)
        } else {
            let head: Vec<Sample> = front.samples.drain(..room).collect();
            (front.labels.clone(), head)
        };
        taken += samples.1.len();
        match index.get(&samples.0) {
            Some(&i) => series[i].samples.extend(samples.1),
            None => {
                index.insert(samples.0.clone(), series.len());
                series.push(TimeSeries {
                    labels: samples.0.0.to_vec(),
                    samples: samples.1,
                });
            }
        }
    }
    q.samples -= taken;
    if q.samples > 0 {
        q.oldest_at = Some(Instant::now());
    } else {
        q.oldest_at = None;
        q.force = false;
    }
    for s in &mut series {
        s.samples.sort_by_key(|s| s.timestamp);
    }
    (WriteRequest { timeseries: series }, taken)
}

/// What to do next, decided under the queue lock.
enum Next {
    Send(WriteRequest, usize),
    Wait(Option<Duration>),
    Done,
}

async fn run(shared: Arc<Shared>, http: HttpSender) {
    let cfg = shared.cfg.clone();
    let interval = Duration::from_millis(cfg.flush_interval_ms);
    let mut episode = Episode::default();
    loop {
        let closed = shared.closed.load(Ordering::Acquire);
        let next = {
            let mut q = shared.queue.lock();
            let due = q.force || q.oldest_at.is_some_and(|t| t.elapsed() >= interval);
            if q.samples > 0 && (closed || due || q.samples >= cfg.batch_max_samples) {
                let (req, n) = take_batch(&mut q, cfg.batch_max_samples);
                shared.counters.in_flight.store(n as u64, Ordering::Relaxed);
                Next::Send(req, n)
            } else if closed {
                Next::Done
            } else {
                Next::Wait(q.oldest_at.map(|t| interval.saturating_sub(t.elapsed())))
            }
        };
        match next {
            Next::Done => break,
            Next::Wait(d) => match d {
                Some(d) => {
                    tokio::select! {
                        _ = shared.wake.notified() => {}
                        _ = tokio::time::sleep(d) => {}
                    }
                }
                None => shared.wake.notified().await,
            },
            Next::Send(req, n) => {
                let body = Bytes::from(wire::encode(&req));
                drop(req);
                let ok = send_with_retries(&shared, &http, body, &mut episode).await;
                let c = &shared.counters;
                let _accounting = shared.queue.lock();
                c.in_flight.store(0, Ordering::Relaxed);
                if ok {
                    c.sent.fetch_add(n as u64, Ordering::Relaxed);
                    c.requests_ok.fetch_add(1, Ordering::Relaxed);
                } else {
                    c.failed.fetch_add(n as u64, Ordering::Relaxed);
                    c.requests_failed.fetch_add(1, Ordering::Relaxed);
                    if shared.closed.load(Ordering::Acquire) {
                        // Shutting down against a failing engine: one timeout, not one per batch.
                        break;
                    }
                }
            }
        }
    }
    // Anything pushed between the last take and the close is counted, not lost silently.
    let mut q = shared.queue.lock();
    let left = std::mem::take(&mut *q);
    shared
        .counters
        .dropped
        .fetch_add(left.samples as u64, Ordering::Relaxed);
    drop(q);
    tracing::debug!("remote-write: task ended");
}

/// A run of failed attempts: the first failure is logged in full, the rest quietly,
/// and the recovery once.
#[derive(Default)]
struct Episode {
    failures: u64,
}

async fn send_with_retries(shared: &Shared, http: &HttpSender, body: Bytes, ep: &mut Episode) -> bool {
    let cfg = &shared.cfg;
    let started = Instant::now();
    let mut delay = Duration::from_millis(cfg.retry_initial_ms);
    let max_delay = Duration::from_millis(cfg.retry_max_ms);
    let max_elapsed = Duration::from_millis(cfg.retry_max_elapsed_ms);
    loop {
        match http.send(body.clone()).await {
            Ok(()) => {
                if ep.failures > 0 {
                    tracing::info!(
                        "remote-write to {}: delivering again after {} failed attempts",
                        http.url,
                        ep.failures
                    );
                    ep.failures = 0;
                }
                return true;
            }
            Err(e) => {
                if ep.failures == 0 {
                    tracing::warn!("remote-write: {}", e.msg);
                } else {
                    tracing::debug!("remote-write: {}", e.msg);
                }
                ep.failures += 1;
                *shared.last_error.lock() = Some(e.msg.clone());
                let closing = shared.closed.load(Ordering::Acquire);
                if !e.retryable || closing {
                    return false;
                }
                let wait = e.retry_after.map_or(delay, |ra| ra.min(max_delay));
                if started.elapsed() + wait > max_elapsed {
                    tracing::warn!(
                        "remote-write: giving up a request after {:?} of retries",
                        started.elapsed()
                    );
                    return false;
                }
                shared.counters.retries.fetch_add(1, Ordering::Relaxed);
                // A close cuts the wait short; the loop then makes one last attempt.
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = wait_closed(shared) => {}
                }
                delay = (delay * 2).min(max_delay);
            }
        }
    }
}

async fn wait_closed(shared: &Shared) {
    while !shared.closed.load(Ordering::Acquire) {
        shared.wake.notified().await;
    }
    // Leave a permit for the main loop, which also waits on `wake`.
    shared.wake.notify_one();
}

/// A failed attempt.
#[derive(Debug)]
struct SendError {
    retryable: bool,
    msg: String,
    retry_after: Option<Duration>,
}

/// POSTs bodies to the remote-write URL.
struct HttpSender {
    client: http::Client,
    url: hyper::Uri,
    headers: HeaderMap,
    timeout: Duration,
}

impl HttpSender {
    fn new(cfg: &RemoteWriteConfig) -> Result<Self, String> {
        let url_s = cfg.url.as_deref().unwrap_or_default();
        let url: hyper::Uri = url_s.parse().map_err(|e| format!("remote_write.url {url_s:?}: {e}"))?;
        let timeout = Duration::from_millis(cfg.timeout_ms);
        let mut headers = http::headers(
            &cfg.headers,
            cfg.basic_auth.as_ref(),
            cfg.bearer_token.as_deref(),
            "remote_write",
        )?;
        // The protocol's own headers go last so that no extra header replaces them.
        headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("snappy"));
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-protobuf"));
        headers.insert(
            HeaderName::from_static("x-prometheus-remote-write-version"),
            HeaderValue::from_static("0.1.0"),
        );
        let client = match url.scheme_str() {
            Some("https") => http::client_tls(
                timeout,
                crate::tls::client_config(&cfg.tls, "storage.remote_write.tls").map_err(|e| e.to_string())?,
            ),
            _ => http::client(timeout),
        };
        Ok(Self {
            client,
            url,
            headers,
            timeout,
        })
    }

    async fn send(&self, body: Bytes) -> Result<(), SendError> {
        let url = &self.url;
        let mut req = hyper::Request::post(url.clone())
            .body(Full::new(body))
            .map_err(|e| SendError {
                retryable: false,
                msg: format!("POST {url}: building the request: {e}"),
                retry_after: None,
            })?;
        *req.headers_mut() = self.headers.clone();
        let call = async {
            let resp = self.client.request(req).await.map_err(|e| SendError {
                // Refused, reset, closed: all transient.
                retryable: true,
                msg: format!("POST {url}: {}", http::error_chain(&e)),
                retry_after: None,
            })?;
            let status = resp.status();
            let retry_after = resp
                .headers()
                .get(header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            // Read (a bounded part of) the body either way so the connection can be reused.
            let body = match Limited::new(resp.into_body(), ERROR_BODY_MAX).collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => Bytes::from_static(b"(answer too long)"),
            };
            if status.is_success() {
                return Ok(());
            }
            let retryable = status.is_server_error() || status.as_u16() == 429;
            let text = String::from_utf8_lossy(&body);
            Err(SendError {
                retryable,
                msg: format!("POST {url}: HTTP {status}: {}", text.trim()),
                retry_after,
            })
        };
        match tokio::time::timeout(self.timeout, call).await {
            Ok(r) => r,
            Err(_) => Err(SendError {
                retryable: true,
                msg: format!("POST {url}: timed out after {:?}", self.timeout),
                retry_after: None,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(name: &str) -> RemoteSeries {
        RemoteSeries {
            name: name.into(),
            unit: "By".into(),
            kind: MetricKind::Gauge,
            attributes: vec![("gpu.id".into(), "0".into())],
            resource: vec![("service.name".into(), "sonde".into())],
        }
    }

    fn cfg(url: &str) -> RemoteWriteConfig {
        RemoteWriteConfig {
            url: Some(url.into()),
            batch_max_samples: 4,
            queue_capacity: 10,
            flush_interval_ms: 60_000,
            ..Default::default()
        }
    }

    #[test]
    fn remote_write_batches_group_and_sort_by_series() {
        let mk = |labels: &SeriesLabels, ts: &[i64]| Entry {
            labels: labels.clone(),
            samples: ts
                .iter()
                .map(|&t| Sample {
                    value: t as f64,
                    timestamp: t,
                })
                .collect(),
        };
        let a = SeriesLabels(
            vec![Label {
                name: "__name__".into(),
                value: "a".into(),
            }]
            .into(),
        );
        let b = SeriesLabels(
            vec![Label {
                name: "__name__".into(),
                value: "b".into(),
            }]
            .into(),
        );
        let mut q = Queue::default();
        for e in [mk(&a, &[3, 1]), mk(&b, &[1]), mk(&a.clone(), &[2, 5, 6])] {
            q.samples += e.samples.len();
            q.entries.push_back(e);
        }
        let (req, n) = take_batch(&mut q, 5);
        assert_eq!(n, 5);
        assert_eq!(req.timeseries.len(), 2);
        let ts = |i: usize| {
            req.timeseries[i]
                .samples
                .iter()
                .map(|s| s.timestamp)
                .collect::<Vec<_>>()
        };
        assert_eq!(ts(0), vec![1, 2, 3, 5]);
        assert_eq!(ts(1), vec![1]);
        assert_eq!(q.samples, 1);
        let (req, n) = take_batch(&mut q, 5);
        assert_eq!((n, req.timeseries[0].samples[0].timestamp), (1, 6));
        assert!(q.oldest_at.is_none());
    }

    #[tokio::test]
    async fn remote_write_full_queue_drops_oldest_and_push_never_blocks() {
        // A port nothing listens on: every attempt is refused.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let (w, task) = RemoteWriter::start(cfg(&format!("http://127.0.0.1:{port}/api/v1/write"))).unwrap();
        let s = series("mem");
        let samples: Vec<(u64, f64)> = (0..25).map(|i| (i * 1_000_000, i as f64)).collect();
        assert!(w.push(&s, &samples));
        let st = w.stats();
        // 25 pushed into room for 10: at least 15 dropped at once, the newest kept.
        assert!(st.dropped_samples >= 15, "{st:?}");
        assert_eq!(
            st.dropped_samples + st.queued_samples + st.in_flight_samples,
            25,
            "{st:?}"
        );
        // A name of separators only, and no unit word to stand in for it.
        let nameless = RemoteSeries {
            unit: String::new(),
            ..series("...")
        };
        assert!(!w.push(&nameless, &samples));
        assert_eq!(w.stats().invalid_samples, 25);
        w.close();
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .unwrap()
            .unwrap();
        let st = w.stats();
        assert_eq!(st.sent_samples, 0);
        assert_eq!(st.dropped_samples + st.failed_samples, 25, "{st:?}");
        assert!(st.last_error.is_some());
        // After close, pushes are dropped and counted.
        w.push(&s, &samples[..3]);
        assert_eq!(w.stats().dropped_samples + w.stats().failed_samples, 28);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn remote_write_goes_over_https_to_an_engine_with_a_certificate_of_the_test_ca() {
        use std::sync::atomic::AtomicU64;
        let writes = Arc::new(AtomicU64::new(0));
        let seen = writes.clone();
        let app = axum::Router::new().route(
            "/api/v1/write",
            axum::routing::post(move || {
                seen.fetch_add(1, Ordering::Relaxed);
                async { axum::http::StatusCode::NO_CONTENT }
            }),
        );
        let dir = tempfile::tempdir().unwrap();
        let (port, p) = crate::tls::test_https_server(dir.path(), app).await;

        let mut c = cfg(&format!("https://localhost:{port}/api/v1/write"));
        c.tls.ca = Some(p.ca.clone());
        let (w, task) = RemoteWriter::start(c).unwrap();
        assert!(w.push(&series("mem"), &[(1_000_000, 1.0), (2_000_000, 2.0)]));
        w.close();
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(w.stats().sent_samples, 2, "{:?}", w.stats());
        assert!(writes.load(Ordering::Relaxed) >= 1);
    }

    #[tokio::test]
    async fn remote_write_start_refuses_bad_config() {
        assert!(RemoteWriter::start(RemoteWriteConfig::default()).is_err());
        assert!(RemoteWriter::start(cfg("ftp://x/api/v1/write")).is_err());
        let mut tls = cfg("https://x/api/v1/write");
        tls.tls.ca = Some("/nonexistent/ca.pem".into());
        let e = RemoteWriter::start(tls).err().unwrap();
        assert!(e.starts_with("storage.remote_write.tls.ca"), "{e}");
    }
}
