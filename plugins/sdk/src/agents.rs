//! Agents' forwarded samples, regrouped per node into the sample layout.
//!
//! On a cluster master a plugin does not sample the nodes a job runs on:
//! each node's sonde agent samples its own machine and exports the result to
//! the master, where plugins see it as `points` events. An agent's own
//! telemetry has no job and names its node (its `host.name`). The agent
//! exports every host series under the host's own metric name, unit and
//! attributes, so once a node's points are regrouped into per-tick columns
//! ([`SampleBatch`], one per node) they read exactly like this host's own
//! samples: a plugin keeps one reader per node and judges a rank against the
//! machine it ran on, not the master's.
//!
//! ```text
//!  EventBatch.points ──AgentSeries::read(batch, keep)──► [(node id, SampleBatch)] ──► the plugin's reader of that node
//! ```
//! Limits: [`MAX_NODES`] nodes and [`MAX_SERIES_PER_NODE`] series per node;
//! what is past them is counted in `ignored` and left out.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::types::{Attribute, EventBatch, Origin, SampleBatch, SeriesInfo, Value};

/// Nodes followed at most.
pub const MAX_NODES: usize = 4096;

/// Distinct series per node at most (a node has a few dozen).
pub const MAX_SERIES_PER_NODE: usize = 4096;

/// A node that forwarded samples: 1, 2, ... in the order first seen. 0 is
/// never a node's; plugins use it for this host's own samples.
pub type NodeId = u16;

/// Whether an origin is a sonde agent's own telemetry: no job, a node.
pub fn is_agent(o: &Origin) -> bool {
    o.job.is_empty() && !o.node.is_empty()
}

/// The attributes that name the sender of a series rather than tell series
/// apart (dropped by [`host_series`], so an all-CPU series again has only `cpu.mode`).
pub fn is_sender_attribute(key: &str) -> bool {
    matches!(key, "host.name" | "sonde.job") || key.starts_with("service.")
}

/// The usual mapping of an agent's series onto the host series a plugin
/// samples locally: kept when its metric is in `metrics`, with the sender's
/// attributes dropped.
pub fn host_series(info: &SeriesInfo, metrics: &[&str]) -> Option<(String, Vec<Attribute>)> {
    if !metrics.contains(&info.metric.as_str()) {
        return None;
    }
    let attributes = info
        .attributes
        .iter()
        .filter(|a| !is_sender_attribute(&a.key))
        .cloned()
        .collect();
    Some((info.metric.clone(), attributes))
}

/// One node's series ids.
#[derive(Debug)]
struct Node {
    name: Arc<str>,
    ids: HashMap<String, u32>,
}

/// Every agent's series seen so far, by node.
#[derive(Debug, Default)]
pub struct AgentSeries {
    nodes: Vec<Node>,
    by_name: HashMap<Arc<str>, NodeId>,
    /// Series refused for the bounds, once per event batch each.
    pub ignored: u64,
}

/// One node's share of an event batch.
#[derive(Default)]
struct NodePoints {
    points: Vec<(u32, u64, f64)>,
    new_series: Vec<SeriesInfo>,
}

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

impl AgentSeries {
    /// Whether `node` has forwarded samples (so it has an agent).
    pub fn has(&self, node: &str) -> bool {
        self.by_name.contains_key(node)
    }

    /// The id of a node that forwarded samples.
    pub fn id(&self, node: &str) -> Option<NodeId> {
        self.by_name.get(node).copied()
    }

    /// The node an id stands for (`""` for none).
    pub fn node(&self, id: NodeId) -> &str {
        self.nodes.get((id as usize).wrapping_sub(1)).map_or("", |n| &n.name)
    }

    fn source(&mut self, node: &str) -> Option<NodeId> {
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
        });
        let s = self.nodes.len() as NodeId;
        self.by_name.insert(name, s);
        Some(s)
    }

    fn series_id(
        &mut self,
        node: NodeId,
        mapped: (String, Vec<Attribute>),
        info: &SeriesInfo,
        new_series: &mut Vec<SeriesInfo>,
    ) -> Option<u32> {
        let (metric, attributes) = mapped;
        let n = &mut self.nodes[node as usize - 1];
        let key = series_key(&metric, &attributes);
        if let Some(&id) = n.ids.get(&key) {
            return Some(id);
        }
        if n.ids.len() >= MAX_SERIES_PER_NODE {
            self.ignored += 1;
            return None;
        }
        let id = n.ids.len() as u32;
        n.ids.insert(key, id);
        new_series.push(SeriesInfo {
            id,
            metric,
            attributes,
            ..info.clone()
        });
        Some(id)
    }

    /// The agents' points in an event batch that `keep` maps onto a host
    /// series (metric and attributes; `None` leaves the series out), as one
    /// sample batch per node, nodes in id order. A series is described in
    /// `new_series` the first time its node sends it.
    pub fn read(
        &mut self,
        batch: &EventBatch,
        mut keep: impl FnMut(&SeriesInfo) -> Option<(String, Vec<Attribute>)>,
    ) -> Vec<(NodeId, SampleBatch)> {
        let Some(c) = &batch.points else { return Vec::new() };
        let mut per_node: BTreeMap<NodeId, NodePoints> = BTreeMap::new();
        // An agent sends thousands of points per batch over a few dozen
        // series: each origin and (origin, series) pair is resolved once.
        let mut sources: HashMap<u32, Option<NodeId>> = HashMap::new();
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
                        let mapped = keep(info)?;
                        self.series_id(
                            source,
                            mapped,
                            info,
                            &mut per_node.entry(source).or_default().new_series,
                        )
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
        per_node
            .into_iter()
            .map(|(source, NodePoints { points, new_series })| {
                // The agent read every series of a tick at one timestamp: the
                // distinct times are the ticks, and a series without a point
                // at a tick reads NaN there, as an unreadable sample would.
                let ticks = distinct(points.iter().map(|p| p.1));
                let series = distinct(points.iter().map(|p| p.0));
                let mut values = vec![f64::NAN; series.len() * ticks.len()];
                for (id, time, value) in points {
                    let s = series.binary_search(&id).expect("collected above");
                    let t = ticks.binary_search(&time).expect("collected above");
                    values[s * ticks.len() + t] = value;
                }
                let batch = SampleBatch {
                    new_series,
                    timestamps: ticks,
                    series,
                    values,
                };
                (source, batch)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{PointColumns, SeriesKind};

    fn origin(job: &str, node: &str) -> Origin {
        Origin {
            job: job.into(),
            node: node.into(),
            index: -1,
            rank: -1,
            local_rank: -1,
            ..Default::default()
        }
    }

    fn cpu_idle(id: u32, extra: &[(&str, &str)]) -> SeriesInfo {
        let mut attributes = vec![Attribute::new("cpu.mode", "idle")];
        attributes.extend(extra.iter().map(|(k, v)| Attribute::new(*k, *v)));
        SeriesInfo {
            id,
            metric: "system.cpu.utilization".into(),
            unit: "1".into(),
            kind: SeriesKind::Gauge,
            attributes,
        }
    }

    #[test]
    fn each_agents_points_become_its_nodes_sample_batch() {
        let mut a = AgentSeries::default();
        let mut b = EventBatch {
            origins: vec![origin("", "node-a"), origin("", "node-b"), origin("job", "node-a")],
            point_series: vec![cpu_idle(0, &[("host.name", "node-a")])],
            ..Default::default()
        };
        b.points = Some(PointColumns {
            origin: vec![0, 1, 0, 2],
            series: vec![0, 0, 0, 0],
            time: vec![1, 1, 2, 1],
            value: vec![0.75, 0.25, 0.5, 0.1],
        });
        let out = a.read(&b, |i| host_series(i, &["system.cpu.utilization"]));
        assert_eq!(out.len(), 2, "a job's own metric of the same name is no node's sample");
        let (id, sb) = &out[0];
        assert_eq!(a.node(*id), "node-a");
        assert_eq!(sb.timestamps, [1, 2]);
        assert_eq!(sb.values, [0.75, 0.5]);
        assert_eq!(
            sb.new_series[0].attributes.len(),
            1,
            "the sender's host.name is dropped"
        );
        assert_eq!(a.node(out[1].0), "node-b");
        assert!(a.has("node-b") && !a.has("job") && a.id("node-a") == Some(1));
        // Known series are not described again.
        let again = a.read(&b, |i| host_series(i, &["system.cpu.utilization"]));
        assert!(again[0].1.new_series.is_empty());
        // A mapping that keeps nothing yields nothing.
        assert!(a.read(&b, |_| None).is_empty());
    }
}
