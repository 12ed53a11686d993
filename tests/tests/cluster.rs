//! Cluster mode end to end: one master and four agents, each its own `sonde`
//! process with its own ports and host name. A two-rank training job reports
//! to two different agents; the master sees both ranks' steps, every node,
//! and notices a node that dies.

use std::time::Duration;

use serde_json::{Value, json};
use sonde_e2e::*;

struct Cluster {
    master: Sonde,
    grpc: u16,
    agents: Vec<Sonde>,
    _tmp: tempfile::TempDir,
}

fn master_args(grpc: u16) -> Vec<String> {
    sonde_e2e::master_args(grpc, &["--set", "cluster.node_timeout_ms=2500"])
}

fn agent(dir: &std::path::Path, name: &str, master_grpc: u16) -> Sonde {
    cluster_agent(dir, name, master_grpc)
}

fn cluster(agents: usize) -> Cluster {
    let tmp = tempfile::tempdir().unwrap();
    let grpc = free_port();
    let args = master_args(grpc);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let master = Sonde::start(&tmp.path().join("master"), &[], &args);
    let agents = (0..agents)
        .map(|i| agent(tmp.path(), &format!("node-{i}"), grpc))
        .collect();
    Cluster {
        master,
        grpc,
        agents,
        _tmp: tmp,
    }
}

fn nodes(master: &Sonde) -> Vec<Value> {
    master.json("/api/cluster/nodes")["nodes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn node<'a>(nodes: &'a [Value], name: &str) -> Option<&'a Value> {
    nodes.iter().find(|n| n["node"] == name)
}

/// One training step of one rank, as a job posts it to its local sonde.
fn step(rank: i32, batch: u64, t0: u64, slow: u64) -> Value {
    let ms = 1_000_000u64;
    json!({
        "origin": {"job": "train-1", "rank": rank, "local_rank": 0, "role": "worker"},
        "progress": [{"value": batch, "time_ns": t0}],
        "timings": [
            {"name": "dataloader", "start_ns": t0, "end_ns": t0 + 2 * ms, "batch_idx": batch},
            {"name": "forward", "start_ns": t0 + 2 * ms, "end_ns": t0 + (10 + slow) * ms, "batch_idx": batch},
            {"name": "backward", "start_ns": t0 + (10 + slow) * ms, "end_ns": t0 + (25 + slow) * ms, "batch_idx": batch},
        ],
    })
}

#[test]
fn a_master_sees_every_node_and_both_ranks_of_a_job_reported_to_different_agents() {
    let mut c = cluster(4);
    // Every agent shows up, as an agent, with its version and plugins.
    let all_up = wait_for(Duration::from_secs(30), || {
        let n = nodes(&c.master);
        (0..4).all(|i| {
            node(&n, &format!("node-{i}")).is_some_and(|v| {
                v["state"] == "up" && v["agent"] == true && v["plugins"].to_string().contains("sysmetrics")
            })
        })
    });
    assert!(all_up, "not every agent reached the master: {:#?}", nodes(&c.master));
    let n = nodes(&c.master);
    let v = node(&n, "node-2").unwrap();
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["duplicate_name"], false);
    assert!(v["clock_skew_ms"].as_i64().unwrap().abs() < 2_000, "{v}");

    // Rank 0 reports to node-0's agent, rank 1 to node-1's; rank 1 is slower.
    let t0 = now_ns();
    for b in 0..6u64 {
        let t = t0 + b * 50_000_000;
        let (code, body) = post_json(&c.agents[0].api, "/api/ingest", &step(0, b, t, 0));
        assert_eq!(code, 202, "{body}");
        let (code, body) = post_json(&c.agents[1].api, "/api/ingest", &step(1, b, t, 7));
        assert_eq!(code, 202, "{body}");
    }
    let mut job = Value::Null;
    let both = wait_for(Duration::from_secs(30), || {
        let (code, body) = c.master.get("/api/jobs/train-1");
        if code != 200 {
            return false;
        }
        job = serde_json::from_str(&body).unwrap();
        job["steps"]
            .as_array()
            .is_some_and(|s| s.len() == 6 && s.iter().all(|b| b["ranks"].as_array().is_some_and(|r| r.len() == 2)))
    });
    assert!(both, "the master does not have both ranks' steps: {job:#}");
    let ranks = job["ranks"].as_array().unwrap();
    let on = |rank: i64| ranks.iter().find(|r| r["rank"] == rank).unwrap()["node"].clone();
    assert_eq!(on(0), "node-0", "rank 0 runs where it reported");
    assert_eq!(on(1), "node-1");
    for b in job["steps"].as_array().unwrap() {
        let (r0, r1) = (&b["ranks"][0], &b["ranks"][1]);
        assert!((r0["phases"]["forward"].as_f64().unwrap() - 0.008).abs() < 1e-9, "{r0}");
        assert!((r0["total_s"].as_f64().unwrap() - 0.025).abs() < 1e-9, "{r0}");
        assert!(
            (r1["total_s"].as_f64().unwrap() - 0.032).abs() < 1e-9,
            "rank 1 is 7 ms slower: {r1}"
        );
    }
    let jobs = c.master.json("/api/jobs");
    let listed = &jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job"] == "train-1")
        .unwrap()
        .clone();
    assert_eq!(listed["nodes"], json!(["node-0", "node-1"]));
    assert_eq!(listed["kinds"], json!(["training"]));
    assert!(
        !jobs["jobs"].as_array().unwrap().iter().any(|j| j["job"] == "sonde"),
        "an agent's own telemetry is not a job: {jobs:#}"
    );

    // The master shows each node's sampled series, by node.
    let has_cpu = wait_for(Duration::from_secs(20), || {
        let s = c.master.json("/api/series?node=node-3&name=system.cpu");
        s["series"].as_array().is_some_and(|v| !v.is_empty())
    });
    assert!(
        has_cpu,
        "no node-3 series on the master: {}",
        c.master.json("/api/series")
    );

    // An agent that dies goes `lost` within the timeout, as a decision.
    let killed_at = std::time::Instant::now();
    let _ = c.agents[3].proc.child.kill();
    let lost = wait_for(Duration::from_secs(15), || {
        node(&nodes(&c.master), "node-3").is_some_and(|v| v["state"] == "lost")
    });
    assert!(lost, "node-3 was not marked lost: {:#?}", nodes(&c.master));
    assert!(
        killed_at.elapsed() < Duration::from_secs(10),
        "lost took {:?}",
        killed_at.elapsed()
    );
    let d = c.master.json("/api/decisions?plugin=sonde.cluster");
    assert!(
        d["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["kind"] == "node-lost" && x["subject"] == "node-3"),
        "{d:#}"
    );
    let others_up = nodes(&c.master)
        .iter()
        .filter(|v| v["node"] != "node-3")
        .all(|v| v["state"] == "up");
    assert!(others_up, "{:#?}", nodes(&c.master));

    // It comes back under the same name: `back`.
    c.agents[3] = agent(c._tmp.path(), "node-3", c.grpc);
    let back = wait_for(Duration::from_secs(20), || {
        node(&nodes(&c.master), "node-3").is_some_and(|v| v["state"] == "up")
    });
    assert!(back, "{:#?}", nodes(&c.master));
}

#[test]
fn two_machines_with_one_name_are_flagged_and_an_agent_samples_on_while_its_master_is_down() {
    let tmp = tempfile::tempdir().unwrap();
    let grpc = free_port();
    let args = master_args(grpc);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut master = Sonde::start(&tmp.path().join("master"), &[], &args);
    let a = agent(&tmp.path().join("a"), "worker-0", grpc);
    let b = agent(&tmp.path().join("b"), "worker-0", grpc);
    let dup = wait_for(Duration::from_secs(20), || {
        node(&nodes(&master), "worker-0").is_some_and(|v| v["duplicate_name"] == true)
    });
    assert!(dup, "{:#?}", nodes(&master));
    assert_eq!(
        node(&nodes(&master), "worker-0").unwrap()["instances"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    drop(b);

    // The master goes away: the agent keeps sampling and keeps taking reports.
    let _ = master.proc.child.kill();
    let _ = master.proc.child.wait();
    let ticks = |s: &Sonde| s.json("/api/status")["sampler"]["period"]["ticks"].as_u64().unwrap();
    let before = ticks(&a);
    std::thread::sleep(Duration::from_secs(2));
    assert!(ticks(&a) >= before + 10, "sampling stalled while the master was down");
    let (code, body) = post_json(&a.api, "/api/ingest", &step(0, 1, now_ns(), 0));
    assert_eq!(code, 202, "{body}");
    assert!(a.output().contains("heartbeat to the master failed"), "{}", a.output());
}

/// An agent whose clock runs 10 s ahead (Debian's libfaketime, preloaded
/// into the agent only): the master flags it with the measured skew, says so
/// as a decision, and keeps the agent's points at the agent's own times.
#[test]
fn an_agent_ten_seconds_ahead_is_flagged_and_its_points_keep_their_own_time() {
    let faketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
    assert!(
        std::path::Path::new(faketime).exists(),
        "libfaketime is missing (`./dev setup` installs Debian's faketime)"
    );
    let tmp = tempfile::tempdir().unwrap();
    let grpc = free_port();
    let args = master_args(grpc);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let master = Sonde::start(&tmp.path().join("master"), &[], &args);
    let _ahead = cluster_agent_with(
        tmp.path(),
        "ahead",
        grpc,
        &[],
        &[
            ("LD_PRELOAD", faketime),
            ("FAKETIME", "+10s"),
            // Only the wall clock is moved: timers and timeouts run as usual.
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
    );
    let flagged = wait_for(Duration::from_secs(20), || {
        node(&nodes(&master), "ahead").is_some_and(|n| n["clock_skewed"] == true)
    });
    assert!(flagged, "{:#?}", nodes(&master));
    let skew = node(&nodes(&master), "ahead").unwrap()["clock_skew_ms"]
        .as_i64()
        .unwrap();
    assert!((9_000..=11_500).contains(&skew), "measured skew {skew} ms");
    let mut d = Value::Null;
    let said = wait_for(Duration::from_secs(10), || {
        d = master.json("/api/decisions?plugin=sonde.cluster");
        d["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["kind"] == "clock-skew" && x["subject"] == "ahead")
    });
    assert!(said, "{d:#}");

    // The agent's CPU points are at its own (future) times, not moved to the master's.
    let mut last_ms = 0u64;
    let arrived = wait_for(Duration::from_secs(20), || {
        let list = master.json("/api/series?node=ahead&name=system.cpu.utilization");
        last_ms = list["series"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s["last_ms"].as_u64())
            .max()
            .unwrap_or(0);
        last_ms > 0
    });
    assert!(arrived, "no CPU series from the skewed agent");
    let master_now_ms = now_ns() / 1_000_000;
    let ahead_by = last_ms as i64 - master_now_ms as i64;
    assert!(
        (7_000..=11_500).contains(&ahead_by),
        "the last point is {ahead_by} ms from the master's now"
    );
}

/// A master writing to `engine`, two agents, and a job reporting a known
/// series to the first agent: the engine ends up with every node's sampled
/// series and the job's points with the same values and millisecond times.
fn through_an_engine(engine: sonde_e2e::engines::Engine) {
    let tmp = tempfile::tempdir().unwrap();
    let grpc = free_port();
    let mut args = master_args(grpc);
    args.extend([
        "--set".into(),
        format!("storage.remote_write.url=\"{}\"", engine.write_url()),
    ]);
    args.extend(["--set".into(), "storage.remote_write.flush_interval_ms=200".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let master = Sonde::start(&tmp.path().join("master"), &[], &args);
    let a0 = agent(tmp.path(), "node-0", grpc);
    let _a1 = agent(tmp.path(), "node-1", grpc);

    let t0 = (now_ns() / 1_000_000 - 30_000) * 1_000_000; // whole ms, a little in the past
    let values = [0.5, 0.25, 0.125, 1.0 / 3.0];
    let points: Vec<Value> = values
        .iter()
        .enumerate()
        .map(|(i, v)| json!({"metric": "train.loss", "value": v, "time_ns": t0 + i as u64 * 1_000_000_000}))
        .collect();
    let body = json!({"origin": {"job": "train-9", "rank": 0}, "points": points});
    let (code, text) = post_json(&a0.api, "/api/ingest", &body);
    assert_eq!(code, 202, "{text}");

    let mut got = Value::Null;
    let arrived = wait_for(Duration::from_secs(40), || {
        got = engine.query("train_loss{host_name=\"node-0\",sonde_job=\"train-9\"}[10m]");
        got.as_array()
            .is_some_and(|s| s.len() == 1 && s[0]["values"].as_array().is_some_and(|v| v.len() == 4))
    });
    assert!(
        arrived,
        "{}: the job's series did not arrive: {got:#}\nmaster status: {}\n{}",
        engine.name,
        master.json("/api/status")["storage"],
        engine.log_tail()
    );
    for (i, pair) in got[0]["values"].as_array().unwrap().iter().enumerate() {
        let t_ms = (pair[0].as_f64().unwrap() * 1000.0).round() as u64;
        assert_eq!(
            t_ms,
            t0 / 1_000_000 + i as u64 * 1000,
            "{}: timestamp of sample {i}",
            engine.name
        );
        let v: f64 = pair[1].as_str().unwrap().parse().unwrap();
        assert!(
            (v - values[i]).abs() <= 1e-12 * values[i].abs(),
            "{}: sample {i}: {v} != {}",
            engine.name,
            values[i]
        );
    }
    // Every node's sampled series, labelled by node.
    for node in ["node-0", "node-1"] {
        let ok = wait_for(Duration::from_secs(30), || {
            engine
                .query(&format!("count({{host_name=\"{node}\",__name__=~\"system_.*\"}})"))
                .as_array()
                .is_some_and(|r| !r.is_empty())
        });
        assert!(ok, "{}: no system series from {node}", engine.name);
    }
    let stats = &master.json("/api/status")["storage"]["remote_write"];
    assert_eq!(stats["failed_samples"], 0, "{stats}");
    assert_eq!(stats["dropped_samples"], 0, "{stats}");
}

#[test]
fn a_master_writes_every_node_to_prometheus() {
    through_an_engine(sonde_e2e::engines::Engine::prometheus());
}

#[test]
fn a_master_writes_every_node_to_victoria_metrics() {
    through_an_engine(sonde_e2e::engines::Engine::victoria_metrics());
}

/// `/api/series/data` of one node's CPU series between `from` and `to` (ms).
fn cpu_buckets(master: &Sonde, from: u64, to: u64) -> Vec<Value> {
    let list = master.json("/api/series?node=node-0&name=system.cpu.utilization");
    let ids: Vec<String> = list["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].to_string())
        .collect();
    if ids.is_empty() {
        return Vec::new();
    }
    let d = master.json(&format!(
        "/api/series/data?ids={}&from={from}&to={to}&max_points=100",
        ids.join(",")
    ));
    d["data"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_master_killed_and_restarted_still_serves_what_it_had() {
    let tmp = tempfile::tempdir().unwrap();
    let grpc = free_port();
    let args = master_args(grpc);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mdir = tmp.path().join("master");
    let mut master = Sonde::start(&mdir, &[], &args);
    let port: u16 = master.api.rsplit(':').next().unwrap().parse().unwrap();
    let _a = agent(tmp.path(), "node-0", grpc);
    let from = now_ns() / 1_000_000;
    let seen = wait_for(Duration::from_secs(30), || {
        cpu_buckets(&master, from, now_ns() / 1_000_000)
            .iter()
            .any(|b| b["t"].as_array().is_some_and(|t| t.len() >= 20))
    });
    assert!(
        seen,
        "no CPU series from node-0 on the master: {}",
        master.json("/api/series")
    );
    // Everything older than two flush intervals is durable by now.
    std::thread::sleep(Duration::from_secs(3));
    let to = now_ns() / 1_000_000 - 2_500;
    let before = cpu_buckets(&master, from, to);
    let _ = master.proc.child.kill();
    let _ = master.proc.child.wait();

    let master = Sonde::start_on(&mdir, &[], &args, port);
    let after = cpu_buckets(&master, from, to);
    assert_eq!(after.len(), before.len(), "series after the restart: {after:#?}");
    let mut compared = 0;
    for b in &before {
        let a = after
            .iter()
            .find(|a| a["id"] == b["id"])
            .expect("the same series keeps its id");
        assert_eq!(a["t"], b["t"], "bucket times of series {}", b["id"]);
        for k in ["min", "max", "mean"] {
            for (x, y) in a[k].as_array().unwrap().iter().zip(b[k].as_array().unwrap()) {
                let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
                assert!((x - y).abs() <= 1e-5 * y.abs().max(1e-3), "{k}: {x} after, {y} before");
                compared += 1;
            }
        }
    }
    assert!(compared >= 60, "compared only {compared} values");
    // The dashboard's live stream draws the same minutes: its first event
    // takes what is older than the restarted live store from the history.
    let restarted_ms = now_ns() / 1_000_000 - 1_000;
    let snap = first_stream_event(
        &master.api,
        "/api/stream?window_s=300&max_points=300&node=node-0&name=system.cpu.utilization",
    );
    let older: usize = snap["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            b["t"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|t| t.as_u64().unwrap() < restarted_ms)
                .count()
        })
        .sum();
    assert!(
        older >= 10,
        "the snapshot has {older} buckets from before the restart: {snap}"
    );
    let s = master.json("/api/status");
    assert!(
        s["storage"]["history"]["series"].as_u64().unwrap() > 0,
        "{}",
        s["storage"]
    );
}

/// The master is down for a few seconds while an agent with a disk spool
/// samples on; once the master is back, the agent delivers what it sampled
/// meanwhile, and the master serves that stretch point for point as the
/// agent itself does.
#[test]
fn an_agent_with_a_spool_fills_the_gap_of_a_master_outage() {
    let tmp = tempfile::tempdir().unwrap();
    let grpc = free_port();
    let args = master_args(grpc);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mdir = tmp.path().join("master");
    let mut master = Sonde::start(&mdir, &[], &args);
    let port: u16 = master.api.rsplit(':').next().unwrap().parse().unwrap();
    let a = cluster_agent_with(
        tmp.path(),
        "spooler",
        grpc,
        &[
            "--set",
            "export.spool_max_bytes=67108864",
            "--set",
            "export.retry_max_ms=500",
            // Without the spool a request is given up after 1 s of retries,
            // so only the spool can bridge the 4 s outage below.
            "--set",
            "export.retry_max_elapsed_ms=1000",
        ],
        &[],
    );
    let from = now_ns() / 1_000_000;
    let seen = wait_for(Duration::from_secs(30), || {
        !node_cpu_times(&master, "spooler", from, now_ns() / 1_000_000).is_empty()
    });
    assert!(seen, "no CPU series from the agent: {}", master.json("/api/series"));

    let _ = master.proc.child.kill();
    let _ = master.proc.child.wait();
    let down_from = now_ns() / 1_000_000;
    std::thread::sleep(Duration::from_secs(4));
    let down_to = now_ns() / 1_000_000;
    let master = Sonde::start_on(&mdir, &[], &args, port);

    // What the agent sampled while the master was away, by its own account.
    let sampled = node_cpu_times(&a, "", down_from, down_to);
    assert!(sampled.len() >= 30, "the agent sampled only {} times", sampled.len());
    let mut got = Vec::new();
    let filled = wait_for(Duration::from_secs(30), || {
        got = node_cpu_times(&master, "spooler", down_from, down_to);
        got.len() >= sampled.len()
    });
    assert!(
        filled,
        "the master has {} of the {} points sampled during its outage\n{}",
        got.len(),
        sampled.len(),
        a.output()
    );
    assert_eq!(got, sampled, "the same sample times on the master as on the agent");
}

/// The times (ms) of one CPU series' points between `from` and `to`: on a
/// master for `node`, on the agent itself with an empty `node`.
pub(crate) fn node_cpu_times(s: &Sonde, node: &str, from: u64, to: u64) -> Vec<u64> {
    let filter = if node.is_empty() {
        String::new()
    } else {
        format!("&node={node}")
    };
    let list = s.json(&format!("/api/series?name=system.cpu.utilization{filter}"));
    let Some(id) = list["series"]
        .as_array()
        .and_then(|a| a.first())
        .map(|s| s["id"].clone())
    else {
        return Vec::new();
    };
    // Small enough buckets that each holds at most one 100 ms sample.
    let max_points = ((to - from) / 50).max(1);
    let d = s.json(&format!(
        "/api/series/data?ids={id}&from={from}&to={to}&max_points={max_points}"
    ));
    d["data"][0]["t"]
        .as_array()
        .map(|t| t.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

/// The data of the first event (`snapshot`) of a server-sent event stream.
fn first_stream_event(addr: &str, path: &str) -> Value {
    use std::io::{BufRead, BufReader, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    for line in BufReader::new(s).lines() {
        let line = line.expect("the stream's first event within 10 s");
        if let Some(data) = line.strip_prefix("data:") {
            return serde_json::from_str(data.trim()).unwrap();
        }
    }
    panic!("the stream ended before its first event");
}

/// rotel at its defaults (OTLP/gRPC export, gzip) between an agent and its
/// master: everything the agent sends goes through the collector, and the
/// master takes all of it.
#[test]
fn a_collector_at_its_defaults_forwards_an_agent_into_its_master() {
    let tmp = tempfile::tempdir().unwrap();
    let grpc = free_port();
    let args = master_args(grpc);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let master = Sonde::start(&tmp.path().join("master"), &[], &args);
    let rotel_grpc = free_port();
    let log = std::fs::File::create(tmp.path().join("rotel.log")).unwrap();
    let child = std::process::Command::new(rotel_bin())
        .args(["start", "--exporter", "otlp"])
        .args(["--otlp-exporter-endpoint", &format!("http://127.0.0.1:{grpc}")])
        .args(["--otlp-grpc-endpoint", &format!("127.0.0.1:{rotel_grpc}")])
        .args(["--otlp-http-endpoint", &format!("127.0.0.1:{}", free_port())])
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("starting rotel-agent");
    let _rotel = Proc { child, name: "rotel" };
    assert!(wait_for(Duration::from_secs(10), || std::net::TcpStream::connect((
        "127.0.0.1",
        rotel_grpc
    ))
    .is_ok()));
    // The agent's "master" is the collector.
    let a = agent(tmp.path(), "node-0", rotel_grpc);
    let (code, body) = post_json(&a.api, "/api/ingest", &step(0, 3, now_ns(), 0));
    assert_eq!(code, 202, "{body}");
    let through = wait_for(Duration::from_secs(30), || {
        let up = node(&nodes(&master), "node-0").is_some_and(|v| v["state"] == "up" && v["agent"] == true);
        up && master.get("/api/jobs/train-1").0 == 200
            && !master.json("/api/series?node=node-0")["series"]
                .as_array()
                .unwrap()
                .is_empty()
    });
    let ingest = master.json("/api/ingest");
    let rotel_log = std::fs::read_to_string(tmp.path().join("rotel.log")).unwrap_or_default();
    assert!(
        through,
        "nothing arrived through rotel: {ingest:#}\nrotel:\n{rotel_log}"
    );
    let otlp = &ingest["otlp"];
    assert!(
        otlp["requests"].as_u64().unwrap() > 0 && otlp["rows"].as_u64().unwrap() > 0,
        "{otlp}"
    );
    assert_eq!(otlp["rejected"], 0, "{otlp}");
    assert_eq!(otlp["refused_rows"], 0, "{otlp}");
    let job = master.json("/api/jobs/train-1");
    assert_eq!(job["steps"][0]["batch"], 3, "{job:#}");
}

/// What collectors and SDKs send over OTLP/HTTP: gzip and zstd bodies are
/// taken; one that inflates past `ingest.max_body_bytes` is refused with 413.
#[test]
fn compressed_otlp_http_bodies_are_taken_and_a_zip_bomb_is_refused() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let (s, http_port) = Sonde::start_otlp_http(tmp.path(), &["--set", "ingest.max_body_bytes=1048576"]);
    let addr = format!("127.0.0.1:{http_port}");
    // An empty-but-valid logs request is 0 bytes of protobuf; give it one record.
    let req = sonde::export::otlp::encode_logs(
        &[("service.name".into(), sonde::model::AttrValue::Str("zjob".into()))],
        &[sonde::model::LogBatch {
            scope: std::sync::Arc::new(sonde::model::Scope {
                name: "t".into(),
                version: String::new(),
            }),
            records: vec![sonde::model::LogRecord {
                time_ns: now_ns(),
                severity: sonde::model::Severity::Info,
                event_name: "hello".into(),
                body: "compressed".into(),
                attributes: vec![],
            }],
        }],
    );
    let raw = prost_bytes(&req);
    let mut gz = flate2_gzip(&raw);
    let send = |enc: &str, body: &[u8]| {
        http_with(
            &addr,
            "POST",
            "/v1/logs",
            &[("Content-Type", "application/x-protobuf"), ("Content-Encoding", enc)],
            body,
        )
    };
    assert_eq!(send("gzip", &gz).0, 200);
    let mut bomb = Vec::new();
    {
        let mut e = flate2::write::GzEncoder::new(&mut bomb, flate2::Compression::best());
        e.write_all(&vec![0u8; 32 << 20]).unwrap();
        e.finish().unwrap();
    }
    let (code, text) = send("gzip", &bomb);
    assert_eq!(code, 413, "{text}");
    assert!(text.contains("max_body_bytes"), "{text}");
    gz.truncate(gz.len() / 2);
    assert_eq!(send("gzip", &gz).0, 400, "a cut gzip stream is a bad request");
    assert_eq!(send("br", &raw).0, 415);
    let ingest = s.json("/api/ingest");
    assert_eq!(ingest["otlp"]["rows"], 1, "{ingest:#}");
    assert_eq!(ingest["otlp"]["rejected"], 3, "{ingest:#}");
}

fn prost_bytes(m: &impl prost::Message) -> Vec<u8> {
    m.encode_to_vec()
}

fn flate2_gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}
