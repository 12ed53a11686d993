//! Encoding cost of one export request: 10 000 points, i.e. a 10-s window of
//! 100 ms samples of 100 series, encoded into an OTLP request and then to
//! protobuf bytes (what the pipeline's batcher does per request).
//!
//! Three variants: the message tree only (`encode_metrics`), tree + prost
//! `encode_to_vec`, and the direct protobuf writer the pipeline uses
//! (`encode_metric_parts_to_bytes`, same bytes on the wire).
//!
//! `cargo bench -p sonde --bench export`; criterion's throughput line gives the
//! per-point cost (elements/s); the bench also prints ns/point once.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use prost::Message;
use sonde::export::otlp::{self, encode_metric_parts_to_bytes, encode_metrics};
use sonde::model::{AttrValue, MetricBatch, MetricKind, MetricSeries, Point, Scope};

const SERIES: usize = 100;
const TICKS: usize = 100;

fn window() -> (Vec<(String, AttrValue)>, Vec<MetricBatch>) {
    let scope = Arc::new(Scope {
        name: "sonde.sampler".into(),
        version: "0.1.0".into(),
    });
    let series: Vec<Arc<MetricSeries>> = (0..SERIES)
        .map(|i| {
            let (name, unit, kind, attrs): (&str, &str, MetricKind, Vec<(String, AttrValue)>) = match i % 4 {
                0 => (
                    "system.cpu.utilization",
                    "1",
                    MetricKind::Gauge,
                    vec![("cpu.logical_number".into(), AttrValue::Int(i as i64))],
                ),
                1 => (
                    "system.cpu.time",
                    "s",
                    MetricKind::Counter,
                    vec![
                        ("cpu.mode".into(), "user".into()),
                        ("cpu.logical_number".into(), AttrValue::Int(i as i64)),
                    ],
                ),
                2 => (
                    "system.network.io",
                    "By",
                    MetricKind::Counter,
                    vec![
                        ("network.interface.name".into(), format!("eth{i}").into()),
                        ("network.io.direction".into(), "receive".into()),
                    ],
                ),
                _ => (
                    "system.memory.usage",
                    "By",
                    MetricKind::UpDownCounter,
                    vec![("system.memory.state".into(), "used".into())],
                ),
            };
            Arc::new(MetricSeries {
                name: name.into(),
                description: String::new(),
                unit: unit.into(),
                kind,
                attributes: attrs,
                start_time_ns: 1_700_000_000_000_000_000,
            })
        })
        .collect();
    let t0 = 1_700_000_000_000_000_000u64;
    let batches = (0..TICKS)
        .map(|t| MetricBatch {
            scope: scope.clone(),
            points: series
                .iter()
                .enumerate()
                .map(|(i, s)| Point {
                    series: s.clone(),
                    time_ns: t0 + t as u64 * 100_000_000,
                    value: (i * t) as f64 * 0.5,
                })
                .collect(),
        })
        .collect();
    let resource = vec![
        ("service.name".to_string(), AttrValue::Str("sonde".into())),
        ("host.name".to_string(), AttrValue::Str("bench-host".into())),
        ("process.pid".to_string(), AttrValue::Int(4242)),
    ];
    (resource, batches)
}

fn bench_encode(c: &mut Criterion) {
    let (resource, batches) = window();
    let points = (SERIES * TICKS) as u64;

    // One informational line, independent of criterion's report.
    let n = 20;
    let t = Instant::now();
    let mut bytes = 0;
    for _ in 0..n {
        bytes = black_box(encode_metrics(&resource, &batches).encode_to_vec()).len();
    }
    let per_point = t.elapsed().as_nanos() as f64 / (n as f64 * points as f64);
    let res = otlp::resource(&resource);
    let t = Instant::now();
    for _ in 0..n {
        let parts: Vec<(&Scope, &[Point])> = batches.iter().map(|b| (&*b.scope, b.points.as_slice())).collect();
        black_box(encode_metric_parts_to_bytes(&res, &parts));
    }
    let direct = t.elapsed().as_nanos() as f64 / (n as f64 * points as f64);
    eprintln!(
        "export encode to bytes: {per_point:.0} ns/point via the message tree + prost, {direct:.0} ns/point direct (the pipeline's path); \
         {bytes} bytes per 10 000-point request ({:.1} B/point)",
        bytes as f64 / points as f64
    );

    let mut g = c.benchmark_group("export");
    g.throughput(Throughput::Elements(points));
    g.bench_function("encode_metrics_10k_points", |b| {
        b.iter(|| black_box(encode_metrics(&resource, black_box(&batches))))
    });
    g.bench_function("encode_metrics_10k_points_to_bytes", |b| {
        b.iter(|| black_box(encode_metrics(&resource, black_box(&batches)).encode_to_vec()))
    });
    let res = otlp::resource(&resource);
    g.bench_function("encode_metrics_10k_points_direct_to_bytes", |b| {
        b.iter(|| {
            let parts: Vec<(&Scope, &[Point])> = batches.iter().map(|b| (&*b.scope, b.points.as_slice())).collect();
            black_box(encode_metric_parts_to_bytes(&res, black_box(&parts)))
        })
    });
    g.finish();
}

criterion_group!(benches, bench_encode);
criterion_main!(benches);
