//! The plugin's HTTP routes (`/api/plugins/determined/...`):
//!
//! - `GET /state`: settings, counters and every job's state.
//! - `GET /timings?limit=N&job=NAME`: the latest resolved timings (oldest first).
//! - `POST /reset?job=NAME`: forget a job's state, in memory and in the store.

use serde_json::{Value, json};
use sonde_plugin_sdk::types::{HttpRequest, HttpResponse};

use crate::profiler::{Job, Profiler, RECENT_TIMINGS};
use sonde_plugin_sdk::Host;

/// `limit` when the request gives none.
pub const DEFAULT_TIMINGS_LIMIT: usize = 1000;

pub fn handle(p: &mut Profiler, host: &mut dyn Host, req: &HttpRequest) -> HttpResponse {
    let path = req.path.trim_end_matches('/');
    match (req.method.as_str(), path) {
        ("GET", "/state") => HttpResponse::json(200, state_json(p, host.now()).to_string()),
        ("GET", "/timings") => {
            let limit = match req.query_param("limit") {
                None => DEFAULT_TIMINGS_LIMIT,
                Some(v) => match v.parse::<usize>() {
                    Ok(n) => n.min(RECENT_TIMINGS),
                    Err(_) => {
                        return HttpResponse::error(
                            400,
                            &format!("query `limit` must be an integer >= 0, got \"{v}\""),
                        );
                    }
                },
            };
            let job = req.query_param("job");
            let rows: Vec<_> = p
                .recent_timings()
                .iter()
                .rev()
                .filter(|r| job.as_deref().is_none_or(|j| *r.job == *j))
                .take(limit)
                .collect();
            let rows: Vec<_> = rows.into_iter().rev().collect();
            HttpResponse::json(200, serde_json::to_string(&rows).expect("rows serialize"))
        }
        ("POST", "/reset") => match req.query_param("job").filter(|j| !j.is_empty()) {
            None => HttpResponse::error(400, "POST /reset needs ?job=NAME"),
            Some(job) => {
                let existed = p.reset_job(host, &job);
                HttpResponse::json(200, json!({"job": job, "reset": true, "existed": existed}).to_string())
            }
        },
        (method, "/state" | "/timings" | "/reset") => {
            HttpResponse::error(405, &format!("method {method} not allowed on {path}"))
        }
        (method, _) => HttpResponse::error(
            404,
            &format!(
                "no route {method} {}; routes: GET /state, GET /timings?limit=N&job=NAME, POST /reset?job=NAME",
                req.path
            ),
        ),
    }
}

fn job_json(job: &Job, now: u64) -> Value {
    let m = &job.machine;
    let (end_reason, ended_at) = match m.phase {
        crate::machine::Phase::Ended { reason, at, .. } => (Some(reason.code()), at),
        _ => (None, None),
    };
    json!({
        "job": &*job.name,
        "phase": m.phase.name(),
        "profiling_enabled": m.profiling,
        "enabled": m.enabled(),
        "sysmetrics_enabled": m.sys_enabled(),
        "timings_enabled": m.timings_enabled(),
        "active": m.is_active(),
        "ended": m.is_ended(),
        "end_reason": end_reason,
        "activated_at_ns": m.activated_at,
        "ended_at_ns": ended_at,
        "active_used_s": m.used_ns(now) as f64 / 1e9,
        "batch_idx": m.last_batch,
        "agent": &job.node_sys,
        "timing_agent": &job.node_timing,
        "system_nodes": job.sys_nodes.iter().map(|n| n.as_ref()).collect::<Vec<&str>>(),
        "ranks": job.ranks.iter().map(|(rank, r)| json!({
            "rank": rank,
            "node": &*r.node,
            "local_rank": r.local_rank,
            "system_metrics": r.system_metrics,
            "timings": r.timings,
        })).collect::<Vec<_>>(),
    })
}

pub fn state_json(p: &Profiler, now: u64) -> Value {
    json!({
        "settings": p.settings.to_json(),
        "restarts": p.restarts,
        "counters": p.counters(),
        "pending": p.pending(),
        "unflushed": p.unflushed(),
        "resolved_until_ns": p.resolved_until,
        "jobs": p.jobs.values().map(|j| job_json(j, now)).collect::<Vec<_>>(),
    })
}
