//! The plugin's settings (`start-info.settings` and `configure`): a JSON
//! object whose keys are all optional. Unknown keys, wrong types and values
//! out of range are refused with a message naming the key.
//!
//! Memory is MiB everywhere. A memory setting is either a number (MiB) or a
//! Kubernetes quantity string ("8Gi", "8192Mi", "8G", "500M", "1073741824"
//! = bytes), converted to MiB when read: limits never meet caps of another
//! unit (DLRover's defect D1).

use std::collections::BTreeMap;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};
use sonde_plugin_sdk::settings;
use sonde_plugin_sdk::types::SampleRequest;

use crate::model::NodeType;

/// Memory in MiB, read from a number (MiB) or a quantity string.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
#[serde(transparent)]
pub struct Mib(pub f64);

impl<'de> Deserialize<'de> for Mib {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Mib, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Num(f64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Num(n) if n >= 0.0 && n.is_finite() => Ok(Mib(n)),
            Raw::Num(n) => Err(de::Error::custom(format!("memory {n} must be >= 0 (MiB)"))),
            Raw::Text(s) => parse_quantity_mib(&s).map(Mib).map_err(de::Error::custom),
        }
    }
}

/// A Kubernetes memory quantity in MiB: binary suffixes Ki/Mi/Gi/Ti, decimal
/// k/M/G/T, none = bytes.
pub fn parse_quantity_mib(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("memory {s:?} is not a number or a quantity like \"8Gi\""))?;
    let bytes_per = match unit {
        "" => 1.0,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024f64.powi(4),
        "k" | "K" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        _ => {
            return Err(format!(
                "memory {s:?}: unknown unit {unit:?} (Ki, Mi, Gi, Ti, k, M, G, T)"
            ));
        }
    };
    if !(n >= 0.0 && n.is_finite()) {
        return Err(format!("memory {s:?} must be >= 0"));
    }
    Ok(n * bytes_per / (1024.0 * 1024.0))
}

/// Which optimizer makes the plans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// DLRover's single-job local optimizer (reference sections 3-5).
    Local,
    /// The Brain service's algorithms (reference section 6).
    Brain,
}

/// PS training or elastic all-reduce (OOM relaunch rules differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobType {
    Ps,
    Allreduce,
}

/// The job's resource limits (DLRover's ResourceLimits).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    pub cpu: f64,
    pub memory: Mib,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            cpu: 100.0,
            memory: Mib(102_400.0),
        }
    }
}

/// What the user set for a node type; 0 = not set.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UserGroup {
    pub count: u32,
    pub cpu: f64,
    pub memory: Mib,
}

#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct User {
    pub worker: UserGroup,
    pub ps: UserGroup,
}

/// DLRover's NodeResourceLimit table, applied to every emitted plan.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Clamp {
    pub enabled: bool,
    pub min_cpu: f64,
    pub max_cpu: f64,
    pub min_memory: Mib,
    pub max_memory: Mib,
    pub max_workers: u32,
    pub max_ps: u32,
}

impl Default for Clamp {
    fn default() -> Self {
        Clamp {
            enabled: true,
            min_cpu: 4.0,
            max_cpu: 32.0,
            min_memory: Mib(6144.0),
            max_memory: Mib(65_536.0),
            max_workers: 60,
            max_ps: 15,
        }
    }
}

/// A node's type and given resources, when no reporter says them.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NodeSpec {
    #[serde(rename = "type")]
    pub kind: Option<NodeType>,
    pub cpu: f64,
    pub memory: Mib,
    pub gpu: bool,
}

/// Elastic all-reduce with a fixed global batch (section 10).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GlobalBatch {
    /// N = WORKER_NUM x LOCAL_WORLD_SIZE, the configured maximum; 0 = off.
    pub max_world_size: u32,
    /// Processes per node, to turn alive worker nodes into a world size.
    pub local_world_size: u32,
}

impl Default for GlobalBatch {
    fn default() -> Self {
        GlobalBatch {
            max_world_size: 0,
            local_world_size: 1,
        }
    }
}

/// The Brain algorithms' parameters: the Go code's defaults; `configmap:
/// true` starts from the values manifests/k8s/brain-optimizer-configmap.yaml
/// sets instead. Any key given here overrides either.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Brain {
    pub configmap: bool,
    pub target_worker_count: Option<u32>,
    pub singular_comp_count: Option<u32>,
    pub ps_exhausted: Option<f64>,
    pub worker_decrease: Option<u32>,
    pub ps_overload: Option<f64>,
    pub worker_max_count_per_step: Option<u32>,
    /// `training-speed.less-percent`: honoured (DLRover's defect D8 ignored it).
    pub speed_less_percent: Option<f64>,
    pub worker_cpu_margin: Option<f64>,
    pub worker_memory_margin: Option<f64>,
    /// History window for PS create, days.
    pub history_days: f64,
}

impl Default for Brain {
    fn default() -> Self {
        Brain {
            configmap: false,
            target_worker_count: None,
            singular_comp_count: None,
            ps_exhausted: None,
            worker_decrease: None,
            ps_overload: None,
            worker_max_count_per_step: None,
            speed_less_percent: None,
            worker_cpu_margin: None,
            worker_memory_margin: None,
            history_days: 7.0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// Node name of this host's own samples (use the host's `host.name`).
    pub node: String,
    /// Only events of this job ("" = every job; one plugin is one job's master).
    pub job: String,
    pub strategy: Strategy,
    pub job_type: JobType,
    /// Progress name that carries the global step.
    pub step_name: String,
    /// Timing name of one training step (per-step times for stragglers).
    pub step_timing_name: String,
    /// The plugin's clock tick: how often it looks at what is due (heartbeat
    /// and task-timeout scans, runtime records, the plan loop, writing
    /// changed node state). 5 s by default, the sample delivery's period, so
    /// both share one wake-up: nothing it runs is due more often than every
    /// 15 s by default, and a 1 s tick woke an idle host five times as often
    /// for nothing (docs/benchmarks.md). Node state changed by an event is
    /// written at the next tick, at most this late.
    pub tick_ms: u64,
    pub sample_period_ms: u32,
    pub deliver_every_ms: u32,
    /// Logical CPUs of this host when its samples carry no per-core series.
    pub cpu_count: Option<u32>,
    /// One runtime-statistics record per interval.
    pub stats_interval_s: f64,
    /// Records kept in the host's stream.
    pub stats_keep: u32,
    /// Speed = steps over this window (records of one worker count).
    pub speed_window_s: f64,
    /// Global-step records kept (DLRover: 50).
    pub perf_records: u32,
    pub optimize_interval_s: f64,
    pub stable_window_s: f64,
    pub plan_interval_s: f64,
    pub ps_change_interval_s: f64,
    pub min_step_samples: u32,
    pub no_step_start_s: f64,
    pub pending_check_s: f64,
    pub pending_timeout_s: f64,
    pub migration_timeout_s: f64,
    /// A plan's worker count not reached within this long is given up
    /// (plans are advice here: nobody may apply them).
    pub plan_apply_timeout_s: f64,
    pub auto_worker: bool,
    pub auto_ps: bool,
    pub limits: Limits,
    pub user: User,
    pub clamp: Clamp,
    pub nodes: BTreeMap<String, NodeSpec>,
    pub heartbeat_timeout_s: f64,
    pub heartbeat_scan_s: f64,
    /// DOING shards older than this go back to TODO, whatever the task type.
    pub task_timeout_s: f64,
    /// Failures after which a shard goes to the dead-letter list.
    pub max_shard_failures: u32,
    pub max_relaunch: u32,
    pub relaunch_always: bool,
    pub hang_cpu_ratio: f64,
    pub hang_after_s: f64,
    /// `gpu-hang-suspected`: a GPU at or above `gpu_hang_busy` utilisation with
    /// SM activity at or below `gpu_hang_sm_idle` and no global-step progress,
    /// all for `gpu_hang_after_s`.
    pub gpu_hang_busy: f64,
    pub gpu_hang_sm_idle: f64,
    pub gpu_hang_after_s: f64,
    pub straggler_factor: f64,
    pub straggler_window: u32,
    pub straggler_min_steps: u32,
    pub max_shards_per_sub_epoch: u64,
    /// num_minibatches_per_shard when a registration sends 0 (DLRover's master: 100).
    pub default_minibatches_per_shard: u64,
    pub global_batch: GlobalBatch,
    pub brain: Brain,
    /// Brain: history jobs of this scenario.
    pub scenario: String,
    /// Brain: cap on total steps (0 = none).
    pub max_steps: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            node: "local".into(),
            job: String::new(),
            strategy: Strategy::Local,
            job_type: JobType::Ps,
            step_name: "global_step".into(),
            step_timing_name: "step".into(),
            tick_ms: 5000,
            sample_period_ms: 1000,
            deliver_every_ms: 5000,
            cpu_count: None,
            stats_interval_s: 15.0,
            stats_keep: 720,
            speed_window_s: 60.0,
            perf_records: 50,
            optimize_interval_s: 30.0,
            stable_window_s: 60.0,
            plan_interval_s: 300.0,
            ps_change_interval_s: 3600.0,
            min_step_samples: 5,
            no_step_start_s: 90.0,
            pending_check_s: 60.0,
            pending_timeout_s: 900.0,
            migration_timeout_s: 1800.0,
            plan_apply_timeout_s: 600.0,
            auto_worker: true,
            auto_ps: true,
            limits: Limits::default(),
            user: User::default(),
            clamp: Clamp::default(),
            nodes: BTreeMap::new(),
            heartbeat_timeout_s: 600.0,
            heartbeat_scan_s: 15.0,
            task_timeout_s: 1800.0,
            max_shard_failures: 4,
            max_relaunch: 3,
            relaunch_always: false,
            hang_cpu_ratio: 0.05,
            hang_after_s: 7200.0,
            gpu_hang_busy: 0.9,
            gpu_hang_sm_idle: 0.05,
            gpu_hang_after_s: 300.0,
            straggler_factor: 2.0,
            straggler_window: 20,
            straggler_min_steps: 5,
            max_shards_per_sub_epoch: 50_000,
            default_minibatches_per_shard: 100,
            global_batch: GlobalBatch::default(),
            brain: Brain::default(),
            scenario: String::new(),
            max_steps: 0,
        }
    }
}

/// The host series this plugin reads, as metric-name prefixes.
pub const SAMPLED_METRICS: [&str; 7] = [
    "system.cpu.utilization",
    "system.memory.usage",
    "system.memory.limit",
    "hw.gpu.utilization",
    "hw.gpu.memory.usage",
    "hw.gpu.memory.limit",
    "sonde.gpu.sm.active",
];

impl Settings {
    /// Parses settings JSON; missing keys take their defaults, "" counts as `{}`.
    pub fn parse(json: &str) -> Result<Settings, String> {
        let s: Settings = settings::parse_json("dlrover", json)?;
        s.validate()?;
        Ok(s)
    }

    fn validate(&self) -> Result<(), String> {
        let positive = [
            ("stats_interval_s", self.stats_interval_s),
            ("speed_window_s", self.speed_window_s),
            ("optimize_interval_s", self.optimize_interval_s),
            ("heartbeat_timeout_s", self.heartbeat_timeout_s),
            ("heartbeat_scan_s", self.heartbeat_scan_s),
            ("task_timeout_s", self.task_timeout_s),
            ("pending_check_s", self.pending_check_s),
            ("straggler_factor", self.straggler_factor),
            ("hang_after_s", self.hang_after_s),
            ("gpu_hang_after_s", self.gpu_hang_after_s),
            ("limits.cpu", self.limits.cpu),
            ("limits.memory", self.limits.memory.0),
        ];
        for (k, v) in positive {
            if !(v > 0.0 && v.is_finite()) {
                return Err(format!("setting `{k}` must be > 0, got {v}"));
            }
        }
        let non_negative = [
            ("stable_window_s", self.stable_window_s),
            ("plan_interval_s", self.plan_interval_s),
            ("ps_change_interval_s", self.ps_change_interval_s),
            ("no_step_start_s", self.no_step_start_s),
            ("pending_timeout_s", self.pending_timeout_s),
            ("migration_timeout_s", self.migration_timeout_s),
            ("plan_apply_timeout_s", self.plan_apply_timeout_s),
            ("hang_cpu_ratio", self.hang_cpu_ratio),
        ];
        for (k, v) in non_negative {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(format!("setting `{k}` must be >= 0, got {v}"));
            }
        }
        if self.tick_ms < 10 {
            return Err(format!("setting `tick_ms` must be >= 10, got {}", self.tick_ms));
        }
        if self.sample_period_ms < 10 || self.deliver_every_ms < self.sample_period_ms {
            return Err(format!(
                "setting `sample_period_ms` must be >= 10 and `deliver_every_ms` >= it, got {} and {}",
                self.sample_period_ms, self.deliver_every_ms
            ));
        }
        for (k, v) in [
            ("max_shard_failures", self.max_shard_failures as u64),
            ("stats_keep", self.stats_keep as u64),
            ("perf_records", self.perf_records as u64),
            ("max_shards_per_sub_epoch", self.max_shards_per_sub_epoch),
            ("default_minibatches_per_shard", self.default_minibatches_per_shard),
            ("straggler_window", self.straggler_window as u64),
            (
                "global_batch.local_world_size",
                self.global_batch.local_world_size as u64,
            ),
        ] {
            if v == 0 {
                return Err(format!("setting `{k}` must be >= 1"));
            }
        }
        if self.perf_records < 2 {
            return Err("setting `perf_records` must be >= 2".into());
        }
        if self.node.trim().is_empty() {
            return Err("setting `node` must not be empty".into());
        }
        if self.clamp.min_cpu > self.clamp.max_cpu || self.clamp.min_memory.0 > self.clamp.max_memory.0 {
            return Err("setting `clamp` minimum above its maximum".into());
        }
        Ok(())
    }

    pub fn sample_request(&self) -> SampleRequest {
        SampleRequest {
            period_ms: self.sample_period_ms,
            deliver_every_ms: self.deliver_every_ms,
            metrics: SAMPLED_METRICS.iter().map(|m| m.to_string()).collect(),
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("settings serialize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_empty() {
        assert_eq!(Settings::parse("").unwrap(), Settings::default());
        assert_eq!(Settings::parse("{}").unwrap(), Settings::default());
        let d = Settings::default();
        assert_eq!(d.heartbeat_timeout_s, 600.0);
        assert_eq!(d.optimize_interval_s, 30.0);
        assert_eq!(d.stable_window_s, 60.0);
        assert_eq!(d.plan_interval_s, 300.0);
        assert_eq!(d.ps_change_interval_s, 3600.0);
        assert_eq!(d.max_shard_failures, 4);
    }

    #[test]
    fn quantities_are_mib() {
        for (q, mib) in [
            ("8Gi", 8192.0),
            ("8192Mi", 8192.0),
            ("1073741824", 1024.0),
            ("512Ki", 0.5),
            ("1G", 1e9 / 1048576.0),
        ] {
            assert!((parse_quantity_mib(q).unwrap() - mib).abs() < 1e-9, "{q}");
        }
        assert!(parse_quantity_mib("8Qi").is_err());
        assert!(parse_quantity_mib("lots").is_err());
        let s = Settings::parse(r#"{"limits": {"cpu": 10, "memory": "16Gi"}, "user": {"worker": {"memory": 4096}}}"#)
            .unwrap();
        assert_eq!(s.limits.memory.0, 16384.0);
        assert_eq!(s.user.worker.memory.0, 4096.0);
    }

    #[test]
    fn errors_name_the_key() {
        for (json, needle) in [
            (r#"{"heartbeat_timeout": 5}"#, "heartbeat_timeout"),
            (r#"{"strategy": "magic"}"#, "magic"),
            (r#"{"heartbeat_timeout_s": 0}"#, "heartbeat_timeout_s"),
            (r#"{"limits": {"cpu": 4, "mem": 1}}"#, "mem"),
            (r#"{"max_shard_failures": 0}"#, "max_shard_failures"),
            (r#"{"node": " "}"#, "node"),
            (
                r#"{"sample_period_ms": 1000, "deliver_every_ms": 10}"#,
                "deliver_every_ms",
            ),
            ("[1]", "invalid settings"),
        ] {
            let e = Settings::parse(json).unwrap_err();
            assert!(e.contains(needle), "{json}: {e}");
            // sonde shows the message under the plugin's name.
            assert!(!e.contains("dlrover"), "{json}: {e}");
        }
    }
}
