//! The master's embedded history: appending one agent's delivery (10 ticks
//! of 40 series) while 256 agents take turns, and the 1-hour job view over 8
//! nodes (one metric on 8 nodes, and all 40 metrics on 8 nodes), each series
//! served as 1 000 min/max/mean buckets. Run briefly:
//! `cargo bench -p sonde --bench history -- --warm-up-time 1 --measurement-time 3`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sonde::history::{History, HistoryConfig, SeriesKey};
use sonde::model::now_ns;

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;
const PER_NODE: usize = 40;

fn key(node: usize, metric: usize) -> SeriesKey {
    SeriesKey::new(
        format!("system.metric.{metric}"),
        "1",
        [
            ("host.name", format!("node-{node}")),
            ("sonde.job", "bench".to_string()),
        ],
    )
}

fn value(metric: usize, i: u64) -> f64 {
    match metric % 3 {
        0 => (i * 1_500 + (i * 2_654_435_761) % 20_000) as f64,
        1 => ((8u64 << 30) - (i / 37 * 4096) % (1 << 28)) as f64,
        _ => (((i as f64) * 0.013 + metric as f64).sin() * 0.4 + 0.5) as f32 as f64,
    }
}

/// One node's delivery: 10 ticks of `PER_NODE` series from tick `first`.
fn delivery(h: &History, keys: &[SeriesKey], start: u64, first: u64, buf: &mut Vec<(u64, f64)>) {
    for (m, k) in keys.iter().enumerate() {
        buf.clear();
        for i in first..first + 10 {
            buf.push((start + i * 100 * MS + (i * 7_919) % MS, value(m, i)));
        }
        h.append(k, buf).unwrap();
    }
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let h = History::open(&HistoryConfig::default(), dir.path()).unwrap();
    let nodes = 256;
    let keys: Vec<Vec<SeriesKey>> = (0..nodes).map(|n| (0..PER_NODE).map(|m| key(n, m)).collect()).collect();
    let start = now_ns() - 3_600 * S;
    let mut buf = Vec::with_capacity(10);
    let mut turn = 0u64;
    let mut g = c.benchmark_group("history");
    g.throughput(Throughput::Elements((10 * PER_NODE) as u64));
    g.bench_function(
        "append one agent's 400 points (256 agents x 40 series take turns)",
        |b| {
            b.iter(|| {
                let node = (turn % nodes as u64) as usize;
                let first = turn / nodes as u64 * 10;
                delivery(&h, &keys[node], start, first, &mut buf);
                turn += 1;
            })
        },
    );
    g.finish();
    let st = h.stats();
    eprintln!(
        "after the append bench: {} points, {} bytes on disk, {} in memory",
        st.points_appended, st.disk_bytes, st.memory_bytes
    );
    drop(h);

    // An hour of 8 nodes x 40 series at 100 ms, then the job view.
    let dir = tempfile::tempdir().unwrap();
    let h = History::open(&HistoryConfig::default(), dir.path()).unwrap();
    let start = now_ns() - 3_600 * S;
    for sec in 0..3_600u64 {
        for node_keys in keys.iter().take(8) {
            delivery(&h, node_keys, start, sec * 10, &mut buf);
        }
    }
    h.flush();
    let ids: Vec<Vec<u32>> = (0..8)
        .map(|n| keys[n].iter().map(|k| h.id_of(k).unwrap()).collect())
        .collect();
    let now_ms = now_ns() / MS;
    let (from, to, step) = (now_ms - 3_600_000, now_ms, 3_600);
    let mut metric = 0;
    c.bench_function("history: query 1 h of one metric on 8 nodes (8 x 1 000 buckets)", |b| {
        b.iter(|| {
            metric = (metric + 1) % PER_NODE;
            let n: usize = ids
                .iter()
                .map(|node| h.query(node[metric], from, to, step).t.len())
                .sum();
            assert!(n >= 7_900, "{n}");
            n
        })
    });
    c.bench_function(
        "history: query 1 h of 40 metrics on 8 nodes (320 x 1 000 buckets)",
        |b| {
            b.iter(|| {
                let n: usize = ids
                    .iter()
                    .flatten()
                    .map(|&id| h.query(id, from, to, step).t.len())
                    .sum();
                assert!(n >= 316_000, "{n}");
                n
            })
        },
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
