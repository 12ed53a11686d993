//! The plugin's HTTP routes (`/api/plugins/paramserver/...`); `?job=NAME`
//! narrows any of them to one job.
//!
//! - `GET /panel`: the dashboard's view (`panel.rs`).
//! - `GET /state`: settings, counters, every job's processes (alive, dead, left).
//! - `GET /incidents`: every incident with its seven stages, five phases
//!   (duration and percentage) and the phase table as markdown.
//! - `GET /incidents.md`: the phase tables alone, in the seed's shape.
//! - `GET /clocks`: the consistency model, per-worker clocks, staleness,
//!   blocked time, server clocks, stragglers, empty-data nodes.
//! - `GET /stragglers`: the stragglers by job.
//! - `GET /checkpoints`: checkpoints, their cost and share of training time.

use serde_json::{Value, json};
use sonde_plugin_sdk::types::{HttpRequest, HttpResponse};

use crate::ps::ParamServer;
use sonde_plugin_sdk::Host;

pub const ROUTES: &str =
    "GET /panel, /state, /incidents, /incidents.md, /clocks, /stragglers, /checkpoints (each takes ?job=NAME)";

pub fn handle(p: &ParamServer, host: &mut dyn Host, req: &HttpRequest) -> HttpResponse {
    let path = req.path.trim_end_matches('/');
    let job = req.query_param("job").map(|j| j.into_owned()).filter(|j| !j.is_empty());
    let job = job.as_deref();
    let known = [
        "/panel",
        "/state",
        "/incidents",
        "/incidents.md",
        "/clocks",
        "/stragglers",
        "/checkpoints",
    ];
    if known.contains(&path) && req.method != "GET" {
        return HttpResponse::error(405, &format!("method {} not allowed on {path}", req.method));
    }
    let now = host.now();
    let list = |f: &dyn Fn(&crate::ps::Job) -> Value| -> Value { p.job_filter(job).map(f).collect() };
    match path {
        "/panel" => crate::panel::panel(p, job, now),
        "/state" => HttpResponse::json(
            200,
            json!({
                "settings": p.settings.to_json(),
                "counters": p.counters,
                "now_ns": now,
                "jobs": list(&|j| json!({
                    "job": j.name,
                    "first_ns": j.first_ns,
                    "last_ns": j.last_ns,
                    "processes": j.detector.procs.iter().map(|(k, w)| {
                        let mut v = serde_json::to_value(w).expect("serializes");
                        v["process"] = json!(k);
                        v["role"] = json!(j.roles.get(k));
                        v
                    }).collect::<Vec<_>>(),
                    "incidents": j.incidents.len(),
                })),
            })
            .to_string(),
        ),
        "/incidents" => HttpResponse::json(
            200,
            json!({
                "incidents": p.job_filter(job)
                    .flat_map(|j| j.incidents.iter().map(|i| i.to_json(&j.checkpoints)))
                    .collect::<Vec<_>>(),
            })
            .to_string(),
        ),
        "/incidents.md" => {
            let mut out = String::new();
            for j in p.job_filter(job) {
                for i in &j.incidents {
                    out.push_str(&format!(
                        "### Incident {} — job {}, {}{}\n\n{}\n",
                        i.id,
                        j.name,
                        i.process,
                        if i.complete() { "" } else { " (in progress)" },
                        i.markdown(&j.checkpoints)
                    ));
                }
            }
            HttpResponse::with_body(200, "text/markdown; charset=utf-8", out.into_bytes())
        }
        "/clocks" => HttpResponse::json(200, json!({"jobs": list(&|j| p.clocks_json(j, now))}).to_string()),
        "/stragglers" => HttpResponse::json(
            200,
            json!({"jobs": list(&|j| json!({
                "job": j.name,
                "stragglers": j.stragglers.iter().map(|s| {
                    let w = &j.clocks.workers[s];
                    json!({"worker": s, "clock": w.clock, "staleness": j.clocks.staleness(s),
                           "caused_blocked_ms": w.caused_ns as f64 / 1e6})
                }).collect::<Vec<_>>(),
            }))})
            .to_string(),
        ),
        "/checkpoints" => HttpResponse::json(200, json!({"jobs": list(&|j| p.checkpoints_json(j))}).to_string()),
        _ => HttpResponse::error(404, &format!("no route {} {}; routes: {ROUTES}", req.method, req.path)),
    }
}
