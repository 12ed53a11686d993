//! The plan loop (R3): when to start, the scaler's stage machine, plans for
//! nodes left pending (R3.5), emitting a plan as a decision, and the finished
//! job's summary for the Brain's history.

use sonde_plugin_sdk::types::{Attribute, Decision, Severity};

use super::Master;
use super::store::to_json;
use crate::model::{Outcome, Plan, Resource, RuntimeStat, ns};
use crate::nodes::Status;
use crate::optimizer::Ctx;
use crate::optimizer::brain::{HistoryJob, JobInfo};
use crate::scaler::{PlanRecord, pending_halving};
use crate::settings::Settings;
use crate::sharding::{Dataset, TaskType};
use sonde_plugin_sdk::Host;

/// Plans kept in memory for the routes (all are in the `plans` stream).
pub(super) const RECENT_PLANS: usize = 200;

pub(super) fn ctx_of<'a>(
    history: &'a [HistoryJob],
    s: &'a Settings,
    info: JobInfo,
    stats: &'a [RuntimeStat],
    now: u64,
) -> Ctx<'a> {
    Ctx {
        stats,
        history,
        info,
        scenario: &s.scenario,
        now,
    }
}

impl Master {
    /// Facts about the job for the rules.
    pub fn job_info(&self) -> JobInfo {
        let total = self
            .datasets
            .values()
            .find(|d| d.params.task_type == TaskType::Training)
            .map(|d| {
                let steps = d.params.dataset_size as f64 / d.params.batch_size as f64 * d.params.num_epochs as f64;
                if self.settings.max_steps > 0 {
                    steps.min(self.settings.max_steps as f64)
                } else {
                    steps
                }
            })
            .unwrap_or(0.0);
        JobInfo {
            total_steps: total,
            oom: self.misc.oom,
            recv_ops: None,
            last_worker_mem_mib: self.scaler.worker.memory_mib,
        }
    }

    pub fn ctx<'a>(&'a self, stats: &'a [RuntimeStat], now: u64) -> Ctx<'a> {
        ctx_of(&self.history, &self.settings, self.job_info(), stats, now)
    }

    /// The records the rules use: those with a speed (DLRover collects only
    /// those), or all of them for a job without global steps.
    fn rule_stats(&self) -> Vec<RuntimeStat> {
        if self.perf.total == 0 {
            self.stats.iter().cloned().collect()
        } else {
            self.stats.iter().filter(|s| s.speed > 0.0).cloned().collect()
        }
    }

    /// The plan loop (every `optimize_interval_s`).
    pub fn plan_loop(&mut self, host: &mut dyn Host, now: u64) {
        self.scaler.last_loop_ns = now;
        let first_get = self.datasets.values().filter_map(|d| d.first_get_ns).min();
        self.scaler
            .maybe_start(&self.settings, self.perf.total, first_get, self.misc.first_result_ns);
        if !self.scaler.started {
            if now.saturating_sub(self.scaler.last_pending_check_ns) >= ns(self.settings.pending_check_s) {
                self.scaler.last_pending_check_ns = now;
                self.check_pending(host, now);
            }
            self.put_scaler(host);
            return;
        }
        let stats = self.rule_stats();
        let ctx = ctx_of(&self.history, &self.settings, self.job_info(), &stats, now);
        let rec = self.scaler.run(&self.optimizer, &ctx, &self.settings, now);
        if let Some(rec) = rec {
            self.emit_plan(host, rec);
        }
        self.put_scaler(host);
    }

    /// R3.5: non-GPU nodes pending too long are relaunched with less.
    fn check_pending(&mut self, host: &mut dyn Host, now: u64) {
        let limit = ns(self.settings.pending_timeout_s);
        let stuck: Vec<(String, Resource)> = self
            .nodes
            .values()
            .filter(|n| n.status == Status::Pending && !n.gpu)
            .filter(|n| n.pending_since_ns.is_some_and(|t| now.saturating_sub(t) > limit))
            .map(|n| (n.name.clone(), n.effective_config()))
            .collect();
        for (name, cfg) in stuck {
            let Some(new) = pending_halving(cfg) else { continue };
            let plan = Plan::default().node(&name, new);
            let reason = format!(
                "{name} pending for more than {} s: relaunch with {} CPU, {} MiB (was {}, {})",
                self.settings.pending_timeout_s, new.cpu, new.memory_mib, cfg.cpu, cfg.memory_mib
            );
            let o = Outcome::with(plan.clone(), reason);
            let rec = self.scaler.record(&self.settings, "pending", o, plan, Vec::new(), now);
            if let Some(n) = self.nodes.get_mut(&name) {
                n.config = rec.plan.nodes.get(&name).copied().unwrap_or(new);
                n.pending_since_ns = Some(now);
            }
            self.nodes_dirty = true;
            self.emit_plan(host, rec);
        }
    }

    pub fn emit_plan(&mut self, host: &mut dyn Host, rec: PlanRecord) {
        if let Err(e) = host.state_append("plans", &to_json(&rec)) {
            self.counters.state_errors += 1;
            host.log(Severity::Error, &format!("dlrover: appending a plan failed: {e}"));
        }
        let subject = if self.settings.job.is_empty() {
            "job".to_string()
        } else {
            self.settings.job.clone()
        };
        host.log(
            Severity::Info,
            &format!("dlrover: plan {} ({}): {}", rec.id, rec.kind, rec.reason),
        );
        host.emit_decision(&Decision {
            kind: "resource-plan".into(),
            subject,
            reason: format!("{}: {}", rec.kind, rec.reason),
            body: serde_json::to_string(&rec).expect("plan serializes"),
            attributes: vec![
                Attribute::new("dlrover.plan.kind", rec.kind.as_str()),
                Attribute::new("dlrover.strategy", rec.strategy.as_str()),
            ],
        });
        self.plans.push_back(rec);
        while self.plans.len() > RECENT_PLANS {
            self.plans.pop_front();
        }
    }

    /// When every training dataset is complete, the job's summary joins the
    /// Brain's history (once).
    pub(super) fn maybe_write_history(&mut self, host: &mut dyn Host, now: u64) {
        if self.misc.history_written {
            return;
        }
        let training: Vec<&Dataset> = self
            .datasets
            .values()
            .filter(|d| d.params.task_type == TaskType::Training)
            .collect();
        if training.is_empty() || !training.iter().all(|d| d.completed()) {
            return;
        }
        let stats: Vec<RuntimeStat> = self.stats.iter().cloned().collect();
        let job = if self.settings.job.is_empty() {
            "job"
        } else {
            &self.settings.job
        };
        let h = HistoryJob::summarize(job, &self.settings.scenario, now, true, self.misc.oom, &stats);
        self.add_history(host, h);
        self.misc.history_written = true;
        self.put_misc(host);
    }

    pub fn add_history(&mut self, host: &mut dyn Host, h: HistoryJob) {
        if let Err(e) = host.state_append("history", &to_json(&h)) {
            self.counters.state_errors += 1;
            host.log(Severity::Error, &format!("dlrover: appending history failed: {e}"));
        }
        self.history.push(h);
    }
}
