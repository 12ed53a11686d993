//! The Brain's parameter-server algorithms: the first plan's PS from
//! finished jobs, the initial adjustment, out-of-memory PS, hot PS and
//! PS utilisation (reference R6.1, R6.3 to R6.6).

use std::collections::BTreeMap;

use super::{
    Brain, DEFAULT_INIT_WORKER, GIB, HistoryJob, INIT_STEP_TIME_S, JobInfo, MAX_NODE_CPU, MAX_PS, N_RECORD_TO_AVG,
    major_mean, max_util, ps_requested,
};
use crate::model::{GroupResource, NS, NodeType, Outcome, Plan, Resource, RuntimeStat, mean};

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
