//! A parsed body checked and converted into a [`Report`]: names and
//! attributes against `ingest.max_*`, rows of event tables typed by their
//! declarations one by one (a bad row is refused alone), call-stack ids
//! taken out of the rows for `stacks.rs` to name.

use std::collections::BTreeMap;

use super::body::{Body, JsonKind, MAX_ROWS};
use super::stacks::{ProbeStacks, STACK_FIELD, StackRef};
use crate::ingest::error::{Invalid, invalid};
use crate::ingest::limits::Limits;
use crate::ingest::tables::{Cell, TableRegistry, TableRows, type_row, unknown_table};
use crate::ingest::{CustomEvent, ForeignPoint, ForeignSeries, NodeEvent, Origin, Progress, Report, Timing};
use crate::model::{AttrValue, Attributes, SeriesKind};

fn check_name(limits: &Limits, field: String, name: &str) -> Result<(), Invalid> {
    if name.trim().is_empty() {
        return Err(invalid(field, "must not be empty"));
    }
    limits.check_name(field, name)
}

fn attributes(limits: &Limits, field: &str, m: BTreeMap<String, serde_json::Value>) -> Result<Attributes, Invalid> {
    limits.check_attributes(field, m.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
    m.into_iter()
        .map(|(k, v)| {
            let v = match v {
                serde_json::Value::String(s) => AttrValue::Str(s),
                serde_json::Value::Bool(b) => AttrValue::Bool(b),
                serde_json::Value::Number(n) => match n.as_i64() {
                    Some(i) => AttrValue::Int(i),
                    None => AttrValue::Float(n.as_f64().unwrap_or(f64::NAN)),
                },
                _ => {
                    return Err(invalid(
                        format!("{field}.attributes.{k}"),
                        "must be a string, number or boolean",
                    ));
                }
            };
            Ok((k, v))
        })
        .collect()
}

/// A JSON value as a cell of a row; `None` for `null` (the field is left out).
fn cell(v: serde_json::Value) -> Result<Option<Cell>, String> {
    use serde_json::Value as V;
    Ok(Some(match v {
        V::Null => return Ok(None),
        V::Bool(b) => Cell::B(b),
        V::String(s) => Cell::S(s),
        V::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => Cell::U(u),
            (_, Some(i)) => Cell::I(i),
            _ => Cell::F(n.as_f64().unwrap_or(f64::NAN)),
        },
        V::Array(_) | V::Object(_) => return Err("must be a number, a string or a boolean".into()),
    }))
}

/// What a body became: its report, the table rows it refused (the rest is
/// kept), and the rows that named a call stack.
pub struct Converted {
    pub report: Report,
    /// Why rows were refused: one entry per row, or per table nobody declares.
    pub refused: Vec<Invalid>,
    /// How many rows those are.
    pub refused_rows: usize,
    pub stacks: ProbeStacks,
}

/// Where a body's table rows are typed: the declared tables, and whether
/// rows of other tables are kept as sent (an agent).
pub struct TableRules<'a> {
    pub registry: &'a TableRegistry,
    pub keep_unknown: bool,
}

impl Body {
    pub fn rows(&self) -> usize {
        self.progress.len()
            + self.timings.len()
            + self.points.len()
            + self.events.len()
            + self.heartbeats.len()
            + self.node_events.len()
            + self.tables.iter().map(|t| t.1.len()).sum::<usize>()
    }

    /// Validates every row and converts. An invalid row of a fixed list
    /// refuses the body (`Err`, naming it); rows of tables are refused one
    /// by one (`Converted::refused`).
    pub fn convert(self, now: u64, limits: &Limits, tables: &TableRules) -> Result<Converted, Invalid> {
        for (i, s) in self.stacks.iter().enumerate() {
            s.check(i)?;
        }
        for (i, m) in self.modules.iter().enumerate() {
            m.check(i)?;
        }
        let mut probe = ProbeStacks {
            modules: self.modules,
            stacks: self.stacks,
            refs: Vec::new(),
        };
        let table_rows = self.tables;
        let fixed = Body {
            origin: self.origin,
            progress: self.progress,
            timings: self.timings,
            points: self.points,
            events: self.events,
            heartbeats: self.heartbeats,
            node_events: self.node_events,
            ..Default::default()
        };
        if fixed.rows() + table_rows.iter().map(|t| t.1.len()).sum::<usize>() > MAX_ROWS {
            return Err(invalid(
                "(body)",
                format!(
                    "{} rows; at most {MAX_ROWS} per request",
                    fixed.rows() + table_rows.iter().map(|t| t.1.len()).sum::<usize>()
                ),
            ));
        }
        let mut report = fixed.into_report(now, limits)?;
        let mut refused = Vec::new();
        let mut refused_rows = 0;
        for (table, rows) in table_rows {
            let (sent, kept) = (rows.len(), report.rows());
            add_table_rows(
                &mut report,
                &mut refused,
                &mut probe.refs,
                &table,
                rows,
                now,
                limits,
                tables,
            );
            refused_rows += sent - (report.rows() - kept);
        }
        Ok(Converted {
            report,
            refused,
            refused_rows,
            stacks: probe,
        })
    }

    pub(super) fn into_report(self, now: u64, limits: &Limits) -> Result<Report, Invalid> {
        if self.rows() > MAX_ROWS {
            return Err(invalid(
                "(body)",
                format!("{} rows; at most {MAX_ROWS} per request", self.rows()),
            ));
        }
        let o = self.origin;
        for (k, v) in [
            ("origin.rank", o.rank),
            ("origin.local_rank", o.local_rank),
            ("origin.index", o.index),
        ] {
            if v < -1 {
                return Err(invalid(k, format!("{v}: must be >= 0 (or -1 for unknown)")));
            }
        }
        for (k, v) in [
            ("origin.job", &o.job),
            ("origin.node", &o.node),
            ("origin.role", &o.role),
        ] {
            limits.check_name(k, v)?;
        }
        limits.check_attributes(
            "origin",
            o.attributes.iter().map(|(k, v)| (k.as_str(), Some(v.as_str()))),
        )?;
        let mut r = Report {
            origin: Origin {
                job: o.job,
                node: o.node,
                role: o.role,
                index: o.index,
                rank: o.rank,
                local_rank: o.local_rank,
                attributes: o.attributes.into_iter().collect(),
            },
            ..Default::default()
        };
        for (i, p) in self.progress.into_iter().enumerate() {
            check_name(limits, format!("progress[{i}].name"), &p.name)?;
            r.progress.push(Progress {
                name: p.name,
                time: p.time_ns.unwrap_or(now),
                value: p.value,
            });
        }
        for (i, t) in self.timings.into_iter().enumerate() {
            check_name(limits, format!("timings[{i}].name"), &t.name)?;
            if t.end_ns < t.start_ns {
                return Err(invalid(format!("timings[{i}].end_ns"), "is before start_ns"));
            }
            let step = match t.batch_idx {
                Some(b) if b > i64::MAX as u64 => {
                    return Err(invalid(format!("timings[{i}].batch_idx"), "too large"));
                }
                Some(b) => b as i64,
                None => -1,
            };
            r.timings.push(Timing {
                name: t.name,
                start: t.start_ns,
                end: t.end_ns,
                step,
            });
        }
        for (i, p) in self.points.into_iter().enumerate() {
            check_name(limits, format!("points[{i}].metric"), &p.metric)?;
            limits.check_name(format!("points[{i}].unit"), &p.unit)?;
            if !p.value.is_finite() {
                return Err(invalid(format!("points[{i}].value"), "must be a finite number"));
            }
            // One series per point; the hub interns equal ones.
            r.series.push(ForeignSeries {
                attributes: attributes(limits, &format!("points[{i}]"), p.attributes)?,
                metric: p.metric,
                unit: p.unit,
                kind: match p.kind {
                    JsonKind::Gauge => SeriesKind::Gauge,
                    JsonKind::Counter => SeriesKind::Counter,
                },
            });
            r.points.push(ForeignPoint {
                series: r.series.len() as u32 - 1,
                time: p.time_ns.unwrap_or(now),
                value: p.value,
            });
        }
        for (i, e) in self.events.into_iter().enumerate() {
            check_name(limits, format!("events[{i}].name"), &e.name)?;
            limits.check_text(format!("events[{i}].body"), &e.body)?;
            r.custom.push(CustomEvent {
                attributes: attributes(limits, &format!("events[{i}]"), e.attributes)?,
                time: e.time_ns.unwrap_or(now),
                name: e.name,
                body: e.body,
            });
        }
        r.heartbeats = self.heartbeats.iter().map(|h| h.time_ns.unwrap_or(now)).collect();
        for (i, e) in self.node_events.into_iter().enumerate() {
            check_name(limits, format!("node_events[{i}].kind"), &e.kind)?;
            limits.check_text(format!("node_events[{i}].reason"), &e.reason)?;
            r.node_events.push(NodeEvent {
                attributes: attributes(limits, &format!("node_events[{i}]"), e.attributes)?,
                time: e.time_ns.unwrap_or(now),
                kind: e.kind,
                exit_code: e.exit_code,
                reason: e.reason,
            });
        }
        Ok(r)
    }
}

/// Types one table's rows from a body into `report`; refused rows (or the
/// whole table, when no plugin declares it) go to `refused`. A row's `stack`
/// is taken out and remembered in `refs`.
#[allow(clippy::too_many_arguments)]
fn add_table_rows(
    report: &mut Report,
    refused: &mut Vec<Invalid>,
    refs: &mut Vec<StackRef>,
    table: &str,
    rows: Vec<serde_json::Map<String, serde_json::Value>>,
    now: u64,
    limits: &Limits,
    rules: &TableRules,
) {
    if rows.is_empty() {
        return;
    }
    let decl = rules.registry.get(table);
    if decl.is_none() && !rules.keep_unknown {
        let mut e = unknown_table(table, rules.registry);
        e.reason = format!("{} rows refused: {}", rows.len(), e.reason);
        refused.push(e);
        return;
    }
    let group = report.tables.len();
    let mut typed = decl.clone().map(TableRows::typed);
    for (i, mut row) in rows.into_iter().enumerate() {
        let at = |column: &str| format!("{table}[{i}].{column}");
        let stack = match row.remove(STACK_FIELD) {
            None | Some(serde_json::Value::Null) => None,
            Some(v) => match v.as_u64().and_then(|v| u32::try_from(v).ok()) {
                Some(id) => Some(id),
                None => {
                    refused.push(invalid(
                        at(STACK_FIELD),
                        format!("{v}: must be a call-stack id (0 to 4294967295)"),
                    ));
                    continue;
                }
            },
        };
        let thread = row.get("thread").and_then(|v| v.as_u64()).unwrap_or(0) as u32;
        let mut fields = Vec::with_capacity(row.len());
        let mut bad = None;
        for (k, v) in row {
            match cell(v) {
                Ok(Some(c)) => fields.push((k, c)),
                Ok(None) => {}
                Err(reason) => {
                    bad = Some(invalid(at(&k), reason));
                    break;
                }
            }
        }
        if let Some(e) = bad {
            refused.push(e);
            continue;
        }
        let row_index = match (&decl, &mut typed) {
            (Some(decl), Some(t)) => {
                match type_row(
                    decl,
                    fields.iter().map(|(k, c)| (k.as_str(), c.clone())),
                    now,
                    limits.attribute_value,
                ) {
                    Ok(cells) => {
                        t.rows.push(cells);
                        t.received.push(now);
                        t.rows.len() - 1
                    }
                    Err((column, reason)) => {
                        refused.push(invalid(at(&column), reason));
                        continue;
                    }
                }
            }
            _ => {
                // Kept as sent (an agent): the master types it.
                let strings_fit = fields
                    .iter()
                    .all(|(_, c)| !matches!(c, Cell::S(s) if s.len() > limits.attribute_value));
                if !strings_fit {
                    refused.push(invalid(at("(text)"), "a text over ingest.max_attribute_value_bytes"));
                    continue;
                }
                report.add_row_as_sent(table, fields, now);
                let g = report.tables.len() - 1;
                if let Some(id) = stack {
                    refs.push(StackRef {
                        group: g,
                        row: report.tables[g].rows.len() - 1,
                        thread,
                        id,
                    });
                }
                continue;
            }
        };
        if let Some(id) = stack {
            refs.push(StackRef {
                group,
                row: row_index,
                thread,
                id,
            });
        }
    }
    if let Some(t) = typed.filter(|t| !t.rows.is_empty()) {
        report.tables.push(t);
    }
}
