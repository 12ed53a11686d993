//! Tests of `POST /api/ingest`: bodies converted (fixed lists, rows of event
//! tables, probe stacks), what is refused and how it is named, the token check.

use super::*;
use crate::ingest::tables::{Cell, TableRegistry};
use crate::ingest::{Progress, Report};
use crate::model::AttrValue;

fn parse(s: &str) -> Result<Report, String> {
    let b: Body = serde_json::from_str(s).map_err(|e| e.to_string())?;
    b.into_report(99, &Limits::default()).map_err(|e| e.to_string())
}

#[test]
fn a_full_body_converts_with_defaults_filled_in() {
    let r = parse(
        r#"{"origin":{"job":"mnist","rank":0,"local_rank":0},
            "progress":[{"value":3}],
            "timings":[{"name":"train_batch","start_ns":10,"end_ns":20,"batch_idx":3},{"name":"x","start_ns":1,"end_ns":1}],
            "points":[{"metric":"samples_per_second","value":5.5,"attributes":{"gpu":1}}],
            "events":[{"name":"ckpt"}],"heartbeats":[{}],"node_events":[{"kind":"failed","exit_code":137}]}"#,
    )
    .unwrap();
    assert_eq!(r.origin.job, "mnist");
    assert_eq!(r.origin.index, -1, "unknown when not given");
    assert_eq!(
        r.progress,
        vec![Progress {
            name: "batch_idx".into(),
            time: 99,
            value: 3
        }]
    );
    assert_eq!(r.timings[0].step, 3);
    assert_eq!(r.timings[1].step, -1);
    assert_eq!(
        r.series[r.points[0].series as usize].attributes,
        vec![("gpu".to_string(), AttrValue::Int(1))]
    );
    assert_eq!(r.heartbeats, vec![99]);
    assert_eq!(r.node_events[0].exit_code, Some(137));
    assert_eq!(r.rows(), 7);
}

#[test]
fn bad_input_is_refused_naming_the_problem() {
    for (body, want) in [
        (
            r#"{"timings":[{"name":"a","start_ns":1,"end_ns":2,"extra":1}]}"#,
            "unknown field `extra`",
        ),
        (r#"{"progress":[{"value":-1}]}"#, "invalid value"),
        (r#"{"progress":[{"value":1}"#, "EOF"),
        (
            r#"{"timings":[{"name":"a","start_ns":5,"end_ns":2}]}"#,
            "timings[0].end_ns: is before start_ns",
        ),
        (
            r#"{"timings":[{"name":"","start_ns":1,"end_ns":2}]}"#,
            "timings[0].name: must not be empty",
        ),
        (
            r#"{"points":[{"metric":"m","value":1,"attributes":{"a":[1]}}]}"#,
            "points[0].attributes.a",
        ),
        (r#"{"origin":{"rank":-5}}"#, "origin.rank: -5"),
        (
            r#"{"points":[{"metric":"m","value":1,"kind":"histogram"}]}"#,
            "unknown variant `histogram`",
        ),
    ] {
        let err = parse(body).unwrap_err();
        assert!(err.contains(want), "{body}: {err}");
    }
}

#[test]
fn every_string_limit_is_refused_naming_the_field_and_the_setting() {
    let long = |n: usize| "x".repeat(n);
    let many: Vec<String> = (0..65).map(|i| format!(r#""k{i}":"v""#)).collect();
    let many = many.join(",");
    for (body, field, setting) in [
        (
            format!(r#"{{"origin":{{"job":"{}"}}}}"#, long(257)),
            "origin.job",
            "at most 256 (ingest.max_name_bytes)",
        ),
        (
            format!(r#"{{"origin":{{"node":"{}"}}}}"#, long(257)),
            "origin.node",
            "ingest.max_name_bytes",
        ),
        (
            format!(r#"{{"origin":{{"role":"{}"}}}}"#, long(257)),
            "origin.role",
            "ingest.max_name_bytes",
        ),
        (
            format!(r#"{{"origin":{{"attributes":{{{many}}}}}}}"#),
            "origin.attributes",
            "65 attributes; at most 64 (ingest.max_attributes)",
        ),
        (
            format!(r#"{{"origin":{{"attributes":{{"{}":"v"}}}}}}"#, long(129)),
            "origin.attributes.xxxx",
            "at most 128 (ingest.max_attribute_key_bytes)",
        ),
        (
            format!(r#"{{"origin":{{"attributes":{{"k":"{}"}}}}}}"#, long(4097)),
            "origin.attributes.k",
            "at most 4096 (ingest.max_attribute_value_bytes)",
        ),
        (
            format!(r#"{{"timings":[{{"name":"{}","start_ns":1,"end_ns":2}}]}}"#, long(257)),
            "timings[0].name",
            "ingest.max_name_bytes",
        ),
        (
            format!(
                r#"{{"points":[{{"metric":"m","value":1,"attributes":{{"a":"{}"}}}}]}}"#,
                long(4097)
            ),
            "points[0].attributes.a",
            "ingest.max_attribute_value_bytes",
        ),
        (
            format!(r#"{{"points":[{{"metric":"m","value":1,"attributes":{{{many}}}}}]}}"#),
            "points[0].attributes",
            "ingest.max_attributes",
        ),
        (
            format!(r#"{{"events":[{{"name":"e","body":"{}"}}]}}"#, long(4097)),
            "events[0].body",
            "ingest.max_attribute_value_bytes",
        ),
        (
            format!(r#"{{"node_events":[{{"kind":"{}"}}]}}"#, long(257)),
            "node_events[0].kind",
            "ingest.max_name_bytes",
        ),
    ] {
        let b: Body = serde_json::from_str(&body).unwrap();
        let e = b.into_report(1, &Limits::default()).unwrap_err();
        assert!(e.field.starts_with(field), "{field}: {e}");
        assert!(e.reason.contains(setting), "{field}: {e}");
    }
    // At the limit is still fine.
    let ok = format!(r#"{{"origin":{{"job":"{}"}}}}"#, long(256));
    assert!(parse(&ok).is_ok());
}

/// A registry holding the table `requests` of a few columns.
fn requests_table() -> TableRegistry {
    use crate::plugin::bindings::types::{ColumnDecl, ColumnDefault as D, ColumnType as T, TableDecl};
    let col = |name: &str, type_, default| ColumnDecl {
        name: name.into(),
        type_,
        default,
        labels: vec![],
    };
    crate::ingest::tables::tests::registry_with(vec![TableDecl {
        name: "requests".into(),
        description: String::new(),
        columns: vec![
            col("request_id", T::U64, D::Required),
            col("slo_factor", T::F64, D::Zero),
            col("arrival_ns", T::Timestamp, D::Received),
            col("callsite", T::String, D::Zero),
            col("thread", T::U32, D::Zero),
        ],
    }])
}

fn convert(body: &str, registry: &TableRegistry, keep_unknown: bool) -> Converted {
    let b: Body = serde_json::from_str(body).unwrap();
    let rules = TableRules { registry, keep_unknown };
    b.convert(99, &Limits::default(), &rules).unwrap()
}

#[test]
fn a_key_naming_a_declared_table_is_its_rows_and_bad_rows_go_alone() {
    let reg = requests_table();
    let c = convert(
        r#"{"origin":{"job":"serve"},
            "timings":[{"name":"t","start_ns":1,"end_ns":2}],
            "requests":[{"request_id":68,"slo_factor":2},
                        {"request_id":-1},
                        {"slo_factor":1},
                        {"request_id":70,"arival_ns":5},
                        {"request_id":71,"slo_factor":"fast"},
                        {"request_id":72,"slo_factor":null,"arrival_ns":7}],
            "reqests":[{"request_id":1}]}"#,
        &reg,
        false,
    );
    assert_eq!(c.report.timings.len(), 1, "the rest of the body is kept");
    assert_eq!(
        (c.report.rows(), c.refused_rows),
        (3, 5),
        "every row kept or refused, none lost"
    );
    let t = &c.report.tables[0];
    assert_eq!(
        t.columns,
        vec!["request_id", "slo_factor", "arrival_ns", "callsite", "thread"]
    );
    let got: Vec<(u64, f64, u64)> = t.rows.iter().map(|r| (r[0].u(), r[1].f(), r[2].u())).collect();
    assert_eq!(
        got,
        vec![(68, 2.0, 99), (72, 0.0, 7)],
        "defaults: zero, the time of receipt; null = left out"
    );
    let refused: Vec<String> = c.refused.iter().map(|e| e.to_string()).collect();
    let want = [
        "requests[1].request_id: -1: must be an integer from 0",
        "requests[2].request_id: missing",
        "requests[3].arival_ns: not a column of table \"requests\" (its columns: request_id, slo_factor",
        "requests[4].slo_factor: \"fast\": must be a finite number",
        "reqests: 1 rows refused: no running plugin declares a table named \"reqests\" (declared now: requests)",
    ];
    assert_eq!(refused.len(), want.len(), "{refused:#?}");
    for (got, want) in refused.iter().zip(want) {
        assert!(got.starts_with(want), "{got}\n  wanted {want}");
    }
}

#[test]
fn an_agent_keeps_rows_of_tables_it_has_no_plugin_for() {
    let c = convert(
        r#"{"requests":[{"request_id":1,"anything":"x"}]}"#,
        &TableRegistry::default(),
        true,
    );
    assert!(c.refused.is_empty());
    let t = &c.report.tables[0];
    assert!(t.decl.is_none());
    assert_eq!(t.columns, vec!["anything", "request_id"]);
    assert_eq!(c.report.rows(), 1);
}

#[test]
fn rows_of_tables_become_batch_columns() {
    use std::sync::Arc;
    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let hub = IngestHub::with_tables(
        100,
        Arc::new(move |b: &crate::plugin::bindings::types::EventBatch| {
            s2.lock().push(b.clone());
            1
        }),
        Arc::new(requests_table()),
        false,
    );
    let c = convert(
        r#"{"origin":{"job":"j","rank":2},"requests":[{"request_id":5,"callsite":"a+0x1"},{"request_id":6}]}"#,
        hub.tables(),
        false,
    );
    assert_eq!(hub.submit(&c.report), Ok(2));
    hub.flush();
    let b = &seen.lock()[0];
    let t = &b.tables[0];
    use crate::plugin::bindings::types::TableColumn as C;
    assert_eq!(b.origins[0].rank, 2);
    assert_eq!(t.columns[0], C::U64s(vec![5, 6]));
    let C::Strings(cs) = &t.columns[3] else { panic!() };
    assert_eq!(b.names[cs[0] as usize], "a+0x1");
    assert_eq!(b.names[cs[1] as usize], "");
}

#[test]
fn oversized_row_counts_are_refused() {
    let rows: Vec<String> = (0..MAX_ROWS + 1).map(|_| "{}".to_string()).collect();
    let err = parse(&format!(r#"{{"heartbeats":[{}]}}"#, rows.join(","))).unwrap_err();
    assert!(err.contains("at most 100000"), "{err}");
}

#[test]
fn the_token_check_wants_the_exact_bearer_token() {
    let mut h = HeaderMap::new();
    assert!(authorized(&h, None));
    assert!(!authorized(&h, Some("s3")));
    h.insert(header::AUTHORIZATION, "Bearer nope".parse().unwrap());
    assert!(!authorized(&h, Some("s3")));
    h.insert(header::AUTHORIZATION, "Bearer s3".parse().unwrap());
    assert!(authorized(&h, Some("s3")));
}

#[test]
fn probe_stacks_name_their_rows_and_bad_ones_are_refused_by_field() {
    let reg = requests_table();
    let mut c = convert(
        r#"{"origin":{"job":"j","rank":0,"attributes":{"process.pid":"9"}},
            "requests":[{"request_id":1,"thread":0,"callsite":"a+0x1","stack":3},
                        {"request_id":2,"stack":-4}],
            "stacks":[{"thread":0,"id":3,"frames":[4112,4128]}],
            "modules":[{"path":"/nonexistent/app","build_id":"ab","base":4096,"start":4096,"end":8192}]}"#,
        &reg,
        false,
    );
    assert_eq!(c.stacks.refs.len(), 1);
    assert!(
        c.refused[0].to_string().starts_with("requests[1].stack: -4"),
        "{:?}",
        c.refused
    );
    let table = CallStacks::default();
    let origin = c.report.origin.clone();
    table.apply(&origin, c.stacks, &mut c.report);
    assert_eq!(c.report.tables[0].rows[0][3], Cell::S("app+0x20;app+0x10".into()));
    for (bad, field) in [
        (r#""stacks":[{"id":1,"frames":[]}]"#, "stacks[0].frames"),
        (
            r#""modules":[{"path":"/a","build_id":"xyz","base":0,"start":1,"end":2}]"#,
            "modules[0].build_id",
        ),
        (
            r#""modules":[{"path":"/a","base":0,"start":2,"end":2}]"#,
            "modules[0].end",
        ),
    ] {
        let b: Body = serde_json::from_str(&format!("{{{bad}}}")).unwrap();
        let rules = TableRules {
            registry: &reg,
            keep_unknown: false,
        };
        let e = b.convert(0, &Limits::default(), &rules).err().unwrap();
        assert_eq!(e.field, field);
    }
}
