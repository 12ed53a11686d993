//! The rows this plugin works on: one finished request and one finished
//! action, as the host's `request-columns` / `action-columns` carry them
//! (controller clock, ns since the epoch; worker times already converted).

use sonde_plugin_sdk::types::{ActionColumns, RequestColumns};

/// Action types (Clockwork's `workerapi`).
pub const LOAD_WEIGHTS: u8 = 1;
pub const INFER: u8 = 2;
pub const EVICT_WEIGHTS: u8 = 3;

/// Request results (`api_common.h`): success and timeout.
pub const SUCCESS: i32 = 0;
pub const TIMEOUT: i32 = 4;
/// Action status: the controller could not start the send in time.
pub const NETWORK_SEND_TOO_LATE: i32 = 45;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Request {
    pub request_id: u64,
    pub user_id: u64,
    pub model_id: u64,
    pub slo_factor: f64,
    pub arrival: u64,
    pub departure: u64,
    /// Absolute; 0 = none given.
    pub deadline: u64,
    pub result: i32,
    pub arrival_copies: u32,
    pub departure_copies: u32,
    /// 0 = none.
    pub action_id: u64,
    pub client_sent: u64,
    pub client_received: u64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Action {
    pub action_id: u64,
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

impl Request {
    /// Clockwork's `deadline_met` (see `tsv::request_row`).
    pub fn deadline_met(&self) -> bool {
        if self.deadline == 0 {
            self.result == SUCCESS
        } else if self.deadline < self.arrival {
            false
        } else {
            self.result == SUCCESS && self.departure <= self.deadline
        }
    }

    /// Clockwork's `is_coldstart`: the model was loaded by the time the
    /// request departed but on no worker when it arrived.
    pub fn is_coldstart(&self) -> bool {
        self.departure_copies > self.arrival_copies && self.arrival_copies == 0
    }

    pub fn latency(&self) -> u64 {
        self.departure.saturating_sub(self.arrival)
    }
}

/// Row `i` of the request columns.
pub fn request_at(c: &RequestColumns, i: usize) -> Request {
    Request {
        request_id: c.request_id[i],
        user_id: c.user_id[i],
        model_id: c.model_id[i],
        slo_factor: c.slo_factor[i],
        arrival: c.arrival[i],
        departure: c.departure[i],
        deadline: c.deadline[i],
        result: c.result[i],
        arrival_copies: c.arrival_copies[i],
        departure_copies: c.departure_copies[i],
        action_id: c.action_id[i],
        client_sent: c.client_sent[i],
        client_received: c.client_received[i],
    }
}

/// Row `i` of the action columns.
pub fn action_at(c: &ActionColumns, i: usize) -> Action {
    Action {
        action_id: c.action_id[i],
        action_type: c.action_type[i],
        status: c.status[i],
        worker_id: c.worker_id[i],
        gpu_id: c.gpu_id[i],
        model_id: c.model_id[i],
        batch_size: c.batch_size[i],
        expected_exec_duration: c.expected_exec_duration[i],
        worker_exec_duration: c.worker_exec_duration[i],
        sent: c.sent[i],
        expected_exec_complete: c.expected_exec_complete[i],
        worker_exec_complete: c.worker_exec_complete[i],
        expected_gpu_clock: c.expected_gpu_clock[i],
        gpu_clock_before: c.gpu_clock_before[i],
        gpu_clock_after: c.gpu_clock_after[i],
        copy_output_complete: c.copy_output_complete[i],
        action_received: c.action_received[i],
        result_sent: c.result_sent[i],
        result_received: c.result_received[i],
        result_processed: c.result_processed[i],
        requests_queued: c.requests_queued[i],
        copies_loaded: c.copies_loaded[i],
        requests_in_time: c.requests_in_time[i],
    }
}
