//! `[cluster]`: which role this sonde plays in a job that spans machines.

use serde::{Deserialize, Serialize};

/// The three roles one binary can take.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// One machine on its own: samples, runs plugins, exports where
    /// `export.endpoint` says. Nothing of the cluster machinery runs.
    #[default]
    Standalone,
    /// A node of a larger job: everything a standalone sonde does, and it also
    /// sends what its jobs report, plus a heartbeat, to its master.
    Agent,
    /// The central part: takes agents' exports and forwarded reports, keeps
    /// per-node health and per-job views, and runs the plugins over the whole job.
    Master,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Standalone => "standalone",
            Role::Agent => "agent",
            Role::Master => "master",
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// `standalone` (default), `agent` or `master` (flag `--role`).
    pub role: Role,
    /// For an agent: the master's OTLP/gRPC address, e.g. `http://10.0.0.5:4317`,
    /// or `https://…` for a master with `ingest.tls` (checked with `export.tls`)
    /// (flag `--master`). It becomes `export.endpoint` unless that is set too.
    pub master: Option<String>,
    /// For a master: a node that has not been heard from for this long is
    /// `lost`. Default: 3 missed export intervals (`3 × export.interval_ms`).
    pub node_timeout_ms: Option<u64>,
    /// For an agent: how often it tells its master it is alive, with its
    /// version, plugins and clock. Default: `export.interval_ms`.
    pub heartbeat_ms: Option<u64>,
    /// For a master: an agent whose clock differs from the master's by more
    /// than this is flagged (its points keep their own timestamps).
    pub max_clock_skew_ms: u64,
    /// For a master: nodes kept at most; a new node past it is refused,
    /// counted and shown, never held without bound.
    pub max_nodes: usize,
    /// Jobs kept at most (the oldest idle job goes first, counted).
    pub max_jobs: usize,
    /// Batches kept per rank for a job's step view (the oldest go first). The
    /// default holds an hour of 100 ms steps; a step of 3 phases costs about
    /// 200 bytes, so 8 ranks at the default take about 60 MB.
    pub max_steps_per_rank: usize,
    /// A shared secret between a master and its agents. An agent sends it
    /// as `Authorization: Bearer <token>` with every export and heartbeat; a
    /// master's OTLP receivers then refuse (and count, `unauthorized` in
    /// `GET /api/ingest`) any request without it or `api.token`. The other
    /// way to admit agents is mutual TLS (`ingest.tls.client_ca`).
    pub token: Option<String>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            role: Role::Standalone,
            master: None,
            node_timeout_ms: None,
            heartbeat_ms: None,
            max_clock_skew_ms: 2_000,
            max_nodes: 4_096,
            max_jobs: 256,
            max_steps_per_rank: 36_000,
            token: None,
        }
    }
}

impl ClusterConfig {
    /// The lost-node timeout for an export interval.
    pub fn node_timeout(&self, export_interval_ms: u64) -> u64 {
        self.node_timeout_ms.unwrap_or(3 * export_interval_ms.max(100))
    }

    /// The agent heartbeat period for an export interval.
    pub fn heartbeat(&self, export_interval_ms: u64) -> u64 {
        self.heartbeat_ms.unwrap_or(export_interval_ms).max(100)
    }

    /// Problems, as (key, reason).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        if self.role == Role::Agent && self.master.as_deref().is_none_or(|m| m.trim().is_empty()) {
            p.push((
                "cluster.master",
                "an agent needs its master's address (--master http://HOST:4317)".to_string(),
            ));
        }
        if self.role != Role::Agent && self.master.is_some() {
            p.push((
                "cluster.master",
                format!(
                    "only an agent has a master; this sonde's role is {}",
                    self.role.as_str()
                ),
            ));
        }
        if self.node_timeout_ms.is_some_and(|t| t < 200) {
            p.push(("cluster.node_timeout_ms", "must be at least 200".to_string()));
        }
        if self
            .token
            .as_deref()
            .is_some_and(|t| t.trim().is_empty() || t.trim() != t)
        {
            p.push((
                "cluster.token",
                "must not be empty or start or end with spaces".to_string(),
            ));
        }
        if self.max_nodes == 0 {
            p.push(("cluster.max_nodes", "must be at least 1".to_string()));
        }
        if self.max_jobs == 0 {
            p.push(("cluster.max_jobs", "must be at least 1".to_string()));
        }
        if self.max_steps_per_rank == 0 {
            p.push(("cluster.max_steps_per_rank", "must be at least 1".to_string()));
        }
        p
    }
}
