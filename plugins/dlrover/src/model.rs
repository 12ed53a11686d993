//! Types every module shares: node types, resources (CPU in cores, memory in
//! MiB, one unit throughout), resource plans and the runtime-statistics record.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Nanoseconds per second.
pub const NS: u64 = 1_000_000_000;

/// Seconds (f64) between two nanosecond timestamps; 0 when `b` is before `a`.
pub fn secs(a: u64, b: u64) -> f64 {
    b.saturating_sub(a) as f64 / NS as f64
}

/// Seconds to nanoseconds (negative and NaN give 0).
pub fn ns(s: f64) -> u64 {
    if s.is_finite() && s > 0.0 {
        (s * NS as f64) as u64
    } else {
        0
    }
}

/// DLRover's node types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeType {
    Worker,
    Ps,
    Chief,
    Evaluator,
}

impl NodeType {
    pub fn name(self) -> &'static str {
        match self {
            NodeType::Worker => "worker",
            NodeType::Ps => "ps",
            NodeType::Chief => "chief",
            NodeType::Evaluator => "evaluator",
        }
    }

    /// The type a reporter's role names; `None` for roles that are not one
    /// (then the node keeps what it had, or is a worker).
    pub fn from_role(role: &str) -> Option<NodeType> {
        match role.trim().to_ascii_lowercase().as_str() {
            "worker" | "trainer" | "rank" => Some(NodeType::Worker),
            "ps" | "parameter_server" | "parameter-server" | "server" => Some(NodeType::Ps),
            "chief" | "master" => Some(NodeType::Chief),
            "evaluator" => Some(NodeType::Evaluator),
            _ => None,
        }
    }

    /// Workers and the chief train: DLRover counts both as workers in its
    /// resource rules.
    pub fn trains(self) -> bool {
        matches!(self, NodeType::Worker | NodeType::Chief)
    }
}

/// CPU cores and memory in MiB.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Resource {
    pub cpu: f64,
    pub memory_mib: f64,
}

impl Resource {
    pub fn new(cpu: f64, memory_mib: f64) -> Resource {
        Resource { cpu, memory_mib }
    }
}

/// A group of identical nodes in a plan.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct GroupResource {
    pub count: u32,
    pub cpu: f64,
    pub memory_mib: f64,
}

impl GroupResource {
    pub fn new(count: u32, cpu: f64, memory_mib: f64) -> GroupResource {
        GroupResource { count, cpu, memory_mib }
    }
}

/// A resource plan: new group sizes/resources by node type, and new
/// resources for individual nodes (a hot PS migrated to more CPU, an OOM
/// node relaunched with more memory). A 0 in a node resource means
/// "unchanged".
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Plan {
    #[serde(default)]
    pub groups: BTreeMap<NodeType, GroupResource>,
    #[serde(default)]
    pub nodes: BTreeMap<String, Resource>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty() && self.nodes.is_empty()
    }

    pub fn group(mut self, t: NodeType, g: GroupResource) -> Plan {
        self.groups.insert(t, g);
        self
    }

    pub fn node(mut self, name: &str, r: Resource) -> Plan {
        self.nodes.insert(name.to_string(), r);
        self
    }
}

/// A rule's answer: a plan (possibly empty) and why, in words.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Outcome {
    pub plan: Plan,
    pub reason: String,
}

impl Outcome {
    pub fn none(reason: impl Into<String>) -> Outcome {
        Outcome {
            plan: Plan::default(),
            reason: reason.into(),
        }
    }

    pub fn with(plan: Plan, reason: impl Into<String>) -> Outcome {
        Outcome {
            plan,
            reason: reason.into(),
        }
    }
}

/// One node in a runtime-statistics record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeStat {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: NodeType,
    /// Cores in use and memory used (MiB), averaged over the record's interval.
    pub used: Resource,
    /// What the node was given (requested / its machine's capacity).
    pub config: Resource,
}

/// One runtime-statistics record (DLRover's RuntimeMetric / JobRuntimeInfo):
/// what every running node used, the global step and the training speed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuntimeStat {
    pub time_ns: u64,
    pub global_step: u64,
    /// Global steps per second, smoothed over the speed window.
    pub speed: f64,
    /// Training nodes (workers and chief) running when it was taken.
    pub worker_num: u32,
    pub nodes: Vec<NodeStat>,
}

impl RuntimeStat {
    pub fn of(&self, t: NodeType) -> impl Iterator<Item = &NodeStat> {
        self.nodes.iter().filter(move |n| n.kind == t)
    }

    /// Workers and chief (DLRover's `[CHIEF, WORKER]`).
    pub fn trainers(&self) -> impl Iterator<Item = &NodeStat> {
        self.nodes.iter().filter(|n| n.kind.trains())
    }

    pub fn ps_names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.of(NodeType::Ps).map(|n| n.name.as_str()).collect();
        v.sort_unstable();
        v
    }
}

/// Mean of a slice; 0 when empty.
pub fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

/// Median (the mean of the middle two for an even count); `None` when empty.
pub fn median(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Python's `round(x, 1)` for the values these rules produce.
pub fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_map_to_types() {
        for (role, want) in [
            ("worker", Some(NodeType::Worker)),
            ("PS", Some(NodeType::Ps)),
            ("chief", Some(NodeType::Chief)),
            ("evaluator", Some(NodeType::Evaluator)),
            ("", None),
            ("controller", None),
        ] {
            assert_eq!(NodeType::from_role(role), want, "{role}");
        }
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[1.0, 9.0, 3.0]), Some(3.0));
        assert_eq!(
            median(&[1.0, 2.0, 4.0, 10.0]),
            Some(3.0),
            "even count: mean of the middle two"
        );
    }
}
