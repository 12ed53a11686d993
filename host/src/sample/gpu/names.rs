//! The GPU metric names sonde exports, where each comes from, and how fine its
//! real resolution is. Semantic-convention names where the conventions have
//! one (`hw.*`, `hw.gpu.*`); otherwise the DCGM exporter's meaning under a
//! `sonde.` name. docs/gpu.md's table lists the same, with the DCGM field.

/// Busy share (`hw.gpu.task` = "general"). Source: the driver's buffered,
/// timestamped samples (`nvmlDeviceGetSamples`, one per 1/6 s to 1 s
/// depending on the GPU), averaged over the samples new since the last tick;
/// NaN on a tick with no new sample (never a repeated stale value). Falls
/// back to `nvmlDeviceGetUtilizationRates` where the samples are missing.
pub const UTILIZATION: &str = "hw.gpu.utilization";
/// Bytes used / total / used share (`nvmlDeviceGetMemoryInfo_v2`, instant).
pub const MEMORY_USAGE: &str = "hw.gpu.memory.usage";
pub const MEMORY_LIMIT: &str = "hw.gpu.memory.limit";
pub const MEMORY_UTILIZATION: &str = "hw.gpu.memory.utilization";
/// Watts (`nvmlDeviceGetPowerUsage`; the driver averages over ~1 s on most GPUs).
pub const POWER: &str = "hw.power";
/// Joules since the driver loaded (`nvmlDeviceGetTotalEnergyConsumption`, counter, mJ resolution).
pub const ENERGY: &str = "hw.energy";
/// A temperature sensor whose `hw.parent` is the GPU (`nvmlDeviceGetTemperature`, 1 °C steps).
pub const TEMPERATURE: &str = "hw.temperature";
/// 1 for the GPU's current state (`hw.state` = "ok" or "failed"), 0 for the other.
pub const STATUS: &str = "hw.status";
/// Errors counted since sonde started (`error.type` = "xid") or since the
/// driver loaded (`error.type` = "ecc_corrected" | "ecc_uncorrected", volatile ECC counters).
pub const ERRORS: &str = "hw.errors";
/// SM clock, MHz (`nvmlDeviceGetClockInfo(SM)`, instant). DCGM_FI_DEV_SM_CLOCK.
pub const CLOCK_SM: &str = "sonde.gpu.clock.sm";
/// PCIe bytes per second, `network.io.direction` = receive | transmit.
/// GPM (`NVML_GPM_METRIC_PCIE_RX/TX_PER_SEC`) over the tick where the GPU has
/// it, else `nvmlDeviceGetPcieThroughput` (a 20 ms window). DCGM_FI_PROF_PCIE_RX/TX_BYTES.
pub const PCIE_IO: &str = "sonde.gpu.pcie.io";
/// NVLink data bytes per link (`sonde.gpu.nvlink.link`), counter
/// (`NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX/TX` field values, KiB steps). DCGM_FI_PROF_NVLINK_RX/TX_BYTES.
pub const NVLINK_IO: &str = "sonde.gpu.nvlink.io";
/// 1 while the clocks are held down for `sonde.gpu.throttle.reason`
/// (`nvmlDeviceGetCurrentClocksThrottleReasons`, instant). DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, one bit each.
pub const THROTTLE: &str = "sonde.gpu.throttle";
/// The last XID error code (0 before any). DCGM_FI_DEV_XID_ERRORS.
pub const XID_LAST: &str = "sonde.gpu.xid.last";
/// GPM, averaged over the tick (Hopper and newer): SM activity
/// (DCGM_FI_PROF_SM_ACTIVE), SM occupancy (DCGM_FI_PROF_SM_OCCUPANCY), tensor
/// pipe activity (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE), DRAM activity (DCGM_FI_PROF_DRAM_ACTIVE); share "1".
pub const SM_ACTIVE: &str = "sonde.gpu.sm.active";
pub const SM_OCCUPANCY: &str = "sonde.gpu.sm.occupancy";
pub const TENSOR_ACTIVE: &str = "sonde.gpu.tensor.active";
pub const DRAM_ACTIVE: &str = "sonde.gpu.dram.active";
/// Per process (`process.pid`) on a GPU (`hw.id`): bytes of GPU memory
/// (`nvmlDeviceGetComputeRunningProcesses_v3`, instant) and SM share
/// (`nvmlDeviceGetProcessUtilization`, the driver's samples since the last tick).
pub const PROCESS_MEMORY: &str = "sonde.gpu.process.memory.usage";
pub const PROCESS_UTILIZATION: &str = "sonde.gpu.process.utilization";

/// Attributes sonde adds that the conventions do not define.
pub const ATTR_THROTTLE_REASON: &str = "sonde.gpu.throttle.reason";
pub const ATTR_NVLINK_LINK: &str = "sonde.gpu.nvlink.link";

/// The throttle reasons sonde reports, with their NVML bits.
pub const THROTTLE_REASONS: [(&str, u64); 7] = [
    ("gpu_idle", 0x1),
    ("sw_power_cap", 0x4),
    ("hw_slowdown", 0x8),
    ("sync_boost", 0x10),
    ("sw_thermal_slowdown", 0x20),
    ("hw_thermal_slowdown", 0x40),
    ("hw_power_brake_slowdown", 0x80),
];
