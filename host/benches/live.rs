//! The live store's downsampling: an hour of 100 ms points (36 000) of one
//! series, as the store keeps them (the last five minutes raw, the rest in
//! 0.9 s and 3.6 s buckets), served as 1 000 min/max/mean buckets, as the
//! dashboard asks for a one-hour window; and ingesting one sysmetrics-sized
//! batch.

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use sonde::api::live::{LiveStore, bucket_width};
use sonde::model::{MetricBatch, MetricKind, MetricSeries, Point, Scope, now_ns};

fn series(i: usize) -> Arc<MetricSeries> {
    Arc::new(MetricSeries {
        name: "system.cpu.utilization".into(),
        description: String::new(),
        unit: "1".into(),
        kind: MetricKind::Gauge,
        attributes: vec![("cpu.logical_number".into(), (i as i64).into())],
        start_time_ns: 0,
    })
}

fn bench(c: &mut Criterion) {
    let store = LiveStore::new();
    let scope = Arc::new(Scope {
        name: "sonde.plugin.sysmetrics".into(),
        version: String::new(),
    });
    let now = now_ns();
    let start = now - 3_600_000_000_000 + 1_000_000_000;
    let s = series(0);
    for chunk in 0..360u64 {
        let points = (0..100u64)
            .map(|i| Point {
                series: s.clone(),
                time_ns: start + (chunk * 100 + i) * 100_000_000,
                value: ((chunk * 100 + i) % 97) as f64 / 97.0,
            })
            .collect();
        store.ingest(&MetricBatch {
            scope: scope.clone(),
            points,
        });
    }
    let stats = store.stats();
    assert!(stats.points == 3_000 && stats.buckets >= 2_000, "{stats:?}");
    let (from, to) = (start / 1_000_000, now / 1_000_000);
    let w = bucket_width(from, to, 1_000);
    c.bench_function("live: 1 h of 100 ms points (36 000) as kept, to 1 000 buckets", |b| {
        b.iter(|| {
            let q = store.query(&[0], from, to, w);
            assert!(q[0].t.len() >= 990);
            q
        })
    });
    // One sysmetrics delivery: 10 ticks of 40 series.
    let many: Vec<_> = (0..40).map(series).collect();
    let fresh = LiveStore::new();
    let mut t = now_ns();
    c.bench_function("live: ingest a batch of 400 points (10 ticks x 40 series)", |b| {
        b.iter(|| {
            t += 1_000_000_000;
            let points = (0..10u64)
                .flat_map(|k| {
                    many.iter().map(move |s| Point {
                        series: s.clone(),
                        time_ns: t + k * 100_000_000,
                        value: 0.5,
                    })
                })
                .collect();
            fresh.ingest(&MetricBatch {
                scope: scope.clone(),
                points,
            })
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
