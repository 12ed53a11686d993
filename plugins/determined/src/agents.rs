//! Agents' forwarded samples -> Determined's system measurements, per node.
//!
//! On a cluster master the plugin does not sample the nodes a job runs on:
//! each node's sonde agent samples its own machine and forwards it. The
//! SDK's [`AgentSeries`] regroups those points into one sample batch per
//! node; each node then has its own [`SampleReader`], the same reader as
//! this host's own samples: one set of rules for levels, rates and GPU
//! memory, wherever the samples were taken.

use sonde_plugin_sdk::agents::{AgentSeries, host_series};
use sonde_plugin_sdk::types::{Attribute, EventBatch, SeriesInfo};

use crate::samples::{SampleReader, SysMeasurement};
use crate::settings::SAMPLED_METRICS;

/// Where a system measurement was sampled: this host, or an agent's node.
pub type Source = sonde_plugin_sdk::agents::NodeId;

/// This host's own samples (`on-samples`).
pub const LOCAL: Source = 0;

/// The mapping from what an agent exports onto the host series this plugin
/// reads: a metric the plugin samples locally, without the sender's
/// attributes; a series labelled `determined.*` is a determined plugin's own
/// output on that agent (not a sample) and is refused.
pub fn sampler_series(info: &SeriesInfo) -> Option<(String, Vec<Attribute>)> {
    if info.attributes.iter().any(|a| a.key.starts_with("determined.")) {
        return None;
    }
    host_series(info, &SAMPLED_METRICS)
}

/// Agents' series by node, and a reader per node (rates need each series'
/// previous reading, GPU indices are per node).
#[derive(Debug, Default)]
pub struct AgentSamples {
    series: AgentSeries,
    readers: Vec<SampleReader>,
}

impl AgentSamples {
    /// Whether `node` has sent samples (so it has an agent).
    pub fn has(&self, node: &str) -> bool {
        self.series.has(node)
    }

    /// The node a source stands for (`""` for this host).
    pub fn node(&self, source: Source) -> &str {
        self.series.node(source)
    }

    /// Agents' series refused for the bounds.
    pub fn ignored(&self) -> u64 {
        self.series.ignored
    }

    pub fn gpu_uuid(&self, source: Source, gpu: u16) -> &str {
        self.readers
            .get((source as usize).wrapping_sub(1))
            .map_or("", |r| r.gpu_uuid(gpu))
    }

    /// The agents' samples in an event batch, as measurements of their
    /// nodes, each node's in time order.
    pub fn read(&mut self, batch: &EventBatch) -> Vec<(Source, SysMeasurement)> {
        let mut out = Vec::new();
        for (source, samples) in self.series.read(batch, sampler_series) {
            let i = source as usize - 1;
            if self.readers.len() <= i {
                self.readers.resize_with(i + 1, SampleReader::default);
            }
            // Well-formed by construction, so an error here cannot happen.
            if let Ok(ms) = self.readers[i].read(samples) {
                out.extend(ms.into_iter().map(|m| (source, m)));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outputs::SysMetric;
    use crate::samples::tests::{nic, series};
    use crate::tests::{empty, origin as job_origin};
    use sonde_plugin_sdk::types::{Origin, PointColumns, SeriesKind};

    /// An origin with no ranks: a job's, or with no job an agent's.
    fn origin(job: &str, node: &str) -> Origin {
        job_origin(job, node, -1, -1)
    }

    /// Points (origin, series, time s, value) of `series` from `origins`.
    fn points(origins: Vec<Origin>, series: Vec<SeriesInfo>, rows: &[(u32, u32, u64, f64)]) -> EventBatch {
        let mut b = empty(origins, &[]);
        b.point_series = series;
        b.points = Some(PointColumns {
            origin: rows.iter().map(|r| r.0).collect(),
            series: rows.iter().map(|r| r.1).collect(),
            time: rows.iter().map(|r| r.2 * 1_000_000_000).collect(),
            value: rows.iter().map(|r| r.3).collect(),
        });
        b
    }

    #[test]
    fn the_mapping_keeps_sampled_metrics_and_refuses_outputs_and_job_metrics() {
        let table = [
            (
                series(0, "system.cpu.utilization", SeriesKind::Gauge, &[("cpu.mode", "idle")]),
                true,
            ),
            // A sender label does not make the all-CPU series a per-core one.
            (
                series(
                    0,
                    "system.cpu.utilization",
                    SeriesKind::Gauge,
                    &[("host.name", "a"), ("cpu.mode", "idle")],
                ),
                true,
            ),
            (
                series(
                    0,
                    "system.cpu.utilization",
                    SeriesKind::Gauge,
                    &[("determined.trial", "t")],
                ),
                false,
            ),
            (nic(0, "eth0", "transmit"), true),
            (series(0, "system.memory.usage", SeriesKind::Gauge, &[]), false),
            (series(0, "sonde.export.points", SeriesKind::Counter, &[]), false),
        ];
        for (info, want) in table {
            let got = sampler_series(&info);
            assert_eq!(got.is_some(), want, "{info:?}");
            if let Some((_, attrs)) = got {
                assert!(attrs.iter().all(|a| a.key != "host.name"));
            }
        }
    }

    #[test]
    fn points_of_each_agent_become_that_nodes_measurements() {
        let mut a = AgentSamples::default();
        let origins = vec![origin("", "node-a"), origin("", "node-b"), origin("job", "node-a")];
        let infos = vec![
            series(0, "system.cpu.utilization", SeriesKind::Gauge, &[("cpu.mode", "idle")]),
            nic(1, "eth0", "transmit"),
        ];
        // Idle shares: the busy share is 1 - idle.
        let b = points(
            origins.clone(),
            infos.clone(),
            &[
                (0, 0, 1, 0.75),
                (1, 0, 1, 0.25),
                (0, 1, 1, 1000.0),
                (0, 1, 2, 2000.0),
                (0, 0, 2, 0.5),
                // A job's own metric of the same name is not a sample.
                (2, 0, 1, 0.1),
            ],
        );
        let ms = a.read(&b);
        let of = |node: &str, metric: SysMetric| -> Vec<(u64, f64)> {
            ms.iter()
                .filter(|(s, m)| a.node(*s) == node && m.metric == metric)
                .map(|(_, m)| (m.time / 1_000_000_000, m.value))
                .collect()
        };
        assert_eq!(of("node-a", SysMetric::Cpu), [(1, 0.25), (2, 0.5)]);
        assert_eq!(of("node-b", SysMetric::Cpu), [(1, 0.75)]);
        // 1000 bytes in 1 s = 8000 bit/s, from the counter's consecutive readings.
        assert_eq!(of("node-a", SysMetric::NetSent), [(2, 8000.0)]);
        assert!(a.has("node-a") && a.has("node-b") && !a.has("job"));
        // The next batch continues each node's counters.
        let b = points(origins, infos, &[(0, 1, 3, 2500.0)]);
        let ms = a.read(&b);
        assert_eq!(ms.len(), 1);
        assert_eq!((a.node(ms[0].0), ms[0].1.value), ("node-a", 4000.0));
    }
}
