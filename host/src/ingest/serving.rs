//! Serving telemetry: requests and actions as a serving controller (Clockwork's,
//! or any controller that batches inference onto GPU workers) saw them. One row
//! per finished request / action, in the controller's clock; the WIT
//! `request-columns` / `action-columns` carry them to the plugins.
//!
//! This file holds the rows, their JSON forms for `POST /api/ingest`
//! (`requests[]`, `actions[]`, validated like the other lists: 422 naming the
//! row and field), and how they join the hub's columnar batch. The OTLP
//! mapping is in `otlp_serving.rs`.

use serde::Deserialize;

use super::Pending;
use super::json::Invalid;
use crate::plugin::bindings::types;

/// A finished request (times in ns since the epoch, controller clock).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServedRequest {
    pub request_id: u64,
    pub user_id: u64,
    pub model_id: u64,
    /// 0 = the default SLO; > 0 scales the batch-1 latency.
    pub slo_factor: f64,
    pub arrival: u64,
    pub departure: u64,
    /// Absolute deadline; 0 = none given.
    pub deadline: u64,
    /// 0 success, 4 timeout, other values the server's error codes.
    pub result: i32,
    pub arrival_copies: u32,
    pub departure_copies: u32,
    /// The infer action that served it; 0 = none.
    pub action_id: u64,
    /// Client clock; 0 = unknown.
    pub client_sent: u64,
    pub client_received: u64,
}

/// A finished action (load, infer, evict). Worker times are already in the
/// controller's clock (the reporter converted them).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServedAction {
    pub action_id: u64,
    /// 1 load weights, 2 infer, 3 evict weights.
    pub action_type: u8,
    pub status: i32,
    pub worker_id: u32,
    pub gpu_id: u32,
    pub model_id: u64,
    pub batch_size: u32,
    pub expected_exec_duration: u64,
    pub worker_exec_duration: u64,
    pub sent: u64,
    pub expected_exec_complete: u64,
    pub worker_exec_complete: u64,
    /// MHz; 0 = unknown.
    pub expected_gpu_clock: u32,
    pub gpu_clock_before: u32,
    pub gpu_clock_after: u32,
    pub copy_output_complete: u64,
    pub action_received: u64,
    pub result_sent: u64,
    pub result_received: u64,
    pub result_processed: u64,
    pub requests_queued: u32,
    pub copies_loaded: u32,
    pub requests_in_time: u32,
}

/// `requests[]` of the JSON body. Times are `_ns` (epoch, controller clock).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonRequest {
    pub request_id: u64,
    #[serde(default)]
    pub user_id: u64,
    pub model_id: u64,
    #[serde(default)]
    pub slo_factor: f64,
    pub arrival_ns: u64,
    pub departure_ns: u64,
    #[serde(default)]
    pub deadline_ns: u64,
    #[serde(default)]
    pub result: i32,
    #[serde(default)]
    pub arrival_copies: u32,
    #[serde(default)]
    pub departure_copies: u32,
    #[serde(default)]
    pub action_id: u64,
    #[serde(default)]
    pub client_sent_ns: u64,
    #[serde(default)]
    pub client_received_ns: u64,
}

/// `actions[]` of the JSON body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonAction {
    pub action_id: u64,
    pub action_type: u8,
    #[serde(default)]
    pub status: i32,
    #[serde(default)]
    pub worker_id: u32,
    #[serde(default)]
    pub gpu_id: u32,
    pub model_id: u64,
    #[serde(default = "one")]
    pub batch_size: u32,
    #[serde(default)]
    pub expected_exec_duration_ns: u64,
    #[serde(default)]
    pub worker_exec_duration_ns: u64,
    pub sent_ns: u64,
    #[serde(default)]
    pub expected_exec_complete_ns: u64,
    #[serde(default)]
    pub worker_exec_complete_ns: u64,
    #[serde(default)]
    pub expected_gpu_clock_mhz: u32,
    #[serde(default)]
    pub gpu_clock_before_mhz: u32,
    #[serde(default)]
    pub gpu_clock_after_mhz: u32,
    #[serde(default)]
    pub copy_output_complete_ns: u64,
    #[serde(default)]
    pub action_received_ns: u64,
    #[serde(default)]
    pub result_sent_ns: u64,
    pub result_received_ns: u64,
    /// Defaults to `result_received_ns`.
    pub result_processed_ns: Option<u64>,
    #[serde(default)]
    pub requests_queued: u32,
    #[serde(default)]
    pub copies_loaded: u32,
    #[serde(default)]
    pub requests_in_time: u32,
}

fn one() -> u32 {
    1
}

fn invalid(field: String, reason: &str) -> Invalid {
    Invalid {
        field,
        reason: reason.to_string(),
    }
}

/// Checks what the controller's own bookkeeping guarantees; shared by JSON and OTLP.
pub fn check_request(r: &ServedRequest, row: &str) -> Result<(), Invalid> {
    if r.departure < r.arrival {
        return Err(invalid(format!("{row}.departure_ns"), "is before arrival_ns"));
    }
    if !r.slo_factor.is_finite() || r.slo_factor < 0.0 {
        return Err(invalid(format!("{row}.slo_factor"), "must be a finite number >= 0"));
    }
    Ok(())
}

pub fn check_action(a: &ServedAction, row: &str) -> Result<(), Invalid> {
    if a.result_received < a.sent {
        return Err(invalid(format!("{row}.result_received_ns"), "is before sent_ns"));
    }
    if a.result_processed < a.result_received {
        return Err(invalid(
            format!("{row}.result_processed_ns"),
            "is before result_received_ns",
        ));
    }
    if a.batch_size == 0 {
        return Err(invalid(format!("{row}.batch_size"), "must be >= 1"));
    }
    if a.requests_in_time > a.batch_size {
        return Err(invalid(format!("{row}.requests_in_time"), "is more than batch_size"));
    }
    Ok(())
}

impl JsonRequest {
    pub fn convert(self, i: usize) -> Result<ServedRequest, Invalid> {
        let r = ServedRequest {
            request_id: self.request_id,
            user_id: self.user_id,
            model_id: self.model_id,
            slo_factor: self.slo_factor,
            arrival: self.arrival_ns,
            departure: self.departure_ns,
            deadline: self.deadline_ns,
            result: self.result,
            arrival_copies: self.arrival_copies,
            departure_copies: self.departure_copies,
            action_id: self.action_id,
            client_sent: self.client_sent_ns,
            client_received: self.client_received_ns,
        };
        check_request(&r, &format!("requests[{i}]"))?;
        Ok(r)
    }
}

impl JsonAction {
    pub fn convert(self, i: usize) -> Result<ServedAction, Invalid> {
        let a = ServedAction {
            action_id: self.action_id,
            action_type: self.action_type,
            status: self.status,
            worker_id: self.worker_id,
            gpu_id: self.gpu_id,
            model_id: self.model_id,
            batch_size: self.batch_size,
            expected_exec_duration: self.expected_exec_duration_ns,
            worker_exec_duration: self.worker_exec_duration_ns,
            sent: self.sent_ns,
            expected_exec_complete: self.expected_exec_complete_ns,
            worker_exec_complete: self.worker_exec_complete_ns,
            expected_gpu_clock: self.expected_gpu_clock_mhz,
            gpu_clock_before: self.gpu_clock_before_mhz,
            gpu_clock_after: self.gpu_clock_after_mhz,
            copy_output_complete: self.copy_output_complete_ns,
            action_received: self.action_received_ns,
            result_sent: self.result_sent_ns,
            result_received: self.result_received_ns,
            result_processed: self.result_processed_ns.unwrap_or(self.result_received_ns),
            requests_queued: self.requests_queued,
            copies_loaded: self.copies_loaded,
            requests_in_time: self.requests_in_time,
        };
        check_action(&a, &format!("actions[{i}]"))?;
        Ok(a)
    }
}

impl Pending {
    /// Appends one origin's requests and actions to the batch's columns.
    pub(super) fn add_serving(&mut self, o: u32, requests: &[ServedRequest], actions: &[ServedAction]) {
        if !requests.is_empty() {
            let c = self.batch.requests.get_or_insert_with(|| types::RequestColumns {
                origin: Vec::new(),
                request_id: Vec::new(),
                user_id: Vec::new(),
                model_id: Vec::new(),
                slo_factor: Vec::new(),
                arrival: Vec::new(),
                departure: Vec::new(),
                deadline: Vec::new(),
                result: Vec::new(),
                arrival_copies: Vec::new(),
                departure_copies: Vec::new(),
                action_id: Vec::new(),
                client_sent: Vec::new(),
                client_received: Vec::new(),
            });
            for r in requests {
                c.origin.push(o);
                c.request_id.push(r.request_id);
                c.user_id.push(r.user_id);
                c.model_id.push(r.model_id);
                c.slo_factor.push(r.slo_factor);
                c.arrival.push(r.arrival);
                c.departure.push(r.departure);
                c.deadline.push(r.deadline);
                c.result.push(r.result);
                c.arrival_copies.push(r.arrival_copies);
                c.departure_copies.push(r.departure_copies);
                c.action_id.push(r.action_id);
                c.client_sent.push(r.client_sent);
                c.client_received.push(r.client_received);
            }
        }
        if !actions.is_empty() {
            let c = self.batch.actions.get_or_insert_with(|| types::ActionColumns {
                origin: Vec::new(),
                action_id: Vec::new(),
                action_type: Vec::new(),
                status: Vec::new(),
                worker_id: Vec::new(),
                gpu_id: Vec::new(),
                model_id: Vec::new(),
                batch_size: Vec::new(),
                expected_exec_duration: Vec::new(),
                worker_exec_duration: Vec::new(),
                sent: Vec::new(),
                expected_exec_complete: Vec::new(),
                worker_exec_complete: Vec::new(),
                expected_gpu_clock: Vec::new(),
                gpu_clock_before: Vec::new(),
                gpu_clock_after: Vec::new(),
                copy_output_complete: Vec::new(),
                action_received: Vec::new(),
                result_sent: Vec::new(),
                result_received: Vec::new(),
                result_processed: Vec::new(),
                requests_queued: Vec::new(),
                copies_loaded: Vec::new(),
                requests_in_time: Vec::new(),
            });
            for a in actions {
                c.origin.push(o);
                c.action_id.push(a.action_id);
                c.action_type.push(a.action_type);
                c.status.push(a.status);
                c.worker_id.push(a.worker_id);
                c.gpu_id.push(a.gpu_id);
                c.model_id.push(a.model_id);
                c.batch_size.push(a.batch_size);
                c.expected_exec_duration.push(a.expected_exec_duration);
                c.worker_exec_duration.push(a.worker_exec_duration);
                c.sent.push(a.sent);
                c.expected_exec_complete.push(a.expected_exec_complete);
                c.worker_exec_complete.push(a.worker_exec_complete);
                c.expected_gpu_clock.push(a.expected_gpu_clock);
                c.gpu_clock_before.push(a.gpu_clock_before);
                c.gpu_clock_after.push(a.gpu_clock_after);
                c.copy_output_complete.push(a.copy_output_complete);
                c.action_received.push(a.action_received);
                c.result_sent.push(a.result_sent);
                c.result_received.push(a.result_received);
                c.result_processed.push(a.result_processed);
                c.requests_queued.push(a.requests_queued);
                c.copies_loaded.push(a.copies_loaded);
                c.requests_in_time.push(a.requests_in_time);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use parking_lot::Mutex;

    use super::super::{IngestHub, Report};
    use super::*;

    #[test]
    fn requests_and_actions_become_columns() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let hub = IngestHub::new(
            100,
            Arc::new(move |b: &types::EventBatch| {
                s.lock().push(b.clone());
                1
            }),
        );
        let r = Report {
            requests: vec![
                ServedRequest {
                    request_id: 68,
                    model_id: 30,
                    arrival: 10,
                    departure: 20,
                    deadline: 110,
                    departure_copies: 2,
                    ..Default::default()
                },
                ServedRequest {
                    request_id: 69,
                    model_id: 9,
                    result: 4,
                    ..Default::default()
                },
            ],
            actions: vec![ServedAction {
                action_id: 2,
                action_type: 2,
                batch_size: 4,
                sent: 5,
                result_received: 30,
                result_processed: 31,
                requests_in_time: 3,
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(r.rows(), 3);
        assert_eq!(hub.submit(&r), Ok(3));
        assert_eq!(hub.flush(), 3);
        let b = seen.lock()[0].clone();
        let q = b.requests.unwrap();
        assert_eq!(q.request_id, vec![68, 69]);
        assert_eq!(q.result, vec![0, 4]);
        assert_eq!(q.deadline, vec![110, 0]);
        assert_eq!(q.departure_copies, vec![2, 0]);
        let a = b.actions.unwrap();
        assert_eq!(
            (a.batch_size[0], a.requests_in_time[0], a.result_processed[0]),
            (4, 3, 31)
        );
    }
}
