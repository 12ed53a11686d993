//! Checkpoints and the recovery timeline of each incident, in the seed's
//! seven stages and five phases.
//!
//! Stages (the seed's names), and where each comes from:
//!
//! | # | stage | source |
//! |---|---|---|
//! | 1 | Start CheckPoint | `checkpoint-begin` of the last checkpoint that ended before the failure |
//! | 2 | End CheckPoint | its `checkpoint-end` |
//! | 3 | Kill A Running Process | the process's `killed` event; else its last heartbeat (estimated) |
//! | 4 | Master Detect Process Failure | the heartbeat-timeout detection (this plugin) |
//! | 5 | Failed Process Restart Success | the process's `restarted` event; else its first heartbeat after the detection |
//! | 6 | Failed Process Recover Success | the process's `recovered` event |
//! | 7 | All Process Recover Success | an `all-recovered` event from any process of the job |
//!
//! Phase k runs from stage k' to stage k'' as the seed's table lists:
//! 1 = 1→2, 2 = 3→4, 3 = 4→5, 4 = 5→6, 5 = 6→7. A phase's percentage is its
//! share of the sum of the five phases (computed once all five are known).

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Value, json};

pub const STAGES: [&str; 7] = [
    "Start CheckPoint",
    "End CheckPoint",
    "Kill A Running Process",
    "Master Detect Process Failure",
    "Failed Process Restart Success",
    "Failed Process Recover Success",
    "All Process Recover Success",
];

/// (from stage, to stage), 0-based, per phase.
pub const PHASES: [(usize, usize); 5] = [(0, 1), (2, 3), (3, 4), (4, 5), (5, 6)];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Stage {
    pub time_ns: u64,
    /// "event", "detector", "last-heartbeat" (estimated), "heartbeat".
    pub source: &'static str,
}

/// The sources a stage can have; what the state store gives back is one of them.
const SOURCES: [&str; 4] = ["event", "detector", "last-heartbeat", "heartbeat"];

impl<'de> Deserialize<'de> for Stage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Saved {
            time_ns: u64,
            source: String,
        }
        let s = Saved::deserialize(d)?;
        let source = SOURCES
            .into_iter()
            .find(|k| *k == s.source)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown stage source {:?}", s.source)))?;
        Ok(Stage {
            time_ns: s.time_ns,
            source,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub process: String,
    pub begin_ns: u64,
    pub end_ns: u64,
    /// The clock (iteration) it saved, when the event said (`clock` attribute).
    pub clock: Option<u64>,
}

impl Checkpoint {
    pub fn duration_ns(&self) -> u64 {
        self.end_ns - self.begin_ns
    }
}

/// Checkpoints of one job.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Checkpoints {
    open: BTreeMap<String, (u64, Option<u64>)>,
    pub done: VecDeque<Checkpoint>,
    /// Checkpoints dropped for `max_checkpoints` (their time still counts).
    pub dropped: u64,
    dropped_ns: u64,
    /// Ends without a begin, or before it.
    pub unmatched: u64,
}

impl Checkpoints {
    pub fn begin(&mut self, process: &str, time: u64, clock: Option<u64>) {
        self.open.insert(process.to_string(), (time, clock));
    }

    /// Returns the completed checkpoint.
    pub fn end(&mut self, process: &str, time: u64, clock: Option<u64>, max: usize) -> Option<Checkpoint> {
        match self.open.remove(process) {
            Some((begin, c)) if begin <= time => {
                let ck = Checkpoint {
                    process: process.to_string(),
                    begin_ns: begin,
                    end_ns: time,
                    clock: clock.or(c),
                };
                // Kept ordered by end (events of several processes may interleave).
                let at = self.done.partition_point(|x| x.end_ns <= time);
                self.done.insert(at, ck.clone());
                if self.done.len() > max {
                    // Keep the dropped ones' share of the union, not their sum.
                    let before = self.union_ns();
                    while self.done.len() > max {
                        self.done.pop_front();
                        self.dropped += 1;
                    }
                    self.dropped_ns += before - self.union_ns();
                }
                Some(ck)
            }
            _ => {
                self.unmatched += 1;
                None
            }
        }
    }

    pub fn in_progress(&self) -> Vec<(String, u64)> {
        self.open.iter().map(|(k, (t, _))| (k.clone(), *t)).collect()
    }

    /// The last checkpoint that ended at or before `time`.
    pub fn last_before(&self, time: u64) -> Option<&Checkpoint> {
        self.done.iter().rev().find(|c| c.end_ns <= time)
    }

    /// Wall time spent checkpointing: the union of all checkpoint intervals
    /// (several processes dumping at once cost the job that time once).
    pub fn total_ns(&self) -> u64 {
        self.union_ns() + self.dropped_ns
    }

    fn union_ns(&self) -> u64 {
        let mut iv: Vec<(u64, u64)> = self.done.iter().map(|c| (c.begin_ns, c.end_ns)).collect();
        iv.sort_unstable();
        let mut total = 0;
        let mut cur: Option<(u64, u64)> = None;
        for (b, e) in iv {
            match cur {
                Some((cb, ce)) if b <= ce => cur = Some((cb, ce.max(e))),
                Some((cb, ce)) => {
                    total += ce - cb;
                    cur = Some((b, e));
                }
                None => cur = Some((b, e)),
            }
        }
        total + cur.map_or(0, |(b, e)| e - b)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Incident {
    pub id: u32,
    pub job: String,
    /// The failed process.
    pub process: String,
    /// Stages 3..7 (0-based 2..6) as recorded; 1 and 2 come from the checkpoints.
    pub stages: [Option<Stage>; 7],
    /// Detection latency from the last heartbeat.
    pub last_heartbeat_ns: Option<u64>,
}

impl Incident {
    pub fn new(id: u32, job: &str, process: &str) -> Incident {
        Incident {
            id,
            job: job.to_string(),
            process: process.to_string(),
            stages: [None; 7],
            last_heartbeat_ns: None,
        }
    }

    pub fn set(&mut self, stage: usize, time_ns: u64, source: &'static str) {
        self.stages[stage] = Some(Stage { time_ns, source });
    }

    pub fn has(&self, stage: usize) -> bool {
        self.stages[stage].is_some()
    }

    pub fn complete(&self) -> bool {
        self.has(6)
    }

    /// When the failure happened: the kill, else the detection.
    pub fn failure_time(&self) -> Option<u64> {
        self.stages[2].or(self.stages[3]).map(|s| s.time_ns)
    }

    /// All seven stages, with 1 and 2 filled from the job's checkpoints.
    pub fn resolved(&self, ck: &Checkpoints) -> [Option<Stage>; 7] {
        let mut s = self.stages;
        if let Some(c) = self.failure_time().and_then(|t| ck.last_before(t)) {
            s[0] = Some(Stage {
                time_ns: c.begin_ns,
                source: "event",
            });
            s[1] = Some(Stage {
                time_ns: c.end_ns,
                source: "event",
            });
        }
        s
    }

    /// The five phases: (duration ns, percentage of the five's sum) where known.
    pub fn phases(&self, ck: &Checkpoints) -> [Option<(u64, Option<f64>)>; 5] {
        let s = self.resolved(ck);
        let d: Vec<Option<u64>> = PHASES
            .iter()
            .map(|&(a, b)| match (s[a], s[b]) {
                (Some(x), Some(y)) => Some(y.time_ns.saturating_sub(x.time_ns)),
                _ => None,
            })
            .collect();
        let total: Option<u64> = d.iter().copied().sum();
        let mut out = [None; 5];
        for (i, v) in d.iter().enumerate() {
            out[i] = v.map(|ns| (ns, total.filter(|t| *t > 0).map(|t| ns as f64 * 100.0 / t as f64)));
        }
        out
    }

    pub fn detection_latency_from_kill(&self) -> Option<u64> {
        match (self.stages[2], self.stages[3]) {
            (Some(k), Some(d)) if k.source == "event" => Some(d.time_ns.saturating_sub(k.time_ns)),
            _ => None,
        }
    }

    pub fn to_json(&self, ck: &Checkpoints) -> Value {
        let stages = self.resolved(ck);
        let phases = self.phases(ck);
        json!({
            "id": self.id,
            "job": self.job,
            "process": self.process,
            "complete": self.complete(),
            "stages": stages.iter().enumerate().map(|(i, s)| json!({
                "stage": i + 1,
                "name": STAGES[i],
                "time_ns": s.map(|s| s.time_ns),
                "source": s.map(|s| s.source),
            })).collect::<Vec<_>>(),
            "phases": phases.iter().enumerate().map(|(i, p)| json!({
                "phase": i + 1,
                "from": STAGES[PHASES[i].0],
                "to": STAGES[PHASES[i].1],
                "duration_ms": p.map(|(ns, _)| ns as f64 / 1e6),
                "percentage": p.and_then(|(_, pc)| pc),
            })).collect::<Vec<_>>(),
            "total_ms": phases.iter().map(|p| p.map(|(ns, _)| ns)).sum::<Option<u64>>().map(|ns| ns as f64 / 1e6),
            "detection_latency_ms": {
                "from_last_heartbeat": self.stages[3].zip(self.last_heartbeat_ns).map(|(d, h)| d.time_ns.saturating_sub(h) as f64 / 1e6),
                "from_kill": self.detection_latency_from_kill().map(|ns| ns as f64 / 1e6),
            },
            "table_markdown": self.markdown(ck),
        })
    }

    /// The phase table in the seed's shape.
    pub fn markdown(&self, ck: &Checkpoints) -> String {
        let mut out = String::from("|Phase|From|To|Time Cost|Percentage|\n|---|---|---|---|---|\n");
        for (i, p) in self.phases(ck).iter().enumerate() {
            let (cost, pct) = match p {
                Some((ns, pc)) => (
                    format!("{}ms", thousands(ns / 1_000_000 + u64::from(ns % 1_000_000 >= 500_000))),
                    pc.map_or("-".to_string(), |x| format!("{}%", (x + 0.5) as u64)),
                ),
                None => ("-".to_string(), "-".to_string()),
            };
            out.push_str(&format!(
                "|{}|{}|{}|{cost}|{pct}|\n",
                i + 1,
                STAGES[PHASES[i].0],
                STAGES[PHASES[i].1]
            ));
        }
        out
    }
}

/// 18771 -> "18,771".
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn the_seeds_incident_gives_the_seeds_table() {
        // The seed's measured costs, as stage times in ms from stage 1.
        let mut ck = Checkpoints::default();
        ck.begin("server-0", 0, Some(300));
        let c = ck.end("server-0", 18_771 * MS, None, 10).unwrap();
        assert_eq!((c.clock, c.duration_ns()), (Some(300), 18_771 * MS));
        let kill = 30_000 * MS;
        let mut inc = Incident::new(1, "lr", "worker-2");
        let stages = [
            (2, kill, "event"),
            (3, kill + 50_023 * MS, "detector"),
            (4, kill + 50_033 * MS, "event"),
            (5, kill + 172_351 * MS, "event"),
            (6, kill + 172_381 * MS, "event"),
        ];
        for (i, t, src) in stages {
            inc.set(i, t, src);
        }
        let p = inc.phases(&ck);
        let ms: Vec<u64> = p.iter().map(|x| x.unwrap().0 / MS).collect();
        assert_eq!(ms, vec![18_771, 50_023, 10, 122_318, 30]);
        let pct: Vec<u64> = p.iter().map(|x| (x.unwrap().1.unwrap() + 0.5) as u64).collect();
        // The seed printed 9/24/1/65/1; the shares of its own sums are these.
        assert_eq!(pct, vec![10, 26, 0, 64, 0]);
        assert_eq!(
            inc.markdown(&ck),
            "|Phase|From|To|Time Cost|Percentage|\n|---|---|---|---|---|\n\
             |1|Start CheckPoint|End CheckPoint|18,771ms|10%|\n\
             |2|Kill A Running Process|Master Detect Process Failure|50,023ms|26%|\n\
             |3|Master Detect Process Failure|Failed Process Restart Success|10ms|0%|\n\
             |4|Failed Process Restart Success|Failed Process Recover Success|122,318ms|64%|\n\
             |5|Failed Process Recover Success|All Process Recover Success|30ms|0%|\n"
        );
        assert!(inc.complete());
        assert_eq!(inc.detection_latency_from_kill(), Some(50_023 * MS));
    }

    #[test]
    fn missing_stages_leave_their_phases_unknown() {
        let ck = Checkpoints::default();
        let mut inc = Incident::new(1, "j", "w");
        inc.set(3, 10 * MS, "detector");
        inc.set(4, 15 * MS, "heartbeat");
        let p = inc.phases(&ck);
        assert_eq!(p[0], None, "no checkpoint before the failure");
        assert_eq!(p[1], None, "no kill reported");
        assert_eq!(
            p[2],
            Some((5 * MS, None)),
            "known, but no percentage until all five are"
        );
        assert!(
            inc.markdown(&ck)
                .contains("|3|Master Detect Process Failure|Failed Process Restart Success|5ms|-|")
        );
    }

    #[test]
    fn the_checkpoint_of_an_incident_is_the_last_one_ended_before_the_failure() {
        let mut ck = Checkpoints::default();
        for (b, e) in [(0, 10), (100, 110), (200, 260)] {
            ck.begin("s", b * MS, None);
            ck.end("s", e * MS, None, 10);
        }
        let mut inc = Incident::new(1, "j", "w");
        inc.set(2, 150 * MS, "event");
        let s = inc.resolved(&ck);
        assert_eq!((s[0].unwrap().time_ns, s[1].unwrap().time_ns), (100 * MS, 110 * MS));
        // Time share: overlapping checkpoints of two processes count once.
        ck.begin("t", 205 * MS, None);
        ck.end("t", 270 * MS, None, 10);
        assert_eq!(ck.total_ns(), (10 + 10 + 70) * MS);
        assert_eq!(ck.end("t", 300 * MS, None, 10), None, "an end without a begin");
        assert_eq!(ck.unmatched, 1);
        // The bound drops the oldest, keeping its time in the total.
        ck.begin("s", 400 * MS, None);
        ck.end("s", 401 * MS, None, 2);
        assert_eq!(ck.done.len(), 2);
        assert_eq!(ck.total_ns(), (10 + 10 + 70 + 1) * MS);
    }

    #[test]
    fn thousands_separators() {
        for (n, s) in [
            (0, "0"),
            (10, "10"),
            (999, "999"),
            (1000, "1,000"),
            (122_318, "122,318"),
            (1_234_567, "1,234,567"),
        ] {
            assert_eq!(thousands(n), s);
        }
    }
}
