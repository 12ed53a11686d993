//! A job's per-rank MPI state over time as a Chrome trace (JSON object
//! format), which Perfetto's UI and chrome://tracing open.
//!
//! The probe sends its counts every `MPI_SONDE_FLUSH_MS` (500 ms by default),
//! so that is the timeline's resolution: one interval per rank and thread per
//! flush. Each rank is a process (`rank N`), each of its threads a thread;
//! per interval a complete event (`ph: X`) named for the state that took most
//! of it, with the time in each state in its args, and a counter track
//! (`ph: C`) `MPI state` with the three shares, which Perfetto draws as a
//! stacked chart per rank. Times in microseconds since the epoch.

use serde_json::{Value, json};

use crate::profile::{JobProfile, state_name};

pub fn chrome_trace(job: &str, p: &JobProfile) -> Value {
    let mut events = Vec::new();
    let mut named = std::collections::BTreeSet::new();
    for (&(rank, thread), line) in &p.timeline {
        if named.insert(rank) {
            events.push(json!({"ph": "M", "name": "process_name", "pid": rank, "tid": 0,
                "args": {"name": format!("rank {rank}")}}));
            events.push(json!({"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0,
                "args": {"sort_index": rank}}));
        }
        events.push(json!({"ph": "M", "name": "thread_name", "pid": rank, "tid": thread,
            "args": {"name": format!("thread {thread}")}}));
        for (&end, ns) in line {
            let total: u64 = ns.iter().sum();
            if total == 0 {
                continue;
            }
            let start = end.saturating_sub(total);
            let top = (0..3).max_by_key(|&i| (ns[i], std::cmp::Reverse(i))).unwrap_or(0);
            let share = |i: usize| ns[i] as f64 / total as f64;
            events.push(json!({
                "ph": "X", "pid": rank, "tid": thread, "cat": "mpi",
                "name": state_name(top as u8),
                "ts": start as f64 / 1e3, "dur": total as f64 / 1e3,
                "args": {"not_in_mpi_ms": ns[0] as f64 / 1e6, "work_ms": ns[1] as f64 / 1e6, "stall_ms": ns[2] as f64 / 1e6},
            }));
            events.push(json!({
                "ph": "C", "pid": rank, "tid": thread, "name": "MPI state", "ts": start as f64 / 1e3,
                "args": {"not_in_mpi": share(0), "work": share(1), "stall": share(2)},
            }));
        }
    }
    json!({"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"job": job, "source": "sonde mpi plugin"}})
}
