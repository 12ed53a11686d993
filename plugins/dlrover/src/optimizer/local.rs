//! DLRover's single-job PS optimizer (`master/resource/local_optimizer.py`,
//! reference section 4). Memory in MiB throughout: the limits are MiB too,
//! so the CREATE plan never meets the byte/MB mix of defect D1.

use std::collections::BTreeMap;

use crate::model::{GroupResource, NodeStat, NodeType, Outcome, Plan, Resource, RuntimeStat, mean, round1};

/// OptimizerParams.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    pub ps_cpu_overload: f64,
    pub ps_cpu_hot: f64,
    pub ps_mem_margin: f64,
    pub worker_mem_margin: f64,
    pub oom_factor: f64,
    pub node_max_cpu: f64,
    pub min_worker_speed_ratio: f64,
    pub max_ps_cpu_util: f64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            ps_cpu_overload: 0.9,
            ps_cpu_hot: 0.9,
            ps_mem_margin: 0.2,
            worker_mem_margin: 0.5,
            oom_factor: 2.0,
            node_max_cpu: 32.0,
            min_worker_speed_ratio: 0.2,
            max_ps_cpu_util: 0.95,
        }
    }
}

/// Samples the rules use.
const LATEST_SAMPLES: usize = 5;
const MAX_INITIAL_CPU: f64 = 16.0;
const MAX_INITIAL_MEMORY: f64 = 8192.0;
const MIN_NODE_CPU: f64 = 1.0;
const MIN_NODE_MEMORY: f64 = 1024.0;
const MIN_NODE_NUM: f64 = 5.0;

#[derive(Debug, Clone, Copy)]
pub struct Local {
    /// The job's limits: cores and MiB.
    pub limits: Resource,
    pub params: Params,
}

/// The last <= 5 samples, newest first, keeping only those with the latest
/// PS set (for PS) and the latest worker count (for workers).
pub struct Samples<'a> {
    pub ps: Vec<Vec<&'a NodeStat>>,
    pub workers: Vec<Vec<&'a NodeStat>>,
}

pub fn extract(stats: &[RuntimeStat]) -> Samples<'_> {
    let mut out = Samples {
        ps: Vec::new(),
        workers: Vec::new(),
    };
    let Some(latest) = stats.last() else {
        return out;
    };
    let latest_ps = latest.ps_names();
    let latest_workers = latest.trainers().count();
    for s in stats.iter().rev().take(LATEST_SAMPLES) {
        if s.ps_names() == latest_ps {
            out.ps.push(s.of(NodeType::Ps).collect());
        }
        if s.trainers().count() == latest_workers {
            out.workers.push(s.trainers().collect());
        }
    }
    out
}

impl Local {
    /// R4.1 CREATE: 1 PS + 1 worker of `min(ceil(limit/5), 16 CPU / 8192 MiB)`.
    pub fn create(&self) -> Outcome {
        let cpu = (self.limits.cpu / MIN_NODE_NUM).ceil().min(MAX_INITIAL_CPU);
        let mem = (self.limits.memory_mib / MIN_NODE_NUM).ceil().min(MAX_INITIAL_MEMORY);
        let g = GroupResource::new(1, cpu, mem);
        Outcome::with(
            Plan::default().group(NodeType::Worker, g).group(NodeType::Ps, g),
            format!(
                "initial plan: 1 PS + 1 worker of min(ceil(limit/5), 16 CPU / 8192 MiB) = {cpu} CPU, {mem} MiB \
                 (limits {} CPU, {} MiB)",
                self.limits.cpu, self.limits.memory_mib
            ),
        )
    }

    /// (PS cpu per worker, mean worker cpu, max worker memory) from the samples.
    fn process_requirement(&self, stats: &[RuntimeStat], s: &Samples) -> Option<(f64, f64, f64)> {
        let totals: Vec<f64> =
            s.ps.iter()
                .map(|nodes| nodes.iter().map(|n| n.used.cpu).sum())
                .collect();
        let worker_cpus: Vec<f64> = s.workers.iter().flatten().map(|n| n.used.cpu).collect();
        let worker_mem = s
            .workers
            .iter()
            .flatten()
            .map(|n| n.used.memory_mib)
            .fold(0.0, f64::max);
        let workers = stats.last()?.trainers().count();
        if totals.is_empty() || worker_cpus.is_empty() || workers == 0 {
            return None;
        }
        Some((mean(&totals) / workers as f64, mean(&worker_cpus), worker_mem))
    }

    /// R4.2 PS_INITIAL: PS count from how much CPU each worker costs the PS.
    pub fn ps_initial(&self, stats: &[RuntimeStat]) -> Outcome {
        let s = extract(stats);
        let Some(ps0) = s.ps.first().filter(|p| !p.is_empty()) else {
            return Outcome::none("no PS workload samples yet");
        };
        let max_mem = ps0.iter().map(|n| n.used.memory_mib).fold(0.0, f64::max);
        let ps_cpu = ps0.iter().map(|n| n.config.cpu).fold(0.0, f64::max);
        let Some((ps_per_worker, w, _)) = self.process_requirement(stats, &s) else {
            return Outcome::none("no worker workload samples yet");
        };
        if ps_cpu <= 0.0 || ps_per_worker + w <= 0.0 {
            return Outcome::none("PS CPU configuration or usage unknown");
        }
        let max_workers = self.limits.cpu / (ps_per_worker + w);
        let total_ps_cpu = self.limits.cpu - max_workers * w;
        let n = (total_ps_cpu / ps_cpu).ceil().max(1.0) as u32;
        let mem = (max_mem * (1.0 + self.params.ps_mem_margin)).floor();
        Outcome::with(
            Plan::default().group(NodeType::Ps, GroupResource::new(n, ps_cpu, mem)),
            format!(
                "PS initial: each worker costs the PS {ps_per_worker:.2} CPU and uses {w:.2} CPU itself; \
                 {:.1} CPU limit fits {max_workers:.1} workers, leaving {total_ps_cpu:.1} CPU = {n} PS x {ps_cpu} CPU; \
                 memory = max PS used {max_mem:.0} MiB x 1.2",
                self.limits.cpu
            ),
        )
    }

    /// R4.4: how much a worker added at the last change of node count adds
    /// to the speed, relative to the workers before it.
    pub fn speed_ratio(stats: &[RuntimeStat]) -> f64 {
        let Some(last) = stats.last() else { return 1.0 };
        let n = stats.len();
        let mut post = n - 1;
        while post > 0 && stats[post - 1].nodes.len() == last.nodes.len() {
            post -= 1;
        }
        if post == 0 {
            return 1.0;
        }
        let pre_last = &stats[post - 1];
        let mut pre = post - 1;
        while pre > 0 && stats[pre - 1].nodes.len() == pre_last.nodes.len() {
            pre -= 1;
        }
        let era = |a: usize, b: usize| {
            let speed = mean(&stats[a..b].iter().map(|s| s.speed).collect::<Vec<_>>());
            (stats[a].of(NodeType::Worker).count() as f64, speed)
        };
        let (post_n, post_speed) = era(post, n);
        let (pre_n, pre_speed) = era(pre, post);
        if pre_n == 0.0 || pre_speed == 0.0 || pre_n == post_n {
            return 1.0;
        }
        ((post_speed - pre_speed) / (post_n - pre_n)) / (pre_speed / pre_n)
    }

    /// R4.3: the worker plan.
    pub fn worker(&self, stats: &[RuntimeStat]) -> Outcome {
        let s = extract(stats);
        let max_util =
            s.ps.iter()
                .flatten()
                .filter(|n| n.config.cpu > 0.0)
                .map(|n| n.used.cpu / n.config.cpu)
                .fold(0.0, f64::max);
        if max_util > self.params.max_ps_cpu_util {
            return Outcome::none(format!(
                "no worker plan: max PS CPU utilization {max_util:.2} > {}",
                self.params.max_ps_cpu_util
            ));
        }
        let ratio = Self::speed_ratio(stats);
        if ratio < self.params.min_worker_speed_ratio {
            return Outcome::none(format!(
                "no worker plan: the last workers added {ratio:.2} of a worker's speed (< {})",
                self.params.min_worker_speed_ratio
            ));
        }
        if max_util == 0.0 || s.workers.is_empty() {
            return Outcome::none("no worker plan: no PS CPU utilization yet");
        }
        let cur = s.workers[0].len() as f64;
        let factor = self.params.ps_cpu_overload / max_util;
        let mut n = cur;
        if factor > 1.0 {
            n = (cur * factor).floor();
        }
        let cpus: Vec<f64> = s.workers.iter().flatten().map(|n| n.used.cpu).collect();
        let cpu = mean(&cpus).max(MIN_NODE_CPU);
        let max_mem = s
            .workers
            .iter()
            .flatten()
            .map(|n| n.used.memory_mib)
            .fold(0.0, f64::max);
        let mem = ((1.0 + self.params.worker_mem_margin) * max_mem)
            .floor()
            .max(MIN_NODE_MEMORY);
        let last = stats.last().expect("samples exist");
        let (ps_cpu, ps_mem) = last
            .of(NodeType::Ps)
            .fold((0.0, 0.0), |(c, m), n| (c + n.config.cpu, m + n.config.memory_mib));
        let by_cpu = (self.limits.cpu - ps_cpu) / cpu;
        let by_mem = (self.limits.memory_mib - ps_mem) / mem;
        let count = n.min(by_cpu).min(by_mem).max(0.0).floor() as u32;
        Outcome::with(
            Plan::default().group(NodeType::Worker, GroupResource::new(count, cpu, mem)),
            format!(
                "worker plan: max PS CPU utilization {max_util:.2}, so {cur} workers x {factor:.2} -> {n}; \
                 the limits left after the PS fit {by_cpu:.1} by CPU and {by_mem:.1} by memory -> {count} workers \
                 of mean used {cpu:.2} CPU and 1.5 x max used memory = {mem} MiB (speed ratio {ratio:.2})"
            ),
        )
    }

    /// R4.5: hot PS (mean used / configured >= 0.9) migrate to more CPU.
    pub fn hot_ps(&self, stats: &[RuntimeStat]) -> Outcome {
        let s = extract(stats);
        let mut used: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        let mut config: BTreeMap<&str, f64> = BTreeMap::new();
        for n in s.ps.iter().flatten() {
            used.entry(&n.name).or_default().push(n.used.cpu);
            config.insert(&n.name, n.config.cpu);
        }
        let avg: BTreeMap<&str, f64> = used.iter().map(|(k, v)| (*k, mean(v))).collect();
        let hot: Vec<&str> = config
            .iter()
            .filter(|(k, c)| **c > 0.0 && avg[*k] / **c >= self.params.ps_cpu_hot)
            .map(|(k, _)| *k)
            .collect();
        if hot.is_empty() {
            return Outcome::none("no hot PS");
        }
        let Some((ps_per_worker, w, _)) = self.process_requirement(stats, &s) else {
            return Outcome::none("no worker samples to size the hot PS");
        };
        let cur = s.workers.first().map_or(0, Vec::len).max(1) as f64;
        let max_workers = (self.limits.cpu / (ps_per_worker + w)).floor();
        let mut tune = (max_workers / cur).max(1.0);
        for h in &hot {
            tune = tune.min(self.params.node_max_cpu / avg[h]);
        }
        let mut plan = Plan::default();
        let mut moved = Vec::new();
        for n in s.ps.first().into_iter().flatten() {
            let opt = round1(avg[n.name.as_str()] * tune);
            if n.config.cpu >= opt {
                continue;
            }
            plan = plan.node(&n.name, Resource::new(opt, 0.0));
            moved.push(format!("{} {} -> {opt} CPU", n.name, n.config.cpu));
        }
        Outcome::with(
            plan,
            format!(
                "hot PS {} (mean used / configured CPU >= {}): tune factor {tune:.2}; {}",
                hot.join(", "),
                self.params.ps_cpu_hot,
                if moved.is_empty() {
                    "nothing to migrate".to_string()
                } else {
                    moved.join(", ")
                }
            ),
        )
    }

    /// The running plan: hot PS first, else workers.
    pub fn running(&self, stats: &[RuntimeStat]) -> Outcome {
        let hot = self.hot_ps(stats);
        if !hot.plan.is_empty() {
            return hot;
        }
        self.worker(stats)
    }

    /// R4.6: the local OOM plan for one node: twice its configured memory
    /// (as a node resource, so it applies at any stage: defect D2).
    pub fn oom(&self, name: &str, config: Resource) -> Outcome {
        let mem = self.params.oom_factor * config.memory_mib;
        Outcome::with(
            Plan::default().node(name, Resource::new(config.cpu, mem)),
            format!("OOM: {name} memory {} -> {mem} MiB", config.memory_mib),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn node(name: &str, kind: NodeType, used: (f64, f64), config: (f64, f64)) -> NodeStat {
        NodeStat {
            name: name.into(),
            kind,
            used: Resource::new(used.0, used.1),
            config: Resource::new(config.0, config.1),
        }
    }

    fn stat(speed: f64, nodes: Vec<NodeStat>) -> RuntimeStat {
        RuntimeStat {
            time_ns: 0,
            global_step: 0,
            speed,
            worker_num: nodes.iter().filter(|n| n.kind.trains()).count() as u32,
            nodes,
        }
    }

    fn local(cpu: f64, mem: f64) -> Local {
        Local {
            limits: Resource::new(cpu, mem),
            params: Params::default(),
        }
    }

    fn workers(n: usize, used: (f64, f64)) -> Vec<NodeStat> {
        (0..n)
            .map(|i| node(&format!("worker-{i}"), NodeType::Worker, used, (0.0, 0.0)))
            .collect()
    }

    #[test]
    fn r4_1_create() {
        // [test] limits (10 CPU, 8192 MB) -> worker 1 x (2, 1639), PS 1 x (2, 1639).
        let p = local(10.0, 8192.0).create().plan;
        assert_eq!(p.groups[&NodeType::Worker], GroupResource::new(1, 2.0, 1639.0));
        assert_eq!(p.groups[&NodeType::Ps], GroupResource::new(1, 2.0, 1639.0));
        // Caps: 16 CPU, 8192 MiB.
        let p = local(1000.0, 1_000_000.0).create().plan;
        assert_eq!(p.groups[&NodeType::Ps], GroupResource::new(1, 16.0, 8192.0));
    }

    #[test]
    fn d1_create_with_production_limits_is_not_zero_memory() {
        // Upstream: limits in bytes, the 8192 cap in MB -> a 0 MB plan with 16 CPU.
        // Here the limits are MiB (a quantity string is converted when read).
        let limits = crate::settings::Settings::parse(r#"{"limits": {"cpu": 100, "memory": "100Gi"}}"#)
            .unwrap()
            .limits;
        let p = local(limits.cpu, limits.memory.0).create().plan;
        assert_eq!(p.groups[&NodeType::Worker], GroupResource::new(1, 16.0, 8192.0));
        let d = crate::settings::Settings::default().limits;
        assert_eq!(
            local(d.cpu, d.memory.0).create().plan.groups[&NodeType::Worker].memory_mib,
            8192.0,
            "the default limits too"
        );
    }

    fn ps_initial_stats() -> Vec<RuntimeStat> {
        let mut nodes = vec![
            node("ps-0", NodeType::Ps, (1.4, 2048.0), (4.0, 4096.0)),
            node("ps-1", NodeType::Ps, (1.0, 1024.0), (4.0, 4096.0)),
        ];
        nodes.extend(workers(3, (1.0, 2048.0)));
        vec![stat(10.0, nodes)]
    }

    #[test]
    fn r4_2_ps_initial() {
        // [test] PS used (1.4, 1.0) of 4 CPU each, 3 workers at 1 CPU, limit 10 -> 2 PS x 4 CPU x 2457 MB.
        let p = local(10.0, 102_400.0).ps_initial(&ps_initial_stats()).plan;
        assert_eq!(p.groups[&NodeType::Ps], GroupResource::new(2, 4.0, 2457.0));
        // With limit 100 -> 12 PS.
        let p = local(100.0, 102_400.0).ps_initial(&ps_initial_stats()).plan;
        assert_eq!(p.groups[&NodeType::Ps].count, 12);
        assert!(local(10.0, 1.0).ps_initial(&[]).plan.is_empty());
    }

    fn worker_stats(ps_used: f64, n: usize) -> Vec<RuntimeStat> {
        let mut nodes = vec![
            node("ps-0", NodeType::Ps, (ps_used, 1000.0), (4.0, 4096.0)),
            node("ps-1", NodeType::Ps, (ps_used, 1000.0), (4.0, 4096.0)),
        ];
        nodes.extend(workers(n, (1.0, 2048.0)));
        vec![stat(10.0, nodes)]
    }

    #[test]
    fn r4_3_worker_plan() {
        // [test] PS util 0.25, 3 workers at 1 CPU / 2048 MB, limits (100, 102400),
        // PS config 2 x (4, 4096) -> 10 workers x (1 CPU, 3072 MB).
        let o = local(100.0, 102_400.0).worker(&worker_stats(1.0, 3));
        assert_eq!(o.plan.groups[&NodeType::Worker], GroupResource::new(10, 1.0, 3072.0));
        assert!(o.reason.contains("0.25"), "{}", o.reason);
        // PS util > 0.95: no plan.
        let o = local(100.0, 102_400.0).worker(&worker_stats(3.9, 3));
        assert!(o.plan.is_empty());
        assert!(o.reason.contains("0.97"), "{}", o.reason);
        // Limits bound the count: 20 CPU - 8 for the PS = 12 workers at most.
        let o = local(20.0, 102_400.0).worker(&worker_stats(0.4, 3));
        assert_eq!(o.plan.groups[&NodeType::Worker].count, 12);
    }

    #[test]
    fn r4_4_speed_ratio() {
        // [test] 3 workers @12 steps/s -> 4 workers @15 steps/s gives 0.75.
        let ps = || node("ps-0", NodeType::Ps, (1.0, 1.0), (4.0, 1.0));
        let era = |n: usize, speed: f64| {
            let mut v = vec![ps()];
            v.extend(workers(n, (1.0, 1.0)));
            stat(speed, v)
        };
        let stats = vec![era(3, 12.0), era(3, 12.0), era(4, 15.0), era(4, 15.0)];
        assert_eq!(Local::speed_ratio(&stats), 0.75);
        assert_eq!(Local::speed_ratio(&stats[..2]), 1.0, "no earlier era");
        assert_eq!(Local::speed_ratio(&[era(3, 0.0), era(4, 15.0)]), 1.0, "pre speed 0");
        // A ratio below 0.2 stops the worker plan.
        let mut stats = vec![era(3, 12.0), era(6, 12.5)];
        for s in &mut stats {
            s.nodes[0].used.cpu = 1.0;
        }
        let o = local(100.0, 102_400.0).worker(&stats);
        assert!(o.plan.is_empty() && o.reason.contains("speed"), "{}", o.reason);
    }

    #[test]
    fn r4_5_hot_ps() {
        // [test] ps-0 3.6/4, ps-1 0.3/4, 3 workers, limit 100 -> only ps-0 changes, to 32 CPU.
        let mut nodes = vec![
            node("ps-0", NodeType::Ps, (3.6, 1000.0), (4.0, 4096.0)),
            node("ps-1", NodeType::Ps, (0.3, 1000.0), (4.0, 4096.0)),
        ];
        nodes.extend(workers(3, (1.0, 2048.0)));
        let o = local(100.0, 102_400.0).hot_ps(&[stat(10.0, nodes.clone())]);
        assert_eq!(o.plan.nodes.len(), 1);
        assert_eq!(o.plan.nodes["ps-0"], Resource::new(32.0, 0.0), "memory unchanged (0)");
        assert!(o.plan.groups.is_empty());
        // The running plan prefers it to a worker plan.
        assert_eq!(local(100.0, 102_400.0).running(&[stat(10.0, nodes)]), o);
        let cool = worker_stats(1.0, 3);
        assert!(local(100.0, 102_400.0).hot_ps(&cool).plan.is_empty());
        assert!(
            !local(100.0, 102_400.0).running(&cool).plan.groups.is_empty(),
            "then workers"
        );
    }

    #[test]
    fn r4_6_oom() {
        // [test] 4096 -> 8192.
        let o = local(1.0, 1.0).oom("worker-1", Resource::new(2.0, 4096.0));
        assert_eq!(o.plan.nodes["worker-1"], Resource::new(2.0, 8192.0));
    }

    #[test]
    fn samples_keep_the_latest_ps_set_and_worker_count() {
        let a = stat(
            1.0,
            [
                vec![node("ps-0", NodeType::Ps, (1.0, 1.0), (4.0, 1.0))],
                workers(2, (1.0, 1.0)),
            ]
            .concat(),
        );
        let b = stat(
            1.0,
            [
                vec![node("ps-9", NodeType::Ps, (1.0, 1.0), (4.0, 1.0))],
                workers(3, (1.0, 1.0)),
            ]
            .concat(),
        );
        let stats: Vec<RuntimeStat> = vec![b.clone(), a.clone(), b.clone(), a.clone(), b.clone(), a, b];
        let s = extract(&stats);
        assert_eq!(s.ps.len(), 3, "of the last 5, those with the latest PS set");
        assert_eq!(s.workers.len(), 3, "of the last 5, those with the latest worker count");
        assert_eq!(s.ps[0][0].name, "ps-9");
    }
}
