//! What the plugin emits, by Determined metric: the semantic-convention
//! metric it becomes (name, unit, instrument, attributes), the unit and scale
//! of Determined's batch format, and the batch JSON itself.

use serde::Serialize;
use sonde_plugin_sdk::types::{Attribute, MetricDesc, MetricKind};

/// Determined's system metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SysMetric {
    Cpu,
    FreeMemory,
    NetSent,
    NetRecv,
    DiskRead,
    DiskWrite,
    DiskIops,
    GpuUtil,
    GpuFreeMemory,
}

/// Determined's three series types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MetricType {
    System,
    Timing,
    Misc,
}

impl MetricType {
    pub const ALL: [MetricType; 3] = [MetricType::System, MetricType::Timing, MetricType::Misc];

    /// The `determined.metric_type` attribute.
    pub fn attr(self) -> &'static str {
        match self {
            MetricType::System => "system",
            MetricType::Timing => "timing",
            MetricType::Misc => "misc",
        }
    }

    /// The `type` of Determined's batch format.
    pub fn label(self) -> &'static str {
        match self {
            MetricType::System => "SYSTEM",
            MetricType::Timing => "TIMING",
            MetricType::Misc => "MISC",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// How one Determined metric is exported.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spec {
    /// Determined's name (`determined.metric`); for timings, the timing's name instead.
    pub determined: &'static str,
    pub metric: &'static str,
    pub unit: &'static str,
    pub kind: MetricKind,
    pub description: &'static str,
    /// A fixed attribute that tells this series apart from its siblings.
    pub extra: Option<(&'static str, &'static str)>,
    pub metric_type: MetricType,
    /// Determined's unit, and (multiplier, divisor) from the metric's unit
    /// to it (dividing by 1e9 rounds better than multiplying by 1e-9).
    pub determined_unit: &'static str,
    pub scale: (f64, f64),
}

impl Spec {
    /// A value in the metric's unit, in Determined's unit.
    pub fn to_determined(&self, value: f64) -> f64 {
        value * self.scale.0 / self.scale.1
    }
}

const fn sys(
    determined: &'static str,
    metric: &'static str,
    unit: &'static str,
    kind: MetricKind,
    description: &'static str,
    extra: Option<(&'static str, &'static str)>,
    (determined_unit, scale): (&'static str, (f64, f64)),
) -> Spec {
    Spec {
        determined,
        metric,
        unit,
        kind,
        description,
        extra,
        metric_type: MetricType::System,
        determined_unit,
        scale,
    }
}

impl SysMetric {
    pub const ALL: [SysMetric; 9] = [
        SysMetric::Cpu,
        SysMetric::FreeMemory,
        SysMetric::NetSent,
        SysMetric::NetRecv,
        SysMetric::DiskRead,
        SysMetric::DiskWrite,
        SysMetric::DiskIops,
        SysMetric::GpuUtil,
        SysMetric::GpuFreeMemory,
    ];

    pub fn spec(self) -> Spec {
        use MetricKind::{Gauge, UpdownCounter};
        match self {
            // A sonde name: the conventions' `system.cpu.utilization` is per
            // `cpu.mode`, and this is one share over the busy modes.
            SysMetric::Cpu => sys(
                "cpu_util_simple",
                "sonde.cpu.busy",
                "1",
                Gauge,
                "Fraction of time the CPUs were busy (every mode but idle and iowait), while profiling a job",
                None,
                ("percent", (100.0, 1.0)),
            ),
            SysMetric::FreeMemory => sys(
                "free_memory",
                "system.memory.linux.available",
                "By",
                UpdownCounter,
                "Memory available to start new work, while profiling a job",
                None,
                ("GB", (1.0, 1e9)),
            ),
            SysMetric::NetSent => sys(
                "net_throughput_sent",
                "sonde.network.throughput",
                "bit/s",
                Gauge,
                "Network throughput of all interfaces but loopback, while profiling a job",
                Some(("network.io.direction", "transmit")),
                ("Gbit/s", (1.0, 1e9)),
            ),
            SysMetric::NetRecv => sys(
                "net_throughput_recv",
                "sonde.network.throughput",
                "bit/s",
                Gauge,
                "Network throughput of all interfaces but loopback, while profiling a job",
                Some(("network.io.direction", "receive")),
                ("Gbit/s", (1.0, 1e9)),
            ),
            SysMetric::DiskRead => sys(
                "disk_throughput_read",
                "sonde.disk.throughput",
                "By/s",
                Gauge,
                "Disk throughput of all whole disks, while profiling a job",
                Some(("disk.io.direction", "read")),
                ("bytes/s", (1.0, 1.0)),
            ),
            SysMetric::DiskWrite => sys(
                "disk_throughput_write",
                "sonde.disk.throughput",
                "By/s",
                Gauge,
                "Disk throughput of all whole disks, while profiling a job",
                Some(("disk.io.direction", "write")),
                ("bytes/s", (1.0, 1.0)),
            ),
            SysMetric::DiskIops => sys(
                "disk_iops",
                "sonde.disk.operations.rate",
                "{operation}/s",
                Gauge,
                "Disk reads plus writes per second over all whole disks, while profiling a job",
                None,
                ("ops/s", (1.0, 1.0)),
            ),
            SysMetric::GpuUtil => sys(
                "gpu_util",
                "hw.gpu.utilization",
                "1",
                Gauge,
                "Fraction of time the GPU was busy, while profiling a job",
                None,
                ("percent", (100.0, 1.0)),
            ),
            SysMetric::GpuFreeMemory => sys(
                "gpu_free_memory",
                "sonde.gpu.memory.free",
                "By",
                UpdownCounter,
                "GPU memory free (limit - usage), while profiling a job",
                None,
                ("bytes", (1.0, 1.0)),
            ),
        }
    }
}

pub const TIMING: Spec = Spec {
    determined: "",
    metric: "sonde.timing.duration",
    unit: "s",
    kind: MetricKind::Gauge,
    description: "Duration of a timed section of a training loop (Determined timing)",
    extra: None,
    metric_type: MetricType::Timing,
    determined_unit: "seconds",
    scale: (1.0, 1.0),
};

pub const SAMPLES_PER_SECOND: Spec = Spec {
    determined: "samples_per_second",
    metric: "sonde.training.samples_per_second",
    unit: "{sample}/s",
    kind: MetricKind::Gauge,
    description: "Training throughput a job reported",
    extra: None,
    metric_type: MetricType::Misc,
    determined_unit: "samples/s",
    scale: (1.0, 1.0),
};

pub const BATCH_INDEX_METRIC: &str = "sonde.batch.index";
pub const DROPPED_METRIC: &str = "sonde.profiler.dropped";

/// Point-series metric names a job's throughput arrives under.
pub fn is_samples_per_second(metric: &str) -> bool {
    metric == "samples_per_second" || metric == "determined.samples_per_second"
}

/// The metric series of one (job, Determined metric, GPU, node, rank).
/// `host.name` is the node the measurement was taken on (a job's nodes are
/// told apart by it); `determined.rank` is the rank a timing or throughput
/// came from (system metrics belong to a node, not a rank).
pub fn metric_desc(
    spec: &Spec,
    job: &str,
    determined_name: &str,
    gpu_uuid: &str,
    node: &str,
    rank: Option<i32>,
) -> MetricDesc {
    let mut attrs = vec![
        Attribute::new("determined.trial", job),
        Attribute::new("determined.metric", determined_name),
        Attribute::new("determined.metric_type", spec.metric_type.attr()),
    ];
    if let Some((k, v)) = spec.extra {
        attrs.push(Attribute::new(k, v));
    }
    if !gpu_uuid.is_empty() {
        attrs.push(Attribute::new("hw.id", gpu_uuid));
    }
    attrs.extend(origin_attributes(node, rank));
    MetricDesc::new(spec.metric, spec.kind, spec.unit, spec.description).with_attributes(attrs)
}

/// Where a measurement came from, as attributes: its node when known, its rank when it has one.
pub fn origin_attributes(node: &str, rank: Option<i32>) -> Vec<Attribute> {
    let mut attrs = Vec::new();
    if !node.is_empty() {
        attrs.push(Attribute::new("host.name", node));
    }
    if let Some(r) = rank {
        attrs.push(Attribute {
            key: RANK_ATTRIBUTE.to_string(),
            value: sonde_plugin_sdk::types::Value::Int(i64::from(r)),
        });
    }
    attrs
}

/// The attribute that carries a timing's or throughput's rank.
pub const RANK_ATTRIBUTE: &str = "determined.rank";

/// `sonde.batch.index` of one job and metric type.
pub fn batch_index_desc(job: &str, metric_type: MetricType) -> MetricDesc {
    MetricDesc::new(
        BATCH_INDEX_METRIC,
        MetricKind::Gauge,
        "{batch}",
        "The batch index a job's measurements of this type were taken at (join on timestamp)",
    )
    .with_attributes(vec![
        Attribute::new("determined.trial", job),
        Attribute::new("determined.metric_type", metric_type.attr()),
    ])
}

/// Why measurements were dropped, for `sonde.profiler.dropped`.
pub const DROP_REASONS: [&str; 4] = ["queue_full", "inactive", "ineligible_rank", "too_many_names"];

pub fn dropped_desc(reason: &str) -> MetricDesc {
    MetricDesc::new(
        DROPPED_METRIC,
        MetricKind::Counter,
        "{measurement}",
        "Measurements and reports the Determined profiler did not keep, by reason",
    )
    .with_attributes(vec![Attribute::new("reason", reason)])
}

/// One series of Determined's profiler batch format.
#[derive(Debug, Serialize)]
pub struct BatchBody<'a> {
    pub trial: &'a str,
    pub agent: &'a str,
    pub gpu_uuid: &'a str,
    pub metric: &'a str,
    #[serde(rename = "type")]
    pub metric_type: &'static str,
    pub unit: &'static str,
    pub values: Vec<f64>,
    pub batch_indices: Vec<u64>,
    pub timestamps: Vec<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_table() {
        // Determined name, metric, unit, Determined unit, factor, extra attribute.
        let table = [
            (
                SysMetric::Cpu,
                "cpu_util_simple",
                "sonde.cpu.busy",
                "1",
                "percent",
                100.0,
                None,
            ),
            (
                SysMetric::FreeMemory,
                "free_memory",
                "system.memory.linux.available",
                "By",
                "GB",
                1e-9,
                None,
            ),
            (
                SysMetric::NetSent,
                "net_throughput_sent",
                "sonde.network.throughput",
                "bit/s",
                "Gbit/s",
                1e-9,
                Some(("network.io.direction", "transmit")),
            ),
            (
                SysMetric::NetRecv,
                "net_throughput_recv",
                "sonde.network.throughput",
                "bit/s",
                "Gbit/s",
                1e-9,
                Some(("network.io.direction", "receive")),
            ),
            (
                SysMetric::DiskRead,
                "disk_throughput_read",
                "sonde.disk.throughput",
                "By/s",
                "bytes/s",
                1.0,
                Some(("disk.io.direction", "read")),
            ),
            (
                SysMetric::DiskWrite,
                "disk_throughput_write",
                "sonde.disk.throughput",
                "By/s",
                "bytes/s",
                1.0,
                Some(("disk.io.direction", "write")),
            ),
            (
                SysMetric::DiskIops,
                "disk_iops",
                "sonde.disk.operations.rate",
                "{operation}/s",
                "ops/s",
                1.0,
                None,
            ),
            (
                SysMetric::GpuUtil,
                "gpu_util",
                "hw.gpu.utilization",
                "1",
                "percent",
                100.0,
                None,
            ),
            (
                SysMetric::GpuFreeMemory,
                "gpu_free_memory",
                "sonde.gpu.memory.free",
                "By",
                "bytes",
                1.0,
                None,
            ),
        ];
        assert_eq!(table.len(), SysMetric::ALL.len());
        for (m, det, metric, unit, det_unit, factor, extra) in table {
            let s = m.spec();
            assert_eq!(
                (
                    s.determined,
                    s.metric,
                    s.unit,
                    s.determined_unit,
                    s.to_determined(1.0),
                    s.extra
                ),
                (det, metric, unit, det_unit, factor, extra),
                "{m:?}"
            );
            assert_eq!(s.metric_type, MetricType::System);
        }
        assert_eq!(
            (TIMING.metric, TIMING.unit, TIMING.determined_unit),
            ("sonde.timing.duration", "s", "seconds")
        );
        assert_eq!(
            (SAMPLES_PER_SECOND.metric, SAMPLES_PER_SECOND.unit),
            ("sonde.training.samples_per_second", "{sample}/s")
        );
    }

    #[test]
    fn descriptions_carry_the_determined_attributes_and_never_a_batch_index() {
        let d = metric_desc(
            &SysMetric::GpuUtil.spec(),
            "trial-1",
            "gpu_util",
            "GPU-a",
            "node-a",
            None,
        );
        let keys: Vec<_> = d.attributes.iter().map(|a| a.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "determined.trial",
                "determined.metric",
                "determined.metric_type",
                "hw.id",
                "host.name"
            ]
        );
        let d = metric_desc(&TIMING, "trial-1", "train_batch", "", "node-b", Some(3));
        assert_eq!(d.attributes[1], Attribute::new("determined.metric", "train_batch"));
        assert_eq!(d.attributes[2], Attribute::new("determined.metric_type", "timing"));
        assert_eq!(d.attributes[3], Attribute::new("host.name", "node-b"));
        assert_eq!(
            (d.attributes[4].key.as_str(), &d.attributes[4].value),
            ("determined.rank", &sonde_plugin_sdk::types::Value::Int(3))
        );
        // An unknown node adds nothing.
        assert_eq!(metric_desc(&TIMING, "t", "x", "", "", None).attributes.len(), 3);
        let d = batch_index_desc("trial-1", MetricType::Misc);
        assert_eq!((d.name.as_str(), d.unit.as_str()), ("sonde.batch.index", "{batch}"));
        assert_eq!(d.attributes.len(), 2);
        assert_eq!(dropped_desc("queue_full").kind, MetricKind::Counter);
    }

    #[test]
    fn batch_body_shape() {
        let b = BatchBody {
            trial: "t",
            agent: "node-a",
            gpu_uuid: "",
            metric: "cpu_util_simple",
            metric_type: MetricType::System.label(),
            unit: "percent",
            values: vec![50.0],
            batch_indices: vec![3],
            timestamps: vec![7],
        };
        assert_eq!(
            serde_json::to_string(&b).unwrap(),
            r#"{"trial":"t","agent":"node-a","gpu_uuid":"","metric":"cpu_util_simple","type":"SYSTEM","unit":"percent","values":[50.0],"batch_indices":[3],"timestamps":[7]}"#
        );
    }
}
