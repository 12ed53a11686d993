//! `system.cpu.utilization` (gauge, "1"): all CPUs, and per logical CPU
//! (`cpu.logical_number`) when `per_core` is on. The busy share of the time
//! since the previous tick: 1 − Δ(idle + iowait) / Δ(user … steal).
//!
//! Why /proc/stat directly and not sysinfo's `refresh_cpu_usage`: sysinfo
//! 0.37 refuses to re-read CPU times more often than every 200 ms
//! (`MINIMUM_CPU_UPDATE_INTERVAL`), so at our 100 ms period every other tick
//! would repeat a stale value, and it opens the file and allocates a
//! `BufReader` on every call. sysinfo is the fallback where /proc/stat is
//! missing (other OSes).

use super::procfs::{self, ProcFile, Tracker};
use super::{Out, Roots, attrs};
use crate::model::{AttrValue, SeriesKind};
use crate::sample::config::SamplerConfig;

/// Cumulative CPU time in USER_HZ ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Times {
    pub idle: u64,
    pub total: u64,
}

/// Parses the numbers of one `cpu…` line (after the name).
pub(crate) fn parse_times<'a>(mut nums: impl Iterator<Item = &'a [u8]>) -> Option<Times> {
    // user nice system idle iowait irq softirq steal [guest guest_nice]:
    // guest time is already counted in user/nice, so only the first 8 add up.
    let mut v = [0u64; 8];
    let mut n = 0;
    for slot in v.iter_mut() {
        match nums.next().and_then(procfs::parse_u64) {
            Some(x) => {
                *slot = x;
                n += 1;
            }
            None => break,
        }
    }
    if n < 4 {
        return None;
    }
    Some(Times {
        idle: v[3] + v[4],
        total: v.iter().sum(),
    })
}

/// The state of one utilization series.
#[derive(Debug)]
struct Slot {
    id: u32,
    prev: Option<Times>,
    last: f64,
}

impl Slot {
    fn new(id: u32) -> Self {
        Self {
            id,
            prev: None,
            last: f64::NAN,
        }
    }

    /// Utilization since the previous reading; when no time has passed (two
    /// reads within one USER_HZ tick) the previous value is repeated and the
    /// baseline kept, so the next delta covers the whole span.
    fn update(&mut self, now: Times) -> f64 {
        if let Some(p) = self.prev {
            let dt = now.total.saturating_sub(p.total);
            if dt == 0 {
                return self.last;
            }
            let didle = now.idle.saturating_sub(p.idle).min(dt);
            self.last = 1.0 - didle as f64 / dt as f64;
        }
        self.prev = Some(now);
        self.last
    }
}

enum Source {
    Proc(ProcFile),
    Sysinfo(Box<sysinfo::System>),
}

pub(crate) struct CpuReader {
    src: Source,
    per_core: bool,
    total: Slot,
    /// Per-core slots by position in the tracker (index = order of discovery).
    cores: Vec<Slot>,
    tracker: Tracker,
}

impl CpuReader {
    pub(crate) fn new(cfg: &SamplerConfig, roots: &Roots, out: &mut Out) -> Self {
        let total = Slot::new(out.add("system.cpu.utilization", "1", SeriesKind::Gauge, Vec::new()));
        // procfs directly: sysinfo re-reads CPU times at most every 200 ms (see the header).
        let mut file = ProcFile::open(roots.proc.join("stat"));
        let per_core = cfg.per_core;
        if file.read().is_some_and(|b| b.starts_with(b"cpu ")) {
            let mut me = Self {
                src: Source::Proc(file),
                per_core,
                total,
                cores: Vec::new(),
                tracker: Tracker::default(),
            };
            me.read(out); // discovers the CPUs and sets the baseline
            return me;
        }
        tracing::info!(path = %file.path().display(), "sampler: no /proc/stat; CPU utilization from sysinfo (updates at most every 200 ms)");
        let mut sys = sysinfo::System::new();
        sys.refresh_cpu_usage();
        let mut cores = Vec::new();
        if per_core {
            for n in 0..sys.cpus().len() {
                let a = attrs([("cpu.logical_number", AttrValue::Int(n as i64))]);
                cores.push(Slot::new(out.add("system.cpu.utilization", "1", SeriesKind::Gauge, a)));
            }
        }
        Self {
            src: Source::Sysinfo(Box::new(sys)),
            per_core,
            total,
            cores,
            tracker: Tracker::default(),
        }
    }

    pub(crate) fn read(&mut self, out: &mut Out) {
        match &mut self.src {
            Source::Proc(file) => {
                let Some(buf) = file.read() else { return };
                let mut pos = 0;
                for line in procfs::lines(buf) {
                    let mut f = procfs::fields(line);
                    let Some(name) = f.next() else { continue };
                    let Some(num) = name.strip_prefix(b"cpu") else { break };
                    let Some(times) = parse_times(f) else { continue };
                    if num.is_empty() {
                        let v = self.total.update(times);
                        out.set(self.total.id, v);
                        continue;
                    }
                    if !self.per_core {
                        break;
                    }
                    let idx = match self.tracker.get(pos, num) {
                        Some(Some(i)) => i,
                        Some(None) => continue,
                        None => {
                            let Some(n) = procfs::parse_u64(num) else { continue };
                            let cores = &mut self.cores;
                            let Some(i) = self.tracker.insert("logical CPU", num, true, || {
                                let id = out.add(
                                    "system.cpu.utilization",
                                    "1",
                                    SeriesKind::Gauge,
                                    attrs([("cpu.logical_number", AttrValue::Int(n as i64))]),
                                );
                                cores.push(Slot::new(id));
                                (cores.len() - 1) as u32
                            }) else {
                                continue;
                            };
                            i
                        }
                    };
                    pos += 1;
                    let slot = &mut self.cores[idx as usize];
                    let v = slot.update(times);
                    out.set(slot.id, v);
                }
            }
            Source::Sysinfo(sys) => {
                sys.refresh_cpu_usage();
                out.set(self.total.id, f64::from(sys.global_cpu_usage()) / 100.0);
                for (slot, c) in self.cores.iter().zip(sys.cpus()) {
                    out.set(slot.id, f64::from(c.cpu_usage()) / 100.0);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_from_a_line() {
        let line: &[u8] = b"cpu0 32488 5 2714 23911 153 1 15 137 9 9";
        let mut f = procfs::fields(line);
        f.next();
        let t = parse_times(f).unwrap();
        assert_eq!(t.idle, 23911 + 153);
        assert_eq!(t.total, 32488 + 5 + 2714 + 23911 + 153 + 1 + 15 + 137);
        // old kernels print only 4 numbers
        let t = parse_times(procfs::fields(b"1 2 3 4")).unwrap();
        assert_eq!(t, Times { idle: 4, total: 10 });
        assert!(parse_times(procfs::fields(b"1 2 x")).is_none());
    }

    #[test]
    fn utilization_from_deltas() {
        let mut s = Slot::new(0);
        assert!(s.update(Times { idle: 100, total: 200 }).is_nan());
        assert_eq!(s.update(Times { idle: 150, total: 300 }), 0.5);
        // no time passed: repeat, keep baseline
        assert_eq!(s.update(Times { idle: 150, total: 300 }), 0.5);
        assert_eq!(s.update(Times { idle: 150, total: 400 }), 1.0);
        // idle going backwards (iowait quirk) never gives > 1 or < 0
        let v = s.update(Times { idle: 100, total: 500 });
        assert!((0.0..=1.0).contains(&v));
    }

    fn series_for(cfg: &SamplerConfig, stat: &str) -> Vec<crate::model::SeriesInfo> {
        let dir = tempfile::tempdir().unwrap();
        super::super::testutil::write_tree(dir.path(), &[("proc/stat", stat)]);
        let roots = Roots {
            proc: dir.path().join("proc"),
            sys: dir.path().join("sys"),
        };
        let (mut series, mut values) = (Vec::new(), Vec::new());
        let mut out = Out {
            series: &mut series,
            values: &mut values,
        };
        CpuReader::new(cfg, &roots, &mut out);
        series
    }

    #[test]
    fn per_core_series_follow_config() {
        let stat = "cpu  1 0 1 8\ncpu0 1 0 1 8\ncpu2 1 0 1 8\nintr 1\n";
        let on = series_for(&SamplerConfig::default(), stat);
        assert_eq!(on.len(), 3);
        assert_eq!(on[0].attributes, vec![]);
        assert_eq!(
            on[2].attributes,
            vec![("cpu.logical_number".to_string(), AttrValue::Int(2))]
        );
        let off = series_for(
            &SamplerConfig {
                per_core: false,
                ..Default::default()
            },
            stat,
        );
        assert_eq!(off.len(), 1);
    }
}
