//! The author's test loop end to end: `GET /api/record` (through the real
//! `sonde record` command) captures what a running sonde hands its plugins,
//! and `sonde plugin test` replays it through a plugin with no sonde
//! running, in the host's own sandbox, on the recording's clock.
//!
//! - a real training loop (the OpenTelemetry SDK through OTLP) drives the
//!   bundled determined plugin while it is recorded; the replay makes the
//!   same decisions the live plugin exported to a real collector;
//! - the testbed plugin shows that timers fire on the recording's clock,
//!   that WASI stays denied, and that points, log records, decisions, sink
//!   rows and route answers are all printed;
//! - bad input of every kind gets a clear message and a non-zero exit;
//! - the recording is bounded: one at a time, a byte cap, a seconds cap.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use sonde_e2e::*;

/// An attribute of a log record as rotel prints it: `key=Str(value)` → value.
fn attr(log: &SeenLog, key: &str) -> Option<String> {
    log.attrs.iter().find_map(|a| {
        let v = a.strip_prefix(key)?.strip_prefix('=')?;
        Some(
            v.strip_prefix("Str(")
                .and_then(|v| v.strip_suffix(')'))
                .unwrap_or(v)
                .to_string(),
        )
    })
}

/// (kind, subject, body) of every decision the collector received, in order.
fn exported_decisions(rotel: &Rotel) -> Vec<(String, String, Value)> {
    parse_rotel_logs(&rotel.received())
        .iter()
        .filter(|l| l.event_name == "sonde.decision")
        .map(|l| {
            (
                attr(l, "sonde.decision.kind").unwrap_or_default(),
                attr(l, "sonde.decision.subject").unwrap_or_default(),
                serde_json::from_str(&l.body).unwrap_or(Value::String(l.body.clone())),
            )
        })
        .collect()
}

/// (kind, subject, body) of the replay's decisions.
fn replayed_decisions(report: &Value) -> Vec<(String, String, Value)> {
    report["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap().to_string(),
                d["subject"].as_str().unwrap().to_string(),
                d["body"].clone(),
            )
        })
        .collect()
}

const DETERMINED_SETTINGS: &str =
    r#"{"begin_on_batch": 3, "end_after_batch": 8, "flush_every_s": 1.0, "lag_ms": 1000, "deliver_every_ms": 200}"#;

#[test]
fn a_recorded_training_run_replays_to_the_decisions_the_live_plugin_made() {
    let tmp = tempfile::tempdir().unwrap();
    let rotel = Rotel::start(tmp.path());
    let otlp = free_port();
    let endpoint = format!("http://127.0.0.1:{}", rotel.grpc);
    let receiver = format!("ingest.otlp_grpc_listen=\"127.0.0.1:{otlp}\"");
    let settings = format!(
        "plugin.determined.settings={}",
        DETERMINED_SETTINGS.replace(": ", "=").replace('"', "")
    );
    let s = Sonde::start(
        &tmp.path().join("sonde"),
        &[(plugin_file("bundled/determined.wasm"), "determined")],
        &[
            "--export-endpoint",
            &endpoint,
            "--set",
            "export.interval_ms=200",
            "--set",
            &settings,
            "--set",
            &receiver,
        ],
    );
    let rec = tmp.path().join("run.jsonl");
    // The whole run, and the plugin's lag after it, inside the recording.
    let recorded = record_while(&s, 12, &rec, || {
        let script = repo().join("tests/py/train_otel.py");
        let loop_out = Command::new("python3")
            .arg(&script)
            .args([&format!("http://127.0.0.1:{otlp}"), "grpc", "12", "0.15"])
            .arg(tmp.path().join("loop.json"))
            .args(["--job", "replayed"])
            .output()
            .unwrap();
        assert!(
            loop_out.status.success(),
            "train_otel.py failed (`./dev setup` installs the OpenTelemetry SDK):\n{}",
            String::from_utf8_lossy(&loop_out.stderr)
        );
    });
    let said = String::from_utf8_lossy(&recorded.stdout);
    assert!(
        recorded.status.success(),
        "sonde record: {said}{}",
        String::from_utf8_lossy(&recorded.stderr)
    );
    assert!(said.contains("event batches"), "{said}");

    // What the live plugin decided, as the collector received it.
    let mut live = Vec::new();
    let ended = wait_for(Duration::from_secs(30), || {
        live = exported_decisions(&rotel);
        live.iter().any(|(_, _, b)| b["ended"] == true)
    });
    assert!(
        ended,
        "the live plugin never ended the job's profiling: {live:?}\n{}",
        s.output()
    );
    assert!(live.len() >= 3, "seen, active, ended: {live:?}");

    let (code, report, stderr) = plugin_test(
        &plugin_file("bundled/determined.wasm"),
        &rec,
        &["--settings", DETERMINED_SETTINGS, "--route", "/state"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(report["delivered"]["event_batches"].as_u64().unwrap() > 0, "{report}");
    assert!(report["delivered"]["sample_batches"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(
        replayed_decisions(&report),
        live,
        "the replay decided otherwise than the live plugin"
    );
    // The route is answered from the replayed state.
    let state = &report["routes"][0];
    assert_eq!(state["status"], 200);
    let job = state["body"]["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job"] == "replayed")
        .cloned()
        .unwrap_or_else(|| panic!("{state}"));
    assert_eq!(job["ended"], true, "{job}");
    assert!(
        !report["points"].as_array().unwrap().is_empty(),
        "the replayed plugin exported nothing"
    );
}

/// A hand-written recording of the documented format: `ticks` ticks of two
/// series, 100 ms apart, from `t0`.
fn synthetic_recording(dir: &Path, t0: u64, ticks: u64) -> PathBuf {
    let mut lines = vec![
        json!({"header": {"format": "sonde-recording", "version": 2, "host_version": "test", "contract": "0.2.0",
                          "started_ns": t0, "seconds": ticks / 10, "period_ms": 100}}),
        json!({"series": {"time_ns": t0, "series": [
            {"id": 0, "metric": "system.cpu.utilization", "unit": "1", "kind": "gauge", "attributes": []},
            {"id": 1, "metric": "system.memory.usage", "unit": "By", "kind": "gauge",
             "attributes": [["system.memory.state", "used"]]}]}}),
    ];
    for i in 0..ticks {
        lines.push(json!({"tick": {"time_ns": t0 + i * 100_000_000, "values": [0.5, null]}}));
    }
    lines.push(json!({"end": {"ended_ns": t0 + ticks * 100_000_000, "ticks": ticks, "event_batches": 0, "bytes": 0}}));
    let path = dir.join("synthetic.jsonl");
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(&path, text.join("\n") + "\n").unwrap();
    path
}

#[test]
fn plugin_test_replays_on_the_recordings_clock_and_shows_everything_emitted() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Sonde::start(
        &tmp.path().join("sonde"),
        &[(plugin_file("bundled/sysmetrics.wasm"), "sysmetrics")],
        &[],
    );
    let rec = tmp.path().join("rec.jsonl");
    let out = record_while(&s, 3, &rec, || {
        let origin = json!({"job": "echo-job", "node": "n1", "rank": 0});
        for i in 0..3 {
            let body = json!({"origin": origin, "events": [{"name": "checkpoint.saved", "body": format!("ckpt {i}"),
                                                            "attributes": {"path": format!("/ckpt/{i}")}}]});
            let (code, text) = post_json(&s.api, "/api/ingest", &body);
            assert_eq!(code, 202, "{text}");
        }
    });
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let (code, r, stderr) = plugin_test(
        &plugin_file("testing/testbed.wasm"),
        &rec,
        &[
            "--name",
            "testbed",
            "--settings",
            r#"{"mode": "echo", "timer_ms": 500}"#,
            "--route",
            "/now",
            "--route",
            "/wasi/env/HOME",
            "--route",
            "POST /nope",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let started = r["recording"]["header"]["started_ns"].as_u64().unwrap();
    let until = r["recording"]["replayed_until_ns"].as_u64().unwrap();
    assert!(until > started + 2_000_000_000, "{}", r["recording"]);

    // Timers fire on the recording's clock: one every 500 ms of it, each at its own time.
    let timers: Vec<u64> = r["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["kind"] == "timer")
        .map(|d| d["time_ns"].as_u64().unwrap())
        .collect();
    let want: Vec<u64> = (1..=(until - started) / 500_000_000)
        .map(|k| started + k * 500_000_000)
        .collect();
    assert_eq!(timers, want);
    assert_eq!(r["delivered"]["timer_calls"].as_u64().unwrap(), want.len() as u64);
    // `now` answers the recording's time; the environment stays denied, as in sonde.
    assert_eq!(r["routes"][0]["body"].as_u64(), Some(until), "{}", r["routes"]);
    assert_eq!(r["routes"][1]["status"], 403, "{}", r["routes"]);
    assert_eq!(r["routes"][2]["status"], 404);

    // The events: one log record per custom event, in order.
    let logs: Vec<&str> = r["logs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["event_name"] == "testbed.custom")
        .map(|l| l["body"].as_str().unwrap())
        .collect();
    assert_eq!(logs, ["checkpoint.saved"; 3]);
    // The samples: one point and one sink row per batch the plugin was handed.
    let batches = r["delivered"]["sample_batches"].as_u64().unwrap();
    assert!(batches >= 10, "{}", r["delivered"]);
    let sample_points = r["points"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metric"] == "testbed.samples")
        .count();
    assert_eq!(sample_points as u64, batches);
    let tsv = r["sinks"]["testbed.tsv"]["text"].as_str().unwrap();
    assert_eq!(
        tsv.lines().filter(|l| l.contains("\tsamples\t")).count() as u64,
        batches,
        "{tsv}"
    );
    assert_eq!(r["trap"], Value::Null);

    // The readable form says the same.
    let text = Command::new(sonde_bin())
        .args(["plugin", "test"])
        .arg(plugin_file("testing/testbed.wasm"))
        .arg("--events")
        .arg(&rec)
        .arg("--cache-dir")
        .arg(repo().join("target/test-plugin-cache"))
        .args(["--settings", r#"{"mode": "echo", "timer_ms": 500}"#, "--route", "/now"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    for needle in [
        "decisions (",
        "timer  testbed: timer",
        "testbed.samples",
        "testbed.tsv",
        "GET /now → 200",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
}

#[test]
fn plugin_test_says_what_is_wrong_and_exits_non_zero() {
    let tmp = tempfile::tempdir().unwrap();
    let rec = synthetic_recording(tmp.path(), 1_800_000_000_000_000_000, 20);
    let testbed = plugin_file("testing/testbed.wasm");
    let bad = |wasm: &Path, rec: &Path, args: &[&str], code: i32, needle: &str| {
        let (got, _, stderr) = plugin_test(wasm, rec, args);
        assert_eq!(got, code, "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {needle:?} not in {stderr}");
    };
    // The file, the recording, the arguments: exit 2.
    let text = tmp.path().join("notes.wasm");
    std::fs::write(&text, "not a plugin at all").unwrap();
    bad(&text, &rec, &[], 2, "not a WebAssembly file");
    bad(
        &plugin_file("testing/wrongworld.wasm"),
        &rec,
        &[],
        2,
        "built against contract sonde:plugin@9.0.0",
    );
    let garbage = tmp.path().join("garbage.jsonl");
    std::fs::write(&garbage, "{\"tick\": 1}\n").unwrap();
    bad(&testbed, &garbage, &[], 2, "garbage.jsonl: line 1");
    // A recording of contract 0.1's format (its serving and MPI columns, no tables).
    let v1 = tmp.path().join("v1.jsonl");
    let text = std::fs::read_to_string(&rec).unwrap();
    std::fs::write(&v1, text.replacen(r#""version":2"#, r#""version":1"#, 1)).unwrap();
    bad(
        &testbed,
        &v1,
        &[],
        2,
        "a recording of format version 1, made for contract 0.1",
    );
    bad(&testbed, &tmp.path().join("missing.jsonl"), &[], 2, "missing.jsonl");
    bad(
        &testbed,
        &rec,
        &["--settings", "[1]"],
        2,
        "--settings must be a JSON object",
    );
    bad(&testbed, &rec, &["--route", "nope"], 2, "starting with /");
    // The plugin's own failures: exit 1, with the host's reason.
    bad(
        &testbed,
        &rec,
        &["--settings", r#"{"mode": "failstart"}"#],
        1,
        "testbed failstart mode: refusing to start",
    );
    bad(
        &testbed,
        &rec,
        &["--settings", r#"{"mode": "trap"}"#],
        1,
        "testbed trapped in on-samples at line",
    );
    bad(
        &testbed,
        &rec,
        &["--settings", r#"{"mode": "spin"}"#],
        1,
        "exceeded its 100 ms deadline",
    );
    bad(
        &testbed,
        &rec,
        &["--settings", r#"{"mode": "spin"}"#, "--call-timeout-ms", "30"],
        1,
        "exceeded its 30 ms deadline",
    );
    // (A deadline long enough that the memory cap, not the clock, stops it on a busy machine.)
    let membomb = ["--settings", r#"{"mode": "membomb"}"#, "--call-timeout-ms", "10000"];
    bad(&testbed, &rec, &membomb, 1, "plugin memory limit exceeded");
    // A trap still shows what was emitted before it.
    let (_, r, _) = plugin_test(&testbed, &rec, &["--settings", r#"{"mode": "trap"}"#]);
    assert!(r["trap"].as_str().unwrap().contains("deliberate trap"), "{}", r["trap"]);
}

#[test]
fn recordings_are_bounded_and_one_at_a_time() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Sonde::start(
        &tmp.path().join("sonde"),
        &[(plugin_file("bundled/sysmetrics.wasm"), "sysmetrics")],
        &[],
    );
    for (query, key) in [
        ("", "seconds"),
        ("?seconds=601", "seconds"),
        ("?seconds=x", "query"),
        ("?seconds=1&max_bytes=10", "max_bytes"),
    ] {
        let (code, body) = s.get(&format!("/api/record{query}"));
        assert_eq!(code, 400, "{query}: {body}");
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap()["key"],
            key,
            "{query}: {body}"
        );
    }
    // One at a time: a second one is refused while the first runs, and the first is whole.
    let rec = tmp.path().join("first.jsonl");
    let first = record_while(&s, 3, &rec, || {
        let (code, body) = s.get("/api/record?seconds=1");
        assert_eq!(code, 409, "{body}");
        assert!(body.contains("already running"), "{body}");
        let second = sonde_record(&s.api, 1, &tmp.path().join("second.jsonl"));
        assert_eq!(second.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&second.stderr).contains("409 Conflict: a recording is already running"));
        assert!(
            !tmp.path().join("second.jsonl").exists(),
            "no file for a refused recording"
        );
    });
    assert!(first.status.success());
    let text = std::fs::read_to_string(&rec).unwrap();
    assert!(text.starts_with("{\"header\":"), "{}", &text[..100]);
    assert!(text.trim_end().lines().last().unwrap().starts_with("{\"end\":"));

    // Past max_bytes the recording is dropped with a clear error, before its time is up.
    let (code, body) = s.get("/api/record?seconds=8&max_bytes=4096");
    assert_eq!(code, 413, "{body}");
    let e: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(e["key"], "max_bytes");
    assert!(
        e["error"].as_str().unwrap().contains("passed max_bytes (4096 bytes)"),
        "{e}"
    );
    assert!(s.json("/api/status")["recording"].is_null(), "the slot is free again");

    // A sonde that is not there.
    let out = sonde_record(&format!("127.0.0.1:{}", free_port()), 1, &tmp.path().join("none.jsonl"));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("sonde record: http://127.0.0.1:"));
    // And sampling went on through all of it.
    let ticks = |s: &Sonde| s.json("/api/status")["sampler"]["period"]["ticks"].as_u64().unwrap();
    let before = ticks(&s);
    assert!(wait_for(Duration::from_secs(10), || ticks(&s) > before));
}

#[test]
fn a_recorded_event_table_replays_to_a_plugin_of_contract_0_1_as_its_columns() {
    let tmp = tempfile::tempdir().unwrap();
    // clockwork declares the `requests` table: without a declarer the ingest takes no rows.
    let s = Sonde::start(
        &tmp.path().join("sonde"),
        &[(plugin_file("bundled/clockwork.wasm"), "clockwork")],
        &[],
    );
    let rec = tmp.path().join("requests.jsonl");
    let out = record_while(&s, 2, &rec, || {
        let rows: Vec<Value> = (0..3u64)
            .map(|i| json!({"request_id": 68 + i, "model_id": 30, "arrival_ns": 10 + i, "departure_ns": 20 + i}))
            .collect();
        let body = json!({"origin": {"job": "serving", "role": "controller"}, "requests": rows});
        let (code, text) = post_json(&s.api, "/api/ingest", &body);
        assert_eq!(code, 202, "{text}");
    });
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&rec).unwrap();
    assert!(
        text.contains(r#""tables":[{"name":"requests""#),
        "no table in the recording"
    );

    // legacy01 (contract 0.1) subscribes to 0.1's `requests` kind: the replay hands it the
    // recorded table's rows as 0.1's request columns, as a running sonde would.
    let (code, r, stderr) = plugin_test(
        &plugin_file("testing/legacy01.wasm"),
        &rec,
        &["--name", "legacy01", "--route", "/seen"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(r["status"]["contract"], "0.1.0", "{}", r["status"]);
    assert_eq!(
        r["routes"][0]["body"]["requests"],
        json!([[68, 30, 10, 20], [69, 30, 11, 21], [70, 30, 12, 22]]),
        "{}",
        r["routes"][0]
    );
}
