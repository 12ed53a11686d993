//! The reference's Brain algorithms (section 6) and the fixed defects, one
//! test each, on hand-made runtime records.

use super::*;
use crate::model::{GroupResource, NS, NodeStat, Resource};

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
    nodes.extend((0..workers).map(|i| node(&format!("worker-{i}"), NodeType::Worker, (2.0, 4096.0), (4.0, 8192.0))));
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
