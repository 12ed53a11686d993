//! The plugin's HTTP routes (`/api/plugins/mpi/...`):
//!
//! - `GET /panel?job=NAME&rank=N`: the dashboard's view (`panel.rs`).
//! - `GET /jobs`: every job profiled, in brief.
//! - `GET /profile?job=NAME`: one job's profile (the panel's data): time per
//!   state per rank and thread, Work/Stall per function and call site, imbalance.
//!   Without `job`, the job updated last.
//! - `GET /folded?job=NAME`: the profile as folded stacks, whole call stacks
//!   (text/plain; open in speedscope, flamegraph.pl or inferno).
//! - `GET /flame?job=NAME&state=stall|work&rank=N`: the flame graph tree of
//!   one state's time (the panel draws it); without `rank`, all ranks.
//! - `GET /pprof?job=NAME`: a pprof profile (gzip'd `profile.proto`), sample
//!   types `work` and `stall` in nanoseconds (`go tool pprof`, Pyroscope).
//! - `GET /trace?job=NAME`: per-rank state over time as a Chrome trace (JSON;
//!   Perfetto's UI opens it).
//! - `POST /reset?job=NAME`: forget a job's profile.

use serde_json::json;
use sonde_plugin_sdk::types::{HttpRequest, HttpResponse};

use crate::plugin::Mpi;
use crate::profile::{STALL, WORK, safe_job_name};
use crate::{pprof, trace};

const ROUTES: &str = "GET /panel?job=NAME&rank=N, GET /jobs, GET /profile?job=NAME, GET /folded?job=NAME, GET /flame?job=NAME&state=stall&rank=N, \
                      GET /pprof?job=NAME, GET /trace?job=NAME, POST /reset?job=NAME";

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
        ("GET", "/panel") => crate::panel::panel(m, req),
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
        ("GET", "/flame") => {
            let state = match req.query_param("state").as_deref() {
                None | Some("stall") => STALL,
                Some("work") => WORK,
                Some(other) => return HttpResponse::error(400, &format!("state {other:?}: must be stall or work")),
            };
            let rank = match req.query_param("rank").filter(|r| !r.is_empty() && r != "all") {
                None => None,
                Some(r) => match r.parse::<i32>() {
                    Ok(r) => Some(r),
                    Err(_) => return HttpResponse::error(400, &format!("rank {r:?}: must be a number or all")),
                },
            };
            match m.pick_job(asked.as_deref()) {
                Some(job) => {
                    let tree = m.jobs[&job].flame(state, rank);
                    HttpResponse::json(200, json!({"job": job, "rank": rank, "tree": tree}).to_string())
                }
                None => missing(&asked),
            }
        }
        ("GET", "/pprof") => match m.pick_job(asked.as_deref()) {
            Some(job) => {
                let mut r = HttpResponse::with_body(200, "application/octet-stream", pprof::gzip(&m.jobs[&job]));
                r.headers.push((
                    "content-disposition".into(),
                    format!("attachment; filename=\"mpi-{}.pb.gz\"", safe_job_name(&job)),
                ));
                r
            }
            None => missing(&asked),
        },
        ("GET", "/trace") => match m.pick_job(asked.as_deref()) {
            Some(job) => HttpResponse::json(200, trace::chrome_trace(&job, &m.jobs[&job]).to_string()),
            None => missing(&asked),
        },
        ("POST", "/reset") => match asked.filter(|j| !j.is_empty()) {
            None => HttpResponse::error(400, "POST /reset needs ?job=NAME"),
            Some(job) => {
                let existed = m.jobs.remove(&job).is_some();
                m.forgotten.push(job.clone());
                HttpResponse::json(200, json!({"job": job, "reset": true, "existed": existed}).to_string())
            }
        },
        (method, "/panel" | "/jobs" | "/profile" | "/folded" | "/flame" | "/pprof" | "/trace" | "/reset") => {
            HttpResponse::error(405, &format!("method {method} not allowed on {path}"))
        }
        (method, _) => HttpResponse::error(404, &format!("no route {method} {}; routes: {ROUTES}", req.path)),
    }
}
