//! The hooks end to end against the fake host: event columns in, the two
//! files and the metrics out; a sink that cannot be opened loses only the file.

use sonde_plugin_sdk::types::{ActionColumns, EventBatch, HttpRequest, RequestColumns};

use crate::plugin::Clockwork;
use crate::rows::{Action, Request};
use crate::settings::Settings;
use sonde_plugin_sdk::testing::FakeHost;

const MS: u64 = 1_000_000;
const T0: u64 = 2_000_000_000_000;

fn batch(reqs: &[Request], acts: &[Action]) -> EventBatch {
    EventBatch {
        requests: Some(RequestColumns {
            origin: reqs.iter().map(|_| 0).collect(),
            request_id: reqs.iter().map(|r| r.request_id).collect(),
            user_id: reqs.iter().map(|r| r.user_id).collect(),
            model_id: reqs.iter().map(|r| r.model_id).collect(),
            slo_factor: reqs.iter().map(|r| r.slo_factor).collect(),
            arrival: reqs.iter().map(|r| r.arrival).collect(),
            departure: reqs.iter().map(|r| r.departure).collect(),
            deadline: reqs.iter().map(|r| r.deadline).collect(),
            result: reqs.iter().map(|r| r.result).collect(),
            arrival_copies: reqs.iter().map(|r| r.arrival_copies).collect(),
            departure_copies: reqs.iter().map(|r| r.departure_copies).collect(),
            action_id: reqs.iter().map(|r| r.action_id).collect(),
            client_sent: reqs.iter().map(|r| r.client_sent).collect(),
            client_received: reqs.iter().map(|r| r.client_received).collect(),
        }),
        actions: Some(ActionColumns {
            origin: acts.iter().map(|_| 0).collect(),
            action_id: acts.iter().map(|a| a.action_id).collect(),
            action_type: acts.iter().map(|a| a.action_type).collect(),
            status: acts.iter().map(|a| a.status).collect(),
            worker_id: acts.iter().map(|a| a.worker_id).collect(),
            gpu_id: acts.iter().map(|a| a.gpu_id).collect(),
            model_id: acts.iter().map(|a| a.model_id).collect(),
            batch_size: acts.iter().map(|a| a.batch_size).collect(),
            expected_exec_duration: acts.iter().map(|a| a.expected_exec_duration).collect(),
            worker_exec_duration: acts.iter().map(|a| a.worker_exec_duration).collect(),
            sent: acts.iter().map(|a| a.sent).collect(),
            expected_exec_complete: acts.iter().map(|a| a.expected_exec_complete).collect(),
            worker_exec_complete: acts.iter().map(|a| a.worker_exec_complete).collect(),
            expected_gpu_clock: acts.iter().map(|a| a.expected_gpu_clock).collect(),
            gpu_clock_before: acts.iter().map(|a| a.gpu_clock_before).collect(),
            gpu_clock_after: acts.iter().map(|a| a.gpu_clock_after).collect(),
            copy_output_complete: acts.iter().map(|a| a.copy_output_complete).collect(),
            action_received: acts.iter().map(|a| a.action_received).collect(),
            result_sent: acts.iter().map(|a| a.result_sent).collect(),
            result_received: acts.iter().map(|a| a.result_received).collect(),
            result_processed: acts.iter().map(|a| a.result_processed).collect(),
            requests_queued: acts.iter().map(|a| a.requests_queued).collect(),
            copies_loaded: acts.iter().map(|a| a.copies_loaded).collect(),
            requests_in_time: acts.iter().map(|a| a.requests_in_time).collect(),
        }),
        ..Default::default()
    }
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
    p.on_events(&mut host, &batch(&reqs, &acts)).unwrap();
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
        fail_open_sink: Some("sink directory /local does not exist (sonde does not create it)".into()),
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
