//! The hooks' input: the host's samples become pending system measurements,
//! and event batches register jobs and their ranks (which origin may report
//! what), move batch-index timelines, and queue timings and throughput.

use std::sync::Arc;

use sonde_plugin_sdk::types::{EventBatch, Origin, SampleBatch, Severity};

use super::job::{Job, JobKind, RankInfo, limits};
use super::{BATCH_IDX, MAX_TIMING_NAMES, PendingSys, Profiler};
use crate::agents::LOCAL;
use crate::machine::Machine;
use crate::outputs::is_samples_per_second;
use crate::settings::TimingRanks;
use sonde_plugin_sdk::Host;

/// A timing or a throughput point, waiting for the lag.
#[derive(Debug, Clone)]
pub struct JobMeasurement {
    pub job: Arc<str>,
    pub kind: JobKind,
    /// The timing's start, or the point's time.
    pub time: u64,
    /// Seconds, or samples per second.
    pub value: f64,
    /// The reporting origin's global rank (-1 counted as 0) and node.
    pub rank: i32,
    pub node: Arc<str>,
}

/// What an origin of the current event batch may do.
#[derive(Clone)]
struct OriginView {
    /// `None`: filtered out by the `job` setting.
    pub(super) job: Option<Arc<str>>,
    pub(super) sys: bool,
    pub(super) timing: bool,
    pub(super) rank: i32,
    pub(super) node: Arc<str>,
}

impl Profiler {
    pub fn on_samples(&mut self, host: &mut dyn Host, batch: SampleBatch) -> Result<(), String> {
        let measurements = self.reader.read(batch)?;
        if let Some(t) = measurements.iter().map(|m| m.time).max() {
            self.sampled_until = self.sampled_until.max(t);
        }
        // This host's samples are delivered in time order, soon after they were taken.
        self.pending_sys
            .extend(measurements.into_iter().map(|m| PendingSys::new(LOCAL, m.time, m)));
        self.settle(host);
        Ok(())
    }

    /// The origin's view: its job (after the `job` filter) and what its
    /// ranks allow. Unknown ranks (-1) count as 0 unless overridden.
    fn origin_view(&self, o: &Origin) -> OriginView {
        let job =
            (self.settings.job.is_empty() || self.settings.job == o.job).then(|| Arc::<str>::from(o.job.as_str()));
        let rank = self.settings.global_rank.unwrap_or(o.rank).max(0);
        let local = self.settings.local_rank.unwrap_or(o.local_rank);
        OriginView {
            job,
            sys: local <= 0,
            timing: self.settings.timing_ranks == TimingRanks::All || rank == 0,
            rank,
            node: o.node.as_str().into(),
        }
    }

    /// Finds or creates the job an origin reports for and latches its rank
    /// flags, reporting what changed.
    fn register(&mut self, host: &mut dyn Host, origin: &Origin, view: &OriginView) {
        let Some(name) = &view.job else { return };
        let created = !self.jobs.contains_key(name);
        let job = self
            .jobs
            .entry(name.clone())
            .or_insert_with(|| Job::new(name.clone(), Machine::new(self.settings.enabled)));
        if view.sys || view.timing {
            let local_rank = self.settings.local_rank.unwrap_or(origin.local_rank);
            job.see_rank(
                view.rank,
                RankInfo {
                    node: view.node.clone(),
                    local_rank,
                    system_metrics: view.sys,
                    timings: view.timing,
                },
            );
        }
        let mut gained = Vec::new();
        if view.sys && !job.machine.sys_rank {
            job.machine.sys_rank = true;
            job.node_sys = origin.node.clone();
            gained.push("system metrics");
        }
        if view.timing && !job.machine.timing_rank {
            job.machine.timing_rank = true;
            job.node_timing = origin.node.clone();
            gained.push("timings");
        }
        if !created && gained.is_empty() {
            return;
        }
        let m = &job.machine;
        let what = if !m.profiling {
            "profiling off (enabled = false)".to_string()
        } else if !m.enabled() {
            "profiling off for its origins so far (none may report timings, none is local rank 0)".to_string()
        } else {
            format!(
                "profiling enabled: system metrics {}, timings {}",
                if m.sys_enabled() { "on" } else { "off" },
                if m.timings_enabled() { "on" } else { "off" }
            )
        };
        let (reason, sentence) = if created {
            ("seen", format!("job {name}: first seen; {what}"))
        } else {
            (
                "enabled",
                format!(
                    "job {name}: {} enabled by an origin on node \"{}\"; {what}",
                    gained.join(" and "),
                    origin.node
                ),
            )
        };
        job.report(host, Severity::Info, reason, sentence);
    }

    pub fn on_events(&mut self, host: &mut dyn Host, batch: EventBatch) {
        let now = host.now();
        let limits = limits(&self.settings);
        // Per origin of this batch: its view, and whether it was registered
        // with its job. A batch index report creates the job; timings and
        // throughput only count for a job that has reported one (so spans of
        // an unrelated application do not become jobs).
        let mut views: Vec<Option<(OriginView, bool)>> = vec![None; batch.origins.len()];
        let mut view_of = |p: &mut Profiler, host: &mut dyn Host, i: u32, create: bool| -> Option<OriginView> {
            let i = i as usize;
            let origin = batch.origins.get(i)?;
            let (view, registered) = views[i].get_or_insert_with(|| (p.origin_view(origin), false));
            let known = view.job.as_ref().is_some_and(|j| p.jobs.contains_key(j));
            if !*registered && (create || known) {
                p.register(host, origin, view);
                *registered = true;
            }
            Some(view.clone())
        };
        let name_of = |i: u32| batch.names.get(i as usize).map(String::as_str);

        if let Some(c) = &batch.progress {
            for i in 0..c.origin.len() {
                if name_of(c.name[i]) != Some(BATCH_IDX) {
                    continue;
                }
                let Some(view) = view_of(self, host, c.origin[i], true) else {
                    continue;
                };
                let Some(name) = &view.job else {
                    self.out.counters.ignored_other_job += 1;
                    continue;
                };
                if !view.sys && !view.timing {
                    self.out.counters.ignored_ineligible_rank += 1;
                    continue;
                }
                let job = self.jobs.get_mut(name).expect("registered");
                if !job.machine.enabled() {
                    continue;
                }
                let (time, batch_idx) = (c.time[i], c.value[i]);
                // After the end only a report from before it (arriving late) matters.
                if job.machine.window().is_some_and(|(_, end)| time >= end) && job.machine.is_ended() {
                    continue;
                }
                // This host's samples wait the lag from their own time: a
                // report later than that came after some of them were judged.
                let lag = self.settings.lag_ns();
                if time.saturating_add(lag) < now && !self.agents.has(&view.node) {
                    self.out.counters.late_batch_reports += 1;
                    if !job.late_report_logged {
                        job.late_report_logged = true;
                        host.log(
                            Severity::Warn,
                            &format!(
                                "job {name}: a batch-index report arrived {} ms after its time, past lag_ms = {}; \
                                 this host's samples taken since were judged without it (raise lag_ms)",
                                (now - time) / 1_000_000,
                                lag / 1_000_000
                            ),
                        );
                    }
                }
                job.record_batch(view.rank, time, batch_idx);
                for change in job.machine.on_batch(time, batch_idx, &limits) {
                    job.apply(host, change, &self.settings, now);
                }
            }
        }

        if let Some(c) = &batch.timings {
            for i in 0..c.origin.len() {
                let Some(view) = view_of(self, host, c.origin[i], false) else {
                    continue;
                };
                let Some(job_name) = self.eligible_for_timings(&view) else {
                    continue;
                };
                let (start, end) = (c.start[i], c.end[i]);
                let Some(name) = name_of(c.name[i]).filter(|_| end >= start) else {
                    self.out.counters.malformed += 1;
                    continue;
                };
                let job = self.jobs.get_mut(&job_name).expect("registered");
                let name: Arc<str> = match job.timing_names.get(name) {
                    Some(n) => n.clone(),
                    None if job.timing_names.len() < MAX_TIMING_NAMES => {
                        let n: Arc<str> = name.into();
                        job.timing_names.insert(n.clone());
                        n
                    }
                    None => {
                        self.out.counters.dropped_too_many_names += 1;
                        if !job.names_overflow_logged {
                            job.names_overflow_logged = true;
                            host.log(
                                Severity::Warn,
                                &format!(
                                    "job {job_name}: more than {MAX_TIMING_NAMES} distinct timing names; \
                                     timings with new names (first: \"{name}\") are dropped and counted"
                                ),
                            );
                        }
                        continue;
                    }
                };
                self.pending_job.push_back(JobMeasurement {
                    job: job_name,
                    kind: JobKind::Timing { name, step: c.step[i] },
                    time: start,
                    value: (end - start) as f64 / 1e9,
                    rank: view.rank,
                    node: view.node.clone(),
                });
            }
        }

        if let Some(c) = &batch.points {
            for i in 0..c.origin.len() {
                let is_sps = batch
                    .point_series
                    .get(c.series[i] as usize)
                    .is_some_and(|s| is_samples_per_second(&s.metric));
                if !is_sps || c.value[i].is_nan() {
                    continue;
                }
                let Some(view) = view_of(self, host, c.origin[i], false) else {
                    continue;
                };
                let Some(job) = self.eligible_for_timings(&view) else {
                    continue;
                };
                self.pending_job.push_back(JobMeasurement {
                    job,
                    kind: JobKind::SamplesPerSecond,
                    time: c.time[i],
                    value: c.value[i],
                    rank: view.rank,
                    node: view.node.clone(),
                });
            }
        }
        // Agents' samples arrive an export interval or more after they were
        // taken: each waits the lag from its arrival, so that the reports it
        // is judged by (forwarded separately) can arrive too.
        let ignored = self.agents.ignored();
        for (source, m) in self.agents.read(&batch) {
            self.pending_sys.push_back(PendingSys::new(source, m.time.max(now), m));
        }
        self.out.counters.ignored_node_overflow += self.agents.ignored() - ignored;
        self.settle(host);
    }

    /// The job of a timing or throughput report, if the job is known (it
    /// reported a batch index) and the origin may report them (its rank, by
    /// `timing_ranks`; profiling on); otherwise counted and `None`.
    fn eligible_for_timings(&mut self, view: &OriginView) -> Option<Arc<str>> {
        let Some(name) = &view.job else {
            self.out.counters.ignored_other_job += 1;
            return None;
        };
        if !view.timing {
            self.out.counters.ignored_ineligible_rank += 1;
            return None;
        }
        match self.jobs.get(name) {
            None => {
                self.out.counters.ignored_unknown_job += 1;
                return None;
            }
            Some(j) if !j.machine.timings_enabled() => {
                self.out.counters.ignored_inactive += 1;
                return None;
            }
            Some(_) => {}
        }
        Some(name.clone())
    }
}
