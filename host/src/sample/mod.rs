//! sample/: reads the machine (CPU, memory, network, disk, GPU) into `Tick`s.
//!
//! `Sampler` knows *what* to read and turns it into series (see `model::SeriesInfo`);
//! `driver` knows *when*: a dedicated thread that wakes on absolute deadlines
//! so the period does not drift, and hands each tick to a callback (the plugin
//! fan-out). Nothing here depends on plugins or export.
//!
//! Files: `cpu` (/proc/stat), `memory` (/proc/meminfo), `net` (/proc/net/dev),
//! `disk` (/proc/diskstats; per-disk /sys/class/block/<dev>/stat when at most
//! 4 disks are selected), `gpu/` (NVML: discovery, faults and events, one
//! GPU's readings, the names), `procfs` (the open-once, pread-at-0 reader and
//! byte parsers every procfs part uses), `driver` (the thread).
//! On Linux every part reads procfs directly (why: see each file's header);
//! where a procfs file is missing (other OSes) CPU, memory and network fall
//! back to sysinfo, and disks are skipped.
//!
//! INTERFACE CONTRACT:
//!   pub struct Sampler;  Sampler::new(&SamplerConfig) -> Sampler   (never fails; logs what it skips)
//!   Sampler::series(&self) -> &[SeriesInfo]          (ids dense, 0..len, only appended: an
//!                                                     interface, disk or CPU that appears later
//!                                                     gets new series at the end; one that goes
//!                                                     away keeps its series and reads NaN)
//!   Sampler::sample_into(&mut self, tick: &mut Tick) (sets time_ns once, before reading;
//!                                                     values resized to series().len(), NaN where
//!                                                     unreadable; no allocation in steady state)
//!   Sampler::gpu_status(&self) -> String            (changes while running: a GPU lost, a call failing)
//!   Sampler::gpu_watch(&self) -> GpuWatch            (the status and XID / lost-GPU events, from any thread)
//!   driver::spawn(sampler, period_ms: Arc<AtomicU32>, on_tick) -> driver::SamplerHandle
//!     (driver::spawn_with(sampler, DriverConfig { period, realtime }, on_tick) to opt out of
//!     real-time priority). on_tick(&Tick, &[SeriesInfo]) runs on the "sonde-sampler" thread,
//!     at SCHED_FIFO 1 when granted: keep it a hand-off. Compare series.len() with what you
//!     last saw to notice appended series.
//!   SamplerHandle: stop(self) (prompt: wakes the thread), stats() -> PeriodStats,
//!     gpu_status(), scheduling(), set_period_ms(ms) (wakes the thread; a plain store into
//!     the shared atomic is seen within 100 ms), period(). Dropping it stops the thread.
//!
//! Values: gauges are instantaneous; counters are cumulative since boot (as
//! f64), so consumers compute rates themselves. CPU utilization is the share
//! of the time since the previous reading spent in each `cpu.mode` (`new`
//! takes the first one, so only a tick within one USER_HZ jiffy, 10 ms, of
//! `new` reads NaN); the modes of one CPU add up to 1.

pub mod config;
mod cpu;
mod disk;
pub mod driver;
pub mod gpu;
mod memory;
mod net;
mod procfs;

use std::path::PathBuf;

use crate::model::{AttrValue, Attributes, SeriesInfo, SeriesKind, Tick};
use crate::sample::config::SamplerConfig;

/// Where procfs and sysfs live: `sampler.procfs_dir` and `sampler.sysfs_dir`
/// (tests point these at fixture trees).
#[derive(Clone, Debug)]
pub(crate) struct Roots {
    pub proc: PathBuf,
    pub sys: PathBuf,
}

impl Roots {
    fn of(cfg: &SamplerConfig) -> Self {
        Self {
            proc: cfg.procfs_dir.clone(),
            sys: cfg.sysfs_dir.clone(),
        }
    }
}

/// The series list plus the values of the tick being filled. Parts add series
/// through it so that ids stay dense and `values` always covers them.
pub(crate) struct Out<'a> {
    series: &'a mut Vec<SeriesInfo>,
    values: &'a mut Vec<f64>,
}

impl Out<'_> {
    /// Appends a series and returns its id.
    pub(crate) fn add(&mut self, metric: &str, unit: &str, kind: SeriesKind, attributes: Attributes) -> u32 {
        let id = self.series.len() as u32;
        self.series.push(SeriesInfo {
            id,
            metric: metric.to_string(),
            unit: unit.to_string(),
            kind,
            attributes,
        });
        self.values.resize(self.series.len(), f64::NAN);
        id
    }

    #[inline]
    pub(crate) fn set(&mut self, id: u32, v: f64) {
        if let Some(slot) = self.values.get_mut(id as usize) {
            *slot = v;
        }
    }
}

/// Attribute list helper: `attrs([("k", "v".into())])`.
pub(crate) fn attrs<const N: usize>(kv: [(&str, AttrValue); N]) -> Attributes {
    kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// One part of a full read, for benchmarks (`Sampler::sample_part_into`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Cpu,
    Memory,
    Network,
    Disk,
    Gpu,
}

/// Reads the machine. Create once (discovery happens here), then call
/// `sample_into` every period.
pub struct Sampler {
    series: Vec<SeriesInfo>,
    cpu: cpu::CpuReader,
    mem: memory::MemReader,
    net: net::NetReader,
    disk: disk::DiskReader,
    gpu: gpu::GpuReader,
}

impl Sampler {
    /// Discovers logical CPUs, interfaces, whole disks and GPUs and defines
    /// the series. Never fails: what is unavailable is logged once and skipped.
    pub fn new(cfg: &SamplerConfig) -> Sampler {
        Self::with_roots(cfg, &Roots::of(cfg))
    }

    pub(crate) fn with_roots(cfg: &SamplerConfig, roots: &Roots) -> Sampler {
        let mut series = Vec::new();
        let mut scratch = Vec::new();
        let mut out = Out {
            series: &mut series,
            values: &mut scratch,
        };
        let cpu = cpu::CpuReader::new(cfg, roots, &mut out);
        let mem = memory::MemReader::new(roots, &mut out);
        let net = net::NetReader::new(cfg, roots, &mut out);
        let disk = disk::DiskReader::new(cfg, roots, &mut out);
        let gpu = gpu::GpuReader::new(cfg, &mut out);
        tracing::info!(series = series.len(), gpu = %gpu.watch().status(), "sampler ready");
        Sampler {
            series,
            cpu,
            mem,
            net,
            disk,
            gpu,
        }
    }

    /// Every series, `series()[i].id == i`. Only ever grows.
    pub fn series(&self) -> &[SeriesInfo] {
        &self.series
    }

    /// Reads everything once into `tick`: one wall-clock timestamp taken right
    /// before reading, `values` resized to `series().len()`, NaN where a value
    /// could not be read. No allocation in steady state.
    pub fn sample_into(&mut self, tick: &mut Tick) {
        tick.time_ns = crate::model::now_ns();
        tick.values.clear();
        tick.values.resize(self.series.len(), f64::NAN);
        let mut out = Out {
            series: &mut self.series,
            values: &mut tick.values,
        };
        self.cpu.read(&mut out);
        self.mem.read(&mut out);
        self.net.read(&mut out);
        self.disk.read(&mut out);
        self.gpu.read(&mut out);
    }

    /// Reads one part only (for benchmarks); the other values are NaN.
    pub fn sample_part_into(&mut self, part: Part, tick: &mut Tick) {
        tick.time_ns = crate::model::now_ns();
        tick.values.clear();
        tick.values.resize(self.series.len(), f64::NAN);
        let mut out = Out {
            series: &mut self.series,
            values: &mut tick.values,
        };
        match part {
            Part::Cpu => self.cpu.read(&mut out),
            Part::Memory => self.mem.read(&mut out),
            Part::Network => self.net.read(&mut out),
            Part::Disk => self.disk.read(&mut out),
            Part::Gpu => self.gpu.read(&mut out),
        }
    }

    /// How GPU sampling goes, in words, e.g. "2 GPUs via NVML (driver 550.54)".
    pub fn gpu_status(&self) -> String {
        self.gpu.watch().status()
    }

    /// The GPU status and events, readable from any thread while the sampler runs.
    pub fn gpu_watch(&self) -> gpu::GpuWatch {
        self.gpu.watch()
    }
}

/// A fresh tick to pass to `sample_into` (its buffer is reused afterwards).
impl Sampler {
    pub fn new_tick(&self) -> Tick {
        Tick {
            time_ns: 0,
            values: Vec::with_capacity(self.series.len() + 64),
        }
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    use std::path::Path;

    /// Writes `files` (relative path, contents) under `root`.
    pub fn write_tree(root: &Path, files: &[(&str, &str)]) {
        for (rel, text) in files {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
    }

    pub const STAT: &str = "cpu  100 0 100 800 0 0 0 0 0 0\n\
cpu0 50 0 50 400 0 0 0 0 0 0\n\
cpu1 50 0 50 400 0 0 0 0 0 0\n\
intr 12345 0 0\nctxt 99\nbtime 1700000000\n";

    pub const STAT2: &str = "cpu  150 0 150 900 0 0 0 0 0 0\n\
cpu0 100 0 50 450 0 0 0 0 0 0\n\
cpu1 50 0 100 450 0 0 0 0 0 0\n\
intr 12345 0 0\nctxt 99\nbtime 1700000000\n";

    pub const MEMINFO: &str = "MemTotal:       16000000 kB\n\
MemFree:         4000000 kB\n\
MemAvailable:   10000000 kB\n\
Buffers:          500000 kB\n\
Cached:          5000000 kB\n\
SwapCached:            0 kB\n\
Active:          6000000 kB\n\
SReclaimable:     500000 kB\n\
SUnreclaim:       100000 kB\n";

    pub const NETDEV: &str = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    3193      29    0    0    0     0          0         0     3193      29    0    0    0     0       0          0
  eth0: 157746156    9640    1    2    0     0          0         0   621362    6942    3    4    0     0       0          0
 wlan0:1234567890 1000 0 0 0 0 0 0 55 6 0 0 0 0 0 0
  lo2:       5       1    0    0    0     0          0         0        5       1    0    0    0     0       0          0
";

    pub const DISKSTATS: &str = "   7       0 loop0 10 0 80 0 0 0 0 0 0 0 0 0 0 0 0 0 0
 254       0 vda 6100 3199 1417538 5550 2954 36312 4253240 33094 0 3976 39025 3842 90 194608 376 90 2
 254       1 vda1 6000 3199 1400000 5500 2954 36312 4253240 33094 0 3900 39025 3842 90 194608 376 0 0
 253       0 zram0 1 0 8 0 0 0 0 0 0 0 0 0 0 0 0 0 0
 259       0 nvme0n1 100 0 2000 10 50 0 1000 5 0 1500 15
   1       0 ram0 0 0 0 0 0 0 0 0 0 0 0
 252       0 dm-0 7 0 56 0 3 0 24 0 0 2 0
";

    /// A two-CPU machine with lo, eth0, wlan0, lo2 (a second loopback by
    /// flags) and vda (+vda1), nvme0n1, dm-0, loop0, zram0, ram0.
    pub fn fixture_machine(root: &Path) -> super::Roots {
        write_tree(
            root,
            &[
                ("proc/stat", STAT),
                ("proc/meminfo", MEMINFO),
                ("proc/net/dev", NETDEV),
                ("proc/diskstats", DISKSTATS),
                ("sys/class/net/lo/flags", "0x9\n"),
                ("sys/class/net/lo2/flags", "0x49\n"),
                ("sys/class/net/eth0/flags", "0x1003\n"),
                ("sys/class/net/wlan0/flags", "0x1003\n"),
                ("sys/block/vda/size", "1\n"),
                ("sys/block/nvme0n1/size", "1\n"),
                ("sys/block/dm-0/size", "1\n"),
                ("sys/block/loop0/size", "1\n"),
                ("sys/block/zram0/size", "1\n"),
                ("sys/block/ram0/size", "1\n"),
            ],
        );
        super::Roots {
            proc: root.join("proc"),
            sys: root.join("sys"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;
    use crate::model::AttrValue as V;

    fn cfg() -> SamplerConfig {
        SamplerConfig {
            gpu: false,
            ..SamplerConfig::default()
        }
    }

    fn attr<'a>(s: &'a SeriesInfo, k: &str) -> Option<&'a V> {
        s.attributes.iter().find(|(kk, _)| kk == k).map(|(_, v)| v)
    }

    fn find<'a>(s: &'a [SeriesInfo], metric: &str, want: &[(&str, V)]) -> &'a SeriesInfo {
        s.iter()
            .find(|x| {
                x.metric == metric
                    && want.iter().all(|(k, v)| attr(x, k) == Some(v))
                    && x.attributes.len() == want.len()
            })
            .unwrap_or_else(|| panic!("no {metric} {want:?}"))
    }

    #[test]
    fn fixture_machine_series() {
        let dir = tempfile::tempdir().unwrap();
        let roots = fixture_machine(dir.path());
        let s = Sampler::with_roots(&cfg(), &roots);
        let series = s.series();
        for (i, x) in series.iter().enumerate() {
            assert_eq!(x.id as usize, i, "ids dense");
        }
        let names: Vec<String> = series
            .iter()
            .map(|x| {
                let a: Vec<String> = x.attributes.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
                format!("{} [{}] {:?} {{{}}}", x.metric, x.unit, x.kind, a.join(","))
            })
            .collect();
        // 3 cpu lines × 7 modes + 7 memory + 2 interfaces × 8 + 3 disks × 5
        assert_eq!(series.len(), 3 * 7 + 7 + 16 + 15, "{names:#?}");

        for mode in ["user", "nice", "system", "idle", "iowait", "interrupt", "steal"] {
            let total = find(series, "system.cpu.utilization", &[("cpu.mode", V::from(mode))]);
            assert_eq!((total.unit.as_str(), total.kind), ("1", SeriesKind::Gauge));
            let c1 = find(
                series,
                "system.cpu.utilization",
                &[("cpu.logical_number", V::Int(1)), ("cpu.mode", V::from(mode))],
            );
            assert_eq!(c1.unit, "1");
        }
        assert!(
            series
                .iter()
                .filter(|x| x.metric == "system.cpu.utilization")
                .all(|x| attr(x, "cpu.mode").is_some()),
            "no CPU series without a mode"
        );

        for state in ["used", "free", "cached", "buffers"] {
            let m = find(
                series,
                "system.memory.usage",
                &[("system.memory.state", V::from(state))],
            );
            assert_eq!((m.unit.as_str(), m.kind), ("By", SeriesKind::Gauge));
        }
        assert_eq!(find(series, "system.memory.limit", &[]).unit, "By");
        assert_eq!(find(series, "system.memory.linux.available", &[]).unit, "By");
        let mu = find(
            series,
            "system.memory.utilization",
            &[("system.memory.state", V::from("used"))],
        );
        assert_eq!(mu.unit, "1");

        for dir in ["receive", "transmit"] {
            for (metric, unit) in [
                ("system.network.io", "By"),
                ("system.network.packet.count", "{packet}"),
                ("system.network.errors", "{error}"),
                ("system.network.packet.dropped", "{packet}"),
            ] {
                let x = find(
                    series,
                    metric,
                    &[
                        ("network.interface.name", V::from("eth0")),
                        ("network.io.direction", V::from(dir)),
                    ],
                );
                assert_eq!((x.unit.as_str(), x.kind), (unit, SeriesKind::Counter));
            }
        }
        let ifaces: std::collections::BTreeSet<_> = series
            .iter()
            .filter_map(|x| attr(x, "network.interface.name"))
            .map(|v| format!("{v:?}"))
            .collect();
        assert_eq!(ifaces.len(), 2, "lo and lo2 (IFF_LOOPBACK) excluded: {ifaces:?}");

        let disks: std::collections::BTreeSet<_> = series
            .iter()
            .filter_map(|x| attr(x, "system.device"))
            .map(|v| format!("{v:?}"))
            .collect();
        assert_eq!(disks.len(), 3, "vda, nvme0n1, dm-0: {disks:?}");
        for dir in ["read", "write"] {
            for (metric, unit) in [("system.disk.io", "By"), ("system.disk.operations", "{operation}")] {
                let x = find(
                    series,
                    metric,
                    &[("system.device", V::from("vda")), ("disk.io.direction", V::from(dir))],
                );
                assert_eq!((x.unit.as_str(), x.kind), (unit, SeriesKind::Counter));
            }
        }
        let t = find(series, "system.disk.io_time", &[("system.device", V::from("nvme0n1"))]);
        assert_eq!((t.unit.as_str(), t.kind), ("s", SeriesKind::Counter));

        assert!(series.iter().all(|x| !x.metric.starts_with("hw.")));
        assert_eq!(s.gpu_status(), "GPU sampling off in config");
    }

    /// `sampler.procfs_dir` and `sysfs_dir` are what `Sampler::new` reads:
    /// a node's `/proc` mounted elsewhere, as in the Kubernetes DaemonSet.
    #[test]
    fn the_configured_procfs_and_sysfs_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let roots = fixture_machine(dir.path());
        let cfg = SamplerConfig {
            procfs_dir: roots.proc.clone(),
            sysfs_dir: roots.sys.clone(),
            ..cfg()
        };
        assert_eq!(cfg.check_mounts(), Ok(()));
        let mut s = Sampler::new(&cfg);
        let mut t = s.new_tick();
        s.sample_into(&mut t);
        let ser = s.series().to_vec();
        let limit = find(&ser, "system.memory.limit", &[]).id as usize;
        assert_eq!(t.values[limit], 16_000_000.0 * 1024.0, "the fixture's MemTotal");
        let ifaces: std::collections::BTreeSet<String> = ser
            .iter()
            .filter_map(|x| match attr(x, "network.interface.name") {
                Some(V::Str(n)) => Some(n.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            ifaces,
            ["eth0", "wlan0"].map(String::from).into(),
            "the fixture's interfaces, told from loopbacks by its sysfs flags"
        );
    }

    #[test]
    fn a_moved_procfs_or_sysfs_that_is_not_there_stops_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let roots = fixture_machine(dir.path());
        let missing = SamplerConfig {
            procfs_dir: dir.path().join("host/proc"),
            ..cfg()
        };
        let e = missing.check_mounts().unwrap_err();
        assert_eq!(e.key, "sampler.procfs_dir");
        assert!(e.reason.contains("host/proc/stat does not exist"), "{e}");
        let no_sys = SamplerConfig {
            procfs_dir: roots.proc.clone(),
            sysfs_dir: dir.path().join("nope"),
            ..cfg()
        };
        assert_eq!(no_sys.check_mounts().unwrap_err().key, "sampler.sysfs_dir");
        assert_eq!(cfg().check_mounts(), Ok(()), "the defaults are never refused");
        let mut errs = Vec::new();
        let relative = SamplerConfig {
            procfs_dir: "host/proc".into(),
            ..cfg()
        };
        relative.validate(&mut crate::config::check::Check::new("sampler", &mut errs));
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].key, "sampler.procfs_dir");
    }

    #[test]
    fn fixture_machine_values() {
        let dir = tempfile::tempdir().unwrap();
        let roots = fixture_machine(dir.path());
        let mut s = Sampler::with_roots(&cfg(), &roots);
        let mut t = s.new_tick();
        s.sample_into(&mut t);
        assert_eq!(t.values.len(), s.series().len());
        let ser = s.series().to_vec();
        let id = |m: &str, a: &[(&str, V)]| find(&ser, m, a).id as usize;
        let mode = |m: &str| ("cpu.mode", V::from(m));
        let cpu_idle = id("system.cpu.utilization", &[mode("idle")]);
        assert!(t.values[cpu_idle].is_nan(), "no previous reading yet");
        write_tree(dir.path(), &[("proc/stat", STAT2)]);
        let t0 = t.time_ns;
        s.sample_into(&mut t);
        assert!(t.time_ns >= t0);
        // total: user +50, system +50, idle +100 of +200; cpu0: user +50, idle +50 of +100
        let total = |m| t.values[id("system.cpu.utilization", &[mode(m)])];
        assert_eq!([total("user"), total("system"), total("idle")], [0.25, 0.25, 0.5]);
        assert_eq!(
            [total("nice"), total("iowait"), total("interrupt"), total("steal")],
            [0.0; 4]
        );
        let c0 = |m| t.values[id("system.cpu.utilization", &[("cpu.logical_number", V::Int(0)), mode(m)])];
        assert_eq!([c0("user"), c0("system"), c0("idle")], [0.5, 0.0, 0.5]);
        let used = id("system.memory.usage", &[("system.memory.state", V::from("used"))]);
        // used = MemTotal - MemAvailable
        assert_eq!(t.values[used], (16_000_000.0 - 10_000_000.0) * 1024.0);
        let rx = id(
            "system.network.io",
            &[
                ("network.interface.name", V::from("wlan0")),
                ("network.io.direction", V::from("receive")),
            ],
        );
        assert_eq!(t.values[rx], 1_234_567_890.0);
        let w = id(
            "system.disk.io",
            &[
                ("system.device", V::from("vda")),
                ("disk.io.direction", V::from("write")),
            ],
        );
        assert_eq!(t.values[w], 4_253_240.0 * 512.0);
        assert!(t.values.iter().all(|v| v.is_finite()), "{:?}", t.values);
    }

    #[test]
    fn new_interface_and_disk_are_appended() {
        let dir = tempfile::tempdir().unwrap();
        let roots = fixture_machine(dir.path());
        let mut s = Sampler::with_roots(&cfg(), &roots);
        let before: Vec<SeriesInfo> = s.series().to_vec();
        let mut t = s.new_tick();
        s.sample_into(&mut t);
        let netdev = format!("{NETDEV}  eth1: 1 2 3 4 0 0 0 0 5 6 7 8 0 0 0 0\n");
        // eth0 disappears, eth1 appears
        let netdev = netdev.replace("  eth0:", "  gone:");
        let disks = format!("{DISKSTATS} 8 0 sdb 1 0 2 0 3 0 4 0 0 5 0\n");
        write_tree(
            dir.path(),
            &[
                ("proc/net/dev", &netdev),
                ("proc/diskstats", &disks),
                ("sys/class/net/eth1/flags", "0x1003"),
                ("sys/class/net/gone/flags", "0x1003"),
                ("sys/block/sdb/size", "1"),
            ],
        );
        s.sample_into(&mut t);
        let after = s.series();
        assert_eq!(&after[..before.len()], &before[..], "never renumbered");
        assert_eq!(after.len(), before.len() + 8 + 8 + 5, "eth1, gone, sdb");
        assert_eq!(t.values.len(), after.len());
        for (i, x) in after.iter().enumerate() {
            assert_eq!(x.id as usize, i);
        }
        let eth0_rx = find(
            after,
            "system.network.io",
            &[
                ("network.interface.name", V::from("eth0")),
                ("network.io.direction", V::from("receive")),
            ],
        );
        assert!(t.values[eth0_rx.id as usize].is_nan(), "vanished interface reads NaN");
        let sdb = find(after, "system.disk.io_time", &[("system.device", V::from("sdb"))]);
        assert_eq!(t.values[sdb.id as usize], 0.005);
    }

    #[test]
    fn missing_procfs_falls_back_or_skips() {
        // An empty tree: CPU, memory and network come from sysinfo, disks are skipped.
        let dir = tempfile::tempdir().unwrap();
        let roots = Roots {
            proc: dir.path().join("proc"),
            sys: dir.path().join("sys"),
        };
        let mut s = Sampler::with_roots(&cfg(), &roots);
        let cpu: Vec<_> = s
            .series()
            .iter()
            .filter(|x| x.metric == "system.cpu.utilization")
            .collect();
        assert!(!cpu.is_empty());
        // sysinfo gives one busy share per CPU: only the idle mode is told.
        assert!(
            cpu.iter().all(|x| attr(x, "cpu.mode") == Some(&V::from("idle"))),
            "{cpu:?}"
        );
        assert!(s.series().iter().any(|x| x.metric == "system.memory.limit"));
        assert!(!s.series().iter().any(|x| x.metric.starts_with("system.disk")));
        let mut t = s.new_tick();
        s.sample_into(&mut t);
        let limit = s
            .series()
            .iter()
            .find(|x| x.metric == "system.memory.limit")
            .unwrap()
            .id;
        if cfg!(any(target_os = "linux", target_os = "macos", target_os = "windows")) {
            assert!(t.values[limit as usize] > 0.0);
        }
    }

    /// The real machine: finite CPU mode shares in 0..=1 adding up to 1 per
    /// CPU from the second sample on, counters never decrease, ids dense, no
    /// hw.* series without a GPU.
    #[test]
    fn real_machine() {
        let mut s = Sampler::new(&SamplerConfig::default());
        let series = s.series().to_vec();
        for (i, x) in series.iter().enumerate() {
            assert_eq!(x.id as usize, i);
        }
        let mut a = s.new_tick();
        let mut b = s.new_tick();
        s.sample_into(&mut a);
        std::thread::sleep(std::time::Duration::from_millis(120));
        s.sample_into(&mut b);
        assert!(b.time_ns > a.time_ns);
        assert_eq!(b.values.len(), s.series().len());
        // cpu.logical_number (None: all CPUs) -> sum of its mode shares, modes seen
        let mut per_cpu: std::collections::BTreeMap<Option<String>, (f64, usize)> = Default::default();
        for x in s.series() {
            let (va, vb) = (
                a.values.get(x.id as usize).copied().unwrap_or(f64::NAN),
                b.values[x.id as usize],
            );
            if x.metric == "system.cpu.utilization" {
                assert!(vb.is_finite() && (0.0..=1.0).contains(&vb), "{x:?} = {vb}");
                let e = per_cpu
                    .entry(attr(x, "cpu.logical_number").map(|v| format!("{v:?}")))
                    .or_default();
                e.0 += vb;
                e.1 += 1;
            }
            if x.metric.starts_with("system.memory") || x.metric == "system.memory.linux.available" {
                assert!(vb.is_finite() && vb >= 0.0, "{x:?} = {vb}");
            }
            if x.kind == SeriesKind::Counter && va.is_finite() {
                assert!(vb >= va, "{x:?}: {va} -> {vb}");
            }
        }
        assert!(per_cpu.len() >= 2, "all CPUs and at least one core: {per_cpu:?}");
        for (cpu, (sum, modes)) in &per_cpu {
            assert_eq!(*modes, 7, "{cpu:?}");
            assert!((sum - 1.0).abs() < 1e-9, "{cpu:?}: modes add up to {sum}");
        }
        if !s.gpu_status().contains("via NVML") {
            assert!(
                s.series()
                    .iter()
                    .all(|x| !x.metric.starts_with("hw.") && !x.metric.starts_with("sonde.gpu"))
            );
            assert!(s.gpu_status().starts_with("no GPU"), "{}", s.gpu_status());
        }
        eprintln!("gpu: {}", s.gpu_status());
        eprintln!("{} series on this machine:", s.series().len());
        for x in s.series() {
            let a: Vec<String> = x.attributes.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
            eprintln!(
                "  {:3} {} [{}] {:?} {{{}}} = {}",
                x.id,
                x.metric,
                x.unit,
                x.kind,
                a.join(", "),
                b.values[x.id as usize]
            );
        }
    }

    /// Informational: what one `sample_into` costs in this (debug) build.
    /// Run with `--nocapture`; nothing is asserted about time.
    #[test]
    fn cost_per_sample_informational() {
        let mut s = Sampler::new(&SamplerConfig::default());
        let mut t = s.new_tick();
        s.sample_into(&mut t);
        let n = 300;
        let mut costs = Vec::with_capacity(n);
        for _ in 0..n {
            let t0 = std::time::Instant::now();
            s.sample_into(&mut t);
            costs.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        costs.sort_by(f64::total_cmp);
        eprintln!(
            "sample_into ({} series): median {:.1} µs, p99 {:.1} µs (this build's profile; see benches/sample.rs for release)",
            s.series().len(),
            costs[n / 2],
            costs[n * 99 / 100]
        );
        for part in [Part::Cpu, Part::Memory, Part::Network, Part::Disk, Part::Gpu] {
            let t0 = std::time::Instant::now();
            for _ in 0..n {
                s.sample_part_into(part, &mut t);
            }
            eprintln!("  {part:?}: {:.1} µs mean", t0.elapsed().as_secs_f64() * 1e6 / n as f64);
        }
        // sysinfo, for comparison with the procfs readers it was measured against.
        let mut nets = sysinfo::Networks::new_with_refreshed_list();
        let t0 = std::time::Instant::now();
        for _ in 0..n {
            nets.refresh(true);
        }
        eprintln!(
            "  sysinfo Networks::refresh: {:.1} µs mean",
            t0.elapsed().as_secs_f64() * 1e6 / n as f64
        );
        let mut sys = sysinfo::System::new();
        let t0 = std::time::Instant::now();
        for _ in 0..n {
            sys.refresh_memory();
        }
        eprintln!(
            "  sysinfo System::refresh_memory: {:.1} µs mean",
            t0.elapsed().as_secs_f64() * 1e6 / n as f64
        );
        let t0 = std::time::Instant::now();
        for _ in 0..n {
            // sysinfo re-reads /proc/stat at most every 200 ms; force it by
            // making a fresh System (includes its /proc/cpuinfo read).
            let mut sys = sysinfo::System::new();
            sys.refresh_cpu_usage();
        }
        eprintln!(
            "  sysinfo new System + refresh_cpu_usage: {:.1} µs mean",
            t0.elapsed().as_secs_f64() * 1e6 / n as f64
        );
    }
}
