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
    match st.cluster.jobs.view(&name, batches) {
        Some(v) => Json(v).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({"error": format!("no job named {name:?} has reported")})),
        )
            .into_response(),
    }
}
