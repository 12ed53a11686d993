//! Event tables end to end: a new kind of data reaches a plugin with no
//! change to the host. The SDK's example `table_checkpoints` declares the
//! table `checkpoints` in its manifest; rows of it are posted as JSON
//! (`POST /api/ingest`, key `checkpoints`) and sent over OTLP by the
//! OpenTelemetry Python SDK (spans marked `sonde.table`), bad rows are
//! refused one by one with the table, row and column named, and the plugin's
//! route answers what it received. Then across a cluster: an agent that has
//! no plugin for the table forwards its rows, and the master's plugin gets
//! them.

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use sonde_e2e::*;

fn checkpoints_plugin() -> (std::path::PathBuf, &'static str) {
    (plugin_file("examples/table_checkpoints.wasm"), "checkpoints")
}

fn received(s: &Sonde) -> Value {
    s.json("/api/plugins/checkpoints/checkpoints")["jobs"].clone()
}

#[test]
fn a_table_declared_by_a_plugin_takes_rows_over_json_and_otlp_and_refuses_bad_ones_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let otlp_http = free_port();
    let listen = format!("ingest.otlp_http_listen=\"127.0.0.1:{otlp_http}\"");
    let sonde = Sonde::start(
        tmp.path(),
        &[checkpoints_plugin()],
        &["--set", &listen, "--set", "ingest.otlp_grpc_listen=\"off\""],
    );

    // The table is listed with its columns, declared by the plugin.
    let tables = sonde.json("/api/tables")["tables"].clone();
    let t = tables
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "checkpoints")
        .unwrap_or_else(|| panic!("{tables}"));
    assert_eq!(t["declared_by"], json!(["checkpoints"]));
    let columns: Vec<&str> = t["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(columns, ["step", "bytes", "write_s", "storage", "verified", "saved_ns"]);
    assert_eq!(t["columns"][2]["type"], "f64");

    // JSON: two good rows, three bad ones, each refused alone with its reason;
    // the good rows and the rest of the body (a timing) are kept.
    let (code, body) = post_json(
        &sonde.api,
        "/api/ingest",
        &json!({
            "origin": {"job": "llm-7b", "rank": 0},
            "timings": [{"name": "train_batch", "start_ns": 1, "end_ns": 2, "batch_idx": 1}],
            "checkpoints": [
                {"step": 100, "bytes": 14_000_000_000u64, "write_s": 40.5, "storage": "s3", "verified": true},
                {"step": 200, "bytes": 14_000_000_000u64, "write_s": 52.0, "storage": "s3"},
                {"bytes": 1, "write_s": 1.0},
                {"step": 300, "bytes": 1, "write_s": "slow"},
                {"step": 400, "bytes": 1, "write_s": 1.0, "region": "eu"}
            ],
            "chekpoints": [{"step": 1}]
        }),
    );
    assert_eq!(code, 422, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["accepted"], 3, "two rows and the timing: {answer}");
    assert_eq!(answer["refused_rows"], 4);
    let keys: Vec<&str> = answer["refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "checkpoints[2].step",
            "checkpoints[3].write_s",
            "checkpoints[4].region",
            "chekpoints"
        ]
    );
    let reasons = answer["refused"].to_string();
    for part in [
        "missing: the column is required",
        "\\\"slow\\\": must be a finite number",
        "not a column of table",
        "no running plugin declares a table named \\\"chekpoints\\\"",
    ] {
        assert!(reasons.contains(part), "{part}: {reasons}");
    }
    assert!(
        wait_for(Duration::from_secs(10), || received(&sonde)["llm-7b"]["checkpoints"]
            == 2),
        "{}",
        received(&sonde)
    );
    let llm = &received(&sonde)["llm-7b"];
    assert_eq!(llm["bytes"], 28_000_000_000u64);
    assert_eq!(llm["slowest"], json!({"step": 200, "write_s": 52.0}));
    assert_eq!(llm["unverified"], json!([200]), "verified defaults to false");
    assert!(
        llm["last_saved_ns"].as_u64().unwrap() > 1_600_000_000_000_000_000,
        "saved_ns: the time of receipt"
    );

    // OTLP, through the OpenTelemetry Python SDK: spans marked `sonde.table`.
    let script = r#"
import sys
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

provider = TracerProvider(resource=Resource.create({"sonde.job": "vit-l"}))
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=sys.argv[1] + "/v1/traces")))
tracer = provider.get_tracer("checkpoints")
rows = [
    {"step": 10, "bytes": 3000, "write_s": 2.5, "storage": "nfs", "verified": True, "saved_ns": 1700000000000000000},
    {"step": 20, "bytes": 3000, "write_s": 7.25, "storage": "local", "verified": True, "saved_ns": 1700000001000000000},
    {"step": 30, "bytes": "much", "write_s": 1.0},
]
for row in rows:
    tracer.start_span("checkpoint.saved", attributes={"sonde.table": "checkpoints", **row}).end()
provider.shutdown()
"#;
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(format!("http://127.0.0.1:{otlp_http}"))
        .output()
        .expect("python3");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        wait_for(Duration::from_secs(10), || received(&sonde)["vit-l"]["checkpoints"]
            == 2),
        "{}",
        received(&sonde)
    );
    let vit = &received(&sonde)["vit-l"];
    assert_eq!(vit["storages"], json!(["nfs", "local"]));
    assert_eq!(vit["slowest"], json!({"step": 20, "write_s": 7.25}));
    assert_eq!(vit["last_saved_ns"], 1_700_000_001_000_000_000u64);
    // The span that does not fit is skipped and counted, never a timing.
    let ingest = sonde.json("/api/ingest");
    assert!(ingest["otlp"]["skipped_rows"].as_u64().unwrap() >= 1, "{ingest}");
    assert_eq!(received(&sonde)["vit-l"]["checkpoints"], 2);
}

#[test]
fn an_agent_without_the_plugin_forwards_the_rows_and_the_masters_plugin_gets_them() {
    let tmp = tempfile::tempdir().unwrap();
    let grpc = free_port();
    let listen = format!("ingest.otlp_grpc_listen=\"127.0.0.1:{grpc}\"");
    let master = Sonde::start(
        &tmp.path().join("master"),
        &[checkpoints_plugin()],
        &[
            "--role",
            "master",
            "--set",
            &listen,
            "--set",
            "ingest.otlp_http_listen=\"off\"",
        ],
    );
    let agent = cluster_agent(tmp.path(), "node-1", grpc);
    let (code, body) = post_json(
        &agent.api,
        "/api/ingest",
        &json!({
            "origin": {"job": "llm-7b", "rank": 3},
            "checkpoints": [{"step": 500, "bytes": 18_446_744_073_709_551_615u64, "write_s": 61.0, "storage": "s3"}]
        }),
    );
    assert_eq!(
        code, 202,
        "the agent keeps rows of a table only its master knows: {body}"
    );
    assert!(
        wait_for(Duration::from_secs(20), || master
            .json("/api/plugins/checkpoints/checkpoints")["jobs"]["llm-7b"]["checkpoints"]
            == 1),
        "{}\nagent:\n{}",
        master.output(),
        agent.output()
    );
    let llm = &master.json("/api/plugins/checkpoints/checkpoints")["jobs"]["llm-7b"];
    assert_eq!(llm["bytes"], u64::MAX, "a u64 past an OTLP int crosses intact");
    assert_eq!(llm["slowest"], json!({"step": 500, "write_s": 61.0}));
    // A master refuses what none of its plugins declares, naming it.
    let (code, body) = post_json(&master.api, "/api/ingest", &json!({"nobody_declares": [{"x": 1}]}));
    assert_eq!(code, 422);
    assert!(
        body.contains("no running plugin declares a table named \\\"nobody_declares\\\""),
        "{body}"
    );
}
