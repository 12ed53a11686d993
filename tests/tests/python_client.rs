//! The Python client (`clients/python`, import `sonde`) end to end: real
//! training loops started by its launcher (`python -m sonde run`), reporting
//! over OTLP/HTTP through the official OpenTelemetry SDK to a real sonde; what
//! arrives is read back through sonde's API (`GET /api/jobs/{job}`: per batch
//! index, every rank's phases) and checked against each rank's own record.
//!
//! The pure-Python loop needs only the OpenTelemetry SDK (`./dev setup`). The
//! PyTorch, Lightning and Hugging Face loops need those frameworks, installed
//! by `./dev test-python`, which runs them (`--include-ignored`); plain
//! `cargo test` skips them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use sonde_e2e::*;

/// Runs `script` under `python -m sonde run` with `ranks` ranks; returns the
/// launcher's stderr (where it prints the job's link).
fn launch(sonde: &Sonde, otlp: u16, job: &str, ranks: u32, script: &str, out: &Path, arg: &str) -> String {
    let o = Command::new("python3")
        .args(["-m", "sonde", "run", "--job", job, "--ranks", &ranks.to_string()])
        .args(["--api", &format!("http://{}", sonde.api)])
        .args(["--endpoint", &format!("http://127.0.0.1:{otlp}")])
        .arg("--")
        .arg("python3")
        .arg(repo().join("tests/py").join(script))
        .arg(out)
        .arg(arg)
        .env("PYTHONPATH", repo().join("clients/python/src"))
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("RANK")
        .output()
        .expect("running python3");
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(
        o.status.success(),
        "{script} failed (`./dev setup` installs the OpenTelemetry SDK, `./dev test-python` the frameworks):\n{}{stderr}",
        String::from_utf8_lossy(&o.stdout)
    );
    stderr
}

fn record(out: &Path, rank: u32) -> Value {
    let p = out.join(format!("rank-{rank}.json"));
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

/// (rank, batch) → (step start ns, phase → seconds), from `GET /api/jobs/{job}`.
type Steps = BTreeMap<(i64, u64), (u64, BTreeMap<String, f64>)>;

fn steps(view: &Value) -> Steps {
    let mut out = Steps::new();
    for s in view["steps"].as_array().into_iter().flatten() {
        for r in s["ranks"].as_array().unwrap() {
            // Every timing that arrived: the phases, and the step span that
            // encloses them (listed apart, so phases add up to the step).
            let phases = r["phases"]
                .as_object()
                .unwrap()
                .iter()
                .chain(r["span"].as_object().into_iter().flatten())
                .map(|(k, v)| (k.clone(), v.as_f64().unwrap()))
                .collect();
            out.insert(
                (r["rank"].as_i64().unwrap(), s["batch"].as_u64().unwrap()),
                (r["start_ns"].as_u64().unwrap(), phases),
            );
        }
    }
    out
}

/// Waits until every rank has every batch in 0..batches with at least
/// `phases`, then returns the job's view. Fails naming what is missing.
fn wait_for_steps(sonde: &Sonde, job: &str, ranks: u32, batches: u64, phases: &[&str]) -> Value {
    let complete = |v: &Value| {
        let s = steps(v);
        (0..ranks as i64).all(|r| {
            (0..batches).all(|b| {
                s.get(&(r, b))
                    .is_some_and(|(_, p)| phases.iter().all(|n| p.contains_key(*n)))
            })
        })
    };
    let path = format!("/api/jobs/{job}?batches=1000");
    let mut last = Value::Null;
    let ok = wait_for(Duration::from_secs(20), || {
        let (code, body) = sonde.get(&path);
        if code == 200 {
            last = serde_json::from_str(&body).unwrap();
        }
        code == 200 && complete(&last)
    });
    assert!(
        ok,
        "{job}: not every rank's batches 0..{batches} with {phases:?} arrived: {last}"
    );
    last
}

fn ranks_seen(view: &Value) -> BTreeSet<(i64, i64)> {
    view["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["rank"].as_i64().unwrap(), r["local_rank"].as_i64().unwrap()))
        .collect()
}

/// No batch beyond the loop's, no phase the loop did not record.
fn assert_only(view: &Value, batches: u64, phases: &[&str]) {
    for ((rank, batch), (_, p)) in steps(view) {
        assert!(batch < batches, "rank {rank}: batch {batch} was never run");
        for name in p.keys() {
            assert!(
                phases.contains(&name.as_str()),
                "rank {rank} batch {batch}: phase {name}"
            );
        }
        assert!(
            p.values().all(|s| *s >= 0.0 && *s < 60.0),
            "rank {rank} batch {batch}: {p:?}"
        );
    }
}

#[test]
fn pure_python_loop_on_two_ranks_reports_every_ranks_timings_with_their_batch_indices() {
    let tmp = tempfile::tempdir().unwrap();
    let (sonde, otlp) = Sonde::start_otlp_http(tmp.path(), &[]);
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    const BATCHES: u64 = 12;
    let job = "py-loop";
    let stderr = launch(&sonde, otlp, job, 2, "client_loop.py", &out, &BATCHES.to_string());
    let link = format!("http://{}/#/jobs/{job}", sonde.api);
    assert!(stderr.contains(&link), "the launcher printed no link {link}:\n{stderr}");

    let view = wait_for_steps(&sonde, job, 2, BATCHES, &["forward", "backward"]);
    assert_eq!(ranks_seen(&view), BTreeSet::from([(0, 0), (1, 1)]), "{view}");
    assert_only(&view, BATCHES, &["forward", "backward"]);
    let seen = steps(&view);
    for rank in 0..2u32 {
        let rec = record(&out, rank);
        assert_eq!(rec["world_size"], 2);
        let stats = &rec["stats"];
        assert_eq!(stats["recorded"], 2 * BATCHES, "rank {rank}: {stats}");
        assert_eq!(stats["exported"], 2 * BATCHES, "rank {rank}: {stats}");
        assert_eq!(stats["export_failed"], 0, "rank {rank}: {stats}");
        assert_eq!(stats["dropped_queue_full"], 0, "rank {rank}: {stats}");
        for b in rec["batches"].as_array().unwrap() {
            let idx = b["batch_idx"].as_u64().unwrap();
            let (start, phases) = &seen[&(rank as i64, idx)];
            // The step starts with its forward (as the loop timed it), and the
            // backward lasted exactly what the loop measured.
            assert_eq!(*start, b["forward_start"].as_u64().unwrap(), "rank {rank} batch {idx}");
            let bwd = &b["backward"];
            let want = (bwd[1].as_u64().unwrap() - bwd[0].as_u64().unwrap()) as f64 / 1e9;
            assert!(
                (phases["backward"] - want).abs() < 1e-6,
                "rank {rank} batch {idx}: backward {} s, the loop measured {want} s",
                phases["backward"]
            );
        }
    }
}

#[test]
#[ignore = "needs PyTorch from PyPI: run by ./dev test-python"]
fn pytorch_model_on_cpu_on_two_ranks_reports_loader_forward_backward_per_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let (sonde, otlp) = Sonde::start_otlp_http(tmp.path(), &[]);
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    // 64 samples in batches of 16, 3 epochs: 12 batches, indices 0..12 across epochs.
    const BATCHES: u64 = 12;
    let job = "py-torch";
    launch(&sonde, otlp, job, 2, "client_torch.py", &out, "3");
    let phases = ["dataloader_next", "forward", "backward", "optimizer"];
    let view = wait_for_steps(&sonde, job, 2, BATCHES, &phases);
    assert_eq!(ranks_seen(&view), BTreeSet::from([(0, 0), (1, 1)]), "{view}");
    assert_only(&view, BATCHES, &phases);
    for rank in 0..2 {
        let rec = record(&out, rank);
        assert_eq!(rec["batches"], BATCHES, "{rec}");
        let stats = &rec["stats"];
        assert_eq!(stats["recorded"], stats["exported"], "rank {rank}: {stats}");
        assert_eq!(stats["recorded"], 4 * BATCHES, "rank {rank}: {stats}");
    }
}

#[test]
#[ignore = "needs PyTorch Lightning from PyPI: run by ./dev test-python"]
fn lightning_trainer_with_the_sonde_callback_reports_every_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let (sonde, otlp) = Sonde::start_otlp_http(tmp.path(), &[]);
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    // 32 samples in batches of 8, 2 epochs.
    const BATCHES: u64 = 8;
    let job = "py-lightning";
    launch(&sonde, otlp, job, 1, "client_lightning.py", &out, "2");
    let phases = ["dataloader_next", "forward", "backward", "optimizer", "train_batch"];
    let view = wait_for_steps(&sonde, job, 1, BATCHES, &phases);
    assert_eq!(ranks_seen(&view), BTreeSet::from([(0, 0)]), "{view}");
    assert_only(&view, BATCHES, &phases);
    assert_eq!(record(&out, 0)["batches"], BATCHES);
}

#[test]
#[ignore = "needs Hugging Face transformers from PyPI: run by ./dev test-python"]
fn hugging_face_trainer_with_the_sonde_callback_reports_every_step() {
    let tmp = tempfile::tempdir().unwrap();
    let (sonde, otlp) = Sonde::start_otlp_http(tmp.path(), &[]);
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    const STEPS: u64 = 6;
    let job = "py-hf";
    launch(&sonde, otlp, job, 1, "client_hf.py", &out, &STEPS.to_string());
    let phases = ["dataloader_next", "forward_backward", "optimizer", "train_batch"];
    let view = wait_for_steps(&sonde, job, 1, STEPS, &phases);
    assert_eq!(ranks_seen(&view), BTreeSet::from([(0, 0)]), "{view}");
    assert_only(&view, STEPS, &phases);
    assert_eq!(record(&out, 0)["steps"], STEPS);
}

#[test]
fn elastic_workers_take_every_shard_from_the_dlrover_plugin_and_report_over_otlp() {
    let tmp = tempfile::tempdir().unwrap();
    let otlp = free_port();
    let listen = format!("ingest.otlp_http_listen=\"127.0.0.1:{otlp}\"");
    let sonde = Sonde::start(
        tmp.path(),
        &[(plugin_file("bundled/dlrover.wasm"), "dlrover")],
        &[
            "--set",
            &listen,
            "--set",
            "ingest.otlp_grpc_listen=\"off\"",
            "--set",
            "plugin.dlrover.settings={node=\"master-host\", tick_ms=100, heartbeat_timeout_s=5.0}",
            "--set",
            "plugin.dlrover.call_timeout_ms=3000",
        ],
    );
    assert!(
        wait_for(Duration::from_secs(60), || sonde.get("/api/plugins/dlrover/overview").0
            == 200),
        "the dlrover plugin did not start:\n{}",
        sonde.output()
    );
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    const SIZE: u64 = 100;
    let job = "py-elastic";
    launch(&sonde, otlp, job, 2, "client_elastic.py", &out, &SIZE.to_string());

    // Every sample taken exactly once across the two workers, every shard accepted.
    let mut all: Vec<u64> = Vec::new();
    let mut steps = 0;
    for rank in 0..2 {
        let rec: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join(format!("worker-{rank}.json"))).unwrap()).unwrap();
        all.extend(rec["samples"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()));
        for r in rec["results"].as_array().unwrap() {
            assert_eq!(r["accepted"], true, "rank {rank}: {r}");
        }
        assert_eq!(rec["stats"]["exported"], rec["stats"]["recorded"], "{rec}");
        steps += rec["steps"].as_u64().unwrap();
    }
    all.sort_unstable();
    assert_eq!(all, (0..SIZE).collect::<Vec<_>>());
    assert_eq!(steps, SIZE / 5);
    let ds = sonde.json("/api/plugins/dlrover/datasets/ds");
    assert_eq!(ds["done_records"], SIZE, "{ds}");
    assert_eq!(ds["completed"], true, "{ds}");

    // The plugin saw both workers' OTLP heartbeats and `step` timings, and the
    // job's steps arrived per rank.
    let nodes = sonde.json("/api/plugins/dlrover/nodes");
    for n in ["worker-0", "worker-1"] {
        let node = nodes.as_array().unwrap().iter().find(|v| v["name"] == n);
        let node = node.unwrap_or_else(|| panic!("{n} missing: {nodes}"));
        assert!(node["last_heartbeat_age_s"].is_f64(), "no heartbeat from {n}: {node}");
        assert!(node["median_step_s"].is_f64(), "no step timings from {n}: {node}");
    }
    let view = sonde.json(&format!("/api/jobs/{job}?batches=1000"));
    assert_eq!(ranks_seen(&view), BTreeSet::from([(0, 0), (1, 1)]), "{view}");
    assert_eq!(
        steps_total(&view),
        SIZE / 5,
        "one `step` timing per batch arrived: {view}"
    );
}

fn steps_total(view: &Value) -> u64 {
    steps(view).values().filter(|(_, p)| p.contains_key("step")).count() as u64
}

/// Real torch.distributed (gloo, two ranks on CPU) with the client's `sonde.ops`:
/// forward, backward and optimizer timed by hand, the gradient all-reduce by
/// `time_collectives`. Rank 1's forward is three times as long, so rank 0
/// waits in the all-reduce; the bottleneck plugin's What-if replay of those
/// operations names rank 1 as the job's headline finding.
#[test]
#[ignore = "needs PyTorch from PyPI: run by ./dev test-python"]
fn torch_distributed_operations_name_the_slow_worker() {
    let tmp = tempfile::tempdir().unwrap();
    let (sonde, otlp) = Sonde::start_otlp_http_with(
        tmp.path(),
        &[(plugin_file("bundled/bottleneck.wasm"), "bottleneck")],
        &["--set", "plugin.bottleneck.settings={lag_ms=300}"],
    );
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    // Two windows of 8 steps that share none, with room to spare: the plugin
    // names a rank once a window of other steps names it too (`confirm.rs`).
    const STEPS: u64 = 32;
    launch(
        &sonde,
        otlp,
        "py-ops",
        2,
        "client_torch_ops.py",
        &out,
        &STEPS.to_string(),
    );
    for rank in 0..2 {
        let rec = record(&out, rank);
        // forward, backward, optimizer and one all-reduce per parameter (weight, bias)
        assert_eq!(rec["ops"], 5 * STEPS, "rank {rank}: {rec}");
        assert_eq!(rec["stats"]["export_failed"], 0, "rank {rank}: {rec}");
        assert_eq!(rec["stats"]["dropped_queue_full"], 0, "rank {rank}: {rec}");
    }
    let mut view = Value::Null;
    let named = wait_for(Duration::from_secs(30), || {
        view = sonde.json("/api/jobs/py-ops");
        view["findings"].as_array().is_some_and(|f| {
            f.iter()
                .any(|f| f["kind"] == "what-if" && f["finding"]["about"] == "rank" && f["finding"]["id"] == "1")
        })
    });
    assert!(
        named,
        "no What-if finding naming rank 1: {:#}\n{}",
        view["findings"],
        sonde.output()
    );
}

/// A real two-stage pipeline (torch.distributed on CPU, four ranks: two
/// replicas of two stages, GPipe over four micro-batches), stage 1 three
/// times stage 0's layers (six blocks to two: enough compute that the split
/// outweighs a loaded machine's scheduling noise), reporting through the
/// client's hooks: pipeline
/// sends and receives by `time_p2p` inside `micro_batch`, each stage's
/// gradient all-reduce by `time_collectives`. The What-if finding names
/// stage 1, not one of its ranks. (`./dev bench-diagnosis-real` runs the
/// same program, and DDP with `ddp_comm_hook`, across agents.)
#[test]
#[ignore = "needs PyTorch from PyPI: run by ./dev test-python"]
fn a_torch_pipeline_with_one_long_stage_is_named_by_its_stage() {
    let tmp = tempfile::tempdir().unwrap();
    let (sonde, otlp) = Sonde::start_otlp_http_with(
        tmp.path(),
        &[(plugin_file("bundled/bottleneck.wasm"), "bottleneck")],
        &["--set", "plugin.bottleneck.settings={lag_ms=300}"],
    );
    let o = Command::new("python3")
        .args(["-m", "sonde", "run", "--job", "py-pipe", "--ranks", "4"])
        .args(["--api", &format!("http://{}", sonde.api)])
        .args(["--endpoint", &format!("http://127.0.0.1:{otlp}")])
        .arg("--")
        .arg("python3")
        .arg(repo().join("tests/py/torch_faults.py"))
        .args(["pipeline", "--steps", "12", "--micro", "4", "--blocks", "2,6"])
        .env("PYTHONPATH", repo().join("clients/python/src"))
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", free_port().to_string())
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("RANK")
        .output()
        .expect("running python3");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}{}", String::from_utf8_lossy(&o.stderr));
    // Per rank and step: input (stage 0), forward, backward and a send or
    // receive each way per micro-batch, the all-reduce of each of its 8 or 24
    // parameters, the optimizer.
    let recorded: Vec<u64> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| v["ops"].as_u64().unwrap())
        .collect();
    assert_eq!(recorded.len(), 4, "{stdout}");
    let mut view = Value::Null;
    let named = wait_for(Duration::from_secs(60), || {
        view = sonde.json("/api/jobs/py-pipe");
        view["findings"].as_array().is_some_and(|f| {
            f.iter()
                .any(|f| f["kind"] == "what-if" && f["finding"]["about"] == "stage" && f["finding"]["id"] == "1")
        })
    });
    assert!(
        named,
        "no What-if finding naming stage 1: {:#}\n{}",
        view["findings"],
        sonde.output()
    );
}
