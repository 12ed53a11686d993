//! The profiler end to end against a fake host: events and samples in;
//! points, batch log records, decisions, state and routes out. One test
//! (or table) per rule of the spec; the pure pieces have their own tests in
//! their modules. `cluster.rs`: every rank's timings and each node's system
//! metrics, as on a cluster master.

mod cluster;

use serde_json::Value;
use sonde_plugin_sdk::types::{
    EventBatch, HttpRequest, Origin, PointColumns, ProgressColumns, SampleBatch, SampleRequest, SeriesInfo, SeriesKind,
    Severity, TimingColumns,
};

use crate::profiler::{MAX_TIMING_NAMES, Profiler};
use crate::routes;
use crate::samples::tests::{gpu, nic, series};
use crate::settings::Settings;
use sonde_plugin_sdk::testing::{FakeHost, Timer};

/// Milliseconds to ns; tests run at 1 000 000 ms after the epoch.
fn ms(x: u64) -> u64 {
    (1_000_000 + x) * 1_000_000
}

pub(crate) fn origin(job: &str, node: &str, rank: i32, local_rank: i32) -> Origin {
    Origin {
        job: job.into(),
        node: node.into(),
        role: "worker".into(),
        index: -1,
        rank,
        local_rank,
        attributes: vec![],
    }
}

pub(crate) fn empty(origins: Vec<Origin>, names: &[&str]) -> EventBatch {
    EventBatch {
        origins,
        names: names.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// batch_idx reports: (origin index, time ms, batch index).
fn progress(origins: Vec<Origin>, rows: &[(u32, u64, u64)]) -> EventBatch {
    let mut b = empty(origins, &["epoch", "batch_idx"]);
    b.progress = Some(ProgressColumns {
        origin: rows.iter().map(|r| r.0).collect(),
        name: vec![1; rows.len()],
        time: rows.iter().map(|r| ms(r.1)).collect(),
        value: rows.iter().map(|r| r.2).collect(),
    });
    b
}

/// Timings: (origin index, name, start ms, end ms, step).
fn timings(origins: Vec<Origin>, rows: &[(u32, &str, u64, u64, i64)]) -> EventBatch {
    let mut names: Vec<&str> = Vec::new();
    let mut name_idx = Vec::new();
    for r in rows {
        let i = names.iter().position(|n| *n == r.1).unwrap_or_else(|| {
            names.push(r.1);
            names.len() - 1
        });
        name_idx.push(i as u32);
    }
    let mut b = empty(origins, &names);
    b.timings = Some(TimingColumns {
        origin: rows.iter().map(|r| r.0).collect(),
        name: name_idx,
        start: rows.iter().map(|r| ms(r.2)).collect(),
        end: rows.iter().map(|r| ms(r.3)).collect(),
        step: rows.iter().map(|r| r.4).collect(),
    });
    b
}

/// A sample batch: `infos[s]` read `rows[s][t]` at `ticks` (ms).
fn samples(infos: Vec<SeriesInfo>, ticks: &[u64], rows: &[&[f64]]) -> SampleBatch {
    SampleBatch {
        series: infos.iter().map(|i| i.id).collect(),
        new_series: infos,
        timestamps: ticks.iter().map(|&t| ms(t)).collect(),
        values: rows.iter().flat_map(|r| r.iter().copied()).collect(),
    }
}

/// The all-CPU idle and iowait series, as the host samples them.
fn cpu() -> Vec<SeriesInfo> {
    let mode = |id, m| series(id, "system.cpu.utilization", SeriesKind::Gauge, &[("cpu.mode", m)]);
    vec![mode(1, "idle"), mode(2, "iowait")]
}

/// Samples whose busy share is `busy` at `ticks` (idle 1 − busy, no iowait).
fn cpu_samples(ticks: &[u64], busy: &[f64]) -> SampleBatch {
    let idle: Vec<f64> = busy.iter().map(|b| 1.0 - b).collect();
    samples(cpu(), ticks, &[&idle, &vec![0.0; busy.len()]])
}

fn start(host: &mut FakeHost, json: &str) -> Profiler {
    Profiler::start(host, Settings::parse(json).unwrap(), 0)
}

/// The one rank-0 process of job "t1" on node "n1".
fn solo() -> Vec<Origin> {
    vec![origin("t1", "n1", 0, 0)]
}

/// Moves the clock to `at_ms` and fires the resolve tick.
fn tick(p: &mut Profiler, host: &mut FakeHost, at_ms: u64) {
    host.now = ms(at_ms);
    p.on_timer(host, u64::MAX);
}

/// The `reason` of every decision's body, in order: what moved a job's state.
fn decision_reasons(host: &FakeHost) -> Vec<String> {
    host.decisions
        .iter()
        .map(|d| {
            let body: Value = serde_json::from_str(&d.body).unwrap();
            body["reason"].as_str().unwrap().to_string()
        })
        .collect()
}

/// The batch log records' bodies, parsed.
fn batches(host: &FakeHost) -> Vec<Value> {
    host.records
        .iter()
        .filter(|r| r.event_name == "determined.profiler.batch")
        .map(|r| serde_json::from_str(&r.body).unwrap())
        .collect()
}

fn batch_of<'a>(bodies: &'a [Value], metric: &str) -> Vec<&'a Value> {
    bodies.iter().filter(|b| b["metric"] == metric).collect()
}

fn get(p: &mut Profiler, host: &mut FakeHost, method: &str, path: &str, query: &str) -> (u16, Value) {
    let resp = routes::handle(
        p,
        host,
        &HttpRequest {
            method: method.into(),
            path: path.into(),
            query: query.into(),
            headers: vec![],
            body: vec![],
        },
    );
    (resp.status, serde_json::from_slice(&resp.body).unwrap())
}

fn state(p: &mut Profiler, host: &mut FakeHost) -> Value {
    get(p, host, "GET", "/state", "").1
}

fn job_state(p: &mut Profiler, host: &mut FakeHost, job: &str) -> Value {
    let s = state(p, host);
    s["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job"] == job)
        .cloned()
        .unwrap()
}

#[test]
fn manifest_asks_for_samples_and_events() {
    let m = crate::manifest(Settings::default().wanted_samples());
    let req = m.samples.unwrap();
    assert_eq!((req.period_ms, req.deliver_every_ms), (100, 1000));
    assert!(req.metrics.contains(&"system.network.io".to_string()));
    use sonde_plugin_sdk::types::EventKind;
    assert_eq!(m.events, [EventKind::Progress, EventKind::Timings, EventKind::Points]);
    assert!(
        Settings::parse(r#"{"max_activ_s":1}"#)
            .unwrap_err()
            .contains("unknown setting `max_activ_s`")
    );
}

#[test]
fn enabled_by_ranks_and_overrides() {
    // With timing_ranks = rank0 (Determined's rule):
    // (rank, local rank, settings) -> (sysmetrics, timings)
    let table = [
        (0, 0, "{}", (true, true)),
        (-1, -1, "{}", (true, true)), // a single process that reports no rank
        (3, 0, "{}", (true, false)),
        (0, 2, "{}", (false, true)),
        (3, 1, "{}", (false, false)),
        (-1, -1, r#"{"global_rank":1}"#, (true, false)),
        (5, 5, r#"{"global_rank":0,"local_rank":0}"#, (true, true)),
        (0, 0, r#"{"enabled":false}"#, (false, false)),
    ];
    for (rank, local, json, (sys, timing)) in table {
        let mut host = FakeHost::at(ms(0));
        let mut settings: Value = serde_json::from_str(json).unwrap();
        settings["timing_ranks"] = "rank0".into();
        let mut p = start(&mut host, &settings.to_string());
        p.on_events(&mut host, progress(vec![origin("t1", "n1", rank, local)], &[(0, 0, 0)]));
        let j = job_state(&mut p, &mut host, "t1");
        let case = format!("rank {rank} local {local} {json}");
        assert_eq!(j["sysmetrics_enabled"], sys, "{case}");
        assert_eq!(j["timings_enabled"], timing, "{case}");
        assert_eq!(j["active"], sys || timing, "{case}: active only when enabled");
        let ineligible = p.counters().ignored_ineligible_rank;
        assert_eq!(ineligible, u64::from(!sys && !timing && json == "{}"), "{case}");
    }
}

#[test]
fn ineligible_rank_is_ignored_and_counted_including_batch_indices() {
    let mut host = FakeHost::at(ms(0));
    let mut p = start(&mut host, r#"{"lag_ms":0,"timing_ranks":"rank0"}"#);
    let origins = vec![origin("t1", "n1", 1, 1), origin("t1", "n1", 2, 0)];
    // Rank 1 / local 1 says batch 50: ignored. Local rank 0 (global 2) says 0: it drives the timeline.
    p.on_events(&mut host, progress(origins.clone(), &[(0, 0, 50), (1, 10, 0)]));
    // Timings from either: rank 1 is ineligible, and so is global rank 2 for timings.
    p.on_events(
        &mut host,
        timings(
            origins,
            &[(0, "train_batch", 20, 30, -1), (1, "train_batch", 20, 30, -1)],
        ),
    );
    let j = job_state(&mut p, &mut host, "t1");
    assert_eq!(
        (j["sysmetrics_enabled"].as_bool(), j["timings_enabled"].as_bool()),
        (Some(true), Some(false))
    );
    assert_eq!(j["batch_idx"], 0);
    assert_eq!(j["agent"], "n1");
    assert_eq!(p.counters().ignored_ineligible_rank, 3);
    // A sample is tied to batch 0, not 50.
    host.now = ms(100);
    p.on_samples(&mut host, cpu_samples(&[50], &[0.5])).unwrap();
    assert_eq!(
        host.series("sonde.batch.index", &[("determined.metric_type", "system")]),
        [(ms(50), 0.0)]
    );
}

#[test]
fn begin_end_after_and_decisions() {
    let mut host = FakeHost::at(ms(0));
    let mut p = start(&mut host, r#"{"begin_on_batch":2,"end_after_batch":3,"lag_ms":0}"#);
    let reports: Vec<_> = (0..6).map(|b| (0, b * 100, b)).collect();
    p.on_events(&mut host, progress(solo(), &reports));
    assert_eq!(decision_reasons(&host), ["seen", "begin_on_batch", "end_after_batch"]);
    let last: Value = serde_json::from_str(&host.decisions[2].body).unwrap();
    assert_eq!(
        last,
        serde_json::json!({"job":"t1","enabled":true,"sysmetrics_enabled":true,"timings_enabled":true,
                           "active":false,"ended":true,"reason":"end_after_batch","batch_idx":4})
    );
    assert_eq!(host.decisions[1].kind, "profiler.state");
    assert_eq!(host.decisions[1].subject, "t1");
    // Samples count from batch 2's report (200 ms) until batch 4's (400 ms, exclusive).
    host.now = ms(1000);
    let ticks: Vec<u64> = (0..10).map(|i| i * 50).collect();
    p.on_samples(&mut host, cpu_samples(&ticks, &[0.25; 10])).unwrap();
    let got: Vec<u64> = host.series("sonde.cpu.busy", &[]).iter().map(|p| p.0).collect();
    assert_eq!(got, [ms(200), ms(250), ms(300), ms(350)]);
    let idx = host.series("sonde.batch.index", &[("determined.trial", "t1")]);
    assert_eq!(idx, [(ms(200), 2.0), (ms(250), 2.0), (ms(300), 3.0), (ms(350), 3.0)]);
    // 4 samples before activation are ignored while inactive; after the end, not counted.
    assert_eq!(p.counters().ignored_inactive, 4);
    // Reports after the end change nothing.
    p.on_events(&mut host, progress(solo(), &[(0, 2000, 0), (0, 2100, 2)]));
    assert_eq!(host.decisions.len(), 3);
    assert_eq!(job_state(&mut p, &mut host, "t1")["end_reason"], "end_after_batch");
}

#[test]
fn cap_ends_collection_by_timer_without_more_events() {
    let mut host = FakeHost::at(ms(0));
    let mut p = start(&mut host, r#"{"max_active_s":1,"lag_ms":0}"#);
    p.on_events(&mut host, progress(solo(), &[(0, 0, 0)]));
    // A one-shot timer for the cap expiry, besides the two repeating ones.
    let cap: Vec<_> = host
        .timers
        .iter()
        .filter(|(_, t)| !t.repeat)
        .map(|(id, t)| (*id, t.after_ms))
        .collect();
    assert_eq!(cap.len(), 1);
    assert_eq!(cap[0].1, 1000);
    host.now = ms(1500);
    p.on_timer(&mut host, cap[0].0);
    assert_eq!(decision_reasons(&host), ["seen", "begin_on_batch", "max_active_s"]);
    let j = job_state(&mut p, &mut host, "t1");
    assert_eq!(
        (j["ended"].as_bool(), j["ended_at_ns"].as_u64()),
        (Some(true), Some(ms(1000)))
    );
    assert_eq!(j["active_used_s"], 1.0);
    // Samples up to the cap count, later ones do not.
    p.on_samples(&mut host, cpu_samples(&[900, 1000, 1100], &[0.125, 0.25, 0.375]))
        .unwrap();
    assert_eq!(host.series("sonde.cpu.busy", &[]), [(ms(900), 0.125)]);
    // Persisted as ended.
    let stored: Value = serde_json::from_slice(&host.store.kv["job/t1"]).unwrap();
    assert_eq!(
        (stored["ended"].as_bool(), stored["end_reason"].as_str()),
        (Some(true), Some("max_active_s"))
    );
}

#[test]
fn measurements_are_tied_to_the_batch_current_at_their_time_with_late_reports() {
    let mut host = FakeHost::at(ms(1000));
    let mut p = start(&mut host, r#"{"lag_ms":500}"#);
    p.on_events(&mut host, progress(solo(), &[(0, 1000, 0)]));
    host.now = ms(1400);
    p.on_samples(
        &mut host,
        cpu_samples(&[1100, 1200, 1300, 1400], &[0.125, 0.25, 0.375, 0.5]),
    )
    .unwrap();
    assert!(host.points_of("sonde.cpu.busy", &[]).is_empty(), "waiting for the lag");
    // Batch 1 started at 1250 but its report arrives at 1500, within the lag.
    host.now = ms(1500);
    p.on_events(&mut host, progress(solo(), &[(0, 1250, 1)]));
    tick(&mut p, &mut host, 2000);
    assert_eq!(host.series("sonde.cpu.busy", &[]).len(), 4);
    // A report arriving after the lag cannot move measurements already resolved.
    host.now = ms(2000);
    p.on_samples(&mut host, cpu_samples(&[1600], &[0.625])).unwrap();
    tick(&mut p, &mut host, 2200);
    assert_eq!(
        p.counters().late_batch_reports,
        0,
        "1250 arrived at 1500, within the lag"
    );
    p.on_events(&mut host, progress(solo(), &[(0, 1550, 2)]));
    assert_eq!(p.counters().late_batch_reports, 1, "1550 arrived at 2200, 650 ms later");
    assert!(host.logged("arrived 650 ms after its time, past lag_ms = 500"));
    host.now = ms(3000);
    p.flush(&mut host);
    let bodies = batches(&host);
    let cpu = batch_of(&bodies, "cpu_util_simple");
    assert_eq!(cpu.len(), 1);
    assert_eq!(cpu[0]["batch_indices"], serde_json::json!([0, 0, 1, 1, 1]));
    assert_eq!(cpu[0]["values"], serde_json::json!([12.5, 25.0, 37.5, 50.0, 62.5]));
    assert_eq!(cpu[0]["unit"], "percent");
    assert_eq!(cpu[0]["type"], "SYSTEM");
    assert_eq!(
        (cpu[0]["trial"].as_str(), cpu[0]["agent"].as_str()),
        (Some("t1"), Some("n1"))
    );
    assert_eq!(cpu[0]["timestamps"][0], ms(1100));
}

#[test]
fn rates_discard_the_first_reading_after_activation_and_exclude_loopback() {
    let mut host = FakeHost::at(ms(0));
    let mut p = start(&mut host, r#"{"lag_ms":0}"#);
    host.now = ms(1000);
    p.on_events(&mut host, progress(solo(), &[(0, 1000, 0)]));
    host.now = ms(1300);
    let b = samples(
        vec![
            nic(10, "eth0", "transmit"),
            nic(11, "lo", "transmit"),
            nic(12, "eth0", "receive"),
        ],
        &[900, 1000, 1100, 1200],
        &[
            &[0.0, 100.0, 300.0, 400.0],
            &[0.0, 1e9, 2e9, 3e9],
            &[0.0, 0.0, 0.0, f64::NAN],
        ],
    );
    p.on_samples(&mut host, b).unwrap();
    // 900 -> 1000 started before activation: discarded. 200 B / 0.1 s = 16000 bit/s.
    let sent = host.series("sonde.network.throughput", &[("network.io.direction", "transmit")]);
    assert_eq!(sent, [(ms(1100), 16_000.0), (ms(1200), 8_000.0)]);
    let recv = host.series("sonde.network.throughput", &[("network.io.direction", "receive")]);
    assert_eq!(recv, [(ms(1100), 0.0)], "NaN skipped");
    p.flush(&mut host);
    let bodies = batches(&host);
    let sent = batch_of(&bodies, "net_throughput_sent");
    assert_eq!(sent[0]["values"], serde_json::json!([16e-6, 8e-6]));
    assert_eq!(sent[0]["unit"], "Gbit/s");
    assert_eq!(
        batch_of(&bodies, "net_throughput_recv")[0]["values"],
        serde_json::json!([0.0])
    );
}

#[test]
fn counter_reset_gives_no_rate_and_disk_metrics_in_determined_units() {
    let mut host = FakeHost::at(ms(0));
    let mut p = start(&mut host, r#"{"lag_ms":0}"#);
    p.on_events(&mut host, progress(solo(), &[(0, 0, 0)]));
    host.now = ms(5000);
    let d = |id, metric, dir| {
        series(
            id,
            metric,
            SeriesKind::Counter,
            &[("system.device", "sda"), ("disk.io.direction", dir)],
        )
    };
    let b = samples(
        vec![
            d(20, "system.disk.io", "read"),
            d(21, "system.disk.io", "write"),
            d(22, "system.disk.operations", "read"),
            d(23, "system.disk.operations", "write"),
        ],
        &[1000, 2000, 3000, 4000],
        &[
            &[0.0, 1000.0, 10.0, 510.0],
            &[0.0, 0.0, 0.0, 0.0],
            &[0.0, 5.0, 10.0, 15.0],
            &[0.0, 1.0, 2.0, 3.0],
        ],
    );
    p.on_samples(&mut host, b).unwrap();
    let read = host.series("sonde.disk.throughput", &[("disk.io.direction", "read")]);
    assert_eq!(
        read,
        [(ms(2000), 1000.0), (ms(4000), 500.0)],
        "the reset at 3000 gives nothing"
    );
    assert_eq!(
        host.series("sonde.disk.operations.rate", &[]),
        [(ms(2000), 6.0), (ms(3000), 6.0), (ms(4000), 6.0)]
    );
    p.flush(&mut host);
    let bodies = batches(&host);
    assert_eq!(batch_of(&bodies, "disk_iops")[0]["unit"], "ops/s");
    assert_eq!(batch_of(&bodies, "disk_throughput_read")[0]["unit"], "bytes/s");
    assert_eq!(
        batch_of(&bodies, "disk_throughput_write")[0]["values"],
        serde_json::json!([0.0, 0.0, 0.0])
    );
}

#[test]
fn memory_and_gpu_series() {
    let mut host = FakeHost::at(ms(0));
    let mut p = start(&mut host, r#"{"lag_ms":0}"#);
    p.on_events(&mut host, progress(solo(), &[(0, 0, 7)]));
    host.now = ms(1000);
    let b = samples(
        vec![
            series(30, "system.memory.linux.available", SeriesKind::Gauge, &[]),
            gpu(31, "hw.gpu.utilization", "GPU-a"),
            gpu(32, "hw.gpu.memory.usage", "GPU-a"),
            gpu(33, "hw.gpu.memory.limit", "GPU-a"),
        ],
        &[100, 200],
        &[&[8e9, f64::NAN], &[0.5, 1.0], &[1e9, 3e9], &[16e9, 16e9]],
    );
    p.on_samples(&mut host, b).unwrap();
    assert_eq!(
        host.series("sonde.gpu.memory.free", &[("hw.id", "GPU-a")]),
        [(ms(100), 15e9), (ms(200), 13e9)]
    );
    assert_eq!(host.series("hw.gpu.utilization", &[("hw.id", "GPU-a")]).len(), 2);
    p.flush(&mut host);
    let bodies = batches(&host);
    let free = batch_of(&bodies, "gpu_free_memory");
    assert_eq!(free[0]["gpu_uuid"], "GPU-a");
    assert_eq!(free[0]["unit"], "bytes");
    assert_eq!(free[0]["batch_indices"], serde_json::json!([7, 7]));
    assert_eq!(
        batch_of(&bodies, "gpu_util")[0]["values"],
        serde_json::json!([50.0, 100.0])
    );
    let mem = batch_of(&bodies, "free_memory");
    assert_eq!(
        (mem[0]["values"].clone(), mem[0]["unit"].as_str()),
        (serde_json::json!([8.0]), Some("GB"))
    );
    assert_eq!(mem[0]["gpu_uuid"], "");
    let gpu_record = host
        .records
        .iter()
        .find(|r| r.body.contains("gpu_free_memory"))
        .unwrap();
    assert_eq!(gpu_record.severity, Severity::Info);
    let keys: Vec<_> = gpu_record.attributes.iter().map(|a| a.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "determined.trial",
            "determined.metric",
            "determined.metric_type",
            "hw.id",
            "host.name"
        ]
    );
}

#[test]
fn timings_use_their_step_or_the_timeline_and_samples_per_second_is_misc() {
    let mut host = FakeHost::at(ms(0));
    let mut p = start(&mut host, r#"{"lag_ms":0}"#);
    p.on_events(&mut host, progress(solo(), &[(0, 0, 0), (0, 100, 1)]));
    host.now = ms(1000);
    p.on_events(
        &mut host,
        timings(
            solo(),
            &[
                (0, "dataloader_next", 50, 60, -1),
                (0, "train_batch", 110, 190, -1),
                (0, "train_batch.backward", 150, 180, 9),
                (0, "bad", 200, 100, -1),
            ],
        ),
    );
    let mut b = empty(solo(), &[]);
    b.point_series = vec![
        series(0, "determined.samples_per_second", SeriesKind::Gauge, &[]),
        series(1, "loss", SeriesKind::Gauge, &[]),
    ];
    b.points = Some(PointColumns {
        origin: vec![0, 0],
        series: vec![0, 1],
        time: vec![ms(120), ms(120)],
        value: vec![256.0, 0.1],
    });
    p.on_events(&mut host, b);
    assert_eq!(p.counters().malformed, 1);
    let d = host.series("sonde.timing.duration", &[("determined.metric", "train_batch")]);
    assert_eq!(d, [(ms(110), 0.08)]);
    assert_eq!(
        host.series("sonde.training.samples_per_second", &[]),
        [(ms(120), 256.0)]
    );
    let t = host.series("sonde.batch.index", &[("determined.metric_type", "timing")]);
    assert_eq!(t, [(ms(50), 0.0), (ms(110), 1.0), (ms(150), 9.0)]);
    assert_eq!(
        host.series("sonde.batch.index", &[("determined.metric_type", "misc")]),
        [(ms(120), 1.0)]
    );

    let (status, rows) = get(&mut p, &mut host, "GET", "/timings", "limit=2");
    assert_eq!(status, 200);
    assert_eq!(
        rows,
        serde_json::json!([
            {"job":"t1","rank":0,"node":"n1","name":"train_batch","batch_idx":1,"start_ns":ms(110),"duration_s":0.08},
            {"job":"t1","rank":0,"node":"n1","name":"train_batch.backward","batch_idx":9,"start_ns":ms(150),"duration_s":0.03},
        ])
    );
    assert_eq!(
        get(&mut p, &mut host, "GET", "/timings", "job=other").1,
        serde_json::json!([])
    );

    p.flush(&mut host);
    let bodies = batches(&host);
    let tb = batch_of(&bodies, "train_batch");
    assert_eq!(
        (tb[0]["type"].as_str(), tb[0]["unit"].as_str()),
        (Some("TIMING"), Some("seconds"))
    );
    let sps = batch_of(&bodies, "samples_per_second");
    assert_eq!(
        (sps[0]["type"].as_str(), sps[0]["values"][0].as_f64()),
        (Some("MISC"), Some(256.0))
    );
}

/// Adds batch_idx reports (origin index, time ms, batch index) to a batch.
fn with_progress(mut b: EventBatch, rows: &[(u32, u64, u64)]) -> EventBatch {
    let name = b.names.len() as u32;
    b.names.push("batch_idx".into());
    b.progress = Some(ProgressColumns {
        origin: rows.iter().map(|r| r.0).collect(),
        name: vec![name; rows.len()],
        time: rows.iter().map(|r| ms(r.1)).collect(),
        value: rows.iter().map(|r| r.2).collect(),
    });
    b
}

/// Issue 22: a timing that carries its batch index is gated by that index,
/// whichever order the job reports in; one without keeps the time rule.
/// Batch b runs from 100 b ms to 100 b + 90 ms.
#[test]
fn a_timing_with_its_own_batch_index_is_gated_by_it_in_both_report_orders() {
    for one_body in [false, true] {
        let mut host = FakeHost::at(ms(0));
        let mut p = start(&mut host, r#"{"begin_on_batch":3,"end_after_batch":8,"lag_ms":0}"#);
        for b in 0..=10u64 {
            let (start, end) = (b * 100, b * 100 + 90);
            let rows = [
                (0, "train_batch", start, end, b as i64),
                (0, "dataloader", start, start + 5, -1),
            ];
            host.now = ms(end);
            if one_body {
                // Progress and timings together, at the step's end.
                p.on_events(&mut host, with_progress(timings(solo(), &rows), &[(0, end, b)]));
            } else {
                p.on_events(&mut host, progress(solo(), &[(0, start, b)]));
                p.on_events(&mut host, timings(solo(), &rows));
            }
        }
        let (_, rows) = get(&mut p, &mut host, "GET", "/timings", "job=t1");
        let of = |name: &str| -> Vec<(u64, u64)> {
            rows.as_array()
                .unwrap()
                .iter()
                .filter(|r| r["name"] == name)
                .map(|r| {
                    (
                        r["batch_idx"].as_u64().unwrap(),
                        (r["start_ns"].as_u64().unwrap() - ms(0)) / 1_000_000,
                    )
                })
                .collect()
        };
        let case = if one_body { "one body" } else { "progress first" };
        let want: Vec<(u64, u64)> = (3..=8).map(|b| (b, b * 100)).collect();
        assert_eq!(of("train_batch"), want, "{case}: batches 3 to 8 by their own index");
        // Without an index, the time rule: in one body a step's report comes
        // after its timing started, so the window holds the timings that
        // started in batches 4..=9, each tied to the batch reported before it.
        let by_time: Vec<(u64, u64)> = if one_body {
            (4..=9).map(|b| (b - 1, b * 100)).collect()
        } else {
            want.clone()
        };
        assert_eq!(of("dataloader"), by_time, "{case}");
    }
}

#[test]
fn distinct_timing_names_are_capped_per_job() {
    let mut host = FakeHost::at(ms(0));
    let mut p = start(&mut host, r#"{"lag_ms":0}"#);
    p.on_events(&mut host, progress(solo(), &[(0, 0, 0)]));
    let names: Vec<String> = (0..MAX_TIMING_NAMES + 3)
        .map(|i| format!("callbacks.C{i}.on_batch_end"))
        .collect();
    let rows: Vec<_> = names.iter().map(|n| (0, n.as_str(), 10, 20, -1)).collect();
    host.now = ms(100);
    p.on_events(&mut host, timings(solo(), &rows));
    // A known name is still accepted after the cap.
    p.on_events(&mut host, timings(solo(), &[(0, names[0].as_str(), 30, 40, -1)]));
    assert_eq!(p.counters().dropped_too_many_names, 3);
    assert_eq!(host.points_of("sonde.timing.duration", &[]).len(), MAX_TIMING_NAMES + 1);
    assert_eq!(
        host.logs
            .iter()
            .filter(|(_, m)| m.contains("distinct timing names"))
            .count(),
        1
    );
}

#[test]
fn at_shutdown_flush_resolves_everything_pending() {
    let mut host = FakeHost::at(ms(0));
    let mut p = start(&mut host, r#"{"lag_ms":5000}"#);
    p.on_events(&mut host, progress(solo(), &[(0, 0, 3)]));
    host.now = ms(500);
    p.on_samples(&mut host, cpu_samples(&[100, 200, 300], &[0.1, 0.2, 0.3]))
        .unwrap();
    assert!(host.records.is_empty() && host.points_of("sonde.cpu.busy", &[]).is_empty());
    p.stop(&mut host);
    let bodies = batches(&host);
    assert_eq!(
        batch_of(&bodies, "cpu_util_simple")[0]["batch_indices"],
        serde_json::json!([3, 3, 3])
    );
    assert_eq!(host.points_of("sonde.cpu.busy", &[]).len(), 3);
    assert_eq!(p.counters().flushed, 3);
}

#[test]
fn at_shutdown_drop_discards_the_partial_batch() {
    let mut host = FakeHost::at(ms(0));
    let mut p = start(&mut host, r#"{"lag_ms":200,"at_shutdown":"drop"}"#);
    p.on_events(&mut host, progress(solo(), &[(0, 0, 3)]));
    host.now = ms(500);
    // 100 and 200 resolve (points emitted); 400 is still pending.
    p.on_samples(&mut host, cpu_samples(&[100, 200, 400], &[0.1, 0.2, 0.4]))
        .unwrap();
    assert_eq!(host.points_of("sonde.cpu.busy", &[]).len(), 2);
    p.stop(&mut host);
    assert!(batches(&host).is_empty(), "no partial batch is written");
    assert_eq!(p.counters().discarded_at_shutdown, 3);
    assert!(host.logged("discarded 3 measurements"));
}

#[test]
fn queue_bound_drops_the_oldest_and_counts() {
    let mut host = FakeHost::at(ms(0));
    let mut p = start(&mut host, r#"{"lag_ms":10000,"max_pending":5}"#);
    p.on_events(&mut host, progress(solo(), &[(0, 0, 0)]));
    host.now = ms(1000);
    let ticks: Vec<u64> = (1..=8).map(|i| i * 100).collect();
    p.on_samples(&mut host, cpu_samples(&ticks, &[0.5; 8])).unwrap();
    assert_eq!(p.pending(), 5);
    assert_eq!(p.counters().dropped_queue_full, 3);
    p.stop(&mut host);
    let bodies = batches(&host);
    let kept: Vec<u64> = bodies[0]["timestamps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect();
    assert_eq!(
        kept,
        (4..=8).map(|i| ms(i * 100)).collect::<Vec<_>>(),
        "the newest are kept"
    );
    assert_eq!(
        host.series("sonde.profiler.dropped", &[("reason", "queue_full")]),
        [(ms(1000), 3.0)]
    );
    assert!(host.logged("3 measurements dropped"));
    // Unflushed rows count too, and go first.
    let mut host = FakeHost::at(ms(0));
    let mut p = start(&mut host, r#"{"lag_ms":0,"max_pending":2}"#);
    p.on_events(&mut host, progress(solo(), &[(0, 0, 0)]));
    host.now = ms(1000);
    p.on_samples(&mut host, cpu_samples(&[100, 200, 300], &[0.5; 3]))
        .unwrap();
    assert_eq!((p.unflushed(), p.counters().dropped_queue_full), (2, 1));
}

#[test]
fn restart_resumes_with_the_remaining_cap_or_stays_off() {
    // Before the restart: active from 0, 40 s used by the last flush.
    let mut host = FakeHost::at(ms(0));
    let mut p = start(&mut host, r#"{"max_active_s":100,"lag_ms":0}"#);
    p.on_events(&mut host, progress(solo(), &[(0, 0, 0)]));
    host.now = ms(40_000);
    p.on_events(&mut host, progress(solo(), &[(0, 40_000, 400)]));
    p.flush(&mut host);
    drop(p); // the instance traps
    let stored = host.store.kv.clone();

    // resume_after_restart (default): resumes at the next report, 60 s left.
    let mut host = FakeHost::at(ms(50_000));
    host.store.kv = stored.clone();
    let mut p = Profiler::start(
        &mut host,
        Settings::parse(r#"{"max_active_s":100,"lag_ms":0}"#).unwrap(),
        1,
    );
    assert_eq!(job_state(&mut p, &mut host, "t1")["phase"], "resuming");
    assert!(host.logged("profiling resumes at its next batch report"));
    p.on_samples(&mut host, cpu_samples(&[49_000], &[0.5])).unwrap();
    assert!(
        host.points_of("sonde.cpu.busy", &[]).is_empty(),
        "nothing counts before it resumes"
    );
    p.on_events(&mut host, progress(solo(), &[(0, 50_000, 500)]));
    assert_eq!(decision_reasons(&host), ["enabled", "resumed_after_restart"]);
    let j = job_state(&mut p, &mut host, "t1");
    assert_eq!(
        (j["active"].as_bool(), j["activated_at_ns"].as_u64()),
        (Some(true), Some(ms(0)))
    );
    let cap: Vec<_> = host.timers.values().filter(|t| !t.repeat).collect();
    assert_eq!(
        cap,
        [&Timer {
            after_ms: 60_000,
            repeat: false
        }]
    );
    host.now = ms(50_200);
    p.on_samples(&mut host, cpu_samples(&[50_100], &[0.5])).unwrap();
    assert_eq!(host.series("sonde.cpu.busy", &[]), [(ms(50_100), 0.5)]);

    // resume_after_restart = false: stays off, explicitly.
    let mut host = FakeHost::at(ms(50_000));
    host.store.kv = stored.clone();
    let mut p = Profiler::start(
        &mut host,
        Settings::parse(r#"{"max_active_s":100,"lag_ms":0,"resume_after_restart":false}"#).unwrap(),
        1,
    );
    assert_eq!(decision_reasons(&host), ["not_resumed_after_restart"]);
    assert!(
        host.logs
            .iter()
            .any(|(l, m)| *l == Severity::Warn && m.contains("resume_after_restart is false"))
    );
    p.on_events(&mut host, progress(solo(), &[(0, 50_000, 500)]));
    host.now = ms(51_000);
    p.on_samples(&mut host, cpu_samples(&[50_500], &[0.5])).unwrap();
    assert!(host.points_of("sonde.cpu.busy", &[]).is_empty());
    assert_eq!(
        job_state(&mut p, &mut host, "t1")["end_reason"],
        "not_resumed_after_restart"
    );

    // Ended before the restart: stays ended, with its reason.
    let mut host = FakeHost::at(ms(0));
    let mut p = start(&mut host, r#"{"end_after_batch":1,"lag_ms":0}"#);
    p.on_events(&mut host, progress(solo(), &[(0, 0, 0), (0, 10, 2)]));
    drop(p);
    let mut p = Profiler::start(&mut host, Settings::parse(r#"{"lag_ms":0}"#).unwrap(), 1);
    p.on_events(&mut host, progress(solo(), &[(0, 20, 0)]));
    let j = job_state(&mut p, &mut host, "t1");
    assert_eq!(
        (j["ended"].as_bool(), j["end_reason"].as_str()),
        (Some(true), Some("end_after_batch"))
    );

    // POST /reset forgets it: the next report starts a new collection.
    let (status, body) = get(&mut p, &mut host, "POST", "/reset", "job=t1");
    assert_eq!((status, body["existed"].as_bool()), (200, Some(true)));
    assert!(!host.store.kv.contains_key("job/t1"));
    assert_eq!(decision_reasons(&host).last().unwrap(), "reset");
    p.on_events(&mut host, progress(solo(), &[(0, 30, 0)]));
    assert_eq!(job_state(&mut p, &mut host, "t1")["phase"], "active");
}

#[test]
fn counters_survive_a_restart() {
    let mut host = FakeHost::at(ms(0));
    let mut p = start(&mut host, r#"{"lag_ms":0,"timing_ranks":"rank0"}"#);
    p.on_events(&mut host, progress(vec![origin("t1", "n1", 1, 1)], &[(0, 0, 0)]));
    p.flush(&mut host);
    let p = Profiler::start(&mut host, Settings::default(), 1);
    assert_eq!(p.counters().ignored_ineligible_rank, 1);
}

#[test]
fn timings_of_a_job_without_batch_reports_create_no_job() {
    let mut host = FakeHost::at(ms(0));
    let mut p = start(&mut host, r#"{"lag_ms":0}"#);
    p.on_events(
        &mut host,
        timings(vec![origin("web", "n1", -1, -1)], &[(0, "GET /", 0, 10, -1)]),
    );
    assert!(p.jobs.is_empty() && host.decisions.is_empty());
    assert_eq!(p.counters().ignored_unknown_job, 1);
    // In one batch, the batch index report comes first and makes the timing count.
    let mut b = timings(solo(), &[(0, "train_batch", 10, 20, -1)]);
    b.names.push("batch_idx".into());
    b.progress = Some(ProgressColumns {
        origin: vec![0],
        name: vec![1],
        time: vec![ms(5)],
        value: vec![0],
    });
    host.now = ms(100);
    p.on_events(&mut host, b);
    assert_eq!(host.series("sonde.timing.duration", &[]), [(ms(10), 0.01)]);
}

#[test]
fn job_filter_keeps_other_jobs_out() {
    let mut host = FakeHost::at(ms(0));
    let mut p = start(&mut host, r#"{"job":"t2","lag_ms":0}"#);
    let origins = vec![origin("t1", "n1", 0, 0), origin("t2", "n1", 0, 0)];
    p.on_events(&mut host, progress(origins, &[(0, 0, 0), (1, 0, 0)]));
    let s = state(&mut p, &mut host);
    assert_eq!(s["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(s["jobs"][0]["job"], "t2");
    assert_eq!(s["counters"]["ignored_other_job"], 1);
    // After a change of the filter, the old job gets no more samples.
    p.configure(&mut host, Settings::parse(r#"{"job":"t3","lag_ms":0}"#).unwrap());
    host.now = ms(1000);
    p.on_samples(&mut host, cpu_samples(&[500], &[0.5])).unwrap();
    assert!(host.points_of("sonde.cpu.busy", &[]).is_empty());
}

#[test]
fn the_resolve_timer_runs_only_while_a_job_has_not_ended() {
    let mut host = FakeHost::at(ms(0));
    let mut p = start(&mut host, r#"{"begin_on_batch":1,"end_after_batch":2,"lag_ms":200}"#);
    // The resolve timer repeats every lag / 2 (the flush timer every 10 s).
    let resolving = |host: &FakeHost| host.timers.values().any(|t| t.repeat && t.after_ms == 100);
    // Idle: no resolve timer; samples are still asked for (a job's first
    // report may come up to the lag late and claim them), every 10 s.
    let every = |r: &Option<SampleRequest>| r.as_ref().map(|r| r.deliver_every_ms);
    assert!(!resolving(&host), "{:?}", host.timers);
    assert_eq!(every(&p.samples_wanted()), Some(10_000));
    assert!(host.sample_requests.is_empty(), "the manifest asked for them");
    host.now = ms(50);
    p.on_samples(&mut host, cpu_samples(&[50], &[0.5])).unwrap();
    assert!(!resolving(&host), "a sample alone sets no timer");
    // A job's first report, made before that sample and arriving after it.
    p.on_events(&mut host, progress(solo(), &[(0, 0, 0), (0, 40, 1)]));
    assert!(resolving(&host), "{:?}", host.timers);
    // ... and the samples every second again (the host keeps those gathered).
    assert_eq!(host.sample_requests.iter().map(every).collect::<Vec<_>>(), [Some(1000)]);
    tick(&mut p, &mut host, 300);
    assert!(
        !host.points_of("sonde.cpu.busy", &[]).is_empty(),
        "the earlier sample was tied to the job"
    );
    // The job ends at batch 3: the resolve timer goes.
    p.on_events(&mut host, progress(solo(), &[(0, 100, 2), (0, 200, 3)]));
    assert!(!resolving(&host), "{:?}", host.timers);
    assert_eq!(every(host.sample_requests.last().unwrap()), Some(10_000));
}

#[test]
fn configure_applies_live() {
    let mut host = FakeHost::at(ms(0));
    let mut p = start(&mut host, r#"{"lag_ms":0}"#);
    p.on_events(&mut host, progress(solo(), &[(0, 0, 0)]));
    let timers = host.timers.len();
    host.sample_requests.clear(); // the job's, for deliveries every second
    // Same sampling: no new request; new period: re-requested.
    p.configure(
        &mut host,
        Settings::parse(r#"{"lag_ms":0,"end_after_batch":100}"#).unwrap(),
    );
    assert!(host.sample_requests.is_empty());
    p.configure(
        &mut host,
        Settings::parse(r#"{"lag_ms":0,"sample_period_ms":50}"#).unwrap(),
    );
    assert_eq!(host.sample_requests.len(), 1);
    assert_eq!(host.sample_requests[0].as_ref().unwrap().period_ms, 50);
    // A new flush period re-arms the flush timer.
    p.configure(
        &mut host,
        Settings::parse(r#"{"lag_ms":0,"sample_period_ms":50,"flush_every_s":2}"#).unwrap(),
    );
    assert!(host.timers.values().any(|t| (t.after_ms, t.repeat) == (2000, true)));
    assert_eq!(host.timers.len(), timers);
    // A cap that has already passed ends the active job now.
    host.now = ms(5000);
    p.configure(&mut host, Settings::parse(r#"{"max_active_s":2}"#).unwrap());
    assert_eq!(decision_reasons(&host).last().unwrap(), "max_active_s");
}

#[test]
fn routes_answer_json() {
    let mut host = FakeHost::at(ms(0));
    let mut p = start(&mut host, "{}");
    p.on_events(&mut host, progress(solo(), &[(0, 0, 5)]));
    let (status, s) = get(&mut p, &mut host, "GET", "/state", "");
    assert_eq!(status, 200);
    assert_eq!(s["settings"]["lag_ms"], 500);
    let job = &s["jobs"][0];
    for key in [
        "job",
        "phase",
        "enabled",
        "sysmetrics_enabled",
        "timings_enabled",
        "active",
        "ended",
        "end_reason",
        "activated_at_ns",
        "ended_at_ns",
        "active_used_s",
        "batch_idx",
        "agent",
    ] {
        assert!(job.get(key).is_some(), "{key}");
    }
    for key in [
        "resolved",
        "flushed",
        "dropped_queue_full",
        "ignored_inactive",
        "ignored_ineligible_rank",
        "dropped_too_many_names",
    ] {
        assert!(s["counters"][key].is_u64(), "{key}");
    }
    assert_eq!(get(&mut p, &mut host, "GET", "/nope", "").0, 404);
    assert_eq!(get(&mut p, &mut host, "POST", "/state", "").0, 405);
    assert_eq!(get(&mut p, &mut host, "GET", "/timings", "limit=x").0, 400);
    assert_eq!(get(&mut p, &mut host, "POST", "/reset", "").0, 400);
    let (status, body) = get(&mut p, &mut host, "POST", "/reset", "job=unknown");
    assert_eq!((status, body["existed"].as_bool()), (200, Some(false)));
}
