//! The `mpi_samples` event table this plugin declares: what the probe in the
//! MPI ranks (`probes/mpi/`) posts to `POST /api/ingest`, one row per bin of
//! state samples:
//!
//! ```json
//! "mpi_samples": [{"thread": 0, "time_ns": 1732300000000000000, "state": 2,
//!                  "function": "MPI_Allreduce", "callsite": "imbalance+0x1234",
//!                  "count": 37, "period_ns": 1000000, "stack": 3}]
//! ```
//! `count` ticks of `period_ns` each landed in this (thread, state, function,
//! callsite) bin during the probe's flush interval ending at `time_ns`.
//! `state` is 0 not in MPI, 1 MPI work, 2 MPI stall (or its label:
//! "not_in_mpi", "work", "stall"); `function` and
//! `callsite` are empty when the thread was not in MPI. `stack` is not a
//! column: it names a call stack the probe sent once (`stacks`), and the
//! host puts that stack, named, in `callsite` (docs/ingest.md).
//!
//! The declaration is exactly the one a 0.1 plugin subscribed to the
//! `mpi-samples` kind gets from the host, so both can run side by side. The
//! host checks types; `check` here the meaning (a row that fails it is
//! skipped and counted in `skipped_rows`).

use sonde_plugin_sdk::column;
use sonde_plugin_sdk::types::{ColumnDefault, ColumnType, TableDecl};

pub const SAMPLES: &str = "mpi_samples";

pub fn samples_table() -> TableDecl {
    use ColumnDefault::{Received, Required as R, Zero as Z};
    use ColumnType::*;
    TableDecl::new(
        SAMPLES,
        "MPI state bins from the probe in MPI ranks: count ticks of period_ns in (thread, state, function, callsite)",
        vec![
            column("thread", U32, Z),
            column("time_ns", Timestamp, Received),
            column("state", U8, R).with_labels(&["not_in_mpi", "work", "stall"]),
            column("function", String, Z),
            column("callsite", String, Z),
            column("count", U32, R),
            column("period_ns", U64, R),
        ],
    )
}

/// Why a bin cannot be right, if it cannot.
pub fn check(state: u8, function: &str, count: u32, period_ns: u64) -> Result<(), String> {
    if state > 2 {
        return Err(format!("state {state}: must be 0, 1 or 2"));
    }
    if count == 0 || period_ns == 0 {
        return Err("count and period_ns must be >= 1".into());
    }
    if state != 0 && function.trim().is_empty() {
        return Err("function must name the MPI function when in MPI".into());
    }
    Ok(())
}
