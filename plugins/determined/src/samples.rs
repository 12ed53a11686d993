//! Host sample batches -> Determined's system measurements, one value per
//! metric (per GPU) per sampling tick, each with its own timestamp.
//!
//! Levels (memory, GPU) are read as they are; the CPU's busy share comes
//! from the all-CPU `system.cpu.utilization` modes by the SDK's one rule
//! (`CpuBusyColumns`: every mode but idle and iowait); rates (network, disk)
//! come from counter deltas between consecutive readings of each series,
//! summed over interfaces or disks. Loopback interfaces are excluded, NaN
//! readings are skipped, and a counter that goes backwards (a reset) gives
//! no rate for that interval.

use std::collections::HashMap;

use sonde_plugin_sdk::types::{SampleBatch, SeriesInfo, Value};
use sonde_plugin_sdk::{CpuBusyColumns, CpuSeries, SampleView, SeriesTable};

use crate::outputs::SysMetric;

/// One system measurement: `value` (in the sonde unit of `metric`) at
/// `time`. For a rate, `since` is the earliest reading it was computed from
/// (for a level, `since == time`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SysMeasurement {
    pub time: u64,
    pub since: u64,
    pub metric: SysMetric,
    /// Index into [`SampleReader::gpus`]; `NO_GPU` for host-wide metrics.
    pub gpu: u16,
    pub value: f64,
}

pub const NO_GPU: u16 = u16::MAX;

/// What a host series contributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// An all-CPU `system.cpu.utilization` series (one mode, or a busy share).
    Cpu(CpuSeries),
    Memory,
    /// `system.network.io`; `transmit` tells the direction.
    Net {
        transmit: bool,
    },
    /// `system.disk.io`.
    DiskBytes {
        write: bool,
    },
    /// `system.disk.operations`, either direction.
    DiskOps,
    GpuUtil(u16),
    GpuUsage(u16),
    GpuLimit(u16),
    Ignore,
}

/// Rate groups, the index into the per-tick accumulators.
const NET_SENT: usize = 0;
const NET_RECV: usize = 1;
const DISK_READ: usize = 2;
const DISK_WRITE: usize = 3;
const DISK_OPS: usize = 4;
const GROUPS: [(usize, SysMetric); 5] = [
    (NET_SENT, SysMetric::NetSent),
    (NET_RECV, SysMetric::NetRecv),
    (DISK_READ, SysMetric::DiskRead),
    (DISK_WRITE, SysMetric::DiskWrite),
    (DISK_OPS, SysMetric::DiskIops),
];

/// GPUs are few; more than this many distinct UUIDs are ignored.
const MAX_GPUS: usize = 1024;

#[derive(Debug, Default)]
pub struct SampleReader {
    table: SeriesTable,
    roles: HashMap<u32, Role>,
    /// The last readable (time, value) of each counter series.
    prev: HashMap<u32, (u64, f64)>,
    gpus: Vec<String>,
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

/// Loopback is excluded even if the host delivers it.
pub fn is_loopback(interface: &str) -> bool {
    interface.starts_with("lo")
}

impl SampleReader {
    /// GPU UUIDs by the index measurements carry.
    pub fn gpus(&self) -> &[String] {
        &self.gpus
    }

    pub fn gpu_uuid(&self, index: u16) -> &str {
        self.gpus.get(index as usize).map_or("", String::as_str)
    }

    fn gpu_index(&mut self, uuid: &str) -> Option<u16> {
        if let Some(i) = self.gpus.iter().position(|g| g == uuid) {
            return Some(i as u16);
        }
        if self.gpus.len() >= MAX_GPUS {
            return None;
        }
        self.gpus.push(uuid.to_string());
        Some(self.gpus.len() as u16 - 1)
    }

    fn classify(&mut self, info: &SeriesInfo) -> Role {
        let direction = |key| attr(info, key);
        if let Some(cpu) = CpuSeries::of(info) {
            // Per-core series are not read: Determined's figure is all CPUs'.
            return if cpu.cpu.is_none() {
                Role::Cpu(cpu)
            } else {
                Role::Ignore
            };
        }
        match info.metric.as_str() {
            "system.memory.linux.available" => Role::Memory,
            "system.network.io" => {
                if attr(info, "network.interface.name").is_none_or(is_loopback) {
                    return Role::Ignore;
                }
                match direction("network.io.direction") {
                    Some("transmit") => Role::Net { transmit: true },
                    Some("receive") => Role::Net { transmit: false },
                    _ => Role::Ignore,
                }
            }
            "system.disk.io" => match direction("disk.io.direction") {
                Some("read") => Role::DiskBytes { write: false },
                Some("write") => Role::DiskBytes { write: true },
                _ => Role::Ignore,
            },
            "system.disk.operations" => match direction("disk.io.direction") {
                Some("read" | "write") => Role::DiskOps,
                _ => Role::Ignore,
            },
            "hw.gpu.utilization" | "hw.gpu.memory.usage" | "hw.gpu.memory.limit" => {
                // Only the general-purpose utilization (not encoder/decoder).
                if info.metric == "hw.gpu.utilization" && attr(info, "hw.gpu.task").is_some_and(|t| t != "general") {
                    return Role::Ignore;
                }
                let Some(gpu) = attr(info, "hw.id").and_then(|id| self.gpu_index(id)) else {
                    return Role::Ignore;
                };
                match info.metric.as_str() {
                    "hw.gpu.utilization" => Role::GpuUtil(gpu),
                    "hw.gpu.memory.usage" => Role::GpuUsage(gpu),
                    _ => Role::GpuLimit(gpu),
                }
            }
            _ => Role::Ignore,
        }
    }

    fn role(&mut self, id: u32) -> Option<Role> {
        if let Some(&r) = self.roles.get(&id) {
            return Some(r);
        }
        // Not cached until described: a later batch may still describe it.
        let info = self.table.get(id)?.clone();
        let r = self.classify(&info);
        self.roles.insert(id, r);
        Some(r)
    }

    /// Every measurement in `batch`, ordered by time. Errors only on a
    /// malformed batch; series never described are skipped.
    pub fn read(&mut self, mut batch: SampleBatch) -> Result<Vec<SysMeasurement>, String> {
        if !batch.new_series.is_empty() {
            for info in &batch.new_series {
                // A re-described id (after request-samples) is classified again.
                self.roles.remove(&info.id);
            }
            self.table.absorb(&mut batch);
        }
        let view = SampleView::new(&batch)?;
        let ticks = view.timestamps();
        let n = ticks.len();
        let mut out = Vec::new();
        // Per rate group and tick: (sum of rates, earliest reading used, contributors).
        let mut rates = vec![(0.0f64, u64::MAX, 0u32); GROUPS.len() * n];
        // Per GPU and tick: (usage, limit).
        let mut gpu_mem: HashMap<u16, Vec<(f64, f64)>> = HashMap::new();
        let mut cpu = CpuBusyColumns::new(n);

        for series in view.iter() {
            let Some(role) = self.role(series.id) else { continue };
            let level = |metric, gpu, out: &mut Vec<SysMeasurement>| {
                for (time, value) in series.readings() {
                    out.push(SysMeasurement {
                        time,
                        since: time,
                        metric,
                        gpu,
                        value,
                    });
                }
            };
            let group = match role {
                Role::Ignore => continue,
                Role::Cpu(which) => {
                    cpu.add(which, series.values);
                    continue;
                }
                Role::Memory => {
                    level(SysMetric::FreeMemory, NO_GPU, &mut out);
                    continue;
                }
                Role::GpuUtil(gpu) => {
                    level(SysMetric::GpuUtil, gpu, &mut out);
                    continue;
                }
                Role::GpuUsage(gpu) | Role::GpuLimit(gpu) => {
                    let mem = gpu_mem.entry(gpu).or_insert_with(|| vec![(f64::NAN, f64::NAN); n]);
                    for (k, &v) in series.values.iter().enumerate() {
                        if matches!(role, Role::GpuUsage(_)) {
                            mem[k].0 = v;
                        } else {
                            mem[k].1 = v;
                        }
                    }
                    continue;
                }
                Role::Net { transmit: true } => NET_SENT,
                Role::Net { transmit: false } => NET_RECV,
                Role::DiskBytes { write: false } => DISK_READ,
                Role::DiskBytes { write: true } => DISK_WRITE,
                Role::DiskOps => DISK_OPS,
            };
            // Network throughput is reported in bits.
            let scale = if group == NET_SENT || group == NET_RECV {
                8.0
            } else {
                1.0
            };
            let mut prev = self.prev.get(&series.id).copied();
            for (k, (time, value)) in series.points().enumerate() {
                if value.is_nan() {
                    continue;
                }
                if let Some((pt, pv)) = prev
                    && time > pt
                    && value >= pv
                {
                    let rate = (value - pv) * scale / ((time - pt) as f64 / 1e9);
                    let acc = &mut rates[group * n + k];
                    acc.0 += rate;
                    acc.1 = acc.1.min(pt);
                    acc.2 += 1;
                }
                // A reset (value < previous) re-baselines: the next interval is good again.
                if prev.is_none_or(|(pt, _)| time > pt) {
                    prev = Some((time, value));
                }
            }
            if let Some(p) = prev {
                self.prev.insert(series.id, p);
            }
        }

        for (&time, busy) in ticks.iter().zip(cpu.busy(None).unwrap_or_default()) {
            if !busy.is_nan() {
                out.push(SysMeasurement {
                    time,
                    since: time,
                    metric: SysMetric::Cpu,
                    gpu: NO_GPU,
                    value: busy,
                });
            }
        }
        for (group, metric) in GROUPS {
            for (k, &time) in ticks.iter().enumerate() {
                let (sum, since, count) = rates[group * n + k];
                if count > 0 {
                    out.push(SysMeasurement {
                        time,
                        since,
                        metric,
                        gpu: NO_GPU,
                        value: sum,
                    });
                }
            }
        }
        let mut gpus: Vec<_> = gpu_mem.into_iter().collect();
        gpus.sort_by_key(|(g, _)| *g);
        for (gpu, mem) in gpus {
            for (k, &(usage, limit)) in mem.iter().enumerate() {
                let free = limit - usage;
                if !free.is_nan() {
                    out.push(SysMeasurement {
                        time: ticks[k],
                        since: ticks[k],
                        metric: SysMetric::GpuFreeMemory,
                        gpu,
                        value: free,
                    });
                }
            }
        }
        // Stable: within a tick, the metric order above is kept.
        out.sort_by_key(|m| m.time);
        Ok(out)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use sonde_plugin_sdk::types::{Attribute, SeriesKind};

    pub fn series(id: u32, metric: &str, kind: SeriesKind, attrs: &[(&str, &str)]) -> SeriesInfo {
        SeriesInfo {
            id,
            metric: metric.into(),
            unit: "1".into(),
            kind,
            attributes: attrs.iter().map(|(k, v)| Attribute::new(*k, *v)).collect(),
        }
    }

    pub fn nic(id: u32, name: &str, dir: &str) -> SeriesInfo {
        series(
            id,
            "system.network.io",
            SeriesKind::Counter,
            &[("network.interface.name", name), ("network.io.direction", dir)],
        )
    }

    pub fn disk(id: u32, metric: &str, dev: &str, dir: &str) -> SeriesInfo {
        series(
            id,
            metric,
            SeriesKind::Counter,
            &[("system.device", dev), ("disk.io.direction", dir)],
        )
    }

    pub fn gpu(id: u32, metric: &str, uuid: &str) -> SeriesInfo {
        let mut attrs = vec![("hw.id", uuid), ("hw.type", "gpu"), ("hw.name", "Synthetic GPU")];
        if metric == "hw.gpu.utilization" {
            attrs.push(("hw.gpu.task", "general"));
        }
        series(id, metric, SeriesKind::Gauge, &attrs)
    }

    /// A batch of `rows[s]` for `infos[s]` at `ticks` (seconds).
    pub fn batch(infos: Vec<SeriesInfo>, ticks_s: &[f64], rows: &[&[f64]]) -> SampleBatch {
        SampleBatch {
            series: infos.iter().map(|i| i.id).collect(),
            new_series: infos,
            timestamps: ticks_s.iter().map(|&s| (s * 1e9) as u64).collect(),
            values: rows.iter().flat_map(|r| r.iter().copied()).collect(),
        }
    }

    fn values(ms: &[SysMeasurement], metric: SysMetric) -> Vec<(f64, f64)> {
        ms.iter()
            .filter(|m| m.metric == metric)
            .map(|m| (m.time as f64 / 1e9, m.value))
            .collect()
    }

    #[test]
    fn levels_use_only_the_all_cpu_modes_and_skip_nan() {
        let mut r = SampleReader::default();
        let cpu = |id, attrs: &[(&str, &str)]| series(id, "system.cpu.utilization", SeriesKind::Gauge, attrs);
        let b = batch(
            vec![
                cpu(1, &[("cpu.mode", "idle")]),
                cpu(2, &[("cpu.logical_number", "0"), ("cpu.mode", "idle")]),
                series(3, "system.memory.linux.available", SeriesKind::Gauge, &[]),
                series(4, "system.memory.usage", SeriesKind::Gauge, &[]),
                cpu(5, &[("cpu.mode", "iowait")]),
                cpu(6, &[("cpu.mode", "user")]),
            ],
            &[1.0, 2.0, 3.0],
            &[
                &[0.75, f64::NAN, 0.25],
                &[0.1, 0.1, 0.1],
                &[4e9, 5e9, f64::NAN],
                &[1.0, 1.0, 1.0],
                &[0.0, 0.5, 0.25],
                &[0.25, 0.5, 0.5],
            ],
        );
        let ms = r.read(b).unwrap();
        // busy = 1 - idle - iowait; no idle at t=2, so no share there
        assert_eq!(values(&ms, SysMetric::Cpu), [(1.0, 0.25), (3.0, 0.5)]);
        assert_eq!(values(&ms, SysMetric::FreeMemory), [(1.0, 4e9), (2.0, 5e9)]);
        assert_eq!(ms.len(), 4);
        assert!(ms.windows(2).all(|w| w[0].time <= w[1].time), "ordered by time");
    }

    #[test]
    fn rates_sum_nics_without_loopback_and_discard_nothing_themselves() {
        let mut r = SampleReader::default();
        let b = batch(
            vec![
                nic(1, "eth0", "transmit"),
                nic(2, "eth1", "transmit"),
                nic(3, "lo", "transmit"),
                nic(4, "lo0", "transmit"),
                nic(5, "eth0", "receive"),
            ],
            &[1.0, 2.0, 2.5],
            &[
                &[0.0, 1000.0, 2000.0],
                &[0.0, 500.0, 500.0],
                &[0.0, 1e12, 2e12],
                &[0.0, 1e12, 2e12],
                &[100.0, 100.0, 350.0],
            ],
        );
        let ms = r.read(b).unwrap();
        // (1000 + 500) bytes in 1 s = 12000 bit/s; then 1000 bytes in 0.5 s = 16000 bit/s.
        assert_eq!(values(&ms, SysMetric::NetSent), [(2.0, 12_000.0), (2.5, 16_000.0)]);
        assert_eq!(values(&ms, SysMetric::NetRecv), [(2.0, 0.0), (2.5, 4000.0)]);
        let first = ms.iter().find(|m| m.metric == SysMetric::NetSent).unwrap();
        assert_eq!(first.since, 1_000_000_000, "a rate carries its previous reading's time");

        // The next batch continues from the last reading of this one.
        let b = batch(vec![], &[3.5], &[&[3000.0], &[500.0], &[0.0], &[0.0], &[350.0]]);
        let b = SampleBatch {
            series: vec![1, 2, 3, 4, 5],
            ..b
        };
        let ms = r.read(b).unwrap();
        assert_eq!(values(&ms, SysMetric::NetSent), [(3.5, 8000.0)]);
    }

    #[test]
    fn counter_reset_and_nan_give_no_rate_for_that_interval() {
        let mut r = SampleReader::default();
        let b = batch(
            vec![disk(1, "system.disk.io", "sda", "read")],
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            // reset at t=3, NaN at t=5 (t=6 then spans 4..6)
            &[&[100.0, 300.0, 50.0, 150.0, f64::NAN, 350.0]],
        );
        let ms = r.read(b).unwrap();
        assert_eq!(
            values(&ms, SysMetric::DiskRead),
            [(2.0, 200.0), (4.0, 100.0), (6.0, 100.0)]
        );
    }

    #[test]
    fn disk_throughput_and_iops() {
        let mut r = SampleReader::default();
        let b = batch(
            vec![
                disk(1, "system.disk.io", "sda", "read"),
                disk(2, "system.disk.io", "sdb", "read"),
                disk(3, "system.disk.io", "sda", "write"),
                disk(4, "system.disk.operations", "sda", "read"),
                disk(5, "system.disk.operations", "sda", "write"),
                disk(6, "system.disk.io_time", "sda", ""),
            ],
            &[1.0, 3.0],
            &[
                &[0.0, 2048.0],
                &[0.0, 1024.0],
                &[0.0, 4096.0],
                &[10.0, 20.0],
                &[0.0, 30.0],
                &[0.0, 1.0],
            ],
        );
        let ms = r.read(b).unwrap();
        assert_eq!(values(&ms, SysMetric::DiskRead), [(3.0, 1536.0)]);
        assert_eq!(values(&ms, SysMetric::DiskWrite), [(3.0, 2048.0)]);
        assert_eq!(values(&ms, SysMetric::DiskIops), [(3.0, 20.0)]);
        assert_eq!(ms.len(), 3);
    }

    #[test]
    fn gpu_utilization_and_free_memory_per_uuid() {
        let mut r = SampleReader::default();
        let b = batch(
            vec![
                gpu(1, "hw.gpu.utilization", "GPU-a"),
                gpu(2, "hw.gpu.memory.usage", "GPU-a"),
                gpu(3, "hw.gpu.memory.limit", "GPU-a"),
                gpu(4, "hw.gpu.utilization", "GPU-b"),
                gpu(5, "hw.gpu.memory.limit", "GPU-b"),
                gpu(6, "hw.gpu.memory.usage", "GPU-b"),
                gpu(7, "hw.power", "GPU-b"),
            ],
            &[1.0, 2.0],
            &[
                &[0.5, 0.75],
                &[2e9, f64::NAN],
                &[16e9, 16e9],
                &[0.0, f64::NAN],
                &[8e9, 8e9],
                &[1e9, 3e9],
                &[100.0, 100.0],
            ],
        );
        let ms = r.read(b).unwrap();
        assert_eq!(r.gpus(), ["GPU-a", "GPU-b"]);
        let per_gpu = |metric| -> Vec<(&str, f64, f64)> {
            ms.iter()
                .filter(|m| m.metric == metric)
                .map(|m| (r.gpu_uuid(m.gpu), m.time as f64 / 1e9, m.value))
                .collect()
        };
        assert_eq!(
            per_gpu(SysMetric::GpuUtil),
            [("GPU-a", 1.0, 0.5), ("GPU-b", 1.0, 0.0), ("GPU-a", 2.0, 0.75)]
        );
        // free = limit - usage, only where both were read.
        assert_eq!(
            per_gpu(SysMetric::GpuFreeMemory),
            [("GPU-a", 1.0, 14e9), ("GPU-b", 1.0, 7e9), ("GPU-b", 2.0, 5e9)]
        );
    }

    #[test]
    fn series_described_later_are_picked_up() {
        let mut r = SampleReader::default();
        let mut b = batch(vec![], &[1.0], &[&[0.5]]);
        b.series = vec![9];
        assert!(r.read(b).unwrap().is_empty());
        // (A series without `cpu.mode`, as sondes before per-mode sampling
        // sent it, is the busy share itself.)
        let b = batch(
            vec![series(9, "system.cpu.utilization", SeriesKind::Gauge, &[])],
            &[2.0],
            &[&[0.5]],
        );
        assert_eq!(r.read(b).unwrap().len(), 1);
        let mut bad = batch(vec![], &[1.0, 2.0], &[&[0.5]]);
        bad.series = vec![9];
        assert!(r.read(bad).unwrap_err().contains("malformed"));
    }
}
