//! The event tables that 0.1's `requests`, `actions` and `mpi-samples` kinds
//! stand for: declared for a 0.1 plugin subscribed to a kind, so that the
//! ingest takes their rows as it took them when the host knew these kinds by
//! heart. Column names are the field names those rows had in the JSON
//! ingest; each maps to one field of the 0.1 column group (`adapt.rs`).
//!
//! A 0.2 plugin declaring a table of the same name must declare it exactly so
//! (same columns, types, defaults and order) for both to run at once. The
//! bundled ones do (`plugins/clockwork/src/rows.rs`, `plugins/mpi/src/table.rs`;
//! the two workspaces share no crate, so the lists are written twice), and
//! `host/tests/plugin_runtime.rs` runs them beside a 0.1 plugin to hold them to it.

use super::super::bindings::types::{ColumnDecl, ColumnDefault, ColumnType, TableDecl, Value};

pub const REQUESTS: &str = "requests";
pub const ACTIONS: &str = "actions";
pub const MPI_SAMPLES: &str = "mpi_samples";

fn col(name: &str, type_: ColumnType, default: ColumnDefault) -> ColumnDecl {
    ColumnDecl {
        name: name.into(),
        type_,
        default,
        labels: Vec::new(),
    }
}

fn table(name: &str, description: &str, columns: Vec<ColumnDecl>) -> TableDecl {
    TableDecl {
        name: name.into(),
        description: description.into(),
        columns,
    }
}

/// Finished serving requests, as 0.1's `request-columns`.
pub fn requests() -> TableDecl {
    use ColumnDefault::{Required as R, Zero as Z};
    use ColumnType::*;
    table(
        REQUESTS,
        "finished requests as a serving controller saw them (controller clock)",
        vec![
            col("request_id", U64, R),
            col("user_id", U64, Z),
            col("model_id", U64, R),
            col("slo_factor", F64, Z),
            col("arrival_ns", Timestamp, R),
            col("departure_ns", Timestamp, R),
            col("deadline_ns", Timestamp, Z),
            col("result", S32, Z),
            col("arrival_copies", U32, Z),
            col("departure_copies", U32, Z),
            col("action_id", U64, Z),
            col("client_sent_ns", Timestamp, Z),
            col("client_received_ns", Timestamp, Z),
        ],
    )
}

/// Finished actions a serving controller sent to its workers, as 0.1's `action-columns`.
pub fn actions() -> TableDecl {
    use ColumnDefault::{Required as R, Zero as Z};
    use ColumnType::*;
    table(
        ACTIONS,
        "finished actions (load, infer, evict) a serving controller sent to its workers (controller clock)",
        vec![
            col("action_id", U64, R),
            col("action_type", U8, R),
            col("status", S32, Z),
            col("worker_id", U32, Z),
            col("gpu_id", U32, Z),
            col("model_id", U64, R),
            col("batch_size", U32, ColumnDefault::Value(Value::Int(1))),
            col("expected_exec_duration_ns", U64, Z),
            col("worker_exec_duration_ns", U64, Z),
            col("sent_ns", Timestamp, R),
            col("expected_exec_complete_ns", Timestamp, Z),
            col("worker_exec_complete_ns", Timestamp, Z),
            col("expected_gpu_clock_mhz", U32, Z),
            col("gpu_clock_before_mhz", U32, Z),
            col("gpu_clock_after_mhz", U32, Z),
            col("copy_output_complete_ns", Timestamp, Z),
            col("action_received_ns", Timestamp, Z),
            col("result_sent_ns", Timestamp, Z),
            col("result_received_ns", Timestamp, R),
            col("result_processed_ns", Timestamp, Z),
            col("requests_queued", U32, Z),
            col("copies_loaded", U32, Z),
            col("requests_in_time", U32, Z),
        ],
    )
}

/// A probe's MPI state bins, as 0.1's `mpi-sample-columns`.
pub fn mpi_samples() -> TableDecl {
    use ColumnDefault::{Required as R, Zero as Z};
    use ColumnType::*;
    table(
        MPI_SAMPLES,
        "MPI state bins from the probe in MPI ranks: count ticks of period_ns in (thread, state, function, callsite)",
        vec![
            col("thread", U32, Z),
            col("time_ns", Timestamp, ColumnDefault::Received),
            ColumnDecl {
                labels: vec!["not_in_mpi".into(), "work".into(), "stall".into()],
                ..col("state", U8, R)
            },
            col("function", String, Z),
            col("callsite", String, Z),
            col("count", U32, R),
            col("period_ns", U64, R),
        ],
    )
}
