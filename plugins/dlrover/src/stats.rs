//! Collection (reference sections 1-2): what a node uses, from the host's
//! own samples or from another sonde's exported system metrics (gateway
//! mode), and the training speed from global-step reports.
//!
//! Units: CPU is cores in use (the sum of per-core busy shares, each
//! 1 − idle − iowait of that core's `system.cpu.utilization` modes by the
//! SDK's `BusyShare`; DLRover's `cpu`), memory is MiB used (`system.memory.usage{state=used}`), GPU memory
//! MiB and GPU utilization a ratio 0..1.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use sonde_plugin_sdk::types::{Attribute, SeriesInfo, Value};
use sonde_plugin_sdk::{BusyShare, CpuSeries};

use crate::model::{NS, secs};

const MIB: f64 = 1024.0 * 1024.0;

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct GpuStat {
    pub index: u32,
    pub id: String,
    pub total_mib: f64,
    pub used_mib: f64,
    /// 0..1
    pub utilization: f64,
    /// Share of time the SMs had work (GPM, `sonde.gpu.sm.active`), where the GPU has GPM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_active: Option<f64>,
}

/// One node's resources at one tick (DLRover's ResourceStats).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ResourceSample {
    pub time_ns: u64,
    /// Cores in use, rounded to 0.01; `None` when unknown.
    pub cpu: Option<f64>,
    pub memory_mib: Option<f64>,
    pub gpus: Vec<GpuStat>,
    /// The machine: logical CPUs and total memory, when the series show them.
    pub cpu_count: Option<u32>,
    pub memory_limit_mib: Option<f64>,
}

/// What a series is, for the resource sample.
#[derive(Debug, Clone, PartialEq)]
pub enum Role {
    /// One mode of all CPUs (`cpu` None) or of one core.
    Cpu(CpuSeries),
    MemoryUsed,
    MemoryLimit,
    GpuUtil(String),
    GpuMemUsed(String),
    GpuMemLimit(String),
    GpuSmActive(String),
}

fn attr<'a>(attrs: &'a [Attribute], key: &str) -> Option<&'a Value> {
    attrs.iter().find(|a| a.key == key).map(|a| &a.value)
}

fn attr_text(attrs: &[Attribute], key: &str) -> Option<String> {
    attr(attrs, key).map(|v| match v {
        Value::Str(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Boolean(b) => b.to_string(),
    })
}

/// The role of a host series or a received point series; `None` for others.
pub fn role(info: &SeriesInfo) -> Option<Role> {
    let a = &info.attributes;
    let gpu = || attr_text(a, "hw.id").unwrap_or_default();
    if let Some(cpu) = CpuSeries::of(info) {
        return Some(Role::Cpu(cpu));
    }
    match info.metric.as_str() {
        "system.memory.usage" if attr_text(a, "system.memory.state").as_deref() == Some("used") => {
            Some(Role::MemoryUsed)
        }
        "system.memory.limit" => Some(Role::MemoryLimit),
        "hw.gpu.utilization" if attr_text(a, "hw.gpu.task").is_none_or(|t| t == "general") => {
            Some(Role::GpuUtil(gpu()))
        }
        "hw.gpu.memory.usage" => Some(Role::GpuMemUsed(gpu())),
        "hw.gpu.memory.limit" => Some(Role::GpuMemLimit(gpu())),
        "sonde.gpu.sm.active" => Some(Role::GpuSmActive(gpu())),
        _ => None,
    }
}

#[derive(Default)]
struct Tick {
    /// By CPU (`None`: all of them), the busy share from its modes.
    cpu: BTreeMap<Option<i64>, BusyShare>,
    mem_used: Option<f64>,
    mem_limit: Option<f64>,
    gpus: BTreeMap<String, [Option<f64>; 4]>,
}

/// Builds per-tick resource samples from (role, time, value) readings of
/// one node. `cpu_count` is used when no per-core series are present.
#[derive(Default)]
pub struct SampleBuilder {
    ticks: BTreeMap<u64, Tick>,
}

impl SampleBuilder {
    pub fn add(&mut self, role: &Role, time: u64, value: f64) {
        if value.is_nan() {
            return;
        }
        let t = self.ticks.entry(time).or_default();
        match role {
            Role::Cpu(c) => t.cpu.entry(c.cpu).or_default().add(c.mode, value),
            Role::MemoryUsed => t.mem_used = Some(value),
            Role::MemoryLimit => t.mem_limit = Some(value),
            Role::GpuUtil(id) => t.gpus.entry(id.clone()).or_default()[0] = Some(value),
            Role::GpuMemUsed(id) => t.gpus.entry(id.clone()).or_default()[1] = Some(value),
            Role::GpuMemLimit(id) => t.gpus.entry(id.clone()).or_default()[2] = Some(value),
            Role::GpuSmActive(id) => t.gpus.entry(id.clone()).or_default()[3] = Some(value),
        }
    }

    pub fn finish(self, cpu_count: Option<u32>) -> Vec<ResourceSample> {
        self.ticks
            .into_iter()
            .map(|(time, t)| {
                let (mut core_sum, mut cores, mut total) = (0.0, 0u32, None);
                for (cpu, share) in &t.cpu {
                    match (cpu, share.get()) {
                        (Some(_), Some(busy)) => {
                            core_sum += busy;
                            cores += 1;
                        }
                        (None, busy) => total = busy,
                        (Some(_), None) => {}
                    }
                }
                let (cpu, count) = if cores > 0 {
                    (Some(core_sum), Some(cores))
                } else {
                    (total.zip(cpu_count).map(|(u, n)| u * n as f64), cpu_count)
                };
                ResourceSample {
                    time_ns: time,
                    cpu: cpu.map(|c| (c * 100.0).round() / 100.0),
                    memory_mib: t.mem_used.map(|b| b / MIB),
                    gpus: t
                        .gpus
                        .into_iter()
                        .enumerate()
                        .map(|(i, (id, [u, used, limit, sm]))| GpuStat {
                            index: i as u32,
                            id,
                            total_mib: limit.unwrap_or(0.0) / MIB,
                            used_mib: used.unwrap_or(0.0) / MIB,
                            // NaN: no new reading this tick (NVML's own samples
                            // come every 1/6 s to 1 s); `Usage::add` keeps the last
                            utilization: u.unwrap_or(f64::NAN),
                            sm_active: sm,
                        })
                        .collect(),
                    cpu_count: count,
                    memory_limit_mib: t.mem_limit.map(|b| b / MIB),
                }
            })
            .collect()
    }
}

/// Resource samples of one node over a stats interval: the latest, and the
/// mean of the interval for the runtime-statistics record.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Usage {
    pub latest: Option<ResourceSample>,
    #[serde(skip)]
    cpu_sum: f64,
    #[serde(skip)]
    cpu_n: u32,
    #[serde(skip)]
    mem_sum: f64,
    #[serde(skip)]
    mem_n: u32,
}

impl Usage {
    pub fn add(&mut self, s: ResourceSample) {
        if self.latest.as_ref().is_some_and(|l| l.time_ns > s.time_ns) {
            return;
        }
        if let Some(c) = s.cpu {
            self.cpu_sum += c;
            self.cpu_n += 1;
        }
        if let Some(m) = s.memory_mib {
            self.mem_sum += m;
            self.mem_n += 1;
        }
        let mut s = s;
        // A GPU reading without a new utilisation or SM-activity sample keeps
        // the last one (0 before any).
        for g in &mut s.gpus {
            let before = self.latest.as_ref().and_then(|l| l.gpus.iter().find(|p| p.id == g.id));
            if g.utilization.is_nan() {
                g.utilization = before.map_or(0.0, |p| p.utilization);
            }
            if g.sm_active.is_none() {
                g.sm_active = before.and_then(|p| p.sm_active);
            }
        }
        self.latest = Some(s);
    }

    /// (cores, MiB) averaged since the last call, or the latest when no
    /// sample arrived since; then starts a new interval.
    pub fn take_mean(&mut self) -> (f64, f64) {
        let latest = self.latest.as_ref();
        let cpu = if self.cpu_n > 0 {
            self.cpu_sum / self.cpu_n as f64
        } else {
            latest.and_then(|l| l.cpu).unwrap_or(0.0)
        };
        let mem = if self.mem_n > 0 {
            self.mem_sum / self.mem_n as f64
        } else {
            latest.and_then(|l| l.memory_mib).unwrap_or(0.0)
        };
        (self.cpu_sum, self.cpu_n, self.mem_sum, self.mem_n) = (0.0, 0, 0.0, 0);
        ((cpu * 100.0).round() / 100.0, mem.round())
    }
}

/// One global-step record (DLRover's PerfMonitor entry).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub step: u64,
    pub time_ns: u64,
    pub worker_num: u32,
}

/// Global steps turned into a training speed. Keeps the last `keep` records
/// and appends only a step above the last one (R2.1). The speed is the steps
/// over the records of the last `window` seconds that share the latest
/// worker count (not the last two points: R2.2 reacted to every jitter).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PerfMonitor {
    pub records: VecDeque<StepRecord>,
    pub keep: usize,
    /// Records ever appended (the start rule counts them, R3.1).
    pub total: u64,
}

impl PerfMonitor {
    pub fn new(keep: usize) -> PerfMonitor {
        PerfMonitor {
            records: VecDeque::new(),
            keep: keep.max(2),
            total: 0,
        }
    }

    /// Returns whether the record was appended.
    pub fn add(&mut self, step: u64, time_ns: u64, worker_num: u32) -> bool {
        if self.records.back().is_some_and(|r| step <= r.step) {
            return false;
        }
        self.records.push_back(StepRecord {
            step,
            time_ns,
            worker_num,
        });
        self.total += 1;
        while self.records.len() > self.keep {
            self.records.pop_front();
        }
        true
    }

    pub fn last_step(&self) -> Option<u64> {
        self.records.back().map(|r| r.step)
    }

    /// Global steps per second over the window; 0 with fewer than 2 records
    /// in it or no time between them.
    pub fn speed(&self, window_s: f64) -> f64 {
        let Some(last) = self.records.back() else {
            return 0.0;
        };
        let window = (window_s * NS as f64) as u64;
        let first = self
            .records
            .iter()
            .rev()
            .take_while(|r| r.worker_num == last.worker_num && last.time_ns.saturating_sub(r.time_ns) <= window)
            .last()
            .expect("the last record itself");
        let dt = secs(first.time_ns, last.time_ns);
        if dt <= 0.0 {
            return 0.0;
        }
        (last.step - first.step) as f64 / dt
    }

    /// DLRover's R2.2 speed: the last two records only (kept for comparison).
    pub fn speed_last_two(&self) -> f64 {
        let n = self.records.len();
        if n < 2 {
            return 0.0;
        }
        let (a, b) = (self.records[n - 2], self.records[n - 1]);
        let dt = secs(a.time_ns, b.time_ns);
        if dt <= 0.0 { 0.0 } else { (b.step - a.step) as f64 / dt }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_plugin_sdk::CpuMode;
    use sonde_plugin_sdk::types::SeriesKind;

    fn info(metric: &str, attrs: &[(&str, Value)]) -> SeriesInfo {
        SeriesInfo {
            id: 0,
            metric: metric.into(),
            unit: String::new(),
            kind: SeriesKind::Gauge,
            attributes: attrs
                .iter()
                .map(|(k, v)| Attribute {
                    key: k.to_string(),
                    value: v.clone(),
                })
                .collect(),
        }
    }

    fn cpu(core: Option<i64>, mode: CpuMode) -> Role {
        Role::Cpu(CpuSeries {
            cpu: core,
            mode: Some(mode),
        })
    }

    #[test]
    fn roles() {
        let s = |v: &str| Value::Str(v.into());
        let table = [
            (
                info("system.cpu.utilization", &[("cpu.mode", s("idle"))]),
                Some(Role::Cpu(CpuSeries {
                    cpu: None,
                    mode: Some(CpuMode::Idle),
                })),
            ),
            (
                info(
                    "system.cpu.utilization",
                    &[("cpu.logical_number", Value::Int(3)), ("cpu.mode", s("iowait"))],
                ),
                Some(Role::Cpu(CpuSeries {
                    cpu: Some(3),
                    mode: Some(CpuMode::Iowait),
                })),
            ),
            // A sonde agent from before per-mode sampling: the busy share itself.
            (
                info("system.cpu.utilization", &[]),
                Some(Role::Cpu(CpuSeries { cpu: None, mode: None })),
            ),
            (
                info("system.memory.usage", &[("system.memory.state", s("used"))]),
                Some(Role::MemoryUsed),
            ),
            (info("system.memory.usage", &[("system.memory.state", s("free"))]), None),
            (info("system.memory.limit", &[]), Some(Role::MemoryLimit)),
            (
                info(
                    "hw.gpu.utilization",
                    &[("hw.id", s("GPU-1")), ("hw.gpu.task", s("general"))],
                ),
                Some(Role::GpuUtil("GPU-1".into())),
            ),
            (
                info(
                    "hw.gpu.utilization",
                    &[("hw.id", s("GPU-1")), ("hw.gpu.task", s("decoder"))],
                ),
                None,
            ),
            (
                info("hw.gpu.memory.usage", &[("hw.id", s("GPU-1"))]),
                Some(Role::GpuMemUsed("GPU-1".into())),
            ),
            (info("system.network.io", &[]), None),
        ];
        for (i, want) in table {
            assert_eq!(role(&i), want, "{i:?}");
        }
    }

    #[test]
    fn r1_2_cpu_is_cores_in_use_and_memory_is_mib() {
        let mut b = SampleBuilder::default();
        // 4 cores busy 50%, 25%, 100%, 0% (1 - idle - iowait): 1.75 cores in use.
        for (core, idle, iowait) in [(0, 0.25, 0.25), (1, 0.75, 0.0), (2, 0.0, 0.0), (3, 1.0, 0.0)] {
            b.add(&cpu(Some(core), CpuMode::Idle), 10, idle);
            b.add(&cpu(Some(core), CpuMode::Iowait), 10, iowait);
            // The busy modes do not change the share.
            b.add(&cpu(Some(core), CpuMode::User), 10, 1.0 - idle - iowait);
        }
        b.add(&cpu(None, CpuMode::Idle), 10, 0.5625);
        b.add(&Role::MemoryUsed, 10, 3.0 * MIB * 1024.0);
        b.add(&Role::MemoryLimit, 10, 16.0 * MIB * 1024.0);
        b.add(&Role::GpuUtil("g0".into()), 10, 0.8);
        b.add(&Role::GpuMemUsed("g0".into()), 10, 2048.0 * MIB);
        b.add(&Role::GpuMemLimit("g0".into()), 10, 81920.0 * MIB);
        b.add(&cpu(None, CpuMode::Idle), 20, f64::NAN);
        let s = b.finish(None);
        assert_eq!(s.len(), 1, "NaN readings are skipped");
        let s = &s[0];
        assert_eq!(s.cpu, Some(1.75));
        assert_eq!(s.cpu_count, Some(4));
        assert_eq!(s.memory_mib, Some(3072.0));
        assert_eq!(s.memory_limit_mib, Some(16384.0));
        assert_eq!(
            s.gpus,
            vec![GpuStat {
                index: 0,
                id: "g0".into(),
                total_mib: 81920.0,
                used_mib: 2048.0,
                utilization: 0.8,
                sm_active: None,
            }]
        );
        // A tick without a new utilisation or SM-activity sample (NVML's own
        // samples are slower than the ticks) keeps the last one.
        let mut b = SampleBuilder::default();
        b.add(&Role::GpuUtil("g0".into()), 10, 0.8);
        b.add(&Role::GpuSmActive("g0".into()), 10, 0.6);
        b.add(&Role::GpuMemUsed("g0".into()), 10, MIB);
        b.add(&Role::GpuMemUsed("g0".into()), 20, 2.0 * MIB);
        let mut usage = Usage::default();
        for s in b.finish(None) {
            usage.add(s);
        }
        let g = &usage.latest.as_ref().unwrap().gpus[0];
        assert_eq!((g.utilization, g.sm_active, g.used_mib), (0.8, Some(0.6), 2.0));
        // Without per-core series the total needs the core count.
        let mut b = SampleBuilder::default();
        b.add(&cpu(None, CpuMode::Idle), 10, 0.75);
        assert_eq!(b.finish(Some(8))[0].cpu, Some(2.0));
        let mut b = SampleBuilder::default();
        b.add(&cpu(None, CpuMode::Idle), 10, 0.75);
        assert_eq!(b.finish(None)[0].cpu, None);
        // A core whose idle share was not read is not counted.
        let mut b = SampleBuilder::default();
        b.add(&cpu(Some(0), CpuMode::Idle), 10, 0.5);
        b.add(&cpu(Some(1), CpuMode::User), 10, 0.5);
        let s = &b.finish(None)[0];
        assert_eq!((s.cpu, s.cpu_count), (Some(0.5), Some(1)));
    }

    #[test]
    fn usage_means_over_the_interval() {
        let mut u = Usage::default();
        for (t, c, m) in [(1, 1.0, 100.0), (2, 3.0, 300.0)] {
            u.add(ResourceSample {
                time_ns: t,
                cpu: Some(c),
                memory_mib: Some(m),
                ..Default::default()
            });
        }
        assert_eq!(u.take_mean(), (2.0, 200.0));
        assert_eq!(u.take_mean(), (3.0, 300.0), "no new sample: the latest");
    }

    #[test]
    fn r2_1_perf_monitor_appends_only_higher_steps() {
        // [verified] (100,t=1000), (100,t=1010), (400,t=1030): 2 samples, speed 10.
        let mut p = PerfMonitor::new(50);
        assert!(p.add(100, 1000 * NS, 3));
        assert!(!p.add(100, 1010 * NS, 3));
        assert!(p.add(400, 1030 * NS, 3));
        assert_eq!(p.records.len(), 2);
        assert_eq!(p.speed(60.0), 10.0);
        assert_eq!(p.speed_last_two(), 10.0);
        // Keeps the last 50.
        let mut p = PerfMonitor::new(50);
        for i in 1..=60u64 {
            p.add(i, i * NS, 1);
        }
        assert_eq!(p.records.len(), 50);
        assert_eq!(p.records[0].step, 11);
        assert_eq!(p.total, 60);
    }

    #[test]
    fn r2_2_speed_is_smoothed_over_the_window() {
        let mut p = PerfMonitor::new(50);
        assert_eq!(p.speed(60.0), 0.0, "no records");
        p.add(0, 0, 2);
        assert_eq!(p.speed(60.0), 0.0, "one record");
        p.add(100, 10 * NS, 2);
        p.add(300, 20 * NS, 2);
        assert_eq!(p.speed_last_two(), 20.0, "DLRover: the last two points");
        assert_eq!(p.speed(60.0), 15.0, "over the window");
        assert_eq!(p.speed(10.0), 20.0, "a window holding only the last two");
        // A new worker count starts a new window.
        p.add(350, 25 * NS, 3);
        assert_eq!(p.speed(60.0), 0.0, "one record of 3 workers");
        p.add(450, 30 * NS, 3);
        assert_eq!(p.speed(60.0), 20.0);
    }
}
