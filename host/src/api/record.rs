//! `GET /api/record?seconds=N[&max_bytes=M]`: records for N seconds exactly
//! what the host hands its plugins (sampling ticks with their series, event
//! batches) and answers with the recording, a JSON-lines file that
//! `sonde plugin test --events FILE` replays (format: `plugin::recording`,
//! docs/plugins.md). One recording at a time (409 for a second one); a
//! recording that passes `max_bytes` is dropped (413) rather than cut short;
//! a client that hangs up ends it. `DELETE /api/record` ends the running
//! recording early (`sonde record` sends it on Ctrl-C): its GET then answers
//! with what it holds.

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Json, Response};

use super::{AppState, bad_request, errors};
use crate::plugin::recording::{DEFAULT_MAX_BYTES, MAX_BYTES, MAX_SECONDS, RecordError};

#[derive(serde::Deserialize)]
pub struct RecordQuery {
    seconds: Option<u64>,
    max_bytes: Option<usize>,
}

/// The smallest `max_bytes`: room for the header and a little more.
const MIN_BYTES: usize = 4096;

pub async fn record(State(st): State<AppState>, q: Result<Query<RecordQuery>, QueryRejection>) -> Response {
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => return bad_request("query", e.body_text()),
    };
    let seconds = match q.seconds {
        Some(s @ 1..=MAX_SECONDS) => s,
        Some(s) => return bad_request("seconds", format!("{s} is out of range 1..={MAX_SECONDS}")),
        None => return bad_request("seconds", format!("required: how long to record, 1..={MAX_SECONDS}")),
    };
    let max_bytes = match q.max_bytes.unwrap_or(DEFAULT_MAX_BYTES) {
        m @ MIN_BYTES..=MAX_BYTES => m,
        m => return bad_request("max_bytes", format!("{m} is out of range {MIN_BYTES}..={MAX_BYTES}")),
    };
    let period_ms = st.plugins.sample_plan().period_ms.load(Ordering::Relaxed);
    let recording = match st.plugins.recorder().start(seconds, max_bytes, period_ms) {
        Ok(r) => r,
        Err(e) => return errors::error(StatusCode::CONFLICT, e.to_string(), None, None),
    };
    recording.run_for(Duration::from_secs(seconds)).await;
    match recording.finish() {
        Ok(bytes) => (
            [
                (header::CONTENT_TYPE, "application/x-ndjson"),
                (
                    header::CONTENT_DISPOSITION,
                    "attachment; filename=\"sonde-recording.jsonl\"",
                ),
            ],
            bytes,
        )
            .into_response(),
        Err(e @ RecordError::Overflow { .. }) => errors::error(
            StatusCode::PAYLOAD_TOO_LARGE,
            e.to_string(),
            Some("max_bytes"),
            Some(&format!("over {max_bytes} bytes")),
        ),
        Err(e) => errors::error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string(), None, None),
    }
}

/// `DELETE /api/record`: ends the recording in progress now; 404 when none is.
pub async fn stop(State(st): State<AppState>) -> Response {
    if st.plugins.recorder().stop() {
        Json(serde_json::json!({"stopped": true})).into_response()
    } else {
        errors::error(StatusCode::NOT_FOUND, "no recording is running", None, None)
    }
}
