//! `[sampler]`: what the host samples and how often. Beside the sampler it
//! configures; `crate::config` assembles the sections.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::check::{Check, ConfigError};

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
    /// Where the machine's procfs is mounted: CPU, memory, network and disk
    /// counters are read from `stat`, `meminfo`, `net/dev` and `diskstats`
    /// under it. A container that samples its node mounts the node's `/proc`
    /// elsewhere (the Kubernetes DaemonSet: `/host/proc`, read-only) and points
    /// this there; `net/dev` is then the network of the namespace sonde runs
    /// in (the node's under `hostNetwork`). An absolute path; moved from
    /// `/proc`, it must hold `stat` or sonde does not start.
    pub procfs_dir: PathBuf,
    /// Where the machine's sysfs is mounted (per-disk `class/block/<dev>/stat`
    /// and the interfaces' `class/net`); `/host/sys` beside `/host/proc`. An
    /// absolute path; moved from `/sys`, it must hold `class`.
    pub sysfs_dir: PathBuf,
    /// The kubelet's `pod-resources` socket (gRPC, API v1), asked which pod
    /// holds each GPU so that GPU series carry `k8s.pod.name`,
    /// `k8s.namespace.name` and `k8s.container.name`. On by default where it
    /// exists: at the default path a node without the socket (not
    /// Kubernetes, or the DaemonSet without the mount) is told once in the
    /// log at info level and asked nothing; a path set here that does not
    /// answer is a warning (once, and in `/api/status`), and GPU series then
    /// carry no pod attributes. Empty: never asked. Only asked when NVML
    /// found a GPU. An absolute path, or empty.
    pub pod_resources_socket: PathBuf,
    /// How often the kubelet is asked, in milliseconds: a pod that starts or
    /// ends shows on its GPU's series within this.
    /// Range: 1 000 ..= 600 000.
    pub pod_resources_interval_ms: u32,
}

/// Where the kubelet serves its `pod-resources` API.
pub const KUBELET_POD_RESOURCES: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

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
            procfs_dir: PathBuf::from("/proc"),
            sysfs_dir: PathBuf::from("/sys"),
            pod_resources_socket: PathBuf::from(KUBELET_POD_RESOURCES),
            pod_resources_interval_ms: 10_000,
        }
    }
}

impl SamplerConfig {
    /// Checks what types alone cannot.
    pub fn validate(&self, c: &mut Check) {
        c.range("period_ms", self.period_ms, 10, 60_000);
        // Relative, they would follow the working directory: a systemd unit's
        // or a container's is rarely where the counters are.
        for (key, dir) in [("procfs_dir", &self.procfs_dir), ("sysfs_dir", &self.sysfs_dir)] {
            if !dir.is_absolute() {
                c.bad(key, format!("{} is not an absolute path", dir.display()));
            }
        }
        let socket = &self.pod_resources_socket;
        if !socket.as_os_str().is_empty() && !socket.is_absolute() {
            c.bad(
                "pod_resources_socket",
                format!("{} is not an absolute path (empty: off)", socket.display()),
            );
        }
        c.range(
            "pod_resources_interval_ms",
            self.pod_resources_interval_ms,
            1_000,
            600_000,
        );
    }

    /// A `procfs_dir` or `sysfs_dir` moved from its default must hold what
    /// the sampler reads: a container whose node's `/proc` was not mounted
    /// where it says would otherwise sample its own view through the sysinfo
    /// fallback, with nothing to tell the numbers apart. (At start, not in
    /// `validate`: `--check-config` runs where the mounts are not.)
    pub fn check_mounts(&self) -> Result<(), ConfigError> {
        let probes = [
            ("sampler.procfs_dir", &self.procfs_dir, "/proc", "stat", "a procfs"),
            ("sampler.sysfs_dir", &self.sysfs_dir, "/sys", "class", "a sysfs"),
        ];
        for (key, dir, default, probe, what) in probes {
            if dir.as_path() != std::path::Path::new(default) && !dir.join(probe).exists() {
                return Err(ConfigError::new(
                    key,
                    format!(
                        "{} does not exist: is {what} mounted at {}?",
                        dir.join(probe).display(),
                        dir.display()
                    ),
                ));
            }
        }
        Ok(())
    }
}
