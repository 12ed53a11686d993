//! The whole plugin against the fake host: collection from samples and
//! events, persistence across restarts, plans on the loop, sharding over the
//! routes, failures and stragglers.

use serde_json::{Value, json};
use sonde_plugin_sdk::types::{
    Attribute, EventBatch, HeartbeatColumns, HttpRequest, NodeEvent, Origin, PointColumns, ProgressColumns,
    SampleBatch, SeriesInfo, SeriesKind, TimingColumns, Value as V,
};

use crate::master::Master;
use crate::model::NS;
use crate::routes;
use crate::settings::Settings;
use sonde_plugin_sdk::testing::FakeHost;

const T0: u64 = 1_700_000_000 * NS;

fn settings(json: &str) -> Settings {
    Settings::parse(json).unwrap()
}

fn origin(node: &str, role: &str, index: i32) -> Origin {
    Origin {
        job: "train".into(),
        node: node.into(),
        role: role.into(),
        index,
        rank: -1,
        local_rank: -1,
        attributes: vec![],
    }
}

fn empty_batch(origins: Vec<Origin>) -> EventBatch {
    EventBatch {
        origins,
        ..Default::default()
    }
}

fn heartbeats(nodes: &[&str], time: u64) -> EventBatch {
    let mut b = empty_batch(
        nodes
            .iter()
            .enumerate()
            .map(|(i, n)| origin(n, "worker", i as i32))
            .collect(),
    );
    b.heartbeats = Some(HeartbeatColumns {
        origin: (0..nodes.len() as u32).collect(),
        time: vec![time; nodes.len()],
    });
    b
}

fn steps(node: &str, rows: &[(u64, u64)]) -> EventBatch {
    let mut b = empty_batch(vec![origin(node, "worker", 0)]);
    b.names = vec!["global_step".into()];
    b.progress = Some(ProgressColumns {
        origin: vec![0; rows.len()],
        name: vec![0; rows.len()],
        time: rows.iter().map(|r| r.1).collect(),
        value: rows.iter().map(|r| r.0).collect(),
    });
    b
}

fn node_event(node: &str, role: &str, kind: &str, code: Option<i32>, attrs: &[(&str, V)]) -> EventBatch {
    let mut b = empty_batch(vec![origin(node, role, 0)]);
    b.node_events = vec![NodeEvent {
        origin: 0,
        time: T0,
        kind: kind.into(),
        exit_code: code,
        reason: String::new(),
        attributes: attrs
            .iter()
            .map(|(k, v)| Attribute {
                key: k.to_string(),
                value: v.clone(),
            })
            .collect(),
    }];
    b
}

fn series(id: u32, metric: &str, attrs: &[(&str, V)]) -> SeriesInfo {
    SeriesInfo {
        id,
        metric: metric.into(),
        unit: String::new(),
        kind: SeriesKind::Gauge,
        attributes: attrs
            .iter()
            .map(|(k, v)| Attribute {
                key: k.to_string(),
                value: v.clone(),
            })
            .collect(),
    }
}

/// The idle share of all CPUs and of two cores, used memory and the memory
/// limit, one tick.
fn machine_series() -> Vec<SeriesInfo> {
    let idle = || ("cpu.mode", V::Str("idle".into()));
    vec![
        series(0, "system.cpu.utilization", &[idle()]),
        series(
            1,
            "system.cpu.utilization",
            &[("cpu.logical_number", V::Int(0)), idle()],
        ),
        series(
            2,
            "system.cpu.utilization",
            &[("cpu.logical_number", V::Int(1)), idle()],
        ),
        series(
            3,
            "system.memory.usage",
            &[("system.memory.state", V::Str("used".into()))],
        ),
        series(4, "system.memory.limit", &[]),
    ]
}

fn host_samples(time: u64) -> SampleBatch {
    SampleBatch {
        new_series: machine_series(),
        timestamps: vec![time],
        series: vec![0, 1, 2, 3, 4],
        // busy 0.75 in all, cores 1.0 and 0.5: 1.5 cores in use
        values: vec![0.25, 0.0, 0.5, 2048.0 * 1048576.0, 8192.0 * 1048576.0],
    }
}

fn req(method: &str, path: &str, body: Value) -> HttpRequest {
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    HttpRequest {
        method: method.into(),
        path: path.into(),
        query: query.into(),
        headers: vec![],
        body: if body.is_null() {
            vec![]
        } else {
            body.to_string().into_bytes()
        },
    }
}

fn call(m: &mut Master, h: &mut FakeHost, method: &str, path: &str, body: Value) -> (u16, Value) {
    let r = routes::handle(m, h, &req(method, path, body));
    (r.status, serde_json::from_slice(&r.body).unwrap_or(Value::Null))
}

fn get(m: &mut Master, h: &mut FakeHost, path: &str) -> Value {
    let (s, v) = call(m, h, "GET", path, Value::Null);
    assert_eq!(s, 200, "{path}: {v}");
    v
}

fn tick(m: &mut Master, h: &mut FakeHost, secs: f64) {
    h.now += (secs * NS as f64) as u64;
    m.on_timer(h);
}

#[test]
fn collection_from_the_host_and_from_other_sondes() {
    let mut h = FakeHost::at(T0);
    let mut m = Master::start(&mut h, settings(r#"{"node": "gw"}"#), 0);
    m.on_samples(&mut h, host_samples(T0)).unwrap();
    // Another sonde's exported metrics, through gateway mode: origin node = its host.name.
    let mut b = empty_batch(vec![origin("edge-1", "", -1)]);
    b.origins[0].job = "sonde".into();
    b.point_series = machine_series();
    b.points = Some(PointColumns {
        origin: vec![0; 5],
        series: vec![0, 1, 2, 3, 4],
        time: vec![T0; 5],
        value: vec![0.5, 0.5, 0.5, 1024.0 * 1048576.0, 4096.0 * 1048576.0],
    });
    m.on_events(&mut h, b);
    let nodes = get(&mut m, &mut h, "/nodes");
    let by = |n: &str| {
        nodes
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == n)
            .unwrap()
            .clone()
    };
    let gw = by("gw");
    assert_eq!(
        (gw["cpu"].as_f64(), gw["memory_mib"].as_f64()),
        (Some(1.5), Some(2048.0)),
        "cores in use, MiB"
    );
    assert_eq!(
        gw["config"],
        json!({"cpu": 2.0, "memory_mib": 8192.0}),
        "its machine when nothing else is known"
    );
    assert_eq!(gw["source"], "host");
    let edge = by("edge-1");
    assert_eq!(
        (edge["cpu"].as_f64(), edge["memory_mib"].as_f64()),
        (Some(1.0), Some(1024.0))
    );
    assert_eq!(edge["source"], "gateway");
    // Heartbeats and steps: the node runs, the speed is smoothed.
    m.on_events(&mut h, heartbeats(&["gw"], T0));
    m.on_events(
        &mut h,
        steps("gw", &[(0, T0), (100, T0 + 10 * NS), (300, T0 + 20 * NS)]),
    );
    let speed = get(&mut m, &mut h, "/speed");
    assert_eq!(speed["speed"], 15.0);
    assert_eq!(speed["speed_last_two"], 20.0);
    assert_eq!(get(&mut m, &mut h, "/nodes")[1]["status"], "running");
}

#[test]
fn runtime_statistics_are_persisted_one_record_per_sample_and_survive_a_restart() {
    let mut h = FakeHost::at(T0);
    let s = r#"{"node": "worker-0", "stats_interval_s": 1}"#;
    let mut m = Master::start(&mut h, settings(s), 0);
    m.on_events(&mut h, heartbeats(&["worker-0"], T0));
    for i in 0..5u64 {
        let now = h.now;
        m.on_samples(&mut h, host_samples(now)).unwrap();
        let now = h.now;
        m.on_events(&mut h, steps("worker-0", &[(i * 10, now)]));
        tick(&mut m, &mut h, 1.0);
    }
    assert_eq!(h.store.streams["runtime"].len(), 5, "one record per interval");
    let rec: Value = serde_json::from_slice(h.store.streams["runtime"].values().last().unwrap()).unwrap();
    assert_eq!(rec["nodes"][0]["used"], json!({"cpu": 1.5, "memory_mib": 2048.0}));
    assert_eq!(rec["worker_num"], 1);
    assert!(rec["speed"].as_f64().unwrap() > 0.0);
    // A restart: the records, the speed records and the nodes come back.
    let mut h2 = h.restarted(h.now + 5 * NS);
    let mut m2 = Master::start(&mut h2, settings(s), 0);
    assert_eq!(m2.stats.len(), 5);
    assert_eq!(m2.perf.records.len(), 5);
    assert_eq!(get(&mut m2, &mut h2, "/stats?limit=2").as_array().unwrap().len(), 2);
    assert_eq!(m2.nodes["worker-0"].status, crate::nodes::Status::Running);
    // Trimmed to stats_keep.
    let mut h3 = FakeHost::at(T0);
    let mut m3 = Master::start(&mut h3, settings(r#"{"stats_interval_s": 1, "stats_keep": 10}"#), 0);
    m3.on_events(&mut h3, heartbeats(&["local"], T0));
    for _ in 0..70 {
        let now = h3.now;
        m3.on_samples(&mut h3, host_samples(now)).unwrap();
        let now = h3.now;
        m3.on_events(&mut h3, heartbeats(&["local"], now));
        tick(&mut m3, &mut h3, 1.0);
    }
    assert!(
        h3.store.streams["runtime"].len() <= 10 + 32,
        "{}",
        h3.store.streams["runtime"].len()
    );
    assert_eq!(m3.stats.len(), 10);
}

#[test]
fn the_initial_plan_is_emitted_once_with_its_reason_and_served() {
    let mut h = FakeHost::at(T0);
    let s = r#"{"limits": {"cpu": 10, "memory": "8192Mi"}, "clamp": {"enabled": false}}"#;
    let mut m = Master::start(&mut h, settings(s), 0);
    let d = h.decisions_of("resource-plan");
    assert_eq!(d.len(), 1);
    assert!(d[0].reason.starts_with("initial: "), "{}", d[0].reason);
    let plans = get(&mut m, &mut h, "/plans");
    let p = &plans["current"]["latest"];
    assert_eq!(
        p["plan"]["groups"]["worker"],
        json!({"count": 1, "cpu": 2.0, "memory_mib": 1639.0})
    );
    assert_eq!(plans["current"]["stage"], "worker_initial");
    // After a restart it is not made again.
    let mut h2 = h.restarted(T0 + NS);
    let mut m2 = Master::start(&mut h2, settings(s), 0);
    assert!(h2.decisions_of("resource-plan").is_empty());
    assert_eq!(get(&mut m2, &mut h2, "/plans")["history"].as_array().unwrap().len(), 1);
}

#[test]
fn brain_strategy_is_chosen_in_the_settings() {
    let mut h = FakeHost::at(T0);
    let mut m = Master::start(
        &mut h,
        settings(r#"{"strategy": "brain", "clamp": {"enabled": false}}"#),
        0,
    );
    let p = get(&mut m, &mut h, "/plans")["current"]["latest"].clone();
    assert_eq!(p["strategy"], "brain");
    assert_eq!(
        p["plan"]["groups"]["ps"],
        json!({"count": 4, "cpu": 12.0, "memory_mib": 16384.0}),
        "cold start"
    );
    assert_eq!(
        p["plan"]["groups"]["worker"],
        json!({"count": 1, "cpu": 12.0, "memory_mib": 16384.0})
    );
}

/// A PS job on the loop: typed nodes with given resources, samples per node
/// through the host and gateway points, global steps; 12 intervals of 15 s.
fn run_loop(strategy: &str) -> (FakeHost, Master) {
    let mut h = FakeHost::at(T0);
    let s = format!(
        r#"{{"node": "ps-0", "strategy": "{strategy}", "stats_interval_s": 15, "clamp": {{"enabled": false}},
            "plan_interval_s": 0, "nodes": {{"ps-0": {{"type": "ps", "cpu": 4, "memory": 4096}}}}}}"#
    );
    let mut m = Master::start(&mut h, settings(&s), 0);
    let names = ["ps-0", "worker-0", "worker-1", "worker-2"];
    for w in &names[1..] {
        m.on_events(
            &mut h,
            node_event(
                w,
                "worker",
                "started",
                None,
                &[("cpu", V::Int(1)), ("memory_mib", V::Int(4096))],
            ),
        );
    }
    let mut step = 0;
    for _ in 0..12 {
        // ps-0 uses 1 of 4 cores (util 0.25) through the host; workers 1 core, 2048 MiB through points.
        let mut s = host_samples(h.now);
        s.values = vec![0.5, 0.5, 0.5, 1000.0 * 1048576.0, 8192.0 * 1048576.0];
        m.on_samples(&mut h, s).unwrap();
        let mut b = empty_batch(
            names[1..]
                .iter()
                .enumerate()
                .map(|(i, n)| origin(n, "worker", i as i32))
                .collect(),
        );
        b.point_series = machine_series();
        let mut cols = PointColumns {
            origin: vec![],
            series: vec![],
            time: vec![],
            value: vec![],
        };
        for o in 0..3u32 {
            for (sid, v) in [(1u32, 0.5), (2, 0.5), (3, 2048.0 * 1048576.0), (4, 8192.0 * 1048576.0)] {
                cols.origin.push(o);
                cols.series.push(sid);
                cols.time.push(h.now);
                cols.value.push(v);
            }
        }
        b.points = Some(cols);
        m.on_events(&mut h, b);
        let now = h.now;
        m.on_events(&mut h, heartbeats(&names, now));
        step += 150;
        let now = h.now;
        m.on_events(&mut h, steps("worker-0", &[(step, now)]));
        tick(&mut m, &mut h, 15.0);
    }
    (h, m)
}

#[test]
fn the_loop_makes_a_worker_plan_from_runtime_statistics() {
    let (mut h, mut m) = run_loop("local");
    let plans = get(&mut m, &mut h, "/plans");
    let latest = &plans["current"]["latest"];
    assert_eq!(latest["kind"], "worker", "{plans}");
    // R4.3: PS util 0.25, 3 workers at 1 CPU / 2048 MiB -> int(3 x 0.9 / 0.25) = 10 workers of 3072 MiB.
    assert_eq!(
        latest["plan"]["groups"]["worker"],
        json!({"count": 10, "cpu": 1.0, "memory_mib": 3072.0})
    );
    assert!(latest["reason"].as_str().unwrap().contains("0.25"));
    assert_eq!(plans["current"]["target_workers"], 10);
    let d = h.decisions_of("resource-plan");
    assert_eq!(d.len(), 2, "initial + worker");
    assert_eq!(h.store.streams["plans"].len(), 2, "plans are persisted");
    // Until 10 workers run, no further plan.
    tick(&mut m, &mut h, 60.0);
    assert!(
        get(&mut m, &mut h, "/plans")["current"]["why_no_plan"]
            .as_str()
            .unwrap()
            .contains("asked for 10")
    );
    // Emitted as a metric too.
    assert!(h.points_of("sonde.training.speed", &[]).iter().any(|p| p.value > 0.0));
}

#[test]
fn d4_d5_the_brain_strategy_plans_from_the_persisted_records_at_every_stage() {
    // Upstream the runtime records never reached the Brain (D5) and the
    // master's running stages were refused by it (D4): no plan. Here the same
    // loop with the Brain strategy plans from this plugin's records.
    let (mut h, mut m) = run_loop("brain");
    let latest = get(&mut m, &mut h, "/plans")["current"]["latest"].clone();
    assert_eq!(
        (latest["strategy"].as_str(), latest["kind"].as_str()),
        (Some("brain"), Some("worker")),
        "{latest}"
    );
    // PS util 0.25 < 0.8: ceil(0.8 / 0.25 x 3) = 10 workers; CPU ceil(1 + 1); memory 2048 x 1.2.
    assert_eq!(
        latest["plan"]["groups"]["worker"],
        json!({"count": 10, "cpu": 2.0, "memory_mib": 2458.0})
    );
    // The running stage (PS_RUNNING) plans too: a hot PS.
    m.scaler.stage = crate::scaler::Stage::PsRunning;
    m.scaler.last_plan_ns = 0;
    m.scaler.target_workers = None;
    for r in m.stats.iter_mut() {
        for n in r.nodes.iter_mut().filter(|n| n.name == "ps-0") {
            n.used.cpu = 3.8;
        }
    }
    let now = h.now;
    m.plan_loop(&mut h, now);
    let latest = get(&mut m, &mut h, "/plans")["current"]["latest"].clone();
    assert_eq!(
        (latest["kind"].as_str(), latest["stage"].as_str()),
        (Some("running"), Some("ps_running")),
        "{latest}"
    );
    assert!(
        latest["plan"]["nodes"]["ps-0"]["cpu"].as_f64().unwrap() > 4.0,
        "{latest}"
    );
}

fn register(m: &mut Master, h: &mut FakeHost, name: &str, size: u64, batch: u64, epochs: u32) {
    let (s, v) = call(
        m,
        h,
        "POST",
        "/datasets",
        json!({"dataset_name": name, "batch_size": batch,
        "num_epochs": epochs, "dataset_size": size, "num_minibatches_per_shard": 1}),
    );
    assert_eq!(s, 200, "{v}");
}

fn next(m: &mut Master, h: &mut FakeHost, node: &str, rid: &str) -> Value {
    let (s, v) = call(
        m,
        h,
        "POST",
        "/tasks/next",
        json!({"dataset_name": "ds", "node": node, "request_id": rid}),
    );
    assert_eq!(s, 200, "{v}");
    v
}

fn report(m: &mut Master, h: &mut FakeHost, node: &str, task: &Value, err: &str) -> (u16, Value) {
    call(
        m,
        h,
        "POST",
        "/tasks/report",
        json!({"dataset_name": "ds", "node": node,
        "task_id": task["task_id"], "err_message": err}),
    )
}

#[test]
fn sharding_over_routes_resumes_exactly_after_a_restart() {
    let mut h = FakeHost::at(T0);
    let s = r#"{"heartbeat_timeout_s": 5, "heartbeat_scan_s": 1}"#;
    let mut m = Master::start(&mut h, settings(s), 0);
    register(&mut m, &mut h, "ds", 100, 10, 2);
    // First registration wins.
    let (_, v) = call(
        &mut m,
        &mut h,
        "POST",
        "/datasets",
        json!({"dataset_name": "ds", "batch_size": 1, "dataset_size": 5}),
    );
    assert_eq!(v["registered"], false);
    assert_eq!(v["dataset"]["shard_size"], 10);

    let mut consumed: Vec<(u32, u64, u64)> = Vec::new();
    let a = next(&mut m, &mut h, "w0", "w0-1");
    let b = next(&mut m, &mut h, "w1", "w1-1");
    let _c = next(&mut m, &mut h, "w2", "w2-1"); // w2 will die with it
    assert_eq!(report(&mut m, &mut h, "w0", &a, "").1["result"], "done");
    consumed.push((
        a["epoch"].as_u64().unwrap() as u32,
        a["shard"]["start"].as_u64().unwrap(),
        a["shard"]["end"].as_u64().unwrap(),
    ));
    // Restart mid-epoch: a new instance over the same store.
    let mut h = h.restarted(h.now + NS);
    let mut m = Master::start(&mut h, settings(s), 1);
    // w1's shard is still its own: its report after the restart is accepted.
    assert_eq!(report(&mut m, &mut h, "w1", &b, "").1["result"], "done");
    consumed.push((
        0,
        b["shard"]["start"].as_u64().unwrap(),
        b["shard"]["end"].as_u64().unwrap(),
    ));
    // A retried get of a request answered before the restart gets the same shard.
    let a2 = next(&mut m, &mut h, "w0", "w0-2");
    assert_eq!(next(&mut m, &mut h, "w0", "w0-2"), a2);
    // w2 is never heard from again: dead after 5 s (the restart gave it a fresh timeout).
    for _ in 0..7 {
        let now = h.now;
        m.on_events(&mut h, heartbeats(&["w0", "w1"], now));
        tick(&mut m, &mut h, 1.0);
    }
    assert_eq!(h.decisions_of("node-dead").len(), 1);
    assert_eq!(h.decisions_of("node-dead")[0].subject, "w2");
    assert!(!h.decisions_of("shards-requeued").is_empty());
    assert_eq!(report(&mut m, &mut h, "w0", &a2, "").1["result"], "done");
    consumed.push((
        0,
        a2["shard"]["start"].as_u64().unwrap(),
        a2["shard"]["end"].as_u64().unwrap(),
    ));
    // Drain with w0 and w1, restarting once more in the middle.
    let mut n = 0;
    let mut node = 0;
    loop {
        let w = ["w0", "w1"][node % 2];
        node += 1;
        let t = next(&mut m, &mut h, w, &format!("{w}-x{node}"));
        match t["type"].as_str().unwrap() {
            "end" => break,
            "wait" => continue,
            _ => {}
        }
        assert_eq!(report(&mut m, &mut h, w, &t, "").1["result"], "done");
        consumed.push((
            t["epoch"].as_u64().unwrap() as u32,
            t["shard"]["start"].as_u64().unwrap(),
            t["shard"]["end"].as_u64().unwrap(),
        ));
        n += 1;
        if n == 5 {
            h = h.restarted(h.now + NS);
            m = Master::start(&mut h, settings(s), 2);
        }
    }
    consumed.sort();
    let want: Vec<(u32, u64, u64)> = (0..2)
        .flat_map(|e| (0..10).map(move |i| (e, i * 10, i * 10 + 10)))
        .collect();
    assert_eq!(consumed, want, "every shard of every epoch exactly once");
    let ds = get(&mut m, &mut h, "/datasets/ds");
    assert_eq!(ds["completed"], true);
    assert_eq!(ds["done_records"], 200);
}

#[test]
fn a_failed_write_leaves_the_state_unchanged_and_answers_503() {
    let mut h = FakeHost::at(T0);
    let mut m = Master::start(&mut h, settings("{}"), 0);
    register(&mut m, &mut h, "ds", 100, 10, 1);
    h.fail_state_writes = Some("disk full".into());
    let (s, _) = call(
        &mut m,
        &mut h,
        "POST",
        "/tasks/next",
        json!({"dataset_name": "ds", "node": "w0"}),
    );
    assert_eq!(s, 503);
    assert!(
        m.datasets["ds"].doing.is_empty(),
        "nothing handed out that a restart would not know"
    );
    h.fail_state_writes = None;
    assert_eq!(next(&mut m, &mut h, "w0", "")["shard"]["start"], 0);
}

#[test]
fn exit_codes_release_shards_and_decide_relaunches() {
    let mut h = FakeHost::at(T0);
    let mut m = Master::start(&mut h, settings(r#"{"max_shard_failures": 2}"#), 0);
    register(&mut m, &mut h, "ds", 30, 10, 1);
    let t = next(&mut m, &mut h, "w0", "");
    // Killed (137): Deleted, shards back to TODO, relaunched.
    m.on_events(&mut h, node_event("w0", "worker", "exited", Some(137), &[]));
    assert_eq!(m.datasets["ds"].todo_shards(), 3);
    let r = h.decisions_of("relaunch");
    assert_eq!(r.len(), 1);
    assert!(r[0].reason.starts_with("Deleted"), "{}", r[0].reason);
    // Its late report is refused (409): someone else may have the shard now.
    let (s, v) = report(&mut m, &mut h, "w0", &t, "");
    assert_eq!((s, v["accepted"].clone()), (409, json!(false)));
    // A fatal error (exit 1) is not relaunched.
    m.on_events(&mut h, node_event("w1", "worker", "exited", Some(1), &[]));
    assert!(h.decisions_of("no-relaunch")[0].reason.contains("FatalError"));
    // The killed node's shard went to the tail of TODO with its task id; a
    // second failure (max_shard_failures = 2) moves it to the dead letters.
    let ids: Vec<Value> = (0..3)
        .map(|_| next(&mut m, &mut h, "w2", "")["task_id"].clone())
        .collect();
    assert_eq!(ids, vec![json!(2), json!(3), json!(1)]);
    let t1 = json!({"task_id": 1});
    assert_eq!(
        report(&mut m, &mut h, "w2", &t1, "bad record").1["result"],
        "dead_letter"
    );
    assert_eq!(h.decisions_of("shard-dead-letter").len(), 1);
    let ds = get(&mut m, &mut h, "/datasets/ds");
    assert_eq!(ds["dead_letter_shards"][0]["shard"]["start"], 0);
    let (s, v) = call(&mut m, &mut h, "POST", "/datasets/ds/dead-letter/requeue", Value::Null);
    assert_eq!((s, v["requeued"].clone()), (200, json!(1)));
}

/// A PS is pending with the given CPU and memory (MiB).
fn pending_ps(m: &mut Master, h: &mut FakeHost, name: &str, cpu: i64, memory_mib: i64) {
    let attrs = [("cpu", V::Int(cpu)), ("memory_mib", V::Int(memory_mib))];
    m.on_events(h, node_event(name, "ps", "pending", None, &attrs));
}

/// A worker starts with the given memory (MiB) and CPU.
fn start_worker(m: &mut Master, h: &mut FakeHost, name: &str, memory_mib: i64, cpu: i64) {
    let attrs = [("memory_mib", V::Int(memory_mib)), ("cpu", V::Int(cpu))];
    m.on_events(h, node_event(name, "worker", "started", None, &attrs));
}

#[test]
fn oom_relaunch_memory_is_planned() {
    let mut h = FakeHost::at(T0);
    let mut m = Master::start(&mut h, settings(r#"{"clamp": {"enabled": false}}"#), 0);
    start_worker(&mut m, &mut h, "worker-3", 16384, 4);
    m.on_events(&mut h, node_event("worker-3", "worker", "oom", None, &[]));
    let plan = get(&mut m, &mut h, "/plans")["current"]["latest"].clone();
    assert_eq!(plan["kind"], "oom");
    assert_eq!(
        plan["plan"]["nodes"]["worker-3"],
        json!({"cpu": 4.0, "memory_mib": 24576.0})
    );
    assert!(h.decisions_of("relaunch")[0].reason.contains("24576"));
    // At 65536 MiB: not relaunched, unrecoverable (non-GPU).
    m.on_events(
        &mut h,
        node_event("worker-4", "worker", "started", None, &[("memory_mib", V::Int(65536))]),
    );
    m.on_events(&mut h, node_event("worker-4", "worker", "exited", Some(247), &[]));
    let no = h.decisions_of("no-relaunch");
    assert!(no[0].reason.contains("unrecoverable"), "{}", no[0].reason);
}

#[test]
fn an_oom_relaunch_from_60000_mib_is_capped_at_65536() {
    // The reference's worker cap and the limits table both say 65536: the
    // plan must not reach 60000 + 8192 through an unclamped group memory.
    let mut h = FakeHost::at(T0);
    let mut m = Master::start(&mut h, settings("{}"), 0);
    start_worker(&mut m, &mut h, "worker-0", 60000, 8);
    m.on_events(&mut h, node_event("worker-0", "worker", "exited", Some(247), &[]));
    let plan = get(&mut m, &mut h, "/plans")["current"]["latest"].clone();
    assert_eq!(plan["kind"], "oom", "{plan}");
    assert_eq!(
        plan["plan"]["nodes"]["worker-0"],
        json!({"cpu": 8.0, "memory_mib": 65536.0})
    );
    let relaunch = &h.decisions_of("relaunch")[0];
    assert!(relaunch.reason.contains("65536"), "{}", relaunch.reason);
    assert!(!relaunch.reason.contains("68192"), "{}", relaunch.reason);
}

/// Whether a plan keeps to the default limits table (R5.4).
fn within_the_table(plan: &Value) -> bool {
    let cpu_ok = |v: &Value| v.as_f64().is_some_and(|c| c == 0.0 || (4.0..=32.0).contains(&c));
    let mem_ok = |v: &Value| v.as_f64().is_some_and(|m| m == 0.0 || (6144.0..=65536.0).contains(&m));
    let groups = plan["groups"].as_object().unwrap().iter().all(|(t, g)| {
        let max = if t == "ps" { 15 } else { 60 };
        cpu_ok(&g["cpu"]) && mem_ok(&g["memory_mib"]) && g["count"].as_u64().unwrap() <= max
    });
    let nodes = plan["nodes"]
        .as_object()
        .unwrap()
        .values()
        .all(|r| cpu_ok(&r["cpu"]) && mem_ok(&r["memory_mib"]));
    groups && nodes
}

#[test]
fn every_kind_of_plan_passes_the_clamps() {
    use crate::model::{GroupResource, NodeType, Outcome, Plan, Resource};
    let mut h = FakeHost::at(T0);
    // initial: the CREATE rule's 2 CPU / 1639 MiB are under the table's minimum.
    let s = r#"{"limits": {"cpu": 10, "memory": "8192Mi"}, "pending_timeout_s": 900}"#;
    let mut m = Master::start(&mut h, settings(s), 0);
    // The loop's kinds leave their rules through Scaler::finish: each gets a
    // plan past every bound of the table.
    let wild = Plan::default()
        .group(NodeType::Worker, GroupResource::new(500, 100.0, 200_000.0))
        .group(NodeType::Ps, GroupResource::new(40, 0.5, 100.0))
        .node("ps-0", Resource::new(64.0, 500_000.0));
    for kind in ["worker", "ps", "running", "worker-sample", "worker-stable"] {
        let now = h.now;
        let rec = m
            .scaler
            .finish(&m.settings, kind, Outcome::with(wild.clone(), kind), now)
            .unwrap();
        m.emit_plan(&mut h, rec);
    }
    // oom: a worker of 60000 MiB and 2 CPU ends with an OOM.
    start_worker(&mut m, &mut h, "worker-9", 60000, 2);
    m.on_events(&mut h, node_event("worker-9", "worker", "oom", None, &[]));
    // pending: a node so large that half of it is still past the table.
    pending_ps(&mut m, &mut h, "ps-1", 128, 400_000);
    for _ in 0..17 {
        tick(&mut m, &mut h, 60.0);
    }
    let plans = get(&mut m, &mut h, "/plans")["history"].clone();
    let mut kinds: Vec<&str> = plans
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    kinds.sort();
    kinds.dedup();
    assert_eq!(
        kinds,
        [
            "initial",
            "oom",
            "pending",
            "ps",
            "running",
            "worker",
            "worker-sample",
            "worker-stable"
        ],
        "{plans:#}"
    );
    for p in plans.as_array().unwrap() {
        assert!(within_the_table(&p["plan"]), "{} past the table: {p:#}", p["kind"]);
        assert!(
            !within_the_table(&p["proposed"]),
            "{}: the test must propose past the table",
            p["kind"]
        );
        assert!(
            p["adjustments"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a.as_str().unwrap().contains("limits table")),
            "{}: {p:#}",
            p["kind"]
        );
    }
}

#[test]
fn pending_nodes_are_halved_before_auto_scaling_starts() {
    let mut h = FakeHost::at(T0);
    let mut m = Master::start(&mut h, settings(r#"{"pending_timeout_s": 900}"#), 0);
    pending_ps(&mut m, &mut h, "ps-1", 16, 32768);
    tick(&mut m, &mut h, 60.0);
    assert!(h.decisions_of("resource-plan").len() == 1, "only the initial plan");
    for _ in 0..15 {
        tick(&mut m, &mut h, 60.0);
    }
    let plan = get(&mut m, &mut h, "/plans")["current"]["latest"].clone();
    assert_eq!(plan["kind"], "pending");
    assert_eq!(
        plan["plan"]["nodes"]["ps-1"],
        json!({"cpu": 8.0, "memory_mib": 16384.0})
    );
}

#[test]
fn heartbeat_death_is_configurable_and_recovery_is_noticed() {
    let mut h = FakeHost::at(T0);
    let mut m = Master::start(
        &mut h,
        settings(r#"{"heartbeat_timeout_s": 30, "heartbeat_scan_s": 15}"#),
        0,
    );
    m.on_events(&mut h, heartbeats(&["w0"], T0));
    tick(&mut m, &mut h, 15.0);
    tick(&mut m, &mut h, 15.0);
    assert!(h.decisions_of("node-dead").is_empty(), "30 s is not more than 30 s");
    tick(&mut m, &mut h, 15.0);
    assert_eq!(h.decisions_of("node-dead").len(), 1);
    assert_eq!(
        m.nodes["w0"].exit_reason,
        Some(crate::failures::ExitReason::NoHeartBeat)
    );
    assert_eq!(
        h.decisions_of("relaunch").len(),
        1,
        "NoHeartBeat is relaunched (count 0 < 3)"
    );
    let now = h.now;
    m.on_events(&mut h, heartbeats(&["w0"], now));
    assert_eq!(h.decisions_of("node-recovered").len(), 1);
    assert!(m.nodes["w0"].running());
    // The default is 600 s.
    assert_eq!(Settings::default().heartbeat_timeout_s, 600.0);
}

#[test]
fn stragglers_are_detected_during_training_from_step_times() {
    let mut h = FakeHost::at(T0);
    let mut m = Master::start(&mut h, settings(r#"{"stats_interval_s": 1}"#), 0);
    let nodes = ["w0", "w1", "w2", "w3"];
    let mut b = empty_batch(
        nodes
            .iter()
            .enumerate()
            .map(|(i, n)| origin(n, "worker", i as i32))
            .collect(),
    );
    b.names = vec!["step".into()];
    let mut t = TimingColumns {
        origin: vec![],
        name: vec![],
        start: vec![],
        end: vec![],
        step: vec![],
    };
    for (o, d) in [(0u32, 0.10), (1, 0.11), (2, 0.09), (3, 0.35)] {
        for k in 0..8u64 {
            t.origin.push(o);
            t.name.push(0);
            t.start.push(T0 + k * NS);
            t.end.push(T0 + k * NS + (d * NS as f64) as u64);
            t.step.push(k as i64);
        }
    }
    b.timings = Some(t);
    m.on_events(&mut h, b);
    tick(&mut m, &mut h, 1.0);
    let s = get(&mut m, &mut h, "/stragglers");
    assert_eq!(s["training"], json!([{"node": "w3", "median_step_s": 0.35}]));
    assert_eq!(h.decisions_of("straggler").len(), 1);
    tick(&mut m, &mut h, 1.0);
    assert_eq!(h.decisions_of("straggler").len(), 1, "reported once");
    // The pre-training node check (R8) over the routes.
    for (n, ok, time) in [
        ("a", true, 10.0),
        ("b", true, 11.0),
        ("c", true, 30.0),
        ("d", true, 10.0),
    ] {
        call(
            &mut m,
            &mut h,
            "POST",
            "/node-check",
            json!({"node": n, "ok": ok, "time": time}),
        );
    }
    let s = get(&mut m, &mut h, "/stragglers");
    assert_eq!(s["node_check"]["stragglers"], json!(["c"]));
    let g = get(&mut m, &mut h, "/node-check/groups?round=1");
    assert_eq!(g["groups"], json!([["a", "c"], ["d", "b"]]));
}

#[test]
fn fixed_global_batch_route() {
    let mut h = FakeHost::at(T0);
    let mut m = Master::start(&mut h, settings(r#"{"global_batch": {"max_world_size": 8}}"#), 0);
    let v = get(&mut m, &mut h, "/batch?world_size=3&rank=2");
    assert_eq!(v["micro_batches"], json!([3, 3, 2]));
    assert_eq!(v["micro_batch_count"], 2);
    // World size from the running workers when not given.
    m.on_events(&mut h, heartbeats(&["a", "b", "c", "d"], T0));
    assert_eq!(get(&mut m, &mut h, "/batch")["micro_batches"], json!([2, 2, 2, 2]));
    let (s, _) = call(&mut m, &mut h, "GET", "/batch?world_size=3&rank=5", Value::Null);
    assert_eq!(s, 422);
}

#[test]
fn checkpoint_round_trip_and_d3_wrapping() {
    let mut h = FakeHost::at(T0);
    let mut m = Master::start(&mut h, settings("{}"), 0);
    register(&mut m, &mut h, "ds", 40, 10, 1);
    let t = next(&mut m, &mut h, "w0", "");
    let ck = get(&mut m, &mut h, "/checkpoint?dataset=ds");
    let content: Value = serde_json::from_str(ck["content"].as_str().unwrap()).unwrap();
    assert_eq!(content["doing"], json!([[0, 10]]));
    // Restore what GET gave (a ShardCheckpoint {content: text}): DOING first, new ids.
    let (s, v) = call(&mut m, &mut h, "POST", "/checkpoint/restore", ck.clone());
    assert_eq!((s, v["shards"].clone()), (200, json!(4)), "{v}");
    let t2 = next(&mut m, &mut h, "w1", "");
    assert_eq!(t2["shard"]["start"], 0);
    assert_ne!(t2["task_id"], t["task_id"]);
    // Wrapped twice (DLRover's client, D3) still restores; garbage is refused.
    let twice = json!({"content": json!({"content": ck["content"]}).to_string()});
    assert_eq!(call(&mut m, &mut h, "POST", "/checkpoint/restore", twice).0, 200);
    assert_eq!(
        call(&mut m, &mut h, "POST", "/checkpoint/restore", json!({"x": 1})).0,
        400
    );
    // Reset exists (D3: the client called a method that did not).
    assert_eq!(call(&mut m, &mut h, "POST", "/datasets/ds/reset", Value::Null).0, 200);
    assert_eq!(get(&mut m, &mut h, "/datasets/ds")["epoch"], 0);
}

#[test]
fn routes_answer_errors_clearly() {
    let mut h = FakeHost::at(T0);
    let mut m = Master::start(&mut h, settings("{}"), 0);
    assert_eq!(call(&mut m, &mut h, "GET", "/nope", Value::Null).0, 404);
    assert_eq!(call(&mut m, &mut h, "DELETE", "/plans", Value::Null).0, 405);
    assert_eq!(
        call(
            &mut m,
            &mut h,
            "POST",
            "/tasks/next",
            json!({"dataset_name": "x", "node": "w"})
        )
        .0,
        404
    );
    assert_eq!(
        call(&mut m, &mut h, "POST", "/tasks/next", json!({"dataset": "x"})).0,
        400
    );
    assert_eq!(
        call(
            &mut m,
            &mut h,
            "POST",
            "/datasets",
            json!({"dataset_name": "", "batch_size": 1, "dataset_size": 1})
        )
        .0,
        422
    );
    let o = get(&mut m, &mut h, "/overview");
    for k in ["nodes", "speed", "plan", "datasets", "stragglers"] {
        assert!(o.get(k).is_some(), "{k} in {o}");
    }
}

#[test]
fn job_without_global_steps_starts_on_a_late_task_result() {
    let mut h = FakeHost::at(T0);
    let mut m = Master::start(&mut h, settings("{}"), 0);
    register(&mut m, &mut h, "ds", 1000, 10, 1);
    let t = next(&mut m, &mut h, "w0", "");
    h.now += 91 * NS;
    report(&mut m, &mut h, "w0", &t, "");
    tick(&mut m, &mut h, 30.0);
    assert!(m.scaler.started, "{}", m.scaler.last_skip);
    assert!(m.scaler.started_reason.contains("without global steps"));
}
