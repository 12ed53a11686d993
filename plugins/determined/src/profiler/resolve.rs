//! Resolution: a pending measurement whose lag has passed is counted only
//! inside its job's active window and tied to the batch index current at its
//! own timestamp; the queues stay within `max_pending`.

use std::sync::Arc;

use super::intake::JobMeasurement;
use super::job::{JobKind, limits};
use super::series::{SeriesKey, SeriesKind, TimingRow};
use super::{PendingSys, Profiler, RECENT_TIMINGS, TIMELINE_MARGIN_NS};
use crate::agents::LOCAL;
use crate::outputs::{MetricType, SAMPLES_PER_SECOND, TIMING};
use crate::samples::NO_GPU;
use crate::settings::SystemFrom;
use sonde_plugin_sdk::Host;

impl Profiler {
    /// Every hook's common tail: end jobs whose cap passed, resolve what the
    /// lag allows, bound the queues, emit the points.
    pub(super) fn settle(&mut self, host: &mut dyn Host) {
        self.check_caps(host);
        self.resolve(host, false);
        self.enforce_bound();
        self.emit_points(host);
        self.follow_jobs(host);
    }

    pub(super) fn check_caps(&mut self, host: &mut dyn Host) {
        let now = host.now();
        let limits = limits(&self.settings);
        for job in self.jobs.values_mut() {
            if let Some(change) = job.machine.check_cap(now, &limits) {
                job.apply(host, change, &self.settings, now);
            }
        }
    }

    pub(super) fn emit_points(&mut self, host: &mut dyn Host) {
        if !self.out.points.is_empty() {
            host.emit_points(&self.out.points.take());
        }
    }

    /// Resolves every pending measurement taken at least `lag_ms` ago (all
    /// of them when `force`).
    pub(super) fn resolve(&mut self, host: &mut dyn Host, force: bool) {
        let now = host.now();
        let horizon = if force {
            u64::MAX
        } else {
            now.saturating_sub(self.settings.lag_ns())
        };
        self.resolved_until = self.resolved_until.max(horizon.min(self.sampled_until));
        while self.pending_sys.front().is_some_and(|p| p.ready <= horizon) {
            let p = self.pending_sys.pop_front().expect("checked");
            self.resolve_sys(host, &p);
        }
        while self.pending_job.front().is_some_and(|m| m.time <= horizon) {
            let m = self.pending_job.pop_front().expect("checked");
            self.resolve_job(host, m);
        }
        // Reports older than anything still pending (with a margin for
        // timings reported long after they started) are no longer needed.
        let oldest = [
            self.pending_sys.front().map(|p| p.m.time),
            self.pending_job.front().map(|m| m.time),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(horizon)
        .min(horizon);
        let keep_from = oldest.saturating_sub(TIMELINE_MARGIN_NS);
        for job in self.jobs.values_mut() {
            job.prune_before(keep_from);
        }
    }

    fn resolve_sys(&mut self, host: &mut dyn Host, p: &PendingSys) {
        let m = &p.m;
        let spec = m.metric.spec();
        // Made for the first job that takes the measurement: an idle host's
        // measurements, which no job takes, allocate nothing.
        let mut determined: Option<Arc<str>> = None;
        let gpu_uuid = match (m.gpu, p.source) {
            (NO_GPU, _) => "",
            (gpu, LOCAL) => self.reader.gpu_uuid(gpu),
            (gpu, source) => self.agents.gpu_uuid(source, gpu),
        };
        let only = self.settings.job.as_str();
        let from = self.settings.system_metrics_from;
        let agents = &self.agents;
        for job in self.jobs.values_mut() {
            // A job the `job` setting no longer selects gets no more samples.
            if !job.machine.sys_enabled() || (!only.is_empty() && *job.name != *only) {
                continue;
            }
            // Which of the job's nodes this measurement stands for, if any.
            let node = match (p.source, from) {
                (LOCAL, SystemFrom::Agents) => None,
                // Every origin is taken to be on this machine: one series per
                // job, under the first node that enabled its system metrics.
                (LOCAL, SystemFrom::Local) => job.local_node(|_| false),
                // This machine stands in for the nodes without an agent.
                (LOCAL, SystemFrom::Auto) => job.local_node(|n| agents.has(n)),
                (_, SystemFrom::Local) => None,
                (source, _) => job.sys_nodes.get(agents.node(source)).cloned(),
            };
            let Some(node) = node else { continue };
            if !job.machine.counts(m.since, m.time) {
                // Before activation (or while waiting to resume) it is
                // ignored-while-inactive; a rate whose first reading is
                // before activation, or anything after the end, is not counted.
                let before = match job.machine.window() {
                    Some((start, _)) => m.time < start,
                    None => !job.machine.is_ended(),
                };
                if before {
                    self.out.counters.ignored_inactive += 1;
                }
                continue;
            }
            let batch = job.batch_at(m.time);
            let key = SeriesKey {
                job: job.name.clone(),
                output: SeriesKind::Sys(m.metric),
                source: p.source,
                gpu: m.gpu,
                node,
                rank: None,
            };
            self.out.push(
                host,
                key,
                spec,
                determined.get_or_insert_with(|| spec.determined.into()),
                gpu_uuid,
                m.time,
                batch,
                m.value,
            );
            job.batch_point(host, &mut self.out.points, MetricType::System, m.time, batch);
        }
    }

    fn resolve_job(&mut self, host: &mut dyn Host, m: JobMeasurement) {
        let limits = limits(&self.settings);
        let Some(job) = self.jobs.get_mut(&m.job) else { return };
        // A timing with its own batch index is judged by that index; anything
        // else by the time it was taken.
        let counts = match &m.kind {
            JobKind::Timing { step, .. } if *step >= 0 => job.machine.counts_batch(*step as u64, m.time, &limits),
            _ => job.machine.counts(m.time, m.time),
        };
        if !counts {
            self.out.counters.ignored_inactive += 1;
            return;
        }
        let (output, spec, determined, metric_type, batch) = match &m.kind {
            JobKind::Timing { name, step } => {
                let batch = if *step >= 0 {
                    *step as u64
                } else {
                    job.rank_batch_at(m.rank, m.time)
                };
                (
                    SeriesKind::Timing(name.clone()),
                    TIMING,
                    name.clone(),
                    MetricType::Timing,
                    batch,
                )
            }
            JobKind::SamplesPerSecond => (
                SeriesKind::Misc,
                SAMPLES_PER_SECOND,
                Arc::from(SAMPLES_PER_SECOND.determined),
                MetricType::Misc,
                job.rank_batch_at(m.rank, m.time),
            ),
        };
        let key = SeriesKey {
            job: job.name.clone(),
            output,
            source: LOCAL,
            gpu: NO_GPU,
            node: m.node.clone(),
            rank: Some(m.rank),
        };
        self.out.push(host, key, spec, &determined, "", m.time, batch, m.value);
        job.batch_point(host, &mut self.out.points, metric_type, m.time, batch);
        if let JobKind::Timing { name, .. } = m.kind {
            if self.out.recent.len() >= RECENT_TIMINGS {
                self.out.recent.pop_front();
            }
            self.out.recent.push_back(TimingRow {
                job: m.job,
                rank: m.rank,
                node: m.node,
                name,
                batch_idx: batch,
                start_ns: m.time,
                duration_s: m.value,
            });
        }
    }

    /// Keeps pending + unflushed within `max_pending`, dropping the oldest:
    /// unflushed rows first (they were resolved earliest), then whichever
    /// pending measurement was taken first.
    pub(super) fn enforce_bound(&mut self) {
        let total = self.pending_sys.len() + self.pending_job.len() + self.out.unflushed.len();
        let excess = total.saturating_sub(self.settings.max_pending);
        for _ in 0..excess {
            if self.out.unflushed.pop_front().is_none() {
                let sys = self.pending_sys.front().map(|p| p.ready);
                let job = self.pending_job.front().map(|m| m.time);
                match (sys, job) {
                    (Some(s), Some(j)) if j < s => drop(self.pending_job.pop_front()),
                    (Some(_), _) => drop(self.pending_sys.pop_front()),
                    _ => drop(self.pending_job.pop_front()),
                }
            }
            self.out.counters.dropped_queue_full += 1;
        }
    }
}
