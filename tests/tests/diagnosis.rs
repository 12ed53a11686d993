//! The diagnosis end to end, with what users send: a loop timed by the
//! project's own Python client (`StepClock`, behind its Lightning and
//! Hugging Face callbacks, which reports the dataloader beside the step),
//! and a four-rank job posted to the HTTP ingest. Checks that the slow
//! dataloader is found in the sibling shape, that the job view shows the
//! diagnosis plugin's finding (and ranks nobody itself), that another job's
//! findings stay off a job's view, and that a restart keeps the findings.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use sonde_e2e::*;

fn start(dir: &Path, port: u16) -> Sonde {
    Sonde::start_on(
        dir,
        &[(plugin_file("bundled/bottleneck.wasm"), "bottleneck")],
        &["--set", "plugin.bottleneck.settings={lag_ms=300}"],
        port,
    )
}

/// The plugin's route for `job` once it has judged at least `rows` steps.
fn judged(sonde: &Sonde, job: &str, rows: usize) -> Value {
    let mut last = Value::Null;
    let ok = wait_for(Duration::from_secs(60), || {
        let (code, body) = sonde.get(&format!("/api/plugins/bottleneck/jobs/{job}?limit=100000"));
        last = serde_json::from_str(&body).unwrap_or_default();
        code == 200 && last["rows"].as_array().is_some_and(|r| r.len() >= rows)
    });
    assert!(
        ok,
        "fewer than {rows} steps of {job} judged: {last}\n{}",
        sonde.output()
    );
    last
}

#[test]
fn a_stepclock_loop_waiting_on_its_dataloader_is_input_bound() {
    let dir = tempfile::tempdir().unwrap();
    let (sonde, otlp) = Sonde::start_otlp_http_with(
        dir.path(),
        &[(plugin_file("bundled/bottleneck.wasm"), "bottleneck")],
        &["--set", "plugin.bottleneck.settings={lag_ms=500}"],
    );
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    const BATCHES: usize = 16;
    let o = Command::new("python3")
        .arg(repo().join("tests/py/client_stepclock.py"))
        .arg(&out)
        .arg(BATCHES.to_string())
        .env("PYTHONPATH", repo().join("clients/python/src"))
        .env("SONDE_CLIENT_JOB", "stepclock")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://127.0.0.1:{otlp}"))
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        .env_remove("RANK")
        .output()
        .expect("running python3");
    assert!(
        o.status.success(),
        "the loop failed (`./dev setup` installs the OpenTelemetry SDK):\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let job = judged(&sonde, "stepclock", BATCHES);
    let rows = job["rows"].as_array().unwrap();
    let input = rows.iter().filter(|r| r["verdict"] == "input-bound").count();
    // Every step waited 150 ms for 80 ms of work; one at the edge of a
    // process start may read otherwise.
    assert!(
        input + 1 >= rows.len(),
        "{input} of {} steps input-bound: {:#?}",
        rows.len(),
        rows.iter()
            .map(|r| (&r["batch"], &r["verdict"], &r["reason"]))
            .collect::<Vec<_>>()
    );
    // The row spans the iteration: the wait for data and the step.
    let first = rows.iter().find(|r| r["batch"] == 1).expect("batch 1");
    let wall = (first["end_ns"].as_u64().unwrap() - first["start_ns"].as_u64().unwrap()) as f64 / 1e6;
    assert!(
        wall > 200.0,
        "batch 1's iteration is {wall} ms: the dataloader was left out"
    );
}

/// Four ranks of a synchronous job, 30 batches, posted to the ingest: every
/// step ends together (ranks meet in the all-reduce), and rank 2's
/// dataloader takes 60 ms where the others' take 5, so the others wait.
fn ddp_rank(job: &str, rank: i64, t0: u64) -> Value {
    let ms = 1_000_000u64;
    let timings: Vec<Value> = (0..30u64)
        .flat_map(|b| {
            let t = t0 + b * 120 * ms;
            let load = if rank == 2 { 60 } else { 5 };
            [
                json!({"name": "dataloader_next", "start_ns": t, "end_ns": t + load * ms, "batch_idx": b}),
                json!({"name": "forward", "start_ns": t + load * ms, "end_ns": t + (load + 40) * ms, "batch_idx": b}),
                json!({"name": "allreduce", "start_ns": t + (load + 40) * ms, "end_ns": t + 110 * ms, "batch_idx": b}),
                json!({"name": "train_batch", "start_ns": t + load * ms, "end_ns": t + 110 * ms, "batch_idx": b}),
            ]
        })
        .collect();
    json!({"origin": {"job": job, "rank": rank, "node": format!("node-{}", rank / 2), "role": "worker"}, "timings": timings})
}

#[test]
fn the_job_view_shows_the_plugins_culprit_only_for_its_job_and_keeps_it_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut sonde = start(dir.path(), port);
    let t0 = now_ns() - 60_000_000_000;
    for job in ["ddp-a", "ddp-b"] {
        for rank in 0..4 {
            let (code, body) = post_json(&sonde.api, "/api/ingest", &ddp_rank(job, rank, t0));
            assert_eq!(code, 202, "{body}");
        }
    }
    let plugin = judged(&sonde, "ddp-a", 120);
    assert_eq!(plugin["straggler"]["rank"], 2, "{}", plugin["straggler"]);
    let mut view = Value::Null;
    let named = wait_for(Duration::from_secs(30), || {
        view = sonde.json("/api/jobs/ddp-a");
        view["findings"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f["finding"]["headline"] == true))
    });
    assert!(named, "no headline finding on the job view: {:#}", view["findings"]);
    let findings = view["findings"].as_array().unwrap();
    let headline = &findings[0];
    assert_eq!(headline["finding"]["about"], "rank");
    assert_eq!(
        headline["finding"]["id"], "2",
        "the view names the plugin's rank: {headline:#}"
    );
    let sentence = headline["reason"].as_str().unwrap();
    assert!(
        sentence.starts_with("rank 2 (node node-1) holds the job back"),
        "{sentence}"
    );
    assert!(sentence.contains("its steps there are input-bound"), "{sentence}");
    // What fixing it gains, replayed from the steps: rank 2's 60 ms of
    // dataloader against 5 is the whole of the slowdown (110 ms steps
    // against an ideal of 55).
    let evidence = &headline["body"];
    let slowdown = evidence["steps over their ideal (×)"].as_f64().unwrap();
    assert!((slowdown - 2.0).abs() < 0.1, "{evidence}");
    assert!(
        evidence["recovered by fixing it (%)"].as_f64().unwrap() >= 90.0,
        "{evidence}"
    );
    assert!(
        sentence.contains("making rank 2's steps typical recovers"),
        "{sentence}"
    );
    assert!(
        findings.iter().all(|f| f["job"] == "ddp-a"),
        "another job's finding on ddp-a's view"
    );
    // The view keeps the raw steps and ranks nobody; a step is its span.
    let batch = &view["steps"][0]["ranks"][0];
    assert!(batch.get("slowest_rank").is_none() && view["steps"][0].get("slowest_rank").is_none());
    assert!((batch["total_s"].as_f64().unwrap() - 0.110).abs() < 1e-9, "{batch}");
    assert_eq!(
        batch["span"],
        json!({"train_batch": 0.105}),
        "the step span, not a phase"
    );
    let (code, body) = sonde.get("/api/decisions?job=ddp-b");
    assert_eq!(code, 200);
    let b: Value = serde_json::from_str(&body).unwrap();
    assert!(
        b["decisions"].as_array().unwrap().iter().all(|d| d["job"] == "ddp-b"),
        "{body}"
    );

    // A restart: the steps are gone with the process, the findings are not,
    // nor the plugin's judged rows and straggler (its state store).
    let plugin = sonde.json("/api/plugins/bottleneck/jobs/ddp-a?limit=100000");
    sonde.proc.terminate(Duration::from_secs(10));
    let sonde = start(dir.path(), port);
    let after = sonde.json("/api/jobs/ddp-a");
    let kept = after["findings"].as_array().expect("findings after the restart");
    assert_eq!(kept[0]["reason"], headline["reason"], "{after:#}");
    assert_eq!(kept[0]["finding"]["id"], "2");
    let restored = sonde.json("/api/plugins/bottleneck/jobs/ddp-a?limit=100000");
    assert_eq!(restored["rows"], plugin["rows"], "the judged rows after the restart");
    assert_eq!(restored["straggler"], plugin["straggler"]);
    assert_eq!(restored["steps"], plugin["steps"]);
}

/// A pipeline-parallel job (dp 2 × pp 4, 1F1B over 4 micro-batches) whose
/// first stage is 1.46 times too long, as operations with their parallel
/// coordinates (`ops` rows, from the simulator the benchmark uses): the
/// job's headline finding names the stage, not one of its ranks.
#[test]
fn an_overlong_pipeline_stage_is_named_from_operation_reports() {
    let dir = tempfile::tempdir().unwrap();
    let sonde = start(dir.path(), free_port());
    let o = Command::new("python3")
        .arg(repo().join("tests/diagnosis/simulate.py"))
        .args([
            "--seed",
            "3",
            "--cause",
            "overlong_stage",
            "--dp",
            "2",
            "--pp",
            "4",
            "--tp",
            "1",
            "--steps",
            "6",
        ])
        .output()
        .expect("running python3");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let trace: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(trace["truth"]["stage"], 0);
    let base = now_ns() - 60_000_000_000;
    let nodes = trace["nodes"].as_array().unwrap();
    let mut per_rank: std::collections::BTreeMap<u64, (String, Vec<Value>)> = Default::default();
    for op in trace["ops"].as_array().unwrap() {
        let r = op.as_array().unwrap();
        let node = nodes[r[1].as_u64().unwrap() as usize].as_str().unwrap().to_string();
        let mut row = json!({
            "step": r[5], "dp": r[2], "stage": r[3], "tp": r[4], "kind": r[7],
            "start_ns": base + r[8].as_u64().unwrap(), "end_ns": base + r[9].as_u64().unwrap(),
        });
        if !r[6].is_null() {
            row["micro"] = r[6].clone();
        }
        let e = per_rank.entry(r[0].as_u64().unwrap()).or_insert((node, Vec::new()));
        e.1.push(row);
    }
    for (rank, (node, ops)) in &per_rank {
        let body = json!({"origin": {"job": "pp-trace", "rank": rank, "node": node, "role": "worker"}, "ops": ops});
        let (code, text) = post_json(&sonde.api, "/api/ingest", &body);
        assert_eq!(code, 202, "{text}");
    }
    let mut view = Value::Null;
    let found = wait_for(Duration::from_secs(30), || {
        view = sonde.json("/api/jobs/pp-trace");
        view["findings"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f["kind"] == "what-if"))
    });
    assert!(found, "no What-if finding: {:#}\n{}", view, sonde.output());
    let f = view["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "what-if")
        .unwrap();
    assert_eq!(f["finding"]["about"], "stage", "{f:#}");
    assert_eq!(f["finding"]["id"], "0", "{f:#}");
    assert_eq!(f["finding"]["headline"], true);
    let stage = f["body"]["stage imbalance (×)"].as_f64().unwrap();
    assert!(stage > 1.05, "{f:#}");
    assert!(f["reason"].as_str().unwrap().contains("stage 0"), "{}", f["reason"]);
}
