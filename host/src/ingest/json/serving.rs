//! Serving telemetry in `POST /api/ingest`: the `requests[]` and `actions[]`
//! lists, validated like the other lists (422 naming the row and field) and
//! turned into the hub's [`ServedRequest`] / [`ServedAction`] rows, which
//! say what the fields mean. The OTLP mapping of the same rows is in
//! `ingest/otlp/serving.rs`.

use serde::Deserialize;

use crate::ingest::error::Invalid;
use crate::ingest::{ServedAction, ServedRequest, check_action, check_request};

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
