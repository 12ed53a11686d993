//! The JSON ingest body (`POST /api/ingest`): parse, then validate, with one
//! event table declared (every column type) so that rows of tables are typed
//! too.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use sonde::ingest::json::{Body, TableRules};
use sonde::plugin::bindings::types::{ColumnDecl, ColumnDefault, ColumnType, TableDecl, Value};
use sonde::plugin::tables::{Owner, TableDecl as Declared, TableRegistry};

static TABLES: LazyLock<TableRegistry> = LazyLock::new(|| {
    let col = |name: &str, type_, default| ColumnDecl {
        name: name.into(),
        type_,
        default,
        labels: vec![],
    };
    let t = TableDecl {
        name: "t".into(),
        description: String::new(),
        columns: vec![
            col("a", ColumnType::U8, ColumnDefault::Required),
            col("b", ColumnType::U64, ColumnDefault::Zero),
            col("c", ColumnType::S32, ColumnDefault::Value(Value::Int(-1))),
            col("d", ColumnType::F64, ColumnDefault::Zero),
            col("e", ColumnType::Boolean, ColumnDefault::Zero),
            col("callsite", ColumnType::String, ColumnDefault::Zero),
            col("f", ColumnType::Timestamp, ColumnDefault::Received),
        ],
    };
    let r = TableRegistry::default();
    let owner = Owner {
        plugin: "fuzz".into(),
        instance: 1,
    };
    r.declare(&owner, &[Declared::from_wit(t).unwrap()]).unwrap();
    r
});

fuzz_target!(|data: &[u8]| {
    if let Ok(body) = serde_json::from_slice::<Body>(data) {
        let rows = body.rows();
        let rules = TableRules {
            registry: &TABLES,
            keep_unknown: false,
        };
        if let Ok(c) = body.convert(1, &Default::default(), &rules) {
            // Validation may drop nothing silently: every row is kept or refused.
            assert_eq!(c.report.rows() + c.refused_rows, rows);
            assert!(c.refused_rows == 0 || !c.refused.is_empty());
        }
    }
});
