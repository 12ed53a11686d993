//! Delivery between sondes under faults: a request re-sent after the master
//! took it is taken once, a master restart keeps its jobs, and a gateway
//! whose spool is full refuses (so its sender keeps the request) instead of
//! answering success and dropping it. A point the master acknowledged
//! survives its `kill -9`, and a master whose disk is full refuses until it
//! can write, after which its agent delivers everything.

use std::time::Duration;

use serde_json::{Value, json};
use sonde_e2e::proxy::HoldProxy;
use sonde_e2e::*;

use crate::cluster::node_cpu_times;

fn start_master(dir: &std::path::Path, grpc: u16, port: Option<u16>) -> Sonde {
    let args = master_args(grpc, &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match port {
        Some(p) => Sonde::start_on(dir, &[], &args, p),
        None => Sonde::start(dir, &[], &args),
    }
}

/// An agent without plugins and self-metrics: the only requests in its
/// export queue are its jobs' reports, forwarded to `master` (a gRPC port).
fn quiet_agent(dir: &std::path::Path, master: u16, extra: &[&str]) -> Sonde {
    let m = format!("http://127.0.0.1:{master}");
    let mut args = vec![
        "--role",
        "agent",
        "--master",
        m.as_str(),
        "--set",
        "host.name=\"node-1\"",
        "--set",
        "export.interval_ms=200",
        "--set",
        "export.self_metrics_interval_ms=0",
        "--set",
        "cluster.heartbeat_ms=300",
    ];
    args.extend_from_slice(extra);
    Sonde::start(dir, &[], &args)
}

/// One rank's batches `from..to` of job `job` in one report: three phases
/// each, 2, 8 and 15 ms.
fn steps(job: &str, rank: i32, from: u64, to: u64) -> Value {
    let ms = 1_000_000u64;
    let t0 = now_ns() - 3_600_000 * ms;
    let mut timings = Vec::new();
    for b in from..to {
        let t = t0 + b * 30 * ms;
        timings.push(json!({"name": "dataloader", "start_ns": t, "end_ns": t + 2 * ms, "batch_idx": b}));
        timings.push(json!({"name": "forward", "start_ns": t + 2 * ms, "end_ns": t + 10 * ms, "batch_idx": b}));
        timings.push(json!({"name": "backward", "start_ns": t + 10 * ms, "end_ns": t + 25 * ms, "batch_idx": b}));
    }
    json!({
        "origin": {"job": job, "rank": rank, "local_rank": 0, "role": "worker"},
        "timings": timings,
    })
}

fn post(s: &Sonde, body: &Value) {
    let (code, text) = post_json(&s.api, "/api/ingest", body);
    assert_eq!(code, 202, "{text}");
}

/// The job's steps as (batch, rank) → phases, from `/api/jobs/{job}`.
fn job_steps(s: &Sonde, job: &str, batches: usize) -> Option<Vec<Value>> {
    let (code, body) = s.get(&format!("/api/jobs/{job}?batches={batches}"));
    if code != 200 {
        return None;
    }
    let v: Value = serde_json::from_str(&body).ok()?;
    v["steps"].as_array().cloned()
}

/// Every phase of every rank's step is exactly its length once.
fn assert_each_phase_once(steps: &[Value]) {
    for b in steps {
        for r in b["ranks"].as_array().unwrap() {
            let p = &r["phases"];
            for (name, want) in [("dataloader", 0.002), ("forward", 0.008), ("backward", 0.015)] {
                let got = p[name].as_f64().unwrap_or(f64::NAN);
                assert!(
                    (got - want).abs() < 1e-9,
                    "batch {} rank {}: {name} is {got} s, not {want} s: taken more than once? {r}",
                    b["batch"],
                    r["rank"]
                );
            }
        }
    }
}

#[test]
fn a_timed_out_export_resent_after_the_master_took_it_appears_once() {
    let tmp = tempfile::tempdir().unwrap();
    let grpc = free_port();
    let master = start_master(&tmp.path().join("master"), grpc, None);
    let proxy = HoldProxy::start(grpc);
    let agent = quiet_agent(
        &tmp.path().join("agent"),
        proxy.port,
        &[
            "--set",
            "export.timeout_ms=800",
            "--set",
            "export.retry_initial_ms=100",
            "--set",
            "export.retry_max_ms=300",
        ],
    );
    post(&agent, &steps("train-netns", 1, 50, 53));
    let flowing = wait_for(Duration::from_secs(30), || {
        job_steps(&master, "train-netns", 100).is_some_and(|s| s.len() == 3)
    });
    assert!(flowing, "batches 50..53 never reached the master:\n{}", agent.output());

    // The master's answers are held back past the agent's timeout: the
    // agent sends batch 53 again, though the master took it the first time.
    proxy.hold(true);
    post(&agent, &steps("train-netns", 1, 53, 54));
    let taken = wait_for(Duration::from_secs(30), || {
        job_steps(&master, "train-netns", 100).is_some_and(|s| s.len() == 4)
    });
    assert!(taken, "the master never took batch 53");
    let resent = wait_for(Duration::from_secs(30), || {
        master.json("/api/ingest")["dedup"]["repeats"].as_u64().unwrap_or(0) >= 1
    });
    assert!(
        resent,
        "the agent did not send batch 53 again (or the master did not know it): {}\nagent: {}",
        master.json("/api/ingest"),
        agent.json("/api/status")["export"]["stats"]
    );
    let retries = agent.json("/api/status")["export"]["stats"]["retries"]
        .as_u64()
        .unwrap();
    assert!(retries >= 1, "the agent retried: {retries}");
    proxy.hold(false);

    // Once answers flow again, the next batch goes through, and batch 53 is there once.
    post(&agent, &steps("train-netns", 1, 54, 55));
    let after = wait_for(Duration::from_secs(30), || {
        job_steps(&master, "train-netns", 100).is_some_and(|s| s.len() == 5)
    });
    assert!(after, "batch 54 never arrived:\n{}", agent.output());
    let steps = job_steps(&master, "train-netns", 100).unwrap();
    assert_each_phase_once(&steps);
    let dedup = &master.json("/api/ingest")["dedup"];
    assert!(dedup["taken"].as_u64().unwrap() >= 3, "{dedup}");
    assert!(proxy.held() > 0, "the proxy held answers back");
}

#[test]
fn a_master_restart_keeps_a_jobs_page() {
    let tmp = tempfile::tempdir().unwrap();
    let grpc = free_port();
    let mdir = tmp.path().join("master");
    let mut master = start_master(&mdir, grpc, None);
    let port: u16 = master.api.rsplit(':').next().unwrap().parse().unwrap();
    for rank in 0..2 {
        post(&master, &steps("train-restart", rank, 0, 40));
    }
    let both = wait_for(Duration::from_secs(30), || {
        job_steps(&master, "train-restart", 1000)
            .is_some_and(|s| s.len() == 40 && s.iter().all(|b| b["ranks"].as_array().is_some_and(|r| r.len() == 2)))
    });
    assert!(both, "the job never showed both ranks' 40 steps");
    // On disk: nothing changed since the last write.
    let saved = wait_for(Duration::from_secs(10), || {
        let st = &master.json("/api/jobs")["stats"];
        st["persisted"] == true && st["unsaved"] == 0
    });
    assert!(saved, "{}", master.json("/api/jobs"));
    let page = |s: &Sonde| {
        let mut v = s.json("/api/jobs/train-restart?batches=1000");
        v.as_object_mut().unwrap().remove("findings");
        v
    };
    let before = page(&master);
    let _ = master.proc.child.kill();
    let _ = master.proc.child.wait();

    let master = start_master(&mdir, grpc, Some(port));
    let after = page(&master);
    assert_eq!(after, before, "the job's page after a kill -9 and restart");
    let listed = master.json("/api/jobs");
    assert!(listed["jobs"].to_string().contains("train-restart"), "{listed}");
}

#[test]
fn a_full_gateway_spool_refuses_and_its_sender_delivers_later() {
    let tmp = tempfile::tempdir().unwrap();
    // The master is not there yet: the gateway spools what it forwards.
    let master_grpc = free_port();
    let gw_grpc = free_port();
    let gateway = Sonde::start(
        &tmp.path().join("gateway"),
        &[],
        &[
            "--export-endpoint",
            &format!("http://127.0.0.1:{master_grpc}"),
            "--set",
            "ingest.forward=true",
            "--set",
            &format!("ingest.otlp_grpc_listen=\"127.0.0.1:{gw_grpc}\""),
            "--set",
            "ingest.otlp_http_listen=\"off\"",
            "--set",
            "export.self_metrics_interval_ms=0",
            "--set",
            "export.spool_max_bytes=1048576",
            "--set",
            "export.retry_max_ms=300",
        ],
    );
    let agent = quiet_agent(
        &tmp.path().join("agent"),
        gw_grpc,
        &[
            "--set",
            "export.spool_max_bytes=67108864",
            "--set",
            "export.retry_max_ms=300",
        ],
    );
    // 16 reports of 400 batches (1 200 spans, about 100 KB each): more than
    // the gateway's 1 MiB spool holds.
    let (reports, per) = (16u64, 400u64);
    for i in 0..reports {
        post(&agent, &steps("train-spool", 0, i * per, (i + 1) * per));
    }
    let refused = wait_for(Duration::from_secs(60), || {
        gateway.json("/api/status")["export"]["stats"]["forward_refused"]
            .as_u64()
            .unwrap_or(0)
            > 0
    });
    assert!(
        refused,
        "the gateway never refused: {}\n{}",
        gateway.json("/api/status")["export"]["stats"],
        gateway.output()
    );
    let st = &gateway.json("/api/status")["export"]["stats"];
    assert_eq!(st["spans_dropped"], 0, "refused, not dropped: {st}");
    // The gateway counts its refusal before the agent has read the answer.
    let retried = wait_for(Duration::from_secs(30), || {
        agent.json("/api/status")["export"]["stats"]["retries"]
            .as_u64()
            .unwrap_or(0)
            > 0
    });
    let a = &agent.json("/api/status")["export"]["stats"];
    assert!(retried, "the agent was told to retry: {a}");
    assert_eq!(a["spans_failed"], 0, "{a}");
    assert_eq!(a["spans_dropped"], 0, "{a}");

    // The master comes: the gateway's spool drains, the agent's refused
    // requests go through, and every batch is there once.
    let master = start_master(&tmp.path().join("master"), master_grpc, None);
    let rows = |s: &Sonde| {
        s.json("/api/jobs")["jobs"]
            .as_array()
            .and_then(|j| j.iter().find(|j| j["job"] == "train-spool").cloned())
            .map_or(0, |j| j["rows"].as_u64().unwrap_or(0))
    };
    let all = wait_for(Duration::from_secs(120), || rows(&master) >= reports * per * 3);
    let got = job_steps(&master, "train-spool", 50_000).map_or(0, |s| s.len());
    assert!(
        all,
        "the master has {got} of {} batches\nagent: {}\ngateway: {}",
        reports * per,
        agent.json("/api/status")["export"]["stats"],
        gateway.json("/api/status")["export"]["stats"]
    );
    assert_eq!(rows(&master), reports * per * 3, "every timing once");
    assert_each_phase_once(&job_steps(&master, "train-spool", 50_000).unwrap());
}

#[test]
fn a_job_posting_the_same_numbered_body_twice_is_taken_once() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Sonde::start(&tmp.path().join("sonde"), &[], &[]);
    let body = steps("train-once", 0, 0, 3).to_string();
    let post = |seq: &str| {
        http_with(
            &s.api,
            "POST",
            "/api/ingest",
            &[
                ("Content-Type", "application/json"),
                ("sonde-producer", "job-0-4242"),
                ("sonde-seq", seq),
            ],
            body.as_bytes(),
        )
    };
    let (code, first) = post("1");
    assert_eq!(code, 202, "{first}");
    // Its answer was lost, say: the job posts the same body with the same number.
    let (code, again) = post("1");
    assert_eq!(code, 202, "{again}");
    assert!(again.contains("\"repeat\":true"), "{again}");
    let (code, bad) = post("0");
    assert_eq!(code, 400, "a number from 1: {bad}");
    let ingest = s.json("/api/ingest");
    assert_eq!(ingest["dedup"]["repeats"], 1, "{ingest}");
    let got = job_steps(&s, "train-once", 100).unwrap();
    assert_eq!(got.len(), 3);
    assert_each_phase_once(&got);
}

#[test]
fn a_body_an_agent_takes_twice_reaches_the_master_once() {
    let tmp = tempfile::tempdir().unwrap();
    let grpc = free_port();
    let master = start_master(&tmp.path().join("master"), grpc, None);
    let body = steps("train-twice", 0, 0, 3).to_string();
    let post = |agent: &Sonde| {
        http_with(
            &agent.api,
            "POST",
            "/api/ingest",
            &[
                ("Content-Type", "application/json"),
                ("sonde-producer", "job-0-777"),
                ("sonde-seq", "5"),
            ],
            body.as_bytes(),
        )
    };
    let mut first = quiet_agent(&tmp.path().join("agent-1"), grpc, &[]);
    let (code, text) = post(&first);
    assert_eq!(code, 202, "{text}");
    let arrived = wait_for(Duration::from_secs(30), || {
        job_steps(&master, "train-twice", 100).is_some_and(|s| s.len() == 3)
    });
    assert!(arrived, "the body never reached the master:\n{}", first.output());
    let _ = first.proc.child.kill();
    let _ = first.proc.child.wait();
    // An agent that does not know it took the body (its window lost, as when
    // it is killed after forwarding it and before answering): the job posts
    // it again, with its number, and this agent takes it.
    let second = quiet_agent(&tmp.path().join("agent-2"), grpc, &[]);
    let (code, text) = post(&second);
    assert_eq!(code, 202, "{text}");
    assert!(!text.contains("repeat"), "new to this agent: {text}");
    let dropped = wait_for(Duration::from_secs(30), || {
        master.json("/api/ingest")["dedup"]["repeats"].as_u64().unwrap_or(0) >= 1
    });
    assert!(
        dropped,
        "the master did not know the body again: {}\n{}",
        master.json("/api/ingest")["dedup"],
        second.output()
    );
    let got = job_steps(&master, "train-twice", 100).unwrap();
    assert_eq!(got.len(), 3);
    assert_each_phase_once(&got);
}

fn export_stat(agent: &Sonde, name: &str) -> u64 {
    agent.json("/api/status")["export"]["stats"][name].as_u64().unwrap_or(0)
}

/// A sampling agent with a disk spool that retries quickly.
fn spooling_agent(dir: &std::path::Path, master: u16) -> Sonde {
    cluster_agent_with(
        dir,
        "node-s",
        master,
        &[
            "--set",
            "export.spool_max_bytes=16777216",
            "--set",
            "export.retry_max_ms=300",
            "--set",
            "export.self_metrics_interval_ms=0",
        ],
        &[],
    )
}

/// Every sample the agent took in `[from, to]` is at the master, once its
/// spool has drained; the missing ones, if not.
fn missing_at_master(master: &Sonde, agent: &Sonde, from: u64, to: u64) -> Vec<u64> {
    let ok = export_stat(agent, "requests_ok");
    let drained = wait_for(Duration::from_secs(60), || {
        export_stat(agent, "spooled_requests") == 0 && export_stat(agent, "requests_ok") > ok + 2
    });
    assert!(drained, "the agent's spool never drained:\n{}", agent.output());
    let sent = node_cpu_times(agent, "", from, to);
    assert!(sent.len() > 20, "the agent sampled in the window: {}", sent.len());
    let arrived: std::collections::BTreeSet<u64> = node_cpu_times(master, "node-s", from, to).into_iter().collect();
    sent.into_iter().filter(|t| !arrived.contains(t)).collect()
}

fn now_ms() -> u64 {
    now_ns() / 1_000_000
}

/// A master and a spooling agent whose exports it has acknowledged a few times.
struct Pair {
    master: Sonde,
    agent: Sonde,
    mdir: std::path::PathBuf,
    grpc: u16,
    port: u16,
    /// When the agent was up (ms).
    from: u64,
}

impl Pair {
    fn start(dir: &std::path::Path, mdir: &std::path::Path) -> Pair {
        let grpc = free_port();
        let master = start_master(mdir, grpc, None);
        let port: u16 = master.api.rsplit(':').next().unwrap().parse().unwrap();
        let agent = spooling_agent(dir, grpc);
        let from = now_ms();
        assert!(
            wait_for(Duration::from_secs(60), || export_stat(&agent, "requests_ok") >= 5),
            "the agent's exports were never acknowledged:\n{}",
            agent.output()
        );
        Pair {
            master,
            agent,
            mdir: mdir.to_path_buf(),
            grpc,
            port,
            from,
        }
    }

    /// `kill -9` of the master, and a new one on the same ports and data.
    fn kill_master_and_restart(&mut self) {
        let _ = self.master.proc.child.kill();
        let _ = self.master.proc.child.wait();
        self.master = start_master(&self.mdir, self.grpc, Some(self.port));
    }
}

#[test]
fn a_point_the_master_acknowledged_survives_its_kill_9() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = Pair::start(tmp.path(), &tmp.path().join("master"));
    // Killed right after an acknowledgement: before the fix, the points of
    // the last second's acknowledged requests were only in the history's
    // memory, and the agent, told OK, did not send them again.
    let n = export_stat(&c.agent, "requests_ok");
    assert!(wait_for(Duration::from_secs(30), || export_stat(
        &c.agent,
        "requests_ok"
    ) > n));
    c.kill_master_and_restart();
    // Everything sampled until now: what the first master acknowledged, and
    // what the agent kept in its spool meanwhile.
    let missing = missing_at_master(&c.master, &c.agent, c.from, now_ms());
    assert!(
        missing.is_empty(),
        "{} samples taken before now are not at the restarted master (first: {:?}); history {}",
        missing.len(),
        &missing[..missing.len().min(10)],
        c.master.json("/api/status")["storage"]["history"]
    );
}

/// Unmounts a tmpfs when dropped (after the processes using it, declared later, are gone).
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    /// None where mounting is not allowed (not root): the test says so and passes.
    fn mount(at: &std::path::Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_master_whose_disk_is_full_refuses_and_its_agent_delivers_later() {
    let tmp = tempfile::tempdir().unwrap();
    let mdir = tmp.path().join("master");
    // The master's data directory on a small disk of its own.
    let Some(_disk) = Tmpfs::mount(&mdir.join("data"), "48m") else {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    };
    let mut c = Pair::start(tmp.path(), &mdir);

    // Every free block taken.
    let filler = mdir.join("data/filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 1 << 20];
        while f.write_all(&block).is_ok() {}
    }
    let refused = wait_for(Duration::from_secs(60), || {
        c.master.json("/api/ingest")["durable"]["refused"].as_u64().unwrap_or(0) >= 3
    });
    assert!(
        refused,
        "the master went on taking requests it could not keep: {}\nhistory {}",
        c.master.json("/api/ingest")["durable"],
        c.master.json("/api/status")["storage"]["history"]
    );
    let last_error = c.agent.json("/api/status")["export"]["stats"]["last_error"].to_string();
    assert!(
        last_error.contains("retry"),
        "the agent was told to retry: {last_error}"
    );
    std::fs::remove_file(&filler).unwrap();
    let freed = now_ms();

    // Once the agent has delivered, a kill -9: what the master took before,
    // during and after the full disk must be on its disk, not only in its
    // memory (the WAL records of the failed writes written again).
    let missing = missing_at_master(&c.master, &c.agent, c.from, freed);
    assert!(missing.is_empty(), "{} samples missing before the kill", missing.len());
    let history = c.master.json("/api/status")["storage"]["history"].clone();
    assert!(
        history["io_errors"].as_u64().unwrap() > 0,
        "the disk was full: {history}"
    );
    assert_eq!(history["points_lost_to_io"], 0, "{history}");
    c.kill_master_and_restart();
    let missing = missing_at_master(&c.master, &c.agent, c.from, freed);
    assert!(
        missing.is_empty(),
        "{} samples taken before the disk was freed are not at the restarted master (first: {:?}); history {}",
        missing.len(),
        &missing[..missing.len().min(10)],
        c.master.json("/api/status")["storage"]["history"]
    );
}
