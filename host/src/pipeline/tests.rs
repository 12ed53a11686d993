//! Pipeline tests against fake collectors on 127.0.0.1 (see `export::testing`).
//! Timing checks are generous sanity bounds only.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tonic::Code;

use super::*;
use crate::export::config::Protocol;
use crate::export::otlp::metric_point_count;
use crate::export::testing::{FakeCollector, FakeState, dead_endpoint};
use crate::model::{LogRecord, MetricKind, MetricSeries, Point, Scope, Severity};
use opentelemetry_proto::tonic::metrics::v1::metric;

const WAIT: Duration = Duration::from_secs(10);

fn cfg(endpoint: Option<String>, protocol: Protocol) -> ExportConfig {
    ExportConfig {
        endpoint,
        protocol,
        timeout_ms: 2_000,
        interval_ms: 20,
        max_batch_points: 100,
        queue_capacity: 4,
        retry_initial_ms: 10,
        retry_max_ms: 40,
        retry_max_elapsed_ms: 5_000,
        ..ExportConfig::default()
    }
}

fn resource() -> Vec<(String, AttrValue)> {
    vec![("service.name".into(), AttrValue::Str("sonde-test".into()))]
}

fn scope() -> Arc<Scope> {
    Arc::new(Scope {
        name: "test".into(),
        version: "1".into(),
    })
}

fn series(i: usize) -> Arc<MetricSeries> {
    Arc::new(MetricSeries {
        name: "test.value".into(),
        description: String::new(),
        unit: "1".into(),
        kind: if i.is_multiple_of(2) {
            MetricKind::Gauge
        } else {
            MetricKind::Counter
        },
        attributes: vec![("i".into(), AttrValue::Int(i as i64))],
        start_time_ns: 1,
    })
}

/// `n` points, all stamped `t`.
fn batch(n: usize, t: u64) -> MetricBatch {
    let sc = scope();
    MetricBatch {
        scope: sc,
        points: (0..n)
            .map(|i| Point {
                series: series(i % 8),
                time_ns: t,
                value: i as f64,
            })
            .collect(),
    }
}

fn logs(n: usize) -> LogBatch {
    LogBatch {
        scope: scope(),
        records: (0..n)
            .map(|i| LogRecord {
                time_ns: 10 + i as u64,
                severity: Severity::Warn,
                event_name: "test.event".into(),
                body: format!("record {i}"),
                attributes: vec![],
            })
            .collect(),
    }
}

async fn wait_stats(h: &PipelineHandle, f: impl Fn(&ExportStats) -> bool) -> ExportStats {
    let end = Instant::now() + WAIT;
    loop {
        let st = h.stats();
        if f(&st) || Instant::now() > end {
            return st;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn conserved(st: &ExportStats) -> bool {
    st.points_in
        == st.points_exported + st.points_dropped + st.points_failed + (st.buffered_points + st.queued_points) as u64
}

/// Times of the points the collector received.
fn times(state: &FakeState) -> BTreeSet<u64> {
    let mut out = BTreeSet::new();
    for req in state.metrics.lock().iter() {
        for m in req
            .resource_metrics
            .iter()
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
        {
            match &m.data {
                Some(metric::Data::Gauge(g)) => out.extend(g.data_points.iter().map(|d| d.time_unix_nano)),
                Some(metric::Data::Sum(s)) => out.extend(s.data_points.iter().map(|d| d.time_unix_nano)),
                _ => {}
            }
        }
    }
    out
}

async fn collector(p: Protocol) -> FakeCollector {
    match p {
        Protocol::Grpc => FakeCollector::grpc().await,
        Protocol::HttpProtobuf => FakeCollector::http().await,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_delivers_over_grpc_and_http_with_headers() {
    for proto in [Protocol::Grpc, Protocol::HttpProtobuf] {
        let fc = collector(proto).await;
        let mut c = cfg(Some(fc.url()), proto);
        c.headers.insert("api-key".into(), "s3cret".into());
        let (h, p) = Pipeline::start(&c, resource()).unwrap();
        for t in 0..3 {
            h.submit_metrics(batch(50, 1000 + t));
        }
        h.submit_logs(logs(7));
        assert!(
            fc.state.wait_for(WAIT, |s| s.points() == 150 && s.records() == 7).await,
            "{proto:?}: {:?}",
            h.stats()
        );
        let st = wait_stats(&h, |s| s.points_exported == 150 && s.logs_exported == 7).await;
        assert_eq!(
            (st.points_in, st.points_exported, st.points_dropped, st.points_failed),
            (150, 150, 0, 0),
            "{proto:?}"
        );
        assert_eq!((st.logs_in, st.logs_exported), (7, 7));
        assert!(
            st.enabled && st.requests_ok >= 2 && st.last_success_ns > 0 && st.last_error.is_none(),
            "{st:?}"
        );
        let seen = fc.state.seen.lock().clone();
        assert!(
            seen.iter()
                .all(|s| s.headers.get("api-key").map(String::as_str) == Some("s3cret")),
            "{proto:?} {seen:?}"
        );
        match proto {
            Protocol::HttpProtobuf => {
                assert!(seen.iter().any(|s| s.path == "/v1/metrics"), "{seen:?}");
                assert!(seen.iter().any(|s| s.path == "/v1/logs"), "{seen:?}");
                assert!(
                    seen.iter()
                        .all(|s| s.headers.get("content-type").map(String::as_str) == Some("application/x-protobuf"))
                );
            }
            Protocol::Grpc => {
                assert!(seen.iter().any(|s| s.path == "metrics") && seen.iter().any(|s| s.path == "logs"));
            }
        }
        // resource and scope made it through
        let req = fc.state.metrics.lock()[0].clone();
        let rm = &req.resource_metrics[0];
        assert_eq!(rm.resource.as_ref().unwrap().attributes[0].key, "service.name");
        assert_eq!(rm.scope_metrics[0].scope.as_ref().unwrap().name, "test");
        let lreq = fc.state.logs.lock()[0].clone();
        let rec = &lreq.resource_logs[0].scope_logs[0].log_records[0];
        assert_eq!((rec.severity_number, rec.event_name.as_str()), (13, "test.event"));
        let st = p.shutdown(Duration::from_secs(2)).await;
        assert!(conserved(&st), "{st:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_http_per_signal_endpoint_is_used() {
    let fc = FakeCollector::http().await;
    let mut c = cfg(Some("http://127.0.0.1:1".into()), Protocol::HttpProtobuf);
    c.metrics_endpoint = Some(format!("{}/custom/metrics", fc.url()));
    let (h, p) = Pipeline::start(&c, resource()).unwrap();
    h.submit_metrics(batch(5, 1));
    assert!(fc.state.wait_for(WAIT, |s| s.points() == 5).await);
    assert_eq!(fc.state.seen.lock()[0].path, "/custom/metrics");
    p.shutdown(Duration::from_millis(500)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_splits_requests_at_max_batch_points() {
    let fc = FakeCollector::grpc().await;
    let mut c = cfg(Some(fc.url()), Protocol::Grpc);
    c.interval_ms = 60_000; // only the early wake (buffer >= max_batch_points) flushes
    let (h, p) = Pipeline::start(&c, resource()).unwrap();
    h.submit_metrics(batch(250, 7));
    assert!(fc.state.wait_for(WAIT, |s| s.points() == 250).await, "{:?}", h.stats());
    let mut sizes: Vec<_> = fc.state.metrics.lock().iter().map(metric_point_count).collect();
    // Sent at once (max_in_flight): they may arrive in any order.
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(sizes, [100, 100, 50]);
    p.shutdown(Duration::from_secs(1)).await;
}

/// Batches that come in while a flush encodes can fill a whole request before
/// the flush ends; the batcher must flush again at once rather than wait for
/// the interval (it once waited, and under an OTLP load the buffer grew to a
/// million points between two intervals).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_flushes_again_when_a_request_filled_up_during_a_flush() {
    let fc = FakeCollector::grpc().await;
    let mut c = cfg(Some(fc.url()), Protocol::Grpc);
    c.interval_ms = 60_000; // only full requests go out within the test
    c.queue_capacity = 1_000;
    let (h, p) = Pipeline::start(&c, resource()).unwrap();
    let submitter = h.clone();
    // As fast as one thread can: far more than a request arrives during each flush.
    std::thread::spawn(move || {
        for t in 0..2_000 {
            submitter.submit_metrics(batch(10, t));
        }
    })
    .join()
    .unwrap();
    let st = wait_stats(&h, |st| st.buffered_points < 100 && st.queued_points == 0).await;
    assert!(
        st.buffered_points < 100,
        "a full request waited for the interval: {st:?}"
    );
    assert_eq!(st.points_dropped, 0, "{st:?}");
    assert!(conserved(&st), "{st:?}");
    p.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_retries_unavailable_then_delivers_once() {
    for proto in [Protocol::Grpc, Protocol::HttpProtobuf] {
        let fc = collector(proto).await;
        fc.state.fail_next(2, Code::Unavailable, 503);
        let (h, p) = Pipeline::start(&cfg(Some(fc.url()), proto), resource()).unwrap();
        h.submit_metrics(batch(10, 5));
        let st = wait_stats(&h, |s| s.points_exported == 10).await;
        assert_eq!(st.points_exported, 10, "{proto:?} {st:?}");
        assert_eq!(st.retries, 2, "{proto:?} {st:?}");
        assert_eq!(
            (st.requests_ok, st.requests_failed, st.points_failed),
            (1, 0, 0),
            "{st:?}"
        );
        assert_eq!(fc.state.attempts.load(Ordering::SeqCst), 3);
        assert_eq!(fc.state.points(), 10, "arrived exactly once");
        assert!(st.last_error.is_some(), "the failures are remembered");
        p.shutdown(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_non_retryable_gives_up_at_once() {
    for proto in [Protocol::HttpProtobuf, Protocol::Grpc] {
        let fc = collector(proto).await;
        fc.state.fail_next(1, Code::InvalidArgument, 400);
        let (h, p) = Pipeline::start(&cfg(Some(fc.url()), proto), resource()).unwrap();
        h.submit_metrics(batch(10, 5));
        let st = wait_stats(&h, |s| s.points_failed == 10).await;
        assert_eq!(
            (st.points_failed, st.points_exported, st.retries, st.requests_failed),
            (10, 0, 0, 1),
            "{proto:?} {st:?}"
        );
        assert_eq!(fc.state.attempts.load(Ordering::SeqCst), 1);
        let err = st.last_error.unwrap();
        assert!(err.contains("400") || err.contains("InvalidArgument"), "{err}");
        // the sender lives on: the next batch goes through
        h.submit_metrics(batch(3, 6));
        let st = wait_stats(&h, |s| s.points_exported == 3).await;
        assert_eq!(st.points_exported, 3, "{st:?}");
        p.shutdown(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_partial_success_counts_rejected_as_failed() {
    let fc = FakeCollector::grpc().await;
    fc.state.reject.store(4, Ordering::SeqCst);
    let (h, p) = Pipeline::start(&cfg(Some(fc.url()), Protocol::Grpc), resource()).unwrap();
    h.submit_metrics(batch(10, 5));
    let st = wait_stats(&h, |s| s.points_exported + s.points_failed == 10).await;
    assert_eq!(
        (st.points_exported, st.points_failed, st.requests_ok),
        (6, 4, 1),
        "{st:?}"
    );
    assert!(st.last_error.unwrap().contains("rejected 4"));
    p.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_dead_collector_never_blocks_and_stays_bounded() {
    for proto in [Protocol::Grpc, Protocol::HttpProtobuf] {
        let mut c = cfg(Some(dead_endpoint().await), proto);
        c.retry_max_elapsed_ms = 60_000; // nothing gives up during the test
        let bound = c.max_batch_points * c.queue_capacity;
        let (h, p) = Pipeline::start(&c, resource()).unwrap();
        let t0 = Instant::now();
        let mut max_buffered = 0;
        let mut max_queued = 0;
        let mut max_queue_len = 0;
        for i in 0..10_000u64 {
            h.submit_metrics(batch(10, i));
            if i % 100 == 0 {
                let st = h.stats();
                max_buffered = max_buffered.max(st.buffered_points);
                max_queued = max_queued.max(st.queued_points);
                max_queue_len = max_queue_len.max(st.queue_len);
                tokio::task::yield_now().await;
            }
        }
        let took = t0.elapsed();
        // 10 000 submits (with 100 stats reads) are microseconds each; a generous sanity bound.
        assert!(took < Duration::from_secs(5), "{proto:?}: 10 000 submits took {took:?}");
        assert!(max_buffered <= bound, "{max_buffered} > {bound}");
        assert!(max_queue_len <= c.queue_capacity);
        let in_flight = c.in_flight() * c.max_batch_points;
        assert!(
            max_queued <= bound + in_flight,
            "queued {max_queued}: queue plus at most max_in_flight requests in flight"
        );
        // settle: the buffer drains into the queue, which stays full
        let st = wait_stats(&h, |s| s.buffered_points == 0 && conserved(s)).await;
        assert_eq!(st.points_in, 100_000);
        assert!(conserved(&st), "{proto:?}: {st:?}");
        assert!(st.points_dropped > 90_000, "{st:?}");
        assert_eq!(st.points_exported, 0);
        assert!(st.queued_points <= bound + in_flight);
        assert!(st.retries > 0 && st.last_error.is_some(), "{st:?}");
        let t1 = Instant::now();
        let st = p.shutdown(Duration::from_millis(300)).await;
        assert!(t1.elapsed() < Duration::from_secs(2));
        assert!(
            conserved(&st) && st.buffered_points == 0 && st.queued_points == 0,
            "{st:?}"
        );
        assert_eq!(st.points_exported + st.points_dropped + st.points_failed, 100_000);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_queue_full_drops_oldest() {
    let fc = FakeCollector::grpc().await;
    let mut c = cfg(Some(dead_endpoint().await), Protocol::Grpc);
    c.max_batch_points = 10;
    c.queue_capacity = 2;
    c.retry_max_elapsed_ms = 60_000;
    c.max_in_flight = Some(1);
    let (h, p) = Pipeline::start(&c, resource()).unwrap();
    // t=1 goes in flight (retrying against nothing); t=2..6 pass through a 2-deep queue.
    for t in 1..=6u64 {
        h.submit_metrics(batch(10, t));
        let st = wait_stats(&h, |s| s.buffered_points == 0).await;
        assert_eq!(st.buffered_points, 0);
        if t == 1 {
            wait_stats(&h, |s| s.queue_len == 0 && s.queued_points == 10).await;
        }
    }
    let st = h.stats();
    assert_eq!(
        (st.queue_len, st.queued_points, st.points_dropped),
        (2, 30, 30),
        "{st:?}"
    );
    // point the pipeline at a live collector: the in-flight request and the two newest arrive
    let mut live = c.clone();
    live.endpoint = Some(fc.url());
    h.reconfigure(&live).unwrap();
    assert!(fc.state.wait_for(WAIT, |s| s.points() == 30).await, "{:?}", h.stats());
    assert_eq!(times(&fc.state), BTreeSet::from([1, 5, 6]));
    let st = p.shutdown(Duration::from_secs(1)).await;
    assert_eq!((st.points_exported, st.points_dropped), (30, 30));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_sends_up_to_max_in_flight_requests_at_once() {
    for proto in [Protocol::Grpc, Protocol::HttpProtobuf] {
        let fc = collector(proto).await;
        // Slow answers: requests pile up in flight if they may.
        fc.state.delay_ms.store(1_500, Ordering::SeqCst);
        let mut c = cfg(Some(fc.url()), proto);
        c.max_batch_points = 10;
        c.queue_capacity = 16;
        c.max_in_flight = Some(3);
        let (h, p) = Pipeline::start(&c, resource()).unwrap();
        for t in 1..=7u64 {
            h.submit_metrics(batch(10, t)); // a full request each
        }
        let st = wait_stats(&h, |s| s.in_flight == 3).await;
        assert_eq!(st.in_flight, 3, "{proto:?}: three at once: {st:?}");
        assert!(conserved(&st), "{proto:?}: {st:?}");
        let mut most = 0;
        let end = Instant::now() + WAIT;
        while fc.state.points() < 70 && Instant::now() < end {
            most = most.max(h.stats().in_flight);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(fc.state.points(), 70, "{proto:?}: {:?}", h.stats());
        assert!(most <= 3, "{proto:?}: never more than max_in_flight ({most})");
        assert_eq!(times(&fc.state), (1..=7).collect::<BTreeSet<u64>>());
        let st = wait_stats(&h, |s| s.in_flight == 0).await;
        assert_eq!(
            (st.points_exported, st.requests_ok, st.queued_points),
            (70, 7, 0),
            "{st:?}"
        );
        p.shutdown(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_a_request_waiting_for_a_retry_holds_new_ones_back() {
    let fc = FakeCollector::grpc().await;
    let mut c = cfg(Some(fc.url()), Protocol::Grpc);
    c.max_batch_points = 10;
    c.max_in_flight = Some(4);
    c.retry_initial_ms = 300;
    c.retry_max_ms = 300;
    let (h, p) = Pipeline::start(&c, resource()).unwrap();
    fc.state.fail_next(1, Code::Unavailable, 503);
    h.submit_metrics(batch(10, 1));
    // t=1 failed once and waits 150-300 ms for its retry; meanwhile t=2..4 wait in the queue.
    wait_stats(&h, |s| s.retries == 1).await;
    for t in 2..=4u64 {
        h.submit_metrics(batch(10, t));
    }
    let st = wait_stats(&h, |s| s.buffered_points == 0).await;
    if st.points_exported == 0 {
        assert_eq!(
            (st.in_flight, st.queue_len),
            (1, 3),
            "held back behind the retry: {st:?}"
        );
    }
    let st = wait_stats(&h, |s| s.points_exported == 40).await;
    assert_eq!((st.points_exported, st.retries), (40, 1), "{st:?}");
    // The retried request went out first, the held-back ones after it.
    let first: Vec<u64> = fc.state.metrics.lock()[0]
        .resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .filter_map(|m| match &m.data {
            Some(metric::Data::Gauge(g)) => g.data_points.first().map(|d| d.time_unix_nano),
            _ => None,
        })
        .collect();
    assert_eq!(first.first(), Some(&1), "t=1 answered first");
    p.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_slow_collector_times_out_and_recovers() {
    for proto in [Protocol::Grpc, Protocol::HttpProtobuf] {
        let fc = collector(proto).await;
        fc.state.delay_ms.store(1_000, Ordering::SeqCst);
        let mut c = cfg(Some(fc.url()), proto);
        c.timeout_ms = 100;
        c.retry_max_elapsed_ms = 400;
        let (h, p) = Pipeline::start(&c, resource()).unwrap();
        let t0 = Instant::now();
        h.submit_metrics(batch(10, 1));
        let st = wait_stats(&h, |s| s.points_failed == 10).await;
        assert_eq!(
            (st.points_failed, st.points_exported, st.requests_failed),
            (10, 0, 1),
            "{proto:?} {st:?}"
        );
        assert!(st.retries >= 1, "timeouts are retryable: {st:?}");
        assert!(fc.state.attempts.load(Ordering::SeqCst) >= 2);
        let err = st.last_error.clone().unwrap();
        assert!(
            err.contains("timed out") || err.contains("Cancelled") || err.contains("DeadlineExceeded"),
            "{err}"
        );
        assert!(t0.elapsed() < Duration::from_secs(5), "no hang: {:?}", t0.elapsed());
        fc.state.delay_ms.store(0, Ordering::SeqCst);
        h.submit_metrics(batch(5, 2));
        let st = wait_stats(&h, |s| s.points_exported == 5).await;
        assert_eq!(st.points_exported, 5, "recovered: {st:?}");
        p.shutdown(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_shutdown_with_dead_collector_meets_deadline() {
    for proto in [Protocol::Grpc, Protocol::HttpProtobuf] {
        let mut c = cfg(Some(dead_endpoint().await), proto);
        c.retry_max_elapsed_ms = 30_000;
        c.interval_ms = 60_000;
        let (h, p) = Pipeline::start(&c, resource()).unwrap();
        h.submit_metrics(batch(250, 1)); // some queued at once (early flush)...
        h.submit_metrics(batch(30, 2)); // ...and some only buffered
        h.submit_logs(logs(3));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t0 = Instant::now();
        let st = p.shutdown(Duration::from_millis(500)).await;
        let took = t0.elapsed();
        assert!(took < Duration::from_secs(2), "{proto:?}: shutdown took {took:?}");
        assert_eq!(st.points_in, 280);
        assert_eq!(st.points_failed + st.points_dropped, 280, "{st:?}");
        assert_eq!(st.logs_failed + st.logs_dropped, 3, "{st:?}");
        assert!(conserved(&st));
        // after shutdown, submits are dropped and counted, never block
        h.submit_metrics(batch(4, 3));
        assert_eq!(h.stats().points_dropped, st.points_dropped + 4);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_shutdown_flushes_to_live_collector() {
    for proto in [Protocol::Grpc, Protocol::HttpProtobuf] {
        let fc = collector(proto).await;
        let mut c = cfg(Some(fc.url()), proto);
        c.interval_ms = 60_000; // nothing would go out before shutdown
        let (h, p) = Pipeline::start(&c, resource()).unwrap();
        h.submit_metrics(batch(50, 1));
        h.submit_logs(logs(2));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(fc.state.points(), 0);
        let st = p.shutdown(Duration::from_secs(3)).await;
        assert_eq!((st.points_exported, st.logs_exported), (50, 2), "{proto:?} {st:?}");
        assert_eq!(fc.state.points(), 50);
        assert_eq!(fc.state.records(), 2);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_subscribe_gets_batches_with_export_off() {
    let (h, p) = Pipeline::start(&cfg(None, Protocol::Grpc), resource()).unwrap();
    let mut rx = h.subscribe();
    let mut rx2 = h.clone().subscribe();
    h.submit_metrics(batch(12, 99));
    let got = tokio::time::timeout(WAIT, rx.recv()).await.unwrap().unwrap();
    assert_eq!((got.points.len(), got.points[0].time_ns), (12, 99));
    assert_eq!(
        tokio::time::timeout(WAIT, rx2.recv())
            .await
            .unwrap()
            .unwrap()
            .points
            .len(),
        12
    );
    let st = h.stats();
    assert!(!st.enabled);
    assert_eq!(
        (st.points_in, st.points_exported, st.buffered_points, st.queued_points),
        (12, 0, 0, 0)
    );
    // a lagging receiver loses items, never blocks the submitter
    for i in 0..(TAP_CAPACITY as u64 + 10) {
        h.submit_metrics(batch(1, i));
    }
    assert!(matches!(rx.recv().await, Err(broadcast::error::RecvError::Lagged(_))));
    p.shutdown(Duration::from_millis(200)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_reconfigure_switches_endpoint_and_protocol_live() {
    let a = FakeCollector::grpc().await;
    let b = FakeCollector::http().await;
    let ca = cfg(Some(a.url()), Protocol::Grpc);
    let (h, p) = Pipeline::start(&ca, resource()).unwrap();
    h.submit_metrics(batch(10, 1));
    assert!(a.state.wait_for(WAIT, |s| s.points() == 10).await);
    let mut cb = cfg(Some(b.url()), Protocol::HttpProtobuf);
    cb.headers.insert("x-tenant".into(), "t1".into());
    h.reconfigure(&cb).unwrap();
    h.submit_metrics(batch(20, 2));
    assert!(
        b.state.wait_for(WAIT, |s| s.points() == 20).await,
        "{:?} a={} b={} seen_b={:?}",
        h.stats(),
        a.state.points(),
        b.state.points(),
        b.state.seen.lock()
    );
    assert_eq!(a.state.points(), 10, "nothing more went to the old collector");
    assert_eq!(
        b.state.seen.lock()[0].headers.get("x-tenant").map(String::as_str),
        Some("t1")
    );
    // switching export off: data is no longer sent, the tap still works
    h.reconfigure(&cfg(None, Protocol::Grpc)).unwrap();
    let mut rx = h.subscribe();
    h.submit_metrics(batch(5, 3));
    assert_eq!(rx.recv().await.unwrap().points.len(), 5);
    assert!(!h.stats().enabled);
    // a bad config is refused and changes nothing
    let mut bad = cb.clone();
    bad.headers.insert("bad header".into(), "v".into());
    assert!(h.reconfigure(&bad).is_err());
    assert!(!h.stats().enabled);
    // and back on
    h.reconfigure(&ca).unwrap();
    h.submit_metrics(batch(7, 4));
    assert!(a.state.wait_for(WAIT, |s| s.points() == 17).await, "{:?}", h.stats());
    let st = p.shutdown(Duration::from_secs(1)).await;
    assert_eq!(st.points_exported, 37);
    assert_eq!(b.state.points(), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_reconfigure_rescues_requests_stuck_on_a_dead_endpoint() {
    let fc = FakeCollector::http().await;
    let mut c = cfg(Some(dead_endpoint().await), Protocol::Grpc);
    c.retry_max_elapsed_ms = 60_000;
    c.retry_initial_ms = 8_000; // stuck in a 4-8 s backoff when the switch comes
    c.retry_max_ms = 8_000;
    let (h, p) = Pipeline::start(&c, resource()).unwrap();
    h.submit_metrics(batch(10, 1));
    wait_stats(&h, |s| s.retries >= 1).await;
    let t0 = Instant::now();
    h.reconfigure(&cfg(Some(fc.url()), Protocol::HttpProtobuf)).unwrap();
    assert!(fc.state.wait_for(WAIT, |s| s.points() == 10).await);
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "did not wait out the old backoff: {:?}",
        t0.elapsed()
    );
    p.shutdown(Duration::from_secs(1)).await;
}

#[test]
fn pipeline_start_outside_a_runtime_is_an_error() {
    let err = Pipeline::start(&cfg(None, Protocol::Grpc), resource()).err().unwrap();
    assert!(err.to_string().contains("tokio runtime"), "{err}");
}

// --- the disk spool (export.spool_max_bytes > 0) ---

fn spool_cfg(endpoint: Option<String>, dir: &std::path::Path, max_bytes: u64) -> ExportConfig {
    ExportConfig {
        spool_max_bytes: max_bytes,
        spool_dir: Some(dir.to_path_buf()),
        // Would give up within the test without the spool; with it, never.
        retry_max_elapsed_ms: 50,
        ..cfg(endpoint, Protocol::Grpc)
    }
}

fn segments(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spool_holds_everything_while_the_collector_is_down_then_delivers_it_once() {
    let tmp = tempfile::tempdir().unwrap();
    let c = spool_cfg(Some(dead_endpoint().await), tmp.path(), 64 << 20);
    let (h, p) = Pipeline::start(&c, resource()).unwrap();
    // Far more than queue_capacity (4) requests of max_batch_points (100).
    for t in 0..40 {
        h.submit_metrics(batch(50, 1000 + t));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let st = wait_stats(&h, |s| s.buffered_points == 0 && s.retries >= 3).await;
    assert_eq!(st.points_in, 2000);
    assert_eq!((st.points_dropped, st.points_failed), (0, 0), "{st:?}");
    assert_eq!(st.queued_points, 2000, "{st:?}");
    assert!(
        st.spool_enabled && st.spooled_requests > 4 && st.spooled_bytes > 0,
        "{st:?}"
    );
    assert!(conserved(&st), "{st:?}");

    let fc = FakeCollector::grpc().await;
    let mut live = spool_cfg(Some(fc.url()), tmp.path(), 64 << 20);
    live.spool_max_bytes = 0; // a reconfigure leaves the spool alone
    h.reconfigure(&live).unwrap();
    assert!(fc.state.wait_for(WAIT, |s| s.points() == 2000).await, "{:?}", h.stats());
    let st = wait_stats(&h, |s| s.points_exported == 2000 && s.spooled_requests == 0).await;
    assert_eq!(
        (st.points_exported, st.queued_points, st.spooled_requests),
        (2000, 0, 0),
        "{st:?}"
    );
    assert_eq!(times(&fc.state).len(), 40, "every batch once");
    assert!(conserved(&st), "{st:?}");
    p.shutdown(Duration::from_secs(1)).await;
    assert!(segments(tmp.path()).len() <= 1, "answered segments are deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spool_keeps_what_was_refused_for_its_credentials_until_they_are_accepted() {
    for proto in [Protocol::HttpProtobuf, Protocol::Grpc] {
        let tmp = tempfile::tempdir().unwrap();
        let fc = collector(proto).await;
        // A master that does not take this agent's token yet.
        fc.state.fail_next(5, Code::Unauthenticated, 401);
        let c = ExportConfig {
            protocol: proto,
            ..spool_cfg(Some(fc.url()), tmp.path(), 64 << 20)
        };
        let (h, p) = Pipeline::start(&c, resource()).unwrap();
        h.submit_metrics(batch(10, 7));
        let st = wait_stats(&h, |s| s.points_exported == 10).await;
        assert_eq!((st.points_failed, st.points_dropped), (0, 0), "{proto:?} {st:?}");
        assert!(fc.state.attempts.load(Ordering::SeqCst) >= 6, "{proto:?}");
        p.shutdown(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spool_survives_a_kill_and_is_sent_after_the_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let c = spool_cfg(Some(dead_endpoint().await), tmp.path(), 64 << 20);
    {
        let (h, p) = Pipeline::start(&c, resource()).unwrap();
        // The logs first, on their own: once the spool holds one request they
        // are on disk (no statistic counts queued log records, so waiting for
        // the points alone let the kill below race the logs' request).
        h.submit_logs(logs(7));
        let st = wait_stats(&h, |s| s.spooled_requests == 1).await;
        assert_eq!((st.logs_in, st.spooled_requests), (7, 1), "{st:?}");
        for t in 0..10 {
            h.submit_metrics(batch(30, 1000 + t));
        }
        let st = wait_stats(&h, |s| s.buffered_points == 0 && s.queued_points == 300).await;
        assert_eq!(st.queued_points, 300, "{st:?}");
        // Dropped without shutdown: the tasks are aborted, as a SIGKILL would.
        drop(p);
    }
    let fc = FakeCollector::grpc().await;
    let (h, p) = Pipeline::start(&spool_cfg(Some(fc.url()), tmp.path(), 64 << 20), resource()).unwrap();
    assert!(
        fc.state.wait_for(WAIT, |s| s.points() == 300 && s.records() == 7).await,
        "{:?}",
        h.stats()
    );
    let st = wait_stats(&h, |s| s.points_exported == 300 && s.spooled_requests == 0).await;
    assert_eq!(
        (st.points_in, st.logs_in),
        (300, 7),
        "replayed data counts in again: {st:?}"
    );
    assert_eq!((st.points_exported, st.logs_exported, st.points_failed), (300, 7, 0));
    assert!(conserved(&st), "{st:?}");
    p.shutdown(Duration::from_secs(1)).await;

    // And a third start sends nothing again: the cursor remembered the answers.
    let fc2 = FakeCollector::grpc().await;
    let (h, p) = Pipeline::start(&spool_cfg(Some(fc2.url()), tmp.path(), 64 << 20), resource()).unwrap();
    assert_eq!(
        (h.stats().points_in, h.stats().spooled_requests),
        (0, 0),
        "{:?}",
        h.stats()
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(fc2.state.points(), 0);
    p.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spool_with_a_record_cut_short_skips_it_counts_it_and_sends_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let c = spool_cfg(Some(dead_endpoint().await), tmp.path(), 64 << 20);
    {
        let (h, p) = Pipeline::start(&c, resource()).unwrap();
        for t in 0..5 {
            h.submit_metrics(batch(100, 1000 + t)); // one request each
            wait_stats(&h, |s| s.spooled_requests == t as usize + 1).await;
        }
        drop(p);
    }
    // A crash mid-write: the last record loses its tail.
    let seg = segments(tmp.path()).pop().unwrap();
    let len = std::fs::metadata(&seg).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    let fc = FakeCollector::grpc().await;
    let (h, p) = Pipeline::start(&spool_cfg(Some(fc.url()), tmp.path(), 64 << 20), resource()).unwrap();
    let st = h.stats();
    assert_eq!((st.points_in, st.spool_corrupt_records), (400, 1), "{st:?}");
    assert!(st.spool_corrupt_bytes > 0);
    assert!(fc.state.wait_for(WAIT, |s| s.points() == 400).await);
    assert_eq!(times(&fc.state), (1000..1004).collect());
    // The counters are separate atomics: "exported" goes up a moment before
    // the queue's gauges come down, so the sum is checked once it is idle.
    let st = wait_stats(&h, |s| {
        s.points_exported == 400 && s.in_flight == 0 && s.queued_points == 0
    })
    .await;
    assert!(conserved(&st), "{st:?}");
    p.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spool_full_drops_new_requests_and_counts_them_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    // Room for a few requests of 100 points (~3-4 KB each).
    let c = spool_cfg(Some(dead_endpoint().await), tmp.path(), 16 << 10);
    let (h, p) = Pipeline::start(&c, resource()).unwrap();
    for t in 0..20 {
        h.submit_metrics(batch(100, 1000 + t));
        wait_stats(&h, |s| s.buffered_points == 0).await;
    }
    let st = wait_stats(&h, |s| s.buffered_points == 0).await;
    assert!(st.spooled_bytes <= 16 << 10, "{st:?}");
    assert!(st.points_dropped >= 1000 && st.points_dropped % 100 == 0, "{st:?}");
    assert_eq!(st.points_failed, 0);
    assert_eq!(st.queued_points as u64 + st.points_dropped, 2000, "{st:?}");
    assert!(st.last_error.as_deref().unwrap_or("").contains("spool full") || st.retries > 0);
    // The oldest were kept: they are what the collector gets.
    let kept = st.spooled_requests as u64;
    let fc = FakeCollector::grpc().await;
    h.reconfigure(&cfg(Some(fc.url()), Protocol::Grpc)).unwrap();
    assert!(fc.state.wait_for(WAIT, |s| s.points() == 100 * kept as usize).await);
    assert_eq!(times(&fc.state), (1000..1000 + kept).collect());
    let st = wait_stats(&h, |s| s.spooled_requests == 0).await;
    assert!(conserved(&st), "{st:?}");
    p.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spool_forwarded_requests_are_durable_before_forward_returns() {
    let tmp = tempfile::tempdir().unwrap();
    let c = spool_cfg(Some(dead_endpoint().await), tmp.path(), 64 << 20);
    let (sc, b) = (scope(), batch(25, 7));
    let parts = [(&*sc, b.points.as_slice())];
    let body = Bytes::from(otlp::encode_metric_parts_to_bytes(&otlp::resource(&resource()), &parts));
    {
        let (h, p) = Pipeline::start(&c, resource()).unwrap();
        assert_eq!(h.forward(Signal::Metrics, body.clone(), 25, None), Ok(()));
        assert_eq!(h.stats().spooled_requests, 1);
        drop(p); // killed right after answering the sender
    }
    let fc = FakeCollector::grpc().await;
    let (h, p) = Pipeline::start(&spool_cfg(Some(fc.url()), tmp.path(), 64 << 20), resource()).unwrap();
    assert!(fc.state.wait_for(WAIT, |s| s.points() == 25).await, "{:?}", h.stats());
    p.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_spool_refuses_a_forwarded_request_instead_of_dropping_it() {
    let tmp = tempfile::tempdir().unwrap();
    let c = spool_cfg(Some(dead_endpoint().await), tmp.path(), 64 << 10);
    let (sc, b) = (scope(), batch(25, 7));
    let parts = [(&*sc, b.points.as_slice())];
    let body = Bytes::from(otlp::encode_metric_parts_to_bytes(&otlp::resource(&resource()), &parts));
    let (h, p) = Pipeline::start(&c, resource()).unwrap();
    let mut taken = 0u64;
    let refused = loop {
        match h.forward(Signal::Metrics, body.clone(), 25, None) {
            Ok(()) => taken += 1,
            Err(e) => break e,
        }
        assert!(taken < 10_000, "never refused");
    };
    assert!(
        matches!(refused, super::Refused::Spool(ref m) if m.contains("spool full")),
        "{refused:?}"
    );
    let st = h.stats();
    assert_eq!((st.points_dropped, st.forward_refused), (0, 1), "{st:?}");
    assert_eq!(st.points_in, 25 * taken, "only what was taken counts as in");
    assert_eq!(st.spooled_requests as u64, taken);
    p.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attempt_and_a_replay_after_a_restart_carry_the_identity_it_was_queued_with() {
    use crate::export::sequence::RequestId;
    let tmp = tempfile::tempdir().unwrap();
    let (sc, b) = (scope(), batch(25, 7));
    let parts = [(&*sc, b.points.as_slice())];
    let body = Bytes::from(otlp::encode_metric_parts_to_bytes(&otlp::resource(&resource()), &parts));
    {
        let (h, p) = Pipeline::start(
            &spool_cfg(Some(dead_endpoint().await), tmp.path(), 64 << 20),
            resource(),
        )
        .unwrap();
        let id = RequestId {
            producer: "agent-x".into(),
            seq: 7,
        };
        assert_eq!(h.forward(Signal::Metrics, body.clone(), 25, Some(id)), Ok(()));
        drop(p); // killed with it spooled
    }
    let fc = FakeCollector::grpc().await;
    fc.state.fail_next(2, Code::Unavailable, 503);
    let (h, p) = Pipeline::start(&spool_cfg(Some(fc.url()), tmp.path(), 64 << 20), resource()).unwrap();
    assert!(fc.state.wait_for(WAIT, |s| s.points() == 25).await, "{:?}", h.stats());
    let seen = fc.state.seen.lock().clone();
    assert_eq!(seen.len(), 3, "two refusals and the one taken");
    for s in &seen {
        assert_eq!(
            s.headers.get("sonde-producer").map(String::as_str),
            Some("agent-x"),
            "{s:?}"
        );
        assert_eq!(s.headers.get("sonde-seq").map(String::as_str), Some("7"), "{s:?}");
    }
    // Our own requests get this process's identity, numbered from 1.
    h.submit_metrics(batch(3, 100));
    assert!(fc.state.wait_for(WAIT, |s| s.points() == 28).await);
    let last = fc.state.seen.lock().last().cloned().unwrap();
    assert_eq!(
        last.headers.get("sonde-producer").map(String::as_str),
        Some(crate::export::resource::instance_id())
    );
    assert!(
        last.headers
            .get("sonde-seq")
            .is_some_and(|n| n.parse::<u64>().unwrap() >= 1)
    );
    p.shutdown(Duration::from_secs(1)).await;
}
