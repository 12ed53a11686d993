//! What the host hands the master: its own samples (this node's resources),
//! and the job's reports: global-step progress, step timings, heartbeats,
//! other sondes' points (gateway mode) and node events. Each keeps the node
//! registry up to date.

use std::collections::BTreeMap;

use serde_json::json;
use sonde_plugin_sdk::SampleView;
use sonde_plugin_sdk::types::{Attribute, EventBatch, NodeEvent, SampleBatch};

use super::Master;
use super::store::to_json;
use crate::failures::{self, ExitReason};
use crate::model::{NS, NodeType, secs};
use crate::nodes::{Node, Status, origin_node};
use crate::stats::{SampleBuilder, role};
use sonde_plugin_sdk::Host;

fn attr_f64(attrs: &[Attribute], keys: &[&str]) -> Option<f64> {
    use sonde_plugin_sdk::types::Value as V;
    attrs
        .iter()
        .find(|a| keys.contains(&a.key.as_str()))
        .and_then(|a| match &a.value {
            V::Int(i) => Some(*i as f64),
            V::Float(f) => Some(*f),
            V::Str(s) => s.parse().ok().or_else(|| crate::settings::parse_quantity_mib(s).ok()),
            V::Boolean(b) => Some(f64::from(u8::from(*b))),
        })
}

impl Master {
    /// The host's own samples: this node's resources.
    pub fn on_samples(&mut self, host: &mut dyn Host, mut batch: SampleBatch) -> Result<(), String> {
        self.series.absorb(&mut batch);
        let view = SampleView::new(&batch)?;
        let mut b = SampleBuilder::default();
        for s in view.iter() {
            let Some(info) = self.series.get(s.id) else { continue };
            let Some(r) = role(info) else { continue };
            for (t, v) in s.points() {
                b.add(&r, t, v);
            }
        }
        let name = self.settings.node.clone();
        let samples = b.finish(self.settings.cpu_count);
        self.take_samples(&name, "host", samples);
        let _ = host;
        Ok(())
    }

    fn take_samples(&mut self, name: &str, source: &str, samples: Vec<crate::stats::ResourceSample>) {
        if samples.is_empty() {
            return;
        }
        self.counters.samples += samples.len() as u64;
        let n = self.node(name);
        if n.source != source {
            n.source = source.to_string();
        }
        for s in samples {
            if let Some(c) = s.cpu_count {
                n.capacity.cpu = c as f64;
            }
            if let Some(m) = s.memory_limit_mib {
                n.capacity.memory_mib = m;
            }
            if !s.gpus.is_empty() {
                n.gpu = true;
            }
            n.usage.add(s);
        }
    }

    pub fn on_events(&mut self, host: &mut dyn Host, batch: EventBatch) {
        let now = host.now();
        // The host's own reports (role "host", no job: its GPU events) are
        // about this master's node, whatever job runs on it.
        let from_host = |o: &sonde_plugin_sdk::types::Origin| o.role == "host" && o.job.is_empty();
        let names: Vec<String> = batch
            .origins
            .iter()
            .map(|o| {
                if from_host(o) {
                    self.settings.node.clone()
                } else {
                    origin_node(o)
                }
            })
            .collect();
        let ours: Vec<bool> = batch
            .origins
            .iter()
            .map(|o| self.settings.job.is_empty() || o.job == self.settings.job || from_host(o))
            .collect();
        let ok = |i: u32| ours.get(i as usize).copied().unwrap_or(false);
        for (i, o) in batch.origins.iter().enumerate() {
            if ours[i] && !o.job.is_empty() && !self.jobs_seen.contains(&o.job) {
                self.jobs_seen.insert(o.job.clone());
            }
            if ours[i]
                && let Some(k) = NodeType::from_role(&o.role)
            {
                self.typed(&names[i], k, o.index);
            }
        }
        if let Some(p) = &batch.progress {
            let mut appended = false;
            for i in 0..p.origin.len() {
                let name = batch.names.get(p.name[i] as usize).map(String::as_str).unwrap_or("");
                if name != self.settings.step_name {
                    continue;
                }
                if !ok(p.origin[i]) {
                    self.counters.ignored_other_job += 1;
                    continue;
                }
                self.counters.steps += 1;
                self.alive(host, &names[p.origin[i] as usize], now);
                let workers = self.running_trainers() as u32;
                appended |= self.perf.add(p.value[i], p.time[i], workers);
            }
            if appended {
                let b = to_json(&self.perf);
                let _ = self.put(host, "perf", &b);
            }
        }
        if let Some(t) = &batch.timings {
            for i in 0..t.origin.len() {
                let name = batch.names.get(t.name[i] as usize).map(String::as_str).unwrap_or("");
                if name != self.settings.step_timing_name || !ok(t.origin[i]) || t.end[i] < t.start[i] {
                    continue;
                }
                self.counters.step_timings += 1;
                let node = names[t.origin[i] as usize].clone();
                self.alive(host, &node, now);
                let keep = self.settings.straggler_window as usize;
                let n = self.node(&node);
                n.step_times.push_back(secs(t.start[i], t.end[i]));
                n.last_step_ns = now;
                while n.step_times.len() > keep {
                    n.step_times.pop_front();
                }
            }
        }
        if let Some(h) = &batch.heartbeats {
            for i in 0..h.origin.len() {
                if ok(h.origin[i]) {
                    self.counters.heartbeats += 1;
                    self.alive(host, &names[h.origin[i] as usize], now);
                }
            }
        }
        if let Some(p) = &batch.points {
            let mut per_node: BTreeMap<usize, SampleBuilder> = BTreeMap::new();
            let roles: Vec<Option<crate::stats::Role>> = batch.point_series.iter().map(role).collect();
            for i in 0..p.origin.len() {
                let Some(Some(r)) = roles.get(p.series[i] as usize) else {
                    continue;
                };
                per_node
                    .entry(p.origin[i] as usize)
                    .or_default()
                    .add(r, p.time[i], p.value[i]);
                self.counters.gateway_points += 1;
            }
            for (o, b) in per_node {
                let name = names[o].clone();
                self.take_samples(&name, "gateway", b.finish(None));
            }
        }
        for ev in &batch.node_events {
            if !ok(ev.origin) {
                self.counters.ignored_other_job += 1;
                continue;
            }
            let name = names[ev.origin as usize].clone();
            self.handle_node_event(host, &name, ev, now);
        }
        if self.nodes_dirty && now.saturating_sub(self.last_nodes_put_ns) >= NS {
            self.put_nodes(host, now);
        }
    }

    pub(super) fn node(&mut self, name: &str) -> &mut Node {
        if !self.nodes.contains_key(name) {
            self.nodes_dirty = true;
        }
        self.nodes.entry(name.to_string()).or_insert_with(|| Node::new(name))
    }

    /// A sign of life from a node (heartbeat, report, route call).
    pub fn alive(&mut self, host: &mut dyn Host, name: &str, now: u64) {
        let n = self.node(name);
        n.last_heartbeat_ns = n.last_heartbeat_ns.max(now);
        let recovered = n.exit_reason == Some(ExitReason::NoHeartBeat) && n.status == Status::Failed;
        if matches!(n.status, Status::Unknown | Status::Pending) || recovered {
            n.status = Status::Running;
            n.started_ns = now;
            n.pending_since_ns = None;
            n.exit_reason = None;
            self.nodes_dirty = true;
        }
        if recovered {
            self.record(
                host,
                "node-recovered",
                name,
                "heartbeats again after it was declared dead",
                json!({}),
            );
        }
    }

    /// Sets a node's type from a reporter's role (the settings' type wins).
    pub fn typed(&mut self, name: &str, kind: NodeType, index: i32) {
        if self.settings.nodes.get(name).is_some_and(|s| s.kind.is_some()) {
            return;
        }
        let n = self.node(name);
        if n.kind.is_none() || (n.kind != Some(kind) && index >= 0) || (n.index < 0 && index >= 0) {
            n.kind = Some(kind);
            n.index = index;
            self.nodes_dirty = true;
        }
    }

    pub fn handle_node_event(&mut self, host: &mut dyn Host, name: &str, ev: &NodeEvent, now: u64) {
        self.counters.node_events += 1;
        {
            let n = self.node(name);
            if let Some(c) = attr_f64(&ev.attributes, &["cpu", "dlrover.cpu"]) {
                n.config.cpu = c;
            }
            if let Some(m) = attr_f64(&ev.attributes, &["memory_mib", "dlrover.memory_mib"]) {
                n.config.memory_mib = m;
            }
            if let Some(g) = attr_f64(&ev.attributes, &["gpu", "dlrover.gpu"]) {
                n.gpu = g > 0.0;
            }
        }
        self.nodes_dirty = true;
        let kind = ev.kind.to_ascii_lowercase();
        match kind.as_str() {
            "pending" => {
                let n = self.node(name);
                n.status = Status::Pending;
                n.pending_since_ns.get_or_insert(ev.time.min(now));
            }
            "started" | "running" | "restarted" | "recovered" => {
                let n = self.node(name);
                if kind == "restarted" {
                    n.relaunch_count += 1;
                }
                n.status = Status::Running;
                n.started_ns = now;
                n.last_heartbeat_ns = n.last_heartbeat_ns.max(now);
                n.pending_since_ns = None;
                n.exit_reason = None;
                n.exit_code = None;
                n.hung = false;
                self.scaler.node_running(name);
            }
            _ => {
                if let Some(reason) = failures::exit_reason(&kind, ev.exit_code, &ev.reason) {
                    self.node_ended(host, name, reason, ev.exit_code, &ev.reason, now);
                }
            }
        }
    }

    pub fn running_trainers(&self) -> usize {
        self.nodes.values().filter(|n| n.running() && n.trains()).count()
    }
}
