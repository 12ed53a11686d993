//! The hooks end to end against the fake host: event columns in, the two
//! files and the metrics out; a sink that cannot be opened loses only the file.

use sonde_plugin_sdk::types::{EventBatch, HttpRequest, Value};

use crate::plugin::Clockwork;
use crate::rows::{Action, Request, actions_table, requests_table};
use crate::settings::Settings;
use sonde_plugin_sdk::testing::FakeHost;

const MS: u64 = 1_000_000;
const T0: u64 = 2_000_000_000_000;

fn int(v: impl TryInto<i64>) -> Value {
    Value::Int(v.try_into().unwrap_or(i64::MAX))
}

/// A request as a controller sends it: its fields by column name.
fn request_fields(r: &Request) -> Vec<(&'static str, Value)> {
    vec![
        ("request_id", int(r.request_id)),
        ("user_id", int(r.user_id)),
        ("model_id", int(r.model_id)),
        ("slo_factor", Value::Float(r.slo_factor)),
        ("arrival_ns", int(r.arrival)),
        ("departure_ns", int(r.departure)),
        ("deadline_ns", int(r.deadline)),
        ("result", int(r.result)),
        ("arrival_copies", int(r.arrival_copies)),
        ("departure_copies", int(r.departure_copies)),
        ("action_id", int(r.action_id)),
        ("client_sent_ns", int(r.client_sent)),
        ("client_received_ns", int(r.client_received)),
    ]
}

fn action_fields(a: &Action) -> Vec<(&'static str, Value)> {
    vec![
        ("action_id", int(a.action_id)),
        ("action_type", int(a.action_type)),
        ("status", int(a.status)),
        ("worker_id", int(a.worker_id)),
        ("gpu_id", int(a.gpu_id)),
        ("model_id", int(a.model_id)),
        ("batch_size", int(a.batch_size)),
        ("expected_exec_duration_ns", int(a.expected_exec_duration)),
        ("worker_exec_duration_ns", int(a.worker_exec_duration)),
        ("sent_ns", int(a.sent)),
        ("expected_exec_complete_ns", int(a.expected_exec_complete)),
        ("worker_exec_complete_ns", int(a.worker_exec_complete)),
        ("expected_gpu_clock_mhz", int(a.expected_gpu_clock)),
        ("gpu_clock_before_mhz", int(a.gpu_clock_before)),
        ("gpu_clock_after_mhz", int(a.gpu_clock_after)),
        ("copy_output_complete_ns", int(a.copy_output_complete)),
        ("action_received_ns", int(a.action_received)),
        ("result_sent_ns", int(a.result_sent)),
        ("result_received_ns", int(a.result_received)),
        ("result_processed_ns", int(a.result_processed)),
        ("requests_queued", int(a.requests_queued)),
        ("copies_loaded", int(a.copies_loaded)),
        ("requests_in_time", int(a.requests_in_time)),
    ]
}

/// The rows in the two tables, as the host hands them over.
fn batch(reqs: &[Request], acts: &[Action]) -> EventBatch {
    let mut b = EventBatch::default();
    let (rt, at) = (requests_table(), actions_table());
    for r in reqs {
        b.push_row(&rt, 0, &request_fields(r)).unwrap();
    }
    for a in acts {
        b.push_row(&at, 0, &action_fields(a)).unwrap();
    }
    b
}

fn workload() -> (Vec<Request>, Vec<Action>) {
    let a = Action {
        action_id: 1,
        action_type: 2,
        model_id: 3,
        batch_size: 2,
        requests_in_time: 2,
        sent: T0 + 2 * MS,
        action_received: T0 + 3 * MS,
        expected_exec_duration: 4 * MS,
        worker_exec_duration: 4 * MS,
        expected_exec_complete: T0 + 8 * MS,
        worker_exec_complete: T0 + 8 * MS,
        result_sent: T0 + 9 * MS,
        result_received: T0 + 10 * MS,
        result_processed: T0 + 10 * MS,
        expected_gpu_clock: 1380,
        gpu_clock_before: 1380,
        gpu_clock_after: 1380,
        copies_loaded: 1,
        ..Default::default()
    };
    let r = |id| Request {
        request_id: id,
        model_id: 3,
        arrival: T0,
        departure: T0 + 11 * MS,
        deadline: T0 + 100 * MS,
        arrival_copies: 1,
        departure_copies: 1,
        action_id: 1,
        ..Default::default()
    };
    (vec![r(1), r(2)], vec![a])
}

#[test]
fn events_become_both_logs_metrics_and_estimates() {
    let mut host = FakeHost::at(T0);
    let settings = Settings::parse(r#"{"profiles":{"3":{"exec_ns":{"1":2900000,"2":3600000}}}}"#).unwrap();
    let mut p = Clockwork::start(&mut host, settings);
    assert_eq!(p.estimator(3).predict(2, 1380), 3_600_000, "seeded from the profile");
    let (reqs, acts) = workload();
    assert!(host.timers.is_empty(), "no rows yet, no emit timer");
    p.on_events(&mut host, &batch(&reqs, &acts)).unwrap();
    p.follow_rows(&mut host);
    assert_eq!(host.timers.len(), 1, "the first rows start the emit timer");
    assert_eq!(host.files.len(), 2, "{:?}", host.files.keys());
    assert_eq!(
        host.files["clockwork_request_log.tsv"].lines().nth(1).unwrap(),
        format!("{}\t1\t0\t0\t3\t0\t11000000\t100000000\t1\t1\t1\t0", T0 + 11 * MS)
    );
    assert_eq!(
        host.files["clockwork_action_log.tsv"].lines().nth(1).unwrap(),
        format!(
            "{}\t1\t2\t0\t0\t0\t3\t2\t4000000\t4000000\t6000000\t6000000\t1380\t1380\t1380\t0\t1000000\t7000000\t8000000\t8000000\t4000000\t0\t1",
            T0 + 10 * MS
        )
    );
    // The estimator learnt b2 = 4 ms at 1380 MHz.
    assert_eq!(p.estimators[&3].predict(2, 1380), 4 * MS);
    host.now = T0 + 10_000 * MS;
    p.on_timer(&mut host).unwrap();
    let goodput = host.points_of("clockwork.goodput", &[]);
    assert_eq!(goodput.len(), 1);
    assert_eq!(goodput[0].value, 0.5, "2 requests in a 4 s window");
    assert_eq!(goodput[0].attr("clockwork.model.id"), Some("3"));
    assert_eq!(host.points_of("clockwork.requests", &[])[0].value, 2.0);
    let summary = crate::routes::summary(&p);
    assert_eq!(summary["models"][0]["requests"], 2);
    assert_eq!(summary["logs"][0]["rows"], 2);
}

/// The goodput column (ns) of every row of the action log written so far.
fn logged_goodput(host: &FakeHost) -> Vec<String> {
    host.file("clockwork_action_log.tsv")
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split('\t').nth(20).unwrap().to_string())
        .collect()
}

#[test]
fn an_infer_action_without_requests_in_time_gets_goodput_from_its_requests() {
    let (reqs, acts) = workload();
    let unset = |mut a: Action| {
        a.requests_in_time = 0;
        a
    };
    // Together in one batch, and the action first with its requests later.
    for split in [false, true] {
        let mut host = FakeHost::at(T0);
        let mut p = Clockwork::start(&mut host, Settings::default());
        let acts: Vec<Action> = acts.iter().cloned().map(unset).collect();
        if split {
            p.on_events(&mut host, &batch(&[], &acts)).unwrap();
            assert!(logged_goodput(&host).is_empty(), "held until its requests come");
            host.now += MS;
            p.on_events(&mut host, &batch(&reqs, &[])).unwrap();
        } else {
            p.on_events(&mut host, &batch(&reqs, &acts)).unwrap();
        }
        // Both requests met their deadline: the whole 4 ms counts.
        assert_eq!(logged_goodput(&host), ["4000000"], "split: {split}");
        assert_eq!(p.in_time.derived, 1);
        host.now = T0 + 10_000 * MS;
        p.on_timer(&mut host).unwrap();
        let util = host.points_of("clockwork.gpu.goodput_utilization", &[]);
        assert!((util[0].value - 0.004 / 4.0).abs() < 1e-12, "{util:?}");
    }
    // One of the two late: half; its requests never all come: what came, after lag_ms.
    let mut host = FakeHost::at(T0);
    let mut p = Clockwork::start(&mut host, Settings::default());
    let mut late = reqs[1].clone();
    late.deadline = T0 + 5 * MS;
    let acts: Vec<Action> = acts.into_iter().map(unset).collect();
    p.on_events(&mut host, &batch(&[reqs[0].clone(), late], &acts)).unwrap();
    assert_eq!(logged_goodput(&host), ["2000000"]);
    let mut lone = acts[0].clone();
    lone.action_id = 9;
    p.on_events(&mut host, &batch(&[], &[lone])).unwrap();
    assert_eq!(logged_goodput(&host).len(), 1);
    host.now += 1000 * MS;
    p.on_timer(&mut host).unwrap();
    assert_eq!(logged_goodput(&host), ["2000000", "0"], "no request in time came");
}

#[test]
fn an_unwritable_sink_directory_writes_no_file_and_loses_no_analysis() {
    let mut host = FakeHost {
        now: T0,
        fail_open_sink: Some("sink directory /local does not exist; sonde does not create it".into()),
        ..Default::default()
    };
    let mut p = Clockwork::start(&mut host, Settings::default());
    assert!(host.logged("not writing clockwork_request_log.tsv"));
    let (reqs, acts) = workload();
    p.on_events(&mut host, &batch(&reqs, &acts)).unwrap();
    assert!(host.files.is_empty());
    assert_eq!(p.analysis.totals[&3].requests, 2);
    let s = crate::routes::summary(&p);
    assert!(s["logs"][0]["error"].as_str().unwrap().contains("/local"));
}

#[test]
fn the_batch_route_answers_a_controllers_queue() {
    let mut host = FakeHost::at(T0);
    let settings = Settings::parse(r#"{"profiles":{"3":{"exec_ns":{"1":2900000,"2":3600000,"4":5000000}}}}"#).unwrap();
    let mut p = Clockwork::start(&mut host, settings);
    let body = serde_json::json!({
        "model_id": 3, "now_ns": T0, "free_at_ns": T0,
        "queue": (0..5).map(|i| serde_json::json!({"request_id": i, "arrival_ns": T0})).collect::<Vec<_>>()
    });
    let req = |method: &str, path: &str, body: Vec<u8>| HttpRequest {
        method: method.into(),
        path: path.into(),
        body,
        ..Default::default()
    };
    let r = crate::routes::handle(&mut p, &mut host, &req("POST", "/batch", body.to_string().into_bytes()));
    assert_eq!(r.status, 200);
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["batch"], serde_json::json!([0, 1, 2, 3]));
    assert_eq!(v["expected_exec_duration_ns"], 5 * MS);
    let r = crate::routes::handle(&mut p, &mut host, &req("POST", "/batch", b"{}".to_vec()));
    assert_eq!(r.status, 400);
    let body = serde_json::json!({"gpus": [{"gpu_id": 0, "loaded": [3]}, {"gpu_id": 1}], "queued": [{"model_id": 3, "count": 2}, {"model_id": 4, "count": 1}]});
    let r = crate::routes::handle(
        &mut p,
        &mut host,
        &req("POST", "/placement", body.to_string().into_bytes()),
    );
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["gpus"][1]["load"]["model_id"], 4, "the unserved model");
    assert_eq!(v["gpus"][0]["evict_order"], serde_json::json!([3]));
    let r = crate::routes::handle(&mut p, &mut host, &req("GET", "/nope", vec![]));
    assert_eq!(r.status, 404);
}

#[test]
fn rows_are_read_by_column_name_and_rows_that_cannot_be_right_are_counted() {
    let mut host = FakeHost {
        now: T0,
        ..Default::default()
    };
    let mut p = Clockwork::start(&mut host, Settings::default());
    assert_eq!(
        host.sinks[0]
            .default_dir
            .as_ref()
            .map(|d| (d.env.as_str(), d.dir.as_str())),
        Some(("CLOCKWORK_LOG_DIR", "/local")),
        "the plugin, not the host, says where Clockwork's logs go"
    );
    let (reqs, acts) = workload();
    let mut b = batch(&reqs, &acts);
    // A request leaving before it arrived, and an action with an unprocessed
    // result (0 = when it was received), as a controller may send them.
    b.push_row(
        &requests_table(),
        0,
        &[
            ("request_id", int(99)),
            ("model_id", int(3)),
            ("arrival_ns", int(T0 + 5 * MS)),
            ("departure_ns", int(T0)),
        ],
    )
    .unwrap();
    b.push_row(
        &actions_table(),
        0,
        &[
            ("action_id", int(77)),
            ("action_type", int(3)),
            ("model_id", int(3)),
            ("sent_ns", int(T0)),
            ("result_received_ns", int(T0 + MS)),
        ],
    )
    .unwrap();
    // Columns in another order (a table read by name): the same rows.
    let t = b.table("actions").next().unwrap();
    let evict = crate::rows::actions(&t).unwrap().pop().unwrap();
    assert_eq!((evict.result_processed, evict.batch_size), (T0 + MS, 1));
    p.on_events(&mut host, &b).unwrap();
    assert_eq!(
        (p.requests_seen, p.actions_seen),
        (reqs.len() as u64 + 1, acts.len() as u64 + 1)
    );
    assert_eq!(p.invalid_rows, 1);
    assert!(
        p.last_invalid
            .as_deref()
            .unwrap()
            .contains("request 99: departure_ns is before arrival_ns")
    );
    assert_eq!(crate::routes::summary(&p)["invalid_rows"], 1);
}
