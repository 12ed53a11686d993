//! json/: `POST /api/ingest`, batches of progress (batch index), timings,
//! points, events and rows of event tables as JSON, for jobs that do not run
//! an OpenTelemetry SDK. This file is the endpoint and the body; `stacks.rs`
//! keeps the call stacks a probe sends by id.
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
//! On an agent, rows of a table none of its plugins declares are kept as sent
//! and forwarded to the master, which types them (what fails there is counted
//! in its `skipped_rows`).

pub mod stacks;

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
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::json;

use self::stacks::{CallStacks, JsonModule, JsonStack, ProbeStacks, STACK_FIELD, StackRef};
use super::error::{Invalid, invalid};
use super::limits::Limits;
use super::tables::{Cell, TableRegistry, TableRows, type_row, unknown_table};
use super::{CustomEvent, ForeignPoint, ForeignSeries, IngestHub, NodeEvent, Origin, Progress, Report, Timing};
use crate::model::{AttrValue, Attributes, SeriesKind, now_ns};

/// Rows one request may carry.
pub const MAX_ROWS: usize = 100_000;

/// Most refused rows listed in one answer.
const MAX_LISTED: usize = 100;

#[derive(Default)]
pub struct Body {
    pub origin: JsonOrigin,
    pub progress: Vec<JsonProgress>,
    pub timings: Vec<JsonTiming>,
    pub points: Vec<JsonPoint>,
    pub events: Vec<JsonEvent>,
    pub heartbeats: Vec<JsonHeartbeat>,
    pub node_events: Vec<JsonNodeEvent>,
    /// A probe's new call stacks and its module map (`stacks.rs`).
    pub mpi_stacks: Vec<JsonStack>,
    pub mpi_modules: Vec<JsonModule>,
    /// Every other key: rows of the event table it names, in body order.
    pub tables: Vec<(String, Vec<serde_json::Map<String, serde_json::Value>>)>,
}

// By hand rather than derived: the keys that are not the body's own are
// tables, known only at run time, and each list is read straight into its
// type (no intermediate tree of the whole body).
impl<'de> Deserialize<'de> for Body {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct BodyVisitor;
        impl<'de> Visitor<'de> for BodyVisitor {
            type Value = Body;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an ingest body (a JSON object)")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Body, A::Error> {
                let mut b = Body::default();
                while let Some(key) = m.next_key::<String>()? {
                    match key.as_str() {
                        "origin" => b.origin = m.next_value()?,
                        "progress" => b.progress = m.next_value()?,
                        "timings" => b.timings = m.next_value()?,
                        "points" => b.points = m.next_value()?,
                        "events" => b.events = m.next_value()?,
                        "heartbeats" => b.heartbeats = m.next_value()?,
                        "node_events" => b.node_events = m.next_value()?,
                        "mpi_stacks" => b.mpi_stacks = m.next_value()?,
                        "mpi_modules" => b.mpi_modules = m.next_value()?,
                        _ => {
                            let rows = m.next_value()?;
                            b.tables.push((key, rows));
                        }
                    }
                }
                Ok(b)
            }
        }
        d.deserialize_map(BodyVisitor)
    }
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

/// A JSON value as a cell of a row; `None` for `null` (the field is left out).
fn cell(v: serde_json::Value) -> Result<Option<Cell>, String> {
    use serde_json::Value as V;
    Ok(Some(match v {
        V::Null => return Ok(None),
        V::Bool(b) => Cell::B(b),
        V::String(s) => Cell::S(s),
        V::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => Cell::U(u),
            (_, Some(i)) => Cell::I(i),
            _ => Cell::F(n.as_f64().unwrap_or(f64::NAN)),
        },
        V::Array(_) | V::Object(_) => return Err("must be a number, a string or a boolean".into()),
    }))
}

/// What a body became: its report, the table rows it refused (the rest is
/// kept), and the rows that named a call stack.
pub struct Converted {
    pub report: Report,
    /// Why rows were refused: one entry per row, or per table nobody declares.
    pub refused: Vec<Invalid>,
    /// How many rows those are.
    pub refused_rows: usize,
    pub stacks: ProbeStacks,
}

/// Where a body's table rows are typed: the declared tables, and whether
/// rows of other tables are kept as sent (an agent).
pub struct TableRules<'a> {
    pub registry: &'a TableRegistry,
    pub keep_unknown: bool,
}

impl Body {
    pub fn rows(&self) -> usize {
        self.progress.len()
            + self.timings.len()
            + self.points.len()
            + self.events.len()
            + self.heartbeats.len()
            + self.node_events.len()
            + self.tables.iter().map(|t| t.1.len()).sum::<usize>()
    }

    /// Validates every row and converts. An invalid row of a fixed list
    /// refuses the body (`Err`, naming it); rows of tables are refused one
    /// by one (`Converted::refused`).
    pub fn convert(self, now: u64, limits: &Limits, tables: &TableRules) -> Result<Converted, Invalid> {
        for (i, s) in self.mpi_stacks.iter().enumerate() {
            s.check(i)?;
        }
        for (i, m) in self.mpi_modules.iter().enumerate() {
            m.check(i)?;
        }
        let mut probe = ProbeStacks {
            modules: self.mpi_modules,
            stacks: self.mpi_stacks,
            refs: Vec::new(),
        };
        let table_rows = self.tables;
        let fixed = Body {
            origin: self.origin,
            progress: self.progress,
            timings: self.timings,
            points: self.points,
            events: self.events,
            heartbeats: self.heartbeats,
            node_events: self.node_events,
            ..Default::default()
        };
        if fixed.rows() + table_rows.iter().map(|t| t.1.len()).sum::<usize>() > MAX_ROWS {
            return Err(invalid(
                "(body)",
                format!(
                    "{} rows; at most {MAX_ROWS} per request",
                    fixed.rows() + table_rows.iter().map(|t| t.1.len()).sum::<usize>()
                ),
            ));
        }
        let mut report = fixed.into_report(now, limits)?;
        let mut refused = Vec::new();
        let mut refused_rows = 0;
        for (table, rows) in table_rows {
            let (sent, kept) = (rows.len(), report.rows());
            add_table_rows(
                &mut report,
                &mut refused,
                &mut probe.refs,
                &table,
                rows,
                now,
                limits,
                tables,
            );
            refused_rows += sent - (report.rows() - kept);
        }
        Ok(Converted {
            report,
            refused,
            refused_rows,
            stacks: probe,
        })
    }

    fn into_report(self, now: u64, limits: &Limits) -> Result<Report, Invalid> {
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
        Ok(r)
    }
}

/// Types one table's rows from a body into `report`; refused rows (or the
/// whole table, when no plugin declares it) go to `refused`. A row's `stack`
/// is taken out and remembered in `refs`.
#[allow(clippy::too_many_arguments)]
fn add_table_rows(
    report: &mut Report,
    refused: &mut Vec<Invalid>,
    refs: &mut Vec<StackRef>,
    table: &str,
    rows: Vec<serde_json::Map<String, serde_json::Value>>,
    now: u64,
    limits: &Limits,
    rules: &TableRules,
) {
    if rows.is_empty() {
        return;
    }
    let decl = rules.registry.get(table);
    if decl.is_none() && !rules.keep_unknown {
        let mut e = unknown_table(table, rules.registry);
        e.reason = format!("{} rows refused: {}", rows.len(), e.reason);
        refused.push(e);
        return;
    }
    let group = report.tables.len();
    let mut typed = decl.clone().map(TableRows::typed);
    for (i, mut row) in rows.into_iter().enumerate() {
        let at = |column: &str| format!("{table}[{i}].{column}");
        let stack = match row.remove(STACK_FIELD) {
            None | Some(serde_json::Value::Null) => None,
            Some(v) => match v.as_u64().and_then(|v| u32::try_from(v).ok()) {
                Some(id) => Some(id),
                None => {
                    refused.push(invalid(
                        at(STACK_FIELD),
                        format!("{v}: must be a call-stack id (0 to 4294967295)"),
                    ));
                    continue;
                }
            },
        };
        let thread = row.get("thread").and_then(|v| v.as_u64()).unwrap_or(0) as u32;
        let mut fields = Vec::with_capacity(row.len());
        let mut bad = None;
        for (k, v) in row {
            match cell(v) {
                Ok(Some(c)) => fields.push((k, c)),
                Ok(None) => {}
                Err(reason) => {
                    bad = Some(invalid(at(&k), reason));
                    break;
                }
            }
        }
        if let Some(e) = bad {
            refused.push(e);
            continue;
        }
        let row_index = match (&decl, &mut typed) {
            (Some(decl), Some(t)) => {
                match type_row(
                    decl,
                    fields.iter().map(|(k, c)| (k.as_str(), c.clone())),
                    now,
                    limits.attribute_value,
                ) {
                    Ok(cells) => {
                        t.rows.push(cells);
                        t.received.push(now);
                        t.rows.len() - 1
                    }
                    Err((column, reason)) => {
                        refused.push(invalid(at(&column), reason));
                        continue;
                    }
                }
            }
            _ => {
                // Kept as sent (an agent): the master types it.
                let strings_fit = fields
                    .iter()
                    .all(|(_, c)| !matches!(c, Cell::S(s) if s.len() > limits.attribute_value));
                if !strings_fit {
                    refused.push(invalid(at("(text)"), "a text over ingest.max_attribute_value_bytes"));
                    continue;
                }
                report.add_row_as_sent(table, fields, now);
                let g = report.tables.len() - 1;
                if let Some(id) = stack {
                    refs.push(StackRef {
                        group: g,
                        row: report.tables[g].rows.len() - 1,
                        thread,
                        id,
                    });
                }
                continue;
            }
        };
        if let Some(id) = stack {
            refs.push(StackRef {
                group,
                row: row_index,
                thread,
                id,
            });
        }
    }
    if let Some(t) = typed.filter(|t| !t.rows.is_empty()) {
        report.tables.push(t);
    }
}

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
    let n = match st.hub.submit(&report) {
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

    /// A registry holding the table `requests` of a few columns.
    fn requests_table() -> TableRegistry {
        use crate::plugin::bindings::types::{ColumnDecl, ColumnDefault as D, ColumnType as T, TableDecl};
        let col = |name: &str, type_, default| ColumnDecl {
            name: name.into(),
            type_,
            default,
            labels: vec![],
        };
        crate::ingest::tables::tests::registry_with(vec![TableDecl {
            name: "requests".into(),
            description: String::new(),
            columns: vec![
                col("request_id", T::U64, D::Required),
                col("slo_factor", T::F64, D::Zero),
                col("arrival_ns", T::Timestamp, D::Received),
                col("callsite", T::String, D::Zero),
                col("thread", T::U32, D::Zero),
            ],
        }])
    }

    fn convert(body: &str, registry: &TableRegistry, keep_unknown: bool) -> Converted {
        let b: Body = serde_json::from_str(body).unwrap();
        let rules = TableRules { registry, keep_unknown };
        b.convert(99, &Limits::default(), &rules).unwrap()
    }

    #[test]
    fn a_key_naming_a_declared_table_is_its_rows_and_bad_rows_go_alone() {
        let reg = requests_table();
        let c = convert(
            r#"{"origin":{"job":"serve"},
                "timings":[{"name":"t","start_ns":1,"end_ns":2}],
                "requests":[{"request_id":68,"slo_factor":2},
                            {"request_id":-1},
                            {"slo_factor":1},
                            {"request_id":70,"arival_ns":5},
                            {"request_id":71,"slo_factor":"fast"},
                            {"request_id":72,"slo_factor":null,"arrival_ns":7}],
                "reqests":[{"request_id":1}]}"#,
            &reg,
            false,
        );
        assert_eq!(c.report.timings.len(), 1, "the rest of the body is kept");
        assert_eq!(
            (c.report.rows(), c.refused_rows),
            (3, 5),
            "every row kept or refused, none lost"
        );
        let t = &c.report.tables[0];
        assert_eq!(
            t.columns,
            vec!["request_id", "slo_factor", "arrival_ns", "callsite", "thread"]
        );
        let got: Vec<(u64, f64, u64)> = t.rows.iter().map(|r| (r[0].u(), r[1].f(), r[2].u())).collect();
        assert_eq!(
            got,
            vec![(68, 2.0, 99), (72, 0.0, 7)],
            "defaults: zero, the time of receipt; null = left out"
        );
        let refused: Vec<String> = c.refused.iter().map(|e| e.to_string()).collect();
        let want = [
            "requests[1].request_id: -1: must be an integer from 0",
            "requests[2].request_id: missing",
            "requests[3].arival_ns: not a column of table \"requests\" (its columns: request_id, slo_factor",
            "requests[4].slo_factor: \"fast\": must be a finite number",
            "reqests: 1 rows refused: no running plugin declares a table named \"reqests\" (declared now: requests)",
        ];
        assert_eq!(refused.len(), want.len(), "{refused:#?}");
        for (got, want) in refused.iter().zip(want) {
            assert!(got.starts_with(want), "{got}\n  wanted {want}");
        }
    }

    #[test]
    fn an_agent_keeps_rows_of_tables_it_has_no_plugin_for() {
        let c = convert(
            r#"{"requests":[{"request_id":1,"anything":"x"}]}"#,
            &TableRegistry::default(),
            true,
        );
        assert!(c.refused.is_empty());
        let t = &c.report.tables[0];
        assert!(t.decl.is_none());
        assert_eq!(t.columns, vec!["anything", "request_id"]);
        assert_eq!(c.report.rows(), 1);
    }

    #[test]
    fn rows_of_tables_become_batch_columns() {
        use std::sync::Arc;
        let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let s2 = seen.clone();
        let hub = IngestHub::with_tables(
            100,
            Arc::new(move |b: &crate::plugin::bindings::types::EventBatch| {
                s2.lock().push(b.clone());
                1
            }),
            Arc::new(requests_table()),
            false,
        );
        let c = convert(
            r#"{"origin":{"job":"j","rank":2},"requests":[{"request_id":5,"callsite":"a+0x1"},{"request_id":6}]}"#,
            hub.tables(),
            false,
        );
        assert_eq!(hub.submit(&c.report), Ok(2));
        hub.flush();
        let b = &seen.lock()[0];
        let t = &b.tables[0];
        use crate::plugin::bindings::types::TableColumn as C;
        assert_eq!(b.origins[0].rank, 2);
        assert_eq!(t.columns[0], C::U64s(vec![5, 6]));
        let C::Strings(cs) = &t.columns[3] else { panic!() };
        assert_eq!(b.names[cs[0] as usize], "a+0x1");
        assert_eq!(b.names[cs[1] as usize], "");
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
    fn probe_stacks_name_their_rows_and_bad_ones_are_refused_by_field() {
        let reg = requests_table();
        let mut c = convert(
            r#"{"origin":{"job":"j","rank":0,"attributes":{"process.pid":"9"}},
                "requests":[{"request_id":1,"thread":0,"callsite":"a+0x1","stack":3},
                            {"request_id":2,"stack":-4}],
                "mpi_stacks":[{"thread":0,"id":3,"frames":[4112,4128]}],
                "mpi_modules":[{"path":"/nonexistent/app","build_id":"ab","base":4096,"start":4096,"end":8192}]}"#,
            &reg,
            false,
        );
        assert_eq!(c.stacks.refs.len(), 1);
        assert!(
            c.refused[0].to_string().starts_with("requests[1].stack: -4"),
            "{:?}",
            c.refused
        );
        let table = CallStacks::default();
        let origin = c.report.origin.clone();
        table.apply(&origin, c.stacks, &mut c.report);
        assert_eq!(c.report.tables[0].rows[0][3], Cell::S("app+0x20;app+0x10".into()));
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
            let b: Body = serde_json::from_str(&format!("{{{bad}}}")).unwrap();
            let rules = TableRules {
                registry: &reg,
                keep_unknown: false,
            };
            let e = b.convert(0, &Limits::default(), &rules).err().unwrap();
            assert_eq!(e.field, field);
        }
    }
}
