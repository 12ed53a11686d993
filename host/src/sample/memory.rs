//! Memory: `system.memory.usage` (By, `system.memory.state` = used | free |
//! cached | buffers), `system.memory.limit` (By, total),
//! `system.memory.linux.available` (By) and `system.memory.utilization`
//! ("1", state = used).
//!
//! Definitions follow the semantic conventions (1.37 on): used = MemTotal −
//! MemAvailable (what the kernel cannot hand out without swapping), or
//! total − free − buffers − cached on kernels without MemAvailable (before
//! 3.14); cached = Cached + SReclaimable as procps `free` counts it.
//!
//! Why /proc/meminfo directly: sysinfo has no cached/buffers figures, and
//! its `refresh_memory` opens and reads the file into a fresh String each call.
//! sysinfo is the fallback where /proc/meminfo is missing (other OSes; there
//! cached and buffers are NaN).

use super::procfs::{self, ProcFile};
use super::{Out, Roots, attrs};
use crate::model::{AttrValue, SeriesKind};

/// The /proc/meminfo fields we use, in bytes (NaN when absent).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct MemInfo {
    pub total: f64,
    pub free: f64,
    pub available: f64,
    pub buffers: f64,
    pub cached: f64,
    pub sreclaimable: f64,
}

pub(crate) fn parse_meminfo(buf: &[u8]) -> MemInfo {
    let mut m = MemInfo {
        total: f64::NAN,
        free: f64::NAN,
        available: f64::NAN,
        buffers: f64::NAN,
        cached: f64::NAN,
        sreclaimable: f64::NAN,
    };
    for line in procfs::lines(buf) {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (key, rest) = (&line[..colon], &line[colon + 1..]);
        let slot = match key {
            b"MemTotal" => &mut m.total,
            b"MemFree" => &mut m.free,
            b"MemAvailable" => &mut m.available,
            b"Buffers" => &mut m.buffers,
            b"Cached" => &mut m.cached,
            b"SReclaimable" => &mut m.sreclaimable,
            _ => continue,
        };
        let mut f = procfs::fields(rest);
        if let Some(v) = f.next().and_then(procfs::parse_u64) {
            let mult = if f.next() == Some(b"kB") { 1024.0 } else { 1.0 };
            *slot = v as f64 * mult;
        }
    }
    m
}

impl MemInfo {
    /// Cached + SReclaimable (SReclaimable missing on very old kernels: 0).
    pub(crate) fn cached_all(&self) -> f64 {
        self.cached
            + if self.sreclaimable.is_nan() {
                0.0
            } else {
                self.sreclaimable
            }
    }

    pub(crate) fn used(&self) -> f64 {
        if !self.available.is_nan() {
            return (self.total - self.available).max(0.0);
        }
        let u = self.total - self.free - self.buffers - self.cached_all();
        // used can dip below 0 on odd accounting (e.g. some containers)
        if u < 0.0 { self.total - self.free } else { u }
    }
}

enum Source {
    Proc(ProcFile),
    Sysinfo(Box<sysinfo::System>),
}

pub(crate) struct MemReader {
    src: Source,
    used: u32,
    free: u32,
    cached: u32,
    buffers: u32,
    limit: u32,
    available: u32,
    utilization: u32,
}

impl MemReader {
    pub(crate) fn new(roots: &Roots, out: &mut Out) -> Self {
        let state = |s: &str| attrs([("system.memory.state", AttrValue::from(s))]);
        let used = out.add("system.memory.usage", "By", SeriesKind::Gauge, state("used"));
        let free = out.add("system.memory.usage", "By", SeriesKind::Gauge, state("free"));
        let cached = out.add("system.memory.usage", "By", SeriesKind::Gauge, state("cached"));
        let buffers = out.add("system.memory.usage", "By", SeriesKind::Gauge, state("buffers"));
        let limit = out.add("system.memory.limit", "By", SeriesKind::Gauge, Vec::new());
        let available = out.add("system.memory.linux.available", "By", SeriesKind::Gauge, Vec::new());
        let utilization = out.add("system.memory.utilization", "1", SeriesKind::Gauge, state("used"));
        // procfs directly: sysinfo has no cached/buffers and re-opens the file per call.
        let mut file = ProcFile::open(roots.proc.join("meminfo"));
        let src = if file.read().is_some() {
            Source::Proc(file)
        } else {
            tracing::info!(path = %file.path().display(), "sampler: no /proc/meminfo; memory from sysinfo (no cached/buffers)");
            Source::Sysinfo(Box::new(sysinfo::System::new()))
        };
        Self {
            src,
            used,
            free,
            cached,
            buffers,
            limit,
            available,
            utilization,
        }
    }

    pub(crate) fn read(&mut self, out: &mut Out) {
        let m = match &mut self.src {
            Source::Proc(file) => {
                let Some(buf) = file.read() else { return };
                parse_meminfo(buf)
            }
            Source::Sysinfo(sys) => {
                sys.refresh_memory();
                let total = sys.total_memory() as f64;
                let available = sys.available_memory() as f64;
                out.set(self.used, sys.used_memory() as f64);
                out.set(self.free, sys.free_memory() as f64);
                out.set(self.limit, total);
                out.set(self.available, available);
                out.set(self.utilization, sys.used_memory() as f64 / total);
                return;
            }
        };
        let used = m.used();
        out.set(self.used, used);
        out.set(self.free, m.free);
        out.set(self.cached, m.cached_all());
        out.set(self.buffers, m.buffers);
        out.set(self.limit, m.total);
        out.set(self.available, m.available);
        out.set(self.utilization, if m.total > 0.0 { used / m.total } else { f64::NAN });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_meminfo() {
        let m = parse_meminfo(super::super::testutil::MEMINFO.as_bytes());
        assert_eq!(m.total, 16_000_000.0 * 1024.0);
        assert_eq!(m.free, 4_000_000.0 * 1024.0);
        assert_eq!(m.available, 10_000_000.0 * 1024.0);
        assert_eq!(m.buffers, 500_000.0 * 1024.0);
        assert_eq!(m.cached_all(), 5_500_000.0 * 1024.0);
        // MemTotal − MemAvailable
        assert_eq!(m.used(), 6_000_000.0 * 1024.0);
        let m =
            parse_meminfo(b"MemTotal: 1000 kB\nMemFree: 100 kB\nMemAvailable: 700 kB\nBuffers: 10 kB\nCached: 90 kB\n");
        assert_eq!(
            m.used(),
            300.0 * 1024.0,
            "MemTotal − MemAvailable, not total − free − buffers − cached"
        );
    }

    #[test]
    fn missing_fields_are_nan() {
        // An old kernel without MemAvailable / SReclaimable.
        let m =
            parse_meminfo(b"MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 10 kB\nCached: 90 kB\nHugePages_Total: 0\n");
        assert!(m.available.is_nan());
        assert_eq!(m.cached_all(), 90.0 * 1024.0);
        assert_eq!(m.used(), 800.0 * 1024.0);
        let m = parse_meminfo(b"");
        assert!(m.total.is_nan() && m.used().is_nan());
    }
}
