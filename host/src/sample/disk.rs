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
//! Why /proc/diskstats directly: sysinfo's `disk` feature reports mounted
//! filesystems, not block devices, and is not built in; /proc/diskstats is one
//! file with every device. Linux only: elsewhere there are no disk series.

use std::path::PathBuf;

use super::procfs::{self, ProcFile, Tracker};
use super::{Out, Roots, attrs};
use crate::config::SamplerConfig;
use crate::model::{AttrValue, SeriesKind};

/// The counters of one device, in series order: bytes read, bytes written,
/// reads completed, writes completed, seconds busy.
pub(crate) fn parse_line(line: &[u8]) -> Option<(&[u8], [f64; 5])> {
    // major minor name, then (kernel numbering) 1 reads 2 reads merged
    // 3 sectors read 4 ms reading 5 writes 6 writes merged 7 sectors written
    // 8 ms writing 9 in flight 10 ms doing I/O 11 weighted ms [discard, flush …]
    let mut f = procfs::fields(line);
    f.next()?;
    f.next()?;
    let name = f.next()?;
    let mut v = [0u64; 10];
    for slot in v.iter_mut() {
        *slot = procfs::parse_u64(f.next()?)?;
    }
    Some((name, [v[2] as f64 * 512.0, v[6] as f64 * 512.0, v[0] as f64, v[4] as f64, v[9] as f64 / 1000.0]))
}

/// Which devices get series.
pub(crate) struct DiskFilter {
    allow: Vec<String>,
    sys_block: PathBuf,
}

impl DiskFilter {
    pub(crate) fn new(cfg: &SamplerConfig, roots: &Roots) -> Self {
        Self { allow: cfg.disks.clone(), sys_block: roots.sys.join("block") }
    }

    /// Called once per device name, the first time it is seen.
    pub(crate) fn include(&self, name: &str) -> bool {
        if !self.allow.is_empty() {
            return self.allow.iter().any(|a| a == name);
        }
        if ["loop", "ram", "zram"].iter().any(|p| name.starts_with(p)) {
            return false;
        }
        // "cciss/c0d0" in diskstats is "cciss!c0d0" in sysfs.
        self.sys_block.join(name.replace('/', "!")).exists()
    }
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
            Some(d) => {
                attrs([("system.device", AttrValue::from(name.as_str())), ("disk.io.direction", AttrValue::from(d))])
            }
            None => attrs([("system.device", AttrValue::from(name.as_str()))]),
        };
        first.get_or_insert(out.add(metric, unit, SeriesKind::Counter, a));
    }
    first.unwrap_or(0)
}

pub(crate) struct DiskReader {
    file: ProcFile,
    filter: DiskFilter,
    tracker: Tracker,
}

impl DiskReader {
    pub(crate) fn new(cfg: &SamplerConfig, roots: &Roots, out: &mut Out) -> Self {
        let mut me = Self {
            file: ProcFile::open(roots.proc.join("diskstats")),
            filter: DiskFilter::new(cfg, roots),
            tracker: Tracker::default(),
        };
        if me.file.is_open() {
            me.read(out); // discovery
            if me.tracker.included_count() == 0 {
                tracing::info!(disks = ?cfg.disks, "sampler: no block device selected (yet)");
            }
        } else {
            tracing::info!(path = %me.file.path().display(), "sampler: no /proc/diskstats; no disk series");
        }
        me
    }

    pub(crate) fn read(&mut self, out: &mut Out) {
        let Some(buf) = self.file.read() else { return };
        for (pos, line) in procfs::lines(buf).enumerate() {
            let Some((name, vals)) = parse_line(line) else { continue };
            let base = match self.tracker.get(pos, name) {
                Some(b) => b,
                None => {
                    let include = self.filter.include(&String::from_utf8_lossy(name));
                    self.tracker.insert("block device", name, include, || add_series(out, name))
                }
            };
            if let Some(base) = base {
                for (k, v) in vals.iter().enumerate() {
                    out.set(base + k as u32, *v);
                }
            }
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
        let mut out = Out { series: &mut series, values: &mut values };
        let r = DiskReader::new(cfg, &roots, &mut out);
        assert_eq!(series.len(), 5 * r.tracker.included_count());
        r.tracker.included()
    }

    #[test]
    fn whole_disks_only_without_loop_ram_zram() {
        assert_eq!(selected(&SamplerConfig::default()), vec!["vda", "nvme0n1", "dm-0"]);
    }

    #[test]
    fn allowlist_wins() {
        let cfg = SamplerConfig { disks: vec!["vda1".into(), "nvme0n1".into(), "sdz".into()], ..Default::default() };
        assert_eq!(selected(&cfg), vec!["vda1", "nvme0n1"]);
    }
}
