//! Nodes that end, die or lag: exit reasons and relaunch decisions (R7.2,
//! R7.3, the OOM plan), heartbeat death (R7.1), task timeouts, CPU hangs
//! (R7.4), stragglers from step times, and the pre-training node check (R8).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;
use sonde_plugin_sdk::types::Severity;

use super::Master;
use super::plans::ctx_of;
use crate::failures::{self, CheckResult, ExitReason, Failed, OomContext, Relaunch};
use crate::model::{NodeType, Outcome, Plan, Resource, RuntimeStat, ns, secs};
use crate::nodes::Status;
use crate::sharding::ReportAnswer;
use sonde_plugin_sdk::Host;

impl Master {
    /// A node ended: its DOING shards go back to TODO (any end: an ended
    /// process cannot finish them), and the relaunch rules decide.
    pub fn node_ended(
        &mut self,
        host: &mut dyn Host,
        name: &str,
        reason: ExitReason,
        code: Option<i32>,
        text: &str,
        now: u64,
    ) {
        let (kind, config, relaunches, gpu) = {
            let n = self.node(name);
            n.status = match reason {
                ExitReason::Succeeded => Status::Succeeded,
                ExitReason::Deleted => Status::Deleted,
                _ => Status::Failed,
            };
            n.exit_reason = Some(reason);
            n.exit_code = code;
            (n.kind, n.effective_config(), n.relaunch_count, n.gpu)
        };
        self.nodes_dirty = true;
        self.release_shards(host, name, reason.name(), now);
        if reason == ExitReason::Succeeded {
            return;
        }
        let kind = kind.unwrap_or(NodeType::Worker);
        let mut oom = OomContext::default();
        if reason == ExitReason::Oom {
            self.misc.oom = true;
            self.put_misc(host);
            let stats: Vec<RuntimeStat> = self.stats.iter().cloned().collect();
            let ctx = ctx_of(&self.history, &self.settings, self.job_info(), &stats, now);
            let (_, note) = self
                .scaler
                .oom_memory(&self.optimizer, &ctx, &self.settings, name, kind, config);
            host.log(Severity::Info, &format!("dlrover: OOM of {name}: {note}"));
            oom = OomContext {
                group_mib: if kind == NodeType::Ps {
                    self.scaler.ps.memory_mib
                } else {
                    self.scaler.worker.memory_mib
                },
                user_mib: if kind == NodeType::Ps {
                    self.settings.user.ps.memory.0
                } else {
                    self.settings.user.worker.memory.0
                },
            };
            self.put_scaler(host);
        }
        let decision = failures::relaunch(
            Failed {
                kind,
                reason,
                relaunch_count: relaunches,
                memory_mib: config.memory_mib,
                gpu,
            },
            self.settings.job_type,
            self.settings.max_relaunch,
            self.settings.relaunch_always,
            oom,
        );
        let detail = if text.is_empty() {
            String::new()
        } else {
            format!(" ({text})")
        };
        match &decision {
            Relaunch::Yes { memory_mib, why } => {
                // The OOM plan goes through the clamps like every plan; the
                // relaunch tells the memory the plan ends with.
                let plan = memory_mib.map(|m| {
                    let p = Plan::default().node(name, Resource::new(config.cpu, m));
                    let o = Outcome::with(p.clone(), why.clone());
                    self.scaler.record(&self.settings, "oom", o, p, Vec::new(), now)
                });
                let memory = plan.as_ref().and_then(|r| r.plan.nodes.get(name)).map(|r| r.memory_mib);
                let clamped = plan.as_ref().is_some_and(|r| !r.adjustments.is_empty());
                self.record(
                    host,
                    "relaunch",
                    name,
                    &format!(
                        "{}{detail}: relaunch: {why}{}",
                        reason.name(),
                        match (clamped, memory) {
                            (true, Some(m)) => format!(" (clamped to {m} MiB)"),
                            _ => String::new(),
                        }
                    ),
                    json!({"exit_reason": reason.name(), "exit_code": code, "relaunch": true, "memory_mib": memory}),
                );
                if let Some(rec) = plan {
                    self.emit_plan(host, rec);
                    self.put_scaler(host);
                }
            }
            Relaunch::No { why, unrecoverable } => self.record(
                host,
                "no-relaunch",
                name,
                &format!("{}{detail}: not relaunched: {why}", reason.name()),
                json!({"exit_reason": reason.name(), "exit_code": code, "relaunch": false, "unrecoverable": unrecoverable}),
            ),
        }
    }

    /// R7.1 heartbeat death.
    pub fn scan_heartbeats(&mut self, host: &mut dyn Host, now: u64) {
        let timeout = ns(self.settings.heartbeat_timeout_s);
        let dead: Vec<(String, u64)> = self
            .nodes
            .values()
            .filter(|n| failures::heartbeat_dead(n.last_heartbeat_ns, n.started_ns, n.running(), now, timeout))
            .map(|n| (n.name.clone(), n.last_heartbeat_ns))
            .collect();
        for (name, hb) in dead {
            let silent = secs(hb, now);
            self.record(
                host,
                "node-dead",
                &name,
                &format!(
                    "no heartbeat for {silent:.1} s (> {} s)",
                    self.settings.heartbeat_timeout_s
                ),
                json!({"last_heartbeat_ns": hb}),
            );
            self.node_ended(host, &name, ExitReason::NoHeartBeat, None, "", now);
        }
    }

    /// DOING shards past the task timeout go back to TODO (any task type: D7).
    pub fn scan_task_timeouts(&mut self, host: &mut dyn Host, now: u64) {
        let timeout = ns(self.settings.task_timeout_s);
        let names: Vec<String> = self
            .datasets
            .iter()
            .filter(|(_, d)| d.doing.values().any(|t| now.saturating_sub(t.start_ns) > timeout))
            .map(|(k, _)| k.clone())
            .collect();
        for name in names {
            let mut d = self.datasets[&name].clone();
            let out = d.time_out(timeout, self.settings.max_shard_failures, now);
            let mut by_node: BTreeMap<String, Vec<(u64, ReportAnswer)>> = BTreeMap::new();
            for (id, node, a) in out {
                by_node.entry(node).or_default().push((id, a));
            }
            for (node, failed) in by_node {
                let reason = format!("task timed out after {} s", self.settings.task_timeout_s);
                self.after_failures(host, &name, &node, &reason, &failed, &d);
            }
            if self.commit_dataset(host, d.clone()).is_err() {
                self.datasets.insert(name, d);
            }
        }
    }

    /// R7.4 CPU hang of non-GPU nodes.
    pub(super) fn check_hangs(&mut self, host: &mut dyn Host, now: u64) {
        let ratio = self.settings.hang_cpu_ratio;
        let after = ns(self.settings.hang_after_s);
        let mut newly = Vec::new();
        for n in self.nodes.values_mut() {
            if !n.running() || n.gpu || n.kind.is_none() {
                continue;
            }
            let Some(cpu) = n.usage.latest.as_ref().and_then(|l| l.cpu) else {
                continue;
            };
            let (since, hung) =
                failures::cpu_hang(cpu, n.effective_config().cpu, n.low_cpu_since_ns, now, ratio, after);
            n.low_cpu_since_ns = since;
            if hung && !n.hung {
                newly.push(n.name.clone());
            }
            n.hung = hung;
        }
        for name in newly {
            self.record(
                host,
                "node-hang",
                &name,
                &format!("CPU below {ratio} of its cores for {} s", self.settings.hang_after_s),
                json!({}),
            );
        }
    }

    /// `gpu-hang-suspected`: a node whose GPU reads busy while its SMs are
    /// idle and the job's global step has not moved (see `failures::gpu_hang`).
    pub(super) fn check_gpu_hangs(&mut self, host: &mut dyn Host, now: u64) {
        let rule = failures::GpuHangRule {
            busy: self.settings.gpu_hang_busy,
            sm_idle: self.settings.gpu_hang_sm_idle,
            after_ns: ns(self.settings.gpu_hang_after_s),
        };
        let progress = self.perf.records.back().map(|r| r.time_ns);
        let mut newly = Vec::new();
        for n in self.nodes.values_mut() {
            let Some(latest) = n.usage.latest.as_ref() else {
                continue;
            };
            // the first GPU showing the pattern, if any
            let suspect = latest
                .gpus
                .iter()
                .map(|g| {
                    (
                        g,
                        failures::gpu_hang(
                            g.utilization,
                            g.sm_active,
                            progress,
                            n.gpu_idle_busy_since_ns,
                            now,
                            rule,
                        ),
                    )
                })
                .find(|(_, (since, _))| since.is_some());
            let (gpu, (since, hung)) = match suspect {
                Some((g, r)) => (Some(g.id.clone()), r),
                None => (None, (None, false)),
            };
            n.gpu_idle_busy_since_ns = since;
            if hung && !n.gpu_hang {
                newly.push((n.name.clone(), gpu.unwrap_or_default()));
            }
            n.gpu_hang = hung;
        }
        for (name, gpu) in newly {
            self.record(
                host,
                "gpu-hang-suspected",
                &name,
                &format!(
                    "GPU {gpu} busy (>= {}) with idle SMs (<= {}) and no global-step progress for {} s",
                    rule.busy, rule.sm_idle, self.settings.gpu_hang_after_s
                ),
                json!({"gpu": gpu}),
            );
        }
    }

    /// Stragglers during training: 2 x median of per-step times.
    pub fn update_stragglers(&mut self, host: &mut dyn Host) {
        let per: Vec<(String, Vec<f64>)> = self
            .nodes
            .values()
            .filter(|n| n.running() && !n.step_times.is_empty())
            .map(|n| (n.name.clone(), n.step_times.iter().copied().collect()))
            .collect();
        let (med, slow) = failures::step_stragglers(
            &per,
            self.settings.straggler_factor,
            self.settings.straggler_min_steps as usize,
        );
        let before: BTreeSet<String> = self.stragglers.iter().map(|(n, _)| n.clone()).collect();
        for (name, t) in &slow {
            if !before.contains(name) {
                self.record(
                    host,
                    "straggler",
                    name,
                    &format!(
                        "median step time {t:.3} s > {} x the median of all nodes ({:.3} s)",
                        self.settings.straggler_factor,
                        med.unwrap_or(0.0)
                    ),
                    json!({"median_step_s": t, "job_median_step_s": med, "source": "training"}),
                );
            }
        }
        self.stragglers = slow;
        self.step_median = med;
    }

    pub fn node_check_report(&mut self, host: &mut dyn Host, node: &str, ok: bool, time: f64) {
        self.misc
            .node_check
            .entry(node.to_string())
            .or_default()
            .push((ok, time));
        self.put_misc(host);
    }

    pub fn node_check_verdict(&self) -> failures::CheckVerdict {
        let per: Vec<(String, Vec<CheckResult>)> = self
            .misc
            .node_check
            .iter()
            .map(|(n, r)| {
                (
                    n.clone(),
                    r.iter()
                        .map(|(ok, time)| CheckResult { ok: *ok, time: *time })
                        .collect(),
                )
            })
            .collect();
        failures::check_verdict(&per, self.settings.straggler_factor)
    }
}
