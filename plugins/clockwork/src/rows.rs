//! The rows this plugin works on: one finished request and one finished
//! action (controller clock, ns since the epoch; worker times already
//! converted), and the two event tables they come in, which this plugin
//! declares: `requests` and `actions`. A controller sends them as JSON rows
//! (`{"requests": [{"request_id": 68, "arrival_ns": ...}]}`) or OTLP records
//! marked `sonde.table`; the column names are the fields' names.
//!
//! The declarations are exactly those a 0.1 plugin subscribed to the
//! `requests` / `actions` kinds gets from the host, so both can run side by
//! side. The host checks types; the checks of meaning (`Request::check`,
//! `Action::check`) are here, and a row that fails them is skipped and
//! counted (`invalid_rows` in the summary).

use sonde_plugin_sdk::Table;
use sonde_plugin_sdk::column;
use sonde_plugin_sdk::types::{ColumnDefault, ColumnType, TableDecl, Value};

pub const REQUESTS: &str = "requests";
pub const ACTIONS: &str = "actions";

/// The `requests` table: one finished request per row.
pub fn requests_table() -> TableDecl {
    use ColumnDefault::{Required as R, Zero as Z};
    use ColumnType::*;
    TableDecl::new(
        REQUESTS,
        "finished requests as a serving controller saw them (controller clock)",
        vec![
            column("request_id", U64, R),
            column("user_id", U64, Z),
            column("model_id", U64, R),
            // 0 = the default SLO; > 0 scales the batch-1 latency.
            column("slo_factor", F64, Z),
            column("arrival_ns", Timestamp, R),
            column("departure_ns", Timestamp, R),
            // Absolute; 0 = none given.
            column("deadline_ns", Timestamp, Z),
            // 0 success, 4 timeout, other values the server's error codes.
            column("result", S32, Z),
            column("arrival_copies", U32, Z),
            column("departure_copies", U32, Z),
            // The infer action that served it; 0 = none.
            column("action_id", U64, Z),
            // Client clock; 0 = unknown.
            column("client_sent_ns", Timestamp, Z),
            column("client_received_ns", Timestamp, Z),
        ],
    )
}

/// The `actions` table: one finished action (load, infer, evict) per row.
pub fn actions_table() -> TableDecl {
    use ColumnDefault::{Required as R, Zero as Z};
    use ColumnType::*;
    TableDecl::new(
        ACTIONS,
        "finished actions (load, infer, evict) a serving controller sent to its workers (controller clock)",
        vec![
            column("action_id", U64, R),
            // 1 load weights, 2 infer, 3 evict weights.
            column("action_type", U8, R),
            column("status", S32, Z),
            column("worker_id", U32, Z),
            column("gpu_id", U32, Z),
            column("model_id", U64, R),
            column("batch_size", U32, ColumnDefault::Value(Value::Int(1))),
            column("expected_exec_duration_ns", U64, Z),
            column("worker_exec_duration_ns", U64, Z),
            column("sent_ns", Timestamp, R),
            column("expected_exec_complete_ns", Timestamp, Z),
            column("worker_exec_complete_ns", Timestamp, Z),
            // MHz; 0 = unknown.
            column("expected_gpu_clock_mhz", U32, Z),
            column("gpu_clock_before_mhz", U32, Z),
            column("gpu_clock_after_mhz", U32, Z),
            column("copy_output_complete_ns", Timestamp, Z),
            column("action_received_ns", Timestamp, Z),
            column("result_sent_ns", Timestamp, Z),
            column("result_received_ns", Timestamp, R),
            // 0 = result_received_ns.
            column("result_processed_ns", Timestamp, Z),
            column("requests_queued", U32, Z),
            column("copies_loaded", U32, Z),
            // Requests of the batch that met their deadline; 0 on an infer
            // action = not given (`in_time.rs` counts them from the requests).
            column("requests_in_time", U32, Z),
        ],
    )
}

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

impl Request {
    /// What the controller's own bookkeeping guarantees.
    pub fn check(&self) -> Result<(), String> {
        if self.departure < self.arrival {
            return Err(format!(
                "request {}: departure_ns is before arrival_ns",
                self.request_id
            ));
        }
        if !self.slo_factor.is_finite() || self.slo_factor < 0.0 {
            return Err(format!(
                "request {}: slo_factor must be a finite number >= 0",
                self.request_id
            ));
        }
        Ok(())
    }
}

impl Action {
    /// What the controller's own bookkeeping guarantees.
    pub fn check(&self) -> Result<(), String> {
        let id = self.action_id;
        if self.result_received < self.sent {
            return Err(format!("action {id}: result_received_ns is before sent_ns"));
        }
        if self.result_processed < self.result_received {
            return Err(format!("action {id}: result_processed_ns is before result_received_ns"));
        }
        if self.batch_size == 0 {
            return Err(format!("action {id}: batch_size must be >= 1"));
        }
        if self.requests_in_time > self.batch_size {
            return Err(format!("action {id}: requests_in_time is more than batch_size"));
        }
        Ok(())
    }
}

/// The requests of one `requests` entry of a batch, by column name.
pub fn requests(t: &Table) -> Result<Vec<Request>, String> {
    let (request_id, user_id, model_id) = (t.u64s("request_id")?, t.u64s("user_id")?, t.u64s("model_id")?);
    let slo_factor = t.f64s("slo_factor")?;
    let (arrival, departure, deadline) = (
        t.timestamps("arrival_ns")?,
        t.timestamps("departure_ns")?,
        t.timestamps("deadline_ns")?,
    );
    let result = t.s32s("result")?;
    let (arrival_copies, departure_copies) = (t.u32s("arrival_copies")?, t.u32s("departure_copies")?);
    let action_id = t.u64s("action_id")?;
    let (client_sent, client_received) = (t.timestamps("client_sent_ns")?, t.timestamps("client_received_ns")?);
    Ok((0..t.len())
        .map(|i| Request {
            request_id: request_id[i],
            user_id: user_id[i],
            model_id: model_id[i],
            slo_factor: slo_factor[i],
            arrival: arrival[i],
            departure: departure[i],
            deadline: deadline[i],
            result: result[i],
            arrival_copies: arrival_copies[i],
            departure_copies: departure_copies[i],
            action_id: action_id[i],
            client_sent: client_sent[i],
            client_received: client_received[i],
        })
        .collect())
}

/// The actions of one `actions` entry of a batch, by column name; a
/// `result_processed_ns` of 0 is the action's `result_received_ns`.
pub fn actions(t: &Table) -> Result<Vec<Action>, String> {
    let (action_id, action_type, status) = (t.u64s("action_id")?, t.u8s("action_type")?, t.s32s("status")?);
    let (worker_id, gpu_id, model_id) = (t.u32s("worker_id")?, t.u32s("gpu_id")?, t.u64s("model_id")?);
    let batch_size = t.u32s("batch_size")?;
    let (expected_exec_duration, worker_exec_duration) =
        (t.u64s("expected_exec_duration_ns")?, t.u64s("worker_exec_duration_ns")?);
    let sent = t.timestamps("sent_ns")?;
    let (expected_exec_complete, worker_exec_complete) = (
        t.timestamps("expected_exec_complete_ns")?,
        t.timestamps("worker_exec_complete_ns")?,
    );
    let (expected_gpu_clock, gpu_clock_before, gpu_clock_after) = (
        t.u32s("expected_gpu_clock_mhz")?,
        t.u32s("gpu_clock_before_mhz")?,
        t.u32s("gpu_clock_after_mhz")?,
    );
    let (copy_output_complete, action_received, result_sent) = (
        t.timestamps("copy_output_complete_ns")?,
        t.timestamps("action_received_ns")?,
        t.timestamps("result_sent_ns")?,
    );
    let (result_received, result_processed) = (
        t.timestamps("result_received_ns")?,
        t.timestamps("result_processed_ns")?,
    );
    let (requests_queued, copies_loaded, requests_in_time) = (
        t.u32s("requests_queued")?,
        t.u32s("copies_loaded")?,
        t.u32s("requests_in_time")?,
    );
    Ok((0..t.len())
        .map(|i| Action {
            action_id: action_id[i],
            action_type: action_type[i],
            status: status[i],
            worker_id: worker_id[i],
            gpu_id: gpu_id[i],
            model_id: model_id[i],
            batch_size: batch_size[i],
            expected_exec_duration: expected_exec_duration[i],
            worker_exec_duration: worker_exec_duration[i],
            sent: sent[i],
            expected_exec_complete: expected_exec_complete[i],
            worker_exec_complete: worker_exec_complete[i],
            expected_gpu_clock: expected_gpu_clock[i],
            gpu_clock_before: gpu_clock_before[i],
            gpu_clock_after: gpu_clock_after[i],
            copy_output_complete: copy_output_complete[i],
            action_received: action_received[i],
            result_sent: result_sent[i],
            result_received: result_received[i],
            result_processed: match result_processed[i] {
                0 => result_received[i],
                p => p,
            },
            requests_queued: requests_queued[i],
            copies_loaded: copies_loaded[i],
            requests_in_time: requests_in_time[i],
        })
        .collect())
}
