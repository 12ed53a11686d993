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
