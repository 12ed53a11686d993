//! Event tables: what a plugin declares in its manifest (the WIT's "Event
//! tables"), checked here, and the registry of the tables running plugins
//! declared, which the ingest reads to take rows.
//!
//! ```text
//!  manifest.tables ──TableDecl::from_wit──► TableRegistry::declare(plugin, owner)
//!                         (names, types,      one declaration per name; a
//!                          defaults checked)  different one from another plugin
//!                                             is refused (the plugin does not start)
//!  ingest (json/, otlp/, the hub) ──get(name)──► the declaration its rows are typed by
//! ```
//! The host knows no table by heart: a table exists while a running plugin
//! declares it. A plugin's declarations are replaced when it starts again
//! (restart, new file) and withdrawn when it is unloaded; `owner` tells the
//! instance that declared them, so an old instance stopping after its
//! replacement started withdraws nothing of the new one's.
//!
//! [`Cell`] is a value of a row as it travels, and [`ColumnType::take`] the
//! one rule of what each column type accepts: the JSON ingest, OTLP and the
//! defaults of a declaration all go through it.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::RwLock;
use serde::{Deserialize, Serialize};

use super::bindings::types;

/// Most columns one table may declare.
pub const MAX_COLUMNS: usize = 128;

/// Keys of a `POST /api/ingest` body that are the ingest's own, never a table.
pub const RESERVED_TABLES: [&str; 9] = [
    "origin",
    "progress",
    "timings",
    "points",
    "events",
    "heartbeats",
    "node_events",
    "stacks",
    "modules",
];

/// A row field the ingest takes for itself: a call-stack id (docs/ingest.md).
pub const RESERVED_COLUMNS: [&str; 1] = ["stack"];

/// One value of a row, as it travels from a receiver to the plugins. Typed
/// by its column: unsigned and timestamp columns hold `U`, signed `I`,
/// `f64` `F`, `boolean` `B`, `string` `S`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Cell {
    U(u64),
    I(i64),
    F(f64),
    B(bool),
    S(String),
}

impl Cell {
    /// The value for a column of type `ty` after [`ColumnType::take`]: an
    /// unsigned number (0 for any other cell).
    pub fn u(&self) -> u64 {
        match self {
            Cell::U(v) => *v,
            _ => 0,
        }
    }
    pub fn i(&self) -> i64 {
        match self {
            Cell::I(v) => *v,
            _ => 0,
        }
    }
    pub fn f(&self) -> f64 {
        match self {
            Cell::F(v) => *v,
            _ => 0.0,
        }
    }
    pub fn b(&self) -> bool {
        matches!(self, Cell::B(true))
    }
    pub fn s(&self) -> &str {
        match self {
            Cell::S(v) => v,
            _ => "",
        }
    }
}

/// The type of a column (the WIT `column-type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColumnType {
    U8,
    U32,
    U64,
    S32,
    S64,
    F64,
    Boolean,
    String,
    Timestamp,
}

impl ColumnType {
    fn from_wit(t: types::ColumnType) -> Self {
        use types::ColumnType as W;
        match t {
            W::U8 => ColumnType::U8,
            W::U32 => ColumnType::U32,
            W::U64 => ColumnType::U64,
            W::S32 => ColumnType::S32,
            W::S64 => ColumnType::S64,
            W::F64 => ColumnType::F64,
            W::Boolean => ColumnType::Boolean,
            W::String => ColumnType::String,
            W::Timestamp => ColumnType::Timestamp,
        }
    }

    /// What a value of this column must be, for error messages.
    fn wants(self) -> &'static str {
        match self {
            ColumnType::U8 => "an integer from 0 to 255",
            ColumnType::U32 => "an integer from 0 to 4294967295",
            ColumnType::U64 => "an integer from 0 to 18446744073709551615",
            ColumnType::S32 => "an integer from -2147483648 to 2147483647",
            ColumnType::S64 => "an integer from -9223372036854775808 to 9223372036854775807",
            ColumnType::F64 => "a finite number",
            ColumnType::Boolean => "true or false",
            ColumnType::String => "a string",
            ColumnType::Timestamp => "nanoseconds since the Unix epoch (an integer >= 0)",
        }
    }

    fn max_unsigned(self) -> Option<u64> {
        match self {
            ColumnType::U8 => Some(u8::MAX as u64),
            ColumnType::U32 => Some(u32::MAX as u64),
            ColumnType::U64 | ColumnType::Timestamp => Some(u64::MAX),
            _ => None,
        }
    }

    /// The value `v` as this column holds it, or why it does not fit.
    /// Integers may come as integral floats (some SDKs send only doubles) or
    /// as decimal strings (OTLP has no u64 above i64's range); text only as
    /// a string; a number only when finite.
    pub fn take(self, v: Cell) -> Result<Cell, String> {
        let refuse = |v: &Cell| {
            let shown = match v {
                Cell::S(s) => format!("{:?}", s.chars().take(40).collect::<String>()),
                Cell::U(x) => x.to_string(),
                Cell::I(x) => x.to_string(),
                Cell::F(x) => x.to_string(),
                Cell::B(x) => x.to_string(),
            };
            Err(format!("{shown}: must be {}", self.wants()))
        };
        // Integers in a wide form first, from whatever they came as.
        let wide: Option<i128> = match &v {
            Cell::U(x) => Some(*x as i128),
            Cell::I(x) => Some(*x as i128),
            Cell::F(x) if x.is_finite() && x.fract() == 0.0 && x.abs() < 1.9e19 => Some(*x as i128),
            Cell::S(s) => s.trim().parse::<i128>().ok(),
            _ => None,
        };
        match self {
            ColumnType::String => match v {
                Cell::S(_) => Ok(v),
                other => refuse(&other),
            },
            ColumnType::Boolean => match v {
                Cell::B(_) => Ok(v),
                other => refuse(&other),
            },
            ColumnType::F64 => match v {
                Cell::F(x) if x.is_finite() => Ok(Cell::F(x)),
                Cell::U(x) => Ok(Cell::F(x as f64)),
                Cell::I(x) => Ok(Cell::F(x as f64)),
                other => refuse(&other),
            },
            ColumnType::S32 | ColumnType::S64 => {
                let (lo, hi) = match self {
                    ColumnType::S32 => (i32::MIN as i128, i32::MAX as i128),
                    _ => (i64::MIN as i128, i64::MAX as i128),
                };
                match wide {
                    Some(x) if (lo..=hi).contains(&x) && !matches!(v, Cell::B(_)) => Ok(Cell::I(x as i64)),
                    _ => refuse(&v),
                }
            }
            ColumnType::U8 | ColumnType::U32 | ColumnType::U64 | ColumnType::Timestamp => {
                let hi = self.max_unsigned().unwrap_or(0) as i128;
                match wide {
                    Some(x) if (0..=hi).contains(&x) && !matches!(v, Cell::B(_)) => Ok(Cell::U(x as u64)),
                    _ => refuse(&v),
                }
            }
        }
    }

    /// The type's zero value.
    pub fn zero(self) -> Cell {
        match self {
            ColumnType::U8 | ColumnType::U32 | ColumnType::U64 | ColumnType::Timestamp => Cell::U(0),
            ColumnType::S32 | ColumnType::S64 => Cell::I(0),
            ColumnType::F64 => Cell::F(0.0),
            ColumnType::Boolean => Cell::B(false),
            ColumnType::String => Cell::S(String::new()),
        }
    }
}

/// What a row that leaves a column out gets (the WIT `column-default`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColumnDefault {
    Required,
    Value(Cell),
    /// The time the row was received.
    Received,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ColumnDecl {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: ColumnType,
    pub default: ColumnDefault,
    /// Names a sender may write for the codes 0, 1, 2, ... (integer columns).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub labels: Vec<String>,
}

impl ColumnDecl {
    /// `v` as this column holds it: a label becomes its code, then the
    /// column's type decides (`ColumnType::take`).
    pub fn take(&self, v: Cell) -> Result<Cell, String> {
        if let Cell::S(s) = &v
            && let Some(code) = self.labels.iter().position(|l| l == s)
        {
            return self.ty.take(Cell::U(code as u64));
        }
        self.ty.take(v).map_err(|e| match self.labels.is_empty() {
            true => e,
            false => format!("{e}, or one of {}", self.labels.join(", ")),
        })
    }
}

/// A table a plugin declared, checked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TableDecl {
    pub name: String,
    pub description: String,
    pub columns: Vec<ColumnDecl>,
}

/// `[a-z][a-z0-9_]{0,63}`: a table or column name.
fn check_ident(what: &str, name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    match ok {
        true => Ok(()),
        false => Err(format!(
            "{what} {name:?}: use 1 to 64 of [a-z0-9_], starting with a letter"
        )),
    }
}

impl TableDecl {
    /// Checks a declaration from a manifest: names, column count, and that
    /// every default fits its column.
    pub fn from_wit(t: types::TableDecl) -> Result<TableDecl, String> {
        check_ident("table", &t.name)?;
        if RESERVED_TABLES.contains(&t.name.as_str()) {
            return Err(format!(
                "table {:?}: the name is the ingest's own (reserved: {})",
                t.name,
                RESERVED_TABLES.join(", ")
            ));
        }
        if t.columns.is_empty() || t.columns.len() > MAX_COLUMNS {
            return Err(format!(
                "table {:?}: {} columns; declare 1 to {MAX_COLUMNS}",
                t.name,
                t.columns.len()
            ));
        }
        let mut columns: Vec<ColumnDecl> = Vec::with_capacity(t.columns.len());
        for c in t.columns {
            let at = |reason: String| format!("table {:?}, column {:?}: {reason}", t.name, c.name);
            check_ident("column", &c.name).map_err(at)?;
            if RESERVED_COLUMNS.contains(&c.name.as_str()) {
                return Err(at("the name is reserved for call-stack ids".into()));
            }
            if columns.iter().any(|d| d.name == c.name) {
                return Err(at("declared twice".into()));
            }
            let ty = ColumnType::from_wit(c.type_);
            let default = match c.default {
                types::ColumnDefault::Required => ColumnDefault::Required,
                types::ColumnDefault::Zero => ColumnDefault::Value(ty.zero()),
                types::ColumnDefault::Received if ty == ColumnType::Timestamp => ColumnDefault::Received,
                types::ColumnDefault::Received => {
                    return Err(at("`received` is a default for timestamp columns only".into()));
                }
                types::ColumnDefault::Value(v) => {
                    let cell = match v {
                        types::Value::Str(s) => Cell::S(s),
                        types::Value::Int(i) => Cell::I(i),
                        types::Value::Float(f) => Cell::F(f),
                        types::Value::Boolean(b) => Cell::B(b),
                    };
                    ColumnDefault::Value(ty.take(cell).map_err(|e| at(format!("default {e}")))?)
                }
            };
            let integer = matches!(
                ty,
                ColumnType::U8 | ColumnType::U32 | ColumnType::U64 | ColumnType::S32 | ColumnType::S64
            );
            if !c.labels.is_empty() && !integer {
                return Err(at("labels name codes: integer columns only".into()));
            }
            if !c.labels.is_empty() && (c.labels.len() > 256 || ty.take(Cell::U(c.labels.len() as u64 - 1)).is_err()) {
                return Err(at(format!(
                    "{} labels: more than the column's codes or 256",
                    c.labels.len()
                )));
            }
            if let Some(l) = c.labels.iter().find(|l| l.is_empty() || l.len() > 64) {
                return Err(at(format!("label {l:?}: use 1 to 64 bytes")));
            }
            columns.push(ColumnDecl {
                name: c.name,
                ty,
                default,
                labels: c.labels,
            });
        }
        Ok(TableDecl {
            name: t.name,
            description: t.description,
            columns,
        })
    }

    pub fn column_names(&self) -> Vec<String> {
        self.columns.iter().map(|c| c.name.clone()).collect()
    }

    /// How `other`'s columns differ from this declaration's, in a sentence;
    /// `None` when they are the same (descriptions may differ).
    fn difference(&self, other: &TableDecl) -> Option<String> {
        let show = |c: &ColumnDecl| format!("{} {:?} ({:?})", c.name, c.ty, c.default).to_lowercase();
        for i in 0..self.columns.len().max(other.columns.len()) {
            match (self.columns.get(i), other.columns.get(i)) {
                (Some(a), Some(b)) if a == b => {}
                (Some(a), Some(b)) => return Some(format!("column {i} is `{}` there, `{}` here", show(a), show(b))),
                (Some(a), None) => return Some(format!("column {i} `{}` is missing here", show(a))),
                (None, Some(b)) => return Some(format!("column {i} `{}` is not there", show(b))),
                (None, None) => {}
            }
        }
        None
    }
}

/// Which running instance declared a table: a plugin name and an instance id
/// that is unique for the life of the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub plugin: String,
    pub instance: u64,
}

struct Declared {
    decl: Arc<TableDecl>,
    /// plugin name -> the instance that declared it.
    by: BTreeMap<String, u64>,
}

/// The tables running plugins declared. Cheap to read (the ingest looks a
/// table up per request); written only when plugins start and stop.
#[derive(Default)]
pub struct TableRegistry {
    tables: RwLock<BTreeMap<String, Declared>>,
}

/// A declared table as the API lists it.
#[derive(Clone, Debug, Serialize)]
pub struct TableListing {
    #[serde(flatten)]
    pub decl: TableDecl,
    pub declared_by: Vec<String>,
}

impl TableRegistry {
    /// Records `owner`'s declarations, replacing that plugin's earlier ones:
    /// all of them or, when one differs from another plugin's declaration of
    /// the same table, none (the reason names the table, that plugin and
    /// the first difference).
    pub fn declare(&self, owner: &Owner, tables: &[TableDecl]) -> Result<(), String> {
        let mut all = self.tables.write();
        for t in tables {
            if let Some(d) = all.get(&t.name)
                && let Some(other) = d.by.keys().find(|p| **p != owner.plugin)
                && let Some(diff) = d.decl.difference(t)
            {
                return Err(format!(
                    "table {:?} is declared by plugin {other:?} with other columns ({diff}); \
                     two plugins may declare one table only alike: read it with `manifest.reads` \
                     or give yours another name",
                    t.name
                ));
            }
        }
        // This plugin's earlier declarations it no longer makes.
        all.retain(|name, d| {
            if !tables.iter().any(|t| &t.name == name) {
                d.by.remove(&owner.plugin);
            }
            !d.by.is_empty()
        });
        for t in tables {
            let d = all.entry(t.name.clone()).or_insert_with(|| Declared {
                decl: Arc::new(t.clone()),
                by: BTreeMap::new(),
            });
            if d.decl.columns != t.columns {
                // Only this plugin declared it before (checked above): its new form wins.
                d.decl = Arc::new(t.clone());
            }
            d.by.insert(owner.plugin.clone(), owner.instance);
        }
        Ok(())
    }

    /// Withdraws what `owner` declared, unless a newer instance of the same
    /// plugin has declared since.
    pub fn withdraw(&self, owner: &Owner) {
        self.tables.write().retain(|_, d| {
            if d.by.get(&owner.plugin) == Some(&owner.instance) {
                d.by.remove(&owner.plugin);
            }
            !d.by.is_empty()
        });
    }

    /// The declaration rows of `name` are typed by, while a plugin declares it.
    pub fn get(&self, name: &str) -> Option<Arc<TableDecl>> {
        self.tables.read().get(name).map(|d| d.decl.clone())
    }

    /// Every declared table, by name.
    pub fn list(&self) -> Vec<TableListing> {
        self.tables
            .read()
            .values()
            .map(|d| TableListing {
                decl: (*d.decl).clone(),
                declared_by: d.by.keys().cloned().collect(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(name: &str, t: types::ColumnType, default: types::ColumnDefault) -> types::ColumnDecl {
        types::ColumnDecl {
            name: name.into(),
            type_: t,
            default,
            labels: vec![],
        }
    }

    fn wit(name: &str, columns: Vec<types::ColumnDecl>) -> types::TableDecl {
        types::TableDecl {
            name: name.into(),
            description: "test".into(),
            columns,
        }
    }

    fn decl(name: &str, columns: Vec<types::ColumnDecl>) -> TableDecl {
        TableDecl::from_wit(wit(name, columns)).unwrap()
    }

    fn owner(plugin: &str, instance: u64) -> Owner {
        Owner {
            plugin: plugin.into(),
            instance,
        }
    }

    #[test]
    fn each_type_takes_what_fits_and_names_what_it_wants() {
        use ColumnType as T;
        assert_eq!(T::U8.take(Cell::U(255)), Ok(Cell::U(255)));
        assert!(T::U8.take(Cell::U(256)).unwrap_err().contains("from 0 to 255"));
        assert!(T::U32.take(Cell::I(-1)).is_err());
        assert_eq!(
            T::U64.take(Cell::S("18446744073709551615".into())),
            Ok(Cell::U(u64::MAX))
        );
        assert_eq!(T::Timestamp.take(Cell::F(1e9)), Ok(Cell::U(1_000_000_000)));
        assert!(T::Timestamp.take(Cell::F(1.5)).is_err());
        assert_eq!(T::S32.take(Cell::I(-4)), Ok(Cell::I(-4)));
        assert!(T::S32.take(Cell::U(1 << 31)).is_err());
        assert_eq!(T::F64.take(Cell::I(3)), Ok(Cell::F(3.0)));
        assert!(T::F64.take(Cell::F(f64::NAN)).is_err());
        assert!(T::F64.take(Cell::S("1".into())).is_err(), "no text as a number");
        assert!(T::Boolean.take(Cell::U(1)).is_err());
        assert!(T::U32.take(Cell::B(true)).is_err());
        let e = T::String.take(Cell::U(7)).unwrap_err();
        assert_eq!(e, "7: must be a string");
    }

    #[test]
    fn declarations_are_checked_with_the_table_and_column_named() {
        use types::{ColumnDefault as D, ColumnType as W};
        let d = decl(
            "requests",
            vec![
                col("id", W::U64, D::Required),
                col("batch", W::U32, D::Value(types::Value::Int(1))),
                col("at_ns", W::Timestamp, D::Received),
                col("ok", W::Boolean, D::Zero),
            ],
        );
        assert_eq!(d.columns[1].default, ColumnDefault::Value(Cell::U(1)));
        assert_eq!(d.columns[3].default, ColumnDefault::Value(Cell::B(false)));
        for (t, want) in [
            (wit("Bad-Name", vec![col("a", W::U8, D::Zero)]), "table \"Bad-Name\""),
            (wit("timings", vec![col("a", W::U8, D::Zero)]), "ingest's own"),
            (wit("t", vec![]), "0 columns"),
            (
                wit("t", vec![col("a", W::U8, D::Zero), col("a", W::U8, D::Zero)]),
                "column \"a\": declared twice",
            ),
            (wit("t", vec![col("stack", W::U32, D::Zero)]), "reserved"),
            (wit("t", vec![col("a", W::U64, D::Received)]), "timestamp columns only"),
            (
                wit("t", vec![col("a", W::U8, D::Value(types::Value::Int(300)))]),
                "column \"a\": default 300: must be an integer from 0 to 255",
            ),
        ] {
            let e = TableDecl::from_wit(t).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn labels_stand_for_codes_of_integer_columns() {
        use types::{ColumnDefault as D, ColumnType as W};
        let mut state = col("state", W::U8, D::Required);
        state.labels = vec!["idle".into(), "busy".into()];
        let d = decl("t", vec![state.clone()]);
        let c = &d.columns[0];
        assert_eq!(c.take(Cell::S("busy".into())), Ok(Cell::U(1)));
        assert_eq!(
            c.take(Cell::U(7)),
            Ok(Cell::U(7)),
            "a code without a label is still a code"
        );
        assert!(
            c.take(Cell::S("asleep".into()))
                .unwrap_err()
                .contains("or one of idle, busy")
        );
        let mut text = col("s", W::String, D::Zero);
        text.labels = vec!["a".into()];
        assert!(
            TableDecl::from_wit(wit("t", vec![text]))
                .unwrap_err()
                .contains("integer columns only")
        );
        state.labels = (0..300).map(|i| format!("l{i}")).collect();
        assert!(
            TableDecl::from_wit(wit("t", vec![state]))
                .unwrap_err()
                .contains("300 labels")
        );
    }

    #[test]
    fn a_second_plugin_may_declare_a_table_only_alike() {
        use types::{ColumnDefault as D, ColumnType as W};
        let r = TableRegistry::default();
        let a = decl("t", vec![col("x", W::U64, D::Required)]);
        let b = decl("t", vec![col("x", W::U32, D::Required)]);
        r.declare(&owner("one", 1), std::slice::from_ref(&a)).unwrap();
        r.declare(&owner("two", 2), std::slice::from_ref(&a)).unwrap();
        let e = r.declare(&owner("three", 3), std::slice::from_ref(&b)).unwrap_err();
        assert!(
            e.contains("\"t\"") && e.contains("plugin \"one\"") && e.contains("column 0"),
            "{e}"
        );
        assert_eq!(
            r.list()[0].declared_by,
            vec!["one", "two"],
            "the refused one is not recorded"
        );
        // The only declarer may change its own table (a new version of the plugin).
        r.withdraw(&owner("two", 2));
        r.declare(&owner("one", 4), std::slice::from_ref(&b)).unwrap();
        assert_eq!(*r.get("t").unwrap(), b);
    }

    #[test]
    fn an_old_instance_stopping_late_withdraws_nothing_of_its_replacement() {
        use types::{ColumnDefault as D, ColumnType as W};
        let r = TableRegistry::default();
        let t = decl("t", vec![col("x", W::U64, D::Required)]);
        let u = decl("u", vec![col("y", W::F64, D::Zero)]);
        r.declare(&owner("p", 1), &[t.clone(), u]).unwrap();
        r.declare(&owner("p", 2), std::slice::from_ref(&t)).unwrap();
        assert!(r.get("u").is_none(), "no longer declared by the new instance");
        r.withdraw(&owner("p", 1));
        assert!(r.get("t").is_some());
        r.withdraw(&owner("p", 2));
        assert!(r.get("t").is_none() && r.list().is_empty());
    }
}
