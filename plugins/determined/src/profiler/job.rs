//! One job as the profiler keeps it: Determined's enabled/active state
//! machine (`crate::machine`) applied to the job, with its batch-index
//! timeline, the state record it persists, the decisions and log lines it
//! reports, and the timer for its active-time cap.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use serde::Serialize;
use sonde_plugin_sdk::PointBuffer;
use sonde_plugin_sdk::types::{Attribute, Decision, Severity};

use super::series::declare;
use super::{DECISION_KIND, JOB_KEY_PREFIX};
use crate::machine::{Change, EndReason, Limits, Machine, Persisted};
use crate::outputs::{self, MetricType};
use crate::settings::Settings;
use crate::timeline::Timeline;
use sonde_plugin_sdk::Host;

#[derive(Debug, Clone)]
pub enum JobKind {
    /// A timed section; `step` is the batch index given with it, or -1.
    Timing {
        name: Arc<str>,
        step: i64,
    },
    SamplesPerSecond,
}

/// Ranks listed per job at most; a job with more still reports, unlisted.
pub const MAX_RANKS: usize = 16_384;

/// One rank of a job as its reports described it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankInfo {
    /// The node it runs on (its origin's node, an agent's `host.name`).
    pub node: Arc<str>,
    pub local_rank: i32,
    /// Its node's system metrics count for the job (local rank 0).
    pub system_metrics: bool,
    /// Its timings and throughput count.
    pub timings: bool,
}

pub struct Job {
    pub name: Arc<str>,
    pub machine: Machine,
    /// Every eligible origin's batch-index reports: the job's window and
    /// its system metrics go by these.
    pub timeline: Timeline,
    /// Each rank's own reports: ranks of one step drift apart, so a rank's
    /// timing without a batch index is tied by that rank's reports.
    pub(super) rank_timelines: BTreeMap<i32, Timeline>,
    /// Node of the first origin that enabled system metrics / timings.
    pub node_sys: String,
    pub node_timing: String,
    /// Every rank seen, by global rank (-1, unknown, counts as 0).
    pub ranks: BTreeMap<i32, RankInfo>,
    /// Nodes whose system metrics count for the job (a local rank 0 reported
    /// from there); a set, as every agent sample looks its node up here.
    pub sys_nodes: BTreeSet<Arc<str>>,
    pub(super) timing_names: HashSet<Arc<str>>,
    pub(super) names_overflow_logged: bool,
    pub(super) late_report_logged: bool,
    /// `sonde.batch.index` handle per metric type (`Some(None)`: refused).
    pub(super) batch_handles: [Option<Option<u32>>; 3],
    /// Timestamp of the last `sonde.batch.index` point per metric type.
    pub(super) last_batch_point: [Option<u64>; 3],
    pub(super) cap_timer: Option<u64>,
    pub(super) persisted: Option<Persisted>,
}

pub fn limits(s: &Settings) -> Limits {
    Limits {
        begin_on_batch: s.begin_on_batch,
        end_after_batch: s.end_after_batch,
        cap_ns: s.cap_ns(),
    }
}

/// `ns` as seconds with one decimal, without pulling in core's float
/// formatting (serde_json brings its own; the component stays smaller).
fn seconds(ns: u64) -> String {
    let tenths = ns.saturating_add(50_000_000) / 100_000_000;
    format!("{}.{}", tenths / 10, tenths % 10)
}

/// A float as JSON writes it (e.g. `300.0`, `0.5`).
fn json_number(x: f64) -> String {
    serde_json::Value::from(x).to_string()
}

impl Job {
    pub(super) fn new(name: Arc<str>, machine: Machine) -> Job {
        Job {
            name,
            machine,
            timeline: Timeline::default(),
            rank_timelines: BTreeMap::new(),
            node_sys: String::new(),
            node_timing: String::new(),
            ranks: BTreeMap::new(),
            sys_nodes: BTreeSet::new(),
            timing_names: HashSet::new(),
            names_overflow_logged: false,
            late_report_logged: false,
            batch_handles: [None; 3],
            last_batch_point: [None; 3],
            cap_timer: None,
            persisted: None,
        }
    }

    /// Notes a rank and its node; a node where a local rank 0 runs joins the
    /// job's system-metric nodes.
    pub(super) fn see_rank(&mut self, rank: i32, info: RankInfo) {
        if info.system_metrics && !self.sys_nodes.contains(&info.node) {
            self.sys_nodes.insert(info.node.clone());
        }
        if self.ranks.len() < MAX_RANKS || self.ranks.contains_key(&rank) {
            let entry = self.ranks.entry(rank).or_insert_with(|| info.clone());
            entry.system_metrics |= info.system_metrics;
            entry.timings |= info.timings;
            entry.node = info.node;
            entry.local_rank = info.local_rank;
        }
    }

    /// The node this host's own samples are labelled with: the first that
    /// enabled the job's system metrics, unless `taken` (it has an agent);
    /// then another of its nodes that is not.
    pub(super) fn local_node(&self, taken: impl Fn(&str) -> bool) -> Option<Arc<str>> {
        let first = self.sys_nodes.get(self.node_sys.as_str()).filter(|n| !taken(n));
        first.or_else(|| self.sys_nodes.iter().find(|n| !taken(n))).cloned()
    }

    /// The batch index current at `time`.
    pub(super) fn batch_at(&self, time: u64) -> u64 {
        self.timeline.at(time).or(self.machine.last_batch).unwrap_or(0)
    }

    /// The batch index current at `time` for `rank`, by its own reports
    /// when it made any before then.
    pub(super) fn rank_batch_at(&self, rank: i32, time: u64) -> u64 {
        let own = self.rank_timelines.get(&rank).and_then(|t| t.at(time));
        own.unwrap_or_else(|| self.batch_at(time))
    }

    /// Records a batch-index report of `rank` at `time`.
    pub(super) fn record_batch(&mut self, rank: i32, time: u64, batch: u64) {
        self.timeline.record(time, batch);
        if self.rank_timelines.len() < MAX_RANKS || self.rank_timelines.contains_key(&rank) {
            self.rank_timelines.entry(rank).or_default().record(time, batch);
        }
    }

    /// Forgets reports no pending measurement at or after `horizon` needs.
    pub(super) fn prune_before(&mut self, horizon: u64) {
        self.timeline.prune_before(horizon);
        for t in self.rank_timelines.values_mut() {
            t.prune_before(horizon);
        }
    }

    fn state_body(&self, reason: &str) -> String {
        #[derive(Serialize)]
        struct Body<'a> {
            job: &'a str,
            enabled: bool,
            sysmetrics_enabled: bool,
            timings_enabled: bool,
            active: bool,
            ended: bool,
            reason: &'a str,
            batch_idx: Option<u64>,
        }
        let m = &self.machine;
        serde_json::to_string(&Body {
            job: &self.name,
            enabled: m.enabled(),
            sysmetrics_enabled: m.sys_enabled(),
            timings_enabled: m.timings_enabled(),
            active: m.is_active(),
            ended: m.is_ended(),
            reason,
            batch_idx: m.last_batch,
        })
        .expect("state body serializes")
    }

    /// A `profiler.state` decision and the same sentence in the host's log.
    pub(super) fn report(&self, host: &mut dyn Host, level: Severity, reason: &str, sentence: String) {
        host.log(level, &sentence);
        host.emit_decision(&Decision {
            kind: DECISION_KIND.to_string(),
            subject: self.name.to_string(),
            reason: sentence,
            body: self.state_body(reason),
            attributes: vec![Attribute::new("determined.trial", &*self.name)],
        });
    }

    pub(super) fn persist(&mut self, host: &mut dyn Host, now: u64) {
        let p = self.machine.to_persisted(now);
        if self.persisted.as_ref() == Some(&p) {
            return;
        }
        let json = serde_json::to_vec(&p).expect("persisted state serializes");
        match host.state_put(&format!("{JOB_KEY_PREFIX}{}", self.name), &json) {
            Ok(()) => self.persisted = Some(p),
            Err(e) => host.log(
                Severity::Warn,
                &format!("job {}: could not persist its state: {e}", self.name),
            ),
        }
    }

    pub(super) fn schedule_cap(&mut self, host: &mut dyn Host, limits: &Limits, now: u64) {
        if let Some(id) = self.cap_timer.take() {
            host.cancel_timer(id);
        }
        if let Some(end) = self.machine.cap_end(limits) {
            let ms = end.saturating_sub(now).div_ceil(1_000_000);
            self.cap_timer = Some(host.set_timer(ms, false));
        }
    }

    /// Reports, persists and arms/disarms timers for a change of state.
    pub(super) fn apply(&mut self, host: &mut dyn Host, change: Change, settings: &Settings, now: u64) {
        let name = self.name.clone();
        let batch = self.machine.last_batch.map_or("none".to_string(), |b| b.to_string());
        let limits = limits(settings);
        let (level, sentence) = match change {
            Change::Activated { .. } => (
                Severity::Info,
                format!(
                    "job {name}: profiling active from batch {batch} (begin_on_batch {})",
                    settings.begin_on_batch
                ),
            ),
            Change::Resumed { at } => (
                Severity::Info,
                format!(
                    "job {name}: profiling resumed after a restart at batch {batch}{}",
                    match self.machine.cap_end(&limits) {
                        Some(end) => format!(" with {} s of max_active_s left", seconds(end - at)),
                        None => String::new(),
                    }
                ),
            ),
            Change::Ended { reason, .. } => {
                let why = match reason {
                    EndReason::EndAfterBatch => format!(
                        "batch {batch} is past end_after_batch {}",
                        settings.end_after_batch.map_or("-".into(), |e| e.to_string())
                    ),
                    EndReason::MaxActive => {
                        format!("active for max_active_s ({} s)", json_number(settings.max_active_s))
                    }
                    EndReason::NotResumed => {
                        "it was active before the plugin restarted and resume_after_restart is false".to_string()
                    }
                };
                let level = if reason == EndReason::NotResumed {
                    Severity::Warn
                } else {
                    Severity::Info
                };
                (level, format!("job {name}: profiling ended for good: {why}"))
            }
        };
        self.report(host, level, change.code(), sentence);
        match change {
            Change::Activated { .. } | Change::Resumed { .. } => self.schedule_cap(host, &limits, now),
            Change::Ended { .. } => {
                if let Some(id) = self.cap_timer.take() {
                    host.cancel_timer(id);
                }
            }
        }
        self.persist(host, now);
    }

    pub(super) fn batch_point(
        &mut self,
        host: &mut dyn Host,
        points: &mut PointBuffer,
        t: MetricType,
        time: u64,
        batch: u64,
    ) {
        let i = t.index();
        if self.last_batch_point[i] == Some(time) {
            return;
        }
        self.last_batch_point[i] = Some(time);
        let handle =
            *self.batch_handles[i].get_or_insert_with(|| declare(host, &outputs::batch_index_desc(&self.name, t)));
        if let Some(h) = handle {
            points.push(h, time, batch as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_in_sentences() {
        let table = [
            (0, "0.0"),
            (60_000_000_000, "60.0"),
            (1_249_000_000, "1.2"),
            (1_250_000_000, "1.3"),
        ];
        for (ns, want) in table {
            assert_eq!(seconds(ns), want, "{ns}");
        }
        assert_eq!(
            (json_number(300.0).as_str(), json_number(0.5).as_str()),
            ("300.0", "0.5")
        );
    }
}
