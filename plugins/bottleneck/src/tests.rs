//! The plugin through its hooks with a fake host: events and samples in,
//! rows, decisions, metrics and routes out.

use sonde_plugin_sdk::column;
use sonde_plugin_sdk::types::{
    Attribute, ColumnDefault, ColumnType, EventBatch, HttpRequest, Origin, PointColumns, SampleBatch, SeriesInfo,
    SeriesKind, TableDecl, TimingColumns, Value,
};

use crate::plugin::{Bottleneck, VERDICT_METRIC};
use crate::routes;
use crate::settings::Settings;
use sonde_plugin_sdk::testing::FakeHost;

const MS: u64 = 1_000_000;
/// Tests start at 1 000 s after the epoch.
const T0: u64 = 1_000_000 * MS;

fn origin(job: &str, rank: i32) -> Origin {
    Origin {
        job: job.into(),
        node: "n1".into(),
        role: "worker".into(),
        index: -1,
        rank,
        local_rank: rank,
        attributes: vec![],
    }
}

fn empty(origins: Vec<Origin>, names: &[&str]) -> EventBatch {
    EventBatch {
        origins,
        names: names.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// 100 ms steps of two ranks from `first` to `last`; rank 1's dataloader takes
/// 60 ms of them on batches in `slow`, 8 ms otherwise. With their CPU time.
fn steps(first: u64, last: u64, slow: std::ops::Range<u64>) -> EventBatch {
    let mut b = empty(
        vec![origin("job", 0), origin("job", 1)],
        &["train_batch", "dataloader_next", "forward"],
    );
    let mut t = TimingColumns::default();
    let mut p = PointColumns::default();
    b.point_series = vec![SeriesInfo {
        id: 0,
        metric: "process.cpu.time".into(),
        unit: "s".into(),
        kind: SeriesKind::Counter,
        attributes: vec![Attribute::new("cpu.mode", "user")],
    }];
    for rank in 0..2u32 {
        for batch in first..=last {
            let start = T0 + batch * 100 * MS;
            let load = if rank == 1 && slow.contains(&batch) { 60 } else { 8 };
            for (name, a, z) in [(0, 0, 100), (1, 0, load), (2, load, 100)] {
                t.origin.push(rank);
                t.name.push(name);
                t.start.push(start + a * MS);
                t.end.push(start + z * MS);
                t.step.push(batch as i64);
            }
            // One core busy while computing, idle while loading.
            p.origin.push(rank);
            p.series.push(0);
            p.time.push(start);
            p.value.push(batch as f64 * 0.1);
        }
        p.origin.push(rank);
        p.series.push(0);
        p.time.push(T0 + (last + 1) * 100 * MS);
        p.value.push((last + 1) as f64 * 0.1);
    }
    b.timings = Some(t);
    b.points = Some(p);
    b
}

/// The node's CPU busy at `cpu` every 100 ms over `[from, to)` seconds from
/// T0: the all-CPU idle share, as the host samples it, is 1 − `cpu`.
fn samples(from_ms: u64, to_ms: u64, cpu: f64, first: bool) -> SampleBatch {
    let ticks: Vec<u64> = (from_ms / 100..to_ms / 100).map(|k| T0 + k * 100 * MS).collect();
    SampleBatch {
        new_series: if first {
            vec![SeriesInfo {
                id: 1,
                metric: "system.cpu.utilization".into(),
                unit: "1".into(),
                kind: SeriesKind::Gauge,
                attributes: vec![Attribute::new("cpu.mode", "idle")],
            }]
        } else {
            vec![]
        },
        series: vec![1],
        values: vec![1.0 - cpu; ticks.len()],
        timestamps: ticks,
    }
}

fn get(p: &Bottleneck, path: &str, query: &str) -> (u16, serde_json::Value) {
    let r = routes::handle(
        p,
        &HttpRequest {
            method: "GET".into(),
            path: path.into(),
            query: query.into(),
            headers: vec![],
            body: vec![],
        },
    );
    (r.status, serde_json::from_slice(&r.body).unwrap_or_default())
}

#[test]
fn steps_are_judged_after_the_lag_with_rows_decisions_and_shares() {
    let mut host = FakeHost {
        now: T0,
        ..FakeHost::default()
    };
    let mut p = Bottleneck::start(&mut host, Settings::default());
    p.on_samples(&mut host, samples(0, 4000, 0.6, true)).unwrap();
    assert!(host.timers.is_empty(), "no job yet, no emit timer");
    p.on_events(&mut host, &steps(0, 39, 20..40));
    assert_eq!(host.timers.len(), 1, "the first job starts the emit timer");
    assert!(p.jobs["job"].rows.is_empty(), "nothing is judged before the lag");
    host.now = T0 + 8000 * MS;
    p.on_samples(&mut host, samples(4000, 8000, 0.6, false)).unwrap();
    let job = &p.jobs["job"];
    assert_eq!(job.rows.len(), 80);
    let verdict = |rank: i32, batch: i64| {
        let r = job.rows.iter().find(|r| r.rank == rank && r.batch == batch).unwrap();
        r.verdict.name()
    };
    assert_eq!(verdict(0, 25), "compute-bound");
    assert_eq!(verdict(1, 5), "compute-bound");
    assert_eq!(verdict(1, 25), "input-bound");
    // Rank 1's change of dominant verdict is a decision with its range and the one before.
    let reasons: Vec<&str> = host.decisions.iter().map(|d| d.reason.as_str()).collect();
    assert!(
        reasons.iter().any(|r| r.starts_with("steps 20–")
            && r.contains("on rank 1 are input-bound: the dataloader takes 60 % of the step")
            && r.contains("before: steps 0–19 compute-bound")),
        "{reasons:?}"
    );
    // Shares per verdict, once per emission, declared per job and verdict.
    let timer = *host.timers.keys().next().expect("the emit timer");
    p.on_timer(&mut host, timer);
    let share = |v: &str| {
        host.points
            .iter()
            .find(|pt| pt.metric == VERDICT_METRIC && pt.attrs.iter().any(|(k, x)| k == "bottleneck.verdict" && x == v))
            .map(|pt| pt.value)
    };
    assert_eq!(share("input-bound"), Some(20.0 / 80.0));
    assert_eq!(share("compute-bound"), Some(60.0 / 80.0));
    assert_eq!(share("idle"), Some(0.0));

    let (code, body) = get(&p, "/jobs/job", "limit=10&rank=1");
    assert_eq!(code, 200);
    assert_eq!(body["rows"].as_array().unwrap().len(), 10);
    assert_eq!(body["rows"][0]["batch"], 30);
    assert_eq!(body["steps"]["input-bound"], 20);
    assert_eq!(body["rank_details"][1]["dominant"]["verdict"], "input-bound");
    assert_eq!(get(&p, "/jobs/nope", "").0, 404);
    assert_eq!(get(&p, "/jobs/job", "limit=x").0, 400);
    assert_eq!(get(&p, "/jobs", "").1["jobs"][0]["job"], "job");

    // The dashboard's view: the strip of every judged step, its colours counted.
    let (code, panel) = get(&p, "/panel", "job=job");
    assert_eq!(code, 200);
    let strip = &panel["items"][1];
    assert_eq!(strip["kind"], "strip");
    assert_eq!(strip["rows"], serde_json::json!(["rank 0", "rank 1"]));
    assert_eq!(strip["cells"].as_array().unwrap().len(), 80);
    let input = strip["categories"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c[0] == "input-bound")
        .unwrap();
    assert_eq!(input[2], 20);
    assert_eq!(get(&p, "/panel", "job=nope").0, 404, "no view of a job it never judged");
    assert_eq!(get(&p, "/panel", "").1["items"][0]["items"][0]["href"], "#/jobs/job");
}

#[test]
fn samples_come_every_10_s_before_the_first_job_and_its_steps_wait_for_them() {
    let every = |r: &Option<sonde_plugin_sdk::types::SampleRequest>| r.as_ref().map(|r| r.deliver_every_ms);
    let start = || {
        let mut host = FakeHost {
            now: T0,
            ..FakeHost::default()
        };
        let p = Bottleneck::start(&mut host, Settings::default());
        (host, p)
    };
    let (mut host, mut p) = start();
    assert_eq!(every(&crate::manifest(!p.jobs.is_empty()).samples), Some(10_000));
    // At 8 s the first job reports steps that ended by 4 s: past the lag
    // (3 s), while the node's samples of that time are still with the host.
    host.now = T0 + 8000 * MS;
    p.on_events(&mut host, &steps(0, 39, 20..40));
    assert_eq!(host.sample_requests.iter().map(every).collect::<Vec<_>>(), [Some(1000)]);
    assert!(p.jobs["job"].rows.is_empty(), "judging waits for the gathered samples");
    // They come at the next whole second, and every step is judged against them.
    host.now = T0 + 9000 * MS;
    p.on_samples(&mut host, samples(0, 9000, 0.6, true)).unwrap();
    let rows = &p.jobs["job"].rows;
    assert_eq!(rows.len(), 80);
    let verdict = |rank: i32, batch: i64| {
        rows.iter()
            .find(|r| r.rank == rank && r.batch == batch)
            .unwrap()
            .verdict
            .name()
    };
    assert_eq!((verdict(0, 25), verdict(1, 25)), ("compute-bound", "input-bound"));

    // A host that samples nothing holds judging up for 2 s only.
    let (mut host, mut p) = start();
    host.now = T0 + 8000 * MS;
    p.on_events(&mut host, &steps(0, 39, 20..40));
    let timer = *host.timers.keys().next().expect("the emit timer");
    host.now = T0 + 9900 * MS;
    p.on_timer(&mut host, timer);
    assert!(p.jobs["job"].rows.is_empty());
    host.now = T0 + 10_000 * MS;
    p.on_timer(&mut host, timer);
    assert_eq!(p.jobs["job"].rows.len(), 80);
}

#[test]
fn an_mpi_job_without_steps_is_judged_per_window_and_the_slow_rank_named() {
    let mut host = FakeHost {
        now: T0,
        ..FakeHost::default()
    };
    let mut p = Bottleneck::start(&mut host, Settings::default());
    // 4 ranks flushing every 500 ms for 30 s: rank r computes (r+1)/4 of the
    // time and stalls the rest, as tests/mpi/imbalance.c does.
    let mut b = empty((0..4).map(|r| origin("mpi", r)).collect(), &["MPI_Barrier", "main+0x1"]);
    // The columns bottleneck reads, by name (the mpi plugin declares more).
    let decl = TableDecl::new(
        "mpi_samples",
        "",
        vec![
            column("thread", ColumnType::U32, ColumnDefault::Zero),
            column("time_ns", ColumnType::Timestamp, ColumnDefault::Required),
            column("state", ColumnType::U8, ColumnDefault::Required),
            column("count", ColumnType::U32, ColumnDefault::Required),
            column("period_ns", ColumnType::U64, ColumnDefault::Required),
        ],
    );
    for k in 1..=60u64 {
        for r in 0..4u32 {
            let compute = 125 * (r + 1);
            for (state, count) in [(0u8, compute), (2u8, 500 - compute)] {
                if count == 0 {
                    continue;
                }
                let time = (T0 + k * 500 * MS) as i64;
                b.push_row(
                    &decl,
                    r,
                    &[
                        ("time_ns", Value::Int(time)),
                        ("state", Value::Int(state.into())),
                        ("count", Value::Int(count.into())),
                        ("period_ns", Value::Int(MS as i64)),
                    ],
                )
                .unwrap();
            }
        }
    }
    host.now = T0 + 40_000 * MS;
    p.on_events(&mut host, &b);
    // Judging waits for the node's first delivery after the first job, at
    // most 2 s (none comes here).
    assert!(p.jobs["mpi"].rows.is_empty());
    host.now += 2000 * MS;
    let timer = *host.timers.keys().next().expect("the emit timer");
    p.on_timer(&mut host, timer);
    let job = &p.jobs["mpi"];
    let of = |rank: i32| job.rows.iter().filter(move |r| r.rank == rank);
    assert!(of(3).count() >= 25, "{}", of(3).count());
    assert!(of(3).all(|r| r.verdict.name() != "communication-bound" && r.unit == "window"));
    assert!(of(0).all(|r| r.verdict.name() == "communication-bound"));
    let s = job.persistent.as_ref().expect("a persistent straggler");
    assert_eq!((s.rank, s.batches, s.of), (3, 20, 20));
    // 100 % of its time outside MPI against rank 2's 75 %: 250 ms of each second.
    assert!((s.late_by_s - 0.25).abs() < 1e-6, "{s:?}");
    assert!(host.decisions.iter().any(|d| {
        d.kind == "straggler"
            && d.reason
                .starts_with("rank 3 (node n1) holds the job back: last to finish in 20 of the last 20")
    }));
}

/// The loop of the Python client's `StepClock` (and Determined's): each
/// `dataloader_next` is reported beside `train_batch`, from the last step's
/// end to this step's begin, with the same batch index. 150 ms of waiting
/// for data against 80 ms of training is input-bound, as the same loop with
/// the dataloader nested in the step would be.
#[test]
fn a_dataloader_beside_the_step_is_input_bound() {
    let shapes = [("sibling", false), ("nested", true)];
    for (shape, nested) in shapes {
        let mut host = FakeHost {
            now: T0,
            ..FakeHost::default()
        };
        let mut p = Bottleneck::start(&mut host, Settings::default());
        p.on_samples(&mut host, samples(0, 8000, 0.5, true)).unwrap();
        let mut b = empty(vec![origin("loop", 0)], &["train_batch", "dataloader_next"]);
        let mut t = TimingColumns::default();
        for batch in 0..30u64 {
            let begin = T0 + batch * 230 * MS;
            let (step_start, load) = if nested {
                (begin, (begin, begin + 150 * MS))
            } else {
                (begin + 150 * MS, (begin, begin + 150 * MS))
            };
            for (name, a, z) in [(1, load.0, load.1), (0, step_start, begin + 230 * MS)] {
                t.origin.push(0);
                t.name.push(name);
                t.start.push(a);
                t.end.push(z);
                t.step.push(batch as i64);
            }
        }
        b.timings = Some(t);
        p.on_events(&mut host, &b);
        host.now = T0 + 12_000 * MS;
        p.on_samples(&mut host, samples(8000, 12_000, 0.5, false)).unwrap();
        let rows = &p.jobs["loop"].rows;
        assert_eq!(rows.len(), 30, "{shape}");
        let input = rows.iter().filter(|r| r.verdict.name() == "input-bound").count();
        assert_eq!(
            input,
            30,
            "{shape}: {:?}",
            rows.iter().map(|r| &r.reason).collect::<Vec<_>>()
        );
        let first = &rows[0];
        assert_eq!(
            (first.start_ns, first.end_ns),
            (T0, T0 + 230 * MS),
            "{shape}: the whole iteration"
        );
    }
}

/// On a cluster master: the master's own machine idles, while the node the
/// rank runs on is busy, as its agent's forwarded samples say. The rank is
/// judged against its own node.
#[test]
fn on_a_master_a_rank_is_judged_by_its_own_nodes_samples() {
    let mut host = FakeHost {
        now: T0,
        ..FakeHost::default()
    };
    let mut p = Bottleneck::start(&mut host, Settings::default());
    // The master itself: 5 % busy.
    p.on_samples(&mut host, samples(0, 8000, 0.05, true)).unwrap();
    // node-b's agent: 60 % busy, every 100 ms, as points of its own telemetry.
    let agent = Origin {
        job: String::new(),
        node: "node-b".into(),
        index: -1,
        rank: -1,
        local_rank: -1,
        ..Default::default()
    };
    let mut rank0 = origin("train", 0);
    rank0.node = "node-b".into();
    let mut b = empty(vec![agent, rank0], &["train_batch"]);
    b.point_series = vec![SeriesInfo {
        id: 0,
        metric: "system.cpu.utilization".into(),
        unit: "1".into(),
        kind: SeriesKind::Gauge,
        attributes: vec![
            Attribute::new("cpu.mode", "idle"),
            Attribute::new("host.name", "node-b"),
        ],
    }];
    let mut pts = PointColumns::default();
    for k in 0..80u64 {
        pts.origin.push(0);
        pts.series.push(0);
        pts.time.push(T0 + k * 100 * MS);
        pts.value.push(0.4);
    }
    b.points = Some(pts);
    let mut t = TimingColumns::default();
    for batch in 0..20u64 {
        t.origin.push(1);
        t.name.push(0);
        t.start.push(T0 + batch * 200 * MS);
        t.end.push(T0 + batch * 200 * MS + 190 * MS);
        t.step.push(batch as i64);
    }
    b.timings = Some(t);
    p.on_events(&mut host, &b);
    host.now = T0 + 12_000 * MS;
    p.on_samples(&mut host, samples(8000, 12_000, 0.05, false)).unwrap();
    let rows = &p.jobs["train"].rows;
    assert_eq!(rows.len(), 20);
    for r in rows {
        assert_eq!(r.verdict.name(), "compute-bound", "{}", r.reason);
        assert!(r.reason.contains("node CPU at 60 %"), "{}", r.reason);
    }
}

#[test]
fn a_restart_keeps_the_judged_rows_verdicts_and_panel() {
    let settings = Settings {
        max_rows_per_job: 50,
        ..Settings::default()
    };
    let mut host = FakeHost {
        now: T0,
        ..FakeHost::default()
    };
    let mut p = Bottleneck::start(&mut host, settings.clone());
    p.on_samples(&mut host, samples(0, 4000, 0.6, true)).unwrap();
    p.on_events(&mut host, &steps(0, 39, 20..40));
    host.now = T0 + 8000 * MS;
    p.on_samples(&mut host, samples(4000, 8000, 0.6, false)).unwrap();
    let timer = *host.timers.keys().next().expect("the emit timer");
    p.on_timer(&mut host, timer);
    let before = get(&p, "/jobs/job", "limit=100").1;
    assert_eq!(before["rows"].as_array().unwrap().len(), 50, "the newest 50 of 80 rows");

    // Saved by the timer (its first save is due at once): a kill -9 keeps it.
    let mut killed = host.restarted(T0 + 9000 * MS);
    let q = Bottleneck::start(&mut killed, settings.clone());
    assert!(
        get(&q, "/jobs/job", "limit=100").1 == before,
        "the job's rows and verdicts after a kill"
    );
    assert!(
        get(&q, "/panel", "job=job").1 == get(&p, "/panel", "job=job").1,
        "its panel after a kill"
    );

    // More steps: saved only when the stop comes (the timer saves at most every 2 s).
    p.on_events(&mut host, &steps(40, 59, 40..60));
    host.now = T0 + 9500 * MS;
    p.on_samples(&mut host, samples(8000, 9500, 0.6, false)).unwrap();
    p.on_timer(&mut host, timer);
    let after = get(&p, "/jobs/job", "limit=100").1;
    assert_eq!(after["rows"][49]["batch"], 59);
    let unsaved = get(
        &Bottleneck::start(&mut host.restarted(host.now), settings.clone()),
        "/jobs/job",
        "limit=100",
    )
    .1;
    assert!(unsaved == before, "a kill now loses what came after the last save");
    p.save(&mut host, true);
    let mut again = host.restarted(T0 + 15000 * MS);
    let r = Bottleneck::start(&mut again, settings);
    assert!(
        get(&r, "/jobs/job", "limit=100").1 == after,
        "the job's rows and verdicts after a stop"
    );
    // The stream keeps no more chunks than the newest 50 rows need.
    let kept: usize = r.chunks["job"].iter().map(|c| c.1).sum();
    assert!((50..=50 + 40).contains(&kept), "{kept}");
}

#[test]
fn a_what_if_analysis_past_its_budget_goes_on_in_later_calls() {
    let mut host = FakeHost {
        now: T0,
        ..FakeHost::default()
    };
    let mut p = Bottleneck::start(&mut host, Settings::default());
    // No time for analyses: each call does one piece of one, then leaves.
    p.replay_budget_ns = 0;
    // 4 data-parallel ranks, 4 steps a second apart: forward, backward, then
    // the all-reduce, which ends 5 ms after the last rank arrives. Rank 2's
    // compute takes three times as long.
    let mut b = empty((0..4).map(|r| origin("dp", r)).collect(), &[]);
    let decl = crate::ops::ops_table();
    for step in 0..4u64 {
        let start = T0 + step * 1000 * MS;
        let f = |r: u32| if r == 2 { 60 * MS } else { 20 * MS };
        let arrive = |r: u32| start + 3 * f(r);
        let end = (0..4).map(arrive).max().unwrap() + 5 * MS;
        for r in 0..4u32 {
            let ops = [
                ("forward", start, start + f(r)),
                ("backward", start + f(r), arrive(r)),
                ("dp_collective", arrive(r), end),
            ];
            for (kind, a, z) in ops {
                let row = [
                    ("step", Value::Int(step as i64)),
                    ("dp", Value::Int(r.into())),
                    ("kind", Value::Str(kind.into())),
                    ("start_ns", Value::Int(a as i64)),
                    ("end_ns", Value::Int(z as i64)),
                ];
                b.push_row(&decl, r, &row).unwrap();
            }
        }
    }
    host.now = T0 + 8000 * MS;
    p.on_events(&mut host, &b);
    let emit = *host.timers.keys().next().expect("the emit timer");
    p.on_timer(&mut host, emit);
    let whatif = |host: &FakeHost| host.decisions.iter().any(|d| d.kind == "what-if");
    let mut calls = 1;
    while !whatif(&host) {
        assert!(calls < 1000, "the analysis never ended");
        let next = host.last_timer;
        assert!(!host.timers[&next].repeat, "a one-shot timer goes on with it");
        p.on_timer(&mut host, next);
        calls += 1;
    }
    // Placing, one piece of building and one of ordering per step, the
    // replays' setup, then a replay per candidate and subset.
    assert!(calls > 10, "{calls} calls");
    let d = host.decisions.iter().find(|d| d.kind == "what-if").unwrap();
    assert!(d.reason.contains("fixing rank 2"), "{}", d.reason);
}
