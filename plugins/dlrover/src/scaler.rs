//! When plans are made (reference section 3): the start rule, the loop's
//! conditions (stable worker count for 60 s, 300 s since the last plan, no
//! PS migration in flight), the stage machine CREATE -> WORKER_INITIAL ->
//! PS_INITIAL -> PS_RUNNING with 3600 s between PS changes, the OOM
//! relaunch memory, and the pending-node halving. Every emitted plan passes
//! through the user's settings, the auto flags and the clamp table, and is
//! recorded with its reason.

use serde::{Deserialize, Serialize};

use crate::failures::{OomContext, oom_memory};
use crate::model::{GroupResource, NodeType, Outcome, Plan, Resource, ns};
use crate::optimizer::brain::Phase;
use crate::optimizer::{Ctx, Optimizer, apply_auto, apply_clamp, apply_user, default_plan};
use crate::settings::Settings;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Create,
    WorkerInitial,
    PsInitial,
    PsRunning,
}

/// An emitted plan: what the rule proposed, what was emitted after the
/// user's settings, the auto flags and the clamps, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanRecord {
    pub id: u64,
    pub time_ns: u64,
    pub strategy: String,
    /// initial | worker | ps | running | worker-sample | worker-stable | oom | pending
    pub kind: String,
    pub stage: Stage,
    pub reason: String,
    pub plan: Plan,
    pub proposed: Plan,
    pub adjustments: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scaler {
    pub stage: Stage,
    pub worker_sampled: bool,
    pub started: bool,
    pub started_reason: String,
    pub last_loop_ns: u64,
    /// Last non-empty plan; 0 = never.
    pub last_plan_ns: u64,
    pub last_ps_change_ns: u64,
    /// PS migrations in flight (node names) and until when they may take.
    pub migrating: Vec<String>,
    pub migration_until_ns: u64,
    pub last_pending_check_ns: u64,
    /// The worker count the last loop plan asked for, and when.
    pub target_workers: Option<u32>,
    #[serde(default)]
    pub target_set_ns: u64,
    /// The job's resources as the plans left them (DLRover's _worker_resource / _ps_resource).
    pub worker: GroupResource,
    pub ps: GroupResource,
    pub next_id: u64,
    /// Why the last loop made no plan.
    pub last_skip: String,
}

impl Default for Scaler {
    fn default() -> Self {
        Scaler {
            stage: Stage::Create,
            worker_sampled: false,
            started: false,
            started_reason: String::new(),
            last_loop_ns: 0,
            last_plan_ns: 0,
            last_ps_change_ns: 0,
            migrating: Vec::new(),
            migration_until_ns: 0,
            last_pending_check_ns: 0,
            target_workers: None,
            target_set_ns: 0,
            worker: GroupResource::default(),
            ps: GroupResource::default(),
            next_id: 0,
            last_skip: "auto-scaling has not started".into(),
        }
    }
}

/// R3.5: a non-GPU node pending too long is relaunched with half its CPU
/// (when that is > 4) and half its memory (when that is > 6144 MiB); `None`
/// when neither halves.
pub fn pending_halving(config: Resource) -> Option<Resource> {
    let cpu = (config.cpu / 2.0).ceil();
    let mem = (config.memory_mib / 2.0).ceil();
    let new = Resource::new(
        if cpu > 4.0 { cpu } else { config.cpu },
        if mem > 6144.0 { mem } else { config.memory_mib },
    );
    (new != config).then_some(new)
}

impl Scaler {
    fn strategy_name(s: &Settings) -> String {
        format!("{:?}", s.strategy).to_lowercase()
    }

    /// Passes a rule's outcome through the user's settings, the auto flags
    /// and the clamps, and records it; `None` when nothing is left.
    pub fn finish(&mut self, s: &Settings, kind: &str, o: Outcome, now: u64) -> Option<PlanRecord> {
        let mut plan = o.plan.clone();
        let mut notes = apply_user(&mut plan, &s.user);
        notes.extend(apply_auto(&mut plan, s.auto_worker, s.auto_ps));
        if plan.is_empty() {
            self.last_skip = format!(
                "{kind}: {}{}",
                o.reason,
                if notes.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", notes.join("; "))
                }
            );
            return None;
        }
        let rec = self.record(s, kind, o, plan, notes, now);
        if let Some(w) = rec.plan.groups.get(&NodeType::Worker) {
            self.worker = *w;
            // The initial plan is the job's creation: a job already running
            // under sonde keeps the count it was launched with.
            if kind != "initial" {
                self.target_workers = Some(w.count);
                self.target_set_ns = now;
            }
        }
        if let Some(p) = rec.plan.groups.get(&NodeType::Ps) {
            self.ps = *p;
        }
        Some(rec)
    }

    /// The one way out for every plan, whichever rule made it (the loop's,
    /// the OOM relaunch, the pending halving): the clamp table applies to
    /// `plan` (what is left of `o.plan` after any earlier adjustments, told
    /// in `notes`) and the plan gets its id. The README promises the table
    /// for every emitted plan; a rule that built its record itself would
    /// skip it, as the OOM plan once did.
    pub fn record(
        &mut self,
        s: &Settings,
        kind: &str,
        o: Outcome,
        mut plan: Plan,
        mut notes: Vec<String>,
        now: u64,
    ) -> PlanRecord {
        notes.extend(apply_clamp(&mut plan, &s.clamp));
        self.next_id += 1;
        PlanRecord {
            id: self.next_id,
            time_ns: now,
            strategy: Self::strategy_name(s),
            kind: kind.to_string(),
            stage: self.stage,
            reason: o.reason,
            plan,
            proposed: o.plan,
            adjustments: notes,
        }
    }

    /// CREATE: the initial plan (the default plan when the rule has none),
    /// then WORKER_INITIAL.
    pub fn init(&mut self, opt: &Optimizer, ctx: &Ctx, s: &Settings, now: u64) -> Option<PlanRecord> {
        let mut o = opt.create(ctx);
        if o.plan.is_empty() {
            o = Outcome::with(default_plan(), format!("{}; the default plan", o.reason));
        }
        self.stage = Stage::WorkerInitial;
        let r = self.finish(s, "initial", o, now);
        self.last_skip = "auto-scaling has not started".into();
        r
    }

    /// R3.1: auto-scaling starts with >= `min_step_samples` global-step
    /// records, or, for a job without global steps, on the first task result
    /// more than `no_step_start_s` after the first get-task.
    pub fn maybe_start(&mut self, s: &Settings, step_records: u64, first_get_ns: Option<u64>, result_ns: Option<u64>) {
        if self.started {
            return;
        }
        if step_records >= s.min_step_samples as u64 {
            self.started = true;
            self.started_reason = format!("{step_records} global-step records (>= {})", s.min_step_samples);
        } else if step_records == 0
            && let (Some(g), Some(r)) = (first_get_ns, result_ns)
            && r.saturating_sub(g) > ns(s.no_step_start_s)
        {
            self.started = true;
            self.started_reason = format!(
                "a task result {} s after the first get-task, without global steps",
                (r - g) / 1_000_000_000
            );
        }
    }

    /// A PS that was migrating runs again.
    pub fn node_running(&mut self, name: &str) {
        self.migrating.retain(|m| m != name);
    }

    /// R3.2 and R3.3: one pass of the loop (every `optimize_interval_s`).
    pub fn run(&mut self, opt: &Optimizer, ctx: &Ctx, s: &Settings, now: u64) -> Option<PlanRecord> {
        self.last_loop_ns = now;
        if !self.started {
            self.last_skip = "auto-scaling has not started (R3.1)".into();
            return None;
        }
        let Some(latest) = ctx.stats.last() else {
            self.last_skip = "no runtime statistics yet".into();
            return None;
        };
        let mut target = self.target_workers.unwrap_or(latest.worker_num);
        if latest.worker_num != target && now.saturating_sub(self.target_set_ns) > ns(s.plan_apply_timeout_s) {
            // Nobody applied it: plan from what runs.
            self.target_workers = None;
            target = latest.worker_num;
        }
        if latest.worker_num != target {
            self.last_skip = format!(
                "{} workers run, the plan asked for {target}: waiting for it",
                latest.worker_num
            );
            return None;
        }
        let stable = ctx.stats.iter().any(|r| {
            r.worker_num == latest.worker_num && latest.time_ns.saturating_sub(r.time_ns) >= ns(s.stable_window_s)
        });
        if !stable {
            self.last_skip = format!("{} workers for less than {} s", latest.worker_num, s.stable_window_s);
            return None;
        }
        if self.last_plan_ns > 0 && now.saturating_sub(self.last_plan_ns) <= ns(s.plan_interval_s) {
            self.last_skip = format!("the last plan is less than {} s old", s.plan_interval_s);
            return None;
        }
        if now >= self.migration_until_ns {
            self.migrating.clear();
        }
        if !self.migrating.is_empty() {
            self.last_skip = format!("PS migration in flight: {}", self.migrating.join(", "));
            return None;
        }
        let stage = self.stage;
        let ps_due =
            now.saturating_sub(self.last_ps_change_ns) > ns(s.ps_change_interval_s) || self.last_ps_change_ns == 0;
        let (kind, outcome) = match self.stage {
            Stage::Create => {
                return self.init(opt, ctx, s, now);
            }
            Stage::WorkerInitial => {
                self.stage = Stage::PsInitial;
                ("worker", opt.worker_initial(ctx, Phase::Initial))
            }
            Stage::PsInitial => {
                self.stage = Stage::PsRunning;
                if ps_due {
                    ("ps", opt.ps_initial(ctx))
                } else {
                    (
                        "ps",
                        Outcome::none(format!(
                            "less than {} s since the last PS change",
                            s.ps_change_interval_s
                        )),
                    )
                }
            }
            Stage::PsRunning => {
                let ps = if ps_due {
                    opt.running_ps(ctx)
                } else {
                    Outcome::none(format!(
                        "less than {} s since the last PS change",
                        s.ps_change_interval_s
                    ))
                };
                if !ps.plan.is_empty() {
                    ("running", ps)
                } else if !self.worker_sampled {
                    self.worker_sampled = true;
                    ("worker-sample", opt.worker_initial(ctx, Phase::Sample))
                } else {
                    ("worker-stable", opt.worker_stable(ctx))
                }
            }
        };
        let mut rec = self.finish(s, kind, outcome, now)?;
        rec.stage = stage;
        self.last_plan_ns = now;
        let ps_nodes: Vec<String> = rec
            .plan
            .nodes
            .keys()
            .filter(|n| {
                ctx.stats
                    .last()
                    .is_some_and(|l| l.of(NodeType::Ps).any(|p| &&p.name == n))
            })
            .cloned()
            .collect();
        if rec.plan.groups.contains_key(&NodeType::Ps) || !ps_nodes.is_empty() {
            self.last_ps_change_ns = now;
        }
        if !ps_nodes.is_empty() {
            self.migrating = ps_nodes;
            self.migration_until_ns = now + ns(s.migration_timeout_s);
        }
        self.last_skip = String::new();
        Some(rec)
    }

    /// R5.1 / R5.2 (and D2): the memory an OOM node is relaunched with. The
    /// OOM plan is a node resource, so it applies at WORKER_INITIAL too
    /// (upstream looked it up as a group there and raised KeyError).
    pub fn oom_memory(
        &mut self,
        opt: &Optimizer,
        ctx: &Ctx,
        s: &Settings,
        name: &str,
        kind: NodeType,
        config: Resource,
    ) -> (f64, String) {
        // The rule's memory becomes the group's, so it is held to the clamp
        // table like any plan: unclamped, 2 x 60000 MiB would lift the
        // relaunch past the cap that the table sets.
        let plan_mem = if kind == NodeType::Ps || (s.auto_worker && self.stage == Stage::WorkerInitial) {
            let mut o = opt.oom(ctx, name, kind, config);
            apply_clamp(&mut o.plan, &s.clamp);
            o.plan
                .nodes
                .get(name)
                .map(|r| r.memory_mib)
                .or_else(|| o.plan.groups.get(&kind).map(|g| g.memory_mib))
                .unwrap_or(0.0)
        } else {
            let mut o = opt.worker_initial(ctx, Phase::Initial);
            apply_user(&mut o.plan, &s.user);
            apply_clamp(&mut o.plan, &s.clamp);
            o.plan.groups.get(&NodeType::Worker).map_or(0.0, |g| g.memory_mib)
        };
        let (group, user) = if kind == NodeType::Ps {
            self.ps.memory_mib = self.ps.memory_mib.max(plan_mem);
            self.last_ps_change_ns = ctx.now;
            (self.ps.memory_mib, s.user.ps.memory.0)
        } else {
            self.worker.memory_mib = self.worker.memory_mib.max(plan_mem);
            (self.worker.memory_mib, s.user.worker.memory.0)
        };
        let m = oom_memory(
            kind,
            config.memory_mib,
            OomContext {
                group_mib: group,
                user_mib: user,
            },
        );
        (m, format!("group memory {group} MiB, user {user} MiB"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NS, NodeStat, RuntimeStat};
    use crate::optimizer::brain::JobInfo;

    fn settings() -> Settings {
        Settings {
            clamp: crate::settings::Clamp {
                enabled: false,
                ..Default::default()
            },
            ..Settings::default()
        }
    }

    fn rec(t_s: u64, workers: usize, ps_used: f64) -> RuntimeStat {
        let mut nodes = vec![
            NodeStat {
                name: "ps-0".into(),
                kind: NodeType::Ps,
                used: Resource::new(ps_used, 1000.0),
                config: Resource::new(4.0, 4096.0),
            },
            NodeStat {
                name: "ps-1".into(),
                kind: NodeType::Ps,
                used: Resource::new(ps_used, 1000.0),
                config: Resource::new(4.0, 4096.0),
            },
        ];
        nodes.extend((0..workers).map(|i| NodeStat {
            name: format!("worker-{i}"),
            kind: NodeType::Worker,
            used: Resource::new(1.0, 2048.0),
            config: Resource::new(1.0, 4096.0),
        }));
        RuntimeStat {
            time_ns: t_s * NS,
            global_step: t_s,
            speed: 10.0,
            worker_num: workers as u32,
            nodes,
        }
    }

    fn ctx(stats: &[RuntimeStat], now: u64) -> Ctx<'_> {
        Ctx {
            stats,
            history: &[],
            info: JobInfo::default(),
            scenario: "",
            now,
        }
    }

    #[test]
    fn r3_1_start_rule() {
        let s = settings();
        let mut sc = Scaler::default();
        sc.maybe_start(&s, 4, None, None);
        assert!(!sc.started);
        sc.maybe_start(&s, 5, None, None);
        assert!(sc.started, ">= 5 global-step records");
        // Without global steps: a task result more than 90 s after the first get.
        let mut sc = Scaler::default();
        sc.maybe_start(&s, 0, Some(0), Some(90 * NS));
        assert!(!sc.started);
        sc.maybe_start(&s, 0, Some(0), Some(91 * NS));
        assert!(sc.started);
    }

    #[test]
    fn r3_2_r3_3_cadence_and_stages() {
        let s = settings();
        let opt = Optimizer::new(&s);
        let mut sc = Scaler::default();
        let init = sc.init(&opt, &ctx(&[], 0), &s, 0).unwrap();
        assert_eq!((init.kind.as_str(), init.id), ("initial", 1));
        assert_eq!(sc.stage, Stage::WorkerInitial);
        // Not started: no plan.
        let stats = vec![rec(0, 3, 1.0), rec(60, 3, 1.0)];
        assert!(sc.run(&opt, &ctx(&stats, 60 * NS), &s, 60 * NS).is_none());
        sc.started = true;
        assert_eq!(
            sc.target_workers, None,
            "the initial plan sets no target: the job runs what it was launched with"
        );
        // Stable for less than 60 s: no plan.
        let short = vec![rec(0, 3, 1.0), rec(59, 3, 1.0)];
        assert!(sc.run(&opt, &ctx(&short, 59 * NS), &s, 59 * NS).is_none());
        // Less than 300 s since the initial plan? The initial plan does not count (loop plans only).
        let w = sc.run(&opt, &ctx(&stats, 400 * NS), &s, 400 * NS).expect("worker plan");
        assert_eq!((w.kind.as_str(), w.stage), ("worker", Stage::WorkerInitial));
        assert_eq!(w.plan.groups[&NodeType::Worker].count, 10);
        assert_eq!(sc.stage, Stage::PsInitial);
        assert_eq!(sc.target_workers, Some(10));
        // 3 still run: wait for the plan to be applied, up to plan_apply_timeout_s.
        assert!(sc.run(&opt, &ctx(&stats, 800 * NS), &s, 800 * NS).is_none());
        assert!(sc.last_skip.contains("asked for 10"), "{}", sc.last_skip);
        // Within 300 s of that plan: nothing, even at the right worker count.
        let ten = vec![rec(400, 10, 1.0), rec(500, 10, 1.0)];
        assert!(sc.run(&opt, &ctx(&ten, 700 * NS), &s, 700 * NS).is_none());
        assert!(sc.last_skip.contains("300"), "{}", sc.last_skip);
        // PS_INITIAL: the PS plan, and the PS-change timer.
        let p = sc.run(&opt, &ctx(&ten, 701 * NS), &s, 701 * NS).expect("ps plan");
        assert_eq!(p.kind, "ps");
        assert!(p.plan.groups.contains_key(&NodeType::Ps));
        assert_eq!(sc.stage, Stage::PsRunning);
        assert_eq!(sc.last_ps_change_ns, 701 * NS);
        // PS_RUNNING within 3600 s of the PS change: the worker plan, sample phase first, then stable.
        let ws = sc.run(&opt, &ctx(&ten, 1002 * NS), &s, 1002 * NS).expect("sample");
        assert_eq!(ws.kind, "worker-sample");
        sc.target_workers = Some(10);
        let wt = sc.run(&opt, &ctx(&ten, 1303 * NS), &s, 1303 * NS).expect("stable");
        assert_eq!(wt.kind, "worker-stable");
        // After 3600 s: the PS plan first (hot PS -> migration in flight).
        sc.target_workers = Some(10);
        let hot = vec![rec(4000, 10, 3.8), rec(4400, 10, 3.8)];
        let h = sc.run(&opt, &ctx(&hot, 4400 * NS), &s, 4400 * NS).expect("hot PS");
        assert_eq!(h.kind, "running");
        assert!(h.plan.nodes.contains_key("ps-0"));
        assert_eq!(sc.migrating.len(), 2);
        assert!(sc.run(&opt, &ctx(&hot, 4800 * NS), &s, 4800 * NS).is_none());
        assert!(sc.last_skip.contains("migration"), "{}", sc.last_skip);
        sc.node_running("ps-0");
        sc.node_running("ps-1");
        assert!(
            sc.run(&opt, &ctx(&hot, 4801 * NS), &s, 4801 * NS).is_some(),
            "migration done"
        );
    }

    #[test]
    fn r3_4_plans_pass_through_user_settings() {
        let mut s = settings();
        s.user.worker.count = 4;
        s.auto_ps = false;
        let opt = Optimizer::new(&s);
        let mut sc = Scaler::default();
        let init = sc.init(&opt, &ctx(&[], 0), &s, 0).unwrap();
        assert_eq!(init.plan.groups.keys().collect::<Vec<_>>(), vec![&NodeType::Worker]);
        assert_eq!(init.plan.groups[&NodeType::Worker].count, 4);
        assert_eq!(init.proposed.groups[&NodeType::Worker].count, 1);
        assert!(
            init.adjustments.iter().any(|a| a.contains("user")),
            "{:?}",
            init.adjustments
        );
    }

    #[test]
    fn r3_5_pending_halving() {
        assert_eq!(
            pending_halving(Resource::new(16.0, 32768.0)),
            Some(Resource::new(8.0, 16384.0))
        );
        assert_eq!(
            pending_halving(Resource::new(8.0, 32768.0)),
            Some(Resource::new(8.0, 16384.0)),
            "4 is not > 4"
        );
        assert_eq!(
            pending_halving(Resource::new(16.0, 8192.0)),
            Some(Resource::new(8.0, 8192.0))
        );
        assert_eq!(pending_halving(Resource::new(4.0, 8000.0)), None);
    }

    #[test]
    fn r5_d2_oom_at_worker_initial() {
        // Upstream raised KeyError('worker') here and the node was not relaunched.
        let s = settings();
        let opt = Optimizer::new(&s);
        let mut sc = Scaler::default();
        sc.init(&opt, &ctx(&[], 0), &s, 0);
        assert_eq!(sc.stage, Stage::WorkerInitial);
        let (m, _) = sc.oom_memory(
            &opt,
            &ctx(&[], 0),
            &s,
            "worker-0",
            NodeType::Worker,
            Resource::new(1.0, 4096.0),
        );
        assert_eq!(m, 8192.0);
        assert_eq!(
            sc.worker.memory_mib, 8192.0,
            "the group remembers the OOM plan's memory"
        );
        // PS OOM resets the PS-change timer.
        let (m, _) = sc.oom_memory(
            &opt,
            &ctx(&[], 77),
            &s,
            "ps-0",
            NodeType::Ps,
            Resource::new(4.0, 16384.0),
        );
        assert_eq!(m, 24576.0);
        assert_eq!(sc.last_ps_change_ns, 77);
        // Later stages use the worker plan's memory for the group.
        sc.stage = Stage::PsRunning;
        let stats = vec![rec(0, 3, 1.0)];
        let (m, _) = sc.oom_memory(
            &opt,
            &ctx(&stats, 0),
            &s,
            "worker-1",
            NodeType::Worker,
            Resource::new(1.0, 40000.0),
        );
        assert_eq!(m, 48192.0);
    }
}
