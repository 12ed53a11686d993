//! Call stacks by id, as the MPI probe sends them in `POST /api/ingest`, kept
//! per process and named on arrival (`crate::symbolize`).
//!
//! ```json
//! "mpi_samples": [{"thread": 0, "state": 2, "function": "MPI_Sendrecv", "callsite": "app+0x42", "stack": 3, ...}],
//! "stacks":  [{"thread": 0, "id": 3, "truncated": false, "frames": [94674237092560, ...]}],
//! "modules": [{"path": "/opt/app/bin/solver", "build_id": "f8ce75...", "base": 94674237091840,
//!                  "start": 94674237095936, "end": 94674237097225}]
//! ```
//! The keys are named for the probe that brought them; nothing here depends
//! on what its rows mean. A sender interns its stacks per thread and sends
//! each one once (`stacks`: raw return addresses, the call's first,
//! outermost last; `truncated`: the walk stopped at the sender's depth) with
//! its module map (`modules`: one code segment `[start, end)` of a file
//! loaded at bias `base`). A row of any event table may then carry `stack`,
//! an id in its thread's table (the row's `thread` field, 0 when it has
//! none): when the id is known, the named stack (frames outermost first,
//! separated by `;`) replaces the row's `callsite` field, which the table
//! must have (a `string` column). `stack` itself is never a column.
//!
//! This table remembers, for each process (job, node, rank, pid), where its
//! modules lie and the named stack of every id. Bounded: at most
//! [`MAX_PROCESSES`] processes (the one heard from longest ago is forgotten)
//! and [`MAX_STACKS`] stacks each. A row whose stack is unknown (sonde
//! restarted during the job, a table full) keeps the call site it named
//! itself, and nothing is refused.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Deserialize;

use crate::ingest::error::{Invalid, invalid};
use crate::ingest::tables::Cell;
use crate::ingest::{Origin, Report};
use crate::symbolize::{Module, Symbolizer};

pub const MAX_PROCESSES: usize = 4096;
pub const MAX_STACKS: usize = 65_536;
/// Root frame of a stack cut at the sender's depth (the probe's `MPI_SONDE_DEPTH`).
pub const TRUNCATED: &str = "[truncated]";
/// Most frames a stack may have (the probe caps its walk at 128).
pub const MAX_FRAMES: usize = 256;
/// The row field holding a stack id, and the one its named stack replaces.
pub const STACK_FIELD: &str = "stack";
pub const CALLSITE_FIELD: &str = "callsite";

/// A call stack a sender interned: `id` in `thread`'s table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonStack {
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
pub struct JsonModule {
    pub path: String,
    #[serde(default)]
    pub build_id: String,
    pub base: u64,
    pub start: u64,
    pub end: u64,
}

impl JsonStack {
    pub fn check(&self, i: usize) -> Result<(), Invalid> {
        if self.frames.is_empty() || self.frames.len() > MAX_FRAMES {
            return Err(invalid(
                format!("stacks[{i}].frames"),
                format!("must hold 1 to {MAX_FRAMES} addresses"),
            ));
        }
        Ok(())
    }
}

impl JsonModule {
    pub fn check(&self, i: usize) -> Result<(), Invalid> {
        let field = |f: &str| format!("modules[{i}].{f}");
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
pub struct CallStacks {
    processes: Mutex<HashMap<ProcessKey, Process>>,
    symbolizer: Symbolizer,
    clock: std::sync::atomic::AtomicU64,
}

/// A row that named a stack: `report.tables[group].rows[row]`, of `thread`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StackRef {
    pub group: usize,
    pub row: usize,
    pub thread: u32,
    pub id: u32,
}

/// What one body brought: its modules, its new stacks, and the rows that
/// named a stack.
#[derive(Default)]
pub struct ProbeStacks {
    pub modules: Vec<JsonModule>,
    pub stacks: Vec<JsonStack>,
    pub refs: Vec<StackRef>,
}

impl ProbeStacks {
    pub fn is_empty(&self) -> bool {
        self.modules.is_empty() && self.stacks.is_empty() && self.refs.is_empty()
    }
}

/// Where a group's `callsite` value sits: its column, when it is a text one.
fn callsite_column(t: &crate::ingest::tables::TableRows) -> Option<usize> {
    let i = t.columns.iter().position(|c| c == CALLSITE_FIELD)?;
    match &t.decl {
        Some(d) => (d.columns[i].ty == crate::plugin::tables::ColumnType::String).then_some(i),
        None => Some(i),
    }
}

impl CallStacks {
    /// Records `body`'s modules and stacks for `origin`'s process and sets the
    /// `callsite` of every row of `report` whose stack is known. Reads module
    /// files the first time a module is seen: call it off the async workers.
    pub fn apply(&self, origin: &Origin, body: ProbeStacks, report: &mut Report) {
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
        for r in &body.refs {
            let Some(named) = p.stacks.get(&(r.thread, r.id)) else {
                continue;
            };
            let Some(t) = report.tables.get_mut(r.group) else {
                continue;
            };
            let Some(c) = callsite_column(t) else { continue };
            if let Some(cell) = t.rows.get_mut(r.row).and_then(|row| row.get_mut(c)) {
                *cell = Cell::S(named.to_string());
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
    use crate::ingest::tables::TableRows;

    fn origin(pid: &str) -> Origin {
        Origin {
            job: "j".into(),
            rank: 1,
            attributes: vec![("process.pid".into(), pid.into())],
            ..Default::default()
        }
    }

    /// Two rows as sent, each with the sender's own call site.
    fn report() -> Report {
        let mut r = Report::default();
        for _ in 0..2 {
            r.add_row_as_sent(
                "samples",
                vec![
                    ("callsite".into(), Cell::S("app+0x10".into())),
                    ("n".into(), Cell::U(1)),
                ],
                0,
            );
        }
        r
    }

    fn callsites(r: &Report) -> Vec<&str> {
        r.tables
            .iter()
            .flat_map(|t: &TableRows| t.rows.iter().map(|row| row[0].s()))
            .collect()
    }

    fn refs(ids: &[(usize, u32)]) -> Vec<StackRef> {
        ids.iter()
            .map(|&(row, id)| StackRef {
                group: 0,
                row,
                thread: 0,
                id,
            })
            .collect()
    }

    fn module(path: &str, start: u64, end: u64) -> JsonModule {
        JsonModule {
            path: path.into(),
            build_id: String::new(),
            base: start,
            start,
            end,
        }
    }

    #[test]
    fn stacks_sent_once_name_later_rows_and_stay_per_process() {
        let t = CallStacks::default();
        let mut r = report();
        t.apply(
            &origin("7"),
            ProbeStacks {
                modules: vec![
                    module("/nonexistent/app", 0x1000, 0x2000),
                    module("/nonexistent/libc.so.6", 0x9000, 0xa000),
                ],
                stacks: vec![JsonStack {
                    thread: 0,
                    id: 4,
                    frames: vec![0x1010, 0x1020, 0x9030],
                    truncated: true,
                }],
                refs: refs(&[(0, 4), (1, 5)]),
            },
            &mut r,
        );
        let want = "[truncated];libc.so.6+0x30;app+0x20;app+0x10";
        assert_eq!(
            callsites(&r),
            vec![want, "app+0x10"],
            "an unknown id keeps the sender's call site"
        );
        // A later body names the stack by id alone.
        let mut later = report();
        t.apply(
            &origin("7"),
            ProbeStacks {
                refs: refs(&[(1, 4)]),
                ..Default::default()
            },
            &mut later,
        );
        assert_eq!(callsites(&later), vec!["app+0x10", want]);
        // Another process (pid) has its own table.
        let mut other = report();
        t.apply(
            &origin("8"),
            ProbeStacks {
                refs: refs(&[(0, 4)]),
                ..Default::default()
            },
            &mut other,
        );
        assert_eq!(callsites(&other)[0], "app+0x10");
    }

    #[test]
    fn an_address_outside_every_module_is_kept_as_hex() {
        let t = CallStacks::default();
        let mut r = report();
        t.apply(
            &origin("1"),
            ProbeStacks {
                stacks: vec![JsonStack {
                    thread: 0,
                    id: 0,
                    frames: vec![0xdead],
                    truncated: false,
                }],
                refs: refs(&[(0, 0)]),
                ..Default::default()
            },
            &mut r,
        );
        assert_eq!(callsites(&r)[0], "0xdead");
    }
}
