//! Reads an OTLP metrics request (`ExportMetricsServiceRequest`) straight from
//! its protobuf bytes, without building prost's message tree.
//!
//! Why: this is the receiver's hot path. Decoded with prost, every data point
//! owns a `Vec` of attributes and a `String` per key and value, and mapping
//! them to sonde's series copied them again: at 1000 points per request that
//! was most of the receiver's CPU. Here a data point is read in place as a
//! time, a value and the slice of its encoded attributes; a series is looked
//! up by (metric, unit, kind, attribute bytes), and its attributes are decoded
//! only the first time the series appears in a request. Nothing is allocated
//! per point.
//!
//! The mapping is the one documented in `otlp/mod.rs`. Field numbers are those of
//! opentelemetry-proto v1 (`metrics.proto`). What this reader checks: the wire
//! structure of everything it walks, wire types of the fields it uses, UTF-8
//! of the metric name, unit and description, and (through prost) resources,
//! attributes and the points of progress metrics. Fields it does not use
//! (scopes, exemplars, metadata, histogram contents) are skipped by length.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::NumberDataPoint;
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use rustc_hash::FxHasher;

use super::events;
use super::resource::{attrs, origin};
use crate::ingest::{ForeignPoint, ForeignSeries, Progress, Report};
use crate::model::{SeriesKind, now_ns};

/// Metric names that carry the batch index (progress, not a point).
pub const BATCH_METRICS: [&str; 2] = ["sonde.batch_idx", "batch_idx"];

/// A request that is not valid protobuf, or not shaped like OTLP metrics.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct WireError(&'static str);

/// What a metrics request maps to.
#[derive(Debug, Default)]
pub struct Decoded {
    /// One per resource.
    pub reports: Vec<Report>,
    /// Data points not used: histograms, summaries, points without a value.
    pub skipped: usize,
    /// Every data point in the request, used or not (what forwarding counts).
    pub points: usize,
}

/// One field as it is on the wire.
#[derive(Clone, Copy)]
enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32,
    Group,
}

/// The fields of one message, in order; `pos` is where the next one starts.
struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Fields<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Fields { buf, pos: 0 }
    }

    fn varint(&mut self) -> Result<u64, WireError> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = *self.buf.get(self.pos).ok_or(WireError("truncated varint"))?;
            self.pos += 1;
            // The tenth byte may only carry the top bit of a u64.
            if shift == 63 && b > 1 {
                return Err(WireError("varint overflows 64 bits"));
            }
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(WireError("varint longer than 10 bytes"))
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let b = self
            .buf
            .get(self.pos..self.pos + N)
            .ok_or(WireError("truncated fixed-width field"))?;
        self.pos += N;
        Ok(b.try_into().expect("slice of N bytes"))
    }

    /// Skips to the end of the group `tag` started (nested groups included).
    fn skip_group(&mut self, tag: u64) -> Result<(), WireError> {
        let mut open = vec![tag];
        while let Some(&inner) = open.last() {
            if self.pos >= self.buf.len() {
                return Err(WireError("group without its end"));
            }
            let key = self.varint()?;
            match key & 7 {
                0 => drop(self.varint()?),
                1 => drop(self.fixed::<8>()?),
                2 => {
                    let len = usize::try_from(self.varint()?).map_err(|_| WireError("length too large"))?;
                    self.pos = self
                        .pos
                        .checked_add(len)
                        .filter(|e| *e <= self.buf.len())
                        .ok_or(WireError("length runs past the end of the message"))?;
                }
                3 if open.len() < 100 => open.push(key >> 3),
                4 if key >> 3 == inner => drop(open.pop()),
                5 => drop(self.fixed::<4>()?),
                _ => return Err(WireError("malformed group")),
            }
        }
        Ok(())
    }

    /// The next field's number and value, or None at the end.
    fn next(&mut self) -> Result<Option<(u32, Value<'a>)>, WireError> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let tag = key >> 3;
        if tag == 0 || tag > u64::from(u32::MAX >> 3) {
            return Err(WireError("invalid field number"));
        }
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => Value::Fixed64(u64::from_le_bytes(self.fixed::<8>()?)),
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| WireError("length too large"))?;
                let end = self
                    .pos
                    .checked_add(len)
                    .filter(|e| *e <= self.buf.len())
                    .ok_or(WireError("length runs past the end of the message"))?;
                let b = &self.buf[self.pos..end];
                self.pos = end;
                Value::Bytes(b)
            }
            5 => {
                self.fixed::<4>()?;
                Value::Fixed32
            }
            // Groups are deprecated and not in OTLP, but an unknown field may be
            // one: skipped whole, as prost does.
            3 => {
                self.skip_group(tag)?;
                Value::Group
            }
            4 => return Err(WireError("end of a group that was not started")),
            _ => return Err(WireError("unsupported wire type")),
        };
        Ok(Some((tag as u32, value)))
    }
}

fn bytes(v: Value<'_>) -> Result<&[u8], WireError> {
    match v {
        Value::Bytes(b) => Ok(b),
        _ => Err(WireError("wrong wire type for a message or string field")),
    }
}

fn text(v: Value<'_>) -> Result<&str, WireError> {
    std::str::from_utf8(bytes(v)?).map_err(|_| WireError("string field is not UTF-8"))
}

fn fixed64(v: Value<'_>) -> Result<u64, WireError> {
    match v {
        Value::Fixed64(x) => Ok(x),
        _ => Err(WireError("wrong wire type for a fixed64 field")),
    }
}

fn varint(v: Value<'_>) -> Result<u64, WireError> {
    match v {
        Value::Varint(x) => Ok(x),
        _ => Err(WireError("wrong wire type for a varint field")),
    }
}

/// Series already seen in the current metric: encoded attributes -> index in
/// the report's `series`. Fx: the keys are short and come from one request.
type SeenSeries<'a> = HashMap<Cow<'a, [u8]>, u32, BuildHasherDefault<FxHasher>>;

/// Maps a metrics request (see the table in `otlp.rs`).
pub fn metrics_reports(buf: &[u8]) -> Result<Decoded, WireError> {
    let mut out = Decoded::default();
    let mut seen = SeenSeries::default();
    let mut fields = Fields::new(buf);
    while let Some((tag, v)) = fields.next()? {
        if tag == 1 {
            let report = resource_metrics(bytes(v)?, &mut out, &mut seen)?;
            out.reports.push(report);
        }
    }
    Ok(out)
}

fn resource_metrics<'a>(buf: &'a [u8], out: &mut Decoded, seen: &mut SeenSeries<'a>) -> Result<Report, WireError> {
    let mut r = Report::default();
    // A repeated message field merges, as prost would: the resource may come
    // in parts, and after the metrics.
    let mut resource = Resource::default();
    let mut fields = Fields::new(buf);
    while let Some((tag, v)) = fields.next()? {
        match tag {
            1 => resource.merge(bytes(v)?).map_err(|_| WireError("invalid resource"))?,
            2 => scope_metrics(bytes(v)?, &mut r, out, seen)?,
            _ => {}
        }
    }
    r.origin = origin(&resource.attributes);
    // Batch-index updates in time order, as a training loop made them.
    r.progress.sort_by_key(|p| p.time);
    Ok(r)
}

fn scope_metrics<'a>(
    buf: &'a [u8],
    r: &mut Report,
    out: &mut Decoded,
    seen: &mut SeenSeries<'a>,
) -> Result<(), WireError> {
    let mut fields = Fields::new(buf);
    while let Some((tag, v)) = fields.next()? {
        if tag == 2 {
            metric(bytes(v)?, r, out, seen)?;
        }
    }
    Ok(())
}

// Metric fields: the `data` oneof.
const GAUGE: u32 = 5;
const SUM: u32 = 7;
const HISTOGRAM: u32 = 9;
const EXPONENTIAL_HISTOGRAM: u32 = 10;
const SUMMARY: u32 = 11;

fn metric<'a>(buf: &'a [u8], r: &mut Report, out: &mut Decoded, seen: &mut SeenSeries<'a>) -> Result<(), WireError> {
    let (mut name, mut unit) = ("", "");
    // The oneof's parts: a repeated variant merges, a different one replaces.
    let mut data: (u32, Vec<&'a [u8]>) = (0, Vec::new());
    let mut fields = Fields::new(buf);
    while let Some((tag, v)) = fields.next()? {
        match tag {
            1 => name = text(v)?,
            2 => {
                text(v)?;
            }
            3 => unit = text(v)?,
            GAUGE | SUM | HISTOGRAM | EXPONENTIAL_HISTOGRAM | SUMMARY => {
                if data.0 != tag {
                    data = (tag, Vec::new());
                }
                data.1.push(bytes(v)?);
            }
            _ => {}
        }
    }
    let (variant, parts) = data;
    // Data points are field 1 of every variant; Sum adds temporality (2) and monotonic (3).
    let mut points: Vec<&'a [u8]> = Vec::new();
    let (mut temporality, mut monotonic) = (0, false);
    for part in parts {
        let mut f = Fields::new(part);
        while let Some((tag, v)) = f.next()? {
            match (tag, variant) {
                (1, _) => points.push(bytes(v)?),
                (2, SUM) => temporality = varint(v)?,
                (3, SUM) => monotonic = varint(v)? != 0,
                _ => {}
            }
        }
    }
    out.points += points.len();
    let kind = match variant {
        GAUGE => SeriesKind::Gauge,
        // A delta or non-monotonic sum is not a cumulative counter.
        SUM if monotonic && temporality == 2 => SeriesKind::Counter,
        SUM => SeriesKind::Gauge,
        0 => return Ok(()),
        _ => {
            out.skipped += points.len();
            return Ok(());
        }
    };
    let batch = BATCH_METRICS.contains(&name);
    let named_progress = name == events::PROGRESS_METRIC;
    let mut now = None;
    seen.clear();
    r.points.reserve(points.len());
    for p in points {
        let Some(point) = number_point(p)? else {
            out.skipped += 1;
            continue;
        };
        let time = match point.time {
            0 => *now.get_or_insert_with(now_ns),
            t => t,
        };
        if named_progress {
            let full = NumberDataPoint::decode(p).map_err(|_| WireError("invalid data point"))?;
            match events::progress(&full.attributes, time, point.value) {
                Some(pr) => r.progress.push(pr),
                None => out.skipped += 1,
            }
            continue;
        }
        if batch {
            if point.value.is_finite() && point.value >= 0.0 {
                r.progress.push(Progress {
                    name: "batch_idx".into(),
                    time,
                    value: point.value as u64,
                });
            } else {
                out.skipped += 1;
            }
            continue;
        }
        let series = match seen.get(point.attributes.as_ref()) {
            Some(&i) => i,
            None => {
                let i = r.series.len() as u32;
                r.series.push(ForeignSeries {
                    metric: name.to_string(),
                    unit: unit.to_string(),
                    kind,
                    attributes: attrs(&decode_attributes(&point.attributes)?),
                });
                seen.insert(point.attributes, i);
                i
            }
        };
        r.points.push(ForeignPoint {
            series,
            time,
            value: point.value,
        });
    }
    Ok(())
}

/// A number data point read in place.
struct NumberPoint<'a> {
    time: u64,
    value: f64,
    /// The attribute fields exactly as encoded (borrowed when they are
    /// contiguous, as every SDK writes them).
    attributes: Cow<'a, [u8]>,
}

/// None when the point has no value.
fn number_point(buf: &[u8]) -> Result<Option<NumberPoint<'_>>, WireError> {
    let (mut time, mut value) = (0, None);
    // The run of attribute fields seen so far, as a range of `buf`.
    let mut run: Option<(usize, usize)> = None;
    let mut scattered: Option<Vec<u8>> = None;
    let mut f = Fields::new(buf);
    loop {
        let start = f.pos;
        let Some((tag, v)) = f.next()? else { break };
        match tag {
            3 => time = fixed64(v)?,
            4 => value = Some(f64::from_bits(fixed64(v)?)),
            6 => value = Some(fixed64(v)? as i64 as f64),
            7 => {
                bytes(v)?;
                match (&mut scattered, &mut run) {
                    (Some(s), _) => s.extend_from_slice(&buf[start..f.pos]),
                    (None, Some((_, end))) if *end == start => *end = f.pos,
                    // Attributes interleaved with other fields: copy them together.
                    (None, Some((s, end))) => {
                        let mut v = buf[*s..*end].to_vec();
                        v.extend_from_slice(&buf[start..f.pos]);
                        scattered = Some(v);
                    }
                    (None, None) => run = Some((start, f.pos)),
                }
            }
            // start_time (2), exemplars (5), flags (8) are not used.
            _ => {}
        }
    }
    let attributes = match (scattered, run) {
        (Some(v), _) => Cow::Owned(v),
        (None, Some((s, e))) => Cow::Borrowed(&buf[s..e]),
        (None, None) => Cow::Borrowed(&buf[..0]),
    };
    Ok(value.map(|value| NumberPoint {
        time,
        value,
        attributes,
    }))
}

/// Decodes a run of encoded attribute fields (field 7 of a data point).
fn decode_attributes(encoded: &[u8]) -> Result<Vec<KeyValue>, WireError> {
    let mut kvs = Vec::new();
    let mut f = Fields::new(encoded);
    while let Some((_, v)) = f.next()? {
        kvs.push(KeyValue::decode(bytes(v)?).map_err(|_| WireError("invalid attribute"))?);
    }
    Ok(kvs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::AttrValue;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
    use opentelemetry_proto::tonic::metrics::v1::{
        Gauge, Histogram, HistogramDataPoint, Metric, ResourceMetrics, ScopeMetrics, Sum, metric, number_data_point,
    };

    fn kv(k: &str, v: &str) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(v.into())),
            }),
        }
    }

    fn point(t: u64, v: f64, attributes: Vec<KeyValue>) -> NumberDataPoint {
        NumberDataPoint {
            attributes,
            time_unix_nano: t,
            value: Some(number_data_point::Value::AsDouble(v)),
            ..Default::default()
        }
    }

    fn request(metrics: Vec<Metric>) -> Vec<u8> {
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", "train"), kv("host.name", "n1")],
                    ..Default::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    metrics,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
        .encode_to_vec()
    }

    fn gauge(name: &str, points: Vec<NumberDataPoint>) -> Metric {
        Metric {
            name: name.into(),
            unit: "By".into(),
            data: Some(metric::Data::Gauge(Gauge { data_points: points })),
            ..Default::default()
        }
    }

    #[test]
    fn points_share_a_series_per_distinct_attributes_and_attributes_are_decoded_once() {
        let buf = request(vec![gauge(
            "mem",
            vec![
                point(1, 1.0, vec![kv("gpu", "0")]),
                point(2, 2.0, vec![kv("gpu", "1")]),
                point(3, 3.0, vec![kv("gpu", "0")]),
                point(4, 4.0, vec![]),
            ],
        )]);
        let d = metrics_reports(&buf).unwrap();
        let r = &d.reports[0];
        assert_eq!((r.origin.job.as_str(), r.origin.node.as_str()), ("train", "n1"));
        assert_eq!(r.series.len(), 3);
        assert_eq!(r.series[0].attributes, vec![("gpu".into(), AttrValue::Str("0".into()))]);
        assert_eq!((r.series[0].metric.as_str(), r.series[0].unit.as_str()), ("mem", "By"));
        assert!(r.series[2].attributes.is_empty());
        let pts: Vec<(u32, u64, f64)> = r.points.iter().map(|p| (p.series, p.time, p.value)).collect();
        assert_eq!(pts, vec![(0, 1, 1.0), (1, 2, 2.0), (0, 3, 3.0), (2, 4, 4.0)]);
        assert_eq!((d.points, d.skipped), (4, 0));
    }

    #[test]
    fn sums_histograms_and_valueless_points() {
        let sum = |monotonic, temporality| Metric {
            name: "bytes".into(),
            data: Some(metric::Data::Sum(Sum {
                data_points: vec![point(1, 5.0, vec![])],
                aggregation_temporality: temporality,
                is_monotonic: monotonic,
            })),
            ..Default::default()
        };
        let hist = Metric {
            name: "lat".into(),
            data: Some(metric::Data::Histogram(Histogram {
                data_points: vec![HistogramDataPoint::default(); 3],
                aggregation_temporality: 2,
            })),
            ..Default::default()
        };
        let empty = gauge("e", vec![NumberDataPoint::default()]);
        let d = metrics_reports(&request(vec![sum(true, 2), sum(true, 1), sum(false, 2), hist, empty])).unwrap();
        let kinds: Vec<SeriesKind> = d.reports[0].series.iter().map(|s| s.kind).collect();
        assert_eq!(kinds, vec![SeriesKind::Counter, SeriesKind::Gauge, SeriesKind::Gauge]);
        assert_eq!(
            (d.points, d.skipped),
            (7, 4),
            "3 histogram points and 1 without a value skipped"
        );
    }

    #[test]
    fn attributes_split_by_other_fields_are_the_same_series() {
        // Hand-encoded: attribute, time, attribute; then the same two attributes together.
        let kv_a = kv("a", "1").encode_to_vec();
        let kv_b = kv("b", "2").encode_to_vec();
        let field = |tag: u8, body: &[u8]| {
            let mut v = vec![(tag << 3) | 2, body.len() as u8];
            v.extend_from_slice(body);
            v
        };
        let mut split = field(7, &kv_a);
        split.extend([(3 << 3) | 1, 9, 0, 0, 0, 0, 0, 0, 0]);
        split.extend(field(7, &kv_b));
        split.extend([(4 << 3) | 1]);
        split.extend(1.5f64.to_le_bytes());
        let mut together = field(7, &kv_a);
        together.extend(field(7, &kv_b));
        together.extend([(4 << 3) | 1]);
        together.extend(2.5f64.to_le_bytes());
        let gauge_body = [field(1, &split), field(1, &together)].concat();
        let metric_body = [field(1, b"m"), field(5, &gauge_body)].concat();
        let scope = field(2, &metric_body);
        let buf = field(1, &field(2, &scope));
        let d = metrics_reports(&buf).unwrap();
        let r = &d.reports[0];
        assert_eq!(r.series.len(), 1, "same attribute bytes, one series");
        assert_eq!(r.series[0].attributes.len(), 2);
        assert_eq!(r.points.iter().map(|p| p.value).collect::<Vec<_>>(), vec![1.5, 2.5]);
        assert_eq!(r.points[0].time, 9);
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        let good = request(vec![gauge("m", vec![point(1, 1.0, vec![kv("k", "v")])])]);
        for cut in 1..good.len() {
            // Every truncation either fails cleanly or maps a prefix.
            let _ = metrics_reports(&good[..cut]);
        }
        assert!(metrics_reports(&good[..good.len() - 1]).is_err());
        assert_eq!(metrics_reports(&[0x0b]).unwrap_err().0, "group without its end");
        assert_eq!(metrics_reports(&[0x0e]).unwrap_err().0, "unsupported wire type");
        // An unknown field that is a group (field 9: start, a varint inside, end) is skipped.
        assert!(metrics_reports(&[0x4b, 0x08, 0x01, 0x4c]).unwrap().reports.is_empty());
        assert_eq!(
            metrics_reports(&[0x0a, 0x05, 0x01]).unwrap_err().0,
            "length runs past the end of the message"
        );
        assert_eq!(metrics_reports(&[0xff; 11]).unwrap_err().0, "varint overflows 64 bits");
        assert_eq!(
            metrics_reports(&[0x09, 0, 0]).unwrap_err().0,
            "truncated fixed-width field"
        );
        assert_eq!(
            metrics_reports(&[0x08, 1]).unwrap_err().0,
            "wrong wire type for a message or string field"
        );
        let bad_name = [0x0a, 7, 0x12, 5, 0x12, 3, 0x0a, 1, 0xff].to_vec();
        assert_eq!(metrics_reports(&bad_name).unwrap_err().0, "string field is not UTF-8");
        assert!(metrics_reports(&[]).unwrap().reports.is_empty());
    }

    /// Each point as (metric, unit, counter?, attributes, value), times aside
    /// (a point without one gets the time it was read).
    fn resolved(reports: &[Report]) -> Vec<String> {
        reports
            .iter()
            .flat_map(|r| {
                r.points.iter().map(move |p| {
                    let s = &r.series[p.series as usize];
                    format!(
                        "{}|{}|{:?}|{:?}|{:?}|{:?}",
                        s.metric,
                        s.unit,
                        s.kind,
                        s.attributes,
                        p.value.to_bits(),
                        r.origin
                    )
                })
            })
            .collect()
    }

    #[test]
    fn whatever_prost_accepts_the_reader_accepts_with_the_same_points() {
        // Mutations of valid requests (a small deterministic fuzz; `fuzz/` runs the long one).
        let seed = request(vec![
            gauge(
                "m",
                vec![point(1, 1.0, vec![kv("k", "v")]), point(0, 2.0, vec![kv("k", "w")])],
            ),
            Metric {
                name: "c".into(),
                data: Some(metric::Data::Sum(Sum {
                    data_points: vec![point(3, 3.0, vec![kv("a", "b"), kv("c", "d")])],
                    aggregation_temporality: 2,
                    is_monotonic: true,
                })),
                ..Default::default()
            },
        ]);
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let (mut both, mut reader_only) = (0, 0);
        for _ in 0..20_000 {
            let mut b = seed.clone();
            for _ in 0..1 + next() % 3 {
                let i = (next() % b.len() as u64) as usize;
                match next() % 3 {
                    0 => b[i] = next() as u8,
                    1 => b.insert(i, next() as u8),
                    _ => drop(b.remove(i)),
                }
                if b.is_empty() {
                    b.push(0);
                }
            }
            let wire = metrics_reports(&b);
            let Ok(req) = ExportMetricsServiceRequest::decode(&b[..]) else {
                reader_only += wire.is_ok() as u32;
                continue;
            };
            both += 1;
            let d = wire.unwrap_or_else(|e| panic!("prost decoded {b:02x?} but the reader said {e}"));
            let (again, skipped) = crate::ingest::otlp::metrics_reports(&req);
            assert_eq!(resolved(&d.reports), resolved(&again), "{b:02x?}");
            assert_eq!(d.skipped, skipped, "{b:02x?}");
            assert_eq!(d.points, crate::export::otlp::metric_point_count(&req), "{b:02x?}");
        }
        assert!(
            both > 1000,
            "enough mutations stayed valid to compare ({both}; reader only {reader_only})"
        );
    }
}
