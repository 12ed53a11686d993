//! The job registry on disk: what `/api/jobs/{job}` shows comes back after a
//! restart, `kill -9` included.
//!
//! ```text
//!  JobRegistry::take ──► marks the job, and each step it touched, changed
//!  the flusher (`ingest/durable.rs`), on a request from a sonde and every second:
//!     take_changes(): changed jobs' summaries + ranks, changed steps,
//!                     dropped steps and jobs
//!     ──► one state-store transaction with the dedup windows (namespace `@jobs`),
//!         before that request is answered
//!  start: restore_from(store) reads every job and step back
//!
//!  keys:  j/<job>                                   a job: summary, nodes, ranks (JSON)
//!         s/<job> US <rank> US <index> US <role> US <batch, 20 digits>
//!                                                  one rank's step in one batch (JSON)
//!         (US: the ASCII unit separator, 0x1f)
//! ```
//!
//! Limits: what a sonde sent (a request with an identity) is on disk before
//! it is answered; what came otherwise (an app's OTLP SDK, `POST
//! /api/ingest`) since the last flush that finished may be missing after a
//! `kill -9`: the last second, and longer when a flush was itself writing
//! a large backlog (a burst of many thousands of steps) when it came. A
//! write that fails (a full disk) is counted in `/api/ingest`'s `durable`
//! and tried again, with everything still unwritten. A damaged entry is
//! skipped with a warning at start. Steps are written as they change, not
//! all again: an hour of 100 ms steps on 8 ranks is about 290 000 small keys.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Dirty, Job, JobRegistry, Rank, RankKey, Step};
use crate::ingest::durable::{Change, Durable, Taken};
use crate::state::PluginState;

/// The state store's namespace (not a plugin's: those cannot start with `@`).
pub const NAMESPACE: &str = "@jobs";

const US: char = '\u{1f}';

#[derive(Serialize, Deserialize)]
struct JobRecord {
    job: String,
    first_ns: u64,
    last_ns: u64,
    rows: u64,
    kinds: Vec<String>,
    nodes: BTreeMap<String, u64>,
    ranks: Vec<RankRecord>,
    ranks_refused: u64,
    phases_refused: u64,
    /// When the job was ended and why (absent: running; what runs before
    /// this field existed wrote none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ended: Option<(u64, String)>,
}

#[derive(Serialize, Deserialize)]
struct RankRecord {
    /// The rank's key: (rank, key_role, index); see `RankKey`.
    rank: i32,
    key_role: String,
    index: i32,
    role: String,
    node: String,
    local_rank: i32,
    last_batch: Option<u64>,
    last_ns: u64,
    steps_dropped: u64,
}

#[derive(Serialize, Deserialize)]
struct StepRecord {
    job: String,
    rank: i32,
    role: String,
    index: i32,
    batch: u64,
    start: u64,
    end: u64,
    /// (name, total ns, first start, last end)
    phases: Vec<(String, u64, u64, u64)>,
}

fn job_key(job: &str) -> String {
    format!("j/{job}")
}

fn steps_prefix(job: &str) -> String {
    format!("s/{job}{US}")
}

fn step_key(job: &str, (rank, role, index): &RankKey, batch: u64) -> String {
    format!("s/{job}{US}{rank}{US}{index}{US}{role}{US}{batch:020}")
}

fn job_record(name: &str, j: &Job) -> JobRecord {
    JobRecord {
        job: name.to_string(),
        first_ns: j.first_ns,
        last_ns: j.last_ns,
        rows: j.rows,
        kinds: j.kinds.iter().cloned().collect(),
        nodes: j.nodes.clone(),
        ranks: j
            .ranks
            .iter()
            .map(|((rank, key_role, index), r)| RankRecord {
                rank: *rank,
                key_role: key_role.clone(),
                index: *index,
                role: r.role.clone(),
                node: r.node.clone(),
                local_rank: r.local_rank,
                last_batch: r.last_batch,
                last_ns: r.last_ns,
                steps_dropped: r.steps_dropped,
            })
            .collect(),
        ranks_refused: j.ranks_refused,
        phases_refused: j.phases_refused,
        ended: j.ended.clone(),
    }
}

impl JobRegistry {
    /// Reads back what an earlier run wrote, and from now on marks what
    /// changes for the flusher (register it with `Commits::add`). Returns
    /// how many jobs it read back.
    pub fn restore_from(&self, store: &PluginState) -> usize {
        let mut jobs = self.inner.lock();
        let mut read = 0;
        match store.entries("j/") {
            Ok(entries) => {
                for (k, v) in entries {
                    let Ok(rec) = serde_json::from_slice::<JobRecord>(&v) else {
                        tracing::warn!(key = %k, "a persisted job is damaged: skipped");
                        continue;
                    };
                    let job = Job {
                        first_ns: rec.first_ns,
                        last_ns: rec.last_ns,
                        rows: rec.rows,
                        kinds: rec.kinds.into_iter().collect(),
                        nodes: rec.nodes,
                        ranks: rec
                            .ranks
                            .into_iter()
                            .map(|r| {
                                (
                                    (r.rank, r.key_role, r.index),
                                    Rank {
                                        node: r.node,
                                        local_rank: r.local_rank,
                                        role: r.role,
                                        last_batch: r.last_batch,
                                        last_ns: r.last_ns,
                                        steps: BTreeMap::new(),
                                        steps_dropped: r.steps_dropped,
                                    },
                                )
                            })
                            .collect(),
                        ranks_refused: rec.ranks_refused,
                        phases_refused: rec.phases_refused,
                        ended: rec.ended,
                    };
                    jobs.map.insert(rec.job, job);
                    read += 1;
                }
            }
            Err(e) => tracing::warn!("reading the persisted jobs: {e}: starting without them"),
        }
        match store.entries("s/") {
            Ok(entries) => {
                for (k, v) in entries {
                    let Ok(rec) = serde_json::from_slice::<StepRecord>(&v) else {
                        tracing::warn!(key = %k, "a persisted step is damaged: skipped");
                        continue;
                    };
                    let Some(rank) = jobs
                        .map
                        .get_mut(&rec.job)
                        .and_then(|j| j.ranks.get_mut(&(rec.rank, rec.role, rec.index)))
                    else {
                        continue; // its job's entry was lost: nothing to hang it on
                    };
                    rank.steps.insert(
                        rec.batch,
                        Step {
                            start: rec.start,
                            end: rec.end,
                            phases: rec.phases,
                        },
                    );
                }
            }
            Err(e) => tracing::warn!("reading the persisted steps: {e}"),
        }
        jobs.dirty = Some(Dirty::default());
        read
    }
}

impl Durable for JobRegistry {
    fn namespace(&self) -> &'static str {
        NAMESPACE
    }

    fn take_changes(&self) -> Option<Taken> {
        let mut jobs = self.inner.lock();
        let d = jobs.dirty.as_mut()?;
        if d.len() == 0 {
            return None;
        }
        let d = std::mem::take(d);
        let mut changes: Vec<Change> = d
            .gone_jobs
            .iter()
            .map(|n| Change::DeletePrefix(steps_prefix(n)))
            .collect();
        changes.extend(
            d.gone_steps
                .iter()
                .map(|(name, key, batch)| Change::Delete(step_key(name, key, *batch)))
                .chain(d.gone_jobs.iter().map(|n| Change::Delete(job_key(n)))),
        );
        for name in &d.jobs {
            if let Some(j) = jobs.map.get(name) {
                let v = serde_json::to_vec(&job_record(name, j)).unwrap_or_default();
                changes.push(Change::Put(job_key(name), v));
            }
        }
        for (name, key, batch) in &d.steps {
            let Some(s) = jobs
                .map
                .get(name)
                .and_then(|j| j.ranks.get(key))
                .and_then(|r| r.steps.get(batch))
            else {
                continue;
            };
            let rec = StepRecord {
                job: name.clone(),
                rank: key.0,
                role: key.1.clone(),
                index: key.2,
                batch: *batch,
                start: s.start,
                end: s.end,
                phases: s.phases.clone(),
            };
            let v = serde_json::to_vec(&rec).unwrap_or_default();
            changes.push(Change::Put(step_key(name, key, *batch), v));
        }
        Some(Taken {
            changes,
            undo: Box::new(d),
        })
    }

    fn failed(&self, undo: Box<dyn std::any::Any + Send>) {
        let Ok(taken) = undo.downcast::<Dirty>() else { return };
        let mut jobs = self.inner.lock();
        if let Some(d) = jobs.dirty.as_mut() {
            // Merged under whatever changed meanwhile; a job dropped since stays dropped.
            for j in taken.jobs {
                if !d.gone_jobs.contains(&j) {
                    d.jobs.insert(j);
                }
            }
            for s in taken.steps {
                if !d.gone_jobs.contains(&s.0) && !d.gone_steps.contains(&s) {
                    d.steps.insert(s);
                }
            }
            d.gone_steps.extend(taken.gone_steps);
            d.gone_jobs.extend(taken.gone_jobs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::{Origin, Report, ReportTap, Timing};

    fn step(job: &str, rank: i32, batch: i64, t: u64) -> Report {
        Report {
            origin: Origin {
                job: job.into(),
                node: format!("n{rank}"),
                rank,
                ..Default::default()
            },
            timings: vec![
                Timing {
                    name: "forward".into(),
                    start: t,
                    end: t + 10,
                    step: batch,
                },
                Timing {
                    name: "backward".into(),
                    start: t + 10,
                    end: t + 30,
                    step: batch,
                },
            ],
            ..Default::default()
        }
    }

    /// What the flusher does: the registry's changes in one transaction.
    fn flush(store: &crate::state::StateStore, reg: &JobRegistry) {
        let Some(t) = reg.take_changes() else { return };
        let writes: Vec<_> = t.changes.iter().map(|c| (NAMESPACE, c.as_write())).collect();
        store.write_many(&writes).unwrap();
    }

    #[test]
    fn a_job_and_its_steps_come_back_the_same_and_dropped_ones_stay_gone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let before = {
            let store = crate::state::StateStore::open(&path).unwrap();
            let reg = JobRegistry::new(2, 3);
            assert_eq!(reg.restore_from(&store.namespace(NAMESPACE)), 0);
            for b in 0..5 {
                reg.observe(&[
                    step("train", 0, b, 1_000 * b as u64),
                    step("train", 1, b, 1_000 * b as u64 + 5),
                ]);
            }
            reg.observe(&[step("other", 0, 1, 50)]);
            assert!(reg.stats().unsaved > 0);
            flush(&store, &reg);
            assert_eq!(reg.stats().unsaved, 0);
            // A third job pushes out the one idle longest ("other"), on disk too.
            reg.observe(&[step("third", 0, 1, 1_000_000)]);
            // A failed write keeps the changes for the next one.
            let t = reg.take_changes().unwrap();
            reg.failed(t.undo);
            assert!(reg.stats().unsaved > 0);
            flush(&store, &reg);
            reg.view("train", 100).unwrap()
        };
        let store = crate::state::StateStore::open(&path).unwrap();
        let reg = JobRegistry::new(2, 3);
        assert_eq!(reg.restore_from(&store.namespace(NAMESPACE)), 2);
        let after = reg.view("train", 100).unwrap();
        assert_eq!(after, before);
        assert_eq!(after.steps.len(), 3, "the two oldest batches were dropped for room");
        assert!(reg.view("other", 10).is_none(), "evicted, and forgotten on disk");
        assert!(reg.view("third", 10).is_some());
    }
}
