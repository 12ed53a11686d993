//! The plugin's HTTP routes (`/api/plugins/dlrover/...`); the README lists
//! them with their bodies. Routes that change sharding state write it to the
//! host's store before they answer.

use serde::Deserialize;
use serde_json::{Value, json};
use sonde_plugin_sdk::types::{HttpRequest, HttpResponse};

use crate::batch;
use crate::master::Master;
use crate::model::secs;
use crate::optimizer::brain::HistoryJob;
use crate::sharding::{DatasetParams, ReportAnswer, TaskAnswer};
use sonde_plugin_sdk::Host;

const ROUTES: &str = "GET /overview, /panel?job=, /nodes, /stats, /speed, /plans, /datasets, /datasets/NAME, /checkpoint?dataset=NAME, \
/batch?rank=R, /stragglers, /node-check/groups?round=R, /failures, /history, /state; POST /datasets, /tasks/next, \
/tasks/report, /checkpoint/restore, /datasets/NAME/reset, /datasets/NAME/dead-letter/requeue, /node-check, /history";

fn ok(v: Value) -> HttpResponse {
    HttpResponse::json(200, v.to_string())
}

fn body<T: for<'de> Deserialize<'de>>(req: &HttpRequest) -> Result<T, HttpResponse> {
    serde_json::from_slice(&req.body).map_err(|e| HttpResponse::error(400, &format!("body: {e}")))
}

fn limit(req: &HttpRequest, default: usize) -> Result<usize, HttpResponse> {
    match req.query_param("limit") {
        None => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|_| HttpResponse::error(400, &format!("query `limit` must be an integer >= 0, got {v:?}"))),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NextBody {
    dataset_name: String,
    node: String,
    #[serde(default)]
    request_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReportBody {
    dataset_name: String,
    task_id: u64,
    node: String,
    #[serde(default)]
    err_message: String,
    #[serde(default)]
    exec_counters: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckBody {
    node: String,
    #[serde(default = "yes")]
    ok: bool,
    #[serde(default)]
    time: f64,
}

fn yes() -> bool {
    true
}

pub fn handle(m: &mut Master, host: &mut dyn Host, req: &HttpRequest) -> HttpResponse {
    match route(m, host, req) {
        Ok(r) | Err(r) => r,
    }
}

fn route(m: &mut Master, host: &mut dyn Host, req: &HttpRequest) -> Result<HttpResponse, HttpResponse> {
    let path = req.path.trim_end_matches('/');
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let now = host.now();
    Ok(match (req.method.as_str(), parts.as_slice()) {
        ("GET", ["overview"]) => ok(overview(m, now)),
        ("GET", ["panel"]) => crate::panel::panel(m, req.query_param("job").as_deref(), now),
        ("GET", ["state"]) => ok(json!({
            "settings": m.settings.to_json(),
            "restarts": m.restarts,
            "counters": m.counters,
            "started_ns": m.started_ns,
        })),
        ("GET", ["nodes"]) => ok(json!(nodes(m, now))),
        ("GET", ["stats"]) => {
            let n = limit(req, 100)?;
            let recs: Vec<_> = m.stats.iter().rev().take(n).rev().collect();
            ok(json!(recs))
        }
        ("GET", ["speed"]) => ok(json!({
            "speed": m.perf.speed(m.settings.speed_window_s),
            "speed_last_two": m.perf.speed_last_two(),
            "window_s": m.settings.speed_window_s,
            "global_step": m.perf.last_step(),
            "records": m.perf.records,
        })),
        ("GET", ["plans"]) => {
            let n = limit(req, 50)?;
            let hist: Vec<_> = m.plans.iter().rev().take(n).rev().collect();
            ok(json!({"current": current_plan(m), "history": hist}))
        }
        ("GET", ["datasets"]) => ok(json!(
            m.datasets.values().map(|d| d.progress_json(false)).collect::<Vec<_>>()
        )),
        ("GET", ["datasets", name]) => match m.datasets.get(*name) {
            Some(d) => ok(d.progress_json(true)),
            None => HttpResponse::error(404, &format!("no dataset {name:?}")),
        },
        ("POST", ["datasets"]) => {
            let p: DatasetParams = body(req)?;
            match m.register(host, p) {
                Ok((registered, v)) => ok(json!({"registered": registered, "dataset": v})),
                Err(e) if e.contains("state store") => HttpResponse::error(503, &e),
                Err(e) => HttpResponse::error(422, &e),
            }
        }
        ("POST", ["datasets", name, "reset"]) => {
            let mut d = dataset(m, name)?.clone();
            d.reset(now);
            m.commit_dataset(host, d).map_err(|e| HttpResponse::error(503, &e))?;
            ok(json!({"dataset_name": name, "reset": true}))
        }
        ("POST", ["datasets", name, "dead-letter", "requeue"]) => {
            let mut d = dataset(m, name)?.clone();
            let n = d.requeue_dead_letter();
            m.commit_dataset(host, d).map_err(|e| HttpResponse::error(503, &e))?;
            ok(json!({"dataset_name": name, "requeued": n}))
        }
        ("POST", ["tasks", "next"]) => {
            let b: NextBody = body(req)?;
            let mut d = dataset(m, &b.dataset_name)?.clone();
            m.alive(host, &b.node, now);
            if d.params.task_type == crate::sharding::TaskType::Training {
                m.typed(&b.node, crate::model::NodeType::Worker, -1);
            }
            m.put_nodes_if_changed(host);
            let answer = d.next_task(&b.node, &b.request_id, now);
            let v = match &answer {
                TaskAnswer::Task { task_id, shard } => d.task_json(*task_id, shard),
                TaskAnswer::Wait => json!({"type": "wait", "dataset_name": b.dataset_name}),
                TaskAnswer::End => {
                    json!({"type": "end", "dataset_name": b.dataset_name, "shard": {"start": 0, "end": 0}})
                }
            };
            if d != m.datasets[&b.dataset_name] {
                m.commit_dataset(host, d).map_err(|e| HttpResponse::error(503, &e))?;
            }
            ok(v)
        }
        ("POST", ["tasks", "report"]) => {
            let b: ReportBody = body(req)?;
            let _ = &b.exec_counters;
            let mut d = dataset(m, &b.dataset_name)?.clone();
            m.alive(host, &b.node, now);
            m.put_nodes_if_changed(host);
            let answer = d.report(b.task_id, &b.node, &b.err_message, m.settings.max_shard_failures, now);
            let (status, v) = match &answer {
                ReportAnswer::Done { steps } => (200, json!({"accepted": true, "result": "done", "steps": steps})),
                ReportAnswer::Duplicate => (200, json!({"accepted": true, "result": "duplicate"})),
                ReportAnswer::Requeued { failures } => (
                    200,
                    json!({"accepted": true, "result": "requeued", "failures": failures}),
                ),
                ReportAnswer::DeadLettered { failures } => (
                    200,
                    json!({"accepted": true, "result": "dead_letter", "failures": failures}),
                ),
                ReportAnswer::Stale => (
                    409,
                    json!({"accepted": false, "result": "stale",
                    "error": "this task is not the node's any more (it was re-queued): do not commit it"}),
                ),
            };
            if !matches!(answer, ReportAnswer::Duplicate | ReportAnswer::Stale) {
                let failed = match &answer {
                    ReportAnswer::DeadLettered { .. } | ReportAnswer::Requeued { .. } => {
                        vec![(b.task_id, answer.clone())]
                    }
                    _ => vec![],
                };
                let snapshot = d.clone();
                m.commit_dataset(host, d).map_err(|e| HttpResponse::error(503, &e))?;
                if !failed.is_empty() {
                    m.after_failures(host, &b.dataset_name, &b.node, &b.err_message, &failed, &snapshot);
                }
                m.first_result(host, now);
            }
            HttpResponse::json(status, v.to_string())
        }
        ("GET", ["checkpoint"]) => {
            let name = req
                .query_param("dataset")
                .ok_or_else(|| HttpResponse::error(400, "GET /checkpoint needs ?dataset=NAME"))?;
            let d = dataset(m, &name)?;
            ok(json!({"dataset_name": &*name, "content": d.checkpoint().to_string()}))
        }
        ("POST", ["checkpoint", "restore"]) => {
            let v: Value = body(req)?;
            let content = unwrap_checkpoint(v).map_err(|e| HttpResponse::error(400, &e))?;
            let name = content
                .get("dataset_name")
                .and_then(Value::as_str)
                .map(str::to_string)
                .or_else(|| req.query_param("dataset").map(|s| s.into_owned()))
                .ok_or_else(|| HttpResponse::error(400, "the checkpoint names no dataset_name"))?;
            let mut d = dataset(m, &name)?.clone();
            let n = d.restore(&content).map_err(|e| HttpResponse::error(422, &e))?;
            m.commit_dataset(host, d).map_err(|e| HttpResponse::error(503, &e))?;
            ok(json!({"dataset_name": name, "restored": true, "shards": n}))
        }
        ("GET", ["batch"]) => ok(batch_json(m, req)?),
        ("GET", ["stragglers"]) => ok(json!({
            "training": m.stragglers.iter().map(|(n, t)| json!({"node": n, "median_step_s": t})).collect::<Vec<_>>(),
            "job_median_step_s": m.step_median,
            "factor": m.settings.straggler_factor,
            "per_node": m.nodes.values().filter(|n| !n.step_times.is_empty()).map(|n| json!({
                "node": n.name, "steps": n.step_times.len(),
                "median_step_s": crate::model::median(&n.step_times.iter().copied().collect::<Vec<_>>()),
            })).collect::<Vec<_>>(),
            "node_check": m.node_check_verdict(),
        })),
        ("POST", ["node-check"]) => {
            let b: CheckBody = body(req)?;
            m.node_check_report(host, &b.node, b.ok, b.time);
            ok(json!({"recorded": true, "verdict": m.node_check_verdict()}))
        }
        ("GET", ["node-check", "groups"]) => {
            let round: u32 = req.query_param("round").and_then(|r| r.parse().ok()).unwrap_or(0);
            let v = m.node_check_verdict();
            let nodes: Vec<(String, f64)> = v.nodes.iter().map(|(n, _, t)| (n.clone(), *t)).collect();
            ok(json!({"round": round, "groups": crate::failures::check_groups(round, &nodes)}))
        }
        ("GET", ["failures"]) => ok(json!({
            "events": m.events,
            "nodes": m.nodes.values().filter(|n| n.exit_reason.is_some()).map(|n| json!({
                "node": n.name, "status": n.status, "exit_reason": n.exit_reason, "exit_code": n.exit_code,
                "relaunch_count": n.relaunch_count})).collect::<Vec<_>>(),
        })),
        ("GET", ["history"]) => ok(json!(m.history)),
        ("POST", ["history"]) => {
            let h: HistoryJob = body(req)?;
            m.add_history(host, h);
            ok(json!({"recorded": true, "jobs": m.history.len()}))
        }
        (method, _) => {
            let known = [
                "overview",
                "state",
                "nodes",
                "stats",
                "speed",
                "plans",
                "datasets",
                "tasks",
                "checkpoint",
                "batch",
                "stragglers",
                "node-check",
                "failures",
                "history",
            ];
            if parts.first().is_some_and(|p| known.contains(p)) {
                HttpResponse::error(405, &format!("no {method} on {path}; routes: {ROUTES}"))
            } else {
                HttpResponse::error(404, &format!("no route {method} {path}; routes: {ROUTES}"))
            }
        }
    })
}

fn dataset<'a>(m: &'a Master, name: &str) -> Result<&'a crate::sharding::Dataset, HttpResponse> {
    m.datasets
        .get(name)
        .ok_or_else(|| HttpResponse::error(404, &format!("no dataset {name:?}: register it with POST /datasets")))
}

/// A restore body: the checkpoint itself, or `{"content": <it or its JSON text>}`.
/// DLRover's client wrapped it twice (defect D3); one extra level is unwrapped.
fn unwrap_checkpoint(mut v: Value) -> Result<Value, String> {
    for _ in 0..3 {
        if v.get("todo").is_some() || v.get("doing").is_some() {
            return Ok(v);
        }
        v = match v.get("content") {
            Some(Value::String(s)) => serde_json::from_str(s).map_err(|e| format!("checkpoint content: {e}"))?,
            Some(c @ Value::Object(_)) => c.clone(),
            _ => break,
        };
    }
    Err("the body is not a shard checkpoint (no todo/doing)".into())
}

fn batch_json(m: &Master, req: &HttpRequest) -> Result<Value, HttpResponse> {
    let num = |k: &str| -> Result<Option<u64>, HttpResponse> {
        match req.query_param(k) {
            None => Ok(None),
            Some(v) => v
                .parse()
                .map(Some)
                .map_err(|_| HttpResponse::error(400, &format!("query `{k}` must be an integer >= 0"))),
        }
    };
    let max = num("max_world_size")?
        .map(|x| x as u32)
        .unwrap_or(m.settings.global_batch.max_world_size);
    if max == 0 {
        return Err(HttpResponse::error(
            422,
            "no maximum world size: set global_batch.max_world_size (WORKER_NUM x LOCAL_WORLD_SIZE) or ?max_world_size=N",
        ));
    }
    let n0 = num("world_size")?
        .map(|x| x as u32)
        .unwrap_or((m.running_trainers() as u32) * m.settings.global_batch.local_world_size);
    let all = batch::micro_batches(max, n0);
    let mut v = json!({"max_world_size": max, "world_size": n0, "micro_batches": all});
    if let Some(r) = num("rank")? {
        let Some(mb) = all.get(r as usize) else {
            return Err(HttpResponse::error(
                422,
                &format!("rank {r} is outside world size {n0}"),
            ));
        };
        v["rank"] = json!(r);
        v["micro_batch_count"] = json!(mb);
    }
    if let (Some(step), Some(mbs)) = (num("step")?, num("micro_batch_size")?) {
        v["completed_num"] = json!(batch::completed_num(step, mbs, n0 as u64));
    }
    Ok(v)
}

fn nodes(m: &Master, now: u64) -> Vec<Value> {
    m.nodes
        .values()
        .map(|n| {
            let l = n.usage.latest.as_ref();
            json!({
                "name": n.name,
                "type": n.kind,
                "index": n.index,
                "status": n.status,
                "source": n.source,
                "cpu": l.and_then(|l| l.cpu),
                "memory_mib": l.and_then(|l| l.memory_mib),
                "gpus": l.map(|l| l.gpus.clone()).unwrap_or_default(),
                "config": n.effective_config(),
                "capacity": n.capacity,
                "last_heartbeat_age_s": (n.last_heartbeat_ns > 0).then(|| secs(n.last_heartbeat_ns, now)),
                "sample_age_s": l.map(|l| secs(l.time_ns, now)),
                "exit_reason": n.exit_reason,
                "relaunch_count": n.relaunch_count,
                "hung": n.hung,
                "straggler": m.stragglers.iter().any(|(s, _)| s == &n.name),
                "median_step_s": crate::model::median(&n.step_times.iter().copied().collect::<Vec<_>>()),
            })
        })
        .collect()
}

fn current_plan(m: &Master) -> Value {
    let s = &m.scaler;
    json!({
        "latest": m.plans.back(),
        "strategy": m.settings.strategy,
        "stage": s.stage,
        "started": s.started,
        "started_reason": s.started_reason,
        "target_workers": s.target_workers,
        "worker": s.worker,
        "ps": s.ps,
        "why_no_plan": s.last_skip,
        "migrating": s.migrating,
    })
}

pub(crate) fn overview(m: &Master, now: u64) -> Value {
    json!({
        "node": m.settings.node,
        "strategy": m.settings.strategy,
        "nodes": nodes(m, now),
        "speed": m.perf.speed(m.settings.speed_window_s),
        "global_step": m.perf.last_step(),
        "workers": m.running_trainers(),
        "plan": current_plan(m),
        "plans": m.plans.iter().rev().take(5).collect::<Vec<_>>(),
        "datasets": m.datasets.values().map(|d| d.progress_json(false)).collect::<Vec<_>>(),
        "stragglers": m.stragglers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
        "events": m.events.iter().rev().take(10).collect::<Vec<_>>(),
        "stats_records": m.stats.len(),
    })
}
