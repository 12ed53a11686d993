//! json/: `POST /api/ingest`, batches of progress (batch index), timings,
//! points and events as JSON, for jobs that do not run an OpenTelemetry SDK.
//! This file is the endpoint and the body; the two row kinds with their own
//! vocabulary have their own files: `serving.rs` (a serving controller's
//! requests and actions) and `mpi.rs` (the MPI probe's state bins).
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
//!   "requests": [{"request_id": 68, "user_id": 0, "model_id": 30, "slo_factor": 0, "arrival_ns": 1598832443782277698,
//!                 "departure_ns": 1598832443793706643, "deadline_ns": 1598832443882277698, "result": 0,
//!                 "arrival_copies": 0, "departure_copies": 2, "action_id": 2}],
//!   "actions":  [{"action_id": 2, "action_type": 2, "status": 0, "worker_id": 0, "gpu_id": 1, "model_id": 30,
//!                 "batch_size": 1, "expected_exec_duration_ns": 5637000, "worker_exec_duration_ns": 5669663,
//!                 "sent_ns": 1598832443782208983, "expected_exec_complete_ns": 1598832443788813152,
//!                 "worker_exec_complete_ns": 1598832443789039629, "expected_gpu_clock_mhz": 1380,
//!                 "gpu_clock_before_mhz": 1380, "gpu_clock_after_mhz": 1380, "copy_output_complete_ns": 0,
//!                 "action_received_ns": 1598832443782379105, "result_sent_ns": 1598832443789049534,
//!                 "result_received_ns": 1598832443789460587, "result_processed_ns": 1598832443789472683,
//!                 "requests_queued": 2, "copies_loaded": 0, "requests_in_time": 1}],
//!   "mpi_samples": [{"thread": 0, "state": "stall", "function": "MPI_Barrier", "callsite": "app+0x4f2", "count": 12, "period_ns": 1000000}]
//! }
//! ```
//! `requests` / `actions` are serving telemetry (one row per finished request
//! or action, controller clock; see `ingest::ServedRequest`): in a request `request_id`,
//! `model_id`, `arrival_ns` and `departure_ns` are required; in an action
//! `action_id`, `action_type`, `model_id`, `sent_ns` and `result_received_ns`
//! (the rest default to 0, `batch_size` to 1, `result_processed_ns` to
//! `result_received_ns`; an infer action without `requests_in_time` gets it
//! from the requests that name it, in the clockwork plugin).
//! `mpi_samples` rows (from the MPI probe) are described in `json/mpi.rs`.
//! Every list is optional; `time_ns` defaults to the time of receipt. Unknown
//! fields are refused (a typo must not silently drop data). Answers: 202 with
//! the row count; 400 malformed JSON or unknown field (with line and column);
//! 413 body over `ingest.max_body_bytes`; 415 not JSON; 422 invalid values
//! or a name or attribute over its `ingest.max_*` limit (`key` names the row
//! and field, `reason` the limit; see `ingest/limits.rs`); 429 when the hub is
//! full; 401 without the token when one is configured.

pub mod mpi;
pub mod mpi_stacks;
pub mod serving;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Deserialize;
use serde_json::json;

use self::mpi::{JsonMpiModule, JsonMpiSample, JsonMpiStack};
use self::mpi_stacks::{MpiStacks, ProbeStacks};
use self::serving::{JsonAction, JsonRequest};
use super::error::{Invalid, invalid};
use super::limits::Limits;
use super::{CustomEvent, ForeignPoint, ForeignSeries, IngestHub, NodeEvent, Origin, Progress, Report, Timing};
use crate::model::{AttrValue, Attributes, SeriesKind, now_ns};

/// Rows one request may carry.
pub const MAX_ROWS: usize = 100_000;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Body {
    pub origin: JsonOrigin,
    pub progress: Vec<JsonProgress>,
    pub timings: Vec<JsonTiming>,
    pub points: Vec<JsonPoint>,
    pub events: Vec<JsonEvent>,
    pub heartbeats: Vec<JsonHeartbeat>,
    pub node_events: Vec<JsonNodeEvent>,
    pub requests: Vec<JsonRequest>,
    pub actions: Vec<JsonAction>,
    pub mpi_samples: Vec<JsonMpiSample>,
    /// The MPI probe's new call stacks and its module map (`mpi.rs`).
    pub mpi_stacks: Vec<JsonMpiStack>,
    pub mpi_modules: Vec<JsonMpiModule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JsonOrigin {
    pub job: String,
    pub node: String,
    pub role: String,
    pub index: i32,
    pub rank: i32,
    pub local_rank: i32,
    pub attributes: BTreeMap<String, String>,
}

impl Default for JsonOrigin {
    fn default() -> Self {
        let o = Origin::default();
        JsonOrigin {
            job: o.job,
            node: o.node,
            role: o.role,
            index: o.index,
            rank: o.rank,
            local_rank: o.local_rank,
            attributes: BTreeMap::new(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonProgress {
    #[serde(default = "batch_idx")]
    pub name: String,
    pub value: u64,
    pub time_ns: Option<u64>,
}

fn batch_idx() -> String {
    "batch_idx".into()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonTiming {
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub batch_idx: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonPoint {
    pub metric: String,
    #[serde(default)]
    pub unit: String,
    /// "gauge" (default) or "counter" (cumulative).
    #[serde(default)]
    pub kind: JsonKind,
    pub value: f64,
    pub time_ns: Option<u64>,
    #[serde(default)]
    pub attributes: BTreeMap<String, serde_json::Value>,
}

#[derive(Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum JsonKind {
    #[default]
    Gauge,
    Counter,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonEvent {
    pub name: String,
    pub time_ns: Option<u64>,
    #[serde(default)]
    pub body: String,
    #[serde(default)]
    pub attributes: BTreeMap<String, serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonHeartbeat {
    pub time_ns: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonNodeEvent {
    pub kind: String,
    pub time_ns: Option<u64>,
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub attributes: BTreeMap<String, serde_json::Value>,
}

fn check_name(limits: &Limits, field: String, name: &str) -> Result<(), Invalid> {
    if name.trim().is_empty() {
        return Err(invalid(field, "must not be empty"));
    }
    limits.check_name(field, name)
}

fn attributes(limits: &Limits, field: &str, m: BTreeMap<String, serde_json::Value>) -> Result<Attributes, Invalid> {
    limits.check_attributes(field, m.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
    m.into_iter()
        .map(|(k, v)| {
            let v = match v {
                serde_json::Value::String(s) => AttrValue::Str(s),
                serde_json::Value::Bool(b) => AttrValue::Bool(b),
                serde_json::Value::Number(n) => match n.as_i64() {
                    Some(i) => AttrValue::Int(i),
                    None => AttrValue::Float(n.as_f64().unwrap_or(f64::NAN)),
                },
                _ => {
                    return Err(invalid(
                        format!("{field}.attributes.{k}"),
                        "must be a string, number or boolean",
                    ));
                }
            };
            Ok((k, v))
        })
        .collect()
}

impl Body {
    pub fn rows(&self) -> usize {
        self.progress.len()
            + self.timings.len()
            + self.points.len()
            + self.events.len()
            + self.heartbeats.len()
            + self.node_events.len()
            + self.requests.len()
            + self.actions.len()
            + self.mpi_samples.len()
    }

    /// Validates every row and converts; the first invalid row names itself.
    /// Takes the MPI probe's stacks, modules and each row's stack id out of
    /// the body (they are not rows: `mpi_stacks.rs` keeps them).
    pub fn take_probe_stacks(&mut self) -> Result<ProbeStacks, Invalid> {
        for (i, s) in self.mpi_stacks.iter().enumerate() {
            s.check(i)?;
        }
        for (i, m) in self.mpi_modules.iter().enumerate() {
            m.check(i)?;
        }
        Ok(ProbeStacks {
            modules: std::mem::take(&mut self.mpi_modules),
            stacks: std::mem::take(&mut self.mpi_stacks),
            rows: self.mpi_samples.iter().map(|s| (s.thread, s.stack)).collect(),
        })
    }

    pub fn into_report(self, now: u64, limits: &Limits) -> Result<Report, Invalid> {
        if self.rows() > MAX_ROWS {
            return Err(invalid(
                "(body)",
                format!("{} rows; at most {MAX_ROWS} per request", self.rows()),
            ));
        }
        let o = self.origin;
        for (k, v) in [
            ("origin.rank", o.rank),
            ("origin.local_rank", o.local_rank),
            ("origin.index", o.index),
        ] {
            if v < -1 {
                return Err(invalid(k, format!("{v}: must be >= 0 (or -1 for unknown)")));
            }
        }
        for (k, v) in [
            ("origin.job", &o.job),
            ("origin.node", &o.node),
            ("origin.role", &o.role),
        ] {
            limits.check_name(k, v)?;
        }
        limits.check_attributes(
            "origin",
            o.attributes.iter().map(|(k, v)| (k.as_str(), Some(v.as_str()))),
        )?;
        let mut r = Report {
            origin: Origin {
                job: o.job,
                node: o.node,
                role: o.role,
                index: o.index,
                rank: o.rank,
                local_rank: o.local_rank,
                attributes: o.attributes.into_iter().collect(),
            },
            ..Default::default()
        };
        for (i, p) in self.progress.into_iter().enumerate() {
            check_name(limits, format!("progress[{i}].name"), &p.name)?;
            r.progress.push(Progress {
                name: p.name,
                time: p.time_ns.unwrap_or(now),
                value: p.value,
            });
        }
        for (i, t) in self.timings.into_iter().enumerate() {
            check_name(limits, format!("timings[{i}].name"), &t.name)?;
            if t.end_ns < t.start_ns {
                return Err(invalid(format!("timings[{i}].end_ns"), "is before start_ns"));
            }
            let step = match t.batch_idx {
                Some(b) if b > i64::MAX as u64 => {
                    return Err(invalid(format!("timings[{i}].batch_idx"), "too large"));
                }
                Some(b) => b as i64,
                None => -1,
            };
            r.timings.push(Timing {
                name: t.name,
                start: t.start_ns,
                end: t.end_ns,
                step,
            });
        }
        for (i, p) in self.points.into_iter().enumerate() {
            check_name(limits, format!("points[{i}].metric"), &p.metric)?;
            limits.check_name(format!("points[{i}].unit"), &p.unit)?;
            if !p.value.is_finite() {
                return Err(invalid(format!("points[{i}].value"), "must be a finite number"));
            }
            // One series per point; the hub interns equal ones.
            r.series.push(ForeignSeries {
                attributes: attributes(limits, &format!("points[{i}]"), p.attributes)?,
                metric: p.metric,
                unit: p.unit,
                kind: match p.kind {
                    JsonKind::Gauge => SeriesKind::Gauge,
                    JsonKind::Counter => SeriesKind::Counter,
                },
            });
            r.points.push(ForeignPoint {
                series: r.series.len() as u32 - 1,
                time: p.time_ns.unwrap_or(now),
                value: p.value,
            });
        }
        for (i, e) in self.events.into_iter().enumerate() {
            check_name(limits, format!("events[{i}].name"), &e.name)?;
            limits.check_text(format!("events[{i}].body"), &e.body)?;
            r.custom.push(CustomEvent {
                attributes: attributes(limits, &format!("events[{i}]"), e.attributes)?,
                time: e.time_ns.unwrap_or(now),
                name: e.name,
                body: e.body,
            });
        }
        r.heartbeats = self.heartbeats.iter().map(|h| h.time_ns.unwrap_or(now)).collect();
        for (i, e) in self.node_events.into_iter().enumerate() {
            check_name(limits, format!("node_events[{i}].kind"), &e.kind)?;
            limits.check_text(format!("node_events[{i}].reason"), &e.reason)?;
            r.node_events.push(NodeEvent {
                attributes: attributes(limits, &format!("node_events[{i}]"), e.attributes)?,
                time: e.time_ns.unwrap_or(now),
                kind: e.kind,
                exit_code: e.exit_code,
                reason: e.reason,
            });
        }
        for (i, q) in self.requests.into_iter().enumerate() {
            r.requests.push(q.convert(i)?);
        }
        for (i, a) in self.actions.into_iter().enumerate() {
            r.actions.push(a.convert(i)?);
        }
        for (i, s) in self.mpi_samples.into_iter().enumerate() {
            r.mpi_samples.push(s.into_sample(i, now)?);
        }
        Ok(r)
    }
}

#[derive(Clone)]
pub struct IngestState {
    pub hub: Arc<IngestHub>,
    /// How long names and attributes may be (`ingest.max_name_bytes` and its neighbours).
    pub limits: Limits,
    /// The current `api.token` (it can change live): required on POST when set.
    pub token: Arc<dyn Fn() -> Option<String> + Send + Sync>,
    /// The MPI probe's call stacks per process, named here.
    pub mpi_stacks: Arc<MpiStacks>,
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
    let mut parsed: Body = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return reject(StatusCode::BAD_REQUEST, format!("malformed ingest body: {e}"), None),
    };
    let report = match parsed
        .take_probe_stacks()
        .and_then(|stacks| Ok((stacks, parsed.into_report(now_ns(), &st.limits)?)))
    {
        Ok((stacks, r)) if stacks.is_empty() => r,
        // Naming a new module's addresses reads its file: off the async workers.
        Ok((stacks, mut r)) => {
            let table = st.mpi_stacks.clone();
            match tokio::task::spawn_blocking(move || {
                table.apply(&r.origin, stacks, &mut r.mpi_samples);
                r
            })
            .await
            {
                Ok(r) => r,
                Err(e) => {
                    return reject(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("naming MPI stacks: {e}"),
                        None,
                    );
                }
            }
        }
        Err(e) => {
            return reject(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("invalid ingest body: {e}"),
                Some(e),
            );
        }
    };
    match st.hub.submit(&report) {
        Ok(n) => {
            counters.rows.fetch_add(n as u64, Relaxed);
            (StatusCode::ACCEPTED, Json(json!({"accepted": n}))).into_response()
        }
        Err(full) => {
            counters.refused_rows.fetch_add(report.rows() as u64, Relaxed);
            let mut r = error(StatusCode::TOO_MANY_REQUESTS, full, None);
            r.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Report, String> {
        let b: Body = serde_json::from_str(s).map_err(|e| e.to_string())?;
        b.into_report(99, &Limits::default()).map_err(|e| e.to_string())
    }

    #[test]
    fn a_full_body_converts_with_defaults_filled_in() {
        let r = parse(
            r#"{"origin":{"job":"mnist","rank":0,"local_rank":0},
                "progress":[{"value":3}],
                "timings":[{"name":"train_batch","start_ns":10,"end_ns":20,"batch_idx":3},{"name":"x","start_ns":1,"end_ns":1}],
                "points":[{"metric":"samples_per_second","value":5.5,"attributes":{"gpu":1}}],
                "events":[{"name":"ckpt"}],"heartbeats":[{}],"node_events":[{"kind":"failed","exit_code":137}]}"#,
        )
        .unwrap();
        assert_eq!(r.origin.job, "mnist");
        assert_eq!(r.origin.index, -1, "unknown when not given");
        assert_eq!(
            r.progress,
            vec![Progress {
                name: "batch_idx".into(),
                time: 99,
                value: 3
            }]
        );
        assert_eq!(r.timings[0].step, 3);
        assert_eq!(r.timings[1].step, -1);
        assert_eq!(
            r.series[r.points[0].series as usize].attributes,
            vec![("gpu".to_string(), AttrValue::Int(1))]
        );
        assert_eq!(r.heartbeats, vec![99]);
        assert_eq!(r.node_events[0].exit_code, Some(137));
        assert_eq!(r.rows(), 7);
    }

    #[test]
    fn bad_input_is_refused_naming_the_problem() {
        for (body, want) in [
            (r#"{"progres":[]}"#, "unknown field `progres`"),
            (
                r#"{"timings":[{"name":"a","start_ns":1,"end_ns":2,"extra":1}]}"#,
                "unknown field `extra`",
            ),
            (r#"{"progress":[{"value":-1}]}"#, "invalid value"),
            (r#"{"progress":[{"value":1}"#, "EOF"),
            (
                r#"{"timings":[{"name":"a","start_ns":5,"end_ns":2}]}"#,
                "timings[0].end_ns: is before start_ns",
            ),
            (
                r#"{"timings":[{"name":"","start_ns":1,"end_ns":2}]}"#,
                "timings[0].name: must not be empty",
            ),
            (
                r#"{"points":[{"metric":"m","value":1,"attributes":{"a":[1]}}]}"#,
                "points[0].attributes.a",
            ),
            (r#"{"origin":{"rank":-5}}"#, "origin.rank: -5"),
            (
                r#"{"points":[{"metric":"m","value":1,"kind":"histogram"}]}"#,
                "unknown variant `histogram`",
            ),
        ] {
            let err = parse(body).unwrap_err();
            assert!(err.contains(want), "{body}: {err}");
        }
    }

    #[test]
    fn every_string_limit_is_refused_naming_the_field_and_the_setting() {
        let long = |n: usize| "x".repeat(n);
        let many: Vec<String> = (0..65).map(|i| format!(r#""k{i}":"v""#)).collect();
        let many = many.join(",");
        for (body, field, setting) in [
            (
                format!(r#"{{"origin":{{"job":"{}"}}}}"#, long(257)),
                "origin.job",
                "at most 256 (ingest.max_name_bytes)",
            ),
            (
                format!(r#"{{"origin":{{"node":"{}"}}}}"#, long(257)),
                "origin.node",
                "ingest.max_name_bytes",
            ),
            (
                format!(r#"{{"origin":{{"role":"{}"}}}}"#, long(257)),
                "origin.role",
                "ingest.max_name_bytes",
            ),
            (
                format!(r#"{{"origin":{{"attributes":{{{many}}}}}}}"#),
                "origin.attributes",
                "65 attributes; at most 64 (ingest.max_attributes)",
            ),
            (
                format!(r#"{{"origin":{{"attributes":{{"{}":"v"}}}}}}"#, long(129)),
                "origin.attributes.xxxx",
                "at most 128 (ingest.max_attribute_key_bytes)",
            ),
            (
                format!(r#"{{"origin":{{"attributes":{{"k":"{}"}}}}}}"#, long(4097)),
                "origin.attributes.k",
                "at most 4096 (ingest.max_attribute_value_bytes)",
            ),
            (
                format!(r#"{{"timings":[{{"name":"{}","start_ns":1,"end_ns":2}}]}}"#, long(257)),
                "timings[0].name",
                "ingest.max_name_bytes",
            ),
            (
                format!(
                    r#"{{"points":[{{"metric":"m","value":1,"attributes":{{"a":"{}"}}}}]}}"#,
                    long(4097)
                ),
                "points[0].attributes.a",
                "ingest.max_attribute_value_bytes",
            ),
            (
                format!(r#"{{"points":[{{"metric":"m","value":1,"attributes":{{{many}}}}}]}}"#),
                "points[0].attributes",
                "ingest.max_attributes",
            ),
            (
                format!(r#"{{"events":[{{"name":"e","body":"{}"}}]}}"#, long(4097)),
                "events[0].body",
                "ingest.max_attribute_value_bytes",
            ),
            (
                format!(r#"{{"node_events":[{{"kind":"{}"}}]}}"#, long(257)),
                "node_events[0].kind",
                "ingest.max_name_bytes",
            ),
        ] {
            let b: Body = serde_json::from_str(&body).unwrap();
            let e = b.into_report(1, &Limits::default()).unwrap_err();
            assert!(e.field.starts_with(field), "{field}: {e}");
            assert!(e.reason.contains(setting), "{field}: {e}");
        }
        // At the limit is still fine.
        let ok = format!(r#"{{"origin":{{"job":"{}"}}}}"#, long(256));
        assert!(parse(&ok).is_ok());
    }

    #[test]
    fn serving_rows_convert_and_bad_ones_name_row_and_field() {
        let r = parse(
            r#"{"requests":[{"request_id":68,"model_id":30,"arrival_ns":10,"departure_ns":20,"deadline_ns":110}],
                "actions":[{"action_id":2,"action_type":2,"model_id":30,"sent_ns":5,"result_received_ns":30,"requests_in_time":1}]}"#,
        )
        .unwrap();
        assert_eq!(r.rows(), 2);
        assert_eq!((r.requests[0].request_id, r.requests[0].deadline), (68, 110));
        assert_eq!((r.actions[0].batch_size, r.actions[0].result_processed), (1, 30));
        for (body, want) in [
            (
                r#"{"requests":[{"request_id":1,"model_id":1,"arrival_ns":10,"departure_ns":20},{"request_id":2,"model_id":1,"arrival_ns":30,"departure_ns":20}]}"#,
                "requests[1].departure_ns: is before arrival_ns",
            ),
            (
                r#"{"requests":[{"request_id":1,"model_id":1,"arrival_ns":1,"departure_ns":2,"slo_factor":-1}]}"#,
                "requests[0].slo_factor",
            ),
            (
                r#"{"actions":[{"action_id":1,"action_type":2,"model_id":1,"sent_ns":9,"result_received_ns":3}]}"#,
                "actions[0].result_received_ns: is before sent_ns",
            ),
            (
                r#"{"actions":[{"action_id":1,"action_type":2,"model_id":1,"sent_ns":1,"result_received_ns":3,"batch_size":2,"requests_in_time":3}]}"#,
                "actions[0].requests_in_time",
            ),
            (
                r#"{"actions":[{"action_id":1,"action_type":2,"model_id":1,"sent_ns":1,"result_received_ns":3,"batch_size":0}]}"#,
                "actions[0].batch_size: must be >= 1",
            ),
            (
                r#"{"requests":[{"request_id":1,"model_id":1,"arrival_ns":1}]}"#,
                "missing field `departure_ns`",
            ),
            (
                r#"{"actions":[{"action_id":1,"action_type":300,"model_id":1,"sent_ns":1,"result_received_ns":1}]}"#,
                "invalid value",
            ),
        ] {
            let err = parse(body).unwrap_err();
            assert!(err.contains(want), "{body}: {err}");
        }
    }

    #[test]
    fn oversized_row_counts_are_refused() {
        let rows: Vec<String> = (0..MAX_ROWS + 1).map(|_| "{}".to_string()).collect();
        let err = parse(&format!(r#"{{"heartbeats":[{}]}}"#, rows.join(","))).unwrap_err();
        assert!(err.contains("at most 100000"), "{err}");
    }

    #[test]
    fn the_token_check_wants_the_exact_bearer_token() {
        let mut h = HeaderMap::new();
        assert!(authorized(&h, None));
        assert!(!authorized(&h, Some("s3")));
        h.insert(header::AUTHORIZATION, "Bearer nope".parse().unwrap());
        assert!(!authorized(&h, Some("s3")));
        h.insert(header::AUTHORIZATION, "Bearer s3".parse().unwrap());
        assert!(authorized(&h, Some("s3")));
    }

    #[test]
    fn samples_become_mpi_columns_with_interned_names() {
        use std::sync::Arc;
        let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let s2 = seen.clone();
        let hub = IngestHub::new(
            100,
            Arc::new(move |b: &crate::plugin::bindings::types::EventBatch| {
                s2.lock().push(b.clone());
                1
            }),
        );
        let body: Body = serde_json::from_str(
            r#"{"origin":{"job":"j","rank":2},"mpi_samples":[
                {"thread":1,"time_ns":5,"state":"stall","function":"MPI_Barrier","callsite":"a+0x1","count":4,"period_ns":1000},
                {"thread":1,"time_ns":5,"state":"not_in_mpi","count":6,"period_ns":1000}]}"#,
        )
        .unwrap();
        let report = body.into_report(0, &Limits::default()).unwrap();
        assert_eq!(hub.submit(&report), Ok(2));
        hub.flush();
        let b = &seen.lock()[0];
        let c = b.mpi_samples.as_ref().unwrap();
        assert_eq!(b.origins[0].rank, 2);
        assert_eq!(c.state, vec![2, 0]);
        assert_eq!(c.count, vec![4, 6]);
        assert_eq!(b.names[c.function[0] as usize], "MPI_Barrier");
        assert_eq!(b.names[c.callsite[0] as usize], "a+0x1");
        assert_eq!(b.names[c.function[1] as usize], "");
    }

    #[test]
    fn probe_stacks_name_their_rows_and_bad_ones_are_refused_by_field() {
        let mut body: Body = serde_json::from_str(
            r#"{"origin":{"job":"j","rank":0,"attributes":{"process.pid":"9"}},
                "mpi_samples":[{"thread":0,"state":2,"function":"MPI_Recv","callsite":"a+0x1","stack":3,"count":1,"period_ns":1}],
                "mpi_stacks":[{"thread":0,"id":3,"frames":[4112,4128]}],
                "mpi_modules":[{"path":"/nonexistent/app","build_id":"ab","base":4096,"start":4096,"end":8192}]}"#,
        )
        .unwrap();
        let stacks = body.take_probe_stacks().unwrap();
        let mut report = body.into_report(0, &Limits::default()).unwrap();
        let table = MpiStacks::default();
        table.apply(&report.origin, stacks, &mut report.mpi_samples);
        assert_eq!(report.mpi_samples[0].callsite, "app+0x20;app+0x10");
        for (bad, field) in [
            (r#""mpi_stacks":[{"id":1,"frames":[]}]"#, "mpi_stacks[0].frames"),
            (
                r#""mpi_modules":[{"path":"/a","build_id":"xyz","base":0,"start":1,"end":2}]"#,
                "mpi_modules[0].build_id",
            ),
            (
                r#""mpi_modules":[{"path":"/a","base":0,"start":2,"end":2}]"#,
                "mpi_modules[0].end",
            ),
        ] {
            let mut b: Body = serde_json::from_str(&format!("{{{bad}}}")).unwrap();
            let e = b.take_probe_stacks().err().unwrap();
            assert_eq!(e.field, field);
        }
    }
}
