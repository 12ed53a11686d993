//! The body of `POST /api/ingest` as sent: one struct per fixed list, and
//! every other key kept as rows of the event table it names. Only the
//! shape is checked here (unknown fields refused); `convert.rs` checks the
//! values.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};

use super::stacks::{JsonModule, JsonStack};
use crate::ingest::Origin;

/// Rows one request may carry.
pub const MAX_ROWS: usize = 100_000;

#[derive(Default)]
pub struct Body {
    pub origin: JsonOrigin,
    pub progress: Vec<JsonProgress>,
    pub timings: Vec<JsonTiming>,
    pub points: Vec<JsonPoint>,
    pub events: Vec<JsonEvent>,
    pub heartbeats: Vec<JsonHeartbeat>,
    pub node_events: Vec<JsonNodeEvent>,
    /// A probe's new call stacks and its module map (`stacks.rs`).
    pub stacks: Vec<JsonStack>,
    pub modules: Vec<JsonModule>,
    /// Every other key: rows of the event table it names, in body order.
    pub tables: Vec<(String, Vec<serde_json::Map<String, serde_json::Value>>)>,
}

// By hand rather than derived: the keys that are not the body's own are
// tables, known only at run time, and each list is read straight into its
// type (no intermediate tree of the whole body).
impl<'de> Deserialize<'de> for Body {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct BodyVisitor;
        impl<'de> Visitor<'de> for BodyVisitor {
            type Value = Body;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an ingest body (a JSON object)")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Body, A::Error> {
                let mut b = Body::default();
                while let Some(key) = m.next_key::<String>()? {
                    match key.as_str() {
                        "origin" => b.origin = m.next_value()?,
                        "progress" => b.progress = m.next_value()?,
                        "timings" => b.timings = m.next_value()?,
                        "points" => b.points = m.next_value()?,
                        "events" => b.events = m.next_value()?,
                        "heartbeats" => b.heartbeats = m.next_value()?,
                        "node_events" => b.node_events = m.next_value()?,
                        "stacks" => b.stacks = m.next_value()?,
                        "modules" => b.modules = m.next_value()?,
                        _ => {
                            let rows = m.next_value()?;
                            b.tables.push((key, rows));
                        }
                    }
                }
                Ok(b)
            }
        }
        d.deserialize_map(BodyVisitor)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JsonOrigin {
    pub job: String,
    pub node: String,
    pub role: String,
    pub index: i32,
    pub rank: i32,
    pub local_rank: i32,
    pub attributes: BTreeMap<String, String>,
}

impl Default for JsonOrigin {
    fn default() -> Self {
        let o = Origin::default();
        JsonOrigin {
            job: o.job,
            node: o.node,
            role: o.role,
            index: o.index,
            rank: o.rank,
            local_rank: o.local_rank,
            attributes: BTreeMap::new(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonProgress {
    #[serde(default = "batch_idx")]
    pub name: String,
    pub value: u64,
    pub time_ns: Option<u64>,
}

fn batch_idx() -> String {
    "batch_idx".into()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonTiming {
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub batch_idx: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonPoint {
    pub metric: String,
    #[serde(default)]
    pub unit: String,
    /// "gauge" (default) or "counter" (cumulative).
    #[serde(default)]
    pub kind: JsonKind,
    pub value: f64,
    pub time_ns: Option<u64>,
    #[serde(default)]
    pub attributes: BTreeMap<String, serde_json::Value>,
}

#[derive(Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum JsonKind {
    #[default]
    Gauge,
    Counter,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonEvent {
    pub name: String,
    pub time_ns: Option<u64>,
    #[serde(default)]
    pub body: String,
    #[serde(default)]
    pub attributes: BTreeMap<String, serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonHeartbeat {
    pub time_ns: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonNodeEvent {
    pub kind: String,
    pub time_ns: Option<u64>,
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub attributes: BTreeMap<String, serde_json::Value>,
}
