//! The dlrover plugin end to end.
//!
//! Dynamic data sharding: three Python workers (tests/py/dlrover_worker.py,
//! stdlib HTTP only) pull shards of a shuffled text dataset through sonde's
//! plugin routes for two epochs, send heartbeats, step timings and the global
//! step to the JSON ingest. One worker is slow (a straggler, found from its
//! step times during training) and is SIGKILLed in the middle of a shard;
//! sonde itself is SIGKILLed mid-epoch and started again on the same data
//! directory and port. In the end every sample of every epoch was consumed
//! exactly once, or is listed in the dead-letter list, by the workers' own
//! logs of what they committed; the killed worker's shard was re-queued after
//! its heartbeats stopped and finished by another worker.
//!
//! Gateway mode: an edge sonde exports its system metrics to a gateway sonde
//! running the plugin, which then sees both nodes' resources.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use sonde_e2e::*;

const SIZE: u64 = 2000;
const EPOCHS: u64 = 2;
const SLOW: usize = 1;

fn settings() -> Vec<String> {
    vec![
        "--set".into(),
        "plugin.dlrover.settings={node=\"master-host\", tick_ms=100, heartbeat_timeout_s=2.0, heartbeat_scan_s=0.3, \
         stats_interval_s=0.5, straggler_min_steps=3, straggler_window=10, task_timeout_s=120.0, \
         sample_period_ms=200, deliver_every_ms=500}"
            .into(),
        // Every route call that changes sharding writes to the state store first.
        "--set".into(),
        "plugin.dlrover.call_timeout_ms=3000".into(),
    ]
}

fn start(dir: &Path, port: Option<u16>) -> Sonde {
    let args = settings();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let plugins = [(plugin_file("bundled/dlrover.wasm"), "dlrover")];
    let s = match port {
        Some(p) => Sonde::start_on(dir, &plugins, &args, p),
        None => Sonde::start(dir, &plugins, &args),
    };
    let up = wait_for(Duration::from_secs(60), || {
        s.get("/api/plugins/dlrover/overview").0 == 200
    });
    assert!(up, "the dlrover plugin did not start:\n{}", s.output());
    s
}

fn worker(api: &str, i: usize, log: &Path) -> Child {
    let sample_ms = if i == SLOW { "15" } else { "3" };
    let mut c = Command::new("python3");
    c.arg(repo().join("tests/py/dlrover_worker.py"))
        .args([&format!("http://{api}"), &format!("worker-{i}"), &i.to_string()])
        .arg(log)
        .args(["--size", &SIZE.to_string(), "--epochs", &EPOCHS.to_string()])
        .args(["--batch", "10", "--minibatches", "2", "--shuffle", "--storage", "text"])
        .args(["--sample-ms", sample_ms])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if i == 0 {
        c.arg("--report-steps");
    }
    c.spawn().expect("starting python3")
}

/// One line of a worker's log.
fn lines(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Per shard attempt in a worker's log: (task, epoch, samples, committed).
fn attempts(log: &Path) -> Vec<(u64, u64, Vec<u64>, bool)> {
    let mut out: Vec<(u64, u64, Vec<u64>, bool)> = Vec::new();
    for l in lines(log) {
        match l["event"].as_str().unwrap_or("") {
            "start" => out.push((l["task"].as_u64().unwrap(), l["epoch"].as_u64().unwrap(), vec![], false)),
            "sample" => out.last_mut().unwrap().2.push(l["index"].as_u64().unwrap()),
            "commit" => out.last_mut().unwrap().3 = true,
            _ => {}
        }
    }
    out
}

fn plugin_json(s: &Sonde, path: &str) -> Value {
    s.json(&format!("/api/plugins/dlrover{path}"))
}

#[test]
fn workers_pull_every_sample_exactly_once_through_a_worker_kill_and_a_sonde_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sonde");
    let mut sonde = start(&dir, None);
    let port: u16 = sonde.api.rsplit(':').next().unwrap().parse().unwrap();
    let logs: Vec<_> = (0..3).map(|i| tmp.path().join(format!("worker-{i}.jsonl"))).collect();
    let mut workers: Vec<Child> = (0..3).map(|i| worker(&sonde.api, i, &logs[i])).collect();
    let t0 = Instant::now();

    // 1. The slow worker is found a straggler from its step times, during training.
    let found = wait_for(Duration::from_secs(30), || {
        let (c, b) = sonde.get("/api/plugins/dlrover/stragglers");
        c == 200
            && serde_json::from_str::<Value>(&b).unwrap()["training"]
                .to_string()
                .contains("worker-1")
    });
    assert!(
        found,
        "no straggler found: {}\n{}",
        sonde.get("/api/plugins/dlrover/stragglers").1,
        sonde.output()
    );
    let nodes = plugin_json(&sonde, "/nodes");
    let speed = plugin_json(&sonde, "/speed");

    // 2. SIGKILL the slow worker in the middle of a shard.
    let mid_shard = wait_for(Duration::from_secs(20), || {
        let l = lines(&logs[SLOW]);
        l.last()
            .is_some_and(|x| x["event"] == "sample" && (1..12).contains(&x["pos"].as_u64().unwrap_or(99)))
    });
    assert!(mid_shard, "worker-1 never was mid-shard");
    workers[SLOW].kill().unwrap();
    workers[SLOW].wait().unwrap();
    let killed = attempts(&logs[SLOW]).pop().unwrap();
    assert!(
        !killed.3 && !killed.2.is_empty(),
        "killed in the middle of a shard: {killed:?}"
    );

    // 3. SIGKILL sonde mid-epoch, and start it again on the same data and port.
    let before = plugin_json(&sonde, "/datasets/ds");
    let done = before["done_records"].as_u64().unwrap();
    assert!(done > 0 && done < SIZE * EPOCHS, "mid-run: {before}");
    sonde.proc.child.kill().unwrap();
    sonde.proc.child.wait().unwrap();
    let restarted_at = Instant::now();
    std::thread::sleep(Duration::from_millis(300));
    let sonde = start(&dir, Some(port));

    // 4. The others finish; the dead worker's shard is re-queued after 2 s without heartbeats.
    for (i, w) in workers.iter_mut().enumerate().filter(|(i, _)| *i != SLOW) {
        let deadline = Instant::now() + Duration::from_secs(45);
        loop {
            if let Some(st) = w.try_wait().unwrap() {
                let mut err = String::new();
                if let Some(mut e) = w.stderr.take() {
                    std::io::Read::read_to_string(&mut e, &mut err).unwrap();
                }
                assert!(st.success(), "worker-{i} failed: {err}\n{}", sonde.output());
                break;
            }
            assert!(
                Instant::now() < deadline,
                "worker-{i} did not finish:\n{}",
                sonde.output()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let elapsed = t0.elapsed();

    // Every sample of every epoch: committed exactly once, or dead-lettered.
    let ds = plugin_json(&sonde, "/datasets/ds");
    assert_eq!(ds["completed"], true, "{ds}");
    let mut seen: BTreeMap<(u64, u64), u32> = BTreeMap::new();
    let mut committed_tasks = BTreeSet::new();
    for log in &logs {
        for (task, epoch, samples, committed) in attempts(log) {
            if committed {
                committed_tasks.insert(task);
                for s in samples {
                    *seen.entry((epoch, s)).or_default() += 1;
                }
            }
        }
    }
    for d in ds["dead_letter_shards"].as_array().unwrap() {
        for r in d["records"].as_array().unwrap() {
            *seen
                .entry((d["shard"]["epoch"].as_u64().unwrap(), r.as_u64().unwrap()))
                .or_default() += 1;
        }
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).take(5).collect();
    assert!(twice.is_empty(), "consumed more than once: {twice:?}");
    let missing: Vec<_> = (0..EPOCHS)
        .flat_map(|e| (0..SIZE).map(move |i| (e, i)))
        .filter(|k| !seen.contains_key(k))
        .take(5)
        .collect();
    assert!(missing.is_empty(), "never consumed: {missing:?}");
    assert_eq!(seen.len() as u64, SIZE * EPOCHS);
    assert!(
        committed_tasks.contains(&killed.0),
        "the killed worker's shard (task {}) was finished by another",
        killed.0
    );
    // The shuffle: the first shard's records are not 0..20.
    let first = &attempts(&logs[0])[0].2;
    assert_ne!(
        first,
        &(0..first.len() as u64).collect::<Vec<_>>(),
        "text + shuffle gives shuffled indices"
    );
    // Mid-epoch: commits of the epoch running at the kill both before and after the restart.
    let epoch_at_kill = before["epoch"].as_u64().unwrap() - 1;
    assert!(
        ds["done_by_epoch"][epoch_at_kill.to_string()].as_u64().unwrap()
            > before["done_by_epoch"][epoch_at_kill.to_string()].as_u64().unwrap_or(0)
    );

    // How sonde knew: heartbeat death, then the DOING shard back to TODO.
    let failures = plugin_json(&sonde, "/failures");
    let events = failures["events"].to_string();
    assert!(
        events.contains("node-dead") && events.contains("worker-1"),
        "{failures}"
    );
    assert!(events.contains("shards-requeued"), "{failures}");
    let n1 = plugin_json(&sonde, "/nodes");
    let w1 = n1.as_array().unwrap().iter().find(|n| n["name"] == "worker-1").unwrap();
    assert_eq!(
        (w1["status"].as_str(), w1["exit_reason"].as_str()),
        (Some("failed"), Some("NoHeartBeat")),
        "{w1}"
    );

    // Collection before the restart: the workers, this host, the speed.
    let names: Vec<&str> = nodes
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    for want in ["master-host", "worker-0", "worker-1", "worker-2"] {
        assert!(names.contains(&want), "{want} in {names:?}");
    }
    let host = nodes
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "master-host")
        .unwrap();
    assert!(
        host["cpu"].as_f64().is_some() && host["memory_mib"].as_f64().unwrap() > 0.0,
        "{host}"
    );
    assert!(speed["speed"].as_f64().unwrap() > 0.0, "{speed}");
    // Runtime statistics and the initial plan survived the restart (one of each kind, no second initial plan).
    let plans = plugin_json(&sonde, "/plans");
    let initial = plans["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "initial")
        .count();
    assert_eq!(initial, 1, "{plans}");
    assert!(!plugin_json(&sonde, "/stats").as_array().unwrap().is_empty());
    println!(
        "dlrover e2e: {} samples x {EPOCHS} epochs, 3 workers, one killed mid-shard, sonde killed and restarted \
         ({} s after the start); done in {:.1} s; restart to end {:.1} s",
        SIZE,
        (restarted_at - t0).as_secs_f64(),
        elapsed.as_secs_f64(),
        restarted_at.elapsed().as_secs_f64()
    );
}

#[test]
fn a_gateway_sonde_running_the_plugin_sees_every_node() {
    let tmp = tempfile::tempdir().unwrap();
    let grpc = free_port();
    let gateway = Sonde::start(
        &tmp.path().join("gateway"),
        &[(plugin_file("bundled/dlrover.wasm"), "dlrover")],
        &[
            "--set",
            &format!("ingest.otlp_grpc_listen=\"127.0.0.1:{grpc}\""),
            "--set",
            "ingest.otlp_http_listen=\"off\"",
            "--set",
            "host.name=\"gateway-1\"",
            "--set",
            "plugin.dlrover.settings={node=\"gateway-1\", stats_interval_s=0.5, tick_ms=100}",
            "--set",
            "plugin.dlrover.call_timeout_ms=3000",
        ],
    );
    let _edge = Sonde::start(
        &tmp.path().join("edge"),
        &[(plugin_file("bundled/sysmetrics.wasm"), "sysmetrics")],
        &[
            "--export-endpoint",
            &format!("http://127.0.0.1:{grpc}"),
            "--set",
            "export.interval_ms=300",
            "--set",
            "host.name=\"edge-1\"",
        ],
    );
    let seen = wait_for(Duration::from_secs(30), || {
        let (c, b) = gateway.get("/api/plugins/dlrover/nodes");
        if c != 200 {
            return false;
        }
        let v: Value = serde_json::from_str(&b).unwrap();
        let find = |n: &str| v.as_array().unwrap().iter().find(|x| x["name"] == n).cloned();
        let ok = |x: Option<Value>, source: &str| {
            x.is_some_and(|x| {
                x["source"] == source && x["cpu"].as_f64().is_some() && x["memory_mib"].as_f64().unwrap_or(0.0) > 0.0
            })
        };
        ok(find("edge-1"), "gateway") && ok(find("gateway-1"), "host")
    });
    assert!(
        seen,
        "the gateway's plugin does not see both nodes: {}\n{}",
        gateway.get("/api/plugins/dlrover/nodes").1,
        gateway.output()
    );
    let v = plugin_json(&gateway, "/nodes");
    let edge = v.as_array().unwrap().iter().find(|x| x["name"] == "edge-1").unwrap();
    // The edge's machine: its logical CPUs from its per-core series (each
    // counted once, whatever its `cpu.mode` series), its memory in MiB.
    assert_eq!(edge["capacity"]["cpu"].as_f64(), Some(logical_cpus() as f64), "{edge}");
    assert!(edge["capacity"]["memory_mib"].as_f64().unwrap() > 100.0, "{edge}");
}
