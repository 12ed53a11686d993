//! Resource plans: the two strategies behind one interface, and what happens
//! to every plan before it is emitted (reference R3.4, R5.4): the user's
//! settings win, node types without auto-scaling are dropped, and the clamp
//! table applies (upstream defines `limit_resource_value()` and never calls it).

pub mod brain;
pub mod local;

use crate::model::{GroupResource, NodeType, Outcome, Plan, Resource, RuntimeStat};
use crate::settings::{Clamp, Settings, Strategy, User};

/// DLRover's default plan (DefaultNodeResource): 2 workers x (1 CPU, 8000 MiB), 1 PS x (1, 8000).
pub fn default_plan() -> Plan {
    Plan::default()
        .group(NodeType::Worker, GroupResource::new(2, 1.0, 8000.0))
        .group(NodeType::Ps, GroupResource::new(1, 1.0, 8000.0))
}

/// PS cpu/memory the user set count only from these values up (MIN_VALID_CPU / _MEMORY).
const MIN_VALID_CPU: f64 = 2.0;
const MIN_VALID_MEMORY: f64 = 1024.0;
const MAX_PS_NUM: u32 = 15;

/// R3.4: the user's settings win. Worker: the user's count replaces the
/// plan's; cpu/memory come from the user only where the plan has 0. PS: the
/// user's count, and cpu >= 2 / memory >= 1024 MiB replace the plan's; at
/// most 15 PS. Returns what changed, in words.
pub fn apply_user(plan: &mut Plan, user: &User) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(w) = plan.groups.get_mut(&NodeType::Worker) {
        let u = user.worker;
        if u.count > 0 && w.count != u.count {
            notes.push(format!("worker count {} -> the user's {}", w.count, u.count));
            w.count = u.count;
        }
        if w.cpu == 0.0 && u.cpu > 0.0 {
            w.cpu = u.cpu;
            notes.push(format!("worker CPU from the user: {}", u.cpu));
        }
        if w.memory_mib == 0.0 && u.memory.0 > 0.0 {
            w.memory_mib = u.memory.0;
            notes.push(format!("worker memory from the user: {} MiB", u.memory.0));
        }
    }
    if let Some(p) = plan.groups.get_mut(&NodeType::Ps) {
        let u = user.ps;
        if u.count > 0 && p.count != u.count {
            notes.push(format!("PS count {} -> the user's {}", p.count, u.count));
            p.count = u.count;
        }
        if u.memory.0 >= MIN_VALID_MEMORY && p.memory_mib != u.memory.0 {
            notes.push(format!("PS memory {} -> the user's {} MiB", p.memory_mib, u.memory.0));
            p.memory_mib = u.memory.0;
        }
        if u.cpu >= MIN_VALID_CPU && p.cpu != u.cpu {
            notes.push(format!("PS CPU {} -> the user's {}", p.cpu, u.cpu));
            p.cpu = u.cpu;
        }
        if p.count > MAX_PS_NUM {
            notes.push(format!("PS count {} -> at most {MAX_PS_NUM}", p.count));
            p.count = MAX_PS_NUM;
        }
    }
    notes
}

/// Plans for a node type without auto-scaling are dropped (node resources
/// count as PS changes, as upstream).
pub fn apply_auto(plan: &mut Plan, auto_worker: bool, auto_ps: bool) -> Vec<String> {
    let mut notes = Vec::new();
    if !auto_ps && (plan.groups.remove(&NodeType::Ps).is_some() | !plan.nodes.is_empty()) {
        plan.nodes.clear();
        notes.push("PS part dropped: auto_ps is off".to_string());
    }
    if !auto_worker && plan.groups.remove(&NodeType::Worker).is_some() {
        notes.push("worker part dropped: auto_worker is off".to_string());
    }
    notes
}

fn clamp_cpu(c: &Clamp, v: f64) -> f64 {
    if v > 0.0 { v.clamp(c.min_cpu, c.max_cpu) } else { v }
}

fn clamp_mem(c: &Clamp, v: f64) -> f64 {
    if v > 0.0 {
        v.clamp(c.min_memory.0, c.max_memory.0)
    } else {
        v
    }
}

/// R5.4 the NodeResourceLimit table: non-zero cpu/memory into [min, max],
/// at most 60 workers / 15 PS, and a group with nodes but 0 cpu/memory gets
/// the defaults.
pub fn apply_clamp(plan: &mut Plan, c: &Clamp) -> Vec<String> {
    if !c.enabled {
        return Vec::new();
    }
    let before = plan.clone();
    for (t, g) in plan.groups.iter_mut() {
        g.cpu = clamp_cpu(c, g.cpu);
        g.memory_mib = clamp_mem(c, g.memory_mib);
        let max = if *t == NodeType::Ps { c.max_ps } else { c.max_workers };
        g.count = g.count.min(max);
        if g.count > 0 {
            if g.cpu == 0.0 {
                g.cpu = 1.0;
            }
            if g.memory_mib == 0.0 {
                g.memory_mib = 8000.0;
            }
        }
    }
    for r in plan.nodes.values_mut() {
        r.cpu = clamp_cpu(c, r.cpu);
        r.memory_mib = clamp_mem(c, r.memory_mib);
    }
    if *plan == before {
        Vec::new()
    } else {
        vec!["clamped to the resource limits table".to_string()]
    }
}

/// Everything a rule may read.
pub struct Ctx<'a> {
    pub stats: &'a [RuntimeStat],
    pub history: &'a [brain::HistoryJob],
    pub info: brain::JobInfo,
    pub scenario: &'a str,
    pub now: u64,
}

/// The strategy chosen in the settings.
pub struct Optimizer {
    pub strategy: Strategy,
    pub local: local::Local,
    pub brain: brain::Brain,
}

fn merge(a: Outcome, b: Outcome) -> Outcome {
    let mut plan = a.plan;
    plan.groups.extend(b.plan.groups);
    plan.nodes.extend(b.plan.nodes);
    Outcome::with(plan, format!("{}; {}", a.reason, b.reason))
}

impl Optimizer {
    pub fn new(s: &Settings) -> Optimizer {
        Optimizer {
            strategy: s.strategy,
            local: local::Local {
                limits: Resource::new(s.limits.cpu, s.limits.memory.0),
                params: local::Params::default(),
            },
            brain: brain::Brain {
                params: brain::Params::from_settings(&s.brain),
            },
        }
    }

    /// CREATE: the initial plan.
    pub fn create(&self, ctx: &Ctx) -> Outcome {
        match self.strategy {
            Strategy::Local => self.local.create(),
            Strategy::Brain => merge(
                self.brain.ps_create(ctx.history, ctx.scenario, ctx.now),
                self.brain.worker_create(ctx.history, &ctx.info),
            ),
        }
    }

    /// WORKER_INITIAL (and the running "sample" phase).
    pub fn worker_initial(&self, ctx: &Ctx, phase: brain::Phase) -> Outcome {
        match self.strategy {
            Strategy::Local => self.local.worker(ctx.stats),
            Strategy::Brain => self.brain.worker(ctx.stats, &ctx.info, phase),
        }
    }

    /// PS_INITIAL.
    pub fn ps_initial(&self, ctx: &Ctx) -> Outcome {
        match self.strategy {
            Strategy::Local => self.local.ps_initial(ctx.stats),
            Strategy::Brain => self.brain.ps_init_adjust(ctx.stats, &ctx.info),
        }
    }

    /// PS_RUNNING's PS plan: local = hot PS, then workers; Brain = hot PS, then PS utilization.
    pub fn running_ps(&self, ctx: &Ctx) -> Outcome {
        match self.strategy {
            Strategy::Local => self.local.running(ctx.stats),
            Strategy::Brain => {
                let hot = self.brain.hot_ps(ctx.stats);
                if hot.plan.is_empty() {
                    self.brain.ps_util(ctx.stats, &ctx.info)
                } else {
                    hot
                }
            }
        }
    }

    /// The worker plan in the stable phase.
    pub fn worker_stable(&self, ctx: &Ctx) -> Outcome {
        match self.strategy {
            Strategy::Local => self.local.worker(ctx.stats),
            Strategy::Brain => self.brain.worker(ctx.stats, &ctx.info, brain::Phase::Stable),
        }
    }

    /// The OOM plan for one node: local R4.6 (2 x memory, as a node
    /// resource); Brain R6.4 for a PS, R6.2's OOM branch for a worker.
    pub fn oom(&self, ctx: &Ctx, name: &str, kind: NodeType, config: Resource) -> Outcome {
        match (self.strategy, kind) {
            (Strategy::Local, _) => self.local.oom(name, config),
            (Strategy::Brain, NodeType::Ps) => self.brain.ps_oom(ctx.stats),
            (Strategy::Brain, _) => {
                let info = brain::JobInfo {
                    oom: true,
                    last_worker_mem_mib: ctx.info.last_worker_mem_mib.max(config.memory_mib),
                    ..ctx.info.clone()
                };
                self.brain.worker_create(ctx.history, &info)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{Mib, UserGroup};

    #[test]
    fn r3_4_user_settings_win() {
        let mut plan = Plan::default()
            .group(NodeType::Worker, GroupResource::new(10, 0.0, 3072.0))
            .group(NodeType::Ps, GroupResource::new(20, 4.0, 2457.0));
        let user = User {
            worker: UserGroup {
                count: 4,
                cpu: 2.0,
                memory: Mib(9999.0),
            },
            ps: UserGroup {
                count: 0,
                cpu: 1.0,
                memory: Mib(4096.0),
            },
        };
        let notes = apply_user(&mut plan, &user);
        assert_eq!(
            plan.groups[&NodeType::Worker],
            GroupResource::new(4, 2.0, 3072.0),
            "count replaced; cpu only where 0"
        );
        assert_eq!(
            plan.groups[&NodeType::Ps],
            GroupResource::new(15, 4.0, 4096.0),
            "memory >= 1024 replaces; cpu < 2 does not; at most 15 PS"
        );
        assert_eq!(notes.len(), 4, "{notes:?}");
        let mut p = Plan::default().group(NodeType::Ps, GroupResource::new(2, 4.0, 100.0));
        let u = User {
            ps: UserGroup {
                count: 3,
                cpu: 8.0,
                memory: Mib(0.0),
            },
            ..Default::default()
        };
        apply_user(&mut p, &u);
        assert_eq!(p.groups[&NodeType::Ps], GroupResource::new(3, 8.0, 100.0));
    }

    #[test]
    fn r3_4_auto_flags_drop_plans() {
        let full = Plan::default()
            .group(NodeType::Worker, GroupResource::new(2, 1.0, 1.0))
            .group(NodeType::Ps, GroupResource::new(1, 1.0, 1.0))
            .node("ps-0", Resource::new(8.0, 0.0));
        let mut p = full.clone();
        apply_auto(&mut p, true, false);
        assert_eq!(p.groups.keys().collect::<Vec<_>>(), vec![&NodeType::Worker]);
        assert!(p.nodes.is_empty());
        let mut p = full.clone();
        apply_auto(&mut p, false, true);
        assert_eq!(p.groups.keys().collect::<Vec<_>>(), vec![&NodeType::Ps]);
        let mut p = full.clone();
        assert!(apply_auto(&mut p, true, true).is_empty());
        assert_eq!(p, full);
    }

    #[test]
    fn r5_4_clamps() {
        let c = Clamp::default();
        let mut p = Plan::default()
            .group(NodeType::Worker, GroupResource::new(100, 1.0, 3072.0))
            .group(NodeType::Ps, GroupResource::new(20, 64.0, 100_000.0))
            .node("ps-0", Resource::new(40.0, 0.0));
        assert!(!apply_clamp(&mut p, &c).is_empty());
        assert_eq!(p.groups[&NodeType::Worker], GroupResource::new(60, 4.0, 6144.0));
        assert_eq!(p.groups[&NodeType::Ps], GroupResource::new(15, 32.0, 65536.0));
        assert_eq!(p.nodes["ps-0"], Resource::new(32.0, 0.0), "0 stays 0 (unchanged)");
        let mut z = Plan::default().group(NodeType::Worker, GroupResource::new(2, 0.0, 0.0));
        apply_clamp(&mut z, &c);
        assert_eq!(
            z.groups[&NodeType::Worker],
            GroupResource::new(2, 1.0, 8000.0),
            "defaults for 0"
        );
        let mut off = p.clone();
        off.groups.get_mut(&NodeType::Worker).unwrap().cpu = 1.0;
        let before = off.clone();
        assert!(apply_clamp(&mut off, &Clamp { enabled: false, ..c }).is_empty());
        assert_eq!(off, before);
        assert_eq!(
            default_plan().groups[&NodeType::Worker],
            GroupResource::new(2, 1.0, 8000.0)
        );
    }
}
