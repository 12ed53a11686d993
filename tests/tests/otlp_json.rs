//! OTLP/JSON into the HTTP receiver, sent by a real sender: the official
//! OpenTelemetry JavaScript SDK, whose OTLP/HTTP exporters encode JSON
//! (`tests/otlp-js/send.mjs`, installed by `./dev setup`). A gauge, a span
//! with a batch index and a log record must land as they do over protobuf.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use sonde_e2e::*;

fn js_sender() -> std::path::PathBuf {
    let script = repo().join("tests/otlp-js/send.mjs");
    assert!(
        repo().join("tests/otlp-js/node_modules/@opentelemetry").is_dir(),
        "the OpenTelemetry JS SDK is not installed in tests/otlp-js (`./dev setup` does it)"
    );
    script
}

#[test]
fn the_javascript_sdk_sends_otlp_json_and_every_signal_lands() {
    let tmp = tempfile::tempdir().unwrap();
    // A master shows points that jobs send in its live store (labelled with node and job).
    let (s, http_port) = Sonde::start_otlp_http(tmp.path(), &["--role", "master"]);
    let out = Command::new("node")
        .arg(js_sender())
        .args([&format!("http://127.0.0.1:{http_port}"), "jsjob", "jsnode"])
        .output()
        .expect("running node");
    assert!(
        out.status.success(),
        "the JS SDK's export failed:\n{}\n{}\nsonde:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        s.output()
    );

    let ingest = s.json("/api/ingest");
    // Metrics, traces, logs; the SDK's shutdown may export the gauge once more.
    assert!(ingest["otlp"]["requests"].as_u64() >= Some(3), "{ingest:#}");
    assert_eq!(ingest["otlp"]["rejected"], 0, "{ingest:#}");

    // The span: a timing of rank 1 on its node, at batch 7, 40 ms long.
    let job = s.json("/api/jobs/jsjob");
    assert_eq!(job["ranks"][0]["rank"], 1, "{job:#}");
    assert_eq!(job["ranks"][0]["node"], "jsnode", "{job:#}");
    let step = &job["steps"][0];
    assert_eq!(step["batch"], 7, "{job:#}");
    let forward = step["ranks"][0]["phases"]["forward"].as_f64().unwrap();
    assert!((forward - 0.040).abs() < 1e-6, "{forward}");

    // The gauge: in the master's live store under its job and node, same value.
    let mut series = Value::Null;
    let found = wait_for(Duration::from_secs(10), || {
        series = s.json("/api/series?job=jsjob&name=train.loss");
        series["series"].as_array().is_some_and(|a| !a.is_empty())
    });
    assert!(found, "{series:#}");
    let one = &series["series"][0];
    assert_eq!(one["attributes"]["host.name"], "jsnode", "{one:#}");
    assert_eq!(one["attributes"]["phase"], "eval", "{one:#}");
    let data = s.json(&format!("/api/series/data?ids={}&max_points=10", one["id"]));
    let mean = data["data"][0]["mean"]
        .as_array()
        .and_then(|m| m.last().and_then(Value::as_f64));
    assert_eq!(mean, Some(0.5), "{data:#}");
}

#[test]
fn a_malformed_otlp_json_body_is_refused_with_its_path_in_the_json_status() {
    let tmp = tempfile::tempdir().unwrap();
    let (s, http_port) = Sonde::start_otlp_http(tmp.path(), &[]);
    let addr = format!("127.0.0.1:{http_port}");
    let body = br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"x","startTimeUnixNano":"yesterday"}]}]}]}"#;
    let (code, text) = http_with(
        &addr,
        "POST",
        "/v1/traces",
        &[("Content-Type", "application/json")],
        body,
    );
    assert_eq!(code, 400, "{text}");
    let status: Value = serde_json::from_str(&text).expect("a JSON google.rpc.Status");
    assert_eq!(status["code"], 3, "{status}");
    assert_eq!(
        status["message"],
        "resourceSpans[0].scopeSpans[0].spans[0].startTimeUnixNano: expected an integer (a number or a decimal string)"
    );
    let ingest = s.json("/api/ingest");
    assert_eq!(ingest["otlp"]["rejected"], 1, "{ingest:#}");
}
