//! history/: the master's embedded, durable, bounded metric history.
//!
//! ```text
//!  receivers (several tasks)                       flush thread (every flush_interval_ms)
//!    │ append(key, [(t_ns, v)])                       │ series list, WAL record out (write(), no fsync)
//!    ▼                                                │ idle series: close buckets, seal chunks
//!  ┌──────────────── one mutex ────────────────┐      │ every 30 s: seal raw chunks older than the
//!  │ key ─► id (refused past max_series)       │ ◄────┘   current WAL file, fsync, drop old WAL files
//!  │ raw head chunk ──full/60 s──► raw/NNN.seg │        budgets: age, then disk, then memory
//!  │   └─ 1 s open bucket ─closed─► 1 s head ──full──► 1s/NNN.seg
//!  │        └─ 60 s open bucket ─closed─► 60 s head ─full─► 60s/NNN.seg
//!  │ raw points since the last flush ──────────► wal/NNN.wal
//!  └───────────────────────────────────────────┘
//!  query(id, from, to, step) ─ picks a tier, copies chunk refs + head under the lock,
//!                              reads (pread) and decodes outside it ─► Buckets
//! ```
//! - Points are Gorilla-compressed (`codec.rs`): delta-of-delta ns timestamps,
//!   XORed f64 values; a rollup bucket keeps min, max, mean and count. Values
//!   and timestamps round-trip exactly.
//! - Each tier is an append-only log of segment files (`log.rs`: framed,
//!   CRC-checked records). Eviction deletes a tier's oldest segment whole:
//!   by age (older than the tier keeps), by the disk budget (from the tier
//!   whose oldest data is oldest relative to its retention), by the memory
//!   budget (open chunks are written out early first). Every evicted point is
//!   counted per tier and reason.
//! - Durability: a SIGKILL loses at most the last flush interval of raw points
//!   (they are in the WAL otherwise; open rollup chunks are rebuilt from the
//!   tier below at open), and none that [`History::sync_wal`] returned Ok
//!   after: a master answers its agents only then. A torn or corrupt record
//!   is skipped and counted; a file is never appended to after one (the next
//!   write starts a new file). A write the disk refuses (full) loses
//!   nothing: WAL records and head chunks are kept in memory and written
//!   again later, and the WAL files a head still needs are kept.
//! - Limits: at most `max_series` series (refused past it, counted); points of
//!   a series must come in increasing time (others are dropped, counted);
//!   NaN is kept raw but left out of rollups. Storage choice and measured
//!   figures: `README.md` here.

mod codec;
pub mod config;
mod log;
mod query;
mod store;

#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Result;
use parking_lot::{Condvar, Mutex};
use serde::Serialize;

pub use config::{HistoryConfig, TierConfig};

use crate::model::MetricSeries;
use query::QueryCache;
pub use query::QueryCacheStats;

/// What identifies a series: metric name, unit and string attributes, sorted
/// by attribute name (the node's `host.name` and the job's `sonde.job` are
/// among them).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct SeriesKey {
    name: String,
    unit: String,
    attributes: Vec<(String, String)>,
}

impl SeriesKey {
    /// A key; attributes are sorted by name (a repeated name keeps its last value).
    pub fn new<K: Into<String>, V: Into<String>>(
        name: impl Into<String>,
        unit: impl Into<String>,
        attributes: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        let mut attrs: Vec<(String, String)> = attributes.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        attrs.reverse();
        attrs.sort_by(|a, b| a.0.cmp(&b.0));
        attrs.dedup_by(|a, b| a.0 == b.0);
        Self {
            name: name.into(),
            unit: unit.into(),
            attributes: attrs,
        }
    }

    /// The key of a metric series plus resource attributes (`host.name`,
    /// `sonde.job`, …); non-string attribute values are written as text.
    pub fn from_metric(series: &MetricSeries, resource: &[(String, String)]) -> Self {
        let attrs = resource
            .iter()
            .cloned()
            .chain(series.attributes.iter().map(|(k, v)| (k.clone(), v.text())));
        Self::new(series.name.clone(), series.unit.clone(), attrs)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn unit(&self) -> &str {
        &self.unit
    }

    /// Sorted by name.
    pub fn attributes(&self) -> &[(String, String)] {
        &self.attributes
    }

    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attributes
            .binary_search_by(|(k, _)| k.as_str().cmp(name))
            .ok()
            .map(|i| self.attributes[i].1.as_str())
    }
}

/// Which series `History::series` lists. Empty fields match everything.
#[derive(Clone, Debug, Default)]
pub struct SeriesFilter {
    /// Metric names starting with this.
    pub name_prefix: String,
    /// Attributes that must be equal (e.g. `("host.name", "node-3")`).
    pub attributes: Vec<(String, String)>,
    /// Only series with data overlapping `[from_ms, to_ms]` (ms since the Unix epoch).
    pub from_ms: Option<u64>,
    pub to_ms: Option<u64>,
}

/// One series kept.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SeriesInfo {
    /// Stable across restarts while the series has data.
    pub id: u32,
    pub key: SeriesKey,
    /// Oldest time still kept in any tier, ms since the Unix epoch.
    pub first_ms: u64,
    /// Newest point's time, ms since the Unix epoch.
    pub last_ms: u64,
}

/// Downsampled data of one series: bucket start times (ms since the Unix
/// epoch, multiples of the query step) with min, max, mean and the number of
/// raw points behind each. Empty buckets are left out. The shape of the live
/// store's `Buckets`, plus `count` and the resolution of the tier it came from.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Buckets {
    pub id: u32,
    /// Resolution of the data the buckets were made from: 0 for raw points, else the tier's step.
    pub resolution_ms: u64,
    pub t: Vec<u64>,
    pub min: Vec<f64>,
    pub max: Vec<f64>,
    pub mean: Vec<f64>,
    pub count: Vec<u64>,
}

/// Why an append was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the history keeps at most {max} series; a new series is refused")]
    TooManySeries { max: usize },
    #[error("the history has handed out every series id; restart to compact")]
    IdsExhausted,
}

/// Counts for one tier (`raw` first). Evictions are in points (raw) or buckets.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct TierStats {
    pub name: String,
    /// 0 for raw.
    pub step_ms: u64,
    pub keep_s: u64,
    pub disk_bytes: u64,
    pub memory_bytes: u64,
    pub segments: usize,
    pub chunks: u64,
    pub points_on_disk: u64,
    pub oldest_ms: Option<u64>,
    pub evicted_age: u64,
    pub evicted_disk_budget: u64,
    pub evicted_memory_budget: u64,
    /// Buckets that arrived after a later one had closed (dropped from this tier only).
    pub late: u64,
}

/// Counts for the whole history.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct HistoryStats {
    pub series: usize,
    pub max_series: usize,
    pub refused_series: u64,
    pub points_appended: u64,
    /// Points not after their series' last point, dropped.
    pub out_of_order: u64,
    /// Records or chunks skipped because they did not check out (torn writes, damage).
    pub corrupt_records: u64,
    pub io_errors: u64,
    pub points_lost_to_io: u64,
    /// Open chunks written out early to stay within the memory budget.
    pub early_seals: u64,
    pub disk_bytes: u64,
    pub disk_budget_bytes: u64,
    pub memory_bytes: u64,
    pub memory_budget_bytes: u64,
    pub wal_bytes: u64,
    pub series_log_bytes: u64,
    pub tiers: Vec<TierStats>,
    /// The buckets of sealed chunks kept for the next query (`query.rs`).
    pub query_cache: QueryCacheStats,
}

struct Shared {
    inner: Mutex<store::Inner>,
    /// Its own lock: queries from several threads never wait for the store's.
    query_cache: QueryCache,
    stop: Mutex<bool>,
    wake: Condvar,
}

impl Shared {
    fn flush(&self, force_roll: bool) {
        let after = self.inner.lock().flush(force_roll);
        after.run();
    }
}

/// The embedded history. Cheap to share behind an `Arc`; every method takes
/// `&self`. A background thread flushes; dropping the history stops it and
/// syncs what is open.
pub struct History {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl History {
    /// Opens (or creates) the history in `cfg.dir(data_dir)`, reading back
    /// what a previous run left, torn last writes included (skipped, counted).
    pub fn open(cfg: &HistoryConfig, data_dir: &Path) -> Result<History> {
        Self::open_with_clock(cfg, data_dir, crate::model::now_ns)
    }

    /// As [`History::open`], with the clock that ages data out (ns since the Unix epoch).
    pub fn open_with_clock(cfg: &HistoryConfig, data_dir: &Path, now: fn() -> u64) -> Result<History> {
        if let Err(e) = crate::config::check::Check::run("storage.history", |c| cfg.validate(c)) {
            anyhow::bail!("invalid history config: {e}");
        }
        let dir = cfg.dir(data_dir);
        let inner = store::Inner::open(cfg, &dir, now)?;
        let shared = Arc::new(Shared {
            inner: Mutex::new(inner),
            query_cache: QueryCache::new(cfg.query_cache_bytes),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let s = shared.clone();
        let every = Duration::from_millis(cfg.flush_interval_ms);
        let thread = std::thread::Builder::new()
            .name("sonde-history".into())
            .spawn(move || {
                loop {
                    {
                        let mut stop = s.stop.lock();
                        if !*stop {
                            s.wake.wait_for(&mut stop, every);
                        }
                        if *stop {
                            return;
                        }
                    }
                    s.flush(false);
                }
            })?;
        Ok(History {
            shared,
            thread: Some(thread),
        })
    }

    /// Appends points of one series, `(t_ns, value)` in increasing time (a
    /// point not after the series' last one is dropped and counted). Refused
    /// only for a new series past `max_series`.
    pub fn append(&self, key: &SeriesKey, points: &[(u64, f64)]) -> Result<(), Refused> {
        let mut g = self.shared.inner.lock();
        let id = g.resolve(key)?;
        g.append(id, points);
        Ok(())
    }

    /// Appends to a series by id (from [`History::id_of`] or a listing); unknown ids are ignored.
    pub fn append_id(&self, id: u32, points: &[(u64, f64)]) {
        self.shared.inner.lock().append(id, points);
    }

    pub fn id_of(&self, key: &SeriesKey) -> Option<u32> {
        self.shared.inner.lock().id_of(key)
    }

    /// Series matching the filter, in id order.
    pub fn series(&self, filter: &SeriesFilter) -> Vec<SeriesInfo> {
        self.shared.inner.lock().series_list(filter)
    }

    /// min/max/mean per bucket of `step_ms` over `[from_ms, to_ms]` (ms since
    /// the Unix epoch, buckets aligned to multiples of `step_ms`). The tier is
    /// picked per series: of those that still reach back to `from_ms`, the
    /// coarsest whose step is at most `step_ms` (fewest points read; exact
    /// when its step divides `step_ms`, else each tier bucket counts where it
    /// starts), raw points when `step_ms` is finer than every tier, and the
    /// tier reaching furthest back when none reaches `from_ms`. An unknown id
    /// gives empty buckets.
    pub fn query(&self, id: u32, from_ms: u64, to_ms: u64, step_ms: u64) -> Buckets {
        let snap = self.shared.inner.lock().snapshot_query(id, from_ms, to_ms, step_ms);
        let Some(snap) = snap else {
            return Buckets {
                id,
                ..Default::default()
            };
        };
        let mut corrupt = 0;
        let b = snap.buckets(id, (from_ms, to_ms), step_ms, &self.shared.query_cache, &mut corrupt);
        self.note_corrupt(corrupt);
        b
    }

    /// The raw points of a series in `[from_ns, to_ns]`, exactly as appended
    /// (within the raw window).
    pub fn raw(&self, id: u32, from_ns: u64, to_ns: u64) -> Vec<(u64, f64)> {
        let snap = self.shared.inner.lock().snapshot_raw(id, from_ns, to_ns);
        let mut out = Vec::new();
        let Some(snap) = snap else { return out };
        let mut corrupt = 0;
        snap.for_each(&mut corrupt, |t, v| {
            if t >= from_ns && t <= to_ns {
                out.push((t, v[0]));
            }
        });
        self.note_corrupt(corrupt);
        out
    }

    fn note_corrupt(&self, n: u64) {
        if n > 0 {
            self.shared.inner.lock().note_corrupt(n);
        }
    }

    pub fn stats(&self) -> HistoryStats {
        let mut st = self.shared.inner.lock().stats();
        st.query_cache = self.shared.query_cache.stats();
        st
    }

    /// Every point appended so far written to the write-ahead log and synced
    /// to disk (`fdatasync`). The master answers a sonde's request only
    /// after this (`ingest/durable.rs`), so an acknowledged point survives
    /// a `kill -9` of the master and a machine crash. Err when the disk
    /// refuses (full): what it could not write stays in memory and is
    /// written by the next call or flush; the caller refuses meanwhile.
    pub fn sync_wal(&self) -> Result<(), String> {
        let files = self.shared.inner.lock().write_for_sync()?;
        for f in files {
            f.sync_data()
                .map_err(|e| format!("the history cannot sync its write-ahead log: {e}"))?;
        }
        Ok(())
    }

    /// Writes what is pending now (what the flush thread does every interval).
    pub fn flush(&self) {
        self.shared.flush(false);
    }

    #[cfg(test)]
    fn flush_rolling(&self) {
        self.shared.flush(true);
    }

    #[cfg(test)]
    fn with_inner<R>(&self, f: impl FnOnce(&mut store::Inner) -> R) -> R {
        f(&mut self.shared.inner.lock())
    }
}

impl Drop for History {
    fn drop(&mut self) {
        *self.shared.stop.lock() = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let after = self.shared.inner.lock().close();
        after.run();
    }
}
