//! `system.cpu.utilization` per `cpu.mode`, read back as one busy share.
//!
//! The host samples, for all CPUs and for each logical CPU, the share of the
//! tick each spent in the conventions' modes (user, nice, system, idle,
//! iowait, interrupt, steal); one CPU's shares at one tick add up to 1. Most
//! logic wants one number, how busy the CPU was, and every plugin should get
//! the same number: [`BusyShare`] is that rule, [`CpuSeries`] says which CPU
//! and mode a series is, and [`CpuBusyColumns`] applies the rule to the
//! series of a sample batch.
//!
//! ```text
//!  series of one CPU at one tick          busy share
//!  cpu.mode=idle    0.60 ─┐
//!  cpu.mode=iowait  0.05 ─┴─► 1 − (0.60 + 0.05) = 0.35
//!  user, nice, system, interrupt, steal: not needed (they add up to the same)
//! ```
//!
//! **Busy** is every mode but `idle` and `iowait`:
//! - `iowait` is idle time during which some task waited for I/O: the CPU had
//!   nothing to run (the kernel's per-CPU figure is an estimate, as the
//!   waiting task sits on no CPU), so it counts as idle.
//! - `steal` counts as busy: the virtual CPU had work and the hypervisor ran
//!   someone else, so the machine had less CPU than its work asked for. This
//!   is what psutil's `cpu_percent` (Determined's and DLRover's agents) and
//!   "1 − idle" dashboards count, and what sonde reported before the modes.
//! - `interrupt` (irq and softirq) and `nice` are work like `user` and `system`.
//!
//! Only `idle` (and `iowait` when there is one) is needed, so a host that
//! tells only idle (sonde's sysinfo fallback on other OSes) still gives a
//! busy share; a tick whose `idle` was not read gives none. A series without
//! `cpu.mode` is the busy share itself, as sondes before per-mode sampling
//! (2026-11-26) exported it, so a master reads agents not yet upgraded.
//! Limits: shares are clamped to 0..=1; a mode value the conventions do not
//! define (other than the deprecated `kernel`, read as `system`) is not a CPU
//! series for this module.

use crate::types::{Attribute, SeriesInfo, Value};

/// The metric name.
pub const CPU_UTILIZATION: &str = "system.cpu.utilization";

/// The conventions' `cpu.mode` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CpuMode {
    User,
    Nice,
    System,
    Idle,
    Iowait,
    Interrupt,
    Steal,
}

impl CpuMode {
    pub const ALL: [CpuMode; 7] = [
        CpuMode::User,
        CpuMode::Nice,
        CpuMode::System,
        CpuMode::Idle,
        CpuMode::Iowait,
        CpuMode::Interrupt,
        CpuMode::Steal,
    ];

    /// The attribute value.
    pub fn as_str(self) -> &'static str {
        match self {
            CpuMode::User => "user",
            CpuMode::Nice => "nice",
            CpuMode::System => "system",
            CpuMode::Idle => "idle",
            CpuMode::Iowait => "iowait",
            CpuMode::Interrupt => "interrupt",
            CpuMode::Steal => "steal",
        }
    }

    /// The mode of an attribute value; `kernel` (deprecated by the
    /// conventions in favour of `system`) is `System`.
    pub fn parse(value: &str) -> Option<CpuMode> {
        match value {
            "kernel" => Some(CpuMode::System),
            v => CpuMode::ALL.into_iter().find(|m| m.as_str() == v),
        }
    }

    /// Whether time in this mode counts as busy (all but idle and iowait; see
    /// the module's notes for why steal does).
    pub fn is_busy(self) -> bool {
        !matches!(self, CpuMode::Idle | CpuMode::Iowait)
    }
}

/// Which CPU and mode a `system.cpu.utilization` series is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CpuSeries {
    /// `cpu.logical_number`; `None` for all CPUs together.
    pub cpu: Option<i64>,
    /// `cpu.mode`; `None` for a series that is already the busy share (a
    /// sonde before per-mode sampling).
    pub mode: Option<CpuMode>,
}

impl CpuSeries {
    /// What `info` is, or `None` when it is another metric or an unknown mode.
    pub fn of(info: &SeriesInfo) -> Option<CpuSeries> {
        Self::from_parts(&info.metric, &info.attributes)
    }

    /// Like [`CpuSeries::of`], from a metric name and its attributes (a
    /// point series of an event batch). `cpu.logical_number` may be an
    /// integer or its text.
    pub fn from_parts(metric: &str, attributes: &[Attribute]) -> Option<CpuSeries> {
        if metric != CPU_UTILIZATION {
            return None;
        }
        let get = |key: &str| attributes.iter().find(|a| a.key == key).map(|a| &a.value);
        let cpu = match get("cpu.logical_number") {
            None => None,
            Some(Value::Int(n)) => Some(*n),
            Some(Value::Str(s)) => Some(s.parse().ok()?),
            Some(_) => return None,
        };
        let mode = match get("cpu.mode") {
            None => None,
            Some(Value::Str(s)) => Some(CpuMode::parse(s)?),
            Some(_) => return None,
        };
        Some(CpuSeries { cpu, mode })
    }
}

/// The busy share of one CPU at one tick, from its mode shares as they
/// arrive (in any order, NaN skipped).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BusyShare {
    idle: f64,
    iowait: f64,
    /// A series without `cpu.mode`: the busy share itself.
    whole: f64,
}

impl Default for BusyShare {
    fn default() -> Self {
        BusyShare {
            idle: f64::NAN,
            iowait: f64::NAN,
            whole: f64::NAN,
        }
    }
}

impl BusyShare {
    /// Takes the value of one series of this CPU at this tick; NaN (not read)
    /// and the busy modes (not needed) leave it as it was.
    pub fn add(&mut self, mode: Option<CpuMode>, value: f64) {
        if value.is_nan() {
            return;
        }
        match mode {
            Some(CpuMode::Idle) => self.idle = value,
            Some(CpuMode::Iowait) => self.iowait = value,
            Some(_) => {}
            None => self.whole = value,
        }
    }

    /// 1 − idle − iowait (iowait 0 when not read), clamped to 0..=1; the
    /// busy share of a series without `cpu.mode` when there was one; `None`
    /// when neither was read.
    pub fn get(&self) -> Option<f64> {
        if !self.whole.is_nan() {
            return Some(self.whole.clamp(0.0, 1.0));
        }
        if self.idle.is_nan() {
            return None;
        }
        let iowait = if self.iowait.is_nan() { 0.0 } else { self.iowait };
        Some((1.0 - (self.idle + iowait)).clamp(0.0, 1.0))
    }
}

/// The busy share per CPU and tick of one sample batch: hand it each CPU
/// series' values ([`CpuBusyColumns::add`], any order), then read a CPU's
/// busy shares ([`CpuBusyColumns::busy`]) or the cores seen.
#[derive(Clone, Debug, Default)]
pub struct CpuBusyColumns {
    ticks: usize,
    /// By CPU (`None` = all), ascending: one accumulator per tick.
    cpus: Vec<(Option<i64>, Vec<BusyShare>)>,
}

impl CpuBusyColumns {
    /// For a batch of `ticks` timestamps.
    pub fn new(ticks: usize) -> Self {
        CpuBusyColumns {
            ticks,
            cpus: Vec::new(),
        }
    }

    /// One series' values at the batch's ticks (`values.len()` must be the
    /// tick count; extra values are ignored, missing ones count as not read).
    pub fn add(&mut self, series: CpuSeries, values: &[f64]) {
        let at = match self.cpus.binary_search_by(|(c, _)| c.cmp(&series.cpu)) {
            Ok(i) => i,
            Err(i) => {
                self.cpus
                    .insert(i, (series.cpu, vec![BusyShare::default(); self.ticks]));
                i
            }
        };
        for (acc, &v) in self.cpus[at].1.iter_mut().zip(values) {
            acc.add(series.mode, v);
        }
    }

    /// The busy share of `cpu` (`None`: all CPUs) at each tick, NaN where it
    /// is unknown; `None` when the batch had no series of that CPU.
    pub fn busy(&self, cpu: Option<i64>) -> Option<Vec<f64>> {
        let i = self.cpus.binary_search_by(|(c, _)| c.cmp(&cpu)).ok()?;
        Some(self.cpus[i].1.iter().map(|b| b.get().unwrap_or(f64::NAN)).collect())
    }

    /// The logical CPUs the batch had series of, ascending.
    pub fn cores(&self) -> impl Iterator<Item = i64> + '_ {
        self.cpus.iter().filter_map(|(c, _)| *c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::SeriesKind;

    fn info(metric: &str, attrs: Vec<Attribute>) -> SeriesInfo {
        SeriesInfo {
            id: 0,
            metric: metric.into(),
            unit: "1".into(),
            kind: SeriesKind::Gauge,
            attributes: attrs,
        }
    }

    #[test]
    fn series_say_their_cpu_and_mode() {
        let table = [
            (
                info(CPU_UTILIZATION, vec![Attribute::new("cpu.mode", "idle")]),
                Some(CpuSeries {
                    cpu: None,
                    mode: Some(CpuMode::Idle),
                }),
            ),
            (
                info(
                    CPU_UTILIZATION,
                    vec![
                        Attribute::new("cpu.logical_number", 3i64),
                        Attribute::new("cpu.mode", "steal"),
                    ],
                ),
                Some(CpuSeries {
                    cpu: Some(3),
                    mode: Some(CpuMode::Steal),
                }),
            ),
            // The text of a number, as some senders write it.
            (
                info(
                    CPU_UTILIZATION,
                    vec![
                        Attribute::new("cpu.logical_number", "7"),
                        Attribute::new("cpu.mode", "kernel"),
                    ],
                ),
                Some(CpuSeries {
                    cpu: Some(7),
                    mode: Some(CpuMode::System),
                }),
            ),
            // A sonde before per-mode sampling: the busy share itself.
            (info(CPU_UTILIZATION, vec![]), Some(CpuSeries { cpu: None, mode: None })),
            (info(CPU_UTILIZATION, vec![Attribute::new("cpu.mode", "busy")]), None),
            (
                info(CPU_UTILIZATION, vec![Attribute::new("cpu.logical_number", "x")]),
                None,
            ),
            (info("system.cpu.time", vec![Attribute::new("cpu.mode", "idle")]), None),
        ];
        for (i, want) in table {
            assert_eq!(CpuSeries::of(&i), want, "{i:?}");
        }
        for m in CpuMode::ALL {
            assert_eq!(CpuMode::parse(m.as_str()), Some(m));
        }
        let busy: Vec<_> = CpuMode::ALL
            .into_iter()
            .filter(|m| m.is_busy())
            .map(CpuMode::as_str)
            .collect();
        assert_eq!(busy, ["user", "nice", "system", "interrupt", "steal"]);
    }

    #[test]
    fn busy_is_one_minus_idle_and_iowait() {
        let mut b = BusyShare::default();
        assert_eq!(b.get(), None, "nothing read");
        b.add(Some(CpuMode::User), 0.3);
        b.add(Some(CpuMode::Steal), 0.05);
        assert_eq!(b.get(), None, "busy modes alone do not tell the share");
        b.add(Some(CpuMode::Idle), 0.5);
        assert_eq!(b.get(), Some(0.5), "iowait not read counts as 0");
        b.add(Some(CpuMode::Iowait), 0.25);
        b.add(Some(CpuMode::Idle), f64::NAN);
        assert_eq!(b.get(), Some(0.25), "NaN leaves idle as it was");
        // Rounding never leaves 0..=1.
        let mut b = BusyShare::default();
        b.add(Some(CpuMode::Idle), 0.9);
        b.add(Some(CpuMode::Iowait), 0.2);
        assert_eq!(b.get(), Some(0.0));
        // A series without a mode is the share itself, whatever else came.
        let mut b = BusyShare::default();
        b.add(Some(CpuMode::Idle), 0.9);
        b.add(None, 0.4);
        assert_eq!(b.get(), Some(0.4));
    }

    #[test]
    fn columns_give_each_cpu_its_share_per_tick() {
        let s = |cpu, mode| CpuSeries { cpu, mode: Some(mode) };
        let mut c = CpuBusyColumns::new(3);
        c.add(s(Some(1), CpuMode::Idle), &[0.0, 1.0, 0.5]);
        c.add(s(None, CpuMode::User), &[0.4, 0.4, 0.4]);
        c.add(s(None, CpuMode::Idle), &[0.5, f64::NAN, 0.25]);
        c.add(s(None, CpuMode::Iowait), &[0.25, 0.0, 0.25]);
        c.add(s(Some(0), CpuMode::Idle), &[1.0, 1.0]);
        assert_eq!(c.busy(None).unwrap()[0], 0.25);
        assert!(c.busy(None).unwrap()[1].is_nan(), "idle not read at tick 1");
        assert_eq!(c.busy(None).unwrap()[2], 0.5);
        assert_eq!(c.busy(Some(1)).unwrap(), [1.0, 0.0, 0.5]);
        let zero = c.busy(Some(0)).unwrap();
        assert_eq!(&zero[..2], &[0.0, 0.0]);
        assert!(zero[2].is_nan(), "a short column reads as not read");
        assert_eq!(c.busy(Some(2)), None);
        assert_eq!(c.cores().collect::<Vec<_>>(), [0, 1]);
    }
}
