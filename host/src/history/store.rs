//! The engine behind [`super::History`]: series, head chunks, tier segment
//! logs, the write-ahead log, eviction. Everything here runs under one mutex
//! (see `mod.rs` for the picture); file reads for queries happen outside it.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::hash::BuildHasherDefault;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rustc_hash::FxHasher;

use super::codec::{ChunkEnc, decode};
use super::log::{self, Cur, KIND_CHUNK, KIND_SERIES, KIND_WAL};
use super::{HistoryConfig, HistoryStats, Refused, SeriesFilter, SeriesInfo, SeriesKey, TierStats};

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
    file: Option<File>,
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

/// Takes the directory's lock file, or says who holds it.
fn lock_dir(dir: &Path) -> Result<File> {
    use std::os::fd::AsRawFd;
    let path = dir.join("LOCK");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    // SAFETY: flock on a descriptor this function owns; no memory is involved.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        anyhow::bail!("{} is in use by another process (its LOCK is held)", dir.display());
    }
    Ok(f)
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

fn parse_series(p: &[u8]) -> Option<(u32, SeriesKey)> {
    let mut c = Cur { b: p };
    let id = c.u32()?;
    let name = c.str()?.to_string();
    let unit = c.str()?.to_string();
    let n = c.u32()? as usize;
    let mut attrs = Vec::with_capacity(n.min(256));
    for _ in 0..n {
        attrs.push((c.str()?.to_string(), c.str()?.to_string()));
    }
    Some((id, SeriesKey::new(name, unit, attrs)))
}

impl Inner {
    pub(crate) fn open(cfg: &HistoryConfig, dir: &Path, now: fn() -> u64) -> Result<Inner> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let lock = lock_dir(dir)?;
        let specs = specs(cfg);
        let mut c = Counters::default();

        // 1. The series list.
        let slog_path = dir.join("series.log");
        let mut series: FxHashMap<u32, Series> = FxHashMap::default();
        let mut by_key: FxHashMap<SeriesKey, u32> = FxHashMap::default();
        let mut next_id = 0u32;
        if slog_path.exists() {
            let data = std::fs::read(&slog_path).with_context(|| format!("reading {}", slog_path.display()))?;
            let out = log::read_records(&data, |kind, _, p| {
                if kind != KIND_SERIES {
                    return;
                }
                match parse_series(p) {
                    Some((id, key)) => {
                        next_id = next_id.max(id.saturating_add(1));
                        if let Some(old) = by_key.insert(key.clone(), id) {
                            series.remove(&old);
                        }
                        series.insert(id, Series::new(key, &specs));
                    }
                    None => c.corrupt_records += 1,
                }
            });
            c.corrupt_records += out.corrupt;
        }

        // 2. Tier segments: the chunk index.
        let mut tiers = Vec::new();
        let mut next_seg = 0u64;
        for (ti, spec) in specs.iter().enumerate() {
            let tdir = dir.join(&spec.name);
            std::fs::create_dir_all(&tdir).with_context(|| format!("creating {}", tdir.display()))?;
            let mut segs = VecDeque::new();
            for (id, path) in log::numbered_files(&tdir, "seg")? {
                next_seg = next_seg.max(id + 1);
                let data = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
                let mut seg = Segment {
                    id,
                    file: Arc::new(File::open(&path).with_context(|| format!("opening {}", path.display()))?),
                    path,
                    bytes: data.len() as u64,
                    min_t: u64::MAX,
                    max_t: 0,
                    points: 0,
                    chunks: 0,
                };
                let out = log::read_records(&data, |kind, off, p| {
                    if kind != KIND_CHUNK {
                        c.corrupt_records += 1;
                        return;
                    }
                    let mut cur = Cur { b: p };
                    let parsed = (|| Some((cur.u32()?, cur.u32()?, cur.u64()?, cur.u64()?, cur.u8()?)))();
                    let Some((sid, n, t_first, t_last, cols)) = parsed else {
                        c.corrupt_records += 1;
                        return;
                    };
                    let Some(s) = series.get_mut(&sid) else {
                        // A chunk of a series whose definition was lost.
                        c.corrupt_records += 1;
                        return;
                    };
                    let st = &mut s.tiers[ti];
                    if cols as usize != spec.cols || n == 0 || t_first > t_last || t_first <= st.last_t {
                        c.corrupt_records += 1;
                        return;
                    }
                    st.chunks.push_back(ChunkRef {
                        seg: id,
                        off: (off + log::HEADER + CHUNK_HEAD) as u64,
                        len: (p.len() - CHUNK_HEAD) as u32,
                        n,
                        t_first,
                        t_last,
                    });
                    st.last_t = t_last;
                    seg.min_t = seg.min_t.min(t_first);
                    seg.max_t = seg.max_t.max(t_last);
                    seg.points += n as u64;
                    seg.chunks += 1;
                });
                c.corrupt_records += out.corrupt;
                segs.push_back(seg);
            }
            tiers.push(TierStore {
                spec: spec.clone(),
                dir: tdir,
                segs,
                writing: false,
                next_id: 0,
                evicted: [0; 3],
                late: 0,
            });
        }
        for t in &mut tiers {
            t.next_id = next_seg;
        }
        for s in series.values_mut() {
            s.last_t = s.tiers[0].last_t;
        }

        let slog_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&slog_path)
            .with_context(|| format!("opening {}", slog_path.display()))?;
        let wal_dir = dir.join("wal");
        std::fs::create_dir_all(&wal_dir).with_context(|| format!("creating {}", wal_dir.display()))?;
        let seg_target = (cfg.disk_budget_bytes / 64).clamp(4 << 10, 64 << 20);
        let mut inner = Inner {
            specs,
            disk_budget: cfg.disk_budget_bytes,
            memory_budget: cfg.memory_budget_bytes,
            max_series: cfg.max_series,
            seg_target,
            series,
            by_key,
            next_id,
            tiers,
            wal: Wal {
                dir: wal_dir.clone(),
                gen_: 0,
                file: None,
                started: Instant::now(),
                started_t: 0,
                files: VecDeque::new(),
            },
            slog: SeriesLog {
                bytes: slog_file.metadata().map(|m| m.len()).unwrap_or(0),
                path: slog_path,
                file: slog_file,
                pending: Vec::new(),
            },
            dirty: Vec::new(),
            to_sync: Vec::new(),
            c,
            scratch: Vec::new(),
            now,
            epoch: Instant::now(),
            idle_skew_s: 0,
            max_t: 0,
            _lock: lock,
        };

        // 3. Replay the WAL into the raw heads.
        let mut max_gen = 0;
        for (gen_, path) in log::numbered_files(&wal_dir, "wal")? {
            max_gen = max_gen.max(gen_);
            let data = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            inner.wal.files.push_back((gen_, path, data.len() as u64));
            let mut corrupt = 0;
            let mut pts: Vec<(u64, f64)> = Vec::new();
            let mut entries: Vec<(u32, Vec<(u64, f64)>)> = Vec::new();
            let out = log::read_records(&data, |kind, _, p| {
                if kind != KIND_WAL {
                    corrupt += 1;
                    return;
                }
                let mut cur = Cur { b: p };
                while !cur.b.is_empty() {
                    let Some((sid, n, len)) = (|| Some((cur.u32()?, cur.u32()?, cur.u32()?)))() else {
                        corrupt += 1;
                        return;
                    };
                    let Some(bytes) = cur.bytes(len as usize) else {
                        corrupt += 1;
                        return;
                    };
                    pts.clear();
                    if decode(bytes, n, 1, |t, v| pts.push((t, v[0]))).is_none() {
                        corrupt += 1;
                        continue;
                    }
                    entries.push((sid, std::mem::take(&mut pts)));
                }
            });
            inner.c.corrupt_records += out.corrupt + corrupt;
            for (sid, pts) in entries {
                if !inner.series.contains_key(&sid) {
                    inner.c.corrupt_records += 1;
                    continue;
                }
                inner.replay_raw(sid, &pts, gen_);
            }
        }
        inner.wal.gen_ = max_gen + 1;
        inner.max_t = inner.series.values().map(|s| s.last_t).max().unwrap_or(0);
        inner.wal.started_t = inner.max_t;

        // 4. Rebuild each rollup tier's open part from the tier below it.
        for k in 1..inner.specs.len() {
            let ids: Vec<u32> = inner.series.keys().copied().collect();
            for sid in ids {
                inner.rederive(sid, k);
            }
        }

        // 5. Forget series with nothing left; rewrite the series list.
        inner.series.retain(|_, s| s.has_data());
        let live: FxHashMap<SeriesKey, u32> = inner.series.iter().map(|(id, s)| (s.key.clone(), *id)).collect();
        inner.by_key = live;
        inner.compact_series_log()?;
        Ok(inner)
    }

    fn replay_raw(&mut self, sid: u32, pts: &[(u64, f64)], gen_: u64) {
        let Inner {
            series,
            tiers,
            specs,
            c,
            scratch,
            to_sync,
            seg_target,
            ..
        } = self;
        let s = series.get_mut(&sid).expect("checked");
        for &(t, v) in pts {
            if t <= s.last_t {
                continue;
            }
            s.last_t = t;
            let raw = &mut s.tiers[0];
            if raw.head.is_empty() {
                raw.head_gen = gen_;
            }
            raw.head.push(t, &[v]);
            raw.last_t = t;
            if raw.head.len() >= specs[0].max_points || t - raw.head.t_first() >= specs[0].max_span_ns {
                seal(&mut tiers[0], sid, raw, c, scratch, to_sync, *seg_target, false);
            }
        }
        s.idle_sealed = false;
    }

    /// Feeds tier `k` of a series from tier `k-1`'s data after tier `k`'s last closed bucket.
    fn rederive(&mut self, sid: u32, k: usize) {
        let Some(s) = self.series.get(&sid) else { return };
        let step = self.specs[k].step_ns;
        let last = s.tiers[k].last_t;
        let from = if s.tiers[k].chunks.is_empty() && s.tiers[k].head.is_empty() {
            0
        } else {
            last + step
        };
        let Some(snap) = self.snapshot_tier(sid, k - 1, from, u64::MAX, false) else {
            return;
        };
        let mut items: Vec<(u64, Agg)> = Vec::new();
        let raw = k == 1;
        snap.for_each(&mut self.c.corrupt_records, |t, v| {
            if raw {
                if !v[0].is_nan() {
                    items.push((t, Agg::point(t, v[0])));
                }
            } else {
                items.push((t, Agg::from_values(t, v)));
            }
        });
        let Inner {
            series,
            tiers,
            specs,
            c,
            scratch,
            to_sync,
            seg_target,
            ..
        } = self;
        let s = series.get_mut(&sid).expect("present");
        for (t, a) in items {
            if let Some(closed) = feed(&specs[k], &mut s.tiers[k], &mut tiers[k].late, t, &a) {
                push_bucket(
                    &specs[k],
                    &mut tiers[k],
                    sid,
                    &mut s.tiers[k],
                    &closed,
                    c,
                    scratch,
                    to_sync,
                    *seg_target,
                );
            }
        }
        if s.tiers[k].agg.is_some() || !s.tiers[k].head.is_empty() {
            // Open again: close it when the series stays idle.
            s.idle_sealed = false;
        }
    }

    fn compact_series_log(&mut self) -> Result<()> {
        let mut buf = Vec::new();
        let mut ids: Vec<_> = self.series.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            log::frame(&mut buf, KIND_SERIES, &series_payload(id, &self.series[&id].key));
        }
        log::write_atomic(&self.slog.path, &buf)?;
        self.slog.file = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.slog.path)
            .with_context(|| format!("opening {}", self.slog.path.display()))?;
        self.slog.bytes = buf.len() as u64;
        Ok(())
    }

    // ---- appending ----

    pub(crate) fn resolve(&mut self, key: &SeriesKey) -> Result<u32, Refused> {
        if let Some(&id) = self.by_key.get(key) {
            return Ok(id);
        }
        if self.series.len() >= self.max_series {
            self.c.refused_series += 1;
            return Err(Refused::TooManySeries { max: self.max_series });
        }
        let id = self.next_id;
        self.next_id = self.next_id.checked_add(1).ok_or(Refused::IdsExhausted)?;
        log::frame(&mut self.slog.pending, KIND_SERIES, &series_payload(id, key));
        self.by_key.insert(key.clone(), id);
        self.series.insert(id, Series::new(key.clone(), &self.specs));
        Ok(id)
    }

    pub(crate) fn append(&mut self, sid: u32, pts: &[(u64, f64)]) {
        let now_s = self.idle_clock_s();
        let Inner {
            series,
            tiers,
            specs,
            c,
            scratch,
            to_sync,
            seg_target,
            wal,
            dirty,
            max_t,
            ..
        } = self;
        let Some(s) = series.get_mut(&sid) else { return };
        for &(t, v) in pts {
            if t <= s.last_t {
                c.out_of_order += 1;
                continue;
            }
            c.points_appended += 1;
            s.last_t = t;
            if s.wal.is_empty() {
                dirty.push(sid);
            }
            s.wal.push(t, &[v]);
            let raw = &mut s.tiers[0];
            if raw.head.is_empty() {
                raw.head_gen = wal.gen_;
            }
            raw.head.push(t, &[v]);
            raw.last_t = t;
            if raw.head.len() >= specs[0].max_points || t - raw.head.t_first() >= specs[0].max_span_ns {
                seal(&mut tiers[0], sid, raw, c, scratch, to_sync, *seg_target, false);
            }
            if v.is_nan() || specs.len() < 2 {
                continue;
            }
            // Roll up: a bucket that closes in tier k feeds tier k+1.
            let mut inp = Agg::point(t, v);
            let mut inp_t = t;
            for k in 1..specs.len() {
                match feed(&specs[k], &mut s.tiers[k], &mut tiers[k].late, inp_t, &inp) {
                    Some(closed) => {
                        push_bucket(
                            &specs[k],
                            &mut tiers[k],
                            sid,
                            &mut s.tiers[k],
                            &closed,
                            c,
                            scratch,
                            to_sync,
                            *seg_target,
                        );
                        inp = closed;
                        inp_t = closed.start;
                    }
                    None => break,
                }
            }
        }
        s.last_append_s = now_s;
        *max_t = (*max_t).max(s.last_t);
        s.idle_sealed = false;
    }

    /// Closes every open bucket of a series (finest first, each feeding the next) and seals every head.
    fn close_series(&mut self, sid: u32) {
        let Inner {
            series,
            tiers,
            specs,
            c,
            scratch,
            to_sync,
            seg_target,
            ..
        } = self;
        let Some(s) = series.get_mut(&sid) else { return };
        for k in 1..specs.len() {
            if let Some(a) = s.tiers[k].agg.take() {
                push_bucket(
                    &specs[k],
                    &mut tiers[k],
                    sid,
                    &mut s.tiers[k],
                    &a,
                    c,
                    scratch,
                    to_sync,
                    *seg_target,
                );
                if k + 1 < specs.len() {
                    // Merge into the coarser open bucket; anything it closes is pushed too.
                    let mut inp = a;
                    for j in k + 1..specs.len() {
                        match feed(&specs[j], &mut s.tiers[j], &mut tiers[j].late, inp.start, &inp) {
                            Some(closed) => {
                                push_bucket(
                                    &specs[j],
                                    &mut tiers[j],
                                    sid,
                                    &mut s.tiers[j],
                                    &closed,
                                    c,
                                    scratch,
                                    to_sync,
                                    *seg_target,
                                );
                                inp = closed;
                            }
                            None => break,
                        }
                    }
                }
            }
        }
        for (k, st) in s.tiers.iter_mut().enumerate() {
            seal(&mut tiers[k], sid, st, c, scratch, to_sync, *seg_target, true);
        }
    }

    // ---- flushing, rolling, evicting ----

    /// The periodic work: series list and WAL out, idle series sealed, WAL
    /// rolled, budgets enforced. File syncs and deletions are handed back.
    pub(crate) fn flush(&mut self, force_roll: bool) -> After {
        let mut after = After::default();
        if !self.slog.pending.is_empty() {
            match self.slog.file.write_all(&self.slog.pending) {
                Ok(()) => self.slog.bytes += self.slog.pending.len() as u64,
                Err(e) => {
                    self.c.io_errors += 1;
                    tracing::warn!("history: writing the series list: {e}");
                }
            }
            self.slog.pending.clear();
        }
        self.write_wal();

        // Idle series: close and seal, so their tail is durable in every tier.
        let now_s = self.idle_clock_s();
        let mut idle = Vec::new();
        for (id, s) in self.series.iter_mut() {
            if !s.idle_sealed && now_s.saturating_sub(s.last_append_s) as u64 >= IDLE_SEAL.as_secs() {
                s.idle_sealed = true;
                idle.push(*id);
            }
        }
        for id in idle {
            self.close_series(id);
        }

        let wal_file_bytes = self
            .wal
            .files
            .back()
            .filter(|_| self.wal.file.is_some())
            .map_or(0, |f| f.2);
        let by_data = self.max_t >= self.wal.started_t.saturating_add(WAL_ROLL.as_nanos() as u64);
        if force_roll || by_data || self.wal.started.elapsed() >= WAL_ROLL || wal_file_bytes >= WAL_ROLL_BYTES {
            self.roll_wal(&mut after);
        }
        self.enforce(&mut after);
        after.sync.append(&mut self.to_sync);
        after
    }

    fn write_wal(&mut self) {
        if self.dirty.is_empty() {
            return;
        }
        let mut payload = Vec::new();
        let mut records = Vec::new();
        for sid in std::mem::take(&mut self.dirty) {
            let Some(s) = self.series.get_mut(&sid) else { continue };
            if s.wal.is_empty() {
                continue;
            }
            payload.extend_from_slice(&sid.to_le_bytes());
            payload.extend_from_slice(&s.wal.len().to_le_bytes());
            payload.extend_from_slice(&(s.wal.byte_len() as u32).to_le_bytes());
            s.wal.append_bytes_to(&mut payload);
            // Keep a small buffer for the next second's points; give a big one back.
            s.wal.reset(s.wal.heap_bytes() > 1024);
            if payload.len() >= WAL_RECORD_MAX {
                log::frame(&mut records, KIND_WAL, &payload);
                payload.clear();
            }
        }
        if !payload.is_empty() {
            log::frame(&mut records, KIND_WAL, &payload);
        }
        if records.is_empty() {
            return;
        }
        if self.wal.file.is_none() {
            let path = log::numbered_path(&self.wal.dir, self.wal.gen_, "wal");
            match log::create_append(&path) {
                Ok(f) => {
                    self.wal.file = Some(f);
                    self.wal.files.push_back((self.wal.gen_, path, 0));
                }
                Err(e) => {
                    self.c.io_errors += 1;
                    tracing::warn!("history: {e:#}");
                    return;
                }
            }
        }
        let f = self.wal.file.as_mut().expect("just made");
        match f.write_all(&records) {
            Ok(()) => {
                if let Some(last) = self.wal.files.back_mut() {
                    last.2 += records.len() as u64;
                }
            }
            Err(e) => {
                self.c.io_errors += 1;
                tracing::warn!("history: writing the write-ahead log: {e}");
                // Start a fresh file: never append after a partial record.
                self.wal.file = None;
                self.wal.gen_ += 1;
            }
        }
    }

    /// Seals raw heads that started before the current WAL file, starts a new
    /// file, and hands back the files no head depends on any more.
    fn roll_wal(&mut self, after: &mut After) {
        let cur = self.wal.gen_;
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
            let raw = &mut s.tiers[0];
            if !raw.head.is_empty() && raw.head_gen < cur {
                seal(&mut tiers[0], *sid, raw, c, scratch, to_sync, *seg_target, false);
            }
        }
        // The raw chunks must be on disk before the WAL that covered them goes.
        if let Some(seg) = self.tiers[0].segs.back()
            && self.tiers[0].writing
        {
            after.sync.push(seg.file.clone());
        }
        if let Some(f) = self.wal.file.take() {
            after.sync.push(Arc::new(f));
        }
        while let Some((g, _, _)) = self.wal.files.front()
            && *g < cur
        {
            let (_, p, _) = self.wal.files.pop_front().expect("front");
            after.delete.push(p);
        }
        self.wal.gen_ = cur + 1;
        self.wal.started = Instant::now();
        self.wal.started_t = self.max_t;
    }

    fn enforce(&mut self, after: &mut After) {
        let now = (self.now)();
        // Age.
        for k in 0..self.tiers.len() {
            let cutoff = now.saturating_sub(self.tiers[k].spec.keep_ns);
            while let Some(front) = self.tiers[k].segs.front()
                && front.max_t < cutoff
            {
                self.evict_oldest(k, Reason::Age, after);
            }
        }
        // Disk: first the WAL (two rolls seal every raw head and free every WAL file), then segments.
        if self.disk_bytes() > self.disk_budget && self.wal.bytes() > 0 {
            self.roll_wal(after);
            self.roll_wal(after);
        }
        while self.disk_bytes() > self.disk_budget {
            let Some(k) = self.eviction_tier(now) else { break };
            self.evict_oldest(k, Reason::Disk, after);
        }
        // Memory: write the largest open chunks out early, then evict.
        let mut mem = self.memory_bytes();
        if mem > self.memory_budget {
            let target = self.memory_budget / 4 * 3;
            let mut heads: Vec<(usize, u32, usize)> = Vec::new();
            for (id, s) in &self.series {
                for (k, st) in s.tiers.iter().enumerate() {
                    if !st.head.is_empty() || st.head.heap_bytes() > 0 {
                        heads.push((st.head.heap_bytes(), *id, k));
                    }
                }
            }
            heads.sort_unstable_by(|a, b| b.cmp(a));
            let Inner {
                series,
                tiers,
                c,
                scratch,
                to_sync,
                seg_target,
                ..
            } = self;
            for (bytes, id, k) in heads {
                if mem <= target {
                    break;
                }
                let st = &mut series.get_mut(&id).expect("listed").tiers[k];
                seal(&mut tiers[k], id, st, c, scratch, to_sync, *seg_target, true);
                c.early_seals += 1;
                mem = mem.saturating_sub(bytes as u64);
            }
            while self.memory_bytes() > self.memory_budget {
                let Some(k) = self.eviction_tier(now) else { break };
                self.evict_oldest(k, Reason::Memory, after);
            }
        }
        // Series with nothing left give their place back.
        if after.delete.iter().any(|p| p.extension().is_some_and(|e| e == "seg")) {
            let gone: Vec<u32> = self
                .series
                .iter()
                .filter(|(_, s)| !s.has_data())
                .map(|(id, _)| *id)
                .collect();
            for id in gone {
                if let Some(s) = self.series.remove(&id) {
                    self.by_key.remove(&s.key);
                }
            }
            let live: u64 = self.series.values().map(|s| 32 + s.key_bytes() as u64).sum();
            if self.slog.bytes > 4 * live + (1 << 20)
                && let Err(e) = self.compact_series_log()
            {
                self.c.io_errors += 1;
                tracing::warn!("history: rewriting the series list: {e:#}");
            }
        }
    }

    /// The tier to evict from under a budget: the one whose oldest data is the
    /// oldest relative to its own retention.
    fn eviction_tier(&self, now: u64) -> Option<usize> {
        let mut best: Option<(f64, usize)> = None;
        for (k, t) in self.tiers.iter().enumerate() {
            let Some(front) = t.segs.front() else { continue };
            if front.bytes == 0 && t.segs.len() == 1 {
                continue;
            }
            let age = now.saturating_sub(front.min_t.min(now)) as f64 / t.spec.keep_ns.max(1) as f64;
            if best.is_none_or(|(a, _)| age > a) {
                best = Some((age, k));
            }
        }
        best.map(|b| b.1)
    }

    fn evict_oldest(&mut self, k: usize, why: Reason, after: &mut After) {
        let t = &mut self.tiers[k];
        if t.segs.len() == 1 && t.writing {
            t.writing = false;
        }
        let Some(seg) = t.segs.pop_front() else { return };
        t.evicted[why as usize] += seg.points;
        after.delete.push(seg.path.clone());
        let Inner {
            series,
            tiers,
            specs,
            c,
            scratch,
            to_sync,
            seg_target,
            ..
        } = self;
        for (sid, s) in series.iter_mut() {
            let ch = &mut s.tiers[k].chunks;
            while ch.front().is_some_and(|r| r.seg == seg.id) {
                ch.pop_front();
            }
            // The next tier's open chunk is rebuilt from this one after a
            // restart; what it can no longer be rebuilt from, write out now.
            if k + 1 < specs.len() {
                let next = &mut s.tiers[k + 1];
                if !next.head.is_empty() && next.head.t_first() <= seg.max_t {
                    seal(&mut tiers[k + 1], *sid, next, c, scratch, to_sync, *seg_target, false);
                }
            }
        }
    }

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

    // ---- reading ----

    /// The data of tier `k` of a series overlapping `[from, to]` (ns).
    fn snapshot_tier(&self, sid: u32, k: usize, from: u64, to: u64, with_agg: bool) -> Option<Snapshot> {
        let s = self.series.get(&sid)?;
        let st = &s.tiers[k];
        let tier = &self.tiers[k];
        let start = st.chunks.partition_point(|c| c.t_last < from);
        let mut chunks = Vec::new();
        for r in st.chunks.range(start..) {
            if r.t_first > to {
                break;
            }
            if let Some(seg) = tier.seg(r.seg) {
                chunks.push(ReadChunk {
                    file: seg.file.clone(),
                    r: *r,
                });
            }
        }
        let head = (!st.head.is_empty() && st.head.t_last() >= from && st.head.t_first() <= to)
            .then(|| (st.head.bytes(), st.head.len()));
        let mut aggs: Vec<Agg> = Vec::new();
        if with_agg && k > 0 {
            // Finer tiers' open buckets have not reached this tier yet: add them.
            let step = self.specs[k].step_ns;
            for j in (1..=k).rev() {
                if let Some(mut a) = s.tiers[j].agg {
                    a.start = a.start / step * step;
                    match aggs.iter_mut().find(|x| x.start == a.start) {
                        Some(x) => x.merge(&a),
                        None => aggs.push(a),
                    }
                }
            }
            aggs.sort_unstable_by_key(|a| a.start);
            aggs.retain(|a| a.start >= from && a.start <= to && a.count > 0);
        }
        Some(Snapshot {
            tier: k,
            step_ns: self.specs[k].step_ns,
            cols: self.specs[k].cols,
            chunks,
            head,
            aggs,
        })
    }

    /// Which tier serves a query of a series (see `History::query`).
    pub(crate) fn pick_tier(&self, sid: u32, from_ns: u64, step_ms: u64) -> Option<usize> {
        let s = self.series.get(&sid)?;
        let firsts: Vec<Option<u64>> = s.tiers.iter().map(|t| t.first_t()).collect();
        // The earliest point kept: exact in raw, within one bucket in a rollup.
        let earliest = firsts
            .iter()
            .zip(&self.specs)
            .filter_map(|(f, sp)| f.map(|f| f.saturating_add(sp.step_ns.saturating_sub(1))))
            .min()?;
        let need = from_ns.max(earliest);
        // A tier covers the range when its data reaches back to `need`, give
        // or take one of its buckets (its first bucket may hold only NaN).
        let covers = |k: usize| firsts[k].is_some_and(|f| f <= need.saturating_add(self.specs[k].step_ns));
        let covering: Vec<usize> = (0..s.tiers.len()).filter(|&k| covers(k)).collect();
        if covering.is_empty() {
            // Nothing reaches back that far: the tier that reaches furthest.
            return (0..s.tiers.len())
                .filter(|&k| firsts[k].is_some())
                .min_by_key(|&k| firsts[k]);
        }
        let step_ns = step_ms.saturating_mul(1_000_000);
        // The coarsest covering tier that still has at least one bucket per
        // query bucket: the query's step says what resolution is wanted, and
        // it is read from the fewest points. Exact when its step divides the
        // query's; otherwise a tier bucket counts in the query bucket its
        // start falls in. A step finer than every tier reads raw points.
        let coarse = covering
            .iter()
            .rev()
            .find(|&&k| k > 0 && step_ns >= self.specs[k].step_ns);
        Some(coarse.copied().unwrap_or(covering[0]))
    }

    pub(crate) fn snapshot_query(&self, sid: u32, from_ms: u64, to_ms: u64, step_ms: u64) -> Option<Snapshot> {
        let from_ns = from_ms.saturating_mul(1_000_000);
        let to_ns = to_ms.saturating_mul(1_000_000).saturating_add(999_999);
        let k = self.pick_tier(sid, from_ns, step_ms)?;
        self.snapshot_tier(sid, k, from_ns, to_ns, true)
    }

    pub(crate) fn snapshot_raw(&self, sid: u32, from_ns: u64, to_ns: u64) -> Option<Snapshot> {
        self.snapshot_tier(sid, 0, from_ns, to_ns, false)
    }

    pub(crate) fn series_list(&self, f: &SeriesFilter) -> Vec<SeriesInfo> {
        let mut out: Vec<SeriesInfo> = self
            .series
            .iter()
            .filter(|(_, s)| s.key.name().starts_with(f.name_prefix.as_str()))
            .filter(|(_, s)| f.attributes.iter().all(|(k, v)| s.key.attr(k) == Some(v.as_str())))
            .filter_map(|(id, s)| {
                let first = s.tiers.iter().filter_map(|t| t.first_t()).min()?;
                let (first_ms, last_ms) = (ns_to_ms(first), ns_to_ms(s.last_t));
                if f.from_ms.is_some_and(|from| last_ms < from) || f.to_ms.is_some_and(|to| first_ms > to) {
                    return None;
                }
                Some(SeriesInfo {
                    id: *id,
                    key: s.key.clone(),
                    first_ms,
                    last_ms,
                })
            })
            .collect();
        out.sort_unstable_by_key(|s| s.id);
        out
    }

    /// Moves the idle clock on, as if no point had come for `d`.
    #[cfg(test)]
    pub(crate) fn pretend_idle(&mut self, d: Duration) {
        self.idle_skew_s += d.as_secs() as u32;
    }

    fn idle_clock_s(&self) -> u32 {
        (self.epoch.elapsed().as_secs() as u32).saturating_add(self.idle_skew_s)
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
        if let Some(f) = self.wal.file.as_ref().and_then(|f| f.try_clone().ok()) {
            after.sync.push(Arc::new(f));
        }
        after
    }
}

/// Adds an input (a raw point as a one-point bucket, or a finer closed bucket)
/// to tier `st`'s open bucket; returns the bucket it closes, if any.
fn feed(spec: &TierSpec, st: &mut SeriesTier, late: &mut u64, t: u64, inp: &Agg) -> Option<Agg> {
    let b = t / spec.step_ns * spec.step_ns;
    match &mut st.agg {
        Some(a) if a.start == b => {
            a.merge(inp);
            None
        }
        Some(a) if b > a.start => {
            let closed = *a;
            let mut n = *inp;
            n.start = b;
            st.agg = Some(n);
            Some(closed)
        }
        Some(_) => {
            *late += 1;
            None
        }
        None => {
            if st.last_t != 0 && b <= st.last_t {
                *late += 1;
                return None;
            }
            let mut n = *inp;
            n.start = b;
            st.agg = Some(n);
            None
        }
    }
}

/// Appends a closed bucket to a rollup tier's head, sealing it when full.
#[allow(clippy::too_many_arguments)]
fn push_bucket(
    spec: &TierSpec,
    tier: &mut TierStore,
    sid: u32,
    st: &mut SeriesTier,
    a: &Agg,
    c: &mut Counters,
    scratch: &mut Vec<u8>,
    to_sync: &mut Vec<Arc<File>>,
    seg_target: u64,
) {
    if a.count == 0 || (st.last_t != 0 && a.start <= st.last_t) {
        return;
    }
    st.head.push(a.start, &a.values());
    st.last_t = a.start;
    if st.head.len() >= spec.max_points || a.start - st.head.t_first() >= spec.max_span_ns {
        seal(tier, sid, st, c, scratch, to_sync, seg_target, false);
    }
}

/// Writes a head chunk to its tier's segment log and indexes it.
#[allow(clippy::too_many_arguments)]
fn seal(
    tier: &mut TierStore,
    sid: u32,
    st: &mut SeriesTier,
    c: &mut Counters,
    scratch: &mut Vec<u8>,
    to_sync: &mut Vec<Arc<File>>,
    seg_target: u64,
    shrink: bool,
) {
    if st.head.is_empty() {
        if shrink {
            st.head.reset(true);
        }
        return;
    }
    let h = &st.head;
    let mut payload = Vec::with_capacity(CHUNK_HEAD + h.byte_len());
    payload.extend_from_slice(&sid.to_le_bytes());
    payload.extend_from_slice(&h.len().to_le_bytes());
    payload.extend_from_slice(&h.t_first().to_le_bytes());
    payload.extend_from_slice(&h.t_last().to_le_bytes());
    payload.push(h.cols() as u8);
    h.append_bytes_to(&mut payload);
    scratch.clear();
    log::frame(scratch, KIND_CHUNK, &payload);
    match write_record(tier, scratch, to_sync, seg_target) {
        Ok((seg_id, off)) => {
            let seg = tier.segs.back_mut().expect("written");
            seg.min_t = seg.min_t.min(h.t_first());
            seg.max_t = seg.max_t.max(h.t_last());
            seg.points += h.len() as u64;
            seg.chunks += 1;
            st.chunks.push_back(ChunkRef {
                seg: seg_id,
                off: off + (log::HEADER + CHUNK_HEAD) as u64,
                len: (payload.len() - CHUNK_HEAD) as u32,
                n: h.len(),
                t_first: h.t_first(),
                t_last: h.t_last(),
            });
        }
        Err(e) => {
            c.io_errors += 1;
            c.points_lost_to_io += h.len() as u64;
            tracing::warn!("history: writing a {} chunk: {e:#}", tier.spec.name);
        }
    }
    st.head.reset(shrink);
}

/// Appends a framed record to the tier's current segment (starting one when
/// needed); returns (segment id, record offset).
fn write_record(tier: &mut TierStore, rec: &[u8], to_sync: &mut Vec<Arc<File>>, seg_target: u64) -> Result<(u64, u64)> {
    let full = tier.writing && tier.segs.back().is_some_and(|s| s.bytes >= seg_target);
    if full {
        to_sync.push(tier.segs.back().expect("full").file.clone());
        tier.writing = false;
    }
    if !tier.writing {
        let id = tier.next_id;
        let path = log::numbered_path(&tier.dir, id, "seg");
        let f = log::create_append(&path)?;
        tier.next_id += 1;
        tier.segs.push_back(Segment {
            id,
            path,
            file: Arc::new(f),
            bytes: 0,
            min_t: u64::MAX,
            max_t: 0,
            points: 0,
            chunks: 0,
        });
        tier.writing = true;
    }
    let seg = tier.segs.back_mut().expect("writing");
    let off = seg.bytes;
    if let Err(e) = (&*seg.file).write_all(rec) {
        // Never append after a partial record: the next write starts a new segment.
        tier.writing = false;
        if let Ok(m) = seg.file.metadata() {
            seg.bytes = m.len();
        }
        return Err(e).context("appending to a history segment");
    }
    seg.bytes += rec.len() as u64;
    Ok((seg.id, off))
}

impl Snapshot {
    pub(super) fn tier(&self) -> usize {
        self.tier
    }

    pub(super) fn step_ns(&self) -> u64 {
        self.step_ns
    }

    /// The sealed chunks, in time order.
    pub(super) fn chunks(&self) -> &[ReadChunk] {
        &self.chunks
    }

    /// The open buckets, after the head chunk's.
    pub(super) fn open_buckets(&self) -> &[Agg] {
        &self.aggs
    }

    /// Reads one sealed chunk (into `buf`) and calls `f(t_ns, values)` for
    /// each point or bucket; false when it could not be read or decoded.
    pub(super) fn read_chunk(&self, c: &ReadChunk, buf: &mut Vec<u8>, f: impl FnMut(u64, &[f64])) -> bool {
        buf.resize(c.r.len as usize, 0);
        if let Err(e) = c.file.read_exact_at(buf, c.r.off) {
            tracing::debug!("history: reading a chunk: {e}");
            return false;
        }
        decode(buf, c.r.n, self.cols, f).is_some()
    }

    /// Calls `f` for each point or bucket of the open head chunk; false when
    /// it did not decode.
    pub(super) fn read_head(&self, f: impl FnMut(u64, &[f64])) -> bool {
        match &self.head {
            Some((bytes, n)) => decode(bytes, *n, self.cols, f).is_some(),
            None => true,
        }
    }

    /// Calls `f(t_ns, values)` for every point (raw) or bucket (rollup) in
    /// time order: sealed chunks, the open chunk, then the open bucket.
    /// Unreadable chunks are skipped and counted in `corrupt`.
    pub(crate) fn for_each(&self, corrupt: &mut u64, mut f: impl FnMut(u64, &[f64])) {
        let mut buf = Vec::new();
        for c in &self.chunks {
            *corrupt += u64::from(!self.read_chunk(c, &mut buf, &mut f));
        }
        *corrupt += u64::from(!self.read_head(&mut f));
        for a in &self.aggs {
            f(a.start, &a.values());
        }
    }
}
