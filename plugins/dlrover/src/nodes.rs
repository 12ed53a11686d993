//! The job's nodes as the plugin knows them: one per node name (a pod or a
//! machine: DLRover's node), its type, status, what it was given and what it
//! uses, its heartbeats and its recent step times.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use sonde_plugin_sdk::types::Origin;

use crate::failures::ExitReason;
use crate::model::{NodeType, Resource};
use crate::stats::Usage;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Seen only through samples or settings; no process reported yet.
    Unknown,
    Pending,
    Running,
    Succeeded,
    Failed,
    Deleted,
}

impl Status {
    pub fn ended(self) -> bool {
        matches!(self, Status::Succeeded | Status::Failed | Status::Deleted)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Node {
    pub name: String,
    /// `None` until a reporter, the settings or a shard fetch says.
    #[serde(rename = "type")]
    pub kind: Option<NodeType>,
    pub index: i32,
    pub status: Status,
    /// What it was given (node-event attributes `cpu`, `memory_mib`, or the settings); 0 = unknown.
    pub config: Resource,
    /// Its machine (logical CPUs, total memory) from samples.
    pub capacity: Resource,
    pub gpu: bool,
    pub exit_reason: Option<ExitReason>,
    pub exit_code: Option<i32>,
    pub relaunch_count: u32,
    /// Last heartbeat (host clock of arrival or the reporter's time); 0 = never.
    pub last_heartbeat_ns: u64,
    pub started_ns: u64,
    pub pending_since_ns: Option<u64>,
    pub low_cpu_since_ns: Option<u64>,
    pub hung: bool,
    /// Since when a GPU of the node has read busy with idle SMs (the GPU-hang pattern).
    #[serde(default)]
    pub gpu_idle_busy_since_ns: Option<u64>,
    #[serde(default)]
    pub gpu_hang: bool,
    /// Where its resource samples come from: "host" (this sonde) or "gateway".
    pub source: String,
    #[serde(skip)]
    pub usage: Usage,
    #[serde(skip)]
    pub step_times: VecDeque<f64>,
    #[serde(skip)]
    pub last_step_ns: u64,
}

impl Node {
    pub fn new(name: &str) -> Node {
        Node {
            name: name.to_string(),
            kind: None,
            index: -1,
            status: Status::Unknown,
            config: Resource::default(),
            capacity: Resource::default(),
            gpu: false,
            exit_reason: None,
            exit_code: None,
            relaunch_count: 0,
            last_heartbeat_ns: 0,
            started_ns: 0,
            pending_since_ns: None,
            low_cpu_since_ns: None,
            hung: false,
            gpu_idle_busy_since_ns: None,
            gpu_hang: false,
            source: String::new(),
            usage: Usage::default(),
            step_times: VecDeque::new(),
            last_step_ns: 0,
        }
    }

    /// What it was given, or its machine where that is unknown.
    pub fn effective_config(&self) -> Resource {
        Resource::new(
            if self.config.cpu > 0.0 {
                self.config.cpu
            } else {
                self.capacity.cpu
            },
            if self.config.memory_mib > 0.0 {
                self.config.memory_mib
            } else {
                self.capacity.memory_mib
            },
        )
    }

    pub fn running(&self) -> bool {
        self.status == Status::Running
    }

    pub fn trains(&self) -> bool {
        self.kind.is_some_and(NodeType::trains)
    }
}

/// The node name of a reporter: its node (host / pod name), else role-index.
pub fn origin_node(o: &Origin) -> String {
    if !o.node.trim().is_empty() {
        o.node.clone()
    } else if !o.role.is_empty() && o.index >= 0 {
        format!("{}-{}", o.role, o.index)
    } else if !o.role.is_empty() {
        o.role.clone()
    } else {
        "unknown".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(node: &str, role: &str, index: i32) -> Origin {
        Origin {
            job: String::new(),
            node: node.into(),
            role: role.into(),
            index,
            rank: -1,
            local_rank: -1,
            attributes: vec![],
        }
    }

    #[test]
    fn names_of_origins() {
        assert_eq!(origin_node(&origin("host-a", "worker", 1)), "host-a");
        assert_eq!(origin_node(&origin("", "worker", 1)), "worker-1");
        assert_eq!(origin_node(&origin("", "ps", -1)), "ps");
        assert_eq!(origin_node(&origin("", "", -1)), "unknown");
    }

    #[test]
    fn config_falls_back_to_the_machine() {
        let mut n = Node::new("a");
        n.capacity = Resource::new(8.0, 16384.0);
        n.config.cpu = 4.0;
        assert_eq!(n.effective_config(), Resource::new(4.0, 16384.0));
    }
}
