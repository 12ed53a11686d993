//! The storage comparison behind `host/src/history/README.md`: the same
//! synthetic master workload (8 nodes x 40 series at 100 ms for one hour,
//! delivered per node-second as an agent's export would be) written to
//!
//! - `segments`: `sonde::history` (Gorilla chunks in append-only segment
//!   files, WAL flushed every simulated second, 1 s and 60 s tiers kept);
//! - `redb`: redb 2 with one row per point, `(series, t_ns) -> f64`, one
//!   durable write transaction per simulated second (what a SIGKILL may lose
//!   is then the same as the history's flush interval).
//!
//! For each: append throughput and CPU per point (process CPU time, all
//! threads), bytes on disk per point, query latency of a 1-hour view of one
//! metric on 8 nodes (1 000 buckets of min/max/mean; p50 and p99 of 100), and
//! the time to open it again. Run: `cargo bench -p sonde --bench history_storage`
//! (plain main, no criterion). `HISTORY_COMPARE_MINUTES` shortens the hour;
//! `HISTORY_COMPARE_ONLY=segments` (or `redb`) runs one store.

use std::path::Path;
use std::time::Instant;

use redb::{Database, Durability, ReadableTableMetadata, TableDefinition};
use sonde::history::{History, HistoryConfig, SeriesKey};

const NODES: usize = 8;
const PER_NODE: usize = 40;
const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;

const POINTS: TableDefinition<(u32, u64), f64> = TableDefinition::new("points");

fn cpu_s() -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn dir_bytes(p: &Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(p).unwrap() {
        let e = e.unwrap();
        let m = e.metadata().unwrap();
        n += if m.is_dir() { dir_bytes(&e.path()) } else { m.len() };
    }
    n
}

/// Values shaped like the sampler's: counters (integers that grow), slow
/// integers (memory), and f32 gauges (utilizations).
fn value(series: usize, i: u64, state: &mut [f64]) -> f64 {
    let s = series % PER_NODE;
    let x = &mut state[series];
    match s % 3 {
        0 => {
            *x += ((i * 2_654_435_761 + series as u64) % 20_000) as f64;
            *x
        }
        1 => {
            if i.is_multiple_of(37) {
                *x = (8u64 << 30) as f64 - ((i * 4096 + series as u64 * 7) % (1 << 28)) as f64;
            }
            *x
        }
        _ => {
            let v = (((i as f64) * 0.013 + series as f64).sin() * 0.4 + 0.5) as f32;
            v as f64
        }
    }
}

struct Figures {
    name: &'static str,
    points: u64,
    append_s: f64,
    cpu_s: f64,
    disk: u64,
    q50_ms: f64,
    q99_ms: f64,
    open_ms: f64,
    crash_open_ms: f64,
    raw_bytes_per_point: f64,
}

fn percentiles(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let p = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (p(0.5), p(0.99))
}

fn workload(seconds: u64, mut sink: impl FnMut(usize, &[(u64, f64)], u64)) -> u64 {
    let now = sonde::model::now_ns();
    let start = now - seconds * S;
    let mut state = vec![0.0; NODES * PER_NODE];
    let mut buf = Vec::with_capacity(10);
    let mut n = 0;
    for sec in 0..seconds {
        for node in 0..NODES {
            for s in 0..PER_NODE {
                let series = node * PER_NODE + s;
                buf.clear();
                for k in 0..10u64 {
                    let i = sec * 10 + k;
                    // One tick for all of a node's series, with up to ~1 ms of jitter.
                    let t = start + i * 100 * MS + ((i * 7_919 + node as u64 * 104_729) % 1_000_000);
                    buf.push((t, value(series, i, &mut state)));
                }
                n += buf.len() as u64;
                sink(series, &buf, sec);
            }
        }
    }
    n
}

fn key(series: usize) -> SeriesKey {
    let node = series / PER_NODE;
    SeriesKey::new(
        format!("system.metric.{}", series % PER_NODE),
        "1",
        [
            ("host.name", format!("node-{node}")),
            ("sonde.job", "bench".to_string()),
        ],
    )
}

fn run_history(dir: &Path, seconds: u64) -> Figures {
    let cfg = HistoryConfig {
        // The flush thread stays out of the way: flushes follow simulated time.
        flush_interval_ms: 60_000,
        ..Default::default()
    };
    let keys: Vec<SeriesKey> = (0..NODES * PER_NODE).map(key).collect();
    let h = History::open(&cfg, dir).unwrap();
    let (t0, c0) = (Instant::now(), cpu_s());
    let mut last_sec = 0;
    let points = workload(seconds, |series, pts, sec| {
        if sec != last_sec {
            h.flush();
            last_sec = sec;
        }
        h.append(&keys[series], pts).unwrap();
    });
    h.flush();
    let (append_s, cpu) = (t0.elapsed().as_secs_f64(), cpu_s() - c0);
    let disk = h.stats().disk_bytes;
    let now_ms = sonde::model::now_ns() / MS;
    let ids: Vec<Vec<u32>> = (0..PER_NODE)
        .map(|m| (0..NODES).map(|n| h.id_of(&keys[n * PER_NODE + m]).unwrap()).collect())
        .collect();
    let mut lat = Vec::new();
    for r in 0..100 {
        let t = Instant::now();
        let mut b = 0;
        for &id in &ids[r % PER_NODE] {
            b += h.query(id, now_ms - 3_600_000, now_ms, 3_600).t.len();
        }
        lat.push(t.elapsed().as_secs_f64() * 1e3);
        assert!(b > 0);
    }
    let st = h.stats();
    let raw_bytes_per_point = st.tiers[0].disk_bytes as f64 / st.tiers[0].points_on_disk.max(1) as f64;
    for t in &st.tiers {
        eprintln!(
            "  tier {}: {} bytes, {} points or buckets on disk ({:.2} bytes each), {} in memory",
            t.name,
            t.disk_bytes,
            t.points_on_disk,
            t.disk_bytes as f64 / t.points_on_disk.max(1) as f64,
            t.memory_bytes
        );
    }
    eprintln!("  wal {} bytes, memory {} bytes", st.wal_bytes, st.memory_bytes);
    // What a SIGKILL leaves: the files as they are now, without a clean close.
    let crashed = tempfile::tempdir().unwrap();
    copy_dir(dir, crashed.path());
    drop(h);
    let t = Instant::now();
    let h = History::open(&cfg, dir).unwrap();
    let open_ms = t.elapsed().as_secs_f64() * 1e3;
    assert_eq!(h.stats().series, NODES * PER_NODE);
    let t = Instant::now();
    let c = History::open(&cfg, crashed.path()).unwrap();
    let crash_open_ms = t.elapsed().as_secs_f64() * 1e3;
    assert_eq!(c.stats().series, NODES * PER_NODE);
    let (q50_ms, q99_ms) = percentiles(lat);
    Figures {
        name: "segments (sonde::history)",
        points,
        append_s,
        cpu_s: cpu,
        disk,
        q50_ms,
        q99_ms,
        open_ms,
        crash_open_ms,
        raw_bytes_per_point,
    }
}

fn copy_dir(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

fn run_redb(dir: &Path, seconds: u64) -> Figures {
    let path = dir.join("points.redb");
    let db = Database::create(&path).unwrap();
    let (t0, c0) = (Instant::now(), cpu_s());
    let mut pending: Vec<(u32, u64, f64)> = Vec::new();
    let mut last_sec = 0;
    let commit = |pending: &mut Vec<(u32, u64, f64)>| {
        let mut w = db.begin_write().unwrap();
        w.set_durability(Durability::Immediate);
        {
            let mut t = w.open_table(POINTS).unwrap();
            for &(s, ts, v) in pending.iter() {
                t.insert((s, ts), v).unwrap();
            }
        }
        w.commit().unwrap();
        pending.clear();
    };
    let points = workload(seconds, |series, pts, sec| {
        if sec != last_sec {
            commit(&mut pending);
            last_sec = sec;
        }
        pending.extend(pts.iter().map(|&(t, v)| (series as u32, t, v)));
    });
    commit(&mut pending);
    let (append_s, cpu) = (t0.elapsed().as_secs_f64(), cpu_s() - c0);
    let now_ms = sonde::model::now_ns() / MS;
    let mut lat = Vec::new();
    for r in 0..100 {
        let t = Instant::now();
        let rt = db.begin_read().unwrap();
        let table = rt.open_table(POINTS).unwrap();
        let mut b = 0;
        for n in 0..NODES {
            let s = (n * PER_NODE + r % PER_NODE) as u32;
            let (from, to) = ((now_ms - 3_600_000) * MS, now_ms * MS);
            // min/max/mean per 3.6 s bucket, as the history answers.
            let mut cur = u64::MAX;
            let (mut mn, mut mx, mut sum, mut cnt) = (0f64, 0f64, 0f64, 0u64);
            for row in table.range((s, from)..=(s, to)).unwrap() {
                let (k, v) = row.unwrap();
                let (t, v) = (k.value().1, v.value());
                let bk = t / MS / 3_600;
                if bk != cur {
                    if cnt > 0 {
                        b += 1;
                        std::hint::black_box((mn, mx, sum / cnt as f64));
                    }
                    (cur, mn, mx, sum, cnt) = (bk, v, v, 0.0, 0);
                }
                mn = mn.min(v);
                mx = mx.max(v);
                sum += v;
                cnt += 1;
            }
            b += usize::from(cnt > 0);
        }
        lat.push(t.elapsed().as_secs_f64() * 1e3);
        assert!(b > 0);
    }
    let crashed = tempfile::tempdir().unwrap();
    std::fs::copy(&path, crashed.path().join("points.redb")).unwrap();
    drop(db);
    let disk = dir_bytes(dir);
    let t = Instant::now();
    let c = Database::open(crashed.path().join("points.redb")).unwrap();
    let n = c.begin_read().unwrap().open_table(POINTS).unwrap().len().unwrap();
    let crash_open_ms = t.elapsed().as_secs_f64() * 1e3;
    assert_eq!(n, points);
    let t = Instant::now();
    let db = Database::open(&path).unwrap();
    let rt = db.begin_read().unwrap();
    let n = rt.open_table(POINTS).unwrap().len().unwrap();
    let open_ms = t.elapsed().as_secs_f64() * 1e3;
    assert_eq!(n, points);
    let (q50_ms, q99_ms) = percentiles(lat);
    Figures {
        name: "redb, a row per point",
        points,
        append_s,
        cpu_s: cpu,
        disk,
        q50_ms,
        q99_ms,
        open_ms,
        crash_open_ms,
        raw_bytes_per_point: disk as f64 / points as f64,
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let minutes: u64 = std::env::var("HISTORY_COMPARE_MINUTES")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(60);
    let seconds = minutes * 60;
    let mut rows = Vec::new();
    let only = std::env::var("HISTORY_COMPARE_ONLY").unwrap_or_default();
    for which in ["segments", "redb"] {
        if !only.is_empty() && only != which {
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let f = if which == "segments" {
            run_history(dir.path(), seconds)
        } else {
            run_redb(dir.path(), seconds)
        };
        eprintln!("{which} done");
        rows.push(f);
    }
    println!("workload: {NODES} nodes x {PER_NODE} series x 10 points/s for {minutes} min");
    println!(
        "| store | points | append points/s | CPU ns/point | disk bytes/point, all | raw bytes/point | 1 h x 8 nodes query p50 / p99 ms | reopen ms, clean / after SIGKILL |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for f in rows {
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} / {:.2} | {:.0} / {:.0} |",
            f.name,
            f.points,
            f.points as f64 / f.append_s,
            f.cpu_s * 1e9 / f.points as f64,
            f.disk as f64 / f.points as f64,
            f.raw_bytes_per_point,
            f.q50_ms,
            f.q99_ms,
            f.open_ms,
            f.crash_open_ms
        );
    }
}
