//! The MPI probe's call stacks, kept per process and named on arrival.
//!
//! The probe interns stacks per thread and sends each one once (`mpi_stacks`,
//! raw return addresses) with its module map (`mpi_modules`, see `mpi.rs`);
//! its sample rows then carry only a stack id. This table remembers, for each
//! process (job, node, rank, pid), where its modules lie and the named stack
//! of every id, and gives a row with a known id its stack as the `callsite`:
//! frames outermost first, separated by `;`, so that the plugins' contract
//! (WIT `mpi-sample-columns`) stays as it was.
//!
//! Bounded: at most [`MAX_PROCESSES`] processes (the one heard from longest ago
//! is forgotten) and [`MAX_STACKS`] stacks each. A row whose stack is unknown
//! (sonde restarted during the job, a table full) keeps the call site the
//! probe named itself, and nothing is refused.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::mpi::{JsonMpiModule, JsonMpiStack};
use crate::ingest::{MpiSample, Origin};
use crate::symbolize::{Module, Symbolizer};

pub const MAX_PROCESSES: usize = 4096;
pub const MAX_STACKS: usize = 65_536;
/// Root frame of a stack cut at the probe's depth (`MPI_SONDE_DEPTH`).
pub const TRUNCATED: &str = "[truncated]";

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ProcessKey {
    job: String,
    node: String,
    rank: i32,
    pid: String,
}

#[derive(Default)]
struct Process {
    /// Code segments (start, end, module), sorted by start.
    segments: Vec<(u64, u64, Module)>,
    /// (thread, id) -> the named stack.
    stacks: HashMap<(u32, u32), Arc<str>>,
    last_used: u64,
}

#[derive(Default)]
pub struct MpiStacks {
    processes: Mutex<HashMap<ProcessKey, Process>>,
    symbolizer: Symbolizer,
    clock: std::sync::atomic::AtomicU64,
}

/// What one body brought: its modules, its new stacks, and which stack each
/// sample row named (by thread and id, in row order).
#[derive(Default)]
pub struct ProbeStacks {
    pub modules: Vec<JsonMpiModule>,
    pub stacks: Vec<JsonMpiStack>,
    pub rows: Vec<(u32, Option<u32>)>,
}

impl ProbeStacks {
    pub fn is_empty(&self) -> bool {
        self.modules.is_empty() && self.stacks.is_empty() && self.rows.iter().all(|r| r.1.is_none())
    }
}

impl MpiStacks {
    /// Records `body`'s modules and stacks for `origin`'s process and sets the
    /// `callsite` of every row whose stack is known. Reads module files the
    /// first time a module is seen: call it off the async workers.
    pub fn apply(&self, origin: &Origin, body: ProbeStacks, rows: &mut [MpiSample]) {
        if body.is_empty() {
            return;
        }
        let key = ProcessKey {
            job: origin.job.clone(),
            node: origin.node.clone(),
            rank: origin.rank,
            pid: origin
                .attributes
                .iter()
                .find(|(k, _)| k == "process.pid")
                .map(|(_, v)| v.clone())
                .unwrap_or_default(),
        };
        let now = self.clock.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Take the process out while naming (slow): other processes' bodies go on.
        let mut p = self.processes.lock().remove(&key).unwrap_or_default();
        p.last_used = now;
        if !body.modules.is_empty() {
            p.segments = body
                .modules
                .into_iter()
                .map(|m| {
                    (
                        m.start,
                        m.end,
                        Module {
                            path: m.path,
                            build_id: m.build_id.to_ascii_lowercase(),
                            base: m.base,
                        },
                    )
                })
                .collect();
            p.segments.sort_by_key(|s| s.0);
        }
        for s in body.stacks {
            if p.stacks.len() >= MAX_STACKS && !p.stacks.contains_key(&(s.thread, s.id)) {
                continue;
            }
            let named = self.name(&p.segments, &s.frames, s.truncated);
            p.stacks.insert((s.thread, s.id), named.into());
        }
        for (row, (thread, id)) in rows.iter_mut().zip(body.rows) {
            if let Some(named) = id.and_then(|id| p.stacks.get(&(thread, id))) {
                row.callsite = named.to_string();
            }
        }
        let mut all = self.processes.lock();
        if all.len() >= MAX_PROCESSES
            && let Some(oldest) = all.iter().min_by_key(|(_, p)| p.last_used).map(|(k, _)| k.clone())
        {
            all.remove(&oldest);
        }
        all.insert(key, p);
    }

    /// `frames` (innermost first) as one folded stack, outermost first.
    fn name(&self, segments: &[(u64, u64, Module)], frames: &[u64], truncated: bool) -> String {
        let mut names: Vec<String> = Vec::with_capacity(frames.len() + 1);
        for &addr in frames {
            // A return address may sit just past its segment's end (a call as the last instruction).
            let probe = addr.saturating_sub(1);
            let i = segments.partition_point(|s| s.0 <= probe);
            match i.checked_sub(1).map(|i| &segments[i]).filter(|s| probe < s.1) {
                Some((_, _, m)) => names.extend(self.symbolizer.frames(m, addr).iter().map(|f| frame(f))),
                None => names.push(format!("0x{addr:x}")),
            }
        }
        if truncated {
            names.push(TRUNCATED.to_string());
        }
        names.reverse();
        names.join(";")
    }
}

/// A frame name safe in a folded line: no `;` (the separator) or line break.
fn frame(s: &str) -> String {
    s.chars()
        .map(|c| if c == ';' || c == '\n' || c == '\r' { ',' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(pid: &str) -> Origin {
        Origin {
            job: "j".into(),
            rank: 1,
            attributes: vec![("process.pid".into(), pid.into())],
            ..Default::default()
        }
    }

    fn row() -> MpiSample {
        MpiSample {
            thread: 0,
            time: 1,
            state: 2,
            function: "MPI_Recv".into(),
            callsite: "app+0x10".into(),
            count: 1,
            period_ns: 1,
        }
    }

    fn module(path: &str, start: u64, end: u64) -> JsonMpiModule {
        JsonMpiModule {
            path: path.into(),
            build_id: String::new(),
            base: start,
            start,
            end,
        }
    }

    #[test]
    fn stacks_sent_once_name_later_rows_and_stay_per_process() {
        let t = MpiStacks::default();
        let mut rows = vec![row(), row()];
        t.apply(
            &origin("7"),
            ProbeStacks {
                modules: vec![
                    module("/nonexistent/app", 0x1000, 0x2000),
                    module("/nonexistent/libc.so.6", 0x9000, 0xa000),
                ],
                stacks: vec![JsonMpiStack {
                    thread: 0,
                    id: 4,
                    frames: vec![0x1010, 0x1020, 0x9030],
                    truncated: true,
                }],
                rows: vec![(0, Some(4)), (0, Some(5))],
            },
            &mut rows,
        );
        let want = "[truncated];libc.so.6+0x30;app+0x20;app+0x10";
        assert_eq!(rows[0].callsite, want);
        assert_eq!(
            rows[1].callsite, "app+0x10",
            "an unknown id keeps the probe's call site"
        );
        // A later body names the stack by id alone.
        let mut later = vec![row()];
        t.apply(
            &origin("7"),
            ProbeStacks {
                rows: vec![(0, Some(4))],
                ..Default::default()
            },
            &mut later,
        );
        assert_eq!(later[0].callsite, want);
        // Another process (pid) has its own table.
        let mut other = vec![row()];
        t.apply(
            &origin("8"),
            ProbeStacks {
                rows: vec![(0, Some(4))],
                ..Default::default()
            },
            &mut other,
        );
        assert_eq!(other[0].callsite, "app+0x10");
    }

    #[test]
    fn an_address_outside_every_module_is_kept_as_hex() {
        let t = MpiStacks::default();
        let mut rows = vec![row()];
        t.apply(
            &origin("1"),
            ProbeStacks {
                stacks: vec![JsonMpiStack {
                    thread: 0,
                    id: 0,
                    frames: vec![0xdead],
                    truncated: false,
                }],
                rows: vec![(0, Some(0))],
                ..Default::default()
            },
            &mut rows,
        );
        assert_eq!(rows[0].callsite, "0xdead");
    }
}
