//! ingest/: what jobs report, on its way to the plugins. Arranged by receiver:
//! each receiver turns its wire format into [`Report`]s, the one neutral type
//! in the middle, and knows nothing of the others; this file (the hub) knows
//! none of them.
//!
//! ```text
//!  otlp/     OTLP/gRPC + OTLP/HTTP receivers (any OpenTelemetry SDK); gateway forwarding
//!  json/     POST /api/ingest: documented JSON batches (incl. rows of event tables, probe stacks)
//!  crate::agent  the in-process Rust API (no network hop): lanes drained here
//!     │  Report (one origin's rows)            │ Lane (lock + push per call)
//!     ▼                                        ▼
//!  IngestHub (this file): interns origins, names and point series, builds one
//!     │  columnar `event-batch`, bounded by `ingest.queue_capacity` rows
//!     ▼  every `ingest.flush_ms` while rows wait, or early when 8192 do (asleep when none do)
//!  PluginManager::publish_events: each plugin gets the column groups and tables it asked for
//! ```
//! `report.rs` holds the `Report` model, `batch.rs` builds the hub's WIT
//! `event-batch` from reports, `dedup.rs` the window that takes a re-sent
//! OTLP request once, `durable.rs` the group commit that writes what a
//! request changed before it is answered, `tables.rs` maps rows of event tables onto the
//! tables plugins declared (the hub holds their registry), `error.rs` the
//! validation error all receivers share, `limits.rs` the bounds on names and
//! attributes they enforce, `config.rs` the `[ingest]` settings. Imports
//! point inward only: receivers → this file → `batch` → `report`, `tables`,
//! `error`; nothing here imports a receiver.
//!
//! Sources never wait for plugins: a full hub refuses the report (the source
//! answers 429 / RESOURCE_EXHAUSTED and counts it), it never grows.

mod batch;
pub mod config;
pub mod dedup;
pub mod durable;
pub mod error;
pub mod json;
pub mod limits;
pub mod otlp;
mod report;
pub mod tables;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;

use self::batch::Pending;
use self::error::Invalid;
use self::tables::TableRegistry;
use crate::export::sequence::RequestId;
use crate::plugin::bindings::types;

pub use self::report::{CustomEvent, ForeignPoint, ForeignSeries, NodeEvent, Origin, Progress, Report, Timing};

/// Rows waiting beyond this are handed over at once instead of at the next tick.
const EARLY_FLUSH_ROWS: usize = 8192;

/// The hub is full: the report was refused, nothing of it kept.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("ingest queue is full ({waiting} rows waiting, capacity {capacity}); retry later")]
pub struct Full {
    pub waiting: usize,
    pub capacity: usize,
}

/// Counters per source ("otlp", "json", "agent").
#[derive(Default)]
pub struct SourceCounters {
    pub requests: AtomicU64,
    pub rows: AtomicU64,
    /// Requests refused: malformed, too large, unauthorised, unknown fields.
    pub rejected: AtomicU64,
    /// Of those, refused for a missing or wrong bearer token.
    pub unauthorized: AtomicU64,
    /// Rows refused because the hub was full.
    pub refused_rows: AtomicU64,
    /// Rows of kinds no plugin takes (e.g. histograms) or that were invalid.
    pub skipped_rows: AtomicU64,
    /// Strings cut to their limit plus attributes dropped past the count
    /// (OTLP only: the JSON ingest refuses instead; see `limits.rs`).
    pub truncated: AtomicU64,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct SourceStats {
    pub requests: u64,
    pub rows: u64,
    pub rejected: u64,
    pub unauthorized: u64,
    pub refused_rows: u64,
    pub skipped_rows: u64,
    pub truncated: u64,
}

impl SourceCounters {
    fn snapshot(&self) -> SourceStats {
        SourceStats {
            requests: self.requests.load(Relaxed),
            rows: self.rows.load(Relaxed),
            rejected: self.rejected.load(Relaxed),
            unauthorized: self.unauthorized.load(Relaxed),
            refused_rows: self.refused_rows.load(Relaxed),
            skipped_rows: self.skipped_rows.load(Relaxed),
            truncated: self.truncated.load(Relaxed),
        }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct IngestStats {
    pub otlp: SourceStats,
    pub json: SourceStats,
    pub agent: SourceStats,
    /// Batches handed to the plugins, and their rows.
    pub batches: u64,
    pub rows_published: u64,
    /// Rows handed over that no plugin subscribed to.
    pub rows_unwanted: u64,
    pub waiting: usize,
    pub capacity: usize,
    /// TLS handshakes refused by the receivers and the API listener (no or
    /// a foreign client certificate under mTLS, plain HTTP on a TLS port).
    pub tls_refused: u64,
    /// Re-sent OTLP requests recognised and dropped (see `dedup.rs`).
    pub dedup: dedup::DedupStats,
    /// The group commit of the host's kept state (see `durable.rs`).
    pub durable: durable::DurableStats,
}

/// Where batches go (the plugin manager in the host; a test collector in tests).
/// Returns how many plugins took the batch.
pub type Publish = Arc<dyn Fn(&types::EventBatch) -> usize + Send + Sync>;

/// Something that sees every report the hub accepts, as it is accepted (the
/// cluster's node and job registries, an agent's forwarder). Called on the
/// source's task: it must be quick and must not block.
pub trait ReportTap: Send + Sync {
    fn observe(&self, reports: &[Report]);

    /// The same for one request, with the sender's identity when it had one
    /// (`export/sequence.rs`). A tap that passes reports on (an agent's
    /// forwarder) sends them under numbers derived from it, so that a request
    /// taken here twice (re-sent after this host was killed before it could
    /// answer) is still known as one further on.
    fn observe_request(&self, reports: &[Report], _id: Option<&RequestId>) {
        self.observe(reports);
    }

    /// Whether it could keep what it would observe now (an agent's
    /// forwarder: room in its export queue); Err says why not. Sources that
    /// can refuse ([`IngestHub::room`]) ask before they take a report.
    fn room(&self) -> Result<(), String> {
        Ok(())
    }
}

/// The in-process API's per-agent buffers: one lock and a push per call; the
/// hub drains them at every flush.
pub trait Lane: Send + Sync {
    /// Moves what waits into `report` (whose origin the lane sets).
    fn drain(&self, report: &mut Report);
}

pub struct IngestHub {
    pending: Mutex<Pending>,
    capacity: usize,
    publish: Publish,
    /// The event tables running plugins declared: rows are typed by them.
    tables: Arc<TableRegistry>,
    /// Keep rows of tables no plugin here declares (an agent forwards them).
    keep_unknown_tables: bool,
    lanes: Mutex<Vec<Weak<dyn Lane>>>,
    taps: parking_lot::RwLock<Vec<Arc<dyn ReportTap>>>,
    wake: tokio::sync::Notify,
    pub otlp: SourceCounters,
    pub json: SourceCounters,
    pub agent: SourceCounters,
    /// Shared with every TLS listener: see [`IngestStats::tls_refused`].
    pub tls_refused: Arc<AtomicU64>,
    /// The (producer, seq) of OTLP requests taken, shared by both receivers.
    pub dedup: Arc<dedup::Dedup>,
    /// Writes the windows and the job registry before a sonde's request is answered.
    pub commits: Arc<durable::Commits>,
    batches: AtomicU64,
    rows_published: AtomicU64,
    rows_unwanted: AtomicU64,
}

impl IngestHub {
    /// A hub that knows no event tables (tests, and hosts without plugins).
    pub fn new(capacity: usize, publish: Publish) -> Arc<Self> {
        Self::with_tables(capacity, publish, Arc::default(), false)
    }

    /// A hub typing table rows by `tables`; with `keep_unknown_tables` (an
    /// agent), rows of a table none of its plugins declares are kept as
    /// sent, for the master its forwarder sends them to.
    pub fn with_tables(
        capacity: usize,
        publish: Publish,
        tables: Arc<TableRegistry>,
        keep_unknown_tables: bool,
    ) -> Arc<Self> {
        Arc::new(IngestHub {
            pending: Mutex::new(Pending::default()),
            capacity: capacity.max(1),
            publish,
            tables,
            keep_unknown_tables,
            lanes: Mutex::new(Vec::new()),
            taps: parking_lot::RwLock::new(Vec::new()),
            wake: tokio::sync::Notify::new(),
            otlp: SourceCounters::default(),
            json: SourceCounters::default(),
            agent: SourceCounters::default(),
            tls_refused: Arc::default(),
            dedup: Arc::default(),
            commits: Arc::default(),
            batches: AtomicU64::new(0),
            rows_published: AtomicU64::new(0),
            rows_unwanted: AtomicU64::new(0),
        })
    }

    /// The event tables rows are typed by.
    pub fn tables(&self) -> &TableRegistry {
        &self.tables
    }

    pub fn keeps_unknown_tables(&self) -> bool {
        self.keep_unknown_tables
    }

    /// Types the table rows of `reports` that came as sent (`tables::type_tables`),
    /// texts within `max_text` bytes; returns the rows refused, each with its reason.
    pub fn type_tables(&self, reports: &mut [Report], max_text: usize) -> Vec<Invalid> {
        reports
            .iter_mut()
            .flat_map(|r| tables::type_tables(&mut r.tables, &self.tables, self.keep_unknown_tables, max_text))
            .collect()
    }

    /// Adds one origin's rows to the next batch, all or nothing.
    pub fn submit(&self, report: &Report) -> Result<usize, Full> {
        self.submit_all(std::slice::from_ref(report))
    }

    /// Adds several origins' rows (one request of a source), all or nothing.
    pub fn submit_all(&self, reports: &[Report]) -> Result<usize, Full> {
        self.submit_request(reports, None)
    }

    /// The same, for a request that carried a sender's identity (the taps
    /// see it: [`ReportTap::observe_request`]).
    pub fn submit_request(&self, reports: &[Report], id: Option<&RequestId>) -> Result<usize, Full> {
        let n: usize = reports.iter().map(Report::rows).sum();
        if n == 0 {
            return Ok(0);
        }
        let mut p = self.pending.lock();
        if p.rows + n > self.capacity {
            return Err(Full {
                waiting: p.rows,
                capacity: self.capacity,
            });
        }
        for r in reports.iter().filter(|r| r.rows() > 0) {
            p.add(r);
        }
        // The flush loop sleeps while nothing waits: wake it for the first
        // rows (it flushes them at its next tick), and when a full batch waits.
        let wake = p.rows == n || p.rows >= EARLY_FLUSH_ROWS;
        drop(p);
        self.tap(reports, id);
        if wake {
            self.wake.notify_one();
        }
        Ok(n)
    }

    /// Err (why) when a tap could not keep a report now: the JSON ingest and
    /// the OTLP receivers then answer 503 / UNAVAILABLE, so the sender keeps
    /// it, instead of taking what would be dropped on the way on.
    pub fn room(&self) -> Result<(), String> {
        self.taps.read().iter().try_for_each(|t| t.room())
    }

    /// Adds a tap that sees every report accepted from now on.
    pub fn add_tap(&self, tap: Arc<dyn ReportTap>) {
        self.taps.write().push(tap);
    }

    fn tap(&self, reports: &[Report], id: Option<&RequestId>) {
        for t in self.taps.read().iter() {
            t.observe_request(reports, id);
        }
    }

    /// Registers an in-process agent's buffers; dropped agents fall out by themselves.
    /// Wakes the flush loop, which sleeps while no lane is attached and no rows wait
    /// (lanes are drained at its ticks, never announced row by row).
    pub fn add_lane(&self, lane: Weak<dyn Lane>) {
        self.lanes.lock().push(lane);
        self.wake.notify_one();
    }

    /// Hands what waits to the plugins now. Returns the rows handed over.
    pub fn flush(&self) -> usize {
        let lanes: Vec<Arc<dyn Lane>> = {
            let mut l = self.lanes.lock();
            l.retain(|w| w.strong_count() > 0);
            l.iter().filter_map(|w| w.upgrade()).collect()
        };
        let mut lane_rows = 0;
        let mut reports = Vec::new();
        for lane in lanes {
            let mut r = Report::default();
            lane.drain(&mut r);
            lane_rows += r.rows();
            if r.rows() > 0 {
                reports.push(r);
            }
        }
        let pending = {
            let mut p = self.pending.lock();
            // Lanes are bounded by their own capacity, so they bypass the hub's.
            for r in &reports {
                p.add(r);
            }
            std::mem::take(&mut *p)
        };
        if lane_rows > 0 {
            self.agent.rows.fetch_add(lane_rows as u64, Relaxed);
            self.tap(&reports, None);
        }
        let rows = pending.rows;
        if rows == 0 {
            return 0;
        }
        let batch = pending.batch;
        let takers = (self.publish)(&batch);
        self.batches.fetch_add(1, Relaxed);
        self.rows_published.fetch_add(rows as u64, Relaxed);
        if takers == 0 {
            self.rows_unwanted.fetch_add(rows as u64, Relaxed);
        }
        rows
    }

    /// Flushes every `every` while rows wait (and early when many do) until
    /// `stop` fires; flushes once more at the end. With nothing waiting and no
    /// in-process agent attached it sleeps until rows arrive: an idle host
    /// does not wake for it.
    pub async fn run(self: Arc<Self>, every: Duration, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(every);
        // After a sleep the ticks keep their grid: the first rows wait at most `every`.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            let idle = self.idle();
            tokio::select! {
                _ = tick.tick(), if !idle => {}
                _ = self.wake.notified() => {
                    if idle {
                        continue; // rows arrived: flush them at the next tick
                    }
                }
                r = stop.changed() => {
                    if r.is_err() || *stop.borrow() {
                        break;
                    }
                }
            }
            if self.idle() {
                continue;
            }
            let hub = self.clone();
            // Publishing clones batches per plugin: keep it off the async workers' hot path.
            let _ = tokio::task::spawn_blocking(move || hub.flush()).await;
        }
        let hub = self.clone();
        let _ = tokio::task::spawn_blocking(move || hub.flush()).await;
    }

    /// Nothing waits and no in-process agent is attached: a tick has no work.
    fn idle(&self) -> bool {
        self.pending.lock().rows == 0 && self.lanes.lock().is_empty()
    }

    pub fn stats(&self) -> IngestStats {
        IngestStats {
            otlp: self.otlp.snapshot(),
            json: self.json.snapshot(),
            agent: self.agent.snapshot(),
            batches: self.batches.load(Relaxed),
            rows_published: self.rows_published.load(Relaxed),
            rows_unwanted: self.rows_unwanted.load(Relaxed),
            waiting: self.pending.lock().rows,
            capacity: self.capacity,
            tls_refused: self.tls_refused.load(Relaxed),
            dedup: self.dedup.stats(),
            durable: self.commits.stats(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AttrValue, SeriesKind};
    use crate::plugin::tables::Cell;

    fn collecting() -> (Publish, Arc<Mutex<Vec<types::EventBatch>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        (
            Arc::new(move |b: &types::EventBatch| {
                s.lock().push(b.clone());
                1
            }),
            seen,
        )
    }

    fn origin(job: &str, rank: i32) -> Origin {
        Origin {
            job: job.into(),
            rank,
            ..Default::default()
        }
    }

    #[test]
    fn reports_become_one_columnar_batch_with_interned_tables() {
        let (publish, seen) = collecting();
        let hub = IngestHub::new(100, publish);
        for (rank, idx) in [(0, 5u64), (1, 5), (0, 6)] {
            let r = Report {
                origin: origin("mnist", rank),
                progress: vec![Progress {
                    name: "batch_idx".into(),
                    time: 10 + idx,
                    value: idx,
                }],
                timings: vec![Timing {
                    name: "train_batch".into(),
                    start: 1,
                    end: 2,
                    step: idx as i64,
                }],
                ..Default::default()
            };
            assert_eq!(hub.submit(&r), Ok(2));
        }
        assert_eq!(hub.flush(), 6);
        let b = seen.lock()[0].clone();
        assert_eq!(b.origins.len(), 2, "two distinct origins");
        assert_eq!(b.names, vec!["batch_idx".to_string(), "train_batch".to_string()]);
        let p = b.progress.as_ref().unwrap();
        assert_eq!(p.origin, vec![0, 1, 0]);
        assert_eq!(p.value, vec![5, 5, 6]);
        let t = b.timings.as_ref().unwrap();
        assert_eq!(t.name, vec![1, 1, 1]);
        assert_eq!(t.step, vec![5, 5, 6]);
        assert_eq!(hub.flush(), 0, "nothing left");
        assert_eq!(seen.lock().len(), 1, "an empty flush publishes nothing");
    }

    #[test]
    fn a_full_hub_refuses_whole_reports_and_keeps_what_it_had() {
        let (publish, seen) = collecting();
        let hub = IngestHub::new(3, publish);
        let r = Report {
            origin: origin("j", 0),
            heartbeats: vec![1, 2],
            ..Default::default()
        };
        assert_eq!(hub.submit(&r), Ok(2));
        assert_eq!(
            hub.submit(&r),
            Err(Full {
                waiting: 2,
                capacity: 3
            })
        );
        assert_eq!(hub.flush(), 2);
        assert_eq!(seen.lock()[0].heartbeats.as_ref().unwrap().time, vec![1, 2]);
        assert_eq!(hub.submit(&r), Ok(2), "room again after the hand-over");
    }

    #[test]
    fn several_reports_are_taken_together_or_not_at_all() {
        let (publish, seen) = collecting();
        let hub = IngestHub::new(3, publish);
        let r = |job: &str| Report {
            origin: origin(job, 0),
            heartbeats: vec![1, 2],
            ..Default::default()
        };
        assert!(hub.submit_all(&[r("a"), r("b")]).is_err(), "4 rows do not fit in 3");
        assert_eq!(hub.flush(), 0, "nothing of the refused request was kept");
        assert_eq!(hub.submit_all(&[r("a"), Report::default()]), Ok(2));
        assert_eq!(hub.flush(), 2);
        assert_eq!(seen.lock()[0].origins.len(), 1, "an empty report adds no origin");
    }

    #[test]
    fn point_series_are_interned_by_metric_unit_kind_and_attributes() {
        let (publish, seen) = collecting();
        let hub = IngestHub::new(100, publish);
        let series = |metric: &str, a: i64| ForeignSeries {
            metric: metric.into(),
            unit: "1".into(),
            kind: SeriesKind::Gauge,
            attributes: vec![("gpu".into(), AttrValue::Int(a))],
        };
        let pt = |series: u32, value: f64| ForeignPoint { series, time: 1, value };
        // The same series twice in one report (as the JSON ingest sends them) is one series.
        let r = Report {
            origin: origin("j", 0),
            series: vec![series("util", 0), series("util", 1), series("util", 0)],
            points: vec![pt(0, 0.5), pt(1, 0.7), pt(2, 0.6)],
            ..Default::default()
        };
        hub.submit(&r).unwrap();
        hub.flush();
        let b = &seen.lock()[0];
        assert_eq!(b.point_series.len(), 2);
        assert_eq!(b.points.as_ref().unwrap().series, vec![0, 1, 0]);
    }

    struct TestLane(Mutex<Vec<u64>>);
    impl Lane for TestLane {
        fn drain(&self, r: &mut Report) {
            r.origin = origin("lane", 0);
            r.heartbeats = std::mem::take(&mut *self.0.lock());
        }
    }

    #[test]
    fn lanes_are_drained_at_each_flush_and_forgotten_when_dropped() {
        let (publish, seen) = collecting();
        let hub = IngestHub::new(100, publish);
        let lane: Arc<dyn Lane> = Arc::new(TestLane(Mutex::new(vec![7, 8])));
        hub.add_lane(Arc::downgrade(&lane));
        assert_eq!(hub.flush(), 2);
        assert_eq!(seen.lock()[0].origins[0].job, "lane");
        assert_eq!(hub.stats().agent.rows, 2);
        drop(lane);
        assert_eq!(hub.flush(), 0);
        assert!(hub.lanes.lock().is_empty());
    }

    #[tokio::test]
    async fn a_lane_attached_while_the_flush_loop_sleeps_is_drained() {
        let (publish, seen) = collecting();
        let hub = IngestHub::new(100, publish);
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        let run = tokio::spawn(hub.clone().run(Duration::from_millis(10), stop));
        // The loop has found nothing to do and sleeps until woken.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let lane: Arc<dyn Lane> = Arc::new(TestLane(Mutex::new(vec![7])));
        hub.add_lane(Arc::downgrade(&lane));
        let t0 = std::time::Instant::now();
        while seen.lock().is_empty() && t0.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(hub.stats().agent.rows, 1, "the lane's row was never flushed");
        stop_tx.send(true).unwrap();
        run.await.unwrap();
    }

    #[test]
    fn typed_table_rows_become_columns_with_interned_strings() {
        use crate::plugin::bindings::types::{ColumnDecl, ColumnDefault as D, ColumnType as T, TableDecl as W};
        let col = |name: &str, type_| ColumnDecl {
            name: name.into(),
            type_,
            default: D::Zero,
            labels: vec![],
        };
        let reg = tables::tests::registry_with(vec![W {
            name: "calls".into(),
            description: String::new(),
            columns: vec![
                col("fn", T::String),
                col("n", T::U32),
                col("ok", T::Boolean),
                col("dt", T::S64),
            ],
        }]);
        let (publish, seen) = collecting();
        let hub = IngestHub::with_tables(100, publish, Arc::new(reg), false);
        let mut r = Report {
            origin: origin("j", 1),
            ..Default::default()
        };
        for (f, n) in [("MPI_Send", 3), ("MPI_Recv", 4), ("MPI_Send", 5)] {
            r.add_row_as_sent(
                "calls",
                vec![("fn".into(), Cell::S(f.into())), ("n".into(), Cell::I(n))],
                0,
            );
        }
        let mut reports = vec![r];
        assert!(hub.type_tables(&mut reports, 4096).is_empty());
        assert_eq!(hub.submit_all(&reports), Ok(3));
        hub.flush();
        let b = &seen.lock()[0];
        let t = &b.tables[0];
        assert_eq!(t.name, "calls");
        assert_eq!(t.column_names, vec!["fn", "n", "ok", "dt"]);
        assert_eq!(t.origin, vec![0, 0, 0]);
        let types::TableColumn::Strings(f) = &t.columns[0] else {
            panic!("{t:?}")
        };
        let names: Vec<&str> = f.iter().map(|&i| b.names[i as usize].as_str()).collect();
        assert_eq!(names, vec!["MPI_Send", "MPI_Recv", "MPI_Send"]);
        assert_eq!(f[0], f[2], "interned once");
        assert_eq!(t.columns[1], types::TableColumn::U32s(vec![3, 4, 5]));
        assert_eq!(t.columns[2], types::TableColumn::Booleans(vec![false; 3]));
        assert_eq!(t.columns[3], types::TableColumn::S64s(vec![0; 3]));
    }
}
