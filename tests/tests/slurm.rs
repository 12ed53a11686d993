//! deploy/slurm/ without a Slurm: the scripts run as slurmstepd and slurmd
//! run them, with the environment variables Slurm sets (no slurmd here).
//! The task prolog's `export` lines go into a task's environment as
//! slurmstepd puts them, the task is a real OpenTelemetry SDK (Python)
//! reporting to a real sonde, and the job must be named after the Slurm job
//! with the task's rank; the epilog must reach that sonde and never fail.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use sonde_e2e::*;

fn script(name: &str) -> PathBuf {
    repo().join("deploy/slurm").join(name)
}

/// Runs a script of deploy/slurm with only `env` (and PATH) set, as Slurm
/// passes its own variables.
fn slurm_run(name: &str, env: &[(&str, &str)]) -> Output {
    Command::new(script(name))
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// What slurmstepd does with a TaskProlog's output: each `export NAME=value`
/// line sets NAME in the task's environment.
fn exports(out: &Output) -> Vec<(String, String)> {
    text(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn the_task_prolog_names_the_job_after_slurm_and_keeps_what_the_task_set() {
    let out = slurm_run(
        "task-prolog.sh",
        &[("SLURM_JOB_ID", "4242"), ("SLURM_PROCID", "3"), ("SLURM_LOCALID", "1")],
    );
    assert!(out.status.success());
    assert_eq!(text(&out.stderr), "");
    assert_eq!(
        text(&out.stdout),
        "export SONDE_CLIENT_JOB=slurm-4242\n\
         export MPI_SONDE_JOB=slurm-4242\n\
         export OTEL_RESOURCE_ATTRIBUTES=sonde.job=slurm-4242,sonde.rank=3,sonde.local_rank=1,slurm.job.id=4242\n"
    );

    // An array task, with a name and attributes of the task's own.
    let out = slurm_run(
        "task-prolog.sh",
        &[
            ("SLURM_JOB_ID", "4243"),
            ("SLURM_ARRAY_JOB_ID", "4240"),
            ("SLURM_ARRAY_TASK_ID", "7"),
            ("SLURM_PROCID", "0"),
            ("SONDE_CLIENT_JOB", "named-by-me"),
            ("OTEL_RESOURCE_ATTRIBUTES", "team=ml"),
        ],
    );
    assert_eq!(
        exports(&out),
        [
            ("MPI_SONDE_JOB", "slurm-4240_7"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "team=ml,sonde.job=slurm-4240_7,sonde.rank=0,slurm.job.id=4243"
            ),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
    );
    let own = slurm_run(
        "task-prolog.sh",
        &[("SLURM_JOB_ID", "1"), ("OTEL_RESOURCE_ATTRIBUTES", "sonde.job=mine")],
    );
    assert!(
        !text(&own.stdout).contains("OTEL_RESOURCE_ATTRIBUTES"),
        "a task naming its sonde job keeps it: {}",
        text(&own.stdout)
    );

    // Not a Slurm job: nothing set, a reason, and the task still starts.
    for bad in [&[][..], &[("SLURM_JOB_ID", "12a")][..]] {
        let out = slurm_run("task-prolog.sh", bad);
        assert!(out.status.success(), "a task prolog must never fail the task");
        assert_eq!(text(&out.stdout), "");
        assert!(
            text(&out.stderr).contains("is not a Slurm job id"),
            "{}",
            text(&out.stderr)
        );
    }
}

/// The OpenTelemetry SDK as a Slurm task runs it: one span per batch, to
/// sonde's OTLP/HTTP receiver, its resource from OTEL_RESOURCE_ATTRIBUTES
/// alone (the SDK reads it; the code names no job).
const TASK: &str = r#"
import time
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

provider = TracerProvider(resource=Resource.create())
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
tracer = provider.get_tracer("slurm-task")
for b in range(3):
    with tracer.start_as_current_span("train_batch", attributes={"sonde.batch_idx": b}):
        time.sleep(0.01)
provider.shutdown()
"#;

#[test]
fn a_slurm_task_reports_under_the_slurm_job_and_the_epilog_reaches_its_agent() {
    let tmp = tempfile::tempdir().unwrap();
    let (sonde, http_port) = Sonde::start_otlp_http(tmp.path(), &[]);
    let slurm = [("SLURM_JOB_ID", "4242"), ("SLURM_PROCID", "3"), ("SLURM_LOCALID", "1")];
    let prolog = slurm_run("task-prolog.sh", &slurm);
    assert!(prolog.status.success(), "{}", text(&prolog.stderr));

    let task = Command::new("python3")
        .args(["-c", TASK])
        .env_remove("OTEL_RESOURCE_ATTRIBUTES")
        .env_remove("OTEL_SERVICE_NAME")
        .envs(exports(&prolog))
        .env("OTEL_SERVICE_NAME", "train.py")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://127.0.0.1:{http_port}"))
        .output()
        .unwrap();
    assert!(task.status.success(), "the task failed: {}", text(&task.stderr));

    let mut job = serde_json::Value::Null;
    let named = wait_for(Duration::from_secs(20), || {
        let (code, body) = sonde.get("/api/jobs/slurm-4242");
        job = serde_json::from_str(&body).unwrap_or_default();
        code == 200 && job["steps"].as_array().is_some_and(|s| s.len() == 3)
    });
    assert!(
        named,
        "no job slurm-4242 with three steps: {job:#}\njobs: {}\n{}",
        sonde.json("/api/jobs"),
        sonde.output()
    );
    assert_eq!(job["ranks"][0]["rank"], 3, "{job:#}");
    assert_eq!(job["ranks"][0]["local_rank"], 1, "{job:#}");
    let jobs = sonde.json("/api/jobs");
    assert!(
        !jobs["jobs"].as_array().unwrap().iter().any(|j| j["job"] == "train.py"),
        "sonde.job wins over the service's name: {jobs:#}"
    );

    // The epilog ends the job: as ended, with its reason, not failed.
    let before = now_ns();
    let api = format!("http://{}", sonde.api);
    let mut env = slurm.to_vec();
    env.push(("SONDE_EPILOG_API", &api));
    let epilog = slurm_run("epilog.sh", &env);
    assert!(epilog.status.success());
    assert_eq!(text(&epilog.stderr), "", "the agent took the end");
    let job = sonde.json("/api/jobs/slurm-4242");
    assert_eq!(job["state"], "ended", "{job:#}");
    assert_eq!(job["end_reason"], "Slurm epilog", "{job:#}");
    assert!(job["ended_ns"].as_u64().is_some_and(|t| t >= before), "{job:#}");
    assert_eq!(
        job["ranks"].as_array().unwrap().len(),
        1,
        "the end is no process of the job: {job:#}"
    );

    // Kept so across a restart, like the rest of the job.
    let saved = wait_for(Duration::from_secs(10), || {
        sonde.json("/api/jobs")["stats"]["unsaved"] == 0
    });
    assert!(saved, "{}", sonde.json("/api/jobs"));
    let port: u16 = sonde.api.rsplit(':').next().unwrap().parse().unwrap();
    let mut sonde = sonde;
    sonde.proc.terminate(Duration::from_secs(20));
    let listen = format!("ingest.otlp_http_listen=\"127.0.0.1:{http_port}\"");
    let sonde = Sonde::start_on(
        tmp.path(),
        &[],
        &["--set", &listen, "--set", "ingest.otlp_grpc_listen=\"off\""],
        port,
    );
    let job = sonde.json("/api/jobs/slurm-4242");
    assert_eq!(job["state"], "ended", "after a restart: {job:#}");
    assert_eq!(job["end_reason"], "Slurm epilog", "{job:#}");

    // An agent that is down: the epilog says so and still succeeds (a
    // failing Epilog would drain the node).
    let down = format!("http://127.0.0.1:{}", free_port());
    let mut env = slurm.to_vec();
    env.push(("SONDE_EPILOG_API", &down));
    let epilog = slurm_run("epilog.sh", &env);
    assert!(epilog.status.success(), "an epilog must never fail");
    assert!(
        text(&epilog.stderr).contains("could not report slurm-4242's end"),
        "{}",
        text(&epilog.stderr)
    );
}

/// An agent that wants its API token: the epilog sends the one in the
/// environment (or /etc/sonde/sonde.env, the units' secrets file), and
/// without it says the agent refused.
#[test]
fn the_epilog_sends_the_agents_token() {
    let tmp = tempfile::tempdir().unwrap();
    let sonde = Sonde::start(tmp.path(), &[], &["--set", "api.token=\"slurm-secret\""]);
    let api = format!("http://{}", sonde.api);
    let base = [("SLURM_JOB_ID", "77"), ("SONDE_EPILOG_API", api.as_str())];
    let with = slurm_run("epilog.sh", &[base[0], base[1], ("SONDE_API__TOKEN", "slurm-secret")]);
    assert_eq!(text(&with.stderr), "", "with the token");
    if !std::path::Path::new("/etc/sonde/sonde.env").exists() {
        let without = slurm_run("epilog.sh", &base);
        assert!(without.status.success());
        assert!(text(&without.stderr).ends_with(": 401\n"), "{}", text(&without.stderr));
    }
}

/// The epilog talks to the node's agent; the agent passes the end on, and
/// the master's job reads as ended too.
#[test]
fn the_epilog_ends_the_job_on_the_master_through_its_agent() {
    let tmp = tempfile::tempdir().unwrap();
    let grpc = free_port();
    let master = Sonde::start(
        &tmp.path().join("master"),
        &[],
        &master_args(grpc, &[]).iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let agent = cluster_agent(tmp.path(), "node-a", grpc);
    let t = now_ns();
    let step = serde_json::json!({
        "origin": {"job": "slurm-515", "rank": 0, "local_rank": 0, "role": "worker"},
        "progress": [{"value": 1, "time_ns": t}],
        "timings": [{"name": "forward", "start_ns": t, "end_ns": t + 5_000_000, "batch_idx": 1}],
    });
    let (code, body) = post_json(&agent.api, "/api/ingest", &step);
    assert_eq!(code, 202, "{body}");
    let on_master = wait_for(Duration::from_secs(30), || master.get("/api/jobs/slurm-515").0 == 200);
    assert!(on_master, "{}", master.json("/api/jobs"));
    assert_eq!(master.json("/api/jobs/slurm-515")["state"], "running");

    let api = format!("http://{}", agent.api);
    let epilog = slurm_run("epilog.sh", &[("SLURM_JOB_ID", "515"), ("SONDE_EPILOG_API", &api)]);
    assert_eq!(text(&epilog.stderr), "");
    assert_eq!(agent.json("/api/jobs/slurm-515")["state"], "ended");
    let ended = wait_for(Duration::from_secs(30), || {
        master.json("/api/jobs/slurm-515")["state"] == "ended"
    });
    let job = master.json("/api/jobs/slurm-515");
    assert!(ended, "{job:#}");
    assert_eq!(job["end_reason"], "Slurm epilog", "{job:#}");
    // Ended as planned: the node is still up on the master.
    let nodes = master.json("/api/cluster/nodes");
    let node = nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == "node-a")
        .cloned();
    assert_eq!(
        node.as_ref().map(|n| n["state"].clone()),
        Some("up".into()),
        "{nodes:#}"
    );
}
