//! MPI state samples: what the probe inside MPI ranks (`probes/mpi/`) reports,
//! pre-aggregated into bins, as JSON rows of `POST /api/ingest`:
//!
//! ```json
//! "mpi_samples": [{"thread": 0, "time_ns": 1732300000000000000, "state": "stall",
//!                  "function": "MPI_Allreduce", "callsite": "imbalance+0x1234",
//!                  "count": 37, "period_ns": 1000000}]
//! ```
//! `count` ticks of `period_ns` each landed in this (thread, state, function,
//! callsite) bin during the probe's flush interval ending at `time_ns`.
//! `state` is 0 / "not_in_mpi", 1 / "work", 2 / "stall"; `function` and
//! `callsite` are empty when the thread was not in MPI. The rows become the
//! WIT `mpi-sample-columns` of the next event batch.
//!
//! Call stacks (the probe's since issue 20) come as ids into a per-thread table
//! that the same process sent before, or in this body, with the module map
//! that names the addresses:
//!
//! ```json
//! "mpi_samples": [{"thread": 0, "state": 2, "function": "MPI_Sendrecv", "stack": 3, ...}],
//! "mpi_stacks":  [{"thread": 0, "id": 3, "truncated": false, "frames": [94674237092560, ...]}],
//! "mpi_modules": [{"path": "/opt/app/bin/solver", "build_id": "f8ce75...", "base": 94674237091840,
//!                  "start": 94674237095936, "end": 94674237097225}]
//! ```
//! `frames` are return addresses, the MPI call's first, outermost last;
//! `truncated`: the walk stopped at the probe's depth. A module is one code
//! segment `[start, end)` of a file loaded at bias `base`. `mpi_stacks.rs`
//! keeps the tables per process and names the frames (`crate::symbolize`);
//! the named stack then travels as the row's `callsite`, outermost frame
//! first, frames separated by `;`.

use serde::Deserialize;

use crate::ingest::MpiSample;
use crate::ingest::error::{Invalid, invalid};

/// Longest function or call-site string accepted (demangled C++ symbols run long).
const MAX_SYMBOL: usize = 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonMpiSample {
    #[serde(default)]
    pub thread: u32,
    pub time_ns: Option<u64>,
    pub state: JsonState,
    #[serde(default)]
    pub function: String,
    #[serde(default)]
    pub callsite: String,
    pub count: u32,
    pub period_ns: u64,
    /// Id of the call stack in this thread's table (`mpi_stacks`).
    pub stack: Option<u32>,
}

/// A call stack the probe interned: `id` in `thread`'s table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonMpiStack {
    #[serde(default)]
    pub thread: u32,
    pub id: u32,
    pub frames: Vec<u64>,
    #[serde(default)]
    pub truncated: bool,
}

/// One code segment of a module loaded in the process.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonMpiModule {
    pub path: String,
    #[serde(default)]
    pub build_id: String,
    pub base: u64,
    pub start: u64,
    pub end: u64,
}

/// Most frames a stack may have (the probe caps its walk at 128).
pub const MAX_FRAMES: usize = 256;

impl JsonMpiStack {
    pub fn check(&self, i: usize) -> Result<(), Invalid> {
        if self.frames.is_empty() || self.frames.len() > MAX_FRAMES {
            return Err(invalid(
                format!("mpi_stacks[{i}].frames"),
                format!("must hold 1 to {MAX_FRAMES} addresses"),
            ));
        }
        Ok(())
    }
}

impl JsonMpiModule {
    pub fn check(&self, i: usize) -> Result<(), Invalid> {
        let field = |f: &str| format!("mpi_modules[{i}].{f}");
        if self.path.is_empty() || self.path.len() > 4096 {
            return Err(invalid(field("path"), "must be 1 to 4096 bytes"));
        }
        if self.build_id.len() > 128 || !self.build_id.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(invalid(field("build_id"), "must be hex, at most 128 digits"));
        }
        if self.end <= self.start {
            return Err(invalid(field("end"), "must be above start"));
        }
        Ok(())
    }
}

/// The state as its number or its name.
#[derive(Deserialize)]
#[serde(untagged)]
pub enum JsonState {
    Code(u8),
    Name(String),
}

impl JsonMpiSample {
    /// Validates row `i`; times default to `now`.
    pub fn into_sample(self, i: usize, now: u64) -> Result<MpiSample, Invalid> {
        let field = |f: &str| format!("mpi_samples[{i}].{f}");
        let state = match &self.state {
            JsonState::Code(c @ 0..=2) => *c,
            JsonState::Name(n) => match n.as_str() {
                "not_in_mpi" => 0,
                "work" => 1,
                "stall" => 2,
                other => {
                    return Err(invalid(
                        field("state"),
                        format!("{other:?}: must be \"not_in_mpi\", \"work\" or \"stall\" (or 0, 1, 2)"),
                    ));
                }
            },
            JsonState::Code(c) => return Err(invalid(field("state"), format!("{c}: must be 0, 1 or 2"))),
        };
        if self.count == 0 {
            return Err(invalid(field("count"), "must be >= 1"));
        }
        if self.period_ns == 0 {
            return Err(invalid(field("period_ns"), "must be >= 1"));
        }
        for (f, v) in [("function", &self.function), ("callsite", &self.callsite)] {
            if v.len() > MAX_SYMBOL {
                return Err(invalid(field(f), format!("longer than {MAX_SYMBOL} bytes")));
            }
        }
        if state != 0 && self.function.trim().is_empty() {
            return Err(invalid(field("function"), "must name the MPI function when in MPI"));
        }
        Ok(MpiSample {
            thread: self.thread,
            time: self.time_ns.unwrap_or(now),
            state,
            function: self.function,
            callsite: self.callsite,
            count: self.count,
            period_ns: self.period_ns,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(s: &str) -> Result<MpiSample, String> {
        let j: JsonMpiSample = serde_json::from_str(s).map_err(|e| e.to_string())?;
        j.into_sample(3, 7).map_err(|e| e.to_string())
    }

    #[test]
    fn states_by_code_or_name_and_defaults() {
        let s = row(r#"{"state":"stall","function":"MPI_Barrier","callsite":"a.out+0x10","count":5,"period_ns":1000}"#)
            .unwrap();
        assert_eq!((s.state, s.time, s.thread, s.count), (2, 7, 0, 5));
        let s = row(r#"{"state":0,"count":1,"period_ns":1000,"thread":2,"time_ns":9}"#).unwrap();
        assert_eq!((s.state, s.time, s.thread, s.function.as_str()), (0, 9, 2, ""));
    }

    #[test]
    fn bad_rows_name_row_and_field() {
        for (body, want) in [
            (
                r#"{"state":3,"function":"f","count":1,"period_ns":1}"#,
                "mpi_samples[3].state: 3",
            ),
            (
                r#"{"state":"busy","function":"f","count":1,"period_ns":1}"#,
                "mpi_samples[3].state",
            ),
            (
                r#"{"state":1,"function":"f","count":0,"period_ns":1}"#,
                "mpi_samples[3].count",
            ),
            (
                r#"{"state":1,"function":"f","count":1,"period_ns":0}"#,
                "mpi_samples[3].period_ns",
            ),
            (r#"{"state":1,"count":1,"period_ns":5}"#, "mpi_samples[3].function"),
            (
                r#"{"state":1,"function":"f","count":1,"period_ns":5,"x":1}"#,
                "unknown field `x`",
            ),
        ] {
            let err = row(body).unwrap_err();
            assert!(err.contains(want), "{body}: {err}");
        }
    }
}
