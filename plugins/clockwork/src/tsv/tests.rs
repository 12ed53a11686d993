//! Golden tests: rows computed by hand from Clockwork's logger code (see
//! the reference, A.2), one case per rule.

use super::*;
use crate::rows::{Action, Request};

const A: u64 = 1_598_832_443_782_277_698;
const S: u64 = 1_000_000_000;

fn req(id: u64, arrival: u64, departure: u64, deadline: u64, result: i32, ac: u32, dc: u32) -> Request {
    Request {
        request_id: id,
        model_id: 9,
        arrival,
        departure,
        deadline,
        result,
        arrival_copies: ac,
        departure_copies: dc,
        ..Default::default()
    }
}

fn requests() -> Vec<Request> {
    vec![
        // The first row of Clockwork's docs/telemetry.md sample, from its inputs: t is
        // the departure (arrival + latency), so the docs' "arrival" is wrong.
        Request {
            request_id: 68,
            model_id: 30,
            ..req(68, A, A + 11_428_945, A + 100_000_000, 0, 0, 2)
        },
        // No deadline given: -1, met iff success.
        req(1, 1000, 5000, 0, 0, 1, 1),
        req(2, 1000, 9000, 0, 4, 0, 0),
        // Deadline before arrival: 0, never met (even on success).
        req(3, 5000, 6000, 4000, 0, 2, 2),
        // One ns late: not met; cold (0 copies on arrival, 1 on departure).
        req(4, 1000, 3001, 3000, 0, 0, 1),
        // Exactly on the deadline: met (<=).
        Request {
            slo_factor: 2.5,
            ..req(5, 1000, 3000, 3000, 0, 1, 1)
        },
        // An error result never meets its deadline; slo_factor printed as %g.
        Request {
            user_id: 7,
            slo_factor: 1.234_567_89,
            ..req(6, 1000, 2000, 5000, 82, 1, 0)
        },
        // A timeout with no copy ever loaded is not a cold start (the docs
        // say it is: the code wants departure_count > arrival_count too).
        Request {
            slo_factor: 0.00001,
            ..req(7, 1000, 96_000, 101_000, 4, 0, 0)
        },
    ]
}

const REQUEST_GOLDEN: &str = "\
t\trequest_id\tresult\tuser_id\tmodel_id\tslo_factor\tlatency\tdeadline\tdeadline_met\tarrival_count\tdeparture_count\tis_coldstart
1598832443793706643\t68\t0\t0\t30\t0\t11428945\t100000000\t1\t0\t2\t1
5000\t1\t0\t0\t9\t0\t4000\t-1\t1\t1\t1\t0
9000\t2\t4\t0\t9\t0\t8000\t-1\t0\t0\t0\t0
6000\t3\t0\t0\t9\t0\t1000\t0\t0\t2\t2\t0
3001\t4\t0\t0\t9\t0\t2001\t2000\t0\t0\t1\t1
3000\t5\t0\t0\t9\t2.5\t2000\t2000\t1\t1\t1\t0
2000\t6\t82\t7\t9\t1.23457\t1000\t4000\t0\t1\t0\t0
96000\t7\t4\t0\t9\t1e-05\t95000\t100000\t0\t0\t0\t0
";

#[test]
fn the_request_log_matches_hand_computed_rows() {
    let rows: Vec<RequestRow> = requests().iter().map(request_row).collect();
    assert_eq!(render(&REQUEST_COLUMNS, &request_columns(&rows)), REQUEST_GOLDEN);
}

fn infer(id: u64) -> Action {
    Action {
        action_id: id,
        action_type: 2,
        model_id: 9,
        batch_size: 1,
        sent: S,
        expected_gpu_clock: 1380,
        gpu_clock_before: 1380,
        gpu_clock_after: 1380,
        ..Default::default()
    }
}

fn actions() -> Vec<Action> {
    vec![
        // Infer, batch 4, 3 requests in time: goodput = uint64(5669663 × 0.75).
        Action {
            worker_id: 1,
            model_id: 30,
            batch_size: 4,
            expected_exec_duration: 5_637_000,
            worker_exec_duration: 5_669_663,
            expected_exec_complete: S + 6_604_169,
            worker_exec_complete: S + 6_830_646,
            gpu_clock_after: 1365,
            copy_output_complete: S + 6_835_000,
            action_received: S + 170_122,
            result_sent: S + 6_840_551,
            result_received: S + 7_251_604,
            result_processed: S + 7_263_700,
            requests_queued: 2,
            copies_loaded: 1,
            requests_in_time: 3,
            ..infer(10)
        },
        // Skew guard: the worker "received" 500 ns before the send, so every
        // worker time moves 500 ns later; the controller's do not.
        Action {
            gpu_id: 1,
            expected_exec_duration: 3_100_000,
            worker_exec_duration: 3_000_000,
            expected_exec_complete: S + 4_500_000,
            worker_exec_complete: S + 4_000_000,
            copy_output_complete: S + 4_100_000,
            action_received: S - 500,
            result_sent: S + 4_200_000,
            result_received: S + 4_800_000,
            result_processed: S + 4_900_000,
            copies_loaded: 2,
            requests_in_time: 1,
            ..infer(11)
        },
        // delta_from clamps: a predicted completion before the send and an
        // unknown (0) copy-output time are 0; no request in time: goodput 0.
        Action {
            batch_size: 2,
            expected_exec_duration: 1_900_000,
            worker_exec_duration: 2_000_000,
            expected_exec_complete: S - 10,
            worker_exec_complete: S + 2_500_000,
            action_received: S + 100,
            result_sent: S + 2_600_000,
            result_received: S + 3_000_000,
            result_processed: S + 3_000_000,
            expected_gpu_clock: 0,
            gpu_clock_before: 0,
            gpu_clock_after: 0,
            requests_queued: 5,
            copies_loaded: 1,
            ..infer(12)
        },
        // An error (execTooLate): no worker duration, goodput 0.
        Action {
            status: 81,
            worker_id: 2,
            batch_size: 3,
            expected_exec_duration: 600_000,
            worker_exec_duration: 1_234,
            expected_exec_complete: S + 700_000,
            action_received: S + 50,
            gpu_clock_before: 0,
            gpu_clock_after: 0,
            result_received: S + 1_000_000,
            result_processed: S + 1_000_100,
            requests_queued: 3,
            copies_loaded: 1,
            ..infer(13)
        },
        // Load weights: batch 1, no clocks, goodput = the whole duration.
        Action {
            action_type: 1,
            worker_id: 3,
            model_id: 30,
            expected_exec_duration: 8_000_000,
            worker_exec_duration: 7_500_000,
            expected_exec_complete: S + 8_300_000,
            worker_exec_complete: S + 7_800_000,
            action_received: S + 200,
            result_sent: S + 7_900_000,
            result_received: S + 8_100_000,
            result_processed: S + 8_150_000,
            requests_queued: 4,
            ..infer(14)
        },
        // Evict: no prediction, and copies_loaded + 1 (counted before the evict).
        Action {
            action_type: 3,
            worker_id: 3,
            model_id: 30,
            batch_size: 5,
            expected_exec_duration: 5,
            worker_exec_duration: 100_000,
            worker_exec_complete: S + 150_000,
            action_received: S + 300,
            result_sent: S + 160_000,
            result_received: S + 400_000,
            result_processed: S + 400_000,
            ..infer(15)
        },
        // Could not start sending in time (45): the worker never saw it, so
        // every worker time is unknown (0) and stays 0 after the skew guard.
        Action {
            status: 45,
            batch_size: 2,
            expected_exec_duration: 2_000_000,
            expected_exec_complete: S + 5_000_000,
            gpu_clock_before: 0,
            gpu_clock_after: 0,
            result_received: S + 6_000_000,
            result_processed: S + 6_000_000,
            requests_queued: 7,
            copies_loaded: 1,
            ..infer(16)
        },
    ]
}

const ACTION_GOLDEN: &str = "\
t\taction_id\taction_type\tstatus\tworker_id\tgpu_id\tmodel_id\tbatch_size\texpected_exec_duration\tworker_exec_duration\texpected_exec_complete\tworker_exec_complete\texpected_gpu_clock\tworker_gpu_clock_before\tworker_gpu_clock\tworker_copy_output_complete\tworker_action_received\tworker_result_sent\tcontroller_result_enqueue\tcontroller_action_duration\tgoodput\trequests_queued\tcopies_loaded
1007251604\t10\t2\t0\t1\t0\t30\t4\t5637000\t5669663\t6604169\t6830646\t1380\t1380\t1365\t6835000\t170122\t6840551\t7251604\t7263700\t4252247\t2\t1
1004800000\t11\t2\t0\t0\t1\t9\t1\t3100000\t3000000\t4500000\t4000500\t1380\t1380\t1380\t4100500\t0\t4200500\t4800000\t4900000\t3000000\t0\t2
1003000000\t12\t2\t0\t0\t0\t9\t2\t1900000\t2000000\t0\t2500000\t0\t0\t0\t0\t100\t2600000\t3000000\t3000000\t0\t5\t1
1001000000\t13\t2\t81\t2\t0\t9\t3\t600000\t0\t700000\t0\t1380\t0\t0\t0\t50\t0\t1000000\t1000100\t0\t3\t1
1008100000\t14\t1\t0\t3\t0\t30\t1\t8000000\t7500000\t8300000\t7800000\t0\t0\t0\t0\t200\t7900000\t8100000\t8150000\t7500000\t4\t0
1000400000\t15\t3\t0\t3\t0\t30\t1\t0\t100000\t0\t150000\t0\t0\t0\t0\t300\t160000\t400000\t400000\t100000\t0\t1
1006000000\t16\t2\t45\t0\t0\t9\t2\t2000000\t0\t5000000\t0\t1380\t0\t0\t0\t0\t0\t6000000\t6000000\t0\t7\t1
";

#[test]
fn the_action_log_matches_hand_computed_rows() {
    let rows: Vec<ActionRow> = actions().iter().map(action_row).collect();
    let got = render(&ACTION_COLUMNS, &action_columns(&rows));
    for (g, w) in got.lines().zip(ACTION_GOLDEN.lines()) {
        assert_eq!(g, w);
    }
    assert_eq!(got, ACTION_GOLDEN);
}

#[test]
fn floats_print_as_cpp_ostream_does() {
    for (v, want) in [
        (0.0, "0"),
        (3.0, "3"),
        (0.5, "0.5"),
        (2.5, "2.5"),
        (100.0, "100"),
        (123_456.0, "123456"),
        (1_234_567.0, "1.23457e+06"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (1.234_567_89, "1.23457"),
        (0.1_f32 as f64, "0.1"),
        (999_999.5, "1e+06"),
    ] {
        assert_eq!(format_g(v), want, "{v}");
    }
}

#[test]
fn delta_from_clamps_at_zero() {
    assert_eq!(delta_from(5, 3), 2);
    assert_eq!(delta_from(3, 5), 0);
    assert_eq!(delta_from(0, S), 0);
}
