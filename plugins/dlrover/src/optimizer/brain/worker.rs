//! The Brain's worker algorithms: the first plan's workers from finished
//! jobs, and growing or shrinking them as training speed answers (reference
//! R6.2, R6.7).

use std::collections::BTreeMap;

use super::{
    Brain, DEFAULT_INIT_WORKER, FOUR_E9_MIB, GIB, HistoryJob, INIT_STEP_TIME_S, INIT_TRAINING_RECORDS, JobInfo,
    MAX_REPLICA, N_RECORD_TO_AVG, Phase, SINGULAR_LESS_PERCENT, SPEED_RECORDS, SpeedState,
    WORKER_MAX_INIT_COUNT_PER_STEP, max_util, ps_requested,
};
use crate::model::{GroupResource, NodeType, Outcome, Plan, RuntimeStat, mean, median};

impl Brain {
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
