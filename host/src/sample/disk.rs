//! Disks, per whole block device (`system.device`), cumulative counters:
//! `system.disk.io` (By, sectors × 512) and `system.disk.operations`
//! ({operation}) by `disk.io.direction` = read | write, and
//! `system.disk.io_time` (s, time the device was busy).
//!
//! Which devices: whole disks only, i.e. names with a /sys/block/<name> entry
//! (partitions have none), minus loop*, ram* and zram* (device-mapper and md
//! devices stay). A non-empty `disks` list is an allowlist and wins over these
//! rules (naming `sda1` reports that partition). Devices that appear later get
//! series appended.
//!
//! Where from: /proc/diskstats lists every device (discovery, and the
//! values when more than `MAX_SYSFS` disks are selected). With few disks
//! selected, each tick reads /sys/class/block/<name>/stat per disk instead
//! and rescans /proc/diskstats every `RESCAN_TICKS` ticks for new devices:
//! the kernel sums per-CPU counters for every line it prints, so one disk's
//! file costs a fraction of /proc/diskstats, the more so next to dozens of
//! snap loop devices (the times: docs/benchmarks.md).
//!
//! Why procfs/sysfs directly: sysinfo's `disk` feature reports mounted
//! filesystems, not block devices, and is not built in. Linux only:
//! elsewhere there are no disk series.

use std::path::PathBuf;

use super::procfs::{self, ProcFile, Tracker};
use super::{Out, Roots, attrs};
use crate::model::{AttrValue, SeriesKind};
use crate::sample::config::SamplerConfig;

/// The counters of one device, in series order: bytes read, bytes written,
/// reads completed, writes completed, seconds busy.
pub(crate) fn parse_line(line: &[u8]) -> Option<(&[u8], [f64; 5])> {
    // major minor name, then the counters
    let mut f = procfs::fields(line);
    f.next()?;
    f.next()?;
    let name = f.next()?;
    Some((name, parse_counters(f)?))
}

/// The counters as /proc/diskstats prints them after the name, and as
/// /sys/class/block/<name>/stat prints them alone (kernel numbering):
/// 1 reads 2 reads merged 3 sectors read 4 ms reading 5 writes 6 writes merged
/// 7 sectors written 8 ms writing 9 in flight 10 ms doing I/O 11 weighted ms
/// [12-15 discards, 16-17 flushes].
pub(crate) fn parse_counters<'a>(mut f: impl Iterator<Item = &'a [u8]>) -> Option<[f64; 5]> {
    let mut v = [0u64; 10];
    for slot in v.iter_mut() {
        *slot = procfs::parse_u64(f.next()?)?;
    }
    Some([
        v[2] as f64 * 512.0,
        v[6] as f64 * 512.0,
        v[0] as f64,
        v[4] as f64,
        v[9] as f64 / 1000.0,
    ])
}

/// Which devices get series.
pub(crate) struct DiskFilter {
    allow: Vec<String>,
    sys_block: PathBuf,
    sys_class_block: PathBuf,
}

impl DiskFilter {
    pub(crate) fn new(cfg: &SamplerConfig, roots: &Roots) -> Self {
        Self {
            allow: cfg.disks.clone(),
            sys_block: roots.sys.join("block"),
            sys_class_block: roots.sys.join("class/block"),
        }
    }

    /// Called once per device name, the first time it is seen.
    pub(crate) fn include(&self, name: &str) -> bool {
        if !self.allow.is_empty() {
            return self.allow.iter().any(|a| a == name);
        }
        if ["loop", "ram", "zram"].iter().any(|p| name.starts_with(p)) {
            return false;
        }
        self.sys_block.join(sysfs_name(name)).exists()
    }

    /// The per-device counters file (partitions have one too).
    fn stat_path(&self, name: &str) -> PathBuf {
        self.sys_class_block.join(sysfs_name(name)).join("stat")
    }
}

/// "cciss/c0d0" in /proc/diskstats is "cciss!c0d0" in sysfs.
fn sysfs_name(name: &str) -> String {
    name.replace('/', "!")
}

const PER_DISK: [(&str, &str, Option<&str>); 5] = [
    ("system.disk.io", "By", Some("read")),
    ("system.disk.io", "By", Some("write")),
    ("system.disk.operations", "{operation}", Some("read")),
    ("system.disk.operations", "{operation}", Some("write")),
    ("system.disk.io_time", "s", None),
];

fn add_series(out: &mut Out, name: &[u8]) -> u32 {
    let name = String::from_utf8_lossy(name).into_owned();
    let mut first = None;
    for (metric, unit, dir) in PER_DISK {
        let a = match dir {
            Some(d) => attrs([
                ("system.device", AttrValue::from(name.as_str())),
                ("disk.io.direction", AttrValue::from(d)),
            ]),
            None => attrs([("system.device", AttrValue::from(name.as_str()))]),
        };
        first.get_or_insert(out.add(metric, unit, SeriesKind::Counter, a));
    }
    first.unwrap_or(0)
}

/// Read per-disk sysfs files instead of /proc/diskstats up to this many disks.
pub(crate) const MAX_SYSFS: usize = 4;
/// With per-disk files, /proc/diskstats is rescanned for new devices this often.
pub(crate) const RESCAN_TICKS: u32 = 50;

pub(crate) struct DiskReader {
    diskstats: ProcFile,
    filter: DiskFilter,
    tracker: Tracker,
    /// Per selected disk: its sysfs stat file and first series id. Used while
    /// `fast` is on.
    per_disk: Vec<(ProcFile, u32)>,
    fast: bool,
    since_scan: u32,
}

impl DiskReader {
    pub(crate) fn new(cfg: &SamplerConfig, roots: &Roots, out: &mut Out) -> Self {
        let mut me = Self {
            // procfs directly: sysinfo has no block-device counters (its disks are filesystems).
            diskstats: ProcFile::open(roots.proc.join("diskstats")),
            filter: DiskFilter::new(cfg, roots),
            tracker: Tracker::default(),
            per_disk: Vec::new(),
            fast: false,
            since_scan: 0,
        };
        if me.diskstats.is_open() {
            me.scan(out); // discovery
            if me.tracker.included_count() == 0 {
                tracing::info!(disks = ?cfg.disks, "sampler: no block device selected (yet)");
            }
        } else {
            tracing::info!(path = %me.diskstats.path().display(), "sampler: no /proc/diskstats; no disk series");
        }
        me
    }

    pub(crate) fn read(&mut self, out: &mut Out) {
        if !self.fast || self.since_scan >= RESCAN_TICKS {
            self.scan(out);
            return;
        }
        self.since_scan += 1;
        for (file, base) in &mut self.per_disk {
            let Some(vals) = file.read().and_then(|b| parse_counters(procfs::fields(b))) else {
                continue;
            };
            for (k, v) in vals.iter().enumerate() {
                out.set(*base + k as u32, *v);
            }
        }
    }

    /// Reads /proc/diskstats: values, new devices, and whether the per-disk
    /// files can take over.
    fn scan(&mut self, out: &mut Out) {
        self.since_scan = 0;
        let before = self.tracker.included_count();
        let Some(buf) = self.diskstats.read() else { return };
        for (pos, line) in procfs::lines(buf).enumerate() {
            let Some((name, vals)) = parse_line(line) else { continue };
            let base = match self.tracker.get(pos, name) {
                Some(b) => b,
                None => {
                    let name_s = String::from_utf8_lossy(name);
                    let include = self.filter.include(&name_s);
                    let (filter, per_disk) = (&self.filter, &mut self.per_disk);
                    self.tracker.insert("block device", name, include, || {
                        let base = add_series(out, name);
                        // sysfs per disk: the kernel formats only this disk (see the header).
                        per_disk.push((ProcFile::open(filter.stat_path(&name_s)), base));
                        base
                    })
                }
            };
            if let Some(base) = base {
                for (k, v) in vals.iter().enumerate() {
                    out.set(base + k as u32, *v);
                }
            }
        }
        if self.tracker.included_count() != before || !self.fast {
            self.fast = !self.per_disk.is_empty()
                && self.per_disk.len() <= MAX_SYSFS
                && self
                    .per_disk
                    .iter_mut()
                    .all(|(f, _)| f.read().is_some_and(|b| parse_counters(procfs::fields(b)).is_some()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    #[test]
    fn parses_lines() {
        let l =
            b" 254       0 vda 6100 3199 1417538 5550 2954 36312 4253240 33094 0 3976 39025 3842 90 194608 376 90 2";
        let (n, v) = parse_line(l).unwrap();
        assert_eq!(n, b"vda");
        assert_eq!(v, [1417538.0 * 512.0, 4253240.0 * 512.0, 6100.0, 2954.0, 3.976]);
        // pre-4.18 kernels: 14 fields
        let (_, v) = parse_line(b"8 0 sda 1 2 3 4 5 6 7 8 9 10 11").unwrap();
        assert_eq!(v, [3.0 * 512.0, 7.0 * 512.0, 1.0, 5.0, 0.01]);
        assert!(parse_line(b"8 0 sda 1 2 3").is_none());
    }

    fn selected(cfg: &SamplerConfig) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let roots = fixture_machine(dir.path());
        let (mut series, mut values) = (Vec::new(), Vec::new());
        let mut out = Out {
            series: &mut series,
            values: &mut values,
        };
        let r = DiskReader::new(cfg, &roots, &mut out);
        assert_eq!(series.len(), 5 * r.tracker.included_count());
        r.tracker.included()
    }

    #[test]
    fn whole_disks_only_without_loop_ram_zram() {
        assert_eq!(selected(&SamplerConfig::default()), vec!["vda", "nvme0n1", "dm-0"]);
    }

    #[test]
    fn per_disk_files_with_rescan() {
        let dir = tempfile::tempdir().unwrap();
        let roots = fixture_machine(dir.path());
        write_tree(
            dir.path(),
            &[
                (
                    "sys/class/block/vda/stat",
                    "  6100 0 100 0 2954 0 200 0 0 3000 0 0 0 0 0 0 0\n",
                ),
                ("sys/class/block/nvme0n1/stat", "1 0 1 0 1 0 1 0 0 1 0\n"),
                ("sys/class/block/dm-0/stat", "1 0 1 0 1 0 1 0 0 1 0\n"),
            ],
        );
        let (mut series, mut values) = (Vec::new(), Vec::new());
        let mut out = Out {
            series: &mut series,
            values: &mut values,
        };
        let mut r = DiskReader::new(&SamplerConfig::default(), &roots, &mut out);
        assert!(r.fast);
        r.read(&mut out);
        // vda's first series is bytes read: from its sysfs file now, not diskstats.
        assert_eq!(out.values[0], 100.0 * 512.0);
        assert_eq!(out.values[4], 3.0);
        // A new disk shows up at the next rescan.
        let disks = format!("{DISKSTATS} 8 0 sdb 1 0 2 0 3 0 4 0 0 5 0\n");
        write_tree(dir.path(), &[("proc/diskstats", &disks), ("sys/block/sdb/size", "1")]);
        for _ in 1..RESCAN_TICKS {
            r.read(&mut out); // RESCAN_TICKS fast reads in all
        }
        assert_eq!(series.len(), 15);
        let mut out = Out {
            series: &mut series,
            values: &mut values,
        };
        r.read(&mut out);
        assert_eq!(series.len(), 20);
        assert!(
            !r.fast,
            "sdb has no sysfs stat file in the fixture: back to /proc/diskstats"
        );
        assert_eq!(values[19], 0.005);
    }

    #[test]
    fn allowlist_wins() {
        let cfg = SamplerConfig {
            disks: vec!["vda1".into(), "nvme0n1".into(), "sdz".into()],
            ..Default::default()
        };
        assert_eq!(selected(&cfg), vec!["vda1", "nvme0n1"]);
    }
}
