//! The bundled plugins on a cluster master. determined: a two-rank job
//! reports one rank to each of two agents; the master's determined plugin
//! has both ranks' timings, each labelled with its rank and node, and each
//! node's system metrics taken from that node's agent (its forwarded
//! samples), never from the master's own machine. dlrover: the master's job
//! master sees every worker node's usage from that node's agent.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use sonde_e2e::*;

const JOB: &str = "train-d";
const STEPS: u64 = 16;
const NODES: [&str; 2] = ["node-0", "node-1"];

fn master(dir: &std::path::Path, grpc: u16) -> Sonde {
    Sonde::start(
        dir,
        &[
            (plugin_file("bundled/determined.wasm"), "determined"),
            (plugin_file("bundled/dlrover.wasm"), "dlrover"),
        ],
        &[
            "--role",
            "master",
            "--set",
            &format!("ingest.otlp_grpc_listen=\"127.0.0.1:{grpc}\""),
            "--set",
            "ingest.otlp_http_listen=\"off\"",
            "--set",
            "host.name=\"the-master\"",
            // Agents' samples and forwarded reports come an export interval
            // (300 ms here) after they were taken: a lag well past it.
            "--set",
            "plugin.determined.settings={lag_ms=1500, flush_every_s=1.0, deliver_every_ms=200}",
        ],
    )
}

/// One step of one rank as the job posts it to the sonde on its node.
fn step(rank: i32, batch: u64, start: u64, ms: u64) -> Value {
    json!({
        "origin": {"job": JOB, "rank": rank, "local_rank": 0, "role": "worker"},
        "progress": [{"value": batch, "time_ns": start}],
        "timings": [{"name": "train_batch", "start_ns": start, "end_ns": start + ms * 1_000_000, "batch_idx": batch}],
    })
}

/// The determined plugin's series on the master with metric `name`, as (host.name, attributes).
fn series(master: &Sonde, name: &str) -> Vec<(String, Value)> {
    let s = master.json(&format!("/api/series?plugin=determined&name={name}"));
    s["series"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == name && s["last_ms"].is_number())
        .map(|s| {
            let node = s["attributes"]["host.name"].as_str().unwrap_or("").to_string();
            (node, s["attributes"].clone())
        })
        .collect()
}

/// Mean per bucket (ms) of the one series `id` over [from, to] ms, in 1 ms buckets.
fn values(master: &Sonde, id: u64, from: u64, to: u64) -> BTreeMap<u64, f64> {
    let d = master.json(&format!(
        "/api/series/data?ids={id}&from={from}&to={to}&max_points=10000"
    ));
    let s = &d["data"][0];
    let t = s["t"].as_array().unwrap();
    let mean = s["mean"].as_array().unwrap();
    t.iter()
        .zip(mean)
        .filter_map(|(t, v)| Some((t.as_u64()?, v.as_f64()?)))
        .collect()
}

/// The id of the one series listed by `query` whose attributes satisfy `pick`.
fn series_id(master: &Sonde, query: &str, pick: impl Fn(&Value) -> bool) -> u64 {
    let s = master.json(&format!("/api/series?{query}"));
    let found: Vec<u64> = s["series"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| pick(&s["attributes"]))
        .map(|s| s["id"].as_u64().unwrap())
        .collect();
    assert_eq!(found.len(), 1, "{query}: {s:#}");
    found[0]
}

#[test]
fn a_master_profiles_every_rank_with_each_ranks_node_metrics_from_its_agent() {
    let tmp = tempfile::tempdir().unwrap();
    let grpc = free_port();
    let master = master(&tmp.path().join("master"), grpc);
    let agents: Vec<Sonde> = NODES.iter().map(|n| cluster_agent(tmp.path(), n, grpc)).collect();
    let up = wait_for(Duration::from_secs(30), || {
        let n = master.json("/api/cluster/nodes");
        NODES.iter().all(|name| {
            n["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v["node"] == *name && v["state"] == "up")
        })
    });
    assert!(up, "{}", master.json("/api/cluster/nodes"));

    // Rank r runs on node-r and reports to that node's agent; rank 1 is slower.
    for b in 0..STEPS {
        let t = now_ns();
        for (rank, a) in agents.iter().enumerate() {
            let (code, body) = post_json(&a.api, "/api/ingest", &step(rank as i32, b, t, 20 + 10 * rank as u64));
            assert_eq!(code, 202, "{body}");
        }
        std::thread::sleep(Duration::from_millis(150));
    }

    // Both ranks' timings, each with its rank and node (GET /timings).
    let timings = |m: &Sonde| m.json(&format!("/api/plugins/determined/timings?job={JOB}"));
    let all = wait_for(Duration::from_secs(20), || {
        timings(&master).as_array().unwrap().len() as u64 == 2 * STEPS
    });
    assert!(all, "{}\n{}", timings(&master), master.output());
    for t in timings(&master).as_array().unwrap() {
        let rank = t["rank"].as_u64().unwrap() as usize;
        assert_eq!(t["node"], NODES[rank], "{t}");
        let want = [0.02, 0.03][rank];
        assert!((t["duration_s"].as_f64().unwrap() - want).abs() < 1e-9, "{t}");
    }
    // GET /state lists both ranks on their nodes, both nodes giving system metrics.
    let st = master.json("/api/plugins/determined/state");
    let job = st["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job"] == JOB)
        .unwrap()
        .clone();
    let ranks: Vec<(u64, &str)> = job["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["rank"].as_u64().unwrap(), r["node"].as_str().unwrap()))
        .collect();
    assert_eq!(ranks, [(0, "node-0"), (1, "node-1")], "{job}");
    let mut sys_nodes: Vec<&str> = job["system_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    sys_nodes.sort();
    assert_eq!(sys_nodes, NODES, "{job}");

    // The exported series: timings by rank and node...
    let durations = series(&master, "sonde.timing.duration");
    let mut by_node: Vec<(String, String)> = durations
        .iter()
        .map(|(node, a)| (node.clone(), a["determined.rank"].to_string()))
        .collect();
    by_node.sort();
    assert_eq!(
        by_node,
        [
            ("node-0".to_string(), "0".to_string()),
            ("node-1".to_string(), "1".to_string())
        ],
        "{durations:?}"
    );
    // ...and each node's system metrics, from its agent: never the master's machine.
    for metric in ["sonde.cpu.busy", "system.memory.linux.available"] {
        let found = wait_for(Duration::from_secs(15), || {
            let mut nodes: Vec<String> = series(&master, metric).into_iter().map(|(n, _)| n).collect();
            nodes.sort();
            nodes == NODES
        });
        assert!(
            found,
            "{metric}: {:?}\n{}",
            series(&master, metric),
            master.json("/api/plugins/determined/state")
        );
        assert!(
            series(&master, metric)
                .iter()
                .all(|(_, a)| a["determined.trial"] == JOB),
            "{metric}"
        );
    }
    // The values are that node's agent's readings at the same ticks: the
    // master keeps a copy of every agent's series to compare with. The agent
    // samples the CPU per mode; the busy share is 1 - idle - iowait of all
    // CPUs (the SDK's rule), from the copies' 32-bit means.
    // Under load the agents' exports arrive late: wait for a window of 9 s
    // holding ten profiled ticks, each with the agent's sampled modes beside it.
    for node in NODES {
        let profiled = series_id(
            &master,
            &format!("plugin=determined&name=sonde.cpu.busy&node={node}"),
            |_| true,
        );
        let mode = |m: &str| {
            series_id(
                &master,
                &format!("scope=sonde.cluster.remote&name=system.cpu.utilization&node={node}"),
                |a| a.get("cpu.logical_number").is_none() && a["cpu.mode"] == m,
            )
        };
        let (idle, iowait) = (mode("idle"), mode("iowait"));
        let read = || {
            let to = now_ns() / 1_000_000;
            let from = to - 9_000;
            let p = values(&master, profiled, from, to);
            let (i, w) = (values(&master, idle, from, to), values(&master, iowait, from, to));
            (p, i, w)
        };
        let mut got = read();
        let enough = wait_for(Duration::from_secs(30), || {
            got = read();
            got.0.len() >= 10 && got.0.keys().all(|t| got.1.contains_key(t) && got.2.contains_key(t))
        });
        let (profiled, idle, iowait) = got;
        assert!(enough, "{node}: {profiled:?}\nidle {idle:?}\niowait {iowait:?}");
        for (t, v) in &profiled {
            let sampled = idle.get(t).zip(iowait.get(t)).map(|(i, w)| 1.0 - i - w);
            assert!(
                sampled.is_some_and(|s| (s - v).abs() < 1e-6),
                "{node} at {t}: busy {v} vs 1 - idle - iowait {sampled:?}\nidle {idle:?}\niowait {iowait:?}"
            );
        }
    }
}

#[test]
fn a_masters_dlrover_sees_every_worker_nodes_usage_from_its_agent() {
    let tmp = tempfile::tempdir().unwrap();
    let grpc = free_port();
    let master = master(&tmp.path().join("master"), grpc);
    let agents: Vec<Sonde> = NODES.iter().map(|n| cluster_agent(tmp.path(), n, grpc)).collect();
    // Each worker announces itself through the sonde on its node.
    for (rank, a) in agents.iter().enumerate() {
        let (code, body) = post_json(&a.api, "/api/ingest", &step(rank as i32, 0, now_ns(), 20));
        assert_eq!(code, 202, "{body}");
    }
    // The agents sample this machine: its logical CPUs, each counted once
    // however many `cpu.mode` series it has, and at most all of them in use.
    let cores = logical_cpus() as f64;
    let mut nodes = Value::Null;
    let seen = wait_for(Duration::from_secs(30), || {
        nodes = master.json("/api/plugins/dlrover/nodes");
        NODES.iter().all(|name| {
            nodes.as_array().unwrap().iter().any(|n| {
                n["name"] == *name
                    && n["source"] == "gateway"
                    && n["capacity"]["cpu"].as_f64() == Some(cores)
                    && n["cpu"].as_f64().is_some_and(|c| (0.0..=cores).contains(&c))
                    && n["memory_mib"].as_f64().is_some_and(|m| m > 0.0)
            })
        })
    });
    assert!(seen, "dlrover on the master lacks a worker's usage: {nodes:#}");
}
