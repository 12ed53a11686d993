//! The clockwork plugin end to end: a simulated serving controller (Poisson
//! open loop over three models on two GPUs, models loaded on first use so
//! the first requests are cold starts, tight SLOs for some requests, some
//! slow executions) reports its finished requests and actions to a real
//! sonde, two models as JSON and one through the official OpenTelemetry
//! Python SDK (OTLP/HTTP spans). Checked: both TSV files in
//! `CLOCKWORK_LOG_DIR`, row by row against the rules of Clockwork's code;
//! the plugin's summary; the metrics arriving at a real collector (rotel).
//! And: a `CLOCKWORK_LOG_DIR` that does not exist gets no files and a clear
//! message.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use sonde_e2e::*;

const MS: u64 = 1_000_000;
const LOAD: u64 = 120 * MS;

/// xorshift64*: a deterministic workload without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
    fn exp(&mut self, rate_per_s: f64) -> u64 {
        (-(1.0 - self.next()).ln() / rate_per_s * 1e9) as u64
    }
}

fn b1(model: u64) -> u64 {
    2 * MS + model * MS / 2
}

fn exec(model: u64, b: u64) -> u64 {
    b1(model) + b1(model) * (b - 1) / 4
}

/// A small controller: per GPU, FIFO queues per model, batches of 1/2/4,
/// weights loaded on first use (120 ms), timeouts when a request cannot start
/// in time. Returns (requests, actions) in sonde's JSON ingest form.
fn simulate(start: u64, seconds: f64) -> (Vec<Value>, Vec<Value>) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let rates = [(1u64, 120.0), (2, 70.0), (3, 50.0)];
    let mut arrivals: Vec<(u64, u64, f64)> = Vec::new(); // (time, model, slo_factor)
    for (m, rate) in rates {
        let mut t = start;
        loop {
            t += rng.exp(rate);
            if t > start + (seconds * 1e9) as u64 {
                break;
            }
            // One in eight asks for an SLO of 1.5 × its batch-1 latency: too tight under load.
            let f = if rng.next() < 0.125 { 1.5 } else { 0.0 };
            arrivals.push((t, m, f));
        }
    }
    arrivals.sort_by_key(|a| a.0);
    let gpu_of = |m: u64| (m % 2) as u32;
    let mut free_at = [start, start];
    let mut loaded_at: BTreeMap<u64, u64> = BTreeMap::new();
    let mut queues: BTreeMap<u64, Vec<(u64, u64, f64)>> = BTreeMap::new();
    let (mut requests, mut actions) = (Vec::new(), Vec::new());
    let mut next_action = 1u64;
    let mut next_request = 1u64;
    let mut infers = 0u64;
    let slo = |m: u64, f: f64| if f > 0.0 { (b1(m) as f64 * f) as u64 } else { 100 * MS };
    let copies = |loaded_at: &BTreeMap<u64, u64>, m: u64, t: u64| loaded_at.get(&m).is_some_and(|&l| l <= t) as u32;
    let mut i = 0;
    loop {
        // The next thing to happen: an arrival, or a GPU becoming free with work queued.
        let next_arrival = arrivals.get(i).map(|a| a.0);
        let busy_gpu = (0..2u32)
            .filter(|g| queues.iter().any(|(m, q)| gpu_of(*m) == *g && !q.is_empty()))
            .min_by_key(|g| free_at[*g as usize]);
        match (next_arrival, busy_gpu) {
            (Some(ta), Some(g)) if ta <= free_at[g as usize] => {}
            (Some(_), None) => {}
            (None, None) => break,
            (_, Some(g)) => {
                let t = free_at[g as usize];
                let m = *queues
                    .iter()
                    .filter(|(m, q)| gpu_of(**m) == g && !q.is_empty())
                    .min_by_key(|(_, q)| q[0].0)
                    .unwrap()
                    .0;
                if let std::collections::btree_map::Entry::Vacant(slot) = loaded_at.entry(m) {
                    // A long weights load: the first requests of every model miss (cold starts).
                    let done = t + 300_000 + LOAD;
                    actions.push(
                        json!({"action_id": next_action, "action_type": 1, "worker_id": 0, "gpu_id": g,
                        "model_id": m, "expected_exec_duration_ns": LOAD, "worker_exec_duration_ns": LOAD,
                        "sent_ns": t, "expected_exec_complete_ns": done, "worker_exec_complete_ns": done,
                        "action_received_ns": t + 300_000, "result_sent_ns": done + 50_000,
                        "result_received_ns": done + 350_000, "requests_queued": queues[&m].len(), "copies_loaded": 0}),
                    );
                    next_action += 1;
                    slot.insert(done);
                    free_at[g as usize] = done;
                    continue;
                }
                let q = queues.get_mut(&m).unwrap();
                // Requests that cannot finish even alone time out at arrival + exec SLO.
                let est1 = exec(m, 1);
                q.retain(|&(id, a, f)| {
                    let exec_slo = slo(m, f).saturating_sub(5 * MS).max(15 * MS);
                    if a + exec_slo < t + est1 {
                        requests.push(json!({"request_id": id, "model_id": m, "slo_factor": f, "arrival_ns": a,
                            "departure_ns": a + exec_slo, "deadline_ns": a + slo(m, f), "result": 4,
                            "arrival_copies": copies(&loaded_at, m, a), "departure_copies": copies(&loaded_at, m, a + exec_slo)}));
                        false
                    } else {
                        true
                    }
                });
                if q.is_empty() {
                    continue;
                }
                let b = [4usize, 2, 1].into_iter().find(|&b| q.len() >= b).unwrap();
                let batch: Vec<_> = q.drain(..b).collect();
                infers += 1;
                let expected = exec(m, b as u64);
                // Every seventh infer runs 60% long: a misprediction.
                let actual = if infers.is_multiple_of(7) {
                    expected * 8 / 5
                } else {
                    expected
                };
                let received = t + 300_000;
                let done = received + actual;
                let (result_sent, result_received) = (done + 150_000, done + 450_000);
                let departure = result_received + 50_000;
                let in_time = batch.iter().filter(|&&(_, a, f)| departure <= a + slo(m, f)).count();
                let aid = next_action;
                next_action += 1;
                actions.push(
                    json!({"action_id": aid, "action_type": 2, "worker_id": 0, "gpu_id": g, "model_id": m,
                    "batch_size": b, "expected_exec_duration_ns": expected, "worker_exec_duration_ns": actual,
                    "sent_ns": t, "expected_exec_complete_ns": received + expected, "worker_exec_complete_ns": done,
                    "expected_gpu_clock_mhz": 1380, "gpu_clock_before_mhz": 1380, "gpu_clock_after_mhz": 1365,
                    "copy_output_complete_ns": done + 100_000, "action_received_ns": received,
                    "result_sent_ns": result_sent, "result_received_ns": result_received,
                    "result_processed_ns": result_received + 20_000, "requests_queued": q.len() + b,
                    "copies_loaded": 1, "requests_in_time": in_time}),
                );
                for (id, a, f) in batch {
                    requests.push(
                        json!({"request_id": id, "model_id": m, "slo_factor": f, "arrival_ns": a,
                        "departure_ns": departure, "deadline_ns": a + slo(m, f), "result": 0,
                        "arrival_copies": copies(&loaded_at, m, a), "departure_copies": 1, "action_id": aid}),
                    );
                }
                free_at[g as usize] = done;
                continue;
            }
        }
        let (t, m, f) = arrivals[i];
        i += 1;
        queues.entry(m).or_default().push((next_request, t, f));
        next_request += 1;
        let g = gpu_of(m) as usize;
        free_at[g] = free_at[g].max(t.min(free_at[g]));
        if free_at[g] < t
            && queues
                .iter()
                .filter(|(mm, _)| gpu_of(**mm) as usize == g)
                .all(|(_, q)| q.len() <= 1)
        {
            free_at[g] = t;
        }
    }
    (requests, actions)
}

/// What Clockwork's request logger writes for a row (reference A.2), computed here independently.
fn expected_request_line(r: &Value) -> String {
    let u = |k: &str| r[k].as_u64().unwrap_or(0);
    let (arrival, departure, deadline, result) = (
        u("arrival_ns"),
        u("departure_ns"),
        u("deadline_ns"),
        r["result"].as_i64().unwrap(),
    );
    let (rel, met) = if deadline == 0 {
        (-1, result == 0)
    } else if deadline < arrival {
        (0, false)
    } else {
        ((deadline - arrival) as i64, result == 0 && departure <= deadline)
    };
    let (ac, dc) = (u("arrival_copies"), u("departure_copies"));
    let f = r["slo_factor"].as_f64().unwrap();
    format!(
        "{departure}\t{}\t{result}\t0\t{}\t{}\t{}\t{rel}\t{}\t{ac}\t{dc}\t{}",
        u("request_id"),
        u("model_id"),
        if f == 0.0 { "0".to_string() } else { f.to_string() },
        departure - arrival,
        met as u8,
        (dc > ac && ac == 0) as u8
    )
}

fn spawn_sonde(dir: &Path, log_dir: &Path, extra: &[String]) -> Sonde {
    let pdir = dir.join("plugins");
    std::fs::create_dir_all(&pdir).unwrap();
    std::fs::create_dir_all(dir.join("sinks")).unwrap();
    std::fs::copy(plugin_file("bundled/clockwork.wasm"), pdir.join("clockwork.wasm")).unwrap();
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let cache = repo().join("target/test-plugin-cache");
    std::fs::create_dir_all(&cache).unwrap();
    let _ = std::os::unix::fs::symlink(&cache, data.join("cache"));
    let api = format!("127.0.0.1:{}", free_port());
    let out = dir.join("sonde.out");
    let f = std::fs::File::create(&out).unwrap();
    let child = Command::new(sonde_bin())
        .arg("--data-dir")
        .arg(&data)
        .arg("--plugins-dir")
        .arg(&pdir)
        .arg("--sinks-dir")
        .arg(dir.join("sinks"))
        .args(["--listen", &api])
        .args(["--set", "ingest.otlp_grpc_listen=\"off\""])
        .args(extra)
        .env("CLOCKWORK_LOG_DIR", log_dir)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdin(Stdio::null())
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .expect("starting sonde");
    let s = Sonde {
        proc: Proc { child, name: "sonde" },
        api,
        out,
        dir: dir.to_path_buf(),
    };
    assert!(
        wait_for(Duration::from_secs(60), || s.get("/api/ready").0 == 200),
        "not ready:\n{}",
        s.output()
    );
    assert!(
        wait_for(Duration::from_secs(30), || s.get("/api/plugins/clockwork/summary").0
            == 200),
        "clockwork did not start:\n{}",
        s.output()
    );
    s
}

#[test]
fn a_simulated_serving_workload_gives_clockworks_logs_and_live_slo_metrics() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let log_dir = dir.join("clockwork-logs");
    std::fs::create_dir(&log_dir).unwrap();
    let rotel = Rotel::start(dir);
    let otlp_http = free_port();
    let settings = r#"plugin.clockwork.settings={window_s=1.0, lag_ms=2500, emit_every_ms=200, profiles={"1"={exec_ns={"1"=2500000,"2"=3125000,"4"=4375000}},"2"={exec_ns={"1"=3000000,"2"=3750000,"4"=5250000}},"3"={exec_ns={"1"=3500000,"2"=4375000,"4"=6125000}}}}"#;
    let sonde = spawn_sonde(
        dir,
        &log_dir,
        &[
            "--export-endpoint".into(),
            format!("http://127.0.0.1:{}", rotel.grpc),
            "--set".into(),
            "export.interval_ms=200".into(),
            "--set".into(),
            format!("ingest.otlp_http_listen=\"127.0.0.1:{otlp_http}\""),
            "--set".into(),
            settings.into(),
        ],
    );
    let banner = sonde.output();
    assert!(
        banner.contains(&format!("clockwork: {} (from CLOCKWORK_LOG_DIR)", log_dir.display())),
        "the banner names where the logs go:\n{banner}"
    );

    // Three seconds of traffic ending now, so every window closes in real time.
    let start = now_ns() - 3_000 * MS;
    let (requests, actions) = simulate(start, 3.0);
    let of = |rows: &[Value], m: u64| -> Vec<Value> { rows.iter().filter(|r| r["model_id"] == m).cloned().collect() };
    let (otel_requests, otel_actions) = (of(&requests, 3), of(&actions, 3));
    assert!(
        otel_requests.len() > 50 && requests.len() > 400,
        "{} requests",
        requests.len()
    );

    // Model 3 through the OpenTelemetry SDK, as spans.
    let rows_file = dir.join("model3.json");
    std::fs::write(
        &rows_file,
        json!({"requests": otel_requests, "actions": otel_actions}).to_string(),
    )
    .unwrap();
    let py = Command::new("python3")
        .arg(repo().join("tests/py/clockwork_otel.py"))
        .arg(format!("http://127.0.0.1:{otlp_http}"))
        .arg(&rows_file)
        .output()
        .expect("python3");
    assert!(py.status.success(), "{}", String::from_utf8_lossy(&py.stderr));
    // Models 1 and 2 as JSON.
    let json_requests: Vec<Value> = requests.iter().filter(|r| r["model_id"] != 3).cloned().collect();
    let json_actions: Vec<Value> = actions.iter().filter(|r| r["model_id"] != 3).cloned().collect();
    let (code, body) = post_json(
        &sonde.api,
        "/api/ingest",
        &json!({"origin": {"job": "clockwork-sim", "role": "controller"}, "requests": json_requests, "actions": json_actions}),
    );
    assert_eq!(code, 202, "{body}");

    // Every row reaches the plugin.
    let total = (requests.len(), actions.len());
    assert!(
        wait_for(Duration::from_secs(20), || {
            let s = sonde.json("/api/plugins/clockwork/summary");
            (
                s["requests_seen"].as_u64().unwrap() as usize,
                s["actions_seen"].as_u64().unwrap() as usize,
            ) == total
        }),
        "rows missing: {} vs {total:?}\n{}",
        sonde.json("/api/plugins/clockwork/summary"),
        sonde.output()
    );

    // The request log: Clockwork's header, then one line per request as its code writes it.
    let req_log = std::fs::read_to_string(log_dir.join("clockwork_request_log.tsv")).unwrap();
    let mut lines = req_log.lines();
    assert_eq!(
        lines.next().unwrap(),
        "t\trequest_id\tresult\tuser_id\tmodel_id\tslo_factor\tlatency\tdeadline\tdeadline_met\tarrival_count\tdeparture_count\tis_coldstart"
    );
    let mut got: Vec<String> = lines.map(str::to_string).collect();
    let mut want: Vec<String> = requests.iter().map(expected_request_line).collect();
    got.sort();
    want.sort();
    assert_eq!(got.len(), want.len());
    assert_eq!(got, want);
    let cold = got.iter().filter(|l| l.ends_with("\t1")).count();
    assert!(cold >= 3, "every model starts cold: {cold} cold-start rows");
    assert!(
        got.iter().any(|l| l.split('\t').nth(8) == Some("0")),
        "some requests missed"
    );
    assert!(
        !dir.join("sinks/clockwork_request_log.tsv").exists(),
        "not in sinks.dir"
    );

    // The action log: header, and per row t = result received, relative columns, goodput in ns.
    let act_log = std::fs::read_to_string(log_dir.join("clockwork_action_log.tsv")).unwrap();
    let mut lines = act_log.lines();
    assert_eq!(lines.next().unwrap().split('\t').count(), 23);
    let rows: BTreeMap<u64, Vec<u64>> = lines
        .map(|l| {
            let v: Vec<u64> = l.split('\t').map(|c| c.parse().unwrap()).collect();
            (v[1], v)
        })
        .collect();
    assert_eq!(rows.len(), actions.len());
    for a in &actions {
        let u = |k: &str| a[k].as_u64().unwrap_or(0);
        let row = &rows[&u("action_id")];
        let sent = u("sent_ns");
        assert_eq!(row[0], u("result_received_ns"), "t is when the result was received");
        assert_eq!(row[10], u("expected_exec_complete_ns") - sent);
        assert_eq!(row[16], u("action_received_ns") - sent);
        assert_eq!(row[18], u("result_received_ns") - sent);
        let fraction = if u("action_type") == 2 {
            u("requests_in_time") as f64 / u("batch_size") as f64
        } else {
            1.0
        };
        assert_eq!(
            row[20],
            (u("worker_exec_duration_ns") as f64 * fraction) as u64,
            "goodput in ns"
        );
    }

    // The analysis: every model's requests, cold starts among the miss causes.
    let summary = sonde.json("/api/plugins/clockwork/summary");
    for m in [1u64, 2, 3] {
        let s = summary["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["model_id"] == m)
            .unwrap();
        assert_eq!(
            s["requests"].as_u64().unwrap() as usize,
            of(&requests, m).len(),
            "model {m}"
        );
    }
    let misses = |cause: &str| -> u64 {
        summary["models"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["misses"][cause].as_u64().unwrap())
            .sum()
    };
    let missed = requests
        .iter()
        .filter(|r| expected_request_line(r).split('\t').nth(8) == Some("0"))
        .count() as u64;
    assert_eq!(
        CAUSES.iter().map(|c| misses(c)).sum::<u64>(),
        missed,
        "a cause for every miss: {summary}"
    );
    assert!(misses("coldstart") > 0, "{summary}");

    // The metrics at the collector: per-window figures and the counters.
    assert!(
        wait_for(Duration::from_secs(25), || {
            let pts = parse_rotel_points(&rotel.received());
            [
                "clockwork.goodput",
                "clockwork.slo.violation_rate",
                "clockwork.latency",
                "clockwork.gpu.utilization",
                "clockwork.request.time",
                "clockwork.batch_size.mean",
            ]
            .iter()
            .all(|n| {
                (1..=3).all(|m| {
                    *n == "clockwork.gpu.utilization"
                        || pts
                            .iter()
                            .any(|p| p.name == *n && p.has(&format!("clockwork.model.id=Str({m})")))
                })
            }) && pts
                .iter()
                .any(|p| p.name == "clockwork.gpu.utilization" && p.value > 0.0)
                && pts.iter().any(|p| {
                    p.name == "clockwork.slo.misses" && p.has("clockwork.miss.cause=Str(coldstart)") && p.value > 0.0
                })
        }),
        "metrics missing at the collector:\n{}",
        sonde.output()
    );
    let pts = parse_rotel_points(&rotel.received());
    for m in [1u64, 2, 3] {
        let last = pts
            .iter()
            .filter(|p| p.name == "clockwork.requests" && p.has(&format!("clockwork.model.id=Str({m})")))
            .map(|p| p.value)
            .fold(0.0, f64::max);
        assert_eq!(last as usize, of(&requests, m).len(), "requests counter of model {m}");
    }
    let goodput: f64 = pts
        .iter()
        .filter(|p| p.name == "clockwork.goodput")
        .map(|p| p.value)
        .sum::<f64>();
    assert!(goodput > 0.0);
}

const CAUSES: [&str; 5] = ["error", "coldstart", "late_send", "misprediction", "queueing"];

#[test]
fn a_missing_clockwork_log_dir_writes_no_files_and_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-dir");
    let sonde = spawn_sonde(
        tmp.path(),
        &missing,
        &["--set".into(), "ingest.otlp_http_listen=\"off\"".into()],
    );
    let out = sonde.output();
    assert!(
        out.contains("CLOCKWORK_LOG_DIR") && out.contains("no clockwork files will be written"),
        "{out}"
    );
    let (code, _) = post_json(
        &sonde.api,
        "/api/ingest",
        &json!({"requests": [{"request_id": 1, "model_id": 1, "arrival_ns": 1000, "departure_ns": 2000}]}),
    );
    assert_eq!(code, 202);
    assert!(wait_for(Duration::from_secs(10), || sonde
        .json("/api/plugins/clockwork/summary")["requests_seen"]
        == 1));
    let s = sonde.json("/api/plugins/clockwork/summary");
    assert!(
        s["logs"][0]["error"].as_str().unwrap().contains("does not exist"),
        "{s}"
    );
    assert!(!missing.exists(), "the directory is never created");
    assert!(
        std::fs::read_dir(tmp.path().join("sinks")).unwrap().next().is_none(),
        "nothing falls back to sinks.dir"
    );
}
