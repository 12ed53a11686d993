//! Operation-level reports: the `ops` event table this plugin declares, and
//! per job a window of recent steps' operations that `whatif` replays.
//!
//! A job that reports its operations with their parallel coordinates (a
//! pipeline stage's forward of micro-batch 3, the data-parallel all-reduce
//! of step 120) gets the What-if diagnosis: how many times its ideal the
//! window's steps take, and which worker, stage, link or kind of operation
//! explains it. One row per operation:
//!
//! ```json
//! "ops": [{"step": 120, "micro": 3, "dp": 1, "stage": 2, "tp": 0,
//!          "kind": "forward", "start_ns": 1732300000000000000, "end_ns": 1732300000040000000}]
//! ```
//! The rank and node are the reporter's (its origin). `kind` is one of
//! [`KINDS`] (or its index); `micro` is -1 (the default) for an operation of
//! the whole step (input, data-parallel collectives, optimizer). Over OTLP,
//! a span with `sonde.table = "ops"` and these attributes is one row.
//!
//! ```text
//!  ops rows ──OpsWindow::add──► per step: operations ──(step ended + lag)──► complete
//!  every emit (1 s), when a step completed: the newest complete steps (≤ MAX_OPS operations)
//!     ──whatif::Pending, ≤ 6 ms a hook call, the rest at the next (one-shot timer)──► diagnose ──► finding
//!     per-step slowdowns ──onset::episodes──► fail-slow finding
//! ```
//! Limits: `ops_window_steps` steps and at most [`MAX_KEPT_OPS`] operations
//! kept per job (the oldest steps go first); at most [`MAX_OPS`] of them in
//! one analysis (the newest complete steps); [`MAX_NODES`] node names per job.

use std::collections::{BTreeMap, HashMap};

use sonde_plugin_sdk::column;
use sonde_plugin_sdk::types::{ColumnDefault, ColumnType, EventBatch, Origin, TableDecl, Value};

use crate::whatif::{Op, OpKind};

pub const OPS: &str = "ops";

/// The labels of the `kind` column, in `OpKind`'s order.
pub const KINDS: [&str; 9] = [
    "forward",
    "backward",
    "pp_send",
    "pp_recv",
    "dp_collective",
    "tp_collective",
    "optimizer",
    "input",
    "other",
];

/// Operations one analysis replays at most: the newest complete steps that
/// fit (at least one). An analysis costs about 0.8 µs of CPU per operation
/// in the sandbox (`./dev bench-diagnosis-load`), spread over hook calls
/// (`plugin::REPLAY_BUDGET_NS`) whose largest pieces (placing the window's
/// operations, ordering one step) grow with it: at 50 000 a piece stays
/// near 10 ms, so a call stays under 25 ms. A 1 024-rank job of 48
/// operations per rank and step gets a window of one step, a 256-rank job
/// four.
pub const MAX_OPS: usize = 50_000;
/// Operations a job's window keeps at most. A step is replayed once its
/// last operation is `lag_ms` old, so the window must hold the steps of the
/// last `lag_ms` and the one arriving: a 1 024-rank job reporting a step a
/// second of about 48 operations per rank needs five of its steps (250 000
/// operations) before the oldest is complete. Keeping only as many as one
/// analysis takes would drop every step before it could be replayed.
pub const MAX_KEPT_OPS: usize = 300_000;
/// Node names per job.
pub const MAX_NODES: usize = 4096;

pub fn ops_table() -> TableDecl {
    use ColumnDefault::{Required as R, Zero as Z};
    use ColumnType::*;
    TableDecl::new(
        OPS,
        "One operation of one rank's training step with its parallel coordinates, for the What-if diagnosis",
        vec![
            column("step", U64, R),
            column("micro", S32, ColumnDefault::Value(Value::Int(-1))),
            column("dp", U32, Z),
            column("stage", U32, Z),
            column("tp", U32, Z),
            column("kind", U8, R).with_labels(&KINDS),
            column("start_ns", Timestamp, R),
            column("end_ns", Timestamp, R),
        ],
    )
}

/// One job's recent operations.
#[derive(Debug, Default)]
pub struct OpsWindow {
    /// step → its operations.
    steps: BTreeMap<u64, Vec<Op>>,
    ops: usize,
    nodes: HashMap<String, u32>,
    pub node_names: Vec<String>,
    /// The newest operation's end.
    pub newest_ns: u64,
    /// Steps analysed last time (the window's last step), so a timer with
    /// nothing new does not replay again.
    pub analysed_through: Option<u64>,
    /// Operations arrived for steps already analysed: a rank heard from
    /// late (on a master, through a slower agent). The next call replays
    /// again, with them.
    late: bool,
    /// Rows refused as meaningless (an end before its start, a kind out of range).
    pub skipped: u64,
}

impl OpsWindow {
    /// The index of node `name` in [`OpsWindow::node_names`], added if new
    /// (the first node's when there are [`MAX_NODES`] already).
    pub fn node(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.nodes.get(name) {
            return i;
        }
        if self.node_names.len() >= MAX_NODES {
            return 0;
        }
        let i = self.node_names.len() as u32;
        self.nodes.insert(name.to_string(), i);
        self.node_names.push(name.to_string());
        i
    }

    /// Adds one operation of `rank` on `node`.
    pub fn add(&mut self, node: &str, rank: u32, row: &OpRow, keep_steps: usize) {
        let node = self.node(node);
        self.add_at(node, rank, row, keep_steps);
    }

    /// Adds one operation of `rank` on the node of index `node` (see [`OpsWindow::node`]).
    pub fn add_at(&mut self, node: u32, rank: u32, row: &OpRow, keep_steps: usize) {
        let Some(&kind) = OpKind::ALL.get(row.kind as usize) else {
            self.skipped += 1;
            return;
        };
        if row.end_ns < row.start_ns {
            self.skipped += 1;
            return;
        }
        // A step older than the window's oldest kept one is too late.
        if self.steps.len() >= keep_steps && self.steps.keys().next().is_some_and(|&first| row.step < first) {
            self.skipped += 1;
            return;
        }
        if self.analysed_through.is_some_and(|a| row.step <= a) {
            self.late = true;
        }
        self.steps.entry(row.step).or_default().push(Op {
            rank,
            node,
            dp: row.dp,
            stage: row.stage,
            tp: row.tp,
            step: row.step,
            micro: (row.micro >= 0).then_some(row.micro as u32),
            kind,
            start_ns: row.start_ns,
            end_ns: row.end_ns,
        });
        self.ops += 1;
        self.newest_ns = self.newest_ns.max(row.end_ns);
        while self.steps.len() > keep_steps || (self.ops > MAX_KEPT_OPS && self.steps.len() > 1) {
            let (_, gone) = self.steps.pop_first().expect("not empty");
            self.ops -= gone.len();
        }
    }

    /// The newest steps whose last operation ended `lag_ns` before `now`,
    /// as many as [`MAX_OPS`] allows (at least one): the window to replay
    /// (oldest first), or none when nothing completed, and nothing arrived
    /// late for the steps replayed, since the last call.
    pub fn complete(&mut self, now: u64, lag_ns: u64) -> Option<Vec<Op>> {
        let done = self.done(now, lag_ns);
        let last = *done.last()?;
        if !self.late && self.analysed_through.is_some_and(|a| a >= last) {
            return None;
        }
        self.late = false;
        self.analysed_through = Some(self.analysed_through.map_or(last, |a| a.max(last)));
        let mut total = 0;
        let from = done
            .iter()
            .rposition(|s| {
                total += self.steps[s].len();
                total > MAX_OPS
            })
            .map_or(0, |i| (i + 1).min(done.len() - 1));
        Some(
            done[from..]
                .iter()
                .flat_map(|s| self.steps[s].iter().cloned())
                .collect(),
        )
    }

    /// Whether [`OpsWindow::complete`] would give a window now.
    pub fn has_complete(&self, now: u64, lag_ns: u64) -> bool {
        self.done(now, lag_ns)
            .last()
            .is_some_and(|&last| self.late || self.analysed_through.is_none_or(|a| a < last))
    }

    /// The steps whose last operation ended `lag_ns` before `now`.
    fn done(&self, now: u64, lag_ns: u64) -> Vec<u64> {
        self.steps
            .iter()
            .filter(|(_, ops)| ops.iter().map(|o| o.end_ns).max().unwrap_or(0) + lag_ns <= now)
            .map(|(&s, _)| s)
            .collect()
    }
}

/// One row of the `ops` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpRow {
    pub step: u64,
    pub micro: i32,
    pub dp: u32,
    pub stage: u32,
    pub tp: u32,
    pub kind: u8,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// The `ops` rows of an event batch with their origins, and how many rows
/// could not be read (a table declared otherwise, an unknown origin).
pub fn read(batch: &EventBatch) -> (Vec<(&Origin, OpRow)>, u64) {
    let mut out = Vec::new();
    let mut bad = 0;
    for t in batch.table(OPS) {
        let columns = (|| {
            Ok::<_, String>((
                t.u64s("step")?,
                t.s32s("micro")?,
                t.u32s("dp")?,
                t.u32s("stage")?,
                t.u32s("tp")?,
                t.u8s("kind")?,
                t.timestamps("start_ns")?,
                t.timestamps("end_ns")?,
            ))
        })();
        let Ok((step, micro, dp, stage, tp, kind, start, end)) = columns else {
            bad += t.len() as u64;
            continue;
        };
        for (i, &o) in t.origin().iter().enumerate() {
            let Some(origin) = batch.origins.get(o as usize) else {
                bad += 1;
                continue;
            };
            out.push((
                origin,
                OpRow {
                    step: step[i],
                    micro: micro[i],
                    dp: dp[i],
                    stage: stage[i],
                    tp: tp[i],
                    kind: kind[i],
                    start_ns: start[i],
                    end_ns: end[i],
                },
            ));
        }
    }
    (out, bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(step: u64, start_ms: u64) -> OpRow {
        OpRow {
            step,
            micro: -1,
            dp: 0,
            stage: 0,
            tp: 0,
            kind: 0,
            start_ns: start_ms * 1_000_000,
            end_ns: (start_ms + 10) * 1_000_000,
        }
    }

    #[test]
    fn a_rank_heard_from_late_is_replayed_with_the_others() {
        let mut w = OpsWindow::default();
        for step in 0..4 {
            w.add("a", 0, &row(step, step * 100), 16);
        }
        let now = 10_000_000_000;
        assert_eq!(w.complete(now, 0).map(|o| o.len()), Some(4));
        assert!(w.complete(now, 0).is_none(), "nothing new");
        // Rank 1's steps, through a slower agent: the same steps again, with it.
        for step in 0..4 {
            w.add("b", 1, &row(step, step * 100), 16);
        }
        let again = w.complete(now, 0).expect("replayed with the late rank");
        assert_eq!(again.len(), 8);
        assert!(again.iter().any(|o| o.rank == 1));
        assert!(w.complete(now, 0).is_none());
    }

    #[test]
    fn a_large_job_keeps_its_steps_until_complete_and_replays_the_newest() {
        // 60 000 operations a step: one analysis takes one step, but the
        // window keeps five, so a step is still there once it is complete.
        let mut w = OpsWindow::default();
        let per_step = 60_000;
        for step in 0..5u64 {
            for rank in 0..per_step {
                w.add("a", rank, &row(step, step * 1000), 16);
            }
        }
        assert_eq!(w.steps.len(), 5, "kept for their lag");
        // Steps 0-2 are complete (ended 10 ms after their start at 0, 1, 2 s).
        let window = w.complete(3_000_000_000, 0).expect("complete steps");
        assert_eq!(window.len() as u32, per_step);
        assert!(window.iter().all(|o| o.step == 2), "the newest complete step");
        assert!(w.complete(3_000_000_000, 0).is_none());
    }
}
