//! otlp-loadgen: sends OTLP/gRPC metric exports as fast as a receiver takes
//! them, from `--concurrency` connections, for `--seconds`, and prints one
//! JSON line: requests and points accepted, refused, failed, and the rate.
//!
//! Each request carries `--points` gauge points spread over `--series`
//! series (metric `loadgen.value`, attribute `series` = 0..N), in one
//! resource (`service.name` = otlp-loadgen). The requests are built once and
//! sent again and again with fresh timestamps, so the generator spends its
//! CPU on the wire rather than on building messages.
//!
//!   otlp-loadgen --endpoint http://127.0.0.1:4317 --seconds 10 --points 1000 --series 100 --concurrency 4
//!
//! `--agents N` paces the load like N sonde agents instead: each sends, every
//! `--interval-ms` (default 5 000, the agents' export interval), one request
//! with `--series` series (default 40) sampled every `--period-ms` (100), from
//! its own `host.name` (`agent-<i>`) with `sonde.agent = true`, the shape an
//! agent's export has. Agents start spread over the first interval.
//!
//!   otlp-loadgen --endpoint http://127.0.0.1:4317 --agents 256 --series 40 --seconds 60
//!
//! `--backfill-seconds S` (with `--agents`) first sends the past S seconds of
//! the first `--backfill-agents K` agents (default 8), as fast as the receiver
//! takes them, so that a query over the last hour has an hour of data to read
//! without waiting an hour. It reports those points separately.
//!
//! `--ops-ranks N` is a training job of N ranks reporting its operations as
//! spans of the `ops` table instead, a step a second (see `ops.rs`):
//!
//!   otlp-loadgen --endpoint http://127.0.0.1:4317 --ops-ranks 1024 --seconds 120 --slow-rank 200 --slow-after-s 60
//!
//! `otlp-loadgen --sink 127.0.0.1:4417` is the other end instead: a blackhole
//! receiver for an exporter under test (see `sink.rs`).

mod ops;
mod sink;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

struct Args {
    endpoint: String,
    agents: usize,
    interval_ms: u64,
    period_ms: u64,
    seconds: f64,
    points: usize,
    series: usize,
    concurrency: usize,
    backfill_seconds: u64,
    backfill_agents: usize,
    ops: ops::OpsArgs,
}

fn usage(problem: &str) -> ! {
    eprintln!(
        "otlp-loadgen: {problem}\nusage: otlp-loadgen --endpoint URL [--seconds 10] [--points 1000] [--series 100] [--concurrency 4]\n       otlp-loadgen --endpoint URL --agents N [--series 40] [--interval-ms 5000] [--period-ms 100] [--seconds 60]\n       otlp-loadgen --endpoint URL --ops-ranks N [--ops-pp 4] [--ops-tp 8] [--ops-micro 4] [--ranks-per-node 8] [--job NAME] [--step-ms 1000] [--slow-rank R --slow-after-s S --slow-factor 2] [--seconds 60]\n       otlp-loadgen --sink ADDR"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args {
        endpoint: String::new(),
        agents: 0,
        interval_ms: 5_000,
        period_ms: 100,
        seconds: 10.0,
        points: 1000,
        series: 100,
        concurrency: 4,
        backfill_seconds: 0,
        backfill_agents: 8,
        ops: ops::OpsArgs {
            endpoint: String::new(),
            ranks: 0,
            pp: 4,
            tp: 8,
            micro: 4,
            ranks_per_node: 8,
            job: "ops-load".into(),
            step_ms: 1000,
            seconds: 0.0,
            slow_rank: None,
            slow_after_s: 0.0,
            slow_factor: 2.0,
        },
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        let num = |v: &str| {
            v.parse::<f64>()
                .unwrap_or_else(|_| usage(&format!("{flag}: not a number: {v}")))
        };
        match flag.as_str() {
            "--endpoint" => a.endpoint = value,
            "--seconds" => a.seconds = num(&value),
            "--points" => a.points = num(&value) as usize,
            "--series" => a.series = num(&value) as usize,
            "--concurrency" => a.concurrency = num(&value) as usize,
            "--agents" => a.agents = num(&value) as usize,
            "--interval-ms" => a.interval_ms = num(&value) as u64,
            "--period-ms" => a.period_ms = num(&value) as u64,
            "--backfill-seconds" => a.backfill_seconds = num(&value) as u64,
            "--backfill-agents" => a.backfill_agents = num(&value) as usize,
            "--ops-ranks" => a.ops.ranks = num(&value) as u32,
            "--ops-pp" => a.ops.pp = num(&value) as u32,
            "--ops-tp" => a.ops.tp = num(&value) as u32,
            "--ops-micro" => a.ops.micro = num(&value) as u32,
            "--ranks-per-node" => a.ops.ranks_per_node = num(&value) as u32,
            "--job" => a.ops.job = value,
            "--step-ms" => a.ops.step_ms = num(&value) as u64,
            "--slow-rank" => a.ops.slow_rank = Some(num(&value) as u32),
            "--slow-after-s" => a.ops.slow_after_s = num(&value),
            "--slow-factor" => a.ops.slow_factor = num(&value),
            _ => usage(&format!("unknown flag {flag}")),
        }
    }
    if a.endpoint.is_empty() {
        usage("--endpoint is required");
    }
    if a.points == 0
        || a.series == 0
        || a.concurrency == 0
        || a.seconds <= 0.0
        || a.interval_ms == 0
        || a.period_ms == 0
    {
        usage("--points, --series, --concurrency and --seconds must be positive");
    }
    let o = &mut a.ops;
    if o.ranks > 0 {
        if o.pp == 0 || o.tp == 0 || o.micro == 0 || o.ranks_per_node == 0 || o.step_ms == 0 {
            usage("--ops-pp, --ops-tp, --ops-micro, --ranks-per-node and --step-ms must be positive");
        }
        if !o.ranks.is_multiple_of(o.pp * o.tp) {
            usage("--ops-ranks must be a multiple of --ops-pp × --ops-tp");
        }
        if o.slow_rank.is_some_and(|r| r >= o.ranks) {
            usage("--slow-rank must be one of the job's ranks");
        }
        o.endpoint = a.endpoint.clone();
        o.seconds = a.seconds;
    }
    a
}

fn string_kv(key: &str, value: String) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value)),
        }),
    }
}

/// One request: `points` gauge points, round-robin over `series` series.
fn request(points: usize, series: usize, worker: usize) -> ExportMetricsServiceRequest {
    let data_points = (0..points)
        .map(|i| NumberDataPoint {
            attributes: vec![string_kv("series", (i % series).to_string())],
            time_unix_nano: 0,
            value: Some(number_data_point::Value::AsDouble(i as f64)),
            ..Default::default()
        })
        .collect();
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    string_kv("service.name", "otlp-loadgen".into()),
                    string_kv("host.name", format!("loadgen-{worker}")),
                ],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "otlp-loadgen".into(),
                    ..Default::default()
                }),
                metrics: vec![Metric {
                    name: "loadgen.value".into(),
                    unit: "1".into(),
                    data: Some(metric::Data::Gauge(Gauge { data_points })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn stamp(req: &mut ExportMetricsServiceRequest) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    for rm in &mut req.resource_metrics {
        for sm in &mut rm.scope_metrics {
            for m in &mut sm.metrics {
                if let Some(metric::Data::Gauge(g)) = &mut m.data {
                    for (i, p) in g.data_points.iter_mut().enumerate() {
                        p.time_unix_nano = now + i as u64;
                    }
                }
            }
        }
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64
}

/// One agent's export: `series` series × (interval / period) points each,
/// the newest at `now` (ns), from host `agent-<i>`.
fn agent_request(
    agent: usize,
    series: usize,
    interval_ms: u64,
    period_ms: u64,
    now: u64,
) -> ExportMetricsServiceRequest {
    let n = (interval_ms / period_ms).max(1);
    let metrics = (0..series)
        .map(|s| Metric {
            name: format!("system.bench.s{s}"),
            unit: "1".into(),
            data: Some(metric::Data::Gauge(Gauge {
                data_points: (0..n)
                    .map(|k| NumberDataPoint {
                        time_unix_nano: now - (n - 1 - k) * period_ms * 1_000_000,
                        value: Some(number_data_point::Value::AsDouble(
                            ((agent + s) as u64 * 7 + k) as f64 % 100.0,
                        )),
                        ..Default::default()
                    })
                    .collect(),
            })),
            ..Default::default()
        })
        .collect();
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    string_kv("service.name", "sonde".into()),
                    string_kv("host.name", format!("agent-{agent}")),
                    KeyValue {
                        key: "sonde.agent".into(),
                        value: Some(AnyValue {
                            value: Some(any_value::Value::BoolValue(true)),
                        }),
                    },
                ],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "sonde.plugin.sysmetrics".into(),
                    ..Default::default()
                }),
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// The past `backfill_seconds` of the first `backfill_agents` agents, one
/// export interval per request, oldest first, agents in parallel; returns the
/// points accepted.
async fn backfill(a: &Args, counts: Arc<Counts>) -> u64 {
    let end = now_ns();
    let steps = a.backfill_seconds * 1000 / a.interval_ms;
    let mut tasks = Vec::new();
    for agent in 0..a.backfill_agents.min(a.agents) {
        let (endpoint, counts) = (a.endpoint.clone(), counts.clone());
        let (series, interval_ms, period_ms) = (a.series, a.interval_ms, a.period_ms);
        tasks.push(tokio::spawn(async move {
            let Ok(client) = MetricsServiceClient::connect(endpoint).await else {
                counts.failed.fetch_add(1, Ordering::Relaxed);
                return 0;
            };
            let mut client = client.max_decoding_message_size(64 << 20);
            let mut sent = 0;
            for k in (1..=steps).rev() {
                let req = agent_request(agent, series, interval_ms, period_ms, end - k * interval_ms * 1_000_000);
                match client.export(req).await {
                    Ok(_) => sent += (series as u64) * (interval_ms / period_ms).max(1),
                    Err(_) => {
                        counts.failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            sent
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap_or(0);
    }
    total
}

/// Paced like `agents` sonde agents until the deadline.
async fn run_agents(a: &Args, counts: Arc<Counts>) {
    let deadline = Instant::now() + Duration::from_secs_f64(a.seconds);
    let mut tasks = Vec::new();
    for agent in 0..a.agents {
        let (endpoint, counts) = (a.endpoint.clone(), counts.clone());
        let (series, interval_ms, period_ms, agents) = (a.series, a.interval_ms, a.period_ms, a.agents as u64);
        tasks.push(tokio::spawn(async move {
            // Spread the agents' sends over the first interval, as real agents drift apart.
            tokio::time::sleep(Duration::from_millis(interval_ms * agent as u64 / agents)).await;
            let Ok(client) = MetricsServiceClient::connect(endpoint.clone()).await else {
                counts.failed.fetch_add(1, Ordering::Relaxed);
                return;
            };
            let mut client = client.max_decoding_message_size(64 << 20);
            let mut tick = tokio::time::interval(Duration::from_millis(interval_ms));
            loop {
                tick.tick().await;
                if Instant::now() >= deadline {
                    return;
                }
                let req = agent_request(agent, series, interval_ms, period_ms, now_ns());
                let points = (series as u64) * (interval_ms / period_ms).max(1);
                match client.export(req).await {
                    Ok(_) => {
                        counts.requests_ok.fetch_add(1, Ordering::Relaxed);
                        counts.points_ok.fetch_add(points, Ordering::Relaxed);
                    }
                    Err(status) if status.code() == tonic::Code::ResourceExhausted => {
                        counts.refused.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        counts.failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

#[derive(Default)]
struct Counts {
    requests_ok: AtomicU64,
    points_ok: AtomicU64,
    points_rejected: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
}

#[tokio::main]
async fn main() {
    let mut argv = std::env::args().skip(1);
    if argv.next().as_deref() == Some("--sink") {
        let addr = argv.next().unwrap_or_default();
        let addr = addr
            .parse()
            .unwrap_or_else(|_| usage(&format!("--sink needs an address such as 127.0.0.1:4417, not {addr:?}")));
        return sink::run(addr).await;
    }
    let a = parse_args();
    if a.ops.ranks > 0 {
        return ops::run(a.ops).await;
    }
    let counts = Arc::new(Counts::default());
    if a.agents > 0 {
        let b0 = Instant::now();
        let backfilled = if a.backfill_seconds > 0 {
            backfill(&a, counts.clone()).await
        } else {
            0
        };
        let backfill_s = b0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        run_agents(&a, counts.clone()).await;
        let secs = t0.elapsed().as_secs_f64();
        let points_ok = counts.points_ok.load(Ordering::Relaxed);
        println!(
            "{}",
            serde_json::json!({
                "agents": a.agents,
                "seconds": secs,
                "requests_ok": counts.requests_ok.load(Ordering::Relaxed),
                "points_ok": points_ok,
                "requests_refused": counts.refused.load(Ordering::Relaxed),
                "requests_failed": counts.failed.load(Ordering::Relaxed),
                "points_per_second": points_ok as f64 / secs,
                "backfilled_points": backfilled,
                "backfill_seconds_taken": backfill_s,
            })
        );
        return;
    }
    let deadline = Instant::now() + Duration::from_secs_f64(a.seconds);
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..a.concurrency {
        let endpoint = a.endpoint.clone();
        let counts = counts.clone();
        let (points, series) = (a.points, a.series);
        tasks.push(tokio::spawn(async move {
            let mut client = match MetricsServiceClient::connect(endpoint.clone()).await {
                Ok(c) => c.max_decoding_message_size(64 << 20),
                Err(e) => {
                    eprintln!("otlp-loadgen: cannot connect to {endpoint}: {e}");
                    counts.failed.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            };
            let mut req = request(points, series, worker);
            while Instant::now() < deadline {
                stamp(&mut req);
                match client.export(req.clone()).await {
                    Ok(resp) => {
                        let rejected = resp.into_inner().partial_success.map_or(0, |p| p.rejected_data_points);
                        counts.requests_ok.fetch_add(1, Ordering::Relaxed);
                        counts
                            .points_ok
                            .fetch_add(points as u64 - rejected as u64, Ordering::Relaxed);
                        counts.points_rejected.fetch_add(rejected as u64, Ordering::Relaxed);
                    }
                    Err(status) if status.code() == tonic::Code::ResourceExhausted => {
                        // The receiver is full: back off a little, as an SDK would.
                        counts.refused.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    Err(status) => {
                        counts.failed.fetch_add(1, Ordering::Relaxed);
                        if counts.failed.load(Ordering::Relaxed) <= 3 {
                            eprintln!("otlp-loadgen: export failed: {status}");
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let secs = t0.elapsed().as_secs_f64();
    let points_ok = counts.points_ok.load(Ordering::Relaxed);
    println!(
        "{}",
        serde_json::json!({
            "seconds": secs,
            "requests_ok": counts.requests_ok.load(Ordering::Relaxed),
            "points_ok": points_ok,
            "points_rejected": counts.points_rejected.load(Ordering::Relaxed),
            "requests_refused": counts.refused.load(Ordering::Relaxed),
            "requests_failed": counts.failed.load(Ordering::Relaxed),
            "points_per_second": points_ok as f64 / secs,
        })
    );
}
