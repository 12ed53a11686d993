//! Rows of event tables on their way from a receiver to the plugins: the
//! part of a [`Report`] that carries them, and the one mapping of a row's
//! fields onto a declared table (`crate::plugin::tables`), by column name.
//!
//! ```text
//!  json/  a body key naming a table: its rows ──type_row──► typed rows (422 names the bad ones)
//!  otlp/  a log record or span marked `sonde.table` ──► rows as sent
//!                 └── IngestHub::type_tables ──type_row──► typed rows (bad ones skipped, counted)
//!  agent forwarding: a table this host has no plugin for stays as sent
//!                    and goes on to the master, which types it
//!  hub: typed rows ──► `event-batch.tables`, in columns
//! ```
//! A row is typed once, against the declaration current when it arrives:
//! every declared column in order, each value of its column's type (see
//! `ColumnType::take`), text within `ingest.max_attribute_value_bytes`, a
//! missing column given its default. What does not fit refuses that row
//! alone, with a reason naming the table, the row and the column.

use std::sync::Arc;

use super::error::{Invalid, invalid};
pub use crate::plugin::tables::{Cell, ColumnDefault, TableDecl, TableRegistry};

/// Rows of one event table from one origin. Typed (`decl` set): `columns`
/// are the declaration's, in order, and every value fits its column. As
/// sent (`decl` none): `columns` are the fields every one of these rows
/// named, values unchecked.
#[derive(Clone, Debug, PartialEq)]
pub struct TableRows {
    pub table: String,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
    /// When each row was received (a `received` default; an OTLP record's time).
    pub received: Vec<u64>,
    pub decl: Option<Arc<TableDecl>>,
}

impl TableRows {
    /// Rows typed by `decl`.
    pub fn typed(decl: Arc<TableDecl>) -> TableRows {
        TableRows {
            table: decl.name.clone(),
            columns: decl.column_names(),
            rows: Vec::new(),
            received: Vec::new(),
            decl: Some(decl),
        }
    }
}

/// Adds a row as sent to `tables` (a report's), to the last group of
/// `table` when it named the same fields (a sender's rows usually all do),
/// else to a new group.
pub fn add_row_as_sent(tables: &mut Vec<TableRows>, table: &str, fields: Vec<(String, Cell)>, received: u64) {
    if let Some(t) = tables.last_mut()
        && t.decl.is_none()
        && t.table == table
        && t.columns.len() == fields.len()
        && t.columns.iter().zip(&fields).all(|(c, (f, _))| c == f)
    {
        t.rows.push(fields.into_iter().map(|(_, c)| c).collect());
        t.received.push(received);
        return;
    }
    let (columns, cells): (Vec<String>, Vec<Cell>) = fields.into_iter().unzip();
    tables.push(TableRows {
        table: table.to_string(),
        columns,
        rows: vec![cells],
        received: vec![received],
        decl: None,
    });
}

/// One row's fields typed by `decl`: the values in the declaration's column
/// order; a text longer than `max_text` (`ingest.max_attribute_value_bytes`)
/// does not fit. `Err` names the column at fault (the caller adds the table
/// and row).
pub fn type_row<'a>(
    decl: &TableDecl,
    fields: impl IntoIterator<Item = (&'a str, Cell)>,
    received: u64,
    max_text: usize,
) -> Result<Vec<Cell>, (String, String)> {
    let mut out: Vec<Option<Cell>> = vec![None; decl.columns.len()];
    for (name, value) in fields {
        let Some(i) = decl.columns.iter().position(|c| c.name == name) else {
            return Err((
                name.to_string(),
                format!(
                    "not a column of table {:?} (its columns: {})",
                    decl.name,
                    decl.column_names().join(", ")
                ),
            ));
        };
        let cell = decl.columns[i].take(value).map_err(|e| (name.to_string(), e))?;
        if let Cell::S(s) = &cell
            && s.len() > max_text
        {
            return Err((
                name.to_string(),
                format!(
                    "{} bytes; at most {max_text} (ingest.max_attribute_value_bytes)",
                    s.len()
                ),
            ));
        }
        out[i] = Some(cell);
    }
    out.into_iter()
        .zip(&decl.columns)
        .map(|(v, c)| match (v, &c.default) {
            (Some(v), _) => Ok(v),
            (None, ColumnDefault::Value(d)) => Ok(d.clone()),
            (None, ColumnDefault::Received) => Ok(Cell::U(received)),
            (None, ColumnDefault::Required) => Err((c.name.clone(), "missing: the column is required".to_string())),
        })
        .collect()
}

/// Why rows of `table` were refused: no running plugin declares it.
pub fn unknown_table(table: &str, registry: &TableRegistry) -> Invalid {
    let declared: Vec<String> = registry.list().into_iter().map(|t| t.decl.name).collect();
    invalid(
        table,
        format!(
            "no running plugin declares a table named {table:?} (declared now: {})",
            if declared.is_empty() {
                "none".to_string()
            } else {
                declared.join(", ")
            }
        ),
    )
}

/// Types every group of a report's rows (`tables`) that came as sent,
/// against `registry`: rows that fit become typed, the others are dropped,
/// each with its reason (`table[i].column`, `i` counting that table's rows in
/// this report). A table nobody declares is dropped whole, unless
/// `keep_unknown` (an agent, which forwards it for its master to type).
pub fn type_tables(
    tables: &mut Vec<TableRows>,
    registry: &TableRegistry,
    keep_unknown: bool,
    max_text: usize,
) -> Vec<Invalid> {
    let mut refused = Vec::new();
    let mut seen: Vec<(String, usize)> = Vec::new();
    for g in std::mem::take(tables) {
        if g.decl.is_some() {
            tables.push(g);
            continue;
        }
        let Some(decl) = registry.get(&g.table) else {
            if keep_unknown {
                tables.push(g);
            } else {
                let mut e = unknown_table(&g.table, registry);
                e.reason = format!("{} rows refused: {}", g.rows.len(), e.reason);
                refused.push(e);
            }
            continue;
        };
        let base = match seen.iter_mut().find(|(t, _)| *t == g.table) {
            Some((_, n)) => {
                let b = *n;
                *n += g.rows.len();
                b
            }
            None => {
                seen.push((g.table.clone(), g.rows.len()));
                0
            }
        };
        let mut out = TableRows::typed(decl.clone());
        for (i, (row, received)) in g.rows.into_iter().zip(g.received).enumerate() {
            let fields = g.columns.iter().map(String::as_str).zip(row);
            match type_row(&decl, fields, received, max_text) {
                Ok(cells) => {
                    out.rows.push(cells);
                    out.received.push(received);
                }
                Err((column, reason)) => refused.push(invalid(format!("{}[{}].{column}", g.table, base + i), reason)),
            }
        }
        if !out.rows.is_empty() {
            tables.push(out);
        }
    }
    refused
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ingest::Report;
    use crate::plugin::bindings::types;
    use crate::plugin::tables::Owner;

    const MAX_TEXT: usize = 4096;

    pub(crate) fn registry_with(tables: Vec<types::TableDecl>) -> TableRegistry {
        let r = TableRegistry::default();
        let decls: Vec<TableDecl> = tables.into_iter().map(|t| TableDecl::from_wit(t).unwrap()).collect();
        r.declare(
            &Owner {
                plugin: "test".into(),
                instance: 1,
            },
            &decls,
        )
        .unwrap();
        r
    }

    fn steps() -> types::TableDecl {
        use types::{ColumnDefault as D, ColumnType as T};
        let col = |name: &str, type_, default| types::ColumnDecl {
            name: name.into(),
            type_,
            default,
            labels: vec![],
        };
        types::TableDecl {
            name: "steps".into(),
            description: String::new(),
            columns: vec![
                col("step", T::U64, D::Required),
                col("loss", T::F64, D::Zero),
                col("phase", T::String, D::Value(types::Value::Str("train".into()))),
                col("at_ns", T::Timestamp, D::Received),
            ],
        }
    }

    #[test]
    fn fields_map_onto_columns_by_name_with_defaults() {
        let reg = registry_with(vec![steps()]);
        let decl = reg.get("steps").unwrap();
        let row = type_row(&decl, [("loss", Cell::F(0.5)), ("step", Cell::I(3))], 77, MAX_TEXT).unwrap();
        assert_eq!(
            row,
            vec![Cell::U(3), Cell::F(0.5), Cell::S("train".into()), Cell::U(77)]
        );
        for (fields, column, reason) in [
            (vec![("loss", Cell::F(1.0))], "step", "missing"),
            (vec![("step", Cell::I(-1))], "step", "-1: must be an integer from 0"),
            (
                vec![("step", Cell::U(1)), ("lost", Cell::F(1.0))],
                "lost",
                "its columns: step, loss, phase, at_ns",
            ),
            (
                vec![("step", Cell::U(1)), ("phase", Cell::B(true))],
                "phase",
                "must be a string",
            ),
        ] {
            let (c, r) = type_row(&decl, fields, 0, MAX_TEXT).unwrap_err();
            assert_eq!(c, column);
            assert!(r.contains(reason), "{r}");
        }
        let long = Cell::S("x".repeat(5000));
        let (c, r) = type_row(&decl, [("step", Cell::U(1)), ("phase", long)], 0, MAX_TEXT).unwrap_err();
        assert_eq!(c, "phase");
        assert!(r.contains("ingest.max_attribute_value_bytes"), "{r}");
    }

    #[test]
    fn rows_as_sent_are_typed_later_and_only_the_bad_ones_go() {
        let reg = registry_with(vec![steps()]);
        let mut r = Report::default();
        r.add_row_as_sent("steps", vec![("step".into(), Cell::I(1))], 10);
        r.add_row_as_sent("steps", vec![("step".into(), Cell::S("x".into()))], 11);
        r.add_row_as_sent(
            "steps",
            vec![("step".into(), Cell::I(3)), ("loss".into(), Cell::F(2.0))],
            12,
        );
        r.add_row_as_sent("nobody_declares", vec![("a".into(), Cell::I(1))], 13);
        assert_eq!(r.tables.len(), 3, "grouped while the fields stay the same");
        let mut kept = r.clone();
        let refused = type_tables(&mut r.tables, &reg, false, MAX_TEXT);
        let why: Vec<String> = refused.iter().map(|e| e.to_string()).collect();
        assert_eq!(why.len(), 2, "{why:?}");
        assert!(why[0].starts_with("steps[1].step: \"x\""), "{why:?}");
        assert!(
            why[1].contains("nobody_declares") && why[1].contains("declared now: steps"),
            "{why:?}"
        );
        let rows: Vec<(u64, u64)> = r
            .tables
            .iter()
            .flat_map(|t| t.rows.iter().map(|c| (c[0].u(), c[3].u())))
            .collect();
        assert_eq!(rows, vec![(1, 10), (3, 12)], "received times fill the timestamp column");
        assert!(r.tables.iter().all(|t| t.decl.is_some()));
        // An agent keeps what it cannot type, for its master.
        assert!(type_tables(&mut kept.tables, &reg, true, MAX_TEXT).len() == 1);
        assert!(
            kept.tables
                .iter()
                .any(|t| t.table == "nobody_declares" && t.decl.is_none())
        );
    }
}
