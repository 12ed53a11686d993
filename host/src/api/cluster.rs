//! The cluster's endpoints: `GET /api/cluster/nodes` (a master's nodes),
//! `GET /api/jobs` and `GET /api/jobs/{job}` (jobs, in every role), and
//! `POST /api/jobs/{job}/end`, which ends a job.

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

/// The body of `POST /api/jobs/{job}/end`, all optional.
#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct EndBody {
    /// Why it ended, in words ("Slurm epilog").
    #[serde(default)]
    reason: Option<String>,
    /// Attributes of the end (`slurm.job.id`), as strings.
    #[serde(default)]
    attributes: std::collections::BTreeMap<String, String>,
}

/// Longest `reason` taken.
const MAX_REASON: usize = 1024;

/// Ends a job this sonde knows: the end goes in as a report with a
/// `job-ended` node event, through the same hub as every report, so the job
/// registry (and its state store) takes it, plugins see it, and an agent's
/// forwarder carries it to the master. A job is ended as planned: not
/// failed, and no node is lost.
pub async fn end(State(st): State<AppState>, Path(name): Path<String>, body: axum::body::Bytes) -> Response {
    let body: EndBody = if body.iter().all(u8::is_ascii_whitespace) {
        EndBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(b) => b,
            Err(e) => return super::bad_request("body", format!("not a valid end ({e})")),
        }
    };
    let reason = body.reason.unwrap_or_else(|| "ended through the API".into());
    if reason.len() > MAX_REASON {
        return super::bad_request("reason", format!("longer than {MAX_REASON} bytes"));
    }
    if !st.cluster.jobs.knows(&name) {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"error": format!("no job named {name:?} has reported here")})),
        )
            .into_response();
    }
    if let Err(why) = st.ingest.room() {
        return (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"error": why}))).into_response();
    }
    let report = crate::ingest::Report {
        origin: crate::ingest::Origin {
            job: name.clone(),
            node: st.cluster.node.clone(),
            role: "sonde-api".into(),
            ..Default::default()
        },
        node_events: vec![crate::ingest::NodeEvent {
            time: crate::model::now_ns(),
            kind: crate::cluster::jobs::JOB_ENDED.into(),
            exit_code: None,
            reason,
            attributes: body
                .attributes
                .into_iter()
                .map(|(k, v)| (k, crate::model::AttrValue::from(v)))
                .collect(),
        }],
        ..Default::default()
    };
    if let Err(full) = st.ingest.submit(&report) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": format!("the ingest queue is full ({} of {} rows)", full.waiting, full.capacity)})),
        )
            .into_response();
    }
    match st.cluster.jobs.list().into_iter().find(|j| j.job == name) {
        Some(summary) => Json(summary).into_response(),
        None => Json(json!({"job": name, "state": "ended"})).into_response(),
    }
}
