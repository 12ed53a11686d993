//! Encoding into OTLP export requests (the generated `opentelemetry-proto` types).
//!
//! Metrics: one `ResourceMetrics`; one `ScopeMetrics` per [`Scope`] (by value,
//! in order of first appearance); within a scope one `Metric` per
//! (name, unit, kind), in order of first appearance; one `NumberDataPoint` per
//! [`Point`], in submission order, value as `as_double`, the series' attributes,
//! `time_unix_nano` = the point's time. Counters and up-down counters are
//! cumulative `Sum`s (`is_monotonic` for counters) with `start_time_unix_nano`
//! = the series' start time; gauges are `Gauge`s. NaN values go out as NaN.
//!
//! Logs: one `ResourceLogs`, one `ScopeLogs` per scope, one `LogRecord` per
//! record with the OTel severity number and text, a string body, and the event
//! name both as the `event_name` field and the `event.name` attribute.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord as OtlpLogRecord, ResourceLogs, ScopeLogs, SeverityNumber};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, metric,
    number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use prost::Message;
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint};
use rustc_hash::FxHasher;

use crate::model::{AttrValue, LogBatch, LogRecord, MetricBatch, MetricKind, MetricSeries, Point, Scope, Severity};

/// An attribute value as an OTLP `AnyValue`.
pub fn any_value(v: &AttrValue) -> AnyValue {
    let value = match v {
        AttrValue::Str(s) => any_value::Value::StringValue(s.clone()),
        AttrValue::Int(i) => any_value::Value::IntValue(*i),
        AttrValue::Float(f) => any_value::Value::DoubleValue(*f),
        AttrValue::Bool(b) => any_value::Value::BoolValue(*b),
    };
    AnyValue { value: Some(value) }
}

/// One attribute as an OTLP `KeyValue`.
pub fn key_value(key: &str, v: &AttrValue) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(any_value(v)),
    }
}

/// Attributes as OTLP `KeyValue`s, order kept.
pub fn key_values(attrs: &[(String, AttrValue)]) -> Vec<KeyValue> {
    attrs.iter().map(|(k, v)| key_value(k, v)).collect()
}

/// The OTLP `Resource` for a list of resource attributes.
pub fn resource(attrs: &[(String, AttrValue)]) -> Resource {
    Resource {
        attributes: key_values(attrs),
        dropped_attributes_count: 0,
        entity_refs: Vec::new(),
    }
}

fn scope_proto(s: &Scope) -> InstrumentationScope {
    InstrumentationScope {
        name: s.name.clone(),
        version: s.version.clone(),
        attributes: Vec::new(),
        dropped_attributes_count: 0,
    }
}

/// Finds or adds `scope` in a short list (pointer equality first, then by value).
fn scope_slot<'a>(scopes: &mut Vec<&'a Scope>, scope: &'a Scope) -> usize {
    if let Some(i) = scopes.iter().position(|s| std::ptr::eq(*s, scope) || *s == scope) {
        return i;
    }
    scopes.push(scope);
    scopes.len() - 1
}

/// Encodes metric batches into one request (see the module doc for the layout).
pub fn encode_metrics(resource: &[(String, AttrValue)], batches: &[MetricBatch]) -> ExportMetricsServiceRequest {
    let parts: Vec<(&Scope, &[Point])> = batches.iter().map(|b| (&*b.scope, b.points.as_slice())).collect();
    encode_metric_parts(self::resource(resource), &parts)
}

struct MetricAcc<'a> {
    scope: usize,
    series: &'a MetricSeries,
    points: Vec<NumberDataPoint>,
}

/// Encodes (scope, points) slices into one request; the pipeline uses this to
/// split batches across requests without copying points.
pub fn encode_metric_parts(resource: Resource, parts: &[(&Scope, &[Point])]) -> ExportMetricsServiceRequest {
    let mut scopes: Vec<&Scope> = Vec::new();
    let mut metrics: Vec<MetricAcc<'_>> = Vec::new();
    // (scope, name, unit, kind) -> index into `metrics`
    let mut by_key: HashMap<(usize, &str, &str, MetricKind), usize> = HashMap::new();
    // (scope, series pointer) -> (index into `metrics`, converted attributes)
    let mut by_series: HashMap<(usize, usize), (usize, Vec<KeyValue>)> = HashMap::new();

    for (scope, points) in parts {
        let si = scope_slot(&mut scopes, scope);
        for p in points.iter() {
            let series: &MetricSeries = &p.series;
            let (mi, attrs) = by_series
                .entry((si, series as *const MetricSeries as usize))
                .or_insert_with(|| {
                    let key = (si, series.name.as_str(), series.unit.as_str(), series.kind);
                    let mi = *by_key.entry(key).or_insert_with(|| {
                        metrics.push(MetricAcc {
                            scope: si,
                            series,
                            points: Vec::new(),
                        });
                        metrics.len() - 1
                    });
                    (mi, key_values(&series.attributes))
                });
            let start = match series.kind {
                MetricKind::Gauge => 0,
                MetricKind::Counter | MetricKind::UpDownCounter => series.start_time_ns,
            };
            metrics[*mi].points.push(NumberDataPoint {
                attributes: attrs.clone(),
                start_time_unix_nano: start,
                time_unix_nano: p.time_ns,
                exemplars: Vec::new(),
                flags: 0,
                value: Some(number_data_point::Value::AsDouble(p.value)),
            });
        }
    }

    let mut scope_metrics: Vec<ScopeMetrics> = scopes
        .iter()
        .map(|s| ScopeMetrics {
            scope: Some(scope_proto(s)),
            metrics: Vec::new(),
            schema_url: String::new(),
        })
        .collect();
    for m in metrics {
        let data = match m.series.kind {
            MetricKind::Gauge => metric::Data::Gauge(Gauge { data_points: m.points }),
            kind => metric::Data::Sum(Sum {
                data_points: m.points,
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
                is_monotonic: kind == MetricKind::Counter,
            }),
        };
        scope_metrics[m.scope].metrics.push(Metric {
            name: m.series.name.clone(),
            description: m.series.description.clone(),
            unit: m.series.unit.clone(),
            metadata: Vec::new(),
            data: Some(data),
        });
    }
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(resource),
            scope_metrics,
            schema_url: String::new(),
        }],
    }
}

// ------------------------------------------------------------ direct encoding

/// Per-series state of the direct encoder.
struct SeriesSlot {
    metric: usize,
    /// The series' attributes, already encoded as NumberDataPoint field 7 entries.
    attrs: Vec<u8>,
    /// Start time written on each point (0: omitted).
    start: u64,
}

struct MetricBytes<'a> {
    scope: usize,
    series: &'a MetricSeries,
    /// (series slot, point)
    points: Vec<(usize, &'a Point)>,
    /// Encoded length of all `data_points` entries.
    points_len: usize,
}

fn len_field(tag_len: usize, body: usize) -> usize {
    tag_len + encoded_len_varint(body as u64) + body
}

fn str_field_len(s: &str) -> usize {
    if s.is_empty() { 0 } else { len_field(1, s.len()) }
}

fn put_str(tag: u32, s: &str, buf: &mut Vec<u8>) {
    if !s.is_empty() {
        encode_key(tag, WireType::LengthDelimited, buf);
        encode_varint(s.len() as u64, buf);
        buf.extend_from_slice(s.as_bytes());
    }
}

fn put_len(tag: u32, len: usize, buf: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(len as u64, buf);
}

fn point_len(slot: &SeriesSlot, p: &Point) -> usize {
    slot.attrs.len() + if slot.start != 0 { 9 } else { 0 } + if p.time_ns != 0 { 9 } else { 0 } + 9
}

/// The protobuf bytes of `encode_metric_parts(resource, parts)`, written
/// directly without building the message tree (the pipeline's hot path:
/// each series' attributes are encoded once per request, and each point is a
/// memcpy of them plus three fixed-width fields). Decodes to exactly the
/// message [`encode_metric_parts`] builds.
pub fn encode_metric_parts_to_bytes(resource: &Resource, parts: &[(&Scope, &[Point])]) -> Vec<u8> {
    let mut scopes: Vec<&Scope> = Vec::new();
    let mut metrics: Vec<MetricBytes<'_>> = Vec::new();
    let mut slots: Vec<SeriesSlot> = Vec::new();
    let mut by_key: HashMap<(usize, &str, &str, MetricKind), usize> = HashMap::new();
    // FxHash: keys are (scope index, series pointer), hashed once per point.
    let mut by_series: HashMap<(usize, usize), usize, BuildHasherDefault<FxHasher>> = HashMap::default();
    let mut last: Option<((usize, usize), usize)> = None;

    for (scope, points) in parts {
        let si = scope_slot(&mut scopes, scope);
        for p in points.iter() {
            let series: &MetricSeries = &p.series;
            let key = (si, series as *const MetricSeries as usize);
            let slot = match last {
                Some((k, slot)) if k == key => slot,
                _ => {
                    let slot = *by_series.entry(key).or_insert_with(|| {
                        let mkey = (si, series.name.as_str(), series.unit.as_str(), series.kind);
                        let metric = *by_key.entry(mkey).or_insert_with(|| {
                            metrics.push(MetricBytes {
                                scope: si,
                                series,
                                points: Vec::new(),
                                points_len: 0,
                            });
                            metrics.len() - 1
                        });
                        let mut attrs = Vec::new();
                        for (k, v) in &series.attributes {
                            prost::encoding::message::encode(7, &key_value(k, v), &mut attrs);
                        }
                        let start = match series.kind {
                            MetricKind::Gauge => 0,
                            MetricKind::Counter | MetricKind::UpDownCounter => series.start_time_ns,
                        };
                        slots.push(SeriesSlot { metric, attrs, start });
                        slots.len() - 1
                    });
                    last = Some((key, slot));
                    slot
                }
            };
            let sl = &slots[slot];
            let m = &mut metrics[sl.metric];
            m.points_len += len_field(1, point_len(sl, p));
            m.points.push((slot, p));
        }
    }

    // Sizes, bottom up.
    let data_len = |m: &MetricBytes<'_>| match m.series.kind {
        MetricKind::Gauge => m.points_len,
        MetricKind::Counter => m.points_len + 2 + 2,
        MetricKind::UpDownCounter => m.points_len + 2,
    };
    let metric_len = |m: &MetricBytes<'_>| {
        str_field_len(&m.series.name)
            + str_field_len(&m.series.description)
            + str_field_len(&m.series.unit)
            + len_field(1, data_len(m))
    };
    let scope_msgs: Vec<InstrumentationScope> = scopes.iter().map(|s| scope_proto(s)).collect();
    let mut scope_lens: Vec<usize> = scope_msgs.iter().map(|s| len_field(1, s.encoded_len())).collect();
    for m in &metrics {
        scope_lens[m.scope] += len_field(1, metric_len(m));
    }
    let rm_len = len_field(1, resource.encoded_len()) + scope_lens.iter().map(|&l| len_field(1, l)).sum::<usize>();
    let total = len_field(1, rm_len);

    // Write, top down.
    let mut buf = Vec::with_capacity(total);
    put_len(1, rm_len, &mut buf); // ExportMetricsServiceRequest.resource_metrics
    prost::encoding::message::encode(1, resource, &mut buf); // ResourceMetrics.resource
    for (si, sm) in scope_msgs.iter().enumerate() {
        put_len(2, scope_lens[si], &mut buf); // ResourceMetrics.scope_metrics
        prost::encoding::message::encode(1, sm, &mut buf); // ScopeMetrics.scope
        for m in metrics.iter().filter(|m| m.scope == si) {
            put_len(2, metric_len(m), &mut buf); // ScopeMetrics.metrics
            put_str(1, &m.series.name, &mut buf);
            put_str(2, &m.series.description, &mut buf);
            put_str(3, &m.series.unit, &mut buf);
            let tag = if m.series.kind == MetricKind::Gauge { 5 } else { 7 }; // Metric.gauge / Metric.sum
            put_len(tag, data_len(m), &mut buf);
            for &(slot, p) in &m.points {
                let sl = &slots[slot];
                put_len(1, point_len(sl, p), &mut buf); // data_points
                buf.extend_from_slice(&sl.attrs); // NumberDataPoint.attributes (7)
                if sl.start != 0 {
                    buf.push(2 << 3 | 1); // start_time_unix_nano, fixed64
                    buf.extend_from_slice(&sl.start.to_le_bytes());
                }
                if p.time_ns != 0 {
                    buf.push(3 << 3 | 1); // time_unix_nano, fixed64
                    buf.extend_from_slice(&p.time_ns.to_le_bytes());
                }
                buf.push(4 << 3 | 1); // as_double
                buf.extend_from_slice(&p.value.to_le_bytes());
            }
            if m.series.kind != MetricKind::Gauge {
                buf.extend_from_slice(&[2 << 3, AggregationTemporality::Cumulative as u8]);
                if m.series.kind == MetricKind::Counter {
                    buf.extend_from_slice(&[3 << 3, 1]); // is_monotonic
                }
            }
        }
    }
    debug_assert_eq!(buf.len(), total);
    buf
}

/// OTel severity number for a severity (TRACE=1, DEBUG=5, INFO=9, WARN=13, ERROR=17).
pub fn severity_number(s: Severity) -> SeverityNumber {
    match s {
        Severity::Trace => SeverityNumber::Trace,
        Severity::Debug => SeverityNumber::Debug,
        Severity::Info => SeverityNumber::Info,
        Severity::Warn => SeverityNumber::Warn,
        Severity::Error => SeverityNumber::Error,
    }
}

/// Severity text as OTel SDKs write it.
pub fn severity_text(s: Severity) -> &'static str {
    match s {
        Severity::Trace => "TRACE",
        Severity::Debug => "DEBUG",
        Severity::Info => "INFO",
        Severity::Warn => "WARN",
        Severity::Error => "ERROR",
    }
}

/// Encodes log batches into one request.
pub fn encode_logs(resource: &[(String, AttrValue)], batches: &[LogBatch]) -> ExportLogsServiceRequest {
    let parts: Vec<(&Scope, &[LogRecord])> = batches.iter().map(|b| (&*b.scope, b.records.as_slice())).collect();
    encode_log_parts(self::resource(resource), &parts)
}

/// Encodes (scope, records) slices into one request.
pub fn encode_log_parts(resource: Resource, parts: &[(&Scope, &[LogRecord])]) -> ExportLogsServiceRequest {
    let mut scopes: Vec<&Scope> = Vec::new();
    let mut scope_logs: Vec<ScopeLogs> = Vec::new();
    let now = crate::model::now_ns();
    for (scope, records) in parts {
        let si = scope_slot(&mut scopes, scope);
        if si == scope_logs.len() {
            scope_logs.push(ScopeLogs {
                scope: Some(scope_proto(scope)),
                log_records: Vec::new(),
                schema_url: String::new(),
            });
        }
        let out = &mut scope_logs[si].log_records;
        out.reserve(records.len());
        for r in records.iter() {
            let mut attributes = Vec::with_capacity(r.attributes.len() + 1);
            if !r.event_name.is_empty() {
                attributes.push(KeyValue {
                    key: "event.name".into(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue(r.event_name.clone())),
                    }),
                });
            }
            attributes.extend(r.attributes.iter().map(|(k, v)| key_value(k, v)));
            out.push(OtlpLogRecord {
                time_unix_nano: r.time_ns,
                // Records originate here: observed when they were made (or now, if unstamped).
                observed_time_unix_nano: if r.time_ns != 0 { r.time_ns } else { now },
                severity_number: severity_number(r.severity) as i32,
                severity_text: severity_text(r.severity).into(),
                body: Some(AnyValue {
                    value: Some(any_value::Value::StringValue(r.body.clone())),
                }),
                attributes,
                dropped_attributes_count: 0,
                flags: 0,
                trace_id: Vec::new(),
                span_id: Vec::new(),
                event_name: r.event_name.clone(),
            });
        }
    }
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(resource),
            scope_logs,
            schema_url: String::new(),
        }],
    }
}

/// Data points in a request.
pub fn metric_point_count(req: &ExportMetricsServiceRequest) -> usize {
    req.resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .map(|m| match &m.data {
            Some(metric::Data::Gauge(g)) => g.data_points.len(),
            Some(metric::Data::Sum(s)) => s.data_points.len(),
            Some(metric::Data::Histogram(h)) => h.data_points.len(),
            Some(metric::Data::ExponentialHistogram(h)) => h.data_points.len(),
            Some(metric::Data::Summary(s)) => s.data_points.len(),
            None => 0,
        })
        .sum()
}

/// Log records in a request.
pub fn log_record_count(req: &ExportLogsServiceRequest) -> usize {
    req.resource_logs
        .iter()
        .flat_map(|r| &r.scope_logs)
        .map(|s| s.log_records.len())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn series(
        name: &str,
        unit: &str,
        kind: MetricKind,
        attrs: Vec<(&str, AttrValue)>,
        start: u64,
    ) -> Arc<MetricSeries> {
        Arc::new(MetricSeries {
            name: name.into(),
            description: format!("{name} desc"),
            unit: unit.into(),
            kind,
            attributes: attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            start_time_ns: start,
        })
    }

    fn kv(kvs: &[KeyValue]) -> Vec<(String, any_value::Value)> {
        kvs.iter()
            .map(|k| (k.key.clone(), k.value.clone().unwrap().value.unwrap()))
            .collect()
    }

    #[test]
    fn export_encode_metrics_groups_by_scope_and_metric() {
        let sys = Arc::new(Scope {
            name: "sonde.sampler".into(),
            version: "0.1.0".into(),
        });
        let plug = Arc::new(Scope {
            name: "profiler".into(),
            version: "1.2.3".into(),
        });
        let util = series(
            "system.cpu.utilization",
            "1",
            MetricKind::Gauge,
            vec![("cpu.logical_number", AttrValue::Int(0))],
            0,
        );
        let util1 = series(
            "system.cpu.utilization",
            "1",
            MetricKind::Gauge,
            vec![("cpu.logical_number", AttrValue::Int(1))],
            0,
        );
        let time = series(
            "system.cpu.time",
            "s",
            MetricKind::Counter,
            vec![("cpu.mode", "user".into())],
            111,
        );
        let mem = series(
            "system.memory.usage",
            "By",
            MetricKind::UpDownCounter,
            vec![("system.memory.state", "used".into())],
            222,
        );
        let step = series(
            "train.step.time",
            "s",
            MetricKind::Gauge,
            vec![("ok", AttrValue::Bool(true)), ("f", AttrValue::Float(0.5))],
            0,
        );
        let pt = |s: &Arc<MetricSeries>, t: u64, v: f64| Point {
            series: s.clone(),
            time_ns: t,
            value: v,
        };
        let batches = vec![
            MetricBatch {
                scope: sys.clone(),
                points: vec![
                    pt(&util, 1000, 0.25),
                    pt(&time, 1000, 5.0),
                    pt(&util1, 1000, 0.5),
                    pt(&mem, 1000, 1e9),
                ],
            },
            MetricBatch {
                scope: plug.clone(),
                points: vec![pt(&step, 1050, 0.125)],
            },
            // same scope by value, different Arc: merges into the first ScopeMetrics
            MetricBatch {
                scope: Arc::new((*sys).clone()),
                points: vec![
                    pt(&util, 1100, 0.3),
                    pt(&time, 1100, 6.0),
                    pt(&util1, 1100, 0.6),
                    pt(&mem, 1100, 2e9),
                ],
            },
        ];
        let res = vec![("service.name".to_string(), AttrValue::Str("sonde".into()))];
        let req = encode_metrics(&res, &batches);
        assert_eq!(metric_point_count(&req), 9);
        assert_eq!(req.resource_metrics.len(), 1);
        let rm = &req.resource_metrics[0];
        assert_eq!(
            kv(&rm.resource.as_ref().unwrap().attributes),
            vec![("service.name".into(), any_value::Value::StringValue("sonde".into()))]
        );
        assert_eq!(rm.scope_metrics.len(), 2);
        let s0 = &rm.scope_metrics[0];
        assert_eq!(s0.scope.as_ref().unwrap().name, "sonde.sampler");
        assert_eq!(s0.scope.as_ref().unwrap().version, "0.1.0");
        let names: Vec<_> = s0.metrics.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(
            names,
            ["system.cpu.utilization", "system.cpu.time", "system.memory.usage"]
        );

        // gauge: both CPUs in one metric, order kept, no start time
        let m = &s0.metrics[0];
        assert_eq!(
            (m.unit.as_str(), m.description.as_str()),
            ("1", "system.cpu.utilization desc")
        );
        let Some(metric::Data::Gauge(g)) = &m.data else {
            panic!("not a gauge: {m:?}")
        };
        let got: Vec<_> = g
            .data_points
            .iter()
            .map(|d| (d.time_unix_nano, d.value.unwrap(), d.start_time_unix_nano))
            .collect();
        use number_data_point::Value::AsDouble;
        assert_eq!(
            got,
            vec![
                (1000, AsDouble(0.25), 0),
                (1000, AsDouble(0.5), 0),
                (1100, AsDouble(0.3), 0),
                (1100, AsDouble(0.6), 0)
            ]
        );
        assert_eq!(
            kv(&g.data_points[1].attributes),
            vec![("cpu.logical_number".into(), any_value::Value::IntValue(1))]
        );

        // counter: cumulative monotonic sum with start time
        let Some(metric::Data::Sum(s)) = &s0.metrics[1].data else {
            panic!()
        };
        assert_eq!(s.aggregation_temporality, AggregationTemporality::Cumulative as i32);
        assert!(s.is_monotonic);
        assert_eq!(s.data_points.len(), 2);
        assert!(s.data_points.iter().all(|d| d.start_time_unix_nano == 111));
        assert_eq!(
            kv(&s.data_points[0].attributes),
            vec![("cpu.mode".into(), any_value::Value::StringValue("user".into()))]
        );
        assert_eq!(s.data_points[1].value, Some(AsDouble(6.0)));

        // updown: cumulative non-monotonic sum
        let Some(metric::Data::Sum(s)) = &s0.metrics[2].data else {
            panic!()
        };
        assert_eq!(s.aggregation_temporality, AggregationTemporality::Cumulative as i32);
        assert!(!s.is_monotonic);
        assert!(s.data_points.iter().all(|d| d.start_time_unix_nano == 222));
        assert_eq!(s0.metrics[2].unit, "By");

        let s1 = &rm.scope_metrics[1];
        assert_eq!(s1.scope.as_ref().unwrap().name, "profiler");
        assert_eq!(s1.scope.as_ref().unwrap().version, "1.2.3");
        let Some(metric::Data::Gauge(g)) = &s1.metrics[0].data else {
            panic!()
        };
        assert_eq!(
            kv(&g.data_points[0].attributes),
            vec![
                ("ok".into(), any_value::Value::BoolValue(true)),
                ("f".into(), any_value::Value::DoubleValue(0.5))
            ]
        );
        assert_eq!(g.data_points[0].time_unix_nano, 1050);
    }

    #[test]
    fn export_encode_metrics_separates_same_name_different_kind_or_unit() {
        let sc = Arc::new(Scope {
            name: "s".into(),
            version: String::new(),
        });
        let a = series("x", "1", MetricKind::Gauge, vec![], 0);
        let b = series("x", "By", MetricKind::Gauge, vec![], 0);
        let c = series("x", "1", MetricKind::Counter, vec![], 5);
        let pts = [&a, &b, &c, &a]
            .iter()
            .map(|s| Point {
                series: (*s).clone(),
                time_ns: 1,
                value: 1.0,
            })
            .collect();
        let req = encode_metrics(&[], &[MetricBatch { scope: sc, points: pts }]);
        let ms = &req.resource_metrics[0].scope_metrics[0].metrics;
        assert_eq!(ms.len(), 3);
        assert_eq!(metric_point_count(&req), 4);
    }

    #[test]
    fn export_direct_bytes_decode_to_the_same_message() {
        let s1 = Arc::new(Scope {
            name: "a".into(),
            version: "1".into(),
        });
        let s2 = Arc::new(Scope {
            name: "b".into(),
            version: String::new(),
        });
        let g = series(
            "g",
            "1",
            MetricKind::Gauge,
            vec![("k", "v".into()), ("n", AttrValue::Int(-3))],
            77,
        );
        let c = series(
            "c",
            "s",
            MetricKind::Counter,
            vec![("f", AttrValue::Float(1.5)), ("b", AttrValue::Bool(false))],
            5,
        );
        let u = series("u", "By", MetricKind::UpDownCounter, vec![], 0);
        let e = Arc::new(MetricSeries {
            description: String::new(),
            unit: String::new(),
            ..(*series("e", "", MetricKind::Gauge, vec![], 0)).clone()
        });
        let long = series(
            &"x".repeat(300),
            "1",
            MetricKind::Counter,
            vec![("big", "y".repeat(200).into())],
            u64::MAX,
        );
        let pt = |s: &Arc<MetricSeries>, t: u64, v: f64| Point {
            series: s.clone(),
            time_ns: t,
            value: v,
        };
        let batches = vec![
            MetricBatch {
                scope: s1.clone(),
                points: vec![pt(&g, 1, 0.0), pt(&c, 0, -1.0), pt(&u, 3, 1e300), pt(&g, 4, 2.0)],
            },
            MetricBatch {
                scope: s2.clone(),
                points: vec![pt(&e, 5, 5.0), pt(&long, u64::MAX, 6.0)],
            },
            MetricBatch {
                scope: s1.clone(),
                points: (0..300).map(|i| pt(&c, 10 + i, i as f64)).collect(),
            },
        ];
        let res = vec![
            ("service.name".to_string(), AttrValue::Str("sonde".into())),
            ("process.pid".to_string(), AttrValue::Int(1)),
        ];
        let want = encode_metrics(&res, &batches);
        let parts: Vec<(&Scope, &[Point])> = batches.iter().map(|b| (&*b.scope, b.points.as_slice())).collect();
        let bytes = encode_metric_parts_to_bytes(&resource(&res), &parts);
        let got = ExportMetricsServiceRequest::decode(bytes.as_slice()).unwrap();
        assert_eq!(got, want);
        assert_eq!(bytes.len(), want.encoded_len());
        let empty = encode_metric_parts_to_bytes(&resource(&res), &[]);
        assert_eq!(
            ExportMetricsServiceRequest::decode(empty.as_slice()).unwrap(),
            encode_metrics(&res, &[])
        );
    }

    #[test]
    fn export_encode_logs_severity_and_event_name() {
        let sc = Arc::new(Scope {
            name: "planner".into(),
            version: "0.2.0".into(),
        });
        let rec = |sev, ev: &str| LogRecord {
            time_ns: 42,
            severity: sev,
            event_name: ev.into(),
            body: format!("body {ev}"),
            attributes: vec![("rank".into(), AttrValue::Int(3))],
        };
        let batches = vec![LogBatch {
            scope: sc,
            records: vec![
                rec(Severity::Trace, ""),
                rec(Severity::Debug, ""),
                rec(Severity::Info, "planner.plan"),
                rec(Severity::Warn, ""),
                rec(Severity::Error, "planner.failure"),
            ],
        }];
        let req = encode_logs(&[("service.name".into(), "sonde".into())], &batches);
        assert_eq!(log_record_count(&req), 5);
        let sl = &req.resource_logs[0].scope_logs[0];
        assert_eq!(sl.scope.as_ref().unwrap().name, "planner");
        let nums: Vec<_> = sl.log_records.iter().map(|r| r.severity_number).collect();
        assert_eq!(nums, [1, 5, 9, 13, 17]);
        let texts: Vec<_> = sl.log_records.iter().map(|r| r.severity_text.as_str()).collect();
        assert_eq!(texts, ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"]);
        let r = &sl.log_records[2];
        assert_eq!(r.event_name, "planner.plan");
        assert_eq!(
            kv(&r.attributes),
            vec![
                (
                    "event.name".into(),
                    any_value::Value::StringValue("planner.plan".into())
                ),
                ("rank".into(), any_value::Value::IntValue(3))
            ]
        );
        assert_eq!(
            r.body.as_ref().unwrap().value,
            Some(any_value::Value::StringValue("body planner.plan".into()))
        );
        assert_eq!((r.time_unix_nano, r.observed_time_unix_nano), (42, 42));
        let r0 = &sl.log_records[0];
        assert_eq!(r0.event_name, "");
        assert_eq!(kv(&r0.attributes), vec![("rank".into(), any_value::Value::IntValue(3))]);
    }
}
