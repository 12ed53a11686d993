//! Remote-write and the query client against the real engines: Debian's
//! `prometheus` (with its remote-write receiver on) and `victoria-metrics`, each
//! started here on a free loopback port with a temporary data directory. What
//! goes in through `RemoteWriter` must come back through `PromQueryClient` with
//! the same values, the same millisecond timestamps and the translated names.
//!
//! Also: the protocol as a minimal fake engine sees it (headers, body, answers
//! that are retried or not), and an engine that is down.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sonde::export::remote_write::{
    LabelSet, PromQueryClient, QueryResult, RemoteQueryConfig, RemoteSeries, RemoteWriteConfig, RemoteWriteStats,
    RemoteWriter, wire,
};
use sonde::model::{AttrValue, MetricBatch, MetricKind, MetricSeries, Point, Scope};
use sonde_test_support::engines::Engine;
use sonde_test_support::free_port;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

// ---------------------------------------------------------------- engines

/// A query client for an engine started by `sonde_test_support::engines`.
fn client(engine: &Engine) -> PromQueryClient {
    PromQueryClient::new(&RemoteQueryConfig {
        url: Some(engine.base.clone()),
        timeout_ms: 5_000,
        ..Default::default()
    })
    .unwrap()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn labels(pairs: &[(&str, &str)]) -> LabelSet {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

async fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------- round trip

/// What the round trip writes: three series of the three kinds, with values
/// that do not survive a careless conversion (fractions, negatives, large, tiny),
/// at whole-millisecond times (not whole seconds) a few minutes in the past.
///
/// These values have at most 12 significant decimal digits and a moderate
/// range within each series: VictoriaMetrics stores floats as decimals with
/// one exponent per block (1/7 comes back as 0.142857142857), Prometheus
/// stores the float64 itself. A fourth series of
/// full-precision values checks that difference: bit for bit at Prometheus,
/// to 1e-11 relative at VictoriaMetrics.
struct Written {
    /// Translated labels → samples (t ms, value), as the engine must return them.
    expected: Vec<(LabelSet, Vec<(i64, f64)>)>,
    /// The full-precision series.
    precise: (LabelSet, Vec<(i64, f64)>),
    first_ms: i64,
    last_ms: i64,
}

type Samples = Vec<(i64, f64)>;

const STEP_MS: i64 = 1_000;
const N: i64 = 30;

async fn write_known_series(url: &str) -> Written {
    let (writer, task) = RemoteWriter::start(RemoteWriteConfig {
        url: Some(url.to_string()),
        batch_max_samples: 25, // several requests, one series split across some
        flush_interval_ms: 100,
        timeout_ms: 5_000,
        ..Default::default()
    })
    .unwrap();
    // Whole seconds plus 137 ms: a query_range whose start carries the same
    // offset lands its steps exactly on the samples.
    let first_ms = (now_ms() / 1000 - 240) * 1000 + 137;
    let last_ms = first_ms + (N - 1) * STEP_MS;
    let times: Vec<i64> = (0..N).map(|i| first_ms + i * STEP_MS).collect();
    let resource_s: Vec<(String, String)> = [
        ("service.name", "sonde-rw-test"),
        ("service.instance.id", "inst-1"),
        ("host.name", "node-a"),
        ("os.type", "linux"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let base = [
        ("host_name", "node-a"),
        ("instance", "inst-1"),
        ("job", "sonde-rw-test"),
    ];
    let with_base = |extra: &[(&'static str, &'static str)]| {
        let mut l = labels(&base);
        l.extend(labels(extra));
        l
    };

    // 1. a gauge of unit 1, through push()
    let util = RemoteSeries {
        name: "sonde.test.gpu.utilization".into(),
        unit: "1".into(),
        kind: MetricKind::Gauge,
        attributes: vec![("gpu.id".into(), "0".into()), ("sonde.rank".into(), "3".into())],
        resource: resource_s.clone(),
    };
    let util_vals: Vec<f64> = (0..N).map(|i| (i as f64) / 8.0).collect();
    // 2. a monotonic counter in seconds, through push_labeled() in two pushes. (In time
    // order: samples are sorted within a request, but an engine refuses a sample
    // older than one it already has, so pushes of one series must not go back in time.)
    let cpu = RemoteSeries {
        name: "sonde.test.cpu.time".into(),
        unit: "s".into(),
        kind: MetricKind::Counter,
        attributes: vec![],
        resource: resource_s.clone(),
    };
    let cpu_vals: Vec<f64> = (0..N).map(|i| 123_456.5 + (i as f64) * 0.25).collect();

    let pairs = |vals: &[f64]| -> Vec<(u64, f64)> {
        times
            .iter()
            .zip(vals)
            .map(|(&t, &v)| (t as u64 * 1_000_000 + 999_999, v)) // sub-ms ns are cut, not rounded
            .collect()
    };
    assert!(writer.push(&util, &pairs(&util_vals)));
    let cpu_labels = writer.labels_for(&cpu).unwrap();
    assert_eq!(cpu_labels.metric_name(), "sonde_test_cpu_time_seconds_total");
    let cpu_pairs = pairs(&cpu_vals);
    let half = cpu_pairs.len() / 2;
    writer.push_labeled(&cpu_labels, &cpu_pairs[..half]);
    writer.push_labeled(&cpu_labels, &cpu_pairs[half..]);

    // 3. an up-down counter in bytes, through push_batch() with the model's types
    // -0.00325·i as the nearest float to that decimal (an integer over a power of ten),
    // 1.5e9 at odd i, 2.5e-7 at multiples of 4. (VictoriaMetrics gives the samples of
    // a block one decimal exponent: 1.5e300 beside -0.0065 would come back as 0 there.)
    let mem_vals: Vec<f64> = (0..N)
        .map(|i| match i {
            _ if i % 2 == 1 => 1.5e9,
            _ if i % 4 == 0 && i > 0 => 2.5e-7,
            _ => ((-325 * i) as f64) / 1e5,
        })
        .collect();
    let mem = Arc::new(MetricSeries {
        name: "sonde.test.memory.usage".into(),
        description: String::new(),
        unit: "By".into(),
        kind: MetricKind::UpDownCounter,
        attributes: vec![
            ("system.memory.state".into(), AttrValue::from("used")),
            ("numa.node".into(), AttrValue::Int(1)),
        ],
        start_time_ns: 0,
    });
    let batch = MetricBatch {
        scope: Arc::new(Scope {
            name: "test".into(),
            version: "0".into(),
        }),
        points: times
            .iter()
            .zip(&mem_vals)
            .map(|(&t, &v)| Point {
                series: mem.clone(),
                time_ns: t as u64 * 1_000_000,
                value: v,
            })
            .collect(),
    };
    let resource_a: Vec<(String, AttrValue)> = resource_s
        .iter()
        .map(|(k, v)| (k.clone(), AttrValue::from(v.as_str())))
        .collect();
    assert_eq!(writer.push_batch(&batch, &resource_a), 0);

    // 4. full float64 precision
    let precise = RemoteSeries {
        name: "sonde.test.precise".into(),
        unit: "".into(),
        kind: MetricKind::Gauge,
        attributes: vec![],
        resource: resource_s.clone(),
    };
    let precise_vals: Vec<f64> = (0..N).map(|i| (i as f64 + 1.0) / 7.0 + 1e9).collect();
    assert!(writer.push(&precise, &pairs(&precise_vals)));

    writer.flush();
    let total = 4 * N as u64;
    let w = writer.clone();
    let mut last = RemoteWriteStats::default();
    let done = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            last = w.stats();
            if last.sent_samples + last.failed_samples + last.dropped_samples >= total {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(done.is_ok(), "not all samples answered: {last:?}");
    assert_eq!(last.sent_samples, total, "{last:?}");
    assert_eq!(
        (last.failed_samples, last.dropped_samples, last.invalid_samples),
        (0, 0, 0),
        "{last:?}"
    );
    assert!(last.requests_ok >= 4, "batches of 25: {last:?}");
    drop(writer);
    drop(w);
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();

    let ts = |vals: &[f64]| times.iter().copied().zip(vals.iter().copied()).collect::<Vec<_>>();
    Written {
        expected: vec![
            (
                with_base(&[
                    ("__name__", "sonde_test_gpu_utilization_ratio"),
                    ("gpu_id", "0"),
                    ("sonde_rank", "3"),
                ]),
                ts(&util_vals),
            ),
            (
                with_base(&[("__name__", "sonde_test_cpu_time_seconds_total")]),
                ts(&cpu_vals),
            ),
            (
                with_base(&[
                    ("__name__", "sonde_test_memory_usage_bytes"),
                    ("system_memory_state", "used"),
                    ("numa_node", "1"),
                ]),
                ts(&mem_vals),
            ),
        ],
        precise: (with_base(&[("__name__", "sonde_test_precise")]), ts(&precise_vals)),
        first_ms,
        last_ms,
    }
}

/// Reads everything back three ways and compares exactly.
async fn read_back_and_compare(engine: &Engine, w: &Written) {
    let q = client(engine);
    let name = engine.name;
    // The engine may take a moment to make fresh data searchable.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut found: Vec<LabelSet>;
    loop {
        found = q
            .series(&[r#"{job="sonde-rw-test"}"#], w.first_ms - 60_000, w.last_ms + 60_000)
            .await
            .unwrap_or_else(|e| panic!("{name}: series: {e}"));
        if found.len() > w.expected.len() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut want: Vec<LabelSet> = w.expected.iter().map(|(l, _)| l.clone()).collect();
    want.push(w.precise.0.clone());
    found.sort();
    want.sort();
    assert_eq!(found, want, "{name}: /api/v1/series");

    // (labels, samples, bit for bit?)
    let mut checks: Vec<(&LabelSet, &Samples, bool)> = w.expected.iter().map(|(l, s)| (l, s, true)).collect();
    checks.push((&w.precise.0, &w.precise.1, name == "prometheus"));
    for (labels, samples, exact) in checks {
        let selector = selector(labels);
        // Raw samples, as stored: a range selector in an instant query.
        let window_s = (w.last_ms - w.first_ms) / 1000 + 60;
        let raw = q
            .query(&format!("{selector}[{window_s}s]"), w.last_ms + 1)
            .await
            .unwrap_or_else(|e| panic!("{name}: query: {e}"));
        let QueryResult::Matrix(m) = raw else {
            panic!("{name}: {selector}[..] gave {raw:?}")
        };
        assert_eq!(m.len(), 1, "{name}: {selector}: {m:?}");
        assert_eq!(&m[0].labels, labels, "{name}: labels");
        assert_samples_eq(name, "raw", &m[0].samples, samples, exact);

        // query_range with its steps on the sample times.
        let r = q
            .query_range(&selector, w.first_ms, w.last_ms, STEP_MS)
            .await
            .unwrap_or_else(|e| panic!("{name}: query_range: {e}"));
        assert_eq!(r.len(), 1, "{name}: {selector}: {r:?}");
        assert_eq!(&r[0].labels, labels, "{name}: query_range labels");
        assert_samples_eq(name, "query_range", &r[0].samples, samples, exact);
    }

    // Errors come back as values with the engine's message.
    let err = q.query("sum(", w.last_ms).await.unwrap_err();
    assert!(err.to_string().contains("HTTP 4"), "{name}: {err}");
}

fn selector(labels: &LabelSet) -> String {
    let inner: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{{{}}}", inner.join(","))
}

/// Same timestamps; values bit for bit, or (not `exact`) to 1e-11 relative.
fn assert_samples_eq(engine: &str, how: &str, got: &[(i64, f64)], want: &[(i64, f64)], exact: bool) {
    assert_eq!(got.len(), want.len(), "{engine} {how}: {got:?}\nwant {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.0, w.0, "{engine} {how}: timestamp");
        if !exact {
            assert!(((g.1 - w.1) / w.1).abs() < 1e-11, "{engine} {how}: {} vs {}", g.1, w.1);
            continue;
        }
        assert_eq!(
            g.1.to_bits(),
            w.1.to_bits(),
            "{engine} {how}: value at {}: {} vs {}",
            g.0,
            g.1,
            w.1
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_write_round_trip_through_prometheus() {
    let engine = Engine::prometheus();
    let written = write_known_series(&engine.write_url()).await;
    read_back_and_compare(&engine, &written).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_write_round_trip_through_victoria_metrics() {
    let engine = Engine::victoria_metrics();
    let written = write_known_series(&engine.write_url()).await;
    read_back_and_compare(&engine, &written).await;
}

// ---------------------------------------------------------------- protocol and faults

/// One request as the fake engine saw it.
#[derive(Clone, Debug)]
struct Seen {
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

/// A minimal HTTP/1.1 engine: answers the scripted statuses in turn (then 204),
/// one request per connection.
async fn fake_engine(script: Vec<u16>) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/api/v1/write", listener.local_addr().unwrap());
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let log = seen.clone();
    tokio::spawn(async move {
        let mut script = script.into_iter();
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 8192];
            let (head_end, len) = loop {
                let n = sock.read(&mut chunk).await.unwrap_or(0);
                if n == 0 {
                    break (0, 0);
                }
                buf.extend_from_slice(&chunk[..n]);
                if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&buf[..p]).to_string();
                    let len = head
                        .lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse::<usize>().ok())?
                        })
                        .unwrap_or(0);
                    break (p + 4, len);
                }
            };
            if head_end == 0 {
                continue;
            }
            while buf.len() < head_end + len {
                let n = sock.read(&mut chunk).await.unwrap_or(0);
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
            let headers = head
                .lines()
                .skip(1)
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
                .collect();
            log.lock().push(Seen {
                headers,
                body: buf[head_end..(head_end + len).min(buf.len())].to_vec(),
            });
            let status = script.next().unwrap_or(204);
            let body = if status >= 400 { "out of bounds" } else { "" };
            let resp = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = sock.write_all(resp.as_bytes()).await;
            let _ = sock.shutdown().await;
        }
    });
    (url, seen)
}

fn gauge(name: &str) -> RemoteSeries {
    RemoteSeries {
        name: name.into(),
        unit: String::new(),
        kind: MetricKind::Gauge,
        attributes: vec![("Zone".into(), "b".into()), ("a.b".into(), "x".into())],
        resource: vec![("service.name".into(), "svc".into())],
    }
}

fn fast_retries(url: &str) -> RemoteWriteConfig {
    RemoteWriteConfig {
        url: Some(url.into()),
        batch_max_samples: 10,
        queue_capacity: 100,
        flush_interval_ms: 20,
        timeout_ms: 1_000,
        retry_initial_ms: 10,
        retry_max_ms: 50,
        retry_max_elapsed_ms: 2_000,
        headers: [("X-Scope-OrgID".to_string(), "tenant-1".to_string())].into(),
        bearer_token: Some("secret".into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn remote_write_speaks_the_protocol_and_retries_only_what_it_should() {
    // 503 and 429 are retried; the third attempt is accepted.
    let (url, seen) = fake_engine(vec![503, 429]).await;
    let (w, task) = RemoteWriter::start(fast_retries(&url)).unwrap();
    w.push(&gauge("queue.depth"), &[(2_000_000, 1.0), (1_000_000, 0.5)]);
    wait_for("delivery after retries", Duration::from_secs(10), || {
        w.stats().sent_samples == 2
    })
    .await;
    let st = w.stats();
    assert_eq!((st.retries, st.requests_ok, st.failed_samples), (2, 1, 0), "{st:?}");
    assert!(st.last_error.as_deref().unwrap().contains("429"), "{st:?}");
    let seen = seen.lock().clone();
    assert_eq!(seen.len(), 3);
    let h = &seen[2].headers;
    assert_eq!(h["content-encoding"], "snappy");
    assert_eq!(h["content-type"], "application/x-protobuf");
    assert_eq!(h["x-prometheus-remote-write-version"], "0.1.0");
    assert_eq!(h["authorization"], "Bearer secret");
    assert_eq!(h["x-scope-orgid"], "tenant-1");
    let req = wire::decode(&seen[2].body).unwrap();
    assert_eq!(req.timeseries.len(), 1);
    let names: Vec<(&str, &str)> = req.timeseries[0]
        .labels
        .iter()
        .map(|l| (l.name.as_str(), l.value.as_str()))
        .collect();
    // Byte order: upper case before `__name__`.
    assert_eq!(
        names,
        vec![("Zone", "b"), ("__name__", "queue_depth"), ("a_b", "x"), ("job", "svc")]
    );
    let ts: Vec<i64> = req.timeseries[0].samples.iter().map(|s| s.timestamp).collect();
    assert_eq!(ts, vec![1, 2], "sorted by time, ns cut to ms");
    drop(w);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();

    // 400 is the engine refusing the data: counted as failed, never retried.
    let (url, seen) = fake_engine(vec![400]).await;
    let (w, task) = RemoteWriter::start(fast_retries(&url)).unwrap();
    w.push(&gauge("g"), &[(1_000_000, 1.0)]);
    wait_for("the refusal", Duration::from_secs(10), || w.stats().failed_samples == 1).await;
    let st = w.stats();
    assert_eq!((st.retries, st.requests_failed, st.sent_samples), (0, 1, 0), "{st:?}");
    assert!(st.last_error.as_deref().unwrap().contains("out of bounds"), "{st:?}");
    // The next request goes through: one bad batch does not stop the writer.
    w.push(&gauge("g"), &[(2_000_000, 2.0)]);
    wait_for("the next request", Duration::from_secs(10), || {
        w.stats().sent_samples == 1
    })
    .await;
    assert_eq!(seen.lock().len(), 2);
    w.close();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_write_down_engine_counts_retries_and_drops_and_never_blocks_push() {
    let port = free_port(); // nothing listens there
    let (w, task) = RemoteWriter::start(RemoteWriteConfig {
        retry_max_elapsed_ms: 300,
        ..fast_retries(&format!("http://127.0.0.1:{port}/api/v1/write"))
    })
    .unwrap();
    let s = gauge("down.engine");
    let started = Instant::now();
    let mut pushed = 0u64;
    for round in 0..200u64 {
        let samples: Vec<(u64, f64)> = (0..10).map(|i| ((round * 10 + i) * 1_000_000, i as f64)).collect();
        w.push(&s, &samples);
        pushed += 10;
        if round % 20 == 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // 2 000 pushes while the sender is stuck in retries: bounded by the sleeps
    // above, not by the engine (a blocking push would wait out 200 give-ups of 300 ms).
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    wait_for("a request given up", Duration::from_secs(10), || {
        w.stats().failed_samples > 0
    })
    .await;
    let st = w.stats();
    assert!(st.retries > 0, "{st:?}");
    assert!(st.dropped_samples > 0, "queue of 100 must overflow: {st:?}");
    assert!(st.queued_samples <= 100, "{st:?}");
    assert_eq!(st.sent_samples, 0);
    assert!(st.last_error.is_some());
    assert_eq!(
        st.sent_samples + st.failed_samples + st.dropped_samples + st.queued_samples + st.in_flight_samples,
        pushed,
        "every sample accounted for: {st:?}"
    );
    w.close();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
    let st = w.stats();
    assert_eq!(st.failed_samples + st.dropped_samples, pushed, "{st:?}");
}
