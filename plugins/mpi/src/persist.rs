//! The profiles in the host's state store (this plugin's namespace), so a
//! restart of sonde keeps what the ranks sent before it.
//!
//! ```text
//!  on_events ─► JobProfile::add marks the job `dirty_state`
//!  write timer (write_every_ms) and stop ─► save(): each dirty job ─► state-put `profile/<job>` (JSON)
//!                                            each forgotten job ─► state-delete `profile/<job>`
//!  start ─► restore(): every `profile/…` key read back into `jobs`
//! ```
//!
//! What is kept: the bins (every rank, thread, state, function and call
//! site with its time), the rank → node map, the world size, first and last
//! sample, rows and dropped samples, and the newest `KEPT_TIMELINE`
//! intervals of each rank's and thread's timeline (the rest of the
//! timeline, up to `MAX_TIMELINE` in memory, is not written: it would make
//! a profile's value megabytes). What is lost: samples that arrived after
//! the last write before a `kill -9` (at most `write_every_ms` of them); a
//! clean stop writes everything. A write that fails is logged once and
//! tried again at the next timer.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sonde_plugin_sdk::Host;
use sonde_plugin_sdk::types::Severity;

use crate::plugin::Mpi;
use crate::profile::{BinKey, JobProfile};

/// Timeline intervals written per (rank, thread).
pub const KEPT_TIMELINE: usize = 2_000;
const PREFIX: &str = "profile/";

/// One rank's and thread's timeline: (rank, thread, [(interval end, ns per state)]).
type SavedLine = (i32, u32, Vec<(u64, [u64; 3])>);

#[derive(Serialize, Deserialize)]
struct Saved {
    /// (rank, thread, state, function, callsite, ns)
    bins: Vec<(i32, u32, u8, String, String, u64)>,
    nodes: BTreeMap<i32, String>,
    world_size: Option<u32>,
    first_ns: u64,
    last_ns: u64,
    dropped_samples: u64,
    rows: u64,
    timeline: Vec<SavedLine>,
}

fn encode(p: &JobProfile) -> Vec<u8> {
    let s = Saved {
        bins: p
            .bins
            .iter()
            .map(|(k, ns)| (k.rank, k.thread, k.state, k.function.clone(), k.callsite.clone(), *ns))
            .collect(),
        nodes: p.nodes.clone(),
        world_size: p.world_size,
        first_ns: p.first_ns,
        last_ns: p.last_ns,
        dropped_samples: p.dropped_samples,
        rows: p.rows,
        timeline: p
            .timeline
            .iter()
            .map(|(&(rank, thread), line)| {
                let skip = line.len().saturating_sub(KEPT_TIMELINE);
                (rank, thread, line.iter().skip(skip).map(|(t, v)| (*t, *v)).collect())
            })
            .collect(),
    };
    serde_json::to_vec(&s).expect("a profile serializes")
}

fn decode(b: &[u8]) -> Result<JobProfile, String> {
    let s: Saved = serde_json::from_slice(b).map_err(|e| e.to_string())?;
    Ok(JobProfile {
        bins: s
            .bins
            .into_iter()
            .map(|(rank, thread, state, function, callsite, ns)| {
                (
                    BinKey {
                        rank,
                        thread,
                        state,
                        function,
                        callsite,
                    },
                    ns,
                )
            })
            .collect(),
        nodes: s.nodes,
        world_size: s.world_size,
        first_ns: s.first_ns,
        last_ns: s.last_ns,
        dropped_samples: s.dropped_samples,
        rows: s.rows,
        // The metrics and the folded file are brought up to date by the timers.
        dirty_file: true,
        dirty_metrics: true,
        dirty_state: false,
        timeline: s
            .timeline
            .into_iter()
            .map(|(rank, thread, line)| ((rank, thread), line.into_iter().collect()))
            .collect(),
    })
}

impl Mpi {
    /// Reads back every profile an earlier run wrote; returns how many.
    pub fn restore(&mut self, host: &mut dyn Host) -> usize {
        let mut n = 0;
        for key in host.state_keys(PREFIX) {
            let Some(bytes) = host.state_get(&key) else { continue };
            match decode(&bytes) {
                Ok(p) => {
                    self.jobs.insert(key[PREFIX.len()..].to_string(), p);
                    n += 1;
                }
                Err(e) => host.log(
                    Severity::Warn,
                    &format!("mpi: the saved profile `{key}` is unreadable ({e}); it starts afresh"),
                ),
            }
        }
        n
    }

    /// Writes every profile that changed since its last write, and deletes
    /// the forgotten ones.
    pub fn save(&mut self, host: &mut dyn Host) {
        for job in std::mem::take(&mut self.forgotten) {
            if !self.jobs.contains_key(&job) {
                host.state_delete(&format!("{PREFIX}{job}"));
            }
        }
        let dirty: Vec<String> = self
            .jobs
            .iter()
            .filter(|(_, p)| p.dirty_state)
            .map(|(j, _)| j.clone())
            .collect();
        for job in dirty {
            let bytes = encode(&self.jobs[&job]);
            match host.state_put(&format!("{PREFIX}{job}"), &bytes) {
                Ok(()) => {
                    self.jobs.get_mut(&job).unwrap().dirty_state = false;
                    self.save_failed = false;
                }
                Err(e) => {
                    if !self.save_failed {
                        host.log(
                            Severity::Warn,
                            &format!("mpi: saving the profile of {job} failed ({e}); retried at the next write"),
                        );
                    }
                    self.save_failed = true;
                }
            }
        }
    }
}
