//! Clockwork's two telemetry files, byte for byte as its controller's code
//! writes them (`RequestTelemetryFileLogger::log`,
//! `ControllerActionTelemetryFileLogger::log`), where the code and
//! Clockwork's `docs/telemetry.md` disagree the code wins:
//!
//! * request `t` is the departure (docs: arrival); `deadline` is relative to
//!   arrival, -1 when none was given and 0 when it lies before the arrival;
//!   `deadline_met` follows the same three cases; `is_coldstart` needs
//!   `departure_count > arrival_count` as well as `arrival_count == 0`.
//! * action `t` is when the result was received (docs: sent); every
//!   "relative" column is `delta_from(v, sent)` (clamped at 0); worker times
//!   are first shifted forward when the worker's receive time lies before the
//!   send (clock-skew guard); `goodput` is nanoseconds
//!   (`uint64(worker_exec_duration × in-time fraction)`), not a fraction.
//!
//! Everything here is plain data in, columns out: the plugin hands the
//! columns to the host's `write-rows`, which prints integers in decimal.
//! `slo_factor` is a float printed as C++'s default `ostream <<` does (`%g`,
//! 6 significant digits), so it travels as text.

use crate::rows::{Action, EVICT_WEIGHTS, INFER, LOAD_WEIGHTS, Request};

pub const REQUEST_LOG: &str = "clockwork_request_log.tsv";
pub const ACTION_LOG: &str = "clockwork_action_log.tsv";

pub const REQUEST_COLUMNS: [&str; 12] = [
    "t",
    "request_id",
    "result",
    "user_id",
    "model_id",
    "slo_factor",
    "latency",
    "deadline",
    "deadline_met",
    "arrival_count",
    "departure_count",
    "is_coldstart",
];

pub const ACTION_COLUMNS: [&str; 23] = [
    "t",
    "action_id",
    "action_type",
    "status",
    "worker_id",
    "gpu_id",
    "model_id",
    "batch_size",
    "expected_exec_duration",
    "worker_exec_duration",
    "expected_exec_complete",
    "worker_exec_complete",
    "expected_gpu_clock",
    "worker_gpu_clock_before",
    "worker_gpu_clock",
    "worker_copy_output_complete",
    "worker_action_received",
    "worker_result_sent",
    "controller_result_enqueue",
    "controller_action_duration",
    "goodput",
    "requests_queued",
    "copies_loaded",
];

/// One request-log row, as written.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestRow {
    pub t: u64,
    pub request_id: u64,
    pub result: i64,
    pub user_id: u64,
    pub model_id: u64,
    pub slo_factor: String,
    pub latency: u64,
    pub deadline: i64,
    pub deadline_met: u64,
    pub arrival_count: u64,
    pub departure_count: u64,
    pub is_coldstart: u64,
}

/// One action-log row, as written.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ActionRow {
    pub t: u64,
    pub action_id: u64,
    pub action_type: u64,
    pub status: i64,
    pub worker_id: u64,
    pub gpu_id: u64,
    pub model_id: u64,
    pub batch_size: u64,
    pub expected_exec_duration: u64,
    pub worker_exec_duration: u64,
    pub expected_exec_complete: u64,
    pub worker_exec_complete: u64,
    pub expected_gpu_clock: u64,
    pub worker_gpu_clock_before: u64,
    pub worker_gpu_clock: u64,
    pub worker_copy_output_complete: u64,
    pub worker_action_received: u64,
    pub worker_result_sent: u64,
    pub controller_result_enqueue: u64,
    pub controller_action_duration: u64,
    pub goodput: u64,
    pub requests_queued: u64,
    pub copies_loaded: u64,
}

/// Clockwork's `delta_from(v, s)`: v − s, or 0 when v is before s.
pub fn delta_from(v: u64, s: u64) -> u64 {
    v.saturating_sub(s)
}

/// The deadline column: -1 none given, 0 before arrival, else relative ns.
pub fn relative_deadline(r: &Request) -> i64 {
    if r.deadline == 0 {
        -1
    } else if r.deadline < r.arrival {
        0
    } else {
        (r.deadline - r.arrival).min(i64::MAX as u64) as i64
    }
}

pub fn request_row(r: &Request) -> RequestRow {
    RequestRow {
        t: r.departure,
        request_id: r.request_id,
        result: r.result as i64,
        user_id: r.user_id,
        model_id: r.model_id,
        slo_factor: format_g(r.slo_factor),
        latency: r.latency(),
        deadline: relative_deadline(r),
        deadline_met: r.deadline_met() as u64,
        arrival_count: r.arrival_copies as u64,
        departure_count: r.departure_copies as u64,
        is_coldstart: r.is_coldstart() as u64,
    }
}

/// The worker's times after the clock-skew guard: when the worker says it
/// received the action before the controller sent it, every worker time
/// moves forward by the difference.
pub fn skew_corrected(a: &Action) -> Action {
    let mut a = a.clone();
    if a.action_received < a.sent {
        let shift = a.sent - a.action_received;
        for t in [
            &mut a.action_received,
            &mut a.worker_exec_complete,
            &mut a.copy_output_complete,
            &mut a.result_sent,
        ] {
            *t = t.saturating_add(shift);
        }
    }
    a
}

/// The share of an action's work that counted: in-time requests / batch
/// size for an infer, 1 for a successful load or evict, 0 on error.
pub fn goodput_fraction(a: &Action) -> f64 {
    if a.status != 0 {
        return 0.0;
    }
    match a.action_type {
        INFER => a.requests_in_time.min(a.batch_size) as f64 / a.batch_size.max(1) as f64,
        _ => 1.0,
    }
}

pub fn action_row(a: &Action) -> ActionRow {
    let a = skew_corrected(a);
    let s = a.sent;
    let infer = a.action_type == INFER;
    // Clockwork's telemetry holds the worker's duration only for a result;
    // an error result has none.
    let worker_exec_duration = if a.status == 0 { a.worker_exec_duration } else { 0 };
    ActionRow {
        t: a.result_received,
        action_id: a.action_id,
        action_type: a.action_type as u64,
        status: a.status as i64,
        worker_id: a.worker_id as u64,
        gpu_id: a.gpu_id as u64,
        model_id: a.model_id,
        batch_size: if infer { a.batch_size as u64 } else { 1 },
        expected_exec_duration: if a.action_type == EVICT_WEIGHTS {
            0
        } else {
            a.expected_exec_duration
        },
        worker_exec_duration,
        expected_exec_complete: delta_from(a.expected_exec_complete, s),
        worker_exec_complete: delta_from(a.worker_exec_complete, s),
        expected_gpu_clock: if infer { a.expected_gpu_clock as u64 } else { 0 },
        worker_gpu_clock_before: if infer { a.gpu_clock_before as u64 } else { 0 },
        worker_gpu_clock: if infer { a.gpu_clock_after as u64 } else { 0 },
        worker_copy_output_complete: delta_from(a.copy_output_complete, s),
        worker_action_received: delta_from(a.action_received, s),
        worker_result_sent: delta_from(a.result_sent, s),
        controller_result_enqueue: delta_from(a.result_received, s),
        controller_action_duration: delta_from(a.result_processed, s),
        goodput: (worker_exec_duration as f64 * goodput_fraction(&a)) as u64,
        requests_queued: a.requests_queued as u64,
        // The controller counts an evicted copy out when it decides the
        // evict, and logs the count from before that decision.
        copies_loaded: a.copies_loaded as u64 + (a.action_type == EVICT_WEIGHTS) as u64,
    }
}

/// Load and evict have no worker clock readings; other types pass as given.
pub fn is_weights_action(t: u8) -> bool {
    t == LOAD_WEIGHTS || t == EVICT_WEIGHTS
}

/// A float as C++'s default `std::ostream <<` prints it: `%g` with 6
/// significant digits (0, 2.5, 1.23457, 1e-05, 1.23457e+06).
pub fn format_g(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let sci = format!("{v:.5e}");
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("exponent is an integer");
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exp.abs())
    } else {
        trim(&format!("{v:.*}", (5 - exp) as usize))
    }
}

/// Rows in the columns `write-rows` takes (u64, s64 and text columns).
pub enum Col {
    U(Vec<u64>),
    S(Vec<i64>),
    T(Vec<String>),
}

pub fn request_columns(rows: &[RequestRow]) -> Vec<Col> {
    let u = |f: fn(&RequestRow) -> u64| Col::U(rows.iter().map(f).collect());
    let s = |f: fn(&RequestRow) -> i64| Col::S(rows.iter().map(f).collect());
    vec![
        u(|r| r.t),
        u(|r| r.request_id),
        s(|r| r.result),
        u(|r| r.user_id),
        u(|r| r.model_id),
        Col::T(rows.iter().map(|r| r.slo_factor.clone()).collect()),
        u(|r| r.latency),
        s(|r| r.deadline),
        u(|r| r.deadline_met),
        u(|r| r.arrival_count),
        u(|r| r.departure_count),
        u(|r| r.is_coldstart),
    ]
}

pub fn action_columns(rows: &[ActionRow]) -> Vec<Col> {
    let u = |f: fn(&ActionRow) -> u64| Col::U(rows.iter().map(f).collect());
    vec![
        u(|r| r.t),
        u(|r| r.action_id),
        u(|r| r.action_type),
        Col::S(rows.iter().map(|r| r.status).collect()),
        u(|r| r.worker_id),
        u(|r| r.gpu_id),
        u(|r| r.model_id),
        u(|r| r.batch_size),
        u(|r| r.expected_exec_duration),
        u(|r| r.worker_exec_duration),
        u(|r| r.expected_exec_complete),
        u(|r| r.worker_exec_complete),
        u(|r| r.expected_gpu_clock),
        u(|r| r.worker_gpu_clock_before),
        u(|r| r.worker_gpu_clock),
        u(|r| r.worker_copy_output_complete),
        u(|r| r.worker_action_received),
        u(|r| r.worker_result_sent),
        u(|r| r.controller_result_enqueue),
        u(|r| r.controller_action_duration),
        u(|r| r.goodput),
        u(|r| r.requests_queued),
        u(|r| r.copies_loaded),
    ]
}

/// The text the host writes for these columns (tab-separated, one line per
/// row), for the golden tests and the `/tsv` preview route.
pub fn render(header: &[&str], cols: &[Col]) -> String {
    let n = cols
        .first()
        .map(|c| match c {
            Col::U(v) => v.len(),
            Col::S(v) => v.len(),
            Col::T(v) => v.len(),
        })
        .unwrap_or(0);
    let mut out = header.join("\t");
    out.push('\n');
    for i in 0..n {
        let cells: Vec<String> = cols
            .iter()
            .map(|c| match c {
                Col::U(v) => v[i].to_string(),
                Col::S(v) => v[i].to_string(),
                Col::T(v) => v[i].clone(),
            })
            .collect();
        out.push_str(&cells.join("\t"));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests;
