//! The `Report`: everything one source hands in at once, from one origin.
//! The one neutral type between the ingest formats: each receiver builds
//! it from its wire format, the hub takes it, taps and forwarders read it.
//! Plain data, so that it depends on no receiver and on nothing of the hub.

use serde::Serialize;

use super::tables::{self, TableRows};
use crate::model::{AttrValue, Attributes, SeriesKind};
use crate::plugin::tables::Cell;

/// Who reported: a job's process (the WIT `origin`). -1 = unknown index / rank.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Origin {
    pub job: String,
    pub node: String,
    pub role: String,
    pub index: i32,
    pub rank: i32,
    pub local_rank: i32,
    /// Extra identifying attributes, as strings.
    pub attributes: Vec<(String, String)>,
}

impl Default for Origin {
    fn default() -> Self {
        Origin {
            job: String::new(),
            node: String::new(),
            role: String::new(),
            index: -1,
            rank: -1,
            local_rank: -1,
            attributes: Vec::new(),
        }
    }
}

/// A progress report (the batch index is `name == "batch_idx"`).
#[derive(Clone, Debug, PartialEq)]
pub struct Progress {
    pub name: String,
    pub time: u64,
    pub value: u64,
}

/// A timed span of work; `step` is the batch index it belongs to, or -1.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    pub name: String,
    pub start: u64,
    pub end: u64,
    pub step: i64,
}

/// A series of points from elsewhere (an SDK's metric, another sonde's export).
#[derive(Clone, Debug)]
pub struct ForeignSeries {
    pub metric: String,
    pub unit: String,
    pub kind: SeriesKind,
    pub attributes: Attributes,
}

// Equal and hashed by content, float attributes by their bits, so that the hub
// can intern series (a NaN attribute is still the same series as itself).
impl PartialEq for ForeignSeries {
    fn eq(&self, o: &Self) -> bool {
        self.metric == o.metric
            && self.unit == o.unit
            && self.kind == o.kind
            && self.attributes.len() == o.attributes.len()
            && self.attributes.iter().zip(&o.attributes).all(|((ka, va), (kb, vb))| {
                ka == kb
                    && match (va, vb) {
                        (AttrValue::Float(a), AttrValue::Float(b)) => a.to_bits() == b.to_bits(),
                        _ => va == vb,
                    }
            })
    }
}
impl Eq for ForeignSeries {}

impl std::hash::Hash for ForeignSeries {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.metric.hash(h);
        self.unit.hash(h);
        (self.kind == SeriesKind::Counter).hash(h);
        for (k, v) in &self.attributes {
            k.hash(h);
            match v {
                AttrValue::Str(s) => s.hash(h),
                AttrValue::Int(i) => i.hash(h),
                AttrValue::Float(f) => f.to_bits().hash(h),
                AttrValue::Bool(b) => b.hash(h),
            }
        }
    }
}

/// A point of one of the report's `series` (an index into it).
#[derive(Clone, Debug, PartialEq)]
pub struct ForeignPoint {
    pub series: u32,
    pub time: u64,
    pub value: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct NodeEvent {
    pub time: u64,
    pub kind: String,
    pub exit_code: Option<i32>,
    pub reason: String,
    pub attributes: Attributes,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CustomEvent {
    pub time: u64,
    pub name: String,
    pub body: String,
    pub attributes: Attributes,
}

/// Everything one source hands in at once, from one origin.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    pub origin: Origin,
    pub progress: Vec<Progress>,
    pub timings: Vec<Timing>,
    /// The series `points` refer to.
    pub series: Vec<ForeignSeries>,
    pub points: Vec<ForeignPoint>,
    pub heartbeats: Vec<u64>,
    pub node_events: Vec<NodeEvent>,
    pub custom: Vec<CustomEvent>,
    /// Rows of event tables plugins declared (`tables.rs`).
    pub tables: Vec<TableRows>,
}

impl Report {
    /// Adds a row of `table` as sent (`tables::add_row_as_sent`).
    pub fn add_row_as_sent(&mut self, table: &str, fields: Vec<(String, Cell)>, received: u64) {
        tables::add_row_as_sent(&mut self.tables, table, fields, received)
    }

    pub fn rows(&self) -> usize {
        self.progress.len()
            + self.timings.len()
            + self.points.len()
            + self.heartbeats.len()
            + self.node_events.len()
            + self.custom.len()
            + self.tables.iter().map(|t| t.rows.len()).sum::<usize>()
    }
}
