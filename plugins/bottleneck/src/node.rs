//! A node's recent samples as ticks, and what they say about a time window:
//! CPU, memory, the busiest network interface and the disk relative to their
//! observed peaks, the GPUs.
//!
//! Each tick covers the interval since the previous one (the host computes
//! utilizations and this module counter rates over it); the node's CPU is
//! the all-CPU busy share, 1 − idle − iowait of its `system.cpu.utilization`
//! modes by the SDK's rule (`CpuBusyColumns`); a window is the
//! overlap-weighted mean of the ticks it touches. Peaks are the highest tick
//! rate seen per interface and for disk reads, counted only from
//! `min_peak_bytes_per_s` up.

use std::collections::{HashMap, VecDeque};

use sonde_plugin_sdk::types::{SampleBatch, SeriesInfo, Value};
use sonde_plugin_sdk::{CpuBusyColumns, CpuSeries, SampleView, SeriesTable};

/// Ticks older than this behind the newest are dropped: steps wait at most
/// `lag_ms` for their judgement, far less than this.
const KEEP_NS: u64 = 120_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// One mode of all CPUs (`cpu` None) or of one core.
    Cpu(CpuSeries),
    MemAvailable,
    MemLimit,
    Net(usize),
    DiskRead,
    Gpu(usize),
    Ignore,
}

#[derive(Debug, Clone)]
struct Tick {
    since: u64,
    time: u64,
    cpu: f64,
    mem_available: f64,
    disk_read: f64,
    /// Bytes/s per interface (NaN where unknown).
    net: Vec<f64>,
    /// Mean utilization of the GPUs read at this tick; NaN without any.
    gpu: f64,
}

/// What a node's samples say about one window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Window {
    pub cpu: Option<f64>,
    pub cores: u32,
    pub memory_available: Option<f64>,
    pub net: Option<(String, f64, f64)>,
    pub disk_read: Option<(f64, f64)>,
    pub gpu: Option<f64>,
}

#[derive(Debug, Default)]
pub struct NodeSamples {
    table: SeriesTable,
    roles: HashMap<u32, Role>,
    /// A counter's previous reading, for its rate.
    prev: HashMap<u32, (u64, f64)>,
    ifaces: Vec<String>,
    iface_peak: Vec<f64>,
    disk_peak: f64,
    gpus: Vec<String>,
    cores: u32,
    mem_limit: f64,
    ticks: VecDeque<Tick>,
    min_peak: f64,
}

fn attr<'a>(info: &'a SeriesInfo, key: &str) -> Option<&'a str> {
    info.attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| match &a.value {
            Value::Str(s) => Some(s.as_str()),
            _ => None,
        })
}

impl NodeSamples {
    pub fn new(min_peak_bytes_per_s: f64) -> NodeSamples {
        NodeSamples {
            min_peak: min_peak_bytes_per_s,
            mem_limit: f64::NAN,
            ..NodeSamples::default()
        }
    }

    /// The newest tick's time; 0 before any.
    pub fn newest(&self) -> u64 {
        self.ticks.back().map_or(0, |t| t.time)
    }

    fn classify(&mut self, info: &SeriesInfo) -> Role {
        if let Some(cpu) = CpuSeries::of(info) {
            return Role::Cpu(cpu);
        }
        match info.metric.as_str() {
            "system.memory.linux.available" => Role::MemAvailable,
            "system.memory.limit" => Role::MemLimit,
            "system.network.io" => {
                let Some(name) = attr(info, "network.interface.name") else {
                    return Role::Ignore;
                };
                // Both directions of an interface add up to its throughput.
                let i = match self.ifaces.iter().position(|n| n == name) {
                    Some(i) => i,
                    None => {
                        self.ifaces.push(name.to_string());
                        self.iface_peak.push(0.0);
                        self.ifaces.len() - 1
                    }
                };
                Role::Net(i)
            }
            "system.disk.io" if attr(info, "disk.io.direction") == Some("read") => Role::DiskRead,
            "hw.gpu.utilization" if attr(info, "hw.gpu.task").is_none_or(|t| t == "general") => {
                let id = attr(info, "hw.id").unwrap_or("");
                let i = match self.gpus.iter().position(|g| g == id) {
                    Some(i) => i,
                    None => {
                        self.gpus.push(id.to_string());
                        self.gpus.len() - 1
                    }
                };
                Role::Gpu(i)
            }
            _ => Role::Ignore,
        }
    }

    /// Reads a batch of this node's samples into ticks.
    pub fn read(&mut self, mut batch: SampleBatch) -> Result<(), String> {
        for info in &batch.new_series {
            self.roles.remove(&info.id);
        }
        self.table.absorb(&mut batch);
        let view = SampleView::new(&batch)?;
        let times = view.timestamps();
        let n = times.len();
        if n == 0 {
            return Ok(());
        }
        let mut cpu = CpuBusyColumns::new(n);
        let mut avail = vec![f64::NAN; n];
        let mut disk = vec![f64::NAN; n];
        let mut gpu_sum = vec![(0.0, 0u32); n];
        let mut net: Vec<Vec<f64>> = Vec::new();
        for series in view.iter() {
            let role = match self.roles.get(&series.id) {
                Some(&r) => r,
                None => {
                    let Some(info) = self.table.get(series.id).cloned() else {
                        continue;
                    };
                    let r = self.classify(&info);
                    self.roles.insert(series.id, r);
                    r
                }
            };
            match role {
                Role::Cpu(which) => cpu.add(which, series.values),
                Role::MemAvailable => avail.copy_from_slice(series.values),
                Role::MemLimit => {
                    if let Some((_, v)) = series.readings().last() {
                        self.mem_limit = v;
                    }
                }
                Role::Gpu(_) => {
                    for (k, &v) in series.values.iter().enumerate() {
                        if !v.is_nan() {
                            gpu_sum[k].0 += v;
                            gpu_sum[k].1 += 1;
                        }
                    }
                }
                Role::Net(_) | Role::DiskRead => {
                    let rates = self.rates(series.id, series.timestamps, series.values);
                    let target = match role {
                        Role::Net(i) => {
                            if net.len() <= i {
                                net.resize(i + 1, vec![f64::NAN; n]);
                            }
                            &mut net[i]
                        }
                        _ => &mut disk,
                    };
                    for (k, r) in rates.into_iter().enumerate() {
                        if !r.is_nan() {
                            target[k] = if target[k].is_nan() { r } else { target[k] + r };
                        }
                    }
                }
                Role::Ignore => {}
            }
        }
        let cores = cpu.cores().count() as u32;
        if cores > 0 {
            self.cores = cores;
        }
        let cpu = cpu.busy(None).unwrap_or_else(|| vec![f64::NAN; n]);
        net.resize(self.ifaces.len(), vec![f64::NAN; n]);
        for k in 0..n {
            let time = times[k];
            if time <= self.newest() {
                continue;
            }
            let since = match self.ticks.back() {
                Some(t) => t.time,
                None if k > 0 => times[k - 1],
                None => time.saturating_sub(100_000_000),
            };
            let tick_net: Vec<f64> = net.iter().map(|r| r[k]).collect();
            for (i, &r) in tick_net.iter().enumerate() {
                if r >= self.min_peak && r > self.iface_peak[i] {
                    self.iface_peak[i] = r;
                }
            }
            if disk[k] >= self.min_peak && disk[k] > self.disk_peak {
                self.disk_peak = disk[k];
            }
            let (g, c) = gpu_sum[k];
            self.ticks.push_back(Tick {
                since,
                time,
                cpu: cpu[k],
                mem_available: avail[k],
                disk_read: disk[k],
                net: tick_net,
                gpu: if c > 0 { g / c as f64 } else { f64::NAN },
            });
        }
        let newest = self.newest();
        while self.ticks.front().is_some_and(|t| t.time + KEEP_NS < newest) {
            self.ticks.pop_front();
        }
        Ok(())
    }

    /// Per-tick rates (bytes/s) of a counter; NaN where no rate (first reading, reset, NaN).
    fn rates(&mut self, id: u32, times: &[u64], values: &[f64]) -> Vec<f64> {
        let mut prev = self.prev.get(&id).copied();
        let mut out = vec![f64::NAN; times.len()];
        for (k, (&t, &v)) in times.iter().zip(values).enumerate() {
            if v.is_nan() {
                continue;
            }
            if let Some((pt, pv)) = prev
                && t > pt
                && v >= pv
            {
                out[k] = (v - pv) / ((t - pt) as f64 / 1e9);
            }
            if prev.is_none_or(|(pt, _)| t > pt) {
                prev = Some((t, v));
            }
        }
        if let Some(p) = prev {
            self.prev.insert(id, p);
        }
        out
    }

    /// What the samples say about [start, end]; `None` fields where no tick
    /// covering the window had the value.
    pub fn window(&self, start: u64, end: u64) -> Window {
        // (weighted sum, weight) per quantity.
        let mut cpu = (0.0, 0.0);
        let mut avail = (0.0, 0.0);
        let mut disk = (0.0, 0.0);
        let mut gpu = (0.0, 0.0);
        let mut net = vec![(0.0, 0.0); self.ifaces.len()];
        let add = |acc: &mut (f64, f64), v: f64, w: f64| {
            if !v.is_nan() {
                acc.0 += v * w;
                acc.1 += w;
            }
        };
        // Ticks are in time order: skip those ending before the window.
        let first = self.ticks.partition_point(|t| t.time <= start);
        for t in self.ticks.range(first..) {
            if t.since >= end {
                break;
            }
            let overlap = (t.time.min(end) - t.since.max(start)) as f64;
            if overlap <= 0.0 {
                continue;
            }
            add(&mut cpu, t.cpu, overlap);
            add(&mut avail, t.mem_available, overlap);
            add(&mut disk, t.disk_read, overlap);
            add(&mut gpu, t.gpu, overlap);
            for (i, &r) in t.net.iter().enumerate() {
                add(&mut net[i], r, overlap);
            }
        }
        let mean = |acc: (f64, f64)| (acc.1 > 0.0).then(|| acc.0 / acc.1);
        let share = |rate: f64, peak: f64| if peak > 0.0 { (rate / peak).min(1.0) } else { 0.0 };
        let busiest = net
            .iter()
            .enumerate()
            .filter_map(|(i, &acc)| mean(acc).map(|r| (i, r, share(r, self.iface_peak[i]))))
            .max_by(|a, b| a.2.total_cmp(&b.2).then(a.1.total_cmp(&b.1)))
            .map(|(i, r, s)| (self.ifaces[i].clone(), r, s));
        Window {
            cpu: mean(cpu),
            cores: self.cores,
            memory_available: mean(avail).filter(|_| self.mem_limit > 0.0).map(|a| a / self.mem_limit),
            net: busiest,
            disk_read: mean(disk).map(|r| (r, share(r, self.disk_peak))),
            gpu: mean(gpu),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_plugin_sdk::types::{Attribute, SeriesKind};

    fn series(id: u32, metric: &str, kind: SeriesKind, attrs: &[(&str, &str)]) -> SeriesInfo {
        SeriesInfo {
            id,
            metric: metric.into(),
            unit: "1".into(),
            kind,
            attributes: attrs.iter().map(|(k, v)| Attribute::new(*k, *v)).collect(),
        }
    }

    /// Ticks every 100 ms from 1 s; `rows[s]` are series s's values.
    fn batch(infos: Vec<SeriesInfo>, first_tick: u64, rows: &[&[f64]]) -> SampleBatch {
        let n = rows[0].len() as u64;
        SampleBatch {
            series: infos.iter().map(|i| i.id).collect(),
            new_series: infos,
            timestamps: (0..n).map(|k| (first_tick + k) * 100_000_000).collect(),
            values: rows.iter().flat_map(|r| r.iter().copied()).collect(),
        }
    }

    #[test]
    fn windows_weight_ticks_by_overlap_and_peaks_are_per_interface() {
        let mut node = NodeSamples::new(1e6);
        let lo = |id, dir| {
            series(
                id,
                "system.network.io",
                SeriesKind::Counter,
                &[("network.interface.name", "lo"), ("network.io.direction", dir)],
            )
        };
        let b = batch(
            vec![
                series(1, "system.cpu.utilization", SeriesKind::Gauge, &[("cpu.mode", "idle")]),
                series(
                    2,
                    "system.cpu.utilization",
                    SeriesKind::Gauge,
                    &[("cpu.logical_number", "0"), ("cpu.mode", "idle")],
                ),
                series(
                    3,
                    "system.cpu.utilization",
                    SeriesKind::Gauge,
                    &[("cpu.logical_number", "1"), ("cpu.mode", "idle")],
                ),
                lo(4, "transmit"),
                lo(5, "receive"),
                series(6, "system.memory.linux.available", SeriesKind::Gauge, &[]),
                series(7, "system.memory.limit", SeriesKind::Gauge, &[]),
            ],
            10,
            &[
                // idle: busy 0.2, 0.4, 1.0, 1.0
                &[0.8, 0.6, 0.0, 0.0],
                &[0.0; 4],
                &[0.0; 4],
                // 0, then 10 MB per 100 ms (100 MB/s) each way, then 5 MB.
                &[0.0, 10e6, 20e6, 25e6],
                &[0.0, 10e6, 20e6, 25e6],
                &[4e9; 4],
                &[8e9; 4],
            ],
        );
        node.read(b).unwrap();
        // Tick at 1.1 s covers (1.0, 1.1]; the window (1.05, 1.2) takes half of it.
        let w = node.window(1_050_000_000, 1_200_000_000);
        assert_eq!(w.cores, 2);
        let cpu = w.cpu.unwrap();
        assert!((cpu - (0.4 * 0.5 + 1.0) / 1.5).abs() < 1e-9, "{cpu}");
        assert_eq!(w.memory_available, Some(0.5));
        let (name, rate, share) = w.net.unwrap();
        assert_eq!(name, "lo");
        assert!((rate - 200e6).abs() < 1.0, "{rate}");
        assert!((share - 1.0).abs() < 1e-9);
        // The last tick ran at half the peak.
        let (_, rate, share) = node.window(1_200_000_000, 1_300_000_000).net.unwrap();
        assert!(
            (rate - 100e6).abs() < 1.0 && (share - 0.5).abs() < 1e-9,
            "{rate} {share}"
        );
        // No tick covers a window in the future.
        assert_eq!(node.window(5_000_000_000, 6_000_000_000).cpu, None);
    }

    #[test]
    fn a_trickle_sets_no_peak_and_rates_continue_across_batches() {
        let mut node = NodeSamples::new(1e6);
        let eth = series(
            1,
            "system.network.io",
            SeriesKind::Counter,
            &[("network.interface.name", "eth0"), ("network.io.direction", "receive")],
        );
        node.read(batch(vec![eth], 10, &[&[0.0, 1000.0]])).unwrap();
        let (_, rate, share) = node.window(1_000_000_000, 1_100_000_000).net.unwrap();
        assert_eq!((rate, share), (10_000.0, 0.0));
        let next = SampleBatch {
            new_series: vec![],
            series: vec![1],
            timestamps: vec![1_200_000_000],
            values: vec![3000.0],
        };
        node.read(next).unwrap();
        let (_, rate, _) = node.window(1_100_000_000, 1_200_000_000).net.unwrap();
        assert_eq!(rate, 20_000.0);
    }
}
