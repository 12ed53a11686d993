//! `[sampler]`: what the host samples and how often. Beside the sampler it
//! configures; `crate::config` assembles the sections.

use serde::{Deserialize, Serialize};

use crate::config::check::Check;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SamplerConfig {
    /// The host's sampling period when no plugin asks for a faster one.
    /// Range: 10 ..= 60 000.
    pub period_ms: u32,
    /// Report the loopback interface too (off by default: it is not network traffic).
    pub include_loopback: bool,
    /// Only these network interfaces (empty: all).
    pub interfaces: Vec<String>,
    /// Only these block devices, e.g. "sda", "nvme0n1" (empty: all whole disks).
    pub disks: Vec<String>,
    /// Per logical CPU as well as for all CPUs: `system.cpu.utilization`
    /// has 7 series (one per `cpu.mode`) for each, so 7 × (1 + CPUs) series
    /// with this on and 7 with it off (many-core machines: see docs/exports.md).
    pub per_core: bool,
    /// Try NVML for GPU metrics (a machine without a GPU is fine either way).
    pub gpu: bool,
    /// The NVML library to load: a file path or a name the dynamic loader
    /// finds (unset: "libnvidia-ml.so.1", what NVIDIA's driver installs). The
    /// GPU tests point it at the fake library in `target/fake-nvml/`.
    pub nvml_library: Option<String>,
    /// Run the sampling thread at real-time priority (SCHED_FIFO 1) when the
    /// system allows it, so busy cores do not delay samples; it only sleeps and
    /// reads counters. Falls back to a raised nice value when refused.
    pub realtime: bool,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        Self {
            period_ms: 100,
            include_loopback: false,
            interfaces: Vec::new(),
            disks: Vec::new(),
            per_core: true,
            gpu: true,
            nvml_library: None,
            realtime: true,
        }
    }
}

impl SamplerConfig {
    /// Checks what types alone cannot.
    pub fn validate(&self, c: &mut Check) {
        c.range("period_ms", self.period_ms, 10, 60_000);
    }
}
