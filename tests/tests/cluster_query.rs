//! `storage.query` end to end: a master writes to a real Prometheus-compatible
//! engine (`storage.remote_write`) and reads its history back from it
//! (`storage.query`). For a range older than the master's live store (the
//! master restarts after it, and the embedded history is off with `query`
//! set), the master's `/api/series/data` for an agent's series must give the
//! buckets the agent itself serves: same times, same values. With
//! the engine stopped, the same request is a clear error and the master
//! keeps serving its live window.

use std::time::Duration;

use serde_json::Value;
use sonde_e2e::engines::Engine;
use sonde_e2e::*;

fn agent(dir: &std::path::Path, name: &str, master_grpc: u16) -> Sonde {
    cluster_agent(dir, name, master_grpc)
}

/// (series without `host.name`, as JSON text) → that series' buckets, for
/// the CPU series `sonde` lists for node-0 over `[from, to]` in 1 ms buckets.
fn buckets_by_series(s: &Sonde, from: u64, to: u64) -> (u16, Vec<(String, Value)>, String) {
    let (code, body) = s.get(&format!(
        "/api/series/data?node=node-0&name=system.cpu.utilization&from={from}&to={to}&max_points=10000"
    ));
    if code != 200 {
        return (code, Vec::new(), body);
    }
    let list = s.json("/api/series?node=node-0&name=system.cpu.utilization");
    let d: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(d["bucket_ms"], 1, "{body}");
    let mut out = Vec::new();
    for b in d["data"].as_array().unwrap() {
        let meta = list["series"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == b["id"])
            .unwrap();
        let mut attrs = meta["attributes"].clone();
        attrs.as_object_mut().unwrap().remove("host.name");
        out.push((format!("{}{attrs}", meta["name"]), b.clone()));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    (code, out, body)
}

fn same(agent: &[(String, Value)], master: &[(String, Value)]) -> Result<usize, String> {
    if agent.len() != master.len() || agent.is_empty() {
        return Err(format!(
            "{} series on the agent, {} on the master",
            agent.len(),
            master.len()
        ));
    }
    let mut n = 0;
    for ((ka, a), (km, m)) in agent.iter().zip(master) {
        if ka != km {
            return Err(format!("series {ka} on the agent, {km} on the master"));
        }
        if a["t"] != m["t"] {
            return Err(format!("{ka}: times {} on the agent, {} on the master", a["t"], m["t"]));
        }
        for (x, y) in a["mean"].as_array().unwrap().iter().zip(m["mean"].as_array().unwrap()) {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            // Both are f32 of the same sample (the engine may keep fewer digits than f64).
            if (x - y).abs() > 1e-6 * x.abs().max(1e-6) {
                return Err(format!("{ka}: {x} on the agent, {y} on the master"));
            }
            n += 1;
        }
    }
    Ok(n)
}

fn through(engine: Engine) {
    let tmp = tempfile::tempdir().unwrap();
    let grpc = free_port();
    // The master's live store starts after this: a range from here is the engine's.
    let from = now_ns() / 1_000_000;
    let args = [
        "--role".to_string(),
        "master".into(),
        "--set".into(),
        format!("ingest.otlp_grpc_listen=\"127.0.0.1:{grpc}\""),
        "--set".into(),
        "ingest.otlp_http_listen=\"off\"".into(),
        "--set".into(),
        "host.name=\"the-master\"".into(),
        "--set".into(),
        format!("storage.remote_write.url=\"{}\"", engine.write_url()),
        "--set".into(),
        "storage.remote_write.flush_interval_ms=200".into(),
        "--set".into(),
        format!("storage.query.url=\"{}\"", engine.base),
        "--set".into(),
        "storage.query.timeout_ms=3000".into(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mdir = tmp.path().join("master");
    let mut master = Sonde::start(&mdir, &[], &args);
    let port: u16 = master.api.rsplit(':').next().unwrap().parse().unwrap();
    let a0 = agent(tmp.path(), "node-0", grpc);
    let _a1 = agent(tmp.path(), "node-1", grpc);
    let status = master.json("/api/status");
    assert!(
        status["storage"]["history"].is_null(),
        "the engine is the history: {}",
        status["storage"]
    );
    assert_eq!(status["storage"]["query"]["url"], engine.base.as_str());

    // Ten seconds from before the master started. Then the master restarts
    // (stopping sends what its writer holds): its new live store starts after
    // that range, so only the engine has it, under the first start's `instance`.
    let to = from + 10_000;
    std::thread::sleep(Duration::from_millis((to + 1_000).saturating_sub(now_ns() / 1_000_000)));
    master.proc.terminate(Duration::from_secs(20));
    let master = Sonde::start_on(&mdir, &[], &args, port);
    let restarted = now_ns() / 1_000_000;
    let mut why = String::new();
    let mut compared = 0;
    let agreed = wait_for(Duration::from_secs(40), || {
        let (_, on_agent, _) = buckets_by_series(&a0, from, to);
        let (code, on_master, body) = buckets_by_series(&master, from, to);
        if code != 200 {
            why = format!("master answered {code}: {body}");
            return false;
        }
        match same(&on_agent, &on_master) {
            Ok(n) => {
                compared = n;
                true
            }
            Err(e) => {
                why = e;
                false
            }
        }
    });
    assert!(
        agreed,
        "{}: the master's answer from the engine differs from the agent's: {why}\nmaster storage: {}\n{}",
        engine.name,
        master.json("/api/status")["storage"],
        engine.log_tail()
    );
    assert!(compared >= 20, "{}: compared only {compared} values", engine.name);
    let q = &master.json("/api/status")["storage"]["query"];
    assert!(q["requests"].as_u64().unwrap() > 0, "{q}");

    // Longer than an hour: read in steps (min/max/avg_over_time), still in the dashboard's shape.
    let (long_from, long_to) = (from - 2 * 3_600_000, to);
    let long = format!(
        "/api/series/data?node=node-0&name=system.cpu.utilization&from={long_from}&to={long_to}&max_points=1000"
    );
    let has_buckets = |v: &Value| {
        v["data"]
            .as_array()
            .is_some_and(|d| d.iter().any(|b| !b["t"].as_array().unwrap().is_empty()))
    };
    // VictoriaMetrics leaves the newest 30 s out of stepped reads (search.latencyOffset).
    let mut stepped = Value::Null;
    let some = wait_for(Duration::from_secs(60), || {
        stepped = master.json(&long);
        has_buckets(&stepped)
    });
    assert!(some, "{}: no stepped buckets: {stepped}", engine.name);
    let w = stepped["bucket_ms"].as_u64().unwrap();
    assert_eq!(w, (long_to - long_from).div_ceil(1000), "{stepped}");
    let data = stepped["data"].as_array().unwrap();
    for b in data {
        for i in 0..b["t"].as_array().unwrap().len() {
            let (lo, mean, hi) = (
                b["min"][i].as_f64().unwrap(),
                b["mean"][i].as_f64().unwrap(),
                b["max"][i].as_f64().unwrap(),
            );
            assert!(lo <= mean && mean <= hi, "{}: bucket {i} of {b}", engine.name);
            assert_eq!(b["t"][i].as_u64().unwrap() % w, 0, "aligned buckets: {b}");
        }
    }

    // The listing reaches back through the engine with node and job filters.
    let listed = master.json(&format!("/api/series?node=node-1&name=system.cpu&from={from}&to={to}"));
    assert_eq!(listed["engine"]["url"], engine.base.as_str(), "{listed}");
    assert!(
        listed["series"]
            .as_array()
            .is_some_and(|s| !s.is_empty() && s.iter().all(|m| m["attributes"]["host.name"] == "node-1")),
        "{listed}"
    );

    // The engine goes away: a clear error naming it, the master keeps serving.
    let base = engine.base.clone();
    drop(engine);
    let (code, body) = master.get(&format!(
        "/api/series/data?node=node-0&name=system.cpu.utilization&from={from}&to={to}&max_points=10000"
    ));
    assert!(code == 502 || code == 504, "{code}: {body}");
    let err: Value = serde_json::from_str(&body).unwrap();
    assert!(err["error"].as_str().unwrap().contains(&base), "{body}");
    assert_eq!(err["engine"], base.as_str());
    let (code, body) = master.get(&format!("/api/series?from={from}"));
    assert!(code == 502 || code == 504, "{code}: {body}");
    // The live window is still the live store's.
    let now = now_ns() / 1_000_000;
    let live = master.json(&format!(
        "/api/series/data?node=node-0&name=system.cpu.utilization&from={restarted}&to={now}"
    ));
    assert!(live["data"].as_array().is_some_and(|d| !d.is_empty()), "{live}");
    assert_eq!(master.get("/api/health").0, 200);
    let q = &master.json("/api/status")["storage"]["query"];
    assert!(q["errors"].as_u64().unwrap() >= 2, "{q}");
    assert!(q["last_error"].as_str().unwrap().contains(&base), "{q}");
}

#[test]
fn a_master_reads_its_history_back_from_prometheus() {
    through(Engine::prometheus());
}

#[test]
fn a_master_reads_its_history_back_from_victoria_metrics() {
    through(Engine::victoria_metrics());
}
