use super::*;

const MS: u64 = 1_000_000;
const T0: u64 = 1_000_000_000_000;

fn infer(id: u64, sent: u64) -> Action {
    Action {
        action_id: id,
        action_type: INFER,
        model_id: 1,
        batch_size: 1,
        requests_in_time: 1,
        sent,
        action_received: sent + MS,
        expected_exec_duration: 5 * MS,
        expected_exec_complete: sent + 7 * MS,
        worker_exec_duration: 5 * MS,
        worker_exec_complete: sent + 7 * MS,
        result_sent: sent + 8 * MS,
        result_received: sent + 9 * MS,
        result_processed: sent + 9 * MS,
        ..Default::default()
    }
}

fn request(id: u64, arrival: u64, departure: u64, action: u64) -> Request {
    Request {
        request_id: id,
        model_id: 1,
        arrival,
        departure,
        deadline: arrival + 20 * MS,
        action_id: action,
        arrival_copies: 1,
        departure_copies: 1,
        ..Default::default()
    }
}

#[test]
fn a_request_splits_into_queueing_network_execution_and_controller() {
    let a = infer(1, T0 + 4 * MS);
    let r = request(1, T0, T0 + 14 * MS, 1);
    // queued 4 ms; network 1 ms out + 1 ms back; worker 7 ms; controller 1 ms.
    assert_eq!(
        split(&r, Some(&a)),
        Split {
            queueing: 4 * MS,
            network: 2 * MS,
            execution: 7 * MS,
            controller: MS,
        }
    );
    assert_eq!(split(&r, None).queueing, 14 * MS, "no action: it all waited");
}

#[test]
fn every_miss_gets_its_cause() {
    let a = infer(1, T0 + 4 * MS);
    let ok = request(1, T0, T0 + 14 * MS, 1);
    assert_eq!(miss_cause(&ok, Some(&a)), None);
    let late = |r: Request| Request {
        departure: r.arrival + 25 * MS,
        ..r
    };
    let err = Request {
        result: 82,
        ..ok.clone()
    };
    assert_eq!(miss_cause(&err, Some(&a)), Some("error"));
    let cold = Request {
        arrival_copies: 0,
        ..late(ok.clone())
    };
    assert_eq!(miss_cause(&cold, Some(&a)), Some("coldstart"));
    // The worker received it 1 ms after the predicted start (sent + 2 ms).
    let slow_send = Action {
        action_received: a.sent + 3 * MS,
        ..a.clone()
    };
    assert_eq!(miss_cause(&late(ok.clone()), Some(&slow_send)), Some("late_send"));
    let too_late = Action {
        status: 45,
        ..a.clone()
    };
    assert_eq!(miss_cause(&late(ok.clone()), Some(&too_late)), Some("late_send"));
    // Finished 6 ms after the predicted completion; 25 − 6 = 19 ≤ 20: had
    // the prediction held, the deadline was met.
    let overran = Action {
        worker_exec_complete: a.expected_exec_complete + 6 * MS,
        ..a.clone()
    };
    assert_eq!(miss_cause(&late(ok.clone()), Some(&overran)), Some("misprediction"));
    // 4 ms over: 25 − 4 = 21 > 20: the prediction is not what made it late.
    let small = Action {
        worker_exec_complete: a.expected_exec_complete + 4 * MS,
        ..a.clone()
    };
    assert_eq!(miss_cause(&late(ok.clone()), Some(&small)), Some("queueing"));
    let timeout = Request {
        result: TIMEOUT,
        action_id: 0,
        ..late(ok)
    };
    assert_eq!(miss_cause(&timeout, None), Some("queueing"));
}

#[test]
fn a_window_gives_goodput_attainment_batch_and_utilisation() {
    let mut an = Analysis::new(4_000 * MS, 100 * MS);
    // Three infer actions of batch 1, 3 and 4 on worker 0 / GPU 0.
    for (id, b, in_time) in [(1, 1, 1), (2, 3, 3), (3, 4, 2)] {
        an.add_action(&Action {
            batch_size: b,
            requests_in_time: in_time,
            ..infer(id, T0 + id * 10 * MS)
        });
    }
    // A load on the same GPU.
    an.add_action(&Action {
        action_id: 9,
        action_type: LOAD_WEIGHTS,
        model_id: 1,
        batch_size: 1,
        sent: T0,
        worker_exec_duration: 40 * MS,
        result_received: T0 + 50 * MS,
        result_processed: T0 + 50 * MS,
        ..Default::default()
    });
    // 8 requests: 6 met, 1 late success (cold), 1 timeout.
    for i in 0..6 {
        an.add_request(T0, request(i, T0 + i * MS, T0 + i * MS + 10 * MS, 2));
    }
    an.add_request(
        T0,
        Request {
            arrival_copies: 0,
            departure_copies: 1,
            ..request(6, T0, T0 + 30 * MS, 3)
        },
    );
    an.add_request(
        T0,
        Request {
            result: TIMEOUT,
            ..request(7, T0, T0 + 19 * MS, 0)
        },
    );
    an.resolve(T0, false);
    assert_eq!(an.pending(), 0, "every action was known");
    assert!(an.close(T0 + 4_000 * MS, false).is_empty(), "not closed before the lag");
    let m = an.close(T0 + 5_000 * MS, false);
    let get = |name: &str, attr: Option<(&str, &str)>| {
        m.iter()
            .find(|p| p.name == name && attr.is_none_or(|(k, v)| p.attrs.iter().any(|(kk, vv)| *kk == k && vv == v)))
            .unwrap_or_else(|| panic!("{name} missing"))
            .value
    };
    // goodput: 6 in time / 4 s; throughput: 7 successes / 4 s.
    assert_eq!(get("clockwork.goodput", None), 1.5);
    assert_eq!(get("clockwork.throughput", None), 1.75);
    assert_eq!(get("clockwork.slo.attainment", None), 0.75);
    assert_eq!(get("clockwork.slo.violation_rate", None), 0.25);
    // Σb²/Σb = (1 + 9 + 16) / 8
    assert_eq!(get("clockwork.batch_size.mean", None), 3.25);
    assert!((get("clockwork.coldstart.share", None) - 1.0 / 7.0).abs() < 1e-12);
    // GPU: 3 × 5 ms of infer in 4 s; goodput 5 + 5 + 2.5 ms; PCIe 40 ms.
    assert!((get("clockwork.gpu.utilization", None) - 0.015 / 4.0).abs() < 1e-12);
    assert!((get("clockwork.gpu.goodput_utilization", None) - 0.0125 / 4.0).abs() < 1e-12);
    assert!((get("clockwork.pcie.utilization", None) - 0.04 / 4.0).abs() < 1e-12);
    assert_eq!(get("clockwork.latency", Some(("quantile", "1"))), 0.030);
    let t = &an.totals[&1];
    assert_eq!((t.requests, t.good), (8, 6));
    assert_eq!(t.misses.get("coldstart"), Some(&1));
    assert_eq!(t.misses.get("queueing"), Some(&1));
    // A row for a closed window is counted, not lost silently.
    an.add_request(T0, request(99, T0, T0 + MS, 0));
    an.resolve(T0, true);
    assert_eq!(an.late_rows, 1);
    assert_eq!(an.totals[&1].requests, 9, "still in the totals");
}

#[test]
fn a_request_waits_for_its_action_up_to_the_lag() {
    let mut an = Analysis::new(4_000 * MS, 100 * MS);
    an.add_request(T0, request(1, T0, T0 + 14 * MS, 5));
    an.resolve(T0 + 50 * MS, false);
    assert_eq!(an.pending(), 1);
    an.add_action(&infer(5, T0 + 4 * MS));
    an.resolve(T0 + 60 * MS, false);
    assert_eq!(an.pending(), 0);
    assert_eq!(an.recent[0].split_ns.execution, 7 * MS, "joined with its action");
    an.add_request(T0, request(2, T0, T0 + 14 * MS, 6));
    an.resolve(T0 + 100 * MS, false);
    assert_eq!(an.pending(), 0, "given up after the lag");
    assert_eq!(an.recent[1].split_ns.queueing, 14 * MS);
}

#[test]
fn quantiles_interpolate() {
    let v = [1.0, 2.0, 3.0, 4.0];
    assert_eq!(quantile(&v, 0.5), 2.5);
    assert_eq!(quantile(&v, 1.0), 4.0);
    assert_eq!(quantile(&[], 0.5), 0.0);
}
