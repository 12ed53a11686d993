//! Each `stats_interval_s`: the runtime-statistics record (R2.4, the nodes'
//! use and the speed) appended to the `runtime` stream, and the metrics
//! emitted from it (speed, global step, workers, shards by state).

use sonde_plugin_sdk::types::{Attribute, MetricDesc, MetricKind, PointBatch, Severity};

use super::Master;
use super::store::to_json;
use crate::model::{NodeStat, Resource, RuntimeStat};
use sonde_plugin_sdk::Host;

impl Master {
    /// One runtime-statistics record: every running typed node's mean use
    /// over the interval, the global step and the smoothed speed.
    pub fn record_stats(&mut self, host: &mut dyn Host, now: u64) {
        let mut nodes = Vec::new();
        for n in self.nodes.values_mut() {
            if n.usage.latest.is_none() {
                continue;
            }
            let (cpu, mem) = n.usage.take_mean();
            if let (Some(kind), true) = (n.kind, n.running()) {
                nodes.push(NodeStat {
                    name: n.name.clone(),
                    kind,
                    used: Resource::new(cpu, mem),
                    config: n.effective_config(),
                });
            }
        }
        let speed = self.perf.speed(self.settings.speed_window_s);
        let rec = RuntimeStat {
            time_ns: now,
            global_step: self.perf.last_step().unwrap_or(0),
            speed,
            worker_num: self.running_trainers() as u32,
            nodes,
        };
        self.emit_metrics(host, &rec, now);
        if rec.nodes.is_empty() && rec.global_step == 0 {
            return;
        }
        match host.state_append("runtime", &to_json(&rec)) {
            Ok(seq) => {
                let keep = self.settings.stats_keep as u64;
                if seq > keep && seq % 32 == 0 {
                    host.state_trim("runtime", seq + 1 - keep);
                }
            }
            Err(e) => {
                self.counters.state_errors += 1;
                host.log(
                    Severity::Error,
                    &format!("dlrover: appending a runtime record failed: {e}"),
                );
            }
        }
        self.stats.push_back(rec);
        while self.stats.len() > self.settings.stats_keep as usize {
            self.stats.pop_front();
        }
    }

    fn metric(
        &mut self,
        host: &mut dyn Host,
        name: &str,
        unit: &str,
        desc: &str,
        attrs: &[(&str, &str)],
    ) -> Option<u32> {
        let key = format!("{name}{attrs:?}");
        if let Some(h) = self.metric_handles.get(&key) {
            return Some(*h);
        }
        let d = MetricDesc::new(name, MetricKind::Gauge, unit, desc)
            .with_attributes(attrs.iter().map(|(k, v)| Attribute::new(*k, *v)).collect());
        let h = host.declare_metric(&d).ok()?;
        self.metric_handles.insert(key, h);
        Some(h)
    }

    fn emit_metrics(&mut self, host: &mut dyn Host, rec: &RuntimeStat, now: u64) {
        let mut pts = PointBatch::default();
        let mut push = |h: Option<u32>, v: f64| {
            if let Some(h) = h {
                pts.series.push(h);
                pts.time.push(now);
                pts.value.push(v);
            }
        };
        push(
            self.metric(
                host,
                "sonde.training.speed",
                "{step}/s",
                "Global steps per second (smoothed)",
                &[],
            ),
            rec.speed,
        );
        push(
            self.metric(host, "sonde.training.global_step", "{step}", "Latest global step", &[]),
            rec.global_step as f64,
        );
        push(
            self.metric(host, "sonde.dlrover.workers", "{node}", "Running training nodes", &[]),
            rec.worker_num as f64,
        );
        let ds: Vec<(String, [f64; 4])> = self
            .datasets
            .values()
            .map(|d| {
                (
                    d.params.dataset_name.clone(),
                    [
                        d.todo_shards() as f64,
                        d.doing.len() as f64,
                        d.done_shards as f64,
                        d.dead_letter.len() as f64,
                    ],
                )
            })
            .collect();
        for (name, v) in ds {
            for (state, x) in ["todo", "doing", "done", "dead_letter"].iter().zip(v) {
                let h = self.metric(
                    host,
                    "sonde.dlrover.shards",
                    "{shard}",
                    "Shards by state",
                    &[("dlrover.dataset", &name), ("dlrover.shard.state", state)],
                );
                push(h, x);
            }
        }
        if !pts.series.is_empty() {
            host.emit_points(&pts);
        }
    }
}
