//! The jobs' verdicts in the host's state store (this plugin's namespace), so
//! a restart of sonde, or a reload of the plugin, keeps what it had judged.
//!
//! ```text
//!  a judged row ─► job.rows (+ rows_unsaved)     a What-if replay ─► job.unsaved
//!  emit timer, at most every SAVE_EVERY_NS (2 s), and stop ─► save():
//!      rows judged since the last save, the newest MAX_ROWS_PER_SAVE (1 024) of them
//!                                     ─► state-append `rows/<job>` (one record: a chunk)
//!      the rest of the job            ─► state-put    `job/<job>`  (JSON)
//!      counters                       ─► state-put    `meta`
//!      chunks older than the newest max_rows_per_job rows ─► state-trim
//!  start ─► restore(): `meta`, every `job/…`, and its rows from `rows/<job>`
//! ```
//!
//! Rows go as chunks in a stream because each store write is a change the
//! host keeps in memory until its next commit, and replays for every read
//! until then: a master judging 1 024 ranks a second writes one chunk per
//! job and save, not a thousand records.
//!
//! What is kept, per job: its judged rows (the newest `max_rows_per_job`),
//! the batches' stragglers and the persistent one, the verdict shares and
//! totals, each rank's node and dominant-verdict runs, the last What-if
//! replay and diagnosis, the per-step slowdowns a fail-slow is read from,
//! and what was last published (so a restart does not publish the same
//! finding again). What is not: the raw timings, samples and operations
//! (the next steps bring them), and what was judged after the last save
//! before a `kill -9` (at most `SAVE_EVERY_NS` of it; a clean stop saves
//! everything). A failed write is logged once and tried again at the next
//! save.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use sonde_plugin_sdk::types::Severity;
use sonde_plugin_sdk::{Host, saved};

use crate::job::{BatchStraggler, Job, Persistent, Row};
use crate::plugin::{Bottleneck, Counters};
use crate::rank::{Rank, Run};
use crate::verdict::{Evidence, Verdict};
use crate::whatif::{Analysis, Diagnosis};

const JOB_PREFIX: &str = "job/";
const ROWS_PREFIX: &str = "rows/";
const META: &str = "meta";
/// Saves at most this often (host time): what a `kill -9` can lose.
pub const SAVE_EVERY_NS: u64 = 2_000_000_000;
/// Rows of one job written per save at most (the newest), so one save stays
/// a few milliseconds inside its hook call: a job judging more rows than
/// this per save (over 512 ranks at a step a second) keeps gaps in what a
/// restart brings back.
pub const MAX_ROWS_PER_SAVE: usize = 1024;

/// A row as stored: `unit` owned.
#[derive(Serialize, Deserialize)]
struct SavedRow {
    batch: i64,
    rank: i32,
    node: String,
    unit: String,
    start_ns: u64,
    end_ns: u64,
    verdict: Verdict,
    reason: String,
    last: bool,
    evidence: Evidence,
}

#[derive(Serialize, Deserialize)]
struct SavedRank {
    node: String,
    timed: bool,
    recent: VecDeque<(i64, Verdict)>,
    run: Option<Run>,
    runs: VecDeque<Run>,
}

#[derive(Serialize, Deserialize)]
struct SavedJob {
    name: String,
    ranks: BTreeMap<i32, SavedRank>,
    stragglers: VecDeque<BatchStraggler>,
    persistent: Option<Persistent>,
    shares: VecDeque<(u64, [f64; 6])>,
    totals: [u64; 6],
    first_window: Option<u64>,
    slowdowns: VecDeque<(u64, f64)>,
    whatif_said: Option<(String, f64)>,
    onset_said: Option<u64>,
    whatif: Option<(Analysis, Diagnosis)>,
}

/// The rows stream's chunks: (sequence number, rows in it), oldest first.
pub type Chunks = VecDeque<(u64, usize)>;

fn saved_row(r: &Row) -> SavedRow {
    SavedRow {
        batch: r.batch,
        rank: r.rank,
        node: r.node.clone(),
        unit: r.unit.to_string(),
        start_ns: r.start_ns,
        end_ns: r.end_ns,
        verdict: r.verdict,
        reason: r.reason.clone(),
        last: r.last,
        evidence: r.evidence.clone(),
    }
}

fn row(s: SavedRow) -> Row {
    Row {
        batch: s.batch,
        rank: s.rank,
        node: s.node,
        unit: if s.unit == "window" { "window" } else { "step" },
        start_ns: s.start_ns,
        end_ns: s.end_ns,
        verdict: s.verdict,
        reason: s.reason,
        last: s.last,
        evidence: s.evidence,
    }
}

fn saved_job(name: &str, j: &Job) -> SavedJob {
    SavedJob {
        name: name.to_string(),
        ranks: j
            .ranks
            .iter()
            .map(|(&r, k)| {
                let saved = SavedRank {
                    node: k.node.clone(),
                    timed: k.timed,
                    recent: k.recent.clone(),
                    run: k.run.clone(),
                    runs: k.runs.clone(),
                };
                (r, saved)
            })
            .collect(),
        stragglers: j.stragglers.clone(),
        persistent: j.persistent.clone(),
        shares: j.shares.clone(),
        totals: j.totals,
        first_window: j.first_window,
        slowdowns: j.slowdowns.clone(),
        whatif_said: j.whatif_said.clone(),
        onset_said: j.onset_said,
        whatif: j.whatif.clone(),
    }
}

impl Bottleneck {
    /// Reads back what an earlier run saved; returns how many jobs.
    pub fn restore(&mut self, host: &mut dyn Host) -> usize {
        if let Some(c) = saved::get::<Counters>(host, META, "bottleneck's saved counters") {
            self.counters = c;
        }
        let mut n = 0;
        for (_, s) in saved::all::<SavedJob>(host, JOB_PREFIX) {
            let mut j = Job::default();
            for (r, k) in s.ranks {
                let mut rank = Rank::default();
                rank.node = k.node;
                rank.timed = k.timed;
                rank.recent = k.recent;
                rank.run = k.run;
                rank.runs = k.runs;
                j.ranks.insert(r, rank);
            }
            j.stragglers = s.stragglers;
            j.persistent = s.persistent;
            j.shares = s.shares;
            j.totals = s.totals;
            j.first_window = s.first_window;
            j.slowdowns = s.slowdowns;
            j.whatif_said = s.whatif_said;
            j.onset_said = s.onset_said;
            j.whatif = s.whatif;
            self.restore_rows(host, &s.name, &mut j);
            self.jobs.insert(s.name, j);
            n += 1;
        }
        n
    }

    fn restore_rows(&mut self, host: &mut dyn Host, name: &str, j: &mut Job) {
        let mut chunks = Chunks::new();
        for (seq, rows) in saved::stream::<Vec<SavedRow>>(host, &format!("{ROWS_PREFIX}{name}")) {
            chunks.push_back((seq, rows.len()));
            j.rows.extend(rows.into_iter().map(row));
        }
        while j.rows.len() > self.settings.max_rows_per_job {
            j.rows.pop_front();
        }
        self.chunks.insert(name.to_string(), chunks);
    }

    /// Whether the next [`Self::save`] at `now` writes.
    pub fn save_due(&self, now: u64) -> bool {
        now >= self.saved_at.saturating_add(SAVE_EVERY_NS)
    }

    /// Writes what changed since the last save, at most every
    /// [`SAVE_EVERY_NS`] unless `now_or_never` (a stop).
    pub fn save(&mut self, host: &mut dyn Host, now_or_never: bool) {
        let now = host.now();
        if !now_or_never && !self.save_due(now) {
            return;
        }
        self.saved_at = now;
        let mut failed = None;
        let mut wrote = false;
        for (name, job) in &mut self.jobs {
            if !job.unsaved {
                continue;
            }
            let chunks = self.chunks.entry(name.clone()).or_default();
            let stream = format!("{ROWS_PREFIX}{name}");
            let fresh = job.rows_unsaved.min(job.rows.len()).min(MAX_ROWS_PER_SAVE);
            if fresh > 0 {
                let rows: Vec<SavedRow> = job.rows.range(job.rows.len() - fresh..).map(saved_row).collect();
                match host.state_append(&stream, &saved::to_json(&rows)) {
                    Ok(seq) => {
                        chunks.push_back((seq, fresh));
                        // Beyond MAX_ROWS_PER_SAVE, older unsaved rows are skipped for good.
                        job.rows_unsaved = 0;
                    }
                    Err(e) => {
                        failed = Some(e);
                        continue;
                    }
                }
            }
            // Older chunks go once the newer ones hold every row kept.
            let mut newer: usize = chunks.iter().map(|c| c.1).sum();
            let mut trim_before = None;
            while let Some(&(_, count)) = chunks.front() {
                if newer - count < self.settings.max_rows_per_job {
                    break;
                }
                newer -= count;
                chunks.pop_front();
                trim_before = chunks.front().map(|c| c.0);
            }
            if let Some(seq) = trim_before {
                host.state_trim(&stream, seq);
            }
            match saved::put(host, &format!("{JOB_PREFIX}{name}"), &saved_job(name, job)) {
                Ok(()) => {
                    job.unsaved = false;
                    wrote = true;
                }
                Err(e) => failed = Some(e),
            }
        }
        if wrote && let Err(e) = saved::put(host, META, &self.counters) {
            failed = Some(e);
        }
        match failed {
            Some(e) if !self.save_failing => {
                self.save_failing = true;
                host.log(
                    Severity::Warn,
                    &format!("bottleneck: saving the verdicts failed ({e}); trying again at the next save"),
                );
            }
            Some(_) => {}
            None => self.save_failing = false,
        }
    }
}
