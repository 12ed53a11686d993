//! The in-process Rust API's hot path: `record_timing` and `update_batch_idx`
//! on a `ProfilerAgent` attached to a hub, as a training loop calls them.
//! Floor from the issue: ≤ 50 ns per `record_timing`.
//!
//! Calls are timed in chunks of 10 000 with a hand-over to the hub between
//! chunks (untimed), as the host's hub does every `ingest.flush_ms`: a tight
//! loop of millions of calls between hand-overs would measure a buffer that
//! real training loops never build (and then the drop path). A second group
//! runs the same calls with a thread handing over every 5 ms concurrently,
//! so the lock is sometimes contended.
//!
//! `cargo bench -p sonde --bench agent`

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use sonde::agent::{ProfilerAgent, Timing};
use sonde::ingest::IngestHub;
use sonde::plugin::DecisionBoard;

fn agent_hot_path(c: &mut Criterion) {
    let hub = IngestHub::new(1 << 20, Arc::new(|_b| 1));
    let board = DecisionBoard::default();
    let agent = ProfilerAgent::builder("bench")
        .rank(0)
        .local_rank(0)
        .capacity(1 << 22)
        .attach(&hub, &board);
    let mut t = Timing::new("train_batch");
    t.start();
    t.end();
    let mut dynamic = Timing::new(String::from("callbacks.Checkpoint.on_batch_end"));
    dynamic.start();
    dynamic.end();
    // `iters` calls in chunks, each followed by an untimed hand-over.
    let chunked = |iters: u64, call: &mut dyn FnMut(u64)| {
        let mut spent = Duration::ZERO;
        let mut done = 0;
        while done < iters {
            let n = (iters - done).min(10_000);
            let t0 = Instant::now();
            for i in 0..n {
                call(done + i);
            }
            spent += t0.elapsed();
            done += n;
            hub.flush();
        }
        spent
    };
    let mut g = c.benchmark_group("agent");
    g.bench_function("record_timing", |b| {
        b.iter_custom(|iters| chunked(iters, &mut |_| agent.record_timing(black_box(&t))))
    });
    g.bench_function("record_timing_owned_name", |b| {
        b.iter_custom(|iters| chunked(iters, &mut |_| agent.record_timing(black_box(&dynamic))))
    });
    g.bench_function("update_batch_idx", |b| {
        b.iter_custom(|iters| chunked(iters, &mut |i| agent.update_batch_idx(black_box(i))))
    });
    // Concurrent hand-overs: the lock is sometimes held by the flusher.
    let stop = Arc::new(AtomicBool::new(false));
    let flusher = {
        let (hub, stop) = (hub.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(5));
                hub.flush();
            }
        })
    };
    g.bench_function("record_timing_concurrent_handover", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            let mut done = 0;
            while done < iters {
                let n = (iters - done).min(10_000);
                let t0 = Instant::now();
                for _ in 0..n {
                    agent.record_timing(black_box(&t));
                }
                spent += t0.elapsed();
                done += n;
                // Let the flusher keep up, as a training step between calls would.
                std::thread::sleep(Duration::from_micros(200));
            }
            spent
        })
    });
    g.finish();
    stop.store(true, Ordering::Relaxed);
    let _ = flusher.join();
    println!(
        "agent: {} rows handed over, {} dropped",
        hub.stats().agent.rows,
        agent.dropped()
    );
}

criterion_group!(benches, agent_hot_path);
criterion_main!(benches);
