//! The paramserver plugin end to end, through the real sonde binary:
//!
//! 1. A parameter server and three workers run as real processes on loopback
//!    (tests/py/paramserver_sim.py): the server reports over OTLP through the
//!    official OpenTelemetry SDK, the workers over the JSON ingest. The server
//!    checkpoints for 1.5 s; this test (the launcher) SIGKILLs worker 1,
//!    restarts it 0.5 s after sonde detected the failure (heartbeat timeout
//!    2 s); it recovers in 2 s and the server reports everyone back 0.3 s
//!    later. The phase table sonde computes must match those injected timings
//!    within TOLERANCE_S (phase 3 also holds the interpreter's start-up).
//!    A fourth worker gets no data: sonde reports it and never calls it dead.
//! 2. A scripted SSP schedule posted with explicit times: staleness and
//!    blocked time are checked exactly after every report.

use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use sonde_e2e::*;

const JOB: &str = "ps-e2e";
const CKPT_S: f64 = 1.5;
const TIMEOUT_S: f64 = 2.0;
const RESTART_S: f64 = 0.5;
const RECOVER_S: f64 = 2.0;
const ALL_S: f64 = 0.3;
const HB_S: f64 = 0.1;
const CHECK_MS: u64 = 50;
/// Every phase must be within this of what was injected. It covers a
/// heartbeat interval and a check interval on phase 2, sleep overshoot and
/// report latency on a busy two-core machine elsewhere.
const TOLERANCE_S: f64 = 0.25;

fn sim(args: &[String], name: &'static str, log: &std::path::Path) -> Proc {
    let out = std::fs::File::create(log).unwrap();
    let child = Command::new("python3")
        .arg(repo().join("tests/py/paramserver_sim.py"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("running python3");
    Proc { child, name }
}

fn incident_of(sonde: &Sonde, process: &str) -> Option<Value> {
    let v = sonde.json(&format!("/api/plugins/paramserver/incidents?job={JOB}"));
    v["incidents"]
        .as_array()?
        .iter()
        .find(|i| i["process"] == process)
        .cloned()
}

fn clocks(sonde: &Sonde, job: &str) -> Value {
    sonde.json(&format!("/api/plugins/paramserver/clocks?job={job}"))["jobs"][0].clone()
}

fn worker<'a>(c: &'a Value, name: &str) -> &'a Value {
    c["workers"]
        .as_array()
        .and_then(|w| w.iter().find(|x| x["worker"] == name))
        .unwrap_or_else(|| panic!("{name} missing from {c}"))
}

fn logs(dir: &std::path::Path) -> String {
    let mut s = String::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.path().extension().is_some_and(|x| x == "log") {
            s.push_str(&format!(
                "--- {}\n{}\n",
                e.path().display(),
                std::fs::read_to_string(e.path()).unwrap_or_default()
            ));
        }
    }
    s
}

#[test]
fn a_killed_worker_is_detected_and_its_recovery_matches_the_injected_timings() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let otlp = free_port();
    let otlp_listen = format!("ingest.otlp_http_listen=\"127.0.0.1:{otlp}\"");
    let settings = format!(
        "plugin.paramserver.settings={{heartbeat_timeout_s={TIMEOUT_S}, check_every_ms={CHECK_MS}, consistency=\"ssp\", staleness=2}}"
    );
    let sonde = Sonde::start(
        dir,
        &[(plugin_file("bundled/paramserver.wasm"), "paramserver")],
        &[
            "--set",
            &otlp_listen,
            "--set",
            "ingest.otlp_grpc_listen=\"off\"",
            "--set",
            &settings,
        ],
    );
    let port = free_port();
    let s = |v: &dyn ToString| v.to_string();
    let common = |extra: &[String]| -> Vec<String> {
        let mut v = vec![s(&"--port"), s(&port), s(&"--job"), s(&JOB), s(&"--hb-s"), s(&HB_S)];
        v.extend_from_slice(extra);
        v
    };
    let _server = sim(
        &[
            vec![s(&"server")],
            common(&[
                s(&"--otlp"),
                format!("http://127.0.0.1:{otlp}"),
                s(&"--staleness"),
                s(&2),
                s(&"--ckpt-at"),
                s(&3),
                s(&"--ckpt-s"),
                s(&CKPT_S),
                s(&"--all-s"),
                s(&ALL_S),
            ]),
        ]
        .concat(),
        "server",
        &dir.join("server.log"),
    );
    assert!(
        wait_for(Duration::from_secs(15), || TcpStream::connect(("127.0.0.1", port))
            .is_ok()),
        "the simulated server did not listen:\n{}",
        logs(dir)
    );
    let api = sonde.api.clone();
    let worker_args = |i: u32, extra: &[String]| {
        [
            vec![s(&"worker")],
            common(&[
                s(&"--sonde"),
                api.clone(),
                s(&"--index"),
                s(&i),
                s(&"--step-s"),
                s(&0.1),
            ]),
            extra.to_vec(),
        ]
        .concat()
    };
    // Worker 1 SIGKILLs itself after clock 8 (past the checkpoint at 3), once
    // the server has that clock: killed from here, it could die between
    // reporting a clock to sonde and sending it to the server, and the
    // others' long wait would start one clock later in sonde's view than in
    // the server's, or not show at all.
    const DIES_AFTER: u64 = 8;
    let mut workers: Vec<Proc> = (0..3)
        .map(|i| {
            let extra = if i == 1 {
                vec![s(&"--die-after-clock"), s(&DIES_AFTER)]
            } else {
                vec![]
            };
            sim(&worker_args(i, &extra), "worker", &dir.join(format!("worker-{i}.log")))
        })
        .collect();
    let _empty = sim(&worker_args(3, &[s(&"--no-data")]), "worker", &dir.join("worker-3.log"));

    // The checkpoint (over OTLP), then three more clocks for everyone.
    assert!(
        wait_for(Duration::from_secs(20), || {
            let c = sonde.json(&format!("/api/plugins/paramserver/checkpoints?job={JOB}"));
            c["jobs"][0]["checkpoints"].as_array().is_some_and(|a| !a.is_empty())
                && clocks(&sonde, JOB)["min_clock"].as_u64().is_some_and(|m| m >= 6)
        }),
        "no checkpoint and clock 6:\n{}\n{}",
        sonde.json("/api/plugins/paramserver/state"),
        logs(dir)
    );
    let ck = sonde.json(&format!("/api/plugins/paramserver/checkpoints?job={JOB}"));
    assert_eq!(
        ck["jobs"][0]["checkpoints"][0]["clock"], 3,
        "the clock attribute came over OTLP"
    );
    assert_eq!(ck["jobs"][0]["checkpoints"][0]["process"], "server-0");

    // Worker 1 dies (SIGKILL); the launcher says so.
    let _ = workers[1].child.wait();
    let killed_at: u64 = std::fs::read_to_string(dir.join("worker-1.log"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("worker 1: killed at ")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("worker 1 did not log its death:\n{}", logs(dir)));
    let (code, body) = post_json(
        &api,
        "/api/ingest",
        &json!({"origin": {"job": JOB, "node": "ps-node", "role": "worker", "index": 1},
                "node_events": [{"kind": "killed", "time_ns": killed_at, "exit_code": 137, "reason": "SIGKILL by the launcher"}]}),
    );
    assert_eq!(code, 202, "{body}");

    // sonde detects it; the launcher restarts it RESTART_S later.
    let mut detected = 0;
    assert!(
        wait_for(Duration::from_secs(10), || {
            detected = incident_of(&sonde, "worker-1")
                .and_then(|i| i["stages"][3]["time_ns"].as_u64())
                .unwrap_or(0);
            detected > 0
        }),
        "worker-1 was not detected:\n{}",
        sonde.json("/api/plugins/paramserver/state")
    );
    let restart_at = detected + (RESTART_S * 1e9) as u64;
    std::thread::sleep(Duration::from_nanos(restart_at.saturating_sub(now_ns())));
    let spawned = now_ns();
    workers[1] = sim(
        &worker_args(
            1,
            &[
                s(&"--restarted"),
                s(&"--start-clock"),
                s(&3),
                s(&"--recover-s"),
                s(&RECOVER_S),
            ],
        ),
        "worker",
        &dir.join("worker-1-restarted.log"),
    );
    let mut inc = Value::Null;
    assert!(
        wait_for(Duration::from_secs(15), || {
            inc = incident_of(&sonde, "worker-1").unwrap_or(Value::Null);
            inc["complete"] == true
        }),
        "the incident did not complete: {inc}\n{}",
        logs(dir)
    );
    println!(
        "{}launcher: restart spawned {} ms after the detection",
        inc["table_markdown"].as_str().unwrap(),
        (spawned - detected) / 1_000_000
    );

    // The phase table against the injected timings.
    let phases: Vec<f64> = inc["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["duration_ms"].as_f64().unwrap() / 1e3)
        .collect();
    let sources: Vec<&str> = inc["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["source"].as_str().unwrap())
        .collect();
    assert_eq!(
        sources,
        ["event", "event", "event", "detector", "event", "event", "event"]
    );
    // Phase 3 ends at the restarted worker's `restarted`, stamped when its
    // interpreter came up: the launcher's RESTART_S plus however long the
    // machine took to start it, which the worker's own log says.
    let restarted_ns: u64 = std::fs::read_to_string(dir.join("worker-1-restarted.log"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("worker 1: restarted at ")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("the restarted worker logged no start:\n{}", logs(dir)));
    let started_s = (restarted_ns.saturating_sub(detected)) as f64 / 1e9;
    let injected = [CKPT_S, TIMEOUT_S, RESTART_S, RECOVER_S, ALL_S];
    for (i, (&got, &want)) in phases.iter().zip(&injected).enumerate() {
        let (lo, hi) = if i == 2 {
            (want - TOLERANCE_S, started_s + TOLERANCE_S)
        } else {
            (want - TOLERANCE_S, want + TOLERANCE_S)
        };
        assert!(
            (lo..=hi).contains(&got),
            "phase {}: {got:.3} s, injected {want} s (allowed {lo:.2}..{hi:.2}); table:\n{}",
            i + 1,
            inc["table_markdown"].as_str().unwrap()
        );
    }
    let pct: f64 = inc["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["percentage"].as_f64().unwrap())
        .sum();
    assert!((pct - 100.0).abs() < 1e-6, "percentages add up to 100: {pct}");
    let lat = inc["detection_latency_ms"]["from_last_heartbeat"].as_f64().unwrap() / 1e3;
    assert!(
        (TIMEOUT_S..=TIMEOUT_S + TOLERANCE_S).contains(&lat),
        "detection latency from the last heartbeat {lat} s"
    );
    assert!(inc["total_ms"].as_f64().unwrap() > 0.0);

    // The markdown route, in the seed's shape.
    let (code, md) = sonde.get(&format!("/api/plugins/paramserver/incidents.md?job={JOB}"));
    assert_eq!(code, 200);
    let rows: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
    assert_eq!(rows[0], "|Phase|From|To|Time Cost|Percentage|");
    assert_eq!(rows.len(), 7, "{md}");
    assert!(
        rows[3].starts_with("|2|Kill A Running Process|Master Detect Process Failure|"),
        "{md}"
    );
    assert!(rows[3].ends_with("%|"), "{md}");

    // Decisions: dead, recovered, the empty-data node (never declared dead), a straggler.
    let d = sonde.json("/api/decisions?plugin=paramserver");
    let list = d["decisions"].as_array().unwrap().clone();
    let has = |kind: &str, subject: &str| list.iter().any(|x| x["kind"] == kind && x["subject"] == subject);
    assert!(has("node-dead", &format!("{JOB}/worker-1")), "{d}");
    assert!(has("recovery", &format!("{JOB}/worker-1")), "{d}");
    assert!(has("no-data-node", &format!("{JOB}/worker-3")), "{d}");
    assert!(
        !has("node-dead", &format!("{JOB}/worker-3")),
        "the empty-data node left; it did not die: {d}"
    );
    assert!(
        has("straggler", &format!("{JOB}/worker-1")),
        "the dead worker held the others back: {d}"
    );
    assert!(
        !list
            .iter()
            .any(|x| x["kind"] == "node-dead" && x["subject"] != format!("{JOB}/worker-1")),
        "only worker-1 died: {d}"
    );

    // Clocks: the server's over OTLP, the workers', blocked time on the dead worker.
    // worker-0's long block (worker-1's death to its recovery) closes when
    // worker-1 is back within the staleness bound: on a loaded machine that
    // can come seconds after the recovery, and an earlier short block may
    // already have closed, so wait for the long one.
    let long_block_s = TIMEOUT_S + RESTART_S + RECOVER_S - 0.5;
    assert!(
        wait_for(Duration::from_secs(30), || {
            let c = clocks(&sonde, JOB);
            worker(&c, "worker-0")["blocked_closed_ms"].as_f64().unwrap() / 1e3 >= long_block_s
                && c["servers"].as_array().is_some_and(|s| !s.is_empty())
        }),
        "{}\n{}",
        clocks(&sonde, JOB),
        logs(dir)
    );
    let c = clocks(&sonde, JOB);
    assert_eq!(c["model"], "ssp");
    assert_eq!(c["staleness_bound"], 2);
    assert_eq!(c["servers"][0]["server"], "server-0");
    assert_eq!(worker(&c, "worker-3")["left"], true);
    // worker-0 waited at least from worker-1's death to its recovery.
    let b0 = worker(&c, "worker-0")["blocked_closed_ms"].as_f64().unwrap() / 1e3;
    assert!(b0 >= long_block_s, "worker-0 blocked {b0} s\n{c}");
    assert!(
        worker(&c, "worker-1")["caused_blocked_ms"].as_f64().unwrap() > 0.0,
        "{c}"
    );
    let st = sonde.json(&format!("/api/plugins/paramserver/state?job={JOB}"));
    let server = st["jobs"][0]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["process"] == "server-0")
        .cloned()
        .unwrap();
    assert_eq!(server["state"], "alive", "{st}");
    assert!(server["heartbeats"].as_u64().unwrap() > 10, "OTLP heartbeats: {server}");
}

#[test]
fn ssp_staleness_and_blocked_time_follow_a_scripted_schedule() {
    let tmp = tempfile::tempdir().unwrap();
    let sonde = Sonde::start(
        tmp.path(),
        &[(plugin_file("bundled/paramserver.wasm"), "paramserver")],
        &[
            "--set",
            "plugin.paramserver.settings={consistency=\"ssp\", staleness=1, heartbeat_timeout_s=600}",
        ],
    );
    let t0 = now_ns() - 60_000_000_000;
    const S: u64 = 1_000_000_000;
    // (s after t0, worker, clock) -> staleness of w0, w1, w2 and blocked ms of w0, w1, w2.
    // SSP(1): after reporting c a worker goes on when the slowest is at >= c - 1.
    type Step = (u64, u32, u64, [i64; 3], [u64; 3]);
    let script: [Step; 11] = [
        (0, 0, 0, [0, -1, -1], [0, 0, 0]),
        (0, 1, 0, [0, 0, -1], [0, 0, 0]),
        (0, 2, 0, [0, 0, 0], [0, 0, 0]),
        (1, 0, 1, [0, 1, 1], [0, 0, 0]),
        (2, 0, 2, [0, 2, 2], [0, 0, 0]), // w0 waits from 2 s for the slowest at 1
        (3, 1, 1, [0, 1, 2], [0, 0, 0]),
        (4, 1, 2, [0, 0, 2], [0, 0, 0]),       // w1 waits from 4 s too
        (7, 2, 1, [0, 0, 1], [5000, 3000, 0]), // w2 reaches 1: both go on
        (8, 2, 2, [0, 0, 0], [5000, 3000, 0]),
        (9, 0, 3, [0, 1, 1], [5000, 3000, 0]),  // needs 2: the slowest is at 2
        (10, 0, 4, [0, 2, 2], [5000, 3000, 0]), // needs 3: waits from 10 s
    ];
    for (n, &(at, w, clock, stale, blocked)) in script.iter().enumerate() {
        let (code, body) = post_json(
            &sonde.api,
            "/api/ingest",
            &json!({"origin": {"job": "ssp", "role": "worker", "index": w},
                    "progress": [{"name": "clock", "value": clock, "time_ns": t0 + at * S}]}),
        );
        assert_eq!(code, 202, "{body}");
        let reports: u64 = script[..=n].iter().filter(|s| s.1 == w).count() as u64;
        let name = format!("worker-{w}");
        assert!(
            wait_for(Duration::from_secs(10), || {
                let c = clocks(&sonde, "ssp");
                c["workers"]
                    .as_array()
                    .and_then(|a| a.iter().find(|x| x["worker"] == name.as_str()))
                    .is_some_and(|x| x["reports"] == reports)
            }),
            "step {n} not taken in"
        );
        let c = clocks(&sonde, "ssp");
        for i in 0..3 {
            let k = format!("worker-{i}");
            let Some(x) = c["workers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["worker"] == k.as_str())
            else {
                assert_eq!(stale[i], -1, "step {n}: {k} missing");
                continue;
            };
            assert_eq!(
                x["staleness"].as_i64().unwrap(),
                stale[i],
                "step {n}: staleness of {k}\n{c}"
            );
            assert_eq!(
                x["blocked_closed_ms"].as_f64().unwrap(),
                blocked[i] as f64,
                "step {n}: blocked ms of {k}\n{c}"
            );
        }
    }
    let c = clocks(&sonde, "ssp");
    assert_eq!(worker(&c, "worker-2")["caused_blocked_ms"], 8000.0);
    assert_eq!(
        worker(&c, "worker-0")["waiting_since_ns"],
        json!(t0 + 10 * S),
        "w0 waits again after 4"
    );
    // SSP(1): straggler at 2 clocks behind; worker-2 was named when it was.
    let d = sonde.json("/api/decisions?plugin=paramserver");
    assert!(
        d["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["kind"] == "straggler" && x["subject"] == "ssp/worker-2"),
        "{d}"
    );
}
