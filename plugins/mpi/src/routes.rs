//! The plugin's HTTP routes (`/api/plugins/mpi/...`):
//!
//! - `GET /jobs`: every job profiled, in brief.
//! - `GET /profile?job=NAME`: one job's profile (the panel's data): time per
//!   state per rank and thread, Work/Stall per function and call site, imbalance.
//!   Without `job`, the job updated last.
//! - `GET /folded?job=NAME`: the profile as folded stacks (text/plain; open in
//!   speedscope, flamegraph.pl or inferno).
//! - `POST /reset?job=NAME`: forget a job's profile.

use serde_json::json;
use sonde_plugin_sdk::types::{HttpRequest, HttpResponse};

use crate::plugin::Mpi;

const ROUTES: &str = "GET /jobs, GET /profile?job=NAME, GET /folded?job=NAME, POST /reset?job=NAME";

pub fn handle(m: &mut Mpi, req: &HttpRequest) -> HttpResponse {
    let path = req.path.trim_end_matches('/');
    let asked = req.query_param("job").map(|j| j.into_owned());
    let missing = |asked: &Option<String>| match asked {
        Some(j) if !j.is_empty() => HttpResponse::error(404, &format!("no MPI samples from job {j:?}")),
        _ => HttpResponse::error(
            404,
            "no MPI samples yet: run an MPI job with the probe (probes/mpi/README.md)",
        ),
    };
    match (req.method.as_str(), path) {
        ("GET", "/jobs") => {
            let jobs: Vec<_> = m
                .jobs
                .iter()
                .map(|(job, p)| {
                    let imb = p.imbalance();
                    json!({
                        "job": job,
                        "ranks": p.ranks(),
                        "world_size": p.world_size,
                        "first_ns": p.first_ns,
                        "last_ns": p.last_ns,
                        "rows": p.rows,
                        "stall_max_over_mean": imb.stall_max_over_mean,
                        "load_balance": imb.load_balance,
                    })
                })
                .collect();
            HttpResponse::json(
                200,
                json!({"settings": m.settings.to_json(), "counters": m.counters(), "jobs": jobs}).to_string(),
            )
        }
        ("GET", "/profile") => match m.pick_job(asked.as_deref()) {
            Some(job) => {
                let s = m.jobs[&job].summary(&job);
                HttpResponse::json(200, serde_json::to_string(&s).expect("summary serializes"))
            }
            None => missing(&asked),
        },
        ("GET", "/folded") => match m.pick_job(asked.as_deref()) {
            Some(job) => HttpResponse::text(200, m.jobs[&job].folded()),
            None => missing(&asked),
        },
        ("POST", "/reset") => match asked.filter(|j| !j.is_empty()) {
            None => HttpResponse::error(400, "POST /reset needs ?job=NAME"),
            Some(job) => {
                let existed = m.jobs.remove(&job).is_some();
                HttpResponse::json(200, json!({"job": job, "reset": true, "existed": existed}).to_string())
            }
        },
        (method, "/jobs" | "/profile" | "/folded" | "/reset") => {
            HttpResponse::error(405, &format!("method {method} not allowed on {path}"))
        }
        (method, _) => HttpResponse::error(404, &format!("no route {method} {}; routes: {ROUTES}", req.path)),
    }
}
