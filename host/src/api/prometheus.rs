//! `GET /metrics`: the newest reading of every live series in Prometheus'
//! text exposition format (version 0.0.4), for a Prometheus (or a
//! ServiceMonitor, or VictoriaMetrics' scraper) that pulls instead of
//! taking remote-write.
//!
//! Names and labels are the remote-write exporter's
//! ([`crate::export::remote_write::series_labels`]), so a series reads the
//! same whether it was pushed or scraped: `hw.power` (W) is `hw_power_watts`,
//! a counter gains `_total`, a gauge of unit `1` `_ratio`, attribute keys
//! have `_` for `.`. There is no resource here: the scraper gives `job` and
//! `instance` from its target, as it does for any exporter.
//!
//! What is served: each series of the live store with a reading in the last
//! [`FRESH_MS`] (Prometheus' own lookback: an older reading would read as
//! current to a query), with the reading's own timestamp, since sonde
//! samples faster than anyone scrapes and the scrape time is not when the
//! value was read. A counter's value is its cumulative reading, not the rate
//! the dashboard shows. sonde's own health series (`export.self_metrics_*`)
//! are in the live store like the rest, so they are served too.
//!
//! Auth: a read, open like every other `GET` of the API (see `mod.rs`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::Api;
use super::live::Latest;
use crate::export::remote_write::series_labels;
use crate::model::MetricKind;

/// Readings older than this are left out (ms).
pub const FRESH_MS: u64 = 5 * 60 * 1000;

/// The content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub async fn metrics(State(api): State<Api>) -> Response {
    let since = (crate::model::now_ns() / 1_000_000).saturating_sub(FRESH_MS);
    let live = api.live.clone();
    // The store's lock and the formatting stay off the async threads.
    let body = tokio::task::spawn_blocking(move || exposition(&live.latest(since)))
        .await
        .unwrap_or_default();
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response()
}

/// One family: its type and its samples (labels without `__name__`, time, value).
type Family = (&'static str, BTreeMap<Vec<(String, String)>, (u64, f64)>);

/// The text format of `latest`: one `# TYPE` line per metric name, its
/// samples after it, families and samples in a stable order. Series that
/// translate to the same labels (two plugins emitting one name) give one
/// sample, the newest.
pub fn exposition(latest: &[Latest]) -> String {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for s in latest {
        let Some(labels) = series_labels(&s.name, &s.unit, s.kind, &s.attributes, &[], &[]) else {
            continue;
        };
        let mut name = String::new();
        let rest: Vec<(String, String)> = labels
            .into_iter()
            .filter(|(k, v)| {
                if k == "__name__" {
                    name.clone_from(v);
                    false
                } else {
                    true
                }
            })
            .collect();
        let kind = match s.kind {
            MetricKind::Counter => "counter",
            MetricKind::Gauge | MetricKind::UpDownCounter => "gauge",
        };
        let family = families.entry(name).or_insert_with(|| (kind, BTreeMap::new()));
        let slot = family.1.entry(rest).or_insert((s.time_ms, s.value));
        if s.time_ms > slot.0 {
            *slot = (s.time_ms, s.value);
        }
    }
    let mut out = String::new();
    for (name, (kind, samples)) in &families {
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, (time_ms, value)) in samples {
            out.push_str(name);
            if !labels.is_empty() {
                out.push('{');
                for (i, (k, v)) in labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{k}=\"{}\"", escape(v));
                }
                out.push('}');
            }
            let _ = writeln!(out, " {} {time_ms}", number(*value));
        }
    }
    out
}

/// A label value with `\`, `"` and line feeds escaped.
fn escape(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// A value as the format spells it (Go's float parsing reads Rust's shortest
/// round-trip decimal back to the same bits).
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else {
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn latest(name: &str, unit: &str, kind: MetricKind, attrs: &[(&str, &str)], time_ms: u64, value: f64) -> Latest {
        Latest {
            name: name.into(),
            unit: unit.into(),
            kind,
            attributes: attrs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            time_ms,
            value,
        }
    }

    #[test]
    fn families_are_typed_named_as_remote_write_names_them_and_grouped() {
        let text = exposition(&[
            latest("hw.power", "W", MetricKind::Gauge, &[("hw.id", "GPU-1")], 1_000, 250.5),
            latest("hw.energy", "J", MetricKind::Counter, &[("hw.id", "GPU-1")], 1_000, 1e6),
            latest("hw.power", "W", MetricKind::Gauge, &[("hw.id", "GPU-0")], 1_100, 80.0),
            latest("system.cpu.utilization", "1", MetricKind::Gauge, &[], 900, 0.25),
        ]);
        assert_eq!(
            text,
            "# TYPE hw_energy_joules_total counter\n\
             hw_energy_joules_total{hw_id=\"GPU-1\"} 1000000 1000\n\
             # TYPE hw_power_watts gauge\n\
             hw_power_watts{hw_id=\"GPU-0\"} 80 1100\n\
             hw_power_watts{hw_id=\"GPU-1\"} 250.5 1000\n\
             # TYPE system_cpu_utilization_ratio gauge\n\
             system_cpu_utilization_ratio 0.25 900\n"
        );
    }

    #[test]
    fn values_are_escaped_and_duplicates_keep_the_newest() {
        let text = exposition(&[
            latest("a.b", "", MetricKind::Gauge, &[("k", "say \"hi\"\\\n")], 5, f64::NAN),
            latest("c", "", MetricKind::Gauge, &[], 5, 1.0),
            latest("c", "", MetricKind::Gauge, &[], 7, f64::INFINITY),
            latest("c", "", MetricKind::Gauge, &[], 6, 3.0),
        ]);
        assert_eq!(
            text,
            "# TYPE a_b gauge\na_b{k=\"say \\\"hi\\\"\\\\\\n\"} NaN 5\n# TYPE c gauge\nc +Inf 7\n"
        );
    }
}
