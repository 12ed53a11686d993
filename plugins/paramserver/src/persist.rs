//! The jobs in the host's state store (this plugin's namespace), so a
//! restart of sonde keeps the incidents, clocks, checkpoints and liveness it
//! had worked out.
//!
//! ```text
//!  on_events, a check that detected or ended something ─► unsaved
//!  check timer (check_every_ms) and stop ─► save(): every job ─► state-put `job/<name>` (JSON)
//!                                                   counters, next incident id ─► `meta`
//!  start ─► restore(): `meta` and every `job/…` read back
//! ```
//!
//! What is kept, per job: the failure detector's processes (last heartbeat,
//! count, alive / dead / left), every worker's clock with its blocked and
//! caused time and an open wait, the server clocks, roles, checkpoints (open
//! and done), incidents with their stages, `no-data` reports and stragglers;
//! and the plugin's counters and next incident number. The consistency model
//! comes from the settings, not the store. After a restart every process
//! still alive gets a fresh heartbeat timeout from the restart: heartbeats
//! sent while sonde was down were lost, not missed. What is lost: what
//! arrived after the last save before a `kill -9` (at most `check_every_ms`
//! of it); a clean stop saves everything. A failed write is logged once and
//! tried again at the next check.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use sonde_plugin_sdk::types::Severity;
use sonde_plugin_sdk::{Host, saved};

use crate::consistency::WorkerClock;
use crate::detector::{Liveness, Watched};
use crate::incidents::{Checkpoints, Incident};
use crate::ps::{Counters, Job, ParamServer};

const PREFIX: &str = "job/";
const META: &str = "meta";

#[derive(Serialize, Deserialize)]
struct SavedJob {
    name: String,
    procs: BTreeMap<String, Watched>,
    workers: BTreeMap<String, WorkerClock>,
    servers: BTreeMap<String, (u64, u64)>,
    roles: BTreeMap<String, String>,
    checkpoints: Checkpoints,
    incidents: VecDeque<Incident>,
    no_data: BTreeMap<String, u64>,
    stragglers: Vec<String>,
    straggler_decided: BTreeMap<String, u64>,
    first_ns: u64,
    last_ns: u64,
    ended_ns: Option<u64>,
}

#[derive(Serialize, Deserialize)]
struct Meta {
    counters: Counters,
    next_incident: u32,
}

fn saved_job(j: &Job) -> SavedJob {
    SavedJob {
        name: j.name.clone(),
        procs: j.detector.procs.clone(),
        workers: j.clocks.workers.clone(),
        servers: j.servers.clone(),
        roles: j.roles.clone(),
        checkpoints: j.checkpoints.clone(),
        incidents: j.incidents.clone(),
        no_data: j.no_data.clone(),
        stragglers: j.stragglers.clone(),
        straggler_decided: j.straggler_decided.clone(),
        first_ns: j.first_ns,
        last_ns: j.last_ns,
        ended_ns: j.ended_ns,
    }
}

impl ParamServer {
    /// Reads back what an earlier run saved; returns how many jobs.
    pub fn restore(&mut self, host: &mut dyn Host) -> usize {
        let now = host.now();
        if let Some(m) = saved::get::<Meta>(host, META, "paramserver's saved counters") {
            self.counters = m.counters;
            self.next_incident = m.next_incident.max(1);
        }
        let mut n = 0;
        for (_, s) in saved::all::<SavedJob>(host, PREFIX) {
            let mut j = Job::new(&s.name, &self.settings, s.first_ns);
            j.detector.procs = s.procs;
            for w in j.detector.procs.values_mut() {
                if w.liveness == Liveness::Alive {
                    w.last_heartbeat_ns = w.last_heartbeat_ns.max(now);
                }
            }
            j.clocks.workers = s.workers;
            j.servers = s.servers;
            j.roles = s.roles;
            j.checkpoints = s.checkpoints;
            j.incidents = s.incidents;
            j.no_data = s.no_data;
            j.stragglers = s.stragglers;
            j.straggler_decided = s.straggler_decided;
            j.last_ns = s.last_ns;
            j.ended_ns = s.ended_ns;
            self.jobs.insert(s.name, j);
            n += 1;
        }
        n
    }

    /// Writes every job and the counters when something changed since the last save.
    pub fn save(&mut self, host: &mut dyn Host) {
        if !self.unsaved {
            return;
        }
        let meta = Meta {
            counters: self.counters.clone(),
            next_incident: self.next_incident,
        };
        let mut writes: Vec<(String, Vec<u8>)> = vec![(META.to_string(), saved::to_json(&meta))];
        for (name, j) in &self.jobs {
            writes.push((format!("{PREFIX}{name}"), saved::to_json(&saved_job(j))));
        }
        for (key, bytes) in writes {
            if let Err(e) = host.state_put(&key, &bytes) {
                if !self.save_failed {
                    host.log(
                        Severity::Warn,
                        &format!("paramserver: saving `{key}` failed ({e}); retried at the next check"),
                    );
                }
                self.save_failed = true;
                return;
            }
        }
        self.save_failed = false;
        self.unsaved = false;
    }
}
