//! The Brain service's algorithms (`dlrover/go/brain/pkg/optimizer/
//! implementation/`, reference section 6) as a second strategy. The Brain's
//! database is the host's state store here: the runtime records this plugin
//! persists (defect D5: upstream they never reached the Brain) and finished
//! jobs' summaries with their resources, status and OOM flag filled in
//! (defect D6: upstream those columns stayed empty). Stage names are not a
//! contract between two programs here (defect D4), and
//! `speed_less_percent` is read from its own key (defect D8).
//!
//! Here: the Brain's parameters and the job records its algorithms read.
//! `ps.rs` holds the parameter-server algorithms, `worker.rs` the worker
//! ones.

mod ps;
#[cfg(test)]
mod tests;
mod worker;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::{NodeType, RuntimeStat, mean};
use crate::settings;

const GIB: f64 = 1024.0;
/// 4e9 bytes in MiB (the worker-OOM increment).
const FOUR_E9_MIB: f64 = 4e9 / 1048576.0;
const MAX_PS: u32 = 15;
const MAX_NODE_CPU: f64 = 32.0;
const INIT_STEP_TIME_S: f64 = 1800.0;
const DEFAULT_INIT_WORKER: u32 = 10;
const WORKER_MAX_INIT_COUNT_PER_STEP: u32 = 32;
const MAX_REPLICA: u32 = 60;
const SPEED_RECORDS: usize = 5;
const N_RECORD_TO_AVG: usize = 3;
const INIT_TRAINING_RECORDS: usize = 6;
const SINGULAR_LESS_PERCENT: f64 = 0.15;

/// The Brain's parameters: Go defaults, or the configmap's values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    pub target_worker_count: u32,
    pub singular_comp_count: usize,
    pub ps_exhausted: f64,
    pub worker_decrease: u32,
    pub ps_overload: f64,
    pub worker_max_count_per_step: u32,
    pub speed_less_percent: f64,
    pub worker_cpu_margin: f64,
    pub worker_memory_margin: f64,
    pub history_days: f64,
}

impl Params {
    pub fn from_settings(b: &settings::Brain) -> Params {
        let (t, c, e, d, o, m, s, cm, mm) = if b.configmap {
            (32, 3, 0.99, 1, 0.85, 8, 0.2, 0.0, 0.6)
        } else {
            (20, 2, 0.95, 4, 0.8, 4, 0.1, 1.0, 0.2)
        };
        Params {
            target_worker_count: b.target_worker_count.unwrap_or(t),
            singular_comp_count: b.singular_comp_count.map_or(c, |x| x as usize),
            ps_exhausted: b.ps_exhausted.unwrap_or(e),
            worker_decrease: b.worker_decrease.unwrap_or(d),
            ps_overload: b.ps_overload.unwrap_or(o),
            worker_max_count_per_step: b.worker_max_count_per_step.unwrap_or(m),
            speed_less_percent: b.speed_less_percent.unwrap_or(s),
            worker_cpu_margin: b.worker_cpu_margin.unwrap_or(cm),
            worker_memory_margin: b.worker_memory_margin.unwrap_or(mm),
            history_days: b.history_days,
        }
    }
}

impl Default for Params {
    fn default() -> Self {
        Params::from_settings(&settings::Brain::default())
    }
}

/// A finished (or running) job as the Brain's history keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct HistoryJob {
    pub name: String,
    pub scenario: String,
    pub time_ns: u64,
    pub completed: bool,
    pub oom: bool,
    /// Per PS: mean used CPU and max used memory (MiB).
    pub ps_avg_cpu: Vec<f64>,
    pub ps_max_mem_mib: Vec<f64>,
    /// Mean over records of the PS total CPU; max over records of the PS total memory.
    pub ps_total_cpu: f64,
    pub ps_total_mem_mib: f64,
    /// Max used worker CPU and memory (MiB).
    pub worker_max_cpu: f64,
    pub worker_max_mem_mib: f64,
}

impl HistoryJob {
    /// A summary of this job's records.
    pub fn summarize(
        name: &str,
        scenario: &str,
        now: u64,
        completed: bool,
        oom: bool,
        stats: &[RuntimeStat],
    ) -> HistoryJob {
        let mut per_ps: BTreeMap<&str, (Vec<f64>, f64)> = BTreeMap::new();
        let mut totals = Vec::new();
        let mut total_mem: f64 = 0.0;
        let (mut wcpu, mut wmem): (f64, f64) = (0.0, 0.0);
        for s in stats {
            let (mut c, mut m) = (0.0, 0.0);
            for n in s.of(NodeType::Ps) {
                let e = per_ps.entry(&n.name).or_default();
                e.0.push(n.used.cpu);
                e.1 = e.1.max(n.used.memory_mib);
                c += n.used.cpu;
                m += n.used.memory_mib;
            }
            totals.push(c);
            total_mem = total_mem.max(m);
            for n in s.trainers() {
                wcpu = wcpu.max(n.used.cpu);
                wmem = wmem.max(n.used.memory_mib);
            }
        }
        HistoryJob {
            name: name.into(),
            scenario: scenario.into(),
            time_ns: now,
            completed,
            oom,
            ps_avg_cpu: per_ps.values().map(|(c, _)| mean(c)).collect(),
            ps_max_mem_mib: per_ps.values().map(|(_, m)| *m).collect(),
            ps_total_cpu: mean(&totals),
            ps_total_mem_mib: total_mem,
            worker_max_cpu: wcpu,
            worker_max_mem_mib: wmem,
        }
    }
}

/// What the Brain knows about the job besides its records.
#[derive(Debug, Clone, Default)]
pub struct JobInfo {
    /// Steps of the whole job: dataset / batch x epochs, capped at max_steps (0 = unknown).
    pub total_steps: f64,
    pub oom: bool,
    /// PS receive ops (a TF metric), when reported.
    pub recv_ops: Option<f64>,
    /// The worker memory last planned or used (MiB), for the OOM rule.
    pub last_worker_mem_mib: f64,
}

/// Mean of the "major cluster": the middle half of the values around the median.
pub fn major_mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let k = v.len().div_ceil(2);
    let start = (v.len() - k) / 2;
    mean(&v[start..start + k])
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Initial,
    Sample,
    Stable,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpeedState {
    Decelerated,
    Increased,
    Stable,
}

pub struct Brain {
    pub params: Params,
}

/// Per PS name, its requested CPU (the latest record's).
fn ps_requested(stats: &[RuntimeStat]) -> BTreeMap<String, (f64, f64)> {
    stats
        .last()
        .map(|s| {
            s.of(NodeType::Ps)
                .map(|n| (n.name.clone(), (n.config.cpu, n.config.memory_mib)))
                .collect()
        })
        .unwrap_or_default()
}

fn max_util(record: &RuntimeStat) -> f64 {
    record
        .of(NodeType::Ps)
        .filter(|n| n.config.cpu > 0.0)
        .map(|n| n.used.cpu / n.config.cpu)
        .fold(0.0, f64::max)
}

impl Brain {
    /// Mean over the last 5 records of speed per worker.
    fn per_worker_speed(stats: &[RuntimeStat]) -> f64 {
        let v: Vec<f64> = stats[stats.len().saturating_sub(SPEED_RECORDS)..]
            .iter()
            .filter(|s| s.trainers().count() > 0)
            .map(|s| s.speed / s.trainers().count() as f64)
            .collect();
        mean(&v)
    }
}
