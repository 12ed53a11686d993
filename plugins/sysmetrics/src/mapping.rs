//! How one host series becomes one OpenTelemetry metric series: same name,
//! unit and attributes, with the instrument kind the semantic conventions
//! give that metric.

use sonde_plugin_sdk::types::{MetricDesc, MetricKind, SeriesInfo, SeriesKind};

/// Metrics the semantic conventions define as UpDownCounters: levels that
/// are sums over their attribute sets (the memory states add up to the
/// limit), so they aggregate by addition, unlike a gauge.
const UPDOWN_COUNTERS: &[&str] = &[
    "system.memory.usage",
    "system.memory.limit",
    "system.memory.shared",
    "system.memory.linux.available",
    "system.memory.linux.slab.usage",
    "system.paging.usage",
    "system.filesystem.usage",
    "system.filesystem.limit",
    "system.process.count",
    "system.network.connection.count",
    "hw.gpu.memory.usage",
    "hw.gpu.memory.limit",
];

/// The instrument kind to export a host series as.
///
/// A host `counter` is a monotonic total, which is exactly an OTel Counter
/// whatever its name. Among levels (`gauge` series), the conventions' sums
/// are UpDownCounters; everything else (utilizations, power, temperature,
/// frequency) is a Gauge.
pub fn output_kind(metric: &str, kind: SeriesKind) -> MetricKind {
    match kind {
        SeriesKind::Counter => MetricKind::Counter,
        SeriesKind::Gauge if UPDOWN_COUNTERS.contains(&metric) => MetricKind::UpdownCounter,
        SeriesKind::Gauge => MetricKind::Gauge,
    }
}

/// A short description for the metrics the host samples today.
pub fn description(metric: &str) -> &'static str {
    match metric {
        "system.cpu.utilization" => "Fraction of time the CPUs (or one logical CPU) spent in the mode",
        "system.cpu.time" => "Seconds a logical CPU spent in each mode",
        "system.cpu.frequency" => "Current frequency of a logical CPU",
        "system.memory.usage" => "Memory in use, by state",
        "system.memory.limit" => "Total memory of the system",
        "system.memory.utilization" => "Fraction of memory in use, by state",
        "system.memory.shared" => "Shared memory in use",
        "system.memory.linux.available" => "Memory available to start new work without swapping",
        "system.paging.usage" => "Swap space in use, by state",
        "system.network.io" => "Bytes sent and received on an interface",
        "system.network.packet.count" => "Packets sent and received on an interface",
        "system.network.packet.dropped" => "Packets dropped on an interface",
        "system.network.errors" => "Errors seen on an interface",
        "system.disk.io" => "Bytes read from and written to a disk",
        "system.disk.operations" => "Read and write operations completed by a disk",
        "system.memory.linux.slab.usage" => "Kernel slab memory, by state",
        "system.filesystem.usage" => "Filesystem space in use, by state",
        "system.filesystem.limit" => "Total size of a filesystem",
        "system.network.connection.count" => "Network connections, by state",
        "system.process.count" => "Processes, by status",
        "hw.gpu.utilization" => "Fraction of time the GPU was busy",
        "hw.gpu.memory.utilization" => "Fraction of GPU memory in use",
        "hw.gpu.memory.usage" => "GPU memory in use",
        "hw.gpu.memory.limit" => "Total GPU memory",
        "hw.power" => "Power the device draws",
        "hw.energy" => "Energy the device consumed since the host started counting",
        "hw.temperature" => "Temperature of the sensor",
        "hw.status" => "1 for the component's current state, 0 for the others",
        "hw.errors" => "Errors the component reported, by type",
        "sonde.gpu.clock.sm" => "GPU SM clock",
        "sonde.gpu.pcie.io" => "PCIe bytes per second, by direction",
        "sonde.gpu.nvlink.io" => "NVLink data bytes per link and direction",
        "sonde.gpu.throttle" => "1 while the GPU's clocks are held down for this reason",
        "sonde.gpu.xid.last" => "The last XID error code of the GPU (0: none yet)",
        "sonde.gpu.sm.active" => "Fraction of time the GPU's SMs had work (GPM)",
        "sonde.gpu.sm.occupancy" => "Fraction of the warps resident vs the maximum (GPM)",
        "sonde.gpu.tensor.active" => "Fraction of time the tensor pipes were busy (GPM)",
        "sonde.gpu.dram.active" => "Fraction of time device memory was being read or written (GPM)",
        "sonde.gpu.process.memory.usage" => "GPU memory a process uses",
        "sonde.gpu.process.utilization" => "Fraction of the GPU's SM time a process used",
        _ => "Sampled by the sonde host",
    }
}

/// The metric series to declare for a host series.
pub fn output_desc(info: &SeriesInfo) -> MetricDesc {
    MetricDesc {
        name: info.metric.clone(),
        description: description(&info.metric).to_string(),
        unit: info.unit.clone(),
        kind: output_kind(&info.metric, info.kind),
        attributes: info.attributes.clone(),
    }
}

/// Whether `metric` is one of the prefixes asked for (all when none are).
pub fn selected(metric: &str, prefixes: &[String]) -> bool {
    prefixes.is_empty() || prefixes.iter().any(|p| metric.starts_with(p.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_plugin_sdk::types::Attribute;

    #[test]
    fn instrument_kinds_follow_the_semantic_conventions() {
        use MetricKind::*;
        use SeriesKind as S;
        let table = [
            ("system.cpu.utilization", S::Gauge, Gauge),
            ("system.memory.utilization", S::Gauge, Gauge),
            ("hw.gpu.utilization", S::Gauge, Gauge),
            ("hw.gpu.memory.utilization", S::Gauge, Gauge),
            ("hw.power", S::Gauge, Gauge),
            ("hw.temperature", S::Gauge, Gauge),
            ("system.cpu.frequency", S::Gauge, Gauge),
            ("some.future.level", S::Gauge, Gauge),
            ("system.memory.usage", S::Gauge, UpdownCounter),
            ("system.memory.limit", S::Gauge, UpdownCounter),
            ("system.memory.linux.available", S::Gauge, UpdownCounter),
            ("hw.gpu.memory.usage", S::Gauge, UpdownCounter),
            ("hw.gpu.memory.limit", S::Gauge, UpdownCounter),
            ("system.network.io", S::Counter, Counter),
            ("system.network.packet.count", S::Counter, Counter),
            ("system.network.errors", S::Counter, Counter),
            ("system.disk.io", S::Counter, Counter),
            ("system.disk.operations", S::Counter, Counter),
            ("hw.energy", S::Counter, Counter),
            ("some.future.total", S::Counter, Counter),
        ];
        for (metric, series_kind, want) in table {
            assert_eq!(output_kind(metric, series_kind), want, "{metric}");
        }
    }

    #[test]
    fn desc_keeps_name_unit_and_attributes() {
        let info = SeriesInfo {
            id: 3,
            metric: "system.network.io".into(),
            unit: "By".into(),
            kind: SeriesKind::Counter,
            attributes: vec![
                Attribute::new("network.interface.name", "eth0"),
                Attribute::new("network.io.direction", "transmit"),
            ],
        };
        let d = output_desc(&info);
        assert_eq!(d.name, "system.network.io");
        assert_eq!(d.unit, "By");
        assert_eq!(d.kind, MetricKind::Counter);
        assert_eq!(d.attributes, info.attributes);
        assert_eq!(d.description, "Bytes sent and received on an interface");
    }

    #[test]
    fn every_listed_updown_counter_has_a_description() {
        for m in UPDOWN_COUNTERS {
            assert_ne!(description(m), description("unknown"), "{m}");
        }
    }

    #[test]
    fn prefix_selection() {
        let p = vec!["system.cpu.".to_string(), "hw.".to_string()];
        assert!(selected("system.cpu.utilization", &p));
        assert!(selected("hw.power", &p));
        assert!(!selected("system.memory.usage", &p));
        assert!(selected("anything", &[]));
    }
}
