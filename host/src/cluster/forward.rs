//! An agent's forwarder: what its jobs report, whatever way they reported it
//! (OTLP, `POST /api/ingest`, the in-process API, the MPI probe), goes on to
//! the master as OTLP, so the master's plugins see every node's jobs.
//!
//! ```text
//!  IngestHub ──(every accepted report)──► Forwarder::observe
//!     encode(): Report ─► one OTLP request per signal (metrics, traces, logs),
//!               a resource per origin; node = the agent's host.name if unset
//!     ─► PipelineHandle::forward ─► the export queue (bounded, retried,
//!        spooled to disk when `export.spool_max_bytes` is set) ─► master
//! ```
//! The encoding is the exact inverse of the OTLP receiver's mapping
//! (`ingest::otlp`), so the master builds the same `Report` the agent did:
//!
//! | Report | OTLP |
//! |---|---|
//! | origin | resource: `sonde.job`, `host.name`, `sonde.role`, `sonde.index`, `sonde.rank`, `sonde.local_rank`, extra attributes as strings |
//! | progress `batch_idx` / other names | gauge `sonde.batch_idx` / gauge `sonde.progress` with `sonde.progress.name` |
//! | points | gauge, or monotonic cumulative sum for counters, with the series' attributes |
//! | timings | spans, step in `sonde.batch_idx`, marked `sonde.forwarded` (no implied progress) |
//! | heartbeats, node events | log records `sonde.heartbeat`, `sonde.node_event` |
//! | custom events | log records with the event's name, body and attributes |
//! | rows of event tables | log records `sonde.table` with the attribute `sonde.table` = the table's name, every field an attribute (a u64 above an int's range as its decimal string), at the time the row was received |
//!
//! Table rows cross whatever the tables are: typed ones by their columns,
//! and rows of a table no plugin on the agent declares as they were sent.
//! The master types them by its own plugins' declarations.
//!
//! Limits: whatever the export queue holds (`export.queue_capacity`
//! requests, or the spool's bytes). A source that can refuse (the JSON
//! ingest, the OTLP receivers) asks first (`room`) and answers 503 /
//! UNAVAILABLE while it is full, so the job keeps its report; what still
//! finds it full (the in-process API, a race) is counted in
//! `rows_not_queued`. Sampling never waits on it.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, metric,
    number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;

use crate::export::client::Signal;
use crate::export::otlp::key_values;
use crate::export::sequence::RequestId;
use crate::ingest::otlp::events::{FORWARDED, TABLE};
use crate::ingest::tables::{Cell, TableRows};
use crate::ingest::{Origin, Report, ReportTap};
use crate::model::SeriesKind;
use crate::pipeline::PipelineHandle;

/// The three requests one set of reports becomes; `None` where it has nothing of that signal.
#[derive(Debug, Default)]
pub struct Encoded {
    pub metrics: Option<(ExportMetricsServiceRequest, usize)>,
    pub traces: Option<(ExportTraceServiceRequest, usize)>,
    pub logs: Option<(ExportLogsServiceRequest, usize)>,
}

fn scope() -> Option<InstrumentationScope> {
    Some(InstrumentationScope {
        name: "sonde.forward".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    })
}

fn kv(key: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(v) }),
    }
}

fn int(key: &str, v: impl TryInto<i64>) -> KeyValue {
    kv(key, any_value::Value::IntValue(v.try_into().unwrap_or(i64::MAX)))
}

fn text(key: &str, v: &str) -> KeyValue {
    kv(key, any_value::Value::StringValue(v.to_string()))
}

fn resource(o: &Origin, node: &str) -> Option<Resource> {
    let mut a = vec![
        text("sonde.job", &o.job),
        text("host.name", if o.node.is_empty() { node } else { &o.node }),
    ];
    if !o.role.is_empty() {
        a.push(text("sonde.role", &o.role));
    }
    for (k, v) in [
        ("sonde.index", o.index),
        ("sonde.rank", o.rank),
        ("sonde.local_rank", o.local_rank),
    ] {
        if v >= 0 {
            a.push(int(k, v));
        }
    }
    for (k, v) in &o.attributes {
        if !a.iter().any(|x| x.key == *k) {
            a.push(text(k, v));
        }
    }
    Some(Resource {
        attributes: a,
        ..Default::default()
    })
}

fn gauge_point(time: u64, value: number_data_point::Value, attributes: Vec<KeyValue>) -> NumberDataPoint {
    NumberDataPoint {
        attributes,
        time_unix_nano: time,
        value: Some(value),
        ..Default::default()
    }
}

fn metrics_of(r: &Report) -> (Vec<Metric>, usize) {
    let mut out = Vec::new();
    let mut n = 0;
    let batch: Vec<NumberDataPoint> = r
        .progress
        .iter()
        .filter(|p| p.name == "batch_idx")
        .map(|p| {
            gauge_point(
                p.time,
                number_data_point::Value::AsInt(p.value.min(i64::MAX as u64) as i64),
                vec![],
            )
        })
        .collect();
    let named: Vec<NumberDataPoint> = r
        .progress
        .iter()
        .filter(|p| p.name != "batch_idx")
        .map(|p| {
            gauge_point(
                p.time,
                number_data_point::Value::AsDouble(p.value as f64),
                vec![text("sonde.progress.name", &p.name)],
            )
        })
        .collect();
    for (name, points) in [("sonde.batch_idx", batch), ("sonde.progress", named)] {
        if !points.is_empty() {
            n += points.len();
            out.push(Metric {
                name: name.into(),
                data: Some(metric::Data::Gauge(Gauge { data_points: points })),
                ..Default::default()
            });
        }
    }
    let mut per_series: Vec<Vec<NumberDataPoint>> = vec![Vec::new(); r.series.len()];
    for p in &r.points {
        if let Some(v) = per_series.get_mut(p.series as usize) {
            v.push(gauge_point(p.time, number_data_point::Value::AsDouble(p.value), vec![]));
        }
    }
    for (s, mut points) in r.series.iter().zip(per_series) {
        if points.is_empty() {
            continue;
        }
        let attrs = key_values(&s.attributes);
        for p in &mut points {
            p.attributes.clone_from(&attrs);
        }
        n += points.len();
        let data = match s.kind {
            SeriesKind::Gauge => metric::Data::Gauge(Gauge { data_points: points }),
            SeriesKind::Counter => metric::Data::Sum(Sum {
                data_points: points,
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
                is_monotonic: true,
            }),
        };
        out.push(Metric {
            name: s.metric.clone(),
            unit: s.unit.clone(),
            data: Some(data),
            ..Default::default()
        });
    }
    (out, n)
}

fn spans_of(r: &Report, ids: &mut u64) -> Vec<Span> {
    let trace: [u8; 16] = rand::random();
    r.timings
        .iter()
        .map(|t| {
            *ids += 1;
            let mut attributes = vec![kv(FORWARDED, any_value::Value::BoolValue(true))];
            if t.step >= 0 {
                attributes.push(int("sonde.batch_idx", t.step));
            }
            Span {
                trace_id: trace.to_vec(),
                span_id: ids.to_be_bytes().to_vec(),
                name: t.name.clone(),
                start_time_unix_nano: t.start,
                end_time_unix_nano: t.end,
                attributes,
                ..Default::default()
            }
        })
        .collect()
}

fn record(name: &str, time: u64, body: &str, attributes: Vec<KeyValue>) -> LogRecord {
    LogRecord {
        time_unix_nano: time,
        observed_time_unix_nano: time,
        event_name: name.into(),
        body: (!body.is_empty()).then(|| AnyValue {
            value: Some(any_value::Value::StringValue(body.into())),
        }),
        attributes,
        ..Default::default()
    }
}

/// A cell as an OTLP value: a u64 past an int's range as its decimal text
/// (the receiver's integer columns take both).
fn cell_value(c: &Cell) -> any_value::Value {
    match c {
        Cell::U(v) => match i64::try_from(*v) {
            Ok(i) => any_value::Value::IntValue(i),
            Err(_) => any_value::Value::StringValue(v.to_string()),
        },
        Cell::I(v) => any_value::Value::IntValue(*v),
        Cell::F(v) => any_value::Value::DoubleValue(*v),
        Cell::B(v) => any_value::Value::BoolValue(*v),
        Cell::S(v) => any_value::Value::StringValue(v.clone()),
    }
}

fn table_records(t: &TableRows, out: &mut Vec<LogRecord>) {
    for (row, received) in t.rows.iter().zip(&t.received) {
        let mut a = Vec::with_capacity(row.len() + 1);
        a.push(text(TABLE, &t.table));
        a.extend(t.columns.iter().zip(row).map(|(c, v)| kv(c, cell_value(v))));
        out.push(record(TABLE, *received, "", a));
    }
}

fn logs_of(r: &Report) -> Vec<LogRecord> {
    let mut out = Vec::new();
    out.extend(r.heartbeats.iter().map(|t| record("sonde.heartbeat", *t, "", vec![])));
    for e in &r.node_events {
        let mut a = vec![
            text("sonde.node_event.kind", &e.kind),
            text("sonde.node_event.reason", &e.reason),
        ];
        if let Some(c) = e.exit_code {
            a.push(int("sonde.node_event.exit_code", c));
        }
        a.extend(key_values(&e.attributes));
        out.push(record("sonde.node_event", e.time, "", a));
    }
    for e in &r.custom {
        out.push(record(&e.name, e.time, &e.body, key_values(&e.attributes)));
    }
    for t in &r.tables {
        table_records(t, &mut out);
    }
    out
}

/// Encodes reports as OTLP; `node` names origins that did not say where they run.
pub fn encode(reports: &[Report], node: &str) -> Encoded {
    let mut e = Encoded::default();
    let (mut rm, mut rs, mut rl) = (Vec::new(), Vec::new(), Vec::new());
    let (mut points, mut spans, mut records) = (0, 0, 0);
    let mut ids = 0u64;
    for r in reports {
        let (metrics, n) = metrics_of(r);
        if !metrics.is_empty() {
            points += n;
            rm.push(ResourceMetrics {
                resource: resource(&r.origin, node),
                scope_metrics: vec![ScopeMetrics {
                    scope: scope(),
                    metrics,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            });
        }
        let s = spans_of(r, &mut ids);
        if !s.is_empty() {
            spans += s.len();
            rs.push(ResourceSpans {
                resource: resource(&r.origin, node),
                scope_spans: vec![ScopeSpans {
                    scope: scope(),
                    spans: s,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            });
        }
        let l = logs_of(r);
        if !l.is_empty() {
            records += l.len();
            rl.push(ResourceLogs {
                resource: resource(&r.origin, node),
                scope_logs: vec![ScopeLogs {
                    scope: scope(),
                    log_records: l,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            });
        }
    }
    if !rm.is_empty() {
        e.metrics = Some((ExportMetricsServiceRequest { resource_metrics: rm }, points));
    }
    if !rs.is_empty() {
        e.traces = Some((ExportTraceServiceRequest { resource_spans: rs }, spans));
    }
    if !rl.is_empty() {
        e.logs = Some((ExportLogsServiceRequest { resource_logs: rl }, records));
    }
    e
}

/// The identity one signal (`k`: 0 metrics, 1 traces, 2 logs) of a job's
/// request is forwarded under: the job's producer, its number times four
/// plus `k` (one request becomes up to three). The same request gets the
/// same ones however often it is taken. None, so this agent's own numbers,
/// for a request without an identity or a number past the range.
fn forwarded_id(id: Option<&RequestId>, k: u64) -> Option<RequestId> {
    let id = id?;
    Some(RequestId {
        producer: id.producer.clone(),
        seq: id.seq.checked_mul(4)?.checked_add(k)?,
    })
}

/// The agent's tap on its hub: every accepted report goes to the master.
pub struct Forwarder {
    pipeline: PipelineHandle,
    node: String,
    /// Rows handed to the export queue, and rows it would not take (export stopping).
    pub rows_forwarded: AtomicU64,
    pub rows_not_queued: AtomicU64,
}

impl Forwarder {
    pub fn new(pipeline: PipelineHandle, node: String) -> Self {
        Forwarder {
            pipeline,
            node,
            rows_forwarded: AtomicU64::new(0),
            rows_not_queued: AtomicU64::new(0),
        }
    }
}

impl ReportTap for Forwarder {
    fn room(&self) -> Result<(), String> {
        self.pipeline
            .room_to_forward()
            .map_err(|r| format!("this agent cannot forward now: {r}"))
    }

    fn observe(&self, reports: &[Report]) {
        self.observe_request(reports, None);
    }

    /// A job's request with its identity is forwarded under identities
    /// derived from it ([`forwarded_id`]): this agent, killed after it had
    /// forwarded a body but before it answered, takes the body again when
    /// the job posts it again, and the master then drops the repeat.
    fn observe_request(&self, reports: &[Report], id: Option<&RequestId>) {
        let rows: usize = reports.iter().map(Report::rows).sum();
        if rows == 0 {
            return;
        }
        let e = encode(reports, &self.node);
        let mut ok = true;
        if let Some((m, n)) = e.metrics {
            ok &= self
                .pipeline
                .forward(Signal::Metrics, Bytes::from(m.encode_to_vec()), n, forwarded_id(id, 0))
                .is_ok();
        }
        if let Some((t, n)) = e.traces {
            ok &= self
                .pipeline
                .forward(Signal::Traces, Bytes::from(t.encode_to_vec()), n, forwarded_id(id, 1))
                .is_ok();
        }
        if let Some((l, n)) = e.logs {
            ok &= self
                .pipeline
                .forward(Signal::Logs, Bytes::from(l.encode_to_vec()), n, forwarded_id(id, 2))
                .is_ok();
        }
        let counter = if ok {
            &self.rows_forwarded
        } else {
            &self.rows_not_queued
        };
        counter.fetch_add(rows as u64, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::otlp::{log_reports, metrics_reports, trace_reports};
    use crate::ingest::{CustomEvent, ForeignPoint, ForeignSeries, NodeEvent, Progress, Timing};
    use crate::model::AttrValue;

    fn full_report() -> Report {
        Report {
            origin: Origin {
                job: "train-1".into(),
                node: String::new(),
                role: "worker".into(),
                index: 3,
                rank: 1,
                local_rank: 0,
                attributes: Vec::new(),
            },
            progress: vec![
                Progress {
                    name: "batch_idx".into(),
                    time: 1_000,
                    value: 7,
                },
                Progress {
                    name: "epoch".into(),
                    time: 1_001,
                    value: 2,
                },
            ],
            timings: vec![
                Timing {
                    name: "forward".into(),
                    start: 2_000,
                    end: 3_000,
                    step: 7,
                },
                Timing {
                    name: "sync".into(),
                    start: 3_000,
                    end: 3_500,
                    step: -1,
                },
            ],
            series: vec![
                ForeignSeries {
                    metric: "loss".into(),
                    unit: "1".into(),
                    kind: SeriesKind::Gauge,
                    attributes: vec![("split".into(), AttrValue::Str("train".into()))],
                },
                ForeignSeries {
                    metric: "samples".into(),
                    unit: "{sample}".into(),
                    kind: SeriesKind::Counter,
                    attributes: vec![],
                },
            ],
            points: vec![
                ForeignPoint {
                    series: 0,
                    time: 4_000,
                    value: 0.25,
                },
                ForeignPoint {
                    series: 1,
                    time: 4_000,
                    value: 640.0,
                },
                ForeignPoint {
                    series: 0,
                    time: 5_000,
                    value: 0.125,
                },
            ],
            heartbeats: vec![6_000],
            node_events: vec![NodeEvent {
                time: 7_000,
                kind: "exited".into(),
                exit_code: Some(137),
                reason: "OOM killed".into(),
                attributes: vec![("pod".into(), AttrValue::Str("w-1".into()))],
            }],
            custom: vec![CustomEvent {
                time: 8_000,
                name: "checkpoint".into(),
                body: "saved".into(),
                attributes: vec![("step".into(), AttrValue::Int(7))],
            }],
            tables: tables(),
        }
    }

    /// A typed table (declared on the agent) and one as sent (declared only
    /// on the master), with values at the edges of their types.
    fn tables() -> Vec<TableRows> {
        let mut decl = tables_decl();
        decl.name = "requests".into();
        let on_agent = crate::ingest::tables::tests::registry_with(vec![decl]);
        let mut r = Report::default();
        for (table, id) in [("requests", u64::MAX), ("requests", 1), ("samples", u64::MAX)] {
            r.add_row_as_sent(
                table,
                vec![
                    ("id".into(), Cell::S(id.to_string())),
                    ("result".into(), Cell::I(-4)),
                    ("slo".into(), Cell::F(1.5)),
                    ("site".into(), Cell::S("main+0x3a".into())),
                    ("ok".into(), Cell::B(true)),
                    ("at_ns".into(), Cell::U(9_000)),
                ],
                9_500,
            );
        }
        let refused = crate::ingest::tables::type_tables(&mut r.tables, &on_agent, true, 4096);
        assert!(refused.is_empty(), "{refused:?}");
        assert!(r.tables[0].decl.is_some() && r.tables[1].decl.is_none());
        r.tables
    }

    /// Decodes what `encode` made with the OTLP receiver's own mapping.
    fn decode(e: Encoded) -> Report {
        let mut out = Report::default();
        let (m, _) = metrics_reports(&e.metrics.unwrap().0);
        let t = trace_reports(&e.traces.unwrap().0);
        let l = log_reports(&e.logs.unwrap().0);
        for r in m.into_iter().chain(t).chain(l) {
            out.origin = r.origin;
            out.progress.extend(r.progress);
            out.timings.extend(r.timings);
            let base = out.series.len() as u32;
            out.series.extend(r.series);
            out.points.extend(r.points.into_iter().map(|p| ForeignPoint {
                series: p.series + base,
                ..p
            }));
            out.heartbeats.extend(r.heartbeats);
            out.node_events.extend(r.node_events);
            out.custom.extend(r.custom);
            out.tables.extend(r.tables);
        }
        out
    }

    #[test]
    fn the_master_decodes_exactly_what_the_agent_had() {
        let sent = full_report();
        let got = decode(encode(std::slice::from_ref(&sent), "node-7"));
        let mut want = sent.clone();
        want.origin.node = "node-7".into();
        assert_eq!(got.origin, want.origin);
        assert_eq!(got.progress, want.progress);
        assert_eq!(got.timings, want.timings);
        assert_eq!(got.series, want.series);
        // Points come back grouped by series, as OTLP carries them.
        let sorted = |mut v: Vec<ForeignPoint>| {
            v.sort_by_key(|p| (p.series, p.time));
            v
        };
        assert_eq!(sorted(got.points.clone()), sorted(want.points.clone()));
        assert_eq!(got.heartbeats, want.heartbeats);
        assert_eq!(got.node_events, want.node_events);
        assert_eq!(got.custom, want.custom);
        // The master types the rows by its own declarations (here: both tables).
        let on_master = crate::ingest::tables::tests::registry_with(
            ["requests", "samples"]
                .into_iter()
                .map(|name| {
                    let mut d = tables_decl();
                    d.name = name.into();
                    d
                })
                .collect(),
        );
        let (mut got, mut want) = (got, want);
        for r in [&mut got, &mut want] {
            let refused = crate::ingest::tables::type_tables(&mut r.tables, &on_master, false, 4096);
            assert!(refused.is_empty(), "{refused:?}");
        }
        let rows = |r: &Report| -> Vec<(String, Vec<Cell>, u64)> {
            r.tables
                .iter()
                .flat_map(|t| {
                    t.rows
                        .iter()
                        .zip(&t.received)
                        .map(|(c, at)| (t.table.clone(), c.clone(), *at))
                })
                .collect()
        };
        assert_eq!(rows(&got), rows(&want));
        assert_eq!(
            rows(&got)[0].1[0],
            Cell::U(u64::MAX),
            "a u64 past an int's range survives"
        );
    }

    fn tables_decl() -> crate::plugin::bindings::types::TableDecl {
        use crate::plugin::bindings::types::{ColumnDecl, ColumnDefault as D, ColumnType as T, TableDecl};
        let col = |name: &str, type_| ColumnDecl {
            name: name.into(),
            type_,
            default: D::Zero,
            labels: vec![],
        };
        TableDecl {
            name: String::new(),
            description: String::new(),
            columns: vec![
                col("id", T::U64),
                col("result", T::S32),
                col("slo", T::F64),
                col("site", T::String),
                col("ok", T::Boolean),
                col("at_ns", T::Timestamp),
            ],
        }
    }

    #[test]
    fn counts_are_of_the_items_sent() {
        let e = encode(&[full_report()], "n");
        assert_eq!(e.metrics.as_ref().unwrap().1, 5, "2 progress + 3 points");
        assert_eq!(e.traces.as_ref().unwrap().1, 2);
        assert_eq!(
            e.logs.as_ref().unwrap().1,
            6,
            "heartbeat, node event, custom, 3 table rows"
        );
        assert!(encode(&[Report::default()], "n").metrics.is_none());
    }
}

#[cfg(test)]
mod forwarded_id_tests {
    use super::*;

    #[test]
    fn a_request_is_forwarded_under_the_same_identities_each_time_one_per_signal() {
        let job = RequestId {
            producer: "job-7-4242".into(),
            seq: 9,
        };
        let ids: Vec<_> = (0..3).map(|k| forwarded_id(Some(&job), k).unwrap()).collect();
        assert_eq!(ids.iter().map(|i| i.seq).collect::<Vec<_>>(), [36, 37, 38]);
        assert!(ids.iter().all(|i| i.producer == job.producer));
        // Taken again (a repost after a restart): the same identities.
        assert_eq!(forwarded_id(Some(&job), 1), Some(ids[1].clone()));
        // The next request's never meet this one's.
        let next = RequestId { seq: 10, ..job.clone() };
        assert!(forwarded_id(Some(&next), 0).unwrap().seq > ids[2].seq);
        // Without an identity, or past the range: the agent's own numbers.
        assert_eq!(forwarded_id(None, 0), None);
        let huge = RequestId {
            seq: u64::MAX / 2,
            ..job
        };
        assert_eq!(forwarded_id(Some(&huge), 0), None);
    }
}
