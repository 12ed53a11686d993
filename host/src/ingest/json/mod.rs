//! json/: `POST /api/ingest`, batches of progress (batch index), timings,
//! points, events and rows of event tables as JSON, for jobs that do not run
//! an OpenTelemetry SDK. This file is the endpoint (the router, the token
//! check, the answers); `body.rs` is the body as sent, `convert.rs` checks it
//! and turns it into a `Report`, `stacks.rs` keeps the call stacks a probe
//! sends by id.
//!
//! ```json
//! {
//!   "origin":  {"job": "mnist", "node": "gpu-3", "role": "trainer", "rank": 0, "local_rank": 0},
//!   "progress": [{"name": "batch_idx", "value": 12, "time_ns": 1732300000000000000}],
//!   "timings":  [{"name": "train_batch", "start_ns": 1732300000000000000, "end_ns": 1732300000040000000, "batch_idx": 12}],
//!   "points":   [{"metric": "samples_per_second", "unit": "{sample}/s", "value": 812.5}],
//!   "events":   [{"name": "checkpoint.saved", "body": "step 12", "attributes": {"path": "/ckpt/12"}}],
//!   "heartbeats": [{"time_ns": 1732300000000000000}],
//!   "node_events": [{"kind": "failed", "exit_code": 137, "reason": "OOM killed"}],
//!   "requests": [{"request_id": 68, "model_id": 30, "arrival_ns": 1598832443782277698, "departure_ns": 1598832443793706643}]
//! }
//! ```
//! Every other key names an **event table** a running plugin declared
//! (`requests` above, which a bundled plugin declares): its value is a list of rows,
//! each an object whose fields are the table's columns by name, typed by the
//! declaration (`ingest/tables.rs`; `null` is a field left out). `GET
//! /api/tables` lists the declared tables and their columns.
//!
//! Every list is optional; `time_ns` defaults to the time of receipt. Unknown
//! fields are refused (a typo must not silently drop data). Answers: 202 with
//! the row count; 400 malformed JSON or an unknown field in a fixed list
//! (with line and column); 413 body over `ingest.max_body_bytes`; 415 not
//! JSON; 422 invalid values or a name or attribute over its `ingest.max_*`
//! limit (`key` names the row and field, `reason` the limit; see
//! `ingest/limits.rs`); 429 when the hub is full; 401 without the token when
//! one is configured.
//!
//! Rows of event tables are refused one by one: an unknown table, a missing
//! or unknown column, a value of the wrong type refuses that row (or that
//! table's rows) and keeps everything else of the body. The answer is then
//! 422 with `accepted` (the rows kept: do not send them again), `refused_rows`
//! and `refused` (up to 100 of `{key, reason}`, `key` as `table[row].column`).
//! An invalid row of a fixed list (timings, points, ...) refuses the body:
//! 422 with `accepted: 0`.
//!
//! A sender that may post a body again (its answer lost, the agent killed)
//! names each body with `sonde-producer` and `sonde-seq` (as sondes do
//! between themselves, `export/sequence.rs`) and posts the same body with
//! the same number again: a body already taken is answered 202 with
//! `"repeat": true` and not taken twice, a window per producer remembers it
//! across a restart (`ingest/dedup.rs`), and the answer comes once what the
//! body changed is on disk (`ingest/durable.rs`).
//!
//! On an agent, rows of a table none of its plugins declares are kept as sent
//! and forwarded to the master, which types them (what fails there is counted
//! in its `skipped_rows`).

mod body;
mod convert;
pub mod stacks;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::json;

pub use self::body::{
    Body, JsonEvent, JsonHeartbeat, JsonKind, JsonNodeEvent, JsonOrigin, JsonPoint, JsonProgress, JsonTiming, MAX_ROWS,
};
pub use self::convert::{Converted, TableRules};
use self::stacks::CallStacks;
use super::IngestHub;
use super::dedup::Admit;
use super::error::{Invalid, invalid};
use super::limits::Limits;
use crate::export::sequence::{PRODUCER_HEADER, RequestId, SEQ_HEADER};
use crate::model::now_ns;

/// Most refused rows listed in one answer.
const MAX_LISTED: usize = 100;

#[derive(Clone)]
pub struct IngestState {
    pub hub: Arc<IngestHub>,
    /// How long names and attributes may be (`ingest.max_name_bytes` and its neighbours).
    pub limits: Limits,
    /// The current `api.token` (it can change live): required on POST when set.
    pub token: Arc<dyn Fn() -> Option<String> + Send + Sync>,
    /// The call stacks probes send by id, per process, named here.
    pub stacks: Arc<CallStacks>,
}

/// `POST /api/ingest` (and `GET /api/ingest` for the counters).
pub fn router(state: IngestState, max_body_bytes: usize) -> axum::Router {
    axum::Router::new()
        .route("/api/ingest", post(ingest).get(stats))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(state)
}

/// The API's error shape (`api/errors.rs`): `key` and `reason` come from
/// the field at fault, when there is one.
fn error(status: StatusCode, msg: impl std::fmt::Display, at: Option<Invalid>) -> Response {
    let mut body = json!({"error": msg.to_string()});
    if let Some(at) = at {
        body["key"] = at.field.into();
        body["reason"] = at.reason.into();
    }
    (status, Json(body)).into_response()
}

/// Checks `Authorization: Bearer <token>` when a token is configured.
pub fn authorized(headers: &HeaderMap, token: Option<&str>) -> bool {
    match token.filter(|t| !t.is_empty()) {
        None => true,
        Some(t) => headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|given| given.trim() == t),
    }
}

async fn stats(State(st): State<IngestState>) -> Response {
    Json(st.hub.stats()).into_response()
}

async fn ingest(
    State(st): State<IngestState>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    let counters = &st.hub.json;
    counters.requests.fetch_add(1, Relaxed);
    let reject = |status: StatusCode, msg: String, at: Option<Invalid>| {
        counters.rejected.fetch_add(1, Relaxed);
        error(status, msg, at)
    };
    if !authorized(&headers, (st.token)().as_deref()) {
        counters.unauthorized.fetch_add(1, Relaxed);
        return reject(
            StatusCode::UNAUTHORIZED,
            "this request changes state: send Authorization: Bearer <api.token>".into(),
            None,
        );
    }
    let body = match body {
        Ok(b) => b,
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            let at = invalid(
                "ingest.max_body_bytes",
                "the body is over it; send fewer rows per request",
            );
            return reject(e.status(), format!("request body: {at}"), Some(at));
        }
        Err(e) => return reject(e.status(), format!("request body: {}", e.body_text()), None),
    };
    let ctype = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !ctype.is_empty() && !ctype.starts_with("application/json") {
        return reject(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("content-type {ctype:?}: send application/json"),
            None,
        );
    }
    let parsed: Body = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return reject(StatusCode::BAD_REQUEST, format!("malformed ingest body: {e}"), None),
    };
    let rules = TableRules {
        registry: st.hub.tables(),
        keep_unknown: st.hub.keeps_unknown_tables(),
    };
    let Converted {
        report,
        refused,
        refused_rows,
        stacks,
    } = match parsed.convert(now_ns(), &st.limits, &rules) {
        Ok(c) => c,
        Err(e) => {
            return reject(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("invalid ingest body: {e}"),
                Some(e),
            );
        }
    };
    let report = if stacks.is_empty() {
        report
    } else {
        // Naming a new module's addresses reads its file: off the async workers.
        let table = st.stacks.clone();
        let mut report = report;
        match tokio::task::spawn_blocking(move || {
            let origin = report.origin.clone();
            table.apply(&origin, stacks, &mut report);
            report
        })
        .await
        {
            Ok(r) => r,
            Err(e) => {
                return reject(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("naming call stacks: {e}"),
                    None,
                );
            }
        }
    };
    let id = match RequestId::from_headers(
        headers.get(PRODUCER_HEADER).map(|v| v.as_bytes()),
        headers.get(SEQ_HEADER).map(|v| v.as_bytes()),
    ) {
        Ok(id) => id,
        Err(m) => return reject(StatusCode::BAD_REQUEST, m, None),
    };
    let retry_later = |why: String| {
        let mut r = error(StatusCode::SERVICE_UNAVAILABLE, why, None);
        r.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        r
    };
    let tracked = id.is_some();
    if tracked && !st.hub.commits.healthy() {
        return retry_later(st.hub.commits.refuse());
    }
    let ticket = match st.hub.dedup.admit(id.clone()) {
        Admit::Repeat => {
            return match st.hub.commits.wait().await {
                Ok(()) => (StatusCode::ACCEPTED, Json(json!({"accepted": 0, "repeat": true}))).into_response(),
                Err(why) => retry_later(why),
            };
        }
        Admit::Busy => return retry_later("this body (sonde-producer, sonde-seq) is being taken: retry".into()),
        Admit::Untracked => None,
        Admit::New(t) => Some(t),
    };
    // An agent that could not forward it refuses it now: the job keeps it.
    if let Err(why) = st.hub.room() {
        counters.refused_rows.fetch_add(report.rows() as u64, Relaxed);
        let mut r = error(StatusCode::SERVICE_UNAVAILABLE, why, None);
        r.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        return r;
    }
    let n = match st.hub.submit_request(std::slice::from_ref(&report), id.as_ref()) {
        Ok(n) => {
            counters.rows.fetch_add(n as u64, Relaxed);
            n
        }
        Err(full) => {
            counters.refused_rows.fetch_add(report.rows() as u64, Relaxed);
            let mut r = error(StatusCode::TOO_MANY_REQUESTS, full, None);
            r.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            return r;
        }
    };
    if let Some(t) = ticket {
        t.commit();
    }
    if tracked && let Err(why) = st.hub.commits.wait().await {
        return retry_later(why);
    }
    if refused.is_empty() {
        return (StatusCode::ACCEPTED, Json(json!({"accepted": n}))).into_response();
    }
    // Some rows of tables were refused; the rest of the body was taken.
    counters.rejected.fetch_add(1, Relaxed);
    counters.skipped_rows.fetch_add(refused_rows as u64, Relaxed);
    let listed: Vec<serde_json::Value> = refused
        .iter()
        .take(MAX_LISTED)
        .map(|e| json!({"key": e.field, "reason": e.reason}))
        .collect();
    let first = &refused[0];
    let body = json!({
        "error": format!("{refused_rows} row(s) refused, {n} accepted (do not send those again): {first}"),
        "key": first.field,
        "reason": first.reason,
        "accepted": n,
        "refused_rows": refused_rows,
        "refused": listed,
    });
    (StatusCode::UNPROCESSABLE_ENTITY, Json(body)).into_response()
}
