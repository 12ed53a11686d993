//! The host's own metrics (`export.self_metrics_interval_ms`): per plugin
//! (calls, traps, memory, ...), the sampler's ticks and period error, what
//! the receivers cut or refused, and the exporter's and spool's counters.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::ingest::IngestHub;
use crate::model::{MetricBatch, MetricKind, MetricSeries, Point, Scope, now_ns};
use crate::pipeline::PipelineHandle;
use crate::plugin::PluginManager;
use crate::sample::driver;

/// Exports the host's own metrics: per plugin (calls, traps, ...), the
/// sampler's period error and the exporter's counters.
pub(super) async fn self_metrics_loop(
    plugins: Arc<PluginManager>,
    hub: Arc<IngestHub>,
    pipeline: PipelineHandle,
    sampler: Arc<Mutex<Option<driver::SamplerHandle>>>,
    every: Duration,
) {
    let scope = Arc::new(Scope {
        name: "sonde.host".into(),
        version: env!("CARGO_PKG_VERSION").into(),
    });
    let start = now_ns();
    // Each series is made once, kept by plugin name ("" for the host's own)
    // and then metric name, so a round finds them without building a key.
    let mut series: std::collections::HashMap<String, std::collections::HashMap<&'static str, Arc<MetricSeries>>> =
        Default::default();
    let mut get = |name: &'static str, unit: &str, kind: MetricKind, plugin: &str| {
        if let Some(s) = series.get(plugin).and_then(|by_name| by_name.get(name)) {
            return s.clone();
        }
        let s = Arc::new(MetricSeries {
            name: name.into(),
            description: String::new(),
            unit: unit.into(),
            kind,
            attributes: match plugin {
                "" => Vec::new(),
                p => vec![("sonde.plugin.name".to_string(), p.into())],
            },
            start_time_ns: start,
        });
        series.entry(plugin.to_string()).or_default().insert(name, s.clone());
        s
    };
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        tick.tick().await;
        let t = now_ns();
        use MetricKind::{Counter, Gauge, UpDownCounter};
        let mut points = Vec::new();
        // One point per plugin and metric: (name, unit, kind, value).
        plugins.each_metrics(|plugin, running, m| {
            for (name, unit, kind, value) in [
                ("sonde.plugin.calls", "{call}", Counter, m.calls as f64),
                ("sonde.plugin.items", "{item}", Counter, m.items as f64),
                ("sonde.plugin.errors", "{error}", Counter, m.errors as f64),
                ("sonde.plugin.traps", "{trap}", Counter, m.traps as f64),
                ("sonde.plugin.timeouts", "{timeout}", Counter, m.timeouts as f64),
                ("sonde.plugin.dropped", "{item}", Counter, m.dropped as f64),
                ("sonde.plugin.memory.usage", "By", UpDownCounter, m.memory_bytes as f64),
                ("sonde.plugin.call.duration.p99", "s", Gauge, m.call_us_p99 / 1e6),
                ("sonde.plugin.running", "1", Gauge, running as u8 as f64),
            ] {
                points.push(Point {
                    series: get(name, unit, kind, plugin),
                    time_ns: t,
                    value,
                });
            }
        });
        // The host's own rows: (name, unit, kind, value).
        let mut rows: Vec<(&'static str, &str, MetricKind, f64)> = Vec::new();
        if let Some(s) = sampler.lock().as_ref().map(|s| s.stats()) {
            rows.extend([
                ("sonde.sampler.ticks", "{tick}", Counter, s.ticks as f64),
                ("sonde.sampler.period_error.p99", "s", Gauge, s.error_p99_us / 1e6),
                ("sonde.sampler.sample_cost.p50", "s", Gauge, s.sample_cost_p50_us / 1e6),
            ]);
        }
        // What the receivers cut to their limits, and whom they turned away
        // (on a master: agents with a wrong token or certificate), so a
        // dashboard or alert can see it.
        let i = hub.stats();
        let unauthorized = i.otlp.unauthorized + i.json.unauthorized;
        rows.extend([
            (
                "sonde.ingest.truncated",
                "{value}",
                Counter,
                (i.otlp.truncated + i.json.truncated + i.agent.truncated) as f64,
            ),
            ("sonde.ingest.unauthorized", "{request}", Counter, unauthorized as f64),
            ("sonde.ingest.tls_refused", "{handshake}", Counter, i.tls_refused as f64),
        ]);
        let e = pipeline.stats();
        rows.extend([
            (
                "sonde.export.points.dropped",
                "{point}",
                Counter,
                e.points_dropped as f64,
            ),
            ("sonde.export.points.failed", "{point}", Counter, e.points_failed as f64),
            (
                "sonde.export.points.exported",
                "{point}",
                Counter,
                e.points_exported as f64,
            ),
        ]);
        if e.spool_enabled {
            rows.extend([
                ("sonde.export.spool.bytes", "By", Gauge, e.spooled_bytes as f64),
                (
                    "sonde.export.spool.requests",
                    "{request}",
                    Gauge,
                    e.spooled_requests as f64,
                ),
                (
                    "sonde.export.spool.corrupt",
                    "{record}",
                    Counter,
                    e.spool_corrupt_records as f64,
                ),
            ]);
        }
        points.extend(rows.into_iter().map(|(name, unit, kind, value)| Point {
            series: get(name, unit, kind, ""),
            time_ns: t,
            value,
        }));
        pipeline.submit_metrics(MetricBatch {
            scope: scope.clone(),
            points,
        });
    }
}
