//! History tests: round trips, rollups, restarts, damage, budgets, refusals, tier choice.

use std::cell::Cell;
use std::path::Path;

use super::*;

thread_local! {
    /// The clock the tests age data with (0: the real clock). Budgets and age
    /// are enforced on the calling thread (explicit `flush`, and `Drop`).
    static NOW: Cell<u64> = const { Cell::new(0) };
}

fn test_now() -> u64 {
    match NOW.with(|c| c.get()) {
        0 => crate::model::now_ns(),
        t => t,
    }
}

const S: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;
/// A fixed "now" for tests that set the clock: 2026-11-25 04:00 UTC.
const T0: u64 = 1_795_665_600 * S;

fn cfg() -> HistoryConfig {
    HistoryConfig {
        // The background thread never runs during a test: flushes are explicit.
        flush_interval_ms: 60_000,
        ..Default::default()
    }
}

fn open(c: &HistoryConfig, dir: &Path) -> History {
    History::open_with_clock(c, dir, test_now).expect("opens")
}

fn key(node: usize, metric: &str) -> SeriesKey {
    SeriesKey::new(
        metric,
        "1",
        [
            ("sonde.job", "train-1".to_string()),
            ("host.name", format!("node-{node}")),
        ],
    )
}

/// Points every ~100 ms with a few ms of ns jitter, values with all sorts of bit patterns.
fn points(start: u64, n: usize) -> Vec<(u64, f64)> {
    let mut t = start;
    (0..n)
        .map(|i| {
            t += 100 * MS + (i as u64 * 7_919_113) % (3 * MS);
            let v = match i % 50 {
                0 => f64::NAN,
                7 => -0.0,
                13 => 1e-300,
                _ => (i as f64 * 0.01).sin() * 100.0 + (i / 500) as f64,
            };
            (t, v)
        })
        .collect()
}

fn same_points(a: &[(u64, f64)], b: &[(u64, f64)]) {
    assert_eq!(a.len(), b.len(), "point counts");
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.0, y.0, "timestamp");
        assert_eq!(x.1.to_bits(), y.1.to_bits(), "value at {}", x.0);
    }
}

#[test]
fn series_keys_sort_and_match_attributes() {
    let k = key(3, "system.cpu.utilization");
    assert_eq!(k.attributes()[0].0, "host.name");
    assert_eq!(k.attr("host.name"), Some("node-3"));
    assert_eq!(
        k,
        SeriesKey::new(
            "system.cpu.utilization",
            "1",
            [("host.name", "node-3"), ("sonde.job", "train-1")]
        )
    );
    let m = crate::model::MetricSeries {
        name: "gpu.util".into(),
        description: String::new(),
        unit: "%".into(),
        kind: crate::model::MetricKind::Gauge,
        attributes: vec![("gpu.index".into(), 2i64.into())],
        start_time_ns: 0,
    };
    let k = SeriesKey::from_metric(&m, &[("host.name".into(), "n1".into())]);
    assert_eq!(k.attr("gpu.index"), Some("2"));
}

#[test]
fn raw_points_round_trip_exactly_in_memory_on_disk_and_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let now = crate::model::now_ns();
    let pts = points(now - 400 * S, 3_000);
    let id;
    {
        let h = open(&cfg(), dir.path());
        // In several appends, as receivers deliver them.
        for c in pts.chunks(37) {
            h.append(&key(0, "m"), c).unwrap();
        }
        id = h.id_of(&key(0, "m")).unwrap();
        same_points(&h.raw(id, 0, u64::MAX), &pts);
        h.flush_rolling();
        // Sealed chunks and the open one together.
        same_points(&h.raw(id, 0, u64::MAX), &pts);
        same_points(&h.raw(id, pts[100].0, pts[200].0), &pts[100..=200]);
        assert_eq!(h.stats().points_appended, 3_000);
    }
    let h = open(&cfg(), dir.path());
    same_points(&h.raw(id, 0, u64::MAX), &pts);
    assert_eq!(h.id_of(&key(0, "m")), Some(id));
    assert_eq!(h.stats().corrupt_records, 0);
    // Points at or before the last one are dropped and counted.
    h.append(&key(0, "m"), &[(pts[5].0, 1.0), (pts.last().unwrap().0, 2.0)])
        .unwrap();
    assert_eq!(h.stats().out_of_order, 2);
}

/// min/max/mean/count per bucket straight from the points.
fn brute(pts: &[(u64, f64)], step_ms: u64) -> Buckets {
    let mut b = Buckets::default();
    for &(t, v) in pts {
        if v.is_nan() {
            continue;
        }
        let s = t / MS / step_ms * step_ms;
        if b.t.last() != Some(&s) {
            b.t.push(s);
            b.min.push(v);
            b.max.push(v);
            b.mean.push(0.0);
            b.count.push(0);
        }
        let i = b.t.len() - 1;
        b.min[i] = b.min[i].min(v);
        b.max[i] = b.max[i].max(v);
        b.mean[i] += v;
        b.count[i] += 1;
    }
    for i in 0..b.t.len() {
        b.mean[i] /= b.count[i] as f64;
    }
    b
}

fn same_buckets(got: &Buckets, want: &Buckets) {
    assert_eq!(got.t, want.t, "bucket times");
    assert_eq!(got.count, want.count, "counts");
    assert_eq!(got.min, want.min, "min");
    assert_eq!(got.max, want.max, "max");
    for (a, b) in got.mean.iter().zip(&want.mean) {
        assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "mean {a} vs {b}");
    }
}

#[test]
fn rollups_keep_min_max_mean_and_count() {
    let dir = tempfile::tempdir().unwrap();
    let now = crate::model::now_ns();
    let pts = points(now - 700 * S, 6_000);
    let h = open(&cfg(), dir.path());
    h.append(&key(1, "m"), &pts).unwrap();
    let id = h.id_of(&key(1, "m")).unwrap();
    let (from, to) = (0, u64::MAX / MS);
    for step in [1_000, 5_000, 60_000, 120_000] {
        let q = h.query(id, from, to, step);
        let want_res = if step % 60_000 == 0 { 60_000 } else { 1_000 };
        assert_eq!(q.resolution_ms, want_res, "step {step}");
        same_buckets(&q, &brute(&pts, step));
    }
    // From raw points, with a step finer than every tier.
    let q = h.query(id, from, to, 700);
    assert_eq!(q.resolution_ms, 0);
    same_buckets(&q, &brute(&pts, 700));
    // From the 1 s tier for a step it does not divide: each 1 s bucket
    // counts where it starts, so the counts still add up.
    let q = h.query(id, from, to, 1_500);
    assert_eq!(q.resolution_ms, 1_000);
    assert_eq!(
        q.count.iter().sum::<u64>(),
        brute(&pts, 1_500).count.iter().sum::<u64>()
    );
    // And after a restart, where the open rollup chunks are rebuilt from raw.
    h.flush_rolling();
    drop(h);
    let h = open(&cfg(), dir.path());
    for step in [1_000, 60_000] {
        same_buckets(&h.query(id, from, to, step), &brute(&pts, step));
    }
}

#[test]
fn a_crash_loses_at_most_what_was_not_flushed() {
    // A copy of the directory taken while the history runs is what a SIGKILL leaves.
    let dir = tempfile::tempdir().unwrap();
    let crash = tempfile::tempdir().unwrap();
    let now = crate::model::now_ns();
    let pts = points(now - 200 * S, 1_500);
    let h = open(&cfg(), dir.path());
    h.append(&key(2, "m"), &pts[..1_000]).unwrap();
    h.flush();
    copy_dir(dir.path(), crash.path());
    h.append(&key(2, "m"), &pts[1_000..]).unwrap();
    let id = h.id_of(&key(2, "m")).unwrap();
    let c = open(&cfg(), crash.path());
    same_points(&c.raw(id, 0, u64::MAX), &pts[..1_000]);
    same_buckets(&c.query(id, 0, u64::MAX / MS, 1_000), &brute(&pts[..1_000], 1_000));
    // It goes on from there.
    c.append(&key(2, "m"), &pts[1_000..]).unwrap();
    same_points(&c.raw(id, 0, u64::MAX), &pts);
}

#[test]
fn a_synced_point_survives_a_kill_and_a_full_disk_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let now = crate::model::now_ns();
    // 100 s of points: the raw tier seals a 60 s chunk, so every file kind is in use.
    let pts = points(now - 600 * S, 3_000);
    let h = open(&cfg(), dir.path());
    h.append(&key(1, "m"), &pts[..1_000]).unwrap();
    let id = h.id_of(&key(1, "m")).unwrap();

    // Synced: a SIGKILL now (a copy of the directory) keeps every point.
    h.sync_wal().expect("writes");
    let killed = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), killed.path());
    same_points(&open(&cfg(), killed.path()).raw(id, 0, u64::MAX), &pts[..1_000]);

    // The disk refuses: the WAL write and the chunk seal both fail.
    h.with_inner(|i| i.point_writes_at(Path::new("/dev/full")));
    h.append(&key(1, "m"), &pts[1_000..2_000]).unwrap();
    let err = h.sync_wal().expect_err("a full disk is reported");
    assert!(err.contains("write-ahead log"), "{err}");
    let st = h.stats();
    assert!(st.io_errors >= 2, "the WAL and the chunk: {st:?}");
    assert_eq!(st.points_lost_to_io, 0);
    // Nothing is lost meanwhile: queries still see every point.
    same_points(&h.raw(id, 0, u64::MAX), &pts[..2_000]);

    // Space again (the next file is a real one): the kept records are
    // written, and the WAL files the unsealed chunk needs survive rolls.
    h.append(&key(1, "m"), &pts[2_000..]).unwrap();
    h.sync_wal().expect("writes again");
    h.flush_rolling();
    h.flush_rolling();
    let killed = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), killed.path());
    let c = open(&cfg(), killed.path());
    same_points(&c.raw(id, 0, u64::MAX), &pts);
    assert_eq!(c.stats().corrupt_records, 0);
    same_points(&h.raw(id, 0, u64::MAX), &pts);
    assert_eq!(h.stats().points_lost_to_io, 0);
}

#[test]
fn a_restart_writes_on_in_each_tiers_last_segment() {
    let dir = tempfile::tempdir().unwrap();
    let now = crate::model::now_ns();
    let pts = points(now - 900 * S, 6_000);
    let count = || ["raw", "1s", "60s"].map(|t| files(&dir.path().join("history").join(t), "seg").len());
    let id;
    {
        let h = open(&cfg(), dir.path());
        h.append(&key(3, "m"), &pts[..3_000]).unwrap();
        id = h.id_of(&key(3, "m")).unwrap();
    }
    let first = count();
    for part in [&pts[3_000..4_500], &pts[4_500..]] {
        let h = open(&cfg(), dir.path());
        h.append(&key(3, "m"), part).unwrap();
    }
    assert_eq!(count(), first, "no new segment file per tier per start");
    let h = open(&cfg(), dir.path());
    same_points(&h.raw(id, 0, u64::MAX), &pts);
    same_buckets(&h.query(id, 0, u64::MAX / MS, 60_000), &brute(&pts, 60_000));
    assert_eq!(h.stats().corrupt_records, 0);
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

fn files(dir: &Path, ext: &str) -> Vec<std::path::PathBuf> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            v.extend(files(&p, ext));
        } else if p.extension().is_some_and(|x| x == ext) {
            v.push(p);
        }
    }
    v.sort();
    v
}

#[test]
fn torn_and_damaged_records_are_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let killed_dir = tempfile::tempdir().unwrap();
    let now = crate::model::now_ns();
    let pts = points(now - 300 * S, 2_000);
    let id;
    {
        let h = open(&cfg(), dir.path());
        h.append(&key(3, "m"), &pts[..1_200]).unwrap();
        h.flush_rolling(); // the first ~60 s chunks sealed, the rest in the WAL
        h.append(&key(3, "m"), &pts[1_200..]).unwrap();
        h.flush();
        id = h.id_of(&key(3, "m")).unwrap();
        // Hold the files as a SIGKILL would leave them: no clean close.
        copy_dir(dir.path(), killed_dir.path());
    }
    let killed = killed_dir.path().to_path_buf();
    // Tear the last WAL record (a partial write) and add junk after the last raw chunk.
    let wal = files(&killed.join("history/wal"), "wal");
    let last = wal.last().unwrap();
    let len = std::fs::metadata(last).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(last)
        .unwrap()
        .set_len(len - 7)
        .unwrap();
    let seg = files(&killed.join("history/raw"), "seg");
    let mut data = std::fs::read(seg.last().unwrap()).unwrap();
    data.extend_from_slice(b"SNDH\x01\xff\xff\x00\x00garbage");
    std::fs::write(seg.last().unwrap(), &data).unwrap();
    let h = open(&cfg(), &killed);
    let st = h.stats();
    assert!(st.corrupt_records >= 2, "{st:?}");
    // Sealed chunks and the first WAL file survive; only what was in the torn
    // record and not yet in a sealed chunk is gone.
    let got = h.raw(id, 0, u64::MAX);
    assert!(got.len() >= 1_200 && got.len() < 2_000, "{}", got.len());
    same_points(&got, &pts[..got.len()]);
    // And writing goes on into new files.
    h.append(&key(3, "m"), &pts[got.len()..]).unwrap();
    h.flush_rolling();
    same_points(&h.raw(id, 0, u64::MAX), &pts);
}

#[test]
fn the_disk_budget_is_enforced_oldest_first_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let c = HistoryConfig {
        disk_budget_bytes: 256 << 10,
        ..cfg()
    };
    let now = crate::model::now_ns();
    let h = open(&c, dir.path());
    let mut last = Vec::new();
    for node in 0..8 {
        let pts = points(now - 800 * S, 7_000);
        h.append(&key(node, "m"), &pts).unwrap();
        last = pts;
    }
    h.flush_rolling();
    let st = h.stats();
    assert!(st.disk_bytes <= c.disk_budget_bytes, "{} > budget", st.disk_bytes);
    let evicted: u64 = st.tiers.iter().map(|t| t.evicted_disk_budget).sum();
    assert!(evicted > 0, "{st:?}");
    // The newest data is still there, the oldest is gone.
    let id = h.id_of(&key(7, "m")).unwrap();
    let raw = h.raw(id, 0, u64::MAX);
    assert_eq!(raw.last(), last.last());
    assert!(raw.len() < last.len());
    let on_disk: u64 = files(dir.path(), "seg")
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert!(on_disk <= c.disk_budget_bytes);
}

#[test]
fn data_ages_out_per_tier_and_empty_series_free_their_place() {
    let dir = tempfile::tempdir().unwrap();
    NOW.with(|c| c.set(T0));
    let c = HistoryConfig {
        disk_budget_bytes: 4 << 20,
        max_series: 1,
        ..cfg()
    };
    let h = open(&c, dir.path());
    h.append(&key(0, "old"), &points(T0 - 3600 * S, 20_000)).unwrap();
    h.flush_rolling();
    assert_eq!(
        h.append(&key(0, "new"), &points(T0, 1)),
        Err(Refused::TooManySeries { max: 1 })
    );
    // Ten days on: the raw and 1 s tiers have aged out, the 60 s tier keeps it.
    NOW.with(|c| c.set(T0 + 10 * 86_400 * S));
    h.flush_rolling();
    let st = h.stats();
    assert!(st.tiers[0].evicted_age > 0 && st.tiers[1].evicted_age > 0, "{st:?}");
    assert_eq!(st.tiers[2].evicted_age, 0);
    let id = h.id_of(&key(0, "old")).unwrap();
    let q = h.query(id, 0, u64::MAX / MS, 60_000);
    assert_eq!(q.resolution_ms, 60_000);
    assert!(q.t.len() >= 30, "{}", q.t.len());
    // A year on (and a minute of wall clock without points, which writes the
    // open buckets out), nothing is left, and the series' place is free again.
    NOW.with(|c| c.set(T0 + 365 * 86_400 * S));
    h.with_inner(|i| i.pretend_idle(std::time::Duration::from_secs(120)));
    h.flush_rolling();
    assert_eq!(h.stats().series, 0);
    h.append(&key(0, "new"), &points(T0 + 365 * 86_400 * S, 10)).unwrap();
    assert_eq!(h.stats().refused_series, 1);
    NOW.with(|c| c.set(0));
}

#[test]
fn one_history_per_directory() {
    let dir = tempfile::tempdir().unwrap();
    let h = open(&cfg(), dir.path());
    let err = History::open_with_clock(&cfg(), dir.path(), test_now)
        .err()
        .expect("a second open fails");
    assert!(err.to_string().contains("in use"), "{err:#}");
    drop(h);
    open(&cfg(), dir.path());
}

#[test]
fn series_past_the_limit_are_refused_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let h = open(&HistoryConfig { max_series: 3, ..cfg() }, dir.path());
    let now = crate::model::now_ns();
    for n in 0..3 {
        h.append(&key(n, "m"), &points(now, 5)).unwrap();
    }
    for n in 3..6 {
        assert_eq!(
            h.append(&key(n, "m"), &points(now, 5)),
            Err(Refused::TooManySeries { max: 3 })
        );
    }
    // Existing series still take points.
    h.append(&key(0, "m"), &points(now + 10 * S, 5)).unwrap();
    let st = h.stats();
    assert_eq!((st.series, st.refused_series, st.points_appended), (3, 3, 20));
}

#[test]
fn listing_filters_by_name_attributes_and_time() {
    let dir = tempfile::tempdir().unwrap();
    let h = open(&cfg(), dir.path());
    let now = crate::model::now_ns();
    for n in 0..4 {
        h.append(&key(n, "system.cpu.utilization"), &points(now - 100 * S, 10))
            .unwrap();
        h.append(&key(n, "gpu.utilization"), &points(now - 100 * S, 10))
            .unwrap();
    }
    let f = SeriesFilter {
        name_prefix: "system.".into(),
        attributes: vec![("host.name".into(), "node-3".into())],
        ..Default::default()
    };
    let l = h.series(&f);
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].key, key(3, "system.cpu.utilization"));
    assert!(l[0].first_ms <= l[0].last_ms);
    let all = h.series(&SeriesFilter::default());
    assert_eq!(all.len(), 8);
    let later = SeriesFilter {
        from_ms: Some(now / MS + 3_600_000),
        ..Default::default()
    };
    assert!(h.series(&later).is_empty());
}

#[test]
fn queries_pick_the_finest_tier_that_reaches_back() {
    let dir = tempfile::tempdir().unwrap();
    NOW.with(|c| c.set(T0));
    let c = HistoryConfig {
        disk_budget_bytes: 4 << 20,
        ..cfg()
    };
    let h = open(&c, dir.path());
    // Two hours at 100 ms: raw keeps only the last 15 minutes.
    h.append(&key(0, "m"), &points(T0 - 7_200 * S, 71_000)).unwrap();
    h.flush_rolling();
    let id = h.id_of(&key(0, "m")).unwrap();
    let now_ms = T0 / MS;
    let pick = |from_ms: u64, step: u64| h.query(id, from_ms, now_ms, step).resolution_ms;
    assert_eq!(pick(now_ms - 300_000, 100), 0, "5 min at 100 ms: raw");
    assert_eq!(pick(now_ms - 300_000, 999), 0, "finer than 1 s: raw");
    assert_eq!(pick(now_ms - 300_000, 1_500), 1_000, "1.5 s buckets from the 1 s tier");
    assert_eq!(
        pick(now_ms - 300_000, 60_000),
        60_000,
        "1 min buckets come from the 60 s tier"
    );
    assert_eq!(
        pick(now_ms - 3_600_000, 100),
        1_000,
        "an hour back: raw is gone, 1 s reaches"
    );
    assert_eq!(pick(now_ms - 3_600_000, 3_600), 1_000);
    assert!(h.stats().tiers[0].evicted_age > 0);
    let q = h.query(id, now_ms - 3_600_000, now_ms, 3_600);
    assert!(q.t.len() >= 990 && q.t.len() <= 1_001, "{}", q.t.len());
    NOW.with(|c| c.set(0));
}

#[test]
fn the_memory_budget_writes_open_chunks_out_early() {
    let dir = tempfile::tempdir().unwrap();
    let c = HistoryConfig {
        memory_budget_bytes: 2 << 20,
        ..cfg()
    };
    let h = open(&c, dir.path());
    let now = crate::model::now_ns();
    for n in 0..800 {
        h.append(&key(n, "m"), &points(now - 100 * S, 500)).unwrap();
    }
    let before = h.stats().memory_bytes;
    assert!(before > c.memory_budget_bytes, "{before}");
    h.flush();
    let st = h.stats();
    assert!(st.early_seals > 0);
    assert!(st.memory_bytes <= c.memory_budget_bytes, "{} > budget", st.memory_bytes);
    // Nothing was lost doing it.
    let id = h.id_of(&key(5, "m")).unwrap();
    assert_eq!(h.raw(id, 0, u64::MAX).len(), 500);
    h.with_inner(|i| assert!(i.memory_bytes() <= c.memory_budget_bytes));
}

#[test]
fn a_view_asked_again_reads_sealed_chunks_from_the_cache_with_the_same_answer() {
    let (dir, bare) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let now = crate::model::now_ns();
    // 40 minutes: raw chunks seal every 60 s, 1 s buckets every 300.
    let pts = points(now - 2_400 * S, 24_000);
    let h = open(&cfg(), dir.path());
    let without = open(
        &HistoryConfig {
            query_cache_bytes: 0,
            ..cfg()
        },
        bare.path(),
    );
    let (head, tail) = pts.split_at(20_000);
    for x in [&h, &without] {
        x.append(&key(1, "m"), head).unwrap();
    }
    let id = h.id_of(&key(1, "m")).unwrap();
    assert_eq!(without.id_of(&key(1, "m")), Some(id));
    let in_range = |from: u64, to: u64| -> Vec<(u64, f64)> {
        pts.iter()
            .copied()
            .filter(|(t, _)| (from..=to).contains(&(t / MS)))
            .collect()
    };
    let check = |from: u64, to: u64, appended: &[(u64, f64)]| {
        // (a set: 20 000 points looked up in a slice of 20 000 took 37 s of a debug build)
        let appended: std::collections::HashSet<(u64, u64)> = appended.iter().map(|&(t, v)| (t, v.to_bits())).collect();
        for step in [700, 1_000, 5_000, 60_000] {
            let first = h.query(id, from, to, step);
            // Asked again: the same to the bit. Without the cache: the same,
            // but for the last bits of a mean where a bucket spans two chunks
            // (its sum is added up in another order).
            assert!(h.query(id, from, to, step) == first, "step {step}: asked again");
            same_buckets(&first, &without.query(id, from, to, step));
            let seen: Vec<(u64, f64)> = in_range(from, to)
                .into_iter()
                .filter(|&(t, v)| appended.contains(&(t, v.to_bits())))
                .collect();
            if step != 700 || first.resolution_ms == 0 {
                same_buckets(&first, &brute(&seen, step));
            }
        }
    };
    // A window starting mid-data on a minute, so chunks at its edge are cut.
    let from = (now - 1_800 * S) / MS / 60_000 * 60_000;
    check(from, now / MS, head);
    let st = h.stats().query_cache;
    assert!(st.hits > 0 && st.misses > 0 && st.entries > 0, "{st:?}");
    assert!(st.bytes > 0 && st.bytes <= st.budget_bytes, "{st:?}");
    assert_eq!(without.stats().query_cache.entries, 0);
    // New points seal more chunks; the window moves on.
    for x in [&h, &without] {
        x.append(&key(1, "m"), tail).unwrap();
    }
    check(from + 120_000, now / MS + 120_000, &pts);
}
