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
//! | serving requests / actions | log records `serving.request` / `serving.action`, every field an attribute |
//! | MPI samples | log records `sonde.mpi.sample` |
//!
//! Limits: whatever the export queue holds (`export.queue_capacity`
//! requests, or the spool's bytes); past it the oldest request is dropped and
//! counted in `/api/status` (`export.stats`). Sampling never waits on it.

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
use crate::ingest::otlp::events::{FORWARDED, MPI_SAMPLE};
use crate::ingest::{MpiSample, Origin, Report, ReportTap};
use crate::ingest::{ServedAction, ServedRequest};
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

fn request_attributes(q: &ServedRequest) -> Vec<KeyValue> {
    vec![
        int("serving.request.id", q.request_id),
        int("serving.user.id", q.user_id),
        int("serving.model.id", q.model_id),
        kv("serving.slo_factor", any_value::Value::DoubleValue(q.slo_factor)),
        int("serving.arrival", q.arrival),
        int("serving.departure", q.departure),
        int("serving.deadline", q.deadline),
        int("serving.result", q.result),
        int("serving.copies.arrival", q.arrival_copies),
        int("serving.copies.departure", q.departure_copies),
        int("serving.action.id", q.action_id),
        int("serving.client.sent", q.client_sent),
        int("serving.client.received", q.client_received),
    ]
}

fn action_attributes(a: &ServedAction) -> Vec<KeyValue> {
    vec![
        int("serving.action.id", a.action_id),
        int("serving.action.type", a.action_type),
        int("serving.action.status", a.status),
        int("serving.worker.id", a.worker_id),
        int("serving.gpu.id", a.gpu_id),
        int("serving.model.id", a.model_id),
        int("serving.batch_size", a.batch_size),
        int("serving.expected.duration", a.expected_exec_duration),
        int("serving.worker.duration", a.worker_exec_duration),
        int("serving.sent", a.sent),
        int("serving.expected.complete", a.expected_exec_complete),
        int("serving.worker.complete", a.worker_exec_complete),
        int("serving.gpu_clock.expected", a.expected_gpu_clock),
        int("serving.gpu_clock.before", a.gpu_clock_before),
        int("serving.gpu_clock.after", a.gpu_clock_after),
        int("serving.worker.copy_output_complete", a.copy_output_complete),
        int("serving.worker.action_received", a.action_received),
        int("serving.worker.result_sent", a.result_sent),
        int("serving.result_received", a.result_received),
        int("serving.result_processed", a.result_processed),
        int("serving.requests_queued", a.requests_queued),
        int("serving.copies_loaded", a.copies_loaded),
        int("serving.requests_in_time", a.requests_in_time),
    ]
}

fn mpi_attributes(m: &MpiSample) -> Vec<KeyValue> {
    vec![
        int("sonde.mpi.thread", m.thread),
        int("sonde.mpi.state", m.state),
        text("sonde.mpi.function", &m.function),
        text("sonde.mpi.callsite", &m.callsite),
        int("sonde.mpi.count", m.count),
        int("sonde.mpi.period_ns", m.period_ns),
    ]
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
    for q in &r.requests {
        out.push(record("serving.request", q.departure, "", request_attributes(q)));
    }
    for a in &r.actions {
        out.push(record("serving.action", a.result_received, "", action_attributes(a)));
    }
    for m in &r.mpi_samples {
        out.push(record(MPI_SAMPLE, m.time, "", mpi_attributes(m)));
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
    fn observe(&self, reports: &[Report]) {
        let rows: usize = reports.iter().map(Report::rows).sum();
        if rows == 0 {
            return;
        }
        let e = encode(reports, &self.node);
        let mut ok = true;
        if let Some((m, n)) = e.metrics {
            ok &= self
                .pipeline
                .forward(Signal::Metrics, Bytes::from(m.encode_to_vec()), n);
        }
        if let Some((t, n)) = e.traces {
            ok &= self.pipeline.forward(Signal::Traces, Bytes::from(t.encode_to_vec()), n);
        }
        if let Some((l, n)) = e.logs {
            ok &= self.pipeline.forward(Signal::Logs, Bytes::from(l.encode_to_vec()), n);
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
            requests: vec![ServedRequest {
                request_id: 11,
                user_id: 2,
                model_id: 3,
                slo_factor: 1.5,
                arrival: 9_000,
                departure: 9_500,
                deadline: 10_000,
                result: 0,
                arrival_copies: 1,
                departure_copies: 1,
                action_id: 4,
                client_sent: 8_900,
                client_received: 9_600,
            }],
            actions: vec![ServedAction {
                action_id: 4,
                action_type: 2,
                status: 0,
                worker_id: 1,
                gpu_id: 0,
                model_id: 3,
                batch_size: 4,
                expected_exec_duration: 300,
                worker_exec_duration: 310,
                sent: 9_100,
                expected_exec_complete: 9_400,
                worker_exec_complete: 9_410,
                expected_gpu_clock: 1_380,
                gpu_clock_before: 1_380,
                gpu_clock_after: 1_380,
                copy_output_complete: 9_420,
                action_received: 9_110,
                result_sent: 9_430,
                result_received: 9_440,
                result_processed: 9_450,
                requests_queued: 2,
                copies_loaded: 1,
                requests_in_time: 4,
            }],
            mpi_samples: vec![MpiSample {
                thread: 0,
                time: 11_000,
                state: 2,
                function: "MPI_Allreduce".into(),
                callsite: "main+0x3a".into(),
                count: 5,
                period_ns: 10_000_000,
            }],
        }
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
            out.requests.extend(r.requests);
            out.actions.extend(r.actions);
            out.mpi_samples.extend(r.mpi_samples);
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
        assert_eq!(sorted(got.points), sorted(want.points));
        assert_eq!(got.heartbeats, want.heartbeats);
        assert_eq!(got.node_events, want.node_events);
        assert_eq!(got.custom, want.custom);
        assert_eq!(got.requests, want.requests);
        assert_eq!(got.actions, want.actions);
        assert_eq!(got.mpi_samples, want.mpi_samples);
    }

    #[test]
    fn counts_are_of_the_items_sent() {
        let e = encode(&[full_report()], "n");
        assert_eq!(e.metrics.as_ref().unwrap().1, 5, "2 progress + 3 points");
        assert_eq!(e.traces.as_ref().unwrap().1, 2);
        assert_eq!(e.logs.as_ref().unwrap().1, 6);
        assert!(encode(&[Report::default()], "n").metrics.is_none());
    }
}
