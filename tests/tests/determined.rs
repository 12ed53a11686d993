//! The determined plugin end to end: a training loop reports batch indices and
//! timings to sonde (a real Python loop through the official OpenTelemetry SDK,
//! JSON ingest, the in-process Rust API), sonde samples the machine and exports
//! to a real collector (rotel), and what arrives there is checked against the
//! loop's own record: every measurement tied to the batch that was running when
//! it was taken, only inside [begin_on_batch, end_after_batch], collection ending
//! at the cap and never restarting.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sonde_e2e::*;

const BEGIN: u64 = 3;
const END: u64 = 8;
/// Batches run: past END so that the end is decided by a report.
const BATCHES: u64 = 12;
const BATCH_S: f64 = 0.15;
/// Long enough for a batch's span (exported when it ends, after at most
/// BATCH_S + the SDK's 50 ms schedule delay) to arrive before anything taken
/// during that batch is resolved, with room for a loaded machine: CI runs the
/// suite's six sondes, six Python loops and six collectors on two cores, and
/// there a span took more than 600 ms to arrive (every system sample of the
/// window was then judged before the job's activation was known, and none
/// was collected). The plugin counts such reports (`late_batch_reports`).
const LAG_MS: u64 = 2000;

/// A boundary between two batches is known to the loop up to the time between
/// its clock read and its report (the span's start is exact; `update_batch_idx`
/// reads the clock a few microseconds after the loop's own read; a busy 2-core
/// machine can delay that by a scheduling quantum). A measurement this close to
/// a boundary may carry either neighbour; it is counted and printed.
const BOUNDARY_TOLERANCE_NS: u64 = 20_000_000;

/// One batch as the training loop recorded it.
#[derive(Clone, Debug)]
struct Batch {
    idx: u64,
    /// When the batch became current (its batch-index report).
    start: u64,
    /// The `train_batch` timing.
    t_start: u64,
    t_end: u64,
}

fn determined_settings(extra: &str) -> String {
    format!(
        "plugin.determined.settings={{begin_on_batch={BEGIN}, end_after_batch={END}, flush_every_s=1.0, \
         lag_ms={LAG_MS}, deliver_every_ms=200{extra}}}"
    )
}

fn start_sonde(dir: &Path, rotel: &Rotel, settings: &str, extra: &[&str]) -> Sonde {
    let endpoint = format!("http://127.0.0.1:{}", rotel.grpc);
    let mut args = vec![
        "--export-endpoint",
        &endpoint,
        "--set",
        "export.interval_ms=200",
        "--set",
        settings,
    ];
    args.extend_from_slice(extra);
    Sonde::start(dir, &[(plugin_file("bundled/determined.wasm"), "determined")], &args)
}

fn job_state(sonde: &Sonde, job: &str) -> Option<Value> {
    let st = sonde.json("/api/plugins/determined/state");
    st["jobs"].as_array()?.iter().find(|j| j["job"] == job).cloned()
}

/// Runs tests/py/train_otel.py against sonde's OTLP receiver.
fn python_loop(dir: &Path, endpoint: &str, protocol: &str, job: &str, first: u64, batches: u64) -> Vec<Batch> {
    let record = dir.join(format!("train-{job}-{first}.json"));
    let out = Command::new("python3")
        .arg(repo().join("tests/py/train_otel.py"))
        .args([endpoint, protocol, &batches.to_string(), &BATCH_S.to_string()])
        .arg(&record)
        .args(["--job", job, "--first-batch", &first.to_string()])
        .output()
        .expect("running python3");
    assert!(
        out.status.success(),
        "train_otel.py failed (`just setup` installs the OpenTelemetry SDK):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // What the SDK logged (an export it retried), for a test that fails later.
    std::fs::write(record.with_extension("stderr"), &out.stderr).unwrap();
    let rows: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    rows.iter()
        .map(|r| {
            let n = |k: &str| r[k].as_u64().unwrap();
            Batch {
                idx: n("batch_idx"),
                start: n("start_ns"),
                t_start: n("start_ns"),
                t_end: n("end_ns"),
            }
        })
        .collect()
}

/// The batch whose [start, next start) holds `ts`.
fn batch_at(batches: &[Batch], ts: u64) -> Option<&Batch> {
    batches.iter().rev().find(|b| b.start <= ts)
}

/// One row of a batch record: (metric, type, timestamp, batch index, value).
type RowT = (String, String, u64, u64, f64);

fn rows_of(batches: &[ProfilerBatch], trial: &str) -> Vec<RowT> {
    let mut rows = Vec::new();
    for b in batches.iter().filter(|b| b.trial == trial) {
        for i in 0..b.values.len() {
            rows.push((
                b.metric.clone(),
                b.kind.clone(),
                b.timestamps[i],
                b.batch_indices[i],
                b.values[i],
            ));
        }
    }
    rows
}

/// Everything the collector received for `trial`, checked against the loop's
/// record. `child_timings` are timings reported without a batch index (tied by
/// the timeline); `train_batch` carries its own.
fn check_collected(log: &str, trial: &str, batches: &[Batch], child_timings: &[&str]) {
    let records = parse_profiler_batches(log);
    let rows = rows_of(&records, trial);
    assert!(
        !rows.is_empty(),
        "no determined.profiler.batch records for {trial} arrived"
    );
    let in_window: Vec<&Batch> = batches.iter().filter(|b| (BEGIN..=END).contains(&b.idx)).collect();
    assert_eq!(
        in_window.len() as u64,
        END - BEGIN + 1,
        "the loop ran through the window"
    );
    let window_start = in_window[0].start;
    let window_end = batches.iter().find(|b| b.idx == END + 1).unwrap().start;

    // (c) Only batch indices inside [begin, end], only measurements taken inside the window.
    let outside: Vec<&RowT> = rows.iter().filter(|r| !(BEGIN..=END).contains(&r.3)).collect();
    assert!(outside.is_empty(), "rows outside [{BEGIN}, {END}]: {outside:?}");
    let early_or_late: Vec<&RowT> = rows
        .iter()
        .filter(|r| r.2 < window_start || r.2 >= window_end + BOUNDARY_TOLERANCE_NS)
        .collect();
    assert!(
        early_or_late.is_empty(),
        "rows taken outside [{window_start}, {window_end}): {early_or_late:?}"
    );

    // (b) Every (timestamp, batch index) pair is the loop's.
    let mut near_boundary = Vec::new();
    for r in &rows {
        let expected = batch_at(batches, r.2).expect("taken after the loop started").idx;
        if expected == r.3 {
            continue;
        }
        let boundary = batches.iter().find(|b| b.idx == expected.max(r.3)).unwrap().start;
        assert!(
            expected.abs_diff(r.3) == 1 && r.2.abs_diff(boundary) <= BOUNDARY_TOLERANCE_NS,
            "{} at {} tied to batch {} but batch {expected} was running (boundary at {boundary})",
            r.0,
            r.2,
            r.3
        );
        near_boundary.push(r);
    }
    if !near_boundary.is_empty() {
        eprintln!("rows within {BOUNDARY_TOLERANCE_NS} ns of a batch boundary: {near_boundary:?}");
    }

    // (a) System metrics arrived, in Determined's units, from the one tick clock.
    for (metric, unit) in [("cpu_util_simple", "percent"), ("free_memory", "GB")] {
        let series: Vec<&ProfilerBatch> = records
            .iter()
            .filter(|b| b.trial == trial && b.metric == metric)
            .collect();
        assert!(!series.is_empty(), "no {metric} records");
        assert!(
            series.iter().all(|b| b.kind == "SYSTEM" && b.unit == unit),
            "{series:?}"
        );
        let values: Vec<f64> = series.iter().flat_map(|b| b.values.clone()).collect();
        // 100 ms ticks over (END - BEGIN + 1) batches of 150 ms: about 9; the
        // first one after activation is discarded (its interval began before).
        assert!(values.len() >= 5, "{metric}: only {} samples", values.len());
        let ok = match metric {
            "cpu_util_simple" => values.iter().all(|v| (0.0..=100.0).contains(v)),
            _ => values.iter().all(|v| *v > 0.0 && *v < 1e5),
        };
        assert!(ok, "{metric} values: {values:?}");
    }

    // (d) Timings: one row per batch in the window, with its batch index and duration.
    let train: Vec<&RowT> = rows.iter().filter(|r| r.0 == "train_batch").collect();
    assert!(train.iter().all(|r| r.1 == "TIMING"));
    let by_batch: BTreeMap<u64, Vec<&&RowT>> = train.iter().fold(BTreeMap::new(), |mut m, r| {
        m.entry(r.3).or_insert_with(Vec::new).push(r);
        m
    });
    assert_eq!(
        by_batch.keys().copied().collect::<Vec<_>>(),
        (BEGIN..=END).collect::<Vec<_>>(),
        "train_batch rows per batch: {train:?}"
    );
    for b in &in_window {
        let r = &by_batch[&b.idx];
        assert_eq!(r.len(), 1, "batch {}: {r:?}", b.idx);
        assert_eq!(
            r[0].2, b.t_start,
            "batch {}: the timing's timestamp is its start",
            b.idx
        );
        let want = (b.t_end - b.t_start) as f64 / 1e9;
        assert!(
            (r[0].4 - want).abs() < 1e-6,
            "batch {}: {} s, the loop measured {want} s",
            b.idx,
            r[0].4
        );
    }
    for name in child_timings {
        let got: Vec<u64> = rows.iter().filter(|r| r.0 == *name).map(|r| r.3).collect();
        assert_eq!(
            got.iter().copied().collect::<BTreeSet<_>>(),
            (BEGIN..=END).collect::<BTreeSet<_>>(),
            "{name}: {got:?}"
        );
        assert_eq!(got.len() as u64, END - BEGIN + 1, "{name}: one per batch: {got:?}");
    }

    // The same as OpenTelemetry metrics: durations at the timings' starts, and
    // the batch-index series to join them with.
    let points = parse_rotel_points(log);
    let trial_attr = format!("determined.trial=Str({trial})");
    let mut durations: BTreeMap<u64, f64> = BTreeMap::new();
    for p in points.iter().filter(|p| {
        p.name == "sonde.timing.duration" && p.has(&trial_attr) && p.has("determined.metric=Str(train_batch)")
    }) {
        durations.insert(p.time_ns, p.value);
    }
    assert_eq!(
        durations.keys().copied().collect::<Vec<_>>(),
        in_window.iter().map(|b| b.t_start).collect::<Vec<_>>(),
        "sonde.timing.duration points of train_batch"
    );
    let index: Vec<&SeenPoint> = points
        .iter()
        .filter(|p| p.name == "sonde.batch.index" && p.has(&trial_attr))
        .collect();
    assert!(!index.is_empty(), "no sonde.batch.index points");
    assert!(
        index.iter().all(|p| (BEGIN as f64..=END as f64).contains(&p.value)),
        "sonde.batch.index outside [{BEGIN}, {END}]: {index:?}"
    );
    for b in &in_window {
        assert!(
            index.iter().any(|p| p.has("determined.metric_type=Str(timing)")
                && p.time_ns == b.t_start
                && p.value == b.idx as f64),
            "no timing batch-index point {} at {}",
            b.idx,
            b.t_start
        );
    }
}

/// Stops sonde (which flushes the plugin and drains the export) and returns
/// what rotel received once it is quiet.
fn stop_and_collect(sonde: &mut Sonde, rotel: &Rotel) -> String {
    // Should a check of what arrived fail, what the plugin did with the
    // reports (ignored as inactive, late, dropped) tells why.
    eprintln!(
        "determined counters: {}",
        sonde.json("/api/plugins/determined/state")["counters"]
    );
    let status = sonde.proc.terminate(Duration::from_secs(10));
    assert_eq!(
        status.map(|s| s.success()),
        Some(true),
        "sonde did not stop cleanly:\n{}",
        sonde.output()
    );
    wait_quiet(&rotel.log, Duration::from_millis(500), Duration::from_secs(10));
    rotel.received()
}

#[test]
fn python_otel_sdk_loop_over_otlp_grpc_ties_metrics_and_timings_to_batches() {
    let t0 = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let rotel = Rotel::start(tmp.path());
    let grpc = free_port();
    let recv = format!("ingest.otlp_grpc_listen=\"127.0.0.1:{grpc}\"");
    let mut sonde = start_sonde(
        tmp.path(),
        &rotel,
        &determined_settings(""),
        &["--set", &recv, "--set", "ingest.otlp_http_listen=\"off\""],
    );
    let job = "mnist-otel";
    let batches = python_loop(tmp.path(), &format!("http://127.0.0.1:{grpc}"), "grpc", job, 0, BATCHES);

    // The state machine switched at the exact span starts of batches BEGIN and END + 1.
    let ended = wait_for(Duration::from_secs(10), || {
        job_state(&sonde, job).is_some_and(|j| j["ended"] == true)
    });
    let st = job_state(&sonde, job);
    assert!(ended, "the job did not end: {st:?}\n{}", sonde.output());
    let st = st.unwrap();
    assert_eq!(st["end_reason"], "end_after_batch", "{st}");
    assert_eq!(st["agent"], "e2e-node", "host.name is the node: {st}");
    assert_eq!(
        st["activated_at_ns"].as_u64(),
        Some(batches[BEGIN as usize].start),
        "{st}"
    );
    assert_eq!(
        st["ended_at_ns"].as_u64(),
        Some(batches[END as usize + 1].start),
        "{st}"
    );

    // The route shows the same timings (3 names per batch in the window).
    let want = 3 * (END - BEGIN + 1) as usize;
    assert!(
        wait_for(Duration::from_secs(10), || {
            sonde
                .json("/api/plugins/determined/timings?limit=1000")
                .as_array()
                .unwrap()
                .len()
                >= want
        }),
        "timings: {}",
        sonde.json("/api/plugins/determined/timings")
    );
    let timings = sonde.json("/api/plugins/determined/timings?limit=1000");
    let timings = timings.as_array().unwrap();
    assert_eq!(timings.len(), want, "{timings:?}");
    for t in timings {
        let (b, start) = (t["batch_idx"].as_u64().unwrap(), t["start_ns"].as_u64().unwrap());
        assert!((BEGIN..=END).contains(&b), "{t}");
        assert_eq!(batch_at(&batches, start).unwrap().idx, b, "{t}");
    }

    let log = stop_and_collect(&mut sonde, &rotel);
    check_collected(&log, job, &batches, &["dataloader_next", "train_batch.backward"]);
    eprintln!("took {:?}", t0.elapsed());
}

#[test]
fn collection_stops_at_the_cap_and_does_not_restart_otlp_http() {
    let t0 = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let rotel = Rotel::start(tmp.path());
    let http_port = free_port();
    let recv = format!("ingest.otlp_http_listen=\"127.0.0.1:{http_port}\"");
    const CAP_S: u64 = 2;
    let settings = format!(
        "plugin.determined.settings={{begin_on_batch=2, max_active_s={CAP_S}, flush_every_s=0.5, lag_ms={LAG_MS}, \
         sample_period_ms=100, deliver_every_ms=200}}"
    );
    let mut sonde = start_sonde(
        tmp.path(),
        &rotel,
        &settings,
        &["--set", &recv, "--set", "ingest.otlp_grpc_listen=\"off\""],
    );
    let job = "capped";
    let endpoint = format!("http://127.0.0.1:{http_port}");
    // Active from batch 2 (0.3 s in), capped 2 s later; batches go on ~4.5 s past the cap.
    let batches = python_loop(tmp.path(), &endpoint, "http", job, 0, 45);

    let st = job_state(&sonde, job).expect("the job was seen");
    assert_eq!(
        (st["ended"].as_bool(), st["end_reason"].as_str()),
        (Some(true), Some("max_active_s")),
        "{st}"
    );
    let activated = st["activated_at_ns"].as_u64().unwrap();
    let ended_at = st["ended_at_ns"].as_u64().unwrap();
    assert_eq!(activated, batches[2].start, "{st}");
    assert_eq!(
        ended_at,
        activated + CAP_S * 1_000_000_000,
        "ended at activation + cap: {st}"
    );

    // Everything inside the cap is resolved (the plugin says up to when),
    // flushed, and has reached the collector. Without the first condition a
    // loaded machine could find timings flushed while the window's samples
    // still waited for the lag: `resolved == flushed` held with no system row.
    let counters = |s: &Sonde| s.json("/api/plugins/determined/state")["counters"].clone();
    let resolved_until = |s: &Sonde| {
        s.json("/api/plugins/determined/state")["resolved_until_ns"]
            .as_u64()
            .unwrap()
    };
    assert!(
        wait_for(Duration::from_secs(10), || {
            let c = counters(&sonde);
            resolved_until(&sonde) >= ended_at
                && c["resolved"] == c["flushed"]
                && rows_of(&parse_profiler_batches(&rotel.received()), job).len() as u64
                    == c["flushed"].as_u64().unwrap()
        }),
        "rows did not all arrive: {} vs {} (resolved until {}, the cap ended at {ended_at})",
        counters(&sonde),
        rows_of(&parse_profiler_batches(&rotel.received()), job).len(),
        resolved_until(&sonde)
    );
    let before = counters(&sonde);
    let rows = rows_of(&parse_profiler_batches(&rotel.received()), job);
    let system: Vec<u64> = rows.iter().filter(|r| r.1 == "SYSTEM").map(|r| r.2).collect();
    let last = *system.iter().max().unwrap_or_else(|| {
        let sdk = std::fs::read_to_string(tmp.path().join(format!("train-{job}-0.stderr"))).unwrap_or_default();
        panic!(
            "no system rows arrived; counters: {before}\n{}\nthe loop's stderr:\n{sdk}",
            sonde.output()
        )
    });
    // Collected up to the cap: the last tick before it (100 ms period, plus jitter).
    assert!(last < ended_at, "a sample after the cap: {last} >= {ended_at}");
    assert!(
        last + 100_000_000 + 100_000_000 >= ended_at,
        "collection stopped {} ms before the cap",
        (ended_at - last) / 1_000_000
    );
    assert!(
        rows.iter().all(|r| r.2 >= activated && r.2 < ended_at),
        "rows outside the active window"
    );
    let train: BTreeSet<u64> = rows.iter().filter(|r| r.0 == "train_batch").map(|r| r.3).collect();
    let want: BTreeSet<u64> = batches
        .iter()
        .filter(|b| b.start >= activated && b.start < ended_at)
        .map(|b| b.idx)
        .collect();
    assert_eq!(
        train, want,
        "train_batch rows are the batches that started inside the cap"
    );

    // More batches after the end: processed (ignored as inactive), never collected.
    let ignored = before["ignored_inactive"].as_u64().unwrap();
    let more = python_loop(tmp.path(), &endpoint, "http", job, 100, 8);
    assert_eq!(more.len(), 8);
    assert!(
        wait_for(Duration::from_secs(10), || {
            counters(&sonde)["ignored_inactive"].as_u64().unwrap() >= ignored + 3 * 8
        }),
        "the new timings were not seen: {}",
        counters(&sonde)
    );
    // One more flush period (0.5 s) plus the export interval: nothing may follow.
    std::thread::sleep(Duration::from_millis(1200));
    let after = counters(&sonde);
    assert_eq!(
        (&after["resolved"], &after["flushed"]),
        (&before["resolved"], &before["flushed"]),
        "{before} -> {after}"
    );
    let st2 = job_state(&sonde, job).unwrap();
    assert_eq!(
        (
            &st2["phase"],
            &st2["end_reason"],
            &st2["ended_at_ns"],
            &st2["activated_at_ns"]
        ),
        (
            &json!("ended"),
            &json!("max_active_s"),
            &json!(ended_at),
            &json!(activated)
        ),
        "no restart: {st2}"
    );
    let log = stop_and_collect(&mut sonde, &rotel);
    let rows_after = rows_of(&parse_profiler_batches(&log), job);
    assert_eq!(rows_after.len(), rows.len(), "new rows after the end");
    assert!(rows_after.iter().all(|r| r.2 < ended_at && r.3 < 100));
    assert!(
        !log.contains("\"batch_idx\":100"),
        "a batch index of the second run was reported"
    );
    eprintln!("took {:?}", t0.elapsed());
}

/// The JSON-ingest loop: progress at each batch's start, timings at its end.
fn json_loop(sonde: &Sonde, job: &str) -> Vec<Batch> {
    let origin = json!({"job": job, "node": "json-node", "rank": 0, "local_rank": 0});
    let mut out = Vec::new();
    for idx in 0..BATCHES {
        let start = now_ns();
        let (code, body) = post_json(
            &sonde.api,
            "/api/ingest",
            &json!({"origin": origin, "progress": [{"name": "batch_idx", "value": idx, "time_ns": start}]}),
        );
        assert_eq!(code, 202, "{body}");
        let load_start = now_ns();
        std::thread::sleep(Duration::from_secs_f64(BATCH_S * 0.3));
        let load_end = now_ns();
        std::thread::sleep(Duration::from_secs_f64(BATCH_S * 0.7));
        let end = now_ns();
        let (code, body) = post_json(
            &sonde.api,
            "/api/ingest",
            &json!({"origin": origin, "timings": [
                {"name": "train_batch", "start_ns": start, "end_ns": end, "batch_idx": idx},
                {"name": "dataloader_next", "start_ns": load_start, "end_ns": load_end},
            ]}),
        );
        assert_eq!(code, 202, "{body}");
        out.push(Batch {
            idx,
            start,
            t_start: start,
            t_end: end,
        });
    }
    out
}

#[test]
fn json_ingest_loop_ties_metrics_and_timings_to_batches() {
    let t0 = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let rotel = Rotel::start(tmp.path());
    let mut sonde = start_sonde(tmp.path(), &rotel, &determined_settings(""), &[]);
    let job = "mnist-json";
    let batches = json_loop(&sonde, job);
    assert!(
        wait_for(Duration::from_secs(10), || job_state(&sonde, job)
            .is_some_and(|j| j["ended"] == true)),
        "{:?}",
        job_state(&sonde, job)
    );
    let st = job_state(&sonde, job).unwrap();
    assert_eq!(st["end_reason"], "end_after_batch");
    assert_eq!(st["agent"], "json-node");
    assert_eq!(
        st["activated_at_ns"].as_u64(),
        Some(batches[BEGIN as usize].start),
        "{st}"
    );
    assert_eq!(
        st["ended_at_ns"].as_u64(),
        Some(batches[END as usize + 1].start),
        "{st}"
    );
    let log = stop_and_collect(&mut sonde, &rotel);
    check_collected(&log, job, &batches, &["dataloader_next"]);
    eprintln!("took {:?}", t0.elapsed());
}

#[test]
fn rust_api_profiler_agent_with_an_embedded_host() {
    use sonde::agent::{ProfilerAgent, Timing};
    let t0 = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let rotel = Rotel::start(tmp.path());
    let (plugins, data, sinks) = (
        tmp.path().join("plugins"),
        tmp.path().join("data"),
        tmp.path().join("sinks"),
    );
    for d in [&plugins, &data, &sinks] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::copy(plugin_file("bundled/determined.wasm"), plugins.join("determined.wasm")).unwrap();
    // Share the compiled-plugin cache with the other tests.
    let cache = repo().join("target/test-plugin-cache");
    std::fs::create_dir_all(&cache).unwrap();
    let _ = std::os::unix::fs::symlink(&cache, data.join("cache"));
    let sets = [
        format!("plugins.dir=\"{}\"", plugins.display()),
        format!("host.data_dir=\"{}\"", data.display()),
        format!("sinks.dir=\"{}\"", sinks.display()),
        format!("export.endpoint=\"http://127.0.0.1:{}\"", rotel.grpc),
        "export.interval_ms=200".into(),
        "ingest.otlp_grpc_listen=\"off\"".into(),
        "ingest.otlp_http_listen=\"off\"".into(),
        determined_settings(""),
    ];
    let overrides: Vec<_> = sets.iter().map(|s| sonde::config::parse_override(s).unwrap()).collect();
    let cfg = sonde::config::Config::load(None, &BTreeMap::new(), &overrides).unwrap();
    let agent = ProfilerAgent::builder("mnist-rust")
        .rank(0)
        .local_rank(0)
        .node("rust-node")
        .config(cfg)
        .start()
        .unwrap();
    assert!(agent.is_enabled() && !agent.is_active(), "enabled, not yet active");

    let mut batches = Vec::new();
    let mut active_seen = Vec::new();
    for idx in 0..BATCHES {
        let start = now_ns();
        agent.update_batch_idx(idx);
        let mut load = Timing::new("dataloader_next");
        load.start();
        std::thread::sleep(Duration::from_secs_f64(BATCH_S * 0.3));
        load.end();
        agent.record_timing(&load);
        let mut t = Timing::new("train_batch");
        t.start();
        std::thread::sleep(Duration::from_secs_f64(BATCH_S * 0.7));
        t.end();
        agent.record_timing(&t);
        if agent.is_active() {
            active_seen.push(idx);
        }
        batches.push(Batch {
            idx,
            start,
            t_start: t.start_ns,
            t_end: t.end_ns,
        });
    }
    // is_active() mirrors the plugin's decisions, some flushes behind the
    // reports (how many depends on the machine's load, so only the start is
    // bounded here): never before begin_on_batch, and one unbroken stretch,
    // which ends below once end_after_batch has been passed.
    assert!(
        !active_seen.is_empty()
            && active_seen[0] >= BEGIN
            && active_seen.windows(2).all(|w| w[1] == w[0] + 1)
            && active_seen[0] <= END,
        "is_active() was true after batches {active_seen:?}"
    );
    assert!(
        wait_for(Duration::from_secs(5), || agent.has_ended() && !agent.is_active()),
        "still active after end_after_batch"
    );
    let t_end = Instant::now();
    agent.end();
    assert!(
        t_end.elapsed() < Duration::from_secs(12),
        "end() took {:?}",
        t_end.elapsed()
    );
    wait_quiet(&rotel.log, Duration::from_millis(500), Duration::from_secs(10));
    let log = rotel.received();
    check_collected(&log, "mnist-rust", &batches, &["dataloader_next"]);
    let records = parse_profiler_batches(&log);
    assert!(
        records
            .iter()
            .filter(|b| b.trial == "mnist-rust")
            .all(|b| b.agent == "rust-node")
    );
    eprintln!("took {:?}", t0.elapsed());
}

/// Batch-index reports can arrive out of time order (an SDK's periodic
/// `sonde.batch_idx` gauge point, taken during a batch, racing that batch's
/// span, exported when it ends). Within the lag the state machine honours
/// their own times: activation at the earliest report at or past
/// begin_on_batch, the end at the earliest past end_after_batch.
#[test]
fn earlier_reports_arriving_later_within_the_lag_set_activation_and_end() {
    let tmp = tempfile::tempdir().unwrap();
    let rotel = Rotel::start(tmp.path());
    let sonde = start_sonde(tmp.path(), &rotel, &determined_settings(""), &[]);
    let origin = json!({"job": "ooo", "node": "n", "rank": 0, "local_rank": 0});
    let post = |body: Value| {
        let mut body = body;
        body["origin"] = origin.clone();
        assert_eq!(post_json(&sonde.api, "/api/ingest", &body).0, 202);
        std::thread::sleep(Duration::from_millis(150)); // separate hand-overs (ingest.flush_ms = 50)
    };
    let t = now_ns();
    let u = t + 1_000_000_000;
    let p = |v: u64, at: u64| json!({"name": "batch_idx", "value": v, "time_ns": at});
    let tm =
        |v: u64, at: u64| json!({"name": "train_batch", "start_ns": at, "end_ns": at + 100_000_000, "batch_idx": v});
    post(json!({"progress": [p(0, t - 1_000_000_000)]}));
    // Batch BEGIN starts at t; a coarse report from inside it arrives first.
    post(json!({"progress": [p(BEGIN, t + 100_000_000)]}));
    post(json!({"progress": [p(BEGIN, t)], "timings": [tm(BEGIN, t)]}));
    // Batch END + 1 starts at u; again the coarse report arrives first.
    post(json!({"progress": [p(END + 1, u + 100_000_000)]}));
    post(json!({"progress": [p(END + 1, u)], "timings": [tm(END + 1, u)]}));
    let st = job_state(&sonde, "ooo").unwrap();
    assert_eq!(
        st["activated_at_ns"].as_u64(),
        Some(t),
        "activation at batch {BEGIN}'s start: {st}"
    );
    assert_eq!(
        st["ended_at_ns"].as_u64(),
        Some(u),
        "end at batch {}'s start: {st}",
        END + 1
    );
    std::thread::sleep(Duration::from_millis(LAG_MS + 1500));
    let timings = sonde.json("/api/plugins/determined/timings?job=ooo");
    let got: Vec<u64> = timings
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["batch_idx"].as_u64().unwrap())
        .collect();
    assert_eq!(got, vec![BEGIN], "{timings}");
}

/// Issue 22: a timing that carries its own batch index is judged by that
/// index against [begin_on_batch, end_after_batch], whichever order the job
/// reports in: progress first and the timing after it, or both in one body
/// at the step's end (the README's example, with the report's time its
/// arrival, after the timing started). A timing without an index keeps the
/// time rule, so in one body it shifts by one batch at both edges.
#[test]
fn a_timing_with_its_own_batch_index_is_gated_by_it_in_both_report_orders_through_the_ingest() {
    let tmp = tempfile::tempdir().unwrap();
    let rotel = Rotel::start(tmp.path());
    let sonde = start_sonde(tmp.path(), &rotel, &determined_settings(""), &[]);
    let origin = |job: &str| json!({"job": job, "node": "n", "rank": 0, "local_rank": 0});
    let post = |body: Value| {
        let (code, text) = post_json(&sonde.api, "/api/ingest", &body);
        assert_eq!(code, 202, "{text}");
    };
    let timing = |b: u64, start: u64, end: u64| {
        json!([
            {"name": "train_batch", "start_ns": start, "end_ns": end, "batch_idx": b},
            {"name": "dataloader_next", "start_ns": start, "end_ns": start + 1_000_000},
        ])
    };
    // Starts of each job's batches, as the loop saw them.
    let (mut first, mut together) = (Vec::new(), Vec::new());
    for b in 0..=END + 2 {
        // Progress first: the report, then a step that starts after it arrived.
        post(json!({"origin": origin("progress-first"), "progress": [{"value": b}]}));
        let start = now_ns();
        std::thread::sleep(Duration::from_millis(40));
        post(json!({"origin": origin("progress-first"), "timings": timing(b, start, now_ns())}));
        first.push(start);
        // One body at the step's end: the step started before its report.
        let start = now_ns();
        std::thread::sleep(Duration::from_millis(40));
        post(json!({"origin": origin("one-body"), "progress": [{"value": b}], "timings": timing(b, start, now_ns())}));
        together.push(start);
    }
    for job in ["progress-first", "one-body"] {
        assert!(
            wait_for(Duration::from_secs(10), || job_state(&sonde, job)
                .is_some_and(|j| j["ended"] == true)),
            "{job}: {:?}",
            job_state(&sonde, job)
        );
    }
    // Past the lag, everything is resolved.
    std::thread::sleep(Duration::from_millis(LAG_MS + 700));
    let rows = |job: &str, name: &str| -> Vec<(u64, u64)> {
        let t = sonde.json(&format!("/api/plugins/determined/timings?job={job}"));
        t.as_array()
            .unwrap()
            .iter()
            .filter(|r| r["name"] == name)
            .map(|r| (r["batch_idx"].as_u64().unwrap(), r["start_ns"].as_u64().unwrap()))
            .collect()
    };
    let window = |starts: &[u64], shift: u64| -> Vec<(u64, u64)> {
        (BEGIN..=END).map(|b| (b, starts[(b + shift) as usize])).collect()
    };
    assert_eq!(rows("progress-first", "train_batch"), window(&first, 0));
    assert_eq!(
        rows("one-body", "train_batch"),
        window(&together, 0),
        "batches {BEGIN} to {END}"
    );
    assert_eq!(rows("progress-first", "dataloader_next"), window(&first, 0));
    // Without its own index: the steps that started in batches BEGIN + 1 ..= END + 1,
    // each tied to the batch reported before it started.
    assert_eq!(rows("one-body", "dataloader_next"), window(&together, 1));
}
