//! `system.cpu.utilization` (gauge, "1") per `cpu.mode`: for all CPUs
//! together, and per logical CPU (`cpu.logical_number`) when `per_core` is
//! on. Each value is the share of the time since the previous tick that the
//! CPU spent in that mode, so one CPU's seven values at a tick add up to 1.
//!
//! ```text
//!  /proc/stat  cpu  user nice system idle iowait irq softirq steal guest guest_nice
//!                    │    │     │     │     │     └──┬──┘    │    (guest time is already
//!                    ▼    ▼     ▼     ▼     ▼        ▼       ▼     inside user and nice)
//!  cpu.mode        user nice system idle iowait interrupt steal
//! ```
//!
//! The modes are the conventions' values (`kernel` is deprecated for
//! `system`). Consumers that want one "busy" number derive it from the modes
//! (the plugin SDK's `cpu` module; docs/exports.md says which modes count as
//! busy and why): the host does not pick a definition for them.
//! Cost: 7 series per CPU line, so 7 × (1 + logical CPUs) with `per_core`
//! (docs/exports.md has the measured price per tick).
//!
//! Why /proc/stat directly and not sysinfo's `refresh_cpu_usage`: sysinfo
//! 0.37 refuses to re-read CPU times more often than every 200 ms
//! (`MINIMUM_CPU_UPDATE_INTERVAL`), so at our 100 ms period every other tick
//! would repeat a stale value, it opens the file and allocates a `BufReader`
//! on every call, and it gives one busy share, not the modes. sysinfo is the
//! fallback where /proc/stat is missing (other OSes): there only
//! `cpu.mode=idle` is emitted (1 − sysinfo's busy share), the one mode that
//! share tells.

use super::procfs::{self, ProcFile, Tracker};
use super::{Out, Roots, attrs};
use crate::model::{AttrValue, Attributes, SeriesKind};
use crate::sample::config::SamplerConfig;

const METRIC: &str = "system.cpu.utilization";

/// The conventions' `cpu.mode` values, in the order of [`Times`] and of the
/// series each CPU gets.
const MODES: [&str; 7] = ["user", "nice", "system", "idle", "iowait", "interrupt", "steal"];
const IDLE: usize = 3;

/// Cumulative CPU time per mode ([`MODES`] order) in USER_HZ ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Times(pub [u64; 7]);

/// Parses the numbers of one `cpu…` line (after the name).
pub(crate) fn parse_times<'a>(mut nums: impl Iterator<Item = &'a [u8]>) -> Option<Times> {
    // user nice system idle iowait irq softirq steal [guest guest_nice]:
    // guest time is already counted in user/nice, so only the first 8 count.
    // Old kernels print only the first 4; the rest read 0.
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
    Some(Times([v[0], v[1], v[2], v[3], v[4], v[5] + v[6], v[7]]))
}

/// One CPU line's series (all CPUs, or one logical CPU) and its baseline.
#[derive(Debug)]
struct Slot {
    /// Series ids by mode; the sysinfo fallback has only the idle one.
    ids: [Option<u32>; 7],
    prev: Option<Times>,
    last: [f64; 7],
}

impl Slot {
    /// Declares the seven series of one CPU line (`cpu` = None: all CPUs).
    fn declare(out: &mut Out, cpu: Option<i64>) -> Self {
        let mut ids = [None; 7];
        for (id, mode) in ids.iter_mut().zip(MODES) {
            *id = Some(out.add(METRIC, "1", SeriesKind::Gauge, mode_attrs(cpu, mode)));
        }
        Self::with_ids(ids)
    }

    fn with_ids(ids: [Option<u32>; 7]) -> Self {
        Self {
            ids,
            prev: None,
            last: [f64::NAN; 7],
        }
    }

    /// Shares since the previous reading. Each mode's delta saturates at 0
    /// (iowait can step backwards on NO_HZ kernels) and the shares are taken
    /// of the deltas' sum, so they stay in 0..=1 and add up to 1. When no
    /// time has passed (two reads within one USER_HZ tick) the previous
    /// shares are repeated and the baseline kept, so the next delta covers
    /// the whole span.
    fn update(&mut self, now: Times) -> &[f64; 7] {
        if let Some(p) = self.prev {
            let mut d = [0u64; 7];
            for (d, (n, p)) in d.iter_mut().zip(now.0.iter().zip(p.0)) {
                *d = n.saturating_sub(p);
            }
            let dt: u64 = d.iter().sum();
            if dt == 0 {
                return &self.last;
            }
            for (share, d) in self.last.iter_mut().zip(d) {
                *share = d as f64 / dt as f64;
            }
        }
        self.prev = Some(now);
        &self.last
    }

    /// Takes a reading and sets this CPU's series to its shares.
    fn record(&mut self, now: Times, out: &mut Out) {
        let shares = *self.update(now);
        self.write(out, &shares);
    }

    fn write(&self, out: &mut Out, shares: &[f64; 7]) {
        for (id, &v) in self.ids.iter().zip(shares) {
            if let Some(id) = *id {
                out.set(id, v);
            }
        }
    }
}

/// `cpu.logical_number` (per core) then `cpu.mode`.
fn mode_attrs(cpu: Option<i64>, mode: &str) -> Attributes {
    match cpu {
        Some(n) => attrs([
            ("cpu.logical_number", AttrValue::Int(n)),
            ("cpu.mode", AttrValue::from(mode)),
        ]),
        None => attrs([("cpu.mode", AttrValue::from(mode))]),
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
        // procfs directly: sysinfo re-reads CPU times at most every 200 ms (see the header).
        let mut file = ProcFile::open(roots.proc.join("stat"));
        let per_core = cfg.per_core;
        if file.read().is_some_and(|b| b.starts_with(b"cpu ")) {
            let mut me = Self {
                src: Source::Proc(file),
                per_core,
                total: Slot::declare(out, None),
                cores: Vec::new(),
                tracker: Tracker::default(),
            };
            me.read(out); // discovers the CPUs and sets the baseline
            return me;
        }
        tracing::info!(path = %file.path().display(), "sampler: no /proc/stat; CPU idle share from sysinfo (no other modes; updates at most every 200 ms)");
        let mut sys = sysinfo::System::new();
        sys.refresh_cpu_usage();
        let idle_only = |out: &mut Out, cpu| {
            let mut ids = [None; 7];
            ids[IDLE] = Some(out.add(METRIC, "1", SeriesKind::Gauge, mode_attrs(cpu, MODES[IDLE])));
            Slot::with_ids(ids)
        };
        let total = idle_only(out, None);
        let mut cores = Vec::new();
        if per_core {
            for n in 0..sys.cpus().len() {
                cores.push(idle_only(out, Some(n as i64)));
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
                        self.total.record(times, out);
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
                                cores.push(Slot::declare(out, Some(n as i64)));
                                (cores.len() - 1) as u32
                            }) else {
                                continue;
                            };
                            i
                        }
                    };
                    pos += 1;
                    self.cores[idx as usize].record(times, out);
                }
            }
            Source::Sysinfo(sys) => {
                sys.refresh_cpu_usage();
                let idle = |busy_percent: f32| {
                    let mut shares = [f64::NAN; 7];
                    shares[IDLE] = 1.0 - f64::from(busy_percent) / 100.0;
                    shares
                };
                self.total.write(out, &idle(sys.global_cpu_usage()));
                for (slot, c) in self.cores.iter().zip(sys.cpus()) {
                    slot.write(out, &idle(c.cpu_usage()));
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
        // user nice system idle iowait interrupt(irq+softirq) steal; guest left out
        assert_eq!(t, Times([32488, 5, 2714, 23911, 153, 16, 137]));
        // old kernels print only 4 numbers
        let t = parse_times(procfs::fields(b"1 2 3 4")).unwrap();
        assert_eq!(t, Times([1, 2, 3, 4, 0, 0, 0]));
        assert!(parse_times(procfs::fields(b"1 2 x")).is_none());
    }

    #[test]
    fn shares_from_deltas() {
        let mut s = Slot::with_ids([None; 7]);
        assert!(s.update(Times([10, 0, 10, 100, 0, 0, 0])).iter().all(|v| v.is_nan()));
        // +50 user, +10 system, +20 idle, +10 iowait, +5 interrupt, +5 steal of 100
        let got = *s.update(Times([60, 0, 20, 120, 10, 5, 5]));
        assert_eq!(got, [0.5, 0.0, 0.1, 0.2, 0.1, 0.05, 0.05]);
        // no time passed: repeat, keep baseline
        assert_eq!(*s.update(Times([60, 0, 20, 120, 10, 5, 5])), got);
        assert_eq!(
            *s.update(Times([160, 0, 20, 120, 10, 5, 5])),
            [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
        );
        // iowait going backwards (a NO_HZ quirk) never gives a share outside
        // 0..=1 or a sum other than 1
        let v = *s.update(Times([160, 0, 20, 220, 2, 5, 5]));
        assert!(v.iter().all(|x| (0.0..=1.0).contains(x)), "{v:?}");
        assert!((v.iter().sum::<f64>() - 1.0).abs() < 1e-12, "{v:?}");
        assert_eq!(v[IDLE], 1.0);
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
    fn seven_modes_per_cpu_line_and_per_core_follows_config() {
        let stat = "cpu  1 0 1 8\ncpu0 1 0 1 8\ncpu2 1 0 1 8\nintr 1\n";
        let on = series_for(&SamplerConfig::default(), stat);
        assert_eq!(on.len(), 3 * 7);
        let modes: Vec<_> = on[..7].iter().map(|s| s.attributes.clone()).collect();
        for (a, mode) in modes.iter().zip(MODES) {
            assert_eq!(a, &vec![("cpu.mode".to_string(), AttrValue::from(mode))]);
        }
        assert_eq!(
            on[14 + 3].attributes,
            vec![
                ("cpu.logical_number".to_string(), AttrValue::Int(2)),
                ("cpu.mode".to_string(), AttrValue::from("idle")),
            ]
        );
        assert!(
            on.iter()
                .all(|s| s.metric == METRIC && s.unit == "1" && s.kind == SeriesKind::Gauge)
        );
        let off = series_for(
            &SamplerConfig {
                per_core: false,
                ..Default::default()
            },
            stat,
        );
        assert_eq!(off.len(), 7);
    }
}
