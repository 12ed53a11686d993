//! Event tables (the WIT's "Event tables"): declaring one in a manifest,
//! reading a batch's rows by column name, and building rows the way the host
//! does, for tests.
//!
//! ```ignore
//! use sonde_plugin_sdk::column;
//! use sonde_plugin_sdk::types::{ColumnDefault::*, ColumnType::*, TableDecl};
//!
//! let deploys = TableDecl::new("deploys", "model deployments", vec![
//!     column("model", String, Required),
//!     column("replicas", U32, Value(sonde_plugin_sdk::types::Value::Int(1))),
//!     column("at_ns", Timestamp, Received),
//! ]);
//! // in `manifest()`: Manifest { tables: vec![deploys], ..Default::default() }
//!
//! // in `on_events`:
//! for t in batch.table("deploys") {
//!     let models = t.strings("model")?;
//!     let replicas = t.u32s("replicas")?;
//!     for i in 0..t.len() { /* models[i], replicas[i], t.origin()[i] */ }
//! }
//! ```
//! Read columns by name, never by position: a table another plugin declares
//! may gain a column, and the host delivers columns in the declaring
//! plugin's order.

use crate::types::{ColumnDecl, ColumnDefault, ColumnType, EventBatch, TableColumn, TableDecl, TableRows, Value};

/// One column of a table declaration.
pub fn column(name: &str, type_: ColumnType, default: ColumnDefault) -> ColumnDecl {
    ColumnDecl {
        name: name.into(),
        type_,
        default,
        labels: Vec::new(),
    }
}

impl ColumnDecl {
    /// Names senders may write for the codes 0, 1, 2, ... of an integer column.
    pub fn with_labels(mut self, labels: &[&str]) -> ColumnDecl {
        self.labels = labels.iter().map(|l| l.to_string()).collect();
        self
    }
}

impl TableDecl {
    pub fn new(name: &str, description: &str, columns: Vec<ColumnDecl>) -> TableDecl {
        TableDecl {
            name: name.into(),
            description: description.into(),
            columns,
        }
    }
}

/// The rows of one table in a batch, read by column name.
#[derive(Clone, Copy, Debug)]
pub struct Table<'a> {
    rows: &'a TableRows,
    names: &'a [String],
}

/// What a column variant holds, for error messages.
fn holds(c: &TableColumn) -> &'static str {
    match c {
        TableColumn::U8s(_) => "u8",
        TableColumn::U32s(_) => "u32",
        TableColumn::U64s(_) => "u64",
        TableColumn::S32s(_) => "s32",
        TableColumn::S64s(_) => "s64",
        TableColumn::F64s(_) => "f64",
        TableColumn::Booleans(_) => "boolean",
        TableColumn::Strings(_) => "string",
        TableColumn::Timestamps(_) => "timestamp",
    }
}

macro_rules! typed_column {
    ($(#[$doc:meta])* $fn:ident, $variant:ident, $ty:ty, $want:literal) => {
        $(#[$doc])*
        pub fn $fn(&self, name: &str) -> Result<&'a [$ty], String> {
            match self.get(name)? {
                TableColumn::$variant(v) => Ok(v),
                other => Err(self.wrong(name, other, $want)),
            }
        }
    };
}

impl<'a> Table<'a> {
    pub fn name(&self) -> &'a str {
        &self.rows.name
    }

    pub fn len(&self) -> usize {
        self.rows.origin.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.origin.is_empty()
    }

    /// Each row's origin: an index into `EventBatch::origins`.
    pub fn origin(&self) -> &'a [u32] {
        &self.rows.origin
    }

    /// The column names, in the declaration's order.
    pub fn column_names(&self) -> &'a [String] {
        &self.rows.column_names
    }

    /// A column by name, whatever its type; `None` when the table has none.
    pub fn column(&self, name: &str) -> Option<&'a TableColumn> {
        let i = self.rows.column_names.iter().position(|n| n == name)?;
        self.rows.columns.get(i)
    }

    fn get(&self, name: &str) -> Result<&'a TableColumn, String> {
        self.column(name).ok_or_else(|| {
            format!(
                "table {}: no column {name:?} (its columns: {})",
                self.rows.name,
                self.rows.column_names.join(", ")
            )
        })
    }

    fn wrong(&self, name: &str, got: &TableColumn, want: &str) -> String {
        format!(
            "table {}: column {name:?} holds {}, not {want}",
            self.rows.name,
            holds(got)
        )
    }

    typed_column!(u8s, U8s, u8, "u8");
    typed_column!(u32s, U32s, u32, "u32");
    typed_column!(u64s, U64s, u64, "u64");
    typed_column!(s32s, S32s, i32, "s32");
    typed_column!(s64s, S64s, i64, "s64");
    typed_column!(f64s, F64s, f64, "f64");
    typed_column!(booleans, Booleans, bool, "boolean");
    typed_column!(timestamps, Timestamps, u64, "timestamp");
    typed_column!(
        /// A string column as its indexes into `EventBatch::names` (compare
        /// those to tell equal strings apart cheaply).
        string_ids,
        Strings,
        u32,
        "string"
    );

    /// A string column, resolved.
    pub fn strings(&self, name: &str) -> Result<Vec<&'a str>, String> {
        let names = self.names;
        Ok(self
            .string_ids(name)?
            .iter()
            .map(|&i| names.get(i as usize).map_or("", String::as_str))
            .collect())
    }
}

impl EventBatch {
    /// The rows of table `name` in this batch: one entry, or none when it
    /// has no rows; more only when the table was declared anew (a plugin
    /// updated) while rows waited, each entry with its own columns.
    pub fn table<'a>(&'a self, name: &'a str) -> impl Iterator<Item = Table<'a>> + 'a {
        self.tables.iter().filter(move |t| t.name == name).map(move |t| Table {
            rows: t,
            names: &self.names,
        })
    }

    /// Appends a row to table `decl`, as the host builds batches: fields by
    /// column name, each converted to its column's type, strings interned
    /// into `names`, a missing field given its default (`received`: 0).
    /// `Err` names an unknown column, a value that does not fit, or a
    /// missing required column. For tests, and for plugins that re-read rows.
    pub fn push_row(&mut self, decl: &TableDecl, origin: u32, fields: &[(&str, Value)]) -> Result<(), String> {
        let at = |c: &str| format!("table {}, column {c:?}", decl.name);
        if let Some((name, _)) = fields.iter().find(|(n, _)| !decl.columns.iter().any(|c| c.name == *n)) {
            return Err(format!("{}: not a column of the table", at(name)));
        }
        let mut values = Vec::with_capacity(decl.columns.len());
        for c in &decl.columns {
            let v = match (fields.iter().find(|(n, _)| *n == c.name), &c.default) {
                // A label is its code.
                (Some((_, Value::Str(l))), _) if c.labels.contains(l) => {
                    Value::Int(c.labels.iter().position(|x| x == l).unwrap_or(0) as i64)
                }
                (Some((_, v)), _) => v.clone(),
                (None, ColumnDefault::Value(v)) => v.clone(),
                (None, ColumnDefault::Zero) => zero(c.type_),
                (None, ColumnDefault::Received) => Value::Int(0),
                (None, ColumnDefault::Required) => return Err(format!("{}: missing", at(&c.name))),
            };
            values.push(v);
        }
        let i = match self
            .tables
            .iter()
            .position(|t| t.name == decl.name && t.column_names.iter().eq(decl.columns.iter().map(|c| &c.name)))
        {
            Some(i) => i,
            None => {
                self.tables.push(TableRows {
                    name: decl.name.clone(),
                    column_names: decl.columns.iter().map(|c| c.name.clone()).collect(),
                    origin: Vec::new(),
                    columns: decl.columns.iter().map(|c| empty(c.type_)).collect(),
                });
                self.tables.len() - 1
            }
        };
        // Check every value before changing anything, so a refused row leaves no trace.
        for (c, v) in decl.columns.iter().zip(&values) {
            fits(c.type_, v).map_err(|e| format!("{}: {e}", at(&c.name)))?;
        }
        for (col, v) in values.into_iter().enumerate() {
            let name = match &v {
                Value::Str(s) => Some(self.intern(s)),
                _ => None,
            };
            push(&mut self.tables[i].columns[col], v, name);
        }
        self.tables[i].origin.push(origin);
        Ok(())
    }

    fn intern(&mut self, s: &str) -> u32 {
        match self.names.iter().position(|n| n == s) {
            Some(i) => i as u32,
            None => {
                self.names.push(s.to_string());
                self.names.len() as u32 - 1
            }
        }
    }
}

fn zero(t: ColumnType) -> Value {
    match t {
        ColumnType::F64 => Value::Float(0.0),
        ColumnType::Boolean => Value::Boolean(false),
        ColumnType::String => Value::Str(String::new()),
        _ => Value::Int(0),
    }
}

fn empty(t: ColumnType) -> TableColumn {
    match t {
        ColumnType::U8 => TableColumn::U8s(Vec::new()),
        ColumnType::U32 => TableColumn::U32s(Vec::new()),
        ColumnType::U64 => TableColumn::U64s(Vec::new()),
        ColumnType::S32 => TableColumn::S32s(Vec::new()),
        ColumnType::S64 => TableColumn::S64s(Vec::new()),
        ColumnType::F64 => TableColumn::F64s(Vec::new()),
        ColumnType::Boolean => TableColumn::Booleans(Vec::new()),
        ColumnType::String => TableColumn::Strings(Vec::new()),
        ColumnType::Timestamp => TableColumn::Timestamps(Vec::new()),
    }
}

/// Whether `v` fits a column of type `t` (the host's rules, for what `Value` can hold).
fn fits(t: ColumnType, v: &Value) -> Result<(), String> {
    let range = |lo: i128, hi: i128| match v {
        Value::Int(i) if (lo..=hi).contains(&(*i as i128)) => Ok(()),
        other => Err(format!("{other:?} is not an integer from {lo} to {hi}")),
    };
    match t {
        ColumnType::U8 => range(0, u8::MAX as i128),
        ColumnType::U32 => range(0, u32::MAX as i128),
        ColumnType::U64 | ColumnType::Timestamp => range(0, i64::MAX as i128),
        ColumnType::S32 => range(i32::MIN as i128, i32::MAX as i128),
        ColumnType::S64 => range(i64::MIN as i128, i64::MAX as i128),
        ColumnType::F64 => match v {
            Value::Float(f) if f.is_finite() => Ok(()),
            Value::Int(_) => Ok(()),
            other => Err(format!("{other:?} is not a finite number")),
        },
        ColumnType::Boolean => match v {
            Value::Boolean(_) => Ok(()),
            other => Err(format!("{other:?} is not a boolean")),
        },
        ColumnType::String => match v {
            Value::Str(_) => Ok(()),
            other => Err(format!("{other:?} is not a string")),
        },
    }
}

/// Appends a value that [`fits`] its column; `name` is a string's index.
fn push(c: &mut TableColumn, v: Value, name: Option<u32>) {
    let int = match &v {
        Value::Int(i) => *i,
        _ => 0,
    };
    match c {
        TableColumn::U8s(x) => x.push(int as u8),
        TableColumn::U32s(x) => x.push(int as u32),
        TableColumn::U64s(x) | TableColumn::Timestamps(x) => x.push(int as u64),
        TableColumn::S32s(x) => x.push(int as i32),
        TableColumn::S64s(x) => x.push(int),
        TableColumn::F64s(x) => x.push(match v {
            Value::Float(f) => f,
            _ => int as f64,
        }),
        TableColumn::Booleans(x) => x.push(matches!(v, Value::Boolean(true))),
        TableColumn::Strings(x) => x.push(name.unwrap_or(0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ColumnDefault::{Received, Required, Zero};

    fn deploys() -> TableDecl {
        TableDecl::new(
            "deploys",
            "",
            vec![
                column("model", ColumnType::String, Required),
                column("replicas", ColumnType::U32, ColumnDefault::Value(Value::Int(1))),
                column("healthy", ColumnType::Boolean, Zero),
                column("phase", ColumnType::U8, Zero).with_labels(&["rolling", "done"]),
                column("at_ns", ColumnType::Timestamp, Received),
            ],
        )
    }

    #[test]
    fn rows_are_built_as_the_host_builds_them_and_read_back_by_name() {
        let d = deploys();
        let mut b = EventBatch::default();
        b.push_row(&d, 0, &[("model", Value::Str("resnet".into()))]).unwrap();
        b.push_row(
            &d,
            1,
            &[
                ("replicas", Value::Int(3)),
                ("model", Value::Str("bert".into())),
                ("healthy", Value::Boolean(true)),
                ("phase", Value::Str("done".into())),
            ],
        )
        .unwrap();
        b.push_row(&d, 1, &[("model", Value::Str("resnet".into()))]).unwrap();
        let t = b.table("deploys").next().unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t.origin(), &[0, 1, 1]);
        assert_eq!(t.strings("model").unwrap(), vec!["resnet", "bert", "resnet"]);
        assert_eq!(t.string_ids("model").unwrap(), &[0, 1, 0], "interned once");
        assert_eq!(t.u32s("replicas").unwrap(), &[1, 3, 1], "the declared default");
        assert_eq!(t.booleans("healthy").unwrap(), &[false, true, false]);
        assert_eq!(t.u8s("phase").unwrap(), &[0, 1, 0], "a label is its code");
        assert_eq!(t.timestamps("at_ns").unwrap(), &[0, 0, 0]);
        assert!(b.table("other").next().is_none());
    }

    #[test]
    fn mistakes_name_the_table_and_the_column() {
        let d = deploys();
        let mut b = EventBatch::default();
        let e = b.push_row(&d, 0, &[]).unwrap_err();
        assert!(e.contains("\"model\": missing"), "{e}");
        let e = b
            .push_row(
                &d,
                0,
                &[("model", Value::Str("m".into())), ("replicas", Value::Int(-1))],
            )
            .unwrap_err();
        assert!(e.contains("\"replicas\"") && e.contains("from 0 to"), "{e}");
        assert!(
            b.tables.is_empty() || b.tables[0].origin.is_empty(),
            "a refused row leaves nothing"
        );
        let e = b.push_row(&d, 0, &[("mdoel", Value::Str("m".into()))]).unwrap_err();
        assert!(e.contains("\"mdoel\": not a column"), "{e}");
        b.push_row(&d, 0, &[("model", Value::Str("m".into()))]).unwrap();
        let t = b.table("deploys").next().unwrap();
        assert_eq!(
            t.u64s("replicas").unwrap_err(),
            "table deploys: column \"replicas\" holds u32, not u64"
        );
        assert!(
            t.u8s("nope")
                .unwrap_err()
                .contains("no column \"nope\" (its columns: model, replicas")
        );
    }
}
