//! Failure detection by heartbeat timeout.
//!
//! Every process that sends heartbeats is watched. At each check (a host
//! timer, so detection happens even when nothing arrives) a live process
//! whose last heartbeat is older than the timeout is declared dead at the
//! check's time. The detection latency is measured two ways: from the last
//! heartbeat (always known; >= the timeout) and, when the process's kill is
//! reported, from the kill (what the seed's phase 2 measures).
//!
//! A heartbeat from a dead process brings it back; a process that left on
//! purpose (the empty-data node, a clean exit) is no longer watched.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum Liveness {
    Alive,
    Dead { detected_ns: u64 },
    Left { at_ns: u64 },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watched {
    pub last_heartbeat_ns: u64,
    pub heartbeats: u64,
    #[serde(flatten)]
    pub liveness: Liveness,
}

/// A process declared dead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detection {
    pub process: String,
    pub last_heartbeat: u64,
    pub detected: u64,
}

impl Detection {
    /// Detected − last heartbeat.
    pub fn latency_from_heartbeat(&self) -> u64 {
        self.detected.saturating_sub(self.last_heartbeat)
    }
}

#[derive(Debug, Clone, Default)]
pub struct Detector {
    pub procs: BTreeMap<String, Watched>,
}

impl Detector {
    /// A heartbeat; returns `Some(detected)` when it brings a dead process back.
    pub fn heartbeat(&mut self, process: &str, time: u64) -> Option<u64> {
        let w = self.procs.entry(process.to_string()).or_insert(Watched {
            last_heartbeat_ns: time,
            heartbeats: 0,
            liveness: Liveness::Alive,
        });
        w.heartbeats += 1;
        // Late heartbeats (older than one already seen) only count.
        if time < w.last_heartbeat_ns {
            return None;
        }
        w.last_heartbeat_ns = time;
        match w.liveness {
            Liveness::Dead { detected_ns } if time > detected_ns => {
                w.liveness = Liveness::Alive;
                Some(detected_ns)
            }
            // Heartbeats of a process that left may trail its exit: only a
            // reported (re)start brings it back (`revive`).
            _ => None,
        }
    }

    /// The process is alive again without a heartbeat (it reported "started"
    /// or "restarted"), whether it had died or left.
    pub fn revive(&mut self, process: &str, time: u64) {
        if let Some(w) = self.procs.get_mut(process)
            && w.liveness != Liveness::Alive
        {
            w.liveness = Liveness::Alive;
            w.last_heartbeat_ns = w.last_heartbeat_ns.max(time);
        }
    }

    /// The process left on purpose: no longer watched.
    pub fn leave(&mut self, process: &str, time: u64) {
        let w = self.procs.entry(process.to_string()).or_insert(Watched {
            last_heartbeat_ns: time,
            heartbeats: 0,
            liveness: Liveness::Alive,
        });
        w.liveness = Liveness::Left { at_ns: time };
    }

    /// Declares dead every live process silent for longer than `timeout` at `now`.
    pub fn check(&mut self, now: u64, timeout: u64) -> Vec<Detection> {
        let mut out = Vec::new();
        for (k, w) in self.procs.iter_mut() {
            if w.liveness == Liveness::Alive && now.saturating_sub(w.last_heartbeat_ns) > timeout {
                w.liveness = Liveness::Dead { detected_ns: now };
                out.push(Detection {
                    process: k.clone(),
                    last_heartbeat: w.last_heartbeat_ns,
                    detected: now,
                });
            }
        }
        out
    }

    pub fn is_dead(&self, process: &str) -> bool {
        self.procs
            .get(process)
            .is_some_and(|w| matches!(w.liveness, Liveness::Dead { .. }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn detects_after_the_timeout_and_not_before() {
        // (check at ms, expected detections) with heartbeats of p every 100 ms until 1000 ms.
        let mut d = Detector::default();
        for t in (0..=1000).step_by(100) {
            d.heartbeat("worker-1", t * MS);
        }
        d.heartbeat("server-0", 0);
        let cases: [(u64, &[&str]); 5] = [
            (1500, &["server-0"]), // server silent since 0: 1500 > 1000 ms... with timeout 1 s
            (2000, &[]),           // worker-1: exactly the timeout is not past it
            (2001, &["worker-1"]),
            (2500, &[]), // never twice
            (9000, &[]),
        ];
        for (now, want) in cases {
            let got: Vec<String> = d.check(now * MS, 1000 * MS).into_iter().map(|x| x.process).collect();
            assert_eq!(got, want, "check at {now} ms");
        }
        assert!(d.is_dead("worker-1"));
    }

    #[test]
    fn latency_and_revival() {
        let mut d = Detector::default();
        d.heartbeat("w", 100 * MS);
        let det = d.check(2300 * MS, 2000 * MS);
        assert_eq!(det[0].latency_from_heartbeat(), 2200 * MS);
        assert_eq!(d.heartbeat("w", 50 * MS), None, "a late heartbeat does not revive");
        assert_eq!(d.heartbeat("w", 3000 * MS), Some(2300 * MS));
        assert!(!d.is_dead("w"));
    }

    #[test]
    fn a_process_that_left_is_not_declared_dead() {
        let mut d = Detector::default();
        d.heartbeat("w", 0);
        d.leave("w", MS);
        d.heartbeat("w", 2 * MS); // trailing its exit
        assert!(d.check(60_000 * MS, 1000 * MS).is_empty());
        d.revive("w", 61_000 * MS);
        assert_eq!(d.check(62_500 * MS, 1000 * MS).len(), 1, "watched again once restarted");
        d.heartbeat("x", 0);
        d.check(5000 * MS, 1000 * MS);
        d.revive("x", 5500 * MS);
        assert!(!d.is_dead("x"));
        assert!(
            d.check(6000 * MS, 1000 * MS).is_empty(),
            "revived at 5.5 s: not yet silent"
        );
    }
}
