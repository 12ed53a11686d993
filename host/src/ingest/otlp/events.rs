//! OTLP spans and log records (decoded with prost) → timings and custom
//! events (the table in `otlp/mod.rs`), and the generic mapping a process
//! uses to report liveness, lifecycle and clocks through any OpenTelemetry
//! SDK: heartbeats, node events and named progress (the parameter-server
//! plugin reads all three). `wire.rs` calls [`progress`] for each
//! `sonde.progress` data point.
//!
//! | OTLP | event |
//! |---|---|
//! | log record named `sonde.heartbeat` (`event_name`, or attribute `event.name`) | a heartbeat at the record's time |
//! | log record named `sonde.node_event` with attribute `sonde.node_event.kind` | a node event: kind; `sonde.node_event.exit_code` (int) → exit code; `sonde.node_event.reason`, else the body → reason; every other attribute is kept (e.g. `clock`, `process`) |
//! | log record named `sonde.node_event` without a kind | kept as a custom event named `sonde.node_event` (nothing is lost) |
//! | gauge or sum `sonde.progress` with point attribute `sonde.progress.name` (e.g. "clock") | progress of that name = the value (an integer >= 0) at the point's time |
//! | `sonde.progress` point without a name, or a negative / non-finite value | skipped and counted |
//! | log record or span with the attribute `sonde.table` = NAME | a row of the event table NAME: every other attribute is a field, by column name (below) |
//!
//! A record's time is its `time_unix_nano`, else `observed_time_unix_nano`,
//! else the time of receipt (as for every log record).
//!
//! A row of an event table (`ingest/tables.rs`) is a log record or a span
//! marked with `sonde.table`; its attributes are the row's fields, typed by
//! the table's declaration: an int for integer and timestamp columns (or a
//! decimal string, for a u64 above an int's range), a double or an int for
//! f64, a bool, a string. A record's time is its `received` time (a
//! `received` default); a span's start and end are not fields (send them as
//! attributes too when the table wants them). A row that does not fit the
//! declaration is skipped and counted with the reason in sonde's debug log;
//! it never becomes a timing or a custom event. This is how a sonde agent
//! forwards table rows to its master.

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::LogRecord;

use super::resource::{as_int, as_text, attrs, find, origin};
use crate::ingest::tables::Cell;
use crate::ingest::{CustomEvent, NodeEvent, Progress, Report, Timing};
use crate::model::{AttrValue, now_ns};

pub const HEARTBEAT_EVENT: &str = "sonde.heartbeat";
pub const NODE_EVENT: &str = "sonde.node_event";
pub const NODE_EVENT_KIND: &str = "sonde.node_event.kind";
pub const NODE_EVENT_EXIT_CODE: &str = "sonde.node_event.exit_code";
pub const NODE_EVENT_REASON: &str = "sonde.node_event.reason";
pub const PROGRESS_METRIC: &str = "sonde.progress";
pub const PROGRESS_NAME: &str = "sonde.progress.name";
/// The attribute that makes a log record or span a row of the event table it names.
pub const TABLE: &str = "sonde.table";
/// Span attribute a sonde agent sets on the timings it forwards: their batch
/// index is not also a progress report (the agent forwards progress as it came).
pub const FORWARDED: &str = "sonde.forwarded";

/// When `kvs` mark a row of an event table (`sonde.table`), adds it to `r`
/// as sent (the hub types it) and returns true.
fn take_row(r: &mut Report, kvs: &[KeyValue], received: u64) -> bool {
    let Some(any_value::Value::StringValue(table)) = get(kvs, TABLE) else {
        return false;
    };
    let fields = kvs
        .iter()
        .filter(|kv| kv.key != TABLE)
        .filter_map(|kv| {
            let v = match kv.value.as_ref()?.value.as_ref()? {
                any_value::Value::StringValue(s) => Cell::S(s.clone()),
                any_value::Value::BoolValue(b) => Cell::B(*b),
                any_value::Value::IntValue(i) => Cell::I(*i),
                any_value::Value::DoubleValue(d) => Cell::F(*d),
                // Not a value a column holds: kept, so the row is refused with its name.
                other => Cell::S(format!("{other:?}").chars().take(64).collect()),
            };
            Some((kv.key.clone(), v))
        })
        .collect();
    r.add_row_as_sent(table, fields, received);
    true
}

fn get<'a>(kvs: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    kvs.iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn text(v: Option<&any_value::Value>) -> Option<String> {
    match v? {
        any_value::Value::StringValue(s) if !s.trim().is_empty() => Some(s.clone()),
        any_value::Value::IntValue(i) => Some(i.to_string()),
        _ => None,
    }
}

fn attr(v: &AnyValue) -> Option<AttrValue> {
    Some(match v.value.as_ref()? {
        any_value::Value::StringValue(s) => AttrValue::Str(s.clone()),
        any_value::Value::BoolValue(b) => AttrValue::Bool(*b),
        any_value::Value::IntValue(i) => AttrValue::Int(*i),
        any_value::Value::DoubleValue(d) => AttrValue::Float(*d),
        other => AttrValue::Str(format!("{other:?}")),
    })
}

/// Takes a log record named `name` as a heartbeat or node event into `r`.
/// Returns false when it is neither (the caller keeps it as a custom event).
pub fn take_log(r: &mut Report, name: &str, time: u64, l: &LogRecord) -> bool {
    match name {
        HEARTBEAT_EVENT => {
            r.heartbeats.push(time);
            true
        }
        NODE_EVENT => {
            let Some(kind) = text(get(&l.attributes, NODE_EVENT_KIND)) else {
                return false;
            };
            let exit_code = match get(&l.attributes, NODE_EVENT_EXIT_CODE) {
                Some(any_value::Value::IntValue(i)) => i32::try_from(*i).ok(),
                Some(any_value::Value::StringValue(s)) => s.trim().parse().ok(),
                _ => None,
            };
            let body = l.body.as_ref().and_then(|b| text(b.value.as_ref()));
            let reason = text(get(&l.attributes, NODE_EVENT_REASON)).or(body).unwrap_or_default();
            let attributes = l
                .attributes
                .iter()
                .filter(|kv| !kv.key.starts_with("sonde.node_event.") && kv.key != "event.name")
                .filter_map(|kv| Some((kv.key.clone(), attr(kv.value.as_ref()?)?)))
                .collect();
            r.node_events.push(NodeEvent {
                time,
                kind,
                exit_code,
                reason,
                attributes,
            });
            true
        }
        _ => false,
    }
}

/// A `sonde.progress` point: progress named by its `sonde.progress.name`
/// attribute; `None` when it has no name or the value is not a count.
pub fn progress(attributes: &[KeyValue], time: u64, value: f64) -> Option<Progress> {
    let name = text(get(attributes, PROGRESS_NAME))?;
    (value.is_finite() && value >= 0.0).then_some(Progress {
        name,
        time,
        value: value as u64,
    })
}

/// Span attributes that carry the batch index of a timing.
pub const BATCH_ATTRIBUTES: [&str; 2] = ["sonde.batch_idx", "batch_idx"];

/// Converts a traces request: every span becomes a timing, or a row of the
/// event table it names.
pub fn trace_reports(req: &ExportTraceServiceRequest) -> Vec<Report> {
    req.resource_spans
        .iter()
        .map(|rs| {
            let mut r = Report {
                origin: origin(rs.resource.as_ref().map_or(&[][..], |r| &r.attributes)),
                ..Default::default()
            };
            for ss in &rs.scope_spans {
                for s in &ss.spans {
                    if take_row(&mut r, &s.attributes, s.start_time_unix_nano) {
                        continue;
                    }
                    let step = find(&s.attributes, &BATCH_ATTRIBUTES)
                        .and_then(as_int)
                        .filter(|i| *i >= 0)
                        .unwrap_or(-1);
                    r.timings.push(Timing {
                        name: s.name.clone(),
                        start: s.start_time_unix_nano,
                        end: s.end_time_unix_nano.max(s.start_time_unix_nano),
                        step,
                    });
                    // Exact to the span's start, where a batch-index metric is
                    // only as fine as the SDK's metric export interval.
                    // A timing a sonde agent forwarded comes with its progress.
                    let forwarded = find(&s.attributes, &[FORWARDED]).is_some();
                    if step >= 0 && !forwarded {
                        r.progress.push(Progress {
                            name: "batch_idx".into(),
                            time: s.start_time_unix_nano,
                            value: step as u64,
                        });
                    }
                }
            }
            r.progress.sort_by_key(|p| p.time);
            r.progress.dedup_by_key(|p| (p.time, p.value));
            r
        })
        .collect()
}

/// Converts a logs request: every record becomes a custom event.
pub fn log_reports(req: &ExportLogsServiceRequest) -> Vec<Report> {
    req.resource_logs
        .iter()
        .map(|rl| {
            let mut r = Report {
                origin: origin(rl.resource.as_ref().map_or(&[][..], |r| &r.attributes)),
                ..Default::default()
            };
            for sl in &rl.scope_logs {
                for l in &sl.log_records {
                    let time = [l.time_unix_nano, l.observed_time_unix_nano]
                        .into_iter()
                        .find(|t| *t > 0)
                        .unwrap_or_else(now_ns);
                    if take_row(&mut r, &l.attributes, time) {
                        continue;
                    }
                    let name = if !l.event_name.is_empty() {
                        l.event_name.clone()
                    } else {
                        find(&l.attributes, &["event.name"])
                            .and_then(as_text)
                            .unwrap_or_else(|| "log".into())
                    };
                    if take_log(&mut r, &name, time, l) {
                        continue;
                    }
                    r.custom.push(CustomEvent {
                        time,
                        name,
                        body: l.body.as_ref().and_then(as_text).unwrap_or_default(),
                        attributes: attrs(&l.attributes),
                    });
                }
            }
            r
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::otlp::metrics_reports;
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::logs::v1::{ResourceLogs, ScopeLogs};
    use opentelemetry_proto::tonic::metrics::v1::{
        Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, metric, number_data_point,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;

    fn kv(k: &str, v: any_value::Value) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: Some(AnyValue { value: Some(v) }),
        }
    }
    fn s(v: &str) -> any_value::Value {
        any_value::Value::StringValue(v.into())
    }

    fn resource() -> Option<Resource> {
        Some(Resource {
            attributes: vec![
                kv("service.name", s("lr")),
                kv("sonde.role", s("worker")),
                kv("sonde.index", any_value::Value::IntValue(2)),
            ],
            ..Default::default()
        })
    }

    fn record(event_name: &str, time: u64, attrs: Vec<KeyValue>, body: Option<&str>) -> LogRecord {
        LogRecord {
            time_unix_nano: time,
            event_name: event_name.into(),
            attributes: attrs,
            body: body.map(|b| AnyValue { value: Some(s(b)) }),
            ..Default::default()
        }
    }

    #[test]
    fn log_records_become_heartbeats_node_events_or_stay_custom() {
        let req = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: resource(),
                scope_logs: vec![ScopeLogs {
                    log_records: vec![
                        record("sonde.heartbeat", 10, vec![], None),
                        // The name as an attribute works too (SDKs without event_name).
                        record("", 20, vec![kv("event.name", s("sonde.heartbeat"))], None),
                        record(
                            "sonde.node_event",
                            30,
                            vec![
                                kv("sonde.node_event.kind", s("killed")),
                                kv("sonde.node_event.exit_code", any_value::Value::IntValue(-9)),
                                kv("process", s("worker-1")),
                            ],
                            Some("SIGKILL by the launcher"),
                        ),
                        record(
                            "",
                            40,
                            vec![
                                kv("event.name", s("sonde.node_event")),
                                kv("sonde.node_event.kind", s("checkpoint-end")),
                                kv("sonde.node_event.reason", s("dumped")),
                                kv("clock", any_value::Value::IntValue(300)),
                            ],
                            Some("ignored: the reason attribute wins"),
                        ),
                        record("sonde.node_event", 50, vec![], Some("no kind")),
                        record("app.started", 60, vec![], Some("hello")),
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let r = &log_reports(&req)[0];
        assert_eq!((r.origin.role.as_str(), r.origin.index), ("worker", 2));
        assert_eq!(r.heartbeats, vec![10, 20]);
        assert_eq!(
            r.node_events,
            vec![
                NodeEvent {
                    time: 30,
                    kind: "killed".into(),
                    exit_code: Some(-9),
                    reason: "SIGKILL by the launcher".into(),
                    attributes: vec![("process".into(), AttrValue::Str("worker-1".into()))],
                },
                NodeEvent {
                    time: 40,
                    kind: "checkpoint-end".into(),
                    exit_code: None,
                    reason: "dumped".into(),
                    attributes: vec![("clock".into(), AttrValue::Int(300))],
                },
            ]
        );
        let custom: Vec<(&str, u64)> = r.custom.iter().map(|c| (c.name.as_str(), c.time)).collect();
        assert_eq!(custom, vec![("sonde.node_event", 50), ("app.started", 60)]);
    }

    #[test]
    fn named_progress_points_and_the_batch_index_gauge() {
        let point = |t: u64, v: f64, name: Option<&str>| NumberDataPoint {
            time_unix_nano: t,
            value: Some(number_data_point::Value::AsDouble(v)),
            attributes: name.map(|n| vec![kv("sonde.progress.name", s(n))]).unwrap_or_default(),
            ..Default::default()
        };
        let gauge = |name: &str, points: Vec<NumberDataPoint>| Metric {
            name: name.into(),
            data: Some(metric::Data::Gauge(Gauge { data_points: points })),
            ..Default::default()
        };
        let req = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: resource(),
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![
                        gauge(
                            "sonde.progress",
                            vec![
                                point(20, 7.0, Some("clock")),
                                point(10, 6.0, Some("clock")),
                                point(30, 1.0, Some("epoch")),
                                point(40, 3.0, None),
                                point(50, -1.0, Some("clock")),
                            ],
                        ),
                        gauge("sonde.batch_idx", vec![point(15, 12.0, None)]),
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let (reports, skipped) = metrics_reports(&req);
        let got: Vec<(&str, u64, u64)> = reports[0]
            .progress
            .iter()
            .map(|p| (p.name.as_str(), p.time, p.value))
            .collect();
        assert_eq!(
            got,
            vec![
                ("clock", 10, 6),
                ("batch_idx", 15, 12),
                ("clock", 20, 7),
                ("epoch", 30, 1)
            ]
        );
        assert_eq!(skipped, 2, "the unnamed and the negative point");
        assert!(reports[0].points.is_empty(), "progress never doubles as a point");
    }

    #[test]
    fn records_and_spans_marked_with_a_table_are_its_rows_as_sent() {
        use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
        let logs = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: resource(),
                scope_logs: vec![ScopeLogs {
                    log_records: vec![
                        record(
                            "",
                            70,
                            vec![
                                kv("sonde.table", s("steps")),
                                kv("step", any_value::Value::IntValue(4)),
                                kv("loss", any_value::Value::DoubleValue(0.5)),
                            ],
                            None,
                        ),
                        record("app.started", 80, vec![], None),
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let r = &log_reports(&logs)[0];
        assert_eq!(r.custom.len(), 1, "an unmarked record stays a custom event");
        let t = &r.tables[0];
        assert_eq!(
            (t.table.as_str(), t.columns.clone(), t.received.clone()),
            ("steps", vec!["step".to_string(), "loss".to_string()], vec![70])
        );
        assert_eq!(t.rows[0], vec![Cell::I(4), Cell::F(0.5)]);
        let traces = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: resource(),
                scope_spans: vec![ScopeSpans {
                    spans: vec![Span {
                        name: "serving.request".into(),
                        start_time_unix_nano: 5,
                        end_time_unix_nano: 9,
                        attributes: vec![
                            kv("sonde.table", s("requests")),
                            kv("request_id", s("18446744073709551615")),
                        ],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let r = &trace_reports(&traces)[0];
        assert!(r.timings.is_empty(), "a row, not a timing");
        assert_eq!(r.tables[0].rows[0], vec![Cell::S("18446744073709551615".into())]);
    }
}
