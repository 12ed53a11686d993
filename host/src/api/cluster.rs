//! The cluster's read endpoints: `GET /api/cluster/nodes` (a master's nodes),
//! `GET /api/jobs` and `GET /api/jobs/{job}` (jobs, in every role).

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::AppState;

/// Batch indices a job view returns unless asked for another number.
const DEFAULT_BATCHES: usize = 200;
const MAX_BATCHES: usize = 50_000;

pub async fn nodes(State(st): State<AppState>) -> Response {
    let c = &st.cluster;
    match &c.nodes {
        Some(n) => Json(json!({"role": c.role, "nodes": n.list(), "stats": n.stats()})).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({
                "error": format!("this sonde is {}: only a master keeps nodes (start it with --role master)", c.role.as_str()),
                "role": c.role,
            })),
        )
            .into_response(),
    }
}

pub async fn jobs(State(st): State<AppState>) -> Json<serde_json::Value> {
    Json(json!({"jobs": st.cluster.jobs.list(), "stats": st.cluster.jobs.stats()}))
}

#[derive(serde::Deserialize)]
pub struct JobQuery {
    batches: Option<usize>,
}

pub async fn job(State(st): State<AppState>, Path(name): Path<String>, Query(q): Query<JobQuery>) -> Response {
    let batches = q.batches.unwrap_or(DEFAULT_BATCHES);
    if !(1..=MAX_BATCHES).contains(&batches) {
        return super::bad_request("batches", format!("{batches} is out of range 1..={MAX_BATCHES}"));
    }
    // The job's findings (the diagnosis, and what any plugin found) come
    // from the decision board, which keeps them across restarts: a job the
    // registry no longer holds still shows what was found about it.
    let findings = st.plugins.decisions().of_job(&name);
    match st.cluster.jobs.view(&name, batches) {
        Some(v) => {
            let mut body = serde_json::to_value(v).unwrap_or_default();
            body["findings"] = json!(findings);
            Json(body).into_response()
        }
        None if !findings.is_empty() => Json(json!({
            "job": name,
            "kinds": [],
            "nodes": [],
            "ranks": [],
            "steps": [],
            "phase_order": [],
            "findings": findings,
            "note": "this host has kept no steps of the job (it reported before a restart, or was dropped)",
        }))
        .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({"error": format!("no job named {name:?} has reported")})),
        )
            .into_response(),
    }
}
