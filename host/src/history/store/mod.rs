//! The engine behind [`super::History`]: series, head chunks, tier segment
//! logs, the write-ahead log, eviction. Everything here runs under one mutex
//! (see `mod.rs` for the picture); file reads for queries happen outside it.
//!
//! One job per file:
//! - here: the state (series, their tiers, segments, the WAL and series-list
//!   files), its counters and stats, and a clean shutdown;
//! - `recovery.rs`: opening a directory, step by step (series list, segments,
//!   WAL replay, rollups rebuilt);
//! - `append.rs`: points in, and the rollup buckets they close;
//! - `segment.rs`: a head chunk sealed into its tier's segment log;
//! - `wal.rs`: the periodic flush (series list and WAL out, idle series
//!   sealed, the WAL rolled);
//! - `evict.rs`: the age, disk and memory budgets;
//! - `read.rs`: what a query takes under the lock, and reading it after.

mod append;
mod evict;
mod read;
mod recovery;
mod segment;
mod wal;

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::hash::BuildHasherDefault;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHasher;

use super::codec::ChunkEnc;
use super::log;
use super::{HistoryConfig, HistoryStats, SeriesKey, TierStats};
use segment::seal;

/// Looked up per append: FxHash rather than SipHash (keys are ours, not an attacker's choice of hash).
type FxHashMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// Most points in a raw chunk.
const RAW_CHUNK_POINTS: u32 = 4096;
/// Longest span of a raw chunk.
const RAW_CHUNK_SPAN_NS: u64 = 60_000_000_000;
/// Most buckets in a rollup chunk, and its longest span. An open rollup chunk
/// is rebuilt from the finer tier after a crash, so this bounds that work (and
/// a chunk never spans more than half of what the finer tier keeps).
const ROLLUP_CHUNK_POINTS: u64 = 300;
const ROLLUP_CHUNK_SPAN_NS: u64 = 3_600_000_000_000;
/// The write-ahead log starts a new file this often (wall clock, or the time
/// of the points written); files older than the one before are deleted once
/// the raw chunks they fed are sealed.
const WAL_ROLL: Duration = Duration::from_secs(30);
/// ... or when its file reaches this size (a fast writer, or a replay).
const WAL_ROLL_BYTES: u64 = 16 << 20;
/// A series that got nothing for this long has its open buckets closed and its
/// chunks sealed (so that a stopped job's tail is on disk, not only in memory).
const IDLE_SEAL: Duration = Duration::from_secs(60);
/// Bytes of a chunk record's payload before the encoded data.
const CHUNK_HEAD: usize = 25;
/// Largest WAL record written; a flush writes several if it has more.
const WAL_RECORD_MAX: usize = 8 << 20;
/// Most bytes of WAL records kept in memory while the disk refuses them.
/// Sondes' requests are refused meanwhile, so only what is taken without
/// waiting (the master's own samples, foreign OTLP) adds to it.
const UNWRITTEN_MAX: usize = 64 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reason {
    Age,
    Disk,
    Memory,
}

/// One tier's shape. Tier 0 holds raw points.
#[derive(Clone, Debug)]
pub(crate) struct TierSpec {
    pub name: String,
    /// Bucket width; 0 for raw.
    pub step_ns: u64,
    pub keep_ns: u64,
    pub cols: usize,
    pub max_points: u32,
    pub max_span_ns: u64,
}

fn specs(cfg: &HistoryConfig) -> Vec<TierSpec> {
    let raw_keep = cfg.raw_window_s * 1_000_000_000;
    let mut v = vec![TierSpec {
        name: "raw".into(),
        step_ns: 0,
        keep_ns: raw_keep,
        cols: 1,
        max_points: RAW_CHUNK_POINTS,
        max_span_ns: RAW_CHUNK_SPAN_NS.min((raw_keep / 4).max(1_000_000_000)),
    }];
    for t in &cfg.tiers {
        let step = t.step_s * 1_000_000_000;
        let finer_keep = v.last().map(|s| s.keep_ns).unwrap_or(raw_keep);
        let pts = ROLLUP_CHUNK_POINTS
            .min(finer_keep / step / 2)
            .min(ROLLUP_CHUNK_SPAN_NS / step)
            .max(1);
        v.push(TierSpec {
            name: format!("{}s", t.step_s),
            step_ns: step,
            keep_ns: t.keep_s * 1_000_000_000,
            cols: 4,
            max_points: pts as u32,
            max_span_ns: pts * step,
        });
    }
    v
}

/// Where a sealed chunk's encoded data lies.
#[derive(Clone, Copy, Debug)]
pub(super) struct ChunkRef {
    pub(super) seg: u64,
    pub(super) off: u64,
    len: u32,
    n: u32,
    pub(super) t_first: u64,
    pub(super) t_last: u64,
}

/// An open bucket of a rollup tier.
#[derive(Clone, Copy, Debug)]
pub(super) struct Agg {
    pub(super) start: u64,
    pub(super) min: f64,
    pub(super) max: f64,
    pub(super) sum: f64,
    pub(super) count: u64,
}

impl Agg {
    pub(super) fn merge(&mut self, o: &Agg) {
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
        self.sum += o.sum;
        self.count += o.count;
    }
    fn values(&self) -> [f64; 4] {
        [self.min, self.max, self.sum / self.count as f64, self.count as f64]
    }
    pub(super) fn from_values(start: u64, v: &[f64]) -> Agg {
        let count = v[3].max(0.0) as u64;
        Agg {
            start,
            min: v[0],
            max: v[1],
            sum: v[2] * count as f64,
            count,
        }
    }
    pub(super) fn point(t: u64, v: f64) -> Agg {
        Agg {
            start: t,
            min: v,
            max: v,
            sum: v,
            count: 1,
        }
    }
}

struct SeriesTier {
    chunks: VecDeque<ChunkRef>,
    head: ChunkEnc,
    /// Raw tier: the WAL generation of the head's first point.
    head_gen: u64,
    /// Rollup tiers: the open bucket.
    agg: Option<Agg>,
    /// Time of the last point (raw) or closed bucket (rollups) in this tier.
    last_t: u64,
}

impl SeriesTier {
    fn new(cols: usize) -> Self {
        Self {
            chunks: VecDeque::new(),
            head: ChunkEnc::new(cols),
            head_gen: 0,
            agg: None,
            last_t: 0,
        }
    }

    fn first_t(&self) -> Option<u64> {
        let c = self.chunks.front().map(|c| c.t_first);
        let h = (!self.head.is_empty()).then(|| self.head.t_first());
        let a = self.agg.map(|a| a.start);
        [c, h, a].into_iter().flatten().min()
    }

    fn is_empty(&self) -> bool {
        self.chunks.is_empty() && self.head.is_empty() && self.agg.is_none()
    }

    fn memory(&self) -> usize {
        std::mem::size_of::<Self>() + self.chunks.capacity() * std::mem::size_of::<ChunkRef>() + self.head.heap_bytes()
    }
}

struct Series {
    key: SeriesKey,
    /// Time of the last raw point taken.
    last_t: u64,
    tiers: Vec<SeriesTier>,
    /// Raw points since the last flush, for the WAL.
    wal: ChunkEnc,
    /// When the last append came, seconds after `Inner::epoch`.
    last_append_s: u32,
    idle_sealed: bool,
}

impl Series {
    fn new(key: SeriesKey, specs: &[TierSpec]) -> Self {
        Self {
            key,
            last_t: 0,
            tiers: specs.iter().map(|s| SeriesTier::new(s.cols)).collect(),
            wal: ChunkEnc::new(1),
            last_append_s: 0,
            idle_sealed: true,
        }
    }

    fn key_bytes(&self) -> usize {
        self.key.name().len()
            + self.key.unit().len()
            + self
                .key
                .attributes()
                .iter()
                .map(|(k, v)| k.len() + v.len() + 48)
                .sum::<usize>()
    }

    fn memory(&self) -> usize {
        // The key is held twice (here and in the lookup map).
        std::mem::size_of::<Self>() + 2 * self.key_bytes() + 64 + self.wal.heap_bytes()
    }

    fn has_data(&self) -> bool {
        self.tiers.iter().any(|t| !t.is_empty()) || !self.wal.is_empty()
    }
}

struct Segment {
    id: u64,
    path: PathBuf,
    file: Arc<File>,
    bytes: u64,
    min_t: u64,
    max_t: u64,
    points: u64,
    chunks: u64,
}

struct TierStore {
    spec: TierSpec,
    dir: PathBuf,
    /// Oldest first; the last one is written to when `writing`.
    segs: VecDeque<Segment>,
    writing: bool,
    next_id: u64,
    evicted: [u64; 3],
    late: u64,
    /// After a failed write (a full disk) heads are kept, not sealed, until
    /// then: one failed attempt a second, not one per point.
    retry_at: Option<Instant>,
}

impl TierStore {
    fn disk_bytes(&self) -> u64 {
        self.segs.iter().map(|s| s.bytes).sum()
    }

    fn seg(&self, id: u64) -> Option<&Segment> {
        let i = self.segs.binary_search_by_key(&id, |s| s.id).ok()?;
        self.segs.get(i)
    }
}

struct Wal {
    dir: PathBuf,
    gen_: u64,
    file: Option<Arc<File>>,
    /// The file rolled last: synced by the flush that rolled it, after the
    /// lock; [`Inner::write_for_sync`] syncs it too, so that a sync never
    /// returns before what went to it is on disk.
    rolled: Option<Arc<File>>,
    /// Framed records a failed write left (a full disk): written first, to a
    /// new file, at the next flush; their points are not lost meanwhile.
    unwritten: Vec<u8>,
    unwritten_points: u64,
    started: Instant,
    /// The newest point's time when this file was started.
    started_t: u64,
    /// (generation, path, bytes) of every WAL file on disk, the current one last.
    files: VecDeque<(u64, PathBuf, u64)>,
}

impl Wal {
    fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.2).sum()
    }
}

struct SeriesLog {
    path: PathBuf,
    file: File,
    pending: Vec<u8>,
    bytes: u64,
    /// Written since the last sync.
    unsynced: bool,
}

/// Work that must happen after the lock is released: fsyncs, then deletions.
#[derive(Default)]
pub(crate) struct After {
    sync: Vec<Arc<File>>,
    delete: Vec<PathBuf>,
}

impl After {
    pub(crate) fn run(self) {
        for f in &self.sync {
            if let Err(e) = f.sync_data() {
                tracing::warn!("history: fsync failed: {e}");
            }
        }
        for p in &self.delete {
            if let Err(e) = std::fs::remove_file(p)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!("history: removing {}: {e}", p.display());
            }
        }
    }
}

/// A chunk to read after the lock is released.
pub(super) struct ReadChunk {
    file: Arc<File>,
    pub(super) r: ChunkRef,
}

/// What a query needs from one tier of one series, taken under the lock.
pub(crate) struct Snapshot {
    tier: usize,
    step_ns: u64,
    cols: usize,
    chunks: Vec<ReadChunk>,
    head: Option<(Vec<u8>, u32)>,
    /// The open bucket, with what finer tiers hold open for it (at most two: its bucket and the next).
    aggs: Vec<Agg>,
}

#[derive(Default, Clone, Copy)]
struct Counters {
    points_appended: u64,
    out_of_order: u64,
    refused_series: u64,
    corrupt_records: u64,
    io_errors: u64,
    points_lost_to_io: u64,
    early_seals: u64,
}

pub(crate) struct Inner {
    specs: Vec<TierSpec>,
    disk_budget: u64,
    memory_budget: u64,
    max_series: usize,
    seg_target: u64,
    series: FxHashMap<u32, Series>,
    by_key: FxHashMap<SeriesKey, u32>,
    next_id: u32,
    tiers: Vec<TierStore>,
    wal: Wal,
    slog: SeriesLog,
    dirty: Vec<u32>,
    to_sync: Vec<Arc<File>>,
    c: Counters,
    scratch: Vec<u8>,
    now: fn() -> u64,
    /// Start of the coarse clock that idle series are told by.
    epoch: Instant,
    /// Added to that clock (tests only move it).
    idle_skew_s: u32,
    /// The newest point's time seen.
    max_t: u64,
    /// Held (flock) while open: one writer per directory.
    _lock: File,
}

fn ns_to_ms(t: u64) -> u64 {
    t / 1_000_000
}

fn series_payload(id: u32, key: &SeriesKey) -> Vec<u8> {
    let mut p = Vec::with_capacity(64);
    p.extend_from_slice(&id.to_le_bytes());
    log::put_str(&mut p, key.name());
    log::put_str(&mut p, key.unit());
    p.extend_from_slice(&(key.attributes().len() as u32).to_le_bytes());
    for (k, v) in key.attributes() {
        log::put_str(&mut p, k);
        log::put_str(&mut p, v);
    }
    p
}

impl Inner {
    pub(crate) fn disk_bytes(&self) -> u64 {
        self.tiers.iter().map(|t| t.disk_bytes()).sum::<u64>() + self.wal.bytes() + self.slog.bytes
    }

    pub(crate) fn memory_bytes(&self) -> u64 {
        let per_series: usize = self
            .series
            .values()
            .map(|s| s.memory() + s.tiers.iter().map(|t| t.memory()).sum::<usize>())
            .sum();
        (per_series + self.scratch.capacity() + self.slog.pending.capacity()) as u64
    }

    /// Moves the idle clock on, as if no point had come for `d`.
    #[cfg(test)]
    pub(crate) fn pretend_idle(&mut self, d: Duration) {
        self.idle_skew_s += d.as_secs() as u32;
    }

    fn idle_clock_s(&self) -> u32 {
        (self.epoch.elapsed().as_secs() as u32).saturating_add(self.idle_skew_s)
    }

    /// Points the files the history appends to now (the WAL's, each tier's
    /// segment) at `dev`. A test hands `/dev/full`, which answers
    /// every write with ENOSPC, as a full disk does; the next file the
    /// history creates is a real one again.
    #[cfg(test)]
    pub(crate) fn point_writes_at(&mut self, dev: &std::path::Path) {
        let f = Arc::new(std::fs::OpenOptions::new().append(true).open(dev).expect("opens"));
        self.wal.file = Some(f.clone());
        // A segment of its own per tier (the sealed ones must stay readable).
        for t in &mut self.tiers {
            let id = t.next_id;
            t.next_id += 1;
            t.segs.push_back(Segment {
                id,
                path: t.dir.join(format!("{id}.unwritable")),
                file: f.clone(),
                bytes: 0,
                min_t: u64::MAX,
                max_t: 0,
                points: 0,
                chunks: 0,
            });
            t.writing = true;
        }
    }

    pub(crate) fn note_corrupt(&mut self, n: u64) {
        self.c.corrupt_records += n;
    }

    pub(crate) fn id_of(&self, key: &SeriesKey) -> Option<u32> {
        self.by_key.get(key).copied()
    }

    pub(crate) fn stats(&self) -> HistoryStats {
        let mut tiers = Vec::new();
        for (k, t) in self.tiers.iter().enumerate() {
            let memory: usize = self.series.values().map(|s| s.tiers[k].memory()).sum();
            tiers.push(TierStats {
                name: t.spec.name.clone(),
                step_ms: t.spec.step_ns / 1_000_000,
                keep_s: t.spec.keep_ns / 1_000_000_000,
                disk_bytes: t.disk_bytes(),
                memory_bytes: memory as u64,
                segments: t.segs.len(),
                chunks: t.segs.iter().map(|s| s.chunks).sum(),
                points_on_disk: t.segs.iter().map(|s| s.points).sum(),
                oldest_ms: t.segs.front().filter(|s| s.chunks > 0).map(|s| ns_to_ms(s.min_t)),
                evicted_age: t.evicted[Reason::Age as usize],
                evicted_disk_budget: t.evicted[Reason::Disk as usize],
                evicted_memory_budget: t.evicted[Reason::Memory as usize],
                late: t.late,
            });
        }
        HistoryStats {
            series: self.series.len(),
            max_series: self.max_series,
            refused_series: self.c.refused_series,
            points_appended: self.c.points_appended,
            out_of_order: self.c.out_of_order,
            corrupt_records: self.c.corrupt_records,
            io_errors: self.c.io_errors,
            points_lost_to_io: self.c.points_lost_to_io,
            early_seals: self.c.early_seals,
            disk_bytes: self.disk_bytes(),
            disk_budget_bytes: self.disk_budget,
            memory_bytes: self.memory_bytes(),
            memory_budget_bytes: self.memory_budget,
            wal_bytes: self.wal.bytes(),
            series_log_bytes: self.slog.bytes,
            tiers,
            query_cache: Default::default(),
        }
    }

    /// A clean shutdown: every open chunk sealed (open buckets stay open: they
    /// are rebuilt from at most one bucket of the finer tier at the next open),
    /// the WAL emptied, every file synced.
    pub(crate) fn close(&mut self) -> After {
        let mut after = self.flush(false);
        let Inner {
            series,
            tiers,
            c,
            scratch,
            to_sync,
            seg_target,
            ..
        } = self;
        for (sid, s) in series.iter_mut() {
            for (k, st) in s.tiers.iter_mut().enumerate() {
                seal(&mut tiers[k], *sid, st, c, scratch, to_sync, *seg_target, true);
            }
        }
        after.sync.append(&mut self.to_sync);
        self.roll_wal(&mut after);
        self.roll_wal(&mut after);
        for t in &self.tiers {
            if t.writing
                && let Some(s) = t.segs.back()
            {
                after.sync.push(s.file.clone());
            }
        }
        if let Some(f) = &self.wal.file {
            after.sync.push(f.clone());
        }
        after
    }
}
