//! OTLP/JSON: a request body in OTLP's JSON encoding, rewritten as the
//! protobuf bytes of the same request, so that everything after it (the
//! in-place metrics reader, the prost decode of traces and logs, gateway
//! forwarding) has one input format.
//!
//! ```text
//!  JSON body ─► serde_json::Value ─► walk with the message's field table ─► protobuf bytes
//!                                    (errors name the path: resourceMetrics[0].….timeUnixNano)
//! ```
//!
//! OTLP/JSON is proto3's JSON mapping with OTLP's own rules, and it is not
//! what a generic serde derive gives (which is why this is a table and not
//! `opentelemetry-proto`'s `with-serde`):
//! - keys are lowerCamelCase; the proto field names (`time_unix_nano`) are
//!   accepted too, as proto3 JSON parsers do, and unknown keys are skipped
//!   (a newer sender's fields must not fail an older receiver);
//! - 64-bit integers arrive as decimal strings (what protojson writes) or as
//!   JSON numbers (what hand-written senders write); both are taken;
//! - `traceId` / `spanId` / `parentSpanId` are hex, every other bytes field
//!   is base64;
//! - enums are integers (OTLP forbids enum names on the wire);
//! - doubles may be the strings `"NaN"`, `"Infinity"`, `"-Infinity"`.
//!
//! Limits: the body is already bounded by `ingest.max_body_bytes` before it
//! gets here, and serde_json stops nesting at 128 levels (a deep
//! `arrayValue` tower is an error, not a stack overflow). The tables cover
//! the three export requests of OTLP v1 (metrics, traces, logs); profiles
//! are not received.

use base64::Engine as _;
use prost::encoding::{WireType, encode_key, encode_varint};
use serde_json::Value;

use crate::export::client::Signal;

/// Rewrites an OTLP/JSON export request for `signal` as protobuf.
pub fn to_protobuf(signal: Signal, body: &[u8]) -> Result<Vec<u8>, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("OTLP/JSON body: {e}"))?;
    let root = match signal {
        Signal::Metrics => &METRICS_REQUEST,
        Signal::Traces => &TRACES_REQUEST,
        Signal::Logs => &LOGS_REQUEST,
    };
    let mut out = Vec::with_capacity(body.len() / 2);
    let mut path = String::new();
    encode_message(root, &v, &mut path, &mut out)?;
    Ok(out)
}

/// How one field is written on the protobuf wire, and read from JSON.
#[derive(Clone, Copy)]
enum Kind {
    Str,
    Bool,
    Double,
    /// uint32 / int32 / enum: a varint.
    Varint32,
    /// int64 / uint64: a varint, from a string or a number.
    Varint64,
    Sint32,
    Fixed32,
    Fixed64,
    Sfixed64,
    /// base64 in JSON.
    Bytes,
    /// hex in JSON (trace and span ids).
    Hex,
    Msg(&'static Message),
}

struct Field {
    json: &'static str,
    number: u32,
    kind: Kind,
    repeated: bool,
}

struct Message {
    fields: &'static [Field],
}

const fn one(json: &'static str, number: u32, kind: Kind) -> Field {
    Field {
        json,
        number,
        kind,
        repeated: false,
    }
}

const fn many(json: &'static str, number: u32, kind: Kind) -> Field {
    Field {
        json,
        number,
        kind,
        repeated: true,
    }
}

use Kind::*;

// common/v1 and resource/v1
static ANY_VALUE: Message = Message {
    fields: &[
        one("stringValue", 1, Str),
        one("boolValue", 2, Bool),
        one("intValue", 3, Varint64),
        one("doubleValue", 4, Double),
        one("arrayValue", 5, Msg(&ARRAY_VALUE)),
        one("kvlistValue", 6, Msg(&KEY_VALUE_LIST)),
        one("bytesValue", 7, Bytes),
    ],
};
static ARRAY_VALUE: Message = Message {
    fields: &[many("values", 1, Msg(&ANY_VALUE))],
};
static KEY_VALUE_LIST: Message = Message {
    fields: &[many("values", 1, Msg(&KEY_VALUE))],
};
static KEY_VALUE: Message = Message {
    fields: &[one("key", 1, Str), one("value", 2, Msg(&ANY_VALUE))],
};
static SCOPE: Message = Message {
    fields: &[
        one("name", 1, Str),
        one("version", 2, Str),
        many("attributes", 3, Msg(&KEY_VALUE)),
        one("droppedAttributesCount", 4, Varint32),
    ],
};
static RESOURCE: Message = Message {
    fields: &[
        many("attributes", 1, Msg(&KEY_VALUE)),
        one("droppedAttributesCount", 2, Varint32),
    ],
};

// metrics/v1
static METRICS_REQUEST: Message = Message {
    fields: &[many("resourceMetrics", 1, Msg(&RESOURCE_METRICS))],
};
static RESOURCE_METRICS: Message = Message {
    fields: &[
        one("resource", 1, Msg(&RESOURCE)),
        many("scopeMetrics", 2, Msg(&SCOPE_METRICS)),
        one("schemaUrl", 3, Str),
    ],
};
static SCOPE_METRICS: Message = Message {
    fields: &[
        one("scope", 1, Msg(&SCOPE)),
        many("metrics", 2, Msg(&METRIC)),
        one("schemaUrl", 3, Str),
    ],
};
static METRIC: Message = Message {
    fields: &[
        one("name", 1, Str),
        one("description", 2, Str),
        one("unit", 3, Str),
        one("gauge", 5, Msg(&GAUGE)),
        one("sum", 7, Msg(&SUM)),
        one("histogram", 9, Msg(&HISTOGRAM)),
        one("exponentialHistogram", 10, Msg(&EXP_HISTOGRAM)),
        one("summary", 11, Msg(&SUMMARY)),
        many("metadata", 12, Msg(&KEY_VALUE)),
    ],
};
static GAUGE: Message = Message {
    fields: &[many("dataPoints", 1, Msg(&NUMBER_POINT))],
};
static SUM: Message = Message {
    fields: &[
        many("dataPoints", 1, Msg(&NUMBER_POINT)),
        one("aggregationTemporality", 2, Varint32),
        one("isMonotonic", 3, Bool),
    ],
};
static HISTOGRAM: Message = Message {
    fields: &[
        many("dataPoints", 1, Msg(&HISTOGRAM_POINT)),
        one("aggregationTemporality", 2, Varint32),
    ],
};
static EXP_HISTOGRAM: Message = Message {
    fields: &[
        many("dataPoints", 1, Msg(&EXP_HISTOGRAM_POINT)),
        one("aggregationTemporality", 2, Varint32),
    ],
};
static SUMMARY: Message = Message {
    fields: &[many("dataPoints", 1, Msg(&SUMMARY_POINT))],
};
static NUMBER_POINT: Message = Message {
    fields: &[
        one("startTimeUnixNano", 2, Fixed64),
        one("timeUnixNano", 3, Fixed64),
        one("asDouble", 4, Double),
        many("exemplars", 5, Msg(&EXEMPLAR)),
        one("asInt", 6, Sfixed64),
        many("attributes", 7, Msg(&KEY_VALUE)),
        one("flags", 8, Varint32),
    ],
};
static HISTOGRAM_POINT: Message = Message {
    fields: &[
        one("startTimeUnixNano", 2, Fixed64),
        one("timeUnixNano", 3, Fixed64),
        one("count", 4, Fixed64),
        one("sum", 5, Double),
        many("bucketCounts", 6, Fixed64),
        many("explicitBounds", 7, Double),
        many("exemplars", 8, Msg(&EXEMPLAR)),
        many("attributes", 9, Msg(&KEY_VALUE)),
        one("flags", 10, Varint32),
        one("min", 11, Double),
        one("max", 12, Double),
    ],
};
static EXP_HISTOGRAM_POINT: Message = Message {
    fields: &[
        many("attributes", 1, Msg(&KEY_VALUE)),
        one("startTimeUnixNano", 2, Fixed64),
        one("timeUnixNano", 3, Fixed64),
        one("count", 4, Fixed64),
        one("sum", 5, Double),
        one("scale", 6, Sint32),
        one("zeroCount", 7, Fixed64),
        one("positive", 8, Msg(&EXP_BUCKETS)),
        one("negative", 9, Msg(&EXP_BUCKETS)),
        one("flags", 10, Varint32),
        many("exemplars", 11, Msg(&EXEMPLAR)),
        one("min", 12, Double),
        one("max", 13, Double),
        one("zeroThreshold", 14, Double),
    ],
};
static EXP_BUCKETS: Message = Message {
    fields: &[one("offset", 1, Sint32), many("bucketCounts", 2, Varint64)],
};
static SUMMARY_POINT: Message = Message {
    fields: &[
        one("startTimeUnixNano", 2, Fixed64),
        one("timeUnixNano", 3, Fixed64),
        one("count", 4, Fixed64),
        one("sum", 5, Double),
        many("quantileValues", 6, Msg(&QUANTILE)),
        many("attributes", 7, Msg(&KEY_VALUE)),
        one("flags", 8, Varint32),
    ],
};
static QUANTILE: Message = Message {
    fields: &[one("quantile", 1, Double), one("value", 2, Double)],
};
static EXEMPLAR: Message = Message {
    fields: &[
        one("timeUnixNano", 2, Fixed64),
        one("asDouble", 3, Double),
        one("spanId", 4, Hex),
        one("traceId", 5, Hex),
        one("asInt", 6, Sfixed64),
        many("filteredAttributes", 7, Msg(&KEY_VALUE)),
    ],
};

// logs/v1
static LOGS_REQUEST: Message = Message {
    fields: &[many("resourceLogs", 1, Msg(&RESOURCE_LOGS))],
};
static RESOURCE_LOGS: Message = Message {
    fields: &[
        one("resource", 1, Msg(&RESOURCE)),
        many("scopeLogs", 2, Msg(&SCOPE_LOGS)),
        one("schemaUrl", 3, Str),
    ],
};
static SCOPE_LOGS: Message = Message {
    fields: &[
        one("scope", 1, Msg(&SCOPE)),
        many("logRecords", 2, Msg(&LOG_RECORD)),
        one("schemaUrl", 3, Str),
    ],
};
static LOG_RECORD: Message = Message {
    fields: &[
        one("timeUnixNano", 1, Fixed64),
        one("severityNumber", 2, Varint32),
        one("severityText", 3, Str),
        one("body", 5, Msg(&ANY_VALUE)),
        many("attributes", 6, Msg(&KEY_VALUE)),
        one("droppedAttributesCount", 7, Varint32),
        one("flags", 8, Fixed32),
        one("traceId", 9, Hex),
        one("spanId", 10, Hex),
        one("observedTimeUnixNano", 11, Fixed64),
        one("eventName", 12, Str),
    ],
};

// trace/v1
static TRACES_REQUEST: Message = Message {
    fields: &[many("resourceSpans", 1, Msg(&RESOURCE_SPANS))],
};
static RESOURCE_SPANS: Message = Message {
    fields: &[
        one("resource", 1, Msg(&RESOURCE)),
        many("scopeSpans", 2, Msg(&SCOPE_SPANS)),
        one("schemaUrl", 3, Str),
    ],
};
static SCOPE_SPANS: Message = Message {
    fields: &[
        one("scope", 1, Msg(&SCOPE)),
        many("spans", 2, Msg(&SPAN)),
        one("schemaUrl", 3, Str),
    ],
};
static SPAN: Message = Message {
    fields: &[
        one("traceId", 1, Hex),
        one("spanId", 2, Hex),
        one("traceState", 3, Str),
        one("parentSpanId", 4, Hex),
        one("name", 5, Str),
        one("kind", 6, Varint32),
        one("startTimeUnixNano", 7, Fixed64),
        one("endTimeUnixNano", 8, Fixed64),
        many("attributes", 9, Msg(&KEY_VALUE)),
        one("droppedAttributesCount", 10, Varint32),
        many("events", 11, Msg(&SPAN_EVENT)),
        one("droppedEventsCount", 12, Varint32),
        many("links", 13, Msg(&SPAN_LINK)),
        one("droppedLinksCount", 14, Varint32),
        one("status", 15, Msg(&SPAN_STATUS)),
        one("flags", 16, Fixed32),
    ],
};
static SPAN_EVENT: Message = Message {
    fields: &[
        one("timeUnixNano", 1, Fixed64),
        one("name", 2, Str),
        many("attributes", 3, Msg(&KEY_VALUE)),
        one("droppedAttributesCount", 4, Varint32),
    ],
};
static SPAN_LINK: Message = Message {
    fields: &[
        one("traceId", 1, Hex),
        one("spanId", 2, Hex),
        one("traceState", 3, Str),
        many("attributes", 4, Msg(&KEY_VALUE)),
        one("droppedAttributesCount", 5, Varint32),
        one("flags", 6, Fixed32),
    ],
};
static SPAN_STATUS: Message = Message {
    fields: &[one("message", 2, Str), one("code", 3, Varint32)],
};

/// The field a JSON key names: its lowerCamelCase name, or the proto name
/// (`time_unix_nano`), which reads the same without underscores or case.
fn field_of<'m>(m: &'m Message, key: &str) -> Option<&'m Field> {
    m.fields.iter().find(|f| f.json == key).or_else(|| {
        let plain: Vec<u8> = key.bytes().filter(|&b| b != b'_').collect();
        m.fields.iter().find(|f| f.json.as_bytes().eq_ignore_ascii_case(&plain))
    })
}

fn encode_message(m: &Message, v: &Value, path: &mut String, out: &mut Vec<u8>) -> Result<(), String> {
    let Value::Object(map) = v else {
        return Err(at(path, "expected an object"));
    };
    for (key, value) in map {
        let Some(field) = field_of(m, key) else {
            continue;
        };
        if value.is_null() {
            continue;
        }
        let len = path.len();
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(field.json);
        if field.repeated {
            let Value::Array(items) = value else {
                return Err(at(path, "expected an array"));
            };
            encode_repeated(field, items, path, out)?;
        } else {
            encode_one(field, value, path, out)?;
        }
        path.truncate(len);
    }
    Ok(())
}

fn encode_repeated(field: &Field, items: &[Value], path: &mut String, out: &mut Vec<u8>) -> Result<(), String> {
    let len = path.len();
    if let Msg(_) | Str | Bytes | Hex = field.kind {
        for (i, item) in items.iter().enumerate() {
            path.push_str(&format!("[{i}]"));
            encode_one(field, item, path, out)?;
            path.truncate(len);
        }
        return Ok(());
    }
    // Repeated numbers are packed: one key, one length, the values back to back.
    let mut packed = Vec::with_capacity(items.len() * 8);
    for (i, item) in items.iter().enumerate() {
        path.push_str(&format!("[{i}]"));
        write_scalar(field.kind, item, path, &mut packed)?;
        path.truncate(len);
    }
    encode_key(field.number, WireType::LengthDelimited, out);
    encode_varint(packed.len() as u64, out);
    out.extend_from_slice(&packed);
    Ok(())
}

fn encode_one(field: &Field, v: &Value, path: &mut String, out: &mut Vec<u8>) -> Result<(), String> {
    let bytes = |b: Vec<u8>, out: &mut Vec<u8>| {
        encode_key(field.number, WireType::LengthDelimited, out);
        encode_varint(b.len() as u64, out);
        out.extend_from_slice(&b);
    };
    match field.kind {
        Msg(m) => {
            let mut inner = Vec::new();
            encode_message(m, v, path, &mut inner)?;
            bytes(inner, out);
        }
        Str => match v {
            Value::String(s) => bytes(s.as_bytes().to_vec(), out),
            _ => return Err(at(path, "expected a string")),
        },
        Bytes => {
            let s = v.as_str().ok_or_else(|| at(path, "expected base64 in a string"))?;
            let b = base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(|e| at(path, &format!("not base64: {e}")))?;
            bytes(b, out);
        }
        Hex => {
            let s = v.as_str().ok_or_else(|| at(path, "expected a hex string"))?;
            let b = hex::decode(s).map_err(|e| at(path, &format!("not hex: {e}")))?;
            bytes(b, out);
        }
        kind => {
            let wire = match kind {
                Double | Fixed64 | Sfixed64 => WireType::SixtyFourBit,
                Fixed32 => WireType::ThirtyTwoBit,
                _ => WireType::Varint,
            };
            encode_key(field.number, wire, out);
            write_scalar(kind, v, path, out)?;
        }
    }
    Ok(())
}

/// One number or bool, without its key.
fn write_scalar(kind: Kind, v: &Value, path: &str, out: &mut Vec<u8>) -> Result<(), String> {
    match kind {
        Bool => {
            let b = v.as_bool().ok_or_else(|| at(path, "expected true or false"))?;
            encode_varint(b as u64, out);
        }
        Double => out.extend_from_slice(&double(v, path)?.to_le_bytes()),
        Varint32 => {
            let n = integer(v, path)?;
            let n = i32::try_from(n)
                .map(|n| n as i64)
                .or_else(|_| u32::try_from(n).map(|n| n as i64))
                .map_err(|_| at(path, "out of range for 32 bits"))?;
            // Negative int32s are sign-extended to ten bytes, as protobuf does.
            encode_varint(n as u64, out);
        }
        Varint64 => encode_varint(integer(v, path)? as u64, out),
        Sint32 => {
            let n = i32::try_from(integer(v, path)?).map_err(|_| at(path, "out of range for 32 bits"))?;
            encode_varint(((n << 1) ^ (n >> 31)) as u32 as u64, out);
        }
        Fixed32 => {
            let n = u32::try_from(integer(v, path)?).map_err(|_| at(path, "out of range for 32 bits"))?;
            out.extend_from_slice(&n.to_le_bytes());
        }
        Fixed64 | Sfixed64 => out.extend_from_slice(&integer(v, path)?.to_le_bytes()),
        Str | Bytes | Hex | Msg(_) => unreachable!("length-delimited kinds are written by encode_one"),
    }
    Ok(())
}

/// A 64-bit integer from a decimal string or a JSON number, as its two's
/// complement bits (so uint64 values past i64::MAX survive).
fn integer(v: &Value, path: &str) -> Result<i64, String> {
    let bad = || at(path, "expected an integer (a number or a decimal string)");
    match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_u64().map(|u| u as i64))
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                    .map(|f| f as i64)
            })
            .ok_or_else(bad),
        Value::String(s) => s
            .parse::<i64>()
            .or_else(|_| s.parse::<u64>().map(|u| u as i64))
            .map_err(|_| bad()),
        _ => Err(bad()),
    }
}

fn double(v: &Value, path: &str) -> Result<f64, String> {
    match v {
        Value::Number(n) => n.as_f64().ok_or_else(|| at(path, "expected a number")),
        Value::String(s) => match s.as_str() {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            other => other.parse().map_err(|_| at(path, "expected a number")),
        },
        _ => Err(at(path, "expected a number")),
    }
}

fn at(path: &str, what: &str) -> String {
    format!("{}: {what}", if path.is_empty() { "the body" } else { path })
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value;
    use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
    use prost::Message as _;

    use super::*;

    #[test]
    fn a_metrics_request_keeps_every_value_whatever_the_number_style() {
        let body = r#"{"resourceMetrics":[{
            "resource":{"attributes":[{"key":"service.name","value":{"stringValue":"train"}},
                                      {"key":"sonde.rank","value":{"intValue":"3"}}]},
            "scopeMetrics":[{"scope":{"name":"s","version":"1"},"metrics":[
              {"name":"loss","unit":"1","gauge":{"dataPoints":[
                 {"timeUnixNano":"1700000000000000001","asDouble":0.25,"attributes":[{"key":"k","value":{"boolValue":true}}]},
                 {"time_unix_nano":1700000000100000000,"asInt":"-7"}]}},
              {"name":"steps","sum":{"aggregationTemporality":2,"isMonotonic":true,
                 "dataPoints":[{"timeUnixNano":"5","asDouble":"NaN"}]}},
              {"name":"lat","histogram":{"aggregationTemporality":1,"dataPoints":[
                 {"timeUnixNano":"9","count":"3","sum":1.5,"bucketCounts":["1",2],"explicitBounds":[0.5]}]}},
              {"name":"exp","exponentialHistogram":{"dataPoints":[{"scale":-2,"positive":{"offset":-3,"bucketCounts":["4"]}}]}}
            ]}]}],"somethingNewer":{"x":1}}"#;
        let bytes = to_protobuf(Signal::Metrics, body.as_bytes()).unwrap();
        let req = ExportMetricsServiceRequest::decode(bytes.as_slice()).unwrap();
        let rm = &req.resource_metrics[0];
        let attrs = &rm.resource.as_ref().unwrap().attributes;
        assert_eq!(
            attrs[1].value.as_ref().unwrap().value,
            Some(any_value::Value::IntValue(3))
        );
        let metrics = &rm.scope_metrics[0].metrics;
        let Some(metric::Data::Gauge(g)) = &metrics[0].data else {
            panic!()
        };
        assert_eq!(g.data_points[0].time_unix_nano, 1_700_000_000_000_000_001);
        assert_eq!(g.data_points[0].value, Some(number_data_point::Value::AsDouble(0.25)));
        assert_eq!(g.data_points[1].time_unix_nano, 1_700_000_000_100_000_000);
        assert_eq!(g.data_points[1].value, Some(number_data_point::Value::AsInt(-7)));
        let Some(metric::Data::Sum(s)) = &metrics[1].data else {
            panic!()
        };
        assert_eq!((s.aggregation_temporality, s.is_monotonic), (2, true));
        assert!(matches!(s.data_points[0].value, Some(number_data_point::Value::AsDouble(v)) if v.is_nan()));
        let Some(metric::Data::Histogram(h)) = &metrics[2].data else {
            panic!()
        };
        let p = &h.data_points[0];
        assert_eq!(
            (p.count, p.sum, &p.bucket_counts, &p.explicit_bounds),
            (3, Some(1.5), &vec![1, 2], &vec![0.5])
        );
        let Some(metric::Data::ExponentialHistogram(e)) = &metrics[3].data else {
            panic!()
        };
        let b = e.data_points[0].positive.as_ref().unwrap();
        assert_eq!((e.data_points[0].scale, b.offset, &b.bucket_counts), (-2, -3, &vec![4]));
    }

    #[test]
    fn spans_and_log_records_carry_hex_ids_enums_and_nested_values() {
        let spans = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{
            "traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174",
            "name":"forward","kind":1,"startTimeUnixNano":"100","endTimeUnixNano":"250",
            "attributes":[{"key":"sonde.batch_idx","value":{"intValue":12}},
                          {"key":"tags","value":{"arrayValue":{"values":[{"stringValue":"a"},{"doubleValue":1.5}]}}}],
            "status":{"code":2,"message":"slow"}}]}]}]}"#;
        let req = ExportTraceServiceRequest::decode(to_protobuf(Signal::Traces, spans.as_bytes()).unwrap().as_slice())
            .unwrap();
        let span = &req.resource_spans[0].scope_spans[0].spans[0];
        assert_eq!(hex::encode(&span.trace_id), "5b8efff798038103d269b633813fc60c");
        assert_eq!(hex::encode(&span.span_id), "eee19b7ec3c1b174");
        assert_eq!(
            (span.kind, span.start_time_unix_nano, span.end_time_unix_nano),
            (1, 100, 250)
        );
        assert_eq!(
            span.attributes[0].value.as_ref().unwrap().value,
            Some(any_value::Value::IntValue(12))
        );
        let Some(any_value::Value::ArrayValue(a)) = &span.attributes[1].value.as_ref().unwrap().value else {
            panic!()
        };
        assert_eq!(a.values[1].value, Some(any_value::Value::DoubleValue(1.5)));
        assert_eq!(span.status.as_ref().unwrap().code, 2);

        let logs = r#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{
            "timeUnixNano":"42","severityNumber":9,"eventName":"sonde.heartbeat",
            "body":{"bytesValue":"aGk="},"flags":1}]}]}]}"#;
        let req =
            ExportLogsServiceRequest::decode(to_protobuf(Signal::Logs, logs.as_bytes()).unwrap().as_slice()).unwrap();
        let rec = &req.resource_logs[0].scope_logs[0].log_records[0];
        assert_eq!((rec.time_unix_nano, rec.severity_number, rec.flags), (42, 9, 1));
        assert_eq!(rec.event_name, "sonde.heartbeat");
        assert_eq!(
            rec.body.as_ref().unwrap().value,
            Some(any_value::Value::BytesValue(b"hi".to_vec()))
        );
    }

    #[test]
    fn a_wrong_value_is_refused_with_its_path() {
        let e = to_protobuf(
            Signal::Metrics,
            br#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"gauge":{"dataPoints":[{"timeUnixNano":"soon"}]}}]}]}]}"#,
        )
        .unwrap_err();
        assert!(
            e.starts_with("resourceMetrics[0].scopeMetrics[0].metrics[0].gauge.dataPoints[0].timeUnixNano:"),
            "{e}"
        );
        let e = to_protobuf(
            Signal::Traces,
            br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}"#,
        )
        .unwrap_err();
        assert!(e.contains("traceId: not hex"), "{e}");
        assert!(
            to_protobuf(Signal::Logs, b"[1]")
                .unwrap_err()
                .starts_with("the body: expected an object")
        );
        assert!(
            to_protobuf(Signal::Logs, b"{")
                .unwrap_err()
                .starts_with("OTLP/JSON body:")
        );
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(
            to_protobuf(Signal::Logs, deep.as_bytes()).is_err(),
            "nesting is bounded"
        );
    }
}
