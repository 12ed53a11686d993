//! The plugin's routes, under `/api/plugins/bottleneck`:
//!
//! - `GET /panel?job=`: the dashboard's view (`panel.rs`).
//! - `GET /jobs`: every job with its ranks, steps judged per verdict and its
//!   persistent straggler.
//! - `GET /jobs/{job}`: the job's per-step rows (rank x batch, each with its
//!   verdict, reason and evidence), the straggler of each recent batch, the
//!   persistent straggler, each rank's dominant verdict and past runs, and the
//!   verdict shares over time. `?limit=N` returns the last N rows (default
//!   2000), `?rank=R` one rank's.
//! - `GET /counters`: what the plugin did with its input.

use serde_json::{Value, json};
use sonde_plugin_sdk::types::{HttpRequest, HttpResponse};

use crate::job::Job;
use crate::plugin::Bottleneck;
use crate::verdict::Verdict;

const DEFAULT_ROWS: usize = 2000;

fn verdict_map(counts: &[u64; 6]) -> Value {
    Verdict::ALL
        .iter()
        .map(|v| (v.name().to_string(), json!(counts[v.index()])))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

fn summary(name: &str, job: &Job) -> Value {
    json!({
        "job": name,
        "ranks": job.ranks.keys().collect::<Vec<_>>(),
        "steps": verdict_map(&job.totals),
        "straggler": job.persistent,
    })
}

/// Decodes `%XX` escapes of a path segment (job names may hold any character).
fn unescape(segment: &str) -> Result<String, String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = segment
                .get(i + 1..i + 3)
                .ok_or("a truncated %-escape in the job name")?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| format!("a bad %-escape \"%{hex}\" in the job name"))?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the job name is not UTF-8".to_string())
}

pub fn handle(p: &Bottleneck, req: &HttpRequest) -> HttpResponse {
    if req.method != "GET" {
        return HttpResponse::error(405, "only GET is served here");
    }
    let path = req.path.trim_end_matches('/');
    if path == "/panel" {
        return crate::panel::panel(p, req.query_param("job").as_deref().filter(|j| !j.is_empty()));
    }
    if path == "/jobs" {
        let jobs: Vec<Value> = p.jobs.iter().map(|(n, j)| summary(n, j)).collect();
        return HttpResponse::json(200, json!({ "jobs": jobs }).to_string());
    }
    if path == "/counters" {
        return HttpResponse::json(200, json!(p.counters).to_string());
    }
    let Some(segment) = path.strip_prefix("/jobs/") else {
        return HttpResponse::error(
            404,
            "routes: GET /panel?job=, GET /jobs, GET /jobs/{job}, GET /counters",
        );
    };
    let name = match unescape(segment) {
        Ok(n) => n,
        Err(e) => return HttpResponse::error(400, &e),
    };
    let Some(job) = p.jobs.get(&name) else {
        return HttpResponse::error(
            404,
            &format!("no job named \"{name}\" has reported steps or MPI samples"),
        );
    };
    let limit = match req.query_param("limit").map(|l| l.parse::<usize>()) {
        None => DEFAULT_ROWS,
        Some(Ok(n)) => n,
        Some(Err(_)) => return HttpResponse::error(400, "limit must be a non-negative integer"),
    };
    let rank = match req.query_param("rank").map(|r| r.parse::<i32>()) {
        None => None,
        Some(Ok(r)) => Some(r),
        Some(Err(_)) => return HttpResponse::error(400, "rank must be an integer"),
    };
    let rows: Vec<_> = job.rows.iter().filter(|r| rank.is_none_or(|k| r.rank == k)).collect();
    let rows = &rows[rows.len().saturating_sub(limit)..];
    let ranks: Vec<Value> = job
        .ranks
        .iter()
        .map(|(r, rank)| {
            json!({
                "rank": r,
                "node": rank.node,
                "unit": if rank.timed { "step" } else { "window" },
                "dominant": rank.run.as_ref().map(|run| json!({"verdict": run.verdict, "first": run.first, "last": run.last})),
                "runs": rank.runs.iter().map(|run| json!({"verdict": run.verdict, "first": run.first, "last": run.last})).collect::<Vec<_>>(),
            })
        })
        .collect();
    let shares: Vec<Value> = job
        .shares
        .iter()
        .map(|(t, s)| {
            let mut m = serde_json::Map::new();
            m.insert("time_ns".into(), json!(t));
            for v in Verdict::ALL {
                m.insert(v.name().into(), json!(s[v.index()]));
            }
            Value::Object(m)
        })
        .collect();
    let mut body = summary(&name, job);
    body["verdicts"] = json!(Verdict::ALL.iter().map(|v| v.name()).collect::<Vec<_>>());
    body["rank_details"] = json!(ranks);
    body["rows"] = json!(rows);
    body["stragglers"] = json!(job.stragglers);
    body["shares"] = json!(shares);
    HttpResponse::json(200, body.to_string())
}
