//! The WIT `event-batch` the hub is filling: reports appended as columns,
//! with origins, names and point series interned, and rows of event tables
//! as typed columns of their declaration.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use rustc_hash::FxHasher;

use super::report::{ForeignSeries, Origin, Report};
use super::tables::{TableDecl, TableRows};
use crate::model::{AttrValue, Attributes, SeriesKind};
use crate::plugin::bindings::types;
use crate::plugin::tables::{Cell, ColumnType};

/// The batch being built, with its interning tables.
#[derive(Default)]
pub(super) struct Pending {
    pub(super) batch: types::EventBatch,
    origins: HashMap<Origin, u32>,
    names: HashMap<String, u32>,
    series: HashMap<ForeignSeries, u32, BuildHasherDefault<FxHasher>>,
    /// Where each declaration's rows go in `batch.tables`, by the
    /// declaration's address (kept alive in `decls`): a table redeclared
    /// while rows wait gets an entry of its own, with its own columns.
    tables: HashMap<usize, usize>,
    decls: Vec<Arc<TableDecl>>,
    pub(super) rows: usize,
}

fn empty_column(ty: ColumnType) -> types::TableColumn {
    use types::TableColumn as C;
    match ty {
        ColumnType::U8 => C::U8s(Vec::new()),
        ColumnType::U32 => C::U32s(Vec::new()),
        ColumnType::U64 => C::U64s(Vec::new()),
        ColumnType::S32 => C::S32s(Vec::new()),
        ColumnType::S64 => C::S64s(Vec::new()),
        ColumnType::F64 => C::F64s(Vec::new()),
        ColumnType::Boolean => C::Booleans(Vec::new()),
        ColumnType::String => C::Strings(Vec::new()),
        ColumnType::Timestamp => C::Timestamps(Vec::new()),
    }
}

/// Appends a typed cell (`ColumnType::take` made it fit); `name` is a string
/// cell's index in `event-batch.names`.
fn push_cell(column: &mut types::TableColumn, cell: &Cell, name: u32) {
    use types::TableColumn as C;
    match column {
        C::U8s(v) => v.push(cell.u() as u8),
        C::U32s(v) => v.push(cell.u() as u32),
        C::U64s(v) | C::Timestamps(v) => v.push(cell.u()),
        C::S32s(v) => v.push(cell.i() as i32),
        C::S64s(v) => v.push(cell.i()),
        C::F64s(v) => v.push(cell.f()),
        C::Booleans(v) => v.push(cell.b()),
        C::Strings(v) => v.push(name),
    }
}

fn wit_value(v: &AttrValue) -> types::Value {
    match v {
        AttrValue::Str(s) => types::Value::Str(s.clone()),
        AttrValue::Int(i) => types::Value::Int(*i),
        AttrValue::Float(f) => types::Value::Float(*f),
        AttrValue::Bool(b) => types::Value::Boolean(*b),
    }
}

fn wit_attributes(attrs: &Attributes) -> Vec<types::Attribute> {
    attrs
        .iter()
        .map(|(k, v)| types::Attribute {
            key: k.clone(),
            value: wit_value(v),
        })
        .collect()
}

impl Pending {
    fn origin(&mut self, o: &Origin) -> u32 {
        if let Some(&i) = self.origins.get(o) {
            return i;
        }
        let i = self.batch.origins.len() as u32;
        self.batch.origins.push(types::Origin {
            job: o.job.clone(),
            node: o.node.clone(),
            role: o.role.clone(),
            index: o.index,
            rank: o.rank,
            local_rank: o.local_rank,
            attributes: o
                .attributes
                .iter()
                .map(|(k, v)| types::Attribute {
                    key: k.clone(),
                    value: types::Value::Str(v.clone()),
                })
                .collect(),
        });
        self.origins.insert(o.clone(), i);
        i
    }

    fn name(&mut self, n: &str) -> u32 {
        if let Some(&i) = self.names.get(n) {
            return i;
        }
        let i = self.batch.names.len() as u32;
        self.batch.names.push(n.to_string());
        self.names.insert(n.to_string(), i);
        i
    }

    fn series(&mut self, s: &ForeignSeries) -> u32 {
        if let Some(&i) = self.series.get(s) {
            return i;
        }
        let i = self.batch.point_series.len() as u32;
        self.batch.point_series.push(types::SeriesInfo {
            id: i,
            metric: s.metric.clone(),
            unit: s.unit.clone(),
            kind: match s.kind {
                SeriesKind::Gauge => types::SeriesKind::Gauge,
                SeriesKind::Counter => types::SeriesKind::Counter,
            },
            attributes: wit_attributes(&s.attributes),
        });
        self.series.insert(s.clone(), i);
        i
    }

    pub(super) fn add(&mut self, r: &Report) {
        let o = self.origin(&r.origin);
        if !r.progress.is_empty() {
            for p in &r.progress {
                let name = self.name(&p.name);
                let c = self.batch.progress.get_or_insert_with(|| types::ProgressColumns {
                    origin: Vec::new(),
                    name: Vec::new(),
                    time: Vec::new(),
                    value: Vec::new(),
                });
                c.origin.push(o);
                c.name.push(name);
                c.time.push(p.time);
                c.value.push(p.value);
            }
        }
        for t in &r.timings {
            let name = self.name(&t.name);
            let c = self.batch.timings.get_or_insert_with(|| types::TimingColumns {
                origin: Vec::new(),
                name: Vec::new(),
                start: Vec::new(),
                end: Vec::new(),
                step: Vec::new(),
            });
            c.origin.push(o);
            c.name.push(name);
            c.start.push(t.start);
            c.end.push(t.end);
            c.step.push(t.step);
        }
        // Each of the report's series is looked up once, not once per point.
        let ids: Vec<u32> = r.series.iter().map(|s| self.series(s)).collect();
        for p in &r.points {
            let Some(&s) = ids.get(p.series as usize) else { continue };
            let c = self.batch.points.get_or_insert_with(|| types::PointColumns {
                origin: Vec::new(),
                series: Vec::new(),
                time: Vec::new(),
                value: Vec::new(),
            });
            c.origin.push(o);
            c.series.push(s);
            c.time.push(p.time);
            c.value.push(p.value);
        }
        if !r.heartbeats.is_empty() {
            let c = self.batch.heartbeats.get_or_insert_with(|| types::HeartbeatColumns {
                origin: Vec::new(),
                time: Vec::new(),
            });
            for &t in &r.heartbeats {
                c.origin.push(o);
                c.time.push(t);
            }
        }
        for e in &r.node_events {
            self.batch.node_events.push(types::NodeEvent {
                origin: o,
                time: e.time,
                kind: e.kind.clone(),
                exit_code: e.exit_code,
                reason: e.reason.clone(),
                attributes: wit_attributes(&e.attributes),
            });
        }
        for e in &r.custom {
            self.batch.custom.push(types::CustomEvent {
                origin: o,
                time: e.time,
                name: e.name.clone(),
                attributes: wit_attributes(&e.attributes),
                body: e.body.clone(),
            });
        }
        for t in &r.tables {
            self.add_table(o, t);
        }
        self.rows += r.rows();
    }

    /// Appends one origin's typed rows to their table's columns. Rows as
    /// sent (a table no plugin here declares) are not delivered.
    fn add_table(&mut self, origin: u32, t: &TableRows) {
        let Some(decl) = &t.decl else { return };
        if t.rows.is_empty() {
            return;
        }
        let key = Arc::as_ptr(decl) as usize;
        let at = match self.tables.get(&key) {
            Some(&i) => i,
            None => {
                let i = self.batch.tables.len();
                self.batch.tables.push(types::TableRows {
                    name: decl.name.clone(),
                    column_names: decl.column_names(),
                    origin: Vec::new(),
                    columns: decl.columns.iter().map(|c| empty_column(c.ty)).collect(),
                });
                self.tables.insert(key, i);
                self.decls.push(decl.clone());
                i
            }
        };
        for row in &t.rows {
            for (c, cell) in row.iter().enumerate() {
                let name = match cell {
                    Cell::S(s) => self.name(s),
                    _ => 0,
                };
                push_cell(&mut self.batch.tables[at].columns[c], cell, name);
            }
            self.batch.tables[at].origin.push(origin);
        }
    }
}
