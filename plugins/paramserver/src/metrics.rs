//! The metrics this plugin emits: name, unit, kind and description of each,
//! in one place (the logic in `ps.rs` names them by these constants).

use sonde_plugin_sdk::types::MetricKind;

#[derive(Clone, Copy)]
pub struct MetricSpec {
    pub name: &'static str,
    pub unit: &'static str,
    pub kind: MetricKind,
    pub description: &'static str,
}

const fn spec(name: &'static str, unit: &'static str, kind: MetricKind, description: &'static str) -> MetricSpec {
    MetricSpec {
        name,
        unit,
        kind,
        description,
    }
}

pub const CLOCK: MetricSpec = spec(
    "paramserver.clock",
    "{clock}",
    MetricKind::Gauge,
    "Clock (iteration) a worker or server reported",
);
pub const STALENESS: MetricSpec = spec(
    "paramserver.staleness",
    "{clock}",
    MetricKind::Gauge,
    "Clocks a worker is behind the fastest worker",
);
pub const BLOCKED: MetricSpec = spec(
    "paramserver.blocked.time",
    "s",
    MetricKind::Counter,
    "Time a worker spent blocked waiting for the slowest (consistency model's bound)",
);
pub const DETECTION_LATENCY: MetricSpec = spec(
    "paramserver.failure.detection.latency",
    "s",
    MetricKind::Gauge,
    "Time from a process's last heartbeat (or its reported kill) to its detection as dead",
);
pub const CHECKPOINT_DURATION: MetricSpec = spec(
    "paramserver.checkpoint.duration",
    "s",
    MetricKind::Gauge,
    "Duration of a checkpoint, at its end",
);
pub const CHECKPOINT_SHARE: MetricSpec = spec(
    "paramserver.checkpoint.time_share",
    "1",
    MetricKind::Gauge,
    "Share of the job's training time spent checkpointing so far",
);
pub const PHASE_DURATION: MetricSpec = spec(
    "paramserver.recovery.phase.duration",
    "s",
    MetricKind::Gauge,
    "Duration of a recovery phase (1-5, the seed's table) of a completed incident",
);
pub const RECOVERY_DURATION: MetricSpec = spec(
    "paramserver.recovery.duration",
    "s",
    MetricKind::Gauge,
    "Sum of the five recovery phases of a completed incident",
);
