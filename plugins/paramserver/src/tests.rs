//! The plugin's hooks end to end with a fake host: batches as the host
//! builds them, the check timer driven by hand.

use serde_json::Value;
use sonde_plugin_sdk::types::{
    Attribute, EventBatch, HeartbeatColumns, HttpRequest, NodeEvent, Origin, ProgressColumns, Severity,
};

use crate::ps::ParamServer;
use crate::routes;
use crate::settings::Settings;
use sonde_plugin_sdk::testing::FakeHost;

const MS: u64 = 1_000_000;
const T0: u64 = 1_700_000_000_000 * MS;

fn origin(role: &str, index: i32) -> Origin {
    Origin {
        job: "lr".into(),
        node: "n1".into(),
        role: role.into(),
        index,
        rank: -1,
        local_rank: -1,
        attributes: vec![],
    }
}

/// What one batch carries: (ms after T0, process, what).
#[derive(Clone, Copy)]
enum Ev {
    Hb,
    Clock(u64),
    Node(&'static str),
}

fn batch(rows: &[(u64, (&str, i32), Ev)]) -> EventBatch {
    let mut b = EventBatch {
        names: vec!["clock".into(), "batch_idx".into()],
        ..Default::default()
    };
    for &(ms, (role, idx), ev) in rows {
        let o = origin(role, idx);
        let oi = match b.origins.iter().position(|x| *x == o) {
            Some(i) => i,
            None => {
                b.origins.push(o);
                b.origins.len() - 1
            }
        } as u32;
        let t = T0 + ms * MS;
        match ev {
            Ev::Hb => {
                let h = b.heartbeats.get_or_insert_with(|| HeartbeatColumns {
                    origin: vec![],
                    time: vec![],
                });
                h.origin.push(oi);
                h.time.push(t);
            }
            Ev::Clock(c) => {
                let p = b.progress.get_or_insert_with(|| ProgressColumns {
                    origin: vec![],
                    name: vec![],
                    time: vec![],
                    value: vec![],
                });
                p.origin.push(oi);
                p.name.push(0);
                p.time.push(t);
                p.value.push(c);
            }
            Ev::Node(kind) => b.node_events.push(NodeEvent {
                origin: oi,
                time: t,
                kind: kind.into(),
                exit_code: None,
                reason: String::new(),
                attributes: vec![Attribute::new("clock", 3i64)],
            }),
        }
    }
    b
}

fn start(settings: &str) -> (ParamServer, FakeHost) {
    let mut host = FakeHost {
        now: T0,
        ..FakeHost::default()
    };
    let p = ParamServer::start(&mut host, Settings::parse(settings).unwrap());
    (p, host)
}

/// Runs the check timer every `every` ms from `from` to `to` (ms after T0).
fn tick(p: &mut ParamServer, host: &mut FakeHost, from: u64, to: u64, every: u64) {
    let id = *host.timers.keys().next().expect("the check timer is set");
    let mut t = from;
    while t <= to {
        host.now = T0 + t * MS;
        p.on_timer(host, id);
        t += every;
    }
}

fn get(p: &ParamServer, host: &mut FakeHost, path: &str) -> (u16, String) {
    let r = routes::handle(
        p,
        host,
        &HttpRequest {
            method: "GET".into(),
            path: path.split('?').next().unwrap().into(),
            query: path.split_once('?').map_or("", |x| x.1).into(),
            headers: vec![],
            body: vec![],
        },
    );
    (r.status, String::from_utf8(r.body).unwrap())
}

const SERVER: (&str, i32) = ("server", 0);
const W0: (&str, i32) = ("worker", 0);
const W1: (&str, i32) = ("worker", 1);

#[test]
fn a_killed_worker_gives_the_seven_stages_and_five_phases() {
    // Timeout 2 s, checks every 100 ms. Checkpoint 1000..2500; worker-1 beats
    // every 200 ms until 4000, is killed at 4100; restarts 500 ms after the
    // detection, recovers 2 s later, everyone 300 ms after that.
    let (mut p, mut host) = start(r#"{"heartbeat_timeout_s": 2, "check_every_ms": 100}"#);
    assert!(host.timers.is_empty(), "no job yet, no check timer");
    let mut rows = vec![
        (1000, SERVER, Ev::Node("checkpoint-begin")),
        (2500, SERVER, Ev::Node("checkpoint-end")),
    ];
    for t in (0..=4000).step_by(200) {
        rows.push((t, W1, Ev::Hb));
    }
    p.on_events(&mut host, &batch(&rows));
    assert_eq!(
        host.timers.values().next().map(|t| (t.after_ms, t.repeat)),
        Some((100, true)),
        "the job's first report starts a repeating check timer"
    );
    p.on_events(&mut host, &batch(&[(4100, W1, Ev::Node("killed"))]));
    // Last heartbeat 4000: past the timeout after 6000, so the check at 6100 finds it.
    tick(&mut p, &mut host, 4200, 6000, 100);
    assert!(host.decisions_of("node-dead").is_empty(), "not before the timeout");
    tick(&mut p, &mut host, 6100, 6100, 100);
    let dead = host.decisions_of("node-dead");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].subject, "lr/worker-1");
    let body: Value = serde_json::from_str(&dead[0].body).unwrap();
    assert_eq!(body["detection_latency_ms"], 2100.0);
    assert_eq!(body["detection_latency_from_kill_ms"], 2000.0);
    assert_eq!(
        host.series(
            "paramserver.failure.detection.latency",
            &[("paramserver.latency.from", "kill")]
        ),
        vec![(T0 + 6100 * MS, 2.0)]
    );
    p.on_events(
        &mut host,
        &batch(&[
            (6600, W1, Ev::Node("restarted")),
            (6700, W1, Ev::Hb),
            (8600, W1, Ev::Node("recovered")),
            (8900, SERVER, Ev::Node("all-recovered")),
        ]),
    );
    let (code, body) = get(&p, &mut host, "/incidents?job=lr");
    assert_eq!(code, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    let inc = &v["incidents"][0];
    assert_eq!(inc["complete"], true);
    let ms: Vec<f64> = inc["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["duration_ms"].as_f64().unwrap())
        .collect();
    assert_eq!(ms, vec![1500.0, 2000.0, 500.0, 2000.0, 300.0]);
    let pct: Vec<f64> = inc["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["percentage"].as_f64().unwrap())
        .collect();
    assert_eq!(
        pct,
        vec![1500.0 / 63.0, 2000.0 / 63.0, 500.0 / 63.0, 2000.0 / 63.0, 300.0 / 63.0]
    );
    let sources: Vec<&str> = inc["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["source"].as_str().unwrap())
        .collect();
    assert_eq!(
        sources,
        vec!["event", "event", "event", "detector", "event", "event", "event"]
    );
    assert_eq!(
        inc["table_markdown"],
        "|Phase|From|To|Time Cost|Percentage|\n|---|---|---|---|---|\n\
         |1|Start CheckPoint|End CheckPoint|1,500ms|24%|\n\
         |2|Kill A Running Process|Master Detect Process Failure|2,000ms|32%|\n\
         |3|Master Detect Process Failure|Failed Process Restart Success|500ms|8%|\n\
         |4|Failed Process Restart Success|Failed Process Recover Success|2,000ms|32%|\n\
         |5|Failed Process Recover Success|All Process Recover Success|300ms|5%|\n"
    );
    // Completion outputs: a decision, a log record, phase points in seconds.
    assert_eq!(host.decisions_of("recovery").len(), 1);
    assert!(host.records.iter().any(|r| r.event_name == "paramserver.incident"));
    let phase4 = host.series("paramserver.recovery.phase.duration", &[("paramserver.phase", "4")]);
    assert_eq!(phase4, vec![(T0 + 8900 * MS, 2.0)]);
    assert!(
        host.points.iter().all(|p| !p.unit.is_empty()),
        "every metric has a unit"
    );
    let (_, md) = get(&p, &mut host, "/incidents.md");
    assert!(md.starts_with("### Incident 1 — job lr, worker-1\n\n|Phase|From|To|Time Cost|Percentage|"));
}

#[test]
fn detection_without_a_reported_kill_and_revival_by_heartbeat() {
    let (mut p, mut host) = start(r#"{"heartbeat_timeout_s": 1, "check_every_ms": 50}"#);
    p.on_events(
        &mut host,
        &batch(&[(0, W0, Ev::Hb), (0, W1, Ev::Hb), (900, W0, Ev::Hb)]),
    );
    // Table: (check at ms, processes dead after it).
    let cases: [(u64, &[&str]); 4] = [
        (1000, &[]),
        (1050, &["lr/worker-1"]),
        (1900, &["lr/worker-1"]),
        (1950, &["lr/worker-1", "lr/worker-0"]),
    ];
    for (t, want) in cases {
        tick(&mut p, &mut host, t, t, 50);
        let got: Vec<&str> = host
            .decisions_of("node-dead")
            .iter()
            .map(|d| d.subject.as_str())
            .collect();
        assert_eq!(got, want, "after the check at {t} ms");
    }
    // worker-1 beats again without saying it restarted: stage 5 from the heartbeat.
    p.on_events(&mut host, &batch(&[(2500, W1, Ev::Hb)]));
    let (_, body) = get(&p, &mut host, "/incidents");
    let v: Value = serde_json::from_str(&body).unwrap();
    let inc = v["incidents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["process"] == "worker-1")
        .unwrap();
    assert_eq!(inc["stages"][2]["source"], "last-heartbeat", "kill time estimated");
    assert_eq!(inc["stages"][4]["source"], "heartbeat");
    assert_eq!(inc["phases"][1]["duration_ms"], 1050.0);
    assert_eq!(inc["phases"][2]["duration_ms"], 1450.0);
    assert_eq!(inc["detection_latency_ms"]["from_last_heartbeat"], 1050.0);
    assert_eq!(inc["detection_latency_ms"]["from_kill"], Value::Null);
    assert!(
        host.logs
            .iter()
            .any(|(l, m)| *l == Severity::Info && m.contains("heartbeats again"))
    );
}

#[test]
fn the_empty_data_node_is_an_event_and_leaves_the_barrier() {
    let (mut p, mut host) = start(r#"{"heartbeat_timeout_s": 1, "consistency": "bsp"}"#);
    let w2 = ("worker", 2);
    p.on_events(
        &mut host,
        &batch(&[
            (0, W0, Ev::Hb),
            (0, w2, Ev::Hb),
            (800, w2, Ev::Hb), // trails its no-data report
            (0, W0, Ev::Clock(0)),
            (0, W1, Ev::Clock(0)),
            (0, w2, Ev::Clock(0)),
            (100, W0, Ev::Clock(1)), // waits: worker-1 and worker-2 are at 0
            (200, W1, Ev::Clock(1)), // waits for worker-2
        ]),
    );
    let clocks = |p: &ParamServer, host: &mut FakeHost| -> Value {
        let (_, b) = get(p, host, "/clocks");
        serde_json::from_str::<Value>(&b).unwrap()["jobs"][0].clone()
    };
    let c = clocks(&p, &mut host);
    assert_eq!(c["min_clock"], 0);
    assert_eq!(c["stragglers"], serde_json::json!(["worker-2"]));
    assert_eq!(host.decisions_of("straggler").len(), 1);
    p.on_events(&mut host, &batch(&[(700, w2, Ev::Node("no-data"))]));
    let d = host.decisions_of("no-data-node");
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].subject, "lr/worker-2");
    let c = clocks(&p, &mut host);
    assert_eq!(c["min_clock"], 1, "the barrier no longer waits for worker-2");
    assert_eq!(c["stragglers"], serde_json::json!([]));
    let blocked: Vec<f64> = c["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["blocked_closed_ms"].as_f64().unwrap())
        .collect();
    assert_eq!(
        blocked,
        vec![600.0, 500.0, 0.0],
        "released when worker-2 left at 700 ms"
    );
    assert_eq!(c["no_data"][0]["process"], "worker-2");
    tick(&mut p, &mut host, 5000, 5000, 50);
    let dead: Vec<&str> = host
        .decisions_of("node-dead")
        .iter()
        .map(|d| d.subject.as_str())
        .collect();
    assert_eq!(dead, vec!["lr/worker-0"], "the node that left is not declared dead");
    assert_eq!(
        host.series("paramserver.blocked.time", &[("paramserver.process", "worker-0")]),
        vec![(T0 + 700 * MS, 0.6)]
    );
}

#[test]
fn ssp_staleness_points_follow_a_scripted_schedule() {
    let (mut p, mut host) = start(r#"{"consistency": "ssp", "staleness": 1}"#);
    // (ms, worker index, clock) -> staleness of worker 0, 1, 2 after it (X: not reported yet).
    const X: u64 = u64::MAX;
    let script: [(u64, i32, u64, [u64; 3]); 6] = [
        (0, 0, 0, [0, X, X]),
        (0, 1, 0, [0, 0, X]),
        (0, 2, 0, [0, 0, 0]),
        (100, 0, 1, [0, 1, 1]),
        (200, 0, 2, [0, 2, 2]),
        (300, 1, 2, [0, 0, 2]),
    ];
    for (ms, w, clock, want) in script {
        p.on_events(&mut host, &batch(&[(ms, ("worker", w), Ev::Clock(clock))]));
        for (i, s) in want.iter().enumerate() {
            let k = format!("worker-{i}");
            let got = host.series("paramserver.staleness", &[("paramserver.process", &k)]);
            let want = (*s != X).then_some(*s as f64);
            assert_eq!(got.last().map(|x| x.1), want, "{k} after {ms} ms");
        }
    }
    // SSP(1): the straggler threshold is 2 clocks; worker-2 is named once.
    let s = host.decisions_of("straggler");
    assert_eq!(s.len(), 2, "worker-1 at 200 ms, worker-2 at 200 ms");
    let (_, body) = get(&p, &mut host, "/stragglers");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["jobs"][0]["stragglers"][0]["worker"], "worker-2");
    assert_eq!(v["jobs"][0]["stragglers"].as_array().unwrap().len(), 1);
}

#[test]
fn checkpoint_cost_and_share_of_training_time() {
    let (mut p, mut host) = start("{}");
    p.on_events(
        &mut host,
        &batch(&[
            (0, W0, Ev::Clock(0)),
            (1000, SERVER, Ev::Node("checkpoint-begin")),
            (1500, SERVER, Ev::Node("checkpoint-end")),
            (5000, SERVER, Ev::Node("checkpoint-begin")),
            (6000, SERVER, Ev::Node("checkpoint-end")),
            (10000, W0, Ev::Clock(9)),
        ]),
    );
    assert_eq!(
        host.series("paramserver.checkpoint.duration", &[]),
        vec![(T0 + 1500 * MS, 0.5), (T0 + 6000 * MS, 1.0)]
    );
    assert_eq!(
        host.series("paramserver.checkpoint.time_share", &[]),
        vec![(T0 + 1500 * MS, 0.5 / 1.5), (T0 + 6000 * MS, 0.25)]
    );
    let (_, body) = get(&p, &mut host, "/checkpoints");
    let v: Value = serde_json::from_str(&body).unwrap();
    let j = &v["jobs"][0];
    assert_eq!(j["total_ms"], 1500.0);
    assert_eq!(j["training_ms"], 10000.0);
    assert_eq!(j["share_of_training"], 0.15);
    assert_eq!(j["checkpoints"][0]["clock"], 3);
}

#[test]
fn routes_refuse_what_they_do_not_serve() {
    let (p, mut host) = start("{}");
    for (method, path, code) in [
        ("GET", "/nope", 404),
        ("POST", "/clocks", 405),
        ("GET", "/state", 200),
        ("GET", "/stragglers/", 200),
    ] {
        let r = routes::handle(
            &p,
            &mut host,
            &HttpRequest {
                method: method.into(),
                path: path.into(),
                query: String::new(),
                headers: vec![],
                body: vec![],
            },
        );
        assert_eq!(r.status, code, "{method} {path}");
    }
}

#[test]
fn other_jobs_are_ignored_when_one_is_named() {
    let (mut p, mut host) = start(r#"{"job": "other"}"#);
    p.on_events(&mut host, &batch(&[(0, W0, Ev::Hb), (0, W0, Ev::Clock(1))]));
    assert!(p.jobs.is_empty());
    assert_eq!(p.counters.ignored_other_job, 2);
}

/// A job whose every process stops at once ended: no process is declared
/// dead, no incident opens, one `job-ended` finding says so. One process
/// silent while the others beat is still a failure.
#[test]
fn a_job_that_stops_as_a_whole_ended_and_failed_nowhere() {
    let (mut p, mut host) = start(r#"{"heartbeat_timeout_s": 1, "check_every_ms": 50}"#);
    let mut rows = Vec::new();
    for t in (0..=2000).step_by(200) {
        // worker-1 stops at 1000; the others at 2000, with the job.
        for who in [SERVER, W0, W1] {
            if who != W1 || t <= 1000 {
                rows.push((t as u64 + who.1 as u64, who, Ev::Hb));
            }
        }
    }
    p.on_events(&mut host, &batch(&rows));
    tick(&mut p, &mut host, 2050, 6000, 50);
    let dead: Vec<&str> = host
        .decisions_of("node-dead")
        .iter()
        .map(|d| d.subject.as_str())
        .collect();
    assert_eq!(dead, ["lr/worker-1"], "only the one that stopped while the others beat");
    let ended = host.decisions_of("job-ended");
    assert_eq!(ended.len(), 1);
    assert!(
        ended[0].reason.contains("the job ended; no failure declared"),
        "{}",
        ended[0].reason
    );
    assert!(ended[0].attributes.iter().any(|a| a.key == "sonde.finding.ended"));
    assert_eq!(p.counters.incidents, 1);
    assert_eq!(p.counters.jobs_ended, 1);
}

#[test]
fn a_restart_keeps_incidents_clocks_and_counters() {
    let (mut p, mut host) =
        start(r#"{"heartbeat_timeout_s": 2, "check_every_ms": 100, "consistency": "ssp", "staleness": 2}"#);
    let mut rows = vec![
        (1000, SERVER, Ev::Node("checkpoint-begin")),
        (2500, SERVER, Ev::Node("checkpoint-end")),
        (3000, W0, Ev::Clock(4)),
        (3000, W1, Ev::Clock(2)),
    ];
    for t in (0..=4000).step_by(200) {
        rows.push((t, W1, Ev::Hb));
        rows.push((t, W0, Ev::Hb));
    }
    p.on_events(&mut host, &batch(&rows));
    p.on_events(&mut host, &batch(&[(4100, W1, Ev::Node("killed"))]));
    for t in (4200..=6000).step_by(200) {
        p.on_events(&mut host, &batch(&[(t, W0, Ev::Hb)]));
    }
    tick(&mut p, &mut host, 4200, 6100, 100);
    assert_eq!(host.decisions_of("node-dead").len(), 1);
    let paths = ["/incidents?job=lr", "/clocks?job=lr", "/checkpoints?job=lr"];
    let before: Vec<(u16, String)> = paths.iter().map(|q| get(&p, &mut host, q)).collect();
    assert!(before.iter().all(|(c, _)| *c == 200), "{before:?}");
    assert!(host.store.kv.contains_key("job/lr"), "saved at the check");

    // A new sonde process over the same state store, at once.
    let settings = || {
        Settings::parse(r#"{"heartbeat_timeout_s": 2, "check_every_ms": 100, "consistency": "ssp", "staleness": 2}"#)
            .unwrap()
    };
    let mut again = host.restarted(host.now);
    let q = ParamServer::start(&mut again, settings());
    let after: Vec<(u16, String)> = paths.iter().map(|r| get(&q, &mut again, r)).collect();
    assert_eq!(
        after, before,
        "the same incidents, clocks and checkpoints after the restart"
    );
    assert_eq!(q.counters.detections, p.counters.detections);
    assert_eq!(
        q.next_incident, p.next_incident,
        "the next incident gets the next number"
    );
    assert!(!again.timers.is_empty(), "a restored job runs the check timer");

    // Restarted 1.5 s later: worker-0 (last beat at 6000, alive) gets a fresh
    // timeout from the restart, so the check at 9000 does not declare it dead.
    let mut later = host.restarted(T0 + 7500 * MS);
    let mut r = ParamServer::start(&mut later, settings());
    later.now = T0 + 9000 * MS;
    let id = *later.timers.keys().next().unwrap();
    r.on_timer(&mut later, id);
    assert!(later.decisions_of("node-dead").is_empty(), "{:?}", later.decisions);
}
