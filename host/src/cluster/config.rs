//! `[cluster]`: which role this sonde plays in a job that spans machines.

use serde::{Deserialize, Serialize};

use std::path::PathBuf;

use crate::config::check::{Check, ConfigError};

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
    /// Range: at least 200.
    pub node_timeout_ms: Option<u64>,
    /// For an agent: how often it tells its master it is alive, with its
    /// version, plugins and clock (less than 100 counts as 100). Default:
    /// `export.interval_ms`.
    pub heartbeat_ms: Option<u64>,
    /// For a master: an agent whose clock differs from the master's by more
    /// than this is flagged (its points keep their own timestamps).
    pub max_clock_skew_ms: u64,
    /// For a master: nodes kept at most; a new node past it is refused,
    /// counted and shown, never held without bound.
    /// Range: at least 1.
    pub max_nodes: usize,
    /// Jobs kept at most (the oldest idle job goes first, counted).
    /// Range: at least 1.
    pub max_jobs: usize,
    /// Batches kept per rank for a job's step view (the oldest go first). The
    /// default holds an hour of 100 ms steps; a step of 3 phases costs about
    /// 200 bytes, so 8 ranks at the default take about 60 MB.
    /// Range: at least 1.
    pub max_steps_per_rank: usize,
    /// A shared secret between a master and its agents. An agent sends it
    /// as `Authorization: Bearer <token>` with every export and heartbeat; a
    /// master's OTLP receivers then refuse (and count, `unauthorized` in
    /// `GET /api/ingest`) any request without it or `api.token`. The other
    /// way to admit agents is mutual TLS (`ingest.tls.client_ca`). Not
    /// empty, and without spaces at either end.
    pub token: Option<String>,
    /// A file that holds the token instead (its content, surrounding
    /// whitespace trimmed), e.g. a Kubernetes Secret mounted as a volume.
    /// Not with `token`. Read at start only (an agent's senders and a
    /// master's receivers take it then): a rotated cluster token needs a
    /// restart of each sonde. An absolute path.
    pub token_file: Option<PathBuf>,
    /// What `token_file` held at start (not a setting).
    #[serde(skip)]
    pub token_from_file: Option<String>,
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
            token_file: None,
            token_from_file: None,
        }
    }
}

impl ClusterConfig {
    /// The shared secret: `token_file`'s content as read at start, or `token`.
    pub fn token(&self) -> Option<&str> {
        self.token_from_file.as_deref().or(self.token.as_deref())
    }

    /// Reads `token_file` (see the key): called once the settings are put
    /// together, before [`validate`](Self::validate).
    pub fn load_token_file(&mut self) -> Result<(), ConfigError> {
        self.token_from_file = None;
        let Some(path) = &self.token_file else { return Ok(()) };
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new("cluster.token_file", format!("cannot read {}: {e}", path.display())))?;
        let token = text.trim();
        if token.is_empty() {
            return Err(ConfigError::new(
                "cluster.token_file",
                format!("{} is empty", path.display()),
            ));
        }
        self.token_from_file = Some(token.to_string());
        Ok(())
    }

    /// The lost-node timeout for an export interval.
    pub fn node_timeout(&self, export_interval_ms: u64) -> u64 {
        self.node_timeout_ms.unwrap_or(3 * export_interval_ms.max(100))
    }

    /// The agent heartbeat period for an export interval.
    pub fn heartbeat(&self, export_interval_ms: u64) -> u64 {
        self.heartbeat_ms.unwrap_or(export_interval_ms).max(100)
    }

    /// Checks what types alone cannot.
    pub fn validate(&self, c: &mut Check) {
        if self.role == Role::Agent && self.master.as_deref().is_none_or(|m| m.trim().is_empty()) {
            c.bad(
                "master",
                "an agent needs its master's address (--master http://HOST:4317)",
            );
        }
        if self.role != Role::Agent && self.master.is_some() {
            c.bad(
                "master",
                format!(
                    "only an agent has a master; this sonde's role is {}",
                    self.role.as_str()
                ),
            );
        }
        if let Some(t) = self.node_timeout_ms {
            c.at_least("node_timeout_ms", t, 200);
        }
        if self
            .token
            .as_deref()
            .is_some_and(|t| t.trim().is_empty() || t.trim() != t)
        {
            c.bad("token", "must not be empty or start or end with spaces");
        }
        if self.token.is_some() && self.token_file.is_some() {
            c.bad("token_file", "set token or token_file, not both");
        }
        if let Some(p) = &self.token_file
            && !p.is_absolute()
        {
            c.bad("token_file", format!("{} is not an absolute path", p.display()));
        }
        c.at_least("max_nodes", self.max_nodes, 1);
        c.at_least("max_jobs", self.max_jobs, 1);
        c.at_least("max_steps_per_rank", self.max_steps_per_rank, 1);
    }
}
