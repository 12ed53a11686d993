//! Agents' forwarded samples -> Determined's system measurements, per node.
//!
//! On a cluster master the plugin does not sample the nodes a job runs on:
//! each node's sonde agent samples its own machine and exports the result
//! (through its sysmetrics plugin) to the master, where the plugin sees it
//! as `points` events. An agent's own telemetry has no job (its resource is
//! marked `sonde.agent`), and its origin's node is the agent's `host.name`.
//! The agent exports every host series under the host's own metric name,
//! unit and attributes (cumulative counters as monotonic sums), so once a
//! node's points are regrouped into per-tick columns they are read by the
//! same [`SampleReader`] as this host's own samples: one set of rules for
//! levels, rates and GPU memory, wherever the samples were taken.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use sonde_plugin_sdk::types::{Attribute, EventBatch, Origin, SampleBatch, SeriesInfo, Value};

use crate::samples::{SampleReader, SysMeasurement};
use crate::settings::SAMPLED_METRICS;

/// Nodes followed at most; points of further nodes are ignored (counted).
pub const MAX_NODES: usize = 4096;

/// Distinct series per node at most (a node has a few dozen).
const MAX_SERIES_PER_NODE: usize = 4096;

/// Where a system measurement was sampled: this host, or an agent's node.
pub type Source = u16;

/// This host's own samples (`on-samples`).
pub const LOCAL: Source = 0;

/// Whether an origin is a sonde agent's own telemetry: no job, a node.
pub fn is_agent(o: &Origin) -> bool {
    o.job.is_empty() && !o.node.is_empty()
}

/// The one mapping from what an agent exports onto the host series this
/// plugin reads: the metric must be one the plugin samples locally; a series
/// labelled `determined.*` is a determined plugin's own output on that agent
/// (not a sample) and is refused; attributes that name the sender rather
/// than tell series apart are dropped, so the all-CPU series are again the
/// ones with only `cpu.mode`.
pub fn sampler_series(info: &SeriesInfo) -> Option<(String, Vec<Attribute>)> {
    if !SAMPLED_METRICS.contains(&info.metric.as_str()) {
        return None;
    }
    if info.attributes.iter().any(|a| a.key.starts_with("determined.")) {
        return None;
    }
    let attributes = info
        .attributes
        .iter()
        .filter(|a| !matches!(a.key.as_str(), "host.name" | "sonde.job") && !a.key.starts_with("service."))
        .cloned()
        .collect();
    Some((info.metric.clone(), attributes))
}

/// One agent's node: its series ids and its own reader (rates need each
/// series' previous reading, GPU indices are per node).
#[derive(Debug)]
struct Node {
    name: Arc<str>,
    ids: HashMap<String, u32>,
    reader: SampleReader,
}

#[derive(Debug, Default)]
pub struct AgentSamples {
    nodes: Vec<Node>,
    by_name: HashMap<Arc<str>, Source>,
    /// Agents' series refused for the bounds (nodes past [`MAX_NODES`],
    /// series past the per-node cap), once per event batch each.
    pub ignored: u64,
}

/// One node's share of an event batch: its (series id, time, value) points
/// and the series described for the first time.
#[derive(Default)]
struct NodePoints {
    points: Vec<(u32, u64, f64)>,
    new_series: Vec<SeriesInfo>,
}

/// The distinct values, ascending.
fn distinct<T: Ord>(values: impl Iterator<Item = T>) -> Vec<T> {
    values.collect::<BTreeSet<_>>().into_iter().collect()
}

/// A series' identity within a node, for its id.
fn series_key(metric: &str, attributes: &[Attribute]) -> String {
    let mut key = metric.to_string();
    for a in attributes {
        key.push('\u{1f}');
        key.push_str(&a.key);
        key.push('=');
        match &a.value {
            Value::Str(s) => key.push_str(s),
            Value::Int(i) => key.push_str(&i.to_string()),
            Value::Float(f) => key.push_str(&f.to_bits().to_string()),
            Value::Boolean(b) => key.push_str(if *b { "true" } else { "false" }),
        }
    }
    key
}

impl AgentSamples {
    /// Whether `node` has sent samples (so it has an agent).
    pub fn has(&self, node: &str) -> bool {
        self.by_name.contains_key(node)
    }

    /// The node a source stands for (`""` for this host).
    pub fn node(&self, source: Source) -> &str {
        match source {
            LOCAL => "",
            s => self.nodes.get(s as usize - 1).map_or("", |n| &n.name),
        }
    }

    pub fn gpu_uuid(&self, source: Source, gpu: u16) -> &str {
        self.nodes
            .get((source as usize).wrapping_sub(1))
            .map_or("", |n| n.reader.gpu_uuid(gpu))
    }

    /// The id of an agent's series on its node (described in `new_series`
    /// when new), or `None` when it is not a sample or the node is full.
    fn series_id(&mut self, source: Source, info: &SeriesInfo, new_series: &mut Vec<SeriesInfo>) -> Option<u32> {
        let (metric, attributes) = sampler_series(info)?;
        let node = &mut self.nodes[source as usize - 1];
        let key = series_key(&metric, &attributes);
        if let Some(&id) = node.ids.get(&key) {
            return Some(id);
        }
        if node.ids.len() >= MAX_SERIES_PER_NODE {
            self.ignored += 1;
            return None;
        }
        let id = node.ids.len() as u32;
        node.ids.insert(key, id);
        new_series.push(SeriesInfo {
            id,
            metric,
            attributes,
            ..info.clone()
        });
        Some(id)
    }

    fn source(&mut self, node: &str) -> Option<Source> {
        if let Some(&s) = self.by_name.get(node) {
            return Some(s);
        }
        if self.nodes.len() >= MAX_NODES {
            return None;
        }
        let name: Arc<str> = node.into();
        self.nodes.push(Node {
            name: name.clone(),
            ids: HashMap::new(),
            reader: SampleReader::default(),
        });
        let s = self.nodes.len() as Source;
        self.by_name.insert(name, s);
        Some(s)
    }

    /// The agents' samples in an event batch, as measurements of their
    /// nodes, each node's in time order.
    pub fn read(&mut self, batch: &EventBatch) -> Vec<(Source, SysMeasurement)> {
        let Some(c) = &batch.points else { return Vec::new() };
        // Per node: (series id, time, value), and the series first described now.
        let mut per_node: BTreeMap<Source, NodePoints> = BTreeMap::new();
        // An agent sends thousands of points per batch over a few dozen
        // series: each origin and (origin, series) pair is resolved once.
        let mut sources: HashMap<u32, Option<Source>> = HashMap::new();
        let mut ids: HashMap<(u32, u32), Option<u32>> = HashMap::new();
        for i in 0..c.origin.len() {
            let (o, series) = (c.origin[i], c.series[i]);
            let id = match ids.get(&(o, series)) {
                Some(&id) => id,
                None => {
                    let source = *sources.entry(o).or_insert_with(|| {
                        let origin = batch.origins.get(o as usize).filter(|o| is_agent(o))?;
                        let source = self.source(&origin.node);
                        self.ignored += u64::from(source.is_none());
                        source
                    });
                    let id = source.and_then(|source| {
                        let info = batch.point_series.get(series as usize)?;
                        self.series_id(source, info, &mut per_node.entry(source).or_default().new_series)
                    });
                    ids.insert((o, series), id);
                    id
                }
            };
            let Some(id) = id else { continue };
            let source = sources[&o].expect("an id has a source");
            per_node
                .entry(source)
                .or_default()
                .points
                .push((id, c.time[i], c.value[i]));
        }
        let mut out = Vec::new();
        for (source, NodePoints { points, new_series }) in per_node {
            let node = &mut self.nodes[source as usize - 1];
            // The agent read every series of a tick at one timestamp: the
            // distinct times are the ticks, and a series without a point at a
            // tick reads NaN there, as an unreadable sample would.
            let ticks = distinct(points.iter().map(|p| p.1));
            let ids = distinct(points.iter().map(|p| p.0));
            let mut values = vec![f64::NAN; ids.len() * ticks.len()];
            for (id, time, value) in points {
                let s = ids.binary_search(&id).expect("collected above");
                let t = ticks.binary_search(&time).expect("collected above");
                values[s * ticks.len() + t] = value;
            }
            let batch = SampleBatch {
                new_series,
                timestamps: ticks,
                series: ids,
                values,
            };
            // Well-formed by construction, so an error here cannot happen.
            if let Ok(ms) = node.reader.read(batch) {
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
    use sonde_plugin_sdk::types::{PointColumns, SeriesKind};

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
