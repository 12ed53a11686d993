//! The Brain service's algorithms (`dlrover/go/brain/pkg/optimizer/
//! implementation/`, reference section 6) as a second strategy. The Brain's
//! database is the host's state store here: the runtime records this plugin
//! persists (defect D5: upstream they never reached the Brain) and finished
//! jobs' summaries with their resources, status and OOM flag filled in
//! (defect D6: upstream those columns stayed empty). Stage names are not a
//! contract between two programs here (defect D4), and
//! `speed_less_percent` is read from its own key (defect D8).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::{GroupResource, NS, NodeType, Outcome, Plan, Resource, RuntimeStat, mean, median};
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

/// Per PS: its used CPU in the last `k` records.
fn ps_cpu_series(stats: &[RuntimeStat], k: usize) -> BTreeMap<String, Vec<f64>> {
    let mut out: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for s in &stats[stats.len().saturating_sub(k)..] {
        for n in s.of(NodeType::Ps) {
            out.entry(n.name.clone()).or_default().push(n.used.cpu);
        }
    }
    out
}

fn max_util(record: &RuntimeStat) -> f64 {
    record
        .of(NodeType::Ps)
        .filter(|n| n.config.cpu > 0.0)
        .map(|n| n.used.cpu / n.config.cpu)
        .fold(0.0, f64::max)
}

impl Brain {
    /// R6.1: PS create from the same scenario's jobs of the last 7 days;
    /// cold start 4 PS x 12 CPU x 16 GiB.
    pub fn ps_create(&self, history: &[HistoryJob], scenario: &str, now: u64) -> Outcome {
        let horizon = now.saturating_sub((self.params.history_days * 86_400.0 * NS as f64) as u64);
        let jobs: Vec<&HistoryJob> = history
            .iter()
            .filter(|j| j.scenario == scenario && j.time_ns >= horizon && !j.ps_avg_cpu.is_empty())
            .collect();
        if jobs.is_empty() {
            return Outcome::with(
                Plan::default().group(NodeType::Ps, GroupResource::new(4, 12.0, 16.0 * GIB)),
                format!(
                    "PS create: no job of scenario {scenario:?} in the last {} days: cold start 4 PS x 12 CPU x 16 GiB",
                    self.params.history_days
                ),
            );
        }
        let max_ps_cpu = jobs
            .iter()
            .flat_map(|j| j.ps_avg_cpu.iter().copied())
            .fold(0.0, f64::max);
        let mut cpu = max_ps_cpu + 4.0;
        let total = major_mean(&jobs.iter().map(|j| j.ps_total_cpu).collect::<Vec<_>>()) * 1.5;
        let mut n = (total / cpu).ceil().max(1.0) as u32;
        if n > MAX_PS {
            n = MAX_PS;
            cpu = (total / MAX_PS as f64).ceil();
        }
        let single = jobs
            .iter()
            .flat_map(|j| j.ps_max_mem_mib.iter().copied())
            .fold(0.0, f64::max);
        let total_mem = jobs.iter().map(|j| j.ps_total_mem_mib).fold(0.0, f64::max);
        let mem = (single.max((total_mem / n as f64).ceil()) * 1.2).ceil();
        Outcome::with(
            Plan::default().group(NodeType::Ps, GroupResource::new(n, cpu, mem)),
            format!(
                "PS create from {} history job(s): CPU = max per-PS {max_ps_cpu:.2} + 4, total = major-cluster mean x 1.5 = {total:.1} -> {n} PS x {cpu} CPU x {mem} MiB",
                jobs.len()
            ),
        )
    }

    /// R6.2: worker create from completed jobs (OOM: more memory).
    pub fn worker_create(&self, history: &[HistoryJob], info: &JobInfo) -> Outcome {
        let done: Vec<&HistoryJob> = history.iter().filter(|j| j.completed).collect();
        let max_cpu = done.iter().map(|j| j.worker_max_cpu).fold(0.0, f64::max);
        let cpu = max_cpu.ceil().max(12.0);
        let mut mem = (done.iter().map(|j| j.worker_max_mem_mib).fold(0.0, f64::max) * 1.5).max(16.0 * GIB);
        let mut why = format!(
            "worker create from {} completed job(s): CPU max(ceil({max_cpu:.2}), 12), memory max(1.5 x max used, 16 GiB)",
            done.len()
        );
        if info.oom {
            let hist = done
                .iter()
                .map(|j| j.worker_max_mem_mib * if j.oom { 1.2 } else { 1.0 })
                .fold(0.0, f64::max);
            mem = hist.max(info.last_worker_mem_mib + FOUR_E9_MIB);
            why = format!(
                "worker create after an OOM: memory max(history {hist:.0}, last {:.0} + 4e9 B) = {mem:.0} MiB",
                info.last_worker_mem_mib
            );
        }
        Outcome::with(
            Plan::default().group(NodeType::Worker, GroupResource::new(1, cpu, mem.ceil())),
            why,
        )
    }

    /// Mean over the last 5 records of speed per worker.
    fn per_worker_speed(stats: &[RuntimeStat]) -> f64 {
        let v: Vec<f64> = stats[stats.len().saturating_sub(SPEED_RECORDS)..]
            .iter()
            .filter(|s| s.trainers().count() > 0)
            .map(|s| s.speed / s.trainers().count() as f64)
            .collect();
        mean(&v)
    }

    /// R6.3 PS init-adjust (R6.4 when the job is OOM).
    pub fn ps_init_adjust(&self, stats: &[RuntimeStat], info: &JobInfo) -> Outcome {
        if info.oom {
            return self.ps_oom(stats);
        }
        let Some(last) = stats.last() else {
            return Outcome::none("PS init-adjust: no runtime records yet");
        };
        let workers = last.trainers().count() as f64;
        let nps = last.of(NodeType::Ps).count() as f64;
        if workers == 0.0 || nps == 0.0 {
            return Outcome::none("PS init-adjust: no workers or PS running");
        }
        let speed = Self::per_worker_speed(stats);
        let t = if speed > 0.0 && info.total_steps > 0.0 {
            info.total_steps / speed
        } else {
            f64::INFINITY
        };
        let mut target = if t <= INIT_STEP_TIME_S {
            DEFAULT_INIT_WORKER
        } else {
            self.params.target_worker_count
        } as f64;
        let mut ps_cpu: f64 = match info.recv_ops {
            Some(ops) if ops / nps <= 150.0 => (0.08 * ops / nps).ceil() + 4.0,
            _ => 16.0,
        };
        let avg: Vec<(String, f64)> = ps_cpu_series(stats, N_RECORD_TO_AVG)
            .into_iter()
            .map(|(k, v)| (k, mean(&v)))
            .collect();
        let max_avg = avg.iter().map(|(_, a)| *a).fold(0.0, f64::max);
        ps_cpu = ps_cpu.max(max_avg.ceil() + 4.0);
        if max_avg > 0.0 {
            let mut free = ps_cpu / (max_avg * nps / MAX_PS as f64);
            if avg.len() > 1 {
                let i = avg.iter().position(|(_, a)| *a == max_avg).expect("present");
                let others: Vec<f64> = avg
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, (_, a))| *a)
                    .collect();
                let gap = max_avg - mean(&others);
                if gap > 0.0 {
                    free = free.min(ps_cpu / gap);
                }
            }
            target = target.min((free * workers).ceil());
        }
        let max_total = stats
            .iter()
            .map(|s| s.of(NodeType::Ps).map(|n| n.used.cpu).sum::<f64>())
            .fold(0.0, f64::max);
        let n = ((target / workers) * max_total / ps_cpu).ceil().max(1.0) as u32;
        let mem = (last.of(NodeType::Ps).map(|n| n.used.memory_mib).fold(0.0, f64::max) * 1.2).ceil();
        Outcome::with(
            Plan::default().group(NodeType::Ps, GroupResource::new(n.min(MAX_PS), ps_cpu, mem)),
            format!(
                "PS init-adjust: estimated time {t:.0} s -> target {target} workers; PS CPU {ps_cpu}; \
                 {n} PS for (target / {workers} workers) x max total PS CPU {max_total:.2}"
            ),
        )
    }

    /// R6.4 PS OOM.
    pub fn ps_oom(&self, stats: &[RuntimeStat]) -> Outcome {
        let req = ps_requested(stats);
        let nps = req.len().max(1) as u32;
        let cfg_mem = req.values().map(|(_, m)| *m).fold(0.0, f64::max);
        let cfg_cpu = req.values().map(|(c, _)| *c).fold(0.0, f64::max);
        let used: Vec<f64> = stats
            .last()
            .map(|s| s.of(NodeType::Ps).map(|n| n.used.memory_mib).collect())
            .unwrap_or_default();
        let max = used.iter().copied().fold(0.0, f64::max);
        if stats.is_empty() || max <= 0.0 {
            return if cfg_mem >= 64.0 * GIB {
                Outcome::with(
                    Plan::default().group(NodeType::Ps, GroupResource::new(nps * 2, cfg_cpu, cfg_mem)),
                    "PS OOM without runtime data: memory already >= 64 GiB, so double the PS count",
                )
            } else {
                Outcome::with(
                    Plan::default().group(NodeType::Ps, GroupResource::new(nps, cfg_cpu, cfg_mem * 2.0)),
                    "PS OOM without runtime data: double the memory",
                )
            };
        }
        let avg = mean(&used);
        if (max - avg) / max > 0.2 {
            Outcome::with(
                Plan::default().group(NodeType::Ps, GroupResource::new(nps, cfg_cpu, 2.0 * max)),
                format!("PS OOM on a hot PS (max {max:.0} vs mean {avg:.0} MiB): memory 2 x max"),
            )
        } else {
            Outcome::with(
                Plan::default().group(NodeType::Ps, GroupResource::new(nps * 2, cfg_cpu, cfg_mem)),
                format!("PS OOM with balanced PS (max {max:.0} vs mean {avg:.0} MiB): double the PS count"),
            )
        }
    }

    /// R6.5 hot PS while running (CPU > 0.8 of requested over the last 3
    /// records; memory > 0.9 in each of them).
    pub fn hot_ps(&self, stats: &[RuntimeStat]) -> Outcome {
        let Some(last) = stats.last() else {
            return Outcome::none("no runtime records");
        };
        let req = ps_requested(stats);
        let avg: BTreeMap<String, f64> = ps_cpu_series(stats, N_RECORD_TO_AVG)
            .into_iter()
            .map(|(k, v)| (k, mean(&v)))
            .collect();
        let hot: Vec<&String> = avg
            .iter()
            .filter(|(k, a)| req.get(*k).is_some_and(|(c, _)| *c > 0.0 && **a / c > 0.8))
            .map(|(k, _)| k)
            .collect();
        let mut plan = Plan::default();
        let mut why = Vec::new();
        if !hot.is_empty() {
            let workers = last.trainers().count().max(1) as f64;
            let mut coeff = MAX_NODE_CPU / workers;
            for h in &hot {
                if (avg[*h] * coeff).ceil() > MAX_NODE_CPU {
                    coeff = MAX_NODE_CPU / avg[*h];
                }
            }
            for (name, a) in &avg {
                let cpu = (a * coeff).ceil();
                if cpu > req[name].0 {
                    plan = plan.node(name, Resource::new(cpu, 0.0));
                    why.push(format!("{name} CPU {} -> {cpu}", req[name].0));
                }
            }
        }
        let recent = &stats[stats.len().saturating_sub(N_RECORD_TO_AVG)..];
        if recent.len() == N_RECORD_TO_AVG {
            for (name, (_, mem)) in &req {
                let hot_mem = *mem > 0.0
                    && recent.iter().all(|s| {
                        s.of(NodeType::Ps)
                            .find(|n| &n.name == name)
                            .is_some_and(|n| n.used.memory_mib / mem > 0.9)
                    });
                if hot_mem {
                    let e = plan.nodes.entry(name.clone()).or_default();
                    e.memory_mib = mem + 8.0 * GIB;
                    why.push(format!("{name} memory {mem} -> {} MiB", mem + 8.0 * GIB));
                }
            }
        }
        if plan.is_empty() {
            return Outcome::none("no hot PS");
        }
        Outcome::with(plan, format!("hot PS: {}", why.join(", ")))
    }

    /// R6.6 PS utilization: shrink idle PS on long, big jobs.
    pub fn ps_util(&self, stats: &[RuntimeStat], info: &JobInfo) -> Outcome {
        if stats.len() < 3 {
            return Outcome::none("PS util: fewer than 3 records");
        }
        let last = stats.last().expect("checked");
        if info.total_steps > 0.0 && last.speed > 0.0 {
            let remaining = (info.total_steps - last.global_step as f64) / last.speed;
            if remaining < 3600.0 {
                return Outcome::none(format!("PS util: about {remaining:.0} s left (< 3600 s)"));
            }
        }
        let req = ps_requested(stats);
        let series = ps_cpu_series(stats, stats.len());
        let avg_max = series.values().map(|v| mean(v)).fold(0.0, f64::max);
        let workers = last.trainers().count();
        let util = max_util(last);
        if !((workers >= 32 && util > 0.8) || avg_max >= MAX_NODE_CPU * 0.8) {
            return Outcome::none("PS util: not enabled (fewer than 32 workers or PS not busy)");
        }
        let mut plan = Plan::default();
        for (name, v) in &series {
            let max = v.iter().copied().fold(0.0, f64::max);
            let (cpu, _) = req.get(name).copied().unwrap_or_default();
            if cpu > 0.0 && max / cpu < 0.4 {
                let mem = last
                    .of(NodeType::Ps)
                    .find(|n| &n.name == name)
                    .map_or(0.0, |n| (n.used.memory_mib * 1.2).ceil());
                plan = plan.node(name, Resource::new(max.ceil() + 4.0, mem));
            }
        }
        Outcome::with(plan, "PS util: PS using < 40% of their CPU get ceil(max) + 4 cores")
    }

    /// Records that count for the worker rule: the latest PS set, no singular spikes.
    pub fn preprocess<'a>(&self, stats: &'a [RuntimeStat]) -> Vec<&'a RuntimeStat> {
        let Some(last) = stats.last() else { return Vec::new() };
        let ps = last.ps_names();
        let l = stats.len();
        let mut out = Vec::new();
        for (i, s) in stats.iter().enumerate() {
            if s.ps_names() != ps {
                continue;
            }
            if out.is_empty() || i == l - 1 {
                out.push(s);
                continue;
            }
            let u = max_util(s);
            if u <= self.params.ps_overload {
                out.push(s);
                continue;
            }
            let c = self.params.singular_comp_count;
            let singular = (i.saturating_sub(c)..=(i + c).min(l - 1)).filter(|j| *j != i).all(|j| {
                let v = max_util(&stats[j]);
                u > v && (u - v) / u >= SINGULAR_LESS_PERCENT
            });
            if !singular {
                out.push(s);
            }
        }
        out
    }

    /// Speed before vs after the last change of worker count (5 records each).
    pub fn speed_state(&self, recs: &[&RuntimeStat]) -> SpeedState {
        let l = recs.len();
        let count = SPEED_RECORDS;
        let Some(last) = recs.last() else {
            return SpeedState::Stable;
        };
        let cur = last.trainers().count();
        let change = (0..l).rev().find(|&i| recs[i].trainers().count() != cur);
        let Some(ch) = change else { return SpeedState::Increased };
        if ch as isize > l as isize - count as isize - 1 {
            return SpeedState::Stable;
        }
        if ch + 1 < count {
            return SpeedState::Increased;
        }
        let pre = mean(&recs[ch + 1 - count..=ch].iter().map(|s| s.speed).collect::<Vec<_>>());
        let post = mean(&recs[ch + 1..=ch + count].iter().map(|s| s.speed).collect::<Vec<_>>());
        if pre > post && (pre - post) / pre >= self.params.speed_less_percent {
            SpeedState::Decelerated
        } else if pre < post {
            SpeedState::Increased
        } else {
            SpeedState::Stable
        }
    }

    /// R6.7 the worker plan at runtime.
    pub fn worker(&self, stats: &[RuntimeStat], info: &JobInfo, phase: Phase) -> Outcome {
        let recs = self.preprocess(stats);
        if recs.len() < self.params.singular_comp_count {
            return Outcome::none(format!(
                "worker plan: {} records (< {})",
                recs.len(),
                self.params.singular_comp_count
            ));
        }
        let last = *recs.last().expect("not empty");
        let cur = last.trainers().count() as u32;
        let mut n = cur;
        let req = ps_requested(stats);
        let tail = &recs[recs.len().saturating_sub(N_RECORD_TO_AVG)..];
        let mut per_ps: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        for s in tail {
            for p in s.of(NodeType::Ps) {
                per_ps.entry(&p.name).or_default().push(p.used.cpu);
            }
        }
        let util_of = |f: &dyn Fn(&[f64]) -> f64| {
            per_ps
                .iter()
                .filter_map(|(k, v)| req.get(*k).filter(|(c, _)| *c > 0.0).map(|(c, _)| f(v) / c))
                .fold(0.0, f64::max)
        };
        let max_ps_util = util_of(&|v| v.iter().copied().fold(0.0, f64::max));
        let exhausted = tail.len() >= N_RECORD_TO_AVG && util_of(&mean) > self.params.ps_exhausted;
        let state = self.speed_state(&recs);
        let mut why = format!("max PS CPU utilization {max_ps_util:.2}, speed {state:?}");
        if exhausted {
            if n > self.params.worker_decrease {
                n -= self.params.worker_decrease;
            }
            why += &format!(
                "; a PS is exhausted (> {}): {cur} -> {n} workers",
                self.params.ps_exhausted
            );
        } else if max_ps_util < self.params.ps_overload && state != SpeedState::Decelerated {
            let step = self.params.worker_max_count_per_step;
            let want = if max_ps_util <= 0.0 {
                cur + step
            } else {
                ((self.params.ps_overload / max_ps_util) * cur as f64).ceil() as u32
            };
            match phase {
                Phase::Initial | Phase::Sample => {
                    let speed = Brain::per_worker_speed(stats);
                    if speed <= 0.0 {
                        n = cur + step.min(want.saturating_sub(cur));
                        why += &format!("; no speed yet: {cur} + at most {step} -> {n}");
                    } else if info.total_steps > 0.0 {
                        let t = info.total_steps / speed;
                        n = if t <= INIT_STEP_TIME_S {
                            DEFAULT_INIT_WORKER
                        } else {
                            want.min(WORKER_MAX_INIT_COUNT_PER_STEP)
                        };
                        why += &format!("; estimated {t:.0} s with one worker -> {n} workers");
                    } else {
                        n = want.min(WORKER_MAX_INIT_COUNT_PER_STEP);
                        why += &format!("; total steps unknown -> {n} workers");
                    }
                }
                Phase::Stable if state == SpeedState::Increased => {
                    n = cur + step.min(want.saturating_sub(cur));
                    why += &format!("; stable phase, speed increased: {cur} + at most {step} -> {n}");
                }
                Phase::Stable => why += "; stable phase without a speed increase: unchanged",
            }
        } else {
            why += "; unchanged";
        }
        let mut per_worker: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        for s in tail {
            for w in s.trainers() {
                per_worker.entry(&w.name).or_default().push(w.used.cpu);
            }
        }
        let pick: fn(&[f64]) -> f64 = if recs.len() < INIT_TRAINING_RECORDS {
            |v| v.iter().copied().fold(0.0, f64::max)
        } else {
            mean
        };
        let cpu_core = per_worker.values().map(|v| pick(v)).fold(0.0, f64::max);
        let cpu = if cpu_core > 0.0 {
            (cpu_core + self.params.worker_cpu_margin).ceil()
        } else {
            0.0
        };
        let max_mem = recs
            .iter()
            .flat_map(|s| s.trainers().map(|w| w.used.memory_mib))
            .fold(0.0, f64::max);
        let mem = (max_mem + (max_mem * self.params.worker_memory_margin).min(8.0 * GIB)).ceil();
        let n = n.min(MAX_REPLICA);
        Outcome::with(
            Plan::default().group(NodeType::Worker, GroupResource::new(n, cpu, mem)),
            format!("worker plan ({phase:?}): {why}; CPU {cpu}, memory {mem} MiB"),
        )
    }

    /// Median per-worker speed, for the dashboard.
    pub fn median_speed(stats: &[RuntimeStat]) -> Option<f64> {
        median(&stats.iter().map(|s| s.speed).collect::<Vec<_>>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NodeStat;

    fn node(name: &str, kind: NodeType, used: (f64, f64), config: (f64, f64)) -> NodeStat {
        NodeStat {
            name: name.into(),
            kind,
            used: Resource::new(used.0, used.1),
            config: Resource::new(config.0, config.1),
        }
    }

    /// A record: PS used CPU (each of 8 configured CPU, 10000 MiB), n workers at 2 CPU / 4096 MiB.
    fn rec(ps_used: &[f64], workers: usize, speed: f64) -> RuntimeStat {
        let mut nodes: Vec<NodeStat> = ps_used
            .iter()
            .enumerate()
            .map(|(i, c)| node(&format!("ps-{i}"), NodeType::Ps, (*c, 5000.0), (8.0, 10000.0)))
            .collect();
        nodes
            .extend((0..workers).map(|i| node(&format!("worker-{i}"), NodeType::Worker, (2.0, 4096.0), (4.0, 8192.0))));
        RuntimeStat {
            time_ns: 0,
            global_step: 0,
            speed,
            worker_num: workers as u32,
            nodes,
        }
    }

    fn brain() -> Brain {
        Brain {
            params: Params::default(),
        }
    }

    #[test]
    fn params_defaults_and_configmap() {
        let d = Params::default();
        assert_eq!(
            (d.target_worker_count, d.worker_decrease, d.worker_max_count_per_step),
            (20, 4, 4)
        );
        assert_eq!((d.ps_exhausted, d.ps_overload, d.speed_less_percent), (0.95, 0.8, 0.1));
        let c = Params::from_settings(&settings::Brain {
            configmap: true,
            ..Default::default()
        });
        assert_eq!(
            (c.target_worker_count, c.worker_decrease, c.worker_max_count_per_step),
            (32, 1, 8)
        );
        assert_eq!((c.ps_exhausted, c.ps_overload, c.speed_less_percent), (0.99, 0.85, 0.2));
        assert_eq!(c.singular_comp_count, 3);
    }

    #[test]
    fn r6_1_ps_create() {
        let b = brain();
        let cold = b.ps_create(&[], "ctr", 0).plan;
        assert_eq!(cold.groups[&NodeType::Ps], GroupResource::new(4, 12.0, 16384.0));
        let job = |cpu: Vec<f64>, total: f64, mem: f64, total_mem: f64| HistoryJob {
            scenario: "ctr".into(),
            time_ns: 10 * 86_400 * NS,
            completed: true,
            ps_max_mem_mib: vec![mem; cpu.len()],
            ps_avg_cpu: cpu,
            ps_total_cpu: total,
            ps_total_mem_mib: total_mem,
            ..Default::default()
        };
        let hist = vec![
            job(vec![6.0, 5.0], 10.0, 8000.0, 15000.0),
            job(vec![4.0, 4.0], 8.0, 6000.0, 12000.0),
            job(vec![4.0, 3.0], 12.0, 6000.0, 30000.0),
            job(vec![1.0], 100.0, 1000.0, 1000.0),
        ];
        // cpu = 6 + 4 = 10; major cluster of totals {8,10,12,100} = {10,12} -> 11 x 1.5 = 16.5 -> 2 PS;
        // mem = max(8000, ceil(30000/2)) x 1.2 = 18000.
        let p = b.ps_create(&hist, "ctr", 12 * 86_400 * NS).plan;
        assert_eq!(p.groups[&NodeType::Ps], GroupResource::new(2, 10.0, 18000.0));
        // Other scenario, or older than 7 days: cold start.
        assert_eq!(b.ps_create(&hist, "other", 12 * 86_400 * NS).plan, cold);
        assert_eq!(b.ps_create(&hist, "ctr", 20 * 86_400 * NS).plan, cold);
        // More than 15 PS: 15, and cpu = ceil(total / 15).
        let big = vec![job(vec![1.0], 200.0, 1000.0, 1000.0)];
        let p = b.ps_create(&big, "ctr", 12 * 86_400 * NS).plan;
        assert_eq!(p.groups[&NodeType::Ps].count, 15);
        assert_eq!(p.groups[&NodeType::Ps].cpu, 20.0);
    }

    #[test]
    fn r6_2_worker_create() {
        let b = brain();
        let none = b.worker_create(&[], &JobInfo::default()).plan;
        assert_eq!(none.groups[&NodeType::Worker], GroupResource::new(1, 12.0, 16384.0));
        let hist = vec![HistoryJob {
            completed: true,
            oom: true,
            worker_max_cpu: 14.2,
            worker_max_mem_mib: 20000.0,
            ..Default::default()
        }];
        let p = b.worker_create(&hist, &JobInfo::default()).plan;
        assert_eq!(p.groups[&NodeType::Worker], GroupResource::new(1, 15.0, 30000.0));
        // OOM: max(history x 1.2 as it OOMed, last + 4e9 B).
        let info = JobInfo {
            oom: true,
            last_worker_mem_mib: 30000.0,
            ..Default::default()
        };
        let p = b.worker_create(&hist, &info).plan;
        assert_eq!(p.groups[&NodeType::Worker].memory_mib, (30000.0 + FOUR_E9_MIB).ceil());
        let info = JobInfo {
            oom: true,
            last_worker_mem_mib: 1000.0,
            ..Default::default()
        };
        assert_eq!(
            b.worker_create(&hist, &info).plan.groups[&NodeType::Worker].memory_mib,
            24000.0
        );
    }

    #[test]
    fn d6_history_is_summarized_with_resources_and_oom() {
        let stats = vec![rec(&[2.0, 4.0], 2, 1.0), rec(&[4.0, 6.0], 2, 1.0)];
        let h = HistoryJob::summarize("j", "ctr", 5, true, true, &stats);
        assert_eq!(h.ps_avg_cpu, vec![3.0, 5.0]);
        assert_eq!(h.ps_total_cpu, 8.0);
        assert_eq!(h.ps_total_mem_mib, 10000.0);
        assert_eq!((h.worker_max_cpu, h.worker_max_mem_mib), (2.0, 4096.0));
        assert!(h.oom && h.completed);
    }

    #[test]
    fn r6_3_ps_init_adjust() {
        let b = brain();
        let stats: Vec<RuntimeStat> = (0..3).map(|_| rec(&[4.0, 2.0], 4, 40.0)).collect();
        // Per-worker speed 10 steps/s; 100000 steps -> 10000 s > 1800 -> target 20.
        // psCPU = max(16, ceil(4) + 4) = 16. free = 16 / (4 x 2 / 15) = 30; 2 PS:
        // min(30, 16 / (4 - 2)) = 8 -> target min(20, 32) = 20.
        // #PS = ceil(20 / 4 x 6 / 16) = 2; mem = 5000 x 1.2.
        let info = JobInfo {
            total_steps: 100_000.0,
            ..Default::default()
        };
        let o = b.ps_init_adjust(&stats, &info);
        assert_eq!(
            o.plan.groups[&NodeType::Ps],
            GroupResource::new(2, 16.0, 6000.0),
            "{}",
            o.reason
        );
        // A short job (<= 1800 s) targets 10 workers.
        let info = JobInfo {
            total_steps: 1000.0,
            ..Default::default()
        };
        let o = b.ps_init_adjust(&stats, &info);
        assert!(o.reason.contains("target 10"), "{}", o.reason);
        // recvOps per PS <= 150: ceil(0.08 x ops / #PS) + 4.
        let info = JobInfo {
            total_steps: 100_000.0,
            recv_ops: Some(200.0),
            ..Default::default()
        };
        let o = b.ps_init_adjust(&stats, &info);
        assert_eq!(
            o.plan.groups[&NodeType::Ps].cpu,
            12.0,
            "max(ceil(0.08 x 100) + 4, ceil(4) + 4) = 12"
        );
    }

    #[test]
    fn r6_4_ps_oom() {
        let b = brain();
        // Hot PS: (max - mean) / max > 0.2 -> memory 2 x max.
        let mut s = rec(&[4.0, 4.0], 2, 1.0);
        s.nodes[0].used.memory_mib = 9000.0;
        s.nodes[1].used.memory_mib = 3000.0;
        let p = b.ps_oom(&[s.clone()]).plan;
        assert_eq!(p.groups[&NodeType::Ps], GroupResource::new(2, 8.0, 18000.0));
        // Balanced: double the count.
        s.nodes[1].used.memory_mib = 8500.0;
        assert_eq!(b.ps_oom(&[s]).plan.groups[&NodeType::Ps].count, 4);
        // No runtime data: double the memory (or the count at >= 64 GiB).
        let mut empty = rec(&[0.0, 0.0], 2, 0.0);
        for n in &mut empty.nodes {
            n.used.memory_mib = 0.0;
        }
        assert_eq!(
            b.ps_oom(&[empty.clone()]).plan.groups[&NodeType::Ps].memory_mib,
            20000.0
        );
        for n in empty.nodes.iter_mut().filter(|n| n.kind == NodeType::Ps) {
            n.config.memory_mib = 65536.0;
        }
        assert_eq!(b.ps_oom(&[empty]).plan.groups[&NodeType::Ps].count, 4);
        // The init-adjust stage uses it when the job is OOM.
        let info = JobInfo {
            oom: true,
            ..Default::default()
        };
        assert!(
            b.ps_init_adjust(&[rec(&[4.0, 4.0], 2, 1.0)], &info)
                .reason
                .contains("PS OOM")
        );
    }

    #[test]
    fn r6_5_hot_ps_running() {
        let b = brain();
        // ps-0 at 7/8 = 0.875 > 0.8 over the last 3; 2 workers: coeff 16, 7 x 16 > 32 -> coeff 32/7.
        let stats: Vec<RuntimeStat> = (0..3).map(|_| rec(&[7.0, 1.0], 2, 1.0)).collect();
        let o = b.hot_ps(&stats);
        assert_eq!(o.plan.nodes["ps-0"], Resource::new(32.0, 0.0), "{}", o.reason);
        assert!(
            !o.plan.nodes.contains_key("ps-1"),
            "ceil(1 x 32/7) = 5 is not above its 8 CPU"
        );
    }

    #[test]
    fn r6_5_memory_hot() {
        let b = brain();
        let mut stats: Vec<RuntimeStat> = (0..3).map(|_| rec(&[1.0, 1.0], 2, 1.0)).collect();
        for s in &mut stats {
            s.nodes[1].used.memory_mib = 9500.0;
        }
        let o = b.hot_ps(&stats);
        assert_eq!(o.plan.nodes["ps-1"].memory_mib, 10000.0 + 8192.0, "{}", o.reason);
        assert!(!o.plan.nodes.contains_key("ps-0"));
        stats[0].nodes[1].used.memory_mib = 100.0;
        assert!(
            b.hot_ps(&stats).plan.is_empty(),
            "hot in each of the last 3 records only"
        );
    }

    #[test]
    fn r6_6_ps_util() {
        let b = brain();
        // A PS at >= 25.6 cores enables it; ps-1 uses 2 of 8 (< 0.4): ceil(2) + 4 = 6.
        let mut stats: Vec<RuntimeStat> = (0..3).map(|_| rec(&[26.0, 2.0], 4, 1.0)).collect();
        for s in &mut stats {
            s.nodes[0].config.cpu = 32.0;
        }
        let o = b.ps_util(&stats, &JobInfo::default());
        assert_eq!(o.plan.nodes["ps-1"], Resource::new(6.0, 6000.0));
        assert!(!o.plan.nodes.contains_key("ps-0"));
        assert!(
            b.ps_util(&stats[..2], &JobInfo::default()).plan.is_empty(),
            "needs 3 records"
        );
        let quiet: Vec<RuntimeStat> = (0..3).map(|_| rec(&[2.0, 2.0], 4, 1.0)).collect();
        assert!(b.ps_util(&quiet, &JobInfo::default()).plan.is_empty(), "not enabled");
        let mut short = stats.clone();
        short[2].global_step = 99_000;
        short[2].speed = 10.0;
        let info = JobInfo {
            total_steps: 100_000.0,
            ..Default::default()
        };
        assert!(b.ps_util(&short, &info).plan.is_empty(), "less than 3600 s left");
    }

    #[test]
    fn r6_7_worker_exhausted_ps_decreases() {
        let b = brain();
        let stats: Vec<RuntimeStat> = (0..4).map(|_| rec(&[7.8, 1.0], 10, 5.0)).collect();
        let o = b.worker(&stats, &JobInfo::default(), Phase::Stable);
        assert_eq!(o.plan.groups[&NodeType::Worker].count, 6, "{}", o.reason);
        // Configmap: minus 1 only if n > 1, exhausted above 0.99.
        let cm = Brain {
            params: Params::from_settings(&settings::Brain {
                configmap: true,
                ..Default::default()
            }),
        };
        let stats: Vec<RuntimeStat> = (0..4).map(|_| rec(&[7.96, 1.0], 10, 5.0)).collect();
        assert_eq!(
            cm.worker(&stats, &JobInfo::default(), Phase::Stable).plan.groups[&NodeType::Worker].count,
            9
        );
        // 7.9 / 8 = 0.9875: not exhausted for the configmap, but above its 0.85 overload: unchanged.
        let stats: Vec<RuntimeStat> = (0..4).map(|_| rec(&[7.9, 1.0], 10, 5.0)).collect();
        assert_eq!(
            cm.worker(&stats, &JobInfo::default(), Phase::Stable).plan.groups[&NodeType::Worker].count,
            10
        );
    }

    #[test]
    fn r6_7_worker_idle_ps_grows() {
        let b = brain();
        // PS at 2/8 = 0.25 < 0.8: want ceil(0.8/0.25 x 4) = 13.
        let stats: Vec<RuntimeStat> = (0..4).map(|_| rec(&[2.0, 2.0], 4, 8.0)).collect();
        // Initial phase: 2 steps/s per worker; 1000 steps = 500 s <= 1800 -> 10 workers.
        let info = JobInfo {
            total_steps: 1000.0,
            ..Default::default()
        };
        assert_eq!(
            b.worker(&stats, &info, Phase::Initial).plan.groups[&NodeType::Worker].count,
            10
        );
        // Long job: min(32, 13).
        let info = JobInfo {
            total_steps: 1e9,
            ..Default::default()
        };
        let o = b.worker(&stats, &info, Phase::Sample);
        assert_eq!(o.plan.groups[&NodeType::Worker].count, 13);
        // CPU: max of the last 3 records (< 6 records) + 1 margin = 3; memory + 20%.
        assert_eq!(o.plan.groups[&NodeType::Worker].cpu, 3.0);
        assert_eq!(o.plan.groups[&NodeType::Worker].memory_mib, (4096.0f64 * 1.2).ceil());
        // Stable phase without a speed change in the records: "increased"
        // (no earlier worker count), so + at most 4.
        assert_eq!(
            b.worker(&stats, &info, Phase::Stable).plan.groups[&NodeType::Worker].count,
            8
        );
    }

    fn era(workers: usize, speed: f64, k: usize) -> Vec<RuntimeStat> {
        (0..k).map(|_| rec(&[2.0, 2.0], workers, speed)).collect()
    }

    #[test]
    fn r6_7_speed_state_and_d8_less_percent() {
        let b = brain();
        let recs = [era(4, 10.0, 5), era(6, 8.5, 5)].concat();
        let refs: Vec<&RuntimeStat> = recs.iter().collect();
        // (10 - 8.5) / 10 = 0.15 >= 0.1: decelerated.
        assert_eq!(b.speed_state(&refs), SpeedState::Decelerated);
        // D8: the configured less-percent is honoured (upstream always used 0.1).
        let strict = Brain {
            params: Params {
                speed_less_percent: 0.2,
                ..Params::default()
            },
        };
        assert_eq!(strict.speed_state(&refs), SpeedState::Stable);
        let up = [era(4, 10.0, 5), era(6, 12.0, 5)].concat();
        assert_eq!(b.speed_state(&up.iter().collect::<Vec<_>>()), SpeedState::Increased);
        let short = [era(4, 10.0, 5), era(6, 12.0, 3)].concat();
        assert_eq!(
            b.speed_state(&short.iter().collect::<Vec<_>>()),
            SpeedState::Stable,
            "not enough records after"
        );
        // Decelerated: the worker count stays.
        let o = b.worker(&recs, &JobInfo::default(), Phase::Stable);
        assert_eq!(o.plan.groups[&NodeType::Worker].count, 6, "{}", o.reason);
        // Stable phase, speed increased: + at most 4.
        let o = b.worker(&up, &JobInfo::default(), Phase::Stable);
        assert_eq!(o.plan.groups[&NodeType::Worker].count, 10, "{}", o.reason);
    }

    #[test]
    fn r6_7_singular_spikes_and_ps_set() {
        let b = brain();
        let mut recs = era(4, 10.0, 7);
        recs[3] = rec(&[7.5, 2.0], 4, 10.0); // 0.94 > 0.8 and far above every neighbour within 2
        let kept = b.preprocess(&recs);
        assert_eq!(kept.len(), 6, "the spike is dropped");
        let mut other = rec(&[2.0], 4, 10.0);
        other.nodes[0].name = "ps-7".into();
        let mut recs = era(4, 10.0, 3);
        recs.insert(0, other);
        assert_eq!(b.preprocess(&recs).len(), 3, "records of another PS set are dropped");
    }

    #[test]
    fn major_cluster_mean() {
        assert_eq!(major_mean(&[1.0, 2.0, 3.0, 100.0]), 2.5);
        assert_eq!(major_mean(&[5.0]), 5.0);
        assert_eq!(major_mean(&[]), 0.0);
    }
}
