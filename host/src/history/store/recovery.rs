//! Opening a store: the directory's lock, then the state a crash or a clean
//! shutdown left, rebuilt in five steps (`Inner::open`). Kept apart from the
//! write path because it runs once, reads whole files, and must accept
//! whatever a torn write left (bad records are skipped and counted).

use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};

use super::append::{feed, push_bucket};
use super::segment::seal;
use super::{
    Agg, CHUNK_HEAD, ChunkRef, Counters, FxHashMap, Inner, Segment, Series, SeriesLog, TierSpec, TierStore, Wal,
    series_payload, specs,
};
use crate::history::codec::decode;
use crate::history::log::{self, Cur, KIND_CHUNK, KIND_SERIES, KIND_WAL};
use crate::history::{HistoryConfig, SeriesKey};

impl Inner {
    /// Opens the store in `dir` (made when missing): takes its lock, then
    /// rebuilds what the last run left, step by step.
    pub(crate) fn open(cfg: &HistoryConfig, dir: &Path, now: fn() -> u64) -> Result<Inner> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let lock = lock_dir(dir)?;
        let mut inner = Inner::empty(cfg, dir, now, lock)?;
        // 1. The series list.
        inner.read_series_log()?;
        // 2. Tier segments: the chunk index.
        inner.read_segments(dir)?;
        // 3. Replay the WAL into the raw heads.
        inner.replay_wal()?;
        // 4. Rebuild each rollup tier's open part from the tier below it.
        inner.rederive_rollups();
        // 5. Forget series with nothing left; rewrite the series list.
        inner.forget_empty()?;
        Ok(inner)
    }

    /// A store with nothing in it yet: the series list open for appending,
    /// the WAL's folder made.
    fn empty(cfg: &HistoryConfig, dir: &Path, now: fn() -> u64, lock: File) -> Result<Inner> {
        let slog_path = dir.join("series.log");
        let slog_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&slog_path)
            .with_context(|| format!("opening {}", slog_path.display()))?;
        let wal_dir = dir.join("wal");
        std::fs::create_dir_all(&wal_dir).with_context(|| format!("creating {}", wal_dir.display()))?;
        let seg_target = (cfg.disk_budget_bytes / 64).clamp(4 << 10, 64 << 20);
        Ok(Inner {
            specs: specs(cfg),
            disk_budget: cfg.disk_budget_bytes,
            memory_budget: cfg.memory_budget_bytes,
            max_series: cfg.max_series,
            seg_target,
            series: FxHashMap::default(),
            by_key: FxHashMap::default(),
            next_id: 0,
            tiers: Vec::new(),
            wal: Wal {
                dir: wal_dir,
                gen_: 0,
                file: None,
                rolled: None,
                unwritten: Vec::new(),
                unwritten_points: 0,
                started: Instant::now(),
                started_t: 0,
                files: VecDeque::new(),
            },
            slog: SeriesLog {
                bytes: slog_file.metadata().map(|m| m.len()).unwrap_or(0),
                path: slog_path,
                file: slog_file,
                pending: Vec::new(),
                unsynced: false,
            },
            dirty: Vec::new(),
            to_sync: Vec::new(),
            c: Counters::default(),
            scratch: Vec::new(),
            now,
            epoch: Instant::now(),
            idle_skew_s: 0,
            max_t: 0,
            _lock: lock,
        })
    }

    /// Step 1: every series the list defines (a key defined again keeps its
    /// last id).
    fn read_series_log(&mut self) -> Result<()> {
        let path = &self.slog.path;
        let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let Inner {
            specs,
            series,
            by_key,
            next_id,
            c,
            ..
        } = self;
        let out = log::read_records(&data, |kind, _, p| {
            if kind != KIND_SERIES {
                return;
            }
            match parse_series(p) {
                Some((id, key)) => {
                    *next_id = (*next_id).max(id.saturating_add(1));
                    if let Some(old) = by_key.insert(key.clone(), id) {
                        series.remove(&old);
                    }
                    series.insert(id, Series::new(key, specs));
                }
                None => c.corrupt_records += 1,
            }
        });
        c.corrupt_records += out.corrupt;
        Ok(())
    }

    /// Step 2: each tier's segment files, their chunks indexed per series.
    fn read_segments(&mut self, dir: &Path) -> Result<()> {
        let Inner {
            specs,
            series,
            tiers,
            c,
            seg_target,
            ..
        } = self;
        let mut next_seg = 0u64;
        for (ti, spec) in specs.iter().enumerate() {
            let tdir = dir.join(&spec.name);
            std::fs::create_dir_all(&tdir).with_context(|| format!("creating {}", tdir.display()))?;
            let mut segs = VecDeque::new();
            let mut last_clean = false;
            for (id, path) in log::numbered_files(&tdir, "seg")? {
                next_seg = next_seg.max(id + 1);
                let before = c.corrupt_records;
                segs.push_back(read_segment(ti, spec, id, path, series, c)?);
                last_clean = c.corrupt_records == before;
            }
            // The last segment, whole and not full, is written on: a new file
            // per tier at every start would leave a small file (and an open
            // descriptor) per restart for the tier's whole retention.
            let mut writing = false;
            if let Some(last) = segs.back_mut()
                && last_clean
                && last.bytes < *seg_target
                && let Ok(f) = std::fs::OpenOptions::new().read(true).append(true).open(&last.path)
            {
                last.file = Arc::new(f);
                writing = true;
            }
            tiers.push(TierStore {
                spec: spec.clone(),
                dir: tdir,
                segs,
                writing,
                next_id: 0,
                evicted: [0; 3],
                late: 0,
                retry_at: None,
            });
        }
        for t in tiers.iter_mut() {
            t.next_id = next_seg;
        }
        for s in series.values_mut() {
            s.last_t = s.tiers[0].last_t;
        }
        Ok(())
    }

    /// Step 3: the write-ahead log's points, file by file, into the raw heads.
    fn replay_wal(&mut self) -> Result<()> {
        let mut max_gen = 0;
        for (gen_, path) in log::numbered_files(&self.wal.dir, "wal")? {
            max_gen = max_gen.max(gen_);
            let data = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            self.wal.files.push_back((gen_, path, data.len() as u64));
            let (entries, corrupt) = read_wal(&data);
            self.c.corrupt_records += corrupt;
            for (sid, pts) in entries {
                if !self.series.contains_key(&sid) {
                    self.c.corrupt_records += 1;
                    continue;
                }
                self.replay_raw(sid, &pts, gen_);
            }
        }
        self.wal.gen_ = max_gen + 1;
        self.max_t = self.series.values().map(|s| s.last_t).max().unwrap_or(0);
        self.wal.started_t = self.max_t;
        Ok(())
    }

    /// Step 4: each rollup tier's open part, from the tier below it.
    fn rederive_rollups(&mut self) {
        for k in 1..self.specs.len() {
            let ids: Vec<u32> = self.series.keys().copied().collect();
            for sid in ids {
                self.rederive(sid, k);
            }
        }
    }

    /// Step 5: series with nothing left forgotten, the series list rewritten.
    fn forget_empty(&mut self) -> Result<()> {
        self.series.retain(|_, s| s.has_data());
        let live: FxHashMap<SeriesKey, u32> = self.series.iter().map(|(id, s)| (s.key.clone(), *id)).collect();
        self.by_key = live;
        self.compact_series_log()
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

    pub(super) fn compact_series_log(&mut self) -> Result<()> {
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

/// One segment file of tier `ti`, read whole: its chunks go to their series'
/// index (a chunk of an unknown series, or one out of order, is skipped and
/// counted).
fn read_segment(
    ti: usize,
    spec: &TierSpec,
    id: u64,
    path: PathBuf,
    series: &mut FxHashMap<u32, Series>,
    c: &mut Counters,
) -> Result<Segment> {
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
    Ok(seg)
}

/// What one WAL file holds: (series id, points), in the order written.
type WalEntries = Vec<(u32, Vec<(u64, f64)>)>;

/// The entries of one WAL file, and how many records or entries in it were
/// corrupt.
fn read_wal(data: &[u8]) -> (WalEntries, u64) {
    let mut corrupt = 0;
    let mut pts: Vec<(u64, f64)> = Vec::new();
    let mut entries: WalEntries = Vec::new();
    let out = log::read_records(data, |kind, _, p| {
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
    (entries, out.corrupt + corrupt)
}
