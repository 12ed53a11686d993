//! Data types shared by the sources, the plugin runtime and the pipeline.
//!
//! These are the host-side mirrors of the WIT types in `wit/sonde-plugin.wit`,
//! kept free of wasmtime so that the sampler and the exporters do not depend
//! on the plugin runtime. What the sampler hands the plugins (series, ticks)
//! is serde-serializable: a recording (`plugin::recording`) is written from
//! these types and read back into them.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// An attribute value (the WIT `value` variant). In JSON, the bare value
/// (`"eth0"`, `3`, `0.5`, `true`); an integer stays an integer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AttrValue {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl AttrValue {
    /// The value as text, as a label or key carries it (`3`, `0.5`, `true`).
    pub fn text(&self) -> String {
        match self {
            AttrValue::Str(s) => s.clone(),
            AttrValue::Int(i) => i.to_string(),
            AttrValue::Float(f) => f.to_string(),
            AttrValue::Bool(b) => b.to_string(),
        }
    }
}

impl From<&str> for AttrValue {
    fn from(s: &str) -> Self {
        AttrValue::Str(s.to_string())
    }
}
impl From<String> for AttrValue {
    fn from(s: String) -> Self {
        AttrValue::Str(s)
    }
}
impl From<i64> for AttrValue {
    fn from(v: i64) -> Self {
        AttrValue::Int(v)
    }
}
impl From<bool> for AttrValue {
    fn from(v: bool) -> Self {
        AttrValue::Bool(v)
    }
}

/// Key/value attributes, in a stable order.
pub type Attributes = Vec<(String, AttrValue)>;

/// How a sampled series behaves (the WIT `series-kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SeriesKind {
    Gauge,
    Counter,
}

/// One series the sampler produces (the WIT `series-info`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SeriesInfo {
    /// Dense index into `Tick::values`; stable for the life of the process.
    pub id: u32,
    pub metric: String,
    pub unit: String,
    pub kind: SeriesKind,
    pub attributes: Attributes,
}

/// One sampling tick: every series read at (about) the same instant.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Tick {
    /// Wall-clock time of the reading, ns since the Unix epoch.
    pub time_ns: u64,
    /// Indexed by `SeriesInfo::id`; NaN where a value could not be read
    /// (`null` in JSON, which has no NaN).
    #[serde(with = "nan_as_null")]
    pub values: Vec<f64>,
}

/// Sampled values in JSON: a value that could not be read (NaN) is `null`.
mod nan_as_null {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(values: &[f64], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(values.iter().map(|v| v.is_finite().then_some(*v)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
        let values: Vec<Option<f64>> = Vec::deserialize(d)?;
        Ok(values.into_iter().map(|v| v.unwrap_or(f64::NAN)).collect())
    }
}

/// OpenTelemetry instrument kinds (the WIT `metric-kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetricKind {
    Gauge,
    /// Cumulative, monotonic sum.
    Counter,
    /// Cumulative, non-monotonic sum.
    UpDownCounter,
}

/// Who produced telemetry: becomes the OTLP instrumentation scope.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Scope {
    pub name: String,
    pub version: String,
}

/// A metric plus a fixed attribute set: what one `declare-metric` returns.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricSeries {
    pub name: String,
    pub description: String,
    pub unit: String,
    pub kind: MetricKind,
    pub attributes: Attributes,
    /// Start of the cumulative period for counters, ns since the Unix epoch.
    pub start_time_ns: u64,
}

/// One metric data point.
#[derive(Clone, Debug)]
pub struct Point {
    pub series: Arc<MetricSeries>,
    pub time_ns: u64,
    pub value: f64,
}

/// Points from one scope, handed to the pipeline in one piece.
#[derive(Clone, Debug)]
pub struct MetricBatch {
    pub scope: Arc<Scope>,
    pub points: Vec<Point>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

/// A log record (the WIT `log-record`); decisions travel as log records too.
#[derive(Clone, Debug)]
pub struct LogRecord {
    pub time_ns: u64,
    pub severity: Severity,
    /// Exported as the `event.name` attribute when not empty.
    pub event_name: String,
    pub body: String,
    pub attributes: Attributes,
}

/// Log records from one scope.
#[derive(Clone, Debug)]
pub struct LogBatch {
    pub scope: Arc<Scope>,
    pub records: Vec<LogRecord>,
}

/// Wall clock now, ns since the Unix epoch.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
