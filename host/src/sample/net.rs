//! Network, per interface (`network.interface.name`) and direction
//! (`network.io.direction` = receive | transmit), cumulative counters:
//! `system.network.io` (By), `system.network.packet.count` ({packet}),
//! `system.network.errors` ({error}), `system.network.packet.dropped` ({packet}).
//!
//! Which interfaces: all but loopback (`lo`, or IFF_LOOPBACK in
//! /sys/class/net/<if>/flags) unless `include_loopback`; a non-empty
//! `interfaces` list is an allowlist and wins over the loopback rule (naming
//! `lo` there reports it). Interfaces that appear later get series appended.
//!
//! Why /proc/net/dev directly: it is one file for all interfaces, while
//! sysinfo's `Networks::refresh` lists /sys/class/net and opens seven files
//! per interface, allocating paths and names on every call (several times
//! the cost; see `cost_per_sample_informational` in mod.rs). sysinfo is the
//! fallback where /proc/net/dev is missing (other OSes; no dropped counts).

use std::path::PathBuf;

use super::procfs::{self, ProcFile, Tracker};
use super::{Out, Roots, attrs};
use crate::model::{AttrValue, SeriesKind};
use crate::sample::config::SamplerConfig;

/// `IFF_LOOPBACK` from <linux/if.h>.
const IFF_LOOPBACK: u64 = 0x8;

/// Series per interface, in id order.
const PER_IF: [(&str, &str, &str); 8] = [
    ("system.network.io", "By", "receive"),
    ("system.network.io", "By", "transmit"),
    ("system.network.packet.count", "{packet}", "receive"),
    ("system.network.packet.count", "{packet}", "transmit"),
    ("system.network.errors", "{error}", "receive"),
    ("system.network.errors", "{error}", "transmit"),
    ("system.network.packet.dropped", "{packet}", "receive"),
    ("system.network.packet.dropped", "{packet}", "transmit"),
];

/// One /proc/net/dev line: the name and the counters in `PER_IF` order.
pub(crate) fn parse_line(line: &[u8]) -> Option<(&[u8], [u64; 8])> {
    // "  eth0: 123 …" (old kernels: "eth0:123 …"); names cannot contain ':'.
    let colon = line.iter().position(|&b| b == b':')?;
    let name = procfs::trim(&line[..colon]);
    let mut nums = [0u64; 16];
    let mut f = procfs::fields(&line[colon + 1..]);
    for slot in nums.iter_mut() {
        *slot = procfs::parse_u64(f.next()?)?;
    }
    // receive: bytes packets errs drop fifo frame compressed multicast
    // transmit: bytes packets errs drop fifo colls carrier compressed
    Some((
        name,
        [nums[0], nums[8], nums[1], nums[9], nums[2], nums[10], nums[3], nums[11]],
    ))
}

/// Which interfaces get series.
pub(crate) struct NetFilter {
    include_loopback: bool,
    allow: Vec<String>,
    sys_net: PathBuf,
}

impl NetFilter {
    pub(crate) fn new(cfg: &SamplerConfig, roots: &Roots) -> Self {
        Self {
            include_loopback: cfg.include_loopback,
            allow: cfg.interfaces.clone(),
            sys_net: roots.sys.join("class/net"),
        }
    }

    /// Called once per interface name, the first time it is seen.
    pub(crate) fn include(&self, name: &str) -> bool {
        if !self.allow.is_empty() {
            return self.allow.iter().any(|a| a == name);
        }
        self.include_loopback || !self.is_loopback(name)
    }

    fn is_loopback(&self, name: &str) -> bool {
        if name == "lo" || (cfg!(not(target_os = "linux")) && name.starts_with("lo")) {
            return true;
        }
        std::fs::read(self.sys_net.join(name).join("flags"))
            .ok()
            .and_then(|b| procfs::parse_hex(&b))
            .is_some_and(|f| f & IFF_LOOPBACK != 0)
    }
}

enum Source {
    Proc(ProcFile),
    Sysinfo(Box<sysinfo::Networks>),
}

pub(crate) struct NetReader {
    src: Source,
    filter: NetFilter,
    tracker: Tracker,
}

fn add_series(out: &mut Out, name: &[u8]) -> u32 {
    let name = String::from_utf8_lossy(name).into_owned();
    let mut first = None;
    for (metric, unit, dir) in PER_IF {
        let id = out.add(
            metric,
            unit,
            SeriesKind::Counter,
            attrs([
                ("network.interface.name", AttrValue::from(name.as_str())),
                ("network.io.direction", AttrValue::from(dir)),
            ]),
        );
        first.get_or_insert(id);
    }
    first.unwrap_or(0)
}

impl NetReader {
    pub(crate) fn new(cfg: &SamplerConfig, roots: &Roots, out: &mut Out) -> Self {
        // procfs directly: one read for all interfaces; sysinfo opens 7 sysfs files per interface.
        let mut file = ProcFile::open(roots.proc.join("net/dev"));
        let src = if file.read().is_some() {
            Source::Proc(file)
        } else {
            tracing::info!(path = %file.path().display(), "sampler: no /proc/net/dev; network counters from sysinfo");
            Source::Sysinfo(Box::new(sysinfo::Networks::new()))
        };
        let mut me = Self {
            src,
            filter: NetFilter::new(cfg, roots),
            tracker: Tracker::default(),
        };
        me.read(out); // discovery
        if me.tracker.included_count() == 0 {
            tracing::info!(
                include_loopback = cfg.include_loopback,
                interfaces = ?cfg.interfaces,
                "sampler: no network interface selected (yet)"
            );
        }
        me
    }

    pub(crate) fn read(&mut self, out: &mut Out) {
        match &mut self.src {
            Source::Proc(file) => {
                let Some(buf) = file.read() else { return };
                let mut pos = 0;
                for line in procfs::lines(buf) {
                    let Some((name, vals)) = parse_line(line) else { continue }; // the two header lines
                    let base = match self.tracker.get(pos, name) {
                        Some(b) => b,
                        None => {
                            let include = self.filter.include(&String::from_utf8_lossy(name));
                            self.tracker
                                .insert("network interface", name, include, || add_series(out, name))
                        }
                    };
                    pos += 1;
                    if let Some(base) = base {
                        for (k, v) in vals.iter().enumerate() {
                            out.set(base + k as u32, *v as f64);
                        }
                    }
                }
            }
            Source::Sysinfo(nets) => {
                nets.refresh(true);
                for (pos, (name, d)) in nets.iter().enumerate() {
                    let base = match self.tracker.get(pos, name.as_bytes()) {
                        Some(b) => b,
                        None => {
                            let include = self.filter.include(name);
                            self.tracker.insert("network interface", name.as_bytes(), include, || {
                                add_series(out, name.as_bytes())
                            })
                        }
                    };
                    if let Some(base) = base {
                        let vals = [
                            d.total_received(),
                            d.total_transmitted(),
                            d.total_packets_received(),
                            d.total_packets_transmitted(),
                            d.total_errors_on_received(),
                            d.total_errors_on_transmitted(),
                        ];
                        for (k, v) in vals.iter().enumerate() {
                            out.set(base + k as u32, *v as f64);
                        }
                    }
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
        let mut it = procfs::lines(NETDEV.as_bytes());
        assert!(parse_line(it.next().unwrap()).is_none(), "header");
        assert!(parse_line(it.next().unwrap()).is_none(), "header");
        let (n, v) = parse_line(it.next().unwrap()).unwrap();
        assert_eq!((n, v), (&b"lo"[..], [3193, 3193, 29, 29, 0, 0, 0, 0]));
        let (n, v) = parse_line(it.next().unwrap()).unwrap();
        assert_eq!((n, v), (&b"eth0"[..], [157746156, 621362, 9640, 6942, 1, 3, 2, 4]));
        let (n, v) = parse_line(it.next().unwrap()).unwrap();
        assert_eq!(
            (n, v[0], v[1]),
            (&b"wlan0"[..], 1234567890, 55),
            "no space after the colon"
        );
        assert!(parse_line(b"eth9: 1 2 3").is_none(), "truncated");
    }

    fn selected(cfg: &SamplerConfig) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let roots = fixture_machine(dir.path());
        let (mut series, mut values) = (Vec::new(), Vec::new());
        let mut out = Out {
            series: &mut series,
            values: &mut values,
        };
        let r = NetReader::new(cfg, &roots, &mut out);
        assert_eq!(series.len(), 8 * r.tracker.included_count());
        r.tracker.included()
    }

    #[test]
    fn loopback_excluded_by_name_and_flags() {
        assert_eq!(selected(&SamplerConfig::default()), vec!["eth0", "wlan0"]);
    }

    #[test]
    fn loopback_included_on_request() {
        let cfg = SamplerConfig {
            include_loopback: true,
            ..Default::default()
        };
        assert_eq!(selected(&cfg), vec!["lo", "eth0", "wlan0", "lo2"]);
    }

    #[test]
    fn allowlist_wins() {
        let cfg = SamplerConfig {
            interfaces: vec!["wlan0".into(), "lo".into(), "absent".into()],
            ..Default::default()
        };
        assert_eq!(selected(&cfg), vec!["lo", "wlan0"]);
    }
}
